"""Permit2 on the local chain: Uniswap's Permit2 and the x402 `exact` and `upto` Permit2
proxies at their canonical addresses, so that Permit2 payments verify and settle on anvil
exactly as on a public chain.

* Permit2's runtime bytecode (MIT, Uniswap Labs) comes precompiled from the npm package
  `@uniswap/v4-periphery` (`contracts/Permit2.json`, written by
  `scripts/compile_contracts.mjs`) and is set at `PERMIT2_ADDRESS` with `anvil_setCode`.
* The proxy is the sandbox's own `SandboxExactPermit2Proxy` (`contracts/`), written from the
  interface the x402 foundation's facilitator calls; its runtime code (the creation code
  run through `eth_call`, no transaction) is set at `EXACT_PERMIT2_PROXY_ADDRESS`.
* The `upto` proxy is the sandbox's own `SandboxUptoPermit2Proxy`, likewise, set at
  `UPTO_PERMIT2_PROXY_ADDRESS`: it moves at most the signed amount, and only for the
  facilitator the payer's witness names.

All three work at any address and on any chain id (Permit2 rebuilds its domain separator when
the chain id is not the one it cached), so installing costs a few RPC calls and no gas.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from importlib import resources
from typing import Any

from ._anvil import _checksum, _sign_and_send, _web3
from ._eip712 import keccak256

__all__ = [
    "ALLOWANCE_SELECTOR",
    "BALANCE_OF_SELECTOR",
    "ERC20_APPROVE_ABI",
    "EXACT_PERMIT2_PROXY_ADDRESS",
    "PERMIT2_ADDRESS",
    "SETTLE_SIGNATURE",
    "UPTO_PERMIT2_PROXY_ADDRESS",
    "UPTO_SETTLE_SIGNATURE",
    "Permit2Transfer",
    "UptoTransfer",
    "approve_permit2",
    "install_permit2",
    "load_permit2_artifact",
    "load_proxy_artifact",
    "load_upto_proxy_artifact",
    "permit2_allowance",
    "settle_call",
    "upto_settle_call",
]

PERMIT2_ADDRESS = "0x000000000022D473030F116dDEE9F6B43aC78BA3"
#: The x402 foundation's `x402ExactPermit2Proxy` address (the spender its facilitator
#: requires in every exact Permit2 payment).
EXACT_PERMIT2_PROXY_ADDRESS = "0x402085c248EeA27D92E8b30b2C58ed07f9E20001"
#: The x402 foundation's `x402UptoPermit2Proxy` address (the spender of every `upto`
#: payment).
UPTO_PERMIT2_PROXY_ADDRESS = "0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002"

#: The proxy's `settle(permit, owner, witness, signature)`, as the foundation's facilitator
#: calls it.
SETTLE_SIGNATURE = "settle(((address,uint256),uint256,uint256),address,(address,uint256),bytes)"
ALLOWANCE_SELECTOR = bytes.fromhex("dd62ed3e")  # allowance(address,address)
BALANCE_OF_SELECTOR = bytes.fromhex("70a08231")  # balanceOf(address)
_ADDRESS = re.compile(r"\A0x[0-9a-fA-F]{40}\Z")
_UINT = re.compile(r"\A(?:0|[1-9][0-9]{0,77})\Z")


def _word(value: int | str) -> bytes:
    if isinstance(value, str):
        return bytes(12) + bytes.fromhex(value[2:])
    return value.to_bytes(32, "big")


@dataclasses.dataclass(frozen=True)
class Permit2Transfer:
    """A payload's `permit2Authorization`, parsed strictly (addresses `0x` + 40 hex, every
    number a decimal string of a uint256): what the proxy's `settle` is called with."""

    from_address: str
    token: str
    amount: int
    spender: str
    nonce: int
    deadline: int
    to: str
    valid_after: int

    @classmethod
    def from_wire(cls, data: object) -> Permit2Transfer:
        """`ValueError` when `data` is not a well-formed `permit2Authorization`."""
        if not isinstance(data, Mapping):
            raise ValueError("permit2Authorization must be an object")
        permitted, witness = data.get("permitted"), data.get("witness")
        if not isinstance(permitted, Mapping) or not isinstance(witness, Mapping):
            raise ValueError("permitted and witness must be objects")
        addresses = {
            "from": data.get("from"),
            "token": permitted.get("token"),
            "spender": data.get("spender"),
            "to": witness.get("to"),
        }
        numbers = {
            "amount": permitted.get("amount"),
            "nonce": data.get("nonce"),
            "deadline": data.get("deadline"),
            "validAfter": witness.get("validAfter"),
        }
        for name, address in addresses.items():
            if not isinstance(address, str) or not _ADDRESS.match(address):
                raise ValueError(f"{name} is not a 0x address")
        parsed: dict[str, int] = {}
        for name, text in numbers.items():
            if not isinstance(text, str) or not _UINT.match(text) or int(text) >= 1 << 256:
                raise ValueError(f"{name} is not a decimal uint256")
            parsed[name] = int(text)
        return cls(
            from_address=str(addresses["from"]),
            token=str(addresses["token"]),
            amount=parsed["amount"],
            spender=str(addresses["spender"]),
            nonce=parsed["nonce"],
            deadline=parsed["deadline"],
            to=str(addresses["to"]),
            valid_after=parsed["validAfter"],
        )


def settle_call(transfer: Permit2Transfer, signature: bytes) -> bytes:
    """Calldata of the proxy's `settle((token, amount), nonce, deadline), owner, (to,
    validAfter), signature)`: seven static words, then the offset and the padded bytes."""
    selector = keccak256(SETTLE_SIGNATURE.encode())[:4]
    head = b"".join(
        _word(value)
        for value in (
            transfer.token,
            transfer.amount,
            transfer.nonce,
            transfer.deadline,
            transfer.from_address,
            transfer.to,
            transfer.valid_after,
            8 * 32,  # where the signature's bytes start
        )
    )
    padded = signature + bytes(-len(signature) % 32)
    return selector + head + _word(len(signature)) + padded


#: The `upto` proxy's `settle(permit, amount, owner, witness, signature)`.
UPTO_SETTLE_SIGNATURE = (
    "settle(((address,uint256),uint256,uint256),uint256,address,(address,address,uint256),bytes)"
)


@dataclasses.dataclass(frozen=True)
class UptoTransfer:
    """An `upto` payload's `permit2Authorization`: the Permit2 fields (`transfer`, whose
    `amount` is the most that may move) and the witness's `facilitator`, the only caller
    the `upto` proxy lets settle it."""

    transfer: Permit2Transfer
    facilitator: str

    @classmethod
    def from_wire(cls, data: object) -> UptoTransfer:
        """`ValueError` when `data` is not a well-formed `upto` `permit2Authorization`."""
        transfer = Permit2Transfer.from_wire(data)
        assert isinstance(data, Mapping)
        facilitator = data["witness"].get("facilitator")
        if not isinstance(facilitator, str) or not _ADDRESS.match(facilitator):
            raise ValueError("facilitator is not a 0x address")
        return cls(transfer, facilitator)


def upto_settle_call(upto: UptoTransfer, amount: int, signature: bytes) -> bytes:
    """Calldata of the `upto` proxy's `settle(((token, maximum), nonce, deadline), amount,
    owner, (to, facilitator, validAfter), signature)`: ten static words, then the offset
    and the padded bytes."""
    transfer = upto.transfer
    selector = keccak256(UPTO_SETTLE_SIGNATURE.encode())[:4]
    head = b"".join(
        _word(value)
        for value in (
            transfer.token,
            transfer.amount,
            transfer.nonce,
            transfer.deadline,
            amount,
            transfer.from_address,
            transfer.to,
            upto.facilitator,
            transfer.valid_after,
            10 * 32,  # where the signature's bytes start
        )
    )
    padded = signature + bytes(-len(signature) % 32)
    return selector + head + _word(len(signature)) + padded


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


def load_upto_proxy_artifact() -> dict[str, Any]:
    """The compiled `SandboxUptoPermit2Proxy` artifact (abi, bytecode, compiler)."""
    return _artifact("SandboxUptoPermit2Proxy.json")


async def install_permit2(rpc_url: str) -> None:
    """Set Permit2 and the exact and `upto` Permit2 proxies at their canonical addresses
    (anvil only: `anvil_setCode`). Idempotent."""
    permit2 = load_permit2_artifact()["runtimeBytecode"]
    async with _web3(rpc_url) as w3:
        exact_runtime = await w3.eth.call({"data": load_proxy_artifact()["bytecode"]})
        upto_runtime = await w3.eth.call({"data": load_upto_proxy_artifact()["bytecode"]})
        for address, code in (
            (PERMIT2_ADDRESS, permit2),
            (EXACT_PERMIT2_PROXY_ADDRESS, "0x" + bytes(exact_runtime).hex()),
            (UPTO_PERMIT2_PROXY_ADDRESS, "0x" + bytes(upto_runtime).hex()),
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
