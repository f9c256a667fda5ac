"""The SQLite store: budgets shared by the processes of one machine, and the journal."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import sys
import textwrap
from decimal import Decimal
from typing import Any

import anyio
import pytest

from tests.factories import euro_intent
from x402_client._protocol.budgets import Budget, BudgetStore
from x402_client._protocol.errors import BudgetExceeded, ConfigurationError
from x402_client._protocol.redact import safe_url
from x402_client._state.budget_stores import Budgets
from x402_client._state.sqlite_store import (
    MAX_STORED_BODY,
    SCHEMA_VERSION,
    JournalRecord,
    SqliteStore,
    default_state_path,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def path(tmp_path):
    return tmp_path / "state" / "state.sqlite3"


@pytest.fixture
def store(path):
    with SqliteStore(path) as opened:
        yield opened


def _count(path, table: str) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])  # noqa: S608
    finally:
        conn.close()


# --- budgets: the in-memory store's semantics ----------------------------------------------


async def test_it_is_a_budget_store(store):
    assert isinstance(store, BudgetStore)
    assert repr(store).startswith("SqliteStore(")


async def test_rolling_window_forgets_old_spending(path):
    now = [1000.0]
    with SqliteStore(path, clock=lambda: now[0]) as store:
        budgets = Budgets([Budget("0.30", window=60)], store)
        held = [await budgets.reserve(euro_intent("0.10")) for _ in range(3)]
        with pytest.raises(
            BudgetExceeded, match=r"budget 0\.30 EUR/1m: 0\.30 EUR spent, this payment 0\.10 EUR"
        ):
            await budgets.reserve(euro_intent("0.10"))
        now[0] += 61
        assert await budgets.reserve(euro_intent("0.10"))
        await budgets.release(held[0])  # releasing an expired reservation is harmless


async def test_released_reservations_are_given_back_and_currencies_never_mix(store):
    budgets = Budgets([Budget("0.10"), Budget("1", currency="USD")], store)
    held = await budgets.reserve(euro_intent("0.10"))
    with pytest.raises(BudgetExceeded):
        await budgets.reserve(euro_intent("0.01"))
    await budgets.release(held)
    assert await budgets.reserve(euro_intent("0.10"))
    assert await budgets.reserve(euro_intent("1.00", currency="USD"))
    with pytest.raises(BudgetExceeded):
        await budgets.reserve(euro_intent("0.01", currency="USD"))


async def test_all_budgets_or_none(store):
    budgets = Budgets([Budget("1.00", name="a"), Budget("0.15", name="b")], store)
    await budgets.reserve(euro_intent("0.10"))
    with pytest.raises(BudgetExceeded):
        await budgets.reserve(euro_intent("0.10"))
    assert await store.spent(Budget("1.00", name="a").key, None) == 100_000


async def test_release_subtracts_exactly_and_never_below_zero(store):
    key = "k:EUR:total"
    small = await store.reserve(key, 1, 10, None)
    big = await store.reserve(key, 9, 10, None)
    assert small and big and big.startswith("t:9:")
    assert await store.reserve(key, 1, 10, None) is None
    await store.release(key, big)
    assert await store.spent(key, None) == 1
    for junk in ("t:x:1", "nonsense"):
        await store.release(key, junk)
    assert await store.spent(key, None) == 1
    await store.release(key, "t:50:ab")
    assert await store.spent(key, None) == 0


async def test_headroom_and_status_read_the_file(store):
    budgets = Budgets([Budget("1.00"), Budget("0.25", window=3600)], store)
    await budgets.reserve(euro_intent("0.10"))
    assert await budgets.headroom() == {"EUR": Decimal("0.15")}
    assert [(s.spent, s.remaining) for s in await budgets.status()] == [
        (Decimal("0.10"), Decimal("0.90")),
        (Decimal("0.10"), Decimal("0.15")),
    ]


async def test_500_concurrent_reservations_hold_exactly_the_budget(store):
    budgets = Budgets([Budget("1.00")], store)
    won: list[bool] = []

    async def attempt() -> None:
        try:
            await budgets.reserve(euro_intent("0.10"))
            won.append(True)
        except BudgetExceeded:
            won.append(False)

    async with anyio.create_task_group() as group:
        for _ in range(500):
            group.start_soon(attempt)
    assert won.count(True) == 10 and won.count(False) == 490


@pytest.mark.slow
async def test_total_budgets_stay_flat(path):
    with SqliteStore(path, synchronous="NORMAL") as store:
        key = Budget("1.00").key

        async def cycles(n: int) -> None:
            for _ in range(n):
                rid = await store.reserve(key, 100_000, 1_000_000, None)
                assert rid is not None
                await store.release(key, rid)

        await cycles(1_000)
        size = path.stat().st_size
        # A row kept per cycle would grow the file by hundreds of kilobytes here.
        await cycles(5_000)
        assert await store.reserve(key, 100_000, 1_000_000, None)
        assert await store.spent(key, None) == 100_000
        assert _count(path, "budget_totals") == 1
        assert _count(path, "budget_reservations") == 0
        assert path.stat().st_size == size
        wal = path.with_name(path.name + "-wal")
        assert wal.stat().st_size < 8 * 1024 * 1024


async def test_windowed_rows_are_pruned_with_the_window(path):
    now = [1000.0]
    with SqliteStore(path, clock=lambda: now[0]) as store:
        key = Budget("1", window=60).key
        for _ in range(50):
            assert await store.reserve(key, 1_000, 1_000_000, 60.0)
            now[0] += 1
        assert _count(path, "budget_reservations") == 50
        assert await store.spent(key, 60.0) == 50_000
        now[0] += 30  # the first 20 (and more) are now older than the window
        assert await store.spent(key, 60.0) == 30_000
        assert await store.reserve(key, 1_000, 1_000_000, 60.0)
        assert _count(path, "budget_reservations") == 31
        now[0] += 3600
        assert await store.reserve(key, 1_000, 1_000_000, 60.0)
        assert _count(path, "budget_reservations") == 1


# --- three processes, one file, one budget of ten payments -----------------------------------

AGENT = textwrap.dedent("""
    import os, sys, time, anyio
    from decimal import Decimal
    from x402_client._protocol.budgets import Budget
    from x402_client._state.budget_stores import BudgetExceeded, Budgets
    from x402_client._state.sqlite_store import SqliteStore
    from x402_client._protocol.types import PaymentIntent

    async def main(path, ready, go):
        intent = PaymentIntent(rail="euro", scheme="euro", network="n", asset="EURO",
                               asset_symbol="EURO", amount=Decimal("0.10"), currency="EUR",
                               pay_to="ACC_X", resource="http://x/")
        won = lost = 0
        with SqliteStore(path) as store:
            budgets = Budgets([Budget("1.00", name="fleet")], store)
            async def attempt():
                nonlocal won, lost
                try:
                    await budgets.reserve(intent)
                    won += 1
                except BudgetExceeded:
                    lost += 1
            open(ready, "w").close()
            deadline = time.monotonic() + 60
            while not os.path.exists(go) and time.monotonic() < deadline:
                await anyio.sleep(0.005)
            async with anyio.create_task_group() as group:
                for _ in range(40):
                    group.start_soon(attempt)
        print(won, lost)

    anyio.run(main, *sys.argv[1:])
""")


@pytest.mark.slow
async def test_three_processes_share_one_budget_of_ten_payments(tmp_path):
    path = tmp_path / "shared.sqlite3"
    go = tmp_path / "go"
    results: list[tuple[int, int]] = []

    async def agent(n: int) -> None:
        ready = tmp_path / f"ready-{n}"
        done = await anyio.run_process(
            [sys.executable, "-c", AGENT, str(path), str(ready), str(go)], check=False
        )
        assert done.returncode == 0, done.stderr.decode()
        won, lost = (int(x) for x in done.stdout.decode().split())
        results.append((won, lost))

    async with anyio.create_task_group() as group:
        for n in range(3):
            group.start_soon(agent, n)
        # all three open the file, then all fire at once
        with anyio.fail_after(60):
            while len(list(tmp_path.glob("ready-*"))) < 3:  # noqa: ASYNC110 - other processes
                await anyio.sleep(0.01)
        go.touch()
    assert len(results) == 3
    assert sum(won for won, _ in results) == 10
    assert sum(lost for _, lost in results) == 110
    with SqliteStore(path) as store:
        assert await store.spent(Budget("1.00", name="fleet").key, None) == 1_000_000


# --- the payment journal ----------------------------------------------------------------------

HEADERS = [
    ("Accept", "application/json"),
    ("Authorization", "Bearer sk_do_not_print"),
    ("Proxy-Authorization", "Basic eA=="),
    ("Cookie", "session=1"),
    ("X-API-Key", "k"),
    ("X-PAYMENT", "proof-header"),
    ("PAYMENT-SIGNATURE", "sig"),
    ("X-Auth-Token", "t"),
    ("X-Client-Secret", "s"),
    ("Api-Key", "a"),
    ("User-Agent", "agent/1"),
    ("X-Request-Id", "r-1"),
]


async def _open(store: SqliteStore, **kw: Any) -> str:
    args: dict[str, Any] = {
        "intent": euro_intent(
            atomic_amount=100_000, accept={"scheme": "euro", "price": Decimal("0.10")}
        ),
        "request_method": "POST",
        "request_url": "http://merchant.test/weather?city=Paris",
        "request_body": b'{"q": 1}',
        "request_headers": HEADERS,
        "reservations": [("default:EUR:total", "t:100000:ab12")],
    }
    args.update(kw)
    return await store.open_payment(**args)


async def test_journal_round_trip(path):
    now = [1_700_000_000.0]
    with SqliteStore(path, clock=lambda: now[0]) as store:
        journal_id = await _open(store)
        record = await store.get(journal_id)
        assert isinstance(record, JournalRecord)
        assert record.outcome == "pending" and not record.delivered
        assert record.amount == Decimal("0.10") and record.atomic_amount == 100_000
        assert record.accept == {"scheme": "euro", "price": Decimal("0.10")}
        assert record.request_body == b'{"q": 1}' and record.request_body_size == 8
        assert not record.request_body_omitted
        assert record.reservations == (("default:EUR:total", "t:100000:ab12"),)
        assert record.intent == euro_intent(atomic_amount=100_000)
        assert [s.step for s in record.steps] == ["intent"]

        now[0] += 1
        await store.update_payment(journal_id, payment_request_code="pr_1", step="paying")
        await store.update_payment(journal_id, transaction_code="QP1", proof="PROOF", step="proof")
        await store.update_payment(journal_id, tx_hash="0xabc")
        await store.update_payment(journal_id)  # nothing given: nothing recorded
        record = await store.get(journal_id)
        assert record is not None
        assert (record.payment_request_code, record.transaction_code, record.proof) == (
            "pr_1",
            "QP1",
            "PROOF",
        )
        assert record.tx_hash == "0xabc" and record.blockchain_tx_id is None
        assert [(s.step, s.detail) for s in record.steps][1:] == [
            ("paying", "payment_request_code"),
            ("proof", "transaction_code, proof"),
            ("update", "tx_hash"),
        ]
        assert record.updated_at > record.created_at

        now[0] += 1
        await store.finish_payment(journal_id, "paid", delivered=True)
        record = await store.get(journal_id)
        assert record is not None and record.outcome == "paid" and record.delivered
        assert record.steps[-1].step == "paid"
        assert "PROOF" not in repr(record)

        data = record.to_json()
        assert json.loads(json.dumps(data)) == data
        assert data["amount"] == "0.10" and data["atomic_amount"] == "100000"
        assert data["accept"] == {"scheme": "euro", "price": "0.10"}
        assert data["request_body_base64"] == "eyJxIjogMX0="
        assert data["created_at"] == "2023-11-14T22:13:20+00:00"
        assert data["proof"] == "PROOF" and data["steps"][0]["step"] == "intent"
    with SqliteStore(path) as reopened:  # it is on disk
        assert (await reopened.get(journal_id)) == record
        assert await reopened.get("missing") is None


async def test_unfinished_lists_what_recovery_must_look_at(store):
    pending = await _open(store)
    unknown = await _open(store)
    undelivered = await _open(store)
    delivered = await _open(store)
    failed = await _open(store)
    given_up = await _open(store)
    await store.finish_payment(unknown, "unknown", delivered=False, error="timeout")
    await store.finish_payment(undelivered, "paid", delivered=False)
    await store.finish_payment(delivered, "paid", delivered=True)
    await store.finish_payment(failed, "failed", delivered=False, error="InsufficientFunds")
    await store.finish_payment(given_up, "unknown", delivered=False)
    await store.mark_unrecoverable(given_up, "the merchant is gone")
    assert [r.id for r in await store.unfinished()] == [pending, unknown, undelivered]
    record = await store.get(given_up)
    assert record is not None and record.outcome == "unknown"
    assert record.unrecoverable == "the merchant is gone"
    assert record.steps[-1].step == "unrecoverable"

    newest = [given_up, failed, delivered, undelivered, unknown, pending]
    assert [r.id for r in await store.payments()] == newest
    assert [r.id for r in await store.payments(limit=2)] == newest[:2]
    assert [r.id for r in await store.payments(outcome="paid")] == [delivered, undelivered]
    assert (await store.payments(outcome="failed"))[0].error == "InsufficientFunds"
    with pytest.raises(ValueError):
        await store.payments(limit=-1)


async def test_unknown_ids_and_outcomes_are_refused(store):
    with pytest.raises(KeyError):
        await store.update_payment("nope", proof="p")
    with pytest.raises(KeyError):
        await store.finish_payment("nope", "paid", delivered=True)
    with pytest.raises(KeyError):
        await store.mark_unrecoverable("nope", "x")
    journal_id = await _open(store)
    with pytest.raises(ValueError):
        await store.finish_payment(journal_id, "pending", delivered=False)
    assert _count(store.path, "payment_steps") == 1


async def test_sensitive_headers_are_never_written(store):
    journal_id = await _open(
        store, request_url="https://user:hunter2@merchant.test/x?city=Paris&api_key=sk_do_not_print"
    )
    record = await store.get(journal_id)
    assert record is not None
    assert record.request_headers == (
        ("Accept", "application/json"),
        ("User-Agent", "agent/1"),
        ("X-Request-Id", "r-1"),
    )
    assert record.request_url == "https://user@merchant.test/x?city=Paris&api_key=REDACTED"
    await store.aclose()
    files = [store.path, store.path.with_name(store.path.name + "-wal")]
    raw = b"".join(file.read_bytes() for file in files if file.exists())
    for secret in (b"sk_do_not_print", b"hunter2", b"proof-header", b"Bearer", b"session=1"):
        assert secret not in raw


def test_safe_url_keeps_ordinary_urls_untouched():
    url = "https://merchant.test/a/b?city=Paris&page=2#top"
    assert safe_url(url) == url
    assert safe_url("https://m.test/?token=abc") == "https://m.test/?token=REDACTED"


async def test_large_bodies_are_not_stored_and_the_record_says_so(store):
    big = b"x" * (MAX_STORED_BODY + 1)
    journal_id = await _open(store, request_body=big)
    record = await store.get(journal_id)
    assert record is not None
    assert record.request_body is None and record.request_body_omitted
    assert record.request_body_size == MAX_STORED_BODY + 1
    edge = await store.get(await _open(store, request_body=b"y" * MAX_STORED_BODY))
    assert edge is not None and edge.request_body_size == MAX_STORED_BODY
    assert not edge.request_body_omitted
    none = await store.get(await _open(store, request_body=None, request_method="GET"))
    assert none is not None and none.request_body is None and none.request_body_size is None
    assert not none.request_body_omitted


def _raw(path) -> bytes:
    """Every byte of the state file and its -wal, as a disk holds them."""
    files = [path, path.with_name(path.name + "-wal")]
    return b"".join(file.read_bytes() for file in files if file.exists())


async def test_credentials_in_request_bodies_are_never_written_and_the_record_says_so(store):
    form = [("Content-Type", "application/x-www-form-urlencoded")]
    as_json = [("Content-Type", "application/json")]
    bodies = {
        "form": (b"username=alice&password=s3cret-1&city=Oslo", form),
        "json": (b'{"user": {"password": "s3cret-2"}, "q": 1}', as_json),
        "tool arguments": (b'{"city": "Oslo", "Session_Token": "s3cret-3"}', as_json),
        "multipart": (
            b'--b\r\nContent-Disposition: form-data; name="password"\r\n\r\ns3cret-4\r\n--b--',
            [("Content-Type", "multipart/form-data; boundary=b")],
        ),
        "untyped": (b"user=alice&pwd=s3cret-5", []),
        "ordinary": (b'{"city": "Oslo"}', as_json),
    }
    records = {}
    for name, (body, headers) in bodies.items():
        journal_id = await _open(store, request_body=body, request_headers=headers)
        records[name] = await store.get(journal_id)
    assert records["form"].request_body == b"username=alice&password=REDACTED&city=Oslo"
    assert json.loads(records["json"].request_body) == {"user": {"password": "REDACTED"}, "q": 1}
    assert json.loads(records["tool arguments"].request_body) == {
        "city": "Oslo",
        "Session_Token": "REDACTED",
    }
    assert records["multipart"].request_body is None and records["untyped"].request_body is None
    for name, record in records.items():
        assert record.request_body_size == len(bodies[name][0])
        assert record.request_body_redacted is (name != "ordinary"), name
        assert not record.request_body_omitted
        assert record.to_json()["request_body_redacted"] is record.request_body_redacted
    assert records["ordinary"].request_body == b'{"city": "Oslo"}'
    assert ("request body", "kept with its credentials redacted") in records["form"].facts()
    assert ("request body", "not kept (it may hold credentials)") in records["untyped"].facts()
    assert ("request body", None) in records["ordinary"].facts()
    assert b"s3cret" not in _raw(store.path)
    await store.aclose()
    assert b"s3cret" not in _raw(store.path)


async def test_a_version_2_file_is_migrated_and_its_bodies_count_as_sent(path):
    from x402_client._state.sqlite_store import _SCHEMA_V1, _SCHEMA_V2

    path.parent.mkdir(parents=True)
    conn = sqlite3.connect(path)
    try:
        for statement in (*_SCHEMA_V1, *_SCHEMA_V2):
            conn.execute(statement)
        conn.execute("PRAGMA user_version = 2")
        conn.execute(
            "INSERT INTO payments (id, created_at, updated_at, rail, scheme, network, asset, "
            "asset_symbol, amount, currency, pay_to, resource, accept, request_method, "
            "request_url, request_headers, request_body, request_body_size, "
            "request_body_omitted, reservations, outcome, delivered) VALUES ('old', "
            "'2024-01-01T00:00:00+00:00', '2024-01-01T00:00:00+00:00', 'euro', 'euro', "
            "'provider:mainnet', 'EURO', 'EURO', '0.10', 'EUR', 'ACC', 'http://127.0.0.1:9/x', "
            "'{}', 'POST', 'http://127.0.0.1:9/x', '[]', X'7B7D', 2, 0, '[]', 'pending', 0)"
        )
        conn.commit()
    finally:
        conn.close()
    with SqliteStore(path) as store:
        (record,) = await store.unfinished()
        assert (record.id, record.request_body, record.request_body_redacted) == (
            "old",
            b"{}",
            False,
        )
        assert record.body_kept is None
        kept = await store.get(await _open(store, request_body=b"password=s3cret"))
        assert kept is not None and kept.request_body_redacted and kept.request_body is None
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 4
    finally:
        conn.close()


# --- the file -----------------------------------------------------------------------------------


async def test_file_is_private_versioned_and_in_wal_mode(path):
    with SqliteStore(path) as store:
        await store.reserve("k", 1, 10, None)  # the -wal file exists once something is written
        for file in (path, path.with_name(path.name + "-wal")):
            assert stat.S_IMODE(file.stat().st_mode) == 0o600, file
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
        conn.commit()
    finally:
        conn.close()
    with pytest.raises(ConfigurationError, match="newer"):
        SqliteStore(path)


async def test_a_closed_store_refuses_calls(path):
    store = SqliteStore(path)
    await store.aclose()
    await store.aclose()  # twice is harmless
    with pytest.raises(RuntimeError, match="closed"):
        await store.spent("k", None)


def test_default_state_path(monkeypatch, tmp_path):
    monkeypatch.setenv("X402_EUR_STATE", str(tmp_path / "mine.db"))
    assert default_state_path() == tmp_path / "mine.db"
    monkeypatch.delenv("X402_EUR_STATE")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert default_state_path() == tmp_path / "data" / "x402-eur" / "state.sqlite3"
    monkeypatch.setenv("XDG_DATA_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    expected = tmp_path / "home" / ".local" / "share" / "x402-eur" / "state.sqlite3"
    assert default_state_path() == expected
    monkeypatch.delenv("XDG_DATA_HOME")
    assert default_state_path() == expected
    assert not os.path.exists(expected)  # computing the path creates nothing
