"""Shared fixtures: one sandbox for the session (in its own thread and loop), fresh
accounts per test, and small scripted servers on 127.0.0.1 for hostile merchants."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from decimal import Decimal
from typing import Any

import pytest

from x402_client import PaymentOptions
from x402_client.sandbox import Account, Sandbox, ServedApp


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def sandbox() -> Iterator[Sandbox]:
    """The shared euro sandbox. Tests open their own accounts so balances don't mix."""
    with Sandbox.run_in_thread() as running:
        yield running


@pytest.fixture
def payer(sandbox: Sandbox) -> Account:
    return sandbox.bank.open_account("10.00")


@pytest.fixture
def options_for(sandbox: Sandbox) -> Callable[..., PaymentOptions]:
    def make(account: Account, **overrides: Any) -> PaymentOptions:
        return sandbox.payment_options(
            api_key=account.api_key, from_account=account.code, **overrides
        )

    return make


class Recorder:
    """ASGI wrapper that records each request's method, path and headers, then delegates
    (or answers 200 `{"recorded": true}` when there is nothing to delegate to)."""

    def __init__(self, app: Any = None) -> None:
        self.app = app
        self.requests: list[tuple[str, str, dict[str, str]]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
            self.requests.append((scope["method"], scope["path"], headers))
        if self.app is not None:
            await self.app(scope, receive, send)
            return
        body = b'{"recorded": true}'
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Any], Any]]:
    """`url = await serve(app)`: serve an ASGI app on a free port for this test."""
    served: list[ServedApp] = []

    async def start(app: Any) -> str:
        server = await ServedApp(app, "test-app").start()
        served.append(server)
        return server.url

    yield start
    for server in served:
        await server.stop()


def scripted_402(body: bytes | str, status: int = 402, headers: dict[str, str] | None = None):
    """An ASGI app that answers every request with `status` and `body`."""
    raw = body.encode() if isinstance(body, str) else body

    async def app(scope: Any, receive: Any, send: Any) -> None:
        extra = [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json"), *extra],
            }
        )
        await send({"type": "http.response.body", "body": raw})

    return app


def payments(sandbox: Sandbox, account: Account) -> list[Any]:
    """The payments `account` made (moved money), in order."""
    return [t for t in sandbox.bank.payments_made if t.from_account == account.code]


def dec(value: str) -> Decimal:
    return Decimal(value)
