"""A live progress display for bridge waits, for the command line and demos.

```python
on_progress, display = bridge_progress_display()
options = PaymentOptions.from_env(on_progress=on_progress)
with display:
    async with with_eur_payment(httpx.AsyncClient(), options) as client:
        response = await client.get(url)
```

With `rich` (the `cli` extra) it is a spinner, a bar filling towards the deadline, the
elapsed time and the transaction's status; without it, plain lines on stderr at each
stage and every `plain_interval` seconds while waiting. `rich` is imported only here.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import IO, Any

from ._progress import PaymentProgress

__all__ = ["bridge_progress_display"]

ProgressDisplay = tuple[Callable[[PaymentProgress], None], AbstractContextManager[None]]


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
    missing); `console` is a `rich.console.Console` to draw on.
    """
    if not plain:
        try:
            import rich.progress  # noqa: F401
        except ImportError:
            plain = True
    if plain:
        return _plain_display(stream or sys.stderr, plain_interval)
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
        print(f"x402 bridge: {_describe(event)}{status} ({event.elapsed:.0f} s)", file=stream)

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

    def on_progress(event: PaymentProgress) -> None:
        key = event.resource
        task = tasks.get(key)
        total = event.deadline or 300.0
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

    return on_progress, _Live(progress)


class _Live(AbstractContextManager[None]):
    """Shows the rich display while entered; may be entered again (one wait at a time)."""

    def __init__(self, progress: Any) -> None:
        self._progress = progress

    def __enter__(self) -> None:
        self._progress.start()

    def __exit__(self, *exc_info: object) -> None:
        self._progress.stop()
