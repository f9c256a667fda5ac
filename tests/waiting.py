"""Waiting for something to happen, in the tests: a condition polled until it holds, with a
deadline far longer than it should ever take.

A test that sleeps a fixed time and then looks is a bet on the machine's speed: on a busy
machine (two shared cores, four test workers, a neighbour's compiler) the thing it waits for
comes later and the test fails although nothing is wrong. Polling returns as soon as the
condition holds, so the deadline can be generous at no cost on a quiet machine; only a
condition that never comes waits it out, and the failure names what never came.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable

import anyio

__all__ = ["PATIENCE", "eventually", "eventually_sync"]

#: Seconds a test waits for something that takes well under a second on a quiet machine.
PATIENCE = 60.0


async def eventually(
    check: Callable[[], bool | Awaitable[bool]],
    what: str,
    *,
    timeout: float = PATIENCE,
    every: float = 0.01,
) -> None:
    """Return once `check()` (a function or a coroutine function) is true; fail, naming
    `what`, if it is still false after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        held = check()
        if inspect.isawaitable(held):
            held = await held
        if held:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"still waiting for {what} after {timeout:g} s")
        await anyio.sleep(every)


def eventually_sync(
    check: Callable[[], bool], what: str, *, timeout: float = PATIENCE, every: float = 0.01
) -> None:
    """`eventually` for a thread that may block (sync tests)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"still waiting for {what} after {timeout:g} s")
        time.sleep(every)
