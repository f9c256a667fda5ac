"""The bridge (path C) end to end: real client, real sandbox services and chain A on 127.0.0.1.

One sandbox for the module (in its own thread), fresh payer accounts per test. The
bridge settles 0.3 s after a payment; the client polls every 0.05 s, at most 0.1 s apart.
Where a test needs the bridge to be still on its way at some point, the bridge takes an
hour and the test settles it itself: what the test sees then does not depend on how fast
the machine runs.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import anyio
import httpx
import pytest

from tests.sandboxes import payment_options
from tests.waiting import PATIENCE, eventually
from x402_client import (
    BridgeTransferFailed,
    NoSatisfiableOption,
    PaymentOptions,
    PaymentOutcomeUnknown,
    PaymentProgress,
    PaymentVerificationFailed,
    with_eur_payment,
)
from x402_client import payments as payments_of
from x402_client._protocol.errors import BridgeResumeRefused
from x402_client._protocol.proof import encode_proof
from x402_eur_sandbox import Account, Fault, Price, Sandbox
from x402_eur_sandbox._chain_a import (
    EURQ_ASSET_ID,
    USDQ_ASSET_ID,
    ChainASandbox,
)

pytestmark = pytest.mark.anyio

EURQ = str(EURQ_ASSET_ID)
PRICES = {
    "/weather": Price(Decimal("0.10"), "Weather, bridged", rails=("ledgera",)),
    "/report": Price(Decimal("0.50"), "USDQ on chain A only", rails=("ledgera:USDQ",)),
    "/echo": Price(Decimal("0.05"), "USDQ on chain A, or euro", rails=("ledgera:USDQ", "euro")),
}
BRIDGE_DELAY = 0.3
#: A bridge delay longer than any test: the bridge ends when the test settles it.
HOUR = 3600.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with Sandbox.run_in_thread(chain_a=True, bridge_delay=BRIDGE_DELAY, prices=PRICES) as running:
        yield running


@pytest.fixture
def chain(sandbox: Sandbox) -> Iterator[ChainASandbox]:
    part = sandbox.chain_a
    assert isinstance(part, ChainASandbox)
    yield part
    part.bridge_delay = BRIDGE_DELAY
    part.whitelist(part.merchant_address)
    sandbox.faults.clear()
    sandbox.faults.release()


@pytest.fixture
def account(sandbox: Sandbox) -> Account:
    return sandbox.bank.open_account("10.00")


def options(sandbox: Sandbox, account: Account, **overrides: Any) -> PaymentOptions:
    values: dict[str, Any] = {
        "api_key": account.api_key,
        "from_account": account.code,
        "bridge_poll_interval": 0.05,
        "bridge_poll_max_interval": 0.1,
    }
    values.update(overrides)
    return payment_options(sandbox, **values)


def payments(sandbox: Sandbox, account: Account) -> list[Any]:
    return [t for t in sandbox.bank.payments_made if t.from_account == account.code]


def settle_once_waiting(chain: ChainASandbox) -> Callable[[PaymentProgress], None]:
    """An `on_progress` that settles the bridge transfer the client waits for as soon as
    the client reports waiting for it: the wait is exercised on any machine."""

    def on_progress(event: PaymentProgress) -> None:
        if event.stage == "waiting" and event.transaction_code is not None:
            chain.settle_bridge(event.transaction_code)

    return on_progress


def header(payload: dict[str, Any]) -> dict[str, str]:
    proof = {"x402Version": 2, "scheme": "exact", "network": "ledgera:mainnet", "payload": payload}
    return {"X-PAYMENT": encode_proof(proof)}


def bridge_payload(chain: ChainASandbox, txid: str, **overrides: str) -> dict[str, Any]:
    payload = {
        "transactionCode": "QP" + txid[:16],
        "blockchainTxId": txid,
        "payTo": chain.merchant_address,
        "asset": EURQ,
    }
    payload.update(overrides)
    return payload


# --- paying ----------------------------------------------------------------------------------


async def test_bridge_paid_fetch_moves_exactly_the_price(sandbox, chain, account):
    merchant_eurq = chain.asset_balance(chain.merchant_address, EURQ)
    provider_eurq = chain.asset_balance(chain.provider_address, EURQ)
    merchant_euro = sandbox.balance(sandbox.merchant)
    events: list[PaymentProgress] = []
    async with with_eur_payment(
        httpx.AsyncClient(), options(sandbox, account, on_progress=events.append)
    ) as client:
        response = await client.get(sandbox.url("/weather"))

    assert response.status_code == 200
    assert response.json()["city"] == "Amsterdam"
    assert sandbox.balance(account) == Decimal("9.90")
    assert chain.asset_balance(chain.merchant_address, EURQ) - merchant_eurq == 100_000
    assert provider_eurq - chain.asset_balance(chain.provider_address, EURQ) == 100_000
    assert sandbox.balance(sandbox.merchant) == merchant_euro  # EURO and EURQ are separate rails
    [made] = payments(sandbox, account)
    assert (made.to_type, made.to, made.amount) == (
        "BlockchainAddress",
        chain.merchant_address,
        Decimal("0.10"),
    )

    receipt = response.extensions["x402_payment"]
    assert (receipt.rail, receipt.scheme, receipt.network) == ("bridge", "exact", "ledgera:mainnet")
    assert (receipt.asset, receipt.currency, receipt.amount) == (EURQ, "EUR", Decimal("0.10"))
    assert receipt.asset_symbol == "EURQ"
    assert receipt.pay_to == chain.merchant_address
    assert receipt.transaction_code == made.code
    assert receipt.blockchain_tx_id == made.blockchain_tx_id
    assert receipt.settlement["transaction"] == receipt.blockchain_tx_id
    transfer = chain.ledger.transaction(receipt.blockchain_tx_id)
    assert transfer is not None
    assert (transfer.asset_id, transfer.amount, transfer.receiver) == (
        EURQ_ASSET_ID,
        100_000,
        chain.merchant_address,
    )
    assert sandbox.bank.transaction(made.code).status == "Paid"

    stages = [e.stage for e in events]
    assert stages[0] == "paying"
    assert stages[-2:] == ["settled", "proving"]
    assert set(stages[1:-2]) == {"waiting"}
    assert all(e.transaction_code == made.code for e in events[1:])
    assert events[-1].blockchain_tx_id == receipt.blockchain_tx_id


async def test_polling_stops_as_soon_as_the_id_appears(sandbox, chain, account):
    chain.bridge_delay = HOUR
    events: list[PaymentProgress] = []
    waited_at: list[float] = []

    def on_progress(event: PaymentProgress) -> None:
        events.append(event)
        if event.stage == "waiting":
            waited_at.append(time.monotonic())
            if len(waited_at) == 3:  # three lookups saw it processing: the bridge is done
                assert event.transaction_code is not None
                chain.settle_bridge(event.transaction_code)

    before = sandbox.faults.calls.get("transaction", 0)
    tasks = set(asyncio.all_tasks())
    async with with_eur_payment(
        httpx.AsyncClient(), options(sandbox, account, on_progress=on_progress)
    ) as client:
        response = await client.get(sandbox.url("/weather"))
    assert response.status_code == 200
    lookups = sandbox.faults.calls["transaction"] - before
    [settled] = [e for e in events if e.stage == "settled"]
    assert settled.polls == lookups == 4  # the lookup that saw the id was the last one
    waiting = [e for e in events if e.stage == "waiting"]
    assert len(waiting) == lookups - 1
    assert all(e.status == "Processing" for e in waiting)
    # No hammering: the lookups are at least the first interval (0.05 s) apart.
    gaps = [later - earlier for earlier, later in itertools.pairwise(waited_at)]
    assert min(gaps) >= 0.045, gaps
    # Nothing is left running that could look again.
    assert set(asyncio.all_tasks()) <= tasks
    assert sandbox.faults.calls["transaction"] - before == lookups


async def test_lookup_failures_during_the_wait_are_polled_through(sandbox, chain, account):
    sandbox.faults.arm("transaction", Fault(kind="status", status=503, times=2))
    async with with_eur_payment(httpx.AsyncClient(), options(sandbox, account)) as client:
        response = await client.get(sandbox.url("/weather"))
    assert response.status_code == 200
    assert len(payments(sandbox, account)) == 1


# --- the deadline and resuming ------------------------------------------------------------------


async def test_deadline_gives_outcome_unknown_and_resuming_pays_nothing_more(
    sandbox, chain, account
):
    chain.bridge_delay = HOUR
    merchant_eurq = chain.asset_balance(chain.merchant_address, EURQ)
    async with with_eur_payment(
        httpx.AsyncClient(), options(sandbox, account, bridge_deadline=0.2)
    ) as client:
        with pytest.raises(PaymentOutcomeUnknown) as caught:
            await client.get(sandbox.url("/weather"))
    error = caught.value
    [made] = payments(sandbox, account)
    assert error.transaction_code == made.code
    assert error.intent is not None and error.intent.rail == "bridge"
    assert "resume_transaction_code" in str(error)
    assert sandbox.bank.transaction(made.code).status == "Processing"
    assert sandbox.balance(account) == Decimal("9.90")

    resuming = options(sandbox, account, on_progress=settle_once_waiting(chain))
    async with with_eur_payment(httpx.AsyncClient(), resuming) as client:
        response = await client.get(
            sandbox.url("/weather"),
            extensions={"x402": {"resume_transaction_code": error.transaction_code}},
        )
    assert response.status_code == 200
    receipt = response.extensions["x402_payment"]
    assert receipt.transaction_code == made.code
    assert receipt.blockchain_tx_id == sandbox.bank.transaction(made.code).blockchain_tx_id
    assert payments(sandbox, account) == [made]  # no second payment
    assert sandbox.balance(account) == Decimal("9.90")
    assert chain.asset_balance(chain.merchant_address, EURQ) - merchant_eurq == 100_000


async def test_recover_from_the_error_rebuilds_the_request(sandbox, chain, account):
    chain.bridge_delay = HOUR
    async with with_eur_payment(
        httpx.AsyncClient(), options(sandbox, account, bridge_deadline=0.1)
    ) as client:
        with pytest.raises(PaymentOutcomeUnknown) as caught:
            await client.get(sandbox.url("/weather"))
    # Later, from a client with a longer deadline: the error says what to re-send.
    resuming = options(sandbox, account, on_progress=settle_once_waiting(chain))
    async with with_eur_payment(httpx.AsyncClient(), resuming) as client:
        response = (await payments_of(client).recover(caught.value)).response
    assert response is not None and response.status_code == 200
    assert response.extensions["x402_payment"].transaction_code == caught.value.transaction_code
    assert len(payments(sandbox, account)) == 1


async def test_resuming_a_payment_already_delivered_does_not_pay_again(sandbox, chain, account):
    async with with_eur_payment(httpx.AsyncClient(), options(sandbox, account)) as client:
        first = await client.get(sandbox.url("/weather"))
        code = first.extensions["x402_payment"].transaction_code
        with pytest.raises(PaymentVerificationFailed) as caught:
            await client.get(
                sandbox.url("/weather"), extensions={"x402": {"resume_transaction_code": code}}
            )
    assert "already used" in caught.value.reason
    assert len(payments(sandbox, account)) == 1
    assert sandbox.balance(account) == Decimal("9.90")


async def test_resuming_with_a_transaction_of_another_payment_is_refused(sandbox, chain, account):
    other = chain.ledger.new_address()
    elsewhere = sandbox.bank.pay(
        account,
        payment_from=account.code,
        to_type="BlockchainAddress",
        payment_to=other,
        amount=Decimal("0.10"),
    )
    async with with_eur_payment(httpx.AsyncClient(), options(sandbox, account)) as client:
        with pytest.raises(BridgeResumeRefused) as caught:
            await client.get(
                sandbox.url("/weather"),
                extensions={"x402": {"resume_transaction_code": elsewhere.code}},
            )
        assert caught.value.transaction_code == elsewhere.code
        assert other in caught.value.reason
        with pytest.raises(BridgeResumeRefused, match="does not list it"):
            await client.get(
                sandbox.url("/weather"),
                extensions={"x402": {"resume_transaction_code": "QP0000000000000000"}},
            )
    assert payments(sandbox, account) == [elsewhere]


# --- failed bridge transactions ------------------------------------------------------------------


async def test_a_cancelled_bridge_transaction_is_a_typed_error(sandbox, chain, account):
    chain.end_next_bridge_as("Cancelled")
    events: list[PaymentProgress] = []
    merchant_eurq = chain.asset_balance(chain.merchant_address, EURQ)
    async with with_eur_payment(
        httpx.AsyncClient(), options(sandbox, account, on_progress=events.append)
    ) as client:
        with pytest.raises(BridgeTransferFailed) as caught:
            await client.get(sandbox.url("/weather"))
    [made] = payments(sandbox, account)
    assert (caught.value.transaction_code, caught.value.status) == (made.code, "Cancelled")
    assert sandbox.balance(account) == Decimal("10.00")  # refunded
    assert chain.asset_balance(chain.merchant_address, EURQ) == merchant_eurq
    assert events[-1].stage == "failed" and events[-1].status == "Cancelled"


async def test_a_transaction_cancelled_during_the_wait_ends_it(sandbox, chain, account):
    chain.bridge_delay = HOUR
    waiting = anyio.Event()

    def on_progress(event: PaymentProgress) -> None:
        if event.stage == "waiting":
            waiting.set()

    async def cancel_when_waiting() -> None:
        await waiting.wait()
        [made] = payments(sandbox, account)
        assert chain.cancel_bridge(made.code, status="Expired")

    failures: list[BridgeTransferFailed] = []
    async with with_eur_payment(
        httpx.AsyncClient(), options(sandbox, account, on_progress=on_progress)
    ) as client:
        with anyio.fail_after(PATIENCE):
            async with anyio.create_task_group() as tg:
                tg.start_soon(cancel_when_waiting)
                try:
                    await client.get(sandbox.url("/weather"))
                except BridgeTransferFailed as exc:
                    failures.append(exc)
    [failure] = failures
    assert failure.status == "Expired"
    assert sandbox.balance(account) == Decimal("10.00")


async def test_a_receiver_that_is_not_whitelisted_fails_the_transfer(sandbox, chain, account):
    chain.unwhitelist(chain.merchant_address)
    async with with_eur_payment(httpx.AsyncClient(), options(sandbox, account)) as client:
        with pytest.raises(BridgeTransferFailed) as caught:
            await client.get(sandbox.url("/weather"))
    assert caught.value.status == "Failed"
    assert sandbox.balance(account) == Decimal("10.00")


# --- what the bridge does not pay ---------------------------------------------------------------


async def test_a_usdq_chain_a_entry_is_not_paid_through_the_bridge(sandbox, chain, account):
    async with with_eur_payment(httpx.AsyncClient(), options(sandbox, account)) as client:
        with pytest.raises(NoSatisfiableOption) as caught:
            await client.get(sandbox.url("/report"))
        assert any("USDQ" in reason for reason in caught.value.reasons)
        assert payments(sandbox, account) == []
        # Listed first, the USDQ entry is passed over for the euro entry after it.
        response = await client.post(sandbox.url("/echo"), content=b"hello")
    assert response.content == b"hello"
    assert response.extensions["x402_payment"].rail == "euro"
    [made] = payments(sandbox, account)
    assert made.to_type == "PaymentRequestCode"


# --- the merchant's checks --------------------------------------------------------------------


async def test_the_merchant_refuses_wrong_asset_receiver_and_short_amount(sandbox, chain):
    ledger, hot, merchant = chain.ledger, chain.provider_address, chain.merchant_address
    other = ledger.new_address()
    usdq = ledger.transfer(hot, merchant, USDQ_ASSET_ID, 100_000)
    to_other = ledger.transfer(hot, other, EURQ_ASSET_ID, 100_000)
    short = ledger.transfer(hot, merchant, EURQ_ASSET_ID, 99_999)
    cases = {
        "Wrong asset": bridge_payload(chain, usdq.id),
        "Wrong receiver: the transfer": bridge_payload(chain, to_other.id),
        "Wrong receiver: payTo": bridge_payload(chain, to_other.id, payTo=other),
        "Amount too low": bridge_payload(chain, short.id),
        "not confirmed": bridge_payload(chain, "A" * 52),  # not on chain (yet)
        # A direct proof goes to the on-chain facilitator, which reads the transaction.
        "the transaction is not msgpack": {"transaction": "AAAA", "paymentIndex": 0},
    }
    async with httpx.AsyncClient() as client:
        for expected, payload in cases.items():
            response = await client.get(sandbox.url("/weather"), headers=header(payload))
            assert response.status_code == 402, expected
            assert expected in response.json()["error"]
        # A USDQ proof for a EURQ price: no EURQ offer takes it.
        response = await client.get(
            sandbox.url("/weather"), headers=header(bridge_payload(chain, usdq.id, asset="x"))
        )
        assert response.status_code == 402


async def test_a_direct_transfer_is_as_good_as_a_bridged_one_but_only_once(sandbox, chain):
    transfer = chain.ledger.transfer(
        chain.provider_address, chain.merchant_address, EURQ_ASSET_ID, 100_000
    )
    async with httpx.AsyncClient() as client:
        proof = header(bridge_payload(chain, transfer.id))
        assert (await client.get(sandbox.url("/weather"), headers=proof)).status_code == 200
        again = await client.get(sandbox.url("/weather"), headers=proof)
        assert again.status_code == 402
        assert again.json()["error"] == "Transaction already used"
        # The same chain transaction under another transactionCode is still a reuse.
        other_code = header(bridge_payload(chain, transfer.id, transactionCode="QPOTHER"))
        assert (await client.get(sandbox.url("/weather"), headers=other_code)).status_code == 402


async def test_a_bridge_proof_is_refused_when_reused(sandbox, chain, account):
    async with with_eur_payment(httpx.AsyncClient(), options(sandbox, account)) as client:
        response = await client.get(sandbox.url("/weather"))
    proof = response.extensions["x402_payment"].proof
    async with httpx.AsyncClient() as plain:
        again = await plain.get(sandbox.url("/weather"), headers={"X-PAYMENT": proof})
    assert again.status_code == 402
    assert "already used" in again.json()["error"]


async def test_the_indexer_answers_in_the_field_notes_shape(sandbox, chain):
    transfer = chain.ledger.transfer(
        chain.provider_address, chain.merchant_address, EURQ_ASSET_ID, 1
    )
    async with httpx.AsyncClient(base_url=chain.indexer_url) as client:
        found = await client.get(f"/v2/transactions/{transfer.id}")
        missing = await client.get("/v2/transactions/" + "B" * 52)
    assert found.status_code == 200
    body = found.json()
    assert body["current-round"] >= transfer.confirmed_round
    assert body["transaction"] == {
        "id": transfer.id,
        "tx-type": "axfer",
        "sender": chain.provider_address,
        "confirmed-round": transfer.confirmed_round,
        "asset-transfer-transaction": {
            "asset-id": EURQ_ASSET_ID,
            "amount": 1,
            "receiver": chain.merchant_address,
        },
    }
    assert len(transfer.id) == 52 and len(chain.merchant_address) == 58
    assert missing.status_code == 404


# --- cancellation -----------------------------------------------------------------------------


async def test_cancelling_the_wait_leaves_no_task_and_logs_the_code(
    sandbox, chain, account, caplog
):
    chain.bridge_delay = HOUR
    waiting = anyio.Event()

    def on_progress(event: PaymentProgress) -> None:
        if event.stage == "waiting":
            waiting.set()

    before = set(asyncio.all_tasks())
    async with with_eur_payment(
        httpx.AsyncClient(), options(sandbox, account, on_progress=on_progress)
    ) as client:
        with caplog.at_level(logging.WARNING, logger="x402_client"):
            async with anyio.create_task_group() as tg:
                tg.start_soon(client.get, sandbox.url("/weather"))
                await waiting.wait()
                tg.cancel_scope.cancel()
    assert set(asyncio.all_tasks()) <= before  # nothing left behind
    [made] = payments(sandbox, account)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert any(made.code in r.getMessage() for r in warnings)
    # The code is all it takes to finish the purchase later.
    resuming = options(sandbox, account, on_progress=settle_once_waiting(chain))
    async with with_eur_payment(httpx.AsyncClient(), resuming) as client:
        response = await client.get(
            sandbox.url("/weather"), extensions={"x402": {"resume_transaction_code": made.code}}
        )
    assert response.status_code == 200
    assert payments(sandbox, account) == [made]


async def test_cancelling_during_the_payment_call_still_logs_the_code(
    sandbox, chain, account, caplog
):
    # The payment API takes the money and holds its answer; the cancellation arrives while
    # the POST is in flight, the answer after it.
    sandbox.faults.arm("payment", Fault(kind="timeout", when="after"))
    scope = anyio.CancelScope()

    async def fetch() -> None:
        with scope:
            await client.get(sandbox.url("/weather"))

    with caplog.at_level(logging.WARNING, logger="x402_client"):
        async with (
            with_eur_payment(httpx.AsyncClient(), options(sandbox, account)) as client,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(fetch)
            await eventually(lambda: payments(sandbox, account), "the payment to be made")
            scope.cancel()
            sandbox.faults.release()
    assert scope.cancelled_caught
    [made] = payments(sandbox, account)
    assert made.code in caplog.text
