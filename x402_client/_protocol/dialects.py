"""Which x402 a 402 speaks, and how a payment is framed for it. No I/O.

Three dialects exist, told apart here and nowhere else, by where and how the challenge came:

- `EURO` (the euro gates, docs/protocol.md): the 402 is a JSON body with `x402Version: 2`;
  the paid retry carries `X-PAYMENT` = base64url of `{x402Version: 2, scheme, network, payload}`.
- `STANDARD_V2` (the x402 foundation's v2): the 402 has a `PAYMENT-REQUIRED` header =
  base64 JSON with `x402Version: 2` (the body may be `{}`); the retry carries
  `PAYMENT-SIGNATURE` = base64 of `{x402Version: 2, resource, accepted, payload}`.
- `STANDARD_V1`: the 402 is a JSON body with `x402Version: 1`; the retry carries
  `X-PAYMENT` = base64 of `{x402Version: 1, scheme, network, payload}`.

A `PAYMENT-REQUIRED` header wins over the body. Entries keep their wire form: a v2
standard entry's `amount` (atomic units) is read as the `maxAmountRequired` our `exact`
model carries, and the chosen entry is echoed in `accepted` exactly as received (the
foundation's server compares it field by field). The `euro` scheme exists only in the euro
dialect. Base64 is read leniently (standard or url-safe, padded or not) and written as
each dialect's peers read it: url-safe unpadded for the euro gates, standard padded for the
foundation's servers, which decode strictly.

The v2 `payment-identifier` extension (idempotency): a merchant that declares it in the
402's `extensions` gets, in the paid retry's `extensions`, its declaration echoed with
`info.id` added, one identifier per payment (`payment_id_for`), so it can deduplicate the
re-sends of one payment. Not declared: nothing is added. Only a proof this module frames
can carry it: when it is required, `Challenge.rail_problem` rules out the rails that frame
their own proof (`payment_id_problem`).
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import hashlib
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from . import exact_json as _json
from .errors import InvalidChallenge
from .exact_json import ProofError, b64_json_decode
from .models import (
    AcceptEntry,
    BatchAcceptEntry,
    ExactAcceptEntry,
    InvalidEntry,
    UptoAcceptEntry,
    parse_accept,
)
from .payment_id import PAYMENT_IDENTIFIER, is_valid_payment_id, payment_id_of
from .proof import encode_proof

__all__ = [
    "PAYMENT_IDENTIFIER",
    "PAYMENT_REQUIRED",
    "PAYMENT_SIGNATURE",
    "SETTLEMENT_HEADERS",
    "X_PAYMENT",
    "Challenge",
    "Dialect",
    "challenge_of",
    "encode_payment",
    "is_valid_payment_id",
    "is_x402",
    "payment_id_for",
    "payment_id_of",
    "payment_id_problem",
    "read_challenge",
]

#: Header carrying a standard v2 challenge.
PAYMENT_REQUIRED = "payment-required"
#: Header carrying the proof of a paid retry: the euro gates and the standard v1.
X_PAYMENT = "X-PAYMENT"
#: Header carrying the proof of a standard v2 paid retry.
PAYMENT_SIGNATURE = "PAYMENT-SIGNATURE"
#: Response headers carrying the merchant's settlement of a paid retry (euro and v1, v2).
SETTLEMENT_HEADERS = ("X-PAYMENT-RESPONSE", "PAYMENT-RESPONSE")
#: The v2 extension that carries a payment's idempotency key (`info.id`).
#: An identifier's rule (the foundation's `payment_identifier/types.py`): 16 to 128
#: characters of `A-Z a-z 0-9 _ -`.


class Dialect(str, enum.Enum):
    EURO = "euro"
    STANDARD_V2 = "x402-v2"
    STANDARD_V1 = "x402-v1"


@dataclasses.dataclass(frozen=True)
class Challenge:
    """A 402 challenge as its dialect wrote it: raw `accepts`, `error`, and (v2 standard)
    `resource` / `extensions`, which the paid retry echoes."""

    dialect: Dialect
    accepts: list[Any]
    error: str | None = None
    resource: Mapping[str, Any] | None = None
    extensions: Mapping[str, Any] | None = None
    #: Each entry as the client's models read it (`parse_entry`), read once: the model,
    #: None for a scheme the client does not know, or why it could not be read.
    entries: tuple[AcceptEntry | InvalidEntry | None, ...] = dataclasses.field(
        init=False, repr=False, compare=False
    )
    #: The merchant requires the `payment-identifier` extension (`payment_identifier`).
    payment_id_required: bool = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "entries", tuple(self._read(raw) for raw in self.accepts))
        object.__setattr__(self, "payment_id_required", self.payment_identifier is True)

    def _read(self, raw: Any) -> AcceptEntry | InvalidEntry | None:
        try:
            return self.parse_entry(raw)
        except InvalidEntry as exc:
            return exc

    @property
    def payment_identifier(self) -> bool | None:
        """Whether the merchant declared the `payment-identifier` extension: None when it
        did not (or not in its shape: `info.required` a boolean), else whether it is
        `required`."""
        declared = (self.extensions or {}).get(PAYMENT_IDENTIFIER)
        info = declared.get("info") if isinstance(declared, Mapping) else None
        required = info.get("required") if isinstance(info, Mapping) else None
        return required if isinstance(required, bool) else None

    def rail_problem(self, rail: Any) -> str | None:
        """Why `rail` must not pay any entry of this 402 (`payment_id_problem`), or None."""
        return payment_id_problem(self, rail.name, getattr(rail, "frames_own_proof", False))

    def parse_entry(self, raw: Any) -> AcceptEntry | None:
        """One entry as the client's models read it; None for a scheme it does not know."""
        if self.dialect is Dialect.EURO:
            return parse_accept(raw)
        if not isinstance(raw, dict):
            raise InvalidEntry("entry is not an object")
        scheme = raw.get("scheme")
        model: type[ExactAcceptEntry] | type[UptoAcceptEntry] | type[BatchAcceptEntry]
        if scheme == "upto" and self.dialect is Dialect.STANDARD_V2:
            model = UptoAcceptEntry
        elif scheme == "batch-settlement" and self.dialect is Dialect.STANDARD_V2:
            model = BatchAcceptEntry
        elif scheme == "exact":
            model = ExactAcceptEntry
        else:
            return None
        data = dict(raw)
        if self.dialect is Dialect.STANDARD_V2:
            if "amount" not in data:
                raise InvalidEntry("amount: Field required")
            data["maxAmountRequired"] = data["amount"]
        extra = data.get("extra")
        if isinstance(extra, str):  # v1 servers may send `extra` JSON-encoded
            try:
                data["extra"] = _json.loads(extra.encode())
            except _json.JSONError:
                raise InvalidEntry("extra: not an object") from None
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"]) or "entry"
            raise InvalidEntry(f"{where}: {err['msg']}") from None


def is_x402(body: bytes, headers: Mapping[str, str]) -> bool:
    """Does this 402 speak x402 at all? A `PAYMENT-REQUIRED` header, or a JSON object body
    with `x402Version`. Anything else (a card-declined message, a quota notice) is not ours."""
    if PAYMENT_REQUIRED in headers:
        return True
    if b"x402Version" not in body:
        return False
    try:
        data = _json.loads(body)
    except _json.JSONError:
        # Broken JSON that names the protocol's field is a malformed challenge, not a
        # stranger's 402.
        return body.lstrip().startswith(b"{")
    return isinstance(data, dict) and "x402Version" in data


def _version(data: Mapping[str, Any], where: str) -> int:
    version = data.get("x402Version")
    if isinstance(version, bool) or not isinstance(version, int):
        raise InvalidChallenge(f"{where}: x402Version must be an integer")
    return version


def _accepts(data: Mapping[str, Any], where: str) -> list[Any]:
    accepts = data.get("accepts")
    if not isinstance(accepts, list) or not accepts:
        raise InvalidChallenge(f"{where}: accepts must be a non-empty list")
    return accepts


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def challenge_of(body: bytes, headers: Mapping[str, str], *, limit: int) -> Challenge | None:
    """The challenge of a 402, or None when it does not speak x402 (`is_x402`'s rule); a
    malformed x402 one is `InvalidChallenge`. Parses the body once."""
    header = headers.get(PAYMENT_REQUIRED)
    if header is not None:
        return _header_challenge(header, limit)
    if b"x402Version" not in body:
        return None
    try:
        parsed = _json.loads(body)
    except _json.JSONError as exc:
        if body.lstrip().startswith(b"{"):
            raise InvalidChallenge(f"402 body is not JSON: {exc}") from None
        return None
    if not isinstance(parsed, dict) or "x402Version" not in parsed:
        return None
    return _from_body(parsed)


def read_challenge(body: bytes, headers: Mapping[str, str], *, limit: int) -> Challenge:
    """The challenge of an x402 402 (`is_x402` said yes); malformed: `InvalidChallenge`."""
    header = headers.get(PAYMENT_REQUIRED)
    if header is not None:
        return _from_header(header, limit)
    try:
        parsed = _json.loads(body)
    except _json.JSONError as exc:
        raise InvalidChallenge(f"402 body is not JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise InvalidChallenge("402 body is not a JSON object")
    return _from_body(parsed)


#: The standard v2 challenges the payer read last, by header and limit: a merchant sends
#: the same `PAYMENT-REQUIRED` for every request of a resource, so it is decoded once. The
#: payer only reads them (`read_challenge`, which hands entries to callers, decodes anew).
_HEADER_CHALLENGES: dict[tuple[str, int], Challenge] = {}
_HEADER_CHALLENGES_MAX = 64
_HEADER_CACHED_CHARS = 8192


def _header_challenge(header: str, limit: int) -> Challenge:
    key = (header, limit)
    found = _HEADER_CHALLENGES.get(key)
    if found is None:
        found = _from_header(header, limit)
        if len(header) <= _HEADER_CACHED_CHARS:
            if len(_HEADER_CHALLENGES) >= _HEADER_CHALLENGES_MAX:
                _HEADER_CHALLENGES.clear()
            _HEADER_CHALLENGES[key] = found
    return found


def _from_header(header: str, limit: int) -> Challenge:
    """A standard v2 challenge from its `PAYMENT-REQUIRED` header."""
    try:
        data = b64_json_decode(header, limit=limit)
    except ProofError as exc:
        raise InvalidChallenge(f"PAYMENT-REQUIRED header is not base64 JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidChallenge("PAYMENT-REQUIRED header is not a JSON object")
    where = "PAYMENT-REQUIRED"
    if _version(data, where) != 2:
        raise InvalidChallenge(f"{where}: x402Version {data['x402Version']} is not 2")
    resource = data.get("resource")
    extensions = data.get("extensions")
    return Challenge(
        Dialect.STANDARD_V2,
        _accepts(data, where),
        _text(data.get("error")),
        resource if isinstance(resource, dict) else None,
        extensions if isinstance(extensions, dict) and extensions else None,
    )


def _from_body(parsed: Mapping[str, Any]) -> Challenge:
    """A euro-gate (v2) or standard v1 challenge from its JSON body object."""
    version = _version(parsed, "402 body")
    if version == 2:
        dialect = Dialect.EURO
    elif version == 1:
        dialect = Dialect.STANDARD_V1
    else:
        raise InvalidChallenge(
            f"x402Version {version} is not supported (this client speaks 1 and 2)"
        )
    error = parsed.get("error")
    if error is not None and not isinstance(error, str):
        raise InvalidChallenge("402 body: error must be a string")
    return Challenge(dialect, _accepts(parsed, "402 body"), error)


def payment_id_for(payment: str) -> str:
    """The `payment-identifier` of the payment whose ledger / journal id is `payment` (32
    hex digits): the same for every send of its proof, and known to recovery. An id of
    another shape is hashed into one that follows the extension's rule."""
    payment_id = f"pay_{payment}"
    if is_valid_payment_id(payment_id):
        return payment_id
    return "pay_" + hashlib.sha256(payment.encode()).hexdigest()[:32]


def payment_id_problem(challenge: Challenge, rail: str, frames_own_proof: bool) -> str | None:
    """Why `rail` must not pay an entry of `challenge`: the merchant requires a payment
    identifier and the rail's proof, which it frames itself, has no place for one."""
    if not frames_own_proof or challenge.payment_identifier is not True:
        return None
    return (
        f"the merchant requires a payment identifier (the x402 payment-identifier "
        f"extension), which the {rail} rail's proof cannot carry"
    )


def _with_payment_id(extensions: Mapping[str, Any], payment_id: str) -> dict[str, Any]:
    """The 402's extensions as echoed, with `payment_id` added to the declaration's `info`
    (every declared field kept, as the foundation's server checks)."""
    echoed = dict(extensions)
    declared = dict(echoed[PAYMENT_IDENTIFIER])
    declared["info"] = {**declared["info"], "id": payment_id}
    echoed[PAYMENT_IDENTIFIER] = declared
    return echoed


def _b64(data: Mapping[str, Any]) -> str:
    return base64.b64encode(_json.dumps(dict(data))).decode("ascii")


def encode_payment(
    challenge: Challenge,
    raw_entry: Mapping[str, Any],
    payload: Mapping[str, Any],
    *,
    payment_id: str | None = None,
) -> tuple[str, str]:
    """The header (name, value) that carries `payload` for `raw_entry` of `challenge`;
    `payment_id` goes in when the challenge declared the `payment-identifier` extension."""
    scheme, network = raw_entry.get("scheme"), raw_entry.get("network")
    if challenge.dialect is Dialect.STANDARD_V2:
        framed: dict[str, Any] = {
            "x402Version": 2,
            "payload": dict(payload),
            "accepted": dict(raw_entry),
        }
        if challenge.resource is not None:
            framed["resource"] = dict(challenge.resource)
        if challenge.extensions is not None:
            framed["extensions"] = (
                _with_payment_id(challenge.extensions, payment_id)
                if payment_id is not None and challenge.payment_identifier is not None
                else dict(challenge.extensions)
            )
        return PAYMENT_SIGNATURE, _b64(framed)
    if challenge.dialect is Dialect.STANDARD_V1:
        framed = {"x402Version": 1, "scheme": scheme, "network": network, "payload": payload}
        return X_PAYMENT, _b64(framed)
    framed = {"x402Version": 2, "scheme": scheme, "network": network, "payload": dict(payload)}
    return X_PAYMENT, encode_proof(framed)
