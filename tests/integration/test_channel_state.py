"""Payment channels in the journal, on a real SQLite file and a real PostgreSQL database:
the compare-and-set of the highest cumulative amount signed; a record that outlives the
process that wrote it (killed with SIGKILL) and a hold that dies with it; and two processes
sharing one channel through the store, signing strictly increasing cumulative amounts,
exactly one per request."""

from __future__ import annotations

import json
import sqlite3
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.channel_books import CHECKS, channel, channel_id, signature
from tests.conftest import open_store, scan_for_secrets, state_kinds
from tests.waiting import PATIENCE, eventually
from x402_client import PaymentOptions
from x402_client._state.channels import ChannelBook
from x402_client._state.shared import state_of
from x402_client._state.sqlite_store import SqliteStore

pytestmark = pytest.mark.anyio

WORKER = Path(__file__).with_name("channel_worker.py")
#: Vouchers each of the two processes signs.
TIMES = 40
AMOUNT = 7


def _state(request: pytest.FixtureRequest, kind: str, tmp_path: Path) -> str:
    """A new state of `kind`: a file in `tmp_path`, or a new database of this worker's
    PostgreSQL cluster."""
    if kind == "sqlite":
        return str(tmp_path / "state.sqlite3")
    return str(request.getfixturevalue("postgres_cluster").database())


@pytest.mark.parametrize("kind", state_kinds())
@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
async def test_the_store_keeps_channels_as_every_book_must(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    kind: str,
    check: Callable[[ChannelBook], Coroutine[Any, Any, None]],
) -> None:
    with open_store(_state(request, kind, tmp_path)) as store:
        await check(store)


@pytest.mark.parametrize("kind", state_kinds())
async def test_a_channel_is_read_back_by_a_new_store_as_it_was_written(
    request: pytest.FixtureRequest, tmp_path: Path, kind: str
) -> None:
    state = _state(request, kind, tmp_path)
    cid = channel_id("kept")
    with open_store(state) as first:
        await first.open_channel(channel("kept", config={"nested": {"salt": "0x01"}, "n": 1}))
        assert await first.advance(cid, expected=0, signed=1 << 100, signature=signature(9))
        await first.acknowledge(cid, 1 << 99)
        await first.deposited(cid, 1 << 101)
        written = await first.channel(cid)
    with open_store(state) as second:
        assert await second.channel(cid) == written
        assert written is not None and dict(written.config) == {
            "nested": {"salt": "0x01"},
            "n": 1,
        }
        # The new store goes on from the amount the old one signed, never below it.
        assert not await second.advance(cid, expected=0, signed=1, signature=signature(1))
        assert await second.advance(
            cid, expected=1 << 100, signed=(1 << 100) + 1, signature=signature(2)
        )


async def _run_worker(config: dict[str, Any]) -> str:
    done = await anyio.run_process([sys.executable, str(WORKER), json.dumps(config)], check=False)
    stderr = scan_for_secrets(done.stderr.decode())
    assert done.returncode == 0, stderr
    return done.stdout.decode()


@pytest.mark.parametrize("kind", state_kinds())
async def test_a_killed_process_leaves_its_voucher_recorded_and_its_hold_released(
    request: pytest.FixtureRequest, tmp_path: Path, kind: str
) -> None:
    state = _state(request, kind, tmp_path)
    cid = channel_id("crash")
    with open_store(state) as store:
        await store.open_channel(channel("crash"))
        config = {"mode": "crash", "state": state, "channel": cid, "amount": 30}
        with anyio.fail_after(PATIENCE * 2):
            async with await anyio.open_process(
                [sys.executable, str(WORKER), json.dumps(config)]
            ) as child:
                assert child.stdout is not None
                said = b""
                async for chunk in child.stdout:
                    said += chunk
                    if b"\n" in said:
                        break
                assert said == b"held\n"
                # While the child lives, its hold keeps this process out.
                with anyio.move_on_after(0.5) as waited:
                    async with store.hold(cid):
                        pytest.fail("the channel was held by two processes at once")
                assert waited.cancelled_caught
                child.kill()  # SIGKILL: it dies holding the channel
                assert await child.wait() == -9
            # The hold died with the process: this one takes it (waiting for the database
            # to see the connection gone, on PostgreSQL).
            async with store.hold(cid):
                record = await store.channel(cid)
    assert record is not None and (record.signed, record.signature) == (30, signature(30))


@pytest.mark.parametrize("kind", state_kinds())
async def test_two_processes_sharing_a_channel_sign_each_cumulative_amount_once(
    request: pytest.FixtureRequest, tmp_path: Path, kind: str
) -> None:
    """Each process, `TIMES` times: hold the channel, read it, sign `signed + AMOUNT` by
    compare-and-set. Together they sign every amount from AMOUNT to AMOUNT x 2 x TIMES
    exactly once, each process its own amounts in increasing order, and no compare-and-set
    under the hold ever loses."""
    state = _state(request, kind, tmp_path)
    cid = channel_id("shared")
    with open_store(state) as store:
        await store.open_channel(channel("shared"))
    go = tmp_path / "go"
    configs = [
        {
            "mode": "sign",
            "state": state,
            "channel": cid,
            "amount": AMOUNT,
            "times": TIMES,
            "ready": str(tmp_path / f"ready-{index}"),
            "go": str(go),
        }
        for index in range(2)
    ]
    reports: list[dict[str, Any]] = []

    async def worker(config: dict[str, Any]) -> None:
        reports.append(json.loads(await _run_worker(config)))

    with anyio.fail_after(PATIENCE * 5):
        async with anyio.create_task_group() as group:
            for config in configs:
                group.start_soon(worker, config)

            def ready() -> bool:
                return all(Path(c["ready"]).exists() for c in configs)

            await eventually(ready, "both workers to be ready")
            go.touch()
    assert [r["lost"] for r in reports] == [0, 0]
    assert [len(r["signed"]) for r in reports] == [TIMES, TIMES]
    every = sorted(amount for r in reports for amount in r["signed"])
    assert every == [AMOUNT * n for n in range(1, 2 * TIMES + 1)]
    for report in reports:
        assert report["signed"] == sorted(set(report["signed"]))
    with open_store(state) as store:
        record = await store.channel(cid)
    assert record is not None and record.signed == AMOUNT * 2 * TIMES


@pytest.mark.parametrize("kind", state_kinds())
def test_options_with_a_state_keep_their_channels_in_it(
    request: pytest.FixtureRequest, tmp_path: Path, kind: str
) -> None:
    options = PaymentOptions(
        api_key="k",
        from_account="ACC_P",
        api_url="https://api.example",
        state_path=_state(request, kind, tmp_path),
    )
    state = state_of(options)
    try:
        assert state.journal is not None and state.channels is state.journal
    finally:
        state.close()


async def test_a_version_3_file_gets_the_channels_table_and_keeps_its_payments(
    tmp_path: Path,
) -> None:
    from x402_client._state.sqlite_store import _SCHEMA_V1, _SCHEMA_V2, _SCHEMA_V3

    path = tmp_path / "state.sqlite3"
    conn = sqlite3.connect(path)
    try:
        for statement in (*_SCHEMA_V1, *_SCHEMA_V2, *_SCHEMA_V3):
            conn.execute(statement)
        conn.execute("PRAGMA user_version = 3")
        conn.execute("INSERT INTO budget_totals (key, spent) VALUES ('k', 5)")
        conn.commit()
    finally:
        conn.close()
    with SqliteStore(path) as store:
        assert await store.spent("k", None) == 5
        assert await store.channels() == []
        opened = await store.open_channel(channel("migrated"))
        assert await store.channel(channel_id("migrated")) == opened
