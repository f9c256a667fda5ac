"""Progress for RPC calls that keep the user waiting: an `rpc_waiting` event once a call
has taken longer than `threshold` seconds, then every `interval` seconds until it returns,
and one last event (`status` "answered" or "failed") when a reported wait ends, so a display can
clear its line. A call that answers within the threshold reports nothing.

The events name what is waited on ("chain 137 RPC") and which endpoint of how many, never
the endpoint's URL (it may hold a key).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from .._protocol.events import PaymentProgress

__all__ = ["RpcWait", "watched"]

T = TypeVar("T")

#: Seconds a call may take before the user hears of it, and between two reports after.
THRESHOLD = 1.0
INTERVAL = 3.0

Report = Callable[[PaymentProgress], Awaitable[None]]


class RpcWait:
    """What an RPC call waits on, for its progress events: the rail, the awaited node
    (`what`, e.g. "chain 137 RPC"), and the endpoint (1-based) of how many, at which
    attempt of the call."""

    def __init__(
        self,
        report: Report | None,
        *,
        rail: str,
        what: str,
        endpoint: int = 1,
        endpoints: int = 1,
        attempt: int = 1,
        resource: str = "",
        threshold: float = THRESHOLD,
        interval: float = INTERVAL,
    ) -> None:
        self.report = report
        self.rail, self.what, self.resource = rail, what, resource
        self.endpoint, self.endpoints, self.attempt = endpoint, endpoints, attempt
        self.threshold, self.interval = threshold, interval

    def event(self, elapsed: float, polls: int, status: str | None = None) -> PaymentProgress:
        return PaymentProgress(
            stage="rpc_waiting",
            rail=self.rail,
            resource=self.resource,
            status=status,
            elapsed=elapsed,
            polls=polls,
            waiting_on=self.what,
            endpoint=self.endpoint,
            endpoints=self.endpoints,
            attempt=self.attempt,
        )


async def watched(wait: RpcWait, call: Callable[[], Awaitable[T]]) -> T:
    """`await call()`, reporting the wait as `wait` says when it lasts; the reporter is
    cancelled as soon as the call returns or fails (the call's outcome, untouched)."""
    report = wait.report
    if report is None:
        return await call()
    import anyio

    started = time.monotonic()
    reports = 0

    async def reporter() -> None:
        nonlocal reports
        await anyio.sleep(wait.threshold)
        while True:
            reports += 1
            await report(wait.event(time.monotonic() - started, reports))
            await anyio.sleep(wait.interval)

    failure: Exception | None = None
    async with anyio.create_task_group() as group:
        group.start_soon(reporter)
        try:
            result = await call()
        except Exception as exc:
            # raised outside the task group, so it stays the call's own exception
            failure = exc
        finally:
            group.cancel_scope.cancel()
    if reports:
        with anyio.CancelScope(shield=True):
            status = "answered" if failure is None else "failed"
            await report(wait.event(time.monotonic() - started, reports, status))
    if failure is not None:
        raise failure
    return result
