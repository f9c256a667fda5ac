"""`PaymentReceipt.of(answer)`: one typed way to read the receipt of whatever a paying
client hands back (an httpx response, a `requests` response, an MCP tool result), None
when nothing was paid, never an AttributeError."""

from __future__ import annotations

import types
from datetime import datetime, timezone
from decimal import Decimal

import httpx

from x402_client import PaymentReceipt

RECEIPT = PaymentReceipt(
    rail="euro",
    scheme="euro",
    network="provider:mainnet",
    asset="EURO",
    amount=Decimal("0.10"),
    currency="EUR",
    pay_to="ACC_MERCHANT",
    resource="http://127.0.0.1/paid",
    paid_at=datetime(2026, 1, 1, tzinfo=timezone.utc),
    proof="PROOF",
)


def test_the_receipt_of_each_kind_of_answer() -> None:
    paid = httpx.Response(200, extensions={"x402_payment": RECEIPT})
    assert PaymentReceipt.of(paid) is RECEIPT
    # a requests response and an MCP tool result carry it as an attribute
    assert PaymentReceipt.of(types.SimpleNamespace(x402_payment=RECEIPT)) is RECEIPT


def test_a_free_or_foreign_answer_has_none() -> None:
    assert PaymentReceipt.of(httpx.Response(200)) is None
    assert PaymentReceipt.of(types.SimpleNamespace(x402_payment=None)) is None
    assert PaymentReceipt.of(types.SimpleNamespace(x402_payment="not a receipt")) is None
    assert PaymentReceipt.of(httpx.Response(200, extensions={"x402_payment": {}})) is None
    for other in (None, 42, "text", object()):
        assert PaymentReceipt.of(other) is None
