"""JSON in and out without ever passing money through a float.

`loads` reads JSON numbers with a fraction as `Decimal`, refuses NaN and infinities, and
refuses documents nested deeper than `MAX_DEPTH` (what a merchant writes is stored and
written out again; nothing in x402 nests that deep);
`dumps` writes `Decimal` values as JSON numbers, digit for digit (the payment API wants
`"amount": 0.10`, a number).
"""

from __future__ import annotations

import base64
import binascii
import json
from decimal import Decimal
from typing import Any

__all__ = [
    "MAX_DEPTH",
    "MAX_PROOF_CHARS",
    "JSONError",
    "ProofError",
    "b64_json_decode",
    "b64url",
    "dumps",
    "loads",
    "number",
    "string",
]

#: The deepest nesting of arrays and objects `loads` accepts.
MAX_DEPTH = 64


class JSONError(ValueError):
    """Not valid JSON for this client's purposes."""


def _refuse_constant(name: str) -> Any:
    raise JSONError(f"{name} is not allowed in JSON")


#: One decoder for every call: `json.loads` with hooks builds a new one each time.
_DECODER = json.JSONDecoder(parse_float=Decimal, parse_constant=_refuse_constant)


def loads(data: bytes | str) -> Any:
    """Parse JSON; fractional numbers become `Decimal`, NaN/Infinity are refused.

    Accepts what `json.loads` accepts: `str`, or bytes in UTF-8, -16 or -32.
    """
    try:
        if isinstance(data, str):
            if data.startswith("\ufeff"):
                raise JSONError("invalid JSON: unexpected UTF-8 byte order mark")
            parsed = _DECODER.decode(data)
        else:
            parsed = _DECODER.decode(data.decode(json.detect_encoding(data), "surrogatepass"))
    except (ValueError, RecursionError) as exc:
        if isinstance(exc, JSONError):
            raise
        raise JSONError(f"invalid JSON: {exc}") from None
    if isinstance(parsed, (dict, list)) and _may_nest_too_deep(data):
        _check_depth(parsed)
    return parsed


def _may_nest_too_deep(data: bytes | str) -> bool:
    """False when the text has too few brackets to nest deeper than `MAX_DEPTH` (each
    level opens one; brackets inside strings only add to the count): the common case,
    decided without walking the parsed document."""
    if isinstance(data, str):
        return data.count("{") + data.count("[") > MAX_DEPTH
    # Bytes in UTF-16 or -32 write a bracket as its byte plus zeros: counted all the same.
    return data.count(b"{") + data.count(b"[") > MAX_DEPTH


def _check_depth(value: dict[str, Any] | list[Any]) -> None:
    """Refuse nesting deeper than `MAX_DEPTH`, without recursion."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise JSONError(f"invalid JSON: nested deeper than {MAX_DEPTH} levels")
        children = node.values() if isinstance(node, dict) else node
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))


#: A JSON string literal: what `json.dumps` writes for a `str`.
string = json.encoder.encode_basestring_ascii


def number(value: Decimal) -> str:
    """A `Decimal` as a JSON number, digit for digit."""
    if not value.is_finite():
        raise JSONError("cannot encode a non-finite Decimal")
    return format(value, "f")


def _encode(value: Any) -> str:
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise JSONError("cannot encode a non-finite Decimal")
        return format(value, "f")
    if isinstance(value, dict):
        items = (f"{json.dumps(str(k))}:{_encode(v)}" for k, v in value.items())
        return "{" + ",".join(items) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_encode(v) for v in value) + "]"
    if isinstance(value, float):
        raise JSONError("floats are not encoded; use Decimal")
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


#: The C encoder, for documents of plain JSON types only (what `_plain` says).
_PLAIN_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
#: A document with more nodes than this is left to `_encode` (which also meets a cycle).
_PLAIN_MAX_NODES = 10_000


def _plain(value: Any) -> bool:
    """True when `value` holds only dicts with `str` keys, lists, tuples, `str`, `int`,
    `bool` and `None` (exact types): the C encoder writes those byte for byte as `_encode`
    does. `Decimal`, floats, subclasses and anything else go to `_encode`."""
    stack = [value]
    nodes = 0
    while stack:
        node = stack.pop()
        nodes += 1
        if nodes > _PLAIN_MAX_NODES:
            return False
        kind = type(node)
        if kind is dict:
            for key, child in node.items():
                if type(key) is not str:
                    return False
                kind = type(child)
                if kind is dict or kind is list or kind is tuple:
                    stack.append(child)
                elif kind is not str and kind is not int and kind is not bool and child is not None:
                    return False
        elif kind is list or kind is tuple:
            for child in node:
                kind = type(child)
                if kind is dict or kind is list or kind is tuple:
                    stack.append(child)
                elif kind is not str and kind is not int and kind is not bool and child is not None:
                    return False
        else:
            return False
    return True


def dumps(value: Any) -> bytes:
    """Compact JSON as UTF-8 bytes, `Decimal` written as an exact number."""
    if type(value) in (dict, list, tuple) and _plain(value):
        return _PLAIN_ENCODER.encode(value).encode()
    return _encode(value).encode()


# --- the base64 forms JSON travels in (proofs, settlement and PAYMENT-REQUIRED headers) -------


# A proof is a few hundred bytes; anything far larger is not a proof.
MAX_PROOF_CHARS = 16_384


class ProofError(ValueError):
    """Not a decodable X-PAYMENT value."""


def b64url(raw: bytes) -> str:
    """base64url without padding: the form every `X-PAYMENT` value is emitted in."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


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
        return loads(raw)
    except JSONError as exc:
        raise ProofError(str(exc)) from None
