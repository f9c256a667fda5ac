"""What the MCP tools tell an agent about money: read off the error and the payment, never
guessed from the kind of error; after a payment a result always carries the receipt or
what recovers it; tool arguments can only lower the caps; schemas say what comes back."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import bank_payments
from tests.factories import euro_intent
from tests.needs import require
from x402_client import LedgerEntry, with_eur_payment
from x402_client.mcp import TOOLS, PaymentTools
from x402_client.mcp._results import _add_payments_made
from x402_eur_sandbox import Fault

require("mcp_types", "pip install 'x402-eur[mcp-server]'")

pytestmark = pytest.mark.anyio


def _entry(outcome: Any, proof: str | None = "proof-1") -> LedgerEntry:
    entry = LedgerEntry(intent=euro_intent(), proof=proof, payment_request_code="pr_1")
    entry.finish(outcome)
    return entry


@pytest.mark.parametrize(
    ("outcome", "moved"), [("unknown", None), ("paid", True), ("failed", False)]
)
def test_an_error_that_says_nothing_of_money_takes_the_payment_it_interrupted(outcome, moved):
    error = {"type": "ReadError", "moneyMoved": False, "summary": "No money moved: x"}
    _add_payments_made(error, [_entry(outcome)])
    assert error["moneyMoved"] is moved
    if moved is not False:
        (made,) = error["payments"]
        assert made["paymentRequestCode"] == "pr_1" and "Do not pay again" in error["recovery"]
        assert made["proof"] == "proof-1"  # not delivered: it can still get the resource
    else:
        assert "payments" not in error


def test_the_quote_schema_names_every_field_the_tool_returns():
    from x402_client._flow.quote import QuoteEntry

    declared = set(TOOLS["quote"].output_schema["properties"]["entries"]["items"]["properties"])
    returned = set(
        QuoteEntry(
            index=0, payable=False, first=False, reason=None, message=None, intent=None, accept={}
        ).to_json()
    )
    assert returned <= declared, returned - declared


async def test_a_paid_request_that_was_not_served_says_money_moved_and_how_to_recover(
    sandbox, payer, options_for
):
    options = options_for(payer)
    async with with_eur_payment(httpx.AsyncClient(follow_redirects=True), options) as client:
        tools = PaymentTools(client, options)
        sandbox.faults.arm("resource", Fault("status", "before", status=429, times=1))
        try:
            body, is_error = await tools.call("fetch", {"url": sandbox.url("/weather")})
        finally:
            sandbox.faults.clear()
        assert is_error
        error = body["error"]
        assert error["moneyMoved"] is True and error["proof"]
        (receipt,) = error["receipts"]
        assert receipt["amount"] == "0.10"
        assert "Do not pay again" in error["recovery"]
        # the recovery it names works and pays nothing
        again, is_error = await tools.call(
            "fetch", {"url": sandbox.url("/weather"), "proof": error["proof"]}
        )
        assert not is_error and again["status"] == 200
        assert again["receipt"]["reused"] is True and again["receipt"]["payments"] == 0
    assert len(bank_payments(sandbox, payer)) == 1


async def test_a_tool_argument_cannot_raise_the_cap(sandbox, payer, options_for):
    options = options_for(payer, max_amount_per_payment="0.05")
    async with with_eur_payment(httpx.AsyncClient(), options) as client:
        tools = PaymentTools(client, options)
        body, is_error = await tools.call(
            "fetch", {"url": sandbox.url("/weather"), "max_amount": "5.00"}
        )
    assert is_error and body["error"]["moneyMoved"] is False
    assert body["error"]["type"] == "AmountLimitExceeded"
    assert bank_payments(sandbox, payer) == []
