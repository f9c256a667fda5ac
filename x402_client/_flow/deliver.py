"""Delivering a proof: send the paid retry, act on each answer, hand back the resource.

The rules (when to re-send, when to pay fresh, what each answer means for the money) are
`_delivery.Delivery`'s, pure and table-tested; this module is their I/O: it sends the
request with the proof, reads what a refusal says, sleeps between attempts, and turns the
decision that ends the delivery into the served response or the error that says what
became of the money. `resend_proof` delivers a proof paid earlier (recovery).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime, timezone
from decimal import Decimal
from typing import TYPE_CHECKING, Any, cast

import anyio
import httpx

from .._protocol.challenge import InvalidEntry, parse_failure_body
from .._protocol.delivery import Decision, Delivery, Step
from .._protocol.dialects import (
    PAYMENT_REQUIRED,
    PAYMENT_SIGNATURE,
    SETTLEMENT_HEADERS,
    X_PAYMENT,
    Challenge,
)
from .._protocol.errors import (
    ConfigurationError,
    NoSatisfiableOption,
    PaymentNotConfirmed,
    PaymentOutcomeUnknown,
    PaymentVerificationFailed,
)
from .._protocol.ledger import LedgerEntry
from .._protocol.proof import ProofError, b64_json_decode
from .._protocol.rail_interface import MeteredRail, Paid, Rail, proves
from .._protocol.types import PaymentIntent, PaymentReceipt
from .._state.http import read_upto
from .bodies import GuardedStream, SentBody, hand_back, rebuild
from .record import PaymentRecord, book_journaled, refused_money_moved, settlement_step
from .request import RECEIPT_EXTENSION, LogicalRequest, origin_of

if TYPE_CHECKING:
    from .._options import PaymentOptions
    from .._state.shared import PaymentState
    from .._state.sqlite_store import JournalRecord

__all__ = [
    "PayFresh",
    "Send",
    "deliver",
    "failure_reason",
    "receipt_of",
    "resend_proof",
    "settled_amount_of",
    "settled_atomic",
    "settlement_of",
]

logger = logging.getLogger("x402_client")

Send = Callable[[httpx.Request], Awaitable[httpx.Response]]

#: Transport errors raised before the request left this process: the proof was not sent.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


class PayFresh:
    """The merchant said the proof is used or expired: pay a fresh 402."""

    def __init__(self, reason: str, proof: str) -> None:
        self.reason = reason
        self.proof = proof


# --- what the merchant's answer says ----------------------------------------------------------


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
    until the client verified on chain what moved (`_payer`); the merchant's claim is
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


# --- one delivery ------------------------------------------------------------------------------


@dataclasses.dataclass
class _Delivering:
    """What one delivery knows: the paid request, its receipt, and how to say what
    became of the money."""

    request: httpx.Request
    paid_request: httpx.Request
    intent: PaymentIntent
    paid: Paid
    made: PaymentReceipt
    options: PaymentOptions
    moves_first: bool
    resend: bool

    def receipt(self, response: httpx.Response | None = None) -> PaymentReceipt:
        settlement = None if response is None else settlement_of(response.headers)
        if settlement is None:
            return self.made
        made = self.made
        return receipt_of(
            self.intent, self.paid, made.paid_at, made.payments, settlement, reused=made.reused
        )

    def unknown(self, message: str, answer: httpx.Response | None = None) -> PaymentOutcomeUnknown:
        paid = self.paid
        return PaymentOutcomeUnknown(
            message,
            proof=paid.proof,
            payment_request_code=paid.payment_request_code,
            transaction_code=paid.transaction_code,
            receipt=self.receipt(),
            request=self.paid_request,
            intent=self.intent,
            response=answer,
            status_code=None if answer is None else answer.status_code,
        )

    def served(self, guard: LogicalRequest, response: httpx.Response) -> httpx.Response:
        served = self.receipt(response)
        if not self.resend:
            guard.settled(served)
        response.extensions = {**response.extensions, RECEIPT_EXTENSION: served}
        if isinstance(response.stream, httpx.AsyncByteStream):
            response.stream = GuardedStream(response.stream, self.unknown)
        return response

    async def not_delivered(self, shown: str, response: httpx.Response) -> Exception:
        """Paid, and the merchant answered something other than the resource: the proof
        stays good to re-send; the answer rides on the error, readable."""
        head, rest = await read_upto(response, self.options.max_body_bytes)
        await response.aclose()
        answer = hand_back(response, head if rest is None else b"", None)
        if self.moves_first:
            advice = "; the payment was made"
        else:
            advice = "; the signed payment was handed over and may still be settled"
        message = f"{shown}{advice}; re-sending the proof is safe"
        if not self.moves_first:
            return self.unknown(message, answer)
        return PaymentVerificationFailed(
            message,
            reason=shown,
            receipt=self.receipt(),
            proof=self.paid.proof,
            request=self.paid_request,
            intent=self.intent,
            response=answer,
        )

    def ended(self, decision: Decision) -> Exception | PayFresh:
        """What a delivery that ended unserved means: a fresh payment, or the error."""
        shown = decision.reason or "402 without a reason"
        step = decision.step
        if step is Step.PAY_FRESH:
            return PayFresh(shown, self.paid.proof)
        if step is Step.UNKNOWN:
            return self.unknown(shown if self.resend else f"{shown}; the payment was made")
        if step is Step.NOT_CONFIRMED:
            if self.resend:
                advice = "the payment behind this proof has not been confirmed (or never made)"
            else:
                advice = "the payment was made; re-send the proof later"
            return PaymentNotConfirmed(
                f"the merchant still says {shown!r} after "
                f"{self.options.confirmation_attempts} attempts; {advice}",
                reason=shown,
                receipt=self.receipt(),
                proof=self.paid.proof,
                request=self.request,
                intent=self.intent,
            )
        return PaymentVerificationFailed(
            f"the merchant refused the payment proof: {shown}",
            reason=shown,
            receipt=self.receipt(),
            proof=self.paid.proof,
            request=self.paid_request,
            intent=self.intent,
            money_moved=refused_money_moved(self.moves_first),
        )


async def _answer_of(
    response: httpx.Response, machine: Delivery, limit: int
) -> tuple[Decision, str | None]:
    """Read what an answer to the paid retry says (a 402's reason) and ask the rules."""
    status = response.status_code
    reason: str | None = None
    if status == 402:
        head, rest = await read_upto(response, limit)
        await response.aclose()
        reason = failure_reason(head if rest is None else b"", response.headers)
    elif status >= 500:
        await response.aclose()
    return machine.answered(status, reason), reason


def _machine(options: PaymentOptions, resend: bool) -> Delivery:
    return Delivery(
        confirmation_attempts=options.confirmation_attempts,
        confirmation_wait=options.confirmation_wait,
        confirmation_max_wait=options.confirmation_max_wait,
        merchant_error_retries=options.merchant_error_retries,
        resend=resend,
    )


async def _send_paid(
    send: Send, delivering: _Delivering, machine: Delivery
) -> httpx.Response | None:
    """Send the paid request once: its answer, or None when it did not go out and may be
    sent again (after the wait). The machine learns how many times it really went out."""
    paid_request = delivering.paid_request
    # Read once per send on the wire, below every layer (`SentBody`).
    wire = paid_request.stream
    assert isinstance(wire, SentBody)
    try:
        response = await send(paid_request)
    except httpx.TransportError as exc:
        machine.sent(wire.reads)
        never_sent = isinstance(exc, _NOT_SENT)
        decision = machine.failed_in_transit(never_sent=never_sent, error=type(exc).__name__)
        if decision.step is not Step.RETRY:
            raise delivering.unknown(decision.reason or "lost in transit") from exc
        await anyio.sleep(decision.wait)
        return None
    machine.sent(wire.reads)
    return response


async def deliver(
    guard: LogicalRequest,
    request: httpx.Request,
    body: bytes,
    send: Send,
    intent: PaymentIntent,
    paid: Paid,
    *,
    options: PaymentOptions,
    record: PaymentRecord | LedgerEntry | None = None,
    moves_first: bool,
    resend: bool = False,
    made: PaymentReceipt | None = None,
) -> httpx.Response | PayFresh:
    """Send the proof and act on the answers until one ends the delivery: the served
    response (its receipt in `RECEIPT_EXTENSION`), a `PayFresh`, or the error. `made`: the
    receipt of the payment behind `paid`, when this request made it; a re-sent proof
    (`resend`) gets a receipt that says so and counts no payment."""
    machine = _machine(options, resend)
    if made is None:
        payments = 0 if resend else max(guard.payments, 1)
        made = receipt_of(intent, paid, datetime.now(timezone.utc), payments, reused=resend)
    paid_request = rebuild(request, body, paid.proof, paid.header)
    delivering = _Delivering(
        request, paid_request, intent, paid, made, options, moves_first, resend
    )
    while True:
        machine.sending()
        if record is not None:
            record.step("sent", str(paid_request.url))
        response = await _send_paid(send, delivering, machine)
        if response is None:
            continue
        if record is not None:
            record.step("answer", str(response.status_code))
        decision, reason = await _answer_of(response, machine, options.max_body_bytes)
        if decision.step is Step.RETRY:
            if reason is not None:
                logger.debug("x402: %s; re-sending the same proof", reason)
            await anyio.sleep(decision.wait)
            continue
        if decision.step is Step.SERVED:
            return delivering.served(guard, response)
        if decision.step is Step.NOT_DELIVERED:
            shown = decision.reason or "402 without a reason"
            raise await delivering.not_delivered(shown, response)
        ended = delivering.ended(decision)
        if isinstance(ended, PayFresh):
            return ended
        raise ended


# --- a proof paid earlier ---------------------------------------------------------------------


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
    result = await deliver(
        guard,
        request,
        body,
        send,
        intent,
        Paid(proof=proof, header=header),
        options=options,
        record=entry,
        moves_first=moves_first,
        resend=True,
    )
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
        await book_journaled(state, row, step, detail, settled)
