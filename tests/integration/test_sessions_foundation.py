"""Sessions (`batch-settlement`): the client against code it did not write — the x402
foundation's own merchant (its resource-server scheme and channel manager) and facilitator,
on the sandbox's escrow on a real anvil chain. The escrow's channel state and the token
balances are the proof: one deposit, then vouchers with exact cumulative amounts; a batch
settles exactly what was charged; a cap signs nothing; a refund returns exactly the unspent
deposit; a merchant (or a layer in front of it) that claims more than was signed is refused
and nothing more is signed; a merchant's own refund is learnt from the chain and topped up."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.needs import require

require("x402.mechanisms.evm.batch_settlement", "pip install 'x402-eur[dev]'")

from tests.x402_foundation import BatchStack, batch_stack  # noqa: E402
from x402_client import (  # noqa: E402
    PaymentOptions,
    PaymentOutcomeUnknown,
    PaymentRefused,
    PaymentVerificationFailed,
    X402Error,
    payments,
    with_eur_payment,
)
from x402_client._options import EvmOptions  # noqa: E402
from x402_client._protocol.assets import Asset  # noqa: E402
from x402_client._protocol.types import PaymentReceipt  # noqa: E402

pytestmark = pytest.mark.anyio

PRICE = 10_000  # 0.01 sEURC
#: What the merchant charges of a request when the test makes the price dynamic.
CHARGE = 7_000
FUNDING = 1_000_000
#: The deposit the client chooses: `EvmOptions.session_requests` (10) requests at the price
#: (the foundation's merchant hints the same `minDeposit`: ten times the price).
DEPOSIT = 10 * PRICE


def _eur(atomic: int) -> Decimal:
    return Decimal(atomic).scaleb(-6)


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    # Module scope so the module-scoped stack below shares one event loop.
    return "asyncio"


@pytest.fixture(scope="module")
async def stack(anyio_backend: str) -> AsyncIterator[BatchStack]:
    async with batch_stack(price_atomic=PRICE, payer_funding_atomic=FUNDING) as started:
        yield started


class _Network(httpx.AsyncBaseTransport):
    """The network: every payment payload that went out, in order."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.sent: list[dict[str, Any]] = []
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


class Payer:
    """A fresh payer of the stack (its own channel), paying with our client."""

    def __init__(self, stack: BatchStack, key: str, address: str, state: Path) -> None:
        self.stack, self.key, self.address, self.state = stack, key, address, state
        self.network = _Network()
        self.channel_id = stack.channel_id(address)

    def __repr__(self) -> str:  # never print the payer key
        return f"Payer({self.address})"

    @property
    def sent(self) -> list[dict[str, Any]]:
        return self.network.sent

    def options(self, **overrides: Any) -> PaymentOptions:
        stack = self.stack
        settings: dict[str, Any] = {
            "evm": EvmOptions(private_key=self.key, rpc_urls={stack.chain_id: stack.rpc_url}),
            "assets": [
                Asset(chain_id=stack.chain_id, address=stack.token, symbol="sEURC", currency="EUR")
            ],
            "max_amount_per_payment": {"EUR": "0.05"},
            "state_path": self.state,
        }
        return PaymentOptions(**{**settings, **overrides})

    def client(self, options: PaymentOptions | None = None) -> httpx.AsyncClient:
        return with_eur_payment(
            httpx.AsyncClient(transport=self.network, timeout=60, trust_env=False),
            options or self.options(),
        )

    async def pay(self, client: httpx.AsyncClient, count: int) -> list[PaymentReceipt]:
        receipts = []
        for _ in range(count):
            response = await client.get(self.stack.session_url)
            assert response.status_code == 200, response.text
            assert response.json()["session"] is True
            receipts.append(response.extensions["x402_payment"])
        return receipts

    def ceilings(self) -> list[int]:
        return [int(p["voucher"]["maxClaimableAmount"]) for p in self.sent]

    def kinds(self) -> list[str]:
        return [str(p.get("type")) for p in self.sent]

    def deposits_settled(self) -> list[int]:
        """The deposits of this payer the facilitator was asked to carry out."""
        return [
            int(body["paymentPayload"]["payload"]["deposit"]["amount"])
            for path, body in self.stack.facilitator.requests
            if path == "/settle"
            and body["paymentPayload"]["payload"].get("type") == "deposit"
            and body["paymentPayload"]["payload"]["channelConfig"]["payer"] == self.address
        ]

    async def balance(self) -> int:
        return await self.stack.balance(self.address)

    async def settle(self) -> int:
        """The merchant claims this channel and settles: what its token balance grew by
        for this channel (the settlement also pays out what it claimed earlier on other
        channels, by refunds of its own, and not yet settled: that is taken off)."""
        stack = self.stack
        claimed, settled = await stack.receiver()
        before = await stack.balance(stack.merchant_address)
        result = await stack.claim_and_settle([self.channel_id])
        assert result["settle"] is not None
        assert (await stack.receiver())[1] == (await stack.receiver())[0]
        return await stack.balance(stack.merchant_address) - before - (claimed - settled)

    async def escrow(self) -> tuple[int, int]:
        return await self.stack.channel(self.channel_id)


@pytest.fixture
async def payer(stack: BatchStack, tmp_path: Path) -> Payer:
    stack.merchant_charge = None
    stack.settlement_rewrite = None
    stack.payment_required_rewrite = None
    key, address = await stack.new_payer(FUNDING)
    return Payer(stack, key, address, tmp_path / "state.db")


async def test_requests_cost_one_deposit_and_settle_exactly_the_sum(payer: Payer) -> None:
    async with payer.client() as client:
        receipts = await payer.pay(client, 4)

    assert payer.kinds() == ["deposit", "voucher", "voucher", "voucher"]
    assert payer.ceilings() == [PRICE, 2 * PRICE, 3 * PRICE, 4 * PRICE]
    assert int(payer.sent[0]["deposit"]["amount"]) == DEPOSIT
    assert payer.deposits_settled() == [DEPOSIT]
    assert await payer.escrow() == (DEPOSIT, 0)
    assert await payer.balance() == FUNDING - DEPOSIT
    assert [r.amount for r in receipts] == [_eur(PRICE)] * 4
    assert [r.cumulative_amount for r in receipts] == [_eur(k * PRICE) for k in (1, 2, 3, 4)]
    assert {r.channel_id for r in receipts} == {payer.channel_id}

    assert await payer.settle() == 4 * PRICE
    assert await payer.escrow() == (DEPOSIT, 4 * PRICE)
    (record,) = await payments(payer.options()).sessions()
    assert (record.deposited, record.signed, record.acknowledged) == (
        DEPOSIT,
        4 * PRICE,
        4 * PRICE,
    )


async def test_a_dynamic_price_is_acknowledged_and_settled_as_charged(payer: Payer) -> None:
    stack = payer.stack
    stack.merchant_charge = CHARGE
    async with payer.client() as client:
        receipts = await payer.pay(client, 3)

    # Each voucher builds on the merchant's acknowledged total: charged so far + the price.
    assert payer.ceilings() == [k * CHARGE + PRICE for k in range(3)]
    assert [r.claimed_amount for r in receipts] == [_eur(CHARGE)] * 3
    assert [r.cumulative_amount for r in receipts] == [_eur(k * CHARGE + PRICE) for k in range(3)]
    assert await payer.settle() == 3 * CHARGE
    assert await payer.escrow() == (DEPOSIT, 3 * CHARGE)
    (record,) = await payments(payer.options()).sessions()
    assert (record.signed, record.acknowledged) == (2 * CHARGE + PRICE, 3 * CHARGE)


async def test_a_request_over_the_cap_signs_nothing(payer: Payer) -> None:
    seen = len(payer.stack.facilitator.requests)
    options = payer.options(max_amount_per_payment={"EUR": "0.005"})
    async with payer.client(options) as client:
        with pytest.raises(PaymentRefused) as refused:
            await client.get(payer.stack.session_url)
    assert refused.value.money_moved is False
    assert payer.sent == []
    assert len(payer.stack.facilitator.requests) == seen
    assert await payer.balance() == FUNDING
    assert await payer.escrow() == (0, 0)


async def test_a_refund_returns_exactly_the_unspent_deposit(payer: Payer) -> None:
    payer.stack.merchant_charge = CHARGE
    async with payer.client() as client:
        await payer.pay(client, 3)
        refund = await payments(client).refund_session(payer.channel_id)

    charged = 3 * CHARGE
    assert (refund.refunded, refund.charged, refund.closed) == (
        _eur(DEPOSIT - charged),
        _eur(charged),
        True,
    )
    assert await payer.balance() == FUNDING - charged
    assert await payer.escrow() == (charged, charged)
    (record,) = await payments(payer.options()).sessions()
    assert (record.refunded, record.status) == (DEPOSIT - charged, "closed")


def _overstated(settlement: dict[str, Any]) -> dict[str, Any]:
    state = settlement["extra"]["channelState"]
    state["chargedCumulativeAmount"] = str(int(state["chargedCumulativeAmount"]) + PRICE)
    return settlement


async def test_a_settlement_claiming_more_than_was_signed_is_refused(payer: Payer) -> None:
    stack = payer.stack
    async with payer.client() as client:
        await payer.pay(client, 1)
        stack.settlement_rewrite = _overstated
        with pytest.raises(PaymentVerificationFailed) as refused:
            await client.get(stack.session_url)
        stack.settlement_rewrite = None
        message = str(refused.value)
        assert "does not match the voucher signed" in message
        assert f"a charged total of {3 * PRICE}, above the {2 * PRICE} signed" in message
        assert refused.value.money_moved is True
        sent = len(payer.sent)
        with pytest.raises(PaymentRefused, match="takes no new vouchers") as next_one:
            await client.get(stack.session_url)
        assert next_one.value.money_moved is False
    assert len(payer.sent) == sent
    assert payer.ceilings() == [PRICE, 2 * PRICE]
    (record,) = await payments(payer.options()).sessions()
    assert (record.status, record.signed, record.acknowledged) == ("disputed", 2 * PRICE, PRICE)
    # The merchant's own records are true: it charged what was signed.
    merchant = stack.merchant_channel(payer.channel_id)
    assert merchant is not None and merchant.charged_cumulative_amount == str(2 * PRICE)


def _forged_correction(payer: Payer, claimed: int) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """Every 402 says the merchant has charged `claimed`, proven by the payer's own last
    voucher (whose ceiling is below it)."""
    last = payer.sent[-1]["voucher"]

    def rewrite(required: dict[str, Any]) -> dict[str, Any]:
        required["error"] = "invalid_batch_settlement_evm_cumulative_amount_mismatch"
        for entry in required["accepts"]:
            entry["extra"]["channelState"] = {
                "channelId": payer.channel_id,
                "balance": str(DEPOSIT),
                "totalClaimed": "0",
                "withdrawRequestedAt": 0,
                "refundNonce": "0",
                "chargedCumulativeAmount": str(claimed),
            }
            entry["extra"]["voucherState"] = {
                "signedMaxClaimable": last["maxClaimableAmount"],
                "signature": last["signature"],
            }
        return required

    return rewrite


async def test_a_corrective_402_claiming_more_than_was_signed_is_refused(payer: Payer) -> None:
    stack = payer.stack
    async with payer.client() as client:
        await payer.pay(client, 2)
        sent = len(payer.sent)
        stack.payment_required_rewrite = _forged_correction(payer, 5 * PRICE)
        with pytest.raises(PaymentRefused) as refused:
            await client.get(stack.session_url)
        stack.payment_required_rewrite = None
    message = str(refused.value)
    assert f"claims to have charged {5 * PRICE}" in message
    assert f"above the {2 * PRICE} signed" in message
    assert refused.value.money_moved is False
    assert len(payer.sent) == sent
    (record,) = await payments(payer.options()).sessions()
    assert (record.signed, record.acknowledged) == (2 * PRICE, 2 * PRICE)
    assert await payer.escrow() == (DEPOSIT, 0)


async def test_the_merchants_own_refund_is_learnt_from_the_chain_and_topped_up(
    payer: Payer,
) -> None:
    """The merchant refunds the channel on its own and forgets it. The client's next voucher
    passes what the escrow now holds: the facilitator refuses it, the client reads the chain,
    books the refund it did not ask for, and deposits once more; the voucher's cumulative
    amount is the one the refused voucher had (nothing is paid twice)."""
    stack = payer.stack
    async with payer.client() as client:
        await payer.pay(client, 2)
        merchant_before = (await stack.receiver())[0]
        (result,) = await stack.refund([payer.channel_id])
        assert result.channel.lower() == payer.channel_id
        assert stack.merchant_channel(payer.channel_id) is None  # it forgot the channel
        assert await payer.escrow() == (2 * PRICE, 2 * PRICE)
        assert await payer.balance() == FUNDING - 2 * PRICE

        (receipt,) = await payer.pay(client, 1)

    assert payer.kinds() == ["deposit", "voucher", "voucher", "deposit"]
    assert payer.ceilings() == [PRICE, 2 * PRICE, 3 * PRICE, 3 * PRICE]
    assert payer.deposits_settled() == [DEPOSIT, DEPOSIT]
    assert (receipt.cumulative_amount, receipt.claimed_amount) == (_eur(3 * PRICE), _eur(PRICE))
    (record,) = await payments(payer.options()).sessions()
    assert record.refunded == DEPOSIT - 2 * PRICE  # the record learnt the merchant's refund
    assert (record.deposited, record.signed, record.acknowledged) == (
        2 * DEPOSIT,
        3 * PRICE,
        3 * PRICE,
    )
    assert record.status == "open"
    await stack.claim_and_settle([payer.channel_id])
    # Every token accounted for: what the payer holds and what its channel holds (claimed:
    # exactly the three requests, the rest its own) are what it was funded with.
    balance, claimed = await payer.escrow()
    assert (balance, claimed) == (2 * PRICE + DEPOSIT, 3 * PRICE)
    assert await payer.balance() + balance == FUNDING
    assert (await stack.receiver())[0] == merchant_before + 3 * PRICE


async def test_a_permit2_deposit_opens_the_channel(anyio_backend: str, tmp_path: Path) -> None:
    async with batch_stack(price_atomic=PRICE, asset_transfer_method="permit2") as own:
        await own.approve(own.payer_key)
        payer = Payer(own, own.payer_key, own.payer_address, tmp_path / "state.db")
        funded = await payer.balance()
        async with payer.client() as client:
            await payer.pay(client, 2)

        assert payer.kinds() == ["deposit", "voucher"]
        assert list(payer.sent[0]["deposit"]["authorization"]) == ["permit2Authorization"]
        assert await payer.escrow() == (DEPOSIT, 0)
        assert await payer.balance() == funded - DEPOSIT
        await own.claim_and_settle([payer.channel_id])
        assert await own.balance(own.merchant_address) == 2 * PRICE


async def test_a_payer_that_lost_its_journal_is_refused_safely(
    payer: Payer, tmp_path: Path
) -> None:
    """The merchant remembers the channel (charged 2 requests), the payer starts from a fresh
    state file: it knows only the chain (nothing claimed). Its voucher is too low for the
    merchant, whose corrective 402 names a charged total proven by a voucher this journal
    did not sign: the client refuses it and signs nothing on its word."""
    stack = payer.stack
    async with payer.client() as client:
        await payer.pay(client, 2)
    lost = payer.options(state_path=tmp_path / "fresh.db")
    async with payer.client(lost) as client:
        with pytest.raises(X402Error) as refused:
            await client.get(stack.session_url)
        # Asked again, it refuses again: nothing above what this journal signed.
        with pytest.raises(PaymentOutcomeUnknown):
            await client.get(stack.session_url)
        # Nor does its refund build on the merchant's word (the timed withdrawal needs none).
        with pytest.raises(PaymentRefused, match="above the 10000 signed") as no_refund:
            await payments(client).refund_session(payer.channel_id)
        assert no_refund.value.money_moved is False
    message = str(refused.value)
    assert isinstance(refused.value, PaymentOutcomeUnknown)
    # Its refused voucher was handed over (the merchant holds it; it adds nothing to the
    # merchant's higher one, which this journal cannot know): maybe moved, never more.
    assert refused.value.money_moved is None
    assert f"claims to have charged {2 * PRICE}" in message
    assert f"above the {PRICE} signed" in message
    # It says how the deposit comes back without the merchant.
    assert f"x402-eur sessions withdraw {payer.channel_id[:12]}" in message
    # The fresh journal's voucher (the chain's claimed total + the price) twice, and its
    # refund's voucher of what it saw acknowledged (nothing): none built on the merchant's word.
    assert payer.ceilings() == [PRICE, 2 * PRICE, PRICE, PRICE, 0]
    assert payer.kinds().count("deposit") == 1
    merchant = stack.merchant_channel(payer.channel_id)
    assert merchant is not None and merchant.charged_cumulative_amount == str(2 * PRICE)
    assert await payer.escrow() == (DEPOSIT, 0)
    assert await payer.balance() == FUNDING - DEPOSIT


async def _lose_an_answer(payer: Payer, client: httpx.AsyncClient) -> None:
    """One request served and acknowledged, then one the merchant served and charged whose
    answer is lost: the payer's journal acknowledges one request, the merchant two."""
    await payer.pay(client, 1)
    payer.network.lose_next_answer = True
    with pytest.raises(PaymentOutcomeUnknown):
        await client.get(payer.stack.session_url)


async def test_a_voucher_whose_answer_was_lost_is_paid_on_from_the_corrective_402(
    payer: Payer,
) -> None:
    """The next voucher builds on what the payer saw acknowledged; the foundation's merchant
    answers its corrective 402 (its charged total, proven by the payer's own last voucher)
    and the payer builds on that: one increment per served request."""
    async with payer.client() as client:
        await _lose_an_answer(payer, client)
        (receipt,) = await payer.pay(client, 1)
    # the lost one, then the same amount again (refused: the merchant had charged it), then
    # the one built on the merchant's proven total
    assert payer.ceilings() == [PRICE, 2 * PRICE, 2 * PRICE, 3 * PRICE]
    assert receipt.cumulative_amount == _eur(3 * PRICE)
    await payer.stack.claim_and_settle([payer.channel_id])
    assert await payer.escrow() == (DEPOSIT, 3 * PRICE)


def _overstated_correction(required: dict[str, Any]) -> dict[str, Any]:
    """A corrective 402 of the merchant's, its charged total raised above the voucher that
    proves it."""
    for entry in required["accepts"]:
        state = entry["extra"].get("channelState")
        if state is not None:
            state["chargedCumulativeAmount"] = str(5 * PRICE)
    return required


async def test_a_forged_corrective_402_is_refused_and_nothing_more_signed(payer: Payer) -> None:
    stack = payer.stack
    async with payer.client() as client:
        await _lose_an_answer(payer, client)
        stack.payment_required_rewrite = _overstated_correction
        with pytest.raises(PaymentOutcomeUnknown) as refused:
            await client.get(stack.session_url)
        stack.payment_required_rewrite = None
    message = str(refused.value)
    assert f"claims to have charged {5 * PRICE}" in message
    assert f"above the {2 * PRICE} signed" in message
    # The voucher it re-sent repeats one already signed; none is signed on the forged word.
    assert payer.ceilings() == [PRICE, 2 * PRICE, 2 * PRICE]
    (record,) = await payments(payer.options()).sessions()
    assert (record.signed, record.acknowledged) == (2 * PRICE, PRICE)
    merchant = stack.merchant_channel(payer.channel_id)
    assert merchant is not None and merchant.charged_cumulative_amount == str(2 * PRICE)


async def test_a_voucher_past_the_deposit_tops_it_up(payer: Payer) -> None:
    """The deposit covers ten requests (the merchant's `minDeposit` hint and the client's
    `session_requests` agree); the eleventh voucher would pass it and deposits once more."""
    async with payer.client() as client:
        receipts = await payer.pay(client, 11)
    assert payer.kinds() == ["deposit"] + ["voucher"] * 9 + ["deposit"]
    assert payer.ceilings() == [k * PRICE for k in range(1, 12)]
    assert payer.deposits_settled() == [DEPOSIT, DEPOSIT]
    assert receipts[-1].cumulative_amount == _eur(11 * PRICE)
    assert await payer.escrow() == (2 * DEPOSIT, 0)
    assert await payer.balance() == FUNDING - 2 * DEPOSIT
    (record,) = await payments(payer.options()).sessions()
    assert (record.deposited, record.signed, record.acknowledged) == (
        2 * DEPOSIT,
        11 * PRICE,
        11 * PRICE,
    )


async def test_a_refund_after_a_lost_answer_pays_the_merchant_its_proven_total(
    payer: Payer,
) -> None:
    """The payer's journal acknowledges one request, the merchant charged two: the refund's
    voucher is corrected to the merchant's proven total, and the rest comes back."""
    async with payer.client() as client:
        await _lose_an_answer(payer, client)
        refund = await payments(client).refund_session(payer.channel_id)
    assert (refund.refunded, refund.charged, refund.closed) == (
        _eur(DEPOSIT - 2 * PRICE),
        _eur(2 * PRICE),
        True,
    )
    assert await payer.balance() == FUNDING - 2 * PRICE
    (record,) = await payments(payer.options()).sessions()
    assert (record.status, record.acknowledged, record.refunded) == (
        "closed",
        2 * PRICE,
        DEPOSIT - 2 * PRICE,
    )


async def test_a_charge_above_the_price_is_not_taken_and_the_voucher_is_reused(
    payer: Payer,
) -> None:
    """The foundation's merchant refuses its own charge above the voucher's increment (a
    402 after its handler ran): the client says it may have paid (the voucher was handed
    over), and its next request signs the same cumulative amount again, nothing more."""
    stack = payer.stack
    async with payer.client() as client:
        await payer.pay(client, 1)
        stack.merchant_charge = PRICE + 1
        with pytest.raises(PaymentVerificationFailed) as refused:
            await client.get(stack.session_url)
        stack.merchant_charge = None
        assert "charge_exceeds_signed_cumulative" in str(refused.value)
        assert refused.value.money_moved is None
        (receipt,) = await payer.pay(client, 1)
    assert payer.ceilings() == [PRICE, 2 * PRICE, 2 * PRICE]
    assert receipt.cumulative_amount == _eur(2 * PRICE)
    assert await payer.settle() == 2 * PRICE


async def test_a_refund_of_a_channel_the_merchant_refunded_books_what_the_chain_shows(
    payer: Payer,
) -> None:
    """The merchant refunded the channel on its own; the payer, not knowing, asks for its
    refund: the chain shows the unspent deposit back already, so the record books it and
    closes, and the merchant is not asked for a refund of nothing."""
    stack = payer.stack
    async with payer.client() as client:
        await payer.pay(client, 2)
        await stack.refund([payer.channel_id])
        returned = await payer.balance()
        asked = len(stack.facilitator.requests)
        refund = await payments(client).refund_session(payer.channel_id)
    assert (refund.refunded, refund.charged, refund.closed, refund.tx_hash) == (
        _eur(DEPOSIT - 2 * PRICE),
        _eur(2 * PRICE),
        True,
        None,
    )
    assert await payer.balance() == returned == FUNDING - 2 * PRICE
    assert len(stack.facilitator.requests) == asked
    (record,) = await payments(payer.options()).sessions()
    assert (record.refunded, record.status) == (DEPOSIT - 2 * PRICE, "closed")


async def test_a_merchant_that_lost_its_records_is_paid_on_from_the_payers_journal(
    payer: Payer,
) -> None:
    """The merchant's channel storage loses the channel (a restart on memory storage): it
    takes the payer's next voucher at its word (its charged total inferred from it), and the
    payer's journal keeps the cumulative amounts going, one deposit in all."""
    stack = payer.stack
    async with payer.client() as client:
        await payer.pay(client, 2)
        forgotten = stack.storage.update_channel(payer.channel_id, lambda _channel: None)
        assert forgotten.status == "deleted"
        (receipt,) = await payer.pay(client, 1)
    assert payer.ceilings() == [PRICE, 2 * PRICE, 3 * PRICE]
    assert payer.kinds().count("deposit") == 1
    assert receipt.cumulative_amount == _eur(3 * PRICE)
    assert await payer.settle() == 3 * PRICE
    assert await payer.escrow() == (DEPOSIT, 3 * PRICE)


async def test_a_withdrawal_of_a_channel_the_merchant_refunded_books_the_refund(
    payer: Payer,
) -> None:
    stack = payer.stack
    async with payer.client() as client:
        await payer.pay(client, 2)
        await stack.refund([payer.channel_id])
        with pytest.raises(X402Error, match="nothing left to withdraw") as nothing:
            await payments(client).withdraw_session(payer.channel_id)
    assert nothing.value.money_moved is False
    assert "the merchant returned 0.08 EUR on its own" in str(nothing.value)
    (record,) = await payments(payer.options()).sessions()
    assert (record.refunded, record.status) == (DEPOSIT - 2 * PRICE, "closed")


async def test_concurrent_requests_then_a_partial_refund_and_the_session_goes_on(
    payer: Payer,
) -> None:
    """Three requests at once on one channel sign strictly increasing cumulative amounts
    (the merchant never sees two at once: no `channel_busy`); a partial refund returns
    exactly what was asked and leaves the channel open; the next voucher goes on from the
    charged total."""
    stack = payer.stack
    async with payer.client() as client:
        statuses: list[int] = []

        async def one() -> None:
            statuses.append((await client.get(stack.session_url)).status_code)

        async with anyio.create_task_group() as group:
            for _ in range(3):
                group.start_soon(one)
        assert statuses == [200] * 3
        refund = await payments(client).refund_session(payer.channel_id, Decimal("0.03"))
        assert (refund.refunded, refund.charged, refund.closed) == (
            _eur(3 * PRICE),
            _eur(3 * PRICE),
            False,
        )
        await payer.pay(client, 1)
    assert payer.kinds() == ["deposit", "voucher", "voucher", "refund", "voucher"]
    assert payer.ceilings() == [PRICE, 2 * PRICE, 3 * PRICE, 3 * PRICE, 4 * PRICE]
    assert await payer.escrow() == (DEPOSIT - 3 * PRICE, 3 * PRICE)
    assert await payer.balance() == FUNDING - DEPOSIT + 3 * PRICE
    (record,) = await payments(payer.options()).sessions()
    assert (record.status, record.refunded, record.signed, record.acknowledged) == (
        "open",
        3 * PRICE,
        4 * PRICE,
        4 * PRICE,
    )


WORKER = Path(__file__).with_name("session_payer.py")


async def _run_worker(config: dict[str, Any]) -> tuple[int, list[str]]:
    """A payer process (`session_payer.py`) to its end: its exit status and outcomes."""
    import sys

    with anyio.fail_after(300):
        done = await anyio.run_process(
            [sys.executable, str(WORKER), json.dumps(config)], check=False
        )
    if done.returncode != 0:
        return done.returncode, []
    outcomes: list[str] = json.loads(done.stdout)["outcomes"]
    return 0, outcomes


@pytest.mark.parametrize("kill", ["before-send", "after-answer"])
async def test_a_payer_killed_mid_request_is_resumed_by_another_process(
    payer: Payer, tmp_path: Path, kill: str
) -> None:
    """A payer process dies in its third request: before its voucher left (journaled
    only), or after the merchant served and charged it (its answer died with it). Another
    process on the same state file pays two more: one deposit in all, and the merchant
    settles exactly one price per request it served, never one twice."""
    stack, sent = payer.stack, tmp_path / "sent.jsonl"
    config = {
        "key": payer.key,
        "rpc_url": stack.rpc_url,
        "chain_id": stack.chain_id,
        "asset": {
            "chain_id": stack.chain_id,
            "address": stack.token,
            "symbol": "sEURC",
            "currency": "EUR",
        },
        "state": str(payer.state),
        "url": stack.session_url,
        "sent": str(sent),
    }
    killed = {**config, "requests": 3, "kill": kill, "kill_at": 3}
    assert await _run_worker(killed) == (-9, [])
    assert await _run_worker({**config, "requests": 2}) == (0, ["200", "200"])

    served = 4 if kill == "before-send" else 5
    lines = [json.loads(line) for line in sent.read_text().splitlines()]
    deposits = [x for x in lines if x["sent"] and x["payload"].get("type") == "deposit"]
    assert [int(x["payload"]["deposit"]["amount"]) for x in deposits] == [DEPOSIT]
    assert payer.deposits_settled() == [DEPOSIT]
    top = max(int(x["payload"]["voucher"]["maxClaimableAmount"]) for x in lines if x["sent"])
    assert top == served * PRICE
    (record,) = await payments(payer.options()).sessions()
    assert (record.deposited, record.signed, record.acknowledged) == (
        DEPOSIT,
        served * PRICE,
        served * PRICE,
    )
    assert await payer.settle() == served * PRICE
    assert await payer.escrow() == (DEPOSIT, served * PRICE)
    assert await payer.balance() == FUNDING - DEPOSIT
