"""`_json`: the fast paths write and refuse exactly what the general ones do."""

from __future__ import annotations

import random
from decimal import Decimal
from typing import Any

import pytest

from x402_client._protocol import exact_json as _json


def _document(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth < 4 and roll < 0.25:
        keys = ["a", "é", "\u2028", "k1", "", "x402Version"]
        return {rng.choice(keys): _document(rng, depth + 1) for _ in range(rng.randint(0, 4))}
    if depth < 4 and roll < 0.4:
        return [_document(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    if depth < 4 and roll < 0.45:
        return tuple(_document(rng, depth + 1) for _ in range(rng.randint(0, 3)))
    return rng.choice(
        [None, True, False, 0, -5, 10**30, "x", 'ü\n"\\', "\ud800", "\x00", "", Decimal("0.10")]
    )


def test_dumps_writes_what_the_general_encoder_writes() -> None:
    rng = random.Random(402)
    for _ in range(3000):
        document = {"doc": _document(rng)}
        assert _json.dumps(document) == _json._encode(document).encode()


def test_dumps_keeps_decimals_exact_and_refuses_floats_anywhere() -> None:
    assert _json.dumps({"amount": Decimal("0.10"), "n": [1, "a"]}) == b'{"amount":0.10,"n":[1,"a"]}'
    with pytest.raises(_json.JSONError):
        _json.dumps({"nested": [{"price": 0.1}]})


@pytest.mark.parametrize("as_bytes", [False, True])
def test_loads_refuses_nesting_deeper_than_the_limit(as_bytes: bool) -> None:
    deep = "[" * (_json.MAX_DEPTH + 1) + "]" * (_json.MAX_DEPTH + 1)
    ok = "[" * _json.MAX_DEPTH + "]" * _json.MAX_DEPTH
    with pytest.raises(_json.JSONError, match="nested deeper"):
        _json.loads(deep.encode() if as_bytes else deep)
    assert _json.loads(ok.encode() if as_bytes else ok) is not None


def test_loads_counts_brackets_in_utf16_too() -> None:
    deep = "[" * (_json.MAX_DEPTH + 1) + "]" * (_json.MAX_DEPTH + 1)
    with pytest.raises(_json.JSONError, match="nested deeper"):
        _json.loads(deep.encode("utf-16"))
