"""Money: the one place where amounts are parsed and converted.

Amounts are `Decimal` in currency units (euros, dollars) at the edges of the API and
integer atomic units on chains. EURQ and USDQ have 6 decimals on every network, so
`1 atomic unit = 0.000001`: 0.10 EUR = 100000, 0.50 EUR = 500000, 1.00 EUR =
1000000.

A token declared with more decimals (`Asset(..., decimals=18)`) has prices finer than
that unit: caps compare them exactly, and budgets count them rounded up to the next
0.000001 (`to_atomic_ceiling`), so a budget never undercounts.

Parsing is strict on purpose: a wire amount is a plain decimal string (`"0.10"`) or a
plain integer string for atomic units (`"100000"`). Signs, exponents, NaN, infinities,
whitespace, more than 6 decimals and absurdly large values are refused, because the
client must never pay for an amount it could not read exactly.
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Decimal, Inexact, InvalidOperation, localcontext

__all__ = [
    "ATOMIC_DECIMALS",
    "MAX_ATOMIC",
    "AmountError",
    "format_amount",
    "format_money",
    "from_atomic",
    "money_of",
    "parse_amount",
    "parse_atomic",
    "to_atomic",
    "to_atomic_ceiling",
    "trim_amount",
]

ATOMIC_DECIMALS = 6
_SCALE = Decimal(10) ** ATOMIC_DECIMALS
# 10^21 atomic units (10^15 euros) is far beyond any real price; anything larger is
# treated as a lie, not a price.
MAX_ATOMIC = 10**21
_MAX_INTEGER_DIGITS = 15

# ASCII digits only: `\d` would also admit digits of other scripts.
_DECIMAL_RE = re.compile(
    rf"\A([0-9]{{1,{_MAX_INTEGER_DIGITS}}})(?:\.([0-9]{{1,{ATOMIC_DECIMALS}}}))?\Z"
)
_ATOMIC_RE = re.compile(r"\A[0-9]{1,22}\Z")


class AmountError(ValueError):
    """An amount that is not a valid price (raised by the parsers; callers wrap it)."""


def parse_amount(text: object, *, allow_zero: bool = False) -> Decimal:
    """Parse a decimal currency amount such as `"0.10"` exactly.

    Accepts a `str` (the wire form) or a `Decimal`/`int` already in hand; refuses floats,
    since a float has already lost the exact value.
    """
    if isinstance(text, float):
        raise AmountError(
            'amount must be a decimal string (or Decimal), e.g. "0.50", not a float: '
            "a float cannot hold money exactly"
        )
    if isinstance(text, bool):
        raise AmountError(f"amount must be a decimal string, not {type(text).__name__}")
    if isinstance(text, int):
        text = str(text)
    elif isinstance(text, Decimal):
        if not text.is_finite():
            raise AmountError("amount must be finite")
        text = format(text, "f")
    if not isinstance(text, str):
        raise AmountError(f"amount must be a decimal string, not {type(text).__name__}")
    if not _DECIMAL_RE.match(text):
        if text.startswith("-") and _DECIMAL_RE.match(text[1:]):
            positive = "positive (or zero)" if allow_zero else "positive"
            raise AmountError(f"amount {text[:40]!r} is negative: it must be {positive}")
        raise AmountError(
            f"amount {text[:40]!r} is not a plain decimal with at most {ATOMIC_DECIMALS} decimals"
        )
    value = Decimal(text)
    if value == 0 and not allow_zero:
        raise AmountError("amount must be greater than zero")
    return value


def parse_atomic(text: object) -> int:
    """Parse an atomic amount such as `"100000"`: a plain positive integer string."""
    if isinstance(text, bool) or not isinstance(text, str):
        raise AmountError(f"atomic amount must be an integer string, not {type(text).__name__}")
    if not _ATOMIC_RE.match(text):
        raise AmountError(f"atomic amount {text[:40]!r} is not a plain integer string")
    value = int(text)
    if value <= 0:
        raise AmountError("atomic amount must be greater than zero")
    if value > MAX_ATOMIC:
        raise AmountError("atomic amount is implausibly large")
    return value


def to_atomic(amount: Decimal) -> int:
    """`Decimal("0.10")` -> `100000`. Refuses amounts with more than 6 decimals."""
    if not amount.is_finite():
        raise AmountError("amount must be finite")
    with localcontext() as ctx:
        ctx.prec = 50
        scaled = amount * _SCALE
        if scaled != scaled.to_integral_value():
            raise AmountError(f"amount {amount} has more than {ATOMIC_DECIMALS} decimals")
        return int(scaled)


def to_atomic_ceiling(amount: Decimal) -> int:
    """`amount` in atomic units (10^-6), rounded up: what a budget counts for a price that
    may be finer than its unit (a token with 18 decimals). Never less than the price:
    `Decimal("0.000000000000000001")` -> `1`, `Decimal("0.10")` -> `100000`."""
    if not amount.is_finite():
        raise AmountError("amount must be finite")
    if amount < 0:
        raise AmountError("amount must not be negative")
    with localcontext() as ctx:
        # Exact or an error: a token's amount has at most 36 decimals and 78 digits.
        ctx.prec = 160
        ctx.traps[Inexact] = True
        try:
            return int((amount * _SCALE).to_integral_value(rounding=ROUND_CEILING))
        except (Inexact, InvalidOperation) as exc:
            raise AmountError(f"amount {str(amount)[:60]} cannot be counted exactly") from exc


def from_atomic(atomic: int) -> Decimal:
    """`100000` -> `Decimal("0.100000")`: exact, with 6 decimal places."""
    if isinstance(atomic, bool) or not isinstance(atomic, int):
        raise AmountError("atomic amount must be an int")
    with localcontext() as ctx:
        ctx.prec = 50
        try:
            return (Decimal(atomic) / _SCALE).quantize(Decimal(1).scaleb(-ATOMIC_DECIMALS))
        except InvalidOperation as exc:  # pragma: no cover - prec 50 covers MAX_ATOMIC
            raise AmountError("atomic amount out of range") from exc


def format_amount(amount: Decimal) -> str:
    """A human form: at least 2 decimals, no trailing zeros beyond them (`0.1` -> `0.10`)."""
    normalized = amount.normalize()
    exponent = normalized.as_tuple().exponent
    places = max(2, -exponent if isinstance(exponent, int) else 2)
    return f"{amount:.{places}f}"


def trim_amount(amount: Decimal) -> Decimal:
    """The same amount written as `format_amount` writes it: `0.100000` -> `0.10`."""
    return Decimal(format_amount(amount))


def format_money(
    amount: Decimal, currency_or_symbol: str | None = None, symbol: str | None = None
) -> str:
    """Money as the library shows it everywhere: trailing zeros trimmed to at least 2
    decimals, then the currency (or the asset's symbol), then the asset's symbol when it
    names a token of another name.

    `format_money(Decimal("0.300000"), "EUR", "EURQ")` -> `"0.30 EUR (EURQ)"`;
    `format_money(Decimal("0.1"), "EUR")` -> `"0.10 EUR"`.
    """
    text = format_amount(amount)
    if currency_or_symbol:
        text += f" {currency_or_symbol}"
    token = symbol or ""
    named = token.isalnum() and len(token) <= 12 and not token.isdigit()
    if named and token != currency_or_symbol and not token.lower().startswith("0x"):
        text += f" ({token})"
    return text


def money_of(amount: Decimal, currency: str, asset_symbol: str | None = None) -> str:
    """A payment's money: in its currency, with the asset's symbol when it names a token
    of another name (`0.10 EUR (EURQ)`); an address or a number is no symbol."""
    return format_money(amount, currency, asset_symbol)
