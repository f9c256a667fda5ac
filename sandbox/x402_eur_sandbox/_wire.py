"""The wire as the sandbox reads and writes it, in the sandbox's own code.

Written from the service specification (`x402-eur-service.md`, "Resources and their
fields", "X-PAYMENT proof") and its field notes ("Proof encoding"), not from the client:
the tests pit the client against this code, so a misreading shared by both sides would
hide. The sandbox is strict where the spec is exact:

- JSON: fractional numbers read as `Decimal`, never float; NaN and infinities refused.
- Amounts: a decimal currency amount is a plain decimal with at most 6 decimals
  (`"0.10"`); an atomic amount is an integer (EURQ/USDQ: 6 decimals, 0.10 = 100000).
- Proofs: `X-PAYMENT` is base64url of compact JSON, emitted without padding; padded
  base64url and standard base64 are read too.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import re
from collections.abc import Mapping
from decimal import Decimal, localcontext
from typing import Any

__all__ = [
    "CHAIN_A_ASSETS",
    "CHAIN_A_NETWORK",
    "EURO_ASSET",
    "EVM_NETWORKS",
    "PROVIDER_NETWORK",
    "X402_VERSION",
    "AmountError",
    "BridgePayload",
    "JSONError",
    "PermitPayload",
    "Proof",
    "ProofError",
    "WireError",
    "b64_json",
    "decode_b64_json",
    "decode_proof",
    "dumps",
    "encode_proof",
    "loads",
    "parse_amount",
    "proof_from_object",
    "to_atomic",
]

X402_VERSION = 2
#: The managed-account ledger's network and its one asset (scheme `euro`).
PROVIDER_NETWORK = "provider:mainnet"
EURO_ASSET = "EURO"
#: Chain A and its asset ids (scheme `exact`, the bridge).
CHAIN_A_NETWORK = "ledgera:mainnet"
CHAIN_A_ASSETS = {"2768422954": "EURQ", "2768603795": "USDQ"}
#: The EVM networks of the permit scheme and their chain ids.
EVM_NETWORKS = {"eip155:1": 1, "eip155:137": 137}
#: EURQ and USDQ carry 6 decimals on every network.
ATOMIC_DECIMALS = 6
_MAX_PROOF_CHARS = 16_384


class WireError(ValueError):
    """Something on the wire the sandbox does not accept."""


class JSONError(WireError):
    """Not JSON, or JSON that would lose money on the way (floats, NaN)."""


class AmountError(WireError):
    """Not a valid amount."""


class ProofError(WireError):
    """Not a decodable `X-PAYMENT` value."""


# --- JSON ----------------------------------------------------------------------------------


def _no_constant(name: str) -> Any:
    raise JSONError(f"{name} is not JSON the sandbox accepts")


_DECODER = json.JSONDecoder(parse_float=Decimal, parse_constant=_no_constant)


def loads(data: bytes | str) -> Any:
    """Parse JSON text; fractional numbers become `Decimal`."""
    try:
        text = data if isinstance(data, str) else data.decode("utf-8")
        return _DECODER.decode(text)
    except JSONError:
        raise
    except (ValueError, RecursionError) as exc:
        raise JSONError(f"invalid JSON: {exc}") from None


def _default(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def dumps(value: Any) -> bytes:
    """Compact UTF-8 JSON; a `Decimal` is written as the number it is, digit for digit."""
    return _encode(value).encode()


def _encode(value: Any) -> str:
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise JSONError("a non-finite Decimal is not JSON")
        return format(value, "f")
    if isinstance(value, float):
        raise JSONError("money never travels as a float: use Decimal")
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{json.dumps(str(k))}:{_encode(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_encode(v) for v in value) + "]"
    return json.dumps(value, separators=(",", ":"), allow_nan=False, default=_default)


# --- amounts -------------------------------------------------------------------------------

_DECIMAL = re.compile(rf"\A[0-9]{{1,15}}(\.[0-9]{{1,{ATOMIC_DECIMALS}}})?\Z")


def parse_amount(value: object, *, allow_zero: bool = False) -> Decimal:
    """A currency amount from its wire text (`"0.10"`) or a JSON number (int or `Decimal`)."""
    if isinstance(value, bool) or not isinstance(value, (str, int, Decimal)):
        raise AmountError(f"amount must be a decimal, not {type(value).__name__}")
    text = format(value, "f") if isinstance(value, Decimal) else str(value)
    if not _DECIMAL.match(text):
        raise AmountError(
            f"amount {text[:40]!r} is not a plain positive decimal with at most "
            f"{ATOMIC_DECIMALS} decimals"
        )
    amount = Decimal(text)
    if amount == 0 and not allow_zero:
        raise AmountError("amount must be greater than zero")
    return amount


def to_atomic(amount: Decimal) -> int:
    """Currency units to atomic units: `Decimal("0.10")` -> `100000`; exact or refused."""
    if not amount.is_finite():
        raise AmountError("amount must be finite")
    with localcontext() as context:
        context.prec = 60
        scaled = amount.scaleb(ATOMIC_DECIMALS)
        if scaled != scaled.to_integral_value():
            raise AmountError(f"amount {amount} has more than {ATOMIC_DECIMALS} decimals")
        return int(scaled)


# --- base64 and proofs ---------------------------------------------------------------------


def b64_json(value: Any, *, urlsafe: bool = True, padded: bool = False) -> str:
    """Compact JSON in base64 (base64url without padding unless told otherwise)."""
    raw = dumps(value)
    encoded = base64.urlsafe_b64encode(raw) if urlsafe else base64.b64encode(raw)
    return (encoded if padded else encoded.rstrip(b"=")).decode("ascii")


def decode_b64_json(value: str | bytes) -> Any:
    """JSON from base64url (padded or not) or standard base64."""
    text = (value.decode("ascii", "replace") if isinstance(value, bytes) else value).strip()
    if not text or len(text) > _MAX_PROOF_CHARS:
        raise ProofError("empty or oversized base64 value")
    standard = text.replace("-", "+").replace("_", "/").rstrip("=")
    try:
        raw = base64.b64decode(standard + "=" * (-len(standard) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise ProofError("not base64") from None
    try:
        return loads(raw)
    except JSONError as exc:
        raise ProofError(str(exc)) from None


@dataclasses.dataclass(frozen=True)
class Proof:
    """The JSON inside `X-PAYMENT`: version 2, a scheme, a network and its payload."""

    scheme: str
    network: str
    payload: dict[str, Any]
    x402_version: int = X402_VERSION

    def to_wire(self) -> dict[str, Any]:
        return {
            "x402Version": self.x402_version,
            "scheme": self.scheme,
            "network": self.network,
            "payload": self.payload,
        }


def proof_from_object(data: object) -> Proof:
    """A decoded proof object, checked field by field."""
    if not isinstance(data, dict):
        raise ProofError("a proof is a JSON object")
    version = data.get("x402Version", X402_VERSION)
    if isinstance(version, bool) or version != X402_VERSION:
        raise ProofError(f"x402Version must be {X402_VERSION}")
    scheme, network, payload = data.get("scheme"), data.get("network"), data.get("payload")
    if not isinstance(scheme, str) or not isinstance(network, str):
        raise ProofError("a proof names its scheme and network as strings")
    if not isinstance(payload, dict):
        raise ProofError("a proof's payload is an object")
    return Proof(scheme=scheme, network=network, payload=payload)


def decode_proof(value: str | bytes) -> Proof:
    """An `X-PAYMENT` value read back into its proof."""
    return proof_from_object(decode_b64_json(value))


def encode_proof(proof: Proof) -> str:
    """The `X-PAYMENT` value of a proof: base64url of compact JSON, no padding."""
    return b64_json(proof.to_wire())


# --- payloads ------------------------------------------------------------------------------


def _text(data: Mapping[str, Any], key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value:
        raise WireError(f"{key} must be a non-empty string")
    return value


def _uint(data: Mapping[str, Any], key: str) -> int:
    value = data.get(key)
    if isinstance(value, str) and re.fullmatch(r"[0-9]{1,78}", value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**256:
        raise WireError(f"{key} must be an unsigned 256-bit integer (or its decimal text)")
    return value


@dataclasses.dataclass(frozen=True)
class PermitPayload:
    """The payload of an EVM `exact` proof: an EIP-2612 permit and its signature."""

    owner: str
    permit_owner: str
    spender: str
    value: int
    nonce: int
    deadline: int
    signature: str

    @classmethod
    def from_wire(cls, payload: object) -> PermitPayload:
        if not isinstance(payload, dict) or not isinstance(payload.get("permit"), dict):
            raise WireError("a permit payload holds `owner`, `permit` and `signature`")
        permit = payload["permit"]
        signature = _text(payload, "signature")
        if not re.fullmatch(r"0x[0-9a-fA-F]+", signature):
            raise WireError("signature must be 0x-prefixed hex")
        return cls(
            owner=_text(payload, "owner"),
            permit_owner=_text(permit, "owner"),
            spender=_text(permit, "spender"),
            value=_uint(permit, "value"),
            nonce=_uint(permit, "nonce"),
            deadline=_uint(permit, "deadline"),
            signature=signature,
        )


@dataclasses.dataclass(frozen=True)
class BridgePayload:
    """The payload of a chain-A `exact` proof paid through the bridge (path C)."""

    transaction_code: str
    blockchain_tx_id: str
    pay_to: str
    asset: str

    @classmethod
    def from_wire(cls, payload: object) -> BridgePayload:
        if not isinstance(payload, dict):
            raise WireError("a bridge payload is an object")
        return cls(
            transaction_code=_text(payload, "transactionCode"),
            blockchain_tx_id=_text(payload, "blockchainTxId"),
            pay_to=_text(payload, "payTo"),
            asset=_text(payload, "asset"),
        )
