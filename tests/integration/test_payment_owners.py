"""Who owns a payment in flight: each store holds a lease (`SqliteStore`: a lock file the
operating system releases when its process dies; `PostgresStore`: an advisory lock its
connection holds, which the database releases when the connection ends), a payment belongs
to the store that opened it until it is finished, and recovery never takes over a payment
whose owner is alive. Every test that is not about the lock files runs on both stores
(`state`: a file's path, or a new PostgreSQL database's DSN).

The owners here are real processes: a child holds a store open, and is killed with
SIGKILL (no cleanup, as the OOM killer or a power cut would)."""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import textwrap
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.conftest import open_store, state_kinds
from tests.factories import euro_intent
from tests.merchants import Reply, ScriptedMerchant, Seen
from tests.waiting import eventually
from x402_client import (
    Budget,
    DestinationGuard,
    PaymentOutcomeUnknown,
    payments,
    with_eur_payment,
)
from x402_client._protocol.dsn import is_postgres_dsn
from x402_client._state.shared import state_of
from x402_client._state.sqlite_store import _SCHEMA_V1, SCHEMA_VERSION, SqliteStore

pytestmark = pytest.mark.anyio

#: A process that opens a payment in the journal and keeps its store open until stdin
#: closes (or it is killed).
HOLDER = textwrap.dedent("""
    import asyncio, sys
    from tests.factories import euro_intent
    from x402_client._state.stores import open_store

    async def main(path):
        store = open_store(path)
        journal_id = await store.open_payment(
            intent=euro_intent(), request_method="GET", request_url="http://127.0.0.1:9/x",
            request_body=None, request_headers=[], reservations=[("k", "t:1:ab")],
        )
        print(journal_id, flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        store.close()

    asyncio.run(main(sys.argv[1]))
""")


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "state.sqlite3"


@pytest.fixture(params=state_kinds())
def state(request: pytest.FixtureRequest, path: Path) -> str:
    """The state of the test, on each store: a file's path, or a new database's DSN."""
    if request.param == "sqlite":
        return str(path)
    return str(request.getfixturevalue("postgres_cluster").database())


def _holder(state: str) -> tuple[subprocess.Popen[str], str]:
    """A child process owning one payment in flight, and the payment's id."""
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, state],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert child.stdout is not None
    journal_id = child.stdout.readline().strip()
    assert len(journal_id) == 32, journal_id
    return child, journal_id


async def _let_go(store: Any, journal_id: str) -> None:
    """Wait until no live owner holds `journal_id` (a PostgreSQL server notices a killed
    client's connection is gone a moment after the kill)."""

    async def free() -> bool:
        record = await store.get(journal_id)
        return record is not None and not record.in_progress

    await eventually(free, f"the owner of {journal_id} to be gone")


def _delivered_by_hand(state: str, journal_id: str) -> None:
    """Journal `journal_id` as delivered, as another process would, in the state's own terms."""
    if is_postgres_dsn(state):
        import psycopg

        with psycopg.connect(state, autocommit=True) as pg:
            pg.execute(
                "UPDATE x402_eur.payments SET outcome = 'paid', delivered = TRUE WHERE id = %s",
                (journal_id,),
            )
        return
    conn = sqlite3.connect(state)
    try:
        conn.execute(
            "UPDATE payments SET outcome = 'paid', delivered = 1 WHERE id = ?", (journal_id,)
        )
        conn.commit()
    finally:
        conn.close()


def _stop(child: subprocess.Popen[str]) -> None:
    if child.poll() is None:
        child.kill()
    child.wait(timeout=30)
    for pipe in (child.stdin, child.stdout):
        if pipe is not None:
            pipe.close()


def _owner_files(state: str | Path) -> list[Path]:
    """The lock files of a state file's owners (a PostgreSQL state has none)."""
    if is_postgres_dsn(state):
        return []
    path = Path(state)
    owners = path.with_name(path.name + ".owners")
    return sorted(owners.glob("*.lock")) if owners.exists() else []


async def _open(store: Any, **kw: Any) -> str:
    args: dict[str, Any] = {
        "intent": euro_intent(),
        "request_method": "GET",
        "request_url": "http://127.0.0.1:9/x",
        "request_body": None,
        "request_headers": [],
        "reservations": [],
    }
    args.update(kw)
    return await store.open_payment(**args)


async def test_a_payment_a_live_process_holds_is_in_progress_until_the_process_is_killed(
    state: str,
) -> None:
    child, journal_id = _holder(state)
    try:
        with open_store(state) as store:
            record = await store.get(journal_id)
            assert record is not None and record.in_progress
            assert record.to_json()["in_progress"] is True
            (listed,) = await store.unfinished()
            assert listed.id == journal_id and listed.in_progress
            assert not await store.claim(journal_id)  # a live owner keeps it
            if not is_postgres_dsn(state):
                (held,) = _owner_files(state)
                assert stat.S_IMODE(held.stat().st_mode) == 0o600
                assert stat.S_IMODE(held.parent.stat().st_mode) == 0o700
            command = [sys.executable, "-m", "x402_client.cli", "payments", "--unfinished"]
            listed_cli = await anyio.run_process(
                [*command, "--state", state],
                check=False,
                env={**os.environ, "COLUMNS": "200"},
            )
            stdout, stderr = listed_cli.stdout.decode(), listed_cli.stderr.decode()
            assert listed_cli.returncode == 0, stderr
            # A fleet's operator sees which worker owns it (the holder: `host:pid`).
            worker = f"{socket.gethostname()}:{child.pid}"
            shown = f"pending (in progress: {worker})" if is_postgres_dsn(state) else ""
            assert (shown or "pending (in progress)") in stdout
            assert "1 in progress" in stderr and "x402-eur resume" not in stderr

            child.send_signal(signal.SIGKILL)
            assert child.wait(timeout=30) == -signal.SIGKILL

            # The OS released the dead process's lock (the database, once it sees the
            # connection gone): the payment is recoverable.
            await _let_go(store, journal_id)
            record = await store.get(journal_id)
            assert record is not None and not record.in_progress
            assert record.outcome == "pending"
            assert _owner_files(state) == []  # the dead owner's file is cleaned up
            # Another process on the same file (a new pid, maybe the dead one's) changes
            # nothing: ownership is a lock, not a pid.
            other, other_id = _holder(state)
            try:
                record = await store.get(journal_id)
                assert record is not None and not record.in_progress
                assert await store.claim(journal_id)
                assert not await store.claim(journal_id)  # this store's own now
                record = await store.get(journal_id)
                assert record is not None and record.in_progress
                assert [s.step for s in record.steps][-1] == "recovering"
                still = await store.get(other_id)
                assert still is not None and still.in_progress
            finally:
                _stop(other)
            await store.release_claim(journal_id)
            record = await store.get(journal_id)
            assert record is not None and not record.in_progress
            assert record.outcome == "pending"  # let go of, not finished
    finally:
        _stop(child)


async def test_a_process_that_closes_its_store_lets_go_of_its_payments(state: str) -> None:
    child, journal_id = _holder(state)
    assert child.stdin is not None
    child.stdin.close()  # the holder closes its store and exits normally
    assert child.wait(timeout=30) == 0
    _stop(child)
    assert _owner_files(state) == []
    with open_store(state) as store:
        record = await store.get(journal_id)
        assert record is not None and not record.in_progress
        assert await store.claim(journal_id)


async def test_the_files_of_owners_that_died_owning_nothing_are_swept(path: Path) -> None:
    owners = path.with_name(path.name + ".owners")
    owners.mkdir(parents=True)
    stale = owners / f"{'ab' * 16}.lock"  # nobody holds its lock
    stale.touch()
    with SqliteStore(path) as store:
        await _open(store)
        (own,) = _owner_files(path)
        assert own != stale and not stale.exists()
    assert _owner_files(path) == []


async def test_two_stores_of_one_process_are_two_owners(state: str) -> None:
    first = open_store(state)
    second = open_store(state)
    try:
        journal_id = await _open(first)
        assert (await first.get(journal_id)).in_progress  # type: ignore[union-attr]
        assert (await second.get(journal_id)).in_progress  # type: ignore[union-attr]
        assert not await first.claim(journal_id)  # its own payment, in flight
        assert not await second.claim(journal_id)
        await second.release_claim(journal_id)  # not its to let go of
        assert (await second.get(journal_id)).in_progress  # type: ignore[union-attr]
        first.close()
        assert not (await second.get(journal_id)).in_progress  # type: ignore[union-attr]
        assert await second.claim(journal_id)
    finally:
        first.close()
        second.close()
    assert _owner_files(state) == []


async def test_finishing_a_payment_ends_its_ownership(state: str) -> None:
    with open_store(state) as store, open_store(state) as other:
        paid = await _open(store)
        given_up = await _open(store)
        await store.finish_payment(paid, "paid", delivered=False)
        await store.mark_unrecoverable(given_up, "the merchant is gone")
        for journal_id in (paid, given_up):
            record = await other.get(journal_id)
            assert record is not None and not record.in_progress
        assert await other.claim(paid)
        await other.finish_payment(paid, "paid", delivered=True)
        assert not (await store.get(paid)).in_progress  # type: ignore[union-attr]


async def test_a_proof_finds_its_payment(state: str) -> None:
    with open_store(state) as store:
        older = await _open(store)
        await store.update_payment(older, proof="PROOF-A")
        newer = await _open(store)
        await store.update_payment(newer, proof="PROOF-A")
        coded = await _open(store, payment_request_code="pr_1")
        found = await store.find_by_proof("PROOF-A")
        assert found is not None and found.id == newer
        # A euro payment journaled before its proof existed: found by its request code.
        found = await store.find_by_proof("PROOF-B", "pr_1")
        assert found is not None and found.id == coded
        assert await store.find_by_proof("PROOF-B") is None
        assert await store.find_by_proof("PROOF-B", "pr_2") is None


async def test_a_version_1_file_is_migrated_and_its_payments_are_owned_by_nobody(
    path: Path,
) -> None:
    path.parent.mkdir(parents=True)
    conn = sqlite3.connect(path)
    try:
        for statement in _SCHEMA_V1:
            conn.execute(statement)
        conn.execute("PRAGMA user_version = 1")
        conn.execute(
            "INSERT INTO payments (id, created_at, updated_at, rail, scheme, network, asset, "
            "asset_symbol, amount, currency, pay_to, resource, accept, request_method, "
            "request_url, request_headers, request_body_omitted, reservations, outcome, "
            "delivered) VALUES ('old', '2024-01-01T00:00:00+00:00', "
            "'2024-01-01T00:00:00+00:00', 'euro', 'euro', 'provider:mainnet', 'EURO', 'EURO', "
            "'0.10', 'EUR', 'ACC', 'http://127.0.0.1:9/x', '{}', 'GET', 'http://127.0.0.1:9/x', "
            "'[]', 0, '[]', 'pending', 0)"
        )
        conn.commit()
    finally:
        conn.close()
    with SqliteStore(path) as store:
        (record,) = await store.unfinished()
        assert record.id == "old" and not record.in_progress
        assert await store.claim("old")
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    finally:
        conn.close()


# --- recovery leaves a live owner's payment alone ---------------------------------------------


async def test_recovery_never_touches_a_payment_a_live_store_holds(
    sandbox: Any, payer: Any, options_for: Any, serve: Any, state: str
) -> None:
    merchant = ScriptedMerchant(sandbox.bank, sandbox.merchant.code)
    url = await serve(merchant)
    budget = Budget("1.00")
    entry = merchant.entry()
    with open_store(state) as live:
        # A payment another store (of a live process: this one) is making: in flight, its
        # reservation held, the merchant's payment request not paid yet.
        reservation = await live.reserve(budget.key, 100_000, 1_000_000, None)
        assert reservation is not None
        journal_id = await live.open_payment(
            intent=euro_intent(pay_to=entry["payTo"], accept=entry),
            request_method="GET",
            request_url=url + "/paid",
            request_body=None,
            request_headers=[],
            reservations=[(budget.key, reservation)],
            payment_request_code=entry["paymentRequestCode"],
        )
        options = options_for(payer, state_path=state, budgets=[budget])
        try:
            async with with_eur_payment(httpx.AsyncClient(), options) as client:
                (recovery,) = await payments(client).recover_all()
                assert recovery.status == "in_progress", recovery.reason
                assert "still running" in recovery.reason
                again = await payments(client).recover(journal_id)
                assert again.status == "in_progress"
        finally:
            state_of(options).close()
        assert merchant.requests == []  # nothing was sent
        assert await live.spent(budget.key, None) == 100_000  # nothing released
        record = await live.get(journal_id)
        assert record is not None
        assert (record.outcome, record.unrecoverable, record.in_progress) == (
            "pending",
            None,
            True,
        )
    # The live store is gone (closed): recovery takes the payment over now. The request
    # was never paid: "not confirmed", left for later, its reservation still held.
    restarted = options_for(
        payer,
        state_path=state,
        budgets=[budget],
        confirmation_attempts=2,
        confirmation_wait=0.01,
    )
    try:
        async with with_eur_payment(httpx.AsyncClient(), restarted) as client:
            (recovery,) = await payments(client).recover_all()
        assert recovery.status == "pending", recovery.reason
        assert "not confirmed" in recovery.reason
        assert len(merchant.paid_requests) == 2
        journal = state_of(restarted).journal
        assert journal is not None
        record = await journal.get(journal_id)
        assert record is not None and not record.in_progress  # let go of
        assert await journal.spent(budget.key, None) == 100_000
    finally:
        state_of(restarted).close()
    assert sandbox.balance(payer) == Decimal("10.00")


# --- recovery authenticates like the caller ----------------------------------------------------

TOKEN = "Bearer agent-token-1"
BASIC = ("agent", "pw")
BASIC_HEADER = "Basic " + base64.b64encode(b"agent:pw").decode()


def _guarded(accepted: set[str]) -> Any:
    """A merchant whose paid resource wants an `Authorization` (or a `session` cookie) it
    knows, before anything else: 401 otherwise. Its paid retry fails with 503 until
    `state["up"]`, so a payment is made and not delivered."""

    def script(m: ScriptedMerchant, seen: Seen) -> Reply:
        credential = seen.headers.get("authorization", "")
        cookie = seen.headers.get("cookie", "")
        if credential not in accepted and "session=s-1" not in cookie:
            return Reply(401, {"error": "unauthorized"})
        if seen.proof is None:
            return m.challenge(m.entry())
        if not m.state.get("up"):
            return Reply(503, {"error": "try later"})
        valid, reason = m.verify(seen.proof)
        return Reply(200, {"served": True}) if valid else m.challenge(error=reason)

    return script


async def _undelivered(
    sandbox: Any, payer: Any, options_for: Any, serve: Any, state: str
) -> tuple[ScriptedMerchant, str, str]:
    """A payment made with credentials, journaled and not delivered: the merchant, the
    URL, the journal id."""
    accepted = {TOKEN, BASIC_HEADER}
    merchant = ScriptedMerchant(sandbox.bank, sandbox.merchant.code, _guarded(accepted))
    url = await serve(merchant) + "/paid?api_key=k-1"
    options = options_for(payer, state_path=state, merchant_error_retries=0)
    try:
        client = httpx.AsyncClient(headers={"Authorization": TOKEN, "X-Trace": "t-1"})
        async with with_eur_payment(client, options) as client:
            with pytest.raises(PaymentOutcomeUnknown, match="503"):
                await client.get(url)
        (record,) = await state_of(options).journal.unfinished()  # type: ignore[union-attr]
    finally:
        state_of(options).close()
    assert record.proof is not None
    merchant.state["up"] = True
    return merchant, url, record.id


@pytest.mark.parametrize("how", ["default headers", "auth", "cookies", "headers per call"])
async def test_recovery_sends_the_credentials_of_the_client_it_is_given(
    sandbox: Any, payer: Any, options_for: Any, serve: Any, state: str, how: str
) -> None:
    merchant, _, _ = await _undelivered(sandbox, payer, options_for, serve, state)
    options = options_for(payer, state_path=state)
    kwargs: dict[str, Any] = {
        "default headers": {"headers": {"Authorization": TOKEN}},
        "auth": {"auth": BASIC},
        "cookies": {"cookies": {"session": "s-1"}},
        "headers per call": {},
    }[how]
    extra = {"Authorization": TOKEN, "X-Trace": "t-2"} if how == "headers per call" else None
    try:
        async with with_eur_payment(httpx.AsyncClient(**kwargs), options) as client:
            if extra is None:
                (recovery,) = await payments(client).recover_all()
            else:
                (recovery,) = await payments(client).recover_all(headers=extra)
        assert recovery.status == "delivered", recovery.reason
        assert recovery.response is not None and recovery.response.json() == {"served": True}
        assert await state_of(options).journal.unfinished() == []  # type: ignore[union-attr]
    finally:
        state_of(options).close()
    paid = merchant.paid_requests[-1]
    assert paid.headers["x-trace"] == ("t-2" if extra else "t-1")
    # The journal redacted the query's credential: it is not sent as the word REDACTED.
    assert all("REDACTED" not in seen.url for seen in merchant.requests)
    assert len([t for t in sandbox.bank.payments_made if t.from_account == payer.code]) == 1


async def test_a_merchant_that_wants_credentials_leaves_the_payment_unfinished(
    sandbox: Any, payer: Any, options_for: Any, serve: Any, state: str
) -> None:
    _, _, journal_id = await _undelivered(sandbox, payer, options_for, serve, state)
    options = options_for(payer, state_path=state)
    try:
        async with with_eur_payment(httpx.AsyncClient(), options) as client:
            (recovery,) = await payments(client).recover_all()
            assert recovery.status == "pending", recovery.reason
            assert "401" in recovery.reason and "credentials" in recovery.reason
            assert recovery.response is None
            (record,) = await state_of(options).journal.unfinished()  # type: ignore[union-attr]
            assert (record.id, record.unrecoverable, record.in_progress) == (
                journal_id,
                None,
                False,
            )
            # With the credentials, the same payment is finished: no new payment.
            done = await payments(client).recover(journal_id, headers={"Authorization": TOKEN})
        assert done.status == "delivered", done.reason
    finally:
        state_of(options).close()
    assert len([t for t in sandbox.bank.payments_made if t.from_account == payer.code]) == 1
    assert sandbox.balance(payer) == Decimal("9.90")


async def test_a_client_that_may_not_reach_the_merchant_leaves_the_payment_unfinished(
    sandbox: Any, payer: Any, options_for: Any, serve: Any, state: str
) -> None:
    """Recovery through a client whose destination guard refuses the merchant's address
    (127.0.0.1, not admitted) sends nothing: the merchant said nothing of the payment, so
    it is not given up, and a client that may reach the merchant finishes it."""
    merchant, _, journal_id = await _undelivered(sandbox, payer, options_for, serve, state)
    sent = len(merchant.requests)
    options = options_for(payer, state_path=state)
    try:
        guarded = httpx.AsyncClient(
            headers={"Authorization": TOKEN}, transport=DestinationGuard().transport()
        )
        async with with_eur_payment(guarded, options) as client:
            (recovery,) = await payments(client).recover_all()
        assert recovery.status == "pending", recovery.reason
        assert "not sent" in recovery.reason and "127.0.0.1" in recovery.reason
        assert len(merchant.requests) == sent
        (record,) = await state_of(options).journal.unfinished()  # type: ignore[union-attr]
        assert (record.id, record.state) == (journal_id, "paid, not delivered")
        authorised = httpx.AsyncClient(headers={"Authorization": TOKEN})
        async with with_eur_payment(authorised, options) as client:
            done = await payments(client).recover(journal_id)
        assert done.status == "delivered", done.reason
    finally:
        state_of(options).close()
    assert len([t for t in sandbox.bank.payments_made if t.from_account == payer.code]) == 1
    assert sandbox.balance(payer) == Decimal("9.90")


async def test_a_merchant_still_down_leaves_the_payment_unfinished(
    sandbox: Any, payer: Any, options_for: Any, serve: Any, state: str
) -> None:
    merchant, _, journal_id = await _undelivered(sandbox, payer, options_for, serve, state)
    merchant.state["up"] = False  # 503 to every re-send of the proof
    options = options_for(payer, state_path=state, merchant_error_retries=1)
    try:
        authorised = httpx.AsyncClient(headers={"Authorization": TOKEN})
        async with with_eur_payment(authorised, options) as client:
            recovery = await payments(client).recover(journal_id)
        assert recovery.status == "pending", recovery.reason
        assert "503" in recovery.reason
        (record,) = await state_of(options).journal.unfinished()  # type: ignore[union-attr]
        assert (record.id, record.unrecoverable) == (journal_id, None)
    finally:
        state_of(options).close()
    assert len(merchant.paid_requests) == 1 + 2  # the first payment's, and two re-sends


async def test_an_already_used_proof_of_a_payment_delivered_meanwhile_is_not_given_up(
    sandbox: Any, payer: Any, options_for: Any, serve: Any, state: str
) -> None:
    merchant, _, journal_id = await _undelivered(sandbox, payer, options_for, serve, state)

    def delivered_by_hand_first(m: ScriptedMerchant, seen: Seen) -> Reply:
        if seen.proof is None:
            return m.challenge(m.entry())
        # The same proof, re-sent by hand in another process a moment earlier, was served
        # and journaled as delivered; recovery's re-send then finds it used.
        assert m.verify(seen.proof) == (True, "")
        _delivered_by_hand(state, journal_id)
        valid, reason = m.verify(seen.proof)
        assert not valid and "already used" in reason
        return m.challenge(m.entry(), error=reason)

    merchant.script = delivered_by_hand_first
    options = options_for(payer, state_path=state)
    try:
        async with with_eur_payment(httpx.AsyncClient(), options) as client:
            recovery = await payments(client).recover(journal_id)
    finally:
        state_of(options).close()
    assert recovery.status == "delivered", recovery.reason
    assert "meanwhile" in recovery.reason and recovery.response is None
    with open_store(state) as store:
        record = await store.get(journal_id)
    assert record is not None
    assert (record.outcome, record.delivered, record.unrecoverable) == ("paid", True, None)
    assert len([t for t in sandbox.bank.payments_made if t.from_account == payer.code]) == 1


async def test_resume_takes_the_credentials_on_the_command_line(
    sandbox: Any, payer: Any, options_for: Any, serve: Any, state: str
) -> None:
    merchant, _, journal_id = await _undelivered(sandbox, payer, options_for, serve, state)
    command = [sys.executable, "-m", "x402_client.cli", "resume", journal_id, "--state", state]
    env = {
        **os.environ,
        "X402_EUR_API_KEY": payer.api_key,
        "X402_EUR_ACCOUNT": payer.code,
        "X402_EUR_API_URL": sandbox.payment_api_url,
    }
    bare = await anyio.run_process(command, check=False, env=env)
    stderr = bare.stderr.decode()
    assert bare.returncode == 1, stderr
    assert "pending" in stderr and "401" in stderr and "resume -H" in stderr
    assert bare.stdout == b""
    authorised = await anyio.run_process(
        [*command, "-H", f"Authorization: {TOKEN}"], check=False, env=env
    )
    assert authorised.returncode == 0, authorised.stderr.decode()
    assert json.loads(authorised.stdout) == {"served": True}
    assert authorised.stderr.decode().strip().startswith("x402-eur: delivered:")
    again = await anyio.run_process(command, check=False, env=env)
    assert again.returncode == 0 and "delivered earlier" in again.stderr.decode()
    assert merchant.paid_requests[-1].headers["authorization"] == TOKEN
    assert len([t for t in sandbox.bank.payments_made if t.from_account == payer.code]) == 1
