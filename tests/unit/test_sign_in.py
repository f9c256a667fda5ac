"""The x402 `sign-in-with-x` extension, as the client reads a challenge, writes the EIP-4361
message and frames the `SIGN-IN-WITH-X` header, and which challenges it refuses to sign.

The expected messages are those the foundation's `format_siwe_message` (Sign-In with
Ethereum 5.0.2) writes for the same challenges; tests/integration/test_sign_in_foundation.py
compares every shape with the foundation's own code, which needs an environment of its
own."""

from __future__ import annotations

import base64
import json
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from eth_account import Account
from eth_account.messages import encode_defunct

from x402_client._protocol.sign_in import (
    SignInChallenge,
    SignInRefused,
    personal_sign_payload,
    read_sign_in,
    sign_in_header,
    siwe_message,
)
from x402_client._rails._evm_signing import DigestSigner, keccak256

KEY = "0x" + "42" * 32
ADDRESS = str(Account.from_key(KEY).address)
NOW = datetime(2024, 1, 15, 10, 31, tzinfo=timezone.utc)
URL = "https://api.example.com/premium-data"
#: The spec's example challenge.
INFO: dict[str, Any] = {
    "domain": "api.example.com",
    "uri": "https://api.example.com/premium-data",
    "version": "1",
    "nonce": "a1b2c3d4e5f67890a1b2c3d4e5f67890",
    "issuedAt": "2024-01-15T10:30:00.000Z",
    "expirationTime": "2024-01-15T10:35:00.000Z",
    "statement": "Sign in to access premium data",
    "resources": ["https://api.example.com/premium-data"],
}
CHAINS = [{"chainId": "eip155:8453", "type": "eip191"}]


def offered(info: dict[str, Any] | None = None, **changes: Any) -> dict[str, Any]:
    """A 402's `extensions` offering `info` (the spec's example) with `changes`; a change to
    None removes the field."""
    merged = {**(INFO if info is None else info), **changes}
    merged = {key: value for key, value in merged.items() if value is not None}
    return {"sign-in-with-x": {"info": merged, "supportedChains": CHAINS}}


def read(extensions: dict[str, Any], url: str = URL, chains: Any = (8453,)) -> SignInChallenge:
    found = read_sign_in(extensions, url=url, chains=chains, now=NOW)
    assert found is not None
    return found


def test_the_spec_example_message_is_the_foundations_byte_for_byte() -> None:
    challenge = read(offered())
    message = siwe_message(challenge, ADDRESS)
    assert message == (
        "api.example.com wants you to sign in with your Ethereum account:\n"
        f"{ADDRESS}\n\nSign in to access premium data\n\n"
        "URI: https://api.example.com/premium-data\nVersion: 1\nChain ID: 8453\n"
        "Nonce: a1b2c3d4e5f67890a1b2c3d4e5f67890\nIssued At: 2024-01-15T10:30:00.000Z\n"
        "Expiration Time: 2024-01-15T10:35:00.000Z\n"
        "Resources:\n- https://api.example.com/premium-data"
    )


HEAD = f"api.example.com wants you to sign in with your Ethereum account:\n{ADDRESS}\n"
NONCE = "Nonce: a1b2c3d4e5f67890a1b2c3d4e5f67890\n"


@pytest.mark.parametrize(
    ("url", "changes", "expected"),
    [
        # no statement: two empty lines between the address and URI
        (
            URL,
            {"statement": None, "expirationTime": None, "resources": None},
            f"{HEAD}\n\nURI: {URL}\nVersion: 1\nChain ID: 8453\n{NONCE}"
            "Issued At: 2024-01-15T10:30:00.000Z",
        ),
        # the optional lines, in EIP-4361's order
        (
            URL,
            {"notBefore": "2024-01-15T10:30:00.000Z", "requestId": "req-1", "resources": None},
            f"{HEAD}\nSign in to access premium data\n\nURI: {URL}\nVersion: 1\n"
            f"Chain ID: 8453\n{NONCE}Issued At: 2024-01-15T10:30:00.000Z\n"
            "Expiration Time: 2024-01-15T10:35:00.000Z\nNot Before: 2024-01-15T10:30:00.000Z\n"
            "Request ID: req-1",
        ),
        # the foundation's Python server writes microseconds; a +00:00 offset stays
        (
            URL,
            {"issuedAt": "2024-01-15T10:30:00.724915+00:00", "statement": None},
            f"{HEAD}\n\nURI: {URL}\nVersion: 1\nChain ID: 8453\n{NONCE}"
            "Issued At: 2024-01-15T10:30:00.724915+00:00\n"
            f"Expiration Time: 2024-01-15T10:35:00.000Z\nResources:\n- {URL}",
        ),
        # a domain with its port (the foundation's Python server), several resources
        (
            "http://127.0.0.1:8000/weather?city=x",
            {
                "domain": "127.0.0.1:8000",
                "uri": "http://127.0.0.1:8000/weather?city=x",
                "statement": None,
                "expirationTime": None,
                "resources": ["http://127.0.0.1:8000/weather?city=x", "http://127.0.0.1:8000/b"],
            },
            f"127.0.0.1:8000 wants you to sign in with your Ethereum account:\n{ADDRESS}\n\n\n"
            "URI: http://127.0.0.1:8000/weather?city=x\nVersion: 1\nChain ID: 8453\n"
            f"{NONCE}Issued At: 2024-01-15T10:30:00.000Z\nResources:\n"
            "- http://127.0.0.1:8000/weather?city=x\n- http://127.0.0.1:8000/b",
        ),
    ],
)
def test_every_shape_of_message_is_the_foundations(
    url: str, changes: dict[str, Any], expected: str
) -> None:
    assert siwe_message(read(offered(**changes), url=url), ADDRESS) == expected


def test_without_a_statement_the_message_has_two_empty_lines() -> None:
    challenge = read(offered(statement=None))
    assert f"{ADDRESS}\n\n\nURI: " in siwe_message(challenge, ADDRESS)


def test_the_header_carries_a_personal_sign_signature_of_the_message() -> None:
    challenge = read(offered(notBefore="2024-01-15T10:30:00.000Z", requestId="r1"))
    message = siwe_message(challenge, ADDRESS)
    signer = DigestSigner(bytes.fromhex(KEY[2:]))
    signature = "0x" + signer.sign(keccak256(personal_sign_payload(message))).hex()
    # EIP-191 personal_sign, as eth-account signs and recovers it
    assert (
        signature == "0x" + Account.sign_message(encode_defunct(text=message), KEY).signature.hex()
    )
    header = sign_in_header(challenge, signer.address, signature)
    decoded = json.loads(base64.b64decode(header, validate=True))
    assert decoded == {
        **{key: INFO[key] for key in ("domain", "uri", "version", "nonce", "issuedAt")},
        "address": ADDRESS,
        "chainId": "eip155:8453",
        "type": "eip191",
        "statement": INFO["statement"],
        "expirationTime": INFO["expirationTime"],
        "notBefore": "2024-01-15T10:30:00.000Z",
        "requestId": "r1",
        "resources": INFO["resources"],
        "signature": signature,
    }
    assert Account.recover_message(encode_defunct(text=message), signature=signature) == ADDRESS
    # the foundation's encoding: json.dumps' default separators, standard padded base64
    assert header == base64.b64encode(json.dumps(decoded).encode()).decode()


def test_the_header_leaves_out_what_the_challenge_did_not_give() -> None:
    challenge = read(offered(statement=None, expirationTime=None, resources=None))
    decoded = json.loads(base64.b64decode(sign_in_header(challenge, ADDRESS, "0x00")))
    assert list(decoded) == [
        "domain", "address", "uri", "version", "chainId", "type", "nonce", "issuedAt", "signature"
    ]  # fmt: skip


def test_a_402_without_the_extension_offers_no_sign_in() -> None:
    assert read_sign_in(None, url=URL, chains=(8453,), now=NOW) is None
    assert read_sign_in({"bazaar": {}}, url=URL, chains=(8453,), now=NOW) is None


@pytest.mark.parametrize(
    ("url", "domain"),
    [
        ("https://api.example.com/premium-data", "api.example.com"),
        ("https://api.example.com/premium-data", "api.example.com:443"),
        ("https://API.example.com:443/premium-data", "api.example.com"),
    ],
)
def test_the_domain_may_name_the_default_port_or_not(url: str, domain: str) -> None:
    assert read(offered(domain=domain), url=url).domain == domain


def test_the_first_chain_the_client_pays_on_is_chosen() -> None:
    chains = [
        {"chainId": "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp", "type": "ed25519"},
        {"chainId": "eip155:1", "type": "eip191"},
        {"chainId": "eip155:8453", "type": "eip191"},
    ]
    extensions = {"sign-in-with-x": {"info": INFO, "supportedChains": chains}}
    assert read(extensions, chains={8453, 137}).network == "eip155:8453"


LATER = "2024-01-15T10:45:00.000Z"


@pytest.mark.parametrize(
    ("url", "changes", "why"),
    [
        (URL, {"domain": "evil.example"}, "domain is not the requested host"),
        (URL, {"domain": "api.example.com:8443"}, "domain is not the requested host"),
        ("http://127.0.0.1:8000/w", {"domain": "127.0.0.1"}, "domain is not the requested host"),
        (URL, {"uri": "https://evil.example/premium-data"}, "uri is not on the requested origin"),
        (URL, {"uri": "http://api.example.com/premium-data"}, "uri is not on the requested"),
        (URL, {"uri": "https://api.example.com:444/x"}, "uri is not on the requested origin"),
        (URL, {"uri": "/premium-data"}, "uri is not on the requested origin"),
        (URL, {"resources": ["https://evil.example/x"]}, "resources are not all on the"),
        (URL, {"resources": [URL] * 9}, "resources are not a list of at most 8"),
        (URL, {"resources": [URL + "?" + "a" * 2048]}, "resources are not URLs of at most"),
        (URL, {"statement": "x" * 257}, "statement is longer than 256 characters"),
        (URL, {"statement": "ok\nURI: https://evil.example"}, "statement is longer than"),
        (URL, {"nonce": "short"}, "nonce is not 8 to 128 letters and digits"),
        (URL, {"nonce": "abcdefgh\nX"}, "nonce is longer than"),
        (URL, {"version": "2"}, "version is not 1"),
        (URL, {"issuedAt": "yesterday"}, "issuedAt is not an RFC 3339 time"),
        (URL, {"issuedAt": "2024-02-30T10:30:00Z"}, "issuedAt is not a valid time"),
        (URL, {"issuedAt": "2024-01-15T10:40:00Z"}, "issuedAt lies in the future"),
        (URL, {"notBefore": "2024-01-15T10:40:00Z"}, "notBefore lies in the future"),
        (URL, {"expirationTime": "2024-01-15T10:30:59Z"}, "it has expired"),
        (URL, {"expirationTime": "2024-01-15T11:31:01Z"}, "more than 60 minutes"),
        (URL, {"requestId": "two words"}, "requestId is not one word"),
        (URL, {"signatureScheme": "eip1271"}, "signature scheme other than eip191"),
        (URL, {"domain": None}, "domain is missing"),
    ],
)
def test_a_challenge_the_client_must_not_sign_is_refused(
    url: str, changes: dict[str, Any], why: str
) -> None:
    with pytest.raises(SignInRefused, match=why.replace("(", r"\(")):
        read_sign_in(offered(**changes), url=url, chains=(8453,), now=NOW)


@pytest.mark.parametrize(
    ("chains", "why"),
    [
        ([{"chainId": "eip155:1", "type": "eip191"}], r"EVM chains this client does not pay on"),
        ([{"chainId": "eip155:8453", "type": "eip1271"}], "no EVM chain with an eip191"),
        ([{"chainId": "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp", "type": "ed25519"}], "no EVM"),
        ([{"chainId": "eip155:0x2105", "type": "eip191"}], "no EVM chain"),
        ([], "no EVM chain"),
        ("eip155:8453", "lists no supported chains"),
    ],
)
def test_a_chain_the_client_does_not_pay_on_is_refused(chains: Any, why: str) -> None:
    extensions = {"sign-in-with-x": {"info": INFO, "supportedChains": chains}}
    with pytest.raises(SignInRefused, match=why):
        read_sign_in(extensions, url=URL, chains=(8453,), now=NOW)


def test_the_lifetime_limit_is_an_hour_from_now() -> None:
    within = (NOW + timedelta(minutes=59)).isoformat().replace("+00:00", "Z")
    assert read(offered(expirationTime=within)).expiration_time == within
