"""The x402 foundation's paid MCP server, run in its own environment (test helper).

Runs under the Python of the environment built from `tests/mcp_foundation_requirements.txt`
(`mcp` 1.x and the `x402` package), never under the project's own: nothing here imports
the client. `tests/mcp_foundation.py` starts it as a subprocess.

A FastMCP server on 127.0.0.1 speaking streamable HTTP at `/mcp`, whose tools are guarded by
the foundation's own payment wrapper (`x402.mcp.create_payment_wrapper`), verifying and
settling through the facilitator at `--facilitator` (the foundation's facilitator, served
by the test process):

- `weather(city)`: paid, `--price` atomic units of `--asset` to `--pay-to` (x402 v2 `exact`);
- `broken(city)`: paid the same, and its handler raises (nothing is settled);
- `echo(text)`: free.

It binds a free port itself and prints `{"url": ...}` on one line of stdout once it serves.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
from typing import Any

import uvicorn
from mcp.server.fastmcp import FastMCP
from x402 import x402ResourceServer
from x402.http import FacilitatorConfig, HTTPFacilitatorClient
from x402.mcp import create_payment_wrapper
from x402.mechanisms.evm.exact import register_exact_evm_server
from x402.schemas import PaymentRequirements
from x402.schemas.payments import ResourceInfo


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    for name in ("--facilitator", "--network", "--asset", "--pay-to", "--price"):
        parser.add_argument(name, required=True)
    parser.add_argument("--token-name", required=True)
    parser.add_argument("--token-version", required=True)
    return parser.parse_args()


def _resource_server(args: argparse.Namespace) -> x402ResourceServer:
    facilitator = HTTPFacilitatorClient(FacilitatorConfig(url=args.facilitator))
    server = x402ResourceServer(facilitator)
    # One registration, on the concrete network (it would hide a wildcard one).
    register_exact_evm_server(server, networks=args.network)
    server.initialize()
    return server


def _app(args: argparse.Namespace) -> Any:
    resource_server = _resource_server(args)
    accepts = [
        PaymentRequirements(
            scheme="exact",
            network=args.network,
            asset=args.asset,
            amount=str(args.price),
            pay_to=args.pay_to,
            max_timeout_seconds=300,
            extra={"name": args.token_name, "version": args.token_version},
        )
    ]
    mcp = FastMCP("foundation-paid-tools", host="127.0.0.1", log_level="WARNING")

    def paid(name: str) -> Any:
        resource = ResourceInfo(
            url=f"mcp://tool/{name}", description=f"Tool: {name}", mime_type="application/json"
        )
        return create_payment_wrapper(resource_server, accepts=accepts, resource=resource)

    @mcp.tool(name="weather", description="The weather in a city (paid)")
    @paid("weather")
    async def weather(city: str) -> dict[str, Any]:
        return {"city": city, "weather": "sunny"}

    @mcp.tool(name="broken", description="A paid tool whose handler fails")
    @paid("broken")
    async def broken(city: str) -> dict[str, Any]:
        raise RuntimeError(f"no weather station in {city}")

    @mcp.tool(name="echo", description="Echo the text (free)")
    async def echo(text: str) -> str:
        return text

    return mcp.streamable_http_app()


async def _serve(args: argparse.Namespace) -> None:
    app = _app(args)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            task.result()
            return
        await asyncio.sleep(0.02)
    print(json.dumps({"url": f"http://127.0.0.1:{port}/mcp"}), flush=True)
    await task


def main() -> None:
    args = _arguments()
    try:
        asyncio.run(_serve(args))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
