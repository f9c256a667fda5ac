"""`exact` payments on the sandbox's Solana chain, verified and settled by its SVM
facilitator, and paid through the standard merchant's Solana routes.

The payer (`svm_payer.pay`) is written from the x402 foundation's `scheme_exact_svm.md`
with `solders` only, never the client's code. Money moves on the Solana VM: balances
change by exactly the price, or not at all."""

# The imports of solders follow the check that it is installed.
# ruff: noqa: E402

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest

from tests.needs import require

require("solders", "pip install 'x402-eur-sandbox[svm]'")

from solders.instruction import AccountMeta, Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.system_program import TransferParams, transfer
from svm_payer import FEE, Tweaks, ata, pay

from x402_eur_sandbox import Sandbox
from x402_eur_sandbox._faults import Fault
from x402_eur_sandbox._solana import (
    BLOCK_HEIGHT_LAG,
    MEMO_PROGRAM,
    TOKEN_2022_PROGRAM,
    TOKEN_PROGRAM,
    keypair_from_secret,
)
from x402_eur_sandbox._standard import encode_header
from x402_eur_sandbox._standard_svm import SVM_INVOICE_MEMO, SolanaRoutes
from x402_eur_sandbox._svm_facilitator import SvmFacilitator

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def routes(anyio_backend: str) -> AsyncIterator[SolanaRoutes]:
    """The standard merchant's Solana side on a node of its own (no EVM chain needed)."""
    started = SolanaRoutes()
    await started.start()
    try:
        yield started
    finally:
        await started.stop()


def facilitator(routes: SolanaRoutes) -> SvmFacilitator:
    assert routes.facilitator is not None
    return routes.facilitator


def payer(routes: SolanaRoutes) -> Keypair:
    return keypair_from_secret(routes.payer_secret_key)


async def refused(routes: SolanaRoutes, payment: dict[str, Any], path: str = "/solana") -> str:
    """Verify and settle a payment that must be refused; nothing may move. The reason."""
    requirements = payment["accepted"]
    node = routes.node
    assert node is not None
    mint = requirements["asset"]
    before = (
        node.token_balance(routes.payer_address, mint),
        node.token_balance(routes.pay_to, mint),
        node.balance(facilitator(routes).fee_payer),
    )
    verdict = await facilitator(routes).verify(payment, requirements)
    settled = await facilitator(routes).settle(payment, requirements)
    assert verdict["isValid"] is False
    assert settled["success"] is False
    assert settled["errorReason"] == verdict["invalidReason"]
    assert settled["transaction"] == ""
    assert settled["network"] == requirements["network"]
    after = (
        node.token_balance(routes.payer_address, mint),
        node.token_balance(routes.pay_to, mint),
        node.balance(facilitator(routes).fee_payer),
    )
    assert after == before
    return str(verdict["invalidReason"])


# --- payments ----------------------------------------------------------------------------


@pytest.mark.parametrize("symbol", ["sEURC", "sUSDC"])
async def test_a_payment_settles_once_with_exact_balances(
    routes: SolanaRoutes, symbol: str
) -> None:
    node, fac = routes.node, facilitator(routes)
    assert node is not None
    entry = next(e for e in routes.accepts("/solana") if e["asset"] == routes.mint(symbol))
    program = TOKEN_PROGRAM if symbol == "sEURC" else TOKEN_2022_PROGRAM
    assert node.token_program_of(entry["asset"]) == program
    price = int(entry["amount"])
    assert price == 50_000
    before = (
        routes.token_balance(routes.payer_address, symbol),
        routes.token_balance(routes.pay_to, symbol),
        node.balance(fac.fee_payer),
        node.balance(routes.payer_address),
    )
    payment = await pay(entry, payer(routes), routes.rpc_url)
    assert await fac.verify(payment, entry) == {"isValid": True, "payer": routes.payer_address}
    settled = await fac.settle(payment, entry)
    assert settled == {
        "success": True,
        "transaction": settled["transaction"],
        "network": "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1",
        "payer": routes.payer_address,
    }
    after = (
        routes.token_balance(routes.payer_address, symbol),
        routes.token_balance(routes.pay_to, symbol),
        node.balance(fac.fee_payer),
        node.balance(routes.payer_address),
    )
    assert after == (before[0] - price, before[1] + price, before[2] - FEE, 0)
    landed = node.landed(settled["transaction"])
    assert landed is not None and landed.err is None and landed.fee == FEE
    assert landed.signatures[0] == settled["transaction"]  # the id is the fee payer's signature
    again = await fac.settle(payment, entry)
    assert again["success"] is False and again["errorReason"] == "duplicate_settlement"
    assert (await fac.verify(payment, entry))["invalidReason"] == "duplicate_settlement"
    assert routes.token_balance(routes.payer_address, symbol) == after[0]


async def test_the_same_payment_settled_twice_at_once_moves_money_once(
    routes: SolanaRoutes,
) -> None:
    fac = facilitator(routes)
    entry = routes.accepts("/solana/eurc")[0]
    payment = await pay(entry, payer(routes), routes.rpc_url)
    before = routes.token_balance(routes.pay_to, "sEURC")
    answers: list[dict[str, Any]] = []

    async def settle() -> None:
        answers.append(await fac.settle(payment, entry))

    async with anyio.create_task_group() as group:
        for _ in range(3):
            group.start_soon(settle)
    assert sorted(a["success"] for a in answers) == [False, False, True]
    assert {a.get("errorReason") for a in answers if not a["success"]} == {"duplicate_settlement"}
    assert routes.token_balance(routes.pay_to, "sEURC") == before + int(entry["amount"])


async def test_a_settlement_after_the_facilitator_restarts_is_found_on_chain(
    routes: SolanaRoutes,
) -> None:
    entry = routes.accepts("/solana/usdc")[0]
    payment = await pay(entry, payer(routes), routes.rpc_url)
    assert (await facilitator(routes).settle(payment, entry))["success"] is True
    fresh = SvmFacilitator(routes.rpc_url, fee_payer=routes._fee_payer)
    try:
        settled = await fresh.settle(payment, entry)
    finally:
        await fresh.aclose()
    assert settled["errorReason"] == "duplicate_settlement"


async def test_the_sellers_memo_is_required_word_for_word(routes: SolanaRoutes) -> None:
    entry = routes.accepts("/solana/invoice")[0]
    assert entry["extra"]["memo"] == SVM_INVOICE_MEMO
    wrong = await pay(entry, payer(routes), routes.rpc_url, Tweaks(memo=b"another invoice"))
    assert await refused(routes, wrong) == "invalid_exact_svm_payload_memo_mismatch"
    none = Tweaks(instructions=lambda ixs: ixs[:3])
    assert await refused(routes, await pay(entry, payer(routes), routes.rpc_url, none)) == (
        "invalid_exact_svm_payload_memo_count"
    )
    payment = await pay(entry, payer(routes), routes.rpc_url)
    settled = await facilitator(routes).settle(payment, entry)
    assert settled["success"] is True
    assert routes.node is not None
    landed = routes.node.landed(settled["transaction"])
    assert landed is not None and landed.memo == f"[{len(SVM_INVOICE_MEMO)}] {SVM_INVOICE_MEMO}"


async def test_a_v1_payment_settles_under_the_v1_network_name(routes: SolanaRoutes) -> None:
    entry = routes.accepts("/solana/eurc")[0]
    v1_requirements = {
        **{k: v for k, v in entry.items() if k != "amount"},
        "network": "solana-devnet",
        "maxAmountRequired": entry["amount"],
        "resource": "http://127.0.0.1/solana/eurc",
        "description": "",
        "mimeType": "",
    }
    payment = await pay(entry, payer(routes), routes.rpc_url)
    v1_payment = {
        "x402Version": 1,
        "scheme": "exact",
        "network": "solana-devnet",
        "payload": payment["payload"],
    }
    settled = await facilitator(routes).settle(v1_payment, v1_requirements)
    assert settled["success"] is True and settled["network"] == "solana-devnet"


# --- refusals ----------------------------------------------------------------------------


async def test_the_fee_payer_may_not_appear_in_any_instruction(routes: SolanaRoutes) -> None:
    entry = routes.accepts("/solana/eurc")[0]
    fee_payer = Pubkey.from_string(entry["extra"]["feePayer"])

    def named(ixs: list[Instruction]) -> list[Instruction]:
        memo = Instruction(
            Pubkey.from_string(MEMO_PROGRAM), b"hi", [AccountMeta(fee_payer, False, False)]
        )
        return [*ixs[:3], memo]

    payment = await pay(entry, payer(routes), routes.rpc_url, Tweaks(instructions=named))
    assert await refused(routes, payment) == (
        "invalid_exact_svm_payload_transaction_fee_payer_included_in_instruction_accounts"
    )
    as_authority = await pay(entry, payer(routes), routes.rpc_url, Tweaks(authority=fee_payer))
    assert await refused(routes, as_authority) == (
        "invalid_exact_svm_payload_transaction_fee_payer_transferring_funds"
    )


@pytest.mark.parametrize("delta", [-1, 1])
async def test_the_amount_must_be_exact(routes: SolanaRoutes, delta: int) -> None:
    entry = routes.accepts("/solana/eurc")[0]
    tweak = Tweaks(amount=int(entry["amount"]) + delta)
    payment = await pay(entry, payer(routes), routes.rpc_url, tweak)
    assert await refused(routes, payment) == "invalid_exact_svm_payload_amount_mismatch"


async def test_the_destination_must_be_the_merchants_token_account(routes: SolanaRoutes) -> None:
    entry = routes.accepts("/solana/eurc")[0]
    mint, program = Pubkey.from_string(entry["asset"]), Pubkey.from_string(TOKEN_PROGRAM)
    elsewhere = ata(Keypair().pubkey(), mint, program)
    payment = await pay(entry, payer(routes), routes.rpc_url, Tweaks(destination=elsewhere))
    assert await refused(routes, payment) == "invalid_exact_svm_payload_recipient_mismatch"


async def test_the_compute_unit_price_is_capped_at_5_lamports(routes: SolanaRoutes) -> None:
    entry = routes.accepts("/solana/eurc")[0]
    payment = await pay(entry, payer(routes), routes.rpc_url, Tweaks(price=5_000_001))
    assert await refused(routes, payment) == (
        "invalid_exact_svm_payload_transaction_instructions_compute_price_instruction_too_high"
    )
    at_cap = await pay(entry, payer(routes), routes.rpc_url, Tweaks(price=5_000_000))
    assert (await facilitator(routes).verify(at_cap, entry))["isValid"] is True


async def test_a_payment_without_the_payers_signature_is_refused(routes: SolanaRoutes) -> None:
    entry = routes.accepts("/solana/eurc")[0]
    payment = await pay(entry, payer(routes), routes.rpc_url, Tweaks(sign=False))
    assert await refused(routes, payment) == "transaction_simulation_failed"
    forged = await pay(entry, Keypair(), routes.rpc_url, Tweaks(authority=payer(routes).pubkey()))
    assert await refused(routes, forged) == "transaction_simulation_failed"


async def test_a_payment_whose_blockhash_died_is_refused(routes: SolanaRoutes) -> None:
    assert routes.node is not None
    entry = routes.accepts("/solana/eurc")[0]
    payment = await pay(entry, payer(routes), routes.rpc_url)
    routes.node.expire_blockhash()
    verdict = await facilitator(routes).verify(payment, entry)
    assert "BlockhashNotFound" in verdict["invalidMessage"]
    assert await refused(routes, payment) == "transaction_simulation_failed"


async def test_the_transfer_must_be_made_by_the_mints_own_program(routes: SolanaRoutes) -> None:
    entry = routes.accepts("/solana/usdc")[0]  # a Token-2022 mint
    payment = await pay(entry, payer(routes), routes.rpc_url, Tweaks(program=TOKEN_PROGRAM))
    assert await refused(routes, payment) == "invalid_exact_svm_payload_mint_mismatch"


async def test_another_mint_is_refused(routes: SolanaRoutes) -> None:
    eurc, usdc = routes.accepts("/solana/eurc")[0], routes.accepts("/solana/usdc")[0]
    payment = await pay(usdc, payer(routes), routes.rpc_url)
    payment["accepted"] = eurc
    assert await refused(routes, payment) == "invalid_exact_svm_payload_mint_mismatch"


async def test_only_memo_and_lighthouse_may_follow_the_transfer(routes: SolanaRoutes) -> None:
    entry = routes.accepts("/solana/eurc")[0]
    source = payer(routes).pubkey()

    def extra(ixs: list[Instruction]) -> list[Instruction]:
        gift = transfer(
            TransferParams(from_pubkey=source, to_pubkey=Keypair().pubkey(), lamports=1)
        )
        return [*ixs, gift]

    payment = await pay(entry, payer(routes), routes.rpc_url, Tweaks(instructions=extra))
    assert await refused(routes, payment) == "invalid_exact_svm_payload_unknown_fifth_instruction"
    short = await pay(entry, payer(routes), routes.rpc_url, Tweaks(instructions=lambda i: i[1:3]))
    assert await refused(routes, short) == (
        "invalid_exact_svm_payload_transaction_instructions_length"
    )
    swapped = Tweaks(instructions=lambda i: [i[1], i[0], *i[2:]])
    assert await refused(routes, await pay(entry, payer(routes), routes.rpc_url, swapped)) == (
        "invalid_exact_svm_payload_transaction_instructions_compute_limit_instruction"
    )


async def test_the_fee_payer_must_be_the_facilitators(routes: SolanaRoutes) -> None:
    entry = routes.accepts("/solana/eurc")[0]
    stranger = Keypair().pubkey()
    other = {**entry, "extra": {**entry["extra"], "feePayer": str(stranger)}}
    payment = await pay(other, payer(routes), routes.rpc_url)
    assert await refused(routes, payment) == "fee_payer_not_managed_by_facilitator"
    payment = await pay(entry, payer(routes), routes.rpc_url, Tweaks(fee_payer=stranger))
    assert await refused(routes, payment) == "invalid_exact_svm_payload_missing_fee_payer"


async def test_a_payer_without_the_balance_is_refused(routes: SolanaRoutes) -> None:
    assert routes.node is not None
    poor = Keypair()
    routes.node.mint_to(routes.mint("sEURC"), str(poor.pubkey()), 1)
    entry = routes.accepts("/solana/eurc")[0]
    payment = await pay(entry, poor, routes.rpc_url)
    assert await refused(routes, payment) == "transaction_simulation_failed"
    nothing = await pay(entry, Keypair(), routes.rpc_url)
    assert await refused(routes, nothing) == (
        "invalid_exact_svm_payload_transaction_sender_ata_not_found"
    )


async def test_a_transaction_not_seen_in_time_is_pending_then_failed_for_good(
    routes: SolanaRoutes,
) -> None:
    node = routes.node
    assert node is not None
    entry = routes.accepts("/solana/eurc")[0]
    quick = SvmFacilitator(routes.rpc_url, fee_payer=routes._fee_payer, confirm_timeout=0.5)
    payment = await pay(entry, payer(routes), routes.rpc_url)
    before = routes.token_balance(routes.payer_address, "sEURC")
    node.drop_transactions(1)
    try:
        first = await quick.settle(payment, entry)
        assert first["success"] is False and first["errorReason"] == "settlement_pending"
        assert first["transaction"] != "" and node.landed(first["transaction"]) is None
        node.expire_blockhash()
        second = await quick.settle(payment, entry)  # waits for the same transaction
        assert second["errorReason"] == "transaction_failed"
        assert second["transaction"] == first["transaction"]
        third = await quick.settle(payment, entry)
        assert third["errorReason"] == "duplicate_settlement"
    finally:
        await quick.aclose()
    assert routes.token_balance(routes.payer_address, "sEURC") == before


async def test_a_lost_send_answer_still_settles_once(routes: SolanaRoutes) -> None:
    node = routes.node
    assert node is not None
    entry = routes.accepts("/solana/usdc")[0]
    payment = await pay(entry, payer(routes), routes.rpc_url)
    before = routes.token_balance(routes.pay_to, "sUSDC")
    node.faults.arm("solana:sendTransaction", Fault(kind="drop", when="after"))
    settled = await facilitator(routes).settle(payment, entry)
    assert settled["success"] is True, settled
    assert routes.token_balance(routes.pay_to, "sUSDC") == before + int(entry["amount"])


# --- over HTTP ---------------------------------------------------------------------------


async def test_the_facilitator_answers_over_http(routes: SolanaRoutes) -> None:
    entry = routes.accepts("/solana/eurc")[0]
    payment = await pay(entry, payer(routes), routes.rpc_url)
    body = {"x402Version": 2, "paymentPayload": payment, "paymentRequirements": entry}
    async with httpx.AsyncClient(base_url=routes.facilitator_url, trust_env=False) as http:
        supported = (await http.get("/supported")).json()
        verified = (await http.post("/verify", json=body)).json()
        settled = (await http.post("/settle", json=body)).json()
        bad = await http.post("/verify", json={"x402Version": 2})
    fee_payer = facilitator(routes).fee_payer
    assert supported["kinds"] == [
        {
            "x402Version": 2,
            "scheme": "exact",
            "network": entry["network"],
            "extra": {"feePayer": fee_payer},
        },
        {
            "x402Version": 1,
            "scheme": "exact",
            "network": "solana-devnet",
            "extra": {"feePayer": fee_payer},
        },
    ]
    assert supported["signers"] == {"solana:*": [fee_payer]}
    assert verified == {"isValid": True, "payer": routes.payer_address}
    assert settled["success"] is True and settled["payer"] == routes.payer_address
    assert bad.status_code == 400


async def test_the_payer_config_is_plain_data(routes: SolanaRoutes) -> None:
    config = routes.svm_config()
    assert config["rpc_url"] == routes.rpc_url
    assert str(keypair_from_secret(config["secret_key"]).pubkey()) == routes.payer_address
    assert str(keypair_from_secret(routes.payer_keypair_json).pubkey()) == routes.payer_address
    assets = routes.asset_configs()
    assert [(a["symbol"], a["currency"], a["decimals"], a["token_program"]) for a in assets] == [
        ("sEURC", "EUR", 6, TOKEN_PROGRAM),
        ("sUSDC", "USD", 6, TOKEN_2022_PROGRAM),
    ]
    assert json.dumps(assets)  # plain data
    assert routes.payer_secret_key not in repr(routes)


# --- through the standard merchant -------------------------------------------------------


@pytest.fixture(scope="module")
async def sandbox(anyio_backend: str) -> AsyncIterator[Sandbox]:
    """`Sandbox(svm=True)`: its Solana chain and the standard merchant's Solana routes."""
    async with Sandbox(svm=True) as started:
        yield started


def _b64_json(value: str) -> Any:
    return json.loads(base64.b64decode(value, validate=True))


async def test_the_standard_merchant_sells_on_solana(sandbox: Sandbox) -> None:
    merchant = sandbox.standard
    solana = merchant.solana
    assert solana.node is sandbox.solana
    url = merchant.resource_url("/solana")
    async with httpx.AsyncClient(trust_env=False, timeout=30) as http:
        challenge = await http.get(url)
        assert challenge.status_code == 402
        required = _b64_json(challenge.headers["payment-required"])
        accepts = required["accepts"]
        assert [a["asset"] for a in accepts] == [solana.mint("sEURC"), solana.mint("sUSDC")]
        assert {a["network"] for a in accepts} == {"solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1"}
        assert {a["extra"]["feePayer"] for a in accepts} == {solana.facilitator.fee_payer}
        assert {(a["payTo"], a["amount"], a["maxTimeoutSeconds"]) for a in accepts} == {
            (solana.pay_to, "50000", 60)
        }
        hint = accepts[1]["extra"]
        hinted = sandbox.solana.blockhash_slot(hint["recentBlockhash"])  # a live blockhash
        assert hinted is not None
        assert hint["lastValidBlockHeight"] == str(hinted - BLOCK_HEIGHT_LAG + 150)
        config = merchant.svm_config()
        key = keypair_from_secret(config["secret_key"])
        header = encode_header(await pay(accepts[1], key, config["rpc_url"]))
        sandbox.solana.advance_slots(1)  # the next 402 hints at another blockhash
        before = solana.token_balance(solana.payer_address, "sUSDC")
        paid = await http.get(url, headers={"PAYMENT-SIGNATURE": header})
        assert paid.status_code == 200, paid.text
        settled = _b64_json(paid.headers["payment-response"])
        assert settled["success"] is True and settled["network"] == accepts[1]["network"]
        assert sandbox.solana.landed(settled["transaction"]) is not None
        after = solana.token_balance(solana.payer_address, "sUSDC")
        assert after == before - 50_000
        replay = await http.get(url, headers={"PAYMENT-SIGNATURE": header})
    assert replay.status_code == 402
    refusal = _b64_json(replay.headers["payment-response"])
    assert refusal["errorReason"] == "duplicate_settlement"
    assert refusal["network"] == accepts[1]["network"]
    assert solana.token_balance(solana.payer_address, "sUSDC") == after


async def test_the_merchant_refuses_a_payment_for_other_terms(sandbox: Sandbox) -> None:
    merchant = sandbox.standard
    solana = merchant.solana
    entry = solana.accepts("/solana/eurc")[0]
    cheaper = {**entry, "amount": "1"}
    key = keypair_from_secret(merchant.svm_config()["secret_key"])
    header = encode_header(await pay(cheaper, key, solana.rpc_url))
    async with httpx.AsyncClient(trust_env=False, timeout=30) as http:
        answer = await http.get(
            merchant.resource_url("/solana/eurc"), headers={"PAYMENT-SIGNATURE": header}
        )
    assert answer.status_code == 402
    assert (
        _b64_json(answer.headers["payment-required"])["error"] == "No matching payment requirements"
    )
    assert merchant.svm_asset_configs()[0]["address"] == entry["asset"]
    assert sandbox.solana.rpc_url.removeprefix("http://") in sandbox.hosts
