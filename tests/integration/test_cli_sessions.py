"""`x402-eur sessions`, `sessions refund` and `sessions withdraw`, run as a user would
(fresh processes) against the sandbox's batch-settlement merchant on anvil: what the
sessions hold, read back from the state file, and what the refund and the timed
withdrawal return, read from the chain."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.test_cli import run
from x402_eur_sandbox import Sandbox
from x402_eur_sandbox._anvil import _rpc_call_blocking, token_balance

pytestmark = pytest.mark.slow

DEPOSIT = 100_000  # ten requests of 0.01 sEURC: the client's deposit for /stream


@pytest.fixture(scope="module")
def batch() -> Iterator[Sandbox]:
    with Sandbox.run_in_thread(batch_settlement=True) as running:
        yield running


@pytest.fixture
def env(batch: Sandbox, tmp_path: Path) -> dict[str, str]:
    """The sandbox payer's settings, with a state file of the test's own."""
    return {**batch.env(), "X402_EUR_STATE": str(tmp_path / "state.sqlite3")}


def balance(batch: Sandbox) -> int:
    standard = batch.standard
    return asyncio.run(token_balance(standard.rpc_url, standard.token, standard.payer_address))


def pay(batch: Sandbox, env: dict[str, str], times: int) -> None:
    url = batch.batch.merchant.resource_url("/stream")
    for _ in range(times):
        result = run("fetch", url, env=env)
        assert result.returncode == 0, result.stderr


def listed(env: dict[str, str]) -> list[dict[str, Any]]:
    result = run("sessions", "--json", env=env)
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_sessions_lists_what_each_holds_and_refund_returns_it_from_the_chain(
    batch: Sandbox, env: dict[str, str]
) -> None:
    before = balance(batch)
    pay(batch, env, 3)
    table = run("sessions", env=env)
    assert table.returncode == 0, table.stderr
    header, row = table.stdout.splitlines()
    assert header.split() == [
        "ID", "RESOURCE", "NETWORK", "ASSET", "DEPOSITED", "SPENT", "SIGNED", "REFUNDED", "STATUS",
    ]  # fmt: skip
    assert row.split()[1:] == [
        batch.batch.merchant.resource_url("/stream"), "eip155:137", "sEURC",
        "0.10", "0.03", "0.03", "0.00", "open",
    ]  # fmt: skip
    (session,) = listed(env)
    assert row.startswith(session["id"][:12] + "…")
    assert "x402-eur sessions refund " + session["id"][:12] in table.stderr
    assert (session["unspent"], session["currency"], session["symbol"]) == ("0.07", "EUR", "sEURC")
    assert "signature" not in session and "config" not in session
    assert balance(batch) == before - DEPOSIT

    # Mistakes are one line and exit 2; nothing is asked of the merchant.
    short = session["id"][:12]
    for args, said in (
        (("refund", "0x12"), "too short"),
        (("refund", "0xfffffffff0"), "no session '0xfffffffff0'"),
        (("refund", short, "--amount", "0.08"), "holds 0.07 EUR unspent"),
        (("refund", short, "--amount", "0.0000001"), "at most 6 decimals"),
        (("withdraw", "zz"), "not a session id"),
    ):
        mistake = run("sessions", *args, env=env)
        assert mistake.returncode == 2, mistake.stderr
        first, hint = mistake.stderr.splitlines()
        assert first.startswith("x402-eur sessions: ") and said in first, first
        assert hint == "List them with: x402-eur sessions"
    no_key = {**env, "X402_EUR_EVM_PRIVATE_KEY": ""}
    missing = run("sessions", "refund", short, env=no_key)
    assert missing.returncode == 1 and "X402_EUR_EVM_PRIVATE_KEY" in missing.stderr
    assert len(missing.stderr.splitlines()) == 1
    assert listed(env)[0]["refunded"] == "0.00"
    assert balance(batch) == before - DEPOSIT

    part = run("sessions", "refund", short + "…", "--amount", "0.02", env=env)
    assert part.returncode == 0, part.stderr
    assert re.fullmatch(
        rf"x402-eur: session {short}…: 0\.02 EUR refunded to the payer, 0\.03 EUR kept by "
        r"the merchant for its requests; still open; refund transaction 0x[0-9a-f]{64}\n",
        part.stderr,
    ), part.stderr
    assert balance(batch) == before - DEPOSIT + 20_000
    rest = run("sessions", "refund", short, env=env)
    assert rest.returncode == 0, rest.stderr
    assert "0.05 EUR refunded to the payer" in rest.stderr and "; closed;" in rest.stderr
    assert balance(batch) == before - 30_000
    (after,) = listed(env)
    assert (after["refunded"], after["unspent"], after["status"]) == ("0.07", "0.00", "closed")
    assert run("sessions", "--status", "open", env=env).stderr.startswith("x402-eur: no open")
    again = run("sessions", "refund", short, env=env)
    assert again.returncode == 2 and "holds nothing unspent: nothing to refund" in again.stderr


def test_withdraw_starts_the_timed_withdrawal_waits_for_it_then_finishes_it(
    batch: Sandbox, env: dict[str, str]
) -> None:
    """The payer starts the withdrawal of the whole deposit; the merchant claims what its
    one voucher spent before the delay ends; the payer gets back the rest."""
    standard = batch.standard
    # The withdrawal is the payer's own transaction: its key pays the gas.
    _rpc_call_blocking(
        standard.rpc_url, "anvil_setBalance", [standard.payer_address, hex(10**18)], 30
    )
    before = balance(batch)
    pay(batch, env, 1)
    (session,) = listed(env)
    short = session["id"][:12]

    started = run("sessions", "withdraw", short, env=env)
    assert started.returncode == 0, started.stderr
    assert re.fullmatch(
        rf"x402-eur: session {short}…: withdrawal of 0\.10 EUR initiated \(transaction "
        r"0x[0-9a-f]{64}\); the escrow releases it after \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC "
        rf"by the chain's clock: run `x402-eur sessions withdraw {short}` then\n",
        started.stderr,
    ), started.stderr
    assert listed(env)[0]["status"] == "withdrawing"

    waiting = run("sessions", "withdraw", short, env=env)
    assert waiting.returncode == 1, waiting.stderr
    assert "its withdrawal is waiting until" in waiting.stderr
    assert "nothing was sent" in waiting.stderr
    assert balance(batch) == before - DEPOSIT

    # The delay is the merchant's time to claim what the vouchers spent: it does.
    merchant = batch.batch.merchant
    claimed = httpx.post(merchant.url + "/admin/claim-and-settle", timeout=60)
    assert claimed.status_code == 200, claimed.text
    for method, params in (("evm_increaseTime", [3600]), ("evm_mine", [])):
        _rpc_call_blocking(standard.rpc_url, method, params, 30)
    done = run("sessions", "withdraw", short, env=env)
    assert done.returncode == 0, done.stderr
    assert "withdrawal finalized, 0.09 EUR back to the payer" in done.stderr
    assert balance(batch) == before - 10_000
    (after,) = listed(env)
    assert (after["refunded"], after["status"]) == ("0.09", "closed")


def test_sessions_need_the_state_file(env: dict[str, str]) -> None:
    result = run("sessions", "--no-state", env=env)
    assert result.returncode == 2
    assert "drop --no-state" in result.stderr
    empty = run("sessions", env=env)
    assert empty.returncode == 0 and empty.stdout == ""
    assert empty.stderr.startswith("x402-eur: no sessions in ")
    assert not Path(env["X402_EUR_STATE"]).exists()  # never created by listing
