"""Paid MCP tool calls against the x402 foundation's own paid MCP server.

The server is the foundation's `x402.mcp` payment wrapper on a FastMCP server (`mcp` 1.x),
run in an environment of its own (`tests/mcp_foundation.py`) and speaking streamable HTTP
on 127.0.0.1; it verifies and settles EIP-3009 transfers through the foundation's
facilitator on anvil (`tests/x402_foundation.py`). Our client is `mcp` 2.x's `Client` with
`with_eur_payment`, and, in an environment of its own (`tests/mcp1_client.py`), `mcp` 1.x's
`ClientSession`: both generations pay the same server. The token balances on the chain are
the proof.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client

from tests.mcp1_client import mcp1_client_python, run_mcp1_client
from tests.mcp_foundation import foundation_mcp_python, foundation_mcp_server
from tests.x402_foundation import FoundationStack, foundation_stack
from x402_client import (
    AmountLimitExceeded,
    Asset,
    Budget,
    BudgetExceeded,
    EvmOptions,
    PaidToolResult,
    PaymentOptions,
    PaymentOutcomeUnknown,
    PaymentRejectedByHook,
    payments,
    with_eur_payment,
)

pytestmark = pytest.mark.anyio

#: The stack's price: 10,000 atomic units of a six-decimal euro token = 0.01 EUR.
PRICE = Decimal("0.01")


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def server_python() -> Any:
    return foundation_mcp_python()


@pytest.fixture(scope="module")
async def stack(anyio_backend: str, server_python: Any) -> AsyncIterator[FoundationStack]:
    async with foundation_stack() as started:
        yield started


@pytest.fixture(scope="module")
async def mcp_url(stack: FoundationStack, server_python: Any) -> AsyncIterator[str]:
    async with foundation_mcp_server(stack, server_python) as url:
        yield url


def options(stack: FoundationStack, **overrides: Any) -> PaymentOptions:
    values: dict[str, Any] = {
        "evm": EvmOptions(private_key=stack.payer_key),
        "assets": [
            Asset(chain_id=stack.chain_id, address=stack.token, symbol="EURC", currency="EUR")
        ],
    }
    values.update(overrides)
    return PaymentOptions(**values)


async def balances(stack: FoundationStack) -> tuple[int, int]:
    return await stack.balance(stack.payer_address), await stack.balance(stack.merchant_address)


async def test_the_paid_tool_returns_its_result_with_a_receipt(stack, mcp_url):
    payer_before, merchant_before = await balances(stack)
    paying = options(stack)
    async with Client(mcp_url) as client:
        assert with_eur_payment(client, paying) is client
        result = await client.call_tool("weather", {"city": "Paris"})
    assert isinstance(result, PaidToolResult) and not result.is_error
    assert "sunny" in result.content[0].text and "Paris" in result.content[0].text
    receipt = result.x402_payment
    assert receipt is not None
    assert (receipt.rail, receipt.network, receipt.amount, receipt.currency) == (
        "eip3009",
        stack.network,
        PRICE,
        "EUR",
    )
    assert receipt.resource == "mcp://tool/weather"
    assert receipt.settlement is not None and receipt.settlement["success"] is True
    assert (
        receipt.tx_hash and receipt.tx_hash == result.meta["x402/payment-response"]["transaction"]
    )
    assert "x402_payment" not in result.model_dump() and "x402Payment" not in result.model_dump(
        by_alias=True
    )
    assert await balances(stack) == (
        payer_before - stack.price_atomic,
        merchant_before + stack.price_atomic,
    )
    [entry] = payments(paying).ledger.entries()
    assert entry.outcome == "paid" and entry.intent.resource == "mcp://tool/weather"


async def test_a_free_tool_passes_through_untouched(stack, mcp_url):
    before = await balances(stack)
    paying = options(stack)
    async with Client(mcp_url) as client:
        plain = await client.call_tool("echo", {"text": "hello"})
        with_eur_payment(client, paying)
        result = await client.call_tool("echo", {"text": "hello"})
    assert type(result) is type(plain) and not isinstance(result, PaidToolResult)
    assert result.model_dump() == plain.model_dump()
    assert payments(paying).ledger.entries() == []
    assert await balances(stack) == before


async def test_over_the_cap_nothing_is_signed(stack, mcp_url):
    before = await balances(stack)
    asked: list[Any] = []
    paying = options(stack, max_amount_per_payment="0.005", on_before_payment=asked.append)
    async with Client(mcp_url) as client:
        with_eur_payment(client, paying)
        with pytest.raises(AmountLimitExceeded) as caught:
            await client.call_tool("weather", {"city": "Paris"})
    assert caught.value.money_moved is False
    assert asked == []  # refused before the hook, before any signature
    assert payments(paying).ledger.entries() == []
    assert await balances(stack) == before


async def test_the_hook_refuses_and_nothing_is_signed(stack, mcp_url):
    before = await balances(stack)
    paying = options(stack, on_before_payment=lambda intent: False)
    async with Client(mcp_url) as client:
        with_eur_payment(client, paying)
        with pytest.raises(PaymentRejectedByHook) as caught:
            await client.call_tool("weather", {"city": "Paris"})
    assert caught.value.money_moved is False
    assert caught.value.intent is not None and caught.value.intent.resource == "mcp://tool/weather"
    assert await balances(stack) == before


async def test_beyond_the_budget_nothing_is_signed(stack, mcp_url):
    payer_before, _ = await balances(stack)
    paying = options(stack, budgets=[Budget("0.015")])
    async with Client(mcp_url) as client:
        with_eur_payment(client, paying)
        assert isinstance(await client.call_tool("weather", {"city": "Paris"}), PaidToolResult)
        with pytest.raises(BudgetExceeded) as caught:
            await client.call_tool("weather", {"city": "Rome"})
    assert caught.value.money_moved is False
    assert [e.outcome for e in payments(paying).ledger.entries()] == ["paid"]
    assert await stack.balance(stack.payer_address) == payer_before - stack.price_atomic


async def test_one_budget_holds_across_an_httpx_client_and_an_mcp_session(stack, mcp_url):
    """A budget of exactly three payments, asked for at once by four requests of one httpx
    client and four tool calls of one MCP session: three are paid, whoever asks; the other
    five are refused unsigned."""
    payer_before, merchant_before = await balances(stack)
    shared = options(stack, budgets=[Budget("0.03")])
    outcomes: list[str] = []

    async def over_http(http: httpx.AsyncClient) -> None:
        try:
            response = await http.get(stack.paid_url)
        except BudgetExceeded as exc:
            assert exc.money_moved is False
            outcomes.append("refused")
            return
        assert response.status_code == 200, response.text
        outcomes.append("http")

    async def over_mcp(client: Client) -> None:
        try:
            result = await client.call_tool("weather", {"city": "Oslo"})
        except BudgetExceeded as exc:
            assert exc.money_moved is False
            outcomes.append("refused")
            return
        assert isinstance(result, PaidToolResult) and not result.is_error
        outcomes.append("mcp")

    async with httpx.AsyncClient(timeout=30) as http, Client(mcp_url) as client:
        with_eur_payment(http, shared)
        with_eur_payment(client, shared)
        async with anyio.create_task_group() as group:
            for _ in range(4):
                group.start_soon(over_http, http)
                group.start_soon(over_mcp, client)
    assert len(outcomes) == 8 and outcomes.count("refused") == 5
    entries = payments(shared).ledger.entries()
    assert [e.outcome for e in entries] == ["paid"] * 3
    assert sorted(e.intent.resource for e in entries) == sorted(
        [stack.paid_url] * outcomes.count("http") + ["mcp://tool/weather"] * outcomes.count("mcp")
    )
    assert await balances(stack) == (
        payer_before - 3 * stack.price_atomic,
        merchant_before + 3 * stack.price_atomic,
    )


async def test_http_and_mcp_take_turns_on_one_budget(stack, mcp_url):
    """The same budget spent in turns, so that both kinds of request surely pay."""
    payer_before, _ = await balances(stack)
    shared = options(stack, budgets=[Budget("0.02")])
    async with httpx.AsyncClient(timeout=30) as http, Client(mcp_url) as client:
        with_eur_payment(http, shared)
        with_eur_payment(client, shared)
        assert (await http.get(stack.paid_url)).status_code == 200
        assert isinstance(await client.call_tool("weather", {"city": "Oslo"}), PaidToolResult)
        with pytest.raises(BudgetExceeded):
            await http.get(stack.paid_url)
        with pytest.raises(BudgetExceeded):
            await client.call_tool("weather", {"city": "Oslo"})
    resources = sorted(e.intent.resource for e in payments(shared).ledger.entries())
    assert resources == sorted([stack.paid_url, "mcp://tool/weather"])
    assert await stack.balance(stack.payer_address) == payer_before - 2 * stack.price_atomic


async def test_a_paid_tool_that_fails_says_the_money_may_have_moved(stack, mcp_url):
    """The foundation's wrapper verifies the payment, runs the tool, and settles only when
    the tool succeeds: a failing tool leaves a signed authorization with the server,
    unsettled. The client must not call that paid, nor nothing."""
    before = await balances(stack)
    paying = options(stack)
    async with Client(mcp_url) as client:
        with_eur_payment(client, paying)
        with pytest.raises(PaymentOutcomeUnknown) as caught:
            await client.call_tool("broken", {"city": "Atlantis"})
    error = caught.value
    assert error.money_moved is None and error.proof
    [entry] = payments(paying).ledger.entries()
    assert entry.outcome == "unknown" and not entry.delivered
    assert await balances(stack) == before  # not settled (yet): the authorization is out


# --- the same server, paid from mcp 1.x's ClientSession -----------------------------------


@pytest.fixture(scope="module")
def mcp1_python() -> Any:
    return mcp1_client_python()


async def on_mcp1(
    python: Any, stack: FoundationStack, url: str, tool: str, **call: Any
) -> dict[str, Any]:
    """One tool call on an mcp 1.x `ClientSession` paying with `with_eur_payment`."""
    report = await run_mcp1_client(
        python,
        {
            "url": url,
            "key": stack.payer_key,
            "chain_id": stack.chain_id,
            "token": stack.token,
            "tool": tool,
            "arguments": {"city": "Paris"} if tool == "weather" else {"text": "hello"},
            **call,
        },
    )
    assert report["mcp"].startswith("1.") and report["installed_is_session"]
    # Paying on 1.x needs nothing of 2.x: it is not installed, and nothing asked for it.
    assert not report["mcp_types_installed"] and not report["mcp_types_imported"]
    return report


async def test_mcp1_the_paid_tool_returns_its_own_result_class_with_a_receipt(
    stack, mcp_url, mcp1_python
):
    payer_before, merchant_before = await balances(stack)
    report = await on_mcp1(mcp1_python, stack, mcp_url, "weather")
    assert "error" not in report, report
    result = report["result"]
    assert result["paid_tool_result"] and result["mcp1_call_tool_result"]
    assert not result["is_error"] and "sunny" in result["text"] and "Paris" in result["text"]
    receipt = result["receipt"]
    assert (receipt["rail"], receipt["network"], receipt["currency"]) == (
        "eip3009",
        stack.network,
        "EUR",
    )
    assert Decimal(receipt["amount"]) == PRICE
    assert receipt["resource"] == "mcp://tool/weather" and receipt["settled"] is True
    assert (
        receipt["tx_hash"]
        and receipt["tx_hash"] == (result["meta"]["x402/payment-response"]["transaction"])
    )
    assert "x402_payment" not in result["dump"] and "x402Payment" not in result["dump"]
    assert report["ledger"] == ["paid"]
    assert await balances(stack) == (
        payer_before - stack.price_atomic,
        merchant_before + stack.price_atomic,
    )


async def test_mcp1_over_the_cap_nothing_is_signed(stack, mcp_url, mcp1_python):
    before = await balances(stack)
    report = await on_mcp1(mcp1_python, stack, mcp_url, "weather", max_amount_per_payment="0.005")
    assert report["error"] == {"type": "AmountLimitExceeded", "money_moved": False}
    assert "result" not in report and report["ledger"] == []
    assert await balances(stack) == before


async def test_mcp1_a_free_tool_passes_through_untouched(stack, mcp_url, mcp1_python):
    before = await balances(stack)
    report = await on_mcp1(mcp1_python, stack, mcp_url, "echo", unpaid_first=True)
    assert not report["result"]["paid_tool_result"] and report["result"]["receipt"] is None
    assert report["result"]["dump"] == report["unpaid"]["dump"]
    assert report["ledger"] == [] and await balances(stack) == before
