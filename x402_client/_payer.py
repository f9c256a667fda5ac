"""The payer: what happens between a 402 and the response it unlocks.

`Payer.handle_402` is called by `PaymentTransport` with the 402 response and the inner
transport's `send`. All state of one payment lives in local variables and in the
request's extensions, never on the shared instance, so concurrent requests cannot see
each other's payments.

The flow for one request:

1. read the 402 body (bounded) and parse it; refuse a one-shot request body;
2. pick the first `accepts` entry a rail can pay, build the `PaymentIntent`;
3. enforce `max_amount_per_payment` (and the per-request override), ask
   `on_before_payment`;
4. pay (`rail.pay`), re-send the same request with `X-PAYMENT`;
5. on the merchant's answer: "not confirmed" -> re-send the same proof after a backoff;
   "already used" / "expired" -> ask for a fresh 402 and pay it, once per request;
   5xx -> re-send the same proof (bounded); any other 402 -> `PaymentVerificationFailed`;
   anything else -> the response, with the receipt in `extensions["x402_payment"]`.

Money moves at most once per intent: a proof the merchant may already have consumed
(after a 5xx or a transit failure) is never followed by a second payment.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

import anyio
import httpx

from ._amounts import AmountError, format_amount, parse_amount
from ._budget import Budgets, Reservation
from ._challenge import (
    AcceptEntry,
    InvalidEntry,
    VerifierReason,
    classify_reason,
    parse_accept,
    parse_failure_body,
    parse_payment_required,
    prefer_order,
)
from ._exceptions import (
    AmountLimitExceeded,
    ConfigurationError,
    InvalidChallenge,
    NoSatisfiableOption,
    PaymentNotConfirmed,
    PaymentOutcomeUnknown,
    PaymentRejectedByHook,
    PaymentVerificationFailed,
    UnreplayableRequest,
    X402Error,
)
from ._http import BodyTooLarge, read_bounded
from ._ledger import LedgerEntry, Outcome, PaymentLedger
from ._models import PaymentRequired
from ._options import PaymentOptions
from ._payment_api import PaymentAPI
from ._progress import PaymentProgress
from ._proof import ProofError, b64_json_decode, decode_proof
from ._rails import Paid, Rail, RequestSettings
from ._types import PaymentIntent, PaymentReceipt

__all__ = ["EXTENSION", "RECEIPT_EXTENSION", "Payer"]

logger = logging.getLogger("x402_client")

#: `request.extensions[EXTENSION]`: per-request settings, e.g. `{"pay": False}`,
#: `{"max_amount_per_payment": "0.05"}` (can only lower the client's cap) or
#: `{"resume_transaction_code": "QP..."}` (prove an earlier bridge payment, pay nothing).
EXTENSION = "x402"
#: `response.extensions[RECEIPT_EXTENSION]`: the `PaymentReceipt` of a paid response.
RECEIPT_EXTENSION = "x402_payment"

Send = Callable[[httpx.Request], Awaitable[httpx.Response]]

_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
_SETTLEMENT_HEADERS = ("X-PAYMENT-RESPONSE", "PAYMENT-RESPONSE")


@dataclasses.dataclass(frozen=True)
class _PayFresh:
    """The merchant said the proof is used or expired: pay a fresh 402."""

    reason: str
    proof: str


class _NotConfirmed:
    """The verifier said "not confirmed": wait, then re-send the same proof."""


_NOT_CONFIRMED = _NotConfirmed()
_DEFAULT_SETTINGS = RequestSettings()


@dataclasses.dataclass
class _Delivery:
    """Mutable state of delivering one proof; lives for one `_deliver` call."""

    request: httpx.Request
    intent: PaymentIntent
    paid: Paid
    payments: int
    paid_at: datetime
    record: LedgerEntry | None = None
    last_reason: str | None = None
    merchant_errors: int = 0
    connect_failures: int = 0
    # Once the merchant may have consumed the proof (it answered 5xx), a later "already
    # used" is no reason to pay again: it may mean our own earlier delivery.
    maybe_consumed: bool = False


class _GuardedStream(httpx.AsyncByteStream):
    """The body of a paid response: a transit failure while reading it becomes
    `PaymentOutcomeUnknown` carrying the proof, so the caller learns the payment was made
    and the resource was lost, and can re-send the proof."""

    def __init__(self, stream: httpx.AsyncByteStream, unknown: Callable[[str], Exception]) -> None:
        self._stream = stream
        self._unknown = unknown

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._stream:
                yield chunk
        except httpx.TransportError as exc:
            raise self._unknown(
                f"the paid response broke off in transit ({type(exc).__name__}); the payment "
                "was made; re-sending the proof is safe"
            ) from exc

    async def aclose(self) -> None:
        await self._stream.aclose()


async def _call(callback: Callable[[Any], Any], argument: Any) -> Any:
    """Call a user callback that may be sync or async."""
    result = callback(argument)
    return await result if inspect.isawaitable(result) else result


def _overrides(request: httpx.Request) -> RequestSettings:
    raw = request.extensions.get(EXTENSION)
    if raw is None:
        return RequestSettings()
    if not isinstance(raw, Mapping):
        raise ConfigurationError(f"request.extensions[{EXTENSION!r}] must be a mapping")
    unknown = set(raw) - {"pay", "max_amount_per_payment", "resume_transaction_code", "proof"}
    if unknown:
        raise ConfigurationError(f"unknown per-request x402 settings: {sorted(unknown)}")
    pay = raw.get("pay", True)
    if not isinstance(pay, bool):
        raise ConfigurationError("request.extensions['x402']['pay'] must be a bool")
    limits: dict[str, Decimal] | None = None
    cap = raw.get("max_amount_per_payment")
    if cap is not None:
        items = cap.items() if isinstance(cap, Mapping) else [("EUR", cap)]
        try:
            limits = {str(k).upper(): parse_amount(v, allow_zero=True) for k, v in items}
        except AmountError as exc:
            raise ConfigurationError(f"per-request max_amount_per_payment: {exc}") from None
    resume = raw.get("resume_transaction_code")
    if resume is not None and not isinstance(resume, str):
        raise ConfigurationError("resume_transaction_code must be a string")
    proof = raw.get("proof")
    if proof is not None and not isinstance(proof, str):
        raise ConfigurationError("proof must be the X-PAYMENT string")
    return RequestSettings(pay=pay, limits=limits, resume_transaction_code=resume, proof=proof)


def _replayable_body(request: httpx.Request) -> bytes | None:
    try:
        return request.content
    except httpx.RequestNotRead:
        return None


def _rebuild(request: httpx.Request, body: bytes, proof: str | None = None) -> httpx.Request:
    headers = request.headers.copy()
    if proof is not None:
        headers["X-PAYMENT"] = proof
    return httpx.Request(
        request.method,
        request.url,
        headers=headers,
        content=body,
        extensions=dict(request.extensions),
    )


def _settlement(response: httpx.Response) -> Mapping[str, Any] | None:
    for name in _SETTLEMENT_HEADERS:
        value = response.headers.get(name)
        if value:
            try:
                decoded = b64_json_decode(value)
            except ProofError:
                return {"raw": value}
            return decoded if isinstance(decoded, dict) else {"value": decoded}
    return None


class Payer:
    """Pays 402 challenges with the rails that `options` enable. Shared by the transports
    of one client; holds no per-request state.
    """

    def __init__(self, options: PaymentOptions) -> None:
        self.options = options
        self._api: PaymentAPI | None = None
        self.ledger: PaymentLedger = (
            options.ledger if options.ledger is not None else PaymentLedger()
        )
        self.budgets = Budgets(options.budgets, options.budget_store)
        self._rails: list[Rail] = self._build_rails()

    def __repr__(self) -> str:
        return f"Payer(rails={[r.name for r in self._rails]})"

    def _build_rails(self) -> list[Rail]:
        from ._rails.euro import EuroRail

        rails: list[Rail] = [EuroRail(self)]
        if self.options.evm is not None:
            from ._rails.evm import EvmPermitRail

            rails.append(EvmPermitRail(self, self.options.evm))
        from ._rails.bridge import BridgeRail

        rails.append(BridgeRail(self))
        return rails

    @property
    def rails(self) -> list[Rail]:
        return list(self._rails)

    # --- RailContext ------------------------------------------------------------------------

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
        callback = self.options.on_progress
        if callback is None:
            return
        try:
            await _call(callback, event)
        except Exception:  # a broken progress display must not break a payment
            logger.exception("on_progress callback failed")

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
        self, request: httpx.Request, response: httpx.Response, send: Send
    ) -> httpx.Response:
        settings = _overrides(request)
        if not settings.pay:
            return response
        body = _replayable_body(request)
        challenge = await self._read_challenge(response, request)
        if body is None:
            raise UnreplayableRequest(
                "the request body is a one-shot stream and could not be re-sent with the "
                "payment; nothing was paid. Send it as bytes (content=, json=, data=).",
                request=request,
            )
        if settings.proof is not None:
            return await self._resend(request, body, send, challenge, settings.proof)
        payments = 0
        asked_fresh = False
        while True:
            rail, entry, intent = await self._choose(challenge, request, settings)
            payments += 1
            outcome = await self._attempt(
                rail, entry, intent, settings, request, body, send, payments
            )
            if isinstance(outcome, httpx.Response):
                return outcome
            if asked_fresh:
                raise PaymentVerificationFailed(
                    f"the merchant refused the fresh payment too: {outcome.reason}",
                    reason=outcome.reason,
                    proof=outcome.proof,
                    request=request,
                    intent=intent,
                )
            asked_fresh = True
            logger.info("x402: proof %s; asking for a fresh 402", outcome.reason)
            fresh = await send(_rebuild(request, body))
            if fresh.status_code != 402:
                return fresh
            challenge = await self._read_challenge(fresh, request)

    async def _attempt(
        self,
        rail: Rail,
        entry: AcceptEntry,
        intent: PaymentIntent,
        settings: RequestSettings,
        request: httpx.Request,
        body: bytes,
        send: Send,
        payments: int,
    ) -> httpx.Response | _PayFresh:
        """One payment of one intent, with its ledger entry and budget reservation.

        Outcome rules (docs/failure-semantics.md): refused or failed before the proof
        exists -> `failed`, reservation released; after the proof exists -> `paid` when
        the merchant served, else `paid` (undelivered) on rails where the proof means the
        money already moved (euro, bridge) and `unknown` where the merchant settles it
        (EVM permit); `PaymentOutcomeUnknown` before the proof -> `unknown`. Only `failed`
        gives the reservation back. A resumed bridge payment reuses the entry of the
        payment it resumes and never downgrades it to `failed`: a refused resume says
        nothing about whether that earlier money moved.
        """
        resuming = settings.resume_transaction_code
        found = self.ledger.find_transaction(resuming) if resuming else None
        record = found if found is not None else self.ledger.open(intent)
        if resuming:
            record.step("resumed", resuming)
        moves_first = getattr(rail, "money_moves_before_proof", True)
        held: list[Reservation] = []
        proof: str | None = None
        outcome: Outcome = "unknown"
        error: str | None = None
        try:
            self._check_limits(intent, settings, request)
            await self._ask_hook(intent, request)
            # A resumed payment was reserved (and paid) when it was made.
            held = [] if resuming else await self.budgets.reserve(intent)
            if held:
                record.step("reserved", ", ".join(r.budget.key for r in held))
            record.step("paying", intent.rail)
            async with rail.pay(entry, intent, settings) as paid:
                proof = paid.proof
                record.proof = paid.proof
                record.payment_request_code = paid.payment_request_code
                record.transaction_code = paid.transaction_code
                record.blockchain_tx_id = paid.blockchain_tx_id
                record.step("proof", paid.transaction_code or paid.payment_request_code or "")
                logger.debug(
                    "x402: proving %s %s on %s (%s) to %s for %s",
                    format_amount(intent.amount),
                    intent.currency,
                    intent.network,
                    intent.rail,
                    intent.pay_to,
                    intent.resource,
                )
                result = await self._deliver(request, body, send, intent, paid, payments, record)
            if isinstance(result, httpx.Response):
                outcome = "paid"
                record.delivered = True
                receipt = result.extensions.get(RECEIPT_EXTENSION)
                record.tx_hash = getattr(receipt, "tx_hash", None)
                logger.info(
                    "x402: paid %s %s on %s (%s) to %s for %s",
                    format_amount(intent.amount),
                    intent.currency,
                    intent.network,
                    intent.rail,
                    intent.pay_to,
                    intent.resource,
                )
            else:
                used = classify_reason(result.reason) is VerifierReason.USED
                outcome = "paid" if moves_first and used else "unknown"
                error = result.reason
            return result
        except X402Error as exc:
            if exc._request is None:
                exc.request = request
            outcome, error = self._classify(exc, proof, moves_first, record)
            raise
        except BaseException as exc:
            # Cancellation or an unexpected error: before the proof, money can only have
            # moved on rails that pay first; after it, the merchant may have settled.
            if proof is None:
                outcome = "unknown" if moves_first else "failed"
            else:
                outcome = "paid" if moves_first else "unknown"
            error = f"{type(exc).__name__}: {exc}"
            if proof is None and moves_first:
                logger.warning("x402: payment interrupted; its outcome is unknown (%s)", error)
            raise
        finally:
            if resuming and outcome == "failed":
                outcome = "unknown"
            record.finish(outcome, error=error)
            if outcome == "failed" and held:
                with anyio.CancelScope(shield=True):
                    await self.budgets.release(held)

    @staticmethod
    def _classify(
        exc: X402Error, proof: str | None, moves_first: bool, record: LedgerEntry
    ) -> tuple[Outcome, str]:
        """The ledger outcome of an attempt that raised `exc` (docs/failure-semantics.md)."""
        error = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, PaymentOutcomeUnknown):
            record.proof = record.proof or exc.proof
            record.transaction_code = record.transaction_code or exc.transaction_code
            record.payment_request_code = record.payment_request_code or exc.payment_request_code
            # On a pay-first rail the proof exists only once the money moved: what is
            # unknown then is the delivery, not the payment.
            return ("paid" if proof is not None and moves_first else "unknown"), error
        if isinstance(exc, PaymentVerificationFailed):
            return ("paid" if moves_first else "unknown"), f"{type(exc).__name__}: {exc.reason}"
        if proof is None:
            return "failed", error
        return ("paid" if moves_first else "unknown"), error

    async def _resend(
        self,
        request: httpx.Request,
        body: bytes,
        send: Send,
        challenge: PaymentRequired,
        proof: str,
    ) -> httpx.Response:
        """Re-send a proof the client already paid for (recovery): no new payment."""
        try:
            decoded = decode_proof(proof)
        except ProofError as exc:
            raise ConfigurationError(f"the proof to re-send cannot be decoded: {exc}") from None
        for raw in challenge.accepts:
            try:
                entry = parse_accept(raw)
            except InvalidEntry:
                continue
            if entry is None or (entry.scheme, entry.network) != (decoded.scheme, decoded.network):
                continue
            for rail in self._rails:
                intent = rail.describe(entry, str(request.url))
                if isinstance(intent, str):
                    continue
                record = self.ledger.find(proof)
                result = await self._deliver(
                    request, body, send, intent, Paid(proof=proof), 1, record, resend=True
                )
                if not isinstance(result, httpx.Response):
                    raise PaymentVerificationFailed(
                        f"the merchant refused the re-sent proof: {result.reason}",
                        reason=result.reason,
                        proof=proof,
                        request=request,
                        intent=intent,
                    )
                if record is not None and record.outcome == "unknown":
                    record.delivered = True
                    record.finish("paid")
                return result
        raise NoSatisfiableOption(
            f"the 402 lists no {decoded.scheme} entry on {decoded.network} for the re-sent proof",
            request=request,
        )

    async def _read_challenge(
        self, response: httpx.Response, request: httpx.Request
    ) -> PaymentRequired:
        try:
            raw = await read_bounded(response, self.options.max_body_bytes)
        except BodyTooLarge as exc:
            raise InvalidChallenge(f"402 body too large: {exc}", request=request) from None
        try:
            return parse_payment_required(raw)
        except InvalidChallenge as exc:
            exc.request = request
            raise

    async def _choose(
        self,
        challenge: PaymentRequired,
        request: httpx.Request,
        settings: RequestSettings = _DEFAULT_SETTINGS,
    ) -> tuple[Rail, AcceptEntry, PaymentIntent]:
        """The entry to pay: by default the first payable one in the merchant's order;
        with `prefer` or `selector`, chosen among all payable ones."""
        policy = bool(self.options.prefer) or self.options.selector is not None
        reasons: list[str] = []
        readable = [0]
        found: list[tuple[Rail, AcceptEntry, PaymentIntent]] = []
        # Resuming a bridge payment must never pay on another rail.
        only = "bridge" if settings.resume_transaction_code is not None else None
        async for candidate in self._candidates(challenge, request, reasons, readable, only):
            if not policy:
                return candidate
            found.append(candidate)
        if found:
            intents = [intent for _, _, intent in found]
            selector = self.options.selector
            if selector is not None:
                chosen = selector(intents)
                for candidate in found:
                    if candidate[2] is chosen:
                        return candidate
                reasons.append("the selector chose none of the payable entries")
            else:
                return found[prefer_order(intents, self.options.prefer)[0]]
        if readable[0] == 0:
            raise InvalidChallenge(
                "no accepts entry of the 402 could be read: " + " | ".join(reasons),
                request=request,
            )
        raise NoSatisfiableOption(
            "no accepts entry can be paid by this client: " + " | ".join(reasons),
            reasons=reasons,
            request=request,
        )

    async def _candidates(
        self,
        challenge: PaymentRequired,
        request: httpx.Request,
        reasons: list[str],
        readable: list[int],
        only: str | None = None,
    ) -> AsyncIterator[tuple[Rail, AcceptEntry, PaymentIntent]]:
        """Payable entries in the merchant's order; why the others are not, in `reasons`."""
        resource = str(request.url)
        for index, raw in enumerate(challenge.accepts):
            try:
                entry = parse_accept(raw)
            except InvalidEntry as exc:
                reasons.append(f"accepts[{index}] is malformed: {exc}")
                continue
            readable[0] += 1
            if entry is None:
                reasons.append(f"accepts[{index}]: unknown scheme {str(raw.get('scheme'))[:40]!r}")
                continue
            why_not: list[str] = []
            for rail in self._rails:
                if only is not None and rail.name != only:
                    why_not.append(f"not a {only} rail (resuming a {only} payment)")
                    continue
                described = rail.describe(entry, resource)
                if isinstance(described, str):
                    why_not.append(described)
                    continue
                problem = await rail.prepare(entry, described)
                if problem is None:
                    yield rail, entry, described
                    break
                why_not.append(problem)
            else:
                specific = [w for w in why_not if not w.startswith("not a")]
                reasons.append(f"accepts[{index}]: {'; '.join(specific or why_not)}")

    def _check_limits(
        self, intent: PaymentIntent, overrides: RequestSettings, request: httpx.Request
    ) -> None:
        limit = self.options.max_amount_per_payment.get(intent.currency)
        if overrides.limits is not None and intent.currency in overrides.limits:
            requested = overrides.limits[intent.currency]
            limit = requested if limit is None else min(limit, requested)
        if limit is None:
            raise AmountLimitExceeded(
                f"no max_amount_per_payment is set for {intent.currency}; refusing to pay",
                request=request,
                intent=intent,
            )
        if intent.amount > limit:
            raise AmountLimitExceeded(
                f"price {format_amount(intent.amount)} {intent.currency} is above "
                f"max_amount_per_payment {format_amount(limit)} {intent.currency}",
                request=request,
                intent=intent,
            )

    async def _ask_hook(self, intent: PaymentIntent, request: httpx.Request) -> None:
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
        if verdict is False:
            raise PaymentRejectedByHook(
                "on_before_payment refused the payment; nothing was paid",
                request=request,
                intent=intent,
            )

    # --- delivering the proof ----------------------------------------------------------------

    def _receipt(self, state: _Delivery, response: httpx.Response | None = None) -> PaymentReceipt:
        intent, paid = state.intent, state.paid
        settlement = _settlement(response) if response is not None else None
        tx_hash = None
        if settlement:
            found = settlement.get("transaction") or settlement.get("txHash")
            tx_hash = found if isinstance(found, str) else None
        return PaymentReceipt(
            rail=intent.rail,
            scheme=intent.scheme,
            network=intent.network,
            asset=intent.asset,
            amount=intent.amount,
            currency=intent.currency,
            pay_to=intent.pay_to,
            resource=intent.resource,
            paid_at=state.paid_at,
            proof=paid.proof,
            payment_request_code=paid.payment_request_code,
            transaction_code=paid.transaction_code,
            blockchain_tx_id=paid.blockchain_tx_id,
            tx_hash=tx_hash,
            payer=paid.payer,
            settlement=settlement,
            payments=state.payments,
        )

    def _unknown(self, state: _Delivery, message: str) -> PaymentOutcomeUnknown:
        return PaymentOutcomeUnknown(
            message,
            proof=state.paid.proof,
            payment_request_code=state.paid.payment_request_code,
            transaction_code=state.paid.transaction_code,
            receipt=self._receipt(state),
            request=state.request,
            intent=state.intent,
        )

    async def _deliver(
        self,
        request: httpx.Request,
        body: bytes,
        send: Send,
        intent: PaymentIntent,
        paid: Paid,
        payments: int,
        record: LedgerEntry | None = None,
        *,
        resend: bool = False,
    ) -> httpx.Response | _PayFresh:
        state = _Delivery(
            request=_rebuild(request, body, paid.proof),
            intent=intent,
            paid=paid,
            payments=payments,
            paid_at=datetime.now(timezone.utc),
            record=record,
        )
        options = self.options
        # The common case needs no retry machinery: the first answer settles it.
        outcome: httpx.Response | _PayFresh | _NotConfirmed = await self._send_proof(state, send)
        if outcome is _NOT_CONFIRMED and options.confirmation_attempts > 1:
            from tenacity import (
                AsyncRetrying,
                RetryError,
                retry_if_result,
                stop_after_attempt,
                wait_exponential,
            )

            # Waits double from `confirmation_wait` up to `confirmation_max_wait`.
            await anyio.sleep(options.confirmation_wait)
            retrying = AsyncRetrying(
                stop=stop_after_attempt(options.confirmation_attempts - 1),
                wait=wait_exponential(
                    multiplier=2 * options.confirmation_wait,
                    min=options.confirmation_wait,
                    max=options.confirmation_max_wait,
                ),
                retry=retry_if_result(lambda result: result is _NOT_CONFIRMED),
                sleep=anyio.sleep,
            )
            try:
                outcome = await retrying(self._send_proof, state, send)
            except RetryError:
                outcome = _NOT_CONFIRMED
        if isinstance(outcome, _NotConfirmed):
            reason = state.last_reason or "payment not confirmed"
            if resend:
                advice = "the payment behind this proof has not been confirmed (or never made)"
            else:
                advice = "the payment was made; re-send the proof later"
            raise PaymentNotConfirmed(
                f"the merchant still says {reason!r} after {options.confirmation_attempts} "
                f"attempts; {advice}",
                reason=reason,
                receipt=self._receipt(state),
                proof=paid.proof,
                request=request,
                intent=intent,
            )
        return outcome

    async def _send_proof(
        self, state: _Delivery, send: Send
    ) -> httpx.Response | _PayFresh | _NotConfirmed:
        options = self.options
        record = state.record
        while True:
            if record is not None:
                record.step("sent", str(state.request.url))
            try:
                response = await send(state.request)
            except httpx.TransportError as exc:
                never_sent = isinstance(exc, _NOT_SENT)
                if never_sent and state.connect_failures < options.merchant_error_retries:
                    state.connect_failures += 1
                    await anyio.sleep(0.2 * state.connect_failures)
                    continue
                raise self._unknown(
                    state,
                    f"the paid request failed in transit ({type(exc).__name__}); the payment "
                    "was made; re-sending the proof is safe",
                ) from exc
            status = response.status_code
            if record is not None:
                record.step("answer", str(status))
            if status == 402:
                try:
                    raw = await read_bounded(response, options.max_body_bytes)
                except (BodyTooLarge, httpx.TransportError):
                    raw = b""
                reason, _ = parse_failure_body(raw)
                kind = classify_reason(reason)
                state.last_reason = reason
                if kind is VerifierReason.NOT_CONFIRMED:
                    logger.debug("x402: %s; re-sending the same proof", reason)
                    return _NOT_CONFIRMED
                if kind in (VerifierReason.USED, VerifierReason.EXPIRED):
                    assert reason is not None
                    if state.maybe_consumed:
                        raise self._unknown(
                            state,
                            f"the merchant says {reason!r} after an earlier attempt failed on "
                            "its side; it may have consumed the proof. Not paying again.",
                        )
                    return _PayFresh(reason, state.paid.proof)
                shown = reason or "402 without a reason"
                raise PaymentVerificationFailed(
                    f"the merchant refused the payment proof: {shown}",
                    reason=shown,
                    receipt=self._receipt(state),
                    proof=state.paid.proof,
                    request=state.request,
                    intent=state.intent,
                )
            if status >= 500:
                await response.aclose()
                state.maybe_consumed = True
                if state.merchant_errors < options.merchant_error_retries:
                    state.merchant_errors += 1
                    await anyio.sleep(0.2 * state.merchant_errors)
                    continue
                raise self._unknown(
                    state,
                    f"the merchant answered {status} to the paid request; the payment was made; "
                    "re-sending the proof is safe",
                )
            receipt = self._receipt(state, response)
            response.extensions = {**response.extensions, RECEIPT_EXTENSION: receipt}
            if isinstance(response.stream, httpx.AsyncByteStream):
                response.stream = _GuardedStream(
                    response.stream, lambda message: self._unknown(state, message)
                )
            return response
