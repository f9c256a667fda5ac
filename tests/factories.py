"""Values the tests build often: one place, so that a field added to a public type is
added here once rather than in every module that needs an instance."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from x402_client._protocol.types import PaymentIntent


def euro_intent(
    amount: str | int | Decimal = "0.10", currency: str = "EUR", **fields: Any
) -> PaymentIntent:
    """A euro-rail intent for `amount` (a string, so that no float is ever involved);
    any other field can be given."""
    values: dict[str, Any] = {
        "rail": "euro",
        "scheme": "euro",
        "network": "provider:mainnet",
        "asset": "EURO",
        "asset_symbol": "EURO",
        "amount": Decimal(amount),
        "currency": currency,
        "pay_to": "ACC_X",
        "resource": "http://merchant.test/weather",
    }
    values.update(fields)
    return PaymentIntent(**values)
