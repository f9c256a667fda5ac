"""Payment events, quotes, budgets you can read and the ledger as JSON lines, against the
sandbox over real sockets."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import httpx
import pytest

from tests.conftest import bank_payments
from tests.merchants import Reply, ScriptedMerchant, Seen
from x402_client import (
    Budget,
    PaymentOutcomeUnknown,
    PaymentReceipt,
    payments,
    with_eur_payment,
)

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_on_payment_reports_every_paid_response(sandbox, payer, options_for, kind):
    seen: list[PaymentReceipt] = []

    def sync_callback(receipt: PaymentReceipt) -> None:
        seen.append(receipt)

    async def async_callback(receipt: PaymentReceipt) -> None:
        seen.append(receipt)

    callback = sync_callback if kind == "sync" else async_callback
    async with with_eur_payment(httpx.AsyncClient(), options_for(payer, on_payment=callback)) as c:
        response = await c.get(sandbox.url("/weather"))
        await c.get(sandbox.url("/free"))
    assert seen == [response.extensions["x402_payment"]]


async def test_a_failing_callback_never_breaks_a_payment(sandbox, payer, options_for, caplog):
    def broken(receipt: Any) -> None:
        raise RuntimeError("metrics backend down")

    async with with_eur_payment(httpx.AsyncClient(), options_for(payer, on_payment=broken)) as c:
        response = await c.get(sandbox.url("/weather"))
    assert response.status_code == 200
    assert "on_payment callback failed" in caplog.text
    assert len(bank_payments(sandbox, payer)) == 1


async def test_on_payment_error_is_told_when_money_moved_and_only_then(
    sandbox, payer, options_for, serve
):
    errors: list[Any] = []

    def script(m: ScriptedMerchant, seen: Seen) -> Reply:
        if seen.proof is None:
            return m.challenge(m.entry())
        return Reply(503, {"error": "down"})

    url = await serve(ScriptedMerchant(sandbox.bank, sandbox.merchant.code, script))
    options = options_for(payer, on_payment_error=errors.append, merchant_error_retries=0)
    async with with_eur_payment(httpx.AsyncClient(), options) as client:
        with pytest.raises(PaymentOutcomeUnknown) as caught:
            await client.get(url + "/paid")
        # a refusal before any money moved is not reported
        limited = {"x402": {"max_amount_per_payment": "0.01"}}
        with pytest.raises(Exception, match="max_amount_per_payment"):
            await client.get(sandbox.url("/weather"), extensions=limited)
    assert errors == [caught.value]
    assert errors[0].money_moved is True and errors[0].proof


async def test_quote_pays_nothing_and_explains_each_entry(sandbox, payer, options_for):
    options = options_for(payer, budgets=[Budget("0.15")])
    async with with_eur_payment(httpx.AsyncClient(), options) as client:
        cheap = await payments(client).quote(sandbox.url("/weather"))
        dear = await payments(client).quote(sandbox.url("/premium"))
        free = await payments(client).quote(sandbox.url("/free"))
    assert bank_payments(sandbox, payer) == []
    (entry,) = cheap.entries
    assert entry.payable and entry.first and entry.amount == Decimal("0.10")
    (refused,) = dear.entries
    assert not refused.payable and refused.reason == "over_cap"
    assert free.free and free.entries == []
    assert json.loads(json.dumps(cheap.to_json()))["entries"][0]["amount"] == "0.10"


async def test_budgets_can_be_read_and_the_ledger_exports_as_json_lines(
    sandbox, payer, options_for
):
    options = options_for(payer, budgets=[Budget("0.25"), Budget("1", window=3600)])
    async with with_eur_payment(httpx.AsyncClient(), options) as client:
        await client.get(sandbox.url("/weather"))
    total, hourly = await payments(options).budgets()
    assert (total.spent, total.remaining) == (Decimal("0.10"), Decimal("0.15"))
    assert (hourly.spent, hourly.remaining) == (Decimal("0.10"), Decimal("0.90"))
    (line,) = payments(options).ledger.to_jsonl().splitlines()
    record = json.loads(line)
    assert record["outcome"] == "paid" and record["amount"] == "0.10"
    assert record["paymentRequestCode"].startswith("pr_")
    assert payer.api_key not in line
