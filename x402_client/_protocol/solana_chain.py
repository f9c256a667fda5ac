"""Solana facts the client reads without the `svm` extra: the networks x402 names, base58,
the secret-key forms users hold, and the token account layouts. Pure: no I/O, no `solders`.

Networks (the x402 foundation's table, `x402/mechanisms/svm/constants.py`, x402 2.25.0):
CAIP-2 ids are `solana:` and the first 32 characters of the cluster's genesis hash; the v1
names are `solana`, `solana-devnet` and `solana-testnet`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from types import MappingProxyType

__all__ = [
    "ASSOCIATED_TOKEN_PROGRAM",
    "COMPUTE_BUDGET_PROGRAM",
    "DEFAULT_COMPUTE_UNIT_LIMIT",
    "DEFAULT_COMPUTE_UNIT_PRICE",
    "MAX_COMPUTE_UNIT_PRICE",
    "MAX_MEMO_BYTES",
    "MAX_PROCESSING_AGE",
    "MEMO_PROGRAM",
    "SOLANA_DEVNET",
    "SOLANA_MAINNET",
    "SOLANA_NETWORKS",
    "SOLANA_TESTNET",
    "TOKEN_2022_PROGRAM",
    "TOKEN_PROGRAM",
    "V1_SOLANA_NETWORKS",
    "TokenAccount",
    "b58decode",
    "b58encode",
    "blocks_for",
    "is_pubkey",
    "mint_decimals",
    "secret_key_bytes",
    "solana_network",
    "token_account",
]

SOLANA_MAINNET = "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp"
SOLANA_DEVNET = "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1"
SOLANA_TESTNET = "solana:4uhcVJyU9pJkvQyS88uRDiswHXSCkY3z"
#: The networks x402 pays on, by CAIP-2 id: their genesis hashes.
SOLANA_NETWORKS: Mapping[str, str] = MappingProxyType(
    {
        SOLANA_MAINNET: "5eykt4UsFv8P8NJdTREpY1vzqKqZKvdpKuc147dw2N9d",
        SOLANA_DEVNET: "EtWTRABZaYq6iMfeYKouRu166VU2xqa1wcaWoxPkrZBG",
        SOLANA_TESTNET: "4uhcVJyU9pJkvQyS88uRDiswHXSCkY3zZcP1URAoTbpe",
    }
)
#: x402 v1 network names, by their CAIP-2 id.
V1_SOLANA_NETWORKS: Mapping[str, str] = MappingProxyType(
    {"solana": SOLANA_MAINNET, "solana-devnet": SOLANA_DEVNET, "solana-testnet": SOLANA_TESTNET}
)

TOKEN_PROGRAM = "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA"  # noqa: S105 - a program id
TOKEN_2022_PROGRAM = "TokenzQdBNbLqP5VEhdkAS6EPFLC1PHnBqCXEpPxuEb"  # noqa: S105 - a program id
ASSOCIATED_TOKEN_PROGRAM = "ATokenGPvbdGVxr1b2hvZbsiqW5xWH25efTNsLJA8knL"  # noqa: S105
COMPUTE_BUDGET_PROGRAM = "ComputeBudget111111111111111111111111111111"
MEMO_PROGRAM = "MemoSq4gqABAXKb96qnH8TysNcWxMyWCqXgDLGmfcHr"

#: The scheme's cap on the compute unit price, in microlamports (5 lamports a unit).
MAX_COMPUTE_UNIT_PRICE = 5_000_000
#: What the foundation's client asks for: 20,000 units at 1 microlamport each.
DEFAULT_COMPUTE_UNIT_LIMIT = 20_000
DEFAULT_COMPUTE_UNIT_PRICE = 1
#: The longest seller's memo the foundation's client writes.
MAX_MEMO_BYTES = 256
#: How many blocks a blockhash stays usable after the block it names.
MAX_PROCESSING_AGE = 150

_ALPHABET = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_INDEX = {char: i for i, char in enumerate(_ALPHABET)}
_PUBKEY_RE = re.compile(r"\A[1-9A-HJ-NP-Za-km-z]{32,44}\Z")


def b58decode(text: str) -> bytes:
    """Base58 (Bitcoin's alphabet) to bytes; `ValueError` on any other character."""
    number = 0
    for char in text:
        digit = _INDEX.get(char)
        if digit is None:
            raise ValueError("not base58")
        number = number * 58 + digit
    body = number.to_bytes((number.bit_length() + 7) // 8, "big") if number else b""
    zeros = len(text) - len(text.lstrip("1"))
    return b"\0" * zeros + body


def b58encode(data: bytes) -> str:
    number = int.from_bytes(data, "big")
    out = []
    while number:
        number, digit = divmod(number, 58)
        out.append(_ALPHABET[digit])
    zeros = len(data) - len(data.lstrip(b"\0"))
    return "1" * zeros + "".join(reversed(out))


def is_pubkey(text: object) -> bool:
    """Whether `text` is base58 of 32 bytes (an account address)."""
    if not isinstance(text, str) or not _PUBKEY_RE.match(text):
        return False
    return len(b58decode(text)) == 32


def solana_network(network: str) -> str | None:
    """The CAIP-2 id of a Solana network x402 pays on (a CAIP-2 id or a v1 name), else None."""
    if network in SOLANA_NETWORKS:
        return network
    return V1_SOLANA_NETWORKS.get(network)


def secret_key_bytes(text: str) -> bytes:
    """The 64 bytes of a Solana secret key in the forms users hold it: base58 (Phantom's
    export, `solana-keygen`'s) or the JSON byte array of an `id.json` file. `ValueError`
    (whose message never holds the key) otherwise."""
    text = text.strip()
    if text.startswith("["):
        try:
            values = json.loads(text)
        except ValueError:
            raise ValueError("secret_key is not a JSON byte array") from None
        ok = isinstance(values, list) and all(
            isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 256 for v in values
        )
        if not ok:
            raise ValueError("secret_key is not a JSON byte array")
        raw = bytes(values)
    else:
        try:
            raw = b58decode(text)
        except ValueError:
            raise ValueError(
                "secret_key must be base58 of the 64-byte key or the JSON byte array of an "
                "id.json file"
            ) from None
    if len(raw) != 64:
        raise ValueError("secret_key must be 64 bytes (the seed and the public key)")
    return raw


def blocks_for(seconds: float, slot_seconds: float) -> int:
    """The blocks `seconds` take at `slot_seconds` a block, rounded up."""
    return math.ceil(seconds / slot_seconds)


# --- account layouts -----------------------------------------------------------------------

_MINT_SIZE = 82
_TOKEN_ACCOUNT_SIZE = 165


def mint_decimals(data: bytes) -> int | None:
    """The decimals of an SPL Token / Token-2022 mint's data (byte 44 of its base state, which
    must be initialized), or None when `data` is not a mint."""
    if len(data) < _MINT_SIZE or _MINT_SIZE < len(data) <= _TOKEN_ACCOUNT_SIZE:
        return None
    if len(data) > _TOKEN_ACCOUNT_SIZE and data[_TOKEN_ACCOUNT_SIZE] != 1:
        return None  # Token-2022 extensions: the account type byte says "mint"
    if data[45] != 1:
        return None
    return data[44]


class TokenAccount:
    """A token account's base state: its mint, owner, amount and whether it is frozen."""

    __slots__ = ("amount", "frozen", "mint", "owner")

    def __init__(self, mint: str, owner: str, amount: int, frozen: bool) -> None:
        self.mint = mint
        self.owner = owner
        self.amount = amount
        self.frozen = frozen

    def __repr__(self) -> str:
        return f"TokenAccount(mint={self.mint!r}, owner={self.owner!r}, amount={self.amount})"


def token_account(data: bytes) -> TokenAccount | None:
    """An initialized token account's base state (SPL Token or Token-2022), else None."""
    if len(data) < _TOKEN_ACCOUNT_SIZE or (
        len(data) > _TOKEN_ACCOUNT_SIZE and data[_TOKEN_ACCOUNT_SIZE] != 2
    ):
        return None
    state = data[108]
    if state not in (1, 2):
        return None
    return TokenAccount(
        b58encode(data[0:32]),
        b58encode(data[32:64]),
        int.from_bytes(data[64:72], "little"),
        state == 2,
    )
