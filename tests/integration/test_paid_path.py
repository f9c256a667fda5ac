"""The path of one warm paid euro GET stays straight: it enters at most 15 of the client's
modules with at most 40 module-to-module transitions.

A warm request is the fourth one of a client that has already paid three times, with the
client's logger at WARNING (as most users run it). `sys.setprofile` sees every call made
in this thread (the sandbox answers from its own thread, which is not profiled); a
coroutine's resumption is not a new call, so only the first entry of a code object counts.
"""

from __future__ import annotations

import dis
import functools
import itertools
import logging
import sys
from collections.abc import Iterator
from types import CodeType, FrameType
from typing import Any

import httpx
import pytest

from x402_client import with_eur_payment

pytestmark = pytest.mark.anyio

MAX_MODULES = 15
MAX_TRANSITIONS = 40
WARM_UP = 3


@functools.cache
def _entry_offset(code: CodeType) -> int:
    """The offset of a code object's RESUME: a frame at or before it is being entered,
    not resumed after an `await`."""
    return next((i.offset for i in dis.get_instructions(code) if i.opname == "RESUME"), 0)


def _modules_of(calls: list[tuple[str, str]]) -> list[str]:
    return [module for module, _ in calls]


def _transitions(modules: list[str]) -> list[tuple[str, str]]:
    return [(a, b) for a, b in itertools.pairwise(modules) if a != b]


def _sequence(calls: list[tuple[str, str]]) -> str:
    """Each run of calls in one module as `module.first_function`, one a line."""
    lines: list[str] = []
    previous = None
    for module, function in calls:
        if module != previous:
            lines.append(f"  -> {module}.{function}")
        previous = module
    return "\n".join(lines)


@pytest.fixture
def client_logging_at_warning() -> Iterator[None]:
    """Logging at WARNING for the client and the HTTP stack under it, whatever the test
    run's own logging set."""
    loggers = [logging.getLogger(name) for name in ("", "x402_client", "httpx", "httpcore")]
    saved = [each.level for each in loggers]
    for each in loggers:
        each.setLevel(logging.WARNING)
    yield
    for each, level in zip(loggers, saved, strict=True):
        each.setLevel(level)


async def test_a_warm_paid_euro_get_takes_a_short_straight_path(
    sandbox: Any, options_for: Any, client_logging_at_warning: None
) -> None:
    payer = sandbox.bank.open_account("10.00")
    calls: list[tuple[str, str]] = []

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event == "call" and frame.f_lasti <= _entry_offset(frame.f_code):
            module = frame.f_globals.get("__name__", "")
            if module.startswith("x402_client"):
                calls.append((module, frame.f_code.co_name))

    async with with_eur_payment(httpx.AsyncClient(), options_for(payer)) as client:
        for _ in range(WARM_UP):
            warm = await client.get(sandbox.url("/weather"))
            await warm.aread()
            assert warm.status_code == 200
        sys.setprofile(profile)
        try:
            response = await client.get(sandbox.url("/weather"))
            await response.aread()
        finally:
            sys.setprofile(None)
    assert response.status_code == 200
    assert response.extensions["x402_payment"].payments == 1

    modules = _modules_of(calls)
    transitions = _transitions(modules)
    shown = (
        f"{len(set(modules))} modules (at most {MAX_MODULES}), {len(transitions)} transitions "
        f"(at most {MAX_TRANSITIONS}), {len(calls)} calls:\n{_sequence(calls)}"
    )
    assert "x402_client._flow.payment" in modules, shown
    assert len(set(modules)) <= MAX_MODULES, shown
    assert len(transitions) <= MAX_TRANSITIONS, shown
