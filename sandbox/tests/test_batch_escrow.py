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


@pytest.mark.anyio
async def test_the_escrow_at_its_canonical_address_computes_the_same_ids(
    node: AnvilNode,
) -> None:
    from web3 import AsyncHTTPProvider, AsyncWeb3

    abi = escrow._artifact("SandboxBatchSettlement")["abi"]
    w3 = AsyncWeb3(AsyncHTTPProvider(node.rpc_url))
    try:
        contract = w3.eth.contract(address=escrow.ESCROW, abi=abi)
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
            address=escrow.ERC3009_COLLECTOR,
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
            call = w3.eth.contract(address=address, abi=escrow._artifact(name)["abi"])
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
