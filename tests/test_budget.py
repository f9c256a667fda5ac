"""Cumulative budgets, the selection policy and the ledger, with real servers."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
from decimal import Decimal
from typing import Any

import anyio
import httpx
import pytest

from tests.conftest import payments
from x402_client import (
    Budget,
    BudgetExceeded,
    InMemoryBudgetStore,
    InsufficientFunds,
    PaymentIntent,
    RedisBudgetStore,
    payment_ledger,
    with_eur_payment,
)
from x402_client._budget import Budgets
from x402_client._challenge import prefer_order
from x402_client.sandbox import EuroOffer, Price, Sandbox

pytestmark = pytest.mark.anyio


def _intent(amount: str, currency: str = "EUR", **kw: Any) -> PaymentIntent:
    fields: dict[str, Any] = {
        "rail": "euro",
        "scheme": "euro",
        "network": "provider:mainnet",
        "asset": "EURO",
        "asset_symbol": "EURO",
        "amount": Decimal(amount),
        "currency": currency,
        "pay_to": "ACC_X",
        "resource": "http://x/",
    }
    fields.update(kw)
    return PaymentIntent(**fields)


async def test_rolling_window_forgets_old_spending():
    now = [1000.0]
    budgets = Budgets([Budget("0.30", window=60)], InMemoryBudgetStore(clock=lambda: now[0]))
    held = [await budgets.reserve(_intent("0.10")) for _ in range(3)]
    with pytest.raises(BudgetExceeded, match=r"0\.30 EUR per 60 s"):
        await budgets.reserve(_intent("0.10"))
    now[0] += 61
    assert await budgets.reserve(_intent("0.10"))
    await budgets.release(held[0])  # releasing an expired reservation is harmless


async def test_released_reservations_are_given_back_and_currencies_never_mix():
    budgets = Budgets([Budget("0.10"), Budget("1", currency="USD")], None)
    held = await budgets.reserve(_intent("0.10"))
    with pytest.raises(BudgetExceeded):
        await budgets.reserve(_intent("0.01"))
    await budgets.release(held)
    assert await budgets.reserve(_intent("0.10"))
    # a USD intent counts against the USD budget only
    assert await budgets.reserve(_intent("1.00", currency="USD"))
    with pytest.raises(BudgetExceeded):
        await budgets.reserve(_intent("0.01", currency="USD"))


async def test_all_budgets_or_none():
    store = InMemoryBudgetStore()
    budgets = Budgets([Budget("1.00", name="a"), Budget("0.15", name="b")], store)
    await budgets.reserve(_intent("0.10"))
    with pytest.raises(BudgetExceeded):
        await budgets.reserve(_intent("0.10"))
    # the failed attempt did not leave a reservation in budget "a"
    assert await store.spent(Budget("1.00", name="a").key, None) == 100_000


async def test_500_concurrent_requests_pay_exactly_the_budget(sandbox, options_for):
    payer = sandbox.bank.open_account("100.00")
    options = options_for(payer, budgets=Budget("1.00"))  # ten payments of 0.10
    outcomes: list[str] = []
    async with with_eur_payment(httpx.AsyncClient(timeout=60), options) as client:

        async def fetch() -> None:
            try:
                response = await client.get(sandbox.url("/weather"))
                outcomes.append(str(response.status_code))
            except BudgetExceeded:
                outcomes.append("budget")

        async with anyio.create_task_group() as group:
            for _ in range(500):
                group.start_soon(fetch)
        ledger = payment_ledger(client)
    assert outcomes.count("200") == 10
    assert outcomes.count("budget") == 490
    assert len(payments(sandbox, payer)) == 10
    assert sandbox.balance(payer) == Decimal("99.00")
    assert ledger.total("EUR") == Decimal("1.00")
    assert len(ledger.entries("failed")) == 490 and len(ledger.entries("paid")) == 10


async def test_failed_payments_release_their_reservation(sandbox, options_for):
    poor = sandbox.bank.open_account("0.05")
    options = options_for(poor, budgets=Budget("0.10"))
    async with with_eur_payment(httpx.AsyncClient(), options) as client:
        for _ in range(3):  # each attempt fails at the payment API and gives the budget back
            with pytest.raises(InsufficientFunds):
                await client.get(sandbox.url("/weather"))
        sandbox.bank.accounts[poor.code].balance += Decimal("1")
        assert (await client.get(sandbox.url("/weather"))).status_code == 200
        with pytest.raises(BudgetExceeded):
            await client.get(sandbox.url("/weather"))
        entries = payment_ledger(client).entries()
    assert [e.outcome for e in entries] == ["failed"] * 3 + ["paid", "failed"]
    assert "InsufficientFunds" in (entries[0].error or "")
    assert [s.step for s in entries[3].steps][:4] == ["intent", "reserved", "paying", "proof"]


async def test_selector_and_preference_choose_among_payable_entries():
    prices = {"/paid/two": Price(Decimal("0.20"), "two offers")}
    async with Sandbox(prices=prices) as sandbox:
        cheap = sandbox.bank.open_account("0")
        # a second euro offer (another receiving account) listed after the default one
        sandbox.offers.append(EuroOffer(lambda: sandbox.mcp_url, cheap.api_key, cheap.code))
        options = sandbox.payment_options(selector=lambda intents: intents[-1])
        async with with_eur_payment(httpx.AsyncClient(), options) as client:
            response = await client.get(sandbox.url("/paid/two"))
        assert response.extensions["x402_payment"].pay_to == cheap.code
        assert sandbox.balance(cheap) == Decimal("0.20")
        refuse_all = sandbox.payment_options(selector=lambda intents: None)
        async with with_eur_payment(httpx.AsyncClient(), refuse_all) as client:
            with pytest.raises(Exception, match="selector chose none"):
                await client.get(sandbox.url("/paid/two"))
        assert len(payments(sandbox, sandbox.payer)) == 1


def test_prefer_order_is_stable_and_matches_rail_network_or_symbol():
    euro = _intent("0.10")
    evm = _intent(
        "0.10", rail="evm-permit", scheme="exact", network="eip155:137", asset_symbol="EURQ"
    )
    usd = _intent(
        "0.10",
        rail="evm-permit",
        scheme="exact",
        network="eip155:1",
        asset_symbol="USDQ",
        currency="USD",
    )
    intents = [euro, evm, usd]
    assert prefer_order(intents, []) == [0, 1, 2]
    assert prefer_order(intents, ["eip155:1"]) == [2, 0, 1]
    assert prefer_order(intents, ["EURQ", "euro"]) == [1, 0, 2]
    assert prefer_order(intents, ["evm-permit"]) == [1, 2, 0]


# --- a budget shared by several processes through a real Redis ---------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def redis_url(tmp_path):
    server = shutil.which("redis-server")
    if server is None:
        if os.environ.get("CI"):
            pytest.fail("redis-server is required in CI (.ci/run installs it)")
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    port = _free_port()
    process = subprocess.Popen(
        [
            server,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.05)
    yield f"redis://127.0.0.1:{port}/0"
    process.terminate()
    process.wait(10)


AGENT = textwrap.dedent("""
    import asyncio, sys, httpx
    from x402_client import Budget, BudgetExceeded, RedisBudgetStore, with_eur_payment

    async def main(redis_url, api_url, api_key, account, url):
        store = RedisBudgetStore(redis_url)
        options = {"api_key": api_key, "from_account": account, "api_url": api_url,
                   "budgets": [Budget("1.00", name="fleet")], "budget_store": store}
        paid = refused = 0
        async with with_eur_payment(httpx.AsyncClient(timeout=60), options) as client:
            async def fetch():
                nonlocal paid, refused
                try:
                    if (await client.get(url)).status_code == 200:
                        paid += 1
                except BudgetExceeded:
                    refused += 1
            await asyncio.gather(*(fetch() for _ in range(30)))
        await store.aclose()
        print(paid, refused)

    asyncio.run(main(*sys.argv[1:]))
""")


async def test_redis_budget_is_shared_by_a_fleet_of_processes(sandbox, redis_url):
    payer = sandbox.bank.open_account("100.00")
    args = [redis_url, sandbox.payment_api_url, payer.api_key, payer.code, sandbox.url("/weather")]
    results: list[tuple[int, ...]] = []

    async def agent() -> None:
        done = await anyio.run_process([sys.executable, "-c", AGENT, *args], check=False)
        assert done.returncode == 0, done.stderr.decode()
        results.append(tuple(int(x) for x in done.stdout.decode().split()))

    async with anyio.create_task_group() as group:
        for _ in range(3):
            group.start_soon(agent)
    assert sum(paid for paid, _ in results) == 10
    assert sum(refused for _, refused in results) == 80
    assert len(payments(sandbox, payer)) == 10
    assert sandbox.balance(payer) == Decimal("99.00")
    store = RedisBudgetStore(redis_url)
    try:
        assert await store.spent(Budget("1.00", name="fleet").key, None) == 1_000_000
    finally:
        await store.aclose()
