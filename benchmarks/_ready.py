"""How a benchmark server process talks to `run.py`'s `Proc`: one JSON line on stdout
when it is ready, and it stops when its stdin closes."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from typing import Any


async def serve_until_stdin_closes(info: dict[str, Any]) -> None:
    """Print `info` as the ready line, then return once stdin is closed."""
    print(json.dumps(info), flush=True)
    loop = asyncio.get_running_loop()
    closed = asyncio.Event()

    def wait_stdin() -> None:
        sys.stdin.read()
        loop.call_soon_threadsafe(closed.set)

    threading.Thread(target=wait_stdin, daemon=True).start()
    await closed.wait()
