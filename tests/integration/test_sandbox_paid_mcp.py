"""The sandbox's paid MCP tool server (the standard merchant's `/mcp`), paid by our client:
`mcp` 2.x's `Client` with `with_eur_payment_mcp`, over the x402 foundation's MCP transport.
The merchant verifies and settles the EIP-3009 transfer itself, on a real anvil chain; the
token balances are the proof."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import httpx
import pytest
from mcp import Client

from tests.conftest import register_secrets
from tests.sandboxes import asset_of, payment_options
from x402_client import (
    EvmOptions,
    PaidToolResult,
    PaymentOptions,
    PaymentOutcomeUnknown,
    X402Error,
    payments,
    with_eur_payment,
)
from x402_client._state.shared import state_of
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
        with_eur_payment(client, paying)
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
    [entry] = payments(paying).ledger.entries()
    assert entry.outcome == "paid" and entry.intent.resource == "mcp://tool/weather"


async def test_a_free_tool_answers_without_payment(merchant):
    before = await balances(merchant)
    async with Client(merchant.mcp_url) as client:
        with_eur_payment(client, options(merchant))
        result = await client.call_tool("echo", {"text": "hello"})
    assert not isinstance(result, PaidToolResult) and not result.is_error
    assert result.structured_content == {"text": "hello"}
    assert await balances(merchant) == before


async def test_a_tool_error_after_the_payment_settles_nothing(merchant):
    before, settled = await balances(merchant), len(merchant.tools.settlements)
    async with Client(merchant.mcp_url) as client:
        with_eur_payment(client, options(merchant))
        with pytest.raises(PaymentOutcomeUnknown) as caught:
            await client.call_tool("weather", {"city": ""})
    assert "the tool answered the paid call with an error" in str(caught.value)
    assert len(merchant.tools.settlements) == settled
    assert await balances(merchant) == before


async def test_a_proof_paid_once_is_refused_the_second_time(merchant):
    paying = options(merchant)
    async with Client(merchant.mcp_url) as client:
        with_eur_payment(client, paying)
        first = await client.call_tool("weather", {"city": "Oslo"})
        before, settled = await balances(merchant), len(merchant.tools.settlements)
        with pytest.raises(X402Error) as caught:
            await client.call_tool(
                "weather", {"city": "Oslo"}, x402={"proof": first.x402_payment.proof}
            )
    assert "invalid_exact_evm_nonce_already_used" in str(caught.value)
    assert len(merchant.tools.settlements) == settled
    assert await balances(merchant) == before


async def test_credential_arguments_stay_out_of_the_journal_and_the_call_is_finished_with_them(
    merchant, tmp_path
):
    """A paid call the tool answers with an error leaves a signed, unsettled authorization:
    the journal keeps the call's arguments less the credential, recovery re-sends nothing
    and says why, and the call made again with the caller's arguments and the journaled
    proof is served and settled once."""
    register_secrets("s3cret")
    path = tmp_path / "state.sqlite3"
    paying = options(merchant, state_path=path)
    state = [path, path.with_name(path.name + "-wal")]
    before, settled = await balances(merchant), len(merchant.tools.settlements)
    try:
        async with Client(merchant.mcp_url) as client:
            with_eur_payment(client, paying)
            with pytest.raises(PaymentOutcomeUnknown):
                await client.call_tool("weather", {"city": "", "session_token": "s3cret"})
            [record] = await payments(paying).unfinished()
            assert record.request_body_redacted
            assert json.loads(record.request_body or b"{}") == {
                "city": "",
                "session_token": "REDACTED",
            }
            assert all(b"s3cret" not in file.read_bytes() for file in state if file.exists())
            async with with_eur_payment(httpx.AsyncClient(), paying) as http:
                recovery = await payments(http).recover(record.id)
            assert recovery.status == "pending"
            assert "arguments held credentials" in recovery.reason
            assert "call the tool again" in recovery.reason
            assert await balances(merchant) == before
            result = await client.call_tool(
                "weather",
                {"city": "Paris", "session_token": "s3cret"},
                x402={"proof": record.proof},
            )
        assert isinstance(result, PaidToolResult) and not result.is_error
        assert await payments(paying).unfinished() == []
    finally:
        state_of(paying).close()
    assert len(merchant.tools.settlements) == settled + 1
    assert await balances(merchant) == (before[0] - PRICE_ATOMIC, before[1] + PRICE_ATOMIC)
    assert all(b"s3cret" not in file.read_bytes() for file in state if file.exists())


async def test_the_sandbox_serves_it_with_the_standard_merchant():
    async with Sandbox(standard=True) as sandbox:
        assert sandbox.paid_tool_server_url == sandbox.standard.url + "/mcp"
        before = await sandbox.standard.token_balance(sandbox.standard.payer_address)
        async with Client(sandbox.paid_tool_server_url) as client:
            with_eur_payment(client, payment_options(sandbox))
            result = await client.call_tool("weather", {"city": "Lisbon"})
        assert isinstance(result, PaidToolResult)
        after = await sandbox.standard.token_balance(sandbox.standard.payer_address)
        assert after == before - PRICE_ATOMIC
    with pytest.raises(RuntimeError, match="standard=True"):
        _ = Sandbox().paid_tool_server_url
