"""The x402 `batch-settlement` scheme on EVM, the payer's side of it: pure, no I/O.

A payment channel: the payer deposits once into the x402 escrow (the merchant's facilitator
relays the deposit and pays its gas), then signs one cumulative EIP-712 voucher per request,
`Voucher(channelId, maxClaimableAmount)`; the merchant claims and settles many vouchers in
batches; the unspent deposit comes back by a cooperative refund or the payer's timed
withdrawal. This module holds what the rail needs and can decide without the network:

- the channel's identity (`ChannelConfig`, `channel_id`: an EIP-712 digest under the escrow's
  domain, so bound to one chain and one escrow), read from a 402 entry (`parse_terms`,
  `channel_config`);
- what is signed (vouchers, and the deposit's ERC-3009 `ReceiveWithAuthorization` or Permit2
  `PermitWitnessTransferFrom`) and the payloads that carry it (`deposit_payload`,
  `voucher_payload`, `refund_payload`);
- what the payer checks of the merchant's answers before it signs again
  (`check_acknowledgement`, `corrective_baseline`): never above what it signed;
- the escrow calls a payer makes or reads (`channels_call`, `initiate_withdraw_call`, ...),
  as calldata and decoders.

Addresses are the escrow's and collectors' canonical CREATE2 addresses, the same on every
chain (a 402 names none of them). Amounts are ints of the token's atomic units; the voucher's
amount is a `uint128`, as in the escrow's `VOUCHER_TYPEHASH`.

Hashing and signing need the `evm` extra (eth-account and its Keccak); they are imported on
first use, so importing this module stays free of them.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, Protocol, cast

from . import evm_words

if TYPE_CHECKING:
    from eth_account.signers.local import LocalAccount
    from eth_typing import Hash32

__all__ = [
    "BUSY_ERROR",
    "CORRECTIVE_ERRORS",
    "ERC3009_COLLECTOR",
    "ESCROW",
    "MAX_WITHDRAW_DELAY",
    "MIN_WITHDRAW_DELAY",
    "PERMIT2",
    "PERMIT2_COLLECTOR",
    "RESYNC_ERRORS",
    "SCHEME",
    "Acknowledgement",
    "BatchTerms",
    "ChannelClaimRefused",
    "ChannelConfig",
    "ChannelState",
    "DigestSigning",
    "VoucherState",
    "channel_config",
    "channels_call",
    "check_acknowledgement",
    "corrective_baseline",
    "decode_channels",
    "decode_pending_withdrawal",
    "decode_uint",
    "deposit_authorization",
    "deposit_payload",
    "erc3009_deposit_nonce",
    "erc3009_deposit_typed_data",
    "finalize_withdraw_call",
    "initiate_withdraw_call",
    "parse_channel_state",
    "parse_terms",
    "parse_voucher_state",
    "pending_withdrawal_call",
    "permit2_deposit_typed_data",
    "refund_nonce_call",
    "refund_payload",
    "sign_voucher",
    "voucher_digest",
    "voucher_payload",
    "voucher_signer",
    "voucher_typed_data",
    "voucher_wire",
]

SCHEME = "batch-settlement"
#: The x402 batch-settlement escrow (`x402BatchSettlement`), the verifying contract of every
#: voucher and channel id.
ESCROW = "0x4020074e9dF2ce1deE5A9C1b5c3f541D02a10003"
#: The deposit collectors: the `to` of an ERC-3009 deposit, the spender of a Permit2 one.
ERC3009_COLLECTOR = "0x4020806089470a89826cB9fB1f4059150b550004"
PERMIT2_COLLECTOR = "0x4020425FAf3B746C082C2f942b4E5159887B0005"
#: Uniswap's Permit2.
PERMIT2 = "0x000000000022D473030F116dDEE9F6B43aC78BA3"
#: The escrow's bounds of a channel's withdraw delay, in seconds (15 minutes, 30 days).
MIN_WITHDRAW_DELAY = 900
MAX_WITHDRAW_DELAY = 2_592_000

_PREFIX = "invalid_batch_settlement_evm_"
#: A 402 that says the merchant's count of the channel differs from the voucher's: the payer
#: resynchronises (`corrective_baseline`) and tries once more.
CORRECTIVE_ERRORS: frozenset[str] = frozenset(
    {_PREFIX + "cumulative_amount_mismatch", _PREFIX + "cumulative_below_claimed"}
)
#: Refusals after which the payer reads the channel on chain again before anything else: the
#: merchant may have refunded the channel on its own initiative (and forgotten it).
RESYNC_ERRORS: frozenset[str] = frozenset(
    {_PREFIX + "cumulative_exceeds_balance", _PREFIX + "channel_not_found"}
)
#: The merchant is serving another request of the channel: try again later, nothing signed
#: was used.
BUSY_ERROR = _PREFIX + "channel_busy"

DOMAIN_NAME = "x402 Batch Settlement"
DOMAIN_VERSION = "1"
EIP712_DOMAIN_TYPE = (
    "EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)"
)
CHANNEL_CONFIG_TYPE = (
    "ChannelConfig(address payer,address payerAuthorizer,address receiver,"
    "address receiverAuthorizer,address token,uint40 withdrawDelay,bytes32 salt)"
)
VOUCHER_TYPE = "Voucher(bytes32 channelId,uint128 maxClaimableAmount)"
RECEIVE_WITH_AUTHORIZATION_TYPE = (
    "ReceiveWithAuthorization(address from,address to,uint256 value,"
    "uint256 validAfter,uint256 validBefore,bytes32 nonce)"
)
PERMIT2_DOMAIN_TYPE = "EIP712Domain(string name,uint256 chainId,address verifyingContract)"
_PERMITTED_TYPE = "TokenPermissions(address token,uint256 amount)"
_DEPOSIT_WITNESS_TYPE = "DepositWitness(bytes32 channelId)"
PERMIT2_DEPOSIT_TYPE = (
    "PermitWitnessTransferFrom(TokenPermissions permitted,address spender,uint256 nonce,"
    "uint256 deadline,DepositWitness witness)"
    "DepositWitness(bytes32 channelId)TokenPermissions(address token,uint256 amount)"
)

UINT128_LIMIT = 1 << 128
UINT256_LIMIT = 1 << 256
#: The longest a deposit authorization may stay valid (the bound the client puts on any
#: 402's `maxTimeoutSeconds`).
MAX_TIMEOUT_SECONDS = 86_400

_ADDRESS_RE = evm_words.ADDRESS_RE
_BYTES32_RE = re.compile(r"\A0x[0-9a-fA-F]{64}\Z")
_DIGITS_RE = re.compile(r"\A(?:0|[1-9][0-9]{0,77})\Z")
_NETWORK_RE = re.compile(r"\Aeip155:([1-9][0-9]{0,76})\Z")
_SIGNATURE_RE = re.compile(r"\A0x[0-9a-fA-F]{130}\Z")
#: secp256k1's group order: a signature whose s is above half of it is refused by the
#: escrow (OpenZeppelin's ECDSA), so it is no voucher.
_SECP256K1_N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141


class DigestSigning(Protocol):
    """A key that signs 32-byte digests, 65 bytes `r ‖ s ‖ v` (v 27/28), as eth-account's
    `LocalAccount` does: the rails' key made once per payer (`DigestSigner`) is one, and
    signs a voucher in a fifth of the time."""

    address: str

    def sign(self, digest: bytes) -> bytes: ...


class ChannelClaimRefused(ValueError):
    """A merchant's account of a channel the payer will not build on: it claims more than
    was signed, or contradicts itself. The payer stops signing on the channel."""


# --- hashing and words -------------------------------------------------------------------


#: Ethereum's Keccak-256 and EIP-55 addresses, shared with every digest the client signs.
keccak256 = evm_words.keccak256
checksum = evm_words.checksum_address
_word = evm_words.uint_word
_address_word = evm_words.address_word


@functools.cache
def _type_hash(type_string: str) -> bytes:
    return keccak256(type_string.encode())


def domain_separator(chain_id: int) -> bytes:
    """The escrow's EIP-712 domain separator on `chain_id` (cached per chain)."""
    # Checked before the cache: True would find 1's entry.
    return _domain_separator(_int(chain_id, "chain_id", 1, UINT256_LIMIT - 1))


@functools.lru_cache(maxsize=64)
def _domain_separator(chain_id: int) -> bytes:
    return keccak256(
        _type_hash(EIP712_DOMAIN_TYPE)
        + keccak256(DOMAIN_NAME.encode())
        + keccak256(DOMAIN_VERSION.encode())
        + _word(chain_id)
        + _address_word(ESCROW)
    )


def _domain(chain_id: int) -> dict[str, Any]:
    return {
        "name": DOMAIN_NAME,
        "version": DOMAIN_VERSION,
        "chainId": chain_id,
        "verifyingContract": ESCROW,
    }


_DOMAIN_FIELDS = [
    {"name": "name", "type": "string"},
    {"name": "version", "type": "string"},
    {"name": "chainId", "type": "uint256"},
    {"name": "verifyingContract", "type": "address"},
]


# --- checking what comes from the wire ---------------------------------------------------


def _address(value: object, name: str, *, zero: bool = False) -> str:
    """`value` as an EIP-55 address; `ValueError` naming `name` if it is not one, or is the
    zero address where `zero` is False."""
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a 0x address string, not {type(value).__name__}")
    if not _ADDRESS_RE.match(value):
        raise ValueError(f"{name} {value[:50]!r} is not a 0x address (0x and 40 hex digits)")
    if not zero and int(value, 16) == 0:
        raise ValueError(f"{name} is the zero address")
    return checksum(value)


def _uint(value: object, name: str, limit: int = UINT128_LIMIT, *, text_only: bool = False) -> int:
    """An unsigned integer below `limit`: a decimal string (or, unless `text_only`, a JSON
    integer); `ValueError` naming `name` otherwise. A bool is no integer."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ValueError(f"{name} must be a decimal string, not {type(value).__name__}")
    if isinstance(value, int):
        if text_only:
            raise ValueError(f"{name} must be a decimal string, not a JSON number")
        number = value
    elif _DIGITS_RE.match(value):
        number = int(value)
    else:
        raise ValueError(f"{name} {value[:40]!r} is not a plain decimal integer")
    if not 0 <= number < limit:
        bits = limit.bit_length() - 1
        raise ValueError(f"{name} is out of range (a uint{bits})")
    return number


def _int(value: object, name: str, low: int, high: int) -> int:
    """A JSON integer (not a bool, not a string) in [low, high]; `ValueError` naming `name`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, not {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{name} {value} is out of range [{low}, {high}]")
    return value


def _bytes32(value: object, name: str) -> str:
    """`0x` + 64 hex digits, returned in lower case; `ValueError` naming `name`."""
    if not isinstance(value, str) or not _BYTES32_RE.match(value):
        raise ValueError(f"{name} must be 0x and 64 hex digits")
    return value.lower()


def _mapping(value: object, name: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{name} must be an object, not {type(value).__name__}")
    return value


# --- the channel -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ChannelConfig:
    """A channel's immutable identity, as the escrow hashes it. Any change is another
    channel. Addresses as given (`channel_config` and `from_wire` give EIP-55 forms);
    `payer_authorizer` may be the zero address (the payer is a smart wallet that signs by
    EIP-1271); `salt` is the payer's choice, `0x` + 64 hex digits, that tells channels of
    equal terms apart."""

    payer: str
    payer_authorizer: str
    receiver: str
    receiver_authorizer: str
    token: str
    withdraw_delay: int
    salt: str

    def __post_init__(self) -> None:
        for name in ("payer", "receiver", "receiver_authorizer", "token"):
            _address(getattr(self, name), name)
        _address(self.payer_authorizer, "payer_authorizer", zero=True)
        _int(self.withdraw_delay, "withdraw_delay", MIN_WITHDRAW_DELAY, MAX_WITHDRAW_DELAY)
        _bytes32(self.salt, "salt")

    def to_wire(self) -> dict[str, Any]:
        """The `channelConfig` of a payload: camelCase, EIP-55 addresses (the zero
        `payerAuthorizer` as forty zeros), `withdrawDelay` a JSON integer."""
        return {
            "payer": checksum(self.payer),
            "payerAuthorizer": checksum(self.payer_authorizer),
            "receiver": checksum(self.receiver),
            "receiverAuthorizer": checksum(self.receiver_authorizer),
            "token": checksum(self.token),
            "withdrawDelay": self.withdraw_delay,
            "salt": self.salt.lower(),
        }

    @classmethod
    def from_wire(cls, raw: object) -> ChannelConfig:
        """Parse a `channelConfig` (a journal's, a payload's); `ValueError` naming the field."""
        data = _mapping(raw, "channelConfig")
        delay = data.get("withdrawDelay")
        return cls(
            payer=_address(data.get("payer"), "channelConfig.payer"),
            payer_authorizer=_address(
                data.get("payerAuthorizer"), "channelConfig.payerAuthorizer", zero=True
            ),
            receiver=_address(data.get("receiver"), "channelConfig.receiver"),
            receiver_authorizer=_address(
                data.get("receiverAuthorizer"), "channelConfig.receiverAuthorizer"
            ),
            token=_address(data.get("token"), "channelConfig.token"),
            withdraw_delay=_int(
                delay, "channelConfig.withdrawDelay", MIN_WITHDRAW_DELAY, MAX_WITHDRAW_DELAY
            ),
            salt=_bytes32(data.get("salt"), "channelConfig.salt"),
        )

    def channel_id(self, chain_id: int) -> str:
        """The channel's id on `chain_id`: the EIP-712 digest of the config under the
        escrow's domain, `0x` + 64 lower-case hex digits (what `getChannelId` returns)."""
        return _channel_id(self, _int(chain_id, "chain_id", 1, UINT256_LIMIT - 1))

    def words(self) -> bytes:
        """The config ABI-encoded as the escrow's tuple: seven 32-byte words."""
        return (
            _address_word(self.payer)
            + _address_word(self.payer_authorizer)
            + _address_word(self.receiver)
            + _address_word(self.receiver_authorizer)
            + _address_word(self.token)
            + _word(self.withdraw_delay)
            + bytes.fromhex(self.salt[2:])
        )


@functools.lru_cache(maxsize=256)
def _channel_id(config: ChannelConfig, chain_id: int) -> str:
    struct_hash = keccak256(_type_hash(CHANNEL_CONFIG_TYPE) + config.words())
    return "0x" + keccak256(b"\x19\x01" + _domain_separator(chain_id) + struct_hash).hex()


# --- the 402 -----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ChannelState:
    """A merchant's account of a channel (`channelState` of a payment response or of a
    corrective 402): the escrow's `balance` and `totalClaimed` as it last saw them, the
    time a withdrawal was asked for (0: none), the refund nonce, and what it has charged
    in all (`None` where it does not say)."""

    channel_id: str
    balance: int
    total_claimed: int
    withdraw_requested_at: int
    refund_nonce: int
    charged_cumulative: int | None


@dataclasses.dataclass(frozen=True)
class VoucherState:
    """The last voucher a merchant holds of the channel (`voucherState`, corrective 402)."""

    signed_max_claimable: int
    signature: str


@dataclasses.dataclass(frozen=True)
class BatchTerms:
    """What one `batch-settlement` entry of a 402 says. Addresses EIP-55; amounts atomic.
    `min_deposit` is the merchant's suggested deposit (a hint, `None` when absent or
    unusable); `channel_state` and `voucher_state` come only in a corrective 402."""

    network: str
    chain_id: int
    asset: str
    pay_to: str
    amount: int
    max_timeout_seconds: int
    receiver_authorizer: str
    withdraw_delay: int
    token_name: str
    token_version: str
    transfer_method: Literal["eip3009", "permit2"]
    min_deposit: int | None
    channel_state: ChannelState | None
    voucher_state: VoucherState | None


def parse_terms(accept: Mapping[str, Any]) -> BatchTerms:
    """Read a `batch-settlement` accept entry; `ValueError` naming the first bad field.

    Refused: another scheme; a network that is not `eip155:<chain id>`; an `amount` that is
    not a decimal string of a uint128 above zero; a zero or malformed `asset`, `payTo` or
    `extra.receiverAuthorizer`; a `maxTimeoutSeconds` that is not an integer in [1, 86400];
    an `extra.withdrawDelay` that is not a JSON integer in [900, 2592000] (a bool is no
    integer, a string no number: the escrow hashes the number, and a guess would make
    another channel); an `extra.assetTransferMethod` other than `eip3009` (the default) and
    `permit2`; an ERC-3009 entry without the token's EIP-712 `extra.name` and
    `extra.version` (a Permit2 entry does not need them: Permit2 has its own domain);
    a malformed `extra.channelState` or `extra.voucherState` (a corrective 402's claims are
    verified before they are used, and one that cannot be read is not guessed at; a
    `voucherState` whose signature is the bare `0x` of a merchant holding no voucher
    reads as none).

    `extra.minDeposit` is a hint (not in the scheme's spec; the foundation's servers send
    it) that only sizes a deposit the payer decides and caps itself: one that is not a
    decimal uint128 string, or is below `amount`, is ignored (`min_deposit=None`) rather
    than refused, so that a merchant's bad hint costs the payer nothing and refuses nothing.
    """
    accept = _mapping(accept, "the accept entry")
    scheme = accept.get("scheme")
    if scheme != SCHEME:
        raise ValueError(f"scheme {str(scheme)[:40]!r} is not {SCHEME!r}")
    network = accept.get("network")
    found = _NETWORK_RE.match(network) if isinstance(network, str) else None
    if found is None:
        raise ValueError(f"network {str(network)[:40]!r} is not an eip155:<chain id> network")
    amount = _uint(accept.get("amount"), "amount", text_only=True)
    if amount == 0:
        raise ValueError("amount must be greater than zero")
    return BatchTerms(
        network=str(network),
        chain_id=int(found.group(1)),
        asset=_address(accept.get("asset"), "asset"),
        pay_to=_address(accept.get("payTo"), "payTo"),
        amount=amount,
        max_timeout_seconds=_int(
            accept.get("maxTimeoutSeconds"), "maxTimeoutSeconds", 1, MAX_TIMEOUT_SECONDS
        ),
        **_extra_terms(_mapping(accept.get("extra"), "extra"), amount),
    )


def _extra_terms(extra: Mapping[str, Any], amount: int) -> dict[str, Any]:
    """The `BatchTerms` fields an entry's `extra` gives (see `parse_terms`)."""
    method = extra.get("assetTransferMethod", "eip3009")
    if method not in ("eip3009", "permit2"):
        raise ValueError(f"extra.assetTransferMethod {str(method)[:40]!r} is not supported")
    name, version = _token_domain(extra, method)
    channel_state, voucher_state = extra.get("channelState"), extra.get("voucherState")
    if isinstance(voucher_state, Mapping) and voucher_state.get("signature") == "0x":
        voucher_state = None  # the foundation's merchant holding no voucher of the channel
    return {
        "receiver_authorizer": _address(
            extra.get("receiverAuthorizer"), "extra.receiverAuthorizer"
        ),
        "withdraw_delay": _int(
            extra.get("withdrawDelay"),
            "extra.withdrawDelay",
            MIN_WITHDRAW_DELAY,
            MAX_WITHDRAW_DELAY,
        ),
        "token_name": name,
        "token_version": version,
        "transfer_method": method,
        "min_deposit": _min_deposit(extra.get("minDeposit"), amount),
        "channel_state": None
        if channel_state is None
        else parse_channel_state(channel_state, "extra.channelState"),
        "voucher_state": None
        if voucher_state is None
        else parse_voucher_state(voucher_state, "extra.voucherState"),
    }


def _token_domain(extra: Mapping[str, Any], method: str) -> tuple[str, str]:
    """The token's EIP-712 name and version: required for ERC-3009, optional for Permit2."""
    name, version = extra.get("name"), extra.get("version")
    if method == "permit2":
        return (
            name if isinstance(name, str) else "",
            version if isinstance(version, str) else "",
        )
    for field, value in (("extra.name", name), ("extra.version", version)):
        if not isinstance(value, str) or not value:
            raise ValueError(f"{field} (the token's EIP-712 domain) is missing")
        if len(value) > 100:
            raise ValueError(f"{field} is implausibly long")
    return str(name), str(version)


def _min_deposit(value: object, amount: int) -> int | None:
    """The merchant's deposit hint when usable (see `parse_terms`), else None."""
    if not isinstance(value, str) or not _DIGITS_RE.match(value):
        return None
    hint = int(value)
    return hint if amount <= hint < UINT128_LIMIT else None


def parse_channel_state(raw: object, name: str = "channelState") -> ChannelState:
    """Read a merchant's `channelState`; `ValueError` naming the field. `channelId`,
    `balance` and `totalClaimed` are required; `withdrawRequestedAt` (a unix time) and
    `refundNonce` default to 0, `chargedCumulativeAmount` to None. Amounts are decimal
    strings (JSON integers are taken too)."""
    data = _mapping(raw, name)
    charged = data.get("chargedCumulativeAmount")
    return ChannelState(
        channel_id=_bytes32(data.get("channelId"), f"{name}.channelId"),
        balance=_uint(data.get("balance"), f"{name}.balance"),
        total_claimed=_uint(data.get("totalClaimed"), f"{name}.totalClaimed"),
        withdraw_requested_at=_int(
            data.get("withdrawRequestedAt", 0), f"{name}.withdrawRequestedAt", 0, (1 << 40) - 1
        ),
        refund_nonce=_uint(data.get("refundNonce", 0), f"{name}.refundNonce", UINT256_LIMIT),
        charged_cumulative=None
        if charged is None
        else _uint(charged, f"{name}.chargedCumulativeAmount"),
    )


def parse_voucher_state(raw: object, name: str = "voucherState") -> VoucherState:
    """Read a merchant's `voucherState`; `ValueError` naming the field. The signature is
    only checked for shape (65 bytes of hex): whose it is, `voucher_signer` says."""
    data = _mapping(raw, name)
    signature = data.get("signature")
    if not isinstance(signature, str) or not _SIGNATURE_RE.match(signature):
        raise ValueError(f"{name}.signature must be 0x and 130 hex digits (65 bytes)")
    return VoucherState(
        signed_max_claimable=_uint(data.get("signedMaxClaimable"), f"{name}.signedMaxClaimable"),
        signature=signature.lower(),
    )


def channel_config(
    terms: BatchTerms, payer: str, salt: str, payer_authorizer: str | None = None
) -> ChannelConfig:
    """The channel a payer opens with a merchant on these terms: `payTo` receives,
    `extra.receiverAuthorizer` authorizes, `asset` is the token, `extra.withdrawDelay` the
    delay; `payer_authorizer` (the key that signs vouchers) defaults to the payer itself,
    so an ordinary account's vouchers are checked by plain ECDSA."""
    return ChannelConfig(
        payer=_address(payer, "payer"),
        payer_authorizer=_address(
            payer if payer_authorizer is None else payer_authorizer, "payer_authorizer", zero=True
        ),
        receiver=terms.pay_to,
        receiver_authorizer=terms.receiver_authorizer,
        token=terms.asset,
        withdraw_delay=terms.withdraw_delay,
        salt=_bytes32(salt, "salt"),
    )


# --- vouchers ----------------------------------------------------------------------------


def _voucher_fields(channel_id: str, max_claimable: int) -> bytes:
    _bytes32(channel_id, "channel_id")
    if isinstance(max_claimable, bool) or not isinstance(max_claimable, int):
        raise ValueError("max_claimable must be an int")
    if not 0 <= max_claimable < UINT128_LIMIT:
        raise ValueError("max_claimable is out of range (a uint128)")
    return bytes.fromhex(channel_id[2:]) + _word(max_claimable)


def voucher_digest(channel_id: str, max_claimable: int, chain_id: int) -> bytes:
    """The EIP-712 digest a voucher signs (what the escrow's `getVoucherDigest` returns)."""
    struct_hash = keccak256(_type_hash(VOUCHER_TYPE) + _voucher_fields(channel_id, max_claimable))
    return keccak256(b"\x19\x01" + domain_separator(chain_id) + struct_hash)


def voucher_typed_data(channel_id: str, max_claimable: int, chain_id: int) -> dict[str, Any]:
    """The voucher as a full EIP-712 document (eth-account's `full_message`)."""
    _voucher_fields(channel_id, max_claimable)
    return {
        "types": {
            "EIP712Domain": list(_DOMAIN_FIELDS),
            "Voucher": [
                {"name": "channelId", "type": "bytes32"},
                {"name": "maxClaimableAmount", "type": "uint128"},
            ],
        },
        "primaryType": "Voucher",
        "domain": _domain(chain_id),
        "message": {
            "channelId": bytes.fromhex(channel_id[2:]),
            "maxClaimableAmount": max_claimable,
        },
    }


def _signature_hex(account: LocalAccount | DigestSigning, digest: bytes) -> str:
    unsafe_sign_hash = getattr(account, "unsafe_sign_hash", None)
    if unsafe_sign_hash is not None:
        raw = bytes(unsafe_sign_hash(cast("Hash32", digest)).signature)
    else:
        raw = cast("DigestSigning", account).sign(digest)
    if len(raw) != 65:
        raise ValueError("a signature is 65 bytes")
    return "0x" + raw.hex()


def sign_voucher(
    account: LocalAccount | DigestSigning, channel_id: str, max_claimable: int, chain_id: int
) -> str:
    """The payer authorizer's signature of `Voucher(channel_id, max_claimable)`: `0x` + 130
    hex digits, deterministic (RFC 6979), byte for byte eth-account's `sign_typed_data`.
    `account` is eth-account's account or any `DigestSigning` key."""
    return _signature_hex(account, voucher_digest(channel_id, max_claimable, chain_id))


def voucher_signer(
    channel_id: str, max_claimable: int, chain_id: int, signature: str
) -> str | None:
    """The EIP-55 address whose key signed `Voucher(channel_id, max_claimable)` with
    `signature`, or None when it is no valid ECDSA signature the escrow would accept
    (malformed, v not 27/28 or 0/1, s in the upper half of the curve's order)."""
    if not isinstance(signature, str) or not _SIGNATURE_RE.match(signature):
        return None
    raw = bytes.fromhex(signature[2:])
    v = raw[64] - 27 if raw[64] >= 27 else raw[64]
    s = int.from_bytes(raw[32:64], "big")
    if v not in (0, 1) or not 0 < s <= _SECP256K1_N // 2:
        return None
    digest = voucher_digest(channel_id, max_claimable, chain_id)
    from eth_keys.datatypes import Signature
    from eth_keys.exceptions import BadSignature
    from eth_utils.exceptions import ValidationError

    try:
        key = Signature(raw[:64] + bytes((v,))).recover_public_key_from_msg_hash(digest)
    except (BadSignature, ValidationError):
        return None
    return checksum(str(key.to_checksum_address()))


def voucher_wire(channel_id: str, max_claimable: int, signature: str) -> dict[str, Any]:
    """A payload's `voucher`: the channel id, the cumulative ceiling as a decimal string,
    the signature."""
    _voucher_fields(channel_id, max_claimable)
    if not _SIGNATURE_RE.match(signature):
        raise ValueError("signature must be 0x and 130 hex digits (65 bytes)")
    return {
        "channelId": channel_id.lower(),
        "maxClaimableAmount": str(max_claimable),
        "signature": signature,
    }


# --- deposits ----------------------------------------------------------------------------


def _deposit_amount(amount: int) -> int:
    if isinstance(amount, bool) or not isinstance(amount, int):
        raise ValueError("a deposit's amount must be an int")
    if not 0 < amount < UINT128_LIMIT:
        raise ValueError("a deposit's amount must be above zero and a uint128")
    return amount


def _uint256(value: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < UINT256_LIMIT:
        raise ValueError(f"{name} must be an int in uint256 range")
    return value


def erc3009_deposit_nonce(channel_id: str, salt: int) -> str:
    """The ERC-3009 nonce of a deposit, `keccak256(abi.encode(bytes32 channelId, uint256
    salt))`: what binds the authorization to one channel (the collector recomputes it)."""
    channel = bytes.fromhex(_bytes32(channel_id, "channel_id")[2:])
    return "0x" + keccak256(channel + _word(_uint256(salt, "salt"))).hex()


@functools.lru_cache(maxsize=64)
def _token_domain_separator(name: str, version: str, chain_id: int, token: str) -> bytes:
    return keccak256(
        _type_hash(EIP712_DOMAIN_TYPE)
        + keccak256(name.encode())
        + keccak256(version.encode())
        + _word(chain_id)
        + _address_word(token)
    )


def erc3009_deposit_typed_data(
    terms: BatchTerms, payer: str, amount: int, valid_before: int, salt: int, channel_id: str
) -> dict[str, Any]:
    """The ERC-3009 `ReceiveWithAuthorization` of a deposit, as a full EIP-712 document on
    the token's domain: from the payer to the ERC-3009 collector, `validAfter` 0, the nonce
    `erc3009_deposit_nonce(channel_id, salt)`."""
    nonce = erc3009_deposit_nonce(channel_id, salt)
    return {
        "types": {
            "EIP712Domain": list(_DOMAIN_FIELDS),
            "ReceiveWithAuthorization": [
                {"name": "from", "type": "address"},
                {"name": "to", "type": "address"},
                {"name": "value", "type": "uint256"},
                {"name": "validAfter", "type": "uint256"},
                {"name": "validBefore", "type": "uint256"},
                {"name": "nonce", "type": "bytes32"},
            ],
        },
        "primaryType": "ReceiveWithAuthorization",
        "domain": {
            "name": terms.token_name,
            "version": terms.token_version,
            "chainId": terms.chain_id,
            "verifyingContract": terms.asset,
        },
        "message": {
            "from": _address(payer, "payer"),
            "to": ERC3009_COLLECTOR,
            "value": _deposit_amount(amount),
            "validAfter": 0,
            "validBefore": _uint256(valid_before, "valid_before"),
            "nonce": bytes.fromhex(nonce[2:]),
        },
    }


def _erc3009_digest(document: Mapping[str, Any]) -> bytes:
    domain, message = document["domain"], document["message"]
    separator = _token_domain_separator(
        domain["name"], domain["version"], domain["chainId"], domain["verifyingContract"]
    )
    struct_hash = keccak256(
        _type_hash(RECEIVE_WITH_AUTHORIZATION_TYPE)
        + _address_word(message["from"])
        + _address_word(message["to"])
        + _word(message["value"])
        + _word(message["validAfter"])
        + _word(message["validBefore"])
        + message["nonce"]
    )
    return keccak256(b"\x19\x01" + separator + struct_hash)


def permit2_deposit_typed_data(
    terms: BatchTerms, payer: str, amount: int, nonce: int, deadline: int, channel_id: str
) -> dict[str, Any]:
    """The Permit2 `PermitWitnessTransferFrom` of a deposit, as a full EIP-712 document on
    Permit2's domain: exactly `amount` of the token, spent by the Permit2 collector, the
    witness binding it to `channel_id`. (`payer` signs it; Permit2's message names no
    owner.)"""
    _address(payer, "payer")
    return {
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
        "domain": {"name": "Permit2", "chainId": terms.chain_id, "verifyingContract": PERMIT2},
        "message": {
            "permitted": {"token": terms.asset, "amount": _deposit_amount(amount)},
            "spender": PERMIT2_COLLECTOR,
            "nonce": _uint256(nonce, "nonce"),
            "deadline": _uint256(deadline, "deadline"),
            "witness": {"channelId": bytes.fromhex(_bytes32(channel_id, "channel_id")[2:])},
        },
    }


def _permit2_digest(document: Mapping[str, Any]) -> bytes:
    domain, message = document["domain"], document["message"]
    separator = keccak256(
        _type_hash(PERMIT2_DOMAIN_TYPE)
        + keccak256(b"Permit2")
        + _word(domain["chainId"])
        + _address_word(PERMIT2)
    )
    permitted = message["permitted"]
    struct_hash = keccak256(
        _type_hash(PERMIT2_DEPOSIT_TYPE)
        + keccak256(
            _type_hash(_PERMITTED_TYPE)
            + _address_word(permitted["token"])
            + _word(permitted["amount"])
        )
        + _address_word(message["spender"])
        + _word(message["nonce"])
        + _word(message["deadline"])
        + keccak256(_type_hash(_DEPOSIT_WITNESS_TYPE) + message["witness"]["channelId"])
    )
    return keccak256(b"\x19\x01" + separator + struct_hash)


def deposit_authorization(
    account: LocalAccount | DigestSigning,
    terms: BatchTerms,
    amount: int,
    channel_id: str,
    now: int,
    random: Callable[[int], bytes] = os.urandom,
) -> dict[str, Any]:
    """The payer's signed authorization of a deposit of `amount` into `channel_id`, valid
    for the entry's `maxTimeoutSeconds` from `now`: `{"erc3009Authorization": {...}}` (a
    fresh random 32-byte salt) or `{"permit2Authorization": {...}}` (a fresh random uint256
    nonce), as a deposit payload's `deposit.authorization` carries it."""
    payer = checksum(account.address)
    until = int(now) + terms.max_timeout_seconds
    fresh = random(32)
    if not isinstance(fresh, bytes) or len(fresh) != 32:
        raise ValueError("random(32) must give 32 bytes")
    number = int.from_bytes(fresh, "big")
    if terms.transfer_method == "permit2":
        document = permit2_deposit_typed_data(terms, payer, amount, number, until, channel_id)
        return {
            "permit2Authorization": {
                "from": payer,
                "permitted": {"token": terms.asset, "amount": str(amount)},
                "spender": PERMIT2_COLLECTOR,
                "nonce": str(number),
                "deadline": str(until),
                "witness": {"channelId": channel_id.lower()},
                "signature": _signature_hex(account, _permit2_digest(document)),
            }
        }
    document = erc3009_deposit_typed_data(terms, payer, amount, until, number, channel_id)
    return {
        "erc3009Authorization": {
            "validAfter": "0",
            "validBefore": str(until),
            "salt": "0x" + fresh.hex(),
            "signature": _signature_hex(account, _erc3009_digest(document)),
        }
    }


# --- payloads ----------------------------------------------------------------------------


def _checked_voucher(voucher: Mapping[str, Any]) -> dict[str, Any]:
    """A payload's voucher as `voucher_wire` makes it; `ValueError` otherwise."""
    if not isinstance(voucher, Mapping) or set(voucher) != {
        "channelId",
        "maxClaimableAmount",
        "signature",
    }:
        raise ValueError("a voucher is channelId, maxClaimableAmount and signature (voucher_wire)")
    ceiling = _uint(voucher["maxClaimableAmount"], "voucher.maxClaimableAmount", text_only=True)
    return voucher_wire(voucher["channelId"], ceiling, voucher["signature"])


def deposit_payload(
    config: ChannelConfig, voucher: dict[str, Any], amount: int, authorization: dict[str, Any]
) -> dict[str, Any]:
    """A `deposit` payload: open or top up the channel with `amount`, and the voucher of
    the request it pays (`voucher_wire`); `authorization` from `deposit_authorization`."""
    if len(authorization) != 1 or not {"erc3009Authorization", "permit2Authorization"} >= set(
        authorization
    ):
        raise ValueError(
            "a deposit carries exactly one erc3009Authorization or permit2Authorization"
        )
    return {
        "type": "deposit",
        "channelConfig": config.to_wire(),
        "voucher": _checked_voucher(voucher),
        "deposit": {"amount": str(_deposit_amount(amount)), "authorization": authorization},
    }


def voucher_payload(config: ChannelConfig, voucher: dict[str, Any]) -> dict[str, Any]:
    """A `voucher` payload: pay a request from the funded channel."""
    return {
        "type": "voucher",
        "channelConfig": config.to_wire(),
        "voucher": _checked_voucher(voucher),
    }


def refund_payload(
    config: ChannelConfig, voucher: dict[str, Any], amount: int | None = None
) -> dict[str, Any]:
    """A `refund` payload: ask the merchant to refund `amount` of the unspent deposit (all
    of it when None). Its voucher charges nothing: its ceiling is what was charged."""
    payload = {
        "type": "refund",
        "channelConfig": config.to_wire(),
        "voucher": _checked_voucher(voucher),
    }
    if amount is not None:
        payload["amount"] = str(_deposit_amount(amount))
    return payload


# --- the merchant's answers --------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Acknowledgement:
    """What a checked payment response of a voucher or deposit says: the request's charge,
    the channel's charged total after it, and the escrow's balance and claimed total as the
    merchant last saw them (`None` where it does not say)."""

    charged: int
    charged_cumulative: int
    balance: int | None
    total_claimed: int | None


def _claimed(data: Mapping[str, Any], key: str, name: str) -> int | None:
    """An amount of the merchant's answer, None when absent; a malformed one is refused."""
    value = data.get(key)
    if value is None:
        return None
    try:
        return _uint(value, name)
    except ValueError as exc:
        raise ChannelClaimRefused(f"the merchant's payment response is malformed: {exc}") from None


def check_acknowledgement(
    settlement: Mapping[str, Any],
    *,
    channel_id: str,
    amount: int,
    previous_charged: int,
    signed: int,
    expected_balance: int | None = None,
) -> Acknowledgement:
    """Check a merchant's payment response for a request priced `amount`, whose voucher's
    ceiling was `signed`, on a channel charged `previous_charged` before it (the scheme's
    client rules 1-4, and never above what was signed):

    1. `extra.chargedAmount` <= `amount`;
    2. `extra.channelState.chargedCumulativeAmount` == `previous_charged` + the charge, and
       <= `signed`;
    3. `extra.channelState.balance` is consistent with what the caller expects: equal to
       `expected_balance` when it passes one (a balance it read or computed); without
       one the balance is reported, not judged (a merchant that says the channel holds
       less than it charged only says it cannot claim it all);
    4. `extra.channelState.channelId` is `channel_id`.

    Also refused: a `totalClaimed` above the charged total (the merchant claimed what it
    says it did not charge). Any failure raises `ChannelClaimRefused` saying what the
    merchant claimed against what was signed; the payer stops signing on the channel.

    Where the scheme is silent the check is lenient, assuming the worst for the payer: a
    response without `chargedAmount` is read as charging the whole `amount` (or what its
    `chargedCumulativeAmount` implies), a missing `channelState` or field of it is not
    checked and shows as `None`. The rule that matters never bends: the acknowledged
    total is never above `signed`. Whether the response says `success` is the caller's
    to check.
    """
    if not 0 <= previous_charged <= signed or amount < 0:
        raise ValueError("previous_charged must be in [0, signed] and amount non-negative")
    extra = settlement.get("extra") or {}
    state = extra.get("channelState") if isinstance(extra, Mapping) else None
    if not isinstance(extra, Mapping) or not isinstance(state, (Mapping, type(None))):
        raise ChannelClaimRefused("the merchant's payment response is malformed: extra")
    state = state or {}
    reported = _claimed(state, "chargedCumulativeAmount", "channelState.chargedCumulativeAmount")
    charged = _claimed(extra, "chargedAmount", "chargedAmount")
    if charged is None:
        charged = amount if reported is None else reported - previous_charged
    if not 0 <= charged <= amount:
        raise ChannelClaimRefused(
            f"the merchant claims to have charged {charged} for a request priced at most "
            f"{amount} (charged total {reported}, {previous_charged} before it)"
        )
    cumulative = previous_charged + charged
    _check_totals(state, channel_id, cumulative, reported, signed, expected_balance)
    return Acknowledgement(
        charged=charged,
        charged_cumulative=cumulative,
        balance=_claimed(state, "balance", "channelState.balance"),
        total_claimed=_claimed(state, "totalClaimed", "channelState.totalClaimed"),
    )


def _check_totals(
    state: Mapping[str, Any],
    channel_id: str,
    cumulative: int,
    reported: int | None,
    signed: int,
    expected_balance: int | None,
) -> None:
    """Rules 2-4 of `check_acknowledgement` and its ceiling."""
    # A total above what was signed is said as such: it is the claim the payer never owed.
    if reported is not None and reported > signed:
        raise ChannelClaimRefused(
            f"the merchant claims a charged total of {reported}, above the {signed} signed"
        )
    if reported is not None and reported != cumulative:
        raise ChannelClaimRefused(
            f"the merchant's charged total {reported} is not the {cumulative} its charge adds up to"
        )
    if cumulative > signed:
        raise ChannelClaimRefused(
            f"the merchant claims a charged total of {cumulative}, above the {signed} signed"
        )
    reported_id = state.get("channelId")
    if reported_id is not None and (
        not isinstance(reported_id, str) or reported_id.lower() != channel_id.lower()
    ):
        raise ChannelClaimRefused(
            f"the merchant answers for channel {str(reported_id)[:70]!r}, not {channel_id}"
        )
    balance = _claimed(state, "balance", "channelState.balance")
    if balance is not None and expected_balance is not None and balance != expected_balance:
        raise ChannelClaimRefused(
            f"the merchant says the channel holds {balance}, the chain {expected_balance}"
        )
    claimed = _claimed(state, "totalClaimed", "channelState.totalClaimed")
    if claimed is not None and claimed > cumulative:
        raise ChannelClaimRefused(
            f"the merchant says it claimed {claimed}, more than the {cumulative} it charged"
        )


def corrective_baseline(
    terms: BatchTerms,
    *,
    channel_id: str,
    chain_id: int,
    payer_authorizer: str,
    signed: int,
    acknowledged: int,
    chain_total_claimed: int,
    chain_balance: int,
) -> int:
    """The charged total the next voucher builds on (`next = baseline + terms.amount`)
    after a corrective 402 (`CORRECTIVE_ERRORS`) whose entry is `terms`. `signed` is the
    highest cumulative amount this payer ever signed on the channel (its journal, the
    refused request's own voucher included), `acknowledged` the highest charged total it
    verified in a payment response, `chain_total_claimed` and `chain_balance` the escrow's
    `channels(channel_id)` read just now.

    The rule, and why:

    - Refused (`ChannelClaimRefused`, the payer stops signing on the channel) when the
      merchant claims to have charged more than was ever signed; when it holds a voucher
      of this payer above `signed` (one the journal does not know: signed elsewhere); when
      the chain shows more claimed than was ever signed. Nothing above `signed` was
      authorized, and the journal no longer knows the channel.
    - The merchant's charged total is adopted when it proves it, and only then: its
      `voucherState` signature recovers to `payer_authorizer` over `(channel_id,
      signedMaxClaimable)` (an ECDSA key: a smart-wallet channel's vouchers cannot be
      checked here), `signedMaxClaimable <= signed`, `channelState.channelId` is this
      channel, and `chain_total_claimed <= chargedCumulativeAmount <= signedMaxClaimable`
      and `<= chain_balance`. The baseline is then that total, or `acknowledged` if higher:
      a total the merchant itself acknowledged before is never given up (the next voucher
      would reuse a cumulative amount already signed for a charge it made). Below
      `signed` it may be: the vouchers between were, on the merchant's own word, charged
      for nothing, and a merchant that understates what it charged loses only its own
      money. Re-signing such a voucher adds nothing the merchant could claim: the payer's
      exposure stays the highest voucher it signed, and a request whose voucher was
      refused or failed is thereby paid at most once.
    - Otherwise (no voucher state, not ours, not consistent with the chain) the claim is
      not built on and the baseline is `signed`: every voucher signed may have been
      charged, so the next one is above all of them and never reuses a cumulative amount
      that may pay another charge (a merchant whose count differs refuses it again, and
      nothing more is signed on its word). The chain's claimed total is no baseline for a
      payer that keeps a journal: it lags every unclaimed voucher.
    """
    _check_counts(channel_id, signed, acknowledged, chain_total_claimed, chain_balance)
    claimed = terms.channel_state.charged_cumulative if terms.channel_state else None
    if (claimed or 0) > signed:
        raise ChannelClaimRefused(
            f"the merchant claims to have charged {claimed} on channel {channel_id}, above "
            f"the {signed} signed"
        )
    proven = _proven_charge(
        terms, channel_id, chain_id, payer_authorizer, signed, chain_total_claimed, chain_balance
    )
    return signed if proven is None else max(proven, acknowledged)


def _check_counts(
    channel_id: str, signed: int, acknowledged: int, chain_total_claimed: int, chain_balance: int
) -> None:
    """The counts `corrective_baseline` is given: uints, consistent; the chain's claims
    above what was signed are refused."""
    counts = {
        "signed": signed,
        "acknowledged": acknowledged,
        "chain_total_claimed": chain_total_claimed,
        "chain_balance": chain_balance,
    }
    for name, value in counts.items():
        _uint(value, name)
    if acknowledged > signed:
        raise ValueError("acknowledged cannot exceed signed")
    if chain_total_claimed > signed:
        raise ChannelClaimRefused(
            f"the escrow shows {chain_total_claimed} claimed on channel {channel_id}, above "
            f"the {signed} this payer signed: vouchers were signed that it does not know"
        )


def _proven_charge(
    terms: BatchTerms,
    channel_id: str,
    chain_id: int,
    payer_authorizer: str,
    signed: int,
    chain_total_claimed: int,
    chain_balance: int,
) -> int | None:
    """The merchant's charged total when its corrective 402 proves it (see
    `corrective_baseline`), else None."""
    state, voucher = terms.channel_state, terms.voucher_state
    if state is None or voucher is None or state.charged_cumulative is None:
        return None
    if state.channel_id != channel_id.lower():
        return None
    expected = _address(payer_authorizer, "payer_authorizer", zero=True)
    ceiling = voucher.signed_max_claimable
    signer = voucher_signer(channel_id, ceiling, chain_id, voucher.signature)
    if signer is None or int(expected, 16) == 0 or signer != expected:
        return None
    if ceiling > signed:
        raise ChannelClaimRefused(
            f"the merchant holds a voucher of this payer for {ceiling} on channel "
            f"{channel_id}, above the {signed} this payer knows it signed"
        )
    charged = state.charged_cumulative
    if not chain_total_claimed <= charged <= min(ceiling, chain_balance):
        return None
    return charged


# --- escrow calls ------------------------------------------------------------------------

#: Selectors of the escrow's functions a payer calls or reads.
_CHANNELS = bytes.fromhex("7a7ebd7b")  # channels(bytes32)
_REFUND_NONCE = bytes.fromhex("f0dc792e")  # refundNonce(bytes32)
_PENDING_WITHDRAWALS = bytes.fromhex("b7f06ebe")  # pendingWithdrawals(bytes32)
#: initiateWithdraw((address,address,address,address,address,uint40,bytes32),uint128)
_INITIATE_WITHDRAW = bytes.fromhex("cf5cf3dc")
#: finalizeWithdraw((address,address,address,address,address,uint40,bytes32))
_FINALIZE_WITHDRAW = bytes.fromhex("e88377b1")


def _channel_word(channel_id: str) -> bytes:
    return bytes.fromhex(_bytes32(channel_id, "channel_id")[2:])


def channels_call(channel_id: str) -> bytes:
    """Calldata of the escrow's `channels(channelId)`: the channel's balance and claimed
    total (`decode_channels`)."""
    return _CHANNELS + _channel_word(channel_id)


def refund_nonce_call(channel_id: str) -> bytes:
    """Calldata of the escrow's `refundNonce(channelId)` (`decode_uint`)."""
    return _REFUND_NONCE + _channel_word(channel_id)


def pending_withdrawal_call(channel_id: str) -> bytes:
    """Calldata of the escrow's `pendingWithdrawals(channelId)`
    (`decode_pending_withdrawal`)."""
    return _PENDING_WITHDRAWALS + _channel_word(channel_id)


def _words(data: bytes, count: int, what: str) -> list[int]:
    if not isinstance(data, (bytes, bytearray)) or len(data) != 32 * count:
        size = len(data) if isinstance(data, (bytes, bytearray)) else type(data).__name__
        raise ValueError(
            f"the escrow's {what} answered {size} bytes, not {32 * count} "
            f"(is the escrow deployed at {ESCROW} on this chain?)"
        )
    return [int.from_bytes(data[i : i + 32], "big") for i in range(0, len(data), 32)]


def decode_channels(data: bytes) -> tuple[int, int]:
    """`channels(channelId)`'s answer: (balance, totalClaimed); `ValueError` if it is not
    two uint128 words."""
    balance, claimed = _words(data, 2, "channels")
    if balance >= UINT128_LIMIT or claimed >= UINT128_LIMIT:
        raise ValueError("the escrow's channels answered a value beyond uint128")
    return balance, claimed


def decode_uint(data: bytes) -> int:
    """A one-word uint256 answer (`refundNonce`)."""
    return _words(data, 1, "call")[0]


def decode_pending_withdrawal(data: bytes) -> tuple[int, int]:
    """`pendingWithdrawals(channelId)`'s answer: (amount, initiatedAt); (0, 0) when none is
    pending."""
    amount, initiated_at = _words(data, 2, "pendingWithdrawals")
    if amount >= UINT128_LIMIT or initiated_at >= 1 << 40:
        raise ValueError("the escrow's pendingWithdrawals answered a value beyond its types")
    return amount, initiated_at


def initiate_withdraw_call(config: ChannelConfig, amount: int) -> bytes:
    """Calldata of the escrow's `initiateWithdraw(config, amount)`: the payer (or its
    authorizer) asks for `amount` of the unclaimed deposit back after the withdraw delay."""
    return _INITIATE_WITHDRAW + config.words() + _word(_deposit_amount(amount))


def finalize_withdraw_call(config: ChannelConfig) -> bytes:
    """Calldata of the escrow's `finalizeWithdraw(config)`, once the delay has passed."""
    return _FINALIZE_WITHDRAW + config.words()
