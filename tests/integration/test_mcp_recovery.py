"""`x402-eur mcp`'s `payments` (unfinished) and `resume` tools over stdio, against the
session sandbox (`/weather` costs 0.10 EUR) on each store (`state`: a file, or a new
PostgreSQL database).

The unfinished payments are real: a payer process killed with SIGKILL right after the
provider paid its request (the money moved, the resource was never delivered), and a
live process that holds a payment in flight. `resume` must finish the dead one without a
second payment and leave the live one alone, and say so.
"""

# The imports of mcp follow the check that it is installed.
# ruff: noqa: E402

from __future__ import annotations

import json
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.needs import require

require("mcp_types", "pip install 'x402-eur[mcp-server]'")

from tests.conftest import open_store, state_kinds
from tests.integration.test_mcp_server import read_back, server_env, stderr_file, stdio_tools
from tests.integration.test_payment_owners import _holder, _stop
from tests.waiting import eventually
from x402_eur_sandbox import Account, Sandbox

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
CRASH_PAYER = Path(__file__).with_name("crash_payer.py")


@pytest.fixture(autouse=True)
def own_state_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test's server gets a state of its own: never the user's real one."""
    monkeypatch.setenv("X402_EUR_STATE", str(tmp_path / "state" / "state.sqlite3"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))


@pytest.fixture(params=state_kinds())
def state(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The state of the test: a file's path, or a new PostgreSQL database's DSN."""
    if request.param == "sqlite":
        return str(tmp_path / "state" / "state.sqlite3")
    return str(request.getfixturevalue("postgres_cluster").database())


async def _killed_after_paying(
    sandbox: Sandbox, account: Account, state: str, tmp_path: Path
) -> str:
    """A payer that dies (SIGKILL) right after the provider paid its request for
    `/weather`: the money moved, nothing was delivered. The id of its payment."""
    config = {
        "rail": "euro",
        "step": "after-call",
        "url": sandbox.url("/weather"),
        "api_key": account.api_key,
        "from_account": account.code,
        "api_url": sandbox.payment_api_url,
        "state_path": state,
        "budget": "5.00",
    }
    machine = tmp_path / "dead-machine"
    machine.mkdir()
    with anyio.fail_after(120):
        done = await anyio.run_process(
            [sys.executable, str(CRASH_PAYER), json.dumps(config)],
            check=False,
            cwd=machine,
            env=None,
            stderr=subprocess.STDOUT,
        )
    assert done.returncode == -9, done.stdout.decode()
    with open_store(state) as store:

        async def owner_gone() -> bool:
            # PostgreSQL ends the killed payer's lease a moment after the kill.
            return [r.in_progress for r in await store.unfinished()] == [False]

        await eventually(owner_gone, "the killed payer's lease to end")
        (record,) = await store.unfinished()
    assert record.payment_request_code is not None and record.outcome == "pending"
    return str(record.id)


def _paid_by(sandbox: Sandbox, account: Account) -> list[Any]:
    return [t for t in sandbox.bank.payments_made if t.from_account == account.code]


async def test_resume_finishes_a_dead_payment_without_paying_again_and_skips_a_live_one(
    sandbox: Sandbox, state: str, tmp_path: Path
) -> None:
    account = sandbox.bank.open_account("10.00")
    dead = await _killed_after_paying(sandbox, account, state, tmp_path)
    assert sandbox.balance(account) == Decimal("9.90")
    assert len(_paid_by(sandbox, account)) == 1
    child, live = _holder(state)
    try:
        env = server_env(sandbox, account, X402_EUR_STATE=state)
        with stderr_file() as errors:
            async with stdio_tools(env, "--budget", "5.00/24h", errlog=errors) as tools:
                listed = await tools.ok("payments", unfinished=True)
                assert listed["count"] == 2
                by_id = {p["id"]: p for p in listed["payments"]}
                assert set(by_id) == {dead, live}
                assert by_id[dead]["live"] is False and by_id[dead]["state"] == "pending"
                assert by_id[dead]["amount"] == "0.10" and by_id[dead]["currency"] == "EUR"
                assert by_id[dead]["paymentRequestCode"]
                assert by_id[live]["live"] is True and by_id[live]["state"] == "in progress"
                if state.startswith("postgresql"):
                    # A fleet's state knows which worker (host:pid) owns each payment.
                    assert by_id[live]["worker"] and by_id[live]["worker"].endswith(f":{child.pid}")

                # The live one, by id: left alone, and said so.
                one = await tools.ok("resume", id=live)
                assert one["paidNow"] is False and one["skipped"] == 1
                [skipped] = one["recoveries"]
                assert (skipped["id"], skipped["status"]) == (live, "in_progress")
                assert "still running" in skipped["reason"]
                assert skipped["moneyMoved"] is None and skipped["response"] is None

                # All of them: the dead one finished by its proof, the live one skipped.
                done = await tools.ok("resume", all=True)
                statuses = {r["id"]: r["status"] for r in done["recoveries"]}
                assert statuses == {dead: "delivered", live: "in_progress"}
                assert done["skipped"] == 1 and done["paidNow"] is False
                [finished] = [r for r in done["recoveries"] if r["id"] == dead]
                assert finished["moneyMoved"] is True
                assert finished["payment"]["state"] == "delivered"
                assert finished["response"]["status"] == 200
                assert finished["response"]["bodyEncoding"] == "text"
                assert json.loads(finished["response"]["body"])["city"] == "Amsterdam"

                # Nothing paid twice: one payment, the price once.
                assert sandbox.balance(account) == Decimal("9.90")
                assert len(_paid_by(sandbox, account)) == 1

                left = await tools.ok("payments", unfinished=True)
                assert [p["id"] for p in left["payments"]] == [live]
                again = await tools.ok("resume", all=True)
                assert [(r["id"], r["status"]) for r in again["recoveries"]] == [
                    (live, "in_progress")
                ]
            logged = read_back(errors)
        # At start-up the server said what it found, and recovered nothing by itself.
        assert "1 unfinished payment(s) no live process is making (2 in all)" in logged
    finally:
        _stop(child)
    with open_store(state) as store:
        held = await store.get(live)
    assert held is not None and held.outcome == "pending" and held.unrecoverable is None
    assert sandbox.balance(account) == Decimal("9.90")


async def test_resume_sends_only_where_the_server_may_reach(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """A server that does not admit the merchant's host re-sends nothing there: the payment
    stays unfinished (not given up), and nothing is paid."""
    account = sandbox.bank.open_account("10.00")
    state = str(tmp_path / "state" / "state.sqlite3")
    dead = await _killed_after_paying(sandbox, account, state, tmp_path)
    env = server_env(sandbox, account, X402_EUR_STATE=state, X402_EUR_MCP_ALLOW_HOSTS="")
    with stderr_file() as errors:
        async with stdio_tools(env, "--budget", "5.00/24h", errlog=errors) as tools:
            done = await tools.ok("resume", id=dead[:8])
            [refused] = done["recoveries"]
            assert (refused["id"], refused["status"]) == (dead, "pending")
            assert "not sent" in refused["reason"] and "127.0.0.1" in refused["reason"]
            assert refused["moneyMoved"] is None and refused["response"] is None
            left = await tools.ok("payments", unfinished=True)
            assert [(p["id"], p["unrecoverable"]) for p in left["payments"]] == [(dead, None)]
        read_back(errors)
    assert sandbox.balance(account) == Decimal("9.90")
    assert len(_paid_by(sandbox, account)) == 1


async def test_resume_refuses_what_names_no_payment(sandbox: Sandbox, tmp_path: Path) -> None:
    account = sandbox.bank.open_account("10.00")
    env = server_env(sandbox, account)
    with stderr_file() as errors:
        async with stdio_tools(env, "--budget", "5.00/24h", errlog=errors) as tools:
            for arguments in ({}, {"id": "0123456789", "all": True}, {"all": False}):
                error, text = await tools.error("resume", **arguments)
                assert error["type"] == "InvalidArguments" and error["moneyMoved"] is False
                assert "either id" in error["message"], text
            error, _ = await tools.error("resume", id="abc")
            assert error["type"] == "InvalidArguments" and "id" in error["message"]
            error, _ = await tools.error("resume", id="0123456789")
            assert error["type"] == "UnknownPayment" and error["moneyMoved"] is False
            assert error["summary"].startswith("No money moved")
            assert (await tools.ok("payments", unfinished=True)) == {"payments": [], "count": 0}
        read_back(errors)
    with stderr_file() as errors:
        async with stdio_tools(env, "--budget", "5.00/24h", "--no-state", errlog=errors) as tools:
            error, _ = await tools.error("resume", all=True)
            assert error["type"] == "NoJournal" and error["moneyMoved"] is False
            error, _ = await tools.error("payments", unfinished=True)
            assert error["type"] == "NoJournal"
        read_back(errors)
    assert sandbox.balance(account) == Decimal("10.00")
