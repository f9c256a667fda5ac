"""A limit without a currency limits every currency.

One amount given as the cap (in the options, the environment or per request) caps euros
and dollars alike; a mapping of caps pays only the currencies it names; once any budget is
set, an offer in a currency that no budget covers is refused before any request is made
for it. Dollar offers here are standard x402 `exact` entries in Circle's USDC, which an EVM
key alone can pay (an EIP-3009 signature: no chain, no RPC).
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import httpx
import pytest

from x402_client import (
    AmountLimitExceeded,
    Budget,
    BudgetExceeded,
    ConfigurationError,
    EvmOptions,
    PaymentOptions,
    PaymentTransport,
    payments,
)
from x402_client._protocol.policy import effective_cap

pytestmark = pytest.mark.anyio

EVM_KEY = "0x" + "42" * 32
BASE_USDC = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"
PAY_TO = "0x" + "ab" * 20


def usd_entry(atomic: str = "100000") -> dict[str, Any]:
    """A standard x402 v1 `exact` entry: `atomic` units of USDC on Base (0.10 USD)."""
    return {
        "scheme": "exact",
        "network": "base",
        "maxAmountRequired": atomic,
        "resource": "http://merchant.test/paid",
        "description": "paid",
        "mimeType": "application/json",
        "payTo": PAY_TO,
        "maxTimeoutSeconds": 300,
        "asset": BASE_USDC,
        "extra": {"name": "USD Coin", "version": "2"},
    }


class Merchant:
    """Answers 402 with `entries` (a v1 challenge) and 200 to any request carrying a proof;
    `paid` lists the requests that carried one. Over `httpx.MockTransport` (`transport()`)
    or real sockets (it is an ASGI app)."""

    def __init__(self, *entries: dict[str, Any]) -> None:
        self.entries = list(entries) or [usd_entry()]
        self.requests = 0
        self.paid: list[str] = []

    def answer(self, headers: dict[str, str]) -> tuple[int, bytes]:
        self.requests += 1
        proof = headers.get("x-payment") or headers.get("payment-signature")
        if proof is None:
            return 402, json.dumps({"x402Version": 1, "accepts": self.entries}).encode()
        self.paid.append(proof)
        return 200, b'{"paid": true}'

    def transport(self) -> httpx.MockTransport:
        def handler(request: httpx.Request) -> httpx.Response:
            status, body = self.answer({k.lower(): v for k, v in request.headers.items()})
            return httpx.Response(status, content=body, headers={"content-type": "text/json"})

        return httpx.MockTransport(handler)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        status, body = self.answer(headers)
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def evm_options(**overrides: Any) -> PaymentOptions:
    return PaymentOptions(evm=EvmOptions(private_key=EVM_KEY), **overrides)


async def fetch(merchant: Merchant, options: PaymentOptions, **kwargs: Any) -> httpx.Response:
    transport = PaymentTransport(merchant.transport(), options)
    async with httpx.AsyncClient(transport=transport) as client:
        return await client.get("http://merchant.test/paid", **kwargs)


# --- caps ---------------------------------------------------------------------------------


async def test_one_amount_caps_dollars_as_well_as_euros():
    options = evm_options(max_amount_per_payment="0.05")
    assert options.max_amount_per_payment == {"EUR": Decimal("0.05"), "USD": Decimal("0.05")}
    merchant = Merchant(usd_entry("100000"))
    with pytest.raises(AmountLimitExceeded, match=r"0\.10 USD is above max_amount_per_payment"):
        await fetch(merchant, options)
    assert merchant.paid == [] and merchant.requests == 1
    assert payments(options).ledger.entries() == []


def test_one_amount_in_the_environment_caps_every_currency():
    options = PaymentOptions.from_env(
        {"X402_EUR_EVM_PRIVATE_KEY": EVM_KEY, "X402_EUR_MAX_AMOUNT_PER_PAYMENT": "0.05"}
    )
    assert options.max_amount_per_payment == {"EUR": Decimal("0.05"), "USD": Decimal("0.05")}


async def test_a_mapping_of_caps_pays_only_the_currencies_it_names():
    options = evm_options(max_amount_per_payment={"eur": "0.50"})
    assert options.max_amount_per_payment == {"EUR": Decimal("0.50")}
    merchant = Merchant(usd_entry("10000"))
    with pytest.raises(AmountLimitExceeded) as caught:
        await fetch(merchant, options)
    (skipped,) = caught.value.skipped
    assert skipped.reason.value == "no_cap"
    assert "names no cap for USD" in skipped.message and "add USD to it" in skipped.message
    assert merchant.paid == []
    # Naming it pays it.
    both = evm_options(max_amount_per_payment={"EUR": "0.50", "USD": "0.50"})
    assert (await fetch(merchant, both)).status_code == 200
    assert len(merchant.paid) == 1


def test_a_cap_in_a_currency_that_cannot_be_paid_is_a_mistake():
    for mapping in ({"GBP": "1"}, {"EURQ": "1"}):
        with pytest.raises(ConfigurationError, match="must be EUR or USD"):
            PaymentOptions(max_amount_per_payment=mapping)


async def test_a_per_request_cap_refuses_a_dollar_offer_above_it():
    merchant = Merchant(usd_entry("100000"))
    options = evm_options()
    limited = {"x402": {"max_amount_per_payment": "0.05"}}
    with pytest.raises(AmountLimitExceeded):
        await fetch(merchant, options, extensions=limited)
    assert merchant.paid == []


def test_a_per_request_cap_without_a_currency_lowers_every_currency():
    from x402_client._protocol.rail_interface import ANY_CURRENCY

    caps = {"EUR": Decimal("1.00"), "USD": Decimal("0.50")}
    plain = {ANY_CURRENCY: Decimal("0.20")}
    assert effective_cap("USD", caps, plain) == Decimal("0.20")
    assert effective_cap("EUR", caps, plain) == Decimal("0.20")
    assert effective_cap("USD", caps, {ANY_CURRENCY: Decimal("5")}) == Decimal("0.50")
    # A per-request mapping names the currencies that request may pay.
    assert effective_cap("USD", caps, {"EUR": Decimal("0.20")}) is None
    # It never makes payable what the options do not cap.
    assert effective_cap("USD", {"EUR": Decimal("1")}, plain) is None


# --- budgets ------------------------------------------------------------------------------


async def test_a_budget_in_euros_refuses_dollar_offers_until_one_covers_dollars():
    merchant = Merchant(usd_entry("100000"))
    euros_only = evm_options(budgets=[Budget("0.15", window=86400)])
    with pytest.raises(BudgetExceeded) as caught:
        await fetch(merchant, euros_only)
    error = caught.value
    assert error.money_moved is False
    (skipped,) = error.skipped
    assert skipped.reason.value == "no_budget"
    assert "no budget covers USD" in skipped.message
    assert 'Budget("2.00", currency="USD")' in skipped.message
    assert "--budget 2.00USD/24h" in skipped.message
    assert merchant.paid == [] and merchant.requests == 1
    assert payments(euros_only).ledger.entries() == []

    covered = evm_options(budgets=[Budget("0.15", window=86400), Budget("0.15", currency="USD")])
    assert (await fetch(merchant, covered)).status_code == 200
    assert len(merchant.paid) == 1
    dollars, euros = sorted(await payments(covered).budgets(), key=lambda s: s.budget.currency)[
        ::-1
    ]
    assert (dollars.budget.currency, dollars.spent) == ("USD", Decimal("0.10"))
    assert euros.spent == Decimal("0")


async def test_a_quote_says_a_dollar_offer_has_no_budget():
    merchant = Merchant(usd_entry("100000"))
    options = evm_options(budgets=[Budget("1.00")])
    response = httpx.Response(402, content=merchant.answer({})[1])
    (entry,) = (await payments(options).quote(response)).entries
    assert not entry.payable and entry.reason == "no_budget"
    assert entry.message is not None and "no budget covers USD" in entry.message


async def test_budget_status_lists_every_currency_the_options_can_pay():
    from x402_client._protocol.budgets import BudgetReport

    options = PaymentOptions(
        api_key="k",
        from_account="ACC_P",
        api_url="https://api.example",
        evm=EvmOptions(private_key=EVM_KEY),
        max_amount_per_payment="0.50",
        budgets=[Budget("5.00", window=86400)],
    )
    report = await payments(options).budgets()
    assert isinstance(report, BudgetReport)
    (status,) = report  # a list of the budgets, as before
    assert status.budget.currency == "EUR"
    euros, dollars = report.currencies
    assert (euros.currency, euros.max_amount_per_payment) == ("EUR", Decimal("0.50"))
    assert euros.budgeted and euros.payable and euros.remaining == Decimal("5.00")
    assert euros.note is None and euros.budgets == (status,)
    assert (dollars.currency, dollars.max_amount_per_payment) == ("USD", Decimal("0.50"))
    assert not dollars.budgeted and not dollars.payable and dollars.remaining is None
    assert dollars.note is not None and "--budget 2.00USD/24h" in dollars.note

    # Without an EVM key only euros can be paid; without budgets every capped one is payable.
    managed = PaymentOptions(api_key="k", from_account="ACC_P", api_url="https://api.example")
    assert [c.currency for c in (await payments(managed).budgets()).currencies] == ["EUR"]
    assert [c.payable for c in (await payments(evm_options()).budgets()).currencies] == [True, True]


def test_a_budget_in_a_currency_that_cannot_be_paid_is_a_mistake():
    with pytest.raises(ConfigurationError, match="must be EUR or USD"):
        Budget("1.00", currency="EURO")


# --- another currency once one budget is spent ---------------------------------------------

BASE_EURC = "0x60a3E35Cc302bFA44Cb288Bc5a4F316Fdb1adb42"


def eur_entry(atomic: str = "100000") -> dict[str, Any]:
    """`atomic` units of Circle's EURC on Base (0.10 EUR), payable with an EVM key alone."""
    return {**usd_entry(atomic), "asset": BASE_EURC, "extra": {"name": "EURC", "version": "2"}}


async def test_a_payment_in_another_currency_once_a_budget_is_spent_is_announced() -> None:
    seen: list[Any] = []

    def approve(intent: Any) -> bool:
        seen.append(intent)
        return True

    budgets = [Budget("0.15", currency="EUR", window="24h"), Budget("2.00", currency="USD")]
    options = evm_options(budgets=budgets, on_before_payment=approve)
    merchant = Merchant(eur_entry(), usd_entry())
    transport = PaymentTransport(merchant.transport(), options)
    async with httpx.AsyncClient(transport=transport) as client:
        for _ in range(2):
            assert (await client.get("http://merchant.test/paid")).status_code == 200
    assert [(i.currency, i.instead_of) for i in seen] == [
        ("EUR", None),
        ("USD", "budget 0.15 EUR/24h: 0.10 EUR spent, this payment 0.10 EUR"),
    ]
