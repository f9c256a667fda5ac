"""The x402 `payment-identifier` extension, merchant side: the declaration a 402 carries,
reading the identifier a paid retry echoes, and the record that answers a re-sent proof.

The rules (the foundation's `x402.extensions.payment_identifier` and its specification):

* a merchant declares the extension in the 402's `extensions` as
  `{"payment-identifier": {"info": {"required": <bool>}, "schema": {...}}}`;
* a client echoes the declaration with `info.id` added: 16 to 128 letters, digits, `_`
  and `-`;
* a new identifier is processed normally; the same identifier with the same payload is
  answered with the answer it got the first time (no second settlement); the same
  identifier with another payload is 409 Conflict; a route that declared it `required`
  answers a proof without a valid identifier 400 Bad Request.

Pure, apart from the in-memory record (`PaymentIdentifiers`) the merchant keeps.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

import anyio

__all__ = [
    "PAYMENT_IDENTIFIER",
    "Answer",
    "PaymentIdentifiers",
    "declaration",
    "is_valid_payment_id",
    "payload_digest",
    "payment_id_of",
    "requirement_problem",
]

#: The extension's key in a 402's and a proof's `extensions`.
PAYMENT_IDENTIFIER = "payment-identifier"

_PAYMENT_ID = re.compile(r"[A-Za-z0-9_-]{16,128}")

#: The JSON Schema the declaration carries (draft 2020-12), as the foundation writes it.
SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {
        "required": {"type": "boolean"},
        "id": {"type": "string", "minLength": 16, "maxLength": 128, "pattern": "^[a-zA-Z0-9_-]+$"},
    },
    "required": ["required"],
}


def declaration(required: bool) -> dict[str, Any]:
    """The extension as a 402 declares it: `{"info": {"required": ...}, "schema": ...}`."""
    return {"info": {"required": required}, "schema": SCHEMA}


def is_valid_payment_id(value: Any) -> bool:
    """16 to 128 characters of letters, digits, `_` and `-`."""
    return isinstance(value, str) and _PAYMENT_ID.fullmatch(value) is not None


def _declared_id(payment: Mapping[str, Any]) -> Any:
    extensions = payment.get("extensions")
    declared = extensions.get(PAYMENT_IDENTIFIER) if isinstance(extensions, Mapping) else None
    info = declared.get("info") if isinstance(declared, Mapping) else None
    return info.get("id") if isinstance(info, Mapping) else None


def payment_id_of(payment: Mapping[str, Any]) -> str | None:
    """The valid identifier a decoded proof carries, or None (absent or malformed)."""
    found = _declared_id(payment)
    return found if is_valid_payment_id(found) else None


def requirement_problem(payment: Mapping[str, Any], required: bool) -> str | None:
    """Why a proof does not satisfy a route that declared the extension (`required`: it
    must carry a valid identifier; otherwise one it carries must be valid), or None."""
    found = _declared_id(payment)
    if found is None:
        return "Server requires a payment identifier but none was provided" if required else None
    if not is_valid_payment_id(found):
        return (
            "Invalid payment ID format. ID must be 16-128 characters and contain only "
            "alphanumeric characters, hyphens, and underscores."
        )
    return None


def payload_digest(payment: Mapping[str, Any]) -> str:
    """What makes two proofs "the same payload": the SHA-256 of the decoded proof as
    canonical JSON (sorted keys, no spaces)."""
    text = json.dumps(payment, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclasses.dataclass(frozen=True)
class Answer:
    """A served answer, kept whole to be sent again: status, headers, body."""

    status: int
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes


class PaymentIdentifiers:
    """The identifiers a merchant has served: each with the digest of its proof and the
    answer it got. `lock(id)` serializes the proofs of one identifier, so a duplicate
    sent while the first is being settled waits for its answer instead of settling."""

    def __init__(self) -> None:
        self._served: dict[str, tuple[str, Answer]] = {}
        self._locks: dict[str, anyio.Lock] = {}
        #: How many proofs were answered from the record (a re-sent proof).
        self.replayed = 0

    def lock(self, payment_id: str) -> anyio.Lock:
        lock = self._locks.get(payment_id)
        if lock is None:
            lock = self._locks[payment_id] = anyio.Lock()
        return lock

    def lookup(self, payment_id: str, digest: str) -> Answer | bool | None:
        """The kept answer for the same payload; False when the identifier was served for
        another payload (a conflict); None when it is new."""
        found = self._served.get(payment_id)
        if found is None:
            return None
        if found[0] != digest:
            return False
        self.replayed += 1
        return found[1]

    def keep(self, payment_id: str, digest: str, answer: Answer) -> None:
        self._served[payment_id] = (digest, answer)

    def __contains__(self, payment_id: object) -> bool:
        return payment_id in self._served
