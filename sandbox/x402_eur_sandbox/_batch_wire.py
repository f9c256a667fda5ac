"""The `batch-settlement` scheme's wire and signatures on EVM, written from the scheme's
specification: the channel configuration and its id, vouchers, the receiver authorizer's
claim-batch and refund signatures, the escrow's calldata and its channel snapshot.

Every signature is EIP-712 under the escrow's domain ("x402 Batch Settlement", version
"1", the chain id, the escrow's canonical address). Amounts of vouchers, claims and
refunds are `uint128`; a refund's nonce is `uint256`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "ERC3009_COLLECTOR",
    "ESCROW",
    "MAX_WITHDRAW_DELAY",
    "MIN_WITHDRAW_DELAY",
    "PERMIT2_COLLECTOR",
    "SCHEME",
    "ZERO_ADDRESS",
    "ChannelConfig",
    "ChannelSnapshot",
    "Claim",
    "Voucher",
    "call_data",
    "channel_id",
    "code",
    "parse_bytes32",
    "parse_uint",
    "recover_voucher",
    "sign_claim_batch",
    "sign_refund",
    "voucher_digest",
]

SCHEME = "batch-settlement"
#: The escrow and its deposit collectors sit at the same address on every chain.
ESCROW = "0x4020074e9dF2ce1deE5A9C1b5c3f541D02a10003"
ERC3009_COLLECTOR = "0x4020806089470a89826cB9fB1f4059150b550004"
PERMIT2_COLLECTOR = "0x4020425FAf3B746C082C2f942b4E5159887B0005"
MIN_WITHDRAW_DELAY = 900
MAX_WITHDRAW_DELAY = 2_592_000
_DOMAIN_NAME = "x402 Batch Settlement"
_UINT128 = 2**128
_ADDRESS = re.compile(r"\A0x[0-9a-fA-F]{40}\Z")
_BYTES32 = re.compile(r"\A0x[0-9a-fA-F]{64}\Z")
_HEX = re.compile(r"\A0x(?:[0-9a-fA-F]{2})+\Z")
_DIGITS = re.compile(r"\A(?:0|[1-9][0-9]{0,77})\Z")
ZERO_ADDRESS = "0x" + "00" * 20

_CONFIG_FIELDS = [
    {"name": "payer", "type": "address"},
    {"name": "payerAuthorizer", "type": "address"},
    {"name": "receiver", "type": "address"},
    {"name": "receiverAuthorizer", "type": "address"},
    {"name": "token", "type": "address"},
    {"name": "withdrawDelay", "type": "uint40"},
    {"name": "salt", "type": "bytes32"},
]
_VOUCHER_FIELDS = [
    {"name": "channelId", "type": "bytes32"},
    {"name": "maxClaimableAmount", "type": "uint128"},
]
_REFUND_FIELDS = [
    {"name": "channelId", "type": "bytes32"},
    {"name": "nonce", "type": "uint256"},
    {"name": "amount", "type": "uint128"},
]
_CLAIM_ENTRY_FIELDS = [
    {"name": "channelId", "type": "bytes32"},
    {"name": "maxClaimableAmount", "type": "uint128"},
    {"name": "totalClaimed", "type": "uint128"},
]
_CONFIG_ABI = "(address,address,address,address,address,uint40,bytes32)"
_CLAIM_ABI = f"(({_CONFIG_ABI},uint128),bytes,uint128)"


def code(reason: str) -> str:
    """The scheme's error code for `reason`: `invalid_batch_settlement_evm_<reason>`."""
    return "invalid_batch_settlement_evm_" + reason


def parse_uint(value: object, limit: int = _UINT128) -> int:
    """A decimal string below `limit` (uint128 by default); `ValueError` otherwise."""
    if not isinstance(value, str) or not _DIGITS.match(value):
        raise ValueError("an amount is a string of decimal digits")
    number = int(value)
    if number >= limit:
        raise ValueError("an amount is out of range")
    return number


def _address(value: object) -> str:
    from eth_utils.address import to_checksum_address

    if not isinstance(value, str) or not _ADDRESS.match(value):
        raise ValueError("an address is 0x and 40 hex digits")
    return str(to_checksum_address(value))


def parse_bytes32(value: object) -> bytes:
    """0x and 64 hex digits, as 32 bytes; `ValueError` otherwise."""
    if not isinstance(value, str) or not _BYTES32.match(value):
        raise ValueError("a bytes32 is 0x and 64 hex digits")
    return bytes.fromhex(value[2:])


def _signature(value: object) -> bytes:
    if not isinstance(value, str) or not _HEX.match(value):
        raise ValueError("a signature is 0x hex")
    return bytes.fromhex(value[2:])


@dataclasses.dataclass(frozen=True)
class ChannelConfig:
    """A channel's immutable terms; its EIP-712 hash under the escrow's domain is its id."""

    payer: str
    payer_authorizer: str
    receiver: str
    receiver_authorizer: str
    token: str
    withdraw_delay: int
    salt: bytes

    @classmethod
    def from_wire(cls, data: object) -> ChannelConfig:
        """Strictly from a payload's `channelConfig`; `ValueError` when malformed."""
        if not isinstance(data, Mapping):
            raise ValueError("channelConfig must be an object")
        delay = data.get("withdrawDelay")
        if isinstance(delay, bool) or not isinstance(delay, int) or not 0 <= delay < 2**40:
            raise ValueError("channelConfig.withdrawDelay is a uint40 number")
        return cls(
            payer=_address(data.get("payer")),
            payer_authorizer=_address(data.get("payerAuthorizer")),
            receiver=_address(data.get("receiver")),
            receiver_authorizer=_address(data.get("receiverAuthorizer")),
            token=_address(data.get("token")),
            withdraw_delay=delay,
            salt=parse_bytes32(data.get("salt")),
        )

    def to_wire(self) -> dict[str, Any]:
        return {
            "payer": self.payer,
            "payerAuthorizer": self.payer_authorizer,
            "receiver": self.receiver,
            "receiverAuthorizer": self.receiver_authorizer,
            "token": self.token,
            "withdrawDelay": self.withdraw_delay,
            "salt": "0x" + self.salt.hex(),
        }

    def abi(self) -> tuple[Any, ...]:
        return (
            self.payer,
            self.payer_authorizer,
            self.receiver,
            self.receiver_authorizer,
            self.token,
            self.withdraw_delay,
            self.salt,
        )


@dataclasses.dataclass(frozen=True)
class Voucher:
    """A payload's `voucher`: the channel, the cumulative ceiling, the payer's signature."""

    channel_id: str
    max_claimable: int
    signature: bytes = dataclasses.field(repr=False)

    @classmethod
    def from_wire(cls, data: object) -> Voucher:
        if not isinstance(data, Mapping):
            raise ValueError("voucher must be an object")
        return cls(
            channel_id="0x" + parse_bytes32(data.get("channelId")).hex(),
            max_claimable=parse_uint(data.get("maxClaimableAmount")),
            signature=_signature(data.get("signature")),
        )


@dataclasses.dataclass(frozen=True)
class Claim:
    """One row of a claim: the payer's voucher and the cumulative total claimed with it."""

    config: ChannelConfig
    max_claimable: int
    signature: bytes = dataclasses.field(repr=False)
    total_claimed: int

    @classmethod
    def from_wire(cls, data: object) -> Claim:
        if not isinstance(data, Mapping) or not isinstance(data.get("voucher"), Mapping):
            raise ValueError("a claim is {voucher: {channel, maxClaimableAmount}, ...}")
        voucher = data["voucher"]
        return cls(
            config=ChannelConfig.from_wire(voucher.get("channel")),
            max_claimable=parse_uint(voucher.get("maxClaimableAmount")),
            signature=_signature(data.get("signature")),
            total_claimed=parse_uint(data.get("totalClaimed")),
        )

    def to_wire(self) -> dict[str, Any]:
        return {
            "voucher": {
                "channel": self.config.to_wire(),
                "maxClaimableAmount": str(self.max_claimable),
            },
            "signature": "0x" + self.signature.hex(),
            "totalClaimed": str(self.total_claimed),
        }

    def abi(self) -> tuple[Any, ...]:
        return ((self.config.abi(), self.max_claimable), self.signature, self.total_claimed)


@dataclasses.dataclass(frozen=True)
class ChannelSnapshot:
    """The escrow's view of a channel, as every response carries it."""

    channel_id: str
    balance: int
    total_claimed: int
    withdraw_requested_at: int
    refund_nonce: int

    def to_wire(self) -> dict[str, Any]:
        return {
            "channelId": self.channel_id,
            "balance": str(self.balance),
            "totalClaimed": str(self.total_claimed),
            "withdrawRequestedAt": self.withdraw_requested_at,
            "refundNonce": str(self.refund_nonce),
        }


# --- EIP-712 -----------------------------------------------------------------------------


def _typed(
    chain_id: int, primary: str, types: dict[str, list[dict[str, str]]], message: dict[str, Any]
) -> Any:
    from eth_account.messages import encode_typed_data

    domain = {
        "name": _DOMAIN_NAME,
        "version": "1",
        "chainId": chain_id,
        "verifyingContract": ESCROW,
    }
    full = {
        "types": {
            "EIP712Domain": [
                {"name": "name", "type": "string"},
                {"name": "version", "type": "string"},
                {"name": "chainId", "type": "uint256"},
                {"name": "verifyingContract", "type": "address"},
            ],
            **types,
        },
        "primaryType": primary,
        "domain": domain,
        "message": message,
    }
    return encode_typed_data(full_message=full)


def channel_id(config: ChannelConfig, chain_id: int) -> str:
    """The channel's id: the EIP-712 digest of its configuration (0x, lower-case hex)."""
    from eth_utils.crypto import keccak

    message = config.to_wire()
    message["salt"] = config.salt
    signable = _typed(chain_id, "ChannelConfig", {"ChannelConfig": _CONFIG_FIELDS}, message)
    return "0x" + bytes(keccak(b"\x19\x01" + signable.header + signable.body)).hex()


def recover_voucher(chain_id: int, voucher: Voucher) -> str | None:
    """The address that signed `voucher`, or None when the signature is not ECDSA."""
    from eth_account import Account

    message = {
        "channelId": bytes.fromhex(voucher.channel_id[2:]),
        "maxClaimableAmount": voucher.max_claimable,
    }
    signable = _typed(chain_id, "Voucher", {"Voucher": _VOUCHER_FIELDS}, message)
    try:
        return str(Account.recover_message(signable, signature=voucher.signature))
    except Exception:  # any malformed signature recovers no one
        return None


def voucher_digest(chain_id: int, channel: str, max_claimable: int) -> bytes:
    """The 32-byte digest a voucher signs (what EIP-1271 wallets are asked about)."""
    from eth_utils.crypto import keccak

    message = {"channelId": bytes.fromhex(channel[2:]), "maxClaimableAmount": max_claimable}
    signable = _typed(chain_id, "Voucher", {"Voucher": _VOUCHER_FIELDS}, message)
    return bytes(keccak(b"\x19\x01" + signable.header + signable.body))


def sign_claim_batch(private_key: str, chain_id: int, claims: Sequence[Claim]) -> bytes:
    """The receiver authorizer's signature of `ClaimBatch(ClaimEntry[] claims)`."""
    from eth_account import Account

    entries = [
        {
            "channelId": bytes.fromhex(channel_id(claim.config, chain_id)[2:]),
            "maxClaimableAmount": claim.max_claimable,
            "totalClaimed": claim.total_claimed,
        }
        for claim in claims
    ]
    types = {
        "ClaimBatch": [{"name": "claims", "type": "ClaimEntry[]"}],
        "ClaimEntry": _CLAIM_ENTRY_FIELDS,
    }
    signable = _typed(chain_id, "ClaimBatch", types, {"claims": entries})
    return bytes(Account.sign_message(signable, private_key).signature)


def sign_refund(private_key: str, chain_id: int, channel: str, nonce: int, amount: int) -> bytes:
    """The receiver authorizer's signature of `Refund(channelId, nonce, amount)`."""
    from eth_account import Account

    message = {"channelId": bytes.fromhex(channel[2:]), "nonce": nonce, "amount": amount}
    signable = _typed(chain_id, "Refund", {"Refund": _REFUND_FIELDS}, message)
    return bytes(Account.sign_message(signable, private_key).signature)


# --- the escrow's calldata ---------------------------------------------------------------

_SIGNATURES = {
    "deposit": f"deposit({_CONFIG_ABI},uint128,address,bytes)",
    "claimWithSignature": f"claimWithSignature({_CLAIM_ABI}[],bytes)",
    "settle": "settle(address,address)",
    "refundWithSignature": f"refundWithSignature({_CONFIG_ABI},uint128,uint256,bytes)",
    "multicall": "multicall(bytes[])",
    "channels": "channels(bytes32)",
    "refundNonce": "refundNonce(bytes32)",
    "pendingWithdrawals": "pendingWithdrawals(bytes32)",
    "receivers": "receivers(address,address)",
}


def call_data(function: str, *args: Any) -> bytes:
    """Calldata of one of the escrow's functions (`_SIGNATURES`), ABI-encoded."""
    from eth_abi.abi import encode
    from eth_utils.crypto import keccak

    signature = _SIGNATURES[function]
    types = _argument_types(signature)
    return bytes(keccak(signature.encode()))[:4] + encode(types, list(args))


def _argument_types(signature: str) -> list[str]:
    """`f(a,(b,c),d[])` -> `["a", "(b,c)", "d[]"]` (top-level commas only)."""
    inner = signature[signature.index("(") + 1 : -1]
    types: list[str] = []
    depth = 0
    current = ""
    for char in inner:
        if char == "," and depth == 0:
            types.append(current)
            current = ""
            continue
        depth += (char == "(") - (char == ")")
        current += char
    if current:
        types.append(current)
    return types
