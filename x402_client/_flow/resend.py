"""A proof paid earlier, delivered again (recovery, or a proof re-sent by hand): no new
payment, and it finishes only the payment it was made for.

A re-sent proof that the merchant serves closes its payment (the ledger entry, the journal
row, an `upto` payment's settlement) only where it was paid: the journaled request's origin
(scheme, host, port), answering a 402 that asks for that payment (network, asset, `payTo`,
amount). Anything else is a new request that books, frees and closes nothing.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import anyio
import httpx

from .._protocol.delivery import refused_money_moved
from .._protocol.dialects import PAYMENT_SIGNATURE, X_PAYMENT, Challenge
from .._protocol.errors import ConfigurationError, NoSatisfiableOption, PaymentVerificationFailed
from .._protocol.exact_json import ProofError, b64_json_decode
from .._protocol.models import InvalidEntry
from .._protocol.rail_interface import MeteredRail, Rail, proves
from .._protocol.settlement import settlement_step
from .._protocol.types import Paid, PaymentIntent, PaymentReceipt
from .payment import RECEIPT_EXTENSION, LogicalRequest, Send, deliver, delivering, origin_of

if TYPE_CHECKING:
    from .._options import PaymentOptions
    from .._protocol.ledger import LedgerEntry
    from .._state.shared import PaymentState
    from .._state.sqlite_store import JournalRecord

__all__ = ["resend_proof", "same_requirements"]

logger = logging.getLogger("x402_client")


def _named_entry(proof: str) -> tuple[dict[str, Any], Any, Any, str]:
    """A proof to re-send, decoded: (its JSON, scheme, network, the header it travels in).
    A v2 standard proof names its entry in `accepted`; the others carry scheme/network."""
    try:
        decoded = b64_json_decode(proof)
    except ProofError as exc:
        raise ConfigurationError(f"the proof to re-send cannot be decoded: {exc}") from None
    if not isinstance(decoded, dict):
        raise ConfigurationError("the proof to re-send is not a JSON object")
    accepted = decoded.get("accepted")
    named = accepted if isinstance(accepted, dict) else decoded
    header = PAYMENT_SIGNATURE if isinstance(accepted, dict) else X_PAYMENT
    return decoded, named.get("scheme"), named.get("network"), header


def _resend_target(
    challenge: Challenge, rails: Sequence[Rail], decoded: Mapping[str, Any], resource: str
) -> tuple[Rail, PaymentIntent] | None:
    """The first rail that can describe the 402's entry for the proof's scheme/network and
    whose proofs look like this one (`proves`: a chain-A entry's direct proof is the
    wallet's, its bridge proof the bridge's)."""
    accepted = decoded.get("accepted")
    named = accepted if isinstance(accepted, dict) else decoded
    scheme, network = named.get("scheme"), named.get("network")
    for raw in challenge.accepts:
        try:
            entry = challenge.parse_entry(raw)
        except InvalidEntry:
            continue
        if entry is None or (entry.scheme, entry.network) != (scheme, network):
            continue
        for rail in rails:
            intent = rail.describe(entry, resource)
            if not isinstance(intent, str) and proves(rail, decoded):
                return rail, intent
    return None


async def resend_proof(
    guard: LogicalRequest,
    request: httpx.Request,
    body: bytes,
    send: Send,
    challenge: Challenge,
    proof: str,
    *,
    rails: Sequence[Rail],
    state: PaymentState,
    options: PaymentOptions,
) -> httpx.Response:
    """Re-send a proof the client already paid for (recovery): no new payment."""
    decoded, scheme, network, header = _named_entry(proof)
    target = _resend_target(challenge, rails, decoded, str(request.url))
    if target is None:
        raise NoSatisfiableOption(
            f"the 402 lists no {scheme} entry on {network} for the re-sent proof",
            request=request,
        )
    rail, intent = target
    moves_first = rail.money_moves_before_proof
    entry = state.ledger.find(proof)
    paid = Paid(proof=proof, header=header)
    on_its_way = delivering(
        guard, request, body, send, intent, paid,
        options=options, moves_first=moves_first, entry=entry, resend=True,
    )  # fmt: skip
    result = await deliver(on_its_way)
    if not isinstance(result, httpx.Response):
        raise PaymentVerificationFailed(
            f"the merchant refused the re-sent proof: {result.reason}",
            reason=result.reason,
            proof=proof,
            request=request,
            intent=intent,
            money_moved=refused_money_moved(moves_first),
        )
    owner = await _owner_of(state, request, intent, proof, decoded, entry)
    if owner is None:
        logger.warning(
            "x402: a re-sent proof was served at %s, which is not the origin and payment it "
            "was made for; it finished no payment and booked nothing",
            request.url.host,
        )
        return result
    await _close_resent(state, owner)
    if intent.scheme == "upto":
        await _settle_resent(state, cast(MeteredRail, rail), decoded, owner, result)
    receipt = result.extensions.get(RECEIPT_EXTENSION)
    if isinstance(receipt, PaymentReceipt):
        closed = dataclasses.replace(receipt, closed_payment=owner.id)
        result.extensions = {**result.extensions, RECEIPT_EXTENSION: closed}
    return result


@dataclasses.dataclass(frozen=True)
class _Owner:
    """The payment a re-sent proof belongs to: its ledger entry (this process paid it)
    and its journal row (with a state file), at least one of them."""

    entry: LedgerEntry | None
    row: JournalRecord | None

    @property
    def id(self) -> str:
        return self.row.id if self.row is not None else self.entry.id  # type: ignore[union-attr]


def same_requirements(paid: PaymentIntent, asked: PaymentIntent) -> bool:
    """Whether the 402 a proof answers asks for the payment the proof made: the same
    network, asset, recipient and amount."""
    return (
        paid.network == asked.network
        and paid.asset.lower() == asked.asset.lower()
        and paid.pay_to.lower() == asked.pay_to.lower()
        and paid.amount == asked.amount
    )


async def _owner_of(
    state: PaymentState,
    request: httpx.Request,
    asked: PaymentIntent,
    proof: str,
    decoded: Mapping[str, Any],
    entry: LedgerEntry | None,
) -> _Owner | None:
    """The payment a served re-sent proof finishes: the one it was made for, when it was
    sent to the origin (scheme, host, port) that payment's request went to and the 402
    asks for that payment. Else None: a new request, which books, frees and closes
    nothing. A journal that cannot be read finishes nothing (recovery will re-send)."""
    row = None
    if state.journal is not None:
        payload = decoded.get("payload")
        code = payload.get("paymentRequestCode") if isinstance(payload, dict) else None
        try:
            row = await state.journal.find_by_proof(proof, code if isinstance(code, str) else None)
        except Exception as exc:
            logger.error("x402: the payment journal could not be read (%s)", type(exc).__name__)
            return None
    if row is not None:
        url, paid = row.request_url, row.intent
    elif entry is not None:
        url, paid = entry.intent.resource, entry.intent
    else:
        return None
    if origin_of(httpx.URL(url)) != origin_of(request.url) or not same_requirements(paid, asked):
        return None
    return _Owner(entry, row)


async def _close_resent(state: PaymentState, owner: _Owner) -> None:
    """A re-sent proof was served where it was paid: its payment is delivered, in the
    ledger and in the journal."""
    entry, row = owner.entry, owner.row
    if entry is not None and not entry.delivered:
        entry.delivered = True
        entry.finish("paid")
    if row is None or state.journal is None or (row.delivered and row.outcome == "paid"):
        return
    try:
        with anyio.CancelScope(shield=True):
            await state.journal.finish_payment(row.id, "paid", delivered=True)
    except Exception as exc:
        logger.error(
            "x402: the payment journal could not record a re-sent proof's delivery (%s)",
            type(exc).__name__,
        )


async def _settle_resent(
    state: PaymentState,
    rail: MeteredRail,
    decoded: Mapping[str, Any],
    owner: _Owner,
    response: httpx.Response,
) -> None:
    """A re-sent `upto` proof was served where it was paid (recovery): book what the chain
    says it moved, as the first send would have (`PaymentRecord.settle`): the ledger
    entry, a `settled` (or `held`) step in the journal, and the budgets keep it and give
    back the rest of the reservations the journal row holds. Once per payment: a row with
    a `settled` step is left alone."""
    entry, row = owner.entry, owner.row
    receipt = response.extensions.get(RECEIPT_EXTENSION)
    if not isinstance(receipt, PaymentReceipt) or (
        row is not None and any(step.step == "settled" for step in row.steps)
    ):
        return
    intent = row.intent if row is not None else owner.entry.intent  # type: ignore[union-attr]
    payload = decoded.get("payload")
    check = await rail.check_settlement(
        intent, payload if isinstance(payload, Mapping) else None, receipt.tx_hash
    )
    step, detail, settled = settlement_step(intent, check)
    if entry is not None and entry.settled_amount is None:
        entry.step(step, detail)
        entry.settled_amount = settled
    response.extensions = {
        **response.extensions,
        RECEIPT_EXTENSION: dataclasses.replace(
            receipt,
            amount=intent.amount if settled is None else settled,
            settled_amount=settled,
            settlement_verified=settled is not None,
        ),
    }
    if row is not None and state.journal is not None:
        await state.book_settlement(row, step, detail, settled)
