"""Sessions (`batch-settlement`) keep their money rules across processes, crashes, the
`on_before_payment` hook, budgets and the timed withdrawal: the client against the sandbox's
own merchant, facilitator and escrow on a real anvil chain.

The merchant's paid resource writes down the voucher of every request it serves, in the
order it serves them; payer processes (`session_payer.py`) write down every payload they
send before it leaves, so what was signed, sent, served, charged and claimed can be held
against each other, even of a process that was killed.
"""

from __future__ import annotations

import base64
import json
import signal
import sys
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from eth_account import Account

from tests.conftest import register_secrets
from tests.waiting import eventually
from x402_client import (
    Budget,
    BudgetExceeded,
    PaymentIntent,
    PaymentOptions,
    PaymentRefused,
    PaymentRejectedByHook,
    payments,
    with_eur_payment,
)
from x402_client._options import EvmOptions
from x402_client._protocol.assets import Asset
from x402_client._rails.batch import DEPOSIT_DESCRIPTION
from x402_eur_sandbox._anvil import AnvilNode, token_balance
from x402_eur_sandbox._batch_escrow import channel_state
from x402_eur_sandbox._batch_merchant import BatchSettlement
from x402_eur_sandbox._batch_wire import MIN_WITHDRAW_DELAY
from x402_eur_sandbox._merchant import Price
from x402_eur_sandbox._standard import _OWNER_KEY, _json_answer, _mint, _send, deploy_eip3009_token

pytestmark = pytest.mark.anyio

WORKER = Path(__file__).with_name("session_payer.py")
CHAIN_ID = 137
PRICE = 10_000  # 0.01 sEURC
DEPOSIT = 10 * PRICE  # what the client deposits at this price (EvmOptions.session_requests)
FUNDING = 5_000_000
PRICES = {"/stream": Price(Decimal("0.01"), "One request of a stream")}


def _payload(header: str) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads(base64.b64decode(header))["payload"]
    return payload


def _ceiling(payload: dict[str, Any]) -> int:
    return int(payload["voucher"]["maxClaimableAmount"])


class _Served:
    """The merchant's paid resource: answers, and writes down the voucher ceiling of every
    request it serves (the merchant charges a request after its resource served it).
    `hold_at`: the request (counting from 1) it holds until `release` is set."""

    def __init__(self) -> None:
        self.ceilings: list[int] = []
        self.hold_at = 0
        self.release = anyio.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        headers = dict(scope["headers"])
        self.ceilings.append(_ceiling(_payload(headers[b"payment-signature"].decode())))
        if len(self.ceilings) == self.hold_at:
            await self.release.wait()
        answer = _json_answer(200, {"paid": True})
        await _send(send, answer.status, list(answer.headers), answer.body)


class _Recorder(httpx.AsyncBaseTransport):
    """The network of an in-process payer: every payment payload that went out, in order."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.sent: list[dict[str, Any]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        header = request.headers.get("payment-signature")
        if header is not None:
            self.sent.append(_payload(header))
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


class Stand:
    """The chain, the sandbox's batch-settlement merchant and facilitator, a funded payer."""

    def __init__(self, node: AnvilNode, token: str, part: BatchSettlement, served: _Served):
        assert part.merchant is not None
        self.node, self.token, self.merchant, self.served = node, token, part.merchant, served
        account = Account.create()
        self.payer_key = "0x" + bytes(account.key).hex()
        self.payer = str(account.address)
        register_secrets(self.payer_key)
        self.network = _Recorder()

    @property
    def url(self) -> str:
        return self.merchant.resource_url("/stream")

    def asset(self) -> Asset:
        return Asset(chain_id=CHAIN_ID, address=self.token, symbol="sEURC", currency="EUR")

    def options(self, **overrides: Any) -> PaymentOptions:
        settings: dict[str, Any] = {
            "evm": EvmOptions(private_key=self.payer_key, rpc_urls={CHAIN_ID: self.node.rpc_url}),
            "assets": [self.asset()],
            "max_amount_per_payment": {"EUR": "0.05"},
        }
        return PaymentOptions(**{**settings, **overrides})

    def client(self, options: PaymentOptions) -> httpx.AsyncClient:
        return with_eur_payment(httpx.AsyncClient(transport=self.network, timeout=60), options)

    def worker_config(self, state: str, sent: Path, **more: Any) -> dict[str, Any]:
        asset = self.asset()
        return {
            "key": self.payer_key,
            "rpc_url": self.node.rpc_url,
            "chain_id": CHAIN_ID,
            "asset": {
                "chain_id": asset.chain_id,
                "address": asset.address,
                "symbol": asset.symbol,
                "currency": asset.currency,
            },
            "state": state,
            "url": self.url,
            "sent": str(sent),
            **more,
        }

    async def balance(self, address: str) -> int:
        return await token_balance(self.node.rpc_url, self.token, address)

    async def escrow(self, channel_id: str) -> tuple[int, int]:
        """The escrow's (balance, total claimed) of a channel."""
        return await channel_state(self.node.rpc_url, bytes.fromhex(channel_id[2:]))

    def charged(self) -> int:
        """What the merchant charged, over every channel it serves."""
        return sum(record.charged for record in self.merchant.channels.values())

    async def rpc(self, method: str, params: list[Any]) -> Any:
        async with httpx.AsyncClient(timeout=60) as http:
            body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
            answer = (await http.post(self.node.rpc_url, json=body)).json()
        assert "error" not in answer, answer
        return answer.get("result")


async def _run_payer(config: dict[str, Any]) -> tuple[int, list[str]]:
    """A payer process to its end: (exit status, the outcome of every request it made)."""
    with anyio.fail_after(300):
        done = await anyio.run_process(
            [sys.executable, str(WORKER), json.dumps(config)], check=False
        )
    if done.returncode != 0:
        return done.returncode, []
    outcomes: list[str] = json.loads(done.stdout)["outcomes"]
    return 0, outcomes


def _sent(path: Path) -> list[dict[str, Any]]:
    """What payer processes wrote down before sending, in order."""
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
async def stand() -> AsyncIterator[Stand]:
    served = _Served()
    async with AnvilNode(CHAIN_ID) as node:
        token = await deploy_eip3009_token(node.rpc_url, _OWNER_KEY)
        async with BatchSettlement(
            rpc_url=node.rpc_url, chain_id=CHAIN_ID, token=token, prices=PRICES, resource=served
        ) as part:
            made = Stand(node, token, part, served)
            await _mint(node.rpc_url, token, _OWNER_KEY, made.payer, FUNDING)
            yield made


async def _assert_settles_what_was_served(
    stand: Stand, channel_id: str, served: int, deposited: int = DEPOSIT
) -> None:
    """The merchant served `served` requests, one voucher each, each one price above the
    last; it charged exactly that, and a claim takes exactly that from the escrow, which
    holds what the payer deposited and nothing more."""
    assert stand.served.ceilings == [PRICE * n for n in range(1, served + 1)]
    assert stand.charged() == served * PRICE
    settled = await stand.merchant.claim_and_settle()
    assert settled["amount"] == str(served * PRICE)
    assert await stand.escrow(channel_id) == (deposited, served * PRICE)
    assert await stand.balance(stand.merchant.pay_to) == served * PRICE
    assert await stand.balance(stand.payer) == FUNDING - deposited


async def _kill_while_served(stand: Stand, config: dict[str, Any]) -> None:
    """A payer whose last request the merchant holds in its resource is killed there; then
    the merchant finishes serving it and charges it, with nobody left to answer."""
    stand.served.hold_at = config["requests"]
    command = [sys.executable, str(WORKER), json.dumps(config)]
    try:
        with anyio.fail_after(300):
            async with await anyio.open_process(command) as process:
                await eventually(
                    lambda: len(stand.served.ceilings) == config["requests"],
                    "the merchant to hold the payer's last request",
                )
                process.kill()
                assert await process.wait() == -signal.SIGKILL
    finally:
        stand.served.release.set()
    await eventually(
        lambda: stand.charged() == config["requests"] * PRICE,
        "the merchant to charge the request it served",
    )


# --- a payer killed mid-request, resumed by another process ----------------------------------

RESUMED = 2  # requests the next process pays


@pytest.mark.parametrize("kill", ["before-send", "after-answer", "while-served"])
@pytest.mark.parametrize("paid", [2, 0], ids=["in-a-voucher", "in-the-deposit"])
async def test_a_payer_killed_mid_request_is_resumed_by_another_process_without_double_charge(
    stand: Stand, tmp_path: Path, kill: str, paid: int
) -> None:
    """`before-send`: the voucher was journaled and never left; `after-answer`: the merchant
    served and charged it, and its answer died with the payer; `while-served`: the payer
    died while the merchant was serving it, and the merchant charged it after. The next
    process, on the same state file, pays on from the journal: the merchant charged exactly
    one price per request it served, never one it did not serve, and never one twice; and
    one deposit in all, also when the payer died in the request that deposits.
    (`paid`: the requests the payer paid before the one it dies in.)"""
    state, sent = str(tmp_path / "state.db"), tmp_path / "sent.jsonl"
    config = stand.worker_config(state, sent)
    if kill == "while-served":
        await _kill_while_served(stand, {**config, "requests": paid + 1})
    else:
        killed = {**config, "requests": paid + 1, "kill": kill}
        assert await _run_payer({**killed, "kill_at": paid + 1}) == (-9, [])
    # the voucher of the request the payer died in was journaled before it could leave
    (record,) = await payments(stand.options(state_path=state)).sessions()
    assert (record.signed, record.acknowledged) == ((paid + 1) * PRICE, paid * PRICE)
    assert await _run_payer({**config, "requests": RESUMED}) == (0, ["200"] * RESUMED)

    lines = _sent(sent)
    deposits = [line for line in lines if line["payload"].get("type") == "deposit"]
    assert [int(d["payload"]["deposit"]["amount"]) for d in deposits if d["sent"]] == [DEPOSIT]
    first, second = lines[0]["pid"], lines[-1]["pid"]
    assert first != second
    ceilings = [(line["pid"] == first, _ceiling(line["payload"]), line["sent"]) for line in lines]
    crashed = paid + 1
    before = [(True, PRICE * n, True) for n in range(1, crashed)]
    if kill == "before-send":
        # the journaled voucher never left; the next process signs the same amount again
        served = paid + RESUMED
        after = [(True, PRICE * crashed, False)]
        after += [(False, PRICE * n, True) for n in range(crashed, served + 1)]
    else:
        # the merchant charged the voucher: the same amount again is answered with its
        # corrective 402 (proven by the payer's own voucher), the next builds on it
        served = crashed + RESUMED
        after = [(True, PRICE * crashed, True), (False, PRICE * crashed, True)]
        after += [(False, PRICE * n, True) for n in range(crashed + 1, served + 1)]
    assert ceilings == before + after

    (record,) = await payments(stand.options(state_path=state)).sessions()
    assert (record.deposited, record.signed, record.acknowledged) == (
        DEPOSIT,
        served * PRICE,
        served * PRICE,
    )
    await _assert_settles_what_was_served(stand, record.channel_id, served)


# --- two processes on one channel ------------------------------------------------------------

EACH = 6  # requests per process: together they pass the first deposit, and top up once


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_two_processes_on_one_channel_sign_strictly_increasing_amounts_one_per_request(
    stand: Stand, tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    state = (
        str(request.getfixturevalue("postgres_dsn"))
        if kind == "postgres"
        else str(tmp_path / "state.db")
    )
    go = tmp_path / "go"
    configs = [
        stand.worker_config(
            state,
            tmp_path / f"sent-{i}.jsonl",
            requests=EACH,
            ready=str(tmp_path / f"ready-{i}"),
            go=str(go),
        )
        for i in range(2)
    ]
    results: list[tuple[int, list[str]]] = []

    async def run(config: dict[str, Any]) -> None:
        results.append(await _run_payer(config))

    async with anyio.create_task_group() as group:
        for config in configs:
            group.start_soon(run, config)
        await eventually(
            lambda: all(Path(c["ready"]).exists() for c in configs), "both payers to be ready"
        )
        go.touch()

    assert results == [(0, ["200"] * EACH)] * 2
    sent = [_sent(Path(c["sent"])) for c in configs]
    # each process sent one voucher per request, each above the one before
    for lines in sent:
        ceilings = [_ceiling(line["payload"]) for line in lines]
        assert len(ceilings) == EACH and ceilings == sorted(set(ceilings)), ceilings
    # together: every amount once, and the merchant served them in increasing order
    everything = sorted(_ceiling(line["payload"]) for lines in sent for line in lines)
    assert everything == [PRICE * n for n in range(1, 2 * EACH + 1)]
    # one deposit, and one top-up when the next voucher would have passed it
    deposits = sorted(
        (_ceiling(line["payload"]), int(line["payload"]["deposit"]["amount"]))
        for lines in sent
        for line in lines
        if line["payload"].get("type") == "deposit"
    )
    assert deposits == [(PRICE, DEPOSIT), (11 * PRICE, DEPOSIT)]
    (record,) = await payments(stand.options(state_path=state)).sessions()
    assert (record.deposited, record.signed) == (2 * DEPOSIT, 2 * EACH * PRICE)
    await _assert_settles_what_was_served(stand, record.channel_id, 2 * EACH, 2 * DEPOSIT)


# --- the hook and budgets --------------------------------------------------------------------


async def test_the_hook_sees_the_deposit_and_refusing_it_signs_and_moves_nothing(
    stand: Stand, tmp_path: Path
) -> None:
    seen: list[PaymentIntent] = []

    def refuse_deposits(intent: PaymentIntent) -> bool:
        seen.append(intent)
        return intent.description != DEPOSIT_DESCRIPTION

    options = stand.options(state_path=tmp_path / "state.db", on_before_payment=refuse_deposits)
    async with stand.client(options) as client:
        with pytest.raises(PaymentRejectedByHook) as refused:
            await client.get(stand.url)
    assert refused.value.money_moved is False
    # the request's increment, approved; then the deposit it needs, refused
    assert [(i.atomic_amount, i.description == DEPOSIT_DESCRIPTION) for i in seen] == [
        (PRICE, False),
        (DEPOSIT, True),
    ]
    deposit = seen[-1]
    assert deposit.description is not None and "deposit" in deposit.description
    assert (deposit.amount, deposit.currency) == (Decimal("0.10"), "EUR")
    assert stand.network.sent == [] and stand.served.ceilings == []
    assert await stand.balance(stand.payer) == FUNDING
    for record in await payments(options).sessions():
        assert (record.signed, record.deposited) == (0, 0)
        assert await stand.escrow(record.channel_id) == (0, 0)


async def test_the_hook_sees_the_deposit_once_and_every_increment(
    stand: Stand, tmp_path: Path
) -> None:
    seen: list[tuple[str, int | None]] = []

    def approve(intent: PaymentIntent) -> bool:
        deposit = intent.description == DEPOSIT_DESCRIPTION
        seen.append(("deposit" if deposit else "increment", intent.atomic_amount))
        return True

    options = stand.options(state_path=tmp_path / "state.db", on_before_payment=approve)
    async with stand.client(options) as client:
        for _ in range(3):
            assert (await client.get(stand.url)).status_code == 200
    assert seen == [("increment", PRICE), ("deposit", DEPOSIT)] + [("increment", PRICE)] * 2


async def test_a_budget_counts_each_increment_and_not_the_deposit(
    stand: Stand, tmp_path: Path
) -> None:
    """A budget of three prices, far below the deposit: three requests go through, the
    fourth is refused with nothing signed."""
    options = stand.options(state_path=tmp_path / "state.db", budgets=[Budget("0.03")])
    async with stand.client(options) as client:
        for _ in range(3):
            assert (await client.get(stand.url)).status_code == 200
        with pytest.raises(BudgetExceeded) as refused:
            await client.get(stand.url)
        assert refused.value.money_moved is False
        assert payments(client).ledger.total("EUR") == Decimal("0.03")
    assert [_ceiling(p) for p in stand.network.sent] == [PRICE, 2 * PRICE, 3 * PRICE]
    (record,) = await payments(options).sessions()
    assert (record.deposited, record.signed) == (DEPOSIT, 3 * PRICE)
    assert stand.charged() == 3 * PRICE


# --- the timed withdrawal --------------------------------------------------------------------


async def test_the_timed_withdrawal_returns_exactly_what_was_not_claimed(
    stand: Stand, tmp_path: Path
) -> None:
    options = stand.options(state_path=tmp_path / "state.db")
    # the withdrawal is the payer's own transaction: its gas
    await stand.rpc("anvil_setBalance", [stand.payer, hex(10**17)])
    async with stand.client(options) as client:
        for _ in range(3):
            assert (await client.get(stand.url)).status_code == 200
        settled = await stand.merchant.claim_and_settle()
        assert settled["amount"] == str(3 * PRICE)
        (record,) = await payments(client).sessions()
        channel_id = record.channel_id

        started = await payments(client).withdraw_session(channel_id)
        assert started.step == "initiated" and started.finalize_after is not None
        assert started.withdrawn == Decimal(DEPOSIT - 3 * PRICE).scaleb(-6)
        waiting = await payments(client).withdraw_session(channel_id)
        assert (waiting.step, waiting.finalize_after) == ("waiting", started.finalize_after)

        # no voucher on a channel being withdrawn
        sent = len(stand.network.sent)
        with pytest.raises(PaymentRefused, match="takes no new vouchers") as refused:
            await client.get(stand.url)
        assert refused.value.money_moved is False
        assert len(stand.network.sent) == sent and len(stand.served.ceilings) == 3
        assert await stand.escrow(channel_id) == (DEPOSIT, 3 * PRICE)
        assert await stand.balance(stand.payer) == FUNDING - DEPOSIT

        await stand.rpc("evm_increaseTime", [MIN_WITHDRAW_DELAY])
        await stand.rpc("evm_mine", [])
        before = await stand.balance(stand.payer)
        done = await payments(client).withdraw_session(channel_id)
    assert done.step == "finalized"
    assert done.withdrawn == Decimal(DEPOSIT - 3 * PRICE).scaleb(-6)
    assert await stand.balance(stand.payer) - before == DEPOSIT - 3 * PRICE
    assert await stand.balance(stand.payer) == FUNDING - 3 * PRICE
    (after,) = await payments(options).sessions()
    assert (after.refunded, after.status) == (DEPOSIT - 3 * PRICE, "closed")
