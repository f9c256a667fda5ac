"""The x402 `batch-settlement` escrow on the local chain: the sandbox's own escrow and
deposit collectors at the scheme's canonical addresses, and the calls that drive them.

* `SandboxBatchSettlement` (`contracts/`) implements the scheme's `x402BatchSettlement`
  interface (functions, EIP-712 types, events and errors) and is set at `ESCROW`;
  `SandboxErc3009DepositCollector` and `SandboxPermit2DepositCollector` at their canonical
  addresses, each built for `ESCROW` (the escrow's address is baked into their code).
* Every x402 implementation hard-codes those addresses (there is no field for them in a
  402), so on anvil the contracts must sit exactly there: each is deployed normally, then
  its runtime code is copied to the canonical address with `anvil_setCode`. The escrow's
  EIP-712 domain follows `address(this)`, so channel ids are those of `ESCROW`.
* `SandboxMulticall3` sits at Multicall3's canonical address: facilitators read channel
  state through `tryAggregate`, and a fresh anvil has no Multicall3.

Calldata encoders are pure (a facilitator can `eth_call` them first); the write helpers
send a transaction signed locally, wait for its receipt and raise `EscrowReverted` naming
the escrow's custom error when the chain refuses.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any

from ._anvil import _checksum, _sign_and_send, _web3
from ._eip712 import keccak256
from ._permit2 import install_permit2

if TYPE_CHECKING:
    from web3 import AsyncHTTPProvider, AsyncWeb3

__all__ = [
    "CHANNEL_CONFIG_TYPE",
    "ERC3009_COLLECTOR",
    "ESCROW",
    "MAX_WITHDRAW_DELAY",
    "MIN_WITHDRAW_DELAY",
    "MULTICALL3",
    "PERMIT2_COLLECTOR",
    "ChannelConfig",
    "EscrowReverted",
    "VoucherClaim",
    "channel_id",
    "channel_state",
    "claim_batch_digest",
    "claim_with_signature",
    "deposit",
    "domain_separator",
    "encode_claim",
    "encode_claim_with_signature",
    "encode_deposit",
    "encode_finalize_withdraw",
    "encode_initiate_withdraw",
    "encode_multicall",
    "encode_refund",
    "encode_refund_with_signature",
    "encode_settle",
    "erc3009_collector_data",
    "erc3009_deposit_nonce",
    "error_name",
    "finalize_withdraw",
    "initiate_withdraw",
    "install_batch_settlement",
    "multicall",
    "pending_withdrawal",
    "permit2_collector_data",
    "receiver_state",
    "refund_digest",
    "refund_nonce",
    "refund_with_signature",
    "settle",
    "voucher_digest",
]

ESCROW = "0x4020074e9dF2ce1deE5A9C1b5c3f541D02a10003"
ERC3009_COLLECTOR = "0x4020806089470a89826cB9fB1f4059150b550004"
PERMIT2_COLLECTOR = "0x4020425FAf3B746C082C2f942b4E5159887B0005"
MULTICALL3 = "0xcA11bde05977b3631167028862bE2a173976CA11"
MIN_WITHDRAW_DELAY = 900
MAX_WITHDRAW_DELAY = 2_592_000

#: The ABI tuple of `ChannelConfig`.
CHANNEL_CONFIG_TYPE = "(address,address,address,address,address,uint40,bytes32)"
_VOUCHER_CLAIM_TYPE = f"(({CHANNEL_CONFIG_TYPE},uint128),bytes,uint128)"
_UINT128 = (1 << 128) - 1

_DOMAIN_TYPEHASH = keccak256(
    b"EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)"
)
_CHANNEL_CONFIG_TYPEHASH = keccak256(
    b"ChannelConfig(address payer,address payerAuthorizer,address receiver,"
    b"address receiverAuthorizer,address token,uint40 withdrawDelay,bytes32 salt)"
)
_VOUCHER_TYPEHASH = keccak256(b"Voucher(bytes32 channelId,uint128 maxClaimableAmount)")
_REFUND_TYPEHASH = keccak256(b"Refund(bytes32 channelId,uint256 nonce,uint128 amount)")
_CLAIM_ENTRY = b"ClaimEntry(bytes32 channelId,uint128 maxClaimableAmount,uint128 totalClaimed)"
_CLAIM_ENTRY_TYPEHASH = keccak256(_CLAIM_ENTRY)
_CLAIM_BATCH_TYPEHASH = keccak256(b"ClaimBatch(ClaimEntry[] claims)" + _CLAIM_ENTRY)

#: The custom errors of the escrow, its collectors and what they call (OpenZeppelin's
#: SafeERC20 and tokens, Permit2), by 4-byte selector.
_ERRORS: dict[bytes, str] = {
    keccak256(signature.encode())[:4]: signature.split("(")[0]
    for signature in (
        "InvalidChannel()",
        "ZeroDeposit()",
        "DepositOverflow()",
        "InvalidSignature()",
        "NotReceiverAuthorizer()",
        "NotAuthorizedToClaim()",
        "NotAuthorizedToRefund()",
        "ClaimExceedsCeiling()",
        "ClaimExceedsBalance()",
        "WithdrawalAlreadyPending()",
        "WithdrawalNotPending()",
        "NotAuthorizedToFinalizeWithdraw()",
        "WithdrawDelayNotElapsed()",
        "NothingToWithdraw()",
        "WithdrawAmountExceedsAvailable()",
        "WithdrawDelayOutOfRange()",
        "EmptyBatch()",
        "DepositCollectionFailed()",
        "InvalidCollector()",
        "InvalidRefundNonce()",
        "ZeroRefund()",
        "OnlyX402BatchSettlement()",
        "Permit2612AmountMismatch()",
        "ReentrancyGuardReentrantCall()",
        "InvalidNonce()",
        "InvalidSigner()",
        "InvalidSignatureLength()",
        "InvalidContractSignature()",
        "SafeERC20FailedOperation(address)",
        "SignatureExpired(uint256)",
        "InvalidAmount(uint256)",
        "ERC20InsufficientBalance(address,uint256,uint256)",
        "ERC20InsufficientAllowance(address,uint256,uint256)",
    )
}
_ERROR_STRING = keccak256(b"Error(string)")[:4]
_PANIC = keccak256(b"Panic(uint256)")[:4]


@dataclasses.dataclass(frozen=True)
class ChannelConfig:
    """A channel's immutable configuration; its EIP-712 hash is the channel id."""

    payer: str
    payer_authorizer: str
    receiver: str
    receiver_authorizer: str
    token: str
    withdraw_delay: int
    salt: bytes = bytes(32)

    def __post_init__(self) -> None:
        if len(self.salt) != 32:
            raise ValueError("salt is 32 bytes")
        if not 0 <= self.withdraw_delay < 1 << 40:
            raise ValueError("withdraw_delay is a uint40")

    def as_abi(self) -> tuple[Any, ...]:
        """The ABI tuple, in `ChannelConfig`'s field order."""
        return (
            _checksum(self.payer),
            _checksum(self.payer_authorizer),
            _checksum(self.receiver),
            _checksum(self.receiver_authorizer),
            _checksum(self.token),
            self.withdraw_delay,
            self.salt,
        )


@dataclasses.dataclass(frozen=True)
class VoucherClaim:
    """One row of a claim: the payer's voucher (`max_claimable_amount` and its
    `signature`) and the channel's cumulative claimed total after the row."""

    channel: ChannelConfig
    max_claimable_amount: int
    signature: bytes
    total_claimed: int

    def as_abi(self) -> tuple[Any, ...]:
        return (
            (self.channel.as_abi(), self.max_claimable_amount),
            self.signature,
            self.total_claimed,
        )


class EscrowReverted(RuntimeError):
    """The chain refused an escrow call (simulated or mined): no money moved.

    `error` is the custom error's name (`"ClaimExceedsCeiling"`), `"Error(<reason>)"` for
    a reason string, `"Panic(<code>)"`, or None for a revert without recognisable data.
    """

    def __init__(self, function: str, error: str | None, data: bytes = b"") -> None:
        super().__init__(f"{function} reverted: {error or 'no reason given'}")
        self.function = function
        self.error = error
        self.data = data


def error_name(data: bytes) -> str | None:
    """The name of the revert in `data` (see `EscrowReverted.error`), None if unknown."""
    from eth_abi.abi import decode

    selector = data[:4]
    if selector in _ERRORS:
        return _ERRORS[selector]
    try:
        if selector == _ERROR_STRING:
            return f"Error({decode(['string'], data[4:])[0]})"
        if selector == _PANIC:
            return f"Panic({decode(['uint256'], data[4:])[0]:#x})"
    except Exception:  # malformed revert data: an unknown revert
        return None
    return None


# --- EIP-712, computed locally ----------------------------------------------------------


def _encode(types: Sequence[str], values: Sequence[Any]) -> bytes:
    from eth_abi.abi import encode

    return bytes(encode(list(types), list(values)))


def domain_separator(chain_id: int, verifying_contract: str = ESCROW) -> bytes:
    """The escrow's EIP-712 domain separator ("x402 Batch Settlement", version "1")."""
    return keccak256(
        _encode(
            ["bytes32", "bytes32", "bytes32", "uint256", "address"],
            [
                _DOMAIN_TYPEHASH,
                keccak256(b"x402 Batch Settlement"),
                keccak256(b"1"),
                chain_id,
                _checksum(verifying_contract),
            ],
        )
    )


def _typed_digest(chain_id: int, struct_hash: bytes) -> bytes:
    return keccak256(b"\x19\x01" + domain_separator(chain_id) + struct_hash)


def channel_id(config: ChannelConfig, chain_id: int) -> bytes:
    """The channel id: the EIP-712 digest of `config` under the escrow's domain."""
    struct = _encode(["bytes32", CHANNEL_CONFIG_TYPE], [_CHANNEL_CONFIG_TYPEHASH, config.as_abi()])
    return _typed_digest(chain_id, keccak256(struct))


def voucher_digest(chain_id: int, channel: bytes, max_claimable_amount: int) -> bytes:
    """What a payer signs: `Voucher(channelId, maxClaimableAmount)`."""
    struct = _encode(
        ["bytes32", "bytes32", "uint128"], [_VOUCHER_TYPEHASH, channel, max_claimable_amount]
    )
    return _typed_digest(chain_id, keccak256(struct))


def refund_digest(chain_id: int, channel: bytes, nonce: int, amount: int) -> bytes:
    """What the receiver authorizer signs for `refundWithSignature`."""
    struct = _encode(
        ["bytes32", "bytes32", "uint256", "uint128"], [_REFUND_TYPEHASH, channel, nonce, amount]
    )
    return _typed_digest(chain_id, keccak256(struct))


def claim_batch_digest(chain_id: int, claims: Sequence[VoucherClaim]) -> bytes:
    """What the receiver authorizer signs for `claimWithSignature`: a `ClaimBatch` of one
    `ClaimEntry(channelId, maxClaimableAmount, totalClaimed)` per row."""
    entries = b"".join(
        keccak256(
            _encode(
                ["bytes32", "bytes32", "uint128", "uint128"],
                [
                    _CLAIM_ENTRY_TYPEHASH,
                    channel_id(row.channel, chain_id),
                    row.max_claimable_amount,
                    row.total_claimed,
                ],
            )
        )
        for row in claims
    )
    struct = _encode(["bytes32", "bytes32"], [_CLAIM_BATCH_TYPEHASH, keccak256(entries)])
    return _typed_digest(chain_id, keccak256(struct))


def erc3009_deposit_nonce(channel: bytes, salt: int) -> bytes:
    """The ERC-3009 nonce of a deposit: keccak256(abi.encode(channelId, salt)), which ties
    the payer's authorization to one channel."""
    return keccak256(_encode(["bytes32", "uint256"], [channel, salt]))


def erc3009_collector_data(
    valid_after: int, valid_before: int, salt: int, signature: bytes
) -> bytes:
    """`collectorData` for the ERC-3009 collector."""
    return _encode(
        ["uint256", "uint256", "uint256", "bytes"], [valid_after, valid_before, salt, signature]
    )


def permit2_collector_data(
    nonce: int, deadline: int, signature: bytes, eip2612_permit_data: bytes = b""
) -> bytes:
    """`collectorData` for the Permit2 collector."""
    return _encode(
        ["uint256", "uint256", "bytes", "bytes"], [nonce, deadline, signature, eip2612_permit_data]
    )


# --- calldata -----------------------------------------------------------------------------


def _call(signature: str, types: Sequence[str], values: Sequence[Any]) -> bytes:
    return keccak256(signature.encode())[:4] + _encode(types, values)


_CFG = CHANNEL_CONFIG_TYPE


def encode_deposit(
    config: ChannelConfig, amount: int, collector: str, collector_data: bytes
) -> bytes:
    """`deposit(config, amount, collector, collectorData)`."""
    return _call(
        f"deposit({_CFG},uint128,address,bytes)",
        [_CFG, "uint128", "address", "bytes"],
        [config.as_abi(), amount, _checksum(collector), collector_data],
    )


def encode_claim(claims: Sequence[VoucherClaim]) -> bytes:
    """`claim(voucherClaims)` (sent by the receiver or its authorizer)."""
    return _call(
        f"claim({_VOUCHER_CLAIM_TYPE}[])",
        [f"{_VOUCHER_CLAIM_TYPE}[]"],
        [[row.as_abi() for row in claims]],
    )


def encode_claim_with_signature(
    claims: Sequence[VoucherClaim], authorizer_signature: bytes
) -> bytes:
    """`claimWithSignature(voucherClaims, authorizerSignature)`."""
    return _call(
        f"claimWithSignature({_VOUCHER_CLAIM_TYPE}[],bytes)",
        [f"{_VOUCHER_CLAIM_TYPE}[]", "bytes"],
        [[row.as_abi() for row in claims], authorizer_signature],
    )


def encode_settle(receiver: str, token: str) -> bytes:
    """`settle(receiver, token)`."""
    return _call(
        "settle(address,address)", ["address", "address"], [_checksum(receiver), _checksum(token)]
    )


def encode_refund(config: ChannelConfig, amount: int) -> bytes:
    """`refund(config, amount)` (sent by the receiver or its authorizer)."""
    return _call(f"refund({_CFG},uint128)", [_CFG, "uint128"], [config.as_abi(), amount])


def encode_refund_with_signature(
    config: ChannelConfig, amount: int, nonce: int, authorizer_signature: bytes
) -> bytes:
    """`refundWithSignature(config, amount, nonce, receiverAuthorizerSignature)`."""
    return _call(
        f"refundWithSignature({_CFG},uint128,uint256,bytes)",
        [_CFG, "uint128", "uint256", "bytes"],
        [config.as_abi(), amount, nonce, authorizer_signature],
    )


def encode_initiate_withdraw(config: ChannelConfig, amount: int) -> bytes:
    """`initiateWithdraw(config, amount)` (sent by the payer or its authorizer)."""
    return _call(f"initiateWithdraw({_CFG},uint128)", [_CFG, "uint128"], [config.as_abi(), amount])


def encode_finalize_withdraw(config: ChannelConfig) -> bytes:
    """`finalizeWithdraw(config)` (sent by the payer or its authorizer)."""
    return _call(f"finalizeWithdraw({_CFG})", [_CFG], [config.as_abi()])


def encode_multicall(calls: Sequence[bytes]) -> bytes:
    """The escrow's `multicall(data)`: each call runs in order, all or none."""
    return _call("multicall(bytes[])", ["bytes[]"], [list(calls)])


# --- installation -------------------------------------------------------------------------


def _artifact(name: str) -> dict[str, Any]:
    package = resources.files("x402_eur_sandbox.contracts")
    data: dict[str, Any] = json.loads(package.joinpath(f"{name}.json").read_text("utf-8"))
    return data


async def _deployed_runtime(
    w3: AsyncWeb3[AsyncHTTPProvider], deployer_key: str, name: str, init_args: bytes
) -> str:
    """Deploy contract `name` and return its runtime code (0x hex), immutables included."""
    bytecode = _artifact(name)["bytecode"] + init_args.hex()
    receipt = await _sign_and_send(w3, deployer_key, {"data": bytecode})
    address = receipt.get("contractAddress")
    if not address:
        raise RuntimeError(f"deploying {name} gave no contract address")
    return "0x" + bytes(await w3.eth.get_code(_checksum(str(address)))).hex()


async def install_batch_settlement(rpc_url: str, deployer_key: str) -> None:
    """Set the escrow, both deposit collectors, Permit2 (and its x402 proxies) and
    Multicall3 at their canonical addresses (anvil only: `anvil_setCode`). Each contract
    is deployed by `deployer_key` (who pays the gas), then copied. Idempotent: the escrow's
    storage (channels) survives a second install."""
    await install_permit2(rpc_url)
    escrow_arg = _encode(["address"], [_checksum(ESCROW)])
    async with _web3(rpc_url) as w3:
        for address, name, args in (
            (ESCROW, "SandboxBatchSettlement", b""),
            (ERC3009_COLLECTOR, "SandboxErc3009DepositCollector", escrow_arg),
            (PERMIT2_COLLECTOR, "SandboxPermit2DepositCollector", escrow_arg),
            (MULTICALL3, "SandboxMulticall3", b""),
        ):
            code = await _deployed_runtime(w3, deployer_key, name, args)
            answer = await w3.provider.make_request("anvil_setCode", [address, code])
            if answer.get("error"):
                raise RuntimeError(f"anvil_setCode at {address} failed: {answer['error']}")
            if "0x" + bytes(await w3.eth.get_code(_checksum(address))).hex() != code:
                raise RuntimeError(f"{name} is not at {address} after anvil_setCode")


# --- reads ------------------------------------------------------------------------------


async def _eth_call(rpc_url: str, data: bytes, sender: str | None = None) -> bytes:
    """`eth_call` of the escrow; `EscrowReverted` when it reverts."""
    call: dict[str, str] = {"to": ESCROW, "data": "0x" + data.hex()}
    if sender is not None:
        call["from"] = str(_checksum(sender))
    async with _web3(rpc_url) as w3:
        answer = await w3.provider.make_request("eth_call", [call, "latest"])
    error = answer.get("error")
    if error:
        revert = _revert_data(error)
        raise EscrowReverted(_function_of(data), error_name(revert), revert)
    return bytes.fromhex(str(answer["result"])[2:])


def _hex(text: str) -> bytes:
    try:
        return bytes.fromhex(text.removeprefix("0x"))
    except ValueError:
        return b""


def _revert_data(error: Any) -> bytes:
    raw = error.get("data") if isinstance(error, dict) else None
    if isinstance(raw, dict):  # some nodes nest it
        raw = raw.get("data")
    return _hex(raw) if isinstance(raw, str) else b""


async def _read(
    rpc_url: str, signature: str, types: Sequence[str], values: Sequence[Any], out: Sequence[str]
) -> tuple[Any, ...]:
    from eth_abi.abi import decode

    result = await _eth_call(rpc_url, _call(signature, types, values))
    return tuple(decode(list(out), result))


async def channel_state(rpc_url: str, channel: bytes) -> tuple[int, int]:
    """`channels(channelId)`: (balance, totalClaimed)."""
    balance, claimed = await _read(
        rpc_url, "channels(bytes32)", ["bytes32"], [channel], ["uint128", "uint128"]
    )
    return int(balance), int(claimed)


async def refund_nonce(rpc_url: str, channel: bytes) -> int:
    """`refundNonce(channelId)`: the nonce the next signed refund must carry."""
    (nonce,) = await _read(rpc_url, "refundNonce(bytes32)", ["bytes32"], [channel], ["uint256"])
    return int(nonce)


async def pending_withdrawal(rpc_url: str, channel: bytes) -> tuple[int, int]:
    """`pendingWithdrawals(channelId)`: (amount, initiatedAt); (0, 0) when none."""
    amount, initiated_at = await _read(
        rpc_url, "pendingWithdrawals(bytes32)", ["bytes32"], [channel], ["uint128", "uint40"]
    )
    return int(amount), int(initiated_at)


async def receiver_state(rpc_url: str, receiver: str, token: str) -> tuple[int, int]:
    """`receivers(receiver, token)`: (totalClaimed, totalSettled)."""
    claimed, settled = await _read(
        rpc_url,
        "receivers(address,address)",
        ["address", "address"],
        [_checksum(receiver), _checksum(token)],
        ["uint128", "uint128"],
    )
    return int(claimed), int(settled)


# --- writes -------------------------------------------------------------------------------

_SELECTORS: dict[bytes, str] = {
    keccak256(signature.encode())[:4]: signature.split("(")[0]
    for signature in (
        f"deposit({_CFG},uint128,address,bytes)",
        f"claim({_VOUCHER_CLAIM_TYPE}[])",
        f"claimWithSignature({_VOUCHER_CLAIM_TYPE}[],bytes)",
        "settle(address,address)",
        f"refund({_CFG},uint128)",
        f"refundWithSignature({_CFG},uint128,uint256,bytes)",
        f"initiateWithdraw({_CFG},uint128)",
        f"finalizeWithdraw({_CFG})",
        "multicall(bytes[])",
    )
}


def _function_of(data: bytes) -> str:
    return _SELECTORS.get(data[:4], "0x" + data[:4].hex())


async def _transact(rpc_url: str, sender_key: str, data: bytes) -> dict[str, Any]:
    """Simulate `data` against the escrow as `sender_key` (a refusal raises
    `EscrowReverted` before anything is sent), then send it and wait for the receipt.
    When no receipt comes in time, web3's `TimeExhausted` propagates: the transaction
    may still be mined, so its effect is unknown until the chain is read again."""
    from eth_account import Account
    from web3.exceptions import ContractLogicError

    sender = Account.from_key(sender_key).address
    await _eth_call(rpc_url, data, sender)
    async with _web3(rpc_url) as w3:
        try:
            return await _sign_and_send(w3, sender_key, {"to": _checksum(ESCROW), "data": data})
        except ContractLogicError as exc:
            # Gas estimation refused it: the chain moved since the simulation; nothing sent.
            revert = exc.data if isinstance(exc.data, str) else ""
            raise EscrowReverted(
                _function_of(data), error_name(_hex(revert)), _hex(revert)
            ) from exc
        except RuntimeError as exc:
            # Mined and reverted (same cause): the transaction moved nothing.
            raise EscrowReverted(_function_of(data), None) from exc


async def deposit(
    rpc_url: str,
    sender_key: str,
    config: ChannelConfig,
    amount: int,
    collector: str,
    collector_data: bytes,
) -> dict[str, Any]:
    """Send `deposit` from `sender_key` (any relayer); the receipt."""
    return await _transact(
        rpc_url, sender_key, encode_deposit(config, amount, collector, collector_data)
    )


async def claim_with_signature(
    rpc_url: str, sender_key: str, claims: Sequence[VoucherClaim], authorizer_signature: bytes
) -> dict[str, Any]:
    """Send `claimWithSignature` from `sender_key` (any relayer); the receipt."""
    return await _transact(
        rpc_url, sender_key, encode_claim_with_signature(claims, authorizer_signature)
    )


async def settle(rpc_url: str, sender_key: str, receiver: str, token: str) -> dict[str, Any]:
    """Send `settle(receiver, token)` from `sender_key` (anyone); the receipt."""
    return await _transact(rpc_url, sender_key, encode_settle(receiver, token))


async def refund_with_signature(
    rpc_url: str,
    sender_key: str,
    config: ChannelConfig,
    amount: int,
    nonce: int,
    authorizer_signature: bytes,
) -> dict[str, Any]:
    """Send `refundWithSignature` from `sender_key` (any relayer); the receipt."""
    return await _transact(
        rpc_url,
        sender_key,
        encode_refund_with_signature(config, amount, nonce, authorizer_signature),
    )


async def multicall(rpc_url: str, sender_key: str, calls: Sequence[bytes]) -> dict[str, Any]:
    """Send the escrow's `multicall(calls)` (each an `encode_*` result) from `sender_key`."""
    return await _transact(rpc_url, sender_key, encode_multicall(calls))


async def initiate_withdraw(
    rpc_url: str, payer_key: str, config: ChannelConfig, amount: int
) -> dict[str, Any]:
    """Send `initiateWithdraw` from `payer_key` (the payer or its authorizer); the receipt."""
    return await _transact(rpc_url, payer_key, encode_initiate_withdraw(config, amount))


async def finalize_withdraw(rpc_url: str, payer_key: str, config: ChannelConfig) -> dict[str, Any]:
    """Send `finalizeWithdraw` from `payer_key` (the payer or its authorizer); the receipt."""
    return await _transact(rpc_url, payer_key, encode_finalize_withdraw(config))
