"""Payment for `httpx.Client`: the async payment core, driven from a private loop thread.

```python
with with_eur_payment(httpx.Client(), options) as client:
    response = client.get("https://merchant.example/paid")
    receipt = response.extensions.get("x402_payment")
```

There is one copy of the payment rules (`_payer.Payer`, async). A sync client drives it
like this (the reasons are in `docs/sync.md`):

- **Everything that is not a 402 stays in the caller's thread.** `SyncPaymentTransport`
  calls the wrapped sync transport directly and hands any other answer back untouched and
  unread, streams included: a free request costs what it cost without payment.
- **A 402 is answered on a private event loop**, one daemon thread per installed client,
  started on the first 402 and stopped by `client.close()`. The caller's thread waits for
  `Payer.handle_402` there (`asyncio.run_coroutine_threadsafe`). The core's `send` calls the
  wrapped *sync* transport in a worker thread, and sync bodies are seen by the core as
  async ones (`_AsyncView`); the response it returns is seen by the caller as a sync one
  again (`_SyncView`), its body read through the loop so that what the core raises while
  it is read (`PaymentOutcomeUnknown`) reaches the caller.
- **What must hold across clients is the options'** (`_state`): budgets, ledger and nonce
  locks are thread-safe and loop-agnostic, so sync and async clients of one
  `PaymentOptions` share them. Connections (payment API, RPC) belong to the loop that
  opened them: each installed client's payer lives on its own loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import dataclasses
import logging
import sys
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping
from typing import Any, NoReturn, TypeVar

import httpx

from .._flow.payment import Boundary, LogicalRequest, Payer
from .._options import PaymentOptions, coerce_options
from .._protocol.errors import ConfigurationError
from .._state.http import default_ssl_context, wrap_transports

__all__ = ["ADAPTER_SETTINGS", "SyncPaymentTransport", "install", "session_transport"]

logger = logging.getLogger("x402_client")

_T = TypeVar("_T")

#: Worker threads of one client's loop: the sync sends and body reads of concurrent 402s.
_WORKERS = 40

_NOT_FOR_ASYNC = (
    "SyncPaymentTransport is for httpx.Client; for an httpx.AsyncClient use "
    "PaymentTransport (or with_eur_payment(httpx.AsyncClient(...)))"
)
#: The per-request settings of the requests a paying `requests.Session` sends in this
#: context (`PaymentAdapter.settings(...)`): what `extensions={"x402": ...}` is to httpx.
ADAPTER_SETTINGS: contextvars.ContextVar[Mapping[str, Any] | None] = contextvars.ContextVar(
    "x402_requests_settings", default=None
)


# --- the private loop ----------------------------------------------------------------------


class _LoopGone(RuntimeError):
    """The run of the loop a coroutine was meant for has ended (the client was closed)."""


@dataclasses.dataclass(eq=False)
class _Running:
    """One run of a driver's loop: the loop, its thread, its workers, its stop signal."""

    loop: asyncio.AbstractEventLoop
    thread: threading.Thread
    executor: concurrent.futures.ThreadPoolExecutor
    stop: asyncio.Event


class _Driver:
    """Runs one payer's coroutines on a private event loop in a daemon thread.

    Shared by the transport and the mounts of one installed client. The loop starts on the
    first 402 and stops in `close()`, after closing the payer's connections (they belong to
    that loop). Scheduling and stopping hold one lock, so a coroutine scheduled on a loop is
    always either run or cancelled by it, never left waiting on a loop that closed.
    """

    def __init__(self, payer: Payer) -> None:
        self.payer = payer
        self._lock = threading.Lock()
        self._running: _Running | None = None

    def __repr__(self) -> str:
        return f"_Driver({self.payer!r}, running={self._running is not None})"

    def _start(self) -> _Running:
        started: list[_Running] = []
        failed: list[BaseException] = []
        ready = threading.Event()

        async def main() -> None:
            loop = asyncio.get_running_loop()
            executor = concurrent.futures.ThreadPoolExecutor(
                _WORKERS, thread_name_prefix="x402-sync-io"
            )
            # asyncio.run shuts the default executor down (joining its threads) at the end.
            loop.set_default_executor(executor)
            stop = asyncio.Event()
            started.append(_Running(loop, threading.current_thread(), executor, stop))
            ready.set()
            await stop.wait()
            try:
                await self.payer.aclose()
                # A store shared with other loops keeps a connection per loop: close ours.
                close_loop = getattr(self.payer.state.budgets.store, "aclose_loop", None)
                if close_loop is not None:
                    await close_loop()
            except Exception:
                logger.exception("x402: closing the payer of a sync client failed")

        def run() -> None:
            try:
                asyncio.run(main())
            except BaseException as exc:  # pragma: no cover - the loop itself broke
                failed.append(exc)
                ready.set()

        thread = threading.Thread(target=run, name="x402-sync-payer", daemon=True)
        thread.start()
        ready.wait()
        if not started:  # pragma: no cover - see above
            thread.join()
            raise RuntimeError("the payment loop of this sync client did not start") from (
                failed[0] if failed else None
            )
        return started[0]

    def schedule(
        self, coro: Coroutine[Any, Any, _T], on: _Running | None = None
    ) -> tuple[_Running, concurrent.futures.Future[_T]]:
        """Schedule `coro` on the loop (`on`: only on that run of it; started if None)."""
        with self._lock:
            if on is None:
                if self._running is None:
                    self._running = self._start()
                on = self._running
            elif on is not self._running:
                coro.close()
                raise _LoopGone()
            return on, asyncio.run_coroutine_threadsafe(coro, on.loop)

    def run(self, coro: Coroutine[Any, Any, _T], on: _Running | None = None) -> _T:
        """Run `coro` on the loop and wait for it in this thread."""
        current = self._running
        if current is not None and threading.current_thread() is current.thread:
            coro.close()
            raise ConfigurationError(
                "a payment callback of this sync client made a paid request through the same "
                "client: it would wait for itself; use another client"
            )
        _, future = self.schedule(coro, on)
        try:
            return future.result()
        except BaseException:
            # KeyboardInterrupt (or any error) while waiting: stop the payment as an async
            # caller's cancellation would (its outcome is recorded in the ledger).
            future.cancel()
            raise

    def close(self) -> None:
        """Stop the loop (after closing the payer's connections) and join its threads."""
        with self._lock:
            running, self._running = self._running, None
            if running is None:
                return
            running.loop.call_soon_threadsafe(running.stop.set)
        if threading.current_thread() is not running.thread:
            running.thread.join()

    # --- one 402 -----------------------------------------------------------------------------

    def _started(self) -> _Running:
        """The running loop, started on first use."""
        with self._lock:
            if self._running is None:
                self._running = self._start()
            return self._running

    def handle_402(
        self,
        guard: LogicalRequest,
        request: httpx.Request,
        response: httpx.Response,
        inner: httpx.BaseTransport,
    ) -> httpx.Response:
        """`Payer.handle_402` for a sync transport, on the loop; the answer seen as sync."""
        running = self._started()
        view = _async_view(response, request, running)

        async def send(paid: httpx.Request) -> httpx.Response:
            answer = await _in_worker(running, inner.handle_request, paid, discard=_close_answer)
            return _async_view(answer, paid, running)

        try:
            result = self.run(self.payer.handle_402(guard, request, view, send), running)
        except _LoopGone:
            # The client was closed while this request was on its way: the 402 is ours.
            response.close()
            raise RuntimeError("the client was closed while a payment was in flight") from None
        if result is view:
            return response  # handed back untouched (`{"pay": False}`)
        return self._sync_view(result, running)

    def answered(
        self, guard: LogicalRequest, request: httpx.Request, response: httpx.Response
    ) -> httpx.Response:
        """`Payer.answered` for a later hop of a paid request, on the loop."""
        running = self._started()
        view = _async_view(response, request, running)
        result = self.run(self.payer.answered(guard, request, view), running)
        return self._sync_view(result, running)

    def conclude(self, guard: LogicalRequest, exc: Exception) -> BaseException:
        """`Payer.conclude` (the truth boundary) for a sync caller, on the loop."""
        payer = guard.payer or self.payer
        try:
            return self.run(payer.conclude(guard, exc))
        except _LoopGone:
            return guard.truthful(exc)

    def _sync_view(self, response: httpx.Response, running: _Running) -> httpx.Response:
        stream = response.stream
        if isinstance(stream, _AsyncView):
            # An answer the core passed on unread: the caller reads it in its own thread.
            response.stream = stream.stream
        elif not isinstance(stream, httpx.SyncByteStream):
            response.stream = _SyncView(stream, self, running)
        # else a body the core holds in full (`httpx.ByteStream`): readable sync as it is.
        return response


async def _in_worker(
    running: _Running,
    function: Callable[..., _T],
    *args: Any,
    discard: Callable[[concurrent.futures.Future[_T]], None] | None = None,
) -> _T:
    """`function(*args)` in one of the loop's worker threads. A result nobody waits for any
    more (the caller was cancelled) goes to `discard`, so no connection is left open."""
    future = running.executor.submit(function, *args)
    try:
        return await asyncio.wrap_future(future)
    except asyncio.CancelledError:
        if discard is not None:
            future.add_done_callback(discard)
        raise


def _close_answer(future: concurrent.futures.Future[httpx.Response]) -> None:
    if not future.cancelled() and future.exception() is None:
        future.result().close()


def _next_chunk(chunks: Iterator[bytes]) -> bytes | None:
    return next(chunks, None)


class _AsyncView(httpx.AsyncByteStream):
    """A sync body as the core reads it (`aiter_bytes`): each chunk read in a worker."""

    def __init__(self, stream: httpx.SyncByteStream, running: _Running) -> None:
        self.stream = stream
        self._running = running

    async def __aiter__(self) -> AsyncIterator[bytes]:
        chunks = iter(self.stream)
        while True:
            chunk = await _in_worker(self._running, _next_chunk, chunks)
            if chunk is None:
                return
            yield chunk

    async def aclose(self) -> None:
        await _in_worker(self._running, self.stream.close)


def _async_view(
    response: httpx.Response, request: httpx.Request, running: _Running
) -> httpx.Response:
    """The inner sync transport's `response` as the async core expects one."""
    stream = response.stream
    if not isinstance(stream, httpx.AsyncByteStream):  # a ByteStream is both already
        assert isinstance(stream, httpx.SyncByteStream)
        stream = _AsyncView(stream, running)
    return httpx.Response(
        response.status_code,
        headers=response.headers,
        stream=stream,
        extensions=response.extensions,
        request=request,
    )


async def _anext(chunks: AsyncIterator[bytes]) -> bytes | None:
    return await anext(chunks, None)


class _SyncView(httpx.SyncByteStream):
    """An async body from the core (a paid response, guarded) read through the loop.

    Each chunk is one trip to the loop, so the core's `_GuardedStream` still turns a body
    that breaks off into `PaymentOutcomeUnknown`, raised here in the caller's thread.
    """

    def __init__(self, stream: httpx.AsyncByteStream, driver: _Driver, running: _Running) -> None:
        self._stream = stream
        self._driver = driver
        self._running = running
        self._chunks: AsyncIterator[bytes] | None = None

    def __iter__(self) -> Iterator[bytes]:
        chunks = self._chunks = self._stream.__aiter__()
        while True:
            try:
                chunk = self._driver.run(_anext(chunks), self._running)
            except _LoopGone:
                # A body that outlived its client: the loop that was reading it is gone.
                raise httpx.StreamClosed() from None
            if chunk is None:
                return
            yield chunk

    def close(self) -> None:
        chunks, self._chunks = self._chunks, None
        stream = self._stream

        async def closing() -> None:
            try:
                close = getattr(chunks, "aclose", None)
                if close is not None:
                    await close()
            finally:
                await stream.aclose()

        # When the loop is gone (the client was closed), what it held went with it.
        with contextlib.suppress(_LoopGone):
            self._driver.run(closing(), self._running)


# --- the transport -------------------------------------------------------------------------


class SyncPaymentTransport(httpx.BaseTransport):
    """An httpx transport that answers x402 challenges, for `httpx.Client`s you build yourself.

    ```python
    transport = SyncPaymentTransport(httpx.HTTPTransport(), PaymentOptions.from_env())
    with httpx.Client(transport=transport) as client:
        response = client.get("https://merchant.example/paid")
    ```

    The same options (a `PaymentOptions`, a mapping of its keys, or None for
    `PaymentOptions.from_env()`), payments, limits, errors and receipts as
    `PaymentTransport`. Responses other than 402 pass through untouched and unread, in the
    caller's thread. A 402 is paid on a private event loop (one thread, started on the
    first 402); closing the transport stops it and closes the wrapped transport.
    """

    def __init__(
        self,
        transport: httpx.BaseTransport | None = None,
        options: PaymentOptions | Mapping[str, Any] | None = None,
        *,
        payer: Payer | None = None,
    ) -> None:
        if isinstance(transport, httpx.AsyncBaseTransport) and not isinstance(
            transport, httpx.BaseTransport
        ):
            raise ConfigurationError(
                "SyncPaymentTransport wraps a sync transport (httpx.HTTPTransport), not "
                f"{type(transport).__name__}"
            )
        if transport is None:
            transport = httpx.HTTPTransport(verify=default_ssl_context())
        self._transport = transport
        self._driver = _Driver(payer if payer is not None else Payer(coerce_options(options)))
        self._retired: list[_Driver] = []

    @classmethod
    def _sharing(cls, transport: httpx.BaseTransport, driver: _Driver) -> SyncPaymentTransport:
        made = cls(transport, payer=driver.payer)
        made._driver = driver
        return made

    def __repr__(self) -> str:
        return f"SyncPaymentTransport({self._transport!r}, {self._driver.payer!r})"

    @property
    def payer(self) -> Payer:
        return self._driver.payer

    @property
    def options(self) -> PaymentOptions:
        return self._driver.payer.options

    @property
    def wrapped(self) -> httpx.BaseTransport:
        """The transport this one forwards to."""
        return self._transport

    def _replace_driver(self, driver: _Driver) -> None:
        if driver is not self._driver:
            self._retired.append(self._driver)
            self._driver = driver

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        driver = self._driver
        guard = LogicalRequest.of(request)
        # The truth boundary, unless the client's own `send` holds it.
        with Boundary(guard, outermost=False, conclude=driver.conclude):
            response = self._transport.handle_request(request)
            if response.status_code != 402:
                if not guard.receipts:
                    return guard.finish_hop(response)
                return driver.answered(guard, request, response)
            return driver.handle_402(guard, request, response, self._transport)

    def close(self) -> None:
        self._transport.close()
        for driver in (self._driver, *self._retired):
            driver.close()
        self._retired.clear()

    # An httpx.AsyncClient calls these: say what to use instead.

    async def handle_async_request(self, request: httpx.Request) -> NoReturn:
        raise ConfigurationError(_NOT_FOR_ASYNC)

    async def __aenter__(self) -> NoReturn:
        raise ConfigurationError(_NOT_FOR_ASYNC)

    async def aclose(self) -> NoReturn:
        raise ConfigurationError(_NOT_FOR_ASYNC)


def install(client: httpx.Client, payer: Payer) -> httpx.Client:
    """`with_eur_payment` for a sync client: wrap its transport and mounts, one loop for all."""
    driver = _Driver(payer)

    def wrap(inner: httpx.BaseTransport) -> httpx.BaseTransport:
        if isinstance(inner, SyncPaymentTransport):
            inner._replace_driver(driver)
            return inner
        return SyncPaymentTransport._sharing(inner, driver)

    wrap_transports(client, wrap, "SyncPaymentTransport")
    _install_boundary(client, driver)
    return client


def _install_boundary(client: httpx.Client, driver: _Driver) -> None:
    """Own `client.send` (see `_transport.install_boundary`): errors raised above the
    payment transport after a payment reach the caller as the truthful error."""
    send = client.send
    if getattr(send, "_x402_boundary", False):
        return

    def conclude(guard: LogicalRequest, exc: Exception) -> BaseException:
        transport = client._transport
        current = transport._driver if isinstance(transport, SyncPaymentTransport) else driver
        return current.conclude(guard, exc)

    def bounded_send(request: httpx.Request, *args: Any, **kwargs: Any) -> httpx.Response:
        with Boundary(LogicalRequest.begin(request), conclude=conclude):
            return send(request, *args, **kwargs)

    bounded_send._x402_boundary = True  # type: ignore[attr-defined]
    object.__setattr__(client, "send", bounded_send)


# --- the paying session behind a requests.Session ------------------------------------------


def session_transport(source: Any) -> SyncPaymentTransport | None:
    """The payment transport `with_eur_payment` installed on a `requests.Session` (its
    `PaymentAdapter`s share one); None for anything else."""
    loaded = sys.modules.get("requests")  # a Session exists only if requests was imported
    if loaded is None or not isinstance(source, loaded.Session):
        return None
    for adapter in source.adapters.values():
        found = getattr(adapter, "_transport", None)
        if isinstance(found, SyncPaymentTransport):
            return found
    return None
