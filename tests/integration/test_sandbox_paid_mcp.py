"""The sandbox's paid MCP tool server (the standard merchant's `/mcp`), paid by our client:
`mcp` 2.x's `Client` with `with_eur_payment_mcp`, over the x402 foundation's MCP transport.
The merchant verifies and settles the EIP-3009 transfer itself, on a real anvil chain; the
token balances are the proof."""

from __future__ import annotations

from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import pytest
from mcp import Client

from tests.sandboxes import asset_of, payment_options
from x402_client import (
    EvmOptions,
    PaidToolResult,
    PaymentOptions,
    PaymentOutcomeUnknown,
    X402Error,
    payment_ledger,
    with_eur_payment_mcp,
)
from x402_eur_sandbox import Sandbox
from x402_eur_sandbox._standard import StandardMerchant

pytestmark = pytest.mark.anyio

PRICE = Decimal("0.05")  # the weather tool's price, sEURC
PRICE_ATOMIC = 50_000


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def merchant(anyio_backend: str) -> AsyncIterator[StandardMerchant]:
    async with StandardMerchant(chain_id=84532) as started:
        yield started


def options(merchant: StandardMerchant, **overrides: Any) -> PaymentOptions:
    return PaymentOptions(
        evm=EvmOptions(**merchant.evm_config()), assets=[asset_of(merchant)], **overrides
    )


async def balances(merchant: StandardMerchant) -> tuple[int, int]:
    return (
        await merchant.token_balance(merchant.payer_address),
        await merchant.token_balance(merchant.pay_to),
    )


async def test_an_unpaid_call_is_a_tool_error_holding_the_payment_requirements(merchant):
    async with Client(merchant.mcp_url) as client:
        listed = {tool.name for tool in (await client.list_tools()).tools}
        result = await client.call_tool("weather", {"city": "Paris"})
    assert {"weather", "echo"} <= listed
    assert result.is_error
    required = result.structured_content
    assert required["x402Version"] == 2
    assert required["error"] == "Payment required to access this tool"
    assert required["resource"]["url"] == "mcp://tool/weather"
    [accept] = required["accepts"]
    assert (accept["scheme"], accept["network"], accept["asset"], accept["payTo"]) == (
        "exact",
        merchant.network,
        merchant.token,
        merchant.pay_to,
    )
    assert accept["amount"] == str(PRICE_ATOMIC)
    assert accept["extra"] == {"name": "Sandbox EURC", "version": "2"}


async def test_our_client_pays_the_tool_and_exact_balances_move(merchant):
    before, settled = await balances(merchant), len(merchant.tools.settlements)
    paying = options(merchant)
    async with Client(merchant.mcp_url) as client:
        with_eur_payment_mcp(client, paying)
        result = await client.call_tool("weather", {"city": "Paris"})
    assert isinstance(result, PaidToolResult) and not result.is_error
    assert result.structured_content == {"city": "Paris", "forecast": "sunny", "temperatureC": 21}
    receipt = result.x402_payment
    assert receipt is not None
    assert (receipt.rail, receipt.network, receipt.amount, receipt.currency) == (
        "eip3009",
        merchant.network,
        PRICE,
        "EUR",
    )
    assert receipt.resource == "mcp://tool/weather"
    settlement = result.meta["x402/payment-response"]
    assert settlement["success"] is True and settlement["payer"] == merchant.payer_address
    assert (
        receipt.tx_hash
        == settlement["transaction"]
        == merchant.tools.settlements[-1]["transaction"]
    )
    assert len(merchant.tools.settlements) == settled + 1
    assert await balances(merchant) == (before[0] - PRICE_ATOMIC, before[1] + PRICE_ATOMIC)
    [entry] = payment_ledger(paying).entries()
    assert entry.outcome == "paid" and entry.intent.resource == "mcp://tool/weather"


async def test_a_free_tool_answers_without_payment(merchant):
    before = await balances(merchant)
    async with Client(merchant.mcp_url) as client:
        with_eur_payment_mcp(client, options(merchant))
        result = await client.call_tool("echo", {"text": "hello"})
    assert not isinstance(result, PaidToolResult) and not result.is_error
    assert result.structured_content == {"text": "hello"}
    assert await balances(merchant) == before


async def test_a_tool_error_after_the_payment_settles_nothing(merchant):
    before, settled = await balances(merchant), len(merchant.tools.settlements)
    async with Client(merchant.mcp_url) as client:
        with_eur_payment_mcp(client, options(merchant))
        with pytest.raises(PaymentOutcomeUnknown) as caught:
            await client.call_tool("weather", {"city": ""})
    assert "the tool answered the paid call with an error" in str(caught.value)
    assert len(merchant.tools.settlements) == settled
    assert await balances(merchant) == before


async def test_a_proof_paid_once_is_refused_the_second_time(merchant):
    paying = options(merchant)
    async with Client(merchant.mcp_url) as client:
        with_eur_payment_mcp(client, paying)
        first = await client.call_tool("weather", {"city": "Oslo"})
        before, settled = await balances(merchant), len(merchant.tools.settlements)
        with pytest.raises(X402Error) as caught:
            await client.call_tool(
                "weather", {"city": "Oslo"}, x402={"proof": first.x402_payment.proof}
            )
    assert "invalid_exact_evm_nonce_already_used" in str(caught.value)
    assert len(merchant.tools.settlements) == settled
    assert await balances(merchant) == before


async def test_the_sandbox_serves_it_with_the_standard_merchant():
    async with Sandbox(standard=True) as sandbox:
        assert sandbox.paid_tool_server_url == sandbox.standard.url + "/mcp"
        before = await sandbox.standard.token_balance(sandbox.standard.payer_address)
        async with Client(sandbox.paid_tool_server_url) as client:
            with_eur_payment_mcp(client, payment_options(sandbox))
            result = await client.call_tool("weather", {"city": "Lisbon"})
        assert isinstance(result, PaidToolResult)
        after = await sandbox.standard.token_balance(sandbox.standard.payer_address)
        assert after == before - PRICE_ATOMIC
    with pytest.raises(RuntimeError, match="standard=True"):
        _ = Sandbox().paid_tool_server_url
