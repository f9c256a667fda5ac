"""What every client built from one `PaymentOptions` shares: budgets, ledger, nonce locks.

Limits the user sets must hold for everything the user builds from them, so this state
belongs to the options object, not to a client or a transport: three clients made from one
`PaymentOptions(budgets=[Budget("0.10")])` share one 0.10 budget, re-installing payment on
a client keeps it, and an agent that builds a client per task still has one budget. The
scope is this process (and, with `RedisBudgetStore`, every process on that Redis).

Everything here is safe to use from several threads and event loops at once (a sync client
in one thread, an async one in another): the ledger and the in-memory budget store use
thread locks, and `KeyedLocks` is a lock that any event loop can wait on.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Hashable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio

from .._protocol.ledger import PaymentLedger
from .budget_stores import Budgets

if TYPE_CHECKING:
    from decimal import Decimal

    from .._options import PaymentOptions
    from .channels import ChannelBook
    from .sqlite_store import JournalRecord
    from .stores import JournalStore

__all__ = ["NULL_JOURNAL", "FleetLocks", "KeyedLocks", "NullJournal", "PaymentState", "state_of"]

logger = logging.getLogger("x402_client")

_CREATE = threading.Lock()


class KeyedLocks:
    """One mutual-exclusion lock per key, usable from any thread and any event loop.

    An `anyio.Lock` belongs to one event loop; these are thread locks taken without
    blocking the loop (polled every 2 ms while contended), so a sync client driven from
    its own loop thread and an async client share them. Contention is rare: only two
    payments from the same EVM owner and token wait for each other.
    """

    #: Whether other machines take these locks too (see `FleetLocks`).
    shared = False

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[Hashable, threading.Lock] = {}

    @asynccontextmanager
    async def hold(self, key: Hashable) -> AsyncIterator[None]:
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        # A thread lock has no event to wait on from an event loop: poll it.
        while not lock.acquire(blocking=False):  # noqa: ASYNC110
            await anyio.sleep(0.002)
        try:
            yield
        finally:
            lock.release()


class FleetLocks(KeyedLocks):
    """`KeyedLocks` that also hold the same lock in a store every machine shares (a
    PostgreSQL state's advisory lock): a fleet never signs two permits with one nonce.
    `shared` tells a rail that another machine may have used a nonce it read earlier."""

    shared = True

    def __init__(self, hold_shared: Callable[[str], AbstractAsyncContextManager[None]]) -> None:
        super().__init__()
        self._hold_shared = hold_shared

    @asynccontextmanager
    async def hold(self, key: Hashable) -> AsyncIterator[None]:
        async with super().hold(key), self._hold_shared(repr(key)):
            yield


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


NULL_JOURNAL = NullJournal()


class PaymentState:
    """The budgets, ledger, journal, payment channels and locks of one `PaymentOptions`
    object.

    With `options.state_path`, a `SqliteStore` on that file (or a `PostgresStore` on that
    `postgresql://` database) is the payment journal and, unless `budget_store` names another
    store, the budget store: budgets then hold across restarts and across the processes of
    the machine (of the fleet, on PostgreSQL, whose nonce locks are the fleet's too), and
    so do its payment channels (`channels`; without a state, this process's only). It is
    closed when the options object is garbage-collected, or with `close()`.
    """

    def __init__(self, options: PaymentOptions) -> None:
        self.owner = id(options)
        self.ledger: PaymentLedger = (
            options.ledger if options.ledger is not None else PaymentLedger()
        )
        self.journal: JournalStore | None = None
        self.locks = KeyedLocks()
        if options.state_path is not None:
            from .stores import open_store

            self.journal = open_store(options.state_path)
            weakref.finalize(options, self.journal.close)
            hold_nonce = getattr(self.journal, "hold_nonce", None)
            if hold_nonce is not None:
                self.locks = FleetLocks(hold_nonce)
        from .channels import MemoryChannelBook

        #: The payment channels (`batch-settlement`): the journal's, else this process's.
        self.channels: ChannelBook = (
            self.journal if self.journal is not None else MemoryChannelBook()
        )
        store = options.budget_store if options.budget_store is not None else self.journal
        caps = options.max_amount_per_payment
        currencies = {currency: caps.get(currency) for currency in options.currencies}
        self.budgets = Budgets(options.budgets, store, currencies)

    async def book_settlement(
        self, row: JournalRecord, step: str, detail: str, settled: Decimal | None
    ) -> None:
        """Book an `upto` settlement on its journal row (a re-sent proof, recovery): the step,
        then the budgets keep `settled` of the reservations the row holds and give back the
        rest. Never raises: a failure is logged and the maximum stays counted."""
        from .budget_stores import Reservation

        journal = self.journal
        if journal is None:
            return
        try:
            with anyio.CancelScope(shield=True):
                await journal.update_payment(row.id, step=step, detail=detail)
                if settled is not None:
                    budgets = {budget.key: budget for budget in self.budgets.budgets}
                    held = [Reservation(budgets[k], r) for k, r in row.reservations if k in budgets]
                    await self.budgets.give_back(held, row.amount, settled, row.id)
        except Exception as exc:
            logger.error(
                "x402: an upto payment's settlement could not be booked (%s); the authorized "
                "maximum stays counted",
                type(exc).__name__,
            )

    def close(self) -> None:
        """Close the state file, if any: the options can no longer pay after this."""
        if self.journal is not None:
            self.journal.close()

    def __repr__(self) -> str:
        # Also for a state whose store could not be opened (an error tracker shows it).
        budgets = getattr(self, "budgets", None)
        count = len(budgets.budgets) if budgets is not None else 0
        return f"PaymentState({self.ledger!r}, budgets={count})"


def state_of(options: PaymentOptions) -> PaymentState:
    """The shared state of `options`, made on first use.

    A copy of the options (`model_copy`) gets its own state: its budgets may differ.
    """
    state = options._state
    if state is None or state.owner != id(options):
        with _CREATE:
            state = options._state
            if state is None or state.owner != id(options):
                state = PaymentState(options)
                # The options are immutable; their state is a cache made on first use.
                object.__setattr__(options, "_state", state)
    return state
