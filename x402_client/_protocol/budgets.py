"""Cumulative budgets: a total, or a rolling window ("5 EUR per 24 h"), per currency.

A payment reserves its amount in every matching budget *before* any money moves, and
after it either commits the reservation (money moved, or may have) or releases it (no
money moved). Reserving is atomic in the store, so concurrent requests can never
overshoot: 500 concurrent paid requests against a budget of 10 payments pay exactly 10.

This module is the budgets' pure half: what a budget is (`Budget`), what a report says,
and what a store must do (`BudgetStore`). The stores and the runtime that reserves in them
are `_state.budget_stores`'s: `InMemoryBudgetStore` (the default) serves one process;
`RedisBudgetStore` (extra `redis`) lets a fleet of agent processes share one budget,
atomically, through a Lua script; `SqliteStore` (in `_state.sqlite_store`) shares one
through a file on one machine. Amounts are kept as integer atomic units (10^-6); a price
finer than that (a token with 18 decimals) is counted rounded up, so a budget never
undercounts.

Once any budget is set, a payment in a currency that no budget covers is refused: a limit
on euros must not leave dollars unlimited. `Budgets.status()` reports, besides each
budget, every currency the options can pay, with its cap and whether a budget covers it.

How stores keep what they must, and no more:

- a total budget (`window=None`) is one running total per key. Reserving adds to it if the
  sum stays within the limit; the reservation id carries the amount
  (`t:<atomic amount>:<random>`), so releasing subtracts exactly that. Nothing is kept per
  payment, so the store stays the same size however many payments it has seen. Release
  each reservation at most once (`Budgets` does): a total cannot tell a repeat.
- a windowed budget keeps one entry per reservation (`w:<random>`) with its time; entries
  older than the window are dropped, so its size is bounded by the payments of one window.
"""

from __future__ import annotations

import dataclasses
import re
import secrets
from collections.abc import Iterable
from datetime import timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from .amounts import (
    AmountError,
    format_amount,
    format_money,
    parse_amount,
    to_atomic,
)
from .errors import ConfigurationError

if TYPE_CHECKING:
    pass

__all__ = [
    "CURRENCIES",
    "MAX_BUDGET_ATOMIC",
    "Budget",
    "BudgetReport",
    "BudgetStatus",
    "BudgetStore",
    "CurrencyStatus",
    "budget_text",
    "over_budget",
    "parse_window",
    "total_reservation_amount",
    "total_reservation_id",
    "uncovered_currency",
    "window_in_seconds",
    "window_reservation_id",
    "window_text",
]

#: The largest budget limit, in atomic units: a signed 64-bit integer, as Redis and SQLite
#: count (about 9.2 million million EUR).
MAX_BUDGET_ATOMIC = 2**63 - 1
#: The currencies caps and budgets are kept in (EURO, EURQ and EURC count as EUR; USDQ and
#: USDC as USD).
CURRENCIES = ("EUR", "USD")


#: Window units, largest first, in seconds.
_WINDOW_UNITS = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_WINDOW_RE = re.compile(r"\A(?P<count>[0-9]+(?:\.[0-9]+)?)?\s*(?P<unit>[A-Za-z]+)\Z")


def parse_window(text: str) -> float:
    """A window written `[COUNT]UNIT` (`"24h"`, `"30m"`, `"7d"`, `"h"`), in seconds.

    Raises `ValueError`.
    """
    match = _WINDOW_RE.match(text.strip())
    if match is None:
        raise ValueError(
            f"budget window {text[:40]!r}: write a count and a unit (s, m, h or d), "
            'e.g. "24h", "30m" or "7d"'
        )
    return window_in_seconds(match["count"], match["unit"])


def window_in_seconds(count: str | None, unit: str) -> float:
    if unit.lower() not in _UNITS:
        raise ValueError(f"budget window unit {unit!r}: use s, m, h or d")
    amount = Decimal(count or "1")
    if amount <= 0:
        raise ValueError("budget window must be positive")
    return float(amount * _UNITS[unit.lower()])


def window_text(seconds: float | None) -> str | None:
    """A window as people write it, in its largest whole unit: `3600.0` -> `"1h"`,
    `604800.0` -> `"7d"`, but one day is `"24h"`; None (a total) stays None."""
    if seconds is None:
        return None
    for unit, size in _WINDOW_UNITS:
        whole = seconds >= size and seconds % size == 0
        if whole and not (unit == "d" and seconds < 2 * size):
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def uncovered_currency(currency: str) -> str:
    """Why a payment in `currency` is refused when budgets are set and none is in it, and
    how to add one."""
    return (
        f"no budget covers {currency} (once a budget is set, only currencies with a budget "
        f'are paid): add one, e.g. Budget("2.00", currency="{currency}"), or '
        f"--budget 2.00{currency}/24h on the command line"
    )


@dataclasses.dataclass(frozen=True)
class Budget:
    """At most `limit` (in `currency`) spent per `window` (seconds, a `timedelta` or
    `[COUNT]UNIT` with unit s, m, h or d: `"24h"`, `"30m"`, `"7d"`; None for a lifetime
    total). `name` separates budgets that share a store.

    ```python
    Budget("5.00", window="24h")                        # 5 EUR per rolling day
    Budget("5.00", window=timedelta(hours=24))          # the same
    Budget("20", currency="USD", name="agent-7")        # 20 USD in total
    ```
    """

    limit: Decimal | str | int
    currency: str = "EUR"
    window: float | timedelta | str | None = None
    name: str = "default"

    def __post_init__(self) -> None:
        try:
            limit = parse_amount(self.limit, allow_zero=True)
        except AmountError as exc:
            raise ConfigurationError(f"budget limit: {exc}") from None
        if to_atomic(limit) > MAX_BUDGET_ATOMIC:
            raise ConfigurationError(
                "budget limit: above what a budget store can count (9.2 million million)"
            )
        object.__setattr__(self, "limit", limit)
        currency = self.currency.upper() if isinstance(self.currency, str) else self.currency
        if currency not in CURRENCIES:
            raise ConfigurationError("budget currency must be EUR or USD")
        object.__setattr__(self, "currency", currency)
        window = self.window
        if isinstance(window, str):
            try:
                window = parse_window(window)
            except ValueError as exc:
                raise ConfigurationError(str(exc)) from None
        elif isinstance(window, timedelta):
            window = window.total_seconds()
        elif window is not None and (
            isinstance(window, bool) or not isinstance(window, (int, float, Decimal))
        ):
            raise ConfigurationError(
                "budget window must be seconds (window=86400), a timedelta "
                '(window=timedelta(hours=24)) or a string such as "24h", "30m" or "7d"'
            )
        if window is not None and not window > 0:
            raise ConfigurationError("budget window must be positive")
        object.__setattr__(self, "window", float(window) if window is not None else None)

    @property
    def key(self) -> str:
        span = "total" if self.window is None else f"{self.window:g}s"
        return f"{self.name}:{self.currency}:{span}"

    @property
    def window_seconds(self) -> float | None:
        assert not isinstance(self.window, (timedelta, str))
        return self.window

    def __repr__(self) -> str:
        # As it would be written: Budget('5.00', currency='EUR', window='24h', name='default')
        window = window_text(self.window_seconds)
        return (
            f"Budget({format_amount(Decimal(self.limit))!r}, currency={self.currency!r}, "
            f"window={window!r}, name={self.name!r})"
        )

    def describe(self) -> str:
        """`5.00 EUR per 24h`, `20.00 USD in total`."""
        window = window_text(self.window_seconds)
        span = "in total" if window is None else f"per {window}"
        return f"{format_money(Decimal(self.limit), self.currency)} {span}"


def over_budget(budget: Budget, spent: Decimal, amount: Decimal) -> str:
    """Why `amount` does not fit `budget`, of which `spent` is spent in its window, as the
    command line writes budgets: `budget 2.00 USD/24h: 1.95 USD spent, this payment
    0.10 USD` (a budget without a window: `budget 2.00 USD in total: ...`); a budget
    named other than "default" says its name."""
    currency = budget.currency
    named = "" if budget.name == "default" else f" {budget.name!r}"
    return (
        f"budget{named} {budget_text(budget)}: {format_money(spent, currency)} spent, "
        f"this payment {format_money(amount, currency)}"
    )


def budget_text(budget: Budget) -> str:
    """A budget's limit and window as the command line writes them: `2.00 USD/24h`,
    `2.00 USD in total`."""
    window = window_text(budget.window_seconds)
    span = " in total" if window is None else f"/{window}"
    return f"{format_money(Decimal(budget.limit), budget.currency)}{span}"


@dataclasses.dataclass(frozen=True)
class BudgetStatus:
    """Where one budget stands: `spent` (reserved or committed) and `remaining`
    (never negative), both in the budget's currency."""

    budget: Budget
    spent: Decimal
    remaining: Decimal

    def refusal(self, amount: Decimal) -> str:
        """Why a payment of `amount` does not fit, with what the window has spent already:
        `budget 2.00 USD/24h: 1.95 USD spent, this payment 0.10 USD`."""
        return over_budget(self.budget, self.spent, amount)

    def __repr__(self) -> str:
        currency = self.budget.currency
        return (
            f"BudgetStatus({self.budget.name!r}: {self.budget.describe()}, "
            f"spent {format_money(self.spent, currency)}, "
            f"remaining {format_money(self.remaining, currency)})"
        )


@dataclasses.dataclass(frozen=True)
class CurrencyStatus:
    """What one currency the options can pay may still spend.

    `max_amount_per_payment` is its cap (None: no cap, nothing in it is paid); `budgets`
    the budgets in it and `remaining` the least any of them has left (None: no budget in
    it). `payable` says whether the limits let any payment in it through at all; when not,
    `note` says why and how to change that.
    """

    currency: str
    max_amount_per_payment: Decimal | None
    budgets: tuple[BudgetStatus, ...]
    remaining: Decimal | None
    payable: bool
    note: str | None = None

    @property
    def budgeted(self) -> bool:
        """Whether a budget covers this currency."""
        return bool(self.budgets)

    def __repr__(self) -> str:
        cap = self.max_amount_per_payment
        shown = [
            "no cap" if cap is None else f"at most {format_money(cap, self.currency)} a payment",
            f"{len(self.budgets)} budget(s)",
        ]
        if self.remaining is not None:
            shown.append(f"remaining {format_money(self.remaining, self.currency)}")
        shown.append("payable" if self.payable else f"not payable: {self.note}")
        return f"CurrencyStatus({self.currency}: {', '.join(shown)})"


class BudgetReport(list[BudgetStatus]):
    """What `payments(client).budgets()` answers: each budget (`BudgetStatus`, in the
    order given), and in `currencies` every currency the options can pay
    (`CurrencyStatus`: its cap, and whether a budget covers it)."""

    def __init__(
        self, statuses: Iterable[BudgetStatus] = (), currencies: Iterable[CurrencyStatus] = ()
    ) -> None:
        super().__init__(statuses)
        self.currencies: tuple[CurrencyStatus, ...] = tuple(currencies)

    def __repr__(self) -> str:
        return f"BudgetReport({list(self)!r}, currencies={self.currencies!r})"


@runtime_checkable
class BudgetStore(Protocol):
    """Where reservations live. All three calls must be atomic per key."""

    async def reserve(self, key: str, amount: int, limit: int, window: float | None) -> str | None:
        """Reserve `amount` if the sum within `window` stays <= `limit`: an id, or None."""
        ...

    async def release(self, key: str, reservation: str) -> None:
        """Give a reservation back (no money moved)."""
        ...

    async def spent(self, key: str, window: float | None) -> int:
        """The amount reserved or committed within `window`."""
        ...


def total_reservation_id(amount: int) -> str:
    """The id of a reservation in a total budget: it carries what releasing subtracts."""
    return f"t:{amount}:{secrets.token_hex(8)}"


def window_reservation_id() -> str:
    return f"w:{secrets.token_hex(8)}"


def total_reservation_amount(reservation: str) -> int | None:
    """The amount a total-budget reservation id carries; None for any other id."""
    kind, _, rest = reservation.partition(":")
    amount, _, nonce = rest.partition(":")
    if kind != "t" or not nonce or not amount.isascii() or not amount.isdigit():
        return None
    return int(amount)
