"""One payment, one record: the ledger entry, the journal row, the owner's claim, the budget
reservation and the outcome of a payment live in one `PaymentRecord` with one life cycle:

```
open --reserve--> reserved --journal--> journaled --rail--> rail called --proof--> proved
                                                                                     |
                          delivered | not delivered | refused | failed  <------------+
```

The flow (`_payer`) calls the record; the record writes both stores (the in-memory ledger
and, with a state file, the journal). Without a state file the journal is `NullJournal`,
whose calls do nothing, so no caller checks for it.

The outcome rules (docs/failure-semantics.md) live in `outcome_of`, a pure function:

- before the rail is called nothing can have moved: `failed`, and the reservation is
  released (whatever went wrong, an untyped error included);
- the rail was called but no proof exists: `failed` when the rail says so with a typed
  error, `unknown` when it may have paid (a lost answer, an interruption on a rail whose
  money moves before the proof);
- a proof exists: `paid` on rails where the proof means the money moved (euro, bridge),
  `unknown` on rails where the merchant moves it with the proof and did not serve (an EVM
  authorization that was not settled stays spendable until it expires).

Only `failed` gives the reservation back. A record is `delivered` only when the merchant
served the paid request (2xx, or a redirect the caller's client follows to a success).

Journal writes after the rail was called never break a payment: money may be moving, and
delivering the resource is worth more than the record of it. Such a failure is logged (the
record in memory keeps the truth). The one exception is the proof of a settle-on-proof
rail: it has not left the process yet, and one that recovery could not know of is never
handed over.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import anyio
import httpx

from .._protocol.amounts import format_amount
from .._protocol.errors import PaymentFailed, PaymentOutcomeUnknown, X402Error
from .._protocol.ledger import LedgerEntry, Outcome

if TYPE_CHECKING:
    from .._protocol.rail_interface import SettlementCheck
    from .._protocol.types import PaymentIntent
    from .._state.budget_stores import Budgets, Reservation
    from .._state.shared import PaymentState
    from .._state.sqlite_store import JournalRecord, SqliteStore

__all__ = [
    "NullJournal",
    "PaymentRecord",
    "book_journaled",
    "give_back",
    "outcome_of",
    "refused_money_moved",
    "settlement_step",
]

logger = logging.getLogger("x402_client")


class NullJournal:
    """The journal of options without a state file: nothing is written."""

    async def open_payment(self, *, id: str | None = None, **_: Any) -> str:
        return id or ""

    async def update_payment(self, id: str, **facts: Any) -> None:
        return None

    async def finish_payment(self, id: str, outcome: Any, **_: Any) -> None:
        return None

    async def mark_unrecoverable(self, id: str, reason: str) -> None:
        return None


NULL_JOURNAL = NullJournal()


def outcome_of(
    exc: BaseException | None,
    *,
    rail_called: bool,
    proved: bool,
    moves_first: bool,
) -> Outcome:
    """The ledger outcome of an attempt that ended with `exc` (None: it ended without an
    error, having proved; see the module docstring)."""
    if not rail_called:
        return "failed"
    if not proved:
        if isinstance(exc, PaymentOutcomeUnknown):
            return "unknown"
        if isinstance(exc, X402Error):
            return "failed"
        return "unknown" if moves_first else "failed"
    return "paid" if moves_first else "unknown"


class PaymentRecord:
    """One payment intent and everything kept about it, in memory and on disk."""

    __slots__ = (
        "_budgets",
        "_journal",
        "ended_by",
        "entry",
        "held",
        "journal_id",
        "moves_first",
        "proved",
        "rail_called",
        "request",
        "resumed",
        "settled",
    )

    def __init__(
        self,
        state: PaymentState,
        intent: PaymentIntent,
        *,
        moves_first: bool,
        resume_transaction_code: str | None = None,
        journal_id: str | None = None,
    ) -> None:
        ledger = state.ledger
        found = (
            ledger.find_transaction(resume_transaction_code) if resume_transaction_code else None
        )
        self.entry: LedgerEntry = found if found is not None else ledger.open(intent)
        self._journal: SqliteStore | NullJournal = (
            state.journal if state.journal is not None else NULL_JOURNAL
        )
        self._budgets: Budgets = state.budgets
        #: A resumed payment finishes the journal row it came from, when recovery named it.
        self.journal_id: str | None = journal_id if resume_transaction_code else None
        self.resumed = resume_transaction_code is not None
        self.moves_first = moves_first
        self.held: Sequence[Reservation] = ()
        self.rail_called = False
        self.proved = False
        #: The merchant's settlement response said the money moved (an `upto` payment).
        self.settled = False
        #: The exception that ended the attempt, and the request it was for.
        self.ended_by: BaseException | None = None
        self.request: httpx.Request | None = None
        if resume_transaction_code:
            self.entry.step("resumed", resume_transaction_code)

    @property
    def id(self) -> str:
        return self.entry.id

    @property
    def delivered(self) -> bool:
        """The merchant served the paid request (the ledger entry's `delivered`)."""
        return self.entry.delivered

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
        if self.resumed or not self._budgets.budgets:
            return
        self.held = await self._budgets.reserve(intent)
        if self.held:
            self.entry.step("reserved", ", ".join(r.budget.key for r in self.held))

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
        if self.journal_id is not None or self._journal is NULL_JOURNAL:
            return
        with anyio.CancelScope(shield=True):
            self.journal_id = await self._journal.open_payment(
                intent=self.entry.intent,
                request_method=request_method,
                request_url=request_url,
                request_body=request_body,
                request_headers=request_headers,
                reservations=[(r.budget.key, r.id) for r in self.held],
                id=self.entry.id,
                payment_request_code=payment_request_code,
            )

    def calling_rail(self, rail: str) -> None:
        """From here on, money may move."""
        self.rail_called = True
        self.entry.step("paying", rail)

    # --- the rail was called ---------------------------------------------------------------------

    async def note(self, **facts: str) -> None:
        """A fact the rail reports the moment it exists (a transaction code)."""
        entry = self.entry
        for name, value in facts.items():
            setattr(entry, name, value)
        entry.step("noted", ", ".join(sorted(facts)))
        await self._write("a code", self._journal.update_payment, step="noted", **facts)

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
            self._journal.update_payment,
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
        entry.step("proof", transaction_code or payment_request_code or "")

    def step(self, step: str, detail: str = "") -> None:
        self.entry.step(step, detail)

    def served(self, tx_hash: str | None) -> None:
        self.entry.delivered = True
        self.entry.tx_hash = tx_hash

    async def settle(self, check: SettlementCheck) -> Decimal | None:
        """An `upto` payment was served; `check` is what the chain says it moved. Verified:
        the ledger books that (at most the authorized maximum), the budgets keep it and give
        back the rest, and the journal says so (`settled`). Not verified: the maximum stays
        booked and held, and the journal says why (`held`), until recovery can tell. What
        was booked (None: the maximum). Never breaks the payment (the money moved)."""
        self.settled = True
        entry = self.entry
        step, detail, settled = settlement_step(entry.intent, check)
        entry.step(step, detail)
        # The journal first: a row with a `settled` step is never given back again.
        await self._write(
            f"the {step} amount", self._journal.update_payment, step=step, detail=detail
        )
        if settled is None:
            return None
        entry.settled_amount = settled
        self.held = await give_back(self._budgets, self.held, entry.intent.amount, settled, self.id)
        return settled

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
        with anyio.CancelScope(shield=True):
            await self._write(
                "the outcome",
                self._journal.finish_payment,
                "unknown" if outcome == "pending" else outcome,
                delivered=self.delivered,
                error=error,
                tx_hash=self.entry.tx_hash,
            )
            if dead_proof is not None:
                # "already used" / "expired": this proof will never be served.
                await self._write(
                    "a used proof",
                    self._journal.mark_unrecoverable,
                    f"the merchant said {dead_proof!r}; paid again fresh",
                )
            if outcome == "failed" and self.held:
                held, self.held = self.held, ()
                await self._budgets.release(held)

    async def not_delivered(self, reason: str) -> None:
        """A later answer of the same request showed the resource was not served after all
        (a paid redirect that led to an error): the proof may be re-sent."""
        if not self.delivered:
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
        entry.step(step, reason)
        await self._write(
            f"a {step} payment",
            self._journal.finish_payment,
            outcome,
            delivered=False,
            error=reason,
        )


def settlement_step(
    intent: PaymentIntent, check: SettlementCheck
) -> tuple[str, str, Decimal | None]:
    """The journal step of an `upto` settlement check: `("settled", detail, amount)` when
    the chain told what moved (nothing, once the authorization expired unused), else
    `("held", detail, None)`: the authorized maximum stays booked."""
    authorized = intent.amount
    settled = None if check.atomic is None else intent.amount_of(check.atomic)
    if check.status == "unverified" or settled is None:
        return "held", f"{format_amount(authorized)} (the maximum) kept: {check.detail}", None
    shown = f"{format_amount(settled)} of at most {format_amount(authorized)}"
    return "settled", f"{shown}, {check.detail}", settled


async def give_back(
    budgets: Budgets, held: Sequence[Reservation], authorized: Decimal, settled: Decimal, id: str
) -> Sequence[Reservation]:
    """The budgets keep `settled` of the `authorized` amount `held` and give back the rest;
    the reservations now held. A budget store that fails keeps the maximum, and says so in
    the log (the money moved: never an error)."""
    if settled >= authorized or not held:
        return held
    try:
        with anyio.CancelScope(shield=True):
            kept = await budgets.settle(held, authorized, settled)
    except Exception as exc:
        logger.error(
            "x402: the budget store could not give back the unsettled rest of payment %s "
            "(%s); the authorized maximum stays counted",
            id,
            type(exc).__name__,
        )
        return held
    return kept


async def book_journaled(
    state: PaymentState, row: JournalRecord, step: str, detail: str, settled: Decimal | None
) -> None:
    """Book an `upto` settlement on its journal row (a re-sent proof, recovery): the step,
    then the budgets keep `settled` of the reservations the row holds and give back the
    rest. Never raises: a failure is logged and the maximum stays counted."""
    from .._state.budget_stores import Reservation

    journal = state.journal
    if journal is None:
        return
    try:
        with anyio.CancelScope(shield=True):
            await journal.update_payment(row.id, step=step, detail=detail)
            if settled is not None:
                budgets = {budget.key: budget for budget in state.budgets.budgets}
                held = [Reservation(budgets[k], r) for k, r in row.reservations if k in budgets]
                await give_back(state.budgets, held, row.amount, settled, row.id)
    except Exception as exc:
        logger.error(
            "x402: an upto payment's settlement could not be booked (%s); the authorized "
            "maximum stays counted",
            type(exc).__name__,
        )


def refused_money_moved(moves_first: bool) -> bool | None:
    """What a refused proof says of the money: moved on rails that pay before the proof;
    may have on rails where the merchant settles a signed authorization (it stays valid
    until it expires, whatever the merchant said)."""
    return True if moves_first else None
