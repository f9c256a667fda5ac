"""The x402 foundation's merchant with its `sign-in-with-x` extension, run in its own
environment (test helper).

Runs under the Python of the environment built from `tests/siwx_foundation_requirements.txt`
(`x402[evm,httpx,extensions]`: the extension verifies Sign-In with Ethereum messages with
`signinwithethereum`, which needs an older web3 than the project's), never under the
project's own: nothing here imports the client. `tests/siwx_foundation.py` starts it.

`serve`: a FastAPI app on 127.0.0.1 (it binds a free port itself) whose `GET /paid` is
guarded by the foundation's payment middleware (x402 v2 `exact`, `--price` atomic units of
`--asset` to `--pay-to` on `--network`, verified and settled through the facilitator at
`--facilitator`) and offers the foundation's sign-in (`declare_siwx_extension`, its
resource-server extension with an `InMemorySIWxStorage` and the app's own origin): a wallet
that paid `/paid` is let in by signing in. `GET /events` (free) lists what the extension
reported. It prints `{"url": ...}` on one line of stdout once it serves.

`format`: reads a JSON list of cases (`info` with `chainId` and `type`, a `key`, the `url`
that answered) on stdin and prints, for each, the foundation's EIP-4361 message
(`format_siwe_message`) and `SIGN-IN-WITH-X` header (`create_siwx_payload` signed by the key,
`encode_siwx_header`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
from typing import Any

import uvicorn
from eth_account import Account
from fastapi import FastAPI
from starlette.middleware.base import BaseHTTPMiddleware
from x402 import AssetAmount, x402ResourceServer
from x402.extensions.sign_in_with_x import (
    CreateSIWxHookOptions,
    DeclareSIWxOptions,
    InMemorySIWxStorage,
    create_siwx_payload,
    create_siwx_resource_server_extension,
    declare_siwx_extension,
    encode_siwx_header,
    format_siwe_message,
)
from x402.http import FacilitatorConfig, HTTPFacilitatorClient, x402HTTPResourceServer
from x402.http.middleware.fastapi import payment_middleware
from x402.http.types import PaymentOption, RouteConfig
from x402.mechanisms.evm.exact import register_exact_evm_server


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["serve", "format"])
    for name in ("--facilitator", "--network", "--asset", "--pay-to", "--price"):
        parser.add_argument(name)
    parser.add_argument("--token-name")
    parser.add_argument("--token-version")
    return parser.parse_args()


def _app(args: argparse.Namespace, origin: str) -> FastAPI:
    events: list[dict[str, Any]] = []
    server = x402ResourceServer(HTTPFacilitatorClient(FacilitatorConfig(url=args.facilitator)))
    register_exact_evm_server(server, networks=args.network)
    server.register_extension(
        create_siwx_resource_server_extension(
            CreateSIWxHookOptions(
                storage=InMemorySIWxStorage(), origin=origin, on_event=events.append
            )
        )
    )
    price = AssetAmount(
        amount=str(args.price),
        asset=args.asset,
        extra={"name": args.token_name, "version": args.token_version},
    )
    routes = {
        "GET /paid": RouteConfig(
            accepts=PaymentOption(
                scheme="exact",
                pay_to=args.pay_to,
                price=price,
                network=args.network,
                max_timeout_seconds=300,
            ),
            description="a paid resource that lets a wallet that paid sign in",
            mime_type="application/json",
            extensions=declare_siwx_extension(
                DeclareSIWxOptions(statement="Sign in to the paid resource", expiration_seconds=300)
            ),
        )
    }
    # Blocking: the package fetches the facilitator's /supported here (the test process
    # serves it from its event loop while it waits for this server's announcement).
    x402HTTPResourceServer(server, routes).initialize()
    app = FastAPI()

    @app.get("/paid")
    async def paid() -> dict[str, Any]:
        return {"paid": True}

    @app.get("/events")
    async def listed() -> list[dict[str, Any]]:
        return [{k: v for k, v in event.items() if isinstance(v, str)} for event in events]

    dispatch = payment_middleware(routes, server, sync_facilitator_on_start=False)
    app.add_middleware(BaseHTTPMiddleware, dispatch=dispatch)
    return app


async def _serve(args: argparse.Namespace) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    origin = f"http://127.0.0.1:{sock.getsockname()[1]}"
    app = _app(args, origin)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            task.result()
            return
        await asyncio.sleep(0.02)
    print(json.dumps({"url": origin}), flush=True)
    await task


async def _format(cases: list[dict[str, Any]]) -> list[dict[str, str]]:
    results = []
    for case in cases:
        account = Account.from_key(case["key"])
        message = format_siwe_message(case["info"], account.address)
        payload = await create_siwx_payload(case["info"], account, case["url"])
        results.append({"message": message, "header": encode_siwx_header(payload)})
    return results


def main() -> None:
    args = _arguments()
    if args.mode == "format":
        print(json.dumps(asyncio.run(_format(json.load(sys.stdin)))), flush=True)
        return
    try:
        asyncio.run(_serve(args))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
