"""The payment ledger: every money-moving step the client took, readable by the user.

One `LedgerEntry` per payment intent, with its steps (intent, reserved, paying, proof,
sent, answer, ...) and an outcome:

- `paid`: money moved (`delivered` says whether the merchant served the resource);
- `failed`: no money moved (refused by a limit, the hook or the budget; the payment
  was declined; an EVM permit that was never handed over);
- `unknown`: money may have moved (see `PaymentOutcomeUnknown`);
- `pending`: still in progress.

```python
ledger = payment_ledger(client)
for entry in ledger.entries(outcome="unknown"):
    print(entry.intent.amount, entry.transaction_code, entry.proof)
```

Nothing secret is recorded: no API key, no private key.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Iterator
from datetime import datetime, timezone
from decimal import Decimal
from typing import IO, Any, Literal
from uuid import uuid4

from ._types import PaymentIntent

__all__ = ["LedgerEntry", "LedgerStep", "Outcome", "PaymentLedger"]

Outcome = Literal["pending", "paid", "failed", "unknown"]


def _now() -> datetime:
    return datetime.now(timezone.utc)


@dataclasses.dataclass(frozen=True)
class LedgerStep:
    at: datetime
    step: str
    detail: str = ""


@dataclasses.dataclass
class LedgerEntry:
    """One payment intent and what became of it."""

    intent: PaymentIntent
    id: str = dataclasses.field(default_factory=lambda: uuid4().hex)
    outcome: Outcome = "pending"
    delivered: bool = False
    steps: list[LedgerStep] = dataclasses.field(default_factory=list)
    proof: str | None = dataclasses.field(default=None, repr=False)
    payment_request_code: str | None = None
    transaction_code: str | None = None
    blockchain_tx_id: str | None = None
    tx_hash: str | None = None
    error: str | None = None
    started_at: datetime = dataclasses.field(default_factory=_now)
    finished_at: datetime | None = None

    def step(self, step: str, detail: str = "") -> None:
        self.steps.append(LedgerStep(_now(), step, detail))

    def finish(self, outcome: Outcome, *, error: str | None = None) -> None:
        self.outcome = outcome
        self.error = error
        self.finished_at = _now()
        self.step(outcome, error or "")

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: amounts as decimal strings, times in ISO 8601 (UTC)."""
        intent = self.intent
        return {
            "id": self.id,
            "outcome": self.outcome,
            "delivered": self.delivered,
            "rail": intent.rail,
            "scheme": intent.scheme,
            "network": intent.network,
            "asset": intent.asset_symbol,
            "amount": str(intent.amount),
            "currency": intent.currency,
            "payTo": intent.pay_to,
            "resource": intent.resource,
            "paymentRequestCode": self.payment_request_code,
            "transactionCode": self.transaction_code,
            "blockchainTxId": self.blockchain_tx_id,
            "txHash": self.tx_hash,
            "proof": self.proof,
            "error": self.error,
            "startedAt": self.started_at.isoformat(),
            "finishedAt": self.finished_at.isoformat() if self.finished_at else None,
            "steps": [
                {"at": s.at.isoformat(), "step": s.step, "detail": s.detail} for s in self.steps
            ],
        }


class PaymentLedger:
    """An append-only, thread-safe list of `LedgerEntry`, newest last.

    `max_entries` bounds memory in long-running agents: the oldest finished entries are
    dropped first (pending and unknown ones are kept).
    """

    def __init__(self, max_entries: int = 10_000) -> None:
        self._lock = threading.Lock()
        self._entries: list[LedgerEntry] = []
        self.max_entries = max_entries

    def __repr__(self) -> str:
        return f"PaymentLedger({len(self)} entries)"

    def open(self, intent: PaymentIntent) -> LedgerEntry:
        entry = LedgerEntry(intent=intent)
        entry.step("intent", f"{intent.amount} {intent.currency} to {intent.pay_to}")
        with self._lock:
            self._entries.append(entry)
            if len(self._entries) > self.max_entries:
                for old in self._entries:
                    if old.outcome in ("paid", "failed"):
                        self._entries.remove(old)
                        break
        return entry

    def entries(self, outcome: Outcome | None = None) -> list[LedgerEntry]:
        with self._lock:
            return [e for e in self._entries if outcome is None or e.outcome == outcome]

    def total(self, currency: str = "EUR", outcome: Outcome = "paid") -> Decimal:
        """The sum of the amounts of entries with `outcome` in `currency`."""
        return sum(
            (e.intent.amount for e in self.entries(outcome) if e.intent.currency == currency),
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
        with self._lock:
            return next((e for e in reversed(self._entries) if e.proof == proof), None)

    def find_transaction(self, transaction_code: str) -> LedgerEntry | None:
        with self._lock:
            return next(
                (e for e in reversed(self._entries) if e.transaction_code == transaction_code),
                None,
            )

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def __iter__(self) -> Iterator[LedgerEntry]:
        return iter(self.entries())
