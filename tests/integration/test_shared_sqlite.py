"""Three payer processes share one state file and one budget of ten payments, under load.

Each process builds `PaymentOptions(state_path=<the same file>, budgets=[Budget("1.00")])`
and fires 30 concurrent requests at the sandbox's `/weather` (0.10 EUR): reserving is a
`BEGIN IMMEDIATE` transaction in that file, which SQLite serialises across processes, so
the three together pay exactly ten times, and the journal holds exactly those ten.
"""

from __future__ import annotations

import sys
import textwrap
from decimal import Decimal

import anyio
import pytest

from tests.conftest import bank_payments
from x402_client import Budget
from x402_client._state.sqlite_store import SqliteStore

pytestmark = pytest.mark.anyio

REQUESTS = 30

AGENT = textwrap.dedent("""
    import asyncio, sys, httpx
    from x402_client import Budget, BudgetExceeded, PaymentOptions, with_eur_payment
    from x402_client._state.shared import state_of

    async def main(state_path, api_url, api_key, account, url, requests):
        options = PaymentOptions(api_key=api_key, from_account=account, api_url=api_url,
                                 state_path=state_path, budgets=[Budget("1.00")])
        paid = refused = 0
        async with with_eur_payment(httpx.AsyncClient(timeout=60), options) as client:
            async def fetch():
                nonlocal paid, refused
                try:
                    if (await client.get(url)).status_code == 200:
                        paid += 1
                except BudgetExceeded:
                    refused += 1
            await asyncio.gather(*(fetch() for _ in range(int(requests))))
        state_of(options).close()
        print(paid, refused)

    asyncio.run(main(*sys.argv[1:]))
""")


async def test_three_processes_on_one_state_file_pay_exactly_the_budget(sandbox, tmp_path):
    payer = sandbox.bank.open_account("100.00")
    path = tmp_path / "state.sqlite3"
    args = [
        str(path),
        sandbox.payment_api_url,
        payer.api_key,
        payer.code,
        sandbox.url("/weather"),
        str(REQUESTS),
    ]
    results: list[tuple[int, ...]] = []

    async def agent() -> None:
        done = await anyio.run_process([sys.executable, "-c", AGENT, *args], check=False)
        assert done.returncode == 0, done.stderr.decode()
        results.append(tuple(int(x) for x in done.stdout.decode().split()))

    with anyio.fail_after(120):
        async with anyio.create_task_group() as group:
            for _ in range(3):
                group.start_soon(agent)

    assert sum(paid for paid, _ in results) == 10, results
    assert sum(refused for _, refused in results) == 3 * REQUESTS - 10, results
    made = bank_payments(sandbox, payer)
    assert len(made) == 10
    assert sandbox.balance(payer) == Decimal("99.00")

    with SqliteStore(path) as journal:
        paid_rows = await journal.payments(limit=100, outcome="paid")
        assert len(paid_rows) == 10
        assert all(row.delivered for row in paid_rows)
        # the journal names exactly the payments the bank made
        assert {row.payment_request_code for row in paid_rows} == {
            t.payment_request_code for t in made
        }
        # the refused ones never reserved, so were never journaled; nothing is left open
        assert len(await journal.payments(limit=1000)) == 10
        assert await journal.unfinished() == []
        assert await journal.spent(Budget("1.00").key, None) == 1_000_000
