"""The x402 foundation's own paid MCP server on Solana, run in the foundation's SVM
environment (`sandbox/tests/svm_foundation.py`, which carries `mcp` 1.x for it), never in
the project's.

A FastMCP server on 127.0.0.1 speaking streamable HTTP at `/mcp`, whose tools are guarded by
the foundation's own payment wrapper (`x402.mcp.create_payment_wrapper`) on their
`x402ResourceServer` with `ExactSvmServerScheme`, verifying and settling through their
facilitator in process (`x402Facilitator`, `ExactSvmFacilitatorScheme`, a
`FacilitatorKeypairSigner`), all on the given RPC URL.

```
python tests/svm_foundation_mcp_server.py '{"network": ..., "rpc_url": ...,
    "fee_payer": "<base58>", "pay_to": ..., "tools": {"weather_eurc": {"asset": ...,
    "amount": "50000"}}}'
```

Each tool `name(city)` is paid `amount` atomic units of `asset` to `pay_to` (x402 v2
`exact`). It binds a free port itself and prints `{"url": ...}` on one line of stdout once
it serves, then serves until terminated.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import warnings
from typing import Any

warnings.simplefilter("ignore")  # their `solana` client warns that it is deprecated


def _resource_server(config: dict[str, Any]) -> Any:
    from solders.keypair import Keypair
    from x402 import x402Facilitator, x402ResourceServer
    from x402.mechanisms.svm import FacilitatorKeypairSigner
    from x402.mechanisms.svm.exact import ExactSvmFacilitatorScheme, ExactSvmServerScheme

    network = config["network"]
    facilitator = x402Facilitator()
    signer = FacilitatorKeypairSigner(
        Keypair.from_base58_string(config["fee_payer"]), rpc_url=config["rpc_url"]
    )
    facilitator.register([network], ExactSvmFacilitatorScheme(signer))
    server = x402ResourceServer(facilitator)
    server.register(network, ExactSvmServerScheme(rpc_url=config["rpc_url"]))
    server.initialize()
    return server


def _app(config: dict[str, Any]) -> Any:
    from mcp.server.fastmcp import FastMCP
    from x402 import ResourceConfig
    from x402.mcp import create_payment_wrapper
    from x402.schemas.payments import ResourceInfo

    resource_server = _resource_server(config)
    mcp = FastMCP("foundation-paid-solana-tools", host="127.0.0.1", log_level="WARNING")

    def add(name: str, tool: dict[str, Any]) -> None:
        # Built by their resource server, which adds the facilitator's `feePayer`.
        accepts = resource_server.build_payment_requirements(
            ResourceConfig(
                scheme="exact",
                network=config["network"],
                pay_to=config["pay_to"],
                price={"amount": str(tool["amount"]), "asset": tool["asset"]},
                max_timeout_seconds=60,
            )
        )
        resource = ResourceInfo(
            url=f"mcp://tool/{name}", description=f"Tool: {name}", mime_type="application/json"
        )
        paid = create_payment_wrapper(resource_server, accepts=accepts, resource=resource)

        @mcp.tool(name=name, description=f"The weather in a city (paid, {name})")
        @paid
        async def weather(city: str) -> dict[str, Any]:
            return {"city": city, "weather": "sunny"}

    for name, tool in config["tools"].items():
        add(name, tool)
    return mcp.streamable_http_app()


async def _serve(config: dict[str, Any]) -> None:
    import uvicorn

    app = _app(config)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            task.result()
            return
        await asyncio.sleep(0.02)
    print(json.dumps({"url": f"http://127.0.0.1:{port}/mcp"}), flush=True)
    await task


def main() -> None:
    try:
        asyncio.run(_serve(json.loads(sys.argv[1])))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
