"""The two clients being compared: the SDK, and a hand-written httpx script.

The hand-written flow does exactly the protocol's round trips for a `euro` entry and
nothing else, on one `httpx.AsyncClient` (one connection pool for the merchant and the
payment API):

1. `GET resource` -> 402, parse the JSON, take the `euro` entry;
2. `POST {api_url}/transaction/payment` with `X-API-KEY` and
   `{"paymentFrom", "toType": "PaymentRequestCode", "paymentTo", "amount"}`
   (amount as a JSON number, as the SDK sends it);
3. `GET resource` with `X-PAYMENT` = base64url(compact JSON proof), unpadded.

The same bytes the SDK puts on the wire (`x402_client/_rails/euro.py`,
`_payment_api.py`). No limits, hooks, retries or validation: it is the floor.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

Fetch = Callable[[str], Awaitable[httpx.Response]]


def _b64url_json(data: dict[str, Any]) -> str:
    raw = json.dumps(data, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


class HandWritten:
    """The baseline payer: one `AsyncClient`, three round trips per paid request."""

    def __init__(self, options: dict[str, Any], client: httpx.AsyncClient) -> None:
        self.client = client
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
        paid = await client.post(
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


class SDK:
    """The SDK as a user would install it: `with_eur_payment(httpx.AsyncClient(), options)`."""

    def __init__(self, options: dict[str, Any], client: httpx.AsyncClient) -> None:
        from x402_client import with_eur_payment

        self.client = with_eur_payment(client, options)

    async def get(self, url: str) -> httpx.Response:
        return await self.client.get(url)

    async def aclose(self) -> None:
        await self.client.aclose()


def euro_options(options: dict[str, Any]) -> dict[str, Any]:
    """The managed-account part of the sandbox's payer options (no EVM rail)."""
    return {k: options[k] for k in ("api_key", "from_account", "api_url")}
