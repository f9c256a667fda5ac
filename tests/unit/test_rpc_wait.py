"""A slow RPC call is reported while it lasts and its outcome stays its own: the result,
or the very exception it raised (never wrapped by the reporter that ran beside it)."""

from __future__ import annotations

import anyio
import pytest

from x402_client._protocol.events import PaymentProgress
from x402_client._state.rpc_wait import RpcWait, watched

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_a_failing_slow_call_raises_its_own_error_and_the_last_event_says_failed() -> None:
    events: list[PaymentProgress] = []
    reported = anyio.Event()

    async def report(event: PaymentProgress) -> None:
        events.append(event)
        reported.set()

    async def call() -> int:
        await reported.wait()  # fails only once its wait was reported
        raise ValueError("not JSON-RPC")

    wait = RpcWait(report, rail="svm", what="Solana RPC", threshold=0.0, interval=60.0)
    with pytest.raises(ValueError, match="not JSON-RPC"):
        await watched(wait, call)
    assert [(e.stage, e.waiting_on, e.polls, e.status) for e in events] == [
        ("rpc_waiting", "Solana RPC", 1, None),
        ("rpc_waiting", "Solana RPC", 1, "failed"),
    ]


async def test_a_call_that_answers_in_time_reports_nothing() -> None:
    events: list[PaymentProgress] = []

    async def report(event: PaymentProgress) -> None:
        events.append(event)

    async def call() -> int:
        return 7

    wait = RpcWait(report, rail="evm-permit", what="chain 137 RPC", threshold=60.0)
    assert await watched(wait, call) == 7
    assert events == []
