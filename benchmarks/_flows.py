"""The clients being compared: the SDK, the hand-written floor, and a bare httpx client.

The hand-written floor does exactly the protocol's round trips for a `euro` entry and
nothing else:

1. `GET resource` -> 402, parse the JSON, take the `euro` entry;
2. `POST {api_url}/transaction/payment` with `X-API-KEY` and
   `{"paymentFrom", "toType": "PaymentRequestCode", "paymentTo", "amount"}`
   (amount as a JSON number, as the SDK sends it);
3. `GET resource` with `X-PAYMENT` = base64url(compact JSON proof), unpadded.

The same bytes the SDK puts on the wire (`x402_client/_rails/euro.py`,
`_payment_api.py`). No limits, hooks, retries or validation: it is the floor.

Pools: like the SDK, which keeps the user's client for the merchant and a client of its
own for the payment API, the floor has one pool per origin (`api_client`). Given no
`api_client` it uses the merchant client for both (one pool: the earlier baseline).
"""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx

#: The user-side pool of every flow, sized for concurrency 50. httpx's default keeps only
#: 20 idle connections: at concurrency 50 it closes and re-opens a connection for nearly
#: every request, in every flow alike, which would measure httpx's defaults, not the SDK.
#: The 60 s keep-alive expiry outlasts a round (both lean servers and the sandbox keep
#: idle connections longer), so churn counts measure the flows, not the expiry.
USER_LIMITS = httpx.Limits(
    max_connections=100, max_keepalive_connections=100, keepalive_expiry=60.0
)
#: The floor's payment-API pool: what the SDK's own payment-API client uses
#: (`PaymentOptions.payment_api_max_connections`, default 100, all kept alive).
API_LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=100)


def _b64url_json(data: dict[str, Any]) -> str:
    raw = json.dumps(data, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


class HandWritten:
    """The floor: three round trips per paid request, one pool per origin."""

    def __init__(
        self,
        options: dict[str, Any],
        client: httpx.AsyncClient,
        api_client: httpx.AsyncClient | None = None,
    ) -> None:
        self.client = client
        self.api_client = api_client if api_client is not None else client
        self.api_url = options["api_url"].rstrip("/")
        self.api_key = options["api_key"]
        self.from_account = options["from_account"]

    async def get(self, url: str) -> httpx.Response:
        client = self.client
        first = await client.get(url)
        if first.status_code != 402:
            return first
        entry = next(e for e in first.json()["accepts"] if e.get("scheme") == "euro")
        code = entry["paymentRequestCode"]
        # The amount goes out as a JSON number, digit for digit ("0.10").
        sender, to = json.dumps(self.from_account), json.dumps(code)
        body = (
            f'{{"paymentFrom":{sender},"toType":"PaymentRequestCode",'
            f'"paymentTo":{to},"amount":{entry["amount"]}}}'
        )
        paid = await self.api_client.post(
            f"{self.api_url}/transaction/payment",
            content=body.encode(),
            headers={"X-API-KEY": self.api_key, "Content-Type": "application/json"},
        )
        paid.raise_for_status()
        proof = _b64url_json(
            {
                "x402Version": 2,
                "scheme": "euro",
                "network": entry["network"],
                "payload": {"paymentRequestCode": code},
            }
        )
        return await client.get(url, headers={"X-PAYMENT": proof})

    async def aclose(self) -> None:
        await self.client.aclose()
        if self.api_client is not self.client:
            await self.api_client.aclose()


class SDK:
    """The SDK as a user would install it: `with_eur_payment(httpx.AsyncClient(), options)`."""

    def __init__(self, options: dict[str, Any], client: httpx.AsyncClient) -> None:
        from x402_client import with_eur_payment

        self.client = with_eur_payment(client, options)

    async def get(self, url: str) -> httpx.Response:
        return await self.client.get(url)

    async def aclose(self) -> None:
        await self.client.aclose()


class Bare:
    """A plain `httpx.AsyncClient`: the floor of a request that is not a 402."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    async def get(self, url: str) -> httpx.Response:
        return await self.client.get(url)

    async def aclose(self) -> None:
        await self.client.aclose()


def euro_options(options: dict[str, Any]) -> dict[str, Any]:
    """The managed-account part of a server's payer options (no EVM rail)."""
    return {k: options[k] for k in ("api_key", "from_account", "api_url")}


def make_flow(kind: str, options: dict[str, Any], *, per_origin: bool = True) -> Any:
    """A fresh flow of `kind` (`sdk`, `floor`, `bare`) with its own fresh pools."""
    client = httpx.AsyncClient(timeout=60, limits=USER_LIMITS)
    if kind == "sdk":
        return SDK(euro_options(options), client)
    if kind == "floor":
        api = httpx.AsyncClient(timeout=60, limits=API_LIMITS) if per_origin else None
        return HandWritten(options, client, api)
    if kind == "bare":
        return Bare(client)
    raise ValueError(kind)
