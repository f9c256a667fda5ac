"""The sandbox, in its own process, instrumented for the benchmarks.

Run by `run.py` as `python benchmarks/_server.py [--evm] [--chain-a]`. It starts a
`Sandbox` (confirmation delay 0) under asyncio in this process's main thread, so the
servers never share a GIL with the client being measured, and prints one JSON line on
stdout: the URLs, the payer's credentials and the URL of a small control app. It stops
when its stdin closes.

Instrumentation, all server side so it counts the same thing for the SDK and for the
hand-written baseline:

- every served app (merchant, payment API, facilitator) is wrapped in `_Counter`, an
  ASGI middleware that records the client's ephemeral port of each request. One TCP
  connection is one (host, port) pair for its lifetime, so the number of distinct pairs
  seen is the number of connections that carried at least one request: the connections
  the client opened. Only the benchmark process talks to the merchant and the payment
  API (the merchant's own calls go to the facilitator), so those two counts are the
  client's.
- the merchant counter also stamps the arrival of each request carrying `X-PAYMENT`
  (for the bridge figure), and the payment API counter counts `GET /transaction` polls.
- with chain A, a watcher stamps when each transaction's `blockchainTxId` first appears
  in the bank (polled every 5 ms).

Control app: `GET /stats` returns the counters and how many transactions the bank holds
(never reset: the money that moved), `POST /reset` clears the counters.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import time
from collections import Counter
from typing import Any

import httpx
from _ready import serve_until_stdin_closes
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from x402_eur_sandbox import Sandbox, ServedApp


class _Counter:
    """ASGI middleware counting requests, paths and distinct client connections."""

    def __init__(self, app: Any, name: str) -> None:
        self.app = app
        self.name = name
        self.reset()

    def reset(self) -> None:
        self.connections: set[tuple[str, int]] = set()
        self.requests = 0
        self.paths: Counter[str] = Counter()
        self.proof_arrivals: list[float] = []
        self.payments: list[float] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            client = scope.get("client")
            if client is not None:
                self.connections.add((str(client[0]), int(client[1])))
            self.requests += 1
            self.paths[f"{scope['method']} {scope['path']}"] += 1
            if scope["path"] == "/transaction/payment":
                self.payments.append(time.time())
            for key, _ in scope.get("headers", ()):
                if key == b"x-payment":
                    self.proof_arrivals.append(time.time())
                    break
        await self.app(scope, receive, send)

    def stats(self) -> dict[str, Any]:
        return {
            "connections": len(self.connections),
            "requests": self.requests,
            "paths": dict(self.paths),
            "proof_arrivals": list(self.proof_arrivals),
            "payments": list(self.payments),
        }


class _TxWatcher:
    """Stamps when a bank transaction's `blockchainTxId` first becomes visible."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox
        self.appeared: dict[str, float] = {}

    async def run(self) -> None:
        bank = self.sandbox.bank
        while True:
            now = time.time()
            with bank.lock:
                for code, tx in list(bank.transactions.items()):
                    if tx.blockchain_tx_id is not None and code not in self.appeared:
                        self.appeared[code] = now
            await asyncio.sleep(0.005)


class _RpcCounter:
    """A JSON-RPC pass-through in front of one chain's node, counting calls by method.

    The client is given this proxy's URL instead of the node's, so every call it makes
    (batch entries counted one by one) is seen here, whatever library makes it.
    """

    def __init__(self, target: str) -> None:
        self.target = target
        self.methods: Counter[str] = Counter()
        self.http_requests = 0
        self._http: httpx.AsyncClient | None = None

    def reset(self) -> None:
        self.methods.clear()
        self.http_requests = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        body = await request.body()
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        calls = parsed if isinstance(parsed, list) else [parsed]
        for call in calls:
            if isinstance(call, dict):
                self.methods[str(call.get("method"))] += 1
        self.http_requests += 1
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=60)
        answer = await self._http.post(
            self.target, content=body, headers={"Content-Type": "application/json"}
        )
        response = Response(answer.content, answer.status_code, media_type="application/json")
        await response(scope, receive, send)

    def stats(self) -> dict[str, Any]:
        return {
            "calls": sum(self.methods.values()),
            "http_requests": self.http_requests,
            "methods": dict(self.methods),
        }


def _instrument(served: ServedApp, name: str) -> _Counter:
    counter = _Counter(served.app, name)
    served.app = counter
    return counter


def _options_json(sandbox: Sandbox, rpc_proxies: dict[int, str]) -> dict[str, Any]:
    data: dict[str, Any] = {
        "api_key": sandbox.payer.api_key,
        "from_account": sandbox.payer.code,
        "api_url": sandbox.payment_api_url,
    }
    if sandbox.evm is not None:
        evm = sandbox.evm.evm_config()
        data["evm"] = {
            "private_key": evm["private_key"],
            "rpc_urls": {
                str(k): [rpc_proxies[k]] if k in rpc_proxies else [v]
                for k, v in evm["rpc_urls"].items()
            },
        }
    return data


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--evm", action="store_true")
    parser.add_argument("--chain-a", action="store_true")
    parser.add_argument("--bridge-delay", type=float, default=0.5)
    parser.add_argument("--payer-balance", default="1000000.00")
    args = parser.parse_args()

    kwargs: dict[str, Any] = {"payer_balance": args.payer_balance, "confirmation_delay": 0.0}
    if args.evm:
        kwargs["evm"] = True
    if args.chain_a:
        kwargs["chain_a"] = True
        kwargs["bridge_delay"] = args.bridge_delay
    sandbox = Sandbox(**kwargs)
    counters = {
        "merchant": _instrument(sandbox._merchant, "merchant"),
        "payment_api": _instrument(sandbox._payment_api, "payment_api"),
        "facilitator": _instrument(sandbox._mcp, "facilitator"),
    }
    watcher = _TxWatcher(sandbox)

    rpc_counters: dict[int, _RpcCounter] = {}

    async def stats(request: Request) -> JSONResponse:
        body: dict[str, Any] = {name: c.stats() for name, c in counters.items()}
        body["blockchain_tx_appeared"] = dict(watcher.appeared)
        body["rpc"] = {str(chain): c.stats() for chain, c in rpc_counters.items()}
        with sandbox.bank.lock:
            body["bank_transactions"] = len(sandbox.bank.transactions)
        return JSONResponse(body)

    async def reset(request: Request) -> JSONResponse:
        for counter in counters.values():
            counter.reset()
        for rpc in rpc_counters.values():
            rpc.reset()
        watcher.appeared.clear()
        return JSONResponse({"ok": True})

    control = ServedApp(
        Starlette(routes=[Route("/stats", stats), Route("/reset", reset, methods=["POST"])]),
        "bench-control",
    )
    async with sandbox:
        await control.start()
        proxies: list[ServedApp] = []
        rpc_proxies: dict[int, str] = {}
        if sandbox.evm is not None:
            for chain, url in sandbox.evm.evm_config()["rpc_urls"].items():
                rpc_counters[chain] = _RpcCounter(url)
                proxy = await ServedApp(rpc_counters[chain], f"rpc-{chain}").start()
                proxies.append(proxy)
                rpc_proxies[chain] = proxy.url
        if sandbox.chain_a is not None:
            # The bridge figure pays `/report` through the chain-A offer(s) only.
            others = tuple(o.name for o in sandbox.offers if o.name != "euro")
            if others:
                old = sandbox.prices["/report"]
                sandbox.prices["/report"] = dataclasses.replace(old, rails=others)
        watch_task = asyncio.create_task(watcher.run()) if sandbox.chain_a is not None else None
        info = {
            "merchant_url": sandbox.merchant_url,
            "payment_api_url": sandbox.payment_api_url,
            "mcp_url": sandbox.mcp_url,
            "control_url": control.url,
            "options": _options_json(sandbox, rpc_proxies),
            "evm": sandbox.evm is not None,
            "chain_a": sandbox.chain_a is not None,
            "offers": [getattr(o, "name", type(o).__name__) for o in sandbox.offers],
            "prices": sorted(sandbox.prices),
        }
        await serve_until_stdin_closes(info)
        if watch_task is not None:
            watch_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch_task
        for proxy in proxies:
            await proxy.stop()
        await control.stop()


if __name__ == "__main__":
    asyncio.run(main())
