"""Every error this package raises, in one tree.

All of them subclass `httpx.HTTPError`, so code that already catches httpx errors
keeps working, and `X402Error` catches exactly ours:

```
httpx.HTTPError
└── X402Error
    ├── ConfigurationError         options are unusable (missing extra, bad RPC chain, ...)
    ├── DestinationRefused         a destination guard refused the host; nothing was sent
    ├── ChallengeError             the 402 answer cannot be paid; no money moved
    │   ├── InvalidChallenge       malformed, oversized or lying 402 body
    │   └── NoSatisfiableOption    well-formed, but no entry this client can pay
    ├── PaymentRefused             the client decided not to pay; no money moved
    │   ├── AmountLimitExceeded    above `max_amount_per_payment`
    │   ├── BudgetExceeded         above the cumulative budget
    │   ├── PaymentRejectedByHook  `on_before_payment` said no (or raised)
    │   ├── UnreplayableRequest    the request body cannot be sent twice
    │   ├── SpenderMismatch        EVM: `extra.spender` is not the facilitator's
    │   └── BridgeResumeRefused    the code to resume does not pay this entry
    ├── PaymentFailed              the payment was attempted and did not happen; no money moved
    │   ├── PaymentAPIError        the payment API answered an error (code, message)
    │   │   └── InsufficientFunds
    │   └── BridgeTransferFailed   the bridge transaction was cancelled, expired or failed
    ├── PaymentVerificationFailed  paid, but the resource was not delivered (reason)
    │   └── PaymentNotConfirmed    the verifier kept answering "not confirmed"
    └── PaymentOutcomeUnknown      money may have moved: carries what is needed to recover
```

Every error says whether money moved in `money_moved`: False, True, or None ("may have").
`ChallengeError`, `PaymentRefused` and `PaymentFailed` are always False.
`PaymentVerificationFailed` is True on rails that pay before the proof (euro, bridge) and
None where the merchant settles a signed authorization (EVM, chain-A direct: one refused
stays valid until its deadline). `PaymentOutcomeUnknown` is None: never pay again blindly;
re-send its `proof` (safe) or resume from its `transaction_code`. The whole mapping, error
by error and step by step, is docs/failure-semantics.md.

`error.recovery()` says the same as data: None when no money moved, else a
`RecoveryAdvice` (the payment's journal id, the proof or transaction code that finishes it
without paying again, and `hint`: what to do, in Python).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import httpx

if TYPE_CHECKING:
    from .types import PaymentIntent, PaymentReceipt

__all__ = [
    "AmountLimitExceeded",
    "BridgeResumeRefused",
    "BridgeTransferFailed",
    "BudgetExceeded",
    "ChallengeError",
    "ConfigurationError",
    "DestinationRefused",
    "InsufficientFunds",
    "InvalidChallenge",
    "NoSatisfiableOption",
    "PaymentAPIError",
    "PaymentFailed",
    "PaymentNotConfirmed",
    "PaymentOutcomeUnknown",
    "PaymentRefused",
    "PaymentRejectedByHook",
    "PaymentVerificationFailed",
    "RecoveryAdvice",
    "SpenderMismatch",
    "UnreplayableRequest",
    "X402Error",
]


@dataclass(frozen=True)
class RecoveryAdvice:
    """What to do after an error that moved money, or may have: never pay again, finish it.

    `money_moved` is the error's (True, or None for "may have"). `outcome` is "paid" (the
    payment was made and the resource not delivered) or "unknown". `payment_id` is the
    payment's journal id when a state file journaled it (`payments(client).recover(id)` and
    `x402-eur resume ID` finish it). `proof` is the X-PAYMENT value whose re-sending is safe
    (pays nothing); `transaction_code` the bridge transaction to resume instead of paying;
    `payment_request_code` the euro payment request that was paid. `receipts` record what
    was paid. `hint` says what to do in Python; front ends say it in their own words.
    """

    money_moved: bool | None
    outcome: Literal["paid", "unknown"]
    payment_id: str | None = None
    proof: str | None = None
    transaction_code: str | None = None
    payment_request_code: str | None = None
    receipts: tuple[PaymentReceipt, ...] = ()

    @property
    def hint(self) -> str:
        """What to do, for a Python caller."""
        ways = []
        if self.payment_id is not None:
            ways.append(f"payments(client).recover({self.payment_id!r}) finishes it")
        if self.transaction_code is not None:
            ways.append(
                "payments(client).recover(error), or the same request with "
                f"extensions={{'x402': {{'resume_transaction_code': {self.transaction_code!r}}}}}"
            )
        if self.proof is not None:
            ways.append("the same request with extensions={'x402': {'proof': error.proof}}")
        if not ways:
            if self.receipts:
                return "do not pay again: the receipts identify the payment for the merchant"
            if self.payment_request_code is not None:
                return (
                    f"do not pay again: payment request {self.payment_request_code} "
                    "identifies the payment for the provider"
                )
            return "do not pay again: payments(client).ledger lists the payment"
        return "do not pay again; " + "; or ".join(ways) + " (pays nothing)"

    def __str__(self) -> str:
        return self.hint


class X402Error(httpx.HTTPError):
    """Base class of every error raised by x402_client.

    `intent` is the payment the client was about to make or made, when there was one.
    `response` is the merchant's 402 when the error is about it (its body stays readable).
    `skipped` lists, for a 402 none of whose entries was paid, each entry and why it was
    skipped (`SkippedEntry`: `index`, `reason`, `message`).
    """

    #: Set once the truth boundary has handled the error (converted and reported once).
    _concluded = False
    #: The journal id of the payment the error is about, when a state file journaled it.
    payment_id: str | None = None

    def __init__(
        self,
        message: str,
        *,
        request: httpx.Request | None = None,
        intent: PaymentIntent | None = None,
        response: httpx.Response | None = None,
        skipped: Sequence[Any] = (),
    ) -> None:
        super().__init__(message)
        if request is not None:
            self.request = request
        self.intent = intent
        self.response = response
        self.skipped = list(skipped)

    @property
    def money_moved(self) -> bool | None:
        """False: no money moved. True: it did. None: it may have (`PaymentOutcomeUnknown`)."""
        return False

    def recovery(self) -> RecoveryAdvice | None:
        """None when no money moved; else what finishes the payment without paying again."""
        moved = self.money_moved
        if moved is False:
            return None
        return RecoveryAdvice(
            money_moved=moved,
            outcome="unknown",
            payment_id=self.payment_id,
            proof=getattr(self, "proof", None),
            transaction_code=getattr(self, "transaction_code", None),
            payment_request_code=getattr(self, "payment_request_code", None),
            receipts=tuple(getattr(self, "receipts", ())),
        )


class ConfigurationError(X402Error):
    """The options cannot work: a missing extra, a malformed key, an RPC on the wrong chain."""


class DestinationRefused(X402Error):
    """A `DestinationGuard` refused the host before anything was sent: it resolves to an
    address that is not public (loopback, private, link-local, ...) and is not admitted.

    `host` and `port` are the request's; `address` the refused IP (None when the host
    resolves to nothing); `reason` says why, e.g. "127.0.0.1 is a loopback address".
    No money moved.
    """

    def __init__(
        self,
        message: str,
        *,
        host: str,
        port: int,
        address: str | None = None,
        reason: str | None = None,
        request: httpx.Request | None = None,
    ) -> None:
        super().__init__(message, request=request)
        self.host = host
        self.port = port
        self.address = address
        self.reason = reason


class ChallengeError(X402Error):
    """The 402 answer cannot be paid. No money moved."""


class InvalidChallenge(ChallengeError):
    """The 402 body is malformed: not JSON, too large, wrong version, wrong types or amounts."""


class NoSatisfiableOption(ChallengeError):
    """The 402 is well-formed but no `accepts` entry can be paid by this client.

    `reasons` holds one line per entry saying why it was passed over.
    """

    def __init__(
        self,
        message: str,
        *,
        reasons: Sequence[str] = (),
        request: httpx.Request | None = None,
        response: httpx.Response | None = None,
        skipped: Sequence[Any] = (),
    ) -> None:
        super().__init__(message, request=request, response=response, skipped=skipped)
        self.reasons = list(reasons) or [str(s) for s in skipped]


class PaymentRefused(X402Error):
    """The client decided not to pay. No money moved."""


class AmountLimitExceeded(PaymentRefused):
    """The price is above `max_amount_per_payment` for its currency."""


class BudgetExceeded(PaymentRefused):
    """Paying would exceed the cumulative budget."""


class PaymentRejectedByHook(PaymentRefused):
    """`on_before_payment` returned False or raised (the exception is the `__cause__`)."""


class UnreplayableRequest(PaymentRefused):
    """The request body is a one-shot stream, so the paid retry could not carry it.

    Refused before paying: send the body as bytes (`content=`, `json=`, `data=`) instead.
    """


class SpenderMismatch(PaymentRefused):
    """EVM: the 402's `extra.spender` is not the facilitator's announced spender."""


class BridgeResumeRefused(PaymentRefused):
    """`resume_transaction_code` names a transaction that does not pay this entry.

    Nothing was paid. `transaction_code` is the code given; `reason` says what did not
    match (not found, not a blockchain-address payment, another receiver, a smaller
    amount, another paying account).
    """

    def __init__(
        self,
        message: str,
        *,
        transaction_code: str,
        reason: str,
        request: httpx.Request | None = None,
        intent: PaymentIntent | None = None,
    ) -> None:
        super().__init__(message, request=request, intent=intent)
        self.transaction_code = transaction_code
        self.reason = reason


class PaymentFailed(X402Error):
    """The payment was attempted and did not happen. No money moved."""


class PaymentAPIError(PaymentFailed):
    """The managed-account payment API refused the payment.

    `status_code`, `code` and `provider_message` are what the provider said.
    """

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        code: str | None = None,
        provider_message: str | None = None,
        request: httpx.Request | None = None,
        intent: PaymentIntent | None = None,
    ) -> None:
        super().__init__(message, request=request, intent=intent)
        self.status_code = status_code
        self.code = code
        self.provider_message = provider_message


class InsufficientFunds(PaymentAPIError):
    """The paying account's balance does not cover the price."""


class BridgeTransferFailed(PaymentFailed):
    """The bridge transaction ended as `Cancelled`, `Expired` or failed; `status` says which."""

    def __init__(
        self,
        message: str,
        *,
        transaction_code: str,
        status: str | None,
        request: httpx.Request | None = None,
        intent: PaymentIntent | None = None,
    ) -> None:
        super().__init__(message, request=request, intent=intent)
        self.transaction_code = transaction_code
        self.status = status


class PaymentVerificationFailed(X402Error):
    """The client paid, but the request did not end in the paid resource: the merchant
    refused the proof with `reason`, or a later step of the same request failed.

    Money moved: `receipt` records the (last) payment, `receipts` every payment this
    request made, and `proof` is the X-PAYMENT value sent. On a rail where the merchant
    moves the money with a signed authorization (EVM), a refused proof may still be
    settled until it expires: `money_moved` is then None ("may have"), not True.
    `response` is the merchant's answer when it was neither the resource nor a 402 (a 429,
    a 404, ...), its body readable.
    """

    def __init__(
        self,
        message: str,
        *,
        reason: str,
        receipt: PaymentReceipt | None = None,
        receipts: Sequence[PaymentReceipt] = (),
        proof: str | None = None,
        request: httpx.Request | None = None,
        intent: PaymentIntent | None = None,
        response: httpx.Response | None = None,
        money_moved: bool | None = True,
    ) -> None:
        super().__init__(message, request=request, intent=intent, response=response)
        self.reason = reason
        self.receipts = list(receipts) or ([receipt] if receipt is not None else [])
        self.receipt = receipt if receipt is not None else (self.receipts[-1] if receipts else None)
        self.proof = proof
        self._money_moved = money_moved

    @property
    def money_moved(self) -> bool | None:
        return self._money_moved

    def recovery(self) -> RecoveryAdvice | None:
        advice = super().recovery()
        if advice is None:
            return None
        return RecoveryAdvice(
            money_moved=advice.money_moved,
            outcome="paid",
            payment_id=self.payment_id,
            proof=self.proof,
            payment_request_code=self.receipt.payment_request_code if self.receipt else None,
            receipts=advice.receipts,
        )


class PaymentNotConfirmed(PaymentVerificationFailed):
    """The verifier still answered "not confirmed" after the bounded re-sends.

    Re-sending the same `proof` later is safe; paying again is not needed.
    """


class PaymentOutcomeUnknown(X402Error):
    """The payment's end is unknown: the money may have moved and the client cannot tell
    (`money_moved` None), or it moved, since the client paid first (euro, chain A, the
    bridge), and whether the resource will be served is unknown (`money_moved` True).

    Never pay again for the same intent. What to do instead:

    - `proof`, when set: re-send it, which is safe: the same request with
      `extensions={"x402": {"proof": error.proof}}`; the merchant either serves the
      resource or says the proof was already used.
    - `transaction_code`, when set (the bridge): resume without paying again, with
      `payments(client).recover(error)` or by re-sending the request with
      `extensions={"x402": {"resume_transaction_code": error.transaction_code}}`.
    - `payment_request_code`: the euro payment request that was being paid.
    """

    def __init__(
        self,
        message: str,
        *,
        proof: str | None = None,
        payment_request_code: str | None = None,
        transaction_code: str | None = None,
        receipt: PaymentReceipt | None = None,
        receipts: Sequence[PaymentReceipt] = (),
        status_code: int | None = None,
        code: str | None = None,
        provider_message: str | None = None,
        request: httpx.Request | None = None,
        intent: PaymentIntent | None = None,
        response: httpx.Response | None = None,
        money_moved: bool | None = None,
    ) -> None:
        super().__init__(message, request=request, intent=intent, response=response)
        self._money_moved = money_moved
        self.proof = proof
        self.payment_request_code = payment_request_code
        self.transaction_code = transaction_code
        self.receipts = list(receipts) or ([receipt] if receipt is not None else [])
        self.receipt = receipt if receipt is not None else (self.receipts[-1] if receipts else None)
        self.status_code = status_code
        self.code = code
        self.provider_message = provider_message

    @property
    def money_moved(self) -> bool | None:
        """None: the money may have moved. True: it moved (the client paid first, through
        the payment API or its own wallet) and what became of the purchase is unknown."""
        return self._money_moved


#: The classes `x402_client` exports name themselves by that path, the one users import
#: and catch: a traceback reads `x402_client.AmountLimitExceeded: ...`, not this private
#: module. Safe for pickling (pickle finds each as `x402_client.<name>`, which loads it)
#: and for typing (type checkers read `__init__.pyi`, not `__module__`).
for _public in (
    AmountLimitExceeded,
    BridgeTransferFailed,
    BudgetExceeded,
    ChallengeError,
    ConfigurationError,
    DestinationRefused,
    InsufficientFunds,
    InvalidChallenge,
    NoSatisfiableOption,
    PaymentAPIError,
    PaymentFailed,
    PaymentNotConfirmed,
    PaymentOutcomeUnknown,
    PaymentRefused,
    PaymentRejectedByHook,
    PaymentVerificationFailed,
    UnreplayableRequest,
    X402Error,
):
    _public.__module__ = "x402_client"
del _public
