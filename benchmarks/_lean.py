"""The lean reference merchant and payment API: the servers the floor is measured against.

`python benchmarks/_lean.py merchant|payment-api [--impl raw|asgi]` serves one of them on
127.0.0.1 in this process and prints one JSON line: `{"url", "control_url", "impl"}`. It
stops when its stdin closes. `run.py` starts the merchant and the payment API in two
processes, and the client being measured runs in a third.

What "lean" means: the sandbox merchant makes two internal HTTP calls per paid request
(`/x402/pay` for the 402, `/x402/verify` for the proof) and validates with pydantic, so
its own time per paid request (5.7-9.5 ms) dwarfs the client's and flatters any ratio.
These servers make no internal calls and use no pydantic: the merchant issues a
`pr_<n>` code itself and checks a proof against the codes it issued (single use); the
payment API parses the JSON body, checks the key and the fields and answers a
`transactionCode`. Whether each served proof was really paid is checked once, after the
run, not per request: both servers keep the codes (merchant: served, API: paid) and
`/stats` gives a digest of each sorted list, which `run.py` compares.

Two implementations of the same handlers, chosen by `--impl` (the floor figure uses the
leaner, measured by `run.py --only servers`):

- `raw`: an `asyncio.Protocol` speaking just enough HTTP/1.1 (keep-alive,
  `Content-Length` bodies, pipelining; no chunked request bodies), `TCP_NODELAY` set;
- `asgi`: the same handlers as a plain ASGI app under uvicorn (h11), as the sandbox runs.

Counting is server-side and the same for every client: connections opened (`raw`: each
`connection_made`; `asgi`: distinct client (host, port) pairs) and requests. The control
listener (`control_url`: `GET /stats`, `POST /reset`) is a separate socket, so it never
shows up in those counts.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import contextlib
import hashlib
import json
import socket
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from _ready import serve_until_stdin_closes

#: The lean world's identities (what `run.py` gives the client as options).
API_KEY = "lean-bench-api-key"
PAYER_ACCOUNT = "ACC_LEAN_PAYER"
MERCHANT_ACCOUNT = "ACC_LEAN_MERCHANT"
#: Paid routes and their prices (euros, as the 402 writes them).
PRICES = {b"/weather": "0.10", b"/download": "0.01"}
WEATHER = b'{"city":"Amsterdam","forecast":"light rain","celsius":11}'
FREE = b'{"free":true}'
CHUNK = 64 * 1024
_ZEROS = b"\0" * CHUNK

_REASONS = {200: b"OK", 401: b"Unauthorized", 402: b"Payment Required", 400: b"Bad Request"}


class Stats:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.connections = 0
        self.peers: set[tuple[str, int]] = set()
        self.requests = 0
        self.paths: Counter[str] = Counter()
        #: merchant: codes served against a proof; payment API: codes paid.
        self.codes: list[str] = []

    def as_json(self) -> dict[str, Any]:
        digest = hashlib.sha256("\n".join(sorted(self.codes)).encode()).hexdigest()
        return {
            "connections": max(self.connections, len(self.peers)),
            "requests": self.requests,
            "paths": dict(self.paths),
            "codes": len(self.codes),
            "codes_digest": digest,
        }


class Response:
    """What a handler answers: status, extra headers, a body, or `stream` zero bytes."""

    __slots__ = ("body", "headers", "status", "stream")

    def __init__(
        self,
        status: int,
        body: bytes = b"",
        headers: tuple[tuple[bytes, bytes], ...] = (),
        stream: int | None = None,
    ) -> None:
        self.status = status
        self.body = body
        self.headers = headers
        self.stream = stream


Handler = Callable[[bytes, bytes, dict[bytes, bytes], bytes], Response]


# --- the handlers (no pydantic, no internal calls) ---------------------------------------


def _b64url(raw: bytes) -> bytes:
    return base64.urlsafe_b64encode(raw).rstrip(b"=")


def merchant(stats: Stats) -> Handler:
    issued: set[str] = set()
    counter = iter(range(1, 1 << 62))

    def handle(method: bytes, target: bytes, headers: dict[bytes, bytes], body: bytes) -> Response:
        path, _, query = target.partition(b"?")
        if path == b"/free":
            return Response(200, FREE)
        price = PRICES.get(path)
        if price is None:
            return Response(404, b'{"error":"not found"}')
        proof = headers.get(b"x-payment")
        if proof is None:
            code = f"pr_lean{next(counter):012d}"
            issued.add(code)
            entry = (
                '{"scheme":"euro","network":"provider:mainnet","asset":"EURO",'
                f'"amount":"{price}","payTo":"{MERCHANT_ACCOUNT}",'
                f'"paymentRequestCode":"{code}","expiresAt":{int(time.time()) + 300}}}'
            )
            challenge = (
                f'{{"x402Version":2,"error":"X-PAYMENT header is required","accepts":[{entry}]}}'
            )
            return Response(402, challenge.encode())
        try:
            decoded = json.loads(base64.urlsafe_b64decode(proof + b"=" * (-len(proof) % 4)))
            code = decoded["payload"]["paymentRequestCode"]
            valid = decoded["scheme"] == "euro" and code in issued
        except (ValueError, KeyError, TypeError, binascii.Error):
            valid = False
        if not valid:
            return Response(402, b'{"x402Version":2,"error":"Invalid payment proof"}')
        issued.discard(code)
        stats.codes.append(code)
        settlement = _b64url(
            b'{"success":true,"network":"provider:mainnet","paymentRequestCode":"'
            + code.encode()
            + b'"}'
        )
        extra = ((b"x-payment-response", settlement),)
        if path == b"/download":
            size = 1 << 20
            for part in query.split(b"&"):
                if part.startswith(b"size="):
                    size = int(part[5:])
            return Response(200, headers=extra, stream=size)
        return Response(200, WEATHER, extra)

    return handle


def payment_api(stats: Stats) -> Handler:
    counter = iter(range(1, 1 << 62))
    key = API_KEY.encode()

    def handle(method: bytes, target: bytes, headers: dict[bytes, bytes], body: bytes) -> Response:
        if method != b"POST" or target != b"/transaction/payment":
            return Response(404, b'{"errors":[{"code":"NotFound","message":"no such path"}]}')
        if headers.get(b"x-api-key") != key:
            return Response(401, b'{"errors":[{"code":"Unauthorized","message":"bad key"}]}')
        try:
            data = json.loads(body)
            to = data["paymentTo"]
            ok = (
                data["paymentFrom"] == PAYER_ACCOUNT
                and data["toType"] == "PaymentRequestCode"
                and isinstance(to, str)
                and isinstance(data["amount"], (int, float))
            )
        except (ValueError, KeyError, TypeError):
            ok = False
        if not ok:
            return Response(400, b'{"errors":[{"code":"InvalidRequest","message":"bad body"}]}')
        stats.codes.append(to)
        answer = (
            f'{{"value":{{"transactionCode":"QPLEAN{next(counter):012d}",'
            f'"status":"Completed","amount":{data["amount"]}}}}}'
        )
        return Response(200, answer.encode())

    return handle


def _head(response: Response, length: int) -> bytes:
    lines = [
        b"HTTP/1.1 %d %s" % (response.status, _REASONS.get(response.status, b"Other")),
        b"content-type: "
        + (b"application/octet-stream" if response.stream is not None else b"application/json"),
        b"content-length: %d" % length,
    ]
    lines.extend(k + b": " + v for k, v in response.headers)
    return b"\r\n".join(lines) + b"\r\n\r\n"


# --- raw asyncio HTTP/1.1 ----------------------------------------------------------------


class _Connection(asyncio.Protocol):
    def __init__(self, handler: Handler, stats: Stats | None) -> None:
        self.handler = handler
        self.stats = stats
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.streaming = False
        self.writable = asyncio.Event()
        self.writable.set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.stats is not None:
            self.stats.connections += 1

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.writable.set()

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if not self.streaming:
            self._process()

    def _process(self) -> None:
        buffer = self.buffer
        while self.transport is not None:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            lines = bytes(buffer[:end]).split(b"\r\n")
            method, target, _ = lines[0].split(b" ", 2)
            headers: dict[bytes, bytes] = {}
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                headers[name.strip().lower()] = value.strip()
            length = int(headers.get(b"content-length", b"0"))
            if len(buffer) < end + 4 + length:
                return
            body = bytes(buffer[end + 4 : end + 4 + length])
            del buffer[: end + 4 + length]
            if self.stats is not None:
                self.stats.requests += 1
                self.stats.paths[f"{method.decode()} {target.partition(b'?')[0].decode()}"] += 1
            response = self.handler(method, target, headers, body)
            if response.stream is not None:
                self.streaming = True
                asyncio.get_running_loop().create_task(self._stream(response))
                return
            self.transport.write(_head(response, len(response.body)) + response.body)
            if headers.get(b"connection", b"").lower() == b"close":
                self.transport.close()

    async def _stream(self, response: Response) -> None:
        size = response.stream or 0
        transport = self.transport
        if transport is None:
            return
        transport.write(_head(response, size))
        remaining = size
        while remaining > 0 and self.transport is not None:
            await self.writable.wait()
            piece = _ZEROS if remaining >= CHUNK else _ZEROS[:remaining]
            transport.write(piece)
            remaining -= len(piece)
        self.streaming = False
        if self.transport is not None and self.buffer:
            self._process()


async def serve_raw(handler: Handler, stats: Stats | None) -> asyncio.Server:
    loop = asyncio.get_running_loop()
    return await loop.create_server(
        lambda: _Connection(handler, stats), "127.0.0.1", 0, family=socket.AF_INET
    )


# --- the same handlers as plain ASGI under uvicorn -----------------------------------------


def asgi_app(handler: Handler, stats: Stats) -> Any:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        client = scope.get("client")
        if client is not None:
            stats.peers.add((str(client[0]), int(client[1])))
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        target = scope["raw_path"] + (
            b"?" + scope["query_string"] if scope["query_string"] else b""
        )
        headers = dict(scope["headers"])
        stats.requests += 1
        stats.paths[f"{scope['method']} {scope['path']}"] += 1
        response = handler(scope["method"].encode(), target, headers, body)
        streaming = response.stream is not None
        length = response.stream if streaming else len(response.body)
        kind = b"application/octet-stream" if streaming else b"application/json"
        await send(
            {
                "type": "http.response.start",
                "status": response.status,
                "headers": [
                    (b"content-type", kind),
                    (b"content-length", str(length).encode()),
                    *response.headers,
                ],
            }
        )
        if not streaming:
            await send({"type": "http.response.body", "body": response.body})
            return
        remaining = response.stream or 0
        while remaining > 0:
            piece = _ZEROS if remaining >= CHUNK else _ZEROS[:remaining]
            remaining -= len(piece)
            await send({"type": "http.response.body", "body": piece, "more_body": remaining > 0})

    return app


async def serve_asgi(app: Any) -> tuple[Any, asyncio.Task[None], int]:
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        lifespan="off",
        http="h11",
        timeout_keep_alive=65,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    for _ in range(500):
        if server.started:
            break
        await asyncio.sleep(0.01)
    return server, task, sock.getsockname()[1]


# --- the process ----------------------------------------------------------------------------


def _control(stats: Stats) -> Handler:
    def handle(method: bytes, target: bytes, headers: dict[bytes, bytes], body: bytes) -> Response:
        if target == b"/reset":
            stats.reset()
            return Response(200, b'{"ok":true}')
        return Response(200, json.dumps(stats.as_json()).encode())

    return handle


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=("merchant", "payment-api"))
    parser.add_argument("--impl", choices=("raw", "asgi"), default="raw")
    args = parser.parse_args()
    stats = Stats()
    handler = merchant(stats) if args.role == "merchant" else payment_api(stats)
    control = await serve_raw(_control(stats), None)
    control_port = control.sockets[0].getsockname()[1]
    uvicorn_server: Any = None
    task: asyncio.Task[None] | None = None
    if args.impl == "raw":
        server = await serve_raw(handler, stats)
        port = server.sockets[0].getsockname()[1]
    else:
        uvicorn_server, task, port = await serve_asgi(asgi_app(handler, stats))
    info = {
        "role": args.role,
        "impl": args.impl,
        "url": f"http://127.0.0.1:{port}",
        "control_url": f"http://127.0.0.1:{control_port}",
    }
    await serve_until_stdin_closes(info)
    if uvicorn_server is not None and task is not None:
        uvicorn_server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task


if __name__ == "__main__":
    asyncio.run(main())
