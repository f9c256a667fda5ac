"""Money is shown one way in both front ends: trailing zeros trimmed to at least two
decimals, the currency, and the asset's symbol where it is not the currency."""

from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal

import pytest

from tests.factories import euro_intent
from x402_client import LedgerEntry, PaymentOutcomeUnknown, PaymentReceipt
from x402_client._flow.quote import Quote, QuoteEntry
from x402_client._protocol.amounts import format_money, from_atomic
from x402_client.cli._render import _payment_row, _receipt_rows
from x402_client.mcp._results import _add_payments_made, _error_json

CHAIN_AMOUNT = from_atomic(100_000)  # Decimal("0.100000"), as chains and journals keep it


@pytest.mark.parametrize(
    ("amount", "currency", "symbol", "shown"),
    [
        (Decimal("0.100000"), "EUR", None, "0.10 EUR"),
        (Decimal("0.300000"), "EUR", "EURQ", "0.30 EUR (EURQ)"),
        (Decimal("0.123456"), "USD", "USDC", "0.123456 USD (USDC)"),
        (Decimal("5"), "EUR", "EUR", "5.00 EUR"),
        (Decimal("0.000000000000000001"), "EUR", "EURC", "0.000000000000000001 EUR (EURC)"),
        (Decimal("1.50"), None, None, "1.50"),
    ],
)
def test_format_money(amount, currency, symbol, shown) -> None:
    assert format_money(amount, currency, symbol) == shown


def test_a_bridge_receipt_names_its_chain_transaction_once_and_its_symbol() -> None:
    receipt = PaymentReceipt(
        rail="bridge",
        scheme="exact",
        network="ledgera:mainnet",
        asset="2768422954",
        amount=Decimal("0.300000"),
        currency="EUR",
        pay_to="MERCHANTADDRESS",
        resource="http://merchant.test/paid/bridge",
        paid_at=datetime(2026, 1, 1, tzinfo=timezone.utc),
        proof="PROOF",
        transaction_code="T1",
        blockchain_tx_id="TXID",
        tx_hash="TXID",
    )
    assert _receipt_rows(receipt, "EURQ") == [
        ("rail", "bridge"),
        ("scheme / network", "exact / ledgera:mainnet"),
        ("amount", "0.30 EUR (EURQ)"),
        ("asset", "2768422954"),
        ("paid to", "MERCHANTADDRESS"),
        ("transaction code", "T1"),
        ("chain tx id", "TXID"),
    ]


def test_the_payments_table_trims_a_journaled_chain_amount() -> None:
    from x402_client._state.sqlite_store import JournalRecord

    fields = {name: None for name in JournalRecord.__dataclass_fields__}
    record = JournalRecord(
        **{
            **fields,
            "id": "3f9c2a77",
            "created_at": datetime(2026, 1, 1, tzinfo=timezone.utc),
            "amount": CHAIN_AMOUNT,
            "currency": "EUR",
            "rail": "bridge",
            "asset_symbol": "EURQ",
            "outcome": "paid",
            "delivered": True,
            "in_progress": False,
            "resource": "http://merchant.test/paid",
        }
    )
    row = _payment_row(record)
    assert row[2:5] == ["0.10 EUR", "bridge", "paid"]


def test_mcp_results_never_show_six_decimals() -> None:
    intent = euro_intent(CHAIN_AMOUNT)
    error = _error_json(PaymentOutcomeUnknown("lost", intent=intent))
    assert error["intent"]["amount"] == "0.10"
    entry = LedgerEntry(intent=intent, proof="p", payment_request_code="pr_1")
    entry.finish("unknown")
    made = {"type": "ReadError", "moneyMoved": False, "summary": "No money moved: x"}
    _add_payments_made(made, [entry])
    assert made["payments"][0]["amount"] == "0.10"

    from x402_client._frontend import common as _frontend

    quote = Quote(
        url="http://merchant.test/paid",
        status_code=402,
        entries=[
            QuoteEntry(
                index=0,
                payable=True,
                first=True,
                reason=None,
                message=None,
                intent=intent,
                accept={},
            )
        ],
    )
    assert quote.to_json()["entries"][0]["amount"] == "0.100000"
    assert _frontend.quote_json(quote)["entries"][0]["amount"] == "0.10"


def _unpayable(accept: dict[str, object]) -> QuoteEntry:
    return QuoteEntry(
        index=0, accept=accept, intent=None, payable=False, reason="unpayable", message="why"
    )


@pytest.mark.parametrize(
    ("accept", "price"),
    [
        # a token the client knows: its decimals and currency turn atomic units into money
        (
            {
                "scheme": "exact",
                "network": "eip155:8453",
                "asset": "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
                "maxAmountRequired": "100000",
            },
            "0.10 USD (USDC)",
        ),
        (
            {
                "scheme": "exact",
                "network": "eip155:8453",
                "asset": "0x60a3E35Cc302bFA44Cb288Bc5a4F316Fdb1adb42",
                "amount": "1500000",
            },
            "1.50 EUR (EURC)",
        ),
        ({"scheme": "euro", "asset": "EURO", "amount": "0.1"}, "0.10 EURO"),
        # decimals unknown: no price rather than a count of atomic units
        (
            {
                "scheme": "exact",
                "network": "eip155:137",
                "asset": "0x" + "5f" * 20,
                "maxAmountRequired": "100000",
            },
            "?",
        ),
        ({"scheme": "exact", "network": "ledgera:mainnet", "asset": "27", "amount": "5"}, "?"),
    ],
)
def test_a_quote_never_shows_atomic_units_as_a_price(accept, price) -> None:
    from x402_client.cli._render import _quote_row

    assert _quote_row(_unpayable(accept))[1] == price
