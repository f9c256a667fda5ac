"""Prices in any declared precision work with caps and budgets.

A token declared with 18 decimals has prices far finer than a budget's unit (0.000001):
the cap compares the exact price, the budget counts it rounded up (never less than was
paid), and no conversion problem ever leaves the payment path untyped.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from tests.flow.test_every_currency import EVM_KEY, Merchant, fetch, usd_entry
from x402_client import (
    AmountLimitExceeded,
    Asset,
    Budget,
    BudgetExceeded,
    ConfigurationError,
    EvmOptions,
    PaymentOptions,
    payments,
)
from x402_client._protocol.amounts import AmountError

pytestmark = pytest.mark.anyio

TOKEN = "0x5FbDB2315678afecb367f032d93F642f64180aa3"
FINE = Asset(chain_id=8453, address=TOKEN, symbol="FINE", currency="EUR", decimals=18)


def fine_entry(atomic: str) -> dict[str, Any]:
    """`atomic` units of an 18-decimal euro token on Base."""
    return {**usd_entry(atomic), "asset": TOKEN, "extra": {"name": "Fine", "version": "1"}}


def options(tmp_path: Path | None = None, **overrides: Any) -> PaymentOptions:
    return PaymentOptions(
        evm=EvmOptions(private_key=EVM_KEY),
        assets=[FINE],
        state_path=None if tmp_path is None else tmp_path / "state.sqlite3",
        **overrides,
    )


@pytest.mark.parametrize("store", ["memory", "state file"])
async def test_a_price_finer_than_the_budget_unit_is_paid_and_counted_rounded_up(
    store: str, tmp_path: Path
):
    paying = options(tmp_path if store == "state file" else None, budgets=[Budget("1.00")])
    merchant = Merchant(fine_entry("1"))  # 0.000000000000000001 EUR
    response = await fetch(merchant, paying)
    assert response.status_code == 200 and len(merchant.paid) == 1
    receipt = response.extensions["x402_payment"]
    assert receipt.amount == Decimal("0.000000000000000001") and receipt.currency == "EUR"
    (status,) = await payments(paying).budgets()
    assert status.spent == Decimal("0.000001")  # rounded up, never down
    assert status.remaining == Decimal("0.999999")

    merchant.entries = [fine_entry("100000000000000001")]  # 0.100000000000000001 EUR
    assert (await fetch(merchant, paying)).status_code == 200
    (status,) = await payments(paying).budgets()
    assert status.spent == Decimal("0.100002")


async def test_the_cap_compares_the_exact_price():
    capped = options(max_amount_per_payment="0.10", budgets=[Budget("1.00")])
    merchant = Merchant(fine_entry("100000000000000001"))  # one unit above 0.10
    with pytest.raises(AmountLimitExceeded) as caught:
        await fetch(merchant, capped)
    assert caught.value.money_moved is False and merchant.paid == []
    merchant.entries = [fine_entry("99999999999999999")]  # one unit below 0.10
    assert (await fetch(merchant, capped)).status_code == 200
    (entry,) = [e for e in payments(capped).ledger.entries() if e.outcome == "paid"]
    assert entry.intent.amount == Decimal("0.099999999999999999")
    (status,) = await payments(capped).budgets()
    assert status.spent == Decimal("0.10")


async def test_rounding_up_can_only_make_a_budget_stricter():
    tight = options(budgets=[Budget("0.000001")])
    merchant = Merchant(fine_entry("500000000000"))  # 0.0000005 EUR: counted as 0.000001
    assert (await fetch(merchant, tight)).status_code == 200
    with pytest.raises(BudgetExceeded) as caught:
        await fetch(merchant, tight)
    assert caught.value.money_moved is False and len(merchant.paid) == 1


def test_to_atomic_ceiling():
    from x402_client._protocol.amounts import to_atomic_ceiling

    assert to_atomic_ceiling(Decimal("0.10")) == 100_000
    assert to_atomic_ceiling(Decimal("0.000000000000000001")) == 1
    assert to_atomic_ceiling(Decimal("0.1000001")) == 100_001
    assert to_atomic_ceiling(Decimal("0")) == 0
    assert to_atomic_ceiling(Decimal(10**21) / Decimal(10**36)) == 1
    for bad in (Decimal("NaN"), Decimal("Infinity"), Decimal("-0.1")):
        with pytest.raises(AmountError):
            to_atomic_ceiling(bad)


def test_a_budget_no_store_can_count_is_refused_when_it_is_made():
    with pytest.raises(ConfigurationError, match="budget store can count"):
        Budget("10000000000000")  # ten million million euros: beyond a 64-bit count of 10^-6
    assert Budget("9223372036854.775807").limit == Decimal("9223372036854.775807")
