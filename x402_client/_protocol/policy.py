"""The selection policy: which entries of a 402 this client may pay, in which order. No I/O.

`select()` is a function of data: the raw `accepts` entries, what each rail can describe
(`Rail.describe` is pure), the options' caps and preferences, the per-request settings,
each currency's budget headroom and the clock. It returns the payable candidates, most
preferred first, and for every other entry the reason it was skipped. Only then does the
payer touch the network, and only for the candidate it is about to pay (`Rail.prepare`:
RPC reads, the facilitator's `/supported`), moving to the next candidate when preparation
says it cannot pay. Budget reservation stays atomic at pay time; headroom here only spares
the I/O of preparing an entry the budget could not take anyway.

Rules, in the order they are applied to each entry:

1. unreadable (wrong types, bad amounts) -> `malformed`; unknown scheme -> `unknown_scheme`;
2. no rail can pay it (rail not configured, unknown asset, other network) -> `unpayable`,
   in the words of the rail the entry is for, with every blocker it names (the other
   rails' "not a ... entry" is left out); while resuming a bridge payment only the rail
   that resumes may -> `not_resumable`. An entry that several rails can pay (a chain-A
   entry: the user's own wallet, then the bridge) gives one candidate per rail, in rail
   order, each checked by the rules below (a limit both meet is reported once);
3. a `euro` entry whose `expiresAt` passed more than `EXPIRY_SKEW` seconds ago -> `expired`;
4. no cap for its currency -> `no_cap`; above the cap (the options' or a lower per-request
   one) -> `over_cap`. A cap given without a currency applies to every currency; a
   mapping of caps pays only the currencies it names;
5. budgets are set but none is in its currency -> `no_budget`; above the remaining budget
   of its currency -> `over_budget` (neither while resuming: that payment was reserved
   when it was made);
6. `prefer` orders what is left (ties keep the merchant's order); a `selector` picks one,
   and the others are `not_chosen`.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from .amounts import format_amount
from .budgets import BudgetStatus, budget_text, uncovered_currency
from .challenge import prefer_order
from .errors import (
    AmountLimitExceeded,
    BudgetExceeded,
    InvalidChallenge,
    NoSatisfiableOption,
    PaymentRejectedByHook,
    X402Error,
)
from .models import AcceptEntry, EuroAcceptEntry, InvalidEntry, parse_accept
from .rail_interface import ANY_CURRENCY, Describer, NotForThisRail
from .types import PaymentIntent

if TYPE_CHECKING:
    import httpx

    from .._options import PaymentOptions
    from .rail_interface import RequestSettings

__all__ = [
    "EXPIRY_SKEW",
    "Candidate",
    "Describer",
    "Selection",
    "SkipReason",
    "SkippedEntry",
    "approve",
    "effective_cap",
    "no_candidate_error",
    "select",
]

#: Seconds an entry's `expiresAt` may lie in the past and still be paid: our clock may be
#: ahead of the merchant's by this much. Past it, the merchant would answer "expired".
EXPIRY_SKEW = 30


class SkipReason(str, enum.Enum):
    """Why an entry was not a candidate (`SkippedEntry.reason`)."""

    MALFORMED = "malformed"
    UNKNOWN_SCHEME = "unknown_scheme"
    UNPAYABLE = "unpayable"
    NOT_RESUMABLE = "not_resumable"
    EXPIRED = "expired"
    NO_CAP = "no_cap"
    OVER_CAP = "over_cap"
    #: Budgets are set, and none is in the entry's currency.
    NO_BUDGET = "no_budget"
    OVER_BUDGET = "over_budget"
    NOT_CHOSEN = "not_chosen"
    #: Set by the payer, not by `select`: preparing the entry (I/O) said it cannot be paid.
    PREPARE_FAILED = "prepare_failed"
    #: Set by the payer: the candidate limit (`PaymentOptions.max_candidates`) was reached.
    NOT_TRIED = "not_tried"


#: Reasons that mean "payable, but the user's limits say no".
LIMIT_REASONS = frozenset(
    {SkipReason.NO_CAP, SkipReason.OVER_CAP, SkipReason.NO_BUDGET, SkipReason.OVER_BUDGET}
)
#: Of those, the reasons that are the budget's (`BudgetExceeded`, not `AmountLimitExceeded`).
_BUDGET_REASONS = frozenset({SkipReason.NO_BUDGET, SkipReason.OVER_BUDGET})


@dataclasses.dataclass(frozen=True)
class SkippedEntry:
    """One `accepts` entry that will not be paid, and why (`reason`, `message`)."""

    index: int
    reason: SkipReason
    message: str
    intent: PaymentIntent | None = None
    #: The limit that refused it, as front ends group refusals by: the cap (`over_cap`,
    #: e.g. "0.05 EUR") or the budget (`over_budget`, e.g. "2.00 USD/24h").
    limit: str | None = None

    def __str__(self) -> str:
        return f"accepts[{self.index}]: {self.message}"


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A payable entry: the rail that pays it, the parsed entry and the intent."""

    index: int
    rail: Any
    entry: AcceptEntry
    intent: PaymentIntent


@dataclasses.dataclass(frozen=True)
class Selection:
    """What `select` decided: `candidates` in the order to try, `skipped` the rest."""

    candidates: list[Candidate]
    skipped: list[SkippedEntry]
    readable: int

    @property
    def reasons(self) -> list[str]:
        return [str(s) for s in self.skipped]


def effective_cap(
    currency: str, caps: Mapping[str, Decimal], overrides: Mapping[str, Decimal] | None
) -> Decimal | None:
    """The cap for one payment in `currency`: the options' cap, lowered (never raised) by a
    per-request one. None: no cap, so nothing in that currency is paid.

    A per-request cap under `ANY_CURRENCY` (given without a currency) lowers every
    currency's; a per-request mapping that names neither the currency nor `ANY_CURRENCY`
    leaves it without a cap for that request.
    """
    cap = caps.get(currency)
    if cap is None or overrides is None:
        return cap
    requested = [overrides[key] for key in (currency, ANY_CURRENCY) if key in overrides]
    return min([cap, *requested]) if requested else None


def _no_cap_message(intent: PaymentIntent, caps: Mapping[str, Decimal]) -> str:
    currency = intent.currency
    if currency in caps:
        return (
            f"{_shown(intent)}: this request's max_amount_per_payment names no cap for "
            f"{currency} (a mapping of caps pays only the currencies it names)"
        )
    return (
        f"{_shown(intent)}: max_amount_per_payment names no cap for {currency} (a mapping "
        f"of caps pays only the currencies it names): add {currency} to it, or give one "
        "amount for every currency"
    )


def _shown(intent: PaymentIntent) -> str:
    return f"{format_amount(intent.amount)} {intent.currency}"


def _describe(
    entry: AcceptEntry, rails: Sequence[Describer], resource: str, resuming: bool
) -> list[tuple[Describer, PaymentIntent]] | str | None:
    """Every rail that can pay `entry` with its intent, in rail order (a chain-A entry: the
    user's own wallet, then the bridge); else why not, in the words of the rails the entry
    is for (every blocker each names), or None when it is for none."""
    why_not: list[str] = []
    found: list[tuple[Describer, PaymentIntent]] = []
    for rail in rails:
        if entry.scheme not in rail.schemes or (resuming and not rail.resumes_transactions):
            continue
        described = rail.describe(entry, resource)
        if isinstance(described, PaymentIntent):
            found.append((rail, described))
        elif not isinstance(described, NotForThisRail) and described not in why_not:
            why_not.append(described)
    return found or "; ".join(why_not) or None


def _read(
    parse: Callable[[Any], AcceptEntry | None], raw: Any
) -> AcceptEntry | InvalidEntry | None:
    try:
        return parse(raw)
    except InvalidEntry as exc:
        return exc


def select(
    accepts: Sequence[Any],
    *,
    rails: Sequence[Describer],
    options: PaymentOptions,
    settings: RequestSettings,
    headroom: Mapping[str, Decimal | BudgetStatus],
    now: float,
    resource: str,
    parse: Callable[[Any], AcceptEntry | None] = parse_accept,
    rail_problem: Callable[[Any], str | None] | None = None,
    entries: Sequence[AcceptEntry | InvalidEntry | None] | None = None,
) -> Selection:
    """The payable candidates of a 402, in the order to try them, and why the rest are not.

    `parse` reads one raw entry in the 402's dialect (`_dialects.Challenge.parse_entry`),
    unless `entries` has them read already (`Challenge.entries`: the model, None for an
    unknown scheme, or why it could not be read); `rail_problem` says why a rail must not
    pay this 402 at all (`_dialects.Challenge.rail_problem`): its entries go to the other
    rails, or are skipped with that reason.
    """
    resuming = settings.resume_transaction_code is not None
    limits = _Limits(options, settings, headroom, now, resuming)
    payable: list[Candidate] = []
    skipped: list[SkippedEntry] = []
    readable = 0
    for index, raw in enumerate(accepts):
        entry = _read(parse, raw) if entries is None else entries[index]
        if isinstance(entry, InvalidEntry):
            skipped.append(SkippedEntry(index, SkipReason.MALFORMED, f"malformed: {entry}"))
            continue
        readable += 1
        if entry is None:
            scheme = str(raw.get("scheme"))[:40] if isinstance(raw, dict) else "?"
            skipped.append(
                SkippedEntry(index, SkipReason.UNKNOWN_SCHEME, f"unknown scheme {scheme!r}")
            )
            continue
        found = _paying_rails(index, entry, rails, resource, resuming, rail_problem)
        if isinstance(found, SkippedEntry):
            skipped.append(found)
            continue
        for candidate in found:
            refused = limits.refuse(index, entry, candidate.intent)
            if refused is None:
                payable.append(candidate)
            elif not any((s.index, s.message) == (index, refused.message) for s in skipped):
                skipped.append(refused)  # two rails of one entry meet one limit once
    payable = _switched(_ordered(payable, options, skipped), skipped)
    skipped.sort(key=lambda s: s.index)
    return Selection(payable, skipped, readable)


def _switched(payable: list[Candidate], skipped: Sequence[SkippedEntry]) -> list[Candidate]:
    """`payable`, each candidate in another currency than offers the budget refused (and
    none of whose currency is left to pay) saying why: `PaymentIntent.instead_of`, which
    the approval hook sees before the client pays in a currency the user may not expect."""
    refused: dict[str, str] = {}
    for entry in skipped:
        if entry.reason is SkipReason.OVER_BUDGET and entry.intent is not None:
            refused.setdefault(entry.intent.currency, entry.message)
    for candidate in payable:
        refused.pop(candidate.intent.currency, None)
    if not refused:
        return payable
    switched = []
    for candidate in payable:
        why = "; ".join(m for c, m in refused.items() if c != candidate.intent.currency)
        intent = dataclasses.replace(candidate.intent, instead_of=why or None)
        switched.append(dataclasses.replace(candidate, intent=intent))
    return switched


def _paying_rails(
    index: int,
    entry: AcceptEntry,
    rails: Sequence[Describer],
    resource: str,
    resuming: bool,
    rail_problem: Callable[[Any], str | None] | None,
) -> list[Candidate] | SkippedEntry:
    """Every rail that pays `entry`, in rail order, with its intent, or why none does. A
    rail that `rail_problem` rules out leaves the entry to the others, or skipped with its
    reason."""
    described = _describe(entry, rails, resource, resuming)
    if not isinstance(described, list):
        return _unpayable(index, entry, described, resuming)
    allowed = [
        (rail, intent)
        for rail, intent in described
        if rail_problem is None or rail_problem(rail) is None
    ]
    if not allowed:
        assert rail_problem is not None
        rail, intent = described[0]
        problem = rail_problem(rail)
        assert problem is not None
        return SkippedEntry(index, SkipReason.UNPAYABLE, problem, intent)
    return [Candidate(index, rail, entry, intent) for rail, intent in allowed]


def _unpayable(index: int, entry: AcceptEntry, why: str | None, resuming: bool) -> SkippedEntry:
    if resuming:
        message = "not a bridge entry (resuming a bridge payment)"
        return SkippedEntry(
            index, SkipReason.NOT_RESUMABLE, f"{message}: {why}" if why else message
        )
    if why is None:
        why = f"{entry.scheme} entry on {entry.network}: no rail of this client pays it"
    return SkippedEntry(index, SkipReason.UNPAYABLE, why)


@dataclasses.dataclass(frozen=True)
class _Limits:
    """Rules 3-5 for one 402: what the clock, the caps and the budgets let through."""

    options: PaymentOptions
    settings: RequestSettings
    headroom: Mapping[str, Decimal | BudgetStatus]
    now: float
    resuming: bool

    def refuse(self, index: int, entry: AcceptEntry, intent: PaymentIntent) -> SkippedEntry | None:
        """Why `intent` must not be paid, or None when it may be."""
        options, now = self.options, self.now
        if (
            isinstance(entry, EuroAcceptEntry)
            and entry.expires_at is not None
            and entry.expires_at + EXPIRY_SKEW < now
        ):
            message = f"expired {int(now - entry.expires_at)} s ago (expiresAt {entry.expires_at})"
            return SkippedEntry(index, SkipReason.EXPIRED, message, intent)
        cap = effective_cap(intent.currency, options.max_amount_per_payment, self.settings.limits)
        if cap is None:
            message = _no_cap_message(intent, options.max_amount_per_payment)
            return SkippedEntry(index, SkipReason.NO_CAP, message, intent)
        if intent.amount > cap:
            limit = f"{format_amount(cap)} {intent.currency}"
            message = f"{_shown(intent)} is above max_amount_per_payment {limit}"
            return SkippedEntry(index, SkipReason.OVER_CAP, message, intent, limit)
        if self.resuming:
            # That payment's budget was reserved when it was made.
            return None
        budgeted = {budget.currency for budget in options.budgets}
        if options.budgets and intent.currency not in budgeted:
            message = f"{_shown(intent)}: {uncovered_currency(intent.currency)}"
            return SkippedEntry(index, SkipReason.NO_BUDGET, message, intent)
        room = self.headroom.get(intent.currency)
        left = room.remaining if isinstance(room, BudgetStatus) else room
        if left is None or intent.amount <= left:
            return None
        if isinstance(room, BudgetStatus):
            message = room.refusal(intent.amount)
            return SkippedEntry(
                index, SkipReason.OVER_BUDGET, message, intent, budget_text(room.budget)
            )
        message = f"{_shown(intent)} is above what the budget has left ({format_amount(left)})"
        return SkippedEntry(index, SkipReason.OVER_BUDGET, message, intent)


def _ordered(
    payable: list[Candidate], options: PaymentOptions, skipped: list[SkippedEntry]
) -> list[Candidate]:
    """Rule 6: the `selector` picks one (the others are `not_chosen`, added to `skipped`),
    or `prefer` orders them (ties keep the merchant's order)."""
    if payable and options.selector is not None:
        chosen = options.selector([c.intent for c in payable])
        message = (
            "the selector chose none of the payable entries"
            if chosen is None
            else "not chosen by the selector"
        )
        for candidate in payable:
            if candidate.intent is not chosen:
                skipped.append(
                    SkippedEntry(candidate.index, SkipReason.NOT_CHOSEN, message, candidate.intent)
                )
        return [c for c in payable if c.intent is chosen][:1]
    if options.prefer and len(payable) > 1:
        order = prefer_order([c.intent for c in payable], options.prefer)
        return [payable[i] for i in order]
    return payable


def no_candidate_error(
    skipped: Sequence[SkippedEntry], readable: int, request: httpx.Request | None = None
) -> X402Error:
    """The error for a 402 none of whose entries will be paid.

    No entry readable: `InvalidChallenge`. Otherwise, when the first entry that only the
    user's limits kept from being paid was over a cap (or had none), `AmountLimitExceeded`;
    over the budget (or in a currency no budget covers), `BudgetExceeded`; anything else,
    `NoSatisfiableOption`. Each carries `skipped`, one `SkippedEntry` per entry. No money
    moved in any case.
    """
    reasons = [str(s) for s in skipped]
    listed = " | ".join(reasons)
    if readable == 0:
        return InvalidChallenge(
            f"no accepts entry of the 402 could be read: {listed}",
            request=request,
            skipped=skipped,
        )
    limited = next((s for s in skipped if s.reason in LIMIT_REASONS), None)
    if limited is not None and not any(s.reason is SkipReason.NOT_CHOSEN for s in skipped):
        cls: type[X402Error] = (
            BudgetExceeded if limited.reason in _BUDGET_REASONS else AmountLimitExceeded
        )
        return cls(
            f"refusing to pay: {limited.message}; nothing was paid ({listed})",
            request=request,
            intent=limited.intent,
            skipped=skipped,
        )
    return NoSatisfiableOption(
        f"no accepts entry can be paid by this client: {listed}",
        reasons=reasons,
        skipped=skipped,
        request=request,
    )


async def approve(
    hook: Callable[[PaymentIntent], Any] | None,
    intent: PaymentIntent,
    *,
    request: Any = None,
    of: str = "",
) -> None:
    """`on_before_payment` approves `intent` with `True` only (a sync or async hook): the
    hook fails closed, with `PaymentRejectedByHook`. `of` names what it was asked about
    when that is not the request's payment itself (`" for the channel's deposit"`)."""
    if hook is None:
        return
    try:
        verdict = hook(intent)
        if inspect.isawaitable(verdict):
            verdict = await verdict
    except Exception as exc:
        raise PaymentRejectedByHook(
            f"on_before_payment raised {type(exc).__name__}{of}; nothing was paid",
            request=request,
            intent=intent,
        ) from exc
    if verdict is not True:
        shown = repr(verdict) if len(repr(verdict)) <= 60 else type(verdict).__name__
        raise PaymentRejectedByHook(
            f"on_before_payment returned {shown}{of}; only True approves a payment; "
            "nothing was paid",
            request=request,
            intent=intent,
        )
