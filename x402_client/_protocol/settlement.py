"""What a merchant's answer to a paid request says: its settlement header, why it refused,
what an `upto` settlement claims, and the receipt of a payment. Pure: no I/O.

The merchant's settlement header (`PAYMENT-RESPONSE`, or `X-PAYMENT-RESPONSE` from older
servers) is base64 JSON; a receipt shows it as it came. What an `upto` settlement says it
took is shown (`claimed_amount`), never booked: the flow books what the chain says moved.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from .amounts import format_amount
from .challenge import parse_failure_body
from .dialects import PAYMENT_REQUIRED, SETTLEMENT_HEADERS
from .exact_json import ProofError, b64_json_decode
from .types import PaymentIntent, PaymentReceipt

if TYPE_CHECKING:
    import httpx

    from .rail_interface import SettlementCheck
    from .types import Paid

__all__ = [
    "failure_reason",
    "receipt_of",
    "settled_amount_of",
    "settled_atomic",
    "settlement_of",
    "settlement_step",
]


def settlement_of(headers: httpx.Headers) -> Mapping[str, Any] | None:
    """The merchant's settlement header, decoded (undecodable: `{"raw": value}`)."""
    for name in SETTLEMENT_HEADERS:
        value = headers.get(name)
        if value:
            try:
                decoded = b64_json_decode(value)
            except ProofError:
                return {"raw": value}
            return decoded if isinstance(decoded, dict) else {"value": decoded}
    return None


def _settlement_tx_hash(settlement: Mapping[str, Any] | None) -> str | None:
    """The transaction a merchant's settlement header names, if any."""
    if not settlement:
        return None
    found = settlement.get("transaction") or settlement.get("txHash")
    return found if isinstance(found, str) else None


def failure_reason(body: bytes, headers: httpx.Headers) -> str | None:
    """Why the merchant refused a paid retry: the body's `error` (euro gates, v1), the
    `errorReason` of a `PAYMENT-RESPONSE`, or the `error` of a fresh `PAYMENT-REQUIRED`."""
    reason, _ = parse_failure_body(body)
    if reason:
        return reason
    settlement = settlement_of(headers)
    if settlement is not None:
        for key in ("errorReason", "errorMessage"):
            if isinstance(settlement.get(key), str) and settlement[key]:
                return str(settlement[key])
    header = headers.get(PAYMENT_REQUIRED)
    if header:
        try:
            data = b64_json_decode(header, limit=65_536)
        except ProofError:
            return None
        if isinstance(data, dict) and isinstance(data.get("error"), str):
            return str(data["error"])
    return None


def settled_atomic(settlement: Mapping[str, Any] | None) -> int | None:
    """The amount a settlement response says was settled (`amount`, atomic units, the
    x402 `SettleResponse`'s field), or None when it does not say it readably."""
    found = None if settlement is None else settlement.get("amount")
    if isinstance(found, bool):
        return None
    if isinstance(found, int) and found >= 0:
        return found
    if isinstance(found, str) and found.isascii() and found.isdigit() and len(found) <= 78:
        return int(found)
    return None


def settled_amount_of(
    intent: PaymentIntent, settlement: Mapping[str, Any] | None
) -> Decimal | None:
    """What an `upto` settlement response says was settled, in the intent's units (None
    when it does not say); it may exceed the intent's amount (a claim the caller refuses)."""
    atomic = settled_atomic(settlement)
    return None if atomic is None else intent.amount_of(atomic)


def _upto_amounts(
    intent: PaymentIntent, settlement: Mapping[str, Any] | None
) -> tuple[Decimal | None, Decimal | None]:
    """(authorized, claimed) of a receipt: an `upto` payment counts its authorized maximum
    until the client verified on chain what moved (`_flow.payment`); the merchant's claim is
    shown, never booked."""
    if intent.scheme != "upto":
        return None, None
    return intent.amount, settled_amount_of(intent, settlement)


def receipt_of(
    intent: PaymentIntent,
    paid: Paid,
    paid_at: datetime,
    payments: int,
    settlement: Mapping[str, Any] | None = None,
    *,
    reused: bool = False,
) -> PaymentReceipt:
    """The receipt of a payment whose proof exists; made again with the merchant's
    settlement (and the transaction it names) when the answer carries one."""
    authorized, claimed = _upto_amounts(intent, settlement)
    return PaymentReceipt(
        rail=intent.rail,
        scheme=intent.scheme,
        network=intent.network,
        asset=intent.asset,
        asset_symbol=intent.asset_symbol,
        amount=intent.amount,
        currency=intent.currency,
        pay_to=intent.pay_to,
        resource=intent.resource,
        paid_at=paid_at,
        proof=paid.proof,
        payment_request_code=paid.payment_request_code,
        transaction_code=paid.transaction_code,
        blockchain_tx_id=paid.blockchain_tx_id,
        payer=paid.payer,
        tx_hash=_settlement_tx_hash(settlement),
        settlement=settlement,
        payments=payments,
        reused=reused,
        authorized_amount=authorized,
        claimed_amount=claimed,
        settlement_verified=None if authorized is None else False,
    )


def settlement_step(
    intent: PaymentIntent, check: SettlementCheck
) -> tuple[str, str, Decimal | None]:
    """The journal step of an `upto` settlement check: `("settled", detail, amount)` when
    the chain told what moved (nothing, once the authorization expired unused), else
    `("held", detail, None)`: the authorized maximum stays booked."""
    authorized = intent.amount
    settled = None if check.atomic is None else intent.amount_of(check.atomic)
    if check.status == "unverified" or settled is None:
        return "held", f"{format_amount(authorized)} (the maximum) kept: {check.detail}", None
    shown = f"{format_amount(settled)} of at most {format_amount(authorized)}"
    return "settled", f"{shown}, {check.detail}", settled
