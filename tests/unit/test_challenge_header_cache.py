"""A merchant's repeated `PAYMENT-REQUIRED` header is decoded once, and the limit still
holds for every 402 that carries it."""

from __future__ import annotations

import base64
import json

import pytest

from x402_client import InvalidChallenge
from x402_client._protocol.dialects import PAYMENT_REQUIRED, Dialect, challenge_of, read_challenge


def _header(price: str = "10000") -> str:
    required = {
        "x402Version": 2,
        "resource": {"url": "http://127.0.0.1:9/paid"},
        "accepts": [
            {
                "scheme": "exact",
                "network": "eip155:84532",
                "asset": "0x" + "ab" * 20,
                "amount": price,
                "payTo": "0x" + "cd" * 20,
                "maxTimeoutSeconds": 300,
                "extra": {"name": "EURC", "version": "2"},
            }
        ],
    }
    return base64.b64encode(json.dumps(required).encode()).decode()


def test_the_same_header_gives_the_same_challenge_and_another_header_its_own() -> None:
    header = _header()
    first = challenge_of(b"", {PAYMENT_REQUIRED: header}, limit=65_536)
    again = challenge_of(b"", {PAYMENT_REQUIRED: header}, limit=65_536)
    other = challenge_of(b"", {PAYMENT_REQUIRED: _header("20000")}, limit=65_536)
    assert first is not None and again is not None and other is not None
    assert first.dialect is Dialect.STANDARD_V2
    assert again == first == read_challenge(b"", {PAYMENT_REQUIRED: header}, limit=65_536)
    assert other.accepts[0]["amount"] == "20000" != first.accepts[0]["amount"]


def test_a_header_over_the_limit_is_refused_even_after_it_was_read_under_a_larger_one() -> None:
    header = _header("30000")
    assert challenge_of(b"", {PAYMENT_REQUIRED: header}, limit=65_536) is not None
    with pytest.raises(InvalidChallenge):
        challenge_of(b"", {PAYMENT_REQUIRED: header}, limit=len(header) - 1)


def test_a_malformed_header_is_refused_every_time() -> None:
    for _ in range(2):
        with pytest.raises(InvalidChallenge):
            challenge_of(b"", {PAYMENT_REQUIRED: "not base64 JSON"}, limit=65_536)
