"""The standard merchant's Solana routes (`StandardMerchant(svm=True)`): x402 v2 `exact`
entries on a `SolanaNode`, verified and settled by an `SvmFacilitator`.

Two mints, six decimals each, made at start with fixed addresses (the same on every run):

* **sEURC** (EUR), on SPL Token, like Circle's EURC;
* **sUSDC** (USD), on Token-2022, so both token programs are paid.

Routes (`SVM_PRICES`): `/solana` offers both mints (sEURC first), `/solana/eurc` and
`/solana/usdc` one each, and `/solana/invoice` sEURC with a seller's `extra.memo`
(`SVM_INVOICE_MEMO`) the payment's Memo must carry. Every entry names the facilitator's
fee payer in `extra.feePayer`, the mint as `asset`, the merchant's wallet as `payTo` (its
token accounts exist from the start, as the scheme requires) and `maxTimeoutSeconds` 60
(a blockhash lives about as long). Like the foundation's server given an RPC URL, entries
also carry the chain's latest blockhash as a hint, `extra.recentBlockhash` and
`extra.lastValidBlockHeight` (a string); they change from one 402 to the next, so the
merchant leaves them out when it matches a payment's `accepted` (`blockhash_hints=False`
leaves them out of the entries).

The sandbox payer (`payer_secret_key`) holds `payer_funding` of each mint and no SOL:
under this scheme the facilitator pays the fees. `svm_config()` and `asset_configs()`
give a paying client what it needs as plain data.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from solders.keypair import Keypair

from ._merchant import Price
from ._server import ServedApp
from ._solana import (
    SOLANA_DEVNET,
    TOKEN_2022_PROGRAM,
    TOKEN_PROGRAM,
    SolanaNode,
    keypair_from_secret,
    secret_key_forms,
)
from ._svm_facilitator import SvmFacilitator

__all__ = [
    "SVM_INVOICE_MEMO",
    "SVM_MAX_TIMEOUT_SECONDS",
    "SVM_MINTS",
    "SVM_PRICES",
    "SVM_ROUTE_MINTS",
    "SolanaRoutes",
    "SvmMint",
]

SVM_MAX_TIMEOUT_SECONDS = 60
SVM_INVOICE_MEMO = "x402-eur sandbox invoice 0001"
#: Lamports the facilitator's fee payer starts with (10 SOL: thousands of fees).
FEE_PAYER_LAMPORTS = 10 * 10**9


@dataclasses.dataclass(frozen=True)
class SvmMint:
    """One of the merchant's mints: symbol, currency, decimals and token program."""

    symbol: str
    currency: str
    decimals: int
    token_program: str
    description: str

    def keypair(self) -> Keypair:
        """The mint's fixed keypair (the same address on every run)."""
        return Keypair.from_seed(
            hashlib.sha256(f"x402-eur sandbox {self.symbol}".encode()).digest()
        )


SVM_MINTS: tuple[SvmMint, ...] = (
    SvmMint("sEURC", "EUR", 6, TOKEN_PROGRAM, "EURC-like euro token on SPL Token"),
    SvmMint("sUSDC", "USD", 6, TOKEN_2022_PROGRAM, "USDC-like dollar token on Token-2022"),
)

#: The Solana routes and their prices (in token units of whichever mint pays).
SVM_PRICES: dict[str, Price] = {
    "/solana": Price(Decimal("0.05"), "Paid on Solana in sEURC or sUSDC (x402 v2, exact)"),
    "/solana/eurc": Price(Decimal("0.05"), "Paid on Solana in sEURC (SPL Token)"),
    "/solana/usdc": Price(Decimal("0.05"), "Paid on Solana in sUSDC (Token-2022)"),
    "/solana/invoice": Price(Decimal("0.25"), "Paid on Solana in sEURC with the seller's memo"),
}
#: Which mints each route offers, in the order of its `accepts`.
SVM_ROUTE_MINTS: dict[str, tuple[str, ...]] = {
    "/solana": ("sEURC", "sUSDC"),
    "/solana/eurc": ("sEURC",),
    "/solana/usdc": ("sUSDC",),
    "/solana/invoice": ("sEURC",),
}
SVM_MEMOS: dict[str, str] = {"/solana/invoice": SVM_INVOICE_MEMO}


class SolanaRoutes:
    """The Solana side of the standard merchant: node, mints, facilitator, payer."""

    def __init__(
        self,
        *,
        prices: Mapping[str, Price] | None = None,
        route_mints: Mapping[str, tuple[str, ...]] | None = None,
        payer_funding: Decimal | str = "100",
        payer_secret_key: str | None = None,
        max_timeout_seconds: int = SVM_MAX_TIMEOUT_SECONDS,
        network: str = SOLANA_DEVNET,
        blockhash_hints: bool = True,
    ) -> None:
        self.prices: dict[str, Price] = dict(SVM_PRICES if prices is None else prices)
        self.route_mints: dict[str, tuple[str, ...]] = dict(
            SVM_ROUTE_MINTS if route_mints is None else route_mints
        )
        self.memos: dict[str, str] = {p: m for p, m in SVM_MEMOS.items() if p in self.prices}
        self.payer_funding = Decimal(payer_funding)
        self.max_timeout_seconds = max_timeout_seconds
        self.network = network
        #: Whether entries carry `extra.recentBlockhash` and `extra.lastValidBlockHeight`.
        self.blockhash_hints = blockhash_hints
        self._payer = keypair_from_secret(payer_secret_key) if payer_secret_key else Keypair()
        self._fee_payer = Keypair.from_seed(hashlib.sha256(b"x402-eur sandbox fee payer").digest())
        #: The merchant's Solana wallet (`payTo`).
        self.pay_to: str = str(
            Keypair.from_seed(hashlib.sha256(b"x402-eur sandbox merchant").digest()).pubkey()
        )
        #: Mint address by symbol, once started.
        self.mints: dict[str, str] = {}
        self.node: SolanaNode | None = None
        self.facilitator: SvmFacilitator | None = None
        self._own_node = False
        self._served: ServedApp | None = None

    def __repr__(self) -> str:
        return f"SolanaRoutes(network={self.network!r}, mints={self.mints!r})"

    # --- what a payer needs ----------------------------------------------------------------

    @property
    def rpc_url(self) -> str:
        if self.node is None:
            raise RuntimeError("the Solana routes are not running")
        return self.node.rpc_url

    @property
    def facilitator_url(self) -> str:
        """The facilitator over HTTP (`/verify`, `/settle`, `/supported`)."""
        if self._served is None:
            raise RuntimeError("the Solana routes are not running")
        return self._served.url

    @property
    def payer_address(self) -> str:
        return str(self._payer.pubkey())

    @property
    def payer_secret_key(self) -> str:
        """The funded payer's secret key, base58 of its 64 bytes (sandbox only)."""
        return secret_key_forms(self._payer)["base58"]

    @property
    def payer_keypair_json(self) -> str:
        """The same key as the JSON byte array of a Solana CLI `id.json` file."""
        return secret_key_forms(self._payer)["json"]

    def svm_config(self) -> dict[str, Any]:
        """The payer's Solana settings as plain data: `secret_key` (base58) and `rpc_url`."""
        return {"secret_key": self.payer_secret_key, "rpc_url": self.rpc_url}

    def asset_configs(self) -> list[dict[str, Any]]:
        """The mints as plain data, one entry of the client's `assets` each: the network
        (as `chain_id`), address, symbol, currency, decimals and token program."""
        return [
            {
                "chain_id": self.network,
                "address": self.mints[mint.symbol],
                "symbol": mint.symbol,
                "currency": mint.currency,
                "decimals": mint.decimals,
                "token_program": mint.token_program,
                "source": f"sandbox: {mint.description}, made by the standard merchant",
            }
            for mint in SVM_MINTS
            if mint.symbol in self.mints
        ]

    def mint(self, symbol: str) -> str:
        return self.mints[symbol]

    def token_balance(self, owner: str, symbol: str) -> int:
        """Atomic balance of `owner`'s associated token account for the mint `symbol`."""
        assert self.node is not None
        return self.node.token_balance(owner, self.mints[symbol])

    def fund(self, owner: str, symbol: str, amount: Decimal | str) -> None:
        """Mint `amount` (token units) of `symbol` to `owner`."""
        assert self.node is not None
        decimals = next(m.decimals for m in SVM_MINTS if m.symbol == symbol)
        self.node.mint_to(self.mints[symbol], owner, _atomic(Decimal(amount), decimals))

    # --- the routes ------------------------------------------------------------------------

    def price_atomic(self, path: str, symbol: str) -> int:
        decimals = next(m.decimals for m in SVM_MINTS if m.symbol == symbol)
        return _atomic(self.prices[path].amount, decimals)

    def accepts(self, path: str) -> list[dict[str, Any]]:
        """The route's accept entries, one per mint it takes."""
        if self.facilitator is None or self.node is None:
            raise RuntimeError("the Solana routes are not running")
        entries = []
        for symbol in self.route_mints.get(path, tuple(self.mints)):
            extra: dict[str, Any] = {"feePayer": self.facilitator.fee_payer}
            if path in self.memos:
                extra["memo"] = self.memos[path]
            if self.blockhash_hints:
                blockhash, last_valid = self.node.latest_blockhash()
                extra["recentBlockhash"] = blockhash
                extra["lastValidBlockHeight"] = str(last_valid)
            entries.append(
                {
                    "scheme": "exact",
                    "network": self.network,
                    "asset": self.mints[symbol],
                    "amount": str(self.price_atomic(path, symbol)),
                    "payTo": self.pay_to,
                    "maxTimeoutSeconds": self.max_timeout_seconds,
                    "extra": extra,
                }
            )
        return entries

    # --- lifecycle -------------------------------------------------------------------------

    async def start(self, sandbox: Any = None) -> None:
        """Start a node (or use `sandbox.solana`), make the mints and token accounts, fund
        the fee payer and the payer, and serve the facilitator."""
        node = getattr(sandbox, "solana", None) if sandbox is not None else None
        if node is None:
            node = SolanaNode(network=self.network)
            self._own_node = True
            await node.start(sandbox)
        self.node = node
        self.network = node.network
        node.airdrop(str(self._fee_payer.pubkey()), FEE_PAYER_LAMPORTS)
        for mint in SVM_MINTS:
            address = str(mint.keypair().pubkey())
            if node.account(address) is None:
                node.create_mint(mint.decimals, mint.token_program, mint=mint.keypair())
            self.mints[mint.symbol] = address
            node.create_ata(self.pay_to, address)
            if self.payer_funding > 0:
                self.fund(self.payer_address, mint.symbol, self.payer_funding)
        self.facilitator = SvmFacilitator(
            node.rpc_url, fee_payer=self._fee_payer, network=node.network
        )
        self._served = ServedApp(self.facilitator.app, "svm-facilitator")
        await self._served.start()

    async def stop(self) -> None:
        if self._served is not None:
            await self._served.stop()
            self._served = None
        if self.facilitator is not None:
            await self.facilitator.aclose()
            self.facilitator = None
        if self.node is not None and self._own_node:
            await self.node.stop()
        self.node = None
        self._own_node = False


def _seeded(name: str) -> Keypair:
    """A keypair of the sandbox's own, the same on every run (no value anywhere)."""
    return Keypair.from_seed(hashlib.sha256(f"x402-eur sandbox {name}".encode()).digest())


def _atomic(amount: Decimal, decimals: int) -> int:
    atomic = amount.scaleb(decimals)
    if atomic != atomic.to_integral_value():
        raise ValueError(f"{amount} has more than {decimals} decimals")
    return int(atomic)
