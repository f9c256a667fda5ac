"""Real anvil tests: node lifecycle, SandboxToken deployment, mint and EIP-2612 permit."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from eth_account import Account
from web3 import Web3

from x402_eur_sandbox import _anvil
from x402_eur_sandbox._anvil import (
    ANVIL_DEV_KEYS,
    AnvilNode,
    deploy_token,
    find_anvil,
    load_token_artifact,
    mint,
    native_balance,
    permit_nonce,
    token_balance,
    token_call,
    token_transact,
)

CHAIN_ID = 137
EURQ_NAME = "Sandbox Euro Q"
DEPLOYER = ANVIL_DEV_KEYS[0]
RELAYER = ANVIL_DEV_KEYS[1]


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    # Module scope so the module-scoped async fixtures below share one event loop.
    return "asyncio"


@pytest.fixture(scope="module")
async def node(anyio_backend: str) -> AsyncIterator[AnvilNode]:
    async with AnvilNode(chain_id=CHAIN_ID) as started:
        yield started


@pytest.fixture(scope="module")
async def eurq(node: AnvilNode) -> str:
    return await deploy_token(node.rpc_url, DEPLOYER, EURQ_NAME, "EURQ")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_artifact_shape() -> None:
    artifact = load_token_artifact()
    assert artifact["contractName"] == "SandboxToken"
    assert artifact["bytecode"].startswith("0x6")
    names = {item.get("name") for item in artifact["abi"]}
    assert {"permit", "nonces", "mint", "DOMAIN_SEPARATOR", "transferFrom"} <= names


def test_find_anvil_env_override(monkeypatch: pytest.MonkeyPatch) -> None:
    real = find_anvil()
    assert os.access(real, os.X_OK)
    assert not real.endswith(".mjs")
    monkeypatch.setenv("X402_ANVIL_BIN", real)
    assert find_anvil() == real
    monkeypatch.setenv("X402_ANVIL_BIN", "/nonexistent/anvil")
    with pytest.raises(RuntimeError, match="X402_ANVIL_BIN"):
        find_anvil()


def test_find_anvil_not_found(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("X402_ANVIL_BIN", raising=False)
    monkeypatch.setattr(_anvil, "_search_node_modules", lambda start: None)
    monkeypatch.setattr("shutil.which", lambda name: None)
    with pytest.raises(RuntimeError, match="npm ci"):
        find_anvil()


@pytest.mark.anyio
async def test_chain_id(node: AnvilNode) -> None:
    from web3 import AsyncHTTPProvider, AsyncWeb3

    assert node.chain_id == CHAIN_ID
    assert node.rpc_url.startswith("http://127.0.0.1:")
    provider = AsyncHTTPProvider(node.rpc_url)
    try:
        w3 = AsyncWeb3(provider)
        assert await w3.eth.chain_id == CHAIN_ID
        accounts = await w3.eth.accounts
    finally:
        await provider.disconnect()
    # The published dev keys are the node's first funded accounts.
    expected = [Account.from_key(key).address for key in ANVIL_DEV_KEYS]
    assert list(accounts[: len(expected)]) == expected
    assert await native_balance(node.rpc_url, expected[0]) == 10_000 * 10**18


@pytest.mark.anyio
async def test_deploy_eurq(node: AnvilNode, eurq: str) -> None:
    assert eurq == Web3.to_checksum_address(eurq)
    assert await token_call(node.rpc_url, eurq, "decimals") == 6
    assert await token_call(node.rpc_url, eurq, "name") == EURQ_NAME
    assert await token_call(node.rpc_url, eurq, "symbol") == "EURQ"
    assert await token_call(node.rpc_url, eurq, "owner") == Account.from_key(DEPLOYER).address
    assert await token_call(node.rpc_url, eurq, "totalSupply") == 0


@pytest.mark.anyio
async def test_mint_to_fresh_address(node: AnvilNode, eurq: str) -> None:
    fresh = Account.create().address
    assert await token_balance(node.rpc_url, eurq, fresh) == 0
    tx_hash = await mint(node.rpc_url, eurq, DEPLOYER, fresh, 5_000_000)
    assert tx_hash.startswith("0x")
    assert len(tx_hash) == 66
    assert await token_balance(node.rpc_url, eurq, fresh) == 5_000_000


@pytest.mark.anyio
async def test_mint_is_owner_only(node: AnvilNode, eurq: str) -> None:
    from web3.exceptions import ContractLogicError

    with pytest.raises((ContractLogicError, RuntimeError)):
        await mint(node.rpc_url, eurq, RELAYER, Account.create().address, 1)


@pytest.mark.anyio
async def test_permit_then_transfer_from(node: AnvilNode, eurq: str) -> None:
    rpc = node.rpc_url
    owner = Account.create()  # holds tokens, never any ETH
    relayer = Account.from_key(RELAYER)  # funded dev account that pays gas
    recipient = Account.create().address
    await mint(rpc, eurq, DEPLOYER, owner.address, 5_000_000)

    value = 1_250_000
    nonce = await permit_nonce(rpc, eurq, owner.address)
    assert nonce == 0
    deadline = int(time.time()) + 3600
    domain: dict[str, Any] = {
        "name": await token_call(rpc, eurq, "name"),
        "version": "1",
        "chainId": node.chain_id,
        "verifyingContract": eurq,
    }
    types = {
        "Permit": [
            {"name": "owner", "type": "address"},
            {"name": "spender", "type": "address"},
            {"name": "value", "type": "uint256"},
            {"name": "nonce", "type": "uint256"},
            {"name": "deadline", "type": "uint256"},
        ]
    }
    message = {
        "owner": owner.address,
        "spender": relayer.address,
        "value": value,
        "nonce": nonce,
        "deadline": deadline,
    }
    signed = Account.sign_typed_data(
        owner.key, domain_data=domain, message_types=types, message_data=message
    )

    await token_transact(
        rpc,
        eurq,
        RELAYER,
        "permit",
        owner.address,
        relayer.address,
        value,
        deadline,
        signed.v,
        signed.r.to_bytes(32, "big"),
        signed.s.to_bytes(32, "big"),
    )
    assert await token_call(rpc, eurq, "allowance", owner.address, relayer.address) == value
    await token_transact(rpc, eurq, RELAYER, "transferFrom", owner.address, recipient, value)

    assert await token_balance(rpc, eurq, owner.address) == 5_000_000 - value
    assert await token_balance(rpc, eurq, recipient) == value
    assert await token_call(rpc, eurq, "allowance", owner.address, relayer.address) == 0
    assert await permit_nonce(rpc, eurq, owner.address) == 1
    assert await native_balance(rpc, owner.address) == 0

    # Replaying the same signature must fail: the nonce has moved on.
    from web3.exceptions import ContractLogicError

    with pytest.raises((ContractLogicError, RuntimeError)):
        await token_transact(
            rpc,
            eurq,
            RELAYER,
            "permit",
            owner.address,
            relayer.address,
            value,
            deadline,
            signed.v,
            signed.r.to_bytes(32, "big"),
            signed.s.to_bytes(32, "big"),
        )


@pytest.mark.anyio
async def test_process_gone_after_context_exit() -> None:
    async with AnvilNode(chain_id=31337) as other:
        pid = other.pid
        assert pid is not None
        assert other.running
        assert _pid_alive(pid)
    assert not other.running
    assert not _pid_alive(pid)
    with pytest.raises(RuntimeError, match="not running"):
        _ = other.rpc_url


@pytest.mark.anyio
async def test_manual_start_stop() -> None:
    other = AnvilNode(chain_id=8453)
    await other.start()
    try:
        pid = other.pid
        assert pid is not None
        assert await native_balance(other.rpc_url, Account.from_key(DEPLOYER).address) > 0
    finally:
        await other.stop()
    await other.stop()  # idempotent
    assert not _pid_alive(pid)


@pytest.mark.anyio
async def test_start_retries_on_port_race(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    real_free_port = _anvil._free_port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        ports = iter([taken])
        monkeypatch.setattr(_anvil, "_free_port", lambda: next(ports, None) or real_free_port())
        async with AnvilNode(chain_id=CHAIN_ID) as other:
            assert other.port != taken
            assert other.running


@pytest.mark.anyio
async def test_start_failure_reports_anvil_output() -> None:
    with pytest.raises(RuntimeError, match="anvil failed to start"):
        await AnvilNode(extra_args=["--no-such-flag"]).start()
