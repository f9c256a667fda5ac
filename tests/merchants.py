"""Scripted merchants: small, honest or hostile, over `httpx.MockTransport` or real sockets.

A `ScriptedMerchant` issues real payment requests in the sandbox bank (so the client's
payments move sandbox money for real through the sandbox payment API) and answers each
request through a `script`: a function of the merchant and the request that returns a
`Reply`. It records every request it sees, so tests assert what the client sent, where.

The same merchant serves as `merchant.transport()` (an `httpx.MockTransport`: milliseconds,
no sockets) and as an ASGI app (`await serve(merchant)` in the tests: real sockets).

A `FaultGate` puts any merchant (the sandbox's standard one, HTTP and MCP alike) behind the
sandbox's faults at its paid calls.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import socket
import socketserver
import threading
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import httpx

from x402_client._protocol.proof import decode_proof
from x402_eur_sandbox import Bank, BankError, Faults, ServedApp
from x402_eur_sandbox._faults import DroppedConnection


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
    #: No answer at all: the connection closes once the request was read
    #: (`served_raw` only; uvicorn would answer 500 instead).
    dropped: bool = False

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


@contextlib.contextmanager
def served_raw(merchant: ScriptedMerchant) -> Iterator[str]:
    """Serve `merchant` over plain HTTP/1.1 sockets on 127.0.0.1, from threads of its own,
    one request per connection: the server a `Reply(dropped=True)` needs, which closes the
    connection after reading the request and answers nothing."""

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = self.request.recv(65536)
                if not chunk:
                    return
                head += chunk
            head, _, body = head.partition(b"\r\n\r\n")
            line, *fields = head.decode("latin-1").split("\r\n")
            headers = {
                k.strip().lower(): v.strip() for k, _, v in (f.partition(":") for f in fields)
            }
            while len(body) < int(headers.get("content-length", "0")):
                body += self.request.recv(65536)
            method, target, _ = line.split(" ", 2)
            reply = merchant.answer(Seen(method, f"http://{headers.get('host')}{target}", headers))
            if reply.dropped:
                self.request.shutdown(socket.SHUT_RDWR)
                return
            raw = reply.encoded()
            out = {"content-type": "application/json", **reply.headers}
            out.update({"content-length": str(len(raw)), "connection": "close"})
            lines = [f"HTTP/1.1 {reply.status} X"] + [f"{k}: {v}" for k, v in out.items()]
            self.wfile.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + raw)

    class Server(socketserver.ThreadingTCPServer):
        daemon_threads = True

    with Server(("127.0.0.1", 0), Handler) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}"
        finally:
            server.shutdown()
            thread.join(30)


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


class FaultGate:
    """A merchant behind a fault point at its paid calls, on a port of its own (a
    `SandboxPart`: `Sandbox(parts=[merchant, FaultGate(merchant)])`, then `url`).

    A paid call is a request carrying a payment: a `PAYMENT-SIGNATURE` header over HTTP, or
    an MCP tool call whose `_meta` holds `x402/payment`. The sandbox's faults for the
    endpoint `paid_call` strike it where a proxy in front of the merchant would: `before`
    the merchant reads it (nothing is settled), or `after` the merchant answered (and
    settled). A `status` fault answers its status; a `drop` cuts the connection after the
    status line. Every other request passes through untouched (the 402s, MCP's handshake).
    """

    endpoint = "paid_call"

    def __init__(self, merchant: Any) -> None:
        self.merchant = merchant
        self._served: ServedApp | None = None

    @property
    def url(self) -> str:
        assert self._served is not None, "the fault gate is not running"
        return self._served.url

    async def start(self, sandbox: Any) -> None:
        self.faults: Faults = sandbox.faults

        async def app(scope: Any, receive: Any, send: Any) -> None:
            await self._gate(scope, receive, send)

        self._served = await ServedApp(app, "fault-gate").start()

    async def stop(self) -> None:
        if self._served is not None:
            await self._served.stop()

    async def _gate(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.merchant(scope, receive, send)
            return
        messages = [await receive()]
        while messages[-1]["type"] == "http.request" and messages[-1].get("more_body"):
            messages.append(await receive())
        body = b"".join(message.get("body", b"") for message in messages)

        async def replay() -> Any:
            return messages.pop(0) if messages else await receive()

        headers = {name.decode().lower() for name, _ in scope["headers"]}
        if "payment-signature" not in headers and b'"x402/payment"' not in body:
            await self.merchant(scope, replay, send)
            return
        answer: list[Any] = []

        async def keep(message: Any) -> None:
            answer.append(message)

        try:
            await self.faults.before(self.endpoint)
            await self.merchant(scope, replay, keep)
            await self.faults.after(self.endpoint)
        except BankError as exc:
            await answer_json(send, exc.status, json.dumps(exc.body()).encode())
            return
        except DroppedConnection:
            start = {"type": "http.response.start", "status": 200}
            await send({**start, "headers": [(b"content-length", b"1000")]})
            await send({"type": "http.response.body", "body": b"{", "more_body": True})
            return
        for message in answer:
            await send(message)


async def answer_json(send: Any, status: int, body: bytes) -> None:
    """Answer an ASGI request with `status` and the JSON `body`."""
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
