"""Serving an ASGI app with uvicorn on 127.0.0.1, on a free or a given port, inside the
running loop."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import socket
import ssl
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

import httpx
import uvicorn

__all__ = ["PortInUse", "ServedApp", "loopback_client", "stop_all"]


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    return httpx.create_ssl_context(verify=True, trust_env=False)


def loopback_client(**options: Any) -> httpx.AsyncClient:
    """An httpx client for the sandbox's own services on 127.0.0.1. They speak plain HTTP,
    but httpx would still build an SSL context for each client (about 20 ms of CPU, reading
    the CA bundle): these share one."""
    return httpx.AsyncClient(verify=_ssl_context(), trust_env=False, **options)


class _Stoppable(Protocol):
    async def stop(self) -> None: ...


async def stop_all(parts: Iterable[_Stoppable | None]) -> None:
    """Stop every part at once, then raise the first failure.

    A uvicorn server takes at least 0.1 s to stop (it gives open connections 0.1 s to
    finish): one after another, the servers of a sandbox would take half a second.
    """
    results = await asyncio.gather(
        *(part.stop() for part in parts if part is not None), return_exceptions=True
    )
    for result in results:
        if isinstance(result, BaseException):
            raise result


class _QuietServer(uvicorn.Server):
    # The sandbox runs inside someone else's process (a test, a notebook, the CLI):
    # it must not take over their SIGINT/SIGTERM handlers.
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.stopping = asyncio.Event()

    async def main_loop(self) -> None:
        # uvicorn's own loop, which looks at `should_exit` every 0.1 s, but woken at once
        # when `ServedApp.stop` sets `stopping`.
        counter = 0
        while not await self.on_tick(counter):
            counter = (counter + 1) % 864000
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), 0.1)


class PortInUse(OSError):
    """The fixed port asked for is taken (`errno.EADDRINUSE`)."""


class ServedApp:
    """One ASGI app on its own port: `await start()`, use `url`, `await stop()`.

    `port=None` takes a free port; a fixed `port` that is taken raises `PortInUse`.
    """

    def __init__(self, app: Any, name: str, *, port: int | None = None) -> None:
        self.app = app
        self.name = name
        self.requested_port = port
        self._server: _QuietServer | None = None
        self._task: asyncio.Task[None] | None = None
        self.port: int | None = None

    @property
    def url(self) -> str:
        if self.port is None:
            raise RuntimeError(f"{self.name} is not running")
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> ServedApp:
        # IPPROTO_TCP (not 0) so asyncio sets TCP_NODELAY: without it, split writes wait
        # for the peer's delayed ACK and every kept-alive request stalls ~40 ms.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        # SO_REUSEADDR lets a fixed port be bound again while old connections linger in
        # TIME_WAIT (a restarted sandbox); it never lets two servers listen on one port.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", self.requested_port or 0))
        except OSError as exc:
            sock.close()
            if exc.errno == errno.EADDRINUSE:
                raise PortInUse(
                    exc.errno, f"127.0.0.1:{self.requested_port} ({self.name}) is in use"
                ) from None
            raise
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.app,
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=1,
            # Longer than httpx's default keepalive_expiry (5 s), so the client always
            # retires an idle connection first. At uvicorn's default (5 s, the same as
            # httpx's) the server closes idle connections just as a client may reuse
            # them: a request sent on one fails with ReadError (seen under load).
            timeout_keep_alive=65,
        )
        self._server = _QuietServer(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]), name=self.name)
        for _ in range(500):
            if self._server.started:
                return self
            if self._task.done():
                self._task.result()
                raise RuntimeError(f"{self.name} stopped while starting")
            await asyncio.sleep(0.01)
        raise RuntimeError(f"{self.name} did not start within 5 s")

    async def stop(self) -> None:
        if self._server is None or self._task is None:
            return
        self._server.should_exit = True
        self._server.stopping.set()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._server = None
        self._task = None
