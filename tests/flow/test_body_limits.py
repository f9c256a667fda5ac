"""Bodies are read whole only when that is safe: a declared, small, uncompressed length.

A hostile merchant can send a tiny gzip body that inflates to gigabytes; its
`Content-Length` says nothing about the decoded size, so such a body is read in bounded
chunks like one without a length.
"""

from __future__ import annotations

import gzip
import json

import httpx
import pytest

from x402_client import InvalidChallenge, with_eur_payment
from x402_client._state.http import known_small

LIMIT = 64 * 1024

pytestmark = pytest.mark.anyio


def _response(body: bytes, **headers: str) -> httpx.Response:
    return httpx.Response(402, headers=headers, content=body)


def test_known_small_needs_a_small_declared_identity_length() -> None:
    assert known_small(_response(b"x" * 10), LIMIT)  # httpx sets Content-Length
    assert not known_small(_response(b"x" * (LIMIT + 1)), LIMIT)
    assert not known_small(_response(b"x", **{"content-encoding": "gzip"}), LIMIT)
    chunked = httpx.Response(402, content=iter([b"x"]))  # no Content-Length
    assert "content-length" not in chunked.headers
    assert not known_small(chunked, LIMIT)
    assert known_small(_response(b"x", **{"Content-Encoding": "identity"}), LIMIT)
    # A header given twice is not one declared length or encoding: read with a bound.
    twice = [(b"Content-Length", b"1"), (b"content-length", b"1")]
    assert not known_small(httpx.Response(402, headers=twice, content=iter([b"x"])), LIMIT)
    encodings = [(b"Content-Length", b"1"), (b"Content-Encoding", b"identity")]
    encodings.append((b"content-encoding", b"gzip"))
    assert not known_small(httpx.Response(402, headers=encodings, content=iter([b"x"])), LIMIT)


async def test_a_gzip_bomb_402_is_refused_without_inflating_it_whole() -> None:
    challenge = {
        "x402Version": 2,
        "accepts": [
            {
                "scheme": "euro",
                "network": "provider:mainnet",
                "amount": "0.10",
                "asset": "EURO",
                "payTo": "ACC_M",
                "paymentRequestCode": "pr_1",
            }
        ],
        "padding": " " * (50 * 1024 * 1024),
    }
    bomb = gzip.compress(json.dumps(challenge).encode())
    assert len(bomb) < LIMIT  # small on the wire, 50 MB inflated

    def merchant(request: httpx.Request) -> httpx.Response:
        return httpx.Response(402, headers={"content-encoding": "gzip"}, content=bomb)

    options = {
        "api_key": "key-not-used",
        "from_account": "ACC_P",
        "api_url": "http://127.0.0.1:9",  # nothing listens: a payment attempt would fail
    }
    async with with_eur_payment(
        httpx.AsyncClient(transport=httpx.MockTransport(merchant)), options
    ) as client:
        with pytest.raises(InvalidChallenge, match="exceeds the 65536-byte limit") as caught:
            await client.get("http://merchant.test/paid")
    assert caught.value.money_moved is False
