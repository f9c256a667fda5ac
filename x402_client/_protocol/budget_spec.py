"""Budgets written the short way: `5.00/24h`, `2USD/7d`, `0.25` (a total).

The grammar the command line (`x402-eur fetch --budget`) and the MCP server
(`x402-eur mcp --budget`, `X402_EUR_BUDGET`) share:

    AMOUNT[CURRENCY][/[COUNT]UNIT]

`AMOUNT` is a decimal in the budget's currency (at most 6 decimals); `CURRENCY` is `EUR`
or `USD` (default: the `currency` argument); `UNIT` is `s`, `m`, `h` or `d`, optionally
preceded by a count (`/24h`, `/7d`, `/h` = one hour). Without a window the budget is a
total. Spaces around the parts are allowed (`2 eur / 30m`).

Budgets name their currency: once one is set, a payment in a currency that no budget
covers is refused (`5.00/24h` alone limits euros and stops dollar payments; add
`2.00USD/24h` to pay dollar offers too).

```python
parse_budget("5.00/24h")            # Budget("5.00", "EUR", window=86400.0, name="5.00 EUR/24h")
parse_budgets(["1/1h, 10USD/7d"])   # two budgets
parse_budget("0.20/1d", name="cli") # a name of your own: the key no longer depends on 0.20
```

A budget's store key is its name, currency and window (`Budget.key`). By default the name
is the budget as written, so `1/1h` and `2/1h` are kept apart. A tool that keeps budgets
across runs (the CLI's state file) passes a fixed `name`, so that raising or lowering the
limit keeps what was already spent in that window.

Pure: no I/O. Mistakes raise `ValueError` with a message meant for a person.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from decimal import Decimal

from .amounts import AmountError, parse_amount
from .budgets import CURRENCIES, Budget, parse_window, window_in_seconds, window_text
from .errors import ConfigurationError

__all__ = [
    "BUDGET_SYNTAX",
    "CURRENCIES",
    "parse_budget",
    "parse_budgets",
    "parse_window",
    "window_text",
]

#: The short form, for help texts and error messages.
BUDGET_SYNTAX = "AMOUNT[CURRENCY][/WINDOW], e.g. 5.00/24h, 2.00USD/24h or 1.00 (a total)"

_BUDGET_RE = re.compile(
    r"\A(?P<amount>[0-9]+(?:\.[0-9]+)?)\s*(?P<currency>[A-Za-z]{3})?"
    r"(?:\s*/\s*(?P<count>[0-9]+(?:\.[0-9]+)?)?\s*(?P<unit>[A-Za-z]+))?\Z"
)


def parse_budget(text: str, currency: str = "EUR", *, name: str | None = None) -> Budget:
    """A `Budget` from `AMOUNT[CURRENCY][/[COUNT]UNIT]`: `5.00/24h`, `2USD/7d`, `0.25`.

    `currency` applies when the text names none. `name` defaults to the budget as written
    (`"5.00 EUR/24h"`). Raises `ValueError`.
    """
    stripped = text.strip()
    match = _BUDGET_RE.match(stripped)
    if match is None:
        raise ValueError(f"{stripped[:40]!r} is not a budget: write {BUDGET_SYNTAX}")
    chosen = (match["currency"] or currency).upper()
    if chosen not in CURRENCIES:
        raise ValueError(f"budget currency {chosen!r}: must be EUR or USD")
    window: float | None = None
    span = ""
    if match["unit"] is not None:
        window = window_in_seconds(match["count"], match["unit"])
        span = f"/{match['count'] or '1'}{match['unit'].lower()}"
    try:
        limit = parse_amount(match["amount"], allow_zero=True)
        return Budget(
            limit,
            currency=chosen,
            window=window,
            name=name if name is not None else f"{match['amount']} {chosen}{span}",
        )
    except (AmountError, ConfigurationError) as exc:
        raise ValueError(f"budget amount: {exc}") from None


def parse_budgets(
    texts: Iterable[str], currency: str = "EUR", *, name: str | None = None
) -> list[Budget]:
    """Every budget in `texts`; each text may hold several, separated by commas.

    A budget given twice counts once. With a fixed `name`, budgets of the same currency
    and window would share one store key: only the strictest of them is kept.
    """
    budgets: dict[tuple[object, ...], Budget] = {}
    for text in texts:
        for part in text.split(","):
            if not part.strip():
                continue
            budget = parse_budget(part, currency, name=name)
            if name is None:
                budgets.setdefault((budget.limit, budget.currency, budget.window), budget)
                continue
            key = (budget.currency, budget.window)
            kept = budgets.get(key)
            if kept is None or Decimal(budget.limit) < Decimal(kept.limit):
                budgets[key] = budget
    return list(budgets.values())
