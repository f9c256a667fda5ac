"""Pure protocol logic for the 402 challenge: parse, classify, describe. No I/O.

The transport hands this module bytes and gets back models, reasons and intents, so
every rule here is tested without a network.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from decimal import Decimal

from pydantic import ValidationError

from . import exact_json as _json
from .amounts import from_atomic
from .errors import InvalidChallenge
from .models import (
    ExactAcceptEntry,
    PaymentRequired,
    first_error,
)
from .types import PaymentIntent, Rail

__all__ = [
    "CHAIN_A_ASSETS",
    "CHAIN_A_NETWORK",
    "CURRENCY_OF",
    "EURO_ASSET",
    "EVM_NETWORKS",
    "PROVIDER_NETWORK",
    "VerifierReason",
    "classify_reason",
    "exact_amount",
    "exact_intent",
    "parse_failure_body",
    "parse_payment_required",
    "prefer_order",
]

PROVIDER_NETWORK = "provider:mainnet"
CHAIN_A_NETWORK = "ledgera:mainnet"
EVM_NETWORKS = {"eip155:1": 1, "eip155:137": 137}
EURO_ASSET = "EURO"
#: Chain A asset ids (decimal strings, as in the `asset` field) and their symbols.
CHAIN_A_ASSETS = {"2768422954": "EURQ", "2768603795": "USDQ"}
#: What each asset counts against in limits and budgets: euros and dollars never mix.
CURRENCY_OF = {"EURO": "EUR", "EURQ": "EUR", "USDQ": "USD"}


def parse_payment_required(body: bytes) -> PaymentRequired:
    """Parse a 402 body; anything but a well-formed x402 version 2 body is `InvalidChallenge`."""
    try:
        data = _json.loads(body)
    except _json.JSONError as exc:
        raise InvalidChallenge(f"402 body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidChallenge("402 body is not a JSON object")
    try:
        return PaymentRequired.model_validate(data)
    except ValidationError as exc:
        raise InvalidChallenge(
            f"402 body is not a valid x402 challenge ({first_error(exc)})"
        ) from None


def exact_intent(
    entry: ExactAcceptEntry, *, rail: Rail, symbol: str, resource: str
) -> PaymentIntent:
    """The intent for paying an `exact` entry in `symbol` (EURQ or USDQ) on `rail`."""
    return PaymentIntent(
        rail=rail,
        scheme=entry.scheme,
        network=entry.network,
        asset=entry.asset,
        asset_symbol=symbol,
        amount=exact_amount(entry),
        currency=CURRENCY_OF[symbol],
        pay_to=entry.pay_to,
        resource=resource,
        atomic_amount=entry.max_amount_required,
        description=entry.description,
        accept=entry.to_wire(),
    )


def exact_amount(entry: ExactAcceptEntry) -> Decimal:
    """The currency amount of an `exact` entry: atomic / 10^6 (6 decimals everywhere)."""
    return from_atomic(entry.max_amount_required)


class VerifierReason(enum.Enum):
    """What a verifier's `reason` asks the client to do (docs/protocol.md, "The merchant's
    answer to the paid retry")."""

    NOT_CONFIRMED = "not_confirmed"  # wait briefly, re-send the same proof
    USED = "used"  # request a fresh 402
    EXPIRED = "expired"  # request a fresh 402 and pay again
    #: A session's merchant sees its channel otherwise (a corrective 402 carries its view):
    #: pay that 402 again, from what the client can verify of the channel.
    STALE = "stale"
    OTHER = "other"  # give up with the reason


def classify_reason(reason: str | None) -> VerifierReason:
    """Map a reason text to an action; matching is case-insensitive on the verifier's wording."""
    # "Payment request already used" and the x402 foundation's codes alike
    # ("invalid_exact_evm_nonce_already_used").
    text = (reason or "").lower().replace("_", " ")
    if "not confirmed" in text or "status: open" in text:
        return VerifierReason.NOT_CONFIRMED
    if "already used" in text:
        return VerifierReason.USED
    if "expired" in text:
        return VerifierReason.EXPIRED
    if any(words in text for words in _STALE_CHANNEL):
        return VerifierReason.STALE
    return VerifierReason.OTHER


#: The `batch-settlement` codes that say the merchant's view of a channel differs from the
#: payer's (its charged total, or its balance after a refund of its own).
_STALE_CHANNEL = (
    "batch settlement evm cumulative amount mismatch",
    "batch settlement evm cumulative below claimed",
    "batch settlement evm cumulative exceeds balance",
    "batch settlement evm channel not found",
)


def parse_failure_body(body: bytes) -> tuple[str | None, PaymentRequired | None]:
    """Read the 402 that answers a paid retry: the `error` reason, and a challenge if any.

    Lenient: the body may be a full 402 (with `accepts`), just `{"error": ...}`, or junk.
    """
    try:
        data = _json.loads(body)
    except _json.JSONError:
        return None, None
    if not isinstance(data, dict):
        return None, None
    error = data.get("error")
    reason = error if isinstance(error, str) else None
    if reason is None and isinstance(data.get("reason"), str):
        reason = data["reason"]
    try:
        challenge = PaymentRequired.model_validate(data)
    except ValidationError:
        challenge = None
    return reason, challenge


def prefer_order(intents: Sequence[PaymentIntent], prefer: Sequence[str]) -> list[int]:
    """Indexes of `intents`, most preferred first; ties keep the merchant's order.

    A preference token matches an intent's rail (`euro`, `evm-permit`, `bridge`), scheme,
    network (`eip155:137`) or asset symbol (`EURQ`); earlier tokens win.
    """

    def rank(index: int) -> tuple[int, int]:
        intent = intents[index]
        names = {intent.rail, intent.scheme, intent.network, intent.asset_symbol}
        for position, token in enumerate(prefer):
            if token in names:
                return (position, index)
        return (len(prefer), index)

    return sorted(range(len(intents)), key=rank)
