"""The payment ledger: every money-moving step the client took, readable by the user.

One `LedgerEntry` per payment intent, with its steps (intent, reserved, paying, proof,
sent, answer, ...) and an outcome:

- `paid`: money moved (`delivered` says whether the merchant served the resource);
- `failed`: no money moved (refused by a limit, the hook or the budget; the payment
  was declined; an EVM permit that was never handed over);
- `unknown`: money may have moved (see `PaymentOutcomeUnknown`);
- `pending`: still in progress.

```python
ledger = payments(client).ledger
for entry in ledger.entries(outcome="unknown"):
    print(entry.intent.amount, entry.transaction_code, entry.proof)
```

The ledger lives in memory and keeps a window: the latest `max_entries` (1,000 by
default), plus every older entry still `pending` or `unknown`, so a long-running agent's
memory stays flat. With `PaymentOptions(state_path=...)` the journal (`SqliteStore`) keeps
every payment on disk; the ledger is the recent view.

Nothing secret is recorded: no API key, no private key. The JSON (`to_json`, `to_jsonl`)
prints URLs with their credentials redacted (`safe_url`): an entry's intent keeps the URL
as requested.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
from collections import deque
from collections.abc import Iterator
from datetime import datetime, timezone
from decimal import Decimal
from typing import IO, Any, Literal, NamedTuple

from .amounts import format_money, money_of
from .redact import redact_urls, safe_url
from .types import PaymentIntent

__all__ = ["DEFAULT_MAX_ENTRIES", "LedgerEntry", "LedgerStep", "Outcome", "PaymentLedger"]

Outcome = Literal["pending", "paid", "failed", "unknown"]

#: How many entries a `PaymentLedger` keeps by default (besides pending / unknown ones).
DEFAULT_MAX_ENTRIES = 1_000

_OPEN = frozenset({"pending", "unknown"})


class LedgerStep(NamedTuple):
    """One step of a payment: when, what, and a short detail (a code, a URL, a status)."""

    at: datetime
    step: str
    detail: str = ""


def _utc(stamp: float) -> datetime:
    return datetime.fromtimestamp(stamp, timezone.utc)


# Entry ids: 128 random bits in hex, unique across the processes that share a journal, and
# distinct from their first characters, so that a person can name a payment by a short
# start of its id (`x402-eur resume 3f9c2a`).
def _new_id() -> str:
    return os.urandom(16).hex()


@dataclasses.dataclass(slots=True)
class LedgerEntry:
    """One payment intent and what became of it.

    Kept cheap for the garbage collector, since the ledger holds a thousand of them: the
    steps are plain tuples of a timestamp and two strings (which CPython stops tracking),
    turned into `LedgerStep`s with datetimes only when read (`steps`, `started_at`,
    `finished_at`). The payment flow appends to `trail` as each step happens.
    """

    intent: PaymentIntent
    id: str = dataclasses.field(default_factory=_new_id)
    outcome: Outcome = "pending"
    delivered: bool = False
    proof: str | None = dataclasses.field(default=None, repr=False)
    payment_request_code: str | None = None
    transaction_code: str | None = None
    blockchain_tx_id: str | None = None
    tx_hash: str | None = None
    error: str | None = None
    #: An `upto` payment: what moved of the authorized maximum (the intent's amount), once
    #: the client read it from the chain (never the merchant's claim).
    settled_amount: Decimal | None = None
    #: `(time.time(), step, detail)`, oldest first (an `intent` step's detail is written
    #: when it is read).
    trail: tuple[tuple[float, str, str], ...] = dataclasses.field(default=(), repr=False)
    _started: float = dataclasses.field(default_factory=time.time, repr=False)
    _finished: float | None = dataclasses.field(default=None, repr=False)

    @property
    def amount(self) -> Decimal:
        """What the payment counts for: the intent's amount, or on an `upto` payment what
        the chain says moved, once the client read it (until then, the authorized maximum)."""
        settled = self.settled_amount
        return self.intent.amount if settled is None else settled

    @property
    def steps(self) -> tuple[LedgerStep, ...]:
        """Oldest first; a tuple (exactly sized, never shared mutable state)."""
        return tuple(self._read(at, step, detail) for at, step, detail in self.trail)

    def _read(self, at: float, step: str, detail: str) -> LedgerStep:
        if step == "intent" and not detail:
            intent = self.intent
            detail = f"{format_money(intent.amount, intent.currency)} to {intent.pay_to}"
        return LedgerStep(_utc(at), step, detail)

    @property
    def started_at(self) -> datetime:
        return _utc(self._started)

    @property
    def finished_at(self) -> datetime | None:
        return None if self._finished is None else _utc(self._finished)

    def step(self, step: str, detail: str = "") -> None:
        self.trail = (*self.trail, (time.time(), step, detail))

    def finish(self, outcome: Outcome, *, error: str | None = None) -> None:
        self.outcome = outcome
        self.error = error
        self._finished = time.time()
        self.step(outcome, error or "")

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: amounts as decimal strings, times in ISO 8601 (UTC), URLs
        with their credentials redacted."""
        intent = self.intent
        return {
            "id": self.id,
            "outcome": self.outcome,
            "delivered": self.delivered,
            "rail": intent.rail,
            "scheme": intent.scheme,
            "network": intent.network,
            "asset": intent.asset_symbol,
            "amount": str(self.amount),
            "currency": intent.currency,
            "payTo": intent.pay_to,
            "resource": safe_url(intent.resource),
            "paymentRequestCode": self.payment_request_code,
            "transactionCode": self.transaction_code,
            "blockchainTxId": self.blockchain_tx_id,
            "txHash": self.tx_hash,
            "proof": self.proof,
            "error": None if self.error is None else redact_urls(self.error),
            "startedAt": self.started_at.isoformat(),
            "finishedAt": self.finished_at.isoformat() if self.finished_at else None,
            "steps": [
                {"at": s.at.isoformat(), "step": s.step, "detail": redact_urls(s.detail)}
                for s in self.steps
            ],
        }


class PaymentLedger:
    """A thread-safe window of `LedgerEntry`, oldest first.

    Keeps the latest `max_entries` entries and every older one that is still `pending` or
    `unknown` (money may have moved: it stays until it is settled). Opening an entry
    costs O(1) however long the agent runs: the oldest entry leaves the window from the
    front of a deque; an open one moves to a side list that is swept of settled entries
    only as it doubles in size. The journal (`state_path`) keeps what the window drops.
    """

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        if max_entries < 0:
            raise ValueError("max_entries must not be negative")
        self._lock = threading.Lock()
        #: The window: the latest entries, oldest first.
        self._entries: deque[LedgerEntry] = deque()
        #: Entries older than the window that were still open when they left it, in the
        #: order they left it (so all older than the window's).
        self._held: list[LedgerEntry] = []
        self._sweep_at = max(max_entries, 64)
        self.max_entries = max_entries

    def __repr__(self) -> str:
        return f"PaymentLedger({len(self)} entries)"

    def _repr_html_(self) -> str:
        from .display import rows_table

        rows = [
            {
                "id": entry.id[:12],
                "started": entry.started_at.isoformat(timespec="seconds"),
                "price": money_of(entry.amount, entry.intent.currency, entry.intent.asset_symbol),
                "rail": entry.intent.rail,
                "network": entry.intent.network,
                "outcome": entry.outcome,
                "delivered": "yes" if entry.delivered else "no",
                "resource": safe_url(entry.intent.resource),
            }
            for entry in self.entries()
        ]
        return rows_table(f"{len(rows)} payments", rows)

    def open(self, intent: PaymentIntent) -> LedgerEntry:
        entry = LedgerEntry(intent=intent, trail=((time.time(), "intent", ""),))
        with self._lock:
            entries = self._entries
            entries.append(entry)
            while len(entries) > self.max_entries:
                old = entries.popleft()
                if old.outcome in _OPEN:
                    self._hold(old)
        return entry

    def _hold(self, entry: LedgerEntry) -> None:
        held = self._held
        held.append(entry)
        if len(held) >= self._sweep_at:
            # Settled since they were held: drop them. Amortised O(1) per entry, since
            # the next sweep waits until the list has doubled.
            held[:] = [e for e in held if e.outcome in _OPEN]
            self._sweep_at = max(self.max_entries, 64, 2 * len(held))

    def _visible(self) -> list[LedgerEntry]:
        """Held entries still open, then the window (called with the lock held)."""
        if self._held:
            self._held[:] = [e for e in self._held if e.outcome in _OPEN]
        return [*self._held, *self._entries]

    def entries(self, outcome: Outcome | None = None) -> list[LedgerEntry]:
        with self._lock:
            visible = self._visible()
        if outcome is None:
            return visible
        return [e for e in visible if e.outcome == outcome]

    def total(self, currency: str = "EUR", outcome: Outcome = "paid") -> Decimal:
        """The sum of the amounts (`LedgerEntry.amount`: an `upto` payment's settled amount)
        of entries with `outcome` in `currency`."""
        return sum(
            (e.amount for e in self.entries(outcome) if e.intent.currency == currency),
            Decimal(0),
        )

    def to_jsonl(self, file: IO[str] | None = None, *, outcome: Outcome | None = None) -> str:
        """The entries as JSON lines (one `LedgerEntry.to_json()` a line), oldest first;
        written to `file` too when given."""
        text = "".join(
            json.dumps(e.to_json(), separators=(",", ":")) + "\n" for e in self.entries(outcome)
        )
        if file is not None:
            file.write(text)
        return text

    def find(self, proof: str) -> LedgerEntry | None:
        """The newest entry that proved with `proof`."""
        with self._lock:
            return next((e for e in reversed(self._visible()) if e.proof == proof), None)

    def find_transaction(self, transaction_code: str) -> LedgerEntry | None:
        """The newest entry with `transaction_code`."""
        with self._lock:
            return next(
                (e for e in reversed(self._visible()) if e.transaction_code == transaction_code),
                None,
            )

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries) + sum(1 for e in self._held if e.outcome in _OPEN)

    def __iter__(self) -> Iterator[LedgerEntry]:
        return iter(self.entries())
