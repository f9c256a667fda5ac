"""Cumulative budgets, the selection policy and the ledger, with real servers."""

from __future__ import annotations

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

from tests.conftest import bank_payments
from tests.factories import euro_intent
from tests.needs import require_program
from tests.sandboxes import payment_options
from tests.waiting import eventually, eventually_sync
from x402_client import (
    Budget,
    BudgetExceeded,
    InMemoryBudgetStore,
    InsufficientFunds,
    RedisBudgetStore,
    payments,
    with_eur_payment,
)
from x402_client._protocol.challenge import prefer_order
from x402_client._state.budget_stores import Budgets
from x402_eur_sandbox import EuroOffer, Price, Sandbox

pytestmark = pytest.mark.anyio


async def test_rolling_window_forgets_old_spending():
    now = [1000.0]
    budgets = Budgets([Budget("0.30", window=60)], InMemoryBudgetStore(clock=lambda: now[0]))
    held = [await budgets.reserve(euro_intent("0.10")) for _ in range(3)]
    with pytest.raises(
        BudgetExceeded, match=r"budget 0\.30 EUR/1m: 0\.30 EUR spent, this payment 0\.10 EUR"
    ):
        await budgets.reserve(euro_intent("0.10"))
    now[0] += 61
    assert await budgets.reserve(euro_intent("0.10"))
    await budgets.release(held[0])  # releasing an expired reservation is harmless


async def test_released_reservations_are_given_back_and_currencies_never_mix():
    budgets = Budgets([Budget("0.10"), Budget("1", currency="USD")], None)
    held = await budgets.reserve(euro_intent("0.10"))
    with pytest.raises(BudgetExceeded):
        await budgets.reserve(euro_intent("0.01"))
    await budgets.release(held)
    assert await budgets.reserve(euro_intent("0.10"))
    # a USD intent counts against the USD budget only
    assert await budgets.reserve(euro_intent("1.00", currency="USD"))
    with pytest.raises(BudgetExceeded):
        await budgets.reserve(euro_intent("0.01", currency="USD"))


async def test_all_budgets_or_none():
    store = InMemoryBudgetStore()
    budgets = Budgets([Budget("1.00", name="a"), Budget("0.15", name="b")], store)
    await budgets.reserve(euro_intent("0.10"))
    with pytest.raises(BudgetExceeded):
        await budgets.reserve(euro_intent("0.10"))
    # the failed attempt did not leave a reservation in budget "a"
    assert await store.spent(Budget("1.00", name="a").key, None) == 100_000


async def test_500_concurrent_requests_pay_exactly_the_budget(sandbox, options_for):
    payer = sandbox.bank.open_account("100.00")
    options = options_for(payer, budgets=Budget("1.00"))  # ten payments of 0.10
    outcomes: list[str] = []
    # 500 requests share the client's 100 connections: how long one waits for a free
    # connection says how busy the machine is, nothing about the budget (no pool timeout).
    unhurried = httpx.Timeout(60, pool=None)
    async with with_eur_payment(httpx.AsyncClient(timeout=unhurried), options) as client:

        async def fetch() -> None:
            try:
                response = await client.get(sandbox.url("/weather"))
                outcomes.append(str(response.status_code))
            except BudgetExceeded:
                outcomes.append("budget")

        async with anyio.create_task_group() as group:
            for _ in range(500):
                group.start_soon(fetch)
        ledger = payments(client).ledger
    assert outcomes.count("200") == 10
    assert outcomes.count("budget") == 490
    assert len(bank_payments(sandbox, payer)) == 10
    assert sandbox.balance(payer) == Decimal("99.00")
    assert ledger.total("EUR") == Decimal("1.00")
    # a request refused by the headroom check never opens an entry; one that lost the race
    # for the reservation itself opens a `failed` one
    assert len(ledger.entries("paid")) == 10
    assert len(ledger.entries("failed")) == len(ledger) - 10 <= 490


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
        entries = payments(client).ledger.entries()
    # the refusal over the budget happens at the headroom check, before any entry exists
    assert [e.outcome for e in entries] == ["failed"] * 3 + ["paid"]
    assert "InsufficientFunds" in (entries[0].error or "")
    steps = [s.step for s in entries[3].steps if s.step != "noted"]
    assert steps[:4] == ["intent", "reserved", "paying", "proof"]


async def test_selector_and_preference_choose_among_payable_entries():
    prices = {"/paid/two": Price(Decimal("0.20"), "two offers")}
    async with Sandbox(prices=prices) as sandbox:
        cheap = sandbox.bank.open_account("0")
        # a second euro offer (another receiving account) listed after the default one
        sandbox.offers.append(EuroOffer(lambda: sandbox.mcp_url, cheap.api_key, cheap.code))
        options = payment_options(sandbox, selector=lambda intents: intents[-1])
        async with with_eur_payment(httpx.AsyncClient(), options) as client:
            response = await client.get(sandbox.url("/paid/two"))
        assert response.extensions["x402_payment"].pay_to == cheap.code
        assert sandbox.balance(cheap) == Decimal("0.20")
        refuse_all = payment_options(sandbox, selector=lambda intents: None)
        async with with_eur_payment(httpx.AsyncClient(), refuse_all) as client:
            with pytest.raises(Exception, match="selector chose none"):
                await client.get(sandbox.url("/paid/two"))
        assert len(bank_payments(sandbox, sandbox.payer)) == 1


def test_prefer_order_is_stable_and_matches_rail_network_or_symbol():
    euro = euro_intent("0.10")
    evm = euro_intent(
        "0.10", rail="evm-permit", scheme="exact", network="eip155:137", asset_symbol="EURQ"
    )
    usd = euro_intent(
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
        return int(sock.getsockname()[1])


@pytest.fixture
def redis_url(tmp_path):
    server = require_program("redis-server", "apt-get install redis-server")
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

    def listening() -> bool:
        assert process.poll() is None, "redis-server ended"
        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", port)) == 0

    eventually_sync(listening, "redis-server to listen", every=0.05)
    yield f"redis://127.0.0.1:{port}/0"
    process.terminate()
    process.wait(10)


@pytest.fixture(params=["redis", "postgres"])
def shared_url(request: pytest.FixtureRequest) -> str:
    """Where a budget shared by several processes (and machines) lives: a Redis server's
    URL, or a new PostgreSQL database's DSN. The same tests run on both."""
    if request.param == "redis":
        return str(request.getfixturevalue("redis_url"))
    return str(request.getfixturevalue("postgres_dsn"))


def shared_store(url: str, prefix: str = "x402:budget:") -> Any:
    """The budget store at `url`: a `RedisBudgetStore`, or a `PostgresStore`."""
    if url.startswith("redis://"):
        return RedisBudgetStore(url, prefix=prefix)
    from x402_client.postgres import PostgresStore

    return PostgresStore(url)


AGENT = textwrap.dedent("""
    import asyncio, sys, httpx
    from x402_client import Budget, BudgetExceeded, RedisBudgetStore, with_eur_payment

    async def main(redis_url, api_url, api_key, account, url):
        if redis_url.startswith("redis://"):
            store = RedisBudgetStore(redis_url)
        else:
            from x402_client.postgres import PostgresStore

            store = PostgresStore(redis_url)
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


async def test_a_shared_budget_is_shared_by_a_fleet_of_processes(sandbox, shared_url):
    payer = sandbox.bank.open_account("100.00")
    args = [shared_url, sandbox.payment_api_url, payer.api_key, payer.code, sandbox.url("/weather")]
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
    assert len(bank_payments(sandbox, payer)) == 10
    assert sandbox.balance(payer) == Decimal("99.00")
    store = shared_store(shared_url)
    try:
        assert await store.spent(Budget("1.00", name="fleet").key, None) == 1_000_000
    finally:
        await store.aclose()


# --- running totals, headroom and status -------------------------------------------------


async def test_total_budget_keeps_a_running_total_not_an_entry_per_payment():
    store = InMemoryBudgetStore()
    key = Budget("1.00").key
    for _ in range(100_000):
        rid = await store.reserve(key, 100_000, 1_000_000, None)
        assert rid is not None and rid.startswith("t:100000:")
        await store.release(key, rid)
    for _ in range(3):  # committed: never released
        assert await store.reserve(key, 100_000, 1_000_000, None)
    assert await store.spent(key, None) == 300_000
    # one integer per key, nothing per payment
    assert store._totals == {key: 300_000}
    assert store._entries == {}


async def test_total_release_subtracts_exactly_what_was_reserved():
    store = InMemoryBudgetStore()
    key = "k:EUR:total"
    small = await store.reserve(key, 1, 10, None)
    big = await store.reserve(key, 9, 10, None)
    assert small and big
    assert await store.reserve(key, 1, 10, None) is None
    await store.release(key, big)
    assert await store.spent(key, None) == 1
    for junk in ("t:x:1", "t:5", "w:abc", "nonsense", "t:-3:ab"):
        await store.release(key, junk)  # not a total reservation: ignored
    assert await store.spent(key, None) == 1
    await store.release("other:EUR:total", small)  # another key: nothing to give back
    assert await store.spent(key, None) == 1


async def test_windowed_entries_are_dropped_with_the_window():
    now = [1000.0]
    store = InMemoryBudgetStore(clock=lambda: now[0])
    key = Budget("1", window=60).key
    for _ in range(5):
        assert await store.reserve(key, 1, 100, 60.0)
    assert len(store._entries[key]) == 5
    now[0] += 61
    assert await store.spent(key, 60.0) == 0
    assert key not in store._entries
    assert await store.reserve(key, 1, 100, 60.0)
    assert len(store._entries[key]) == 1


async def test_headroom_is_the_smallest_remaining_per_currency():
    now = [1000.0]
    store = InMemoryBudgetStore(clock=lambda: now[0])
    budgets = Budgets(
        [Budget("0.50"), Budget("0.30", window=60), Budget("2", currency="USD")], store
    )
    assert await budgets.headroom() == {"EUR": Decimal("0.30"), "USD": Decimal("2")}
    for _ in range(3):
        await budgets.reserve(euro_intent("0.10"))
    assert await budgets.headroom() == {"EUR": Decimal(0), "USD": Decimal("2")}
    now[0] += 61  # the window forgets, the total does not
    assert await budgets.headroom() == {"EUR": Decimal("0.20"), "USD": Decimal("2")}
    assert await Budgets([], store).headroom() == {}
    # a smaller limit over the same key is already overspent: zero, never negative
    assert await Budgets([Budget("0.05")], store).headroom() == {"EUR": Decimal(0)}


async def test_status_reports_spent_and_remaining_per_budget():
    total, daily = Budget("1.00", name="a"), Budget("0.50", window=86400, name="a")
    budgets = Budgets([total, daily, Budget("3", currency="USD")], None)
    await budgets.reserve(euro_intent("0.20"))
    status = await budgets.status()
    assert [(s.budget, s.spent, s.remaining) for s in status] == [
        (total, Decimal("0.20"), Decimal("0.80")),
        (daily, Decimal("0.20"), Decimal("0.30")),
        (Budget("3", currency="USD"), Decimal(0), Decimal(3)),
    ]
    with pytest.raises(AttributeError):
        status[0].spent = Decimal(0)  # type: ignore[misc]


async def test_a_reservation_broken_half_way_gives_back_what_it_held():
    inner = InMemoryBudgetStore()

    class Flaky:
        async def reserve(self, key, amount, limit, window):
            if key.startswith("b:"):
                raise ConnectionError("store went away")
            return await inner.reserve(key, amount, limit, window)

        async def release(self, key, reservation):
            await inner.release(key, reservation)

        async def spent(self, key, window):
            return await inner.spent(key, window)

    budgets = Budgets([Budget("1", name="a"), Budget("1", name="b")], Flaky())
    with pytest.raises(ConnectionError):
        await budgets.reserve(euro_intent("0.10"))
    assert await inner.spent(Budget("1", name="a").key, None) == 0


async def test_redis_total_budget_is_a_running_total(redis_url):
    import redis.asyncio as aioredis

    raw = aioredis.from_url(redis_url)
    store = RedisBudgetStore(redis_url, prefix="t1:")
    key = Budget("1.00").key
    try:
        for _ in range(2_000):
            rid = await store.reserve(key, 100_000, 1_000_000, None)
            assert rid is not None
            await store.release(key, rid)
        held = [await store.reserve(key, 100_000, 1_000_000, None) for _ in range(10)]
        assert all(held)
        assert await store.reserve(key, 1, 1_000_000, None) is None
        assert await store.spent(key, None) == 1_000_000
        # one integer; no hash or sorted set grows with the payments
        assert await raw.keys("t1:*") == [f"t1:{key}:total".encode()]
        assert await raw.get(f"t1:{key}:total") == b"1000000"
        await store.release(key, held[0])  # type: ignore[arg-type]
        assert await store.spent(key, None) == 900_000
        for _ in range(3):  # a release can never drive the total below zero
            await store.release(key, "t:5000000:00")
        assert await store.spent(key, None) == 0
    finally:
        await store.aclose()
        await raw.aclose()


async def test_redis_folds_reservations_an_earlier_version_kept_per_payment(redis_url):
    import redis.asyncio as aioredis

    raw = aioredis.from_url(redis_url)
    store = RedisBudgetStore(redis_url, prefix="t2:")
    key = Budget("1.00").key
    try:
        await raw.hset(f"t2:{key}:amount", mapping={"aa": 300_000, "bb": 200_000})
        await raw.zadd(f"t2:{key}:at", {"aa": 1.0, "bb": 2.0})
        assert await store.spent(key, None) == 500_000
        assert await store.reserve(key, 600_000, 1_000_000, None) is None
        assert await raw.exists(f"t2:{key}:amount", f"t2:{key}:at") == 0
        assert await store.reserve(key, 500_000, 1_000_000, None)
        assert await store.spent(key, None) == 1_000_000
    finally:
        await store.aclose()
        await raw.aclose()


async def test_windowed_reservations_leave_with_the_window(shared_url):
    redis = shared_url.startswith("redis://")
    raw: Any = None
    if redis:
        import redis.asyncio as aioredis

        raw = aioredis.from_url(shared_url)
    store = shared_store(shared_url, prefix="t3:")
    key = Budget("0.30", window=1).key
    try:
        held = [await store.reserve(key, 100_000, 300_000, 1.0) for _ in range(3)]
        assert all(rid and rid.startswith("w:") for rid in held)
        assert await store.reserve(key, 100_000, 300_000, 1.0) is None
        if redis:
            assert await raw.zcard(f"t3:{key}:at") == 3
            assert 0 < await raw.pttl(f"t3:{key}:at") <= 2_000  # an idle budget expires
        await store.release(key, held[0])  # type: ignore[arg-type]
        assert await store.spent(key, 1.0) == 200_000

        async def window_passed() -> bool:
            return await store.spent(key, 1.0) == 0

        await eventually(window_passed, "the window to pass by the server's clock")
        assert await store.reserve(key, 300_000, 300_000, 1.0)
        if redis:
            assert await raw.zcard(f"t3:{key}:at") == 1
            assert await raw.hlen(f"t3:{key}:amount") == 1
        else:
            assert await store.budget_keys() == [(key, 0, 300_000)]  # the old ones pruned
    finally:
        await store.aclose()
        if raw is not None:
            await raw.aclose()


@pytest.mark.parametrize(("ahead", "window"), [(25 * 3600, "24h"), (61, "1m")])
async def test_a_host_whose_clock_runs_ahead_cannot_empty_a_shared_window(
    shared_url, monkeypatch, ahead: int, window: str
):
    # Two hosts share one budget; the second's clock runs ahead of the first's.
    budget = Budget("0.30", window=window)
    honest = Budgets([budget], shared_store(shared_url, prefix="skew:"))
    skewed_store = shared_store(shared_url, prefix="skew:")
    skewed = Budgets([budget], skewed_store)
    for _ in range(3):
        assert await honest.reserve(euro_intent("0.10"))
    real = time.time
    skewed_store._clock = lambda: real() + ahead  # type: ignore[attr-defined]  # how it read the time
    monkeypatch.setattr(time, "time", lambda: real() + ahead)
    try:
        with pytest.raises(BudgetExceeded):
            await skewed.reserve(euro_intent("0.10"))
        (status,) = await skewed.status()
        assert status.spent == Decimal("0.30")
        monkeypatch.undo()
        (status,) = await honest.status()
        assert status.spent == Decimal("0.30")  # the window is whole for every host
    finally:
        monkeypatch.undo()
        await honest.store.aclose()  # type: ignore[attr-defined]
        await skewed_store.aclose()
