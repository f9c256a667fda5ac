"""The EVM signatures the sandbox checks and makes, with eth-account's own EIP-712 encoding.

- EIP-2612 `Permit(owner, spender, value, nonce, deadline)` under the token's domain
  (its `name()`, version `"1"`, the chain id, the token as verifying contract): what an
  EVM `exact` proof of the euro gates signs.
- EIP-3009 `TransferWithAuthorization(from, to, value, validAfter, validBefore, nonce)`:
  what a standard x402 `exact` proof signs (domain version from the entry's `extra`).

Written from the EIPs and the service specification, not from the client.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

__all__ = [
    "DigestSigner",
    "TransferAuthorization",
    "keccak256",
    "permit_typed_data",
    "recover_typed_data",
    "split_signature",
    "transfer_authorization_typed_data",
]

_DOMAIN_FIELDS = [
    {"name": "name", "type": "string"},
    {"name": "version", "type": "string"},
    {"name": "chainId", "type": "uint256"},
    {"name": "verifyingContract", "type": "address"},
]
_ADDRESS = re.compile(r"\A0x[0-9a-fA-F]{40}\Z")
_UINT = re.compile(r"\A(?:0|[1-9][0-9]{0,77})\Z")
_NONCE = re.compile(r"\A0x[0-9a-fA-F]{64}\Z")


def keccak256(data: bytes) -> bytes:
    """Ethereum's Keccak-256."""
    from eth_utils.crypto import keccak

    return bytes(keccak(data))


def _typed(
    primary: str, fields: list[dict[str, str]], domain: dict[str, Any], message: dict[str, Any]
) -> dict[str, Any]:
    return {
        "types": {"EIP712Domain": list(_DOMAIN_FIELDS), primary: fields},
        "primaryType": primary,
        "domain": domain,
        "message": message,
    }


def permit_typed_data(
    *,
    token_name: str,
    chain_id: int,
    token: str,
    owner: str,
    spender: str,
    value: int,
    nonce: int,
    deadline: int,
) -> dict[str, Any]:
    """The full EIP-712 message of an EIP-2612 permit (domain version `"1"`)."""
    fields = [
        {"name": name, "type": kind}
        for name, kind in (
            ("owner", "address"),
            ("spender", "address"),
            ("value", "uint256"),
            ("nonce", "uint256"),
            ("deadline", "uint256"),
        )
    ]
    domain = {"name": token_name, "version": "1", "chainId": chain_id, "verifyingContract": token}
    message = {
        "owner": owner,
        "spender": spender,
        "value": value,
        "nonce": nonce,
        "deadline": deadline,
    }
    return _typed("Permit", fields, domain, message)


def recover_typed_data(typed: dict[str, Any], signature: str) -> str:
    """The address that signed the EIP-712 message `typed` (0x hex signature)."""
    from eth_account import Account
    from eth_account.messages import encode_typed_data

    raw = bytes.fromhex(signature.removeprefix("0x"))
    return str(Account.recover_message(encode_typed_data(full_message=typed), signature=raw))


def split_signature(signature: str) -> tuple[int, bytes, bytes]:
    """`(v, r, s)` of a 65-byte `r || s || v` signature in 0x hex, `v` as 27 or 28."""
    raw = bytes.fromhex(signature.removeprefix("0x"))
    if len(raw) != 65:
        raise ValueError("a signature is 65 bytes")
    v = raw[64] + 27 if raw[64] < 27 else raw[64]
    return v, raw[:32], raw[32:64]


@dataclasses.dataclass(frozen=True)
class TransferAuthorization:
    """The six signed fields of an EIP-3009 `TransferWithAuthorization`."""

    from_address: str
    to: str
    value: int
    valid_after: int
    valid_before: int
    nonce: bytes = dataclasses.field(repr=False)

    @classmethod
    def from_wire(cls, data: object) -> TransferAuthorization:
        """Strictly from the proof's `authorization` (every field a string); `ValueError`."""
        if not isinstance(data, Mapping):
            raise ValueError("authorization must be an object")
        text = {key: data.get(key) for key in ("from", "to", "value", "validAfter")}
        text.update(validBefore=data.get("validBefore"), nonce=data.get("nonce"))
        if not all(isinstance(value, str) for value in text.values()):
            raise ValueError("every authorization field is a string")
        checks = (
            ("from", _ADDRESS),
            ("to", _ADDRESS),
            ("value", _UINT),
            ("validAfter", _UINT),
            ("validBefore", _UINT),
            ("nonce", _NONCE),
        )
        for key, pattern in checks:
            if not pattern.match(str(text[key])):
                raise ValueError(f"authorization.{key} is malformed")
        numbers = {key: int(str(text[key])) for key in ("value", "validAfter", "validBefore")}
        if any(number >= 2**256 for number in numbers.values()):
            raise ValueError("an authorization number is out of uint256 range")
        return cls(
            from_address=str(text["from"]),
            to=str(text["to"]),
            value=numbers["value"],
            valid_after=numbers["validAfter"],
            valid_before=numbers["validBefore"],
            nonce=bytes.fromhex(str(text["nonce"])[2:]),
        )


def transfer_authorization_typed_data(
    authorization: TransferAuthorization, *, name: str, version: str, chain_id: int, token: str
) -> dict[str, Any]:
    """The full EIP-712 message of an EIP-3009 transfer authorization."""
    fields = [
        {"name": "from", "type": "address"},
        {"name": "to", "type": "address"},
        {"name": "value", "type": "uint256"},
        {"name": "validAfter", "type": "uint256"},
        {"name": "validBefore", "type": "uint256"},
        {"name": "nonce", "type": "bytes32"},
    ]
    domain = {"name": name, "version": version, "chainId": chain_id, "verifyingContract": token}
    message = {
        "from": authorization.from_address,
        "to": authorization.to,
        "value": authorization.value,
        "validAfter": authorization.valid_after,
        "validBefore": authorization.valid_before,
        "nonce": authorization.nonce,
    }
    return _typed("TransferWithAuthorization", fields, domain, message)


class DigestSigner:
    """A private key that signs 32-byte digests: 65 bytes `r || s || v`, `v` 27 or 28."""

    def __init__(self, private_key: bytes) -> None:
        from eth_keys.datatypes import PrivateKey

        self._key = PrivateKey(private_key)
        self.address: str = str(self._key.public_key.to_checksum_address())

    def __repr__(self) -> str:
        return f"DigestSigner(address={self.address!r})"

    def sign(self, digest: bytes) -> bytes:
        if len(digest) != 32:
            raise ValueError("a digest is 32 bytes")
        raw = self._key.sign_msg_hash(digest).to_bytes()
        return raw[:64] + bytes((raw[64] + 27,))
