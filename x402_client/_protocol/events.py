"""Progress events for long waits: the bridge (1 to 3 minutes in real life), and the
re-sends of a proof the merchant has not confirmed yet (a backoff that can add up to
minutes), each with a measure of how far it got (`polls` of `max_polls`), and RPC calls
that take over a second (which endpoint of how many, which attempt)."""

from __future__ import annotations

import dataclasses
from typing import Literal

from .redact import resource_repr

__all__ = ["PaymentProgress"]

Stage = Literal["paying", "waiting", "settled", "proving", "failed", "confirming", "rpc_waiting"]


@dataclasses.dataclass(frozen=True)
class PaymentProgress:
    """One step of a payment in progress, given to `on_progress`.

    `stage` is `paying` (money about to move), `waiting` (polled, not there yet),
    `settled` (the chain transaction id appeared), `proving` (the proof is being sent),
    `failed`, or `confirming`: the merchant answered that the payment is not confirmed yet,
    and the same proof is re-sent after `wait` seconds (on every rail; `status` is the
    merchant's reason). `elapsed` is seconds since the payment call (since the proof was
    first sent, when `confirming`); `polls` counts lookups (re-sends) so far, of at most
    `max_polls` when that is known.

    `rpc_waiting`: a call to a chain's RPC node (an EVM chain's, Solana's) has taken over a
    second; sent then and every few seconds until it returns, and once more when it has
    (`status` "answered" or "failed"). `waiting_on` names the node ("chain 137 RPC",
    "Solana RPC", never its URL), `endpoint` is the one asked (from 1) of `endpoints`, and
    `attempt` counts the endpoints tried for this call; `elapsed` is seconds since the call
    went out, `polls` the reports of this wait so far, and `resource` may be empty (a read
    not tied to one request).
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
    max_polls: int | None = None
    wait: float | None = None
    waiting_on: str | None = None
    endpoint: int | None = None
    endpoints: int | None = None
    attempt: int | None = None

    def __repr__(self) -> str:
        return resource_repr(self)  # the resource's credentials redacted
