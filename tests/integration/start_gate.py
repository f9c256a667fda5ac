"""The start gate of the worker processes the integration tests spawn (run as scripts from
this folder): a worker says it is ready by creating its `ready` file, then waits for the
test's `go` file, so that several workers start together. Another process's file has no
event to wait on: it is polled, and a worker whose test never opens the gate stops after
`timeout` seconds instead of waiting forever."""

from __future__ import annotations

import anyio

__all__ = ["wait_for_go"]


async def wait_for_go(ready: str, go: str, timeout: float = 120.0) -> None:
    """Create `ready`, then return once `go` exists (`TimeoutError` after `timeout`)."""
    await anyio.Path(ready).touch()
    with anyio.fail_after(timeout):
        while not await anyio.Path(go).exists():  # noqa: ASYNC110 - another process's file
            await anyio.sleep(0.005)
