"""One `PaymentOptions` object, one budget, three ways to pay at once: an `httpx.AsyncClient`,
a `requests.Session` (in threads of its own) and an MCP client session, all against the
sandbox's standard merchant (EIP-3009 in its sEURC token, settled on a real anvil chain).

The budget allows exactly N payments, kept in memory, in a SQLite state file or in a
PostgreSQL state (`store`). Every kind pays once first; then all three ask
together, more than the rest of the budget allows; then every kind asks once more. Exactly
N payments are made: the options' ledger, the merchant's settlements and the chain's token
balances agree, and every other call is refused with `BudgetExceeded` before anything is
signed.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import Counter
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests
from mcp import Client

from tests.sandboxes import asset_of
from tests.waiting import PATIENCE
from x402_client import (
    Budget,
    BudgetExceeded,
    EvmOptions,
    PaidToolResult,
    PaymentOptions,
    payments,
    with_eur_payment,
)
from x402_eur_sandbox._merchant import Price
from x402_eur_sandbox._standard import StandardMerchant

pytestmark = pytest.mark.anyio

PRICE = Decimal("0.05")  # the HTTP route's and the `weather` tool's price, sEURC
PRICE_ATOMIC = 50_000
N = 6  # payments the budget allows
PER_KIND = 3  # calls each kind makes together, once every kind has paid once
KINDS = ("httpx", "requests", "mcp")
#: What the client logs (at DEBUG) each time it signs an EIP-3009 authorization.
SIGNED = "x402: signed an EIP-3009 authorization"


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def merchant(anyio_backend: str) -> AsyncIterator[StandardMerchant]:
    async with StandardMerchant(
        chain_id=84532,
        prices={"/forecast": Price(PRICE, "A forecast, at the weather tool's price")},
        permit2_prices={},
        upto_prices={},
        tool_prices={"weather": Price(PRICE, "Weather for a city")},
    ) as started:
        yield started


async def balances(merchant: StandardMerchant) -> tuple[int, int]:
    return (
        await merchant.token_balance(merchant.payer_address),
        await merchant.token_balance(merchant.pay_to),
    )


@pytest.mark.parametrize("store", ["memory", "sqlite", "postgres"])
async def test_one_budget_holds_across_httpx_requests_and_mcp_at_once(
    merchant, caplog, store: str, request: pytest.FixtureRequest, tmp_path: Path
):
    caplog.set_level(logging.DEBUG, logger="x402_client")
    state = {
        "memory": None,
        "sqlite": tmp_path / "state.sqlite3",
        "postgres": store == "postgres" and str(request.getfixturevalue("postgres_dsn")),
    }[store]
    options = PaymentOptions(
        evm=EvmOptions(**merchant.evm_config()),
        assets=[asset_of(merchant)],
        budgets=[Budget(PRICE * N, currency="EUR")],
        state_path=state or None,
    )
    before = await balances(merchant)
    settled_http, settled_tools = len(merchant.settlements), len(merchant.tools.settlements)
    url = merchant.resource_url("/forecast")
    outcomes: Counter[tuple[str, str]] = Counter()
    unexpected: list[tuple[str, BaseException]] = []

    noting = threading.Lock()  # the requests calls note from their threads

    def note(kind: str, outcome: str | BaseException) -> None:
        with noting:
            if isinstance(outcome, BudgetExceeded):
                outcomes[kind, "refused"] += 1
            elif isinstance(outcome, BaseException):
                unexpected.append((kind, outcome))
            else:
                outcomes[kind, outcome] += 1

    session = with_eur_payment(requests.Session(), options)
    session.trust_env = False  # loopback only, whatever the environment's proxies say
    # Every caller waits here, so that all of them ask the budget at the same moment.
    barrier = threading.Barrier(3 * PER_KIND)

    def requests_call(wait: bool) -> None:
        try:
            if wait:
                barrier.wait(timeout=PATIENCE)
            response = session.get(url, timeout=30)
            assert response.status_code == 200, response.status_code
            assert response.x402_payment is not None  # type: ignore[attr-defined]
            note("requests", "paid")
        except BaseException as exc:
            note("requests", exc)

    # A thread for every caller at the barrier (the default executor may have fewer).
    threads = ThreadPoolExecutor(max_workers=3 * PER_KIND)

    def in_thread(call: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        return asyncio.get_running_loop().run_in_executor(threads, call, *args)

    async def at_barrier(wait: bool) -> None:
        if wait:
            await in_thread(barrier.wait, PATIENCE)

    async with (
        with_eur_payment(httpx.AsyncClient(timeout=60), options) as client,
        Client(merchant.mcp_url) as mcp,
    ):
        with_eur_payment(mcp, options)

        async def httpx_call(wait: bool) -> None:
            try:
                await at_barrier(wait)
                response = await client.get(url)
                assert response.status_code == 200, response.status_code
                assert response.extensions["x402_payment"] is not None
                note("httpx", "paid")
            except BaseException as exc:
                note("httpx", exc)

        async def mcp_call(wait: bool) -> None:
            try:
                await at_barrier(wait)
                result = await mcp.call_tool("weather", {"city": "Paris"})
                assert isinstance(result, PaidToolResult) and not result.is_error
                note("mcp", "paid")
            except BaseException as exc:
                note("mcp", exc)

        async def each_kind_once() -> None:
            await asyncio.gather(
                httpx_call(False), in_thread(requests_call, False), mcp_call(False)
            )

        # Every kind pays once, each spending the same budget.
        await each_kind_once()
        assert not unexpected, unexpected
        assert outcomes == {(kind, "paid"): 1 for kind in KINDS}

        # All three ask together, PER_KIND calls each: more than the rest allows.
        await asyncio.gather(
            *(httpx_call(True) for _ in range(PER_KIND)),
            *(in_thread(requests_call, True) for _ in range(PER_KIND)),
            *(mcp_call(True) for _ in range(PER_KIND)),
        )
        assert not unexpected, unexpected

        # The budget is spent: every kind is refused.
        before_last = outcomes.copy()
        await each_kind_once()
        assert not unexpected, unexpected
        assert outcomes - before_last == {(kind, "refused"): 1 for kind in KINDS}
    session.close()
    threads.shutdown()

    calls = len(KINDS) * (1 + PER_KIND + 1)
    paid = sum(count for (_, outcome), count in outcomes.items() if outcome == "paid")
    refused = sum(count for (_, outcome), count in outcomes.items() if outcome == "refused")
    assert (paid, refused) == (N, calls - N), outcomes

    # The options' ledger: exactly N paid. A call refused once it had read the budget's
    # headroom has no entry; one that lost the reservation to another call has an entry that
    # failed at once: never reserved, never paid, no proof.
    ledger = payments(options).ledger
    assert len(ledger.entries("paid")) == N
    assert ledger.total("EUR") == PRICE * N
    assert len(ledger.entries()) <= calls
    for entry in ledger.entries():
        if entry.outcome != "paid":
            steps = [step.step for step in entry.steps]
            assert (entry.outcome, steps) == ("failed", ["intent", "failed"]), steps
            assert entry.proof is None and entry.tx_hash is None
    if state:
        # The journal agrees: N payments delivered, none left unfinished.
        from x402_client._state.shared import state_of

        journal = state_of(options).journal
        assert journal is not None
        delivered = await journal.payments(limit=100, outcome="paid")
        assert len(delivered) == N and all(r.delivered for r in delivered)
        assert await journal.unfinished() == []
        state_of(options).close()
    # Nothing was signed for a refused call: exactly N authorizations, one per payment.
    signed = [r for r in caplog.records if r.getMessage().startswith(SIGNED)]
    assert len(signed) == N, [r.getMessage() for r in signed]
    resources = Counter(entry.intent.resource for entry in ledger.entries("paid"))
    assert resources[url] + resources["mcp://tool/weather"] == N

    # The merchant settled exactly those payments, and exactly N x the price moved on chain.
    assert len(merchant.settlements) - settled_http == resources[url]
    assert len(merchant.tools.settlements) - settled_tools == resources["mcp://tool/weather"]
    assert await balances(merchant) == (
        before[0] - N * PRICE_ATOMIC,
        before[1] + N * PRICE_ATOMIC,
    )
