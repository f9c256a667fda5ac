"""How the library's objects show in a notebook: small HTML tables (`_repr_html_`).

Pure: every value is escaped; callers pass text that is already safe to show (URLs
redacted, no proofs, no secrets).
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence

__all__ = ["fields_table", "rows_table"]

_STYLE = "text-align:left;vertical-align:top"


def _cell(tag: str, value: object) -> str:
    text = "" if value is None else str(value)
    return f'<{tag} style="{_STYLE}">{html.escape(text)}</{tag}>'


def fields_table(title: str, fields: Iterable[tuple[str, object]]) -> str:
    """A two-column table, one row per (label, value); rows whose value is None are left
    out."""
    rows = "".join(
        f"<tr>{_cell('th', label)}{_cell('td', value)}</tr>"
        for label, value in fields
        if value is not None
    )
    return f"<table><caption>{html.escape(title)}</caption><tbody>{rows}</tbody></table>"


def rows_table(title: str, rows: Sequence[Mapping[str, object]]) -> str:
    """A table with a header row from the first row's keys."""
    if not rows:
        return f"<table><caption>{html.escape(title)}</caption></table>"
    head = "".join(_cell("th", key) for key in rows[0])
    body = "".join(
        "<tr>" + "".join(_cell("td", value) for value in row.values()) + "</tr>" for row in rows
    )
    return (
        f"<table><caption>{html.escape(title)}</caption><thead><tr>{head}</tr></thead>"
        f"<tbody>{body}</tbody></table>"
    )
