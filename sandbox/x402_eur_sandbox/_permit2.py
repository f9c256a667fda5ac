"""Permit2 on the local chain: Uniswap's Permit2 and an x402 `exact` Permit2 proxy at their
canonical addresses, so that Permit2 payments verify and settle on anvil exactly as on a
public chain.

* Permit2's runtime bytecode (MIT, Uniswap Labs) comes precompiled from the npm package
  `@uniswap/v4-periphery` (`contracts/Permit2.json`, written by
  `scripts/compile_contracts.mjs`) and is set at `PERMIT2_ADDRESS` with `anvil_setCode`.
* The proxy is the sandbox's own `SandboxExactPermit2Proxy` (`contracts/`), written from the
  interface the x402 foundation's facilitator calls; its runtime code (the creation code
  run through `eth_call`, no transaction) is set at `EXACT_PERMIT2_PROXY_ADDRESS`.

Both work at any address and on any chain id (Permit2 rebuilds its domain separator when
the chain id is not the one it cached), so installing costs two RPC calls and no gas.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from ._anvil import _checksum, _sign_and_send, _web3

__all__ = [
    "ERC20_APPROVE_ABI",
    "EXACT_PERMIT2_PROXY_ADDRESS",
    "PERMIT2_ADDRESS",
    "approve_permit2",
    "install_permit2",
    "load_permit2_artifact",
    "load_proxy_artifact",
    "permit2_allowance",
]

PERMIT2_ADDRESS = "0x000000000022D473030F116dDEE9F6B43aC78BA3"
#: The x402 foundation's `x402ExactPermit2Proxy` address (the spender its facilitator
#: requires in every exact Permit2 payment).
EXACT_PERMIT2_PROXY_ADDRESS = "0x402085c248EeA27D92E8b30b2C58ed07f9E20001"

ERC20_APPROVE_ABI: list[dict[str, Any]] = [
    {
        "type": "function",
        "name": "approve",
        "stateMutability": "nonpayable",
        "inputs": [{"name": "spender", "type": "address"}, {"name": "amount", "type": "uint256"}],
        "outputs": [{"name": "", "type": "bool"}],
    },
    {
        "type": "function",
        "name": "allowance",
        "stateMutability": "view",
        "inputs": [{"name": "owner", "type": "address"}, {"name": "spender", "type": "address"}],
        "outputs": [{"name": "", "type": "uint256"}],
    },
]


def _artifact(name: str) -> dict[str, Any]:
    package = resources.files("x402_eur_sandbox.contracts")
    data: dict[str, Any] = json.loads(package.joinpath(name).read_text("utf-8"))
    return data


def load_permit2_artifact() -> dict[str, Any]:
    """Permit2's artifact: `runtimeBytecode`, `address`, `source`, `license`."""
    return _artifact("Permit2.json")


def load_proxy_artifact() -> dict[str, Any]:
    """The compiled `SandboxExactPermit2Proxy` artifact (abi, bytecode, compiler)."""
    return _artifact("SandboxExactPermit2Proxy.json")


async def install_permit2(rpc_url: str) -> None:
    """Set Permit2 and the exact Permit2 proxy at their canonical addresses (anvil only:
    `anvil_setCode`). Idempotent."""
    permit2 = load_permit2_artifact()["runtimeBytecode"]
    async with _web3(rpc_url) as w3:
        proxy_runtime = await w3.eth.call({"data": load_proxy_artifact()["bytecode"]})
        for address, code in (
            (PERMIT2_ADDRESS, permit2),
            (EXACT_PERMIT2_PROXY_ADDRESS, "0x" + bytes(proxy_runtime).hex()),
        ):
            answer = await w3.provider.make_request("anvil_setCode", [address, code])
            if answer.get("error"):
                raise RuntimeError(f"anvil_setCode at {address} failed: {answer['error']}")
            if len(await w3.eth.get_code(_checksum(address))) == 0:
                raise RuntimeError(f"no code at {address} after anvil_setCode")


async def approve_permit2(
    rpc_url: str, token: str, owner_key: str, amount_atomic: int = (1 << 256) - 1
) -> dict[str, Any]:
    """ERC-20 `approve(PERMIT2_ADDRESS, amount_atomic)` sent by `owner_key` (who pays the
    gas); the receipt."""
    from eth_account import Account

    sender = Account.from_key(owner_key).address
    async with _web3(rpc_url) as w3:
        contract = w3.eth.contract(address=_checksum(token), abi=ERC20_APPROVE_ABI)
        tx = await contract.functions.approve(PERMIT2_ADDRESS, amount_atomic).build_transaction(
            {"from": sender, "nonce": await w3.eth.get_transaction_count(sender, "pending")}
        )
        return await _sign_and_send(w3, owner_key, dict(tx))


async def permit2_allowance(rpc_url: str, token: str, owner: str) -> int:
    """ERC-20 `allowance(owner, PERMIT2_ADDRESS)`."""
    async with _web3(rpc_url) as w3:
        contract = w3.eth.contract(address=_checksum(token), abi=ERC20_APPROVE_ABI)
        return int(await contract.functions.allowance(_checksum(owner), PERMIT2_ADDRESS).call())
