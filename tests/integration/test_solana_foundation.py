"""Our client pays the x402 foundation's own Solana merchant: their resource server and
their facilitator (`x402[svm]`, in an environment of its own, `sandbox/tests/svm_foundation.py`),
pointed at the sandbox's Solana VM on 127.0.0.1, and their paid MCP server (`x402.mcp`,
`tests/svm_foundation_mcp_server.py`) settling through the same facilitator. Both token
programs; exactly once; exact balances on the VM. (Their client paying our sandbox merchant is the sandbox's own test,
`sandbox/tests/test_svm_foundation.py`.)"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import requests
from anyio.abc import Process
from solders.keypair import Keypair

from tests.conftest import register_secrets
from tests.mcp_foundation import foundation_svm_mcp_server
from x402_client import (
    Asset,
    PaidToolResult,
    PaymentOptions,
    PaymentReceipt,
    payments,
    with_eur_payment,
)
from x402_eur_sandbox._standard_svm import SolanaRoutes

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
MERCHANT = ROOT / "tests" / "svm_foundation_merchant.py"
PRICE = 50_000
FEE = 2 * 5000 + 1


def _foundation_python() -> Path:
    spec = importlib.util.spec_from_file_location(
        "svm_foundation", ROOT / "sandbox" / "tests" / "svm_foundation.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("svm_foundation", module)
    spec.loader.exec_module(module)
    python: Path = module.foundation_python()
    return python


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def routes(anyio_backend: str) -> AsyncIterator[SolanaRoutes]:
    started = SolanaRoutes()
    await started.start()
    register_secrets(started.payer_secret_key)
    try:
        yield started
    finally:
        await started.stop()


class Merchant:
    def __init__(self, process: Process, url: str, pay_to: str, fee_payer: str) -> None:
        self.process, self.url, self.pay_to, self.fee_payer = process, url, pay_to, fee_payer


class ToolServer:
    def __init__(self, url: str, pay_to: str, fee_payer: str) -> None:
        self.url, self.pay_to, self.fee_payer = url, pay_to, fee_payer


@pytest.fixture(scope="module")
async def merchant(routes: SolanaRoutes) -> AsyncIterator[Merchant]:
    python = _foundation_python()
    assert routes.node is not None
    fee_payer, pay_to = Keypair(), str(Keypair().pubkey())
    routes.node.airdrop(str(fee_payer.pubkey()), 10**9)
    for mint in routes.mints.values():
        routes.node.create_ata(pay_to, mint)
    config = {
        "network": routes.network,
        "rpc_url": routes.rpc_url,
        "fee_payer": str(fee_payer),
        "pay_to": pay_to,
        "routes": {
            f"/paid/{symbol}": {"asset": mint, "amount": str(PRICE)}
            for symbol, mint in routes.mints.items()
        },
    }
    environment = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    process = await anyio.open_process(
        [str(python), str(MERCHANT), json.dumps(config)], env=environment
    )
    try:
        assert process.stdout is not None and process.stdin is not None
        line = b""
        with anyio.fail_after(120):
            while not line.endswith(b"\n"):
                chunk = await process.stdout.receive(1)
                line += chunk
        port = int(line.decode().split()[1])
        yield Merchant(process, f"http://127.0.0.1:{port}", pay_to, str(fee_payer.pubkey()))
    finally:
        if process.stdin is not None:
            await process.stdin.aclose()
        with anyio.move_on_after(10):
            await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()
        await process.aclose()


def _options(routes: SolanaRoutes) -> PaymentOptions:
    return PaymentOptions(
        svm=routes.svm_config(), assets=[Asset(**config) for config in routes.asset_configs()]
    )


def _balances(
    routes: SolanaRoutes, merchant: Merchant | ToolServer, symbol: str
) -> tuple[int, int, int]:
    """The payer's and the merchant's `symbol` and the fee payer's lamports, on the VM."""
    assert routes.node is not None
    return (
        routes.token_balance(routes.payer_address, symbol),
        routes.token_balance(merchant.pay_to, symbol),
        routes.node.balance(merchant.fee_payer),
    )


def _fetch(kind: str, url: str, options: PaymentOptions) -> tuple[int, Any, Any]:
    """One paid GET through `kind`: (status, JSON body, receipt). Blocking: run in a thread
    (the RPC is served by the test's event loop)."""
    if kind == "httpx-sync":
        with with_eur_payment(httpx.Client(timeout=120), options) as client:
            response = client.get(url)
            return response.status_code, response.json(), PaymentReceipt.of(response)
    if kind == "requests":
        with with_eur_payment(requests.Session(), options) as session:
            answer = session.get(url, timeout=120)
            return answer.status_code, answer.json(), PaymentReceipt.of(answer)

    async def fetch() -> tuple[int, Any, Any]:
        async with with_eur_payment(httpx.AsyncClient(timeout=120), options) as client:
            response = await client.get(url)
            return response.status_code, response.json(), PaymentReceipt.of(response)

    return anyio.run(fetch)


@pytest.mark.parametrize("kind", ["httpx-async", "httpx-sync", "requests"])
@pytest.mark.parametrize("symbol", ["sEURC", "sUSDC"])  # SPL Token, Token-2022
async def test_our_client_pays_the_foundations_merchant_exactly_once(
    routes: SolanaRoutes, merchant: Merchant, symbol: str, kind: str
) -> None:
    before = _balances(routes, merchant, symbol)
    status, body, receipt = await anyio.to_thread.run_sync(
        _fetch, kind, f"{merchant.url}/paid/{symbol}", _options(routes)
    )
    assert status == 200, body
    assert body == {"paid": True}
    assert receipt is not None
    assert (receipt.rail, receipt.network, receipt.amount) == (
        "svm",
        routes.network,
        Decimal("0.05"),
    )
    assert receipt.tx_hash  # their facilitator's settlement names the transaction
    assert routes.node is not None and routes.node.landed(receipt.tx_hash) is not None
    after = _balances(routes, merchant, symbol)
    assert (after[0] - before[0], after[1] - before[1], after[2] - before[2]) == (
        -PRICE,
        PRICE,
        -FEE,
    )


@pytest.fixture(scope="module")
async def tool_server(routes: SolanaRoutes) -> AsyncIterator[ToolServer]:
    """The foundation's paid MCP server selling `weather_<symbol>` for each mint, with a fee
    payer and a merchant of its own (the HTTP merchant's balances stay apart)."""
    python = _foundation_python()
    assert routes.node is not None
    fee_payer, pay_to = Keypair(), str(Keypair().pubkey())
    routes.node.airdrop(str(fee_payer.pubkey()), 10**9)
    for mint in routes.mints.values():
        routes.node.create_ata(pay_to, mint)
    config = {
        "network": routes.network,
        "rpc_url": routes.rpc_url,
        "fee_payer": str(fee_payer),
        "pay_to": pay_to,
        "tools": {
            f"weather_{symbol}": {"asset": mint, "amount": str(PRICE)}
            for symbol, mint in routes.mints.items()
        },
    }
    async with foundation_svm_mcp_server(python, config) as url:
        yield ToolServer(url, pay_to, str(fee_payer.pubkey()))


@pytest.mark.parametrize("symbol", ["sEURC", "sUSDC"])  # SPL Token, Token-2022
async def test_an_mcp_session_pays_the_foundations_paid_tool_exactly_once(
    routes: SolanaRoutes, tool_server: ToolServer, symbol: str
) -> None:
    from mcp import Client

    assert routes.node is not None
    before = _balances(routes, tool_server, symbol)
    paying = _options(routes)
    async with Client(tool_server.url) as client:
        with_eur_payment(client, paying)
        result = await client.call_tool(f"weather_{symbol}", {"city": "Paris"})
    assert isinstance(result, PaidToolResult) and not result.is_error, result
    [text] = result.content
    assert text.type == "text" and json.loads(text.text) == {"city": "Paris", "weather": "sunny"}
    receipt = result.x402_payment
    assert receipt is not None
    assert (receipt.rail, receipt.network, receipt.amount, receipt.resource) == (
        "svm",
        routes.network,
        Decimal("0.05"),
        f"mcp://tool/weather_{symbol}",
    )
    assert receipt.settlement is not None and receipt.settlement["success"] is True
    assert result.meta is not None and receipt.tx_hash
    assert receipt.tx_hash == result.meta["x402/payment-response"]["transaction"]
    assert routes.node.landed(receipt.tx_hash) is not None
    [entry] = payments(paying).ledger.entries()
    assert entry.outcome == "paid" and entry.intent.resource == f"mcp://tool/weather_{symbol}"
    after = _balances(routes, tool_server, symbol)
    assert (after[0] - before[0], after[1] - before[1], after[2] - before[2]) == (
        -PRICE,
        PRICE,
        -FEE,
    )
