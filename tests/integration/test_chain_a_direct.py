"""Path B: a chain-A `exact` entry paid from the user's own chain-A wallet, in the sandbox.

The client signs one asset transfer (py-algorand-sdk); the merchant hands the proof to the
sandbox's on-chain facilitator, which verifies the signature and the transfer and applies
it to the chain-A ledger the indexer serves. Balances are read from that ledger.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import httpx
import pytest

from tests.conftest import register_secrets
from tests.sandboxes import payment_options
from x402_client import (
    Budget,
    BudgetExceeded,
    NoSatisfiableOption,
    PaymentOptions,
    PaymentRejectedByHook,
    PaymentVerificationFailed,
    payments,
    with_eur_payment,
)
from x402_client._protocol.proof import decode_proof, encode_proof
from x402_client._state.shared import state_of
from x402_eur_sandbox import Account, Price, Sandbox
from x402_eur_sandbox._chain_a import EURQ_ASSET_ID, USDQ_ASSET_ID, ChainASandbox
from x402_eur_sandbox._chain_a_direct import MIN_FEE, decode_signed

pytestmark = pytest.mark.anyio

EURQ, USDQ = str(EURQ_ASSET_ID), str(USDQ_ASSET_ID)
PRICES = {
    "/weather": Price(Decimal("0.10"), "Weather on chain A", rails=("ledgera",)),
    "/report": Price(Decimal("0.50"), "USDQ on chain A only", rails=("ledgera:USDQ",)),
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with Sandbox.run_in_thread(chain_a=True, bridge_delay=0.2, prices=PRICES) as running:
        yield running


@pytest.fixture
def chain(sandbox: Sandbox) -> Iterator[ChainASandbox]:
    part = sandbox.chain_a
    assert isinstance(part, ChainASandbox)
    yield part
    part.direct.offline = False
    part.whitelist(part.merchant_address)
    sandbox.faults.clear()


@pytest.fixture
def wallet(chain: ChainASandbox) -> Any:
    """A fresh payer wallet: 1 EURQ and 1 USDQ, opted in, coin for fees."""
    made = chain.direct.new_wallet(eurq=1_000_000, usdq=1_000_000)
    register_secrets(made.private_key)
    return made


@pytest.fixture
def account(sandbox: Sandbox) -> Account:
    return sandbox.bank.open_account("10.00")


def direct_options(
    sandbox: Sandbox, chain: ChainASandbox, wallet: Any, account: Account | None = None, **more: Any
) -> PaymentOptions:
    values: dict[str, Any] = {
        "chain_a": chain.chain_a_config(private_key=wallet.private_key),
        "bridge_poll_interval": 0.05,
        "bridge_poll_max_interval": 0.1,
    }
    if account is not None:
        values.update(
            api_key=account.api_key, from_account=account.code, api_url=sandbox.payment_api_url
        )
    values.update(more)
    return PaymentOptions.model_validate(values)


def bank_payments(sandbox: Sandbox, account: Account) -> list[Any]:
    return [t for t in sandbox.bank.payments_made if t.from_account == account.code]


# --- paying ----------------------------------------------------------------------------------


async def test_a_direct_payment_moves_exactly_the_price_on_the_chain_a_ledger(
    sandbox, chain, wallet, account
):
    merchant_before = chain.asset_balance(chain.merchant_address, EURQ)
    coins_before = chain.direct.coins(wallet.address)
    options = direct_options(sandbox, chain, wallet, account)
    proofs_before = sandbox.faults.calls.get("resource", 0)
    async with with_eur_payment(httpx.AsyncClient(), options) as client:
        response = await client.get(sandbox.url("/weather"))

    assert response.status_code == 200
    receipt = response.extensions["x402_payment"]
    assert (receipt.rail, receipt.currency, receipt.amount) == ("chain-a", "EUR", Decimal("0.10"))
    assert receipt.payer == wallet.address
    # The signed transaction's id is the payment's, and the one the facilitator applied.
    assert receipt.blockchain_tx_id is not None
    assert receipt.tx_hash == receipt.blockchain_tx_id
    transfer = chain.ledger.transaction(receipt.blockchain_tx_id)
    assert transfer is not None
    assert (transfer.sender, transfer.receiver, transfer.asset_id, transfer.amount) == (
        wallet.address,
        chain.merchant_address,
        EURQ_ASSET_ID,
        100_000,
    )
    # Exact balances: the price left the wallet and reached the merchant; the fee in coin.
    assert chain.asset_balance(wallet.address, EURQ) == 900_000
    assert chain.asset_balance(wallet.address, USDQ) == 1_000_000
    assert chain.asset_balance(chain.merchant_address, EURQ) - merchant_before == 100_000
    assert chain.direct.coins(wallet.address) == coins_before - MIN_FEE
    # No managed account was used, and no bridge; the first proof was accepted (no wait
    # for a confirmation, no re-send).
    assert bank_payments(sandbox, account) == []
    assert sandbox.faults.calls["resource"] - proofs_before == 1


async def test_the_proof_is_the_signed_transfer_of_the_entry(sandbox, chain, wallet):
    async with with_eur_payment(
        httpx.AsyncClient(), direct_options(sandbox, chain, wallet)
    ) as client:
        response = await client.get(sandbox.url("/weather"))
    receipt = response.extensions["x402_payment"]
    proof = decode_proof(receipt.proof)
    assert (proof.scheme, proof.network) == ("exact", "ledgera:mainnet")
    assert set(proof.payload) == {"transaction", "paymentIndex"}
    assert proof.payload["paymentIndex"] == 0
    signed = decode_signed(base64.b64decode(proof.payload["transaction"]))
    assert signed.txid == receipt.blockchain_tx_id
    assert (signed.receiver, signed.asset_id, signed.amount) == (
        chain.merchant_address,
        EURQ_ASSET_ID,
        100_000,
    )
    # The validity window is the entry's 300 s in rounds of 2.8 s, from the node's round.
    assert signed.last_valid - signed.first_valid == 107
    assert signed.lease is not None


async def test_a_usdq_entry_is_paid_in_dollars(sandbox, chain, wallet):
    options = direct_options(sandbox, chain, wallet, max_amount_per_payment={"USD": "1"})
    async with with_eur_payment(httpx.AsyncClient(), options) as client:
        response = await client.get(sandbox.url("/report"))
    assert response.status_code == 200
    receipt = response.extensions["x402_payment"]
    assert (receipt.rail, receipt.currency, receipt.amount) == ("chain-a", "USD", Decimal("0.5"))
    assert chain.asset_balance(wallet.address, USDQ) == 500_000
    assert chain.asset_balance(wallet.address, EURQ) == 1_000_000


# --- direct or bridge ------------------------------------------------------------------------


async def test_without_a_key_the_bridge_pays_as_before(sandbox, chain, account):
    options = payment_options(
        sandbox,
        api_key=account.api_key,
        from_account=account.code,
        bridge_poll_interval=0.05,
        bridge_poll_max_interval=0.1,
    )
    assert options.chain_a is None
    async with with_eur_payment(httpx.AsyncClient(), options) as client:
        response = await client.get(sandbox.url("/weather"))
    assert response.status_code == 200
    assert response.extensions["x402_payment"].rail == "bridge"
    assert len(bank_payments(sandbox, account)) == 1


async def test_prefer_and_selector_can_choose_the_bridge(sandbox, chain, wallet, account):
    for choice in (
        {"prefer": ["bridge"]},
        {"selector": lambda intents: next(i for i in intents if i.rail == "bridge")},
    ):
        options = direct_options(sandbox, chain, wallet, account, **choice)
        async with with_eur_payment(httpx.AsyncClient(), options) as client:
            response = await client.get(sandbox.url("/weather"))
        assert response.extensions["x402_payment"].rail == "bridge", choice
    # The wallet paid nothing; the managed account paid twice.
    assert chain.asset_balance(wallet.address, EURQ) == 1_000_000
    assert len(bank_payments(sandbox, account)) == 2


@pytest.mark.parametrize(
    ("shape", "reason"),
    [
        ("not-opted-in", "has not opted into EURQ"),
        ("empty", "EURQ balance 0.00 in the chain-A wallet does not cover 0.10"),
        ("no-coin", "too little of the chain's coin for the network fee"),
        ("node-down", "answered 503"),
    ],
)
async def test_a_wallet_that_cannot_pay_is_skipped_before_anything_is_signed(
    sandbox, chain, account, shape, reason
):
    wallet = chain.direct.new_wallet(eurq=0 if shape == "empty" else 1_000_000)
    register_secrets(wallet.private_key)
    if shape == "not-opted-in":
        chain.direct.opt_out(wallet.address, EURQ_ASSET_ID)
        chain.ledger._balances.pop((wallet.address, EURQ_ASSET_ID))
    elif shape == "no-coin":
        chain.direct.set_coins(wallet.address, chain.direct.min_balance(wallet.address))
    elif shape == "node-down":
        chain.direct.offline = True
    refused = len(chain.direct.refused)

    # Without the managed account: nothing to pay with, and the reason says why.
    alone = direct_options(sandbox, chain, wallet)
    async with with_eur_payment(httpx.AsyncClient(), alone) as client:
        with pytest.raises(NoSatisfiableOption) as caught:
            await client.get(sandbox.url("/weather"))
    assert reason in str(caught.value)
    assert "nothing was signed" in str(caught.value)
    assert caught.value.money_moved is False
    # With it: the bridge pays instead.
    options = direct_options(sandbox, chain, wallet, account)
    async with with_eur_payment(httpx.AsyncClient(), options) as client:
        response = await client.get(sandbox.url("/weather"))
    assert response.extensions["x402_payment"].rail == "bridge"
    assert len(chain.direct.refused) == refused  # no signed transfer ever reached the chain


# --- limits, hook, replay, refusals ------------------------------------------------------------


async def test_caps_budgets_and_the_hook_hold_on_the_direct_rail(sandbox, chain, wallet):
    asked: list[Any] = []

    def hook(intent: Any) -> bool:
        asked.append(intent)
        return intent.rail == "chain-a"

    options = direct_options(
        sandbox, chain, wallet, budgets=[Budget("0.15")], on_before_payment=hook
    )
    async with with_eur_payment(httpx.AsyncClient(), options) as client:
        assert (await client.get(sandbox.url("/weather"))).status_code == 200
        # EURQ counts against the EUR budget: 0.10 of 0.15 spent, the next 0.10 is refused.
        with pytest.raises(BudgetExceeded):
            await client.get(sandbox.url("/weather"))
        # USDQ is dollars: no budget covers them.
        with pytest.raises(BudgetExceeded):
            await client.get(sandbox.url("/report"))
    assert [i.rail for i in asked] == ["chain-a"]
    assert chain.asset_balance(wallet.address, EURQ) == 900_000

    capped = direct_options(sandbox, chain, wallet, max_amount_per_payment="0.05")
    async with with_eur_payment(httpx.AsyncClient(), capped) as client:
        with pytest.raises(Exception, match="above max_amount_per_payment"):
            await client.get(sandbox.url("/weather"))

    refusing = direct_options(sandbox, chain, wallet, on_before_payment=lambda intent: False)
    async with with_eur_payment(httpx.AsyncClient(), refusing) as client:
        with pytest.raises(PaymentRejectedByHook):
            await client.get(sandbox.url("/weather"))
    assert chain.asset_balance(wallet.address, EURQ) == 900_000


async def test_a_replayed_proof_is_refused(sandbox, chain, wallet):
    async with with_eur_payment(
        httpx.AsyncClient(), direct_options(sandbox, chain, wallet)
    ) as client:
        response = await client.get(sandbox.url("/weather"))
    proof = response.extensions["x402_payment"].proof
    merchant = chain.asset_balance(chain.merchant_address, EURQ)
    async with httpx.AsyncClient() as plain:
        again = await plain.get(sandbox.url("/weather"), headers={"X-PAYMENT": proof})
    assert again.status_code == 402
    assert "already used" in again.json()["error"]
    assert chain.asset_balance(chain.merchant_address, EURQ) == merchant
    assert chain.asset_balance(wallet.address, EURQ) == 900_000


async def test_a_transaction_with_a_wrong_signature_is_refused(sandbox, chain, wallet):
    import msgpack

    async with with_eur_payment(
        httpx.AsyncClient(), direct_options(sandbox, chain, wallet)
    ) as client:
        response = await client.get(sandbox.url("/weather"))
    proof = decode_proof(response.extensions["x402_payment"].proof)
    signed = msgpack.unpackb(base64.b64decode(proof.payload["transaction"]), raw=False)
    signed["txn"]["aamt"] = 1_000_000  # the amount changed after signing
    forged = base64.b64encode(msgpack.packb(signed, use_bin_type=True)).decode()
    header = encode_proof(
        {
            "x402Version": 2,
            "scheme": "exact",
            "network": "ledgera:mainnet",
            "payload": {"transaction": forged, "paymentIndex": 0},
        }
    )
    async with httpx.AsyncClient() as plain:
        answer = await plain.get(sandbox.url("/weather"), headers={"X-PAYMENT": header})
    assert answer.status_code == 402
    assert answer.json()["error"] == "Invalid signature"
    assert chain.asset_balance(wallet.address, EURQ) == 900_000


async def test_a_transfer_the_chain_refuses_moves_nothing_and_says_so(sandbox, chain, wallet):
    chain.unwhitelist(chain.merchant_address)
    async with with_eur_payment(
        httpx.AsyncClient(), direct_options(sandbox, chain, wallet)
    ) as client:
        with pytest.raises(PaymentVerificationFailed) as caught:
            await client.get(sandbox.url("/weather"))
    assert "not KYC-whitelisted" in str(caught.value)
    # A refused signed transfer may in principle still be settled until it expires: the
    # error does not claim that nothing moved; the chain shows nothing did.
    assert caught.value.money_moved is None
    assert chain.asset_balance(wallet.address, EURQ) == 1_000_000


# --- the journal and recovery --------------------------------------------------------------------


async def test_the_transaction_id_is_journaled_with_the_proof(sandbox, chain, wallet, tmp_path):
    options = direct_options(sandbox, chain, wallet, state_path=tmp_path / "state.sqlite3")
    try:
        async with with_eur_payment(httpx.AsyncClient(), options) as client:
            response = await client.get(sandbox.url("/weather"))
        receipt = response.extensions["x402_payment"]
        journal = state_of(options).journal
        assert journal is not None
        (record,) = await journal.payments()
        assert (record.rail, record.outcome, record.delivered) == ("chain-a", "paid", True)
        assert record.blockchain_tx_id == receipt.blockchain_tx_id
        assert record.proof == receipt.proof
    finally:
        state_of(options).close()


async def test_recovery_of_a_settled_but_undelivered_proof_asks_the_chain(
    sandbox, chain, wallet, tmp_path
):
    """The merchant settled the transfer but the payer never got the resource: re-sending
    is refused as used, and the indexer shows the money moved."""
    options = direct_options(sandbox, chain, wallet, state_path=tmp_path / "state.sqlite3")
    try:
        async with with_eur_payment(httpx.AsyncClient(), options) as client:
            response = await client.get(sandbox.url("/weather"))
        journal = state_of(options).journal
        assert journal is not None
        (record,) = await journal.payments()
        # As if the process had died before it saw the answer.
        await journal.finish_payment(record.id, "unknown", delivered=False)
        async with with_eur_payment(httpx.AsyncClient(), options) as client:
            (recovery,) = await payments(client).recover_all()
        assert recovery.status == "unrecoverable", recovery.reason
        assert "already used" in recovery.reason
        assert f"{response.extensions['x402_payment'].blockchain_tx_id} is on chain" in (
            recovery.reason
        )
        after = await journal.get(record.id)
        assert after is not None and after.outcome == "paid"
    finally:
        state_of(options).close()
    assert chain.asset_balance(wallet.address, EURQ) == 900_000


# --- options ---------------------------------------------------------------------------------


def test_the_options_never_show_the_key(chain, wallet):
    options = PaymentOptions(chain_a=chain.chain_a_config(private_key=wallet.private_key))
    for shown in (repr(options), str(options), repr(options.chain_a)):
        assert wallet.private_key not in shown
        assert "**********" in shown


async def test_a_quote_names_the_wallet_as_the_payer_of_a_chain_a_entry(
    sandbox, chain, wallet, account
):

    options = direct_options(sandbox, chain, wallet, account)
    async with with_eur_payment(httpx.AsyncClient(), options) as client:
        quote = await payments(client).quote(sandbox.url("/weather"))
    [entry] = quote.entries
    assert entry.payable and entry.first
    assert entry.intent is not None and entry.intent.rail == "chain-a"
    assert chain.asset_balance(wallet.address, EURQ) == 1_000_000  # a quote pays nothing


async def test_recovery_of_a_proof_that_expired_unsettled_gives_the_budget_back(
    sandbox, chain, wallet, tmp_path
):
    """The merchant never settled the transfer and its validity window passed: the chain
    can never confirm it, so nothing moved and the reservation comes back."""
    from x402_client import PaymentOutcomeUnknown
    from x402_eur_sandbox import Fault

    budget = Budget("5.00")
    options = direct_options(
        sandbox,
        chain,
        wallet,
        state_path=tmp_path / "state.sqlite3",
        budgets=[budget],
        merchant_error_retries=0,
    )
    try:
        sandbox.faults.arm("resource", Fault(kind="status", status=503))
        async with with_eur_payment(httpx.AsyncClient(), options) as client:
            with pytest.raises(PaymentOutcomeUnknown):
                await client.get(sandbox.url("/weather"))
        journal = state_of(options).journal
        assert journal is not None
        (record,) = await journal.unfinished()
        assert record.proof is not None and record.blockchain_tx_id is not None
        assert await journal.spent(budget.key, None) == 100_000
        chain.ledger.current_round += 500  # well past the transfer's 107 rounds
        async with with_eur_payment(httpx.AsyncClient(), options) as client:
            (recovery,) = await payments(client).recover_all()
        assert recovery.status == "failed", recovery.reason
        assert "last valid round" in recovery.reason and "no money moved" in recovery.reason
        assert await journal.spent(budget.key, None) == 0
        after = await journal.get(record.id)
        assert after is not None and after.outcome == "failed"
    finally:
        state_of(options).close()
    assert chain.ledger.transaction(record.blockchain_tx_id) is None
    assert chain.asset_balance(wallet.address, EURQ) == 1_000_000


def _guide_block(marker: str) -> str:
    """The one Python block of docs/chain-a.md that holds `marker`."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "chain-a.md").read_text()
    [block] = [
        code for code in re.findall(r"^```python\n(.*?)^```", text, re.S | re.M) if marker in code
    ]
    return block


async def test_the_sandbox_snippet_of_the_chain_a_guide_pays_on_the_chain_a_rail(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """docs/chain-a.md's sandbox block, run as written (top-level `await`, as in a
    notebook): it pays the chain-A offer from the wallet, not the euro offer before it."""
    import ast

    block = _guide_block("from x402_eur_sandbox import Sandbox")
    code = compile(block, "docs/chain-a.md", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    namespace: dict[str, Any] = {}
    await eval(code, namespace)  # noqa: S307 (the repository's own document)
    assert capsys.readouterr().out == "chain-a ledgera:mainnet\n"
    assert namespace["receipt"].amount == Decimal("0.10")


async def test_with_the_managed_account_too_prefer_chain_a_pays_from_the_wallet() -> None:
    async with Sandbox(chain_a=True) as sandbox:
        assert sandbox.chain_a is not None
        wallet = sandbox.chain_a.chain_a_config()
        for prefer, rail in (([], "euro"), (["chain-a"], "chain-a")):
            options = sandbox.payment_config(chain_a=wallet, prefer=prefer)
            async with with_eur_payment(httpx.AsyncClient(), options) as client:
                response = await client.get(sandbox.url("/weather"))
            assert response.extensions["x402_payment"].rail == rail
