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

import importlib
import importlib.util
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .._protocol.errors import ConfigurationError
from .._protocol.evm_words import (
    ADDRESS_RE,
    address_word,
    checksum_address,
    keccak256,
    uint_word,
)
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
