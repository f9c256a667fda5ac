"""A fleet of payers on one PostgreSQL state: worker processes in working directories of
their own (standing for machines), one database, one journal, one set of budgets, one EVM
wallet.

The budgets allow exactly 20 payments: 1.00 EUR and 1.00 USD, at 0.10 a request, the EUR
entries paid from the managed account (euro rail), the USD ones with EIP-2612 permits of
one wallet (USDQ on chain 137), whose nonces are sequential: the fleet must never sign two
permits with one nonce. Three workers send 200 requests together; exactly 20 are paid, and
what every ledger says moved is what moved at the bank and on chain.
"""

from __future__ import annotations

import json
import sys
import threading
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from eth_account import Account as EthAccount

from tests.conftest import register_secrets
from tests.waiting import eventually
from x402_client import Budget
from x402_client.postgres import PostgresStore
from x402_eur_sandbox import Price, Sandbox

pytestmark = pytest.mark.anyio

WORKER = Path(__file__).with_name("fleet_worker.py")
PRICE = Decimal("0.10")
BUDGETS = [Budget("1.00", currency="EUR"), Budget("1.00", currency="USD")]
WORKERS = 3
REQUESTS = 200
PRICES = {
    "/paid/eur": Price(PRICE, "euro only", rails=("euro",)),
    "/paid/usd": Price(PRICE, "USDQ permit on polygon only", rails=("eip155:137:USDQ",)),
}


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def fleet_sandbox() -> Any:
    with Sandbox.run_in_thread(evm=True, prices=PRICES) as running:
        yield running


async def _run_fleet(configs: list[dict[str, Any]], tmp_path: Path) -> list[dict[str, Any]]:
    """Start a worker per config, each in a directory of its own; let them go together;
    their reports."""
    reports: list[dict[str, Any]] = []
    go = tmp_path / "go"

    async def worker(index: int, config: dict[str, Any]) -> None:
        machine = tmp_path / f"machine-{index}"
        machine.mkdir()
        config = {**config, "ready": str(machine / "ready"), "go": str(go)}
        done = await anyio.run_process(
            [sys.executable, str(WORKER), json.dumps(config)], check=False, cwd=machine
        )
        assert done.returncode == 0, done.stderr.decode()
        reports.append(json.loads(done.stdout))

    with anyio.fail_after(600):
        async with anyio.create_task_group() as group:
            for index, config in enumerate(configs):
                group.start_soon(worker, index, config)

            def all_ready() -> bool:
                return all(
                    (tmp_path / f"machine-{i}" / "ready").exists() for i in range(len(configs))
                )

            await eventually(all_ready, "every worker to be ready")
            go.touch()
    return reports


async def test_a_fleet_of_three_workers_pays_exactly_its_budgets(
    fleet_sandbox: Sandbox, postgres_dsn: str, tmp_path: Path
) -> None:
    sandbox = fleet_sandbox
    account = sandbox.bank.open_account("100.00")
    wallet = EthAccount.create()
    key, owner = "0x" + bytes(wallet.key).hex(), str(wallet.address)
    register_secrets(key)
    await sandbox.evm.fund(137, "USDQ", owner, "5")
    merchant = sandbox.evm.merchant_address
    merchant_usd = await sandbox.evm.token_balance(137, "USDQ", merchant)

    urls = [(sandbox.url("/paid/eur"), "EUR"), (sandbox.url("/paid/usd"), "USD")] * (REQUESTS // 2)
    base = {
        "api_key": account.api_key,
        "from_account": account.code,
        "api_url": sandbox.payment_api_url,
        "evm": sandbox.evm.evm_config(private_key=key),
        "state": postgres_dsn,
        "budgets": [{"limit": str(b.limit), "currency": b.currency} for b in BUDGETS],
    }
    configs = [{**base, "urls": urls[i::WORKERS]} for i in range(WORKERS)]
    reports = await _run_fleet(configs, tmp_path)

    assert [r["other"] for r in reports] == [[]] * WORKERS
    outcomes: dict[str, int] = {}
    for report in reports:
        for outcome, count in report["outcomes"].items():
            outcomes[outcome] = outcomes.get(outcome, 0) + count
    # Exactly 20 payments: ten of each currency; every other request refused before paying.
    assert outcomes == {"EUR 200": 10, "EUR refused": 90, "USD 200": 10, "USD refused": 90}
    assert sum(r["paid"] for r in reports) == 20

    # What moved: ten 0.10 EUR payments at the bank, ten 0.10 USDQ permits settled on chain,
    # one nonce each (a nonce used twice would have failed to settle).
    made = [t for t in sandbox.bank.payments_made if t.from_account == account.code]
    assert len(made) == 10 and sandbox.balance(account) == Decimal("99.00")
    spent_usd = 5_000_000 - await sandbox.evm.token_balance(137, "USDQ", owner)
    assert spent_usd == 1_000_000
    assert await sandbox.evm.token_balance(137, "USDQ", merchant) - merchant_usd == spent_usd
    assert await sandbox.evm.permit_nonce(137, "USDQ", owner) == 10
    nonces = sorted(n for r in reports for n in r["nonces"])
    assert nonces == list(range(10)), [r["nonces"] for r in reports]

    # Every worker's ledger together says exactly that.
    for currency in ("EUR", "USD"):
        assert sum(Decimal(r["totals"][currency]) for r in reports) == Decimal("1.00")

    # The one journal and the budgets in the database say so too.
    async with PostgresStore(postgres_dsn) as store:
        for budget in BUDGETS:
            assert await store.spent(budget.key, None) == 1_000_000
        paid = await store.payments(limit=1000, outcome="paid")
        assert len(paid) == 20 and all(r.delivered for r in paid)
        assert sorted(r.currency for r in paid) == ["EUR"] * 10 + ["USD"] * 10
        assert await store.unfinished() == []


async def test_two_workers_signing_permits_for_one_owner_at_once_use_two_nonces(
    fleet_sandbox: Sandbox, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    """Two workers (two options, two stores: two database sessions, as two machines have)
    pay a permit for one owner at once. The merchant holds the first paid request until
    the second worker has either signed (the fleet would then hold two permits with one
    nonce) or found the owner's nonce lock taken by the first: only then does the first
    settle, and the second signs the next nonce."""
    import logging

    from x402_client import PaymentOptions, with_eur_payment
    from x402_client._state import postgres_store

    caplog.set_level(logging.DEBUG, logger="x402_client")
    sandbox = fleet_sandbox
    wallet = EthAccount.create()
    key, owner = "0x" + bytes(wallet.key).hex(), str(wallet.address)
    register_secrets(key)
    await sandbox.evm.fund(137, "USDQ", owner, "1")

    def signed() -> list[str]:
        return [r.getMessage() for r in caplog.records if "signed permit nonce" in r.getMessage()]

    # Instruments: a worker that found the nonce lock taken says so; the merchant holds the
    # first paid request until the other worker signed or waited.
    waited = threading.Event()
    run = postgres_store.PostgresStore._run

    async def noting_run(self: Any, work: Any, **how: Any) -> Any:
        result = await run(self, work, **how)
        if getattr(work, "__name__", "") == "attempt" and result is False:
            waited.set()
        return result

    monkeypatch.setattr(postgres_store.PostgresStore, "_run", noting_run)
    held = {"first": True}
    before = sandbox.faults.before

    async def holding(endpoint: str, request: Any = None) -> None:
        await before(endpoint, request)
        if endpoint == "resource" and held["first"]:
            held["first"] = False
            while not (waited.is_set() or len(signed()) >= 2):  # noqa: ASYNC110 - a thread's
                await anyio.sleep(0.002)

    monkeypatch.setattr(sandbox.faults, "before", holding)

    def worker() -> PaymentOptions:
        return PaymentOptions(
            evm=sandbox.evm.evm_config(private_key=key),
            state_path=postgres_dsn,
            budgets=[Budget("1.00", currency="USD")],
        )

    first, second = worker(), worker()
    statuses: list[int] = []
    async with (
        with_eur_payment(httpx.AsyncClient(timeout=120), first) as one,
        with_eur_payment(httpx.AsyncClient(timeout=120), second) as two,
    ):

        async def pay(client: httpx.AsyncClient) -> None:
            statuses.append((await client.get(sandbox.url("/paid/usd"))).status_code)

        with anyio.fail_after(120):
            async with anyio.create_task_group() as group:
                group.start_soon(pay, one)
                group.start_soon(pay, two)
    from x402_client._state.shared import state_of

    for options in (first, second):
        state_of(options).close()
    nonces = sorted(int(line.rsplit("nonce ", 1)[1].split()[0]) for line in signed())
    assert nonces == [0, 1], signed()
    assert statuses == [200, 200]
    assert waited.is_set()  # the second worker did find the first one's lock
    assert await sandbox.evm.permit_nonce(137, "USDQ", owner) == 2
