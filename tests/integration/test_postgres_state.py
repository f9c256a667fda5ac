"""The PostgreSQL state's schema and an operator's commands, against a real server: workers
that start together migrate it once; an older schema is migrated in place with its
payments; `x402-eur state migrate` and `x402-eur state copy` (a machine's SQLite journal,
payment channels and budgets moved in, every unfinished payment still unfinished)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest

from tests.channel_books import channel, channel_id
from tests.conftest import scan_for_secrets
from tests.factories import euro_intent
from tests.waiting import eventually
from x402_client import Budget
from x402_client._state.postgres_store import SCHEMA_VERSION, migrate_schema
from x402_client._state.sqlite_store import SqliteStore
from x402_client.postgres import PostgresStore, StateUnavailable

pytestmark = pytest.mark.anyio

#: A worker that connects, says so, and once told to go migrates the schema the way every
#: store does when it opens, then opens a store.
STARTER = textwrap.dedent("""
    import pathlib, sys, time
    from x402_client._protocol.dsn import PostgresDsn
    from x402_client._state.postgres_store import connect, migrate_schema
    from x402_client.postgres import PostgresStore, StateUnavailable

    dsn, go = PostgresDsn(sys.argv[1]), pathlib.Path(sys.argv[2])
    conn = connect(dsn)
    print("connected", flush=True)
    while not go.exists():
        time.sleep(0.001)
    migrate_schema(conn)
    with PostgresStore(dsn):
        print("ok", flush=True)
""")


def _schema(dsn: str) -> tuple[int, list[Any]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT version FROM x402_eur.schema_version").fetchall()
        tables = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'x402_eur' "
            "ORDER BY table_name"
        ).fetchall()
    assert len(rows) == 1, rows
    return int(rows[0][0]), [t[0] for t in tables]


def test_workers_that_start_together_migrate_the_schema_once(
    postgres_dsn: str, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", STARTER, postgres_dsn, str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
        )
        for _ in range(4)
    ]
    try:
        for worker in workers:  # every one connected, none migrated yet
            assert worker.stdout is not None
            assert worker.stdout.readline().strip() == "connected"
        go.touch()
        outputs = [worker.communicate(timeout=120) for worker in workers]
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    for worker, (stdout, stderr) in zip(workers, outputs, strict=True):
        assert worker.returncode == 0 and stdout.strip() == "ok", scan_for_secrets(stderr)
    version, tables = _schema(postgres_dsn)
    assert version == SCHEMA_VERSION
    assert tables == [
        "budget_reservations",
        "budget_totals",
        "channels",
        "leases",
        "payment_steps",
        "payments",
        "schema_version",
    ]


async def test_an_older_schema_is_migrated_in_place_with_its_payments(postgres_dsn: str) -> None:
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        assert migrate_schema(conn, upto=1) == 0
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO x402_eur.payments (id, created_at, updated_at, rail, scheme, network, "
            "asset, asset_symbol, amount, currency, pay_to, resource, accept, request_method, "
            "request_url, request_headers, request_body_omitted, reservations, outcome, "
            "delivered) VALUES ('old', now(), now(), 'euro', 'euro', 'provider:mainnet', 'EURO', "
            "'EURO', '0.10', 'EUR', 'ACC', 'http://127.0.0.1:9/x', '{}', 'GET', "
            "'http://127.0.0.1:9/x', '[]', FALSE, '[]', 'pending', FALSE)"
        )
        assert _schema(postgres_dsn)[0] == 1
    with PostgresStore(postgres_dsn) as store:
        (record,) = await store.unfinished()
        assert (record.id, record.in_progress, record.worker) == ("old", False, None)
        assert await store.claim("old")
        assert (await store.get("old")).worker is not None  # type: ignore[union-attr]
    assert _schema(postgres_dsn)[0] == SCHEMA_VERSION


def _cli(*args: str, state: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "x402_client.cli", *args, "--state", state],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )
    scan_for_secrets(done.stdout + done.stderr)
    return done


async def test_state_migrate_creates_and_then_finds_the_schema(postgres_dsn: str) -> None:
    first = _cli("state", "migrate", state=postgres_dsn)
    assert first.returncode == 0, first.stderr
    assert f"migrated from schema 0 to {SCHEMA_VERSION}" in first.stderr
    assert ":***@" in first.stderr  # the state is named, its password is not
    again = _cli("state", "migrate", state=postgres_dsn)
    assert again.returncode == 0 and "nothing to do" in again.stderr, again.stderr
    file = _cli("state", "migrate", state="/tmp/not-a-database.sqlite3")  # noqa: S108
    assert file.returncode == 2 and "works on a PostgreSQL state" in file.stderr


async def _journal(store: SqliteStore, budget: Budget, window: Budget) -> dict[str, str]:
    """A machine's journal: a payment of each kind a crash or a failure leaves behind."""
    ids: dict[str, str] = {}
    for name in ("pending", "undelivered", "unknown", "delivered", "failed", "gave up"):
        reservation = await store.reserve(budget.key, 100_000, 1_000_000, None)
        assert reservation is not None
        ids[name] = await store.open_payment(
            intent=euro_intent(),
            request_method="POST",
            request_url="http://127.0.0.1:9/paid?token=t-1",
            request_body=b'{"city": "Paris"}',
            request_headers=[("content-type", "application/json")],
            reservations=[(budget.key, reservation)],
            payment_request_code=f"pr_{name}",
        )
        await store.update_payment(ids[name], transaction_code=f"tx_{name}", proof=f"P-{name}")
    await store.finish_payment(ids["undelivered"], "paid", delivered=False)
    await store.finish_payment(ids["unknown"], "unknown", delivered=False, error="timed out")
    await store.finish_payment(ids["delivered"], "paid", delivered=True)
    await store.finish_payment(ids["failed"], "failed", delivered=False)
    await store.mark_unrecoverable(ids["gave up"], "the merchant is gone")
    for _ in range(2):
        assert await store.reserve(window.key, 50_000, 1_000_000, window.window_seconds)
    await store.open_channel(channel("copied"))
    assert await store.advance(channel_id("copied"), expected=0, signed=1 << 70, signature="0x01")
    await store.acknowledge(channel_id("copied"), 1 << 69)
    return ids


async def test_state_copy_moves_every_unfinished_payment_and_budget(
    postgres_dsn: str, tmp_path: Path
) -> None:
    path = tmp_path / "machine" / "state.sqlite3"
    budget, window = Budget("1.00"), Budget("1.00", window="24h")
    with SqliteStore(path) as file:
        await _journal(file, budget, window)
    # The payment that was in flight when its process ended is owned by nobody now.
    with SqliteStore(path) as file:
        unfinished = await file.unfinished()
        everything = await file.payments(limit=100)
        channels = await file.channels()
        spent = (await file.spent(budget.key, None), await file.spent(window.key, 86400.0))
    assert [r.state for r in unfinished] == ["pending", "paid, not delivered", "unknown"]

    copied = _cli("state", "copy", str(path), state=postgres_dsn)
    assert copied.returncode == 0, copied.stderr
    assert (
        "copied 6 payment(s) (3 unfinished), 1 payment channel(s) and the spending of 2 "
        "budget(s)" in copied.stderr
    )

    def same(record: Any) -> tuple[Any, ...]:
        return (
            record.id,
            record.state,
            record.amount,
            record.request_url,
            record.request_body,
            record.request_headers,
            record.reservations,
            record.payment_request_code,
            record.transaction_code,
            record.proof,
            record.error,
            record.unrecoverable,
            [(s.step, s.detail, s.at) for s in record.steps],
            record.created_at,
        )

    with PostgresStore(postgres_dsn) as database:
        assert [same(r) for r in await database.unfinished()] == [same(r) for r in unfinished]
        assert [same(r) for r in await database.payments(limit=100)] == [
            same(r) for r in everything
        ]
        assert (
            (
                await database.spent(budget.key, None),
                await database.spent(window.key, 86400.0),
            )
            == spent
            == (600_000, 100_000)
        )
        # The channel goes on from what the machine signed, its times as they were.
        assert await database.channels() == channels
        assert [(c.signed, c.acknowledged) for c in channels] == [(1 << 70, 1 << 69)]

    listed = _cli("payments", "--unfinished", state=postgres_dsn)
    assert listed.returncode == 0, listed.stderr
    assert all(r.id in listed.stdout for r in unfinished)

    # Copied once: a second copy changes nothing and says why.
    again = _cli("state", "copy", str(path), state=postgres_dsn)
    assert again.returncode == 1 and "copied before" in again.stderr, again.stderr
    with PostgresStore(postgres_dsn) as database:
        assert await database.spent(budget.key, None) == 600_000


async def test_state_copy_refuses_a_channel_the_database_has_already(
    postgres_dsn: str, tmp_path: Path
) -> None:
    path = tmp_path / "state.sqlite3"
    with SqliteStore(path) as file:
        await file.open_channel(channel("twice"))
        assert await file.advance(channel_id("twice"), expected=0, signed=5, signature="0x05")
    with PostgresStore(postgres_dsn) as database:
        await database.open_channel(channel("twice"))
        assert await database.advance(channel_id("twice"), expected=0, signed=9, signature="0x09")
    refused = _cli("state", "copy", str(path), state=postgres_dsn)
    assert refused.returncode == 1, refused.stderr
    assert "1 payment channel(s) of" in refused.stderr and "nothing copied" in refused.stderr
    with PostgresStore(postgres_dsn) as database:
        kept = await database.channel(channel_id("twice"))
    assert kept is not None and kept.signed == 9


async def test_state_copy_refuses_a_file_a_live_process_is_paying_from(
    postgres_dsn: str, tmp_path: Path
) -> None:
    path = tmp_path / "state.sqlite3"
    with SqliteStore(path) as live:
        await live.open_payment(
            intent=euro_intent(),
            request_method="GET",
            request_url="http://127.0.0.1:9/x",
            request_body=None,
            request_headers=[],
            reservations=[],
        )
        refused = await anyio.to_thread.run_sync(
            lambda: _cli("state", "copy", str(path), state=postgres_dsn)
        )
    assert refused.returncode == 1 and "still paying" in refused.stderr, refused.stderr
    with PostgresStore(postgres_dsn) as database:
        assert await database.payments() == []


async def test_a_lost_connection_stops_the_store_and_frees_its_payments(postgres_dsn: str) -> None:
    with PostgresStore(postgres_dsn) as worker, PostgresStore(postgres_dsn) as other:
        journal_id = await worker.open_payment(
            intent=euro_intent(),
            request_method="GET",
            request_url="http://127.0.0.1:9/x",
            request_body=None,
            request_headers=[],
            reservations=[],
        )
        assert (await other.get(journal_id)).in_progress  # type: ignore[union-attr]
        # The database ends the worker's session (its machine dropped off the network).
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND pid <> %s",
                (other._conn.info.backend_pid,),
            )

        async def free() -> bool:
            record = await other.get(journal_id)
            return record is not None and not record.in_progress

        await eventually(free, "the lost worker's lease to end")
        assert await other.claim(journal_id)
        with pytest.raises(StateUnavailable, match="was lost") as lost:
            await worker.update_payment(journal_id, step="late")
        assert "another worker's to recover" in str(lost.value)
        with pytest.raises(StateUnavailable, match="was lost"):  # and it stays stopped
            await worker.get(journal_id)


@pytest.mark.parametrize("window", [None, 3600.0], ids=["total", "window"])
async def test_reservations_from_many_connections_at_once_never_overshoot(
    postgres_dsn: str, window: float | None
) -> None:
    """Eight stores (eight database sessions, as eight workers have) reserve 0.10 each,
    twenty at once per store, from a budget of ten: exactly ten get one."""
    key = Budget("1.00", window=window).key
    stores = [PostgresStore(postgres_dsn) for _ in range(8)]
    granted: list[str] = []
    try:

        async def reserve(store: PostgresStore) -> None:
            rid = await store.reserve(key, 100_000, 1_000_000, window)
            if rid is not None:
                granted.append(rid)

        async with anyio.create_task_group() as group:
            for store in stores:
                for _ in range(20):
                    group.start_soon(reserve, store)
        assert len(granted) == 10
        assert await stores[0].spent(key, window) == 1_000_000
    finally:
        for store in stores:
            store.close()


async def test_a_first_payment_that_fails_to_journal_leaves_the_store_a_live_owner(
    postgres_dsn: str,
) -> None:
    """The lease is taken in a transaction of its own: a store whose first journal write
    fails (an id already there) still holds a lease that other workers see alive."""

    async def open_payment(store: PostgresStore, id: str) -> str:
        return await store.open_payment(
            intent=euro_intent(),
            request_method="GET",
            request_url="http://127.0.0.1:9/x",
            request_body=None,
            request_headers=[],
            reservations=[],
            id=id,
        )

    with PostgresStore(postgres_dsn) as other, PostgresStore(postgres_dsn) as worker:
        await open_payment(other, "taken")
        with pytest.raises(psycopg.errors.UniqueViolation):
            await open_payment(worker, "taken")
        await open_payment(worker, "mine")
        record = await other.get("mine")
        assert record is not None and record.in_progress and record.worker == worker.worker
        assert not await other.claim("mine")
