"""What the rails that sign EIP-712 messages for the standard x402 world share (`eip3009`,
`permit2`): Keccak-256, the 32-byte words of EIP-712 encoding, EIP-55 addresses, and a
private key ready to sign digests, made once per key.

Signing is the fastest correct path the dependencies allow: each rail computes its EIP-712
digest itself and signs it with the key object made once. `coincurve` (libsecp256k1) signs
when installed, else eth-keys' own backend. Signatures are deterministic (RFC 6979, low s),
byte for byte what eth-account's `sign_typed_data` produces; the tests hold it to that.

eth-keys and the keccak implementation (the `evm` extra) are imported on first use;
importing this module stays free of them.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import re
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from .._protocol.errors import ConfigurationError
from .._protocol.secret import SecretStr

if TYPE_CHECKING:
    from .._options import PaymentOptions

__all__ = [
    "ADDRESS_RE",
    "UINT256_LIMIT",
    "DigestSigner",
    "SignerCache",
    "address_word",
    "check_chain_id",
    "check_fields",
    "checksum_address",
    "evm_extra_installed",
    "keccak256",
    "recover_signer",
    "uint_word",
]

ADDRESS_RE = re.compile(r"\A0x[0-9a-fA-F]{40}\Z")
UINT256_LIMIT = 1 << 256


def check_chain_id(shown: str, reported: int, chain_id: int) -> None:
    """An RPC endpoint is used for `chain_id` only if it reports that chain (`eth_chainId`):
    a mismatch is a `ConfigurationError`. `shown` is the endpoint as `endpoint_url` shows
    it (scheme, host and port): its URL may carry a key, which no frame of an error holds.
    """
    if reported != chain_id:
        raise ConfigurationError(
            f"the RPC endpoint {shown} reports chain id {reported}, "
            f"but it is configured for chain id {chain_id} (eip155:{chain_id})"
        )


def check_fields(message: Any, addresses: Iterable[str], numbers: Iterable[str]) -> None:
    """Refuse (`ValueError`) a message to sign whose named fields are not 0x addresses or
    not ints in uint256 range."""
    for name in addresses:
        if not ADDRESS_RE.match(getattr(message, name)):
            raise ValueError(f"{name} is not a 0x address")
    for name in numbers:
        number = getattr(message, name)
        if isinstance(number, bool) or not isinstance(number, int):
            raise ValueError(f"{name} must be an int")
        if not 0 <= number < UINT256_LIMIT:
            raise ValueError(f"{name} is out of uint256 range")


# --- hashing and words -------------------------------------------------------------------


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


# --- signing -----------------------------------------------------------------------------


def evm_extra_installed() -> bool:
    return importlib.util.find_spec("eth_keys") is not None


def _coincurve() -> Any:
    """libsecp256k1's Python binding when installed (optional: eth-keys' backend otherwise)."""
    if importlib.util.find_spec("coincurve") is None:
        return None
    return importlib.import_module("coincurve")


class DigestSigner:
    """A private key ready to sign 32-byte digests; made once, used for every payment.

    `sign(digest)` returns 65 bytes `r ‖ s ‖ v` with `v` 27 or 28, as eth-account does.
    The key object is built once (deriving the address costs as much as a signature).
    """

    def __init__(self, private_key: bytes) -> None:
        from eth_keys.datatypes import PrivateKey

        self._key = PrivateKey(private_key)
        self.address: str = str(self._key.public_key.to_checksum_address())
        coincurve = _coincurve()
        self._fast: Any = None if coincurve is None else coincurve.PrivateKey(private_key)

    def __repr__(self) -> str:
        return f"DigestSigner(address={self.address!r})"

    @property
    def backend(self) -> str:
        return "coincurve" if self._fast is not None else type(self._key.backend).__name__

    def sign(self, digest: bytes) -> bytes:
        if len(digest) != 32:
            raise ValueError("a digest is 32 bytes")
        if self._fast is not None:
            raw: bytes = self._fast.sign_recoverable(digest, hasher=None)
        else:
            raw = self._key.sign_msg_hash(digest).to_bytes()
        return raw[:64] + bytes((raw[64] + 27,))


def recover_signer(digest: bytes, signature: bytes) -> str:
    """The checksummed address whose key made `signature` (65 bytes, v 27/28 or 0/1) over
    `digest`; `ValueError` when it is not a valid ECDSA signature."""
    from eth_keys.datatypes import Signature
    from eth_keys.exceptions import BadSignature
    from eth_utils.exceptions import ValidationError

    if len(signature) != 65:
        raise ValueError("not a 65-byte signature")
    v = signature[64]
    if v >= 27:
        v -= 27
    if v not in (0, 1):
        raise ValueError("signature v must be 27/28 or 0/1")
    try:
        sig = Signature(signature[:64] + bytes((v,)))
        return str(sig.recover_public_key_from_msg_hash(digest).to_checksum_address())
    except (BadSignature, ValidationError) as exc:
        raise ValueError(f"invalid signature: {exc}") from None


class SignerCache:
    """The payer's `DigestSigner` for `options.evm.private_key`, made once per key (deriving
    the address is not free) and made again only when the options' key changes."""

    def __init__(self) -> None:
        self._cached: tuple[SecretStr, DigestSigner] | None = None

    def __repr__(self) -> str:
        return "SignerCache()"

    def signer(self, options: PaymentOptions) -> DigestSigner:
        evm = options.evm
        if evm is None:
            raise RuntimeError("no EVM key configured (PaymentOptions.evm)")
        cached = self._cached
        if cached is None or cached[0] is not evm.private_key:
            secret = evm.private_key.get_secret_value().removeprefix("0x")
            cached = self._cached = (evm.private_key, DigestSigner(bytes.fromhex(secret)))
        return cached[1]
