"""`PaymentTransport` and `with_eur_payment`: where payment plugs into httpx.

The payment layer is a transport that wraps the client's own transport (and each of its
mounts), below httpx's redirect, auth and event-hook layers. Why a transport and not a
response hook: a hook cannot hand the caller a new response, so the paid response
would never reach `await client.get(url)`. Being below the redirect layer means the
`X-PAYMENT` header is added to one hop only and never follows a redirect; the user's
`auth=` and event hooks run as before. What must hold for the caller's whole request (at
most one payment, receipts, truthful errors) rides in the request's extensions, which all
hops share (`_request.LogicalRequest`). See `docs/design.md`.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, TypeVar, overload

import httpx

from .._options import PaymentOptions, coerce_options
from .._protocol.errors import ConfigurationError
from .._state.http import default_ssl_context, wrap_transports

if TYPE_CHECKING:
    # At run time these load on first use (a transport built, a ledger asked for): the
    # payer brings pydantic, the wire models and anyio, which `import x402_client` and
    # `PaymentOptions(...)` do not need.
    import requests

    from .._flow.payment import Payer

__all__ = [
    "PaymentTransport",
    "install_boundary",
    "with_eur_payment",
    "wrap_transports",
]

_NOT_FOR_SYNC = (
    "PaymentTransport is for httpx.AsyncClient; for an httpx.Client use "
    "SyncPaymentTransport (or with_eur_payment(httpx.Client(...)))"
)


def install_boundary(client: httpx.AsyncClient) -> None:
    """Own `client.send`: the outermost layer of every request the client makes, so that
    an error raised above the payment transport (httpx's own redirect handling, a body
    read by `send`, an event hook) after a payment reaches the caller as the truthful
    "money moved" error (`Payer.conclude`). Installed once per client."""
    from .._flow.payment import Boundary, LogicalRequest

    send = client.send
    if getattr(send, "_x402_boundary", False):
        return

    async def bounded_send(request: httpx.Request, *args: Any, **kwargs: Any) -> httpx.Response:
        async with Boundary(LogicalRequest.begin(request)):
            return await send(request, *args, **kwargs)

    bounded_send._x402_boundary = True  # type: ignore[attr-defined]
    object.__setattr__(client, "send", bounded_send)


class PaymentTransport(httpx.AsyncBaseTransport):
    """An httpx transport that answers x402 challenges, for clients you build yourself.

    ```python
    transport = PaymentTransport(httpx.AsyncHTTPTransport(), PaymentOptions.from_env())
    async with httpx.AsyncClient(transport=transport) as client:
        response = await client.get("https://merchant.example/paid")
    ```

    `options` is a `PaymentOptions`, a mapping of its keys, or None (or none given) for
    `PaymentOptions.from_env()`, as for `with_eur_payment`. Responses other than 402 pass
    through untouched and unread, streams included. Closing the transport closes the
    wrapped one.
    """

    def __init__(
        self,
        transport: httpx.AsyncBaseTransport | None = None,
        options: PaymentOptions | Mapping[str, Any] | None = None,
        *,
        payer: Payer | None = None,
    ) -> None:
        from .._flow.payment import Boundary, LogicalRequest, Payer

        if transport is None:
            transport = httpx.AsyncHTTPTransport(verify=default_ssl_context())
        self._transport = transport
        self._payer = payer if payer is not None else Payer(coerce_options(options))
        self._guard_of = LogicalRequest.of
        self._boundary = Boundary
        self._retired: list[Payer] = []

    def __repr__(self) -> str:
        return f"PaymentTransport({self._transport!r}, {self._payer!r})"

    @property
    def payer(self) -> Payer:
        return self._payer

    @property
    def options(self) -> PaymentOptions:
        return self._payer.options

    @property
    def wrapped(self) -> httpx.AsyncBaseTransport:
        """The transport this one forwards to."""
        return self._transport

    def _replace_payer(self, payer: Payer) -> None:
        if payer is not self._payer:
            self._retired.append(self._payer)
            self._payer = payer

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        guard = self._guard_of(request)
        # The truth boundary, unless the client's own `send` holds it (then it also covers
        # what httpx raises above this transport).
        async with self._boundary(guard, outermost=False):
            response = await self._transport.handle_async_request(request)
            if response.status_code != 402:
                if not guard.receipts:
                    return guard.finish_hop(response)
                return await self._payer.answered(guard, request, response)
            return await self._payer.handle_402(
                guard, request, response, self._transport.handle_async_request
            )

    async def aclose(self) -> None:
        await self._transport.aclose()
        for payer in (self._payer, *self._retired):
            await payer.aclose()
        self._retired.clear()

    # An httpx.Client calls these: say what to use instead.

    def handle_request(self, request: httpx.Request) -> NoReturn:
        raise ConfigurationError(_NOT_FOR_SYNC)

    def __enter__(self) -> NoReturn:
        raise ConfigurationError(_NOT_FOR_SYNC)

    def close(self) -> NoReturn:
        raise ConfigurationError(_NOT_FOR_SYNC)


class ToolSession(Protocol):
    """An MCP client session: anything with `call_tool` (`mcp.ClientSession`, `mcp.Client`)."""

    @property
    def call_tool(self) -> Callable[..., Awaitable[Any]]: ...


_ToolSessionT = TypeVar("_ToolSessionT", bound=ToolSession)


@overload
def with_eur_payment(
    client: httpx.AsyncClient,
    options: PaymentOptions | Mapping[str, Any] | None = None,
) -> httpx.AsyncClient: ...


@overload
def with_eur_payment(
    client: httpx.Client,
    options: PaymentOptions | Mapping[str, Any] | None = None,
) -> httpx.Client: ...


@overload
def with_eur_payment(
    client: requests.Session,
    options: PaymentOptions | Mapping[str, Any] | None = None,
) -> requests.Session: ...


@overload
def with_eur_payment(
    client: _ToolSessionT,
    options: PaymentOptions | Mapping[str, Any] | None = None,
) -> _ToolSessionT: ...


def with_eur_payment(
    client: httpx.AsyncClient | httpx.Client | requests.Session | ToolSession,
    options: PaymentOptions | Mapping[str, Any] | None = None,
) -> httpx.AsyncClient | httpx.Client | requests.Session | ToolSession:
    """Install x402 payment handling on `client` and return that same client.

    `client` is an `httpx.AsyncClient` or an `httpx.Client`; both pay the same way. A sync
    client answers 402s on a private event loop (one thread, started on the first 402,
    stopped by `client.close()`); everything else stays in the caller's thread
    (`docs/sync.md`). A `requests.Session` (the `requests` extra) pays like an
    `httpx.Client`: a `PaymentAdapter` over each of its adapters, the receipt in
    `response.x402_payment` (`docs/requests.md`). An MCP client session (`mcp.ClientSession`,
    `mcp.Client`: anything with `call_tool`) pays its paid tool calls and hands back a
    `PaidToolResult` (`docs/mcp-payments.md`).

    `options` is a `PaymentOptions` or a mapping of its keys; None (or none given) reads
    `PaymentOptions.from_env()`, as every entry does. The client's transport and each of
    its mounts are wrapped by one `PaymentTransport` (`SyncPaymentTransport` for an
    `httpx.Client`) sharing one payer.

    Calling it again on the same client does not wrap twice: it replaces the options of
    the installed transports (in-flight requests finish with the old ones).

    Budgets, the ledger and EVM nonce locks belong to the `options` object: every client
    built from the same `PaymentOptions` shares them (within this process; a
    `RedisBudgetStore` shares budgets across processes). A mapping or None makes new
    options, so new state, on every call.

    ```python
    client = with_eur_payment(httpx.AsyncClient(), {"api_key": "...", "from_account": "ACC_...",
                                                    "api_url": "https://..."})
    response = await client.get("https://merchant.example/paid")
    receipt = response.extensions.get("x402_payment")
    ```
    """
    loaded = sys.modules.get("requests")  # a Session exists only if requests was imported
    is_session = loaded is not None and isinstance(client, loaded.Session)
    if not is_session and not isinstance(client, (httpx.AsyncClient, httpx.Client)):
        if callable(getattr(client, "call_tool", None)):
            from .mcp_session import install as install_mcp  # loaded by MCP users only

            return install_mcp(client, options)
        raise ConfigurationError(
            "with_eur_payment needs an httpx.AsyncClient or an httpx.Client (or a "
            f"requests.Session, or an MCP client session), not {type(client).__name__}"
        )
    resolved = coerce_options(options)
    if is_session:
        from .requests_session import install as install_requests  # loaded by requests users only

        return install_requests(client, resolved)  # type: ignore[arg-type]
    assert isinstance(client, (httpx.AsyncClient, httpx.Client))
    from .._flow.payment import Payer

    payer = Payer(resolved)
    if isinstance(client, httpx.Client):
        from .httpx_blocking import install as install_sync  # loaded by sync users only

        return install_sync(client, payer)
    return _install_async(client, payer)


def _install_async(client: httpx.AsyncClient, payer: Payer) -> httpx.AsyncClient:
    """Wrap the client's transport and mounts with one `PaymentTransport` each, sharing
    `payer`; a transport installed before gets the new payer instead of a second wrap."""

    def install(inner: httpx.AsyncBaseTransport) -> httpx.AsyncBaseTransport:
        if isinstance(inner, PaymentTransport):
            inner._replace_payer(payer)
            return inner
        return PaymentTransport(inner, payer=payer)

    wrap_transports(client, install, "PaymentTransport")
    install_boundary(client)
    return client
