"""What people see of the library's objects: short reprs on one line, HTML tables in a
notebook, money written one way (`0.10 EUR (EURQ)`), budget windows as people write them."""

from __future__ import annotations

import html
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

import httpx
import pytest

from tests.factories import euro_intent
from x402_client import (
    Budget,
    PaymentReceipt,
    Quote,
    Recovery,
)
from x402_client._flow.quote import QuoteEntry
from x402_client._protocol.budgets import BudgetStatus, CurrencyStatus, window_text
from x402_client._state.sqlite_store import JournalRecord

EURQ = "0x5FbDB2315678afecb367f032d93F642f64180aa3"
PROOF = "eyJwcm9vZiI6InNlY3JldC1wcm9vZiJ9"
WHEN = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


def _record(**fields: Any) -> JournalRecord:
    values: dict[str, Any] = {
        "id": "3f9c2a1b7e4d5c6a" + "0" * 16,
        "created_at": WHEN,
        "updated_at": WHEN,
        "rail": "evm-permit",
        "scheme": "exact",
        "network": "eip155:137",
        "asset": EURQ,
        "asset_symbol": "EURQ",
        "amount": Decimal("0.100000"),
        "currency": "EUR",
        "pay_to": "0x" + "ab" * 20,
        "resource": "https://user:pw@merchant.test/paid?token=abc",
        "atomic_amount": 100000,
        "description": None,
        "accept": {},
        "request_method": "GET",
        "request_url": "https://user:pw@merchant.test/paid?token=abc",
        "request_headers": (),
        "request_body": None,
        "request_body_size": None,
        "request_body_omitted": False,
        "reservations": (),
        "payment_request_code": None,
        "transaction_code": None,
        "proof": PROOF,
        "blockchain_tx_id": None,
        "tx_hash": "0x" + "cd" * 32,
        "outcome": "paid",
        "delivered": True,
        "error": None,
        "unrecoverable": None,
        "steps": (),
    }
    values.update(fields)
    return JournalRecord(**values)


# --- money and windows -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (86400.0, "24h"),
        (3600.0, "1h"),
        (1800.0, "30m"),
        (604800.0, "7d"),
        (172800.0, "2d"),
        (129600.0, "36h"),
        (90.0, "90s"),
        (None, None),
    ],
)
def test_a_window_is_written_as_people_write_it(seconds: float | None, text: str | None) -> None:
    assert window_text(seconds) == text


def test_a_budget_reads_as_it_would_be_written() -> None:
    budget = Budget("5", window="24h")
    assert repr(budget) == "Budget('5.00', currency='EUR', window='24h', name='default')"
    assert eval(repr(budget)) == budget  # noqa: S307 - our own repr
    assert Budget("20", currency="USD").describe() == "20.00 USD in total"


def test_budget_status_shows_money_trimmed() -> None:
    status = BudgetStatus(Budget("5", window="24h"), Decimal("0.100000"), Decimal("4.900000"))
    assert repr(status) == (
        "BudgetStatus('default': 5.00 EUR per 24h, spent 0.10 EUR, remaining 4.90 EUR)"
    )
    currency = CurrencyStatus("EUR", Decimal("1.000000"), (status,), Decimal("4.9"), True)
    assert repr(currency) == (
        "CurrencyStatus(EUR: at most 1.00 EUR a payment, 1 budget(s), remaining 4.90 EUR, payable)"
    )


@pytest.mark.anyio
async def test_budget_status_amounts_are_written_with_two_decimals_at_least() -> None:
    from x402_client._state.budget_stores import Budgets

    budgets = Budgets([Budget("5", window="24h")], None, {"EUR": Decimal("1")})
    await budgets.reserve(euro_intent("0.100000"))
    (status,) = await budgets.status()
    assert (str(status.spent), str(status.remaining)) == ("0.10", "4.90")


def test_a_receipt_names_the_asset_by_its_symbol() -> None:
    receipt = PaymentReceipt(
        rail="evm-permit",
        scheme="exact",
        network="eip155:137",
        asset=EURQ,
        asset_symbol="EURQ",
        amount=Decimal("0.100000"),
        currency="EUR",
        pay_to="0x" + "ab" * 20,
        resource="https://user:pw@merchant.test/paid",
        paid_at=WHEN,
        proof=PROOF,
        tx_hash="0xabc",
    )
    shown = repr(receipt)
    assert shown.startswith("PaymentReceipt(0.10 EUR (EURQ) on evm-permit eip155:137, ")
    assert EURQ not in shown and PROOF not in shown and "pw" not in shown
    assert "tx_hash='0xabc'" in shown
    assert receipt.to_json()["assetSymbol"] == "EURQ"
    unnamed = PaymentReceipt(**{**_receipt_fields(receipt), "asset_symbol": None})
    assert f"asset={EURQ!r}" in repr(unnamed)


def _receipt_fields(receipt: PaymentReceipt) -> dict[str, Any]:
    return {name: getattr(receipt, name) for name in PaymentReceipt.__dataclass_fields__}


# --- a quote ---------------------------------------------------------------------------------


def _quote() -> Quote:
    first = QuoteEntry(0, {}, euro_intent("0.100000"), payable=True, first=True)
    other = QuoteEntry(
        1,
        {"network": "eip155:1", "payTo": "0xabc"},
        None,
        payable=False,
        reason="unknown_asset",
        message="asset <0x12> is not known",
    )
    return Quote("https://user:pw@merchant.test/paid", 402, [first, other])


def test_a_quote_is_one_short_line() -> None:
    quote = _quote()
    assert repr(quote) == (
        "Quote(https://user@merchant.test/paid: 402, 2 entries, 1 payable; "
        "first #0: 0.10 EUR (EURO) on euro)"
    )
    assert repr(quote.entries[0]) == (
        "QuoteEntry(#0 payable, first: 0.10 EUR (EURO) on euro provider:mainnet)"
    )
    assert repr(quote.entries[1]) == (
        "QuoteEntry(#1 not payable: unknown_asset: asset <0x12> is not known)"
    )
    assert repr(Quote("https://merchant.test/free", 200, [])) == (
        "Quote(https://merchant.test/free: 200, free)"
    )


def test_a_quote_is_a_table_in_a_notebook() -> None:
    table = _quote()._repr_html_()
    assert table.startswith("<table>") and table.count("<tr>") == 3  # a header and 2 rows
    assert "0.10 EUR (EURO)" in table and "yes, first" in table
    assert html.escape("asset <0x12> is not known") in table and "<0x12>" not in table
    assert "pw" not in table


# --- a journaled payment, and its recovery ---------------------------------------------------


def test_a_journal_record_is_one_short_line_without_its_proof() -> None:
    record = _record()
    assert repr(record).startswith(
        "JournalRecord(3f9c2a1b7e4d, delivered: 0.10 EUR (EURQ) on evm-permit eip155:137, GET "
    )
    assert PROOF not in repr(record) and "pw" not in repr(record)
    assert _record(delivered=False).state == "paid, not delivered"
    assert _record(outcome="unknown", unrecoverable="ask the provider").state == "unrecoverable"
    assert _record(outcome="pending", in_progress=True).state == "in progress"


def test_a_journal_record_is_a_table_in_a_notebook() -> None:
    table = _record(error="refused by https://user:pw@merchant.test/x")._repr_html_()
    assert "<th" in table and "0.10 EUR (EURQ)" in table and "delivered" in table
    assert PROOF not in table and "pw" not in table
    assert EURQ in table  # the asset's address, on its own row


def test_a_recovery_tells_one_truth() -> None:
    response = httpx.Response(200, request=httpx.Request("GET", "https://merchant.test/paid"))
    recovery = Recovery(_record(), "delivered", "the resource was delivered", response)
    shown = repr(recovery)
    assert shown == (
        "Recovery(delivered: 3f9c2a1b7e4d, 0.10 EUR (EURQ) on evm-permit, answered 200: "
        "the resource was delivered)"
    )
    # Its record is not printed next to it, with an outcome of its own.
    assert "outcome" not in shown and "pending" not in shown and "delivered=False" not in shown
    table = recovery._repr_html_()
    assert "the resource was delivered" in table and "HTTP 200" in table
    assert PROOF not in table and "pw" not in table


def test_the_ledger_is_a_table_in_a_notebook() -> None:
    from x402_client import PaymentLedger

    ledger = PaymentLedger()
    ledger.open(euro_intent("0.100000", resource="https://user:pw@merchant.test/a")).finish("paid")
    ledger.open(euro_intent("0.25")).finish("failed", error="refused")
    table = ledger._repr_html_()
    assert table.count("<tr>") == 3 and "2 payments" in table
    assert "0.10 EUR (EURO)" in table and "0.25 EUR (EURO)" in table and "failed" in table
    assert "pw" not in table
