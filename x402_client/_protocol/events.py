"""Progress events for long waits (the bridge takes 1 to 3 minutes in real life)."""

from __future__ import annotations

import dataclasses
from typing import Literal

from .redact import resource_repr

__all__ = ["PaymentProgress"]

Stage = Literal["paying", "waiting", "settled", "proving", "failed"]


@dataclasses.dataclass(frozen=True)
class PaymentProgress:
    """One step of a payment in progress, given to `on_progress`.

    `stage` is `paying` (money about to move), `waiting` (polled, not there yet),
    `settled` (the chain transaction id appeared), `proving` (the proof is being sent) or
    `failed`. `elapsed` is seconds since the payment call; `polls` counts lookups so far.
    """

    stage: Stage
    rail: str
    resource: str
    transaction_code: str | None = None
    status: str | None = None
    blockchain_tx_id: str | None = None
    elapsed: float = 0.0
    polls: int = 0
    deadline: float | None = None

    def __repr__(self) -> str:
        return resource_repr(self)  # the resource's credentials redacted
