"""One payment, read top to bottom: from a 402 to the response it unlocks.

The caller's logical request (`LogicalRequest`: one `client.send`, across every redirect
hop) meets a 402. The payer (`Payer.handle_402`) reads the challenge, lets the pure policy
choose the candidates, and pays the first one it can as a `Payment`, driven through its
states by one loop (`Payer._attempt`):

```
approve --> journal --> pay --> deliver --+--> settle   (served: the receipt, what moved)
  (hook, budget)  (row)   (rail, proof)   |
                                          +--> fresh    ("already used" / "expired")
```

Each state is a small function of the payer and the payment that does its I/O through
the rail, the stores (ledger, journal, budgets) or the caller's `send`,
and returns the next state; the rules that decide are pure and live elsewhere: which entry
(`_protocol.policy`), what each answer to the paid request means (`_protocol.delivery`),
what a settlement says (`_protocol.settlement`). The payment holds everything about itself
(its candidate, record, proof, receipt and how it ended); the receipt reaches
`response.extensions` only when the caller's response is handed back.

One logical request makes at most one payment, plus the one fresh payment that the spec's
"already used" / "expired" rule allows; once money moved, every exception that leaves it is
of the "money moved" family (`PaymentVerificationFailed`, `PaymentOutcomeUnknown`) with the
receipts: `Payer.conclude`, called once, by the outermost layer the client controls
(`_adapters.boundary`).

Only x402 402s are challenges: a 402 whose body is not a JSON object with `x402Version`
(and that has no `PAYMENT-REQUIRED` header) is handed back to the caller untouched, with
its body readable, and nothing is paid.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import logging
import time
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from datetime import datetime, timezone
from decimal import Decimal
from typing import TYPE_CHECKING, Any, cast

import anyio
import httpx

from .._options import PaymentOptions
from .._protocol.amounts import AmountError, format_amount, parse_amount
from .._protocol.challenge import VerifierReason, classify_reason
from .._protocol.delivery import Decision, Delivery, Step, outcome_of, refused_money_moved
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
    PaymentNotConfirmed,
    PaymentOutcomeUnknown,
    PaymentRefused,
    PaymentVerificationFailed,
    UnreplayableRequest,
    X402Error,
)
from .._protocol.ledger import Outcome
from .._protocol.policy import (
    Candidate,
    SkippedEntry,
    SkipReason,
    approve,
    no_candidate_error,
    select,
)
from .._protocol.rail_interface import (
    ANY_CURRENCY,
    Acknowledging,
    Describer,
    MeteredRail,
    Rail,
    RequestSettings,
)
from .._protocol.redact import guard_library_logs, safe_url
from .._protocol.settlement import failure_reason, receipt_of, settlement_of, settlement_step
from .._protocol.sign_in import SIGN_IN_HEADER, SIGN_IN_WITH_X
from .._protocol.types import Paid, PaymentIntent, PaymentReceipt
from .._rails import build_rails
from .._rails._evm_signing import SignerCache
from .._state.http import known_small, read_upto
from .._state.payment_api import PaymentAPI
from .._state.shared import NULL_JOURNAL, KeyedLocks, PaymentState, state_of
from .sign_in import offers_sign_in, sign_in

if TYPE_CHECKING:
    from .._protocol.events import PaymentProgress
    from .._protocol.ledger import LedgerEntry
    from .._protocol.rail_interface import SettlementCheck
    from .._state.budget_stores import Reservation

__all__ = [
    "EXTENSION",
    "GUARD",
    "RECEIPT_EXTENSION",
    "REDIRECTS",
    "Boundary",
    "Concluder",
    "GuardedStream",
    "LogicalRequest",
    "PayFresh",
    "Payer",
    "Payment",
    "Send",
    "SentBody",
    "deliver",
    "hand_back",
    "origin_of",
    "parse_settings",
    "rebuild",
    "redirect_target",
    "replayable_body",
    "request_of",
]

logger = logging.getLogger("x402_client")

#: `request.extensions[EXTENSION]`: per-request settings, e.g. `{"pay": False}`,
#: `{"max_amount_per_payment": "0.05"}` (lowers every currency's cap, never raises one) or
#: `{"resume_transaction_code": "QP..."}` (prove an earlier bridge payment, pay nothing).
EXTENSION = "x402"
#: `response.extensions[RECEIPT_EXTENSION]`: the `PaymentReceipt` of a paid response.
RECEIPT_EXTENSION = "x402_payment"
#: Where the `LogicalRequest` of a request rides (private; shared by all its hops).
GUARD = "x402_logical_request"

REDIRECTS = frozenset({301, 302, 303, 307, 308})
_SETTINGS = frozenset(
    {"pay", "max_amount_per_payment", "resume_transaction_code", "proof", "journal_id"}
)

#: How the caller's client sends one request (its inner transport).
Send = Callable[[httpx.Request], Awaitable[httpx.Response]]

#: Transport errors raised before the request left this process: the proof was not sent.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)

#: Shared by every logical request that paid nothing (never mutated: `paid` replaces them).
_NO_RECEIPTS: list[PaymentReceipt] = []
_NO_FLAGS: list[bool] = []


# --- the caller's logical request -------------------------------------------------------------


def origin_of(url: httpx.URL) -> tuple[str, str, int | None]:
    """A URL's origin: scheme, host and port (None for the scheme's default)."""
    return (url.scheme, url.host, url.port)


#: The settings of a request that gives none.
_NO_SETTINGS = RequestSettings()


def parse_settings(raw: Any) -> RequestSettings:
    """The caller's per-request settings (`extensions["x402"]`), checked."""
    if raw is None:
        return _NO_SETTINGS
    if not isinstance(raw, Mapping):
        raise ConfigurationError(f"request.extensions[{EXTENSION!r}] must be a mapping")
    unknown = set(raw) - _SETTINGS
    if unknown:
        raise ConfigurationError(f"unknown per-request x402 settings: {sorted(unknown)}")
    pay = raw.get("pay", True)
    if not isinstance(pay, bool):
        raise ConfigurationError("request.extensions['x402']['pay'] must be a bool")
    limits: dict[str, Decimal] | None = None
    cap = raw.get("max_amount_per_payment")
    if cap is not None:
        items = cap.items() if isinstance(cap, Mapping) else [(ANY_CURRENCY, cap)]
        try:
            limits = {str(k).upper(): parse_amount(v, allow_zero=True) for k, v in items}
        except AmountError as exc:
            raise ConfigurationError(f"per-request max_amount_per_payment: {exc}") from None
    texts = {}
    for name, shown in (
        ("resume_transaction_code", "resume_transaction_code must be a string"),
        ("proof", "proof must be the X-PAYMENT string"),
        ("journal_id", "journal_id must be a string"),
    ):
        value = raw.get(name)
        if value is not None and not isinstance(value, str):
            raise ConfigurationError(shown)
        texts[name] = value
    return RequestSettings(pay=pay, limits=limits, **texts)


class LogicalRequest:
    """One `client.send` of the caller's, across all its redirect hops.

    Made by the client's `send` when `with_eur_payment` installed the truth boundary
    there (`bounded`: every hop of that send is its own), or else at the first hop, and
    put into `request.extensions`; httpx copies the extensions into each redirect request,
    so later hops find the same object. Without the boundary, a request object seen again
    (the caller re-sends it) or a logical request that already ended starts a new one.

    Every request has one, paid or not, so it is small: one slotted object until a
    redirect or a payment needs more.
    """

    __slots__ = (
        "_settings",
        "bounded",
        "done",
        "first",
        "fresh_used",
        "later",
        "origin",
        "payer",
        "payment",
        "raw_settings",
        "receipts",
        "signed_in",
        "uncertain",
        "visits",
    )

    def __init__(self, request: httpx.Request, *, bounded: bool = False) -> None:
        self.origin = origin_of(request.url)
        self.raw_settings: Any = request.extensions.get(EXTENSION)
        #: The first hop, and the later ones (redirects) when there are any.
        self.first: httpx.Request | None = request
        self.later: list[httpx.Request] | None = None
        #: Receipts of the payments made, in order; `uncertain[i]`: money may not have
        #: moved yet (a permit handed over that the merchant has not settled for sure).
        self.receipts: list[PaymentReceipt] = _NO_RECEIPTS
        self.uncertain: list[bool] = _NO_FLAGS
        self.fresh_used = False
        #: A sign-in was tried (`sign-in-with-x`): once per logical request.
        self.signed_in = False
        self.done = False
        self.bounded = bounded
        #: The payer that answered a 402 of this request, and its (last) payment.
        self.payer: Payer | None = None
        self.payment: Payment | None = None
        #: URLs the paid answer's redirects led to (a second visit is a loop).
        self.visits: set[str] | None = None
        self._settings: RequestSettings | None = None

    @classmethod
    def of(cls, request: httpx.Request) -> LogicalRequest:
        found = request.extensions.get(GUARD)
        if isinstance(found, LogicalRequest) and (
            found.bounded or (not found.done and not found.saw(request))
        ):
            if request is not found.first:
                if found.later is None:
                    found.later = [request]
                else:
                    found.later.append(request)
            return found
        made = cls(request)
        request.extensions[GUARD] = made
        return made

    @classmethod
    def begin(cls, request: httpx.Request) -> LogicalRequest:
        """The logical request of one `client.send` (the truth boundary's)."""
        made = cls(request, bounded=True)
        request.extensions[GUARD] = made
        return made

    def saw(self, request: httpx.Request) -> bool:
        """Whether `request` is one of this logical request's hops already."""
        return request is self.first or (
            self.later is not None and any(hop is request for hop in self.later)
        )

    @property
    def settings(self) -> RequestSettings:
        """The caller's per-request settings (`extensions["x402"]`), parsed once."""
        if self._settings is None:
            self._settings = parse_settings(self.raw_settings)
        return self._settings

    @property
    def payments(self) -> int:
        return len(self.receipts)

    def is_first_origin(self, request: httpx.Request) -> bool:
        return origin_of(request.url) == self.origin

    def paid(self, receipt: PaymentReceipt, *, certain: bool) -> None:
        if self.receipts is _NO_RECEIPTS:
            self.receipts, self.uncertain = [], []
        self.receipts.append(receipt)
        self.uncertain.append(not certain)

    def settled(self, receipt: PaymentReceipt) -> None:
        """The merchant served the last payment: its receipt, and money surely moved."""
        self.receipts[-1] = receipt
        self.uncertain[-1] = False

    def visit(self, url: httpx.URL) -> None:
        if self.visits is None:
            self.visits = set()
        self.visits.add(str(url.copy_with(fragment=None)))

    def visited(self, url: httpx.URL) -> bool:
        return self.visits is not None and str(url.copy_with(fragment=None)) in self.visits

    def end(self) -> None:
        """The logical request is over: let go of its hops (a request refers to this object
        through its extensions, so holding it back would make a reference cycle)."""
        self.done = True
        self.first = None
        self.later = None

    def finish_hop(self, response: httpx.Response) -> httpx.Response:
        """Pass a non-402 answer on; the last hop of a paid request carries the receipt."""
        if response.status_code not in REDIRECTS or "location" not in response.headers:
            self.end()
        if self.receipts and RECEIPT_EXTENSION not in response.extensions:
            response.extensions = {**response.extensions, RECEIPT_EXTENSION: self.receipts[-1]}
        return response

    def truthful(self, exc: Exception) -> Exception:
        """`exc`, or, when this request already paid, a "money moved" error wrapping it
        (any error: ours, httpx's own redirect handling, a broken body, the disk)."""
        self.end()
        if not self.receipts:
            return exc
        if isinstance(exc, (PaymentVerificationFailed, PaymentOutcomeUnknown)):
            known = {id(r) for r in exc.receipts}
            exc.receipts = [r for r in self.receipts if id(r) not in known] + exc.receipts
            return exc
        last = self.receipts[-1]
        what = (
            f"{self.payments} payment(s) were made for this request "
            f"(last: {format_amount(last.amount)} {last.currency} on {last.rail})"
        )
        message = f"{what}, then: {type(exc).__name__}: {exc}"
        intent = exc.intent if isinstance(exc, X402Error) else None
        response = exc.response if isinstance(exc, X402Error) else None
        wrapped: X402Error
        if any(self.uncertain):
            wrapped = PaymentOutcomeUnknown(
                message,
                proof=last.proof,
                payment_request_code=last.payment_request_code,
                transaction_code=last.transaction_code,
                receipts=self.receipts,
                intent=intent,
                response=response,
            )
        else:
            wrapped = PaymentVerificationFailed(
                message,
                reason=str(exc),
                receipts=self.receipts,
                proof=last.proof,
                intent=intent,
                response=response,
            )
        request = request_of(exc)
        if request is not None:
            wrapped.request = request
        return wrapped


def request_of(exc: BaseException) -> httpx.Request | None:
    """The request an httpx error was about, if it knows one (never raises)."""
    if isinstance(exc, httpx.HTTPError):
        try:
            return exc.request
        except RuntimeError:
            return None
    return None


def redirect_target(request: httpx.Request, response: httpx.Response) -> httpx.URL | str:
    """Where a redirect answer leads, resolved the way httpx resolves it, or what is wrong
    with its `Location` (httpx itself would raise above the payment layer)."""
    try:
        url = httpx.URL(response.headers["location"])
    except httpx.InvalidURL:
        return "names an invalid Location"
    if url.scheme and not url.host:
        url = url.copy_with(host=request.url.host)
    if url.is_relative_url:
        url = request.url.join(url)
    if url.scheme not in ("http", "https"):
        return "redirects to an unsupported URL scheme"
    return url


# --- the truth boundary ------------------------------------------------------------------------

#: How a sync entry makes an error truthful: `Payer.conclude`, run on its payment loop.
Concluder = Callable[[LogicalRequest, Exception], BaseException]


class Boundary:
    """The truth boundary of one logical request: the one place where an error leaving it
    is made truthful (`Payer.conclude`, once): after a payment, every error is a "money
    moved" error with the receipts. Every entry holds one, as a context manager:

    - the client's own `send`, which `with_eur_payment` owns (httpx async and sync, a
      `requests` session's `send`, an MCP tool call): the logical request begins and ends
      there; a `requests` session learns its request's guard at the first hop (`guard`);
    - a payment transport in a client built by hand (`outermost=False`): it concludes only
      when no outer boundary holds the request.

    ```python
    async with Boundary(LogicalRequest.begin(request)):
        return await send(request)
    with Boundary(guard, outermost=False, conclude=driver.conclude):   # a sync entry
        ...
    ```
    """

    __slots__ = ("_conclude", "_outermost", "guard")

    def __init__(
        self,
        guard: LogicalRequest | None,
        *,
        outermost: bool = True,
        conclude: Concluder | None = None,
    ) -> None:
        self.guard = guard
        self._outermost = outermost
        #: Sync entries conclude on their payment loop; async ones await the payer's.
        self._conclude = conclude

    def _concludes(self, exc: BaseException | None) -> LogicalRequest | None:
        """The guard whose payer makes `exc` truthful here, if any."""
        guard = self.guard
        if not isinstance(exc, Exception) or guard is None or guard.payer is None:
            return None
        return guard if self._outermost or not guard.bounded else None

    def _end(self) -> None:
        guard = self.guard
        if self._outermost and guard is not None:
            guard.end()

    async def __aenter__(self) -> Boundary:
        return self

    async def __aexit__(self, kind: Any, exc: BaseException | None, traceback: Any) -> None:
        try:
            guard = self._concludes(exc)
            error = None
            if guard is not None and guard.payer is not None and exc is not None:
                error = await guard.payer.conclude(guard, exc)
        finally:
            self._end()
        if error is not None and error is not exc:
            raise error from exc

    def __enter__(self) -> Boundary:
        return self

    def __exit__(self, kind: Any, exc: BaseException | None, traceback: Any) -> None:
        try:
            guard, conclude = self._concludes(exc), self._conclude
            error = None
            if guard is not None and conclude is not None and isinstance(exc, Exception):
                error = conclude(guard, exc)
        finally:
            self._end()
        if error is not None and error is not exc:
            raise error from exc


# --- the bodies around a payment -------------------------------------------------------------

_PROOF_HEADERS = ("X-PAYMENT", "PAYMENT-SIGNATURE", SIGN_IN_HEADER)


class GuardedStream(httpx.AsyncByteStream):
    """The body of a paid response: a transit failure while reading it becomes
    `PaymentOutcomeUnknown` carrying the proof, so the caller learns the payment was made
    and the resource was lost, and can re-send the proof.

    Closing it lets go of the callbacks (and the paid request, intent and receipt they
    hold): httpx's response and its stream refer to each other, so whatever hangs off the
    stream would otherwise wait for the garbage collector, and make it run more often.
    """

    def __init__(
        self,
        stream: httpx.AsyncByteStream,
        unknown: Callable[[str], X402Error],
        *,
        moved_first: bool,
    ) -> None:
        self._stream = stream
        self._unknown: Callable[[str], X402Error] | None = unknown
        #: What the break says of the money: paid before the request (euro, chain A), or
        #: a signed authorization the merchant may or may not have settled.
        self._money = (
            "the payment was made"
            if moved_first
            else "the signed payment was handed over and may have been settled"
        )
        #: Told when the body breaks off: the record learns it was not delivered, and the
        #: user's `on_payment_error` hears of it.
        self.on_broken: Callable[[X402Error], Awaitable[None]] | None = None

    async def __aiter__(self) -> AsyncIterator[bytes]:
        unknown, broken = self._unknown, self.on_broken
        try:
            async for chunk in self._stream:
                yield chunk
        except httpx.TransportError as exc:
            if unknown is None:  # read after close: httpx refuses that before we get here
                raise
            error = unknown(
                f"the paid response broke off in transit ({type(exc).__name__}); "
                f"{self._money}; re-sending the proof is safe"
            )
            if broken is not None:
                with anyio.CancelScope(shield=True):
                    await broken(error)
            raise error from exc

    async def aclose(self) -> None:
        self._unknown = self.on_broken = None
        await self._stream.aclose()


class _Replay(httpx.AsyncByteStream):
    """A body we read part of (`head`), then the rest of the original stream, if any."""

    def __init__(self, head: bytes, rest: AsyncIterator[bytes] | None, close: Any) -> None:
        self._head = head
        self._rest = rest
        self._close = close

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._head:
            yield self._head
        if self._rest is not None:
            async for chunk in self._rest:
                yield chunk

    async def aclose(self) -> None:
        await self._close()


class SentBody(httpx.ByteStream):
    """The body of a request the client rebuilt (the paid retry): counts how many times
    the layers below read it. Every send that reaches the wire reads the body once (httpcore
    writes it from the stream on each send, and the `requests` adapter reads it once per
    send it makes), so `reads` is how many times the request really went out, whatever a
    retrying transport or adapter below the payment did on its own. A transport that
    answers without writing the body (`httpx.MockTransport` reads the request's cached
    content instead) leaves it at 0."""

    def __init__(self, body: bytes) -> None:
        super().__init__(body)
        self._body = body
        self.reads = 0

    def __iter__(self) -> Iterator[bytes]:
        self.reads += 1
        yield self._body

    async def __aiter__(self) -> AsyncIterator[bytes]:
        self.reads += 1
        yield self._body


def replayable_body(request: httpx.Request) -> bytes | None:
    """The request body as bytes, when it can be sent again; None for a one-shot stream.

    A redirect hop carries the original request's stream unread: a `ByteStream` (bytes,
    or no body at all) can be replayed as it is.
    """
    try:
        return request.content
    except httpx.RequestNotRead:
        stream = request.stream
        if isinstance(stream, httpx.ByteStream):
            return b"".join(stream)
        return None


def rebuild(
    request: httpx.Request, body: bytes, proof: str | None = None, header: str = "X-PAYMENT"
) -> httpx.Request:
    headers = request.headers.copy()
    for name in _PROOF_HEADERS:
        headers.pop(name, None)
    if proof is not None:
        headers[header] = proof
    method = request.method
    if "Host" not in headers or (
        "Content-Length" not in headers
        and (body or (method in ("POST", "PUT", "PATCH") and "Transfer-Encoding" not in headers))
    ):
        # httpx adds a header to these: let it, as for any request made with `content=`.
        rebuilt = httpx.Request(
            method, request.url, headers=headers, content=body, extensions=dict(request.extensions)
        )
    else:
        # The headers are those httpx would write for `content=body` already: the same
        # request, without preparing them again.
        rebuilt = httpx.Request(
            method,
            request.url,
            headers=headers,
            stream=httpx.ByteStream(body),
            extensions=dict(request.extensions),
        )
        rebuilt.read()
    # Read (cached) above; from here on, each read of the stream is one send on the wire.
    rebuilt.stream = SentBody(body)
    return rebuilt


def hand_back(
    response: httpx.Response, head: bytes, rest: AsyncIterator[bytes] | None
) -> httpx.Response:
    """The 402 as the caller would have had it, with the body we read put back in front
    (decoded: `Content-Encoding` no longer applies)."""
    headers = [
        (k, v)
        for k, v in response.headers.multi_items()
        if k.lower() not in ("content-encoding", "content-length")
    ]
    if rest is None:
        # The whole body is known: readable sync and async (`read()`, `aread()`).
        return httpx.Response(
            response.status_code, headers=headers, content=head, extensions=response.extensions
        )
    return httpx.Response(
        response.status_code,
        headers=headers,
        stream=_Replay(head, rest, response.aclose),
        extensions=response.extensions,
    )


# --- one proof on its way ------------------------------------------------------------------------


class PayFresh:
    """The merchant said the proof is used or expired: pay a fresh 402. A session's
    corrective 402 is that fresh 402 itself (`challenge`): it carries the merchant's view of
    the channel, which the rail checks before it signs again."""

    def __init__(self, reason: str, proof: str, challenge: Challenge | None = None) -> None:
        self.reason = reason
        self.proof = proof
        self.challenge = challenge


@dataclasses.dataclass
class Delivering:
    """One proof on its way to the merchant: the paid request, the receipt of the payment
    behind it, the rules' state (`Delivery`), and how to say what became of the money."""

    guard: LogicalRequest
    request: httpx.Request
    paid_request: httpx.Request
    send: Send
    intent: PaymentIntent
    paid: Paid
    made: PaymentReceipt
    options: PaymentOptions
    moves_first: bool
    resend: bool
    #: The ledger entry whose trail notes each send and answer: the payment's own, or (a
    #: re-sent proof) the one of the payment it belongs to, if this process made it.
    entry: LedgerEntry | None = None
    #: The delivery rules' state, made when the first send ends.
    _machine: Delivery | None = None
    #: A session's corrective 402, read from the last answer (`PayFresh.challenge`).
    corrective: Challenge | None = None

    @property
    def machine(self) -> Delivery:
        if self._machine is None:
            options = self.options
            self._machine = Delivery(
                confirmation_attempts=options.confirmation_attempts,
                confirmation_wait=options.confirmation_wait,
                confirmation_max_wait=options.confirmation_max_wait,
                merchant_error_retries=options.merchant_error_retries,
                resend=self.resend,
            )
        return self._machine

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
            money_moved=True if self.moves_first else None,
        )

    def served(self, response: httpx.Response) -> httpx.Response:
        served = self.receipt(response)
        if not self.resend:
            self.guard.settled(served)
        response.extensions = {**response.extensions, RECEIPT_EXTENSION: served}
        if isinstance(response.stream, httpx.AsyncByteStream):
            response.stream = GuardedStream(
                response.stream, self.unknown, moved_first=self.moves_first
            )
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
            used = classify_reason(shown) is VerifierReason.USED
            if used and not (self.moves_first or self.resend):
                # A signed authorization that is "already used" was settled: the money
                # moved, to this merchant or to whoever used it. Not a licence to pay again.
                return self.unknown(
                    f"the merchant says {shown!r}: the signed payment was used, so the money "
                    "may have moved; not paying again"
                )
            return PayFresh(shown, self.paid.proof, self.corrective)
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

    def step(self, step: str, detail: str) -> None:
        if self.entry is not None:
            self.entry.trail += ((time.time(), step, detail),)


def delivering(
    guard: LogicalRequest,
    request: httpx.Request,
    body: bytes,
    send: Send,
    intent: PaymentIntent,
    paid: Paid,
    *,
    options: PaymentOptions,
    moves_first: bool,
    made: PaymentReceipt | None = None,
    entry: LedgerEntry | None = None,
    resend: bool = False,
) -> Delivering:
    """A proof ready to go: the paid request rebuilt from the caller's, and the receipt of
    the payment behind it (`made`, when this request made it; a re-sent proof gets a
    receipt that says so and counts no payment)."""
    if made is None:
        payments = 0 if resend else max(guard.payments, 1)
        made = receipt_of(intent, paid, datetime.now(timezone.utc), payments, reused=resend)
    paid_request = rebuild(request, body, paid.proof, paid.header)
    return Delivering(
        guard, request, paid_request, send, intent, paid, made, options, moves_first, resend,
        entry,
    )  # fmt: skip


async def deliver(proof: Delivering) -> httpx.Response | PayFresh:
    """Send the proof and act on the answers until one ends the delivery: the served
    response (its receipt in `RECEIPT_EXTENSION`), a `PayFresh`, or the error."""
    started, shown = time.monotonic(), 0
    while True:
        answer = await _send_once(proof)
        if answer is None:
            continue
        decision, reason = await _answer_of(answer, proof)
        if decision.step is Step.RETRY:
            if reason is not None:
                logger.debug("x402: %s; re-sending the same proof", reason)
            if proof.machine.not_confirmed > shown:  # not a re-send after a transit failure
                shown = proof.machine.not_confirmed
                await _confirming(proof, reason or "not confirmed", decision.wait, started)
            await anyio.sleep(decision.wait)
            continue
        if decision.step is Step.SERVED:
            return proof.served(answer)
        if decision.step is Step.NOT_DELIVERED:
            raise await proof.not_delivered(decision.reason or "402 without a reason", answer)
        ended = proof.ended(decision)
        if isinstance(ended, PayFresh):
            return ended
        raise ended


async def _confirming(proof: Delivering, reason: str, wait: float, started: float) -> None:
    """Tell `on_progress` that the merchant has not confirmed the payment yet and the
    proof goes again after `wait` seconds: which re-send of how many (`polls` of
    `max_polls`), so a display can show a real measure. A failing callback is logged."""
    from .._protocol.events import PaymentProgress

    callback = proof.options.on_progress
    machine = proof.machine
    if callback is None:
        return
    event = PaymentProgress(
        stage="confirming",
        rail=proof.intent.rail,
        resource=str(proof.request.url),
        transaction_code=proof.made.transaction_code,
        status=reason,
        elapsed=time.monotonic() - started,
        polls=machine.not_confirmed,
        max_polls=machine.confirmation_attempts,
        wait=wait,
    )
    try:
        await _call(callback, event)
    except Exception:
        logger.exception("on_progress callback failed")


async def _send_once(proof: Delivering) -> httpx.Response | None:
    """Send the paid request once: its answer, or None when it did not go out and may be
    sent again (after the wait)."""
    paid_request = proof.paid_request
    proof.step("sent", str(paid_request.url))
    try:
        response = await proof.send(paid_request)
    except httpx.TransportError as exc:
        decision = proof.machine.failed_in_transit(
            never_sent=isinstance(exc, _NOT_SENT), error=type(exc).__name__, sent=_wire(proof)
        )
        if decision.step is not Step.RETRY:
            raise proof.unknown(decision.reason or "lost in transit") from exc
        await anyio.sleep(decision.wait)
        return None
    proof.step("answer", str(response.status_code))
    return response


def _wire(proof: Delivering) -> int:
    """How many times the paid request went out on the wire so far: its body is read once
    per send, below every layer (`SentBody`)."""
    wire = proof.paid_request.stream
    assert isinstance(wire, SentBody)
    return wire.reads


async def _answer_of(response: httpx.Response, proof: Delivering) -> tuple[Decision, str | None]:
    """Read what an answer to the paid retry says (a 402's reason) and ask the rules."""
    status = response.status_code
    reason: str | None = None
    if status == 402:
        head, rest = await read_upto(response, proof.options.max_body_bytes)
        await response.aclose()
        reason = failure_reason(head if rest is None else b"", response.headers)
        if classify_reason(reason) is VerifierReason.STALE and rest is None:
            proof.corrective = _corrective(head, response.headers, proof.options.max_body_bytes)
    elif status >= 500:
        await response.aclose()
    sent = _wire(proof)
    return proof.machine.answered(status, reason, sent=sent), reason


def _corrective(body: bytes, headers: httpx.Headers, limit: int) -> Challenge | None:
    """The challenge of a session's corrective 402, if it is one that can be read."""
    try:
        return challenge_of(body, headers, limit=limit)
    except InvalidChallenge:
        return None


# --- one payment -------------------------------------------------------------------------------


#: How an attempt ended, for its record: (outcome, error, the proof's dead reason).
_Ending = tuple[Outcome, str | None, str | None]

#: A state of a payment: it does its part, then says which state comes next (None: done).
State = Callable[["Payer", "Payment"], Awaitable["State | None"]]


class Payment:
    """One payment attempt of one candidate, and everything kept about it, in memory and
    on disk: its ledger entry, its journal row, its budget reservation, the rail's context
    (held open until the merchant has answered: an EVM nonce lock lives that long), the
    proof it made, and how it ended. Its life:

    ```
    open --reserve--> reserved --journal--> journaled --rail--> rail called --proof--> proved
                                                                                         |
                              delivered | not delivered | refused | failed  <------------+
    ```

    Without a state file the journal is `NullJournal`, whose calls do nothing. Journal
    writes after the rail was called never break a payment: money may be moving, and
    delivering the resource is worth more than the record of it; such a failure is logged
    (the ledger keeps the truth). The one exception is the proof of a settle-on-proof
    rail: it has not left the process yet, and one that recovery could not know of is
    never handed over. Only `failed` gives the reservation back (`outcome_of`).
    """

    __slots__ = (
        "_state",
        "_writer",
        "body",
        "candidate",
        "challenge",
        "ended_by",
        "ending",
        "entry",
        "guard",
        "held",
        "journal_id",
        "moves_first",
        "proof",
        "proved",
        "rail_called",
        "request",
        "result",
        "resumed",
        "send",
        "settled",
        "stack",
    )

    def __init__(
        self,
        state: PaymentState,
        guard: LogicalRequest,
        challenge: Challenge,
        candidate: Candidate,
        request: httpx.Request,
        body: bytes,
        send: Send,
    ) -> None:
        self.challenge, self.candidate = challenge, candidate
        #: The logical request, while the attempt runs (`detach`).
        self.guard: LogicalRequest | None = guard
        self.request, self.body, self.send = request, body, send
        self._state = state
        #: Where its journal row is written: the journal, or one that keeps nothing.
        self._writer = state.journal if state.journal is not None else NULL_JOURNAL
        settings = guard.settings
        resume = settings.resume_transaction_code
        found = state.ledger.find_transaction(resume) if resume else None
        self.entry: LedgerEntry = (
            found if found is not None else state.ledger.open(candidate.intent)
        )
        #: A resumed payment finishes the journal row it came from, when recovery named it.
        self.journal_id: str | None = settings.journal_id if resume else None
        self.resumed = resume is not None
        self.moves_first = candidate.rail.money_moves_before_proof
        self.held: Sequence[Reservation] = ()
        self.rail_called = False
        self.proved = False
        #: The merchant served an `upto` payment and its settlement was booked.
        self.settled = False
        self.stack = contextlib.AsyncExitStack()
        self.proof: Delivering | None = None
        self.result: httpx.Response | PayFresh | None = None
        self.ending: _Ending = ("unknown", None, None)
        #: The exception that ended the attempt.
        self.ended_by: BaseException | None = None
        if resume:
            _trail(self.entry, "resumed", resume)

    @property
    def intent(self) -> PaymentIntent:
        return self.candidate.intent

    def detach(self) -> httpx.Response | PayFresh | None:
        """The attempt is over: what it ended with. The payment lets go of its logical
        request, its proof and its answer: the logical request keeps the payment (its
        error boundary may still need it), and a reference back would make a cycle that
        only the garbage collector frees, holding the paid response and its requests
        until it runs."""
        result, self.result, self.proof, self.guard = self.result, None, None, None
        return result

    @property
    def id(self) -> str:
        return self.entry.id

    async def _write(self, what: str, call: Any, *args: Any, **kwargs: Any) -> bool:
        """A journal write once the rail may have been called: shielded, and never breaking
        the payment (logged instead). Whether it was written."""
        if self.journal_id is None:
            return True
        try:
            with anyio.CancelScope(shield=True):
                await call(self.journal_id, *args, **kwargs)
        except Exception as exc:
            logger.error(
                "x402: the payment journal could not record %s of payment %s (%s)",
                what,
                self.id,
                type(exc).__name__,
            )
            return False
        return True

    # --- before the rail: nothing can have moved -----------------------------------------------

    async def reserve(self, intent: PaymentIntent) -> None:
        """Hold the amount in every budget of its currency (a resumed payment holds what it
        held when it was made). `BudgetExceeded` when one is full."""
        if self.resumed or not self._state.budgets.budgets:
            return
        self.held = await self._state.budgets.reserve(intent)
        if self.held:
            _trail(self.entry, "reserved", ", ".join(r.budget.key for r in self.held))

    async def open(
        self,
        *,
        request_method: str,
        request_url: str,
        request_body: bytes | None,
        request_headers: Iterable[tuple[str, str]],
        payment_request_code: str | None,
    ) -> None:
        """Journal the payment before any money moves: a crash from here on leaves a record.
        A failure here raises (the caller turns it into "nothing was paid")."""
        if self.journal_id is not None or self._state.journal is None:
            return
        with anyio.CancelScope(shield=True):
            self.journal_id = await self._writer.open_payment(
                intent=self.entry.intent,
                request_method=request_method,
                request_url=request_url,
                request_body=request_body,
                request_headers=request_headers,
                reservations=[(r.budget.key, r.id) for r in self.held],
                id=self.entry.id,
                payment_request_code=payment_request_code,
            )

    # --- the rail was called ---------------------------------------------------------------------

    async def note(self, **facts: str) -> None:
        """A fact the rail reports the moment it exists (a transaction code)."""
        entry = self.entry
        for name, value in facts.items():
            setattr(entry, name, value)
        _trail(entry, "noted", ", ".join(sorted(facts)))
        await self._write("a code", self._writer.update_payment, step="noted", **facts)

    async def prove(
        self,
        proof: str,
        *,
        payment_request_code: str | None,
        transaction_code: str | None,
        blockchain_tx_id: str | None,
    ) -> None:
        """The proof exists. On a rail where the merchant moves the money with it, a proof
        the journal could not record is never handed over (`PaymentFailed`): recovery could
        not know it exists."""
        entry = self.entry
        entry.payment_request_code = payment_request_code
        entry.transaction_code = transaction_code
        entry.blockchain_tx_id = blockchain_tx_id
        written = await self._write(
            "the proof",
            self._writer.update_payment,
            step="proof",
            proof=proof,
            payment_request_code=payment_request_code,
            transaction_code=transaction_code,
            blockchain_tx_id=blockchain_tx_id,
        )
        if not written and not self.moves_first:
            raise PaymentFailed(
                "the payment journal could not record the signed payment, so it was not "
                "handed over; nothing was paid",
                intent=entry.intent,
            )
        self.proved = True
        entry.proof = proof
        _trail(entry, "proof", transaction_code or payment_request_code or "")

    async def settle(self, check: SettlementCheck) -> Decimal | None:
        """An `upto` payment was served; `check` is what the chain says it moved. Verified:
        the ledger books that (at most the authorized maximum), the budgets keep it and give
        back the rest, and the journal says so (`settled`). Not verified: the maximum stays
        booked and held, and the journal says why (`held`), until recovery can tell. What
        was booked (None: the maximum). Never breaks the payment (the money moved)."""
        self.settled = True
        step, detail, settled = settlement_step(self.entry.intent, check)
        await self._keep(step, detail, settled)
        return settled

    async def book_at_most(self, atomic: int) -> None:
        """The proof can move no more than `atomic` of the intent's asset (a session voucher
        that adds only that to the highest cumulative amount signed before): the ledger
        books that, the budgets keep it and give back the rest of the reservation, and the
        journal says so (a `settled` row is never given back again)."""
        authorized = self.entry.intent.amount
        amount = self.entry.intent.amount_of(atomic)
        if amount is None or amount >= authorized:
            return
        detail = (
            f"{format_amount(amount)} of at most {format_amount(authorized)}: the voucher adds "
            "no more to what was signed before"
        )
        await self._keep("settled", detail, amount)

    async def _keep(self, step: str, detail: str, kept: Decimal | None) -> None:
        """Book what the proof moves: the trail and the journal first (a row with a
        `settled` step is never given back again), then, unless `kept` is None (the
        maximum stays booked and held), the ledger and the budgets, which keep `kept` and
        give back the rest of the reservation."""
        entry = self.entry
        _trail(entry, step, detail)
        await self._write(
            f"the {step} amount", self._writer.update_payment, step=step, detail=detail
        )
        if kept is None:
            return
        entry.settled_amount = kept
        self.held = await self._state.budgets.give_back(
            self.held, entry.intent.amount, kept, self.id
        )

    # --- the end ---------------------------------------------------------------------------------

    async def finish(
        self, outcome: Outcome, error: str | None = None, dead_proof: str | None = None
    ) -> None:
        """Record the end of the attempt in both stores and give back what did not move.
        Shielded: an interrupted request still records its end."""
        if self.resumed and outcome == "failed":
            # A refused resume says nothing about whether the earlier money moved.
            outcome = "unknown"
        self.entry.finish(outcome, error=error)
        if self.journal_id is None and not (outcome == "failed" and self.held):
            return  # no journal row to write, nothing to give back: nothing to shield
        with anyio.CancelScope(shield=True):
            await self._write(
                "the outcome",
                self._writer.finish_payment,
                "unknown" if outcome == "pending" else outcome,
                delivered=self.entry.delivered,
                error=error,
                tx_hash=self.entry.tx_hash,
            )
            if dead_proof is not None:
                # "already used" / "expired": this proof will never be served.
                await self._write(
                    "a used proof",
                    self._writer.mark_unrecoverable,
                    f"the merchant said {dead_proof!r}; paid again fresh",
                )
            if outcome == "failed" and self.held:
                held, self.held = self.held, ()
                await self._state.budgets.release(held)

    async def not_delivered(self, reason: str) -> None:
        """A later answer of the same request showed the resource was not served after all
        (a paid redirect that led to an error): the proof may be re-sent."""
        if not self.entry.delivered:
            return
        outcome = self.entry.outcome
        await self._undeliver(
            "not delivered", reason, outcome if outcome in ("paid", "unknown") else "unknown"
        )

    async def broken(self) -> None:
        """The paid body broke off in transit: the resource was not delivered."""
        await self._undeliver(
            "broken",
            "the paid response broke off in transit; re-send the proof",
            "paid" if self.moves_first else "unknown",
        )

    async def _undeliver(self, step: str, reason: str, outcome: Outcome) -> None:
        """The resource was not delivered after all: the record, and its journal row,
        say so (the proof may be re-sent)."""
        entry = self.entry
        entry.delivered = False
        entry.outcome = outcome
        _trail(entry, step, reason)
        await self._write(
            f"a {step} payment",
            self._writer.finish_payment,
            outcome,
            delivered=False,
            error=reason,
        )


def _trail(entry: LedgerEntry, step: str, detail: str = "") -> None:
    """One step of a payment, in its ledger entry's trail."""
    entry.trail += ((time.time(), step, detail),)


async def _approve(payer: Payer, payment: Payment) -> State:
    """The user's hook approves, then the budget reserves the amount (the caps were
    checked by the selection)."""
    await payer._ask_hook(payment.intent, payment.request)
    if payer.state.budgets.budgets:
        await payment.reserve(payment.intent)
    return _journal if payer.state.journal is not None else _pay


async def _journal(payer: Payer, payment: Payment) -> State:
    """The journal learns the payment (and the request to re-send) before the rail runs."""
    request, entry = payment.request, payment.candidate.entry
    await payment.open(
        request_method=request.method,
        request_url=str(request.url),
        request_body=payment.body,
        request_headers=request.headers.multi_items(),
        payment_request_code=getattr(entry, "payment_request_code", None),
    )
    return _pay


async def _pay(payer: Payer, payment: Payment) -> State:
    """From here on, money may move: the rail pays, and its proof is recorded before it
    leaves the process; its receipt counts."""
    rail, entry, intent = payment.candidate.rail, payment.candidate.entry, payment.intent
    guard = payment.guard
    assert guard is not None
    payment.rail_called = True
    _trail(payment.entry, "paying", intent.rail)
    paid = await payment.stack.enter_async_context(
        rail.pay(entry, intent, guard.settings, payment.note)
    )
    paid = _framed(rail, paid, payment)
    await payment.prove(
        paid.proof,
        payment_request_code=paid.payment_request_code,
        transaction_code=paid.transaction_code,
        blockchain_tx_id=paid.blockchain_tx_id,
    )
    if paid.adds is not None:
        await payment.book_at_most(paid.adds)
    made = receipt_of(intent, paid, datetime.now(timezone.utc), guard.payments + 1)
    guard.paid(made, certain=payment.moves_first)
    _log_payment(logging.DEBUG, "proving", intent)
    payment.proof = delivering(
        guard, payment.request, payment.body, payment.send, intent, paid,
        options=payer.options, moves_first=payment.moves_first, made=made, entry=payment.entry,
    )  # fmt: skip
    return _deliver


async def _deliver(payer: Payer, payment: Payment) -> State:
    """The proof goes to the merchant, re-sent as the rules say, until an answer ends it."""
    assert payment.proof is not None
    payment.result = await deliver(payment.proof)
    return _fresh if isinstance(payment.result, PayFresh) else _settle


async def _fresh(payer: Payer, payment: Payment) -> State | None:
    """The merchant wants a fresh payment: this proof is dead."""
    result = payment.result
    assert isinstance(result, PayFresh)
    used = classify_reason(result.reason) is VerifierReason.USED
    outcome: Outcome = "paid" if payment.moves_first and used else "unknown"
    payment.ending = (outcome, result.reason, result.reason)
    return None


async def _settle(payer: Payer, payment: Payment) -> State | None:
    """Served: the record and `on_payment` hear of it; an `upto` payment is booked at
    what the chain says moved."""
    response = payment.result
    assert isinstance(response, httpx.Response)
    receipt = response.extensions.get(RECEIPT_EXTENSION)
    payment.entry.delivered = True
    payment.entry.tx_hash = getattr(receipt, "tx_hash", None)
    if isinstance(receipt, PaymentReceipt) and receipt.authorized_amount is not None:
        receipt = await payer._book_settled(payment, receipt, response)
    elif isinstance(receipt, PaymentReceipt) and isinstance(payment.candidate.rail, Acknowledging):
        receipt = await payer._acknowledged(payment, receipt, response)
    if isinstance(response.stream, GuardedStream):
        response.stream.on_broken = payer._broken_body(payment)
    await payer._notify("on_payment", receipt)
    _log_payment(logging.INFO, "paid", payment.intent)
    payment.ending = ("paid", None, None)
    return None


def _framed(rail: Rail, paid: Paid, payment: Payment) -> Paid:
    """The rail's proof, framed the way this 402 speaks when the rail leaves that to the
    dialect (`Rail.frames_own_proof`), with the payment's identifier when the 402 declared
    the `payment-identifier` extension (the journal's id of this payment: the same in
    every send of the proof, recovery's included)."""
    if rail.frames_own_proof or paid.payload is None:
        return paid
    challenge = payment.challenge
    payment_id = (
        None
        if challenge.payment_identifier is None
        else payment_id_for(payment.journal_id or payment.id)
    )
    header, framed = encode_payment(
        challenge, challenge.accepts[payment.candidate.index], paid.payload, payment_id=payment_id
    )
    return dataclasses.replace(paid, proof=framed, header=header)


# --- the payer: the driver ---------------------------------------------------------------------


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
        #: The EVM key's signer for sign-ins (`sign-in-with-x`), made on first use.
        self._sign_in_signers = SignerCache()

    def __repr__(self) -> str:
        # Also for a payer whose state could not be opened (an error tracker shows it).
        return f"Payer(rails={[r.name for r in getattr(self, '_rails', ())]})"

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
            raise X402Error(
                f"the paid request was led to "
                f"{safe_url(str(request.url.copy_with(query=None)))}, which answered {status} "
                "instead of the resource",
                request=request,
                response=hand_back(response, head if rest is None else b"", None),
            )
        return guard.finish_hop(response)

    async def conclude(self, guard: LogicalRequest, exc: BaseException) -> BaseException:
        """The truth boundary: what the caller gets for `exc` leaving the logical request
        `guard`. Called once, by the outermost layer the client controls.

        Once the request paid, every error is a "money moved" error with the receipts and
        `exc` as its cause; the payment's record learns the resource was not delivered;
        `on_payment_error` hears of every error whose money moved or may have."""
        if not isinstance(exc, Exception) or (isinstance(exc, X402Error) and exc._concluded):
            return exc
        error: Exception = exc
        payment = guard.payment
        if payment is not None and payment.ended_by is exc and not isinstance(exc, X402Error):
            # An untyped error ended a payment attempt: typed by what it means for the money.
            error = self._typed(exc, payment)
        if guard.receipts or isinstance(error, X402Error):
            error = guard.truthful(error)
        if (
            payment is not None
            and guard.receipts
            and not (payment.settled and payment.ended_by is exc)
        ):
            # (A served payment whose settlement the client refused was still delivered.)
            await payment.not_delivered(f"{type(exc).__name__}: {exc}")
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
            from .resend import resend_proof  # recovery's path: loaded when a proof is re-sent

            resent = await resend_proof(
                guard, request, body, send, challenge, settings.proof,
                rails=self._rails, state=self.state, options=self.options,
            )  # fmt: skip
            return guard.finish_hop(resent)
        if (
            not guard.signed_in
            and settings.resume_transaction_code is None
            and SIGN_IN_WITH_X in (challenge.extensions or {})  # most 402s: no call at all
            and offers_sign_in(self.options, challenge)
        ):
            # Signing in moves no money: a 402 to it leaves this 402 to be paid, once.
            guard.signed_in = True
            retry = rebuild(request, body)
            served = await sign_in(self.options, self._sign_in_signers, challenge, retry, send)
            if served is not None:
                return guard.finish_hop(served)
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
            if outcome.challenge is not None:
                logger.info("x402: %s; paying the merchant's corrective 402", outcome.reason)
                challenge = outcome.challenge
                continue
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
            headroom=await budgets.tightest() if budgets.budgets else {},
            now=time.time(),
            resource=str(request.url),
            rail_problem=challenge.rail_problem if challenge.payment_id_required else None,
            entries=challenge.entries,
        )
        skipped: list[SkippedEntry] = list(selection.skipped)
        limit = self.options.max_candidates
        for tried, candidate in enumerate(selection.candidates):
            index, intent = candidate.index, candidate.intent
            if tried >= limit:
                message = f"not tried: {limit} candidates were prepared already (max_candidates)"
                skipped.append(SkippedEntry(index, SkipReason.NOT_TRIED, message, intent))
                continue
            prepare = candidate.rail.prepare
            problem = None if prepare is None else await prepare(candidate.entry, intent)
            if problem is not None:
                skipped.append(SkippedEntry(index, SkipReason.PREPARE_FAILED, problem, intent))
                continue
            try:
                return await self._attempt(guard, challenge, candidate, request, body, send)
            except BudgetExceeded as exc:
                # Another request took the headroom meanwhile: a cheaper entry may still fit.
                why = str(exc).removeprefix("refusing to pay: ").removesuffix("; nothing was paid")
                skipped.append(SkippedEntry(index, SkipReason.OVER_BUDGET, why, intent))
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
        """One payment of one candidate, driven through its states (the module docstring)
        until one says it is done. The payment keeps both stores and decides the outcome;
        the rail's context stays open until the end."""
        payment = guard.payment = Payment(
            self.state, guard, challenge, candidate, request, body, send
        )
        state: State | None = _approve
        try:
            async with payment.stack:
                while state is not None:
                    state = await state(self, payment)
        except BaseException as exc:
            payment.ending = self._ended_by(payment, exc)
            raise
        finally:
            outcome, error, dead = payment.ending
            await payment.finish(outcome, error=error, dead_proof=dead)
            result = payment.detach()
        assert result is not None
        return result

    # --- what the states ask of the payer ----------------------------------------------------

    async def _ask_hook(self, intent: PaymentIntent, request: httpx.Request) -> None:
        """`on_before_payment` approves with `True` only: the hook fails closed."""
        hook = self.options.on_before_payment
        if hook is not None:  # without one, the paid path stays in the flow
            await approve(hook, intent, request=request)

    @staticmethod
    async def _book_settled(
        payment: Payment, receipt: PaymentReceipt, response: httpx.Response
    ) -> PaymentReceipt:
        """An `upto` payment was served: book what the chain says moved, never what the
        merchant's settlement response claims; where the chain cannot tell, the maximum
        stays booked. The receipt says which. A claim of more than was authorized is
        refused: the money moved, but not as the merchant says."""
        intent = payment.intent
        assert payment.proof is not None
        metered = cast(MeteredRail, payment.candidate.rail)
        check = await metered.check_settlement(intent, payment.proof.paid.payload, receipt.tx_hash)
        settled = await payment.settle(check)
        receipt = dataclasses.replace(
            receipt,
            amount=intent.amount if settled is None else settled,
            settled_amount=settled,
            settlement_verified=settled is not None,
        )
        response.extensions = {**response.extensions, RECEIPT_EXTENSION: receipt}
        assert payment.guard is not None
        payment.guard.settled(receipt)
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
    async def _acknowledged(
        payment: Payment, receipt: PaymentReceipt, response: httpx.Response
    ) -> PaymentReceipt:
        """A session voucher was served: the rail holds the merchant's settlement response
        against what it signed (`Acknowledging`), and the receipt says what it verified."""
        assert payment.proof is not None
        assert payment.guard is not None
        rail = cast(Acknowledging, payment.candidate.rail)
        payment.settled = True  # the voucher was handed over and served: it can be claimed
        try:
            receipt = await rail.acknowledge(payment.intent, payment.proof.paid.payload, receipt)
        except PaymentVerificationFailed as exc:
            exc.response = response
            raise
        booked = payment.entry.settled_amount
        if booked is not None:
            receipt = dataclasses.replace(receipt, amount=booked, settled_amount=booked)
        response.extensions = {**response.extensions, RECEIPT_EXTENSION: receipt}
        payment.guard.settled(receipt)
        step = _session_step(payment.intent, receipt, payment.proof.paid.payload)
        _trail(payment.entry, "voucher", step)
        return receipt

    @staticmethod
    def _ended_by(payment: Payment, exc: BaseException) -> _Ending:
        """The outcome of an attempt that `exc` ended (`outcome_of` decides)."""
        outcome = (
            "paid"
            if payment.settled
            else outcome_of(
                exc,
                rail_called=payment.rail_called,
                proved=payment.proved,
                moves_first=payment.moves_first,
            )
        )
        error = f"{type(exc).__name__}: {getattr(exc, 'reason', None) or exc}"
        if isinstance(exc, PaymentOutcomeUnknown):
            found = payment.entry
            found.proof = found.proof or exc.proof
            found.transaction_code = found.transaction_code or exc.transaction_code
            found.payment_request_code = found.payment_request_code or exc.payment_request_code
        if not payment.proved and payment.moves_first and outcome == "unknown":
            logger.warning("x402: payment interrupted; its outcome is unknown (%s)", error)
        payment.ended_by = exc
        return outcome, error, None

    @staticmethod
    def _typed(exc: Exception, payment: Payment) -> X402Error:
        """The typed error for an untyped one that ended `payment`: what it means for the
        money, by how far the payment got."""
        what = f"{type(exc).__name__}: {exc}"
        entry = payment.entry
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
        error.request = payment.request
        return error

    def _broken_body(self, payment: Payment) -> Callable[[X402Error], Awaitable[None]]:
        async def broken(error: X402Error) -> None:
            await payment.broken()
            error._concluded = True
            await self._notify("on_payment_error", error)

        return broken


def _session_step(
    intent: PaymentIntent, receipt: PaymentReceipt, payload: Mapping[str, Any] | None
) -> str:
    """A session payment's ledger step: its channel, the voucher's total, its deposit."""
    shown = f"channel {(receipt.channel_id or '')[:18]}"
    if receipt.cumulative_amount is not None:
        shown += f": {format_amount(receipt.cumulative_amount)} {intent.currency} in total"
    deposit = (payload or {}).get("deposit")
    atomic = deposit.get("amount") if isinstance(deposit, Mapping) else None
    amount = intent.amount_of(int(atomic)) if isinstance(atomic, str) and atomic.isdigit() else None
    if amount is not None:
        shown += f", with a deposit of {format_amount(amount)} {intent.currency}"
    return shown


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
