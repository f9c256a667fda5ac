"""The `eip3009` rail: pay the standard x402 `exact` scheme on EVM chains by signing an
EIP-3009 `TransferWithAuthorization` (Circle's EURC and USDC, or a token you declare).

The merchant's facilitator calls the token's `transferWithAuthorization` and pays the gas;
this rail only signs. Paying one entry costs no I/O at all: no RPC call (the nonce is 32
random bytes, not a counter read from the chain), no facilitator call. `describe` decides
everything from the entry and the asset table (`_assets`); `pay` signs and yields the
scheme's payload, which the dialect layer frames as `PAYMENT-SIGNATURE` (v2) or
`X-PAYMENT` (v1).

What is signed (x402 `exact` on EVM, as the x402 foundation's clients sign it):

    domain  {name: extra.name, version: extra.version, chainId, verifyingContract: asset}
    message TransferWithAuthorization(from, to=payTo, value=amount, validAfter,
                                      validBefore=now+maxTimeoutSeconds, nonce)

Time window, a documented choice that copies the foundation's clients per dialect: a v2
entry (network `eip155:<id>`) gets `validAfter = 0`, a v1 entry (a network name such as
`base-sepolia`) `validAfter = now - 600`. Both pass every facilitator's
`validAfter <= now` check, whatever the clocks say.

Signing is the fastest correct path the dependencies allow: the EIP-712 digest is
computed here (`0x1901 ‖ domainSeparator` cached per chain, token, name and version, the
payer's part of the struct hash once per key) and signed with the key object made once per
rail. `coincurve` (libsecp256k1) signs when installed,
else eth-keys' own backend. Signatures are deterministic (RFC 6979, low s), byte for
byte what eth-account's `sign_typed_data` produces; the tests hold it to that.

eth-keys and the keccak implementation (the `evm` extra) are imported on first use;
importing this module stays free of them.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from collections.abc import Mapping
from typing import Any

from .._protocol.assets import Asset
from .._protocol.models import ExactAcceptEntry
from .._protocol.rail_interface import NotForThisRail, RailContext
from . import EIP712_DOMAIN
from ._evm_family import V1_NETWORKS, SigningRail, chain_id_of, token_intent, unknown_asset
from ._evm_signing import DigestSigner, check_fields, keccak256, recover_signer
from ._evm_signing import address_word as _address_word
from ._evm_signing import uint_word as _uint_word

__all__ = [
    "EIP712_DOMAIN_TYPE",
    "EVM_EXTRA_MISSING",
    "TRANSFER_WITH_AUTHORIZATION_TYPE",
    "V1_NETWORKS",
    "DigestSigner",
    "Eip3009Rail",
    "TransferAuthorization",
    "authorization_digest",
    "authorization_payload",
    "chain_id_of",
    "domain_separator",
    "keccak256",
    "new_authorization",
    "recover_signer",
    "token_intent",
    "transfer_typed_data",
    "unknown_asset",
]

EVM_EXTRA_MISSING = "EIP-3009 entries need the evm extra: pip install 'x402-eur[evm]'"

EIP712_DOMAIN_TYPE = (
    "EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)"
)
TRANSFER_WITH_AUTHORIZATION_TYPE = (
    "TransferWithAuthorization(address from,address to,uint256 value,"
    "uint256 validAfter,uint256 validBefore,bytes32 nonce)"
)
#: How long before "now" a v1 authorization becomes valid (the foundation's v1 client).
V1_VALID_AFTER_SKEW = 600

_UINT_RE = re.compile(r"\A(?:0|[1-9][0-9]{0,77})\Z")
_NONCE_RE = re.compile(r"\A0x[0-9a-fA-F]{64}\Z")


# --- hashing -----------------------------------------------------------------------------


@functools.cache
def _type_hashes() -> tuple[bytes, bytes]:
    return (
        keccak256(EIP712_DOMAIN_TYPE.encode()),
        keccak256(TRANSFER_WITH_AUTHORIZATION_TYPE.encode()),
    )


@functools.lru_cache(maxsize=256)
def _domain_separator(name: str, version: str, chain_id: int, token_lower: str) -> bytes:
    domain_type_hash, _ = _type_hashes()
    return keccak256(
        domain_type_hash
        + keccak256(name.encode())
        + keccak256(version.encode())
        + _uint_word(chain_id)
        + _address_word(token_lower)
    )


def domain_separator(name: str, version: str, chain_id: int, token: str) -> bytes:
    """The EIP-712 domain separator of a token (cached per chain, token, name, version)."""
    return _domain_separator(name, version, chain_id, token.lower())


@functools.lru_cache(maxsize=256)
def _digest_prefix(name: str, version: str, chain_id: int, token: str) -> bytes:
    """`0x1901 ‖ domainSeparator`: what every digest of one token's domain starts with."""
    return b"\x19\x01" + domain_separator(name, version, chain_id, token)


def _from_words(payer: str) -> bytes:
    """The type hash and the `from` word: what every struct hash of one payer starts with."""
    return _type_hashes()[1] + _address_word(payer)


# --- the authorization -------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TransferAuthorization:
    """The six fields of an EIP-3009 `TransferWithAuthorization`, typed.

    `to_wire()` gives them as the foundation's clients send them: all strings, decimal
    integers, `from` checksummed, `to` as the merchant wrote `payTo`, `nonce` `0x` + 64
    lower-case hex digits.
    """

    from_address: str
    to: str
    value: int
    valid_after: int
    valid_before: int
    nonce: bytes = dataclasses.field(repr=False)

    def __post_init__(self) -> None:
        check_fields(self, ("from_address", "to"), ("value", "valid_after", "valid_before"))
        if not isinstance(self.nonce, bytes) or len(self.nonce) != 32:
            raise ValueError("nonce must be 32 bytes")

    def to_wire(self) -> dict[str, str]:
        return {
            "from": self.from_address,
            "to": self.to,
            "value": str(self.value),
            "validAfter": str(self.valid_after),
            "validBefore": str(self.valid_before),
            "nonce": "0x" + self.nonce.hex(),
        }

    @classmethod
    def from_wire(cls, data: object) -> TransferAuthorization:
        """Parse the wire form strictly (every field a string); `ValueError` if malformed."""
        if not isinstance(data, Mapping):
            raise ValueError("authorization must be an object")
        fields = ("from", "to", "value", "validAfter", "validBefore", "nonce")
        values = {name: data.get(name) for name in fields}
        for name, value in values.items():
            if not isinstance(value, str):
                raise ValueError(f"authorization.{name} must be a string")
        numbers = {}
        for name in ("value", "validAfter", "validBefore"):
            text = values[name]
            assert isinstance(text, str)
            if not _UINT_RE.match(text):
                raise ValueError(f"authorization.{name} is not a decimal integer")
            numbers[name] = int(text)
        nonce = values["nonce"]
        assert isinstance(nonce, str)
        if not _NONCE_RE.match(nonce):
            raise ValueError("authorization.nonce is not 32 bytes of 0x hex")
        return cls(
            from_address=str(values["from"]),
            to=str(values["to"]),
            value=numbers["value"],
            valid_after=numbers["validAfter"],
            valid_before=numbers["validBefore"],
            nonce=bytes.fromhex(nonce[2:]),
        )


def new_authorization(
    *,
    payer: str,
    pay_to: str,
    value: int,
    max_timeout_seconds: int,
    now: float,
    v1: bool = False,
    nonce: bytes | None = None,
) -> TransferAuthorization:
    """A fresh authorization of exactly `value` to `pay_to`, with a random 32-byte nonce.

    `validBefore = now + maxTimeoutSeconds`; `validAfter = 0` for v2 and `now - 600` for v1
    (what the foundation's v2 and v1 clients send).
    """
    seconds = int(now)
    return TransferAuthorization(
        from_address=payer,
        to=pay_to,
        value=value,
        valid_after=max(0, seconds - V1_VALID_AFTER_SKEW) if v1 else 0,
        valid_before=seconds + max_timeout_seconds,
        nonce=os.urandom(32) if nonce is None else nonce,
    )


def _struct_hash(authorization: TransferAuthorization, from_words: bytes) -> bytes:
    """The struct hash; `from_words` is `_from_words(authorization.from_address)`."""
    return keccak256(
        from_words
        + _address_word(authorization.to)
        + _uint_word(authorization.value)
        + _uint_word(authorization.valid_after)
        + _uint_word(authorization.valid_before)
        + authorization.nonce
    )


def authorization_digest(
    authorization: TransferAuthorization, *, name: str, version: str, chain_id: int, token: str
) -> bytes:
    """The EIP-712 digest that is signed: `keccak256(0x1901 ‖ domainSeparator ‖ structHash)`."""
    prefix = _digest_prefix(name, version, chain_id, token)
    return keccak256(prefix + _struct_hash(authorization, _from_words(authorization.from_address)))


def transfer_typed_data(
    authorization: TransferAuthorization, *, name: str, version: str, chain_id: int, token: str
) -> dict[str, Any]:
    """The same message as a full EIP-712 document, as eth-account's `sign_typed_data` and
    `encode_typed_data(full_message=...)` take it (for reference and independent checks)."""
    return {
        "types": {
            "EIP712Domain": list(EIP712_DOMAIN),
            "TransferWithAuthorization": [
                {"name": "from", "type": "address"},
                {"name": "to", "type": "address"},
                {"name": "value", "type": "uint256"},
                {"name": "validAfter", "type": "uint256"},
                {"name": "validBefore", "type": "uint256"},
                {"name": "nonce", "type": "bytes32"},
            ],
        },
        "primaryType": "TransferWithAuthorization",
        "domain": {
            "name": name,
            "version": version,
            "chainId": chain_id,
            "verifyingContract": token,
        },
        "message": {
            "from": authorization.from_address,
            "to": authorization.to,
            "value": authorization.value,
            "validAfter": authorization.valid_after,
            "validBefore": authorization.valid_before,
            "nonce": authorization.nonce,
        },
    }


def authorization_payload(authorization: TransferAuthorization, signature: bytes) -> dict[str, Any]:
    """The scheme payload: `{"authorization": {...six strings...}, "signature": "0x..."}`."""
    if len(signature) != 65:
        raise ValueError("an EIP-3009 ECDSA signature is 65 bytes")
    return {"authorization": authorization.to_wire(), "signature": "0x" + signature.hex()}


# --- the rail ----------------------------------------------------------------------------


class Eip3009Rail(SigningRail[ExactAcceptEntry]):
    """Signs EIP-3009 authorizations for standard x402 `exact` entries on any EVM chain.

    Built once per payer: `Eip3009Rail(context)`. It reads the key from
    `context.options.evm.private_key` (no RPC URL is needed) and the assets it may pay
    from `_assets.KNOWN_ASSETS` plus `context.options.assets`. Holds no connection.
    """

    name = "eip3009"
    scheme = "exact"
    entry_type = ExactAcceptEntry
    paying = "EIP-3009 transfer"
    signed = "an EIP-3009 authorization"
    extra_missing = EVM_EXTRA_MISSING
    #: Nothing to read before signing: the nonce is random and the facilitator checks
    #: the balance.
    prepare = None

    def __init__(self, context: RailContext) -> None:
        super().__init__(context)
        #: The payer's address and `_from_words` of it (made once per key).
        self._payer: tuple[str, bytes] = ("", b"")

    def claim(self, extra: Mapping[str, Any]) -> NotForThisRail | None:
        if "spender" in extra:
            return NotForThisRail("not an EIP-3009 entry")
        if extra.get("assetTransferMethod") == "permit2":
            return NotForThisRail("not an EIP-3009 entry (a Permit2 one)")
        return None

    def entry_blockers(
        self, entry: ExactAcceptEntry, extra: Mapping[str, Any], asset: Asset | None
    ) -> tuple[list[str], str]:
        blockers = []
        method = extra.get("assetTransferMethod", "eip3009")
        if method != "eip3009":
            blockers.append(f"asset transfer method {str(method)[:40]!r} is not supported")
        name, version = extra.get("name"), extra.get("version")
        if not isinstance(name, str) or not name or not isinstance(version, str) or not version:
            blockers.append("it comes without the token's EIP-712 extra.name and extra.version")
        label = asset.symbol if asset is not None else name if isinstance(name, str) else ""
        return blockers, label[:20] or "a token"

    def authorize(
        self, entry: ExactAcceptEntry, chain_id: int, signer: DigestSigner, now: float
    ) -> dict[str, Any]:
        extra = entry.extra or {}
        authorization = new_authorization(
            payer=signer.address,
            pay_to=entry.pay_to,
            value=entry.max_amount_required,
            max_timeout_seconds=entry.max_timeout_seconds,
            now=now,
            v1=entry.network in V1_NETWORKS,
        )
        prefix = _digest_prefix(str(extra["name"]), str(extra["version"]), chain_id, entry.asset)
        if self._payer[0] != signer.address:
            self._payer = (signer.address, _from_words(signer.address))
        digest = keccak256(prefix + _struct_hash(authorization, self._payer[1]))
        return authorization_payload(authorization, signer.sign(digest))


def build(context: RailContext) -> Eip3009Rail | None:
    """The standard `exact` EIP-3009 rail: needs an EVM key, no RPC (it says so per entry)."""
    return Eip3009Rail(context)
