"""Our client pays `upto` entries (authorize at most an amount; the merchant settles what
was used) of the x402 foundation's own v2 merchant, settled by the foundation's own
facilitator through Permit2 and the `upto` Permit2 proxy on anvil
(`tests/x402_foundation.py` `upto_stack`); the token balances on the chain are the proof.

The caps and budgets hold the authorized maximum; once the merchant's settlement response
says what it took, the ledger and the budgets keep that and give back the rest, and the
receipt says both.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import anyio
import httpx
import pytest

from tests.x402_foundation import METERED_PATH, UptoStack, upto_stack
from x402_client import (
    AmountLimitExceeded,
    Asset,
    Budget,
    BudgetExceeded,
    EvmOptions,
    NoSatisfiableOption,
    PaymentIntent,
    PaymentOptions,
    PaymentOutcomeUnknown,
    PaymentVerificationFailed,
    payments,
    with_eur_payment,
)
from x402_client._state.shared import state_of
from x402_eur_sandbox import ServedApp

pytestmark = pytest.mark.anyio

MAXIMUM = Decimal("0.01")
UPTO_PROXY = "0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002"


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def stack(anyio_backend: str) -> AsyncIterator[UptoStack]:
    async with upto_stack() as started:
        yield started


@pytest.fixture(autouse=True)
def _honest_merchant(stack: UptoStack) -> None:
    stack.charge_atomic = stack.price_atomic
    stack.claim_atomic = None
    stack.fail_status = None


class Hook:
    """An `on_before_payment` that approves and counts: it runs just before signing."""

    def __init__(self) -> None:
        self.intents: list[PaymentIntent] = []

    def __call__(self, intent: PaymentIntent) -> bool:
        self.intents.append(intent)
        return True


def options(stack: UptoStack, key: str | None = None, **overrides: Any) -> PaymentOptions:
    values: dict[str, Any] = {
        "evm": EvmOptions(
            private_key=key or stack.payer_key, rpc_urls={stack.chain_id: stack.rpc_url}
        ),
        "assets": [
            Asset(chain_id=stack.chain_id, address=stack.token, symbol="sEURT", currency="EUR")
        ],
    }
    values.update(overrides)
    return PaymentOptions(**values)


def settlements(stack: UptoStack) -> int:
    return len(stack.facilitator.requests)


async def approved_payer(stack: UptoStack, tokens: int = 5) -> tuple[str, str]:
    key, address = await stack.new_payer(tokens_atomic=tokens * stack.price_atomic)
    await stack.approve(key)
    return key, address


async def test_the_merchant_settles_less_than_the_maximum_and_the_rest_is_released(stack):
    key, address = await approved_payer(stack)
    stack.charge_atomic = 4_000  # 0.004 of at most 0.01
    merchant_before = await stack.balance(stack.merchant_address)
    hook = Hook()
    opts = options(stack, key, on_before_payment=hook, budgets=[Budget("0.015")])
    async with with_eur_payment(httpx.AsyncClient(timeout=30), opts) as client:
        response = await client.get(stack.metered_url)
        assert response.status_code == 200, response.text
        receipt = response.extensions["x402_payment"]
        # The budget held the maximum while paying, and now keeps only what was settled:
        # a second request (at most 0.01 again) fits in 0.015 - 0.004.
        second = await client.get(stack.metered_url)
        assert second.status_code == 200, second.text
    assert (receipt.rail, receipt.scheme, receipt.network) == ("upto", "upto", stack.network)
    assert receipt.authorized_amount == MAXIMUM
    assert receipt.settled_amount == Decimal("0.004") == receipt.amount
    assert receipt.to_json()["authorizedAmount"] == "0.01"
    assert receipt.to_json()["settledAmount"] == "0.004"
    assert receipt.tx_hash and receipt.tx_hash.startswith("0x")
    assert [i.amount for i in hook.intents] == [MAXIMUM, MAXIMUM]  # the maximum is approved
    assert all(i.rail == "upto" for i in hook.intents)
    assert await stack.balance(address) == 5 * stack.price_atomic - 2 * 4_000
    assert await stack.balance(stack.merchant_address) == merchant_before + 2 * 4_000
    entries = payments(opts).ledger.entries(outcome="paid")
    assert [e.amount for e in entries] == [Decimal("0.004")] * 2
    assert all(e.intent.amount == MAXIMUM and e.delivered for e in entries)
    assert payments(opts).ledger.total("EUR") == Decimal("0.008")
    (status,) = await state_of(opts).budgets.status()
    assert status.spent == Decimal("0.008")
    sent = stack.facilitator.requests[-1][1]["paymentPayload"]["payload"]["permit2Authorization"]
    assert sent["spender"] == UPTO_PROXY and sent["permitted"]["amount"] == "10000"
    assert sent["witness"]["to"].lower() == stack.merchant_address.lower()


async def test_a_full_charge_books_the_maximum(stack):
    key, address = await approved_payer(stack)
    opts = options(stack, key)
    async with with_eur_payment(httpx.AsyncClient(timeout=30), opts) as client:
        response = await client.get(stack.metered_url)
    assert response.status_code == 200, response.text
    receipt = response.extensions["x402_payment"]
    assert receipt.amount == receipt.settled_amount == receipt.authorized_amount == MAXIMUM
    assert await stack.balance(address) == 4 * stack.price_atomic


async def test_over_the_cap_and_beyond_the_budget_nothing_is_signed(stack):
    key, address = await approved_payer(stack)
    stack.charge_atomic = 1_000  # what it would charge does not matter: the maximum counts
    before = settlements(stack)
    hook = Hook()
    capped = options(stack, key, max_amount_per_payment="0.005", on_before_payment=hook)
    async with with_eur_payment(httpx.AsyncClient(timeout=30), capped) as client:
        with pytest.raises(AmountLimitExceeded) as over_cap:
            await client.get(stack.metered_url)
    assert over_cap.value.money_moved is False
    assert hook.intents == [] and settlements(stack) == before

    budgeted = options(stack, key, budgets=[Budget("0.009")], on_before_payment=hook)
    async with with_eur_payment(httpx.AsyncClient(timeout=30), budgeted) as client:
        with pytest.raises(BudgetExceeded) as beyond:
            await client.get(stack.metered_url)
    assert beyond.value.money_moved is False
    assert hook.intents == [] and settlements(stack) == before
    assert await stack.balance(address) == 5 * stack.price_atomic


async def test_a_missing_approval_is_a_skip_reason_and_nothing_is_signed(stack):
    key, address = await stack.new_payer(tokens_atomic=stack.price_atomic)
    before = settlements(stack)
    async with with_eur_payment(httpx.AsyncClient(timeout=30), options(stack, key)) as client:
        with pytest.raises(NoSatisfiableOption, match=r"approve_permit2") as caught:
            await client.get(stack.metered_url)
    assert caught.value.money_moved is False
    assert settlements(stack) == before
    assert await stack.balance(address) == stack.price_atomic


async def test_a_settlement_claiming_more_than_authorized_is_an_error_saying_money_moved(stack):
    key, address = await approved_payer(stack)
    stack.charge_atomic = 3_000
    stack.claim_atomic = 50_000  # the merchant says 0.05 of at most 0.01
    opts = options(stack, key, budgets=[Budget("1")])
    async with with_eur_payment(httpx.AsyncClient(timeout=30), opts) as client:
        with pytest.raises(PaymentVerificationFailed, match=r"more than the 0\.01 EUR") as caught:
            await client.get(stack.metered_url)
    error = caught.value
    assert error.money_moved is True
    assert "0.05 EUR" in str(error)
    assert error.receipt is not None and error.receipt.claimed_amount == Decimal("0.05")
    assert error.receipt.authorized_amount == MAXIMUM
    # What the chain says moved is booked, not the claim.
    assert error.receipt.settled_amount == Decimal("0.003")
    assert error.receipt.settlement_verified is True
    (entry,) = payments(opts).ledger.entries()
    assert (entry.outcome, entry.amount) == ("paid", Decimal("0.003"))
    (status,) = await state_of(opts).budgets.status()
    assert status.spent == Decimal("0.003")
    assert await stack.balance(address) == 5 * stack.price_atomic - 3_000  # what really moved


async def test_the_journal_keeps_the_maximum_until_settled(stack, tmp_path):
    key, address = await approved_payer(stack)
    stack.charge_atomic = 2_500
    opts = options(stack, key, state_path=tmp_path / "state.sqlite3", budgets=[Budget("1")])
    async with with_eur_payment(httpx.AsyncClient(timeout=30), opts) as client:
        response = await client.get(stack.metered_url)
    assert response.status_code == 200, response.text
    journal = state_of(opts).journal
    assert journal is not None
    (record,) = await journal.payments()
    assert (record.rail, record.outcome, record.delivered) == ("upto", "paid", True)
    assert record.amount == MAXIMUM  # the journal row is the authorization
    assert any(s.step == "settled" and "0.0025 of at most 0.01" in s.detail for s in record.steps)
    (status,) = await state_of(opts).budgets.status()
    assert status.spent == Decimal("0.0025")
    state_of(opts).close()
    assert await stack.balance(address) == 5 * stack.price_atomic - 2_500


async def test_an_unsettled_payment_keeps_the_maximum_until_recovery_settles_it(stack, tmp_path):
    key, address = await approved_payer(stack)
    stack.fail_status = 500  # the merchant breaks before it settles anything
    opts = options(
        stack,
        key,
        state_path=tmp_path / "state.sqlite3",
        budgets=[Budget("1")],
        merchant_error_retries=0,
    )
    async with with_eur_payment(httpx.AsyncClient(timeout=30), opts) as client:
        with pytest.raises(PaymentOutcomeUnknown) as caught:
            await client.get(stack.metered_url)
    assert caught.value.money_moved is None
    (unfinished,) = await payments(opts).unfinished()
    assert (unfinished.rail, unfinished.amount) == ("upto", MAXIMUM)
    (entry,) = payments(opts).ledger.entries()
    assert (entry.outcome, entry.amount) == ("unknown", MAXIMUM)
    (status,) = await state_of(opts).budgets.status()
    assert status.spent == MAXIMUM  # held until the payment is settled or given up
    assert await stack.balance(address) == 5 * stack.price_atomic

    # Recovery re-sends the same proof; the merchant serves and settles what it charges.
    stack.fail_status = None
    stack.charge_atomic = 3_500
    async with with_eur_payment(httpx.AsyncClient(timeout=30), opts) as client:
        (recovered,) = await payments(client).recover_all()
        assert recovered.status == "delivered", recovered.reason
        assert recovered.response is not None
        receipt = recovered.response.extensions["x402_payment"]
        assert (receipt.reused, receipt.settled_amount) == (True, Decimal("0.0035"))
        # Once only: the same proof re-sent again books nothing twice.
        with pytest.raises(PaymentVerificationFailed):
            await client.get(stack.metered_url, extensions={"x402": {"proof": receipt.proof}})
    (entry,) = payments(opts).ledger.entries()
    assert (entry.outcome, entry.amount) == ("paid", Decimal("0.0035"))
    (status,) = await state_of(opts).budgets.status()
    assert status.spent == Decimal("0.0035")
    journal = state_of(opts).journal
    assert journal is not None
    (record,) = await journal.payments()
    assert record.amount == MAXIMUM and record.delivered
    (settled,) = [s.detail for s in record.steps if s.step == "settled"]
    assert settled.startswith("0.0035 of at most 0.01, verified on chain in block ")
    state_of(opts).close()
    assert await stack.balance(address) == 5 * stack.price_atomic - 3_500


async def test_the_sync_client_books_the_settled_amount_too(stack):
    key, address = await approved_payer(stack)
    stack.charge_atomic = 6_000
    opts = options(stack, key, budgets=[Budget("1")])

    def fetch() -> httpx.Response:  # the sync client, off the loop that serves the merchant
        with with_eur_payment(httpx.Client(timeout=30), opts) as client:
            return client.get(stack.metered_url)

    response = await anyio.to_thread.run_sync(fetch)
    assert response.status_code == 200, response.text
    receipt = response.extensions["x402_payment"]
    assert (receipt.authorized_amount, receipt.settled_amount) == (MAXIMUM, Decimal("0.006"))
    (status,) = await state_of(opts).budgets.status()
    assert status.spent == Decimal("0.006")
    assert await stack.balance(address) == 5 * stack.price_atomic - 6_000


# --- the chain decides what was settled, never the merchant's word --------------------------


class RpcProxy:
    """The chain's JSON-RPC endpoint, served on 127.0.0.1 in front of anvil, that answers
    the methods named in `failing` badly: 503, 429, garbage, or a JSON-RPC error."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.failing: dict[str, str] = {}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        how = self.failing.get(json.loads(body).get("method"))
        status, answer = 200, b""
        if how in ("503", "429"):
            status, answer = int(how), b"busy"
        elif how == "garbage":
            answer = b"<html>not json</html>"
        elif how == "error":
            answer = (
                b'{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"missing trie node"}}'
            )
        else:
            async with httpx.AsyncClient(trust_env=False) as http:
                forwarded = await http.post(
                    self.upstream, content=body, headers={"content-type": "application/json"}
                )
                answer = forwarded.content
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": answer})


@pytest.fixture
async def rpc_proxy(stack: UptoStack) -> AsyncIterator[tuple[RpcProxy, str]]:
    proxy = RpcProxy(stack.rpc_url)
    served = await ServedApp(proxy, "rpc-proxy").start()
    try:
        yield proxy, served.url
    finally:
        await served.stop()


async def test_a_merchant_that_reports_less_than_it_settled_is_booked_what_moved(stack):
    key, address = await approved_payer(stack, tokens=5)
    stack.charge_atomic = stack.price_atomic  # settles the whole maximum on chain...
    stack.claim_atomic = 0  # ...and says it took nothing
    opts = options(stack, key, budgets=[Budget("0.03")])
    served, refused = [], 0
    async with with_eur_payment(httpx.AsyncClient(timeout=30), opts) as client:
        for _ in range(5):
            try:
                served.append((await client.get(stack.metered_url)).extensions["x402_payment"])
            except BudgetExceeded:
                refused += 1
    assert (len(served), refused) == (3, 2)  # the budget holds what moved, not the claim
    assert all(r.claimed_amount == 0 and r.settled_amount == MAXIMUM for r in served)
    assert all(r.amount == MAXIMUM and r.settlement_verified for r in served)
    moved = 5 * stack.price_atomic - await stack.balance(address)
    assert moved == 3 * stack.price_atomic
    assert payments(opts).ledger.total("EUR") == Decimal("0.03")
    (status,) = await state_of(opts).budgets.status()
    assert status.spent == Decimal("0.03")


async def test_a_merchant_that_reports_more_than_it_settled_is_booked_what_moved(stack):
    key, address = await approved_payer(stack)
    stack.charge_atomic = 2_000
    stack.claim_atomic = 9_000  # within the authorization, but not what moved
    opts = options(stack, key, budgets=[Budget("1")])
    async with with_eur_payment(httpx.AsyncClient(timeout=30), opts) as client:
        receipt = (await client.get(stack.metered_url)).extensions["x402_payment"]
    assert (receipt.claimed_amount, receipt.settled_amount) == (Decimal("0.009"), Decimal("0.002"))
    assert receipt.amount == Decimal("0.002") and receipt.settlement_verified is True
    (entry,) = payments(opts).ledger.entries()
    assert entry.amount == Decimal("0.002")
    assert await stack.balance(address) == 5 * stack.price_atomic - 2_000


@pytest.mark.parametrize("failure", ["503", "429", "garbage", "error"])
async def test_a_settlement_the_chain_cannot_confirm_keeps_the_maximum_until_recovery_reads_it(
    stack, rpc_proxy, tmp_path, failure: str
):
    proxy, rpc_url = rpc_proxy
    key, address = await approved_payer(stack)
    stack.charge_atomic = 3_000
    opts = options(
        stack,
        key,
        evm=EvmOptions(private_key=key, rpc_urls={stack.chain_id: rpc_url}),
        state_path=tmp_path / "state.sqlite3",
        budgets=[Budget("1")],
    )
    proxy.failing = {"eth_getTransactionReceipt": failure}
    async with with_eur_payment(httpx.AsyncClient(timeout=30), opts) as client:
        receipt = (await client.get(stack.metered_url)).extensions["x402_payment"]
        assert (receipt.amount, receipt.settled_amount) == (MAXIMUM, None)
        assert receipt.settlement_verified is False and receipt.claimed_amount == Decimal("0.003")
        (status,) = await state_of(opts).budgets.status()
        assert status.spent == MAXIMUM  # held: the chain did not say what moved

        (still,) = await payments(client).recover_all()  # the endpoint still fails: left as it is
        assert still.status == "pending" and "held at the maximum" in still.reason
        (status,) = await state_of(opts).budgets.status()
        assert status.spent == MAXIMUM

        proxy.failing = {}
        (recovered,) = await payments(client).recover_all()
        assert recovered.status == "delivered", recovered.reason
        assert "0.003 of at most 0.01, verified on chain" in recovered.reason
        assert await payments(client).recover_all() == []  # booked once
    (status,) = await state_of(opts).budgets.status()
    assert status.spent == Decimal("0.003")
    state_of(opts).close()
    assert await stack.balance(address) == 5 * stack.price_atomic - 3_000


async def test_a_proof_re_sent_to_another_origin_frees_no_reservation(stack, serve, tmp_path):
    key, address = await approved_payer(stack)
    stack.fail_status = 500  # payment A: the merchant breaks before it settles
    opts = options(
        stack,
        key,
        state_path=tmp_path / "state.sqlite3",
        budgets=[Budget("1")],
        merchant_error_retries=0,
    )
    async with httpx.AsyncClient(timeout=30, trust_env=False) as http:
        required = (await http.get(stack.metered_url)).headers["payment-required"]
    settlement = base64.b64encode(
        json.dumps({"success": True, "amount": "0", "transaction": "0x" + "00" * 32}).encode()
    ).decode()

    async def echoing(scope: Any, receive: Any, send: Any) -> None:
        # Another origin: the same 402, and a 200 claiming a settlement of 0 to any proof.
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        paid = "payment-signature" in headers
        extra = [(b"payment-response", settlement.encode())] if paid else []
        extra += [] if paid else [(b"payment-required", required.encode())]
        await send({"type": "http.response.start", "status": 200 if paid else 402,
                    "headers": [(b"content-type", b"application/json"), *extra]})  # fmt: skip
        await send({"type": "http.response.body", "body": b"{}"})

    other = await serve(echoing)
    async with with_eur_payment(httpx.AsyncClient(timeout=30), opts) as client:
        with pytest.raises(PaymentOutcomeUnknown) as caught:
            await client.get(stack.metered_url)
        proof = caught.value.proof
        response = await client.get(other + METERED_PATH, extensions={"x402": {"proof": proof}})
        assert response.status_code == 200
        (status,) = await state_of(opts).budgets.status()
        assert status.spent == MAXIMUM  # nothing freed on another origin's word
        assert len(await payments(opts).unfinished()) == 1
        assert response.extensions["x402_payment"].closed_payment is None
        stack.fail_status = None
        stack.charge_atomic = 1_500
        (recovered,) = await payments(client).recover_all()  # where it was paid: settled once
        assert recovered.status == "delivered", recovered.reason
    (status,) = await state_of(opts).budgets.status()
    assert status.spent == Decimal("0.0015")
    state_of(opts).close()
    assert await stack.balance(address) == 5 * stack.price_atomic - 1_500
