"""A facilitator's discovery catalogue, read: the x402 Bazaar extension's
`GET /discovery/resources` and `GET /discovery/search` answers.

Pure: bytes in, listings out. What a facilitator lists is a claim (a price may be stale, a
row forged): the payment flow never pays from a listing, it pays what the resource's own
402 asks when it is fetched. So the reading is lenient where the extension is silent and
strict where a value would mislead:

- the rows are under `items` (list) or `resources` (search); `lastUpdated` is a Unix time
  (the core spec) or an ISO 8601 string (the SDKs; without an offset it is read as UTC);
  `pagination` may be absent or null; `description`, `mimeType` and a v1 row's `resource`
  may sit on the row or in its first `accepts` entry; `metadata` and unknown keys are
  ignored;
- a row that cannot be read (not an object, no http(s) `resource`, no `accepts` or more
  than `MAX_OPTIONS`, an amount that is not a decimal string, a version other than 1 or
  2) is skipped with its
  reason, never failing the page; text a row carries (description, service name, tags)
  loses its control characters and is cut to a bounded length, as it ends up on
  terminals and in agents' prompts.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

from . import exact_json as _json
from .dialects import Challenge, Dialect

__all__ = [
    "HTTP_METHODS",
    "MAX_LIMIT",
    "MAX_OPTIONS",
    "CataloguePage",
    "InvalidCatalogue",
    "Listing",
    "SkippedListing",
    "challenge_of_listing",
    "parse_page",
]

#: The most rows one page asks for (the core spec's bound of `limit`).
MAX_LIMIT = 100
#: The methods a bazaar `info.input` may name.
HTTP_METHODS = frozenset({"GET", "HEAD", "DELETE", "POST", "PUT", "PATCH"})

_MAX_URL = 2048
_MAX_DESCRIPTION = 500
_MAX_SHORT = 64
_MAX_TAGS = 5
#: The most price options a row may carry (a 402 offers a handful).
MAX_OPTIONS = 32
#: Terminal escape sequences (colours, cursor moves, titles), dropped whole.
_ESCAPES = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)?)")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069]+")
_ATOMIC = re.compile(r"[0-9]{1,78}")
_DECIMAL = re.compile(r"[0-9]{1,30}(\.[0-9]{1,30})?")


class InvalidCatalogue(ValueError):
    """The answer is not a discovery page at all (not JSON, not an object, no rows)."""


@dataclasses.dataclass(frozen=True)
class Listing:
    """One row of a catalogue, as the facilitator claims it. `accepts` are the price
    options as written (raw objects); `method` and `tool_name` come from the row's
    `extensions.bazaar.info.input`, when it says."""

    index: int
    resource: str
    type: str
    x402_version: int
    accepts: tuple[Mapping[str, Any], ...]
    last_updated: datetime | None = None
    description: str | None = None
    mime_type: str | None = None
    service_name: str | None = None
    tags: tuple[str, ...] = ()
    method: str | None = None
    tool_name: str | None = None
    extensions: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class SkippedListing:
    """A row that could not be read: its position on the page and why."""

    index: int
    reason: str


@dataclasses.dataclass(frozen=True)
class CataloguePage:
    """One page: the rows read, the rows skipped, and where the next page starts
    (`next_offset` for a list, `next_cursor` for a search; None: no next page known)."""

    listings: list[Listing]
    skipped: list[SkippedListing]
    total: int | None = None
    next_offset: int | None = None
    next_cursor: str | None = None
    partial: bool = False


def parse_page(body: bytes, *, limit: int, offset: int = 0) -> CataloguePage:
    """A discovery answer's page; at most `limit` rows are kept (a server may ignore it).
    Raises `InvalidCatalogue` when the answer is no page."""
    try:
        data = _json.loads(body)
    except _json.JSONError as exc:
        raise InvalidCatalogue(f"the answer is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidCatalogue("the answer is not a JSON object")
    rows = data.get("items")
    if not isinstance(rows, list):
        rows = data.get("resources")
    if not isinstance(rows, list):
        raise InvalidCatalogue("the answer lists no rows (no `items` or `resources` list)")
    listings: list[Listing] = []
    skipped: list[SkippedListing] = []
    for index, row in enumerate(rows[:limit], start=1):
        try:
            listings.append(_listing(index, row))
        except _Unreadable as exc:
            skipped.append(SkippedListing(index, str(exc)))
    pagination = data.get("pagination")
    pagination = pagination if isinstance(pagination, dict) else {}
    total = _count(pagination.get("total"))
    returned = min(len(rows), limit)
    next_offset = None
    if returned and (offset + returned < total if total is not None else returned >= limit):
        next_offset = offset + returned
    cursor = pagination.get("cursor")
    return CataloguePage(
        listings,
        skipped,
        total=total,
        next_offset=next_offset if "cursor" not in pagination else None,
        next_cursor=cursor if isinstance(cursor, str) and cursor and returned else None,
        partial=data.get("partialResults") is True or len(rows) > limit,
    )


def challenge_of_listing(listing: Listing) -> Challenge:
    """The 402 a listing claims the resource answers, as the client reads 402s: a v1 row
    as the standard v1, a v2 row as the standard v2, unless its options are the euro
    gates' (`scheme` `euro`, which the euro gates' v2 body carries)."""
    accepts = list(listing.accepts)
    if listing.x402_version == 1:
        dialect = Dialect.STANDARD_V1
    elif any(entry.get("scheme") == "euro" for entry in accepts):
        dialect = Dialect.EURO
    else:
        dialect = Dialect.STANDARD_V2
    return Challenge(dialect, accepts, None, {"url": listing.resource}, None)


class _Unreadable(ValueError):
    """Why one row is skipped."""


def _listing(index: int, row: Any) -> Listing:
    if not isinstance(row, dict):
        raise _Unreadable("not an object")
    accepts = _accepts(row.get("accepts"))
    first = accepts[0]
    resource = _url(row.get("resource", first.get("resource")))
    kind = row.get("type", "http")
    if not isinstance(kind, str) or not kind.strip():
        raise _Unreadable("type is not a string")
    version = _version(row.get("x402Version"), accepts)
    extensions = row.get("extensions")
    extensions = extensions if isinstance(extensions, dict) else {}
    method, tool = _declared(extensions)
    return Listing(
        index=index,
        resource=resource,
        type=_text(kind, _MAX_SHORT) or "http",
        x402_version=version,
        accepts=tuple(accepts),
        last_updated=_when(row.get("lastUpdated")),
        description=_text(row.get("description", first.get("description")), _MAX_DESCRIPTION),
        mime_type=_text(row.get("mimeType", first.get("mimeType")), _MAX_SHORT),
        service_name=_text(row.get("serviceName"), _MAX_SHORT),
        tags=_tags(row.get("tags")),
        method=method,
        tool_name=tool,
        extensions=extensions,
    )


def _accepts(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise _Unreadable("accepts is not a non-empty list of price options")
    if len(value) > MAX_OPTIONS:
        raise _Unreadable(f"accepts has more than {MAX_OPTIONS} price options")
    for position, entry in enumerate(value):
        if not isinstance(entry, dict):
            raise _Unreadable(f"accepts[{position}] is not an object")
        for key in ("amount", "maxAmountRequired"):
            if key in entry:
                _amount(entry, key, position)
    return value


def _amount(entry: Mapping[str, Any], key: str, position: int) -> None:
    amount = entry[key]
    pattern = _DECIMAL if entry.get("scheme") == "euro" else _ATOMIC
    if not isinstance(amount, str) or not pattern.fullmatch(amount):
        what = "a decimal string" if pattern is _DECIMAL else "a string of atomic units"
        raise _Unreadable(f"accepts[{position}].{key} is not {what}")


def _url(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise _Unreadable("resource is not a URL")
    if len(value) > _MAX_URL or _CONTROL.search(value) or " " in value:
        raise _Unreadable("resource is not a URL (too long, or spaces or control characters)")
    if not re.match(r"(?i)https?://[^/?#\s]+", value):
        raise _Unreadable("resource is not an http(s) URL")
    return value


def _version(value: Any, accepts: Sequence[Mapping[str, Any]]) -> int:
    if value is None:
        # silent on it: the options say (v1 writes `maxAmountRequired`, v2 `amount`)
        return 1 if all("maxAmountRequired" in entry for entry in accepts) else 2
    if isinstance(value, bool) or value not in (1, 2):
        raise _Unreadable("x402Version is not 1 or 2")
    return int(value)


def _declared(extensions: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """The method (HTTP) or tool name (MCP) the row's bazaar declaration names."""
    bazaar = extensions.get("bazaar")
    info = bazaar.get("info") if isinstance(bazaar, dict) else None
    given = info.get("input") if isinstance(info, dict) else None
    if not isinstance(given, dict):
        return None, None
    method = given.get("method")
    method = method.upper() if isinstance(method, str) else None
    tool = _text(given.get("toolName"), _MAX_SHORT) if given.get("type") == "mcp" else None
    return (method if method in HTTP_METHODS else None), tool


def _text(value: Any, limit: int) -> str | None:
    if not isinstance(value, str):
        return None
    clean = " ".join(_CONTROL.sub(" ", _ESCAPES.sub("", value)).split())
    if len(clean) > limit:
        clean = clean[: limit - 1].rstrip() + "…"
    return clean or None


def _tags(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        return ()
    tags: list[str] = []
    for tag in value:
        text = _text(tag, 32)
        if text and text.lower() not in (t.lower() for t in tags):
            tags.append(text)
    return tuple(tags[:_MAX_TAGS])


def _when(value: Any) -> datetime | None:
    """`lastUpdated`: seconds since the epoch, or ISO 8601 (UTC when no offset)."""
    try:
        if isinstance(value, (int, float, Decimal)) and not isinstance(value, bool):
            return datetime.fromtimestamp(float(value), tz=timezone.utc)
        if isinstance(value, str) and len(value) <= 64:
            parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)
    except (ValueError, OverflowError, OSError):
        pass
    return None


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
