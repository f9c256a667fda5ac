"""The payer: what happens between a 402 and the response it unlocks.

One payment, in order (`Payer._attempt`, one screen): read the challenge (`_dialects`) ->
select the candidates (`_policy.select`, pure) -> approve (the hook, then the budget's
reservation; the caps were the selection's) -> journal (`_record`) -> pay (the rail) ->
deliver the proof (`_deliver`, around the pure rules of `_delivery`) -> settle
(`_record.finish`). The caller's logical request, which all hops share, is
`_request.LogicalRequest`; the bodies around a payment are `_streams`'.

One logical request makes at most one payment, plus the one fresh payment that the spec's
"already used" / "expired" rule allows; once money moved, every exception that leaves it is
of the "money moved" family (`PaymentVerificationFailed`, `PaymentOutcomeUnknown`) with
the receipts: `Payer.conclude`, called by the outermost layer the client controls.

Only x402 402s are challenges: a 402 whose body is not a JSON object with `x402Version`
(and that has no `PAYMENT-REQUIRED` header) is handed back to the caller untouched, with
its body readable, and nothing is paid.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from typing import Any, cast

import anyio
import httpx

from .._options import PaymentOptions
from .._protocol.amounts import format_amount
from .._protocol.challenge import AcceptEntry, VerifierReason, classify_reason
from .._protocol.dialects import (
    PAYMENT_REQUIRED,
    Challenge,
    challenge_of,
    encode_payment,
    payment_id_for,
)
from .._protocol.errors import (
    BudgetExceeded,
    ChallengeError,
    ConfigurationError,
    InvalidChallenge,
    PaymentFailed,
    PaymentOutcomeUnknown,
    PaymentRefused,
    PaymentRejectedByHook,
    PaymentVerificationFailed,
    UnreplayableRequest,
    X402Error,
)
from .._protocol.events import PaymentProgress
from .._protocol.ledger import Outcome
from .._protocol.policy import Candidate, SkippedEntry, SkipReason, no_candidate_error, select
from .._protocol.rail_interface import Describer, MeteredRail, Paid, Rail
from .._protocol.redact import guard_library_logs, safe_url
from .._protocol.types import PaymentIntent, PaymentReceipt
from .._rails import build_rails
from .._state.http import known_small, read_upto
from .._state.payment_api import PaymentAPI
from .._state.shared import KeyedLocks, PaymentState, state_of
from .bodies import GuardedStream, hand_back, rebuild, replayable_body
from .deliver import PayFresh, Send, deliver, receipt_of, resend_proof
from .record import PaymentRecord, outcome_of
from .request import RECEIPT_EXTENSION, REDIRECTS, LogicalRequest, redirect_target

__all__ = ["Payer"]

logger = logging.getLogger("x402_client")

#: How an attempt ended, for its record: (outcome, error, the proof's dead reason).
_Ending = tuple[Outcome, str | None, str | None]


async def _call(callback: Callable[[Any], Any], argument: Any) -> Any:
    """Call a user callback that may be sync or async."""
    result = callback(argument)
    return await result if inspect.isawaitable(result) else result


class Payer:
    """Pays 402 challenges with the rails that `options` enable.

    One per installed client: it holds that client's connections (the payment API, RPC
    endpoints). What must hold across clients (budgets, ledger, nonce locks) is the
    options' (`state`). No per-request state lives here.
    """

    def __init__(self, options: PaymentOptions) -> None:
        # httpx logs each request's URL: its credentials redacted, as everywhere else.
        guard_library_logs()
        self.options = options
        self.state: PaymentState = state_of(options)
        self._api: PaymentAPI | None = None
        built = build_rails(self)
        self._rails: list[Rail] = built.enabled
        #: What the selection asks: the enabled rails, and what the others would need.
        self._describers: list[Describer] = built.describers

    def __repr__(self) -> str:
        return f"Payer(rails={[r.name for r in self._rails]})"

    @property
    def rails(self) -> list[Rail]:
        return list(self._rails)

    @property
    def describers(self) -> list[Describer]:
        """What the selection asks about each entry: the rails, and what the rails the
        options leave off would need (`_rails.Rails.describers`)."""
        return list(self._describers)

    @property
    def ledger(self) -> Any:
        return self.state.ledger

    @property
    def budgets(self) -> Any:
        return self.state.budgets

    # --- RailContext ------------------------------------------------------------------------

    @property
    def locks(self) -> KeyedLocks:
        return self.state.locks

    def payment_api(self) -> PaymentAPI:
        if self._api is None:
            options = self.options
            if not (options.api_url and options.api_key):
                raise ConfigurationError("the payment API needs api_url and api_key")
            self._api = PaymentAPI(
                options.api_url,
                options.api_key,
                timeout=options.payment_api_timeout,
                max_body_bytes=options.max_body_bytes,
                max_connections=options.payment_api_max_connections,
            )
        return self._api

    async def report(self, event: PaymentProgress) -> None:
        await self._notify("on_progress", event)

    async def _notify(self, name: str, argument: Any) -> None:
        """Call the user's `on_progress` / `on_payment` / `on_payment_error`, if set. A
        callback that raises is logged and never breaks (or un-breaks) a payment."""
        callback = getattr(self.options, name)
        if callback is None:
            return
        try:
            with anyio.CancelScope(shield=name == "on_payment_error"):
                await _call(callback, argument)
        except Exception:
            logger.exception("%s callback failed", name)

    async def aclose(self) -> None:
        for rail in self._rails:
            close = getattr(rail, "aclose", None)
            if close is not None:
                await close()
        if self._api is not None:
            await self._api.aclose()
            self._api = None
        # The budget store is the user's (it may be shared by several clients): not closed.

    # --- the flow ----------------------------------------------------------------------------

    async def handle_402(
        self,
        guard: LogicalRequest,
        request: httpx.Request,
        response: httpx.Response,
        send: Send,
    ) -> httpx.Response:
        """Answer one 402 hop of the logical request `guard`. What it raises is made
        truthful by the outermost layer (`conclude`)."""
        guard.payer = self
        try:
            return await self._handle(guard, request, response, send)
        except X402Error as exc:
            if exc._request is None:
                exc.request = request
            raise

    async def answered(
        self, guard: LogicalRequest, request: httpx.Request, response: httpx.Response
    ) -> httpx.Response:
        """A non-402 answer to a hop of a request that already paid (the paid answer, a
        redirect it asked for, or the fresh request after "already used"): it delivers the
        resource only if it is a success or a redirect that goes somewhere new."""
        status = response.status_code
        if status < 300:
            return guard.finish_hop(response)
        if status in REDIRECTS and "location" in response.headers:
            target = redirect_target(request, response)
            if isinstance(target, str) or guard.visited(target):
                await response.aclose()
                problem = target if isinstance(target, str) else "redirects into a loop"
                raise X402Error(
                    f"after the payment, the merchant's answer {problem} "
                    f"({status} to {safe_url(str(request.url.copy_with(query=None)))})",
                    request=request,
                )
            guard.visit(target)
        elif status >= 400:
            head, rest = await read_upto(response, self.options.max_body_bytes)
            await response.aclose()
            error = X402Error(
                f"the paid request was led to "
                f"{safe_url(str(request.url.copy_with(query=None)))}, which answered {status} "
                "instead of the resource",
                request=request,
                response=hand_back(response, head if rest is None else b"", None),
            )
            raise error
        return guard.finish_hop(response)

    async def conclude(self, guard: LogicalRequest, exc: BaseException) -> BaseException:
        """The truth boundary: what the caller gets for `exc` leaving the logical request
        `guard`. Called once, by the outermost layer the client controls (the client's
        `send` when `with_eur_payment` installed it, else the payment transport).

        Once the request paid, every error is a "money moved" error with the receipts and
        `exc` as its cause; the payment's record learns the resource was not delivered;
        `on_payment_error` hears of every error whose money moved or may have."""
        if not isinstance(exc, Exception) or (isinstance(exc, X402Error) and exc._concluded):
            return exc
        error: Exception = exc
        record = guard.record
        if record is not None and record.ended_by is exc and not isinstance(exc, X402Error):
            # An untyped error ended a payment attempt: typed by what it means for the money.
            error = self._typed(exc, record)
        if guard.receipts or isinstance(error, X402Error):
            error = guard.truthful(error)
        if (
            record is not None
            and guard.receipts
            and not (record.settled and record.ended_by is exc)
        ):
            # (A served payment whose settlement the client refused was still delivered.)
            await record.not_delivered(f"{type(exc).__name__}: {exc}")
        if isinstance(error, X402Error):
            error._concluded = True
            if error is not exc and error.__cause__ is None:
                error.__cause__ = exc
            if error.money_moved is not False:
                await self._notify("on_payment_error", error)
        return error

    async def _handle(
        self,
        guard: LogicalRequest,
        request: httpx.Request,
        response: httpx.Response,
        send: Send,
    ) -> httpx.Response:
        settings = guard.settings
        if not settings.pay:
            guard.end()
            return response
        challenge, as_read = await self._read_challenge(response, request)
        if challenge is None or not self._may_pay_here(guard, request):
            return guard.finish_hop(as_read)
        body = replayable_body(request)
        if body is None:
            raise UnreplayableRequest(
                "the request body is a one-shot stream and could not be re-sent with the "
                "payment; nothing was paid. Send it as bytes (content=, json=, data=).",
                request=request,
                response=as_read,
            )
        if settings.proof is not None:
            resent = await resend_proof(
                guard, request, body, send, challenge, settings.proof,
                rails=self._rails, state=self.state, options=self.options,
            )  # fmt: skip
            return guard.finish_hop(resent)
        return await self._pay_until_served(guard, challenge, as_read, request, body, send)

    @staticmethod
    def _may_pay_here(guard: LogicalRequest, request: httpx.Request) -> bool:
        """False for a recovery request led to another origin; raises for a request that
        already paid and is asked to pay again."""
        settings = guard.settings
        recovery = settings.proof is not None or settings.resume_transaction_code is not None
        if recovery and not guard.is_first_origin(request):
            # Recovery settings belong to the origin they were given for: never carried to
            # another one, and a recovery request pays nothing new anywhere.
            logger.info("x402: a redirect led a recovery request to another origin; not paying")
            return False
        if guard.payments:
            raise PaymentVerificationFailed(
                f"the merchant asked for payment again (at {request.url.host}) after this "
                "request was paid; not paying twice for one request",
                reason="payment required again after payment",
                proof=guard.receipts[-1].proof,
                receipts=guard.receipts,
                money_moved=None if any(guard.uncertain) else True,
            )
        return True

    async def _pay_until_served(
        self,
        guard: LogicalRequest,
        challenge: Challenge,
        as_read: httpx.Response,
        request: httpx.Request,
        body: bytes,
        send: Send,
    ) -> httpx.Response:
        """Pay the 402, and once more (a fresh 402) when the merchant says the proof is
        already used or expired; never a third time."""
        while True:
            try:
                outcome = await self._pay_one(guard, challenge, request, body, send)
            except (ChallengeError, PaymentRefused) as exc:
                # Nothing was paid for this 402: the caller gets it along, body readable.
                if exc.response is None:
                    exc.response = as_read
                raise
            if isinstance(outcome, httpx.Response):
                return await self.answered(guard, request, outcome)
            if guard.fresh_used:
                raise PaymentVerificationFailed(
                    f"the merchant refused the fresh payment too: {outcome.reason}",
                    reason=outcome.reason,
                    proof=outcome.proof,
                    receipts=guard.receipts,
                    request=request,
                )
            guard.fresh_used = True
            logger.info("x402: proof %s; asking for a fresh 402", outcome.reason)
            fresh = await send(rebuild(request, body))
            if fresh.status_code != 402:
                return await self.answered(guard, request, fresh)
            read, as_read = await self._read_challenge(fresh, request)
            if read is None:
                return guard.finish_hop(as_read)
            challenge = read

    async def _read_challenge(
        self, response: httpx.Response, request: httpx.Request
    ) -> tuple[Challenge | None, httpx.Response]:
        """The challenge of a 402 (None when it is not an x402 one), and the 402 as the caller
        would have had it, body readable."""
        limit = self.options.max_body_bytes
        if known_small(response, limit):
            # The whole body at once, and the 402 itself handed back read (the common case).
            head = await response.aread()
            as_read = response
        else:
            head, rest = await read_upto(response, limit)
            if rest is not None:
                # Larger than any challenge we read. Ours only if it says so up front.
                if b"x402Version" in head[:4096] or PAYMENT_REQUIRED in response.headers:
                    await response.aclose()
                    raise InvalidChallenge(
                        f"402 body exceeds the {limit}-byte limit", request=request
                    )
                return None, hand_back(response, head, rest)
            await response.aclose()
            as_read = hand_back(response, head, None)
        try:
            return challenge_of(head, response.headers, limit=limit), as_read
        except InvalidChallenge as exc:
            exc.request = request
            exc.response = as_read
            raise

    async def _pay_one(
        self,
        guard: LogicalRequest,
        challenge: Challenge,
        request: httpx.Request,
        body: bytes,
        send: Send,
    ) -> httpx.Response | PayFresh:
        """Pay the first candidate that preparation, the hook and the budget allow."""
        budgets = self.state.budgets
        selection = select(
            challenge.accepts,
            rails=self._describers,
            options=self.options,
            settings=guard.settings,
            headroom=await budgets.headroom() if budgets.budgets else {},
            now=time.time(),
            resource=str(request.url),
            parse=challenge.parse_entry,
            rail_problem=challenge.rail_problem,
        )
        skipped: list[SkippedEntry] = list(selection.skipped)
        limit = self.options.max_candidates
        for tried, candidate in enumerate(selection.candidates):
            index, intent = candidate.index, candidate.intent
            if tried >= limit:
                message = f"not tried: {limit} candidates were prepared already (max_candidates)"
                skipped.append(SkippedEntry(index, SkipReason.NOT_TRIED, message, intent))
                continue
            problem = await candidate.rail.prepare(candidate.entry, intent)
            if problem is not None:
                skipped.append(SkippedEntry(index, SkipReason.PREPARE_FAILED, problem, intent))
                continue
            try:
                return await self._attempt(guard, challenge, candidate, request, body, send)
            except BudgetExceeded as exc:
                # Another request took the headroom meanwhile: a cheaper entry may still fit.
                skipped.append(SkippedEntry(index, SkipReason.OVER_BUDGET, str(exc), intent))
        skipped.sort(key=lambda s: s.index)
        raise no_candidate_error(skipped, selection.readable, request)

    async def _attempt(
        self,
        guard: LogicalRequest,
        challenge: Challenge,
        candidate: Candidate,
        request: httpx.Request,
        body: bytes,
        send: Send,
    ) -> httpx.Response | PayFresh:
        """One payment of one intent, in order: approve (the hook, then the budget's
        reservation), journal, pay (the rail), deliver the proof, settle. Its record
        (`_record.PaymentRecord`) keeps both stores and decides the outcome."""
        rail, entry, intent = candidate.rail, candidate.entry, candidate.intent
        record = guard.record = self._record(guard, rail, intent)
        ending: _Ending = ("unknown", None, None)
        try:
            await self._approve(record, intent, request)
            if self.state.journal is not None:
                await self._journal(record, request, body, entry)
            record.calling_rail(intent.rail)
            async with rail.pay(entry, intent, guard.settings, record.note) as paid:
                paid = self._framed(rail, paid, challenge, candidate.index, record)
                made = await self._proved(guard, record, intent, paid)
                result = await self._deliver(
                    guard, request, body, send, intent, paid, record, made=made
                )
            ending = await self._settle(guard, rail, paid, record, result)
            return result
        except BaseException as exc:
            ending = self._ended_by(record, exc, request)
            raise
        finally:
            await record.finish(ending[0], error=ending[1], dead_proof=ending[2])

    # --- the steps of one payment ------------------------------------------------------------

    def _record(self, guard: LogicalRequest, rail: Rail, intent: PaymentIntent) -> PaymentRecord:
        settings = guard.settings
        return PaymentRecord(
            self.state,
            intent,
            moves_first=rail.money_moves_before_proof,
            resume_transaction_code=settings.resume_transaction_code,
            journal_id=settings.journal_id,
        )

    async def _approve(
        self, record: PaymentRecord, intent: PaymentIntent, request: httpx.Request
    ) -> None:
        """The user's hook approves, then the budget reserves the amount (the caps were
        checked by the selection)."""
        await self._ask_hook(intent, request)
        await record.reserve(intent)

    @staticmethod
    async def _journal(
        record: PaymentRecord, request: httpx.Request, body: bytes, entry: AcceptEntry
    ) -> None:
        """The journal learns the payment (and the request to re-send) before the rail runs."""
        await record.open(
            request_method=request.method,
            request_url=str(request.url),
            request_body=body,
            request_headers=request.headers.multi_items(),
            payment_request_code=getattr(entry, "payment_request_code", None),
        )

    @staticmethod
    def _framed(
        rail: Rail, paid: Paid, challenge: Challenge, index: int, record: PaymentRecord
    ) -> Paid:
        """The rail's proof, framed the way this 402 speaks when the rail leaves that to
        the dialect (`Rail.frames_own_proof`), with the payment's identifier when the 402
        declared the `payment-identifier` extension (the journal's id of this payment: the
        same in every send of the proof, recovery's included)."""
        if rail.frames_own_proof or paid.payload is None:
            return paid
        payment_id = (
            None
            if challenge.payment_identifier is None
            else payment_id_for(record.journal_id or record.id)
        )
        header, framed = encode_payment(
            challenge, challenge.accepts[index], paid.payload, payment_id=payment_id
        )
        return dataclasses.replace(paid, proof=framed, header=header)

    async def _proved(
        self, guard: LogicalRequest, record: PaymentRecord, intent: PaymentIntent, paid: Paid
    ) -> PaymentReceipt:
        """The proof exists: recorded before it leaves the process; its receipt counts."""
        await record.prove(
            paid.proof,
            payment_request_code=paid.payment_request_code,
            transaction_code=paid.transaction_code,
            blockchain_tx_id=paid.blockchain_tx_id,
        )
        made = receipt_of(intent, paid, datetime.now(timezone.utc), guard.payments + 1)
        guard.paid(made, certain=record.moves_first)
        _log_payment(logging.DEBUG, "proving", intent)
        return made

    async def _settle(
        self,
        guard: LogicalRequest,
        rail: Rail,
        paid: Paid,
        record: PaymentRecord,
        result: httpx.Response | PayFresh,
    ) -> _Ending:
        """The delivery ended without an error: served (the record and `on_payment` hear
        of it), or the merchant wants a fresh payment (this proof is dead)."""
        if isinstance(result, PayFresh):
            used = classify_reason(result.reason) is VerifierReason.USED
            outcome: Outcome = "paid" if record.moves_first and used else "unknown"
            return outcome, result.reason, result.reason
        receipt = result.extensions.get(RECEIPT_EXTENSION)
        record.served(getattr(receipt, "tx_hash", None))
        if isinstance(receipt, PaymentReceipt) and receipt.authorized_amount is not None:
            receipt = await self._book_settled(guard, rail, paid, record, receipt, result)
        if isinstance(result.stream, GuardedStream):
            result.stream.on_broken = self._broken_body(record)
        await self._notify("on_payment", receipt)
        _log_payment(logging.INFO, "paid", record.entry.intent)
        return "paid", None, None

    @staticmethod
    async def _book_settled(
        guard: LogicalRequest,
        rail: Rail,
        paid: Paid,
        record: PaymentRecord,
        receipt: PaymentReceipt,
        response: httpx.Response,
    ) -> PaymentReceipt:
        """An `upto` payment was served: book what the chain says moved, never what the
        merchant's settlement response claims; where the chain cannot tell, the maximum
        stays booked. The receipt says which. A claim of more than was authorized is
        refused: the money moved, but not as the merchant says."""
        intent = record.entry.intent
        metered = cast(MeteredRail, rail)
        check = await metered.check_settlement(intent, paid.payload, receipt.tx_hash)
        settled = await record.settle(check)
        receipt = dataclasses.replace(
            receipt,
            amount=intent.amount if settled is None else settled,
            settled_amount=settled,
            settlement_verified=settled is not None,
        )
        response.extensions = {**response.extensions, RECEIPT_EXTENSION: receipt}
        guard.settled(receipt)
        claimed = receipt.claimed_amount
        if claimed is None or claimed <= intent.amount:
            if settled is not None and claimed is not None and claimed != settled:
                logger.warning(
                    "x402: the merchant claims %s; the chain says %s moved", claimed, settled
                )
            return receipt
        shown = f"{format_amount(claimed)} {intent.currency}"
        authorized = f"{format_amount(intent.amount)} {intent.currency}"
        raise PaymentVerificationFailed(
            f"the merchant's settlement response claims {shown}, more than the {authorized} "
            "the payment authorized; the payment was made (at most the authorized amount "
            "can move), and the ledger and budgets keep what the chain says moved (the "
            "authorized maximum where it cannot tell)",
            reason="settlement exceeds the authorized amount",
            receipt=receipt,
            proof=receipt.proof,
            intent=intent,
            response=response,
            money_moved=True,
        )

    @staticmethod
    def _ended_by(record: PaymentRecord, exc: BaseException, request: httpx.Request) -> _Ending:
        """The outcome of an attempt that `exc` ended (`_record.outcome_of` decides)."""
        outcome = (
            "paid"
            if record.settled
            else outcome_of(
                exc,
                rail_called=record.rail_called,
                proved=record.proved,
                moves_first=record.moves_first,
            )
        )
        error = f"{type(exc).__name__}: {getattr(exc, 'reason', None) or exc}"
        if isinstance(exc, PaymentOutcomeUnknown):
            found = record.entry
            found.proof = found.proof or exc.proof
            found.transaction_code = found.transaction_code or exc.transaction_code
            found.payment_request_code = found.payment_request_code or exc.payment_request_code
        if not record.proved and record.moves_first and outcome == "unknown":
            logger.warning("x402: payment interrupted; its outcome is unknown (%s)", error)
        record.ended_by = exc
        record.request = request
        return outcome, error, None

    @staticmethod
    def _typed(exc: Exception, record: PaymentRecord) -> X402Error:
        """The typed error for an untyped one that ended the attempt of `record`: what it
        means for the money, by how far the payment got."""
        what = f"{type(exc).__name__}: {exc}"
        entry = record.entry
        if entry.outcome == "failed":
            error: X402Error = PaymentFailed(
                f"the payment stopped before any money moved ({what}); nothing was paid",
                intent=entry.intent,
            )
        else:
            error = PaymentOutcomeUnknown(
                f"the payment was interrupted ({what}); money may have moved. Never pay "
                "again for this request: re-send the proof or resume the transaction",
                proof=entry.proof,
                payment_request_code=entry.payment_request_code,
                transaction_code=entry.transaction_code,
                intent=entry.intent,
            )
        if record.request is not None:
            error.request = record.request
        return error

    def _broken_body(self, record: PaymentRecord) -> Callable[[X402Error], Awaitable[None]]:
        async def broken(error: X402Error) -> None:
            await record.broken()
            error._concluded = True
            await self._notify("on_payment_error", error)

        return broken

    async def _ask_hook(self, intent: PaymentIntent, request: httpx.Request) -> None:
        """`on_before_payment` approves with `True` only: the hook fails closed."""
        hook = self.options.on_before_payment
        if hook is None:
            return
        try:
            verdict = await _call(hook, intent)
        except Exception as exc:
            raise PaymentRejectedByHook(
                f"on_before_payment raised {type(exc).__name__}; nothing was paid",
                request=request,
                intent=intent,
            ) from exc
        if verdict is not True:
            shown = repr(verdict) if len(repr(verdict)) <= 60 else type(verdict).__name__
            raise PaymentRejectedByHook(
                f"on_before_payment returned {shown}; only True approves a payment; "
                "nothing was paid",
                request=request,
                intent=intent,
            )

    async def _deliver(
        self,
        guard: LogicalRequest,
        request: httpx.Request,
        body: bytes,
        send: Send,
        intent: PaymentIntent,
        paid: Paid,
        record: PaymentRecord,
        *,
        made: PaymentReceipt,
    ) -> httpx.Response | PayFresh:
        """Deliver the proof of the payment `record` (`_deliver.deliver`)."""
        return await deliver(
            guard, request, body, send, intent, paid,
            options=self.options, record=record, moves_first=record.moves_first, made=made,
        )  # fmt: skip

    #: The receipt of a payment whose proof exists (`_deliver.receipt_of`).
    _receipt = staticmethod(receipt_of)


def _log_payment(level: int, what: str, intent: PaymentIntent) -> None:
    if logger.isEnabledFor(level):
        logger.log(
            level,
            "x402: %s %s %s on %s (%s) to %s for %s",
            what,
            format_amount(intent.amount),
            intent.currency,
            intent.network,
            intent.rail,
            intent.pay_to,
            safe_url(intent.resource),
        )
