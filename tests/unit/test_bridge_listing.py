"""Which listed transactions may be a bridge payment the journal holds no code for, and
when the payment API's list is whole (pure logic; the crash matrix runs it end to end)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest

from x402_client._flow.recovery import BRIDGE_CLOCK_SKEW, _bridge_payments, _pays
from x402_client._protocol.errors import PaymentAPIError
from x402_client._protocol.provider import TransactionRecord
from x402_client._state.payment_api import transaction_list
from x402_client._state.sqlite_store import JournalRecord

OPENED = datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc)
PAY_TO = "MERCHANTCHAINADDRESS"
ACCOUNT = "ACC_PAYER"


def _record() -> JournalRecord:
    values: dict[str, Any] = {
        "id": "b" * 32,
        "created_at": OPENED,
        "updated_at": OPENED,
        "rail": "bridge",
        "scheme": "exact",
        "network": "ledgera:mainnet",
        "asset": "2768422954",
        "asset_symbol": "EURQ",
        "amount": Decimal("0.100000"),
        "currency": "EUR",
        "pay_to": PAY_TO,
        "resource": "http://127.0.0.1/paid",
        "atomic_amount": 100000,
        "description": None,
        "accept": {},
        "request_method": "GET",
        "request_url": "http://127.0.0.1/paid",
        "request_headers": (),
        "request_body": None,
        "request_body_size": None,
        "request_body_omitted": False,
        "reservations": (),
        "payment_request_code": None,
        "transaction_code": None,
        "proof": None,
        "blockchain_tx_id": None,
        "tx_hash": None,
        "outcome": "pending",
        "delivered": False,
        "error": None,
        "unrecoverable": None,
        "steps": (),
    }
    return JournalRecord(**values)


def _item(code: str = "QP1", **fields: Any) -> TransactionRecord:
    values: dict[str, Any] = {
        "transactionCode": code,
        "fromAccountCode": ACCOUNT,
        "toAccountCode": PAY_TO,
        "amount": Decimal("0.10"),
        "type": "BlockchainAddress",
        "created": (OPENED + timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    values.update(fields)
    return TransactionRecord.model_validate({k: v for k, v in values.items() if v is not None})


def _codes(*items: TransactionRecord) -> list[str]:
    return [i.transaction_code for i in _bridge_payments(_record(), ACCOUNT, items)]


def test_a_payment_of_the_amount_to_pay_to_since_the_record_was_opened_may_be_it() -> None:
    assert _codes(_item()) == ["QP1"]
    assert _pays(_item(), _record())


@pytest.mark.parametrize(
    "fields",
    [
        {"type": "PaymentRequestCode"},
        {"fromAccountCode": "ACC_OTHER"},
        {"toAccountCode": "SOMEONEELSE"},
        {"amount": Decimal("0.11")},
        {"created": (OPENED - BRIDGE_CLOCK_SKEW - timedelta(seconds=1)).isoformat()},
    ],
    ids=["another-type", "another-payer", "another-payee", "another-amount", "made-before"],
)
def test_a_payment_a_field_tells_apart_is_not_it(fields: dict[str, Any]) -> None:
    assert _codes(_item(**fields)) == []


def test_a_payment_stamped_within_the_clock_skew_before_the_record_may_be_it() -> None:
    stamped = (OPENED - BRIDGE_CLOCK_SKEW + timedelta(seconds=1)).replace(tzinfo=None)
    assert _codes(_item(created=stamped.isoformat())) == ["QP1"]  # naive: UTC


@pytest.mark.parametrize("missing", ["type", "toAccountCode", "amount"])
def test_a_field_left_out_counts_as_a_match_but_is_no_proof(missing: str) -> None:
    item = _item(**{missing: None})
    assert _codes(item, _item("QP2", created="not a time")) == ["QP1", "QP2"]
    assert not _pays(item, _record())


ONE = {"transactionCode": "QP1"}


@pytest.mark.parametrize(
    ("body", "whole"),
    [
        ({"value": {"items": [ONE], "total": 1, "totalPages": 1}}, True),
        ({"value": {"items": [ONE], "total": 2}}, False),
        ({"items": [ONE], "totalPages": 2}, False),
        ({"items": [ONE], "totalPages": 1}, True),
        ({"items": [], "total": 0}, True),
        # without a total: whole only when short of the page size it names
        ({"value": {"items": [ONE], "pageSize": 2}}, True),
        ({"value": {"items": [ONE, ONE], "pageSize": 2}}, False),
        # nothing says the page is whole: it may have been cut short
        ({"value": {"items": [ONE]}}, False),
        ({"value": {"items": []}}, False),
        ([ONE], False),
        ([], False),
        # a count that is no whole number says nothing
        ({"items": [], "total": "0"}, False),
        ({"items": [], "total": 0, "totalPages": True}, False),
        ({"items": [], "pageSize": -1}, False),
        # an item that is no transaction record may have been the payment
        ({"value": {"items": [ONE, {"x": 1}], "total": 2}}, False),
    ],
)
def test_the_list_is_whole_only_when_the_answer_says_so(body: Any, whole: bool) -> None:
    listing = transaction_list(body)
    assert listing.complete is whole
    assert all(item.transaction_code == "QP1" for item in listing.items)


@pytest.mark.parametrize("body", [{"value": {"nothing": []}}, None, "<html>", {"value": []}])
def test_an_answer_without_a_list_is_an_error(body: Any) -> None:
    with pytest.raises(PaymentAPIError):
        transaction_list(body)
