"""Our client pays Permit2 `exact` entries of the x402 foundation's own v2 merchant, settled
by the foundation's own facilitator through Permit2 and the exact Permit2 proxy on anvil
(`tests/x402_foundation.py` `permit2_stack`); the token balances on the chain are the proof.

The one-time ERC-20 approval to Permit2 is never made by paying: without it the entry is
skipped with a reason naming `approve_permit2`, and nothing is signed or sent.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import anyio
import httpx
import pytest

from tests.unit.test_permit2_rail import _Context, _entry, _options
from tests.x402_foundation import Permit2Stack, permit2_stack
from x402_client import (
    AmountLimitExceeded,
    Asset,
    Budget,
    BudgetExceeded,
    ConfigurationError,
    EvmOptions,
    NoSatisfiableOption,
    PaymentIntent,
    PaymentOptions,
    payments,
    with_eur_payment,
)
from x402_client._protocol.rail_interface import RequestSettings
from x402_client._rails.permit2 import Permit2Rail
from x402_client._state.shared import state_of

pytestmark = pytest.mark.anyio

PRICE = Decimal("0.01")
UNLIMITED = (1 << 256) - 1


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def stack(anyio_backend: str) -> AsyncIterator[Permit2Stack]:
    async with permit2_stack() as started:
        yield started


class Hook:
    """An `on_before_payment` that approves and counts: it runs just before signing."""

    def __init__(self) -> None:
        self.intents: list[PaymentIntent] = []

    def __call__(self, intent: PaymentIntent) -> bool:
        self.intents.append(intent)
        return True


def options(
    stack: Permit2Stack, key: str | None = None, *, rpc: bool = True, **overrides: Any
) -> PaymentOptions:
    values: dict[str, Any] = {
        "evm": EvmOptions(
            private_key=key or stack.payer_key,
            rpc_urls={stack.chain_id: stack.rpc_url} if rpc else {},
        ),
        "assets": [
            Asset(chain_id=stack.chain_id, address=stack.token, symbol="sEURT", currency="EUR")
        ],
    }
    values.update(overrides)
    return PaymentOptions(**values)


def settlements(stack: Permit2Stack) -> int:
    return len(stack.facilitator.requests)


async def test_pays_the_foundations_permit2_merchant_once_approved(stack):
    opts = options(stack)
    approval = await payments(opts).approve_permit2(stack.chain_id, stack.token)
    assert approval.tx_hash is not None and approval.amount == UNLIMITED
    assert await stack.allowance(stack.payer_address) == UNLIMITED
    again = await payments(opts).approve_permit2(stack.chain_id, stack.token)
    assert again.tx_hash is None  # already approved: nothing sent

    payer_before = await stack.balance(stack.payer_address)
    merchant_before = await stack.balance(stack.merchant_address)
    gas_before = await stack.native_balance(stack.payer_address)
    hook = Hook()
    async with with_eur_payment(
        httpx.AsyncClient(timeout=30), options(stack, on_before_payment=hook)
    ) as client:
        response = await client.get(stack.paid_url)
    assert response.status_code == 200, response.text
    assert response.json() == {"paid": True, "version": 2}
    receipt = response.extensions["x402_payment"]
    assert (receipt.rail, receipt.network) == ("permit2", stack.network)
    assert receipt.amount == PRICE and receipt.currency == "EUR"
    assert receipt.tx_hash and receipt.tx_hash.startswith("0x")
    assert [i.rail for i in hook.intents] == ["permit2"]
    assert await stack.balance(stack.payer_address) == payer_before - stack.price_atomic
    assert await stack.balance(stack.merchant_address) == merchant_before + stack.price_atomic
    assert await stack.native_balance(stack.payer_address) == gas_before  # facilitator's gas
    path, body = stack.facilitator.requests[-1]
    assert path == "/settle"
    sent = body["paymentPayload"]["payload"]["permit2Authorization"]
    assert sent["spender"] == "0x402085c248EeA27D92E8b30b2C58ed07f9E20001"
    assert sent["witness"]["to"].lower() == stack.merchant_address.lower()


async def test_a_missing_approval_is_a_skip_reason_and_nothing_is_signed(stack):
    key, address = await stack.new_payer(tokens_atomic=5 * stack.price_atomic)
    before = settlements(stack)
    hook = Hook()
    async with with_eur_payment(
        httpx.AsyncClient(timeout=30), options(stack, key, on_before_payment=hook)
    ) as client:
        with pytest.raises(NoSatisfiableOption, match=r"approve_permit2") as caught:
            await client.get(stack.paid_url)
    error = caught.value
    assert error.money_moved is False
    message = str(error)
    assert "Permit2 is not approved" in message and stack.network in message
    assert f"chain_id={stack.chain_id}" in message
    assert hook.intents == []  # never got as far as signing
    assert settlements(stack) == before  # nothing reached the facilitator
    assert await stack.balance(address) == 5 * stack.price_atomic
    assert await stack.allowance(address) == 0  # and no approval was sent by paying


async def test_without_an_rpc_url_the_entry_is_skipped_saying_so(stack):
    before = settlements(stack)
    async with with_eur_payment(httpx.AsyncClient(timeout=30), options(stack, rpc=False)) as client:
        with pytest.raises(NoSatisfiableOption, match=r"no RPC URL configured for chain"):
            await client.get(stack.paid_url)
    assert settlements(stack) == before
    with pytest.raises(ConfigurationError, match="RPC URL"):
        await payments(options(stack, rpc=False)).approve_permit2(stack.chain_id, stack.token)


async def test_a_limited_approval_pays_until_it_is_used_up(stack):
    key, address = await stack.new_payer(tokens_atomic=5 * stack.price_atomic)
    opts = options(stack, key)
    approval = await payments(opts).approve_permit2(stack.chain_id, stack.token, "0.01")
    assert approval.amount == stack.price_atomic and approval.tx_hash is not None
    async with with_eur_payment(httpx.AsyncClient(timeout=30), opts) as client:
        assert (await client.get(stack.paid_url)).status_code == 200
        assert await stack.allowance(address) == 0
        with pytest.raises(NoSatisfiableOption, match=r"approve_permit2"):
            await client.get(stack.paid_url)
    assert await stack.balance(address) == 4 * stack.price_atomic
    with pytest.raises(ConfigurationError, match="decimals"):
        await payments(opts).approve_permit2(stack.chain_id, stack.token, "0.0000001")


async def test_over_the_cap_and_beyond_the_budget_nothing_is_signed(stack):
    key, address = await stack.new_payer(tokens_atomic=5 * stack.price_atomic)
    await stack.approve(key)
    before = settlements(stack)
    hook = Hook()
    capped = options(stack, key, max_amount_per_payment="0.005", on_before_payment=hook)
    async with with_eur_payment(httpx.AsyncClient(timeout=30), capped) as client:
        with pytest.raises(AmountLimitExceeded) as over_cap:
            await client.get(stack.paid_url)
    assert over_cap.value.money_moved is False
    assert hook.intents == [] and settlements(stack) == before

    budgeted = options(stack, key, budgets=[Budget("0.015")], on_before_payment=hook)
    async with with_eur_payment(httpx.AsyncClient(timeout=30), budgeted) as client:
        assert (await client.get(stack.paid_url)).status_code == 200
        signed = settlements(stack)
        with pytest.raises(BudgetExceeded) as beyond:
            await client.get(stack.paid_url)
    assert beyond.value.money_moved is False
    assert len(hook.intents) == 1  # the second payment never reached signing
    assert settlements(stack) == signed
    assert await stack.balance(address) == 4 * stack.price_atomic


async def test_the_ledger_and_the_journal_record_it_and_the_sync_client_pays_too(stack, tmp_path):
    key, address = await stack.new_payer(tokens_atomic=5 * stack.price_atomic)
    await stack.approve(key)
    opts = options(stack, key, state_path=tmp_path / "state.sqlite3")

    def fetch() -> httpx.Response:  # the sync client, off the loop that serves the merchant
        with with_eur_payment(httpx.Client(timeout=30), opts) as client:
            return client.get(stack.paid_url)

    response = await anyio.to_thread.run_sync(fetch)
    assert response.status_code == 200, response.text
    receipt = response.extensions["x402_payment"]
    assert receipt.rail == "permit2"
    (entry,) = payments(opts).ledger.entries(outcome="paid")
    assert entry.intent.rail == "permit2" and entry.delivered
    journal = state_of(opts).journal
    assert journal is not None
    (record,) = await journal.payments()
    assert (record.rail, record.outcome, record.delivered) == ("permit2", "paid", True)
    assert record.proof == receipt.proof and record.amount == PRICE
    assert await payments(opts).unfinished() == []
    assert key.removeprefix("0x") not in json.dumps(record.to_json(), default=str)
    state_of(opts).close()
    assert await stack.balance(address) == 4 * stack.price_atomic


# --- an RPC nobody answers on (a real connection, refused) -----------------------------------


async def test_an_unreachable_rpc_is_a_skip_reason_and_nothing_is_signed() -> None:
    rail = Permit2Rail(_Context(_options()))
    entry = _entry()
    intent = rail.describe(entry, "r")
    assert not isinstance(intent, str)
    try:
        problem = await rail.prepare(entry, intent)
    finally:
        await rail.aclose()
    assert problem is not None
    assert "Permit2 approval cannot be checked" in problem
    assert "127.0.0.1:9" in problem
    assert RequestSettings().proof is None
