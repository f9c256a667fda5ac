"""Fault injection for the sandbox services: delays, 5xx, hangs, dropped connections and
answers that are not the service's own.

Each service calls `await faults.before(endpoint, request)` when a call arrives and
`await faults.after(endpoint, request)` once its work (moving money, for payments) is
done but before it answers. A fault armed with `when="after"` therefore strikes after the
money moved: the case where a client cannot know the outcome.

```python
sandbox.faults.arm("payment", Fault(kind="drop", when="after"))
sandbox.faults.arm("indexer", Fault(kind="answer", status=200, body=b"<html>gateway</html>"))
```

`answer` stands in for what a proxy, a throttling gateway or a broken deployment answers
instead of the service: `status` with `body`, whatever the call was. It strikes on the
services behind `FaultMiddleware` (the payment API, the facilitators, the chain-A node
and indexer).

A `timeout` fault holds its call for `delay` seconds (an hour if none is given) or until
`faults.release()`: a test makes a client give up on a call that cannot answer in time,
whatever the machine's speed, then lets the call go on (and, say, move the money late).

Endpoints: `payment`, `transaction` (payment API), `x402_pay`, `x402_verify`
(facilitator), `resource` (the merchant's paid retry), `settle`, `supported` (on-chain
facilitator), `indexer`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
from typing import Any, Literal

from ._bank import BankError

__all__ = ["DroppedConnection", "Fault", "FaultMiddleware", "Faults", "InjectedAnswer"]

Kind = Literal["delay", "status", "timeout", "drop", "answer"]


@dataclasses.dataclass
class Fault:
    """One injected fault: `kind`, `when` it strikes, and for how many calls (`times`)."""

    kind: Kind
    when: Literal["before", "after"] = "before"
    times: int = 1
    delay: float = 0.0
    status: int = 503
    #: What an `answer` fault answers with `status` (as `application/json`).
    body: bytes = b""


class DroppedConnection(Exception):
    """Raised inside a service to make `FaultMiddleware` cut the connection mid-answer."""


class InjectedAnswer(Exception):
    """Raised inside a service to make `FaultMiddleware` answer `status` with `body`."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(status)
        self.status = status
        self.body = body


class Faults:
    """The armed faults of one sandbox, shared by its services. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._armed: dict[str, list[Fault]] = {}
        #: How often each endpoint was called (for tests).
        self.calls: dict[str, int] = {}
        #: The calls a `timeout` fault holds: each one's loop and the event that ends it.
        self._held: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    def arm(self, endpoint: str, fault: Fault) -> None:
        with self._lock:
            self._armed.setdefault(endpoint, []).append(fault)

    def clear(self) -> None:
        """Disarm every fault (a call a `timeout` fault holds stays held: `release`)."""
        with self._lock:
            self._armed.clear()

    @property
    def holding(self) -> int:
        """How many calls `timeout` faults hold now."""
        with self._lock:
            return len(self._held)

    def release(self) -> None:
        """Let every call a `timeout` fault holds go on now, as if its delay had passed.
        Safe from any thread."""
        with self._lock:
            held, self._held = self._held, []
        for loop, event in held:
            with contextlib.suppress(RuntimeError):  # its loop closed: nothing to let go
                loop.call_soon_threadsafe(event.set)

    def _take(self, endpoint: str, when: str) -> Fault | None:
        with self._lock:
            for fault in self._armed.get(endpoint, []):
                if fault.when == when and fault.times > 0:
                    fault.times -= 1
                    return fault
        return None

    async def before(self, endpoint: str, request: Any = None) -> None:
        with self._lock:
            self.calls[endpoint] = self.calls.get(endpoint, 0) + 1
        await self._strike(self._take(endpoint, "before"))

    async def after(self, endpoint: str, request: Any = None) -> None:
        await self._strike(self._take(endpoint, "after"))

    async def _hold(self, seconds: float) -> None:
        released = asyncio.Event()
        entry = (asyncio.get_running_loop(), released)
        with self._lock:
            self._held.append(entry)
        try:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(released.wait(), seconds)
        finally:
            with self._lock:
                if entry in self._held:
                    self._held.remove(entry)

    async def _strike(self, fault: Fault | None) -> None:
        if fault is None:
            return
        if fault.kind == "delay":
            await asyncio.sleep(fault.delay)
        elif fault.kind == "timeout":
            await self._hold(fault.delay or 3600)
        elif fault.kind == "status":
            raise BankError(fault.status, "SandboxFault", "injected fault")
        elif fault.kind == "drop":
            raise DroppedConnection
        elif fault.kind == "answer":
            raise InjectedAnswer(fault.status, fault.body)


class FaultMiddleware:
    """Turns `DroppedConnection` into a connection cut after the status line: the client
    sees a broken response (`RemoteProtocolError`), not an answer; and `InjectedAnswer`
    into its answer. Install it as a Starlette middleware (inside the server-error layer,
    which would answer 500)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        except InjectedAnswer as answer:
            headers = [
                (b"content-length", str(len(answer.body)).encode()),
                (b"content-type", b"application/json"),
            ]
            await send({"type": "http.response.start", "status": answer.status, "headers": headers})
            await send({"type": "http.response.body", "body": answer.body})
        except DroppedConnection:
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [
                        (b"content-length", b"1000"),
                        (b"content-type", b"application/json"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": b"{", "more_body": True})
            # Returning with the body incomplete makes the server close the connection.
