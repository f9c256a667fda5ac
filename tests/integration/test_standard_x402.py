"""Our client pays the standard x402 world: the x402 foundation's own v2 merchant (its
resource server and payment middleware) and a v1 merchant written from the foundation's v1
spec, both settling EIP-3009 transfers through the foundation's facilitator on anvil.

The yardstick is code nobody here wrote (`tests/x402_foundation.py` runs it); the token
balances on the chain are the proof.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import anyio
import httpx
import pytest

from tests.conftest import Recorder, scripted_402
from tests.x402_foundation import FoundationStack, foundation_stack
from x402_client import (
    AmountLimitExceeded,
    Asset,
    Budget,
    BudgetExceeded,
    EvmOptions,
    InvalidChallenge,
    NoSatisfiableOption,
    PaymentOptions,
    with_eur_payment,
)
from x402_eur_sandbox import ServedApp

pytestmark = pytest.mark.anyio

#: The stack's price: 10,000 atomic units of a six-decimal euro token = 0.01 EUR.
PRICE = Decimal("0.01")


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def stack(anyio_backend: str) -> AsyncIterator[FoundationStack]:
    async with foundation_stack() as started:
        yield started


@pytest.fixture(scope="module")
async def rpc_recorder(anyio_backend: str) -> AsyncIterator[tuple[str, Recorder]]:
    """An RPC endpoint that records every call: the client must make none."""
    recorder = Recorder()
    served = await ServedApp(recorder, "rpc-recorder").start()
    yield served.url, recorder
    await served.stop()


def euro_token(stack: FoundationStack) -> Asset:
    return Asset(chain_id=stack.chain_id, address=stack.token, symbol="EURC", currency="EUR")


def options(stack: FoundationStack, rpc_url: str | None = None, **overrides: Any) -> PaymentOptions:
    rpc = {stack.chain_id: rpc_url} if rpc_url else {}
    values: dict[str, Any] = {
        "evm": EvmOptions(private_key=stack.payer_key, rpc_urls=rpc),
        "assets": [euro_token(stack)],
    }
    values.update(overrides)
    return PaymentOptions(**values)


async def test_pays_the_foundations_v2_merchant_with_no_rpc_call(stack, rpc_recorder):
    rpc_url, recorder = rpc_recorder
    payer_before = await stack.balance(stack.payer_address)
    merchant_before = await stack.balance(stack.merchant_address)
    async with with_eur_payment(httpx.AsyncClient(timeout=30), options(stack, rpc_url)) as client:
        response = await client.get(stack.paid_url)
    assert response.status_code == 200, response.text
    receipt = response.extensions["x402_payment"]
    assert (receipt.rail, receipt.network) == ("eip3009", stack.network)
    assert receipt.amount == PRICE and receipt.currency == "EUR"
    assert receipt.tx_hash and receipt.tx_hash.startswith("0x")
    assert await stack.balance(stack.payer_address) == payer_before - stack.price_atomic
    assert await stack.balance(stack.merchant_address) == merchant_before + stack.price_atomic
    assert recorder.requests == []  # no RPC call by the client
    assert await stack.native_balance(stack.payer_address) == 0  # the facilitator paid gas


async def test_pays_a_v1_merchant_with_no_rpc_call(stack, rpc_recorder):
    rpc_url, recorder = rpc_recorder
    payer_before = await stack.balance(stack.payer_address)
    merchant_before = await stack.balance(stack.merchant_address)
    async with with_eur_payment(httpx.AsyncClient(timeout=30), options(stack, rpc_url)) as client:
        response = await client.get(stack.v1_paid_url)
    assert response.status_code == 200, response.text
    assert response.extensions["x402_payment"].network == stack.v1_network
    assert await stack.balance(stack.payer_address) == payer_before - stack.price_atomic
    assert await stack.balance(stack.merchant_address) == merchant_before + stack.price_atomic
    assert recorder.requests == []


async def test_cap_and_budget_count_eurc_in_euros(stack):
    payer_before = await stack.balance(stack.payer_address)
    capped = options(stack, max_amount_per_payment="0.005")
    async with with_eur_payment(httpx.AsyncClient(timeout=30), capped) as client:
        with pytest.raises(AmountLimitExceeded):
            await client.get(stack.paid_url)
    budgeted = options(stack, budgets=[Budget("0.015")])
    async with with_eur_payment(httpx.AsyncClient(timeout=30), budgeted) as client:
        assert (await client.get(stack.paid_url)).status_code == 200
        with pytest.raises(BudgetExceeded):
            await client.get(stack.paid_url)
    assert await stack.balance(stack.payer_address) == payer_before - stack.price_atomic


async def test_an_unknown_asset_is_skipped_with_a_reason(stack):
    payer_before = await stack.balance(stack.payer_address)
    undeclared = options(stack, assets=[])
    async with with_eur_payment(httpx.AsyncClient(timeout=30), undeclared) as client:
        with pytest.raises(NoSatisfiableOption, match="asset") as caught:
            await client.get(stack.paid_url)
    assert caught.value.money_moved is False
    assert await stack.balance(stack.payer_address) == payer_before


async def test_ten_concurrent_payments_from_one_key_all_settle(stack):
    payer_before = await stack.balance(stack.payer_address)
    statuses: list[int] = []
    async with with_eur_payment(httpx.AsyncClient(timeout=60), options(stack)) as client:

        async def one() -> None:
            statuses.append((await client.get(stack.paid_url)).status_code)

        async with anyio.create_task_group() as group:
            for _ in range(10):
                group.start_soon(one)
    assert statuses == [200] * 10
    assert await stack.balance(stack.payer_address) == payer_before - 10 * stack.price_atomic


def _header(value: Any) -> str:
    raw = value if isinstance(value, bytes) else json.dumps(value).encode()
    return base64.b64encode(raw).decode()


@pytest.mark.parametrize(
    "header",
    [
        "!!! not base64 !!!",
        _header(b"not json"),
        _header([1, 2]),
        _header({"x402Version": 3, "accepts": [{}]}),
        _header({"x402Version": 2, "accepts": []}),
        _header({"x402Version": 2}),
    ],
)
async def test_malformed_payment_required_headers_are_typed_and_sign_nothing(stack, serve, header):
    url = await serve(scripted_402(b"{}", headers={"payment-required": header}))
    async with with_eur_payment(httpx.AsyncClient(), options(stack)) as client:
        with pytest.raises(InvalidChallenge) as caught:
            await client.get(url)
    assert caught.value.money_moved is False
    assert caught.value.response is not None and caught.value.response.status_code == 402


async def test_a_permit2_entry_is_skipped_with_a_clear_reason(stack, serve):
    entry = {
        "scheme": "exact",
        "network": stack.network,
        "asset": stack.token,
        "amount": "10000",
        "payTo": stack.merchant_address,
        "maxTimeoutSeconds": 300,
        "extra": {"name": "Sandbox EURC", "version": "2", "assetTransferMethod": "permit2"},
    }
    challenge = {"x402Version": 2, "error": "Payment required", "accepts": [entry]}
    url = await serve(scripted_402(b"{}", headers={"payment-required": _header(challenge)}))
    async with with_eur_payment(httpx.AsyncClient(), options(stack)) as client:
        with pytest.raises(NoSatisfiableOption, match=r"[Pp]ermit2"):
            await client.get(url)
