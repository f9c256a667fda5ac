"""What a rail is: the interface every rail implements, and the values it exchanges with the
payment flow (`Paid`, `RequestSettings`, `SettlementCheck`). Pure: no I/O.

The rails themselves, and the registry that builds them, are `_rails`'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from .models import AcceptEntry
from .types import Paid, PaymentIntent, PaymentReceipt

if TYPE_CHECKING:
    from .._options import PaymentOptions
    from .._state.payment_api import PaymentAPI
    from .._state.shared import KeyedLocks
    from .events import PaymentProgress

__all__ = [
    "ANY_CURRENCY",
    "Acknowledging",
    "Describer",
    "MeteredRail",
    "NotForThisRail",
    "Note",
    "Rail",
    "RailContext",
    "RequestSettings",
    "SettlementCheck",
    "no_note",
    "proves",
    "unpayable",
]


#: The key of `RequestSettings.limits` for a cap given without a currency: it applies to
#: every currency.
ANY_CURRENCY = "*"


def proves(rail: object, proof: object) -> bool:
    """Whether a decoded proof (`{"payload": {...}, ...}`) can be `rail`'s: a rail that
    names its payload fields (`proof_fields`) proves only payloads with one of them (a
    chain-A entry's direct proof and its bridge proof go to their own rails); a rail that
    names none may prove any proof of an entry it can describe."""
    fields = getattr(rail, "proof_fields", None)
    if fields is None:
        return True
    payload = proof.get("payload") if isinstance(proof, dict) else None
    return isinstance(payload, dict) and any(name in payload for name in fields)


class NotForThisRail(str):
    """A rail's reason for an entry that is not of its kind (`"not a euro entry"`). The
    selection leaves such reasons out when it says why an entry was skipped: the reasons
    that matter are those of the rail the entry is for."""

    __slots__ = ()


def _listed(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def unpayable(what: str, blockers: Sequence[str], settings: Sequence[str] = ()) -> str:
    """Every reason a rail cannot pay an entry of its kind, together:
    `"EVM permit for EURQ on eip155:137: set X402_EUR_EVM_PRIVATE_KEY and
    X402_EUR_RPC_URL_137"`. `settings` are the environment variables that would enable it
    (one "set ..." for all of them)."""
    parts = list(blockers)
    if settings:
        parts.append(f"set {_listed(settings)}")
    return f"{what}: {'; '.join(parts)}"


#: What `rail.pay` is given to record a fact of the payment in progress
#: (`await note(transaction_code="QP...")`) in the ledger and the journal, the moment it
#: exists: a process that dies a moment later must not lose it.
Note = Callable[..., Awaitable[None]]


async def no_note(**facts: str) -> None:
    """A `Note` that records nothing (a rail used on its own, in a test or a tool)."""
    return None


@dataclasses.dataclass(frozen=True)
class RequestSettings:
    """Per-request settings from `request.extensions["x402"]` (see `_request.EXTENSION`).

    `pay=False` passes the 402 through untouched; `limits` can only lower the client's
    caps: a cap given without a currency (key `ANY_CURRENCY`) lowers every currency's, and
    a mapping of caps by currency pays only the currencies it names.
    `resume_transaction_code` makes the bridge rail prove an earlier bridge payment instead
    of paying again (recovery from `PaymentOutcomeUnknown`).
    """

    pay: bool = True
    limits: Mapping[str, Decimal] | None = None
    resume_transaction_code: str | None = None
    #: An X-PAYMENT value paid earlier: re-send it instead of paying (always safe).
    proof: str | None = None
    #: Recovery: the journal entry this request finishes (resume / re-send).
    journal_id: str | None = None


@dataclasses.dataclass(frozen=True)
class SettlementCheck:
    """What the chain says of an `upto` authorization: `settled` (`atomic` moved, at most
    the authorized maximum, in `block`), `void` (its deadline passed with its nonce unused:
    nothing moved and nothing can), or `unverified` (nothing could be told for sure;
    `final` when it never will be: the nonce was consumed where no named transaction says
    how much). `detail` says why, in words."""

    status: Literal["settled", "void", "unverified"]
    detail: str
    atomic: int | None = None
    block: int | None = None
    final: bool = False


class RailContext(Protocol):
    """What a rail may use from the payer that owns it."""

    @property
    def options(self) -> PaymentOptions: ...

    @property
    def locks(self) -> KeyedLocks:
        """Locks shared by every client of the same options (EVM permit nonces)."""
        ...

    def payment_api(self) -> PaymentAPI: ...

    async def report(self, event: PaymentProgress) -> None: ...


class Describer(Protocol):
    """The pure half of a rail (`Rail.describe`): what the selection asks about an entry."""

    name: str
    #: The schemes of the entries it describes: the selection asks it of no other entry.
    schemes: frozenset[str]
    #: Only such rails are considered while resuming an earlier payment.
    resumes_transactions: bool

    def describe(self, entry: AcceptEntry, resource: str) -> PaymentIntent | str: ...


class Rail(Protocol):
    name: str
    #: The schemes of the entries it describes: the selection asks it of no other entry.
    schemes: frozenset[str]
    #: True when the proof exists only after money moved (euro, bridge); False when the
    #: merchant moves the money with the proof (EVM permit).
    money_moves_before_proof: bool
    #: True when `pay` yields the finished proof (`Paid.proof`, `Paid.header`); False when
    #: it yields the scheme's payload (`Paid.payload`) for the payer to frame in the dialect
    #: the 402 spoke (the standard x402 world).
    frames_own_proof: bool
    #: True when the rail can prove an earlier payment of its own from a transaction code
    #: (`RequestSettings.resume_transaction_code`) instead of paying again.
    resumes_transactions: bool

    def describe(self, entry: AcceptEntry, resource: str) -> PaymentIntent | str:
        """The intent for paying `entry`, or why this rail cannot: a `NotForThisRail` for
        an entry of another kind, else `unpayable(...)` with every blocker. No I/O."""
        ...

    #: Checks that need I/O (a balance, the facilitator's spender), for the candidate about
    #: to be paid: a reason it cannot be paid, or None. May raise a `PaymentRefused` when
    #: the entry must not be paid by anyone. None on a rail that needs no I/O to know.
    prepare: Callable[[AcceptEntry, PaymentIntent], Awaitable[str | None]] | None

    def pay(
        self,
        entry: AcceptEntry,
        intent: PaymentIntent,
        settings: RequestSettings,
        note: Note = no_note,
    ) -> AbstractAsyncContextManager[Paid]:
        """Make the payment; the context stays open until the merchant has answered.
        `note` records each fact the moment it exists (see `Note`)."""
        ...


class MeteredRail(Rail, Protocol):
    """A rail whose merchant settles at most what was authorized (`upto`): what moved is
    read from the chain, never taken from the merchant's settlement response."""

    async def check_settlement(
        self, intent: PaymentIntent, payload: Mapping[str, Any] | None, transaction: str | None
    ) -> SettlementCheck:
        """What the chain says the signed `payload` moved, given the settlement transaction
        the merchant named. Never raises: what cannot be read is `unverified`."""
        ...


@runtime_checkable
class Acknowledging(Protocol):
    """A rail whose every served payment must be checked against what it signed before the
    next one (`session`: the merchant's acknowledged cumulative total of a channel)."""

    async def acknowledge(
        self, intent: PaymentIntent, payload: Mapping[str, Any] | None, receipt: PaymentReceipt
    ) -> PaymentReceipt:
        """The receipt of a served payment, with what the rail verified; raises
        `PaymentVerificationFailed` (money moved) when the merchant's answer contradicts it."""
        ...
