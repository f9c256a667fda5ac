"""Signing in instead of paying again: the x402 `sign-in-with-x` extension, EVM side. No I/O.

A v2 merchant may declare `sign-in-with-x` in its 402's `extensions`: a challenge (`info`:
domain, uri, version, nonce, issuedAt, and optional statement, expirationTime, notBefore,
requestId, resources) and the chains it accepts a signature from (`supportedChains`). A
wallet that already paid the resource answers with the request again, carrying the
`SIGN-IN-WITH-X` header: standard base64 of a JSON object that echoes the challenge, names
the chain and the address, and holds an EIP-191 (`personal_sign`) signature of the
EIP-4361 (Sign-In with Ethereum) message built from them. The merchant serves it without a
payment if its records say that address paid; otherwise it answers 402 again.

This module reads a challenge (`read_sign_in`), refusing one this client must not sign
(`SignInRefused`), builds the EIP-4361 message (`siwe_message`, byte for byte the
foundation's `format_siwe_message`) and frames the header (`sign_in_header`, byte for byte
the foundation's `encode_siwx_header`). The flow signs and sends (`_flow/sign_in.py`).

What is signed is a credential for the origin that asked: a challenge is signed only when

- its `domain` is the requested URL's host (with its port, or without it when the port is
  the scheme's default) and its `uri`, and every one of its `resources`, has the requested
  URL's origin (scheme, host and port): a 402 cannot get a sign-in for another site;
- a `supportedChains` entry is an `eip155` chain this client pays on with its EVM key,
  with the `eip191` signature type (an EOA key signs, nothing else);
- it is fresh and short-lived: `issuedAt` and `notBefore` not more than `CLOCK_SKEW`
  ahead of our clock, `expirationTime` (when given) in the future and at most
  `MAX_LIFETIME` ahead;
- its texts are small and single-line (`statement` at most `MAX_STATEMENT` characters,
  at most `MAX_RESOURCES` resources of at most `MAX_URI` characters each, a nonce of 8 to
  128 letters and digits): nothing a merchant writes can add a line to the message.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "CLOCK_SKEW",
    "MAX_LIFETIME",
    "MAX_RESOURCES",
    "MAX_STATEMENT",
    "MAX_URI",
    "SIGN_IN_HEADER",
    "SIGN_IN_WITH_X",
    "SignInChallenge",
    "SignInRefused",
    "personal_sign_payload",
    "read_sign_in",
    "sign_in_header",
    "siwe_message",
]

#: The extension's key in a 402's `extensions`.
SIGN_IN_WITH_X = "sign-in-with-x"
#: The request header that carries the signed message.
SIGN_IN_HEADER = "SIGN-IN-WITH-X"
#: How far ahead of our clock a challenge's `issuedAt` / `notBefore` may be.
CLOCK_SKEW = timedelta(minutes=5)
#: The longest a signed message may stay valid (`expirationTime` - now).
MAX_LIFETIME = timedelta(hours=1)
MAX_STATEMENT = 256
MAX_RESOURCES = 8
MAX_URI = 2048

_NONCE_RE = re.compile(r"\A[A-Za-z0-9]{8,128}\Z")
_CHAIN_RE = re.compile(r"\Aeip155:([1-9][0-9]{0,17})\Z")
#: RFC 3339 date-time, as EIP-4361 writes it.
_TIME_RE = re.compile(
    r"\A(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?"
    r"([Zz]|[+-]\d{2}:\d{2})\Z"
)
#: Printable ASCII without spaces: what a request id may hold (EIP-4361 `*pchar`).
_TOKEN_RE = re.compile(r"\A[!-~]{1,200}\Z")
_DEFAULT_PORTS = {"http": 80, "https": 443}


class SignInRefused(ValueError):
    """A `sign-in-with-x` challenge this client does not sign; the message says why (it
    never holds a signature or a key)."""


@dataclasses.dataclass(frozen=True)
class SignInChallenge:
    """A checked `sign-in-with-x` challenge and the chain chosen to sign on. The texts are
    the merchant's, verbatim: the message and the header echo them unchanged."""

    domain: str
    uri: str
    version: str
    nonce: str
    issued_at: str
    #: The chosen `supportedChains` entry: `eip155:<chain_id>`.
    network: str
    chain_id: int
    statement: str | None = None
    expiration_time: str | None = None
    not_before: str | None = None
    request_id: str | None = None
    resources: tuple[str, ...] | None = None
    signature_scheme: str | None = None


def read_sign_in(
    extensions: Mapping[str, Any] | None,
    *,
    url: str,
    chains: Collection[int],
    now: datetime,
) -> SignInChallenge | None:
    """The `sign-in-with-x` challenge of a 402's `extensions`, checked against the URL the
    402 answered (`url`), the EVM chains this client pays on (`chains`) and our clock
    (`now`, aware). None when the 402 offers no sign-in; `SignInRefused` for one this
    client must not sign (the module docstring lists the rules)."""
    declared = (extensions or {}).get(SIGN_IN_WITH_X)
    if declared is None:
        return None
    if not isinstance(declared, Mapping) or not isinstance(declared.get("info"), Mapping):
        raise SignInRefused("the sign-in challenge has no info object")
    info: Mapping[str, Any] = declared["info"]
    network, chain_id = _chain(declared.get("supportedChains"), chains)
    origin = _origin(url)
    if origin is None:
        raise SignInRefused("the requested URL is not an http(s) URL")
    domain, uri = _text(info, "domain", 255), _text(info, "uri", MAX_URI)
    if domain.lower() not in _domains(origin):
        raise SignInRefused("its domain is not the requested host")
    if _origin(uri) != origin:
        raise SignInRefused("its uri is not on the requested origin")
    if _text(info, "version", 8) != "1":
        raise SignInRefused("its version is not 1")
    nonce = _text(info, "nonce", 128)
    if not _NONCE_RE.match(nonce):
        raise SignInRefused("its nonce is not 8 to 128 letters and digits")
    times = _times(info, now)
    return SignInChallenge(
        domain=domain,
        uri=uri,
        version="1",
        nonce=nonce,
        issued_at=times["issuedAt"] or "",
        network=network,
        chain_id=chain_id,
        statement=_statement(info),
        expiration_time=times["expirationTime"],
        not_before=times["notBefore"],
        request_id=_request_id(info),
        resources=_resources(info, origin),
        signature_scheme=_signature_scheme(info),
    )


def _chain(supported: Any, chains: Collection[int]) -> tuple[str, int]:
    """The first `supportedChains` entry this client can sign for: (network, chain id)."""
    if not isinstance(supported, Sequence) or isinstance(supported, str):
        raise SignInRefused("the sign-in challenge lists no supported chains")
    offered = []
    for entry in supported:
        if not isinstance(entry, Mapping) or entry.get("type") != "eip191":
            continue
        network = entry.get("chainId")
        found = _CHAIN_RE.match(network) if isinstance(network, str) else None
        if network is None or found is None:
            continue
        offered.append(str(network))
        if int(found.group(1)) in chains:
            return str(network), int(found.group(1))
    if offered:
        shown = ", ".join(str(n)[:30] for n in offered[:4])
        raise SignInRefused(f"it offers EVM chains this client does not pay on ({shown})")
    raise SignInRefused("it offers no EVM chain with an eip191 signature")


def _origin(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an absolute http(s) URL, the port made explicit."""
    if not isinstance(url, str) or any(c.isspace() for c in url):
        return None
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname or parts.username is not None:
        return None
    return scheme, parts.hostname.lower(), port if port is not None else _DEFAULT_PORTS[scheme]


def _domains(origin: tuple[str, str, int]) -> set[str]:
    """The `domain` values that name `origin`'s host: with its port, and without it when the
    port is the scheme's default (merchants write either)."""
    scheme, host, port = origin
    shown = f"[{host}]" if ":" in host else host
    found = {f"{shown}:{port}"}
    if port == _DEFAULT_PORTS[scheme]:
        found.add(shown)
    return found


def _text(info: Mapping[str, Any], key: str, limit: int) -> str:
    value = info.get(key)
    if not isinstance(value, str) or not value:
        raise SignInRefused(f"its {key} is missing")
    if len(value) > limit or not value.isprintable():
        raise SignInRefused(f"its {key} is longer than {limit} characters or not one line")
    return value


def _optional(info: Mapping[str, Any], key: str, limit: int) -> str | None:
    return None if info.get(key) is None else _text(info, key, limit)


def _parse_time(text: str, key: str) -> datetime:
    found = _TIME_RE.match(text)
    if found is None:
        raise SignInRefused(f"its {key} is not an RFC 3339 time")
    year, month, day, hour, minute, second, fraction, zone = found.groups()
    try:
        micro = int((fraction or ".0")[1:7].ljust(6, "0"))
        offset = timedelta(0)
        if zone not in ("Z", "z"):
            sign = 1 if zone[0] == "+" else -1
            offset = sign * timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6]))
        stamp = datetime(
            int(year), int(month), int(day), int(hour), int(minute), int(second), micro,
            tzinfo=timezone(offset),
        )  # fmt: skip
    except ValueError:
        raise SignInRefused(f"its {key} is not a valid time") from None
    return stamp


def _times(info: Mapping[str, Any], now: datetime) -> dict[str, str | None]:
    """issuedAt, expirationTime and notBefore, each checked against `now`."""
    texts = {
        "issuedAt": _text(info, "issuedAt", 64),
        "expirationTime": _optional(info, "expirationTime", 64),
        "notBefore": _optional(info, "notBefore", 64),
    }
    stamps = {key: _parse_time(text, key) for key, text in texts.items() if text is not None}
    for key in ("issuedAt", "notBefore"):
        if key in stamps and stamps[key] > now + CLOCK_SKEW:
            raise SignInRefused(f"its {key} lies in the future")
    expires = stamps.get("expirationTime")
    if expires is not None and expires <= now:
        raise SignInRefused("it has expired")
    if expires is not None and expires > now + MAX_LIFETIME:
        raise SignInRefused(
            f"it would stay valid for more than {int(MAX_LIFETIME.total_seconds() // 60)} minutes"
        )
    return texts


def _statement(info: Mapping[str, Any]) -> str | None:
    statement = info.get("statement")
    if statement is None or statement == "":
        return None
    return _text(info, "statement", MAX_STATEMENT)


def _request_id(info: Mapping[str, Any]) -> str | None:
    request_id = _optional(info, "requestId", 200)
    if request_id is not None and not _TOKEN_RE.match(request_id):
        raise SignInRefused("its requestId is not one word of printable characters")
    return request_id


def _resources(info: Mapping[str, Any], origin: tuple[str, str, int]) -> tuple[str, ...] | None:
    resources = info.get("resources")
    if resources is None:
        return None
    if not isinstance(resources, list) or len(resources) > MAX_RESOURCES:
        raise SignInRefused(f"its resources are not a list of at most {MAX_RESOURCES}")
    for resource in resources:
        if not isinstance(resource, str) or len(resource) > MAX_URI:
            raise SignInRefused(f"its resources are not URLs of at most {MAX_URI} characters")
        if _origin(resource) != origin:
            raise SignInRefused("its resources are not all on the requested origin")
    return tuple(resources)


def _signature_scheme(info: Mapping[str, Any]) -> str | None:
    scheme = info.get("signatureScheme")
    if scheme is not None and scheme != "eip191":
        raise SignInRefused("it asks for a signature scheme other than eip191")
    return scheme


def siwe_message(challenge: SignInChallenge, address: str) -> str:
    """The EIP-4361 message that signs `challenge` in as `address` (EIP-55 checksummed):
    lines joined by LF, no trailing LF; without a statement, two empty lines between the
    address and `URI:`; optional lines only when given."""
    lines = [
        f"{challenge.domain} wants you to sign in with your Ethereum account:",
        address,
        "",
    ]
    if challenge.statement is not None:
        lines.append(challenge.statement)
    lines += [
        "",
        f"URI: {challenge.uri}",
        f"Version: {challenge.version}",
        f"Chain ID: {challenge.chain_id}",
        f"Nonce: {challenge.nonce}",
        f"Issued At: {challenge.issued_at}",
    ]
    if challenge.expiration_time is not None:
        lines.append(f"Expiration Time: {challenge.expiration_time}")
    if challenge.not_before is not None:
        lines.append(f"Not Before: {challenge.not_before}")
    if challenge.request_id is not None:
        lines.append(f"Request ID: {challenge.request_id}")
    if challenge.resources:
        lines.append("Resources:")
        lines += [f"- {resource}" for resource in challenge.resources]
    return "\n".join(lines)


def personal_sign_payload(message: str) -> bytes:
    """What EIP-191 `personal_sign` hashes (Keccak-256) for `message`: the prefix, the
    byte length in decimal, the UTF-8 bytes."""
    data = message.encode("utf-8")
    return b"\x19Ethereum Signed Message:\n" + str(len(data)).encode("ascii") + data


def sign_in_header(challenge: SignInChallenge, address: str, signature: str) -> str:
    """The `SIGN-IN-WITH-X` header value: standard base64 of the JSON payload (the
    challenge echoed, the chain, `address`, `signature`), keys in the foundation's order,
    absent fields left out."""
    payload: dict[str, Any] = {
        "domain": challenge.domain,
        "address": address,
        "uri": challenge.uri,
        "version": challenge.version,
        "chainId": challenge.network,
        "type": "eip191",
        "nonce": challenge.nonce,
        "issuedAt": challenge.issued_at,
        "statement": challenge.statement,
        "expirationTime": challenge.expiration_time,
        "notBefore": challenge.not_before,
        "requestId": challenge.request_id,
        "resources": None if challenge.resources is None else list(challenge.resources),
        "signatureScheme": challenge.signature_scheme,
        "signature": signature,
    }
    present = {key: value for key, value in payload.items() if value is not None}
    return base64.b64encode(json.dumps(present).encode("utf-8")).decode("ascii")
