"""The X-PAYMENT codec: base64url JSON out, any of the three base64 forms in.

Emitted: base64url of compact JSON, without padding (docs/protocol.md, "The proof").
Accepted when decoding: base64url unpadded or padded, and standard base64.
The same lenient decoder reads a merchant's `X-PAYMENT-RESPONSE` settlement header.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from pydantic import ValidationError

from . import exact_json as _json
from .models import PaymentProof

__all__ = ["ProofError", "b64_json_decode", "b64url", "decode_proof", "encode_proof"]

# A proof is a few hundred bytes; anything far larger is not a proof.
MAX_PROOF_CHARS = 16_384


class ProofError(ValueError):
    """Not a decodable X-PAYMENT value."""


def b64url(raw: bytes) -> str:
    """base64url without padding: the form every `X-PAYMENT` value is emitted in."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def encode_proof(proof: PaymentProof | dict[str, Any]) -> str:
    """Encode a proof as base64url of compact JSON, without padding."""
    body = proof.to_wire() if isinstance(proof, PaymentProof) else proof
    return b64url(_json.dumps(body))


def b64_json_decode(value: str | bytes, *, limit: int = MAX_PROOF_CHARS) -> Any:
    """Decode base64url (padded or not) or standard base64 of JSON."""
    text = value.decode("ascii", "replace") if isinstance(value, bytes) else value
    text = text.strip()
    if not text or len(text) > limit:
        raise ProofError("empty or oversized base64 value")
    normalized = text.replace("-", "+").replace("_", "/").rstrip("=")
    normalized += "=" * (-len(normalized) % 4)
    try:
        raw = base64.b64decode(normalized, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ProofError(f"not base64: {exc}") from None
    try:
        return _json.loads(raw)
    except _json.JSONError as exc:
        raise ProofError(str(exc)) from None


def decode_proof(value: str | bytes) -> PaymentProof:
    """Decode an X-PAYMENT value into a `PaymentProof` (payload left as a dict)."""
    data = b64_json_decode(value)
    if not isinstance(data, dict):
        raise ProofError("proof JSON must be an object")
    try:
        return PaymentProof.model_validate(data)
    except ValidationError as exc:
        raise ProofError(
            f"invalid proof: {exc.error_count()} error(s): {exc.errors()[0]['msg']}"
        ) from None
