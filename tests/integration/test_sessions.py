"""Sessions (`batch-settlement`): the client against the sandbox's own merchant,
facilitator and escrow on a real anvil chain. One deposit, then a voucher per request with
exact cumulative amounts; a batch settles exactly what was charged; a request over the cap
signs nothing; a refund returns exactly the unspent deposit, read from the chain; a merchant
that claims more than was signed is refused and told so; the corrective 402 of a merchant
that lost its records is checked and paid."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from eth_account import Account

from x402_client import (
    Budget,
    BudgetExceeded,
    PaymentOptions,
    PaymentOutcomeUnknown,
    PaymentRefused,
    PaymentVerificationFailed,
    X402Error,
    payments,
    with_eur_payment,
)
from x402_client._options import EvmOptions
from x402_client._protocol.assets import Asset
from x402_eur_sandbox._anvil import AnvilNode, token_balance
from x402_eur_sandbox._batch_escrow import channel_state
from x402_eur_sandbox._batch_merchant import BatchSettlement
from x402_eur_sandbox._merchant import Price
from x402_eur_sandbox._standard import _OWNER_KEY, _mint, deploy_eip3009_token

pytestmark = pytest.mark.anyio

CHAIN_ID = 137
PRICE = 10_000  # 0.01 sEURC
FUNDING = 5_000_000
PRICES = {"/stream": Price(Decimal("0.01"), "One request of a stream")}


class Session:
    """The chain, the sandbox's batch-settlement merchant and facilitator, a funded payer."""

    def __init__(self, node: AnvilNode, token: str, part: BatchSettlement) -> None:
        self.node, self.token, self.part = node, token, part
        assert part.merchant is not None
        self.merchant = part.merchant
        account = Account.create()
        self.payer_key = "0x" + bytes(account.key).hex()
        self.payer = str(account.address)
        self.sent: list[dict[str, Any]] = []

    @property
    def url(self) -> str:
        return self.merchant.resource_url("/stream")

    def options(self, **overrides: Any) -> PaymentOptions:
        settings: dict[str, Any] = {
            "evm": EvmOptions(private_key=self.payer_key, rpc_urls={CHAIN_ID: self.node.rpc_url}),
            "assets": [
                Asset(chain_id=CHAIN_ID, address=self.token, symbol="sEURC", currency="EUR")
            ],
            "max_amount_per_payment": {"EUR": "0.05"},
        }
        return PaymentOptions(**{**settings, **overrides})

    def client(self, options: PaymentOptions) -> httpx.AsyncClient:
        """A paying client whose network transport records every payment payload sent."""
        self.network = _Recorder(self.sent)
        return with_eur_payment(httpx.AsyncClient(transport=self.network, timeout=60), options)

    async def balance(self, address: str) -> int:
        return await token_balance(self.node.rpc_url, self.token, address)

    async def escrow(self, channel_id: str) -> tuple[int, int]:
        return await channel_state(self.node.rpc_url, bytes.fromhex(channel_id[2:]))


class _Recorder(httpx.AsyncBaseTransport):
    """The network: every `PAYMENT-SIGNATURE` payload that went out, in order."""

    def __init__(self, sent: list[dict[str, Any]]) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.sent = sent
        #: The answer to the next paid request is lost on its way back (the merchant
        #: served it).
        self.lose_next_answer = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        header = request.headers.get("payment-signature")
        if header is not None:
            self.sent.append(json.loads(base64.b64decode(header))["payload"])
        response = await self.inner.handle_async_request(request)
        if header is not None and self.lose_next_answer:
            self.lose_next_answer = False
            await response.aread()
            raise httpx.ReadError("the answer was lost", request=request)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.fixture
async def session(request: pytest.FixtureRequest) -> AsyncIterator[Session]:
    options: dict[str, Any] = getattr(request, "param", {})
    async with AnvilNode(CHAIN_ID) as node:
        token = await deploy_eip3009_token(node.rpc_url, _OWNER_KEY)
        async with BatchSettlement(
            rpc_url=node.rpc_url, chain_id=CHAIN_ID, token=token, prices=PRICES, **options
        ) as part:
            made = Session(node, token, part)
            await _mint(node.rpc_url, token, _OWNER_KEY, made.payer, FUNDING)
            yield made


async def test_a_stream_is_one_deposit_then_vouchers_and_settles_exactly_what_was_charged(
    session: Session, tmp_path: Path
) -> None:
    options = session.options(state_path=tmp_path / "state.db")
    async with session.client(options) as client:
        receipts = []
        for _ in range(4):
            response = await client.get(session.url)
            assert response.status_code == 200, response.text
            receipts.append(response.extensions["x402_payment"])
    assert [p.get("type") for p in session.sent] == ["deposit", "voucher", "voucher", "voucher"]
    ceilings = [int(p["voucher"]["maxClaimableAmount"]) for p in session.sent]
    assert ceilings == [PRICE, 2 * PRICE, 3 * PRICE, 4 * PRICE]
    deposit = int(session.sent[0]["deposit"]["amount"])
    assert deposit == 10 * PRICE
    assert [r.amount for r in receipts] == [Decimal("0.01")] * 4
    assert [r.cumulative_amount for r in receipts] == [Decimal("0.01") * n for n in (1, 2, 3, 4)]
    channel_id = receipts[0].channel_id
    assert channel_id is not None and {r.channel_id for r in receipts} == {channel_id}
    assert await session.balance(session.payer) == FUNDING - deposit
    assert await session.escrow(channel_id) == (deposit, 0)

    settled = await session.merchant.claim_and_settle()
    assert settled["amount"] == str(4 * PRICE)
    assert await session.balance(session.merchant.pay_to) == 4 * PRICE

    steps = [
        step.detail for entry in payments(options).ledger for step in entry.steps
        if step.step == "voucher"
    ]  # fmt: skip
    assert steps[0] == f"channel {channel_id[:18]}: 0.01 EUR in total, with a deposit of 0.10 EUR"
    assert steps[1:] == [f"channel {channel_id[:18]}: 0.0{n} EUR in total" for n in (2, 3, 4)]
    (record,) = await payments(options).sessions()
    assert (record.channel_id, record.deposited, record.signed, record.acknowledged) == (
        channel_id,
        deposit,
        4 * PRICE,
        4 * PRICE,
    )


async def test_a_request_over_the_cap_signs_nothing(session: Session) -> None:
    options = session.options(max_amount_per_payment={"EUR": "0.005"})
    async with session.client(options) as client:
        with pytest.raises(PaymentRefused) as refused:
            await client.get(session.url)
    assert refused.value.money_moved is False
    assert session.sent == []
    assert await session.balance(session.payer) == FUNDING


async def test_a_refund_returns_exactly_the_unspent_deposit(session: Session) -> None:
    options = session.options()
    async with session.client(options) as client:
        for _ in range(3):
            assert (await client.get(session.url)).status_code == 200
        (record,) = await payments(client).sessions()
        refund = await payments(client).refund_session(record.channel_id[:12])
    deposit = 10 * PRICE
    assert refund.refunded == Decimal(deposit - 3 * PRICE).scaleb(-6)
    assert refund.charged == Decimal(3 * PRICE).scaleb(-6)
    assert refund.closed
    assert await session.balance(session.payer) == FUNDING - 3 * PRICE
    (after,) = await payments(options).sessions()
    assert (after.refunded, after.status) == (deposit - 3 * PRICE, "closed")
    # A refunded channel is funded again by the next request: the same channel, reopened.
    async with session.client(options) as client:
        response = await client.get(session.url)
        assert response.status_code == 200
    assert session.sent[-1]["type"] == "deposit"
    assert int(session.sent[-1]["voucher"]["maxClaimableAmount"]) == 4 * PRICE
    (reopened,) = await payments(options).sessions()
    assert (reopened.channel_id, reopened.status) == (after.channel_id, "open")


async def test_a_merchant_claiming_more_than_was_signed_is_refused_and_told_so(
    session: Session,
) -> None:
    options = session.options()
    async with session.client(options) as client:
        assert (await client.get(session.url)).status_code == 200
        session.merchant.overclaim = True
        with pytest.raises(PaymentVerificationFailed) as refused:
            await client.get(session.url)
        assert "more than" in str(refused.value) or "does not match" in str(refused.value)
        assert refused.value.money_moved is True
        sent = len(session.sent)
        with pytest.raises(X402Error, match="takes no new vouchers"):
            await client.get(session.url)
    assert len(session.sent) == sent
    (record,) = await payments(options).sessions()
    assert record.status == "disputed"


async def test_a_merchant_that_lost_its_records_is_paid_on_from_the_payers_journal(
    session: Session,
) -> None:
    options = session.options()
    async with session.client(options) as client:
        for _ in range(2):
            assert (await client.get(session.url)).status_code == 200
        session.merchant.forget()
        assert (await client.get(session.url)).status_code == 200
    ceilings = [int(p["voucher"]["maxClaimableAmount"]) for p in session.sent]
    assert ceilings == [PRICE, 2 * PRICE, 3 * PRICE]
    assert [p.get("type") for p in session.sent].count("deposit") == 1
    assert await session.balance(session.payer) == FUNDING - 10 * PRICE


async def test_a_voucher_whose_answer_was_lost_is_not_paid_twice(session: Session) -> None:
    """The merchant charged the voucher and served; its answer never came back. The next
    request's voucher builds on what the payer saw acknowledged, so the merchant answers its
    corrective 402: its charged total, proven by the payer's own last voucher. The payer
    builds on that: one increment per served request, never a second one for the same, and
    the budget counts what the vouchers add to what was signed (three prices, not four)."""
    options = session.options(budgets=[Budget("0.03")])
    async with session.client(options) as client:
        assert (await client.get(session.url)).status_code == 200
        session.network.lose_next_answer = True
        with pytest.raises(PaymentOutcomeUnknown):
            await client.get(session.url)
        response = await client.get(session.url)
        assert response.status_code == 200
        receipt = response.extensions["x402_payment"]
    ceilings = [int(p["voucher"]["maxClaimableAmount"]) for p in session.sent]
    # the lost one, then the same amount again (refused: the merchant had charged it),
    # then the one built on the merchant's proven total
    assert ceilings == [PRICE, 2 * PRICE, 2 * PRICE, 3 * PRICE]
    assert receipt.cumulative_amount == Decimal("0.03")
    assert receipt.amount == Decimal("0.01")
    async with session.client(options) as client:
        with pytest.raises(BudgetExceeded):
            await client.get(session.url)
        report = await payments(client).budgets()
    assert report[0].spent == Decimal("0.03")
    assert len(session.sent) == 4
    settled = await session.merchant.claim_and_settle()
    assert settled["amount"] == str(3 * PRICE)


async def test_a_channel_that_cannot_be_read_on_chain_is_not_paid(session: Session) -> None:
    import socket

    with socket.socket() as unused:  # a loopback port nobody listens on
        unused.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{unused.getsockname()[1]}"
    options = session.options(
        evm=EvmOptions(private_key=session.payer_key, rpc_urls={CHAIN_ID: dead})
    )
    async with session.client(options) as client:
        with pytest.raises(X402Error) as failed:
            await client.get(session.url)
    assert failed.value.money_moved is False
    assert "cannot be read" in str(failed.value) and "nothing was paid" in str(failed.value)
    assert session.sent == []


async def test_a_withdrawal_that_could_not_be_sent_leaves_the_session_open(
    session: Session,
) -> None:
    """The payer's key holds no coin for gas: the withdrawal is not sent, the chain shows
    none pending, and the session goes on taking vouchers."""
    options = session.options()
    async with session.client(options) as client:
        assert (await client.get(session.url)).status_code == 200
        (record,) = await payments(client).sessions()
        with pytest.raises(X402Error, match="the withdrawal was not sent") as unsent:
            await payments(client).withdraw_session(record.channel_id)
        assert "too little of the chain's coin to pay the gas" in str(unsent.value)
        (after,) = await payments(client).sessions()
        assert after.status == "open"
        assert (await client.get(session.url)).status_code == 200
    assert [p.get("type") for p in session.sent] == ["deposit", "voucher"]
