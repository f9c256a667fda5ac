"""Our client pays the x402 foundation's own Solana merchant: their resource server and
their facilitator (`x402[svm]`, in an environment of its own, `sandbox/tests/svm_foundation.py`),
pointed at the sandbox's Solana VM on 127.0.0.1. Both token programs; exactly once; exact
balances on the VM. (Their client paying our sandbox merchant is the sandbox's own test,
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
from anyio.abc import Process
from solders.keypair import Keypair

from tests.conftest import register_secrets
from x402_client import Asset, PaymentOptions, PaymentReceipt, with_eur_payment
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


def _balances(routes: SolanaRoutes, merchant: Merchant, symbol: str) -> tuple[int, int, int]:
    assert routes.node is not None
    return (
        routes.token_balance(routes.payer_address, symbol),
        routes.token_balance(merchant.pay_to, symbol),
        routes.node.balance(merchant.fee_payer),
    )


@pytest.mark.parametrize("symbol", ["sEURC", "sUSDC"])  # SPL Token, Token-2022
async def test_our_client_pays_the_foundations_merchant_exactly_once(
    routes: SolanaRoutes, merchant: Merchant, symbol: str
) -> None:
    before = _balances(routes, merchant, symbol)
    async with with_eur_payment(httpx.AsyncClient(timeout=120), _options(routes)) as client:
        response = await client.get(f"{merchant.url}/paid/{symbol}")
    assert response.status_code == 200, response.text
    assert response.json() == {"paid": True}
    receipt: Any = PaymentReceipt.of(response)
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
