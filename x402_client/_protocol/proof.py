"""The X-PAYMENT codec: base64url JSON out, any of the three base64 forms in.

Emitted: base64url of compact JSON, without padding (docs/protocol.md, "The proof").
Accepted when decoding: base64url unpadded or padded, and standard base64.
The same lenient decoder reads a merchant's `X-PAYMENT-RESPONSE` settlement header.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from . import exact_json as _json
from .exact_json import MAX_PROOF_CHARS, ProofError, b64_json_decode, b64url
from .models import PaymentProof

__all__ = [
    "MAX_PROOF_CHARS",
    "ProofError",
    "b64_json_decode",
    "b64url",
    "decode_proof",
    "encode_proof",
]


def encode_proof(proof: PaymentProof | dict[str, Any]) -> str:
    """Encode a proof as base64url of compact JSON, without padding."""
    body = proof.to_wire() if isinstance(proof, PaymentProof) else proof
    return b64url(_json.dumps(body))


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
