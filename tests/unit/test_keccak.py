"""Keccak-256 on the signing path: pycryptodome's private fast path is isolated in one
function, checked against the library's public API, and this test notices when the library
changes under it."""

from __future__ import annotations

import importlib
import types
from collections.abc import Callable

import pytest

from tests.needs import require
from x402_client._protocol import evm_words
from x402_client._protocol.evm_words import _reused_state_keccak, keccak256

require("Crypto.Hash.keccak", "pip install 'x402-eur[evm]'")

keccak_module = importlib.import_module("Crypto.Hash.keccak")

#: Known Keccak-256 digests (Ethereum's, not SHA3-256).
KNOWN = {
    b"": "c5d2460186f7233c927e7db2dcc703c0e500b653ca82273b7bfad8045d85a470",
    b"abc": "4e03657aea45a94fc7d47ba826c8d667c0d1e6e33a64a036ec44f58fa12d6c45",
}


#: What the fast path takes from pycryptodome's private Keccak library.
USED = ("keccak_init", "keccak_reset", "keccak_absorb", "keccak_digest", "keccak_destroy")


def public_keccak(data: bytes) -> bytes:
    digest: bytes = keccak_module.new(digest_bits=256, data=data).digest()
    return digest


def test_the_installed_pycryptodome_still_offers_the_fast_path() -> None:
    # Fails when a pycryptodome release moves what the fast path uses: the client would
    # still be right (it falls back to the public API) but a third slower, and this is
    # where that shows.
    fast = _reused_state_keccak(keccak_module)
    assert fast is not None


@pytest.mark.parametrize("size", [0, 1, 31, 32, 33, 135, 136, 137, 1000, 100_000])
def test_the_fast_path_agrees_with_the_public_api(size: int) -> None:
    fast = _reused_state_keccak(keccak_module)
    assert fast is not None
    data = bytes(range(256)) * (size // 256) + bytes(range(size % 256))
    assert fast(data) == public_keccak(data)
    # the state is reused: a second digest is not polluted by the first
    assert fast(data) == public_keccak(data)


@pytest.mark.parametrize(("data", "digest"), KNOWN.items())
def test_keccak256_gives_the_known_digests(data: bytes, digest: str) -> None:
    assert keccak256(data).hex() == digest


def _without(attribute: str) -> types.SimpleNamespace:
    """A keccak module whose private library lacks `attribute` (a changed release)."""
    lib = keccak_module._raw_keccak_lib  # type: ignore[attr-defined]
    kept = {name: getattr(lib, name) for name in USED if name != attribute}
    return types.SimpleNamespace(
        _raw_keccak_lib=types.SimpleNamespace(**kept), new=keccak_module.new
    )


@pytest.mark.parametrize("missing", ["keccak_reset", "keccak_digest"])
def test_a_library_without_the_private_parts_falls_back_to_the_public_api(missing: str) -> None:
    assert _reused_state_keccak(_without(missing)) is None


def test_a_fast_path_that_disagrees_with_the_public_api_is_not_trusted() -> None:
    lib = keccak_module._raw_keccak_lib  # type: ignore[attr-defined]
    real_digest: Callable[..., int] = lib.keccak_digest

    def wrong_padding(handle: object, out: object, size: object, _padding: object) -> int:
        from Crypto.Util._raw_api import c_ubyte

        return real_digest(handle, out, size, c_ubyte(6))  # SHA3's padding, not Keccak's

    kept = {name: getattr(lib, name) for name in USED}
    kept["keccak_digest"] = wrong_padding
    module = types.SimpleNamespace(
        _raw_keccak_lib=types.SimpleNamespace(**kept), new=keccak_module.new
    )
    assert _reused_state_keccak(module) is None


def test_keccak256_uses_one_implementation_chosen_once() -> None:
    assert evm_words._keccak() is evm_words._keccak()
