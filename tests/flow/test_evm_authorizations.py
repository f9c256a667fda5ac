"""What an EIP-3009 authorization means for the money when the merchant does not settle
it, or when the journal cannot record it: scripted standard merchants on
`httpx.MockTransport` (the rail signs offline; nothing is sent but to the merchant).

A signed authorization the merchant did not settle may still move (`money_moved` None, the
budget kept); one the journal could not record is never handed over (nothing moved)."""

from __future__ import annotations

import sqlite3
from decimal import Decimal
from typing import Any

import httpx
import pytest

from x402_client import (
    Asset,
    Budget,
    EvmOptions,
    PaymentFailed,
    PaymentOptions,
    PaymentTransport,
    X402Error,
    payments,
)
from x402_client._state.shared import state_of

pytestmark = pytest.mark.anyio

EVM_KEY = "0x" + "42" * 32
TOKEN = "0x5FbDB2315678afecb367f032d93F642f64180aa3"


def _eip3009_merchant(paid_answer: httpx.Response) -> httpx.MockTransport:
    """A v1 standard merchant selling for 0.01 sEURC (EIP-3009) that answers every proof
    with `paid_answer`."""
    challenge = {
        "x402Version": 1,
        "error": "X-PAYMENT header is required",
        "accepts": [
            {
                "scheme": "exact",
                "network": "base-sepolia",
                "maxAmountRequired": "10000",
                "resource": "http://merchant.test/paid",
                "description": "paid",
                "mimeType": "application/json",
                "payTo": "0x" + "ab" * 20,
                "maxTimeoutSeconds": 300,
                "asset": TOKEN,
                "extra": {"name": "Sandbox EURC", "version": "2"},
            }
        ],
    }

    def handler(request: httpx.Request) -> httpx.Response:
        if "x-payment" not in request.headers:
            return httpx.Response(402, json=challenge)
        return paid_answer

    return httpx.MockTransport(handler)


def _eip3009_options(**more: Any) -> PaymentOptions:
    return PaymentOptions(
        evm=EvmOptions(private_key=EVM_KEY),
        assets=[Asset(chain_id=84532, address=TOKEN, symbol="sEURC", currency="EUR")],
        **more,
    )


@pytest.mark.parametrize(
    ("answer", "kind"),
    [
        (httpx.Response(402, json={"x402Version": 1, "error": "invalid_signature"}), "refused"),
        (httpx.Response(429, json={"error": "slow down"}), "not served"),
    ],
)
async def test_an_evm_authorization_that_was_not_settled_may_still_move(answer, kind):
    errors: list[Exception] = []  # what `on_payment_error` heard
    options = _eip3009_options(on_payment_error=errors.append, budgets=[Budget("1.00")])
    transport = PaymentTransport(_eip3009_merchant(answer), options)
    async with httpx.AsyncClient(transport=transport) as client:
        with pytest.raises(X402Error) as caught:
            await client.get("http://merchant.test/paid")
    error = caught.value
    # the merchant holds a signed authorization it did not settle: it may still do so
    assert error.money_moved is None, (kind, repr(error))
    assert errors == [error]
    (entry,) = payments(options).ledger.entries()
    assert (entry.outcome, entry.delivered) == ("unknown", False)
    (status,) = await payments(options).budgets()
    assert status.spent == Decimal("0.01")  # kept until it expires or is settled


async def test_a_signed_authorization_the_journal_cannot_record_is_never_handed_over(
    tmp_path, monkeypatch
):
    seen: list[httpx.Request] = []
    merchant = _eip3009_merchant(httpx.Response(200, json={"served": True}))
    handler = merchant.handler  # type: ignore[attr-defined]

    def recording(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return handler(request)

    options = _eip3009_options(state_path=tmp_path / "state.sqlite3", budgets=[Budget("1.00")])
    journal = state_of(options).journal
    assert journal is not None
    original = journal.update_payment

    async def proof_not_written(id: str, **facts: Any) -> None:
        if facts.get("step") == "proof":
            raise sqlite3.OperationalError("database is locked")
        await original(id, **facts)

    monkeypatch.setattr(journal, "update_payment", proof_not_written)
    transport = PaymentTransport(httpx.MockTransport(recording), options)
    async with httpx.AsyncClient(transport=transport) as client:
        with pytest.raises(PaymentFailed) as caught:
            await client.get("http://merchant.test/paid")
    assert caught.value.money_moved is False
    assert [r.headers.get("x-payment") for r in seen] == [None]  # the proof never left
    (status,) = await payments(options).budgets()
    assert status.spent == 0
    assert await payments(options).unfinished() == []
    state_of(options).close()
