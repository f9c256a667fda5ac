"""The sandbox's batch-settlement escrow and deposit collectors on a real anvil: deposits
through both collectors, claims, settlement, refunds and the timed withdrawal, with the
amounts checked on chain; and agreement with the x402 foundation's channel ids and
receiver-authorizer signatures."""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from eth_account import Account
from eth_account.messages import encode_typed_data
from web3 import Web3

from tests.needs import require
from x402_eur_sandbox import _batch_escrow as escrow
from x402_eur_sandbox._anvil import ANVIL_DEV_KEYS, AnvilNode, mint, token_balance
from x402_eur_sandbox._batch_escrow import ChannelConfig, EscrowReverted, VoucherClaim
from x402_eur_sandbox._eip712 import DigestSigner
from x402_eur_sandbox._permit2 import PERMIT2_ADDRESS, approve_permit2
from x402_eur_sandbox._standard import TOKEN_NAME, deploy_eip3009_token

# Not 31337: the precompiled Permit2 cached its domain for chain 31337 at another address.
CHAIN_ID = 84532
DEPLOYER, RELAYER, PAYER, RECEIVER, AUTHORIZER = ANVIL_DEV_KEYS
PAYER_ADDRESS = Account.from_key(PAYER).address
RELAYER_ADDRESS = Account.from_key(RELAYER).address
RECEIVER_ADDRESS = Account.from_key(RECEIVER).address
AUTHORIZER_ADDRESS = Account.from_key(AUTHORIZER).address
FUNDS = 10_000_000

# The notes' test vector: a channel of 0x11…11 paying 0x22…22 in Base Sepolia's USDC.
VECTOR = ChannelConfig(
    payer="0x" + "11" * 20,
    payer_authorizer="0x" + "11" * 20,
    receiver="0x" + "22" * 20,
    receiver_authorizer="0x" + "33" * 20,
    token="0x036CbD53842c5426634e7929541eC2318f3dCF7e",
    withdraw_delay=900,
)
VECTOR_ID = "c79f4ebce8ab654688879c8bfd3965227d8fc491dd10697b71a457416d65d904"  # on 84532


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    # Module scope so the module-scoped async fixtures below share one event loop.
    return "asyncio"


@pytest.fixture(scope="module")
async def node(anyio_backend: str) -> AsyncIterator[AnvilNode]:
    async with AnvilNode(chain_id=CHAIN_ID) as started:
        await escrow.install_batch_settlement(started.rpc_url, DEPLOYER)
        yield started


@pytest.fixture(scope="module")
async def token(node: AnvilNode) -> str:
    address = await deploy_eip3009_token(node.rpc_url, DEPLOYER)
    await mint(node.rpc_url, address, DEPLOYER, PAYER_ADDRESS, FUNDS)
    return address


def channel(token: str) -> ChannelConfig:
    """A channel of its own for each test (a fresh salt), on the one shared chain."""
    return ChannelConfig(
        payer=PAYER_ADDRESS,
        payer_authorizer=PAYER_ADDRESS,
        receiver=RECEIVER_ADDRESS,
        receiver_authorizer=AUTHORIZER_ADDRESS,
        token=token,
        withdraw_delay=900,
        salt=secrets.token_bytes(32),
    )


def _sign_typed(key: str, typed: dict[str, Any]) -> bytes:
    signed = Account.from_key(key).sign_message(encode_typed_data(full_message=typed))
    return bytes(signed.signature)


def _receive_authorization(token: str, amount: int, nonce: bytes) -> tuple[int, bytes]:
    """The payer's ERC-3009 `ReceiveWithAuthorization` to the ERC-3009 collector:
    (validBefore, signature)."""
    valid_before = int(time.time()) + 3600
    fields = ["from", "to", "value", "validAfter", "validBefore", "nonce"]
    types = ["address", "address", "uint256", "uint256", "uint256", "bytes32"]
    typed = {
        "types": {
            "EIP712Domain": [
                {"name": "name", "type": "string"},
                {"name": "version", "type": "string"},
                {"name": "chainId", "type": "uint256"},
                {"name": "verifyingContract", "type": "address"},
            ],
            "ReceiveWithAuthorization": [
                {"name": n, "type": t} for n, t in zip(fields, types, strict=True)
            ],
        },
        "primaryType": "ReceiveWithAuthorization",
        "domain": {
            "name": TOKEN_NAME,
            "version": "2",
            "chainId": CHAIN_ID,
            "verifyingContract": token,
        },
        "message": {
            "from": PAYER_ADDRESS,
            "to": escrow.ERC3009_COLLECTOR,
            "value": amount,
            "validAfter": 0,
            "validBefore": valid_before,
            "nonce": nonce,
        },
    }
    return valid_before, _sign_typed(PAYER, typed)


async def deposit_erc3009(
    rpc_url: str, config: ChannelConfig, amount: int, salt: int | None = None
) -> dict[str, Any]:
    salt = secrets.randbits(256) if salt is None else salt
    cid = escrow.channel_id(config, CHAIN_ID)
    valid_before, signature = _receive_authorization(
        config.token, amount, escrow.erc3009_deposit_nonce(cid, salt)
    )
    data = escrow.erc3009_collector_data(0, valid_before, salt, signature)
    return await escrow.deposit(rpc_url, RELAYER, config, amount, escrow.ERC3009_COLLECTOR, data)


def voucher(config: ChannelConfig, ceiling: int, total_claimed: int) -> VoucherClaim:
    """A claim row of a voucher the payer signed for `ceiling`."""
    digest = escrow.voucher_digest(CHAIN_ID, escrow.channel_id(config, CHAIN_ID), ceiling)
    signature = DigestSigner(bytes.fromhex(PAYER[2:])).sign(digest)
    return VoucherClaim(config, ceiling, signature, total_claimed)


def authorize_claims(claims: list[VoucherClaim]) -> bytes:
    digest = escrow.claim_batch_digest(CHAIN_ID, claims)
    return DigestSigner(bytes.fromhex(AUTHORIZER[2:])).sign(digest)


def authorize_refund(cid: bytes, nonce: int, amount: int) -> bytes:
    digest = escrow.refund_digest(CHAIN_ID, cid, nonce, amount)
    return DigestSigner(bytes.fromhex(AUTHORIZER[2:])).sign(digest)


# --- identity ---------------------------------------------------------------------------


def test_channel_ids_and_digests_match_the_published_vectors() -> None:
    assert escrow.domain_separator(84532).hex() == (
        "fdef80764086b1e0fc6ba99f0cb9aa1d59109fda7c23d60334c89d2de44dffce"
    )
    cid = escrow.channel_id(VECTOR, 84532)
    assert cid.hex() == VECTOR_ID
    assert escrow.channel_id(VECTOR, 31337).hex() == (
        "2b63ad3fbe37f1084cfcbadfc454d0d18727a2dd06670a3b6baa0d9b1eb0f4bc"
    )
    assert escrow.voucher_digest(84532, cid, 5000).hex() == (
        "383f7c5d92cf9b0f84e9a1a3bb90f7f54d0a722ab74fafba330ff1ddb85617f6"
    )
    assert escrow.erc3009_deposit_nonce(cid, 1).hex() == (
        "e9c1051244f4a5fcecc0e51afb3c1ab5426c5cfbeae7ee91ae6046e646f393a3"
    )


def test_calldata_carries_the_schemes_function_selectors() -> None:
    row = VoucherClaim(VECTOR, 10, b"\x01" * 65, 5)
    calls = {
        "140f1e75": escrow.encode_deposit(VECTOR, 1, escrow.ERC3009_COLLECTOR, b""),
        "29237b0c": escrow.encode_claim([row]),
        "e43ce1f2": escrow.encode_claim_with_signature([row], b"\x02" * 65),
        "9db32a8f": escrow.encode_settle(VECTOR.receiver, VECTOR.token),
        "dce4bfae": escrow.encode_refund(VECTOR, 1),
        "b77433e9": escrow.encode_refund_with_signature(VECTOR, 1, 0, b"\x03" * 65),
        "cf5cf3dc": escrow.encode_initiate_withdraw(VECTOR, 1),
        "e88377b1": escrow.encode_finalize_withdraw(VECTOR),
        "ac9650d8": escrow.encode_multicall([b"\x04"]),
    }
    assert {selector: data[:4].hex() for selector, data in calls.items()} == {
        selector: selector for selector in calls
    }
    assert escrow.error_name(bytes.fromhex("f1789775")) == "ClaimExceedsCeiling"
    assert escrow.error_name(bytes.fromhex("9794beb9")) == "OnlyX402BatchSettlement"
    assert escrow.error_name(bytes.fromhex("12345678")) is None


@pytest.mark.anyio
async def test_the_escrow_at_its_canonical_address_computes_the_same_ids(
    node: AnvilNode,
) -> None:
    from web3 import AsyncHTTPProvider, AsyncWeb3

    abi = escrow._artifact("SandboxBatchSettlement")["abi"]
    w3 = AsyncWeb3(AsyncHTTPProvider(node.rpc_url))
    try:
        contract = w3.eth.contract(address=Web3.to_checksum_address(escrow.ESCROW), abi=abi)
        onchain = await contract.functions.getChannelId(VECTOR.as_abi()).call()
        assert bytes(onchain).hex() == VECTOR_ID
        cid = escrow.channel_id(VECTOR, CHAIN_ID)
        digest = await contract.functions.getVoucherDigest(cid, 5000).call()
        assert bytes(digest) == escrow.voucher_digest(CHAIN_ID, cid, 5000)
        digest = await contract.functions.getRefundDigest(cid, 3, 700).call()
        assert bytes(digest) == escrow.refund_digest(CHAIN_ID, cid, 3, 700)
        rows = [VoucherClaim(VECTOR, 900, b"", 800), VoucherClaim(VECTOR, 1000, b"", 1000)]
        digest = await contract.functions.getClaimBatchDigest([r.as_abi() for r in rows]).call()
        assert bytes(digest) == escrow.claim_batch_digest(CHAIN_ID, rows)
        collector = w3.eth.contract(
            address=Web3.to_checksum_address(escrow.ERC3009_COLLECTOR),
            abi=escrow._artifact("SandboxErc3009DepositCollector")["abi"],
        )
        assert await collector.functions.x402BatchSettlement().call() == escrow.ESCROW
    finally:
        await w3.provider.disconnect()


@pytest.mark.anyio
async def test_install_is_idempotent_and_keeps_channels(node: AnvilNode, token: str) -> None:
    config = channel(token)
    await deposit_erc3009(node.rpc_url, config, 1_000)
    await escrow.install_batch_settlement(node.rpc_url, DEPLOYER)
    cid = escrow.channel_id(config, CHAIN_ID)
    assert await escrow.channel_state(node.rpc_url, cid) == (1_000, 0)


# --- deposits -----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_erc3009_deposit_and_top_up_fund_the_channel(node: AnvilNode, token: str) -> None:
    config = channel(token)
    cid = escrow.channel_id(config, CHAIN_ID)
    payer_before = await token_balance(node.rpc_url, token, PAYER_ADDRESS)
    escrow_before = await token_balance(node.rpc_url, token, escrow.ESCROW)

    await deposit_erc3009(node.rpc_url, config, 1_000, salt=7)
    assert await escrow.channel_state(node.rpc_url, cid) == (1_000, 0)
    await deposit_erc3009(node.rpc_url, config, 250)
    assert await escrow.channel_state(node.rpc_url, cid) == (1_250, 0)

    assert await token_balance(node.rpc_url, token, PAYER_ADDRESS) == payer_before - 1_250
    assert await token_balance(node.rpc_url, token, escrow.ESCROW) == escrow_before + 1_250
    assert await token_balance(node.rpc_url, token, escrow.ERC3009_COLLECTOR) == 0

    # The same authorization again: the token refuses its used nonce, nothing moves.
    with pytest.raises(EscrowReverted) as caught:
        await deposit_erc3009(node.rpc_url, config, 1_000, salt=7)
    assert caught.value.error is not None
    assert "authorization is used" in caught.value.error
    assert await escrow.channel_state(node.rpc_url, cid) == (1_250, 0)


@pytest.mark.anyio
async def test_only_the_escrow_may_call_a_collector(node: AnvilNode, token: str) -> None:
    from web3 import AsyncHTTPProvider, AsyncWeb3

    w3 = AsyncWeb3(AsyncHTTPProvider(node.rpc_url))
    try:
        for address, name in (
            (escrow.ERC3009_COLLECTOR, "SandboxErc3009DepositCollector"),
            (escrow.PERMIT2_COLLECTOR, "SandboxPermit2DepositCollector"),
        ):
            call = w3.eth.contract(
                address=Web3.to_checksum_address(address), abi=escrow._artifact(name)["abi"]
            )
            data = call.encode_abi("collect", [PAYER_ADDRESS, token, 1, bytes(32), b""])
            answer = await w3.provider.make_request(
                "eth_call", [{"to": address, "data": data, "from": PAYER_ADDRESS}, "latest"]
            )
            assert escrow.error_name(escrow._revert_data(answer["error"])) == (
                "OnlyX402BatchSettlement"
            )
    finally:
        await w3.provider.disconnect()


def _permit2_signature(token: str, amount: int, nonce: int, deadline: int, cid: bytes) -> bytes:
    typed = {
        "types": {
            "EIP712Domain": [
                {"name": "name", "type": "string"},
                {"name": "chainId", "type": "uint256"},
                {"name": "verifyingContract", "type": "address"},
            ],
            "PermitWitnessTransferFrom": [
                {"name": "permitted", "type": "TokenPermissions"},
                {"name": "spender", "type": "address"},
                {"name": "nonce", "type": "uint256"},
                {"name": "deadline", "type": "uint256"},
                {"name": "witness", "type": "DepositWitness"},
            ],
            "TokenPermissions": [
                {"name": "token", "type": "address"},
                {"name": "amount", "type": "uint256"},
            ],
            "DepositWitness": [{"name": "channelId", "type": "bytes32"}],
        },
        "primaryType": "PermitWitnessTransferFrom",
        "domain": {"name": "Permit2", "chainId": CHAIN_ID, "verifyingContract": PERMIT2_ADDRESS},
        "message": {
            "permitted": {"token": token, "amount": amount},
            "spender": escrow.PERMIT2_COLLECTOR,
            "nonce": nonce,
            "deadline": deadline,
            "witness": {"channelId": cid},
        },
    }
    return _sign_typed(PAYER, typed)


@pytest.mark.anyio
async def test_permit2_deposit_funds_the_channel(node: AnvilNode, token: str) -> None:
    await approve_permit2(node.rpc_url, token, PAYER)
    config = channel(token)
    cid = escrow.channel_id(config, CHAIN_ID)
    payer_before = await token_balance(node.rpc_url, token, PAYER_ADDRESS)
    nonce, deadline = secrets.randbits(128), int(time.time()) + 3600
    signature = _permit2_signature(token, 600, nonce, deadline, cid)
    data = escrow.permit2_collector_data(nonce, deadline, signature)

    await escrow.deposit(node.rpc_url, RELAYER, config, 600, escrow.PERMIT2_COLLECTOR, data)

    assert await escrow.channel_state(node.rpc_url, cid) == (600, 0)
    assert await token_balance(node.rpc_url, token, PAYER_ADDRESS) == payer_before - 600
    # The witness binds the permit to its channel: another channel cannot use it.
    other = channel(token)
    with pytest.raises(EscrowReverted):
        await escrow.deposit(node.rpc_url, RELAYER, other, 600, escrow.PERMIT2_COLLECTOR, data)


# --- claims and settlement --------------------------------------------------------------


@pytest.mark.anyio
async def test_claim_then_settle_pays_the_receiver_exactly_the_claimed_sum(
    node: AnvilNode, token: str
) -> None:
    first, second = channel(token), channel(token)
    await deposit_erc3009(node.rpc_url, first, 1_000)
    await deposit_erc3009(node.rpc_url, second, 500)
    claimed_before, settled_before = await escrow.receiver_state(
        node.rpc_url, RECEIVER_ADDRESS, token
    )
    receiver_before = await token_balance(node.rpc_url, token, RECEIVER_ADDRESS)
    # The merchant charged 250 of a 300 ceiling on one channel, 120 of 120 on the other.
    claims = [voucher(first, 300, 250), voucher(second, 120, 120)]

    await escrow.claim_with_signature(node.rpc_url, RELAYER, claims, authorize_claims(claims))

    assert await escrow.channel_state(node.rpc_url, escrow.channel_id(first, CHAIN_ID)) == (
        1_000,
        250,
    )
    assert await escrow.channel_state(node.rpc_url, escrow.channel_id(second, CHAIN_ID)) == (
        500,
        120,
    )
    assert await escrow.receiver_state(node.rpc_url, RECEIVER_ADDRESS, token) == (
        claimed_before + 370,
        settled_before,
    )
    assert await token_balance(node.rpc_url, token, RECEIVER_ADDRESS) == receiver_before

    await escrow.settle(node.rpc_url, RELAYER, RECEIVER_ADDRESS, token)

    assert await token_balance(node.rpc_url, token, RECEIVER_ADDRESS) == (
        receiver_before + claimed_before + 370 - settled_before
    )
    claimed, settled = await escrow.receiver_state(node.rpc_url, RECEIVER_ADDRESS, token)
    assert claimed == settled == claimed_before + 370
    # Nothing left to settle: a second settle moves nothing and logs nothing.
    receipt = await escrow.settle(node.rpc_url, RELAYER, RECEIVER_ADDRESS, token)
    assert receipt["logs"] == []
    assert await token_balance(node.rpc_url, token, RECEIVER_ADDRESS) == (receiver_before + claimed)


@pytest.mark.anyio
async def test_a_replayed_claim_changes_nothing(node: AnvilNode, token: str) -> None:
    config = channel(token)
    cid = escrow.channel_id(config, CHAIN_ID)
    await deposit_erc3009(node.rpc_url, config, 1_000)
    claims = [voucher(config, 400, 400)]
    signature = authorize_claims(claims)
    await escrow.claim_with_signature(node.rpc_url, RELAYER, claims, signature)
    state = await escrow.receiver_state(node.rpc_url, RECEIVER_ADDRESS, token)

    receipt = await escrow.claim_with_signature(node.rpc_url, RELAYER, claims, signature)

    assert receipt["logs"] == []  # no Claimed event
    assert await escrow.channel_state(node.rpc_url, cid) == (1_000, 400)
    assert await escrow.receiver_state(node.rpc_url, RECEIVER_ADDRESS, token) == state


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("ceiling", "total", "deposit", "error"),
    [
        (300, 301, 1_000, "ClaimExceedsCeiling"),
        (2_000, 1_500, 1_000, "ClaimExceedsBalance"),
    ],
)
async def test_a_claim_beyond_the_voucher_or_the_deposit_is_refused(
    node: AnvilNode, token: str, ceiling: int, total: int, deposit: int, error: str
) -> None:
    config = channel(token)
    await deposit_erc3009(node.rpc_url, config, deposit)
    claims = [voucher(config, ceiling, total)]

    with pytest.raises(EscrowReverted) as caught:
        await escrow.claim_with_signature(node.rpc_url, RELAYER, claims, authorize_claims(claims))

    assert caught.value.error == error
    assert caught.value.function == "claimWithSignature"
    assert await escrow.channel_state(node.rpc_url, escrow.channel_id(config, CHAIN_ID)) == (
        deposit,
        0,
    )


@pytest.mark.anyio
async def test_claims_need_the_receiver_authorizers_and_the_payers_signatures(
    node: AnvilNode, token: str
) -> None:
    config = channel(token)
    await deposit_erc3009(node.rpc_url, config, 1_000)
    claims = [voucher(config, 300, 300)]
    # Signed by the payer instead of the receiver authorizer.
    not_the_authorizer = DigestSigner(bytes.fromhex(PAYER[2:])).sign(
        escrow.claim_batch_digest(CHAIN_ID, claims)
    )
    with pytest.raises(EscrowReverted) as caught:
        await escrow.claim_with_signature(node.rpc_url, RELAYER, claims, not_the_authorizer)
    assert caught.value.error == "InvalidSignature"
    # A voucher the payer never signed (its signature is for another amount).
    forged = [VoucherClaim(config, 900, voucher(config, 300, 300).signature, 900)]
    with pytest.raises(EscrowReverted) as caught:
        await escrow.claim_with_signature(node.rpc_url, RELAYER, forged, authorize_claims(forged))
    assert caught.value.error == "InvalidSignature"
    with pytest.raises(EscrowReverted) as caught:
        await escrow.claim_with_signature(node.rpc_url, RELAYER, [], authorize_claims([]))
    assert caught.value.error == "EmptyBatch"


# --- refunds and the timed withdrawal -------------------------------------------------------


@pytest.mark.anyio
async def test_a_signed_refund_returns_exactly_the_unclaimed_balance(
    node: AnvilNode, token: str
) -> None:
    config = channel(token)
    cid = escrow.channel_id(config, CHAIN_ID)
    await deposit_erc3009(node.rpc_url, config, 1_000)
    claims = [voucher(config, 300, 250)]
    await escrow.claim_with_signature(node.rpc_url, RELAYER, claims, authorize_claims(claims))
    payer_before = await token_balance(node.rpc_url, token, PAYER_ADDRESS)
    assert await escrow.refund_nonce(node.rpc_url, cid) == 0

    # Asked for more than is left: the escrow refunds what is left, no more.
    signature = authorize_refund(cid, 0, 1_000_000)
    await escrow.refund_with_signature(node.rpc_url, RELAYER, config, 1_000_000, 0, signature)

    assert await token_balance(node.rpc_url, token, PAYER_ADDRESS) == payer_before + 750
    assert await escrow.channel_state(node.rpc_url, cid) == (250, 250)
    assert await escrow.refund_nonce(node.rpc_url, cid) == 1
    # The signature was good for one refund.
    with pytest.raises(EscrowReverted) as caught:
        await escrow.refund_with_signature(node.rpc_url, RELAYER, config, 1_000_000, 0, signature)
    assert caught.value.error == "InvalidRefundNonce"
    assert await token_balance(node.rpc_url, token, PAYER_ADDRESS) == payer_before + 750


@pytest.mark.anyio
async def test_claim_and_refund_in_one_multicall(node: AnvilNode, token: str) -> None:
    config = channel(token)
    cid = escrow.channel_id(config, CHAIN_ID)
    await deposit_erc3009(node.rpc_url, config, 1_000)
    payer_before = await token_balance(node.rpc_url, token, PAYER_ADDRESS)
    claims = [voucher(config, 400, 330)]
    calls = [
        escrow.encode_claim_with_signature(claims, authorize_claims(claims)),
        escrow.encode_refund_with_signature(config, 670, 0, authorize_refund(cid, 0, 670)),
    ]

    await escrow.multicall(node.rpc_url, RELAYER, calls)

    assert await escrow.channel_state(node.rpc_url, cid) == (330, 330)
    assert await token_balance(node.rpc_url, token, PAYER_ADDRESS) == payer_before + 670
    assert await escrow.refund_nonce(node.rpc_url, cid) == 1


async def _advance(rpc_url: str, seconds: int) -> None:
    from web3 import AsyncHTTPProvider, AsyncWeb3

    w3 = AsyncWeb3(AsyncHTTPProvider(rpc_url))
    try:
        for method, params in (("evm_increaseTime", [seconds]), ("evm_mine", [])):
            answer = await w3.provider.make_request(method, params)
            assert "error" not in answer, answer
    finally:
        await w3.provider.disconnect()


@pytest.mark.anyio
async def test_timed_withdrawal_pays_the_payer_after_the_delay_only(
    node: AnvilNode, token: str
) -> None:
    config = channel(token)
    cid = escrow.channel_id(config, CHAIN_ID)
    await deposit_erc3009(node.rpc_url, config, 1_000)
    payer_before = await token_balance(node.rpc_url, token, PAYER_ADDRESS)

    with pytest.raises(EscrowReverted) as caught:
        await escrow.initiate_withdraw(node.rpc_url, PAYER, config, 1_001)
    assert caught.value.error == "WithdrawAmountExceedsAvailable"
    with pytest.raises(EscrowReverted) as caught:
        await escrow.initiate_withdraw(node.rpc_url, RECEIVER, config, 600)
    assert caught.value.error == "InvalidChannel"  # only the payer's side may withdraw
    receipt = await escrow.initiate_withdraw(node.rpc_url, PAYER, config, 600)
    amount, initiated_at = await escrow.pending_withdrawal(node.rpc_url, cid)
    assert amount == 600
    assert initiated_at > 0
    assert len(receipt["logs"]) == 1  # WithdrawInitiated
    with pytest.raises(EscrowReverted) as caught:
        await escrow.finalize_withdraw(node.rpc_url, PAYER, config)
    assert caught.value.error == "WithdrawDelayNotElapsed"
    await _advance(node.rpc_url, 600)
    with pytest.raises(EscrowReverted) as caught:
        await escrow.finalize_withdraw(node.rpc_url, PAYER, config)
    assert caught.value.error == "WithdrawDelayNotElapsed"
    # Only the payer's side may finalize.
    with pytest.raises(EscrowReverted) as caught:
        await escrow.finalize_withdraw(node.rpc_url, RECEIVER, config)
    assert caught.value.error == "NotAuthorizedToFinalizeWithdraw"
    assert await token_balance(node.rpc_url, token, PAYER_ADDRESS) == payer_before

    await _advance(node.rpc_url, 300)
    await escrow.finalize_withdraw(node.rpc_url, PAYER, config)

    assert await token_balance(node.rpc_url, token, PAYER_ADDRESS) == payer_before + 600
    assert await escrow.channel_state(node.rpc_url, cid) == (400, 0)
    assert await escrow.pending_withdrawal(node.rpc_url, cid) == (0, 0)
    with pytest.raises(EscrowReverted) as caught:
        await escrow.finalize_withdraw(node.rpc_url, PAYER, config)
    assert caught.value.error == "WithdrawalNotPending"


@pytest.mark.anyio
async def test_claims_during_the_delay_shrink_the_withdrawal(node: AnvilNode, token: str) -> None:
    config = channel(token)
    cid = escrow.channel_id(config, CHAIN_ID)
    await deposit_erc3009(node.rpc_url, config, 1_000)
    await escrow.initiate_withdraw(node.rpc_url, PAYER, config, 1_000)
    claims = [voucher(config, 300, 300)]
    await escrow.claim_with_signature(node.rpc_url, RELAYER, claims, authorize_claims(claims))
    payer_before = await token_balance(node.rpc_url, token, PAYER_ADDRESS)

    await _advance(node.rpc_url, 900)
    await escrow.finalize_withdraw(node.rpc_url, PAYER, config)

    assert await token_balance(node.rpc_url, token, PAYER_ADDRESS) == payer_before + 700
    assert await escrow.channel_state(node.rpc_url, cid) == (300, 300)


# --- the foundation's Multicall3 reads and its code ----------------------------------------


@pytest.mark.anyio
async def test_multicall3_reads_channel_state(node: AnvilNode, token: str) -> None:
    from web3 import AsyncHTTPProvider, AsyncWeb3

    config = channel(token)
    cid = escrow.channel_id(config, CHAIN_ID)
    await deposit_erc3009(node.rpc_url, config, 800)
    w3 = AsyncWeb3(AsyncHTTPProvider(node.rpc_url))
    try:
        multicall3 = w3.eth.contract(
            address=Web3.to_checksum_address(escrow.MULTICALL3),
            abi=escrow._artifact("SandboxMulticall3")["abi"],
        )
        reads = [
            (escrow.ESCROW, bytes.fromhex("7a7ebd7b") + cid),  # channels(bytes32)
            (escrow.ESCROW, bytes.fromhex("f0dc792e") + cid),  # refundNonce(bytes32)
            (escrow.ESCROW, bytes.fromhex("deadbeef")),  # no such function
        ]
        results = await multicall3.functions.tryAggregate(False, reads).call()
        rows = await multicall3.functions.aggregate3(
            [(target, True, data) for target, data in reads]
        ).call()
        balance = await multicall3.functions.getEthBalance(RELAYER_ADDRESS).call()
        assert balance == await w3.eth.get_balance(RELAYER_ADDRESS)
    finally:
        await w3.provider.disconnect()
    assert results == rows
    (ok_state, state), (ok_nonce, nonce), (ok_missing, _) = results
    assert ok_state and ok_nonce and not ok_missing
    assert int.from_bytes(state[:32], "big") == 800
    assert int.from_bytes(state[32:], "big") == 0
    assert int.from_bytes(nonce, "big") == 0
    assert balance > 0


@pytest.mark.anyio
async def test_the_foundations_ids_and_authorizer_signatures_work_on_our_escrow(
    node: AnvilNode, token: str
) -> None:
    foundation = require(
        "x402.mechanisms.evm.batch_settlement",
        "pip install 'x402[evm]>=2.25' (or `make install`)",
    )
    from x402.mechanisms.evm.batch_settlement.authorizer_signer import (
        LocalAuthorizerSigner,
        sign_claim_batch,
        sign_refund,
    )
    from x402.mechanisms.evm.batch_settlement.utils import compute_channel_id

    config = channel(token)
    theirs = foundation.ChannelConfig(
        payer=config.payer,
        payer_authorizer=config.payer_authorizer,
        receiver=config.receiver,
        receiver_authorizer=config.receiver_authorizer,
        token=config.token,
        withdraw_delay=config.withdraw_delay,
        salt="0x" + config.salt.hex(),
    )
    cid = escrow.channel_id(config, CHAIN_ID)
    assert compute_channel_id(theirs, CHAIN_ID) == "0x" + cid.hex()
    network = f"eip155:{CHAIN_ID}"
    signer = LocalAuthorizerSigner(AUTHORIZER)
    await deposit_erc3009(node.rpc_url, config, 1_000)
    payer_before = await token_balance(node.rpc_url, token, PAYER_ADDRESS)
    row = voucher(config, 300, 200)
    their_row = foundation.VoucherClaim(
        channel=theirs,
        max_claimable_amount="300",
        signature="0x" + row.signature.hex(),
        total_claimed="200",
    )

    claim_signature = sign_claim_batch(signer, [their_row], network)
    await escrow.claim_with_signature(
        node.rpc_url, RELAYER, [row], bytes.fromhex(claim_signature.removeprefix("0x"))
    )
    refund_signature = sign_refund(signer, "0x" + cid.hex(), 800, 0, network)
    await escrow.refund_with_signature(
        node.rpc_url, RELAYER, config, 800, 0, bytes.fromhex(refund_signature.removeprefix("0x"))
    )

    assert await escrow.channel_state(node.rpc_url, cid) == (200, 200)
    assert await token_balance(node.rpc_url, token, PAYER_ADDRESS) == payer_before + 800
