"""Values the tests build often: one place, so that a field added to a public type is
added here once rather than in every module that needs an instance."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from x402_client._options import PaymentOptions
from x402_client._protocol.delivery import Delivery
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


def delivery(**rules: Any) -> Delivery:
    """A fresh delivery of one proof under the options' rules: their defaults, or `rules`
    (`merchant_error_retries=1`, ...) instead, as the payer builds it."""
    options = PaymentOptions(**rules)
    return Delivery(
        confirmation_attempts=options.confirmation_attempts,
        confirmation_wait=options.confirmation_wait,
        confirmation_max_wait=options.confirmation_max_wait,
        merchant_error_retries=options.merchant_error_retries,
    )
