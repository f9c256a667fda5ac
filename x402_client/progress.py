"""A live display of long payment waits: the bridge (1 to 3 minutes in real life), the
re-sends of a proof the merchant has not confirmed yet (`poll 3 of 8`), and RPC calls that
take over a second (`endpoint 1 of 2, attempt 2`).

```python
from x402_client.progress import bridge_progress_display

on_progress, display = bridge_progress_display()
options = PaymentOptions.from_env(on_progress=on_progress)
async with with_eur_payment(httpx.AsyncClient(), options) as client:
    with display:
        response = await client.get(url)
```

With `rich` (the `cli` extra) it is a spinner, a bar filling towards the deadline, the
elapsed time and the transaction's status; without it, or with `plain=True`, plain lines
on `stream` (stderr) at each stage and every `plain_interval` seconds while waiting. The
`x402-eur` command shows it when stderr is a terminal. `rich` is imported only when the
rich display is asked for.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import IO, Any

from ._options import PaymentOptions
from ._protocol.events import PaymentProgress

__all__ = ["ProgressDisplay", "bridge_progress_display"]

#: `(on_progress, display)`: the callback for `PaymentOptions(on_progress=...)` and the context
#: manager that shows the display while a request runs.
ProgressDisplay = tuple[Callable[[PaymentProgress], None], AbstractContextManager[None]]

#: The bar's length for an event that names no deadline: the options' default one.
_DEADLINE: float = PaymentOptions.model_fields["bridge_deadline"].default


def _polls(count: int, of: int | None = None) -> str:
    """`1 poll`, `3 polls`; with a known most, `poll 3 of 8`."""
    if of is not None:
        return f"poll {count} of {of}"
    return f"{count} poll{'' if count == 1 else 's'}"


def _describe(event: PaymentProgress) -> str:
    code = event.transaction_code or "…"
    if event.stage == "rpc_waiting":
        return (
            f"waiting for the {event.waiting_on or 'RPC'}: endpoint {event.endpoint or 1} "
            f"of {event.endpoints or 1}, attempt {event.attempt or 1}"
        )
    if event.stage == "confirming":
        again = f", again in {event.wait:.0f} s" if event.wait and event.wait >= 1 else ""
        return (
            f"the merchant has not confirmed the payment yet: "
            f"{_polls(event.polls, event.max_polls)}{again}"
        )
    if event.stage == "paying":
        return "paying through the bridge"
    if event.stage == "waiting":
        return f"waiting for {code} to reach the chain"
    if event.stage == "settled":
        return f"{code} on chain: {event.blockchain_tx_id}"
    if event.stage == "proving":
        return f"sending the proof for {code}"
    return f"{code} failed ({event.status or 'no blockchainTxId'})"


def bridge_progress_display(
    *,
    console: Any = None,
    plain: bool | None = None,
    plain_interval: float = 10.0,
    stream: IO[str] | None = None,
) -> ProgressDisplay:
    """`(on_progress, display)`: pass `on_progress` in the options, wrap the request in
    `with display:`. `plain=True` forces plain lines (default: plain when rich is
    missing); `console` is a `rich.console.Console` to draw on (default: one on `stream`,
    which defaults to stderr).
    """
    if not plain:
        try:
            import rich.progress  # noqa: F401
        except ImportError:
            plain = True
    if plain:
        return _plain_display(stream or sys.stderr, plain_interval)
    if console is None:
        from rich.console import Console

        console = Console(file=stream) if stream is not None else Console(stderr=True)
    return _rich_display(console)


def _plain_display(stream: IO[str], interval: float) -> ProgressDisplay:
    state: dict[str, Any] = {"stage": None, "printed_at": 0.0}

    def on_progress(event: PaymentProgress) -> None:
        if event.stage == "rpc_waiting":
            # each report of a slow RPC call is a line (the call itself spaces them);
            # its end is not: the next step says what happened
            if event.status is None:
                print(_line(event), file=stream, flush=True)
            return
        changed = event.stage != state["stage"]
        due = event.stage == "waiting" and event.elapsed - state["printed_at"] >= interval
        # each re-send of an unconfirmed proof is a step of its own, once the wait has
        # lasted a second (the first re-sends follow within a fraction of one)
        confirming = event.stage == "confirming" and event.elapsed + (event.wait or 0) >= 1
        if not (changed or due or confirming) or (event.stage == "confirming" and not confirming):
            return
        state["stage"], state["printed_at"] = event.stage, event.elapsed
        status = f" [{event.status}]" if event.status and event.stage != "confirming" else ""
        print(_line(event, status), file=stream, flush=True)

    return on_progress, contextlib.nullcontext()


def _line(event: PaymentProgress, status: str = "") -> str:
    return f"x402 {event.rail}: {_describe(event)}{status} ({event.elapsed:.0f} s)"


def _rich_display(console: Any) -> ProgressDisplay:
    from rich.progress import (
        BarColumn,
        Progress,
        SpinnerColumn,
        TaskID,
        TextColumn,
        TimeElapsedColumn,
    )

    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[status]}"),
        console=console,
        transient=False,
    )
    tasks: dict[tuple[str, bool | str], TaskID] = {}
    live = _Live(progress)

    def on_progress(event: PaymentProgress) -> None:
        if event.stage == "rpc_waiting":
            if event.status is None:
                live.show()
            _rpc_task(progress, tasks, event)
            return
        live.show()
        confirming = event.stage == "confirming"
        key = (event.resource, confirming)
        task = tasks.get(key)
        # the bridge's measure is time towards its deadline; a confirmation's, its re-sends
        total = float(event.max_polls or event.polls or 1) if confirming else None
        total = total or event.deadline or _DEADLINE
        if task is None or event.stage == "paying":
            task = progress.add_task(_describe(event), total=total, status="")
            tasks[key] = task
        done = event.stage in ("settled", "proving")
        completed = event.polls if confirming else (total if done else min(event.elapsed, total))
        polls = event.polls and not confirming
        progress.update(
            task,
            description=_describe(event),
            total=total,
            completed=completed,
            status=f"{event.status or ''} · {_polls(event.polls)}" if polls else "",
        )
        if event.stage in ("proving", "failed"):
            progress.stop_task(task)

    return on_progress, live


def _rpc_task(progress: Any, tasks: dict[Any, Any], event: PaymentProgress) -> None:
    """A slow RPC call's line: its measure is the endpoints tried of those there are; it
    goes when the call has returned."""
    key = (event.resource, f"rpc {event.rail} {event.waiting_on}")
    task = tasks.get(key)
    if event.status is not None:
        if task is not None:
            progress.remove_task(tasks.pop(key))
        return
    total = float(event.endpoints or 1)
    if task is None:
        task = tasks[key] = progress.add_task(_describe(event), total=total, status="")
    progress.update(
        task, description=_describe(event), total=total, completed=(event.attempt or 1) - 1
    )


class _Live(AbstractContextManager[None]):
    """Shows the rich display while entered, from the first event on: a request that never
    waits (or a question `on_before_payment` asks on the terminal first) draws nothing.
    May be entered again (one wait at a time)."""

    def __init__(self, progress: Any) -> None:
        self._progress = progress
        self._entered = False
        self._shown = False

    def show(self) -> None:
        if self._entered and not self._shown:
            self._shown = True
            self._progress.start()

    def __enter__(self) -> None:
        self._entered = True

    def __exit__(self, exc_type: object, *exc_info: object) -> None:
        self._entered = False
        if self._shown:
            self._shown = False
            if exc_type is not None:
                # interrupted (Ctrl-C) or failed: the display goes, no stale spinner stays
                self._progress.live.transient = True
            self._progress.stop()
