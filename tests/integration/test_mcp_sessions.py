"""`x402-eur mcp`'s `sessions` and `refund_session` tools over stdio, against the
sandbox's batch-settlement merchant on anvil: an agent pays a stream of requests in one
session, sees what the session holds, and has its unspent deposit refunded to the payer,
never more than it holds, the refund read from the chain."""

# The imports of mcp follow the check that it is installed.
# ruff: noqa: E402

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.needs import require

require("mcp_types", "pip install 'x402-eur[mcp-server]'")

from tests.integration.test_mcp_server import read_back, stderr_file, stdio_tools
from x402_eur_sandbox import Sandbox
from x402_eur_sandbox._anvil import token_balance

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

DEPOSIT = 100_000  # ten requests of 0.01 sEURC: the client's deposit for /stream


@pytest.fixture
async def batch() -> AsyncIterator[Sandbox]:
    async with Sandbox(batch_settlement=True) as running:
        yield running


async def balance(batch: Sandbox) -> int:
    standard = batch.standard
    return await token_balance(standard.rpc_url, standard.token, standard.payer_address)


async def test_an_agent_sees_its_session_and_has_the_unspent_deposit_refunded(
    batch: Sandbox, tmp_path: Path
) -> None:
    env = {**batch.env(), "X402_EUR_STATE": str(tmp_path / "state.sqlite3")}
    url = batch.batch.merchant.resource_url("/stream")
    before = await balance(batch)
    with stderr_file() as errlog:
        async with stdio_tools(env, "--budget", "1.00", errlog=errlog) as tools:
            listed = {tool.name: tool for tool in (await tools.client.list_tools()).tools}
            assert listed["sessions"].annotations.read_only_hint is True
            assert listed["refund_session"].annotations.read_only_hint is False
            assert (await tools.ok("sessions")) == {"sessions": [], "count": 0}
            for _ in range(3):
                paid = await tools.ok("fetch", url=url)
                assert paid["status"] == 200 and paid["receipt"]["rail"] == "session"
            [session] = (await tools.ok("sessions"))["sessions"]
            assert session["resource"] == url and session["symbol"] == "sEURC"
            assert (session["deposited"], session["spent"], session["unspent"]) == (
                "0.10",
                "0.03",
                "0.07",
            )
            assert session["status"] == "open" and "signature" not in session
            short = session["id"][:12]

            # What the agent cannot make it do: ask more than the session holds, or name
            # a session by a start too short to be one; nothing is sent.
            for arguments, said in (
                ({"id": short, "amount": "0.08"}, "holds 0.07 EUR unspent"),
                ({"id": short, "amount": 1}, "holds 0.07 EUR unspent"),
                ({"id": short, "amount": "-0.01"}, "not a positive amount"),
                ({"id": "0x12"}, "id"),
                ({"id": "0xffffff0000"}, "no session"),
                ({"id": short, "to": "0x" + "11" * 20}, "Additional properties"),
            ):
                error, _ = await tools.error("refund_session", **arguments)
                assert error["type"] == "InvalidArguments", error
                assert said in error["message"] and error["moneyMoved"] is False
            assert (await tools.ok("sessions"))["sessions"][0]["refunded"] == "0.00"
            assert await balance(batch) == before - DEPOSIT

            part = await tools.ok("refund_session", id=session["id"], amount=0.02)
            assert (part["refunded"], part["charged"], part["closed"]) == ("0.02", "0.03", False)
            assert part["moneyMoved"] is True and part["txHash"].startswith("0x")
            assert await balance(batch) == before - DEPOSIT + 20_000
            rest = await tools.ok("refund_session", id=short)
            assert (rest["refunded"], rest["closed"], rest["currency"]) == ("0.05", True, "EUR")
            assert await balance(batch) == before - 30_000
            [closed] = (await tools.ok("sessions", status="closed"))["sessions"]
            assert (closed["refunded"], closed["unspent"]) == ("0.07", "0.00")
            assert (await tools.ok("sessions", status="open"))["count"] == 0
            error, _ = await tools.error("refund_session", id=short)
            assert "holds nothing unspent" in error["message"] and error["moneyMoved"] is False
        logged = read_back(errlog)
    assert "refund_session 0x" in logged
