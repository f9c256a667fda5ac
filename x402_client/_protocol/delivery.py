"""Delivering a proof: what to do after each answer to the paid retry. No I/O.

`Delivery` is a small state machine: the driver (`_flow.payment`) sends the request with
the proof, feeds the machine what happened (`failed_in_transit`, `answered`, each with how
many times the request really went out), and gets a `Decision` back:

| what happened                                     | decision                           |
|---------------------------------------------------|------------------------------------|
| not sent (connect refused / timeout), retries left | `RETRY` after a short wait        |
| lost in transit after sending                     | `UNKNOWN`: the merchant may have it |
| 402 "not confirmed (status: Open)", attempts left | `RETRY` with backoff (same proof)  |
| 402 "not confirmed", attempts used up             | `NOT_CONFIRMED`                    |
| 402 "already used" / "expired"                    | `PAY_FRESH` (the payer: once)      |
| the same after a 5xx (our proof may be consumed)  | `UNKNOWN`: never pay again         |
| the same after a layer below re-sent the request  | `UNKNOWN`: never pay again         |
| 402 with any other reason                         | `REFUSED`                          |
| 5xx, retries left / used up                       | `RETRY` (same proof) / `UNKNOWN`   |
| 2xx, or a redirect (3xx)                          | `SERVED`                           |
| any other answer (429, 409, 404, ...)             | `NOT_DELIVERED`: paid, not served  |

A proof is only ever re-sent, never replaced by a second payment, except on `PAY_FRESH`,
which holds only while every send of the proof is one the client made and saw answered. A
layer below the payment (a transport or adapter that retries) may send the paid request
again on its own; the driver counts the sends that really went out (`sent=`), and once
there were more of them than the client made, one of the unseen answers may have consumed
the proof: an "already used" is then no licence to pay again.
A redirect counts as served here; when the caller's client follows it, the answer it
leads to decides in the end (`_payer`: a later hop that fails un-delivers the payment).
"""

from __future__ import annotations

import dataclasses
import enum

from .challenge import VerifierReason, classify_reason
from .errors import PaymentOutcomeUnknown, X402Error
from .ledger import Outcome

__all__ = ["Decision", "Delivery", "Step", "outcome_of", "refused_money_moved"]


class Step(enum.Enum):
    RETRY = "retry"
    SERVED = "served"
    PAY_FRESH = "pay_fresh"
    REFUSED = "refused"
    NOT_CONFIRMED = "not_confirmed"
    UNKNOWN = "unknown"
    NOT_DELIVERED = "not_delivered"


@dataclasses.dataclass(frozen=True)
class Decision:
    step: Step
    #: Seconds to wait before a `RETRY`.
    wait: float = 0.0
    #: The merchant's reason (402 answers) or what went wrong (`UNKNOWN`).
    reason: str | None = None


@dataclasses.dataclass(kw_only=True)
class Delivery:
    """The state of delivering one proof. `resend=True` for a proof paid earlier.

    The rules it runs under are the options' (`PaymentOptions.confirmation_attempts`,
    `confirmation_wait`, `confirmation_max_wait`, `merchant_error_retries`): the caller
    passes them.
    """

    confirmation_attempts: int
    confirmation_wait: float
    confirmation_max_wait: float
    merchant_error_retries: int
    resend: bool = False
    sends: int = 0
    not_confirmed: int = 0
    merchant_errors: int = 0
    connect_failures: int = 0
    last_reason: str | None = None
    #: Sends of the paid request that a layer below the payment made on its own.
    sent_below: int = 0
    #: Once the merchant may have consumed the proof (it answered 5xx, or a layer below
    #: re-sent the request), a later "already used" is no reason to pay again: it may mean
    #: our own earlier delivery.
    maybe_consumed: bool = False

    def _sent(self, sent: int | None) -> None:
        """One of the client's sends ended. `sent`: how many times the paid request went
        out in all so far, counted where it is written, below every layer (None: not
        counted). More than the client's own sends means a layer below re-sent it, and an
        answer the client never saw may have consumed the proof."""
        self.sends += 1
        below = 0 if sent is None else sent - self.sends
        if below > self.sent_below:
            self.sent_below = below
            self.maybe_consumed = True

    def failed_in_transit(
        self, *, never_sent: bool, error: str, sent: int | None = None
    ) -> Decision:
        """A send failed before an answer (`never_sent`: before it left this process)."""
        self._sent(sent)
        never_sent = never_sent and not self.sent_below
        if never_sent and self.connect_failures < self.merchant_error_retries:
            self.connect_failures += 1
            return Decision(Step.RETRY, wait=0.2 * self.connect_failures)
        return Decision(
            Step.UNKNOWN,
            reason=f"the paid request failed in transit ({error}); the merchant may have the "
            "proof; re-sending it is safe",
        )

    def answered(
        self, status: int, reason: str | None = None, *, sent: int | None = None
    ) -> Decision:
        """The merchant answered `status` (`reason`: the `error` of a 402 body)."""
        self._sent(sent)
        if status == 402:
            self.last_reason = reason
            kind = classify_reason(reason)
            if kind is VerifierReason.NOT_CONFIRMED:
                self.not_confirmed += 1
                if self.not_confirmed < self.confirmation_attempts:
                    wait = min(
                        self.confirmation_max_wait,
                        self.confirmation_wait * 2 ** (self.not_confirmed - 1),
                    )
                    return Decision(Step.RETRY, wait=wait, reason=reason)
                return Decision(Step.NOT_CONFIRMED, reason=reason)
            if kind in (VerifierReason.USED, VerifierReason.EXPIRED, VerifierReason.STALE):
                if self.maybe_consumed:
                    return Decision(Step.UNKNOWN, reason=self._consumed(reason))
                return Decision(Step.PAY_FRESH, reason=reason)
            return Decision(Step.REFUSED, reason=reason or "402 without a reason")
        if status >= 500:
            self.maybe_consumed = True
            if self.merchant_errors < self.merchant_error_retries:
                self.merchant_errors += 1
                return Decision(Step.RETRY, wait=0.2 * self.merchant_errors)
            return Decision(
                Step.UNKNOWN,
                reason=f"the merchant answered {status} to the paid request; re-sending the "
                "proof is safe",
            )
        if 200 <= status < 400:
            return Decision(Step.SERVED)
        return Decision(
            Step.NOT_DELIVERED,
            reason=f"the merchant answered {status} to the paid request instead of the resource",
        )

    def _consumed(self, reason: str | None) -> str:
        if self.sent_below:
            times = self.sends + self.sent_below
            return (
                f"the merchant says {reason!r}, but the paid request went out {times} times "
                "while the client sent it "
                f"{'once' if self.sends == 1 else f'{self.sends} times'}: a layer below the "
                "payment (a retrying transport or adapter) re-sent it, and an answer the client "
                "never saw may have consumed the proof. Not paying again."
            )
        return (
            f"the merchant says {reason!r} after an earlier attempt failed on its side; it "
            "may have consumed the proof. Not paying again."
        )


# --- what an attempt's ending means for the money -----------------------------------------


def outcome_of(
    exc: BaseException | None,
    *,
    rail_called: bool,
    proved: bool,
    moves_first: bool,
) -> Outcome:
    """The ledger outcome of an attempt that ended with `exc` (None: it ended without an
    error, having proved):

    - before the rail is called nothing can have moved: `failed`, and the reservation is
      released (whatever went wrong, an untyped error included);
    - the rail was called but no proof exists: `failed` when the rail says so with a typed
      error, `unknown` when it may have paid (a lost answer, an interruption on a rail whose
      money moves before the proof);
    - a proof exists: `paid` on rails where the proof means the money moved (euro, bridge),
      `unknown` on rails where the merchant moves it with the proof and did not serve (an
      EVM authorization that was not settled stays spendable until it expires).

    Only `failed` gives the reservation back."""
    if not rail_called:
        return "failed"
    if not proved:
        if isinstance(exc, PaymentOutcomeUnknown):
            return "unknown"
        if isinstance(exc, X402Error):
            return "failed"
        return "unknown" if moves_first else "failed"
    return "paid" if moves_first else "unknown"


def refused_money_moved(moves_first: bool) -> bool | None:
    """What a refused proof says of the money: moved on rails that pay before the proof;
    may have on rails where the merchant settles a signed authorization (it stays valid
    until it expires, whatever the merchant said)."""
    return True if moves_first else None
