"""The sandbox's services as a paying client meets them."""

from __future__ import annotations

import subprocess
from decimal import Decimal
from pathlib import Path

import anyio
import httpx
import pytest

from x402_client import with_eur_payment
from x402_eur_sandbox import Fault, Faults, Sandbox
from x402_eur_sandbox._chain_a import EURQ_ASSET_ID
from x402_eur_sandbox._server import stop_all

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.anyio
async def test_a_method_the_route_does_not_serve_is_refused_before_anything_is_charged() -> None:
    async with Sandbox() as sandbox:
        before = sandbox.balance(sandbox.payer)
        client = with_eur_payment(httpx.AsyncClient(), sandbox.payment_config())
        async with client:
            deleted = await client.delete(sandbox.url("/weather"))
            posted = await client.post(sandbox.url("/report"), content=b"{}")
            paid = await client.get(sandbox.url("/weather"))
        assert (deleted.status_code, posted.status_code) == (405, 405)
        assert "x402_payment" not in deleted.extensions
        assert "x402_payment" not in posted.extensions
        assert paid.status_code == 200  # the same route, with the method it serves, is paid
        assert sandbox.balance(sandbox.payer) == before - Decimal("0.10")


@pytest.mark.anyio
async def test_without_anvil_the_evm_part_fails_with_one_plain_error(monkeypatch) -> None:
    monkeypatch.setenv("X402_ANVIL_BIN", "/nonexistent/anvil")
    with pytest.raises(RuntimeError, match="X402_ANVIL_BIN=/nonexistent/anvil is not an exec"):
        async with Sandbox(evm=True):
            pass


def _planned(target: str, tmp_path: Path) -> str:
    """What `make TARGET` would run on a fresh machine (`make -n`, nothing runs)."""
    result = subprocess.run(
        ["make", "-n", target, f"VENV={tmp_path / 'venv'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return result.stdout


def test_make_demo_installs_no_redis_and_make_test_says_when_it_does(tmp_path) -> None:
    demo = _planned("demo", tmp_path)
    assert "x402-eur-sandbox demo" in demo
    assert "-e './sandbox[mcp,cli,svm]'" in demo
    assert "redis" not in demo
    assert "apt-get" not in demo
    test = _planned("test", tmp_path)
    assert "installing redis-server (apt-get) for the shared-budget tests" in test
    assert "pytest" in test


@pytest.mark.anyio
async def test_stopping_stops_every_server_at_once() -> None:
    sandbox = await Sandbox(chain_a=True).start()
    urls = [sandbox.merchant_url, sandbox.payment_api_url, sandbox.chain_a.indexer_url]
    async with httpx.AsyncClient() as client:
        for url in urls:
            await client.get(url)  # each one answers while the sandbox runs
        await sandbox.stop()
        for url in urls:
            with pytest.raises(httpx.ConnectError):
                await client.get(url)


@pytest.mark.anyio
async def test_a_part_that_fails_to_stop_does_not_keep_the_others_running() -> None:
    stopped: list[str] = []

    class Part:
        def __init__(self, name: str, fails: bool = False) -> None:
            self.name, self.fails = name, fails

        async def stop(self) -> None:
            stopped.append(self.name)
            if self.fails:
                raise RuntimeError(f"{self.name} would not stop")

    with pytest.raises(RuntimeError, match="b would not stop"):
        await stop_all([Part("a"), Part("b", fails=True), None, Part("c")])
    assert sorted(stopped) == ["a", "b", "c"]


@pytest.mark.anyio
async def test_an_answer_fault_stands_in_for_the_indexer_once_and_the_indexer_can_lag() -> None:
    from x402_eur_sandbox import EURQ_ASSET_ID, ChainASandbox, Fault

    async with Sandbox(chain_a=True) as sandbox:
        chain = sandbox.chain_a
        assert isinstance(chain, ChainASandbox)
        ledger = chain.ledger
        sender, receiver = ledger.new_address(), ledger.new_address()
        ledger.mint(sender, EURQ_ASSET_ID, 10)
        transfer = ledger.transfer(sender, receiver, EURQ_ASSET_ID, 5)
        url = f"{chain.indexer_url}/v2/transactions/{transfer.id}"
        sandbox.faults.arm("indexer", Fault(kind="answer", status=200, body=b"<html>"))
        async with httpx.AsyncClient() as http:
            garbled = await http.get(url)
            assert (garbled.status_code, garbled.content) == (200, b"<html>")
            record = (await http.get(url)).json()["transaction"]
            assert record["confirmed-round"] == transfer.confirmed_round
            ledger.indexer_lag = 1  # not yet at the transfer's round
            assert (await http.get(url)).status_code == 404
            health = (await http.get(f"{chain.indexer_url}/health")).json()
            assert health == {"round": transfer.confirmed_round - 1}


@pytest.mark.anyio
async def test_a_timeout_fault_holds_its_call_until_it_is_released() -> None:
    faults = Faults()
    faults.arm("payment", Fault("timeout"))
    passed: list[str] = []

    async def call(name: str) -> None:
        await faults.before("payment")
        passed.append(name)

    with anyio.fail_after(60):
        async with anyio.create_task_group() as group:
            group.start_soon(call, "held")
            while faults.holding == 0:  # noqa: ASYNC110 - the call is another task
                await anyio.sleep(0.01)
            await call("after it")  # the fault struck once: the next call goes through
            assert passed == ["after it"]
            faults.release()
    assert passed == ["after it", "held"]
    assert faults.holding == 0


@pytest.mark.anyio
async def test_a_bridge_transfer_can_be_settled_before_its_delay() -> None:
    async with Sandbox(chain_a=True, bridge_delay=3600) as sandbox:
        chain, account = sandbox.chain_a, sandbox.bank.open_account("1.00")

        def transfer() -> str:
            made = sandbox.bank.pay(
                account,
                payment_from=account.code,
                to_type="BlockchainAddress",
                payment_to=chain.merchant_address,
                amount=Decimal("0.10"),
            )
            return made.code

        settled = transfer()
        assert sandbox.bank.transaction(settled).status == "Processing"
        assert chain.settle_bridge(settled)
        assert sandbox.bank.transaction(settled).status == "Paid"
        assert chain.asset_balance(chain.merchant_address, EURQ_ASSET_ID) == 100_000
        assert not chain.settle_bridge(settled)  # it ends once

        chain.end_next_bridge_as("Expired")
        refunded = transfer()
        assert chain.settle_bridge(refunded)
        assert sandbox.bank.transaction(refunded).status == "Expired"
        assert sandbox.balance(account) == Decimal("0.90")
        assert chain.asset_balance(chain.merchant_address, EURQ_ASSET_ID) == 100_000
