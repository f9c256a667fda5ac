"""The payer: what happens between a 402 and the response it unlocks.

One payment, in order: read the challenge (`_dialects`) -> select the candidates
(`_policy.select`, pure) -> approve (the hook) -> reserve, journal, pay (`_record`, the
rail) -> deliver the proof (`_delivery.Delivery`, pure) -> settle (`_record.finish`).
This module wires those pieces to I/O; the caller's logical request, which all hops share,
is `_request.LogicalRequest`, and the bodies around a payment are `_streams`'.

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
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timezone
from typing import Any

import anyio
import httpx

from ._amounts import format_amount
from ._challenge import (
    InvalidEntry,
    VerifierReason,
    classify_reason,
    parse_failure_body,
)
from ._delivery import Delivery, Step
from ._dialects import Challenge, challenge_of, encode_payment
from ._exceptions import (
    BudgetExceeded,
    ChallengeError,
    ConfigurationError,
    InvalidChallenge,
    NoSatisfiableOption,
    PaymentFailed,
    PaymentNotConfirmed,
    PaymentOutcomeUnknown,
    PaymentRefused,
    PaymentRejectedByHook,
    PaymentVerificationFailed,
    UnreplayableRequest,
    X402Error,
)
from ._http import known_small, read_upto
from ._ledger import LedgerEntry, Outcome
from ._options import PaymentOptions
from ._payment_api import PaymentAPI
from ._policy import Candidate, SkippedEntry, SkipReason, no_candidate_error, select
from ._progress import PaymentProgress
from ._proof import ProofError, b64_json_decode
from ._rails import Paid, Rail, build_rails
from ._record import PaymentRecord, outcome_of, refused_money_moved
from ._redact import guard_library_logs, safe_url
from ._request import (
    RECEIPT_EXTENSION,
    REDIRECTS,
    LogicalRequest,
    redirect_target,
)
from ._state import KeyedLocks, PaymentState, state_of
from ._streams import GuardedStream, hand_back, rebuild, replayable_body
from ._types import PaymentIntent, PaymentReceipt

__all__ = ["Payer"]

logger = logging.getLogger("x402_client")

Send = Callable[[httpx.Request], Awaitable[httpx.Response]]

_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
_SETTLEMENT_HEADERS = ("X-PAYMENT-RESPONSE", "PAYMENT-RESPONSE")


# --- small helpers -----------------------------------------------------------------------------


class _PayFresh:
    """The merchant said the proof is used or expired: pay a fresh 402."""

    def __init__(self, reason: str, proof: str) -> None:
        self.reason = reason
        self.proof = proof


async def _call(callback: Callable[[Any], Any], argument: Any) -> Any:
    """Call a user callback that may be sync or async."""
    result = callback(argument)
    return await result if inspect.isawaitable(result) else result


def _settlement(response: httpx.Response) -> Mapping[str, Any] | None:
    return _settlement_of(response.headers)


def _settlement_of(headers: httpx.Headers) -> Mapping[str, Any] | None:
    for name in _SETTLEMENT_HEADERS:
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


def _failure_reason(body: bytes, headers: httpx.Headers) -> str | None:
    """Why the merchant refused a paid retry: the body's `error` (euro gates, v1), the
    `errorReason` of a `PAYMENT-RESPONSE`, or the `error` of a fresh `PAYMENT-REQUIRED`."""
    reason, _ = parse_failure_body(body)
    if reason:
        return reason
    settlement = _settlement_of(headers)
    if settlement is not None:
        for key in ("errorReason", "errorMessage"):
            if isinstance(settlement.get(key), str) and settlement[key]:
                return str(settlement[key])
    header = headers.get("payment-required")
    if header:
        try:
            data = b64_json_decode(header, limit=65_536)
        except ProofError:
            return None
        if isinstance(data, dict) and isinstance(data.get("error"), str):
            return str(data["error"])
    return None


# --- the payer ---------------------------------------------------------------------------------


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
        self._rails: list[Rail] = build_rails(self)

    def __repr__(self) -> str:
        return f"Payer(rails={[r.name for r in self._rails]})"

    @property
    def rails(self) -> list[Rail]:
        return list(self._rails)

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
        if record is not None and guard.receipts:
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
        if challenge is None:
            return guard.finish_hop(as_read)
        recovery = settings.proof is not None or settings.resume_transaction_code is not None
        if recovery and not guard.is_first_origin(request):
            # Recovery settings belong to the origin they were given for: never carried to
            # another one, and a recovery request pays nothing new anywhere.
            logger.info("x402: a redirect led a recovery request to another origin; not paying")
            return guard.finish_hop(as_read)
        if guard.payments:
            raise PaymentVerificationFailed(
                f"the merchant asked for payment again (at {request.url.host}) after this "
                "request was paid; not paying twice for one request",
                reason="payment required again after payment",
                proof=guard.receipts[-1].proof,
                receipts=guard.receipts,
                money_moved=None if any(guard.uncertain) else True,
            )
        body = replayable_body(request)
        if body is None:
            raise UnreplayableRequest(
                "the request body is a one-shot stream and could not be re-sent with the "
                "payment; nothing was paid. Send it as bytes (content=, json=, data=).",
                request=request,
                response=as_read,
            )
        if settings.proof is not None:
            return guard.finish_hop(
                await self._resend(guard, request, body, send, challenge, settings.proof)
            )
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
                if b"x402Version" in head[:4096] or "payment-required" in response.headers:
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
    ) -> httpx.Response | _PayFresh:
        """Pay the first candidate that preparation, the hook and the budget allow."""
        settings = guard.settings
        budgets = self.state.budgets
        headroom = await budgets.headroom() if budgets.budgets else {}
        selection = select(
            challenge.accepts,
            rails=self._rails,
            options=self.options,
            settings=settings,
            headroom=headroom,
            now=time.time(),
            resource=str(request.url),
            parse=challenge.parse_entry,
        )
        skipped: list[SkippedEntry] = list(selection.skipped)
        tried = 0
        for candidate in selection.candidates:
            if tried >= self.options.max_candidates:
                skipped.append(
                    SkippedEntry(
                        candidate.index,
                        SkipReason.NOT_TRIED,
                        f"not tried: {self.options.max_candidates} candidates were prepared "
                        "already (max_candidates)",
                        candidate.intent,
                    )
                )
                continue
            tried += 1
            problem = await candidate.rail.prepare(candidate.entry, candidate.intent)
            if problem is not None:
                skipped.append(
                    SkippedEntry(
                        candidate.index, SkipReason.PREPARE_FAILED, problem, candidate.intent
                    )
                )
                continue
            try:
                return await self._attempt(guard, challenge, candidate, request, body, send)
            except BudgetExceeded as exc:
                # Another request took the headroom meanwhile: a cheaper entry may still fit.
                skipped.append(
                    SkippedEntry(
                        candidate.index, SkipReason.OVER_BUDGET, str(exc), candidate.intent
                    )
                )
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
    ) -> httpx.Response | _PayFresh:
        """One payment of one intent: ask, reserve, journal, pay, deliver. Its record
        (`_record.PaymentRecord`) keeps both stores and decides the outcome."""
        rail, entry, intent = candidate.rail, candidate.entry, candidate.intent
        settings = guard.settings
        record = PaymentRecord(
            self.state,
            intent,
            moves_first=rail.money_moves_before_proof,
            resume_transaction_code=settings.resume_transaction_code,
            journal_id=settings.journal_id,
        )
        guard.record = record
        outcome: Outcome | None = None
        error: str | None = None
        dead_proof: str | None = None
        try:
            await self._ask_hook(intent, request)
            await record.reserve(intent)
            await record.open(
                request_method=request.method,
                request_url=str(request.url),
                request_body=body,
                request_headers=request.headers.multi_items(),
                payment_request_code=getattr(entry, "payment_request_code", None),
            )
            record.calling_rail(intent.rail)
            async with rail.pay(entry, intent, settings, record.note) as paid:
                if paid.payload is not None:
                    # A standard-world rail: frame its payload the way this 402 speaks.
                    header, framed = encode_payment(
                        challenge, challenge.accepts[candidate.index], paid.payload
                    )
                    paid = dataclasses.replace(paid, proof=framed, header=header)
                await record.prove(
                    paid.proof,
                    payment_request_code=paid.payment_request_code,
                    transaction_code=paid.transaction_code,
                    blockchain_tx_id=paid.blockchain_tx_id,
                )
                made = self._receipt(intent, paid, datetime.now(timezone.utc), guard.payments + 1)
                guard.paid(made, certain=record.moves_first)
                if logger.isEnabledFor(logging.DEBUG):
                    logger.debug(
                        "x402: proving %s %s on %s (%s) to %s for %s",
                        format_amount(intent.amount),
                        intent.currency,
                        intent.network,
                        intent.rail,
                        intent.pay_to,
                        safe_url(intent.resource),
                    )
                result = await self._deliver(
                    guard, request, body, send, intent, paid, record, made=made
                )
            if isinstance(result, httpx.Response):
                outcome = "paid"
                receipt = result.extensions.get(RECEIPT_EXTENSION)
                record.served(getattr(receipt, "tx_hash", None))
                if isinstance(result.stream, GuardedStream):
                    result.stream.on_broken = self._broken_body(record)
                await self._notify("on_payment", receipt)
                if logger.isEnabledFor(logging.INFO):
                    logger.info(
                        "x402: paid %s %s on %s (%s) to %s for %s",
                        format_amount(intent.amount),
                        intent.currency,
                        intent.network,
                        intent.rail,
                        intent.pay_to,
                        safe_url(intent.resource),
                    )
            else:
                used = classify_reason(result.reason) is VerifierReason.USED
                outcome = "paid" if record.moves_first and used else "unknown"
                error = dead_proof = result.reason
            return result
        except BaseException as exc:
            outcome = outcome_of(
                exc,
                rail_called=record.rail_called,
                proved=record.proved,
                moves_first=record.moves_first,
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
            raise
        finally:
            await record.finish(outcome or "unknown", error=error, dead_proof=dead_proof)

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

    async def _resend(
        self,
        guard: LogicalRequest,
        request: httpx.Request,
        body: bytes,
        send: Send,
        challenge: Challenge,
        proof: str,
    ) -> httpx.Response:
        """Re-send a proof the client already paid for (recovery): no new payment."""
        try:
            decoded = b64_json_decode(proof)
        except ProofError as exc:
            raise ConfigurationError(f"the proof to re-send cannot be decoded: {exc}") from None
        if not isinstance(decoded, dict):
            raise ConfigurationError("the proof to re-send is not a JSON object")
        # A v2 standard proof names its entry in `accepted`; the others carry scheme/network.
        accepted = decoded.get("accepted")
        named = accepted if isinstance(accepted, dict) else decoded
        scheme, network = named.get("scheme"), named.get("network")
        header = "PAYMENT-SIGNATURE" if isinstance(accepted, dict) else "X-PAYMENT"
        for raw in challenge.accepts:
            try:
                entry = challenge.parse_entry(raw)
            except InvalidEntry:
                continue
            if entry is None or (entry.scheme, entry.network) != (scheme, network):
                continue
            for rail in self._rails:
                intent = rail.describe(entry, str(request.url))
                if isinstance(intent, str):
                    continue
                record = self.state.ledger.find(proof)
                result = await self._deliver(
                    guard,
                    request,
                    body,
                    send,
                    intent,
                    Paid(proof=proof, header=header),
                    record,
                    moves_first=rail.money_moves_before_proof,
                    resend=True,
                )
                if not isinstance(result, httpx.Response):
                    raise PaymentVerificationFailed(
                        f"the merchant refused the re-sent proof: {result.reason}",
                        reason=result.reason,
                        proof=proof,
                        request=request,
                        intent=intent,
                        money_moved=refused_money_moved(rail.money_moves_before_proof),
                    )
                await self._close_resent(proof, decoded, record)
                return result
        raise NoSatisfiableOption(
            f"the 402 lists no {scheme} entry on {network} for the re-sent proof",
            request=request,
        )

    async def _close_resent(
        self, proof: str, decoded: Mapping[str, Any], entry: LedgerEntry | None
    ) -> None:
        """A re-sent proof was served: the payment it belongs to is delivered, in the
        ledger and in the journal (found by the proof, or a euro proof's request code)."""
        if entry is not None and not entry.delivered:
            entry.delivered = True
            entry.finish("paid")
        journal = self.state.journal
        if journal is None:
            return
        payload = decoded.get("payload")
        code = payload.get("paymentRequestCode") if isinstance(payload, dict) else None
        try:
            with anyio.CancelScope(shield=True):
                found = await journal.find_by_proof(proof, code if isinstance(code, str) else None)
                if found is not None and not (found.delivered and found.outcome == "paid"):
                    await journal.finish_payment(found.id, "paid", delivered=True)
        except Exception as exc:
            logger.error(
                "x402: the payment journal could not record a re-sent proof's delivery (%s)",
                type(exc).__name__,
            )

    # --- delivering the proof ----------------------------------------------------------------

    @staticmethod
    def _receipt(
        intent: PaymentIntent,
        paid: Paid,
        paid_at: datetime,
        payments: int,
        settlement: Mapping[str, Any] | None = None,
        *,
        reused: bool = False,
    ) -> PaymentReceipt:
        """The receipt of a payment whose proof exists; `_deliver` makes it again with the
        merchant's settlement (and the transaction it names) when the answer carries one."""
        return PaymentReceipt(
            rail=intent.rail,
            scheme=intent.scheme,
            network=intent.network,
            asset=intent.asset,
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
        )

    async def _deliver(
        self,
        guard: LogicalRequest,
        request: httpx.Request,
        body: bytes,
        send: Send,
        intent: PaymentIntent,
        paid: Paid,
        record: PaymentRecord | LedgerEntry | None = None,
        *,
        moves_first: bool | None = None,
        resend: bool = False,
        made: PaymentReceipt | None = None,
    ) -> httpx.Response | _PayFresh:
        """Send the proof and act on the answers (`_delivery.Delivery` decides). `made`: the
        receipt of the payment behind `paid`, when this request made it; a re-sent proof
        (`resend`) gets a receipt that says so and counts no payment."""
        options = self.options
        if moves_first is None:
            moves_first = isinstance(record, PaymentRecord) and record.moves_first
        machine = Delivery(
            confirmation_attempts=options.confirmation_attempts,
            confirmation_wait=options.confirmation_wait,
            confirmation_max_wait=options.confirmation_max_wait,
            merchant_error_retries=options.merchant_error_retries,
            resend=resend,
        )
        paid_request = rebuild(request, body, paid.proof, paid.header)
        if made is None:
            made = self._receipt(
                intent,
                paid,
                datetime.now(timezone.utc),
                0 if resend else max(guard.payments, 1),
                reused=resend,
            )
        base = made

        def receipt(response: httpx.Response | None = None) -> PaymentReceipt:
            settlement = None if response is None else _settlement(response)
            if settlement is None:
                return base
            return self._receipt(
                intent, paid, base.paid_at, base.payments, settlement, reused=base.reused
            )

        def unknown(message: str, answer: httpx.Response | None = None) -> PaymentOutcomeUnknown:
            return PaymentOutcomeUnknown(
                message,
                proof=paid.proof,
                payment_request_code=paid.payment_request_code,
                transaction_code=paid.transaction_code,
                receipt=receipt(),
                request=paid_request,
                intent=intent,
                response=answer,
                status_code=None if answer is None else answer.status_code,
            )

        while True:
            machine.sending()
            if record is not None:
                record.step("sent", str(paid_request.url))
            try:
                response = await send(paid_request)
            except httpx.TransportError as exc:
                decision = machine.failed_in_transit(
                    never_sent=isinstance(exc, _NOT_SENT), error=type(exc).__name__
                )
                if decision.step is Step.RETRY:
                    await anyio.sleep(decision.wait)
                    continue
                raise unknown(decision.reason or "lost in transit") from exc
            status = response.status_code
            if record is not None:
                record.step("answer", str(status))
            reason: str | None = None
            if status == 402:
                head, rest = await read_upto(response, options.max_body_bytes)
                await response.aclose()
                reason = _failure_reason(head if rest is None else b"", response.headers)
            elif status >= 500:
                await response.aclose()
            decision = machine.answered(status, reason)
            step = decision.step
            if step is Step.RETRY:
                if reason is not None:
                    logger.debug("x402: %s; re-sending the same proof", reason)
                await anyio.sleep(decision.wait)
                continue
            if step is Step.SERVED:
                served = receipt(response)
                if not resend:
                    guard.settled(served)
                response.extensions = {**response.extensions, RECEIPT_EXTENSION: served}
                if isinstance(response.stream, httpx.AsyncByteStream):
                    response.stream = GuardedStream(response.stream, unknown)
                return response
            shown = decision.reason or "402 without a reason"
            if step is Step.NOT_DELIVERED:
                # Paid, and the merchant answered something other than the resource: the
                # proof stays good to re-send; the answer rides on the error, readable.
                head, rest = await read_upto(response, options.max_body_bytes)
                await response.aclose()
                answer = hand_back(response, head if rest is None else b"", None)
                advice = (
                    "; the payment was made"
                    if moves_first
                    else ("; the signed payment was handed over and may still be settled")
                )
                message = f"{shown}{advice}; re-sending the proof is safe"
                if moves_first:
                    raise PaymentVerificationFailed(
                        message,
                        reason=shown,
                        receipt=receipt(),
                        proof=paid.proof,
                        request=paid_request,
                        intent=intent,
                        response=answer,
                    )
                raise unknown(message, answer)
            if step is Step.PAY_FRESH:
                return _PayFresh(shown, paid.proof)
            if step is Step.UNKNOWN:
                raise unknown(shown if resend else f"{shown}; the payment was made")
            if step is Step.NOT_CONFIRMED:
                advice = (
                    "the payment behind this proof has not been confirmed (or never made)"
                    if resend
                    else "the payment was made; re-send the proof later"
                )
                raise PaymentNotConfirmed(
                    f"the merchant still says {shown!r} after "
                    f"{options.confirmation_attempts} attempts; {advice}",
                    reason=shown,
                    receipt=receipt(),
                    proof=paid.proof,
                    request=request,
                    intent=intent,
                )
            raise PaymentVerificationFailed(
                f"the merchant refused the payment proof: {shown}",
                reason=shown,
                receipt=receipt(),
                proof=paid.proof,
                request=paid_request,
                intent=intent,
                money_moved=refused_money_moved(moves_first),
            )
