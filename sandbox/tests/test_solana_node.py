"""The sandbox's Solana chain (`SolanaNode`) and its JSON-RPC server, on 127.0.0.1.

Every answer is parsed by `solders.rpc.responses`, the Solana SDK's own types for the
real RPC's answers: a shape the real RPC would not give fails to parse. Transactions are
built and signed here with `solders`, sent over HTTP, and land in the Solana VM."""

# The imports of solders follow the check that it is installed.
# ruff: noqa: E402

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.needs import require

require("solders", "pip install 'x402-eur-sandbox[svm]'")

from solders.hash import Hash
from solders.instruction import AccountMeta, Instruction
from solders.keypair import Keypair
from solders.message import MessageV0
from solders.pubkey import Pubkey
from solders.rpc import responses
from solders.signature import Signature
from solders.transaction import VersionedTransaction

from x402_eur_sandbox._faults import Fault
from x402_eur_sandbox._solana import (
    BLOCK_HEIGHT_LAG,
    GENESIS_HASHES,
    MAX_PROCESSING_AGE,
    MEMO_PROGRAM,
    SOLANA_DEVNET,
    TOKEN_2022_PROGRAM,
    TOKEN_PROGRAM,
    SolanaNode,
    associated_token_address,
    keypair_from_secret,
    secret_key_forms,
)

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def node(anyio_backend: str) -> AsyncIterator[SolanaNode]:
    async with SolanaNode() as started:
        yield started


async def rpc(node: SolanaNode, method: str, *params: Any) -> str:
    """The raw JSON text of the node's answer (for solders' parsers)."""
    body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": list(params)}
    async with httpx.AsyncClient(trust_env=False, timeout=30) as http:
        response = await http.post(node.rpc_url, json=body)
    assert response.status_code == 200
    return response.text


async def result(node: SolanaNode, method: str, *params: Any) -> Any:
    answer = json.loads(await rpc(node, method, *params))
    assert "error" not in answer, answer
    return answer["result"]


async def error(node: SolanaNode, method: str, *params: Any) -> dict[str, Any]:
    answer = json.loads(await rpc(node, method, *params))
    assert "result" not in answer, answer
    assert answer["id"] == 7
    return dict(answer["error"])


def memo_transaction(node: SolanaNode, payer: Keypair, text: bytes, blockhash: str = "") -> bytes:
    """A signed v0 transaction of one Memo instruction, paid by `payer`."""
    blockhash = blockhash or node.latest_blockhash()[0]
    memo = Instruction(
        Pubkey.from_string(MEMO_PROGRAM),
        text,
        [AccountMeta(payer.pubkey(), is_signer=True, is_writable=False)],
    )
    message = MessageV0.try_compile(payer.pubkey(), [memo], [], Hash.from_string(blockhash))
    return bytes(VersionedTransaction(message, [payer]))


def funded(node: SolanaNode, lamports: int = 10**9) -> Keypair:
    keypair = Keypair()
    node.airdrop(str(keypair.pubkey()), lamports)
    return keypair


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


# --- shapes ------------------------------------------------------------------------------


async def test_chain_methods_answer_in_the_real_shapes(node: SolanaNode) -> None:
    latest = responses.GetLatestBlockhashResp.from_json(await rpc(node, "getLatestBlockhash"))
    slot = responses.GetSlotResp.from_json(await rpc(node, "getSlot")).value
    height = responses.GetBlockHeightResp.from_json(await rpc(node, "getBlockHeight")).value
    assert latest.context.slot <= slot
    assert height >= slot - BLOCK_HEIGHT_LAG  # later, and slots pass with time
    assert latest.value.last_valid_block_height == latest.context.slot - BLOCK_HEIGHT_LAG + 150
    valid = await rpc(node, "isBlockhashValid", str(latest.value.blockhash))
    assert responses.IsBlockhashValidResp.from_json(valid).value is True
    assert await result(node, "getGenesisHash") == GENESIS_HASHES[SOLANA_DEVNET]
    assert "solana:" + GENESIS_HASHES[SOLANA_DEVNET][:32] == SOLANA_DEVNET
    assert await result(node, "getHealth") == "ok"
    rent = await rpc(node, "getMinimumBalanceForRentExemption", 165)
    assert responses.GetMinimumBalanceForRentExemptionResp.from_json(rent).value == 2039280
    epoch = responses.GetEpochInfoResp.from_json(await rpc(node, "getEpochInfo")).value
    assert epoch.absolute_slot >= slot
    fees = await rpc(node, "getRecentPrioritizationFees")
    assert (
        responses.GetRecentPrioritizationFeesResp.from_json(fees).value[0].prioritization_fee == 0
    )


async def test_mints_and_token_accounts_read_as_base64_and_json_parsed(node: SolanaNode) -> None:
    owner = str(Keypair().pubkey())
    for program, name, size in (
        (TOKEN_PROGRAM, "spl-token", 165),
        (TOKEN_2022_PROGRAM, "spl-token-2022", 170),
    ):
        mint = node.create_mint(6, program)
        account = node.mint_to(mint, owner, 1_250_000)
        assert account == associated_token_address(owner, mint, program)
        raw = await rpc(node, "getAccountInfo", mint, {"encoding": "base64"})
        info = responses.GetAccountInfoResp.from_json(raw).value
        assert info is not None and str(info.owner) == program and bytes(info.data)[44] == 6
        parsed = json.loads(await rpc(node, "getAccountInfo", account, {"encoding": "jsonParsed"}))
        data = parsed["result"]["value"]["data"]
        assert data["program"] == name and data["space"] == size
        assert data["parsed"]["type"] == "account"
        assert data["parsed"]["info"]["owner"] == owner
        assert data["parsed"]["info"]["tokenAmount"] == {
            "amount": "1250000",
            "decimals": 6,
            "uiAmount": 1.25,
            "uiAmountString": "1.25",
        }
        responses.GetAccountInfoMaybeJsonParsedResp.from_json(json.dumps(parsed))
        minted = json.loads(await rpc(node, "getAccountInfo", mint, {"encoding": "jsonParsed"}))
        assert minted["result"]["value"]["data"]["parsed"]["info"]["supply"] == "1250000"
        balance = await rpc(node, "getTokenAccountBalance", account)
        assert responses.GetTokenAccountBalanceResp.from_json(balance).value.amount == "1250000"
        owned = await rpc(
            node, "getTokenAccountsByOwner", owner, {"mint": mint}, {"encoding": "base64"}
        )
        assert [
            str(a.pubkey) for a in responses.GetTokenAccountsByOwnerResp.from_json(owned).value
        ] == [account]
    assert (await rpc(node, "getAccountInfo", owner, {"encoding": "base64"})).count(
        '"value": null'
    ) == 1
    assert (await error(node, "getTokenAccountBalance", owner))["code"] == -32602


async def test_a_transaction_lands_and_is_found_by_signature_and_address(node: SolanaNode) -> None:
    payer = funded(node)
    before = node.balance(str(payer.pubkey()))
    sent = await rpc(
        node, "sendTransaction", b64(memo_transaction(node, payer, b"x402")), {"encoding": "base64"}
    )
    signature = str(responses.SendTransactionResp.from_json(sent).value)
    statuses = await rpc(node, "getSignatureStatuses", [signature, str(Signature.new_unique())])
    status = responses.GetSignatureStatusesResp.from_json(statuses).value
    assert status[0] is not None and status[0].err is None and status[1] is None
    assert json.loads(statuses)["result"]["value"][0]["confirmationStatus"] == "finalized"
    assert (await error(node, "getTransaction", signature))["code"] == -32015
    config = {"encoding": "json", "maxSupportedTransactionVersion": 0}
    found = responses.GetTransactionResp.from_json(
        await rpc(node, "getTransaction", signature, config)
    )
    assert found.value is not None and found.value.transaction.meta is not None
    meta = found.value.transaction.meta
    assert meta.fee == 5000 and meta.pre_balances[0] - meta.post_balances[0] == 5000
    assert node.balance(str(payer.pubkey())) == before - 5000
    config["encoding"] = "base64"
    raw = json.loads(await rpc(node, "getTransaction", signature, config))["result"]["transaction"]
    assert str(VersionedTransaction.from_bytes(base64.b64decode(raw[0])).signatures[0]) == signature
    history = await rpc(node, "getSignaturesForAddress", str(payer.pubkey()))
    listed = responses.GetSignaturesForAddressResp.from_json(history).value
    assert str(listed[0].signature) == signature
    assert listed[0].memo == "[4] x402"


async def test_preflight_refuses_what_cannot_land_and_without_it_nothing_lands(
    node: SolanaNode,
) -> None:
    payer = funded(node)
    raw = memo_transaction(node, payer, b"once")
    unsigned = bytearray(raw)
    unsigned[1:65] = bytes(64)
    assert (await error(node, "sendTransaction", b64(bytes(unsigned)), {"encoding": "base64"}))[
        "code"
    ] == -32003
    await result(node, "sendTransaction", b64(raw), {"encoding": "base64"})
    again = await error(node, "sendTransaction", b64(raw), {"encoding": "base64"})
    assert again["code"] == -32002 and again["data"]["err"] == "AlreadyProcessed"
    balance = node.balance(str(payer.pubkey()))
    resent = await result(
        node, "sendTransaction", b64(raw), {"encoding": "base64", "skipPreflight": True}
    )
    assert node.balance(str(payer.pubkey())) == balance  # one fee: it landed once
    assert node.landed(resent) is not None
    dead = memo_transaction(node, payer, b"late")
    node.expire_blockhash()
    expired = await error(node, "sendTransaction", b64(dead), {"encoding": "base64"})
    assert expired == {
        "code": -32002,
        "message": "Transaction simulation failed: Blockhash not found",
        "data": expired["data"],
    }
    assert expired["data"]["err"] == "BlockhashNotFound"
    dropped = await result(
        node, "sendTransaction", b64(dead), {"encoding": "base64", "skipPreflight": True}
    )
    assert node.landed(dropped) is None
    assert node.balance(str(payer.pubkey())) == balance


async def test_simulation_reports_errors_in_its_value(node: SolanaNode) -> None:
    payer = funded(node)
    raw = memo_transaction(node, payer, b"simulated")
    value = await rpc(
        node, "simulateTransaction", b64(raw), {"encoding": "base64", "sigVerify": True}
    )
    simulated = responses.SimulateTransactionResp.from_json(value).value
    assert simulated.err is None and simulated.units_consumed and simulated.logs
    assert node.landed(str(VersionedTransaction.from_bytes(raw).signatures[0])) is None
    poor = Keypair()  # no lamports: it cannot pay the fee
    broke = json.loads(
        await rpc(
            node,
            "simulateTransaction",
            b64(memo_transaction(node, poor, b"x")),
            {"encoding": "base64"},
        )
    )
    assert broke["result"]["value"]["err"] == "AccountNotFound"
    node.expire_blockhash()
    old = json.loads(await rpc(node, "simulateTransaction", b64(raw), {"encoding": "base64"}))
    assert old["result"]["value"]["err"] == "BlockhashNotFound"
    replaced = await result(
        node,
        "simulateTransaction",
        b64(raw),
        {"encoding": "base64", "replaceRecentBlockhash": True},
    )
    assert replaced["value"]["err"] is None
    assert node.blockhash_slot(replaced["value"]["replacementBlockhash"]["blockhash"]) is not None


async def test_a_blockhash_lives_150_slots() -> None:
    async with SolanaNode(slot_seconds=None) as node:  # only `advance_slots` moves it
        await _lives_150_slots(node)


async def _lives_150_slots(node: SolanaNode) -> None:
    blockhash, last_valid = node.latest_blockhash()
    node.advance_slots(MAX_PROCESSING_AGE - 1)
    assert node.block_height <= last_valid
    assert (await result(node, "isBlockhashValid", blockhash))["value"] is True
    node.advance_slots(2)
    assert node.block_height > last_valid
    assert (await result(node, "isBlockhashValid", blockhash))["value"] is False
    assert node.latest_blockhash()[0] != blockhash


async def test_slots_pass_with_time() -> None:
    async with SolanaNode(slot_seconds=0.01) as quick:
        first = await result(quick, "getSlot")
        deadline = time.monotonic() + 30
        while await result(quick, "getSlot") == first:
            assert time.monotonic() < deadline, "no slot passed in 30 s"
        blockhash, _ = quick.latest_blockhash()
        deadline = time.monotonic() + 60
        while (await result(quick, "isBlockhashValid", blockhash))["value"]:
            assert time.monotonic() < deadline, "the blockhash outlived 60 s"


async def test_fee_for_message_counts_signatures_and_the_priority_fee(node: SolanaNode) -> None:
    payer = funded(node)
    tx = VersionedTransaction.from_bytes(memo_transaction(node, payer, b"fee"))
    message = b64(bytes([0x80]) + bytes(tx.message))
    fee = await rpc(node, "getFeeForMessage", message)
    assert responses.GetFeeForMessageResp.from_json(fee).value == 5000


async def test_airdrop_and_balance(node: SolanaNode) -> None:
    address = str(Keypair().pubkey())
    signature = await rpc(node, "requestAirdrop", address, 10**9)
    assert node.landed(str(responses.RequestAirdropResp.from_json(signature).value)) is not None
    balance = await rpc(node, "getBalance", address)
    assert responses.GetBalanceResp.from_json(balance).value == 10**9


async def test_bad_requests_get_json_rpc_errors(node: SolanaNode) -> None:
    assert (await error(node, "getBalance", "not-an-address"))["code"] == -32602
    assert (await error(node, "noSuchMethod"))["code"] == -32601
    async with httpx.AsyncClient(trust_env=False) as http:
        broken = (await http.post(node.rpc_url, content=b"{")).json()
        batch = (
            await http.post(
                node.rpc_url,
                json=[
                    {"jsonrpc": "2.0", "id": 1, "method": "getSlot"},
                    {"jsonrpc": "2.0", "id": 2, "method": "getHealth"},
                ],
            )
        ).json()
    assert broken["error"]["code"] == -32700
    assert [answer["id"] for answer in batch] == [1, 2]


async def test_a_lost_answer_after_sending_does_not_stop_the_transaction(node: SolanaNode) -> None:
    payer = funded(node)
    raw = memo_transaction(node, payer, b"lost answer")
    node.faults.arm("solana:sendTransaction", Fault(kind="drop", when="after"))
    async with httpx.AsyncClient(trust_env=False) as http:
        with pytest.raises(httpx.HTTPError):
            await http.post(
                node.rpc_url,
                json={
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "sendTransaction",
                    "params": [b64(raw), {"encoding": "base64"}],
                },
            )
    assert node.landed(str(VersionedTransaction.from_bytes(raw).signatures[0])) is not None


async def test_a_dropped_transaction_is_answered_and_never_lands(node: SolanaNode) -> None:
    payer = funded(node)
    balance = node.balance(str(payer.pubkey()))
    node.drop_transactions(1)
    signature = await result(
        node, "sendTransaction", b64(memo_transaction(node, payer, b"drop")), {"encoding": "base64"}
    )
    assert (await result(node, "getSignatureStatuses", [signature]))["value"] == [None]
    assert node.balance(str(payer.pubkey())) == balance


async def test_threads_may_use_the_node_at_once(node: SolanaNode) -> None:
    mint = node.create_mint(6)
    owners = [str(Keypair().pubkey()) for _ in range(4)]
    failures: list[BaseException] = []

    def mint_many(owner: str) -> None:
        try:
            for _ in range(10):
                node.mint_to(mint, owner, 1)
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=mint_many, args=(owner,)) for owner in owners]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert failures == []
    assert [node.token_balance(owner, mint) for owner in owners] == [10] * 4


def test_secret_keys_read_in_every_form_users_hold_them() -> None:
    keypair = Keypair()
    forms = secret_key_forms(keypair)
    assert len(json.loads(forms["json"])) == 64
    for form in (forms["base58"], forms["json"], json.loads(forms["json"]), bytes(keypair)):
        assert keypair_from_secret(form).pubkey() == keypair.pubkey()


def test_the_sandbox_imports_solders_only_when_solana_runs() -> None:
    import subprocess
    import sys

    code = (
        "import sys, x402_eur_sandbox, x402_eur_sandbox._standard, x402_eur_sandbox.cli; "
        "assert 'solders' not in sys.modules; "
        "x402_eur_sandbox.SolanaNode; assert 'solders' in sys.modules"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
