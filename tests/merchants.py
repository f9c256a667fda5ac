"""Scripted merchants: small, honest or hostile, over `httpx.MockTransport` or real sockets.

A `ScriptedMerchant` issues real payment requests in the sandbox bank (so the client's
payments move sandbox money for real through the sandbox payment API) and answers each
request through a `script`: a function of the merchant and the request that returns a
`Reply`. It records every request it sees, so tests assert what the client sent, where.

The same merchant serves as `merchant.transport()` (an `httpx.MockTransport`: milliseconds,
no sockets) and as an ASGI app (`await serve(merchant)` in the tests: real sockets).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import httpx

from x402_client._proof import decode_proof
from x402_eur_sandbox import Bank


@dataclasses.dataclass(frozen=True)
class Seen:
    method: str
    url: str
    headers: dict[str, str]

    @property
    def path(self) -> str:
        return httpx.URL(self.url).path

    @property
    def proof(self) -> str | None:
        return self.headers.get("x-payment")


@dataclasses.dataclass
class Reply:
    status: int = 200
    body: Any = dataclasses.field(default_factory=lambda: {"ok": True})
    headers: dict[str, str] = dataclasses.field(default_factory=dict)
    #: The body breaks off after its first bytes (over sockets: the connection closes).
    broken: bool = False

    def encoded(self) -> bytes:
        if isinstance(self.body, bytes):
            return self.body
        return json.dumps(self.body).encode()


Script = Callable[["ScriptedMerchant", Seen], Reply]


class ScriptedMerchant:
    def __init__(self, bank: Bank, account: str, script: Script | None = None) -> None:
        self.bank = bank
        self.account = account
        self.script: Script = script or paid_resource()
        self.requests: list[Seen] = []
        self.state: dict[str, Any] = {}

    # --- what a script uses -------------------------------------------------------------------

    def entry(self, amount: str = "0.10", **changes: Any) -> dict[str, Any]:
        """A real `euro` entry: a fresh payment request in the sandbox bank."""
        request = self.bank.create_payment_request(self.account, Decimal(amount), "scripted")
        entry = {
            "scheme": "euro",
            "network": "provider:mainnet",
            "asset": "EURO",
            "amount": amount,
            "payTo": self.account,
            "paymentRequestCode": request.code,
            "expiresAt": int(request.expires_at),
            "facilitator": "http://127.0.0.1:9/x402",
        }
        entry.update(changes)
        return entry

    def challenge(self, *entries: dict[str, Any], error: str = "payment required") -> Reply:
        return Reply(402, {"x402Version": 2, "error": error, "accepts": list(entries)})

    def verify(self, proof: str) -> tuple[bool, str]:
        code = decode_proof(proof).payload.get("paymentRequestCode")
        valid, reason, _ = self.bank.verify_payment_request(str(code), self.account)
        return valid, reason

    @property
    def paid_requests(self) -> list[Seen]:
        return [r for r in self.requests if r.proof is not None]

    # --- serving --------------------------------------------------------------------------------

    def answer(self, seen: Seen) -> Reply:
        self.requests.append(seen)
        return self.script(self, seen)

    def transport(self) -> httpx.MockTransport:
        def handler(request: httpx.Request) -> httpx.Response:
            reply = self.answer(
                Seen(
                    request.method,
                    str(request.url),
                    {k.lower(): v for k, v in request.headers.items()},
                )
            )
            headers = {"content-type": "application/json", **reply.headers}
            if reply.broken:
                return httpx.Response(
                    reply.status, headers=headers, stream=_Broken(reply.encoded()[:3])
                )
            return httpx.Response(reply.status, headers=headers, content=reply.encoded())

        return httpx.MockTransport(handler)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        query = scope.get("query_string", b"").decode()
        url = f"http://{headers.get('host', 'merchant')}{scope['path']}" + (
            f"?{query}" if query else ""
        )
        while (await receive()).get("more_body"):
            pass
        reply = self.answer(Seen(scope["method"], url, headers))
        raw = reply.encoded()
        out = {"content-type": "application/json", "content-length": str(len(raw)), **reply.headers}
        await send(
            {
                "type": "http.response.start",
                "status": reply.status,
                "headers": [(k.encode(), v.encode()) for k, v in out.items()],
            }
        )
        if reply.broken:
            await send({"type": "http.response.body", "body": raw[:3], "more_body": True})
            raise ConnectionAbortedError("the merchant broke off the body")
        await send({"type": "http.response.body", "body": raw})


class _Broken(httpx.AsyncByteStream, httpx.SyncByteStream):
    """A body whose connection breaks after its first bytes."""

    def __init__(self, head: bytes) -> None:
        self._head = head

    async def __aiter__(self) -> Any:
        yield self._head
        raise httpx.ReadError("the merchant broke off the body")

    def __iter__(self) -> Any:
        yield self._head
        raise httpx.ReadError("the merchant broke off the body")


# --- scripts ------------------------------------------------------------------------------------


def paid_resource(amount: str = "0.10", body: Any = None) -> Script:
    """An honest merchant: 402 with one entry; a valid proof gets the resource."""

    def script(m: ScriptedMerchant, seen: Seen) -> Reply:
        if seen.proof is None:
            return m.challenge(m.entry(amount))
        valid, reason = m.verify(seen.proof)
        if not valid:
            return m.challenge(m.entry(amount), error=reason)
        return Reply(200, body if body is not None else {"paid": True})

    return script


def now() -> int:
    return int(time.time())
