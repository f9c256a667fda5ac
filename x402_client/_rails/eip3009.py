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
computed here (the domain separator cached per chain, token, name and version) and signed
with the key object made once per rail. `coincurve` (libsecp256k1) signs when installed,
else eth-keys' own backend. Signatures are deterministic (RFC 6979, low s), byte for
byte what eth-account's `sign_typed_data` produces; the tests hold it to that.

eth-keys and the keccak implementation (the `evm` extra) are imported on first use;
importing this module stays free of them.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import re
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from types import MappingProxyType
from typing import Any

from .._protocol.assets import Asset, find_asset
from .._protocol.models import AcceptEntry, ExactAcceptEntry
from .._protocol.rail_interface import (
    Note,
    NotForThisRail,
    RailContext,
    RequestSettings,
    no_note,
    unpayable,
)
from .._protocol.types import Paid, PaymentIntent
from .._protocol.types import Rail as RailName
from . import EIP712_DOMAIN, setting
from ._evm_signing import ADDRESS_RE as _ADDRESS_RE
from ._evm_signing import UINT256_LIMIT as _UINT256_LIMIT
from ._evm_signing import DigestSigner, SignerCache, keccak256, recover_signer
from ._evm_signing import address_word as _address_word
from ._evm_signing import evm_extra_installed as _evm_extra_installed
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
    "transfer_typed_data",
    "unknown_asset",
]

logger = logging.getLogger("x402_client")

EVM_EXTRA_MISSING = "EIP-3009 entries need the evm extra: pip install 'x402-eur[evm]'"

#: x402 v1 network names and their chain ids: the foundation's table,
#: `x402/mechanisms/evm/v1/constants.py::V1_NETWORK_CHAIN_IDS` (x402 2.25.0).
V1_NETWORKS: Mapping[str, int] = MappingProxyType(
    {
        "base": 8453,
        "base-sepolia": 84532,
        "ethereum": 1,
        "polygon": 137,
        "polygon-amoy": 80002,
        "avalanche": 43114,
        "avalanche-fuji": 43113,
        "abstract": 2741,
        "abstract-testnet": 11124,
        "iotex": 4689,
        "sei": 1329,
        "sei-testnet": 1328,
        "peaq": 3338,
        "story": 1513,
        "educhain": 656476,
        "skale-base-sepolia": 1444673419,
        "megaeth": 4326,
        "monad": 143,
        "monad-testnet": 10143,
        "stable": 988,
        "stable-testnet": 2201,
        "celo": 42220,
        "flare": 14,
    }
)

EIP712_DOMAIN_TYPE = (
    "EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)"
)
TRANSFER_WITH_AUTHORIZATION_TYPE = (
    "TransferWithAuthorization(address from,address to,uint256 value,"
    "uint256 validAfter,uint256 validBefore,bytes32 nonce)"
)
#: How long before "now" a v1 authorization becomes valid (the foundation's v1 client).
V1_VALID_AFTER_SKEW = 600

# CAIP-2 for EVM: a decimal chain id without leading zeros (a uint64 in practice).
_CAIP2_RE = re.compile(r"\Aeip155:([1-9][0-9]{0,19})\Z")
_UINT_RE = re.compile(r"\A(?:0|[1-9][0-9]{0,77})\Z")
_NONCE_RE = re.compile(r"\A0x[0-9a-fA-F]{64}\Z")


def chain_id_of(network: str) -> int | None:
    """The chain id of an EVM network: `eip155:8453` (v2) or a v1 name (`base`); else None."""
    match = _CAIP2_RE.match(network)
    if match is not None:
        return int(match.group(1))
    return V1_NETWORKS.get(network)


def _is_v1_network(network: str) -> bool:
    return network in V1_NETWORKS


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
        for name in ("from_address", "to"):
            if not _ADDRESS_RE.match(getattr(self, name)):
                raise ValueError(f"{name} is not a 0x address")
        for name in ("value", "valid_after", "valid_before"):
            number = getattr(self, name)
            if isinstance(number, bool) or not isinstance(number, int):
                raise ValueError(f"{name} must be an int")
            if not 0 <= number < _UINT256_LIMIT:
                raise ValueError(f"{name} is out of uint256 range")
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


def _struct_hash(authorization: TransferAuthorization) -> bytes:
    _, transfer_type_hash = _type_hashes()
    return keccak256(
        transfer_type_hash
        + _address_word(authorization.from_address)
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
    return keccak256(
        b"\x19\x01" + domain_separator(name, version, chain_id, token) + _struct_hash(authorization)
    )


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


def _blockers(entry: ExactAcceptEntry, extra: Mapping[str, Any]) -> list[str]:
    """What in an EIP-3009 entry itself keeps it from being paid (not the options)."""
    blockers = []
    method = extra.get("assetTransferMethod", "eip3009")
    if method != "eip3009":
        blockers.append(f"asset transfer method {str(method)[:40]!r} is not supported")
    name, version = extra.get("name"), extra.get("version")
    if not isinstance(name, str) or not name or not isinstance(version, str) or not version:
        blockers.append("it comes without the token's EIP-712 extra.name and extra.version")
    if not _ADDRESS_RE.match(entry.asset):
        blockers.append("its asset is not a token address")
    if not _ADDRESS_RE.match(entry.pay_to):
        blockers.append("its payTo is not an address")
    return blockers


class Eip3009Rail:
    """Signs EIP-3009 authorizations for standard x402 `exact` entries on any EVM chain.

    Built once per payer: `Eip3009Rail(context)`. It reads the key from
    `context.options.evm.private_key` (no RPC URL is needed) and the assets it may pay
    from `_assets.KNOWN_ASSETS` plus `context.options.assets`. Holds no connection.
    """

    name = "eip3009"
    #: Nothing to read before signing: the nonce is random and the facilitator checks
    #: the balance.
    prepare = None
    #: The schemes of the entries it describes (the selection asks no other rail).
    schemes = frozenset({"exact"})
    #: The proof is a signed authorization: the merchant's facilitator moves the money.
    money_moves_before_proof = False
    frames_own_proof = False
    resumes_transactions = False

    def __init__(self, context: RailContext) -> None:
        self._context = context
        self._signers = SignerCache()

    def __repr__(self) -> str:
        return "Eip3009Rail()"

    # --- Rail ------------------------------------------------------------------------------

    def describe(self, entry: AcceptEntry, resource: str) -> PaymentIntent | str:
        if not isinstance(entry, ExactAcceptEntry):
            return NotForThisRail("not an exact entry")
        chain_id = chain_id_of(entry.network)
        if chain_id is None:
            return NotForThisRail("not an EVM entry")
        extra = entry.extra or {}
        if "spender" in extra:
            return NotForThisRail("not an EIP-3009 entry")
        if extra.get("assetTransferMethod") == "permit2":
            return NotForThisRail("not an EIP-3009 entry (a Permit2 one)")
        options = self._context.options
        asset = find_asset(chain_id, entry.asset, options.assets)
        blockers = _blockers(entry, extra)
        blockers += unknown_asset(entry, asset)
        settings = [setting("evm_private_key")] if options.evm is None else []
        if not _evm_extra_installed():
            blockers.append(EVM_EXTRA_MISSING)
        if asset is None or blockers or settings:
            name = extra.get("name")
            label = asset.symbol if asset is not None else name if isinstance(name, str) else ""
            what = f"EIP-3009 transfer for {label[:20] or 'a token'} on {entry.network[:40]}"
            return unpayable(what, blockers, settings)
        return token_intent(entry, asset, resource)

    @asynccontextmanager
    async def pay(
        self,
        entry: AcceptEntry,
        intent: PaymentIntent,
        settings: RequestSettings,
        note: Note = no_note,
    ) -> AsyncIterator[Paid]:
        assert isinstance(entry, ExactAcceptEntry)
        extra = entry.extra or {}
        chain_id = chain_id_of(entry.network)
        assert chain_id is not None
        signer = self.signer
        authorization = new_authorization(
            payer=signer.address,
            pay_to=entry.pay_to,
            value=entry.max_amount_required,
            max_timeout_seconds=entry.max_timeout_seconds,
            now=time.time(),
            v1=_is_v1_network(entry.network),
        )
        digest = authorization_digest(
            authorization,
            name=str(extra["name"]),
            version=str(extra["version"]),
            chain_id=chain_id,
            token=entry.asset,
        )
        payload = authorization_payload(authorization, signer.sign(digest))
        logger.debug(
            "x402: signed an EIP-3009 authorization on %s for %s", entry.network, signer.address
        )
        yield Paid(proof="", payload=payload, payer=signer.address)

    async def aclose(self) -> None:
        """Nothing to close: the rail holds no connection."""

    # --- the key ---------------------------------------------------------------------------

    @property
    def signer(self) -> DigestSigner:
        """The payer's signer, made once per key (deriving the address is not free)."""
        return self._signers.signer(self._context.options)


def unknown_asset(entry: ExactAcceptEntry, asset: Asset | None) -> list[str]:
    """The skip reason of a token address the client does not know (`asset` None), if any
    (a malformed address has a reason of its own)."""
    if asset is not None or not _ADDRESS_RE.match(entry.asset):
        return []
    return [
        f"unknown asset {entry.asset[:42]} on {entry.network} (declare it in "
        f"PaymentOptions.assets or {setting('assets')} to pay it)"
    ]


def token_intent(
    entry: ExactAcceptEntry, asset: Asset, resource: str, *, rail: RailName = "eip3009"
) -> PaymentIntent:
    """The intent of paying a standard `exact` entry in a known token (`asset`), on `rail`
    (the EIP-3009 and Permit2 rails pay the same entries, authorized differently)."""
    return PaymentIntent(
        rail=rail,
        scheme=entry.scheme,
        network=entry.network,
        asset=entry.asset,
        asset_symbol=asset.symbol,
        amount=asset.amount(entry.max_amount_required),
        currency=asset.currency,
        pay_to=entry.pay_to,
        resource=resource,
        atomic_amount=entry.max_amount_required,
        description=entry.description,
        accept=entry.to_wire(),
    )


def build(context: RailContext) -> Eip3009Rail | None:
    """The standard `exact` EIP-3009 rail: needs an EVM key, no RPC (it says so per entry)."""
    return Eip3009Rail(context)
