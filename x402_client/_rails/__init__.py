"""Rails: the ways this client can pay an accept entry.

A rail is the only place that knows one payment method. The payer (`_payer`) asks each
rail, in order, whether it can pay an entry; each that can describes a `PaymentIntent`
(a candidate, tried in that order unless `prefer`/`selector` say otherwise); the one
chosen pays inside `async with rail.pay(...)`, which yields the X-PAYMENT
proof and stays open until the merchant has answered the paid retry (the EVM rail holds
its permit-nonce lock that long).

Which entry is paid is decided before any rail does I/O, by the pure policy (`_policy`),
from each rail's `describe`; `prepare` then runs for the chosen candidate only.

To add a rail, write a module here that implements `Rail` and has a `build(context)`
returning the rail (or None when the options do not enable it, and then, optionally, an
`off(context)` describer that says what enabling it takes), and name the module in
`RAILS`: no existing rail and no flow code changes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal, Protocol

from .._challenge import AcceptEntry
from .._dialects import X_PAYMENT
from .._options import ENV_VARS
from .._types import PaymentIntent

if TYPE_CHECKING:
    from .._options import PaymentOptions
    from .._payment_api import PaymentAPI
    from .._progress import PaymentProgress
    from .._state import KeyedLocks

__all__ = [
    "ANY_CURRENCY",
    "EIP712_DOMAIN",
    "RAILS",
    "Describer",
    "MeteredRail",
    "NotForThisRail",
    "Note",
    "Paid",
    "Rail",
    "RailContext",
    "Rails",
    "RequestSettings",
    "SettlementCheck",
    "build_rails",
    "managed_account_settings",
    "no_note",
    "proves",
    "setting",
    "unpayable",
]

#: The key of `RequestSettings.limits` for a cap given without a currency: it applies to
#: every currency.
ANY_CURRENCY = "*"

#: The EIP-712 domain type of the tokens the EVM rails sign for (name, version, chain id,
#: verifying contract), in the form `sign_typed_data(full_message=...)` takes.
EIP712_DOMAIN: list[dict[str, str]] = [
    {"name": "name", "type": "string"},
    {"name": "version", "type": "string"},
    {"name": "chainId", "type": "uint256"},
    {"name": "verifyingContract", "type": "address"},
]

#: The rail modules, in the order the payer tries their rails on an entry: every rail that
#: can describe it is a candidate, in this order (a chain-A entry: the user's own wallet,
#: then the bridge). Each has `build(context) -> Rail | None`.
RAILS = ("euro", "evm", "eip3009", "permit2", "upto", "chain_a", "bridge")


@dataclasses.dataclass(frozen=True)
class Rails:
    """The rails of one payer."""

    #: The rails the options enable, in `RAILS` order.
    enabled: list[Rail]
    #: What the selection asks about each entry, in `RAILS` order: the enabled rails and,
    #: for a rail the options leave off, its `off(context)` describer, which says what
    #: enabling it takes (and never pays).
    describers: list[Describer]


def build_rails(context: RailContext) -> Rails:
    """The rails `context`'s options enable (each module imported now): a module's
    `build(context)` returns its rail, or None when the options leave it off; then its
    `off(context)`, if it has one, describes the entries it would have paid."""
    import importlib

    enabled: list[Rail] = []
    describers: list[Describer] = []
    for name in RAILS:
        module = importlib.import_module(f"{__name__}.{name}")
        rail: Rail | None = module.build(context)
        if rail is not None:
            enabled.append(rail)
            describers.append(rail)
        elif hasattr(module, "off"):
            describers.append(module.off(context))
    return Rails(enabled, describers)


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


def setting(option: str) -> str:
    """The environment variable of an option (`PaymentOptions.from_env`)."""
    return ENV_VARS[option][0]


def managed_account_settings(options: PaymentOptions) -> list[str]:
    """The environment variables of the managed account's missing settings."""
    values = {"api_key": options.api_key, "from_account": options.from_account}
    values["api_url"] = options.api_url
    return [setting(name) for name, value in values.items() if not value]


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
class Paid:
    """The outcome of paying: the X-PAYMENT value and the codes that identify the payment.

    A rail of the standard x402 world yields `payload` (the scheme's payload object) and
    leaves `proof` empty: the payer frames it in the dialect the 402 spoke (`_dialects`),
    which decides the header and its encoding.
    """

    proof: str = dataclasses.field(repr=False)
    payment_request_code: str | None = None
    transaction_code: str | None = None
    blockchain_tx_id: str | None = None
    payer: str | None = None
    payload: Mapping[str, Any] | None = dataclasses.field(default=None, repr=False)
    #: The request header that carries `proof`.
    header: str = X_PAYMENT


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
    #: Only such rails are considered while resuming an earlier payment.
    resumes_transactions: bool

    def describe(self, entry: AcceptEntry, resource: str) -> PaymentIntent | str: ...


class Rail(Protocol):
    name: str
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

    async def prepare(self, entry: AcceptEntry, intent: PaymentIntent) -> str | None:
        """Checks that need I/O (a balance, the facilitator's spender): a reason, or None.

        May raise a `PaymentRefused` when the entry must not be paid by anyone.
        """
        ...

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
