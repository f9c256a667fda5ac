"""The batch-settlement harness works on its own: the x402 foundation's Python client opens a
payment channel with the foundation's merchant and facilitator on the sandbox's escrow, pays
requests with cumulative vouchers, the merchant's channel manager claims and settles, and the
client's cooperative refund returns the unspent deposit. Our client is not used; the token
balances and the escrow's channel state on the chain are the proof."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.needs import require

require("x402.mechanisms.evm.batch_settlement", "pip install 'x402-eur[dev]'")

from eth_account import Account  # noqa: E402

from tests.x402_foundation import (  # noqa: E402
    BatchStack,
    FoundationBatchClient,
    batch_stack,
    foundation_batch_client,
)
from x402_eur_sandbox._batch_escrow import (  # noqa: E402
    ESCROW,
    EscrowReverted,
    finalize_withdraw,
    initiate_withdraw,
    voucher_digest,
)

pytestmark = pytest.mark.anyio

PRICE = 10_000
#: What the merchant charges of each request's `PRICE` (the voucher still covers `PRICE`).
CHARGE = 7_000
REQUESTS = 3
FUNDING = 1_000_000


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    # Module scope so the module-scoped stack below shares one event loop.
    return "asyncio"


@pytest.fixture(scope="module")
async def stack(anyio_backend: str) -> AsyncIterator[BatchStack]:
    async with batch_stack(price_atomic=PRICE, payer_funding_atomic=FUNDING) as started:
        yield started


async def _payer(stack: BatchStack) -> tuple[str, str, FoundationBatchClient]:
    """A fresh payer (so each test has a channel of its own on the shared stack)."""
    key, address = await stack.new_payer(FUNDING)
    return key, address, foundation_batch_client(stack, key)


async def _pay(stack: BatchStack, client: FoundationBatchClient, count: int) -> None:
    async with client.http() as http:
        for _ in range(count):
            response = await http.get(stack.session_url)
            assert response.status_code == 200, response.text
            assert response.json()["session"] is True


def _vouchers(client: FoundationBatchClient) -> list[dict[str, Any]]:
    return [p["payload"] for p in client.payments if p["payload"]["type"] != "refund"]


def _signer_of(stack: BatchStack, voucher: dict[str, Any]) -> str:
    digest = voucher_digest(
        stack.chain_id,
        bytes.fromhex(voucher["channelId"].removeprefix("0x")),
        int(voucher["maxClaimableAmount"]),
    )
    return str(Account._recover_hash(digest, signature=bytes.fromhex(voucher["signature"][2:])))


async def test_requests_cost_one_deposit_and_cumulative_vouchers(stack: BatchStack):
    stack.merchant_charge = CHARGE
    _key, payer, client = await _payer(stack)
    channel_id = stack.channel_id(payer)

    await _pay(stack, client, REQUESTS)

    payloads = _vouchers(client)
    assert [p["type"] for p in payloads] == ["deposit", "voucher", "voucher"]
    deposit = int(payloads[0]["deposit"]["amount"])
    # The merchant's default deposit hint: ten times the price.
    assert deposit == 10 * PRICE
    # Each voucher covers what was charged so far plus this request's full price.
    ceilings = [int(p["voucher"]["maxClaimableAmount"]) for p in payloads]
    assert ceilings == [k * CHARGE + PRICE for k in range(REQUESTS)]
    for payload in payloads:
        assert payload["voucher"]["channelId"] == channel_id
        # Signed over the sandbox escrow's EIP-712 domain: the escrow will accept it.
        assert _signer_of(stack, payload["voucher"]) == payer
    # The merchant reports each charge and the running total.
    assert [s["extra"]["chargedAmount"] for s in client.settlements] == [str(CHARGE)] * REQUESTS
    assert [s["extra"]["channelState"]["chargedCumulativeAmount"] for s in client.settlements] == [
        str((k + 1) * CHARGE) for k in range(REQUESTS)
    ]

    # One deposit on the chain, nothing claimed yet.
    assert await stack.channel(channel_id) == (deposit, 0)
    assert await stack.balance(payer) == FUNDING - deposit
    deposits = [
        body
        for path, body in stack.facilitator.requests
        if path == "/settle"
        and body["paymentPayload"]["payload"]["type"] == "deposit"
        and body["paymentPayload"]["payload"]["channelConfig"]["payer"] == payer
    ]
    assert len(deposits) == 1
    merchant = stack.merchant_channel(channel_id)
    assert merchant is not None
    assert merchant.charged_cumulative_amount == str(REQUESTS * CHARGE)
    assert merchant.signed_max_claimable == str(ceilings[-1])


async def test_a_batch_settles_exactly_the_charged_sum(stack: BatchStack):
    stack.merchant_charge = CHARGE
    _key, payer, client = await _payer(stack)
    channel_id = stack.channel_id(payer)
    await _pay(stack, client, REQUESTS)
    deposit = (await stack.channel(channel_id))[0]
    merchant_before = await stack.balance(stack.merchant_address)
    escrow_before = await stack.balance(ESCROW)

    result = await stack.claim_and_settle([channel_id])

    charged = REQUESTS * CHARGE
    assert len(result["claims"]) == 1
    assert result["settle"] is not None
    assert await stack.balance(stack.merchant_address) == merchant_before + charged
    assert await stack.balance(ESCROW) == escrow_before - charged
    assert await stack.channel(channel_id) == (deposit, charged)
    merchant = stack.merchant_channel(channel_id)
    assert merchant is not None
    assert merchant.total_claimed == str(charged)
    # Nothing left to claim: a second batch moves nothing.
    again = await stack.claim_and_settle([channel_id])
    assert again == {"claims": [], "settle": None}
    assert await stack.balance(stack.merchant_address) == merchant_before + charged


async def test_cooperative_refund_returns_exactly_the_unspent_deposit(stack: BatchStack):
    stack.merchant_charge = CHARGE
    _key, payer, client = await _payer(stack)
    channel_id = stack.channel_id(payer)
    await _pay(stack, client, REQUESTS)
    await stack.claim_and_settle([channel_id])
    deposit, claimed = await stack.channel(channel_id)
    payer_before = await stack.balance(payer)

    settled = await client.refund(stack.session_url)

    unspent = deposit - REQUESTS * CHARGE
    assert settled.success, settled
    assert settled.amount == str(unspent)
    assert await stack.balance(payer) == payer_before + unspent
    assert await stack.channel(channel_id) == (deposit - unspent, claimed)
    refund = client.payments[-1]["payload"]
    assert refund["type"] == "refund"
    # The refund's voucher claims nothing new: it repeats the charged total.
    assert refund["voucher"]["maxClaimableAmount"] == str(REQUESTS * CHARGE)
    assert client.local_channel(channel_id) is None


async def test_the_merchant_refund_claims_what_is_charged_first(stack: BatchStack):
    stack.merchant_charge = None  # the full price
    _key, payer, client = await _payer(stack)
    channel_id = stack.channel_id(payer)
    await _pay(stack, client, 2)
    deposit = (await stack.channel(channel_id))[0]
    payer_before = await stack.balance(payer)
    claimed_before = (await stack.receiver())[0]

    results = await stack.refund([channel_id])

    assert [r.channel.lower() for r in results] == [channel_id]
    # Refunded and forgotten: the payer is not told (its client keeps its record).
    assert stack.merchant_channel(channel_id) is None
    assert client.local_channel(channel_id) is not None
    assert await stack.channel(channel_id) == (2 * PRICE, 2 * PRICE)
    assert await stack.balance(payer) == payer_before + deposit - 2 * PRICE
    assert (await stack.receiver())[0] == claimed_before + 2 * PRICE


async def test_a_payer_that_lost_its_state_resumes_from_the_merchant_correction(stack: BatchStack):
    stack.merchant_charge = CHARGE
    key, payer, client = await _payer(stack)
    channel_id = stack.channel_id(payer)
    await _pay(stack, client, 2)
    deposit = (await stack.channel(channel_id))[0]

    fresh = foundation_batch_client(stack, key)  # the same payer, no memory of the channel
    await _pay(stack, fresh, 1)

    # From the chain it knows only what was claimed (nothing): its first voucher is too low,
    # the merchant's corrective 402 names the charged total, and it signs on from there.
    assert [(p["type"], int(p["voucher"]["maxClaimableAmount"])) for p in _vouchers(fresh)] == [
        ("voucher", PRICE),
        ("voucher", 2 * CHARGE + PRICE),
    ]
    assert await stack.channel(channel_id) == (deposit, 0)
    merchant = stack.merchant_channel(channel_id)
    assert merchant is not None
    assert merchant.charged_cumulative_amount == str(3 * CHARGE)


async def test_the_payer_withdraws_the_unclaimed_deposit_after_the_delay(anyio_backend: str):
    # A stack of its own: moving the chain's clock would expire other tests' authorizations.
    async with batch_stack(price_atomic=PRICE) as own:
        own.merchant_charge = CHARGE
        client = foundation_batch_client(own)
        payer, key = own.payer_address, own.payer_key
        channel_id = own.channel_id(payer)
        config = own.channel_config(payer)
        await _pay(own, client, 1)
        await own.claim_and_settle([channel_id])
        deposit = (await own.channel(channel_id))[0]

        # The payer's own transactions, its own gas: no merchant, no facilitator.
        await initiate_withdraw(own.rpc_url, key, config, deposit - CHARGE)
        with pytest.raises(EscrowReverted) as early:
            await finalize_withdraw(own.rpc_url, key, config)
        assert early.value.error == "WithdrawDelayNotElapsed"
        await own.advance_time(own.withdraw_delay)
        before = await own.balance(payer)
        await finalize_withdraw(own.rpc_url, key, config)

        assert await own.balance(payer) == before + deposit - CHARGE
        assert await own.channel(channel_id) == (CHARGE, CHARGE)


async def test_a_permit2_deposit_opens_the_channel_through_its_collector(anyio_backend: str):
    async with batch_stack(price_atomic=PRICE, asset_transfer_method="permit2") as own:
        own.merchant_charge = CHARGE
        client = foundation_batch_client(own)
        channel_id = own.channel_id(own.payer_address)
        await own.approve(own.payer_key)
        funded = await own.balance(own.payer_address)

        await _pay(own, client, 2)

        payloads = _vouchers(client)
        assert [p["type"] for p in payloads] == ["deposit", "voucher"]
        authorization = payloads[0]["deposit"]["authorization"]
        assert list(authorization) == ["permit2Authorization"]
        deposit = int(payloads[0]["deposit"]["amount"])
        assert await own.channel(channel_id) == (deposit, 0)
        assert await own.balance(own.payer_address) == funded - deposit
        await own.claim_and_settle([channel_id])
        assert await own.balance(own.merchant_address) == 2 * CHARGE


def _inflated(settlement: dict[str, Any]) -> dict[str, Any]:
    state = settlement["extra"]["channelState"]
    state["chargedCumulativeAmount"] = str(int(state["chargedCumulativeAmount"]) + 1)
    return settlement


async def test_a_layer_in_front_of_the_merchant_misleads_the_payer_only(stack: BatchStack):
    stack.merchant_charge = CHARGE
    _key, payer, client = await _payer(stack)
    channel_id = stack.channel_id(payer)
    stack.settlement_rewrite = _inflated
    try:
        await _pay(stack, client, 1)
    finally:
        stack.settlement_rewrite = None

    told = client.settlements[-1]["extra"]["channelState"]["chargedCumulativeAmount"]
    assert told == str(CHARGE + 1)
    merchant = stack.merchant_channel(channel_id)
    assert merchant is not None
    assert merchant.charged_cumulative_amount == str(CHARGE)

    # The foundation's client drops the whole update that does not add up, its own deposit
    # included: it signs a second deposit, which the merchant corrects before any chain call.
    await _pay(stack, client, 1)
    payloads = _vouchers(client)
    assert [p["type"] for p in payloads] == ["deposit", "deposit", "voucher"]
    assert await stack.channel(channel_id) == (int(payloads[0]["deposit"]["amount"]), 0)
    merchant = stack.merchant_channel(channel_id)
    assert merchant is not None
    assert merchant.charged_cumulative_amount == str(2 * CHARGE)
