"""Ethereum's hashing and EIP-712 words, for everything that computes a digest: Keccak-256,
addresses and uint256s as 32-byte words, EIP-55 addresses. Pure; the Keccak implementation
(pycryptodome, the `evm` extra) is imported on first use, so importing this module stays
free of it.
"""

from __future__ import annotations

import functools
import importlib
import re
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["ADDRESS_RE", "address_word", "checksum_address", "keccak256", "uint_word"]

ADDRESS_RE = re.compile(r"\A0x[0-9a-fA-F]{40}\Z")


@functools.cache
def _keccak() -> Callable[[bytes], bytes]:
    try:
        # pycryptodome directly: a third faster than eth-hash's checking wrapper.
        keccak_module: Any = importlib.import_module("Crypto.Hash.keccak")
    except ImportError:
        from eth_hash.auto import keccak as eth_keccak

        return eth_keccak

    def pycryptodome_keccak(data: bytes) -> bytes:
        digest: bytes = keccak_module.new(digest_bits=256, data=data).digest()
        return digest

    return _reused_state_keccak(keccak_module) or pycryptodome_keccak


def _reused_state_keccak(keccak_module: Any) -> Callable[[bytes], bytes] | None:
    """pycryptodome's Keccak with one hashing state per thread, reset for each digest: half
    the cost of a new hash object per call (a digest is a few microseconds, the object's
    set-up as much again). None when this pycryptodome does not expose what it needs."""
    try:
        raw_api: Any = importlib.import_module("Crypto.Util._raw_api")
        lib = keccak_module._raw_keccak_lib
        init, reset, absorb, digest = (
            lib.keccak_init,
            lib.keccak_reset,
            lib.keccak_absorb,
            lib.keccak_digest,
        )
        size_t, uint8_ptr, ubyte = raw_api.c_size_t, raw_api.c_uint8_ptr, raw_api.c_ubyte
        new_buffer, raw_of = raw_api.create_string_buffer, raw_api.get_raw_buffer
        void_pointer, smart_pointer = raw_api.VoidPointer, raw_api.SmartPointer
    except (ImportError, AttributeError):
        return None
    # Keccak-256: capacity 64 bytes, 24 rounds, a 32-byte digest, Keccak's padding (0x01).
    capacity, rounds, digest_size, padding = size_t(64), ubyte(24), size_t(32), ubyte(1)
    local = threading.local()

    def state() -> tuple[Any, Any]:
        """This thread's Keccak state and digest buffer (the digest is copied out of it)."""
        found = getattr(local, "state", None)
        if found is None:
            pointer = void_pointer()
            if init(pointer.address_of(), capacity, rounds):
                raise ValueError("cannot set up a Keccak state")
            owned = smart_pointer(pointer.get(), lib.keccak_destroy)
            found = local.state = (owned, owned.get(), new_buffer(32))
        return found[1], found[2]

    def keccak(data: bytes) -> bytes:
        handle, out = state()
        if (
            reset(handle)
            or absorb(handle, uint8_ptr(data), size_t(len(data)))
            or digest(handle, out, digest_size, padding)
        ):
            raise ValueError("Keccak failed")
        result: bytes = raw_of(out)
        return result

    # Checked once against the library's own object before it is trusted.
    probe = b"x402-eur"
    if keccak(probe) != keccak_module.new(digest_bits=256, data=probe).digest():
        return None
    return keccak


def keccak256(data: bytes) -> bytes:
    """Keccak-256 (Ethereum's, not SHA3-256)."""
    return _keccak()(data)


def address_word(address: str) -> bytes:
    """An address as a 32-byte EIP-712 / ABI word; `ValueError` if it is not `0x` + 40 hex."""
    if not ADDRESS_RE.match(address):
        raise ValueError(f"{address[:50]!r} is not a 0x address")
    return bytes(12) + bytes.fromhex(address[2:])


def uint_word(value: int) -> bytes:
    """A uint256 as a 32-byte big-endian word."""
    return value.to_bytes(32, "big")


@functools.lru_cache(maxsize=256)
def checksum_address(address: str) -> str:
    """The EIP-55 mixed-case form of a `0x` address (`ValueError` if it is not one)."""
    if not ADDRESS_RE.match(address):
        raise ValueError(f"{address[:50]!r} is not a 0x address")
    lower = address[2:].lower()
    hashed = keccak256(lower.encode()).hex()
    return "0x" + "".join(
        char.upper() if char.isalpha() and int(hashed[i], 16) >= 8 else char
        for i, char in enumerate(lower)
    )
