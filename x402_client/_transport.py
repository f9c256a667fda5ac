"""`PaymentTransport` and `with_eur_payment`: where payment plugs into httpx.

The payment layer is a transport that wraps the client's own transport (and each of its
mounts), below httpx's redirect, auth and event-hook layers. Why a transport and not a
response hook: a hook cannot hand the caller a new response, so the paid response
would never reach `await client.get(url)`. Being below the redirect layer means the
`X-PAYMENT` header is added to one hop only and never follows a redirect; the user's
`auth=` and event hooks run as before. What must hold for the caller's whole request (at
most one payment, receipts, truthful errors) rides in the request's extensions, which all
hops share (`_payer.LogicalRequest`). See `docs/design.md`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from ._exceptions import ConfigurationError, PaymentOutcomeUnknown
from ._ledger import PaymentLedger
from ._options import PaymentOptions, coerce_options
from ._payer import LogicalRequest, Payer
from ._state import state_of

__all__ = ["PaymentTransport", "payment_ledger", "with_eur_payment"]


class PaymentTransport(httpx.AsyncBaseTransport):
    """An httpx transport that answers x402 challenges, for clients you build yourself.

    ```python
    transport = PaymentTransport(httpx.AsyncHTTPTransport(), PaymentOptions.from_env())
    async with httpx.AsyncClient(transport=transport) as client:
        response = await client.get("https://merchant.example/paid")
    ```

    Responses other than 402 pass through untouched and unread, streams included.
    Closing the transport closes the wrapped one.
    """

    def __init__(
        self,
        transport: httpx.AsyncBaseTransport | None = None,
        options: PaymentOptions | Mapping[str, Any] | None = None,
        *,
        payer: Payer | None = None,
    ) -> None:
        self._transport = transport if transport is not None else httpx.AsyncHTTPTransport()
        self._payer = payer if payer is not None else Payer(coerce_options(options))
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
        guard = LogicalRequest.of(request)
        try:
            response = await self._transport.handle_async_request(request)
        except httpx.TransportError as exc:
            if not guard.receipts:
                raise
            # A hop after the paid one failed (a redirect the paid answer asked for).
            error = guard.truthful(
                PaymentOutcomeUnknown(
                    f"a later hop of this request failed in transit ({type(exc).__name__})",
                    request=request,
                )
            )
            await self._payer._notify("on_payment_error", error)
            raise error from exc
        if response.status_code != 402:
            return guard.finish_hop(response)
        return await self._payer.handle_402(
            guard, request, response, self._transport.handle_async_request
        )

    async def aclose(self) -> None:
        await self._transport.aclose()
        for payer in (self._payer, *self._retired):
            await payer.aclose()
        self._retired.clear()


def with_eur_payment(
    client: httpx.AsyncClient,
    options: PaymentOptions | Mapping[str, Any] | None = None,
) -> httpx.AsyncClient:
    """Install x402 payment handling on `client` and return that same client.

    `options` is a `PaymentOptions` or a mapping with the same keys (snake_case or the
    spec's camelCase); None reads `PaymentOptions.from_env()`. The client's transport and
    each of its mounts are wrapped by one `PaymentTransport` sharing one payer.

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
    if not isinstance(client, httpx.AsyncClient):
        raise ConfigurationError(
            f"with_eur_payment needs an httpx.AsyncClient, not {type(client).__name__}"
        )
    resolved = PaymentOptions.from_env() if options is None else coerce_options(options)
    payer = Payer(resolved)
    try:
        transport: httpx.AsyncBaseTransport = client._transport
        mounts: dict[Any, httpx.AsyncBaseTransport | None] = client._mounts
    except AttributeError as exc:  # pragma: no cover - guards against httpx internals moving
        raise ConfigurationError(
            "this httpx version keeps its transport elsewhere; build the client with "
            "transport=PaymentTransport(...) instead"
        ) from exc

    def install(inner: httpx.AsyncBaseTransport) -> httpx.AsyncBaseTransport:
        if isinstance(inner, PaymentTransport):
            inner._replace_payer(payer)
            return inner
        return PaymentTransport(inner, payer=payer)

    client._transport = install(transport)
    for pattern, mounted in list(mounts.items()):
        if mounted is not None:
            mounts[pattern] = install(mounted)
    return client


def payment_ledger(
    client: httpx.AsyncClient | PaymentTransport | PaymentOptions,
) -> PaymentLedger:
    """The ledger of every payment made with the options of `client` (or of a
    `PaymentTransport`, or of a `PaymentOptions` object itself).

    ```python
    for entry in payment_ledger(client).entries(outcome="unknown"):
        print(entry.intent.amount, entry.proof)
    ```
    """
    if isinstance(client, PaymentOptions):
        return state_of(client).ledger
    transport = (
        client if isinstance(client, PaymentTransport) else getattr(client, "_transport", None)
    )
    if not isinstance(transport, PaymentTransport):
        raise ConfigurationError("this client has no payment handling: call with_eur_payment first")
    return transport.payer.state.ledger
