"""The caller's logical request: one `client.send`, across all its redirect hops.

Its state (`LogicalRequest`: payments made, their receipts, the record of the last payment,
the origin that per-request recovery settings belong to) rides in `request.extensions`,
which httpx copies from hop to hop, so every hop sees the same object. Nothing
per-request is kept on the shared payer. The caller's per-request settings arrive in
`request.extensions[EXTENSION]`; the receipt leaves in `response.extensions[RECEIPT_EXTENSION]`.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import httpx

from .._protocol.amounts import AmountError, format_amount, parse_amount
from .._protocol.errors import (
    ConfigurationError,
    PaymentOutcomeUnknown,
    PaymentVerificationFailed,
    X402Error,
)
from .._protocol.rail_interface import ANY_CURRENCY, RequestSettings
from .._protocol.types import PaymentReceipt

if TYPE_CHECKING:
    from .payer import Payer
    from .record import PaymentRecord

__all__ = [
    "EXTENSION",
    "GUARD",
    "RECEIPT_EXTENSION",
    "REDIRECTS",
    "LogicalRequest",
    "origin_of",
    "redirect_target",
    "request_of",
]

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


#: Shared by every logical request that paid nothing (never mutated: `paid` replaces them).
_NO_RECEIPTS: list[PaymentReceipt] = []
_NO_FLAGS: list[bool] = []


def origin_of(url: httpx.URL) -> tuple[str, str, int | None]:
    """A URL's origin: scheme, host and port (None for the scheme's default)."""
    return (url.scheme, url.host, url.port)


def _parse_settings(raw: Any) -> RequestSettings:
    if raw is None:
        return RequestSettings()
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
    resume = raw.get("resume_transaction_code")
    if resume is not None and not isinstance(resume, str):
        raise ConfigurationError("resume_transaction_code must be a string")
    proof = raw.get("proof")
    if proof is not None and not isinstance(proof, str):
        raise ConfigurationError("proof must be the X-PAYMENT string")
    journal_id = raw.get("journal_id")
    if journal_id is not None and not isinstance(journal_id, str):
        raise ConfigurationError("journal_id must be a string")
    return RequestSettings(
        pay=pay,
        limits=limits,
        resume_transaction_code=resume,
        proof=proof,
        journal_id=journal_id,
    )


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
        "raw_settings",
        "receipts",
        "record",
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
        self.done = False
        self.bounded = bounded
        #: The payer that answered a 402 of this request, and the record of its payment.
        self.payer: Payer | None = None
        self.record: PaymentRecord | None = None
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
            self._settings = _parse_settings(self.raw_settings)
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
