"""A live display of long payment waits (the bridge: 1 to 3 minutes in real life).

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


def _describe(event: PaymentProgress) -> str:
    code = event.transaction_code or "…"
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
        changed = event.stage != state["stage"]
        due = event.stage == "waiting" and event.elapsed - state["printed_at"] >= interval
        if not (changed or due):
            return
        state["stage"], state["printed_at"] = event.stage, event.elapsed
        status = f" [{event.status}]" if event.status else ""
        print(
            f"x402 bridge: {_describe(event)}{status} ({event.elapsed:.0f} s)",
            file=stream,
            flush=True,
        )

    return on_progress, contextlib.nullcontext()


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
    tasks: dict[str, TaskID] = {}
    live = _Live(progress)

    def on_progress(event: PaymentProgress) -> None:
        live.show()
        key = event.resource
        task = tasks.get(key)
        total = event.deadline or _DEADLINE
        if task is None or event.stage == "paying":
            task = progress.add_task(_describe(event), total=total, status="")
            tasks[key] = task
        done = event.stage in ("settled", "proving")
        progress.update(
            task,
            description=_describe(event),
            completed=total if done else min(event.elapsed, total),
            status=f"{event.status or ''} · {event.polls} polls" if event.polls else "",
        )
        if event.stage in ("proving", "failed"):
            progress.stop_task(task)

    return on_progress, live


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

    def __exit__(self, *exc_info: object) -> None:
        self._entered = False
        if self._shown:
            self._shown = False
            self._progress.stop()
