"""The sandbox's Solana chain and SVM facilitator against the x402 foundation's own
Python SVM code (`x402[svm]`, in an environment of its own: `svm_foundation.py`).

Their client builds payments against our JSON-RPC server and our facilitator settles
them; their facilitator verifies and settles payments of our spec-written payer against
our JSON-RPC server; their client's payment buys from our standard merchant over HTTP.
Both mints, SPL Token and Token-2022; balances exact on the VM."""

# The imports of solders follow the check that it is installed.
# ruff: noqa: E402

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tests.needs import require

require("solders", "pip install 'x402-eur-sandbox[svm]'")

from svm_foundation import foundation_python, run_tool
from svm_payer import pay

from x402_eur_sandbox._solana import keypair_from_secret
from x402_eur_sandbox._standard import StandardMerchant
from x402_eur_sandbox._standard_svm import SolanaRoutes

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
MINTS = [("/solana/eurc", "sEURC"), ("/solana/usdc", "sUSDC")]


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def python() -> Path:
    return foundation_python()


@pytest.fixture(scope="module")
async def routes(anyio_backend: str) -> AsyncIterator[SolanaRoutes]:
    started = SolanaRoutes()
    await started.start()
    try:
        yield started
    finally:
        await started.stop()


@pytest.mark.parametrize(("path", "symbol"), MINTS)
async def test_the_foundations_client_pays_our_facilitator(
    routes: SolanaRoutes, python: Path, path: str, symbol: str
) -> None:
    assert routes.facilitator is not None
    entry = routes.accepts(path)[0]
    request = {
        "secret_key": routes.payer_secret_key,
        "rpc_url": routes.rpc_url,
        "requirements": entry,
    }
    inner = await run_tool(python, "pay", request)
    payment = {"x402Version": 2, "accepted": entry, "payload": inner}
    before = routes.token_balance(routes.pay_to, symbol)
    settled = await routes.facilitator.settle(payment, entry)
    assert settled["success"] is True, settled
    assert routes.token_balance(routes.pay_to, symbol) == before + int(entry["amount"])


@pytest.mark.parametrize(("path", "symbol"), MINTS)
async def test_the_foundations_facilitator_settles_on_our_chain(
    routes: SolanaRoutes, python: Path, path: str, symbol: str
) -> None:
    assert routes.node is not None
    entry = routes.accepts(path)[0]
    payment = await pay(entry, keypair_from_secret(routes.payer_secret_key), routes.rpc_url)
    before = routes.token_balance(routes.pay_to, symbol)
    request = {
        "fee_payer": str(routes._fee_payer),
        "rpc_url": routes.rpc_url,
        "payment": payment,
        "requirements": entry,
    }
    answer = await run_tool(python, "facilitate", request)
    assert answer["verify"] == {"isValid": True, "payer": routes.payer_address}
    settled = answer["settle"]
    assert settled["success"] is True and settled["network"] == entry["network"]
    assert routes.node.landed(settled["transaction"]) is not None
    assert routes.token_balance(routes.pay_to, symbol) == before + int(entry["amount"])


@pytest.fixture(scope="module")
async def merchant(anyio_backend: str) -> AsyncIterator[StandardMerchant]:
    async with StandardMerchant(svm=True) as started:
        yield started


@pytest.mark.parametrize(("path", "symbol"), MINTS)
async def test_the_foundations_client_pays_our_merchant_over_http(
    merchant: StandardMerchant, python: Path, path: str, symbol: str
) -> None:
    """Their client's payment, sent as their HTTP client sends it (`PAYMENT-SIGNATURE`, a
    v2 `PaymentPayload` in base64), buys the resource from our standard merchant, once."""
    routes = merchant.solana
    assert routes is not None
    async with httpx.AsyncClient(timeout=60, trust_env=False) as http:
        challenge = await http.get(merchant.url + path)
        assert challenge.status_code == 402
        required = json.loads(base64.b64decode(challenge.headers["payment-required"]))
        (entry,) = required["accepts"]
        request = {
            "secret_key": routes.payer_secret_key,
            "rpc_url": routes.rpc_url,
            "requirements": entry,
        }
        inner = await run_tool(python, "pay", request)
        payment = {
            "x402Version": 2,
            "resource": required["resource"],
            "accepted": entry,
            "payload": inner,
        }
        header = base64.b64encode(json.dumps(payment).encode()).decode()
        before = routes.token_balance(routes.pay_to, symbol)
        paid = await http.get(merchant.url + path, headers={"PAYMENT-SIGNATURE": header})
        again = await http.get(merchant.url + path, headers={"PAYMENT-SIGNATURE": header})
    assert paid.status_code == 200, paid.text
    assert again.status_code == 402  # the same payment is not served twice
    assert routes.token_balance(routes.pay_to, symbol) == before + int(entry["amount"])
