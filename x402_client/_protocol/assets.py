"""Assets the client may pay in the standard x402 world, and what each counts as.

Caps and budgets are in EUR and USD, so every payable asset needs a known currency and
decimals. An EVM token is named by its chain id and 0x address; a Solana mint by its
network (`"solana:EtWT..."`, or a v1 name such as `"solana-devnet"`) in place of the chain
id, and its base58 address (`find_svm_asset`). An asset is known when it is in
`KNOWN_ASSETS` or `KNOWN_SVM_ASSETS` (Circle's EURC and USDC, each address checked
against a public source cited beside it) or declared by the user
(`PaymentOptions.assets`). Anything else is skipped with a reason: fail closed, never
guessed from a name or symbol the merchant wrote.

`eip712_name` / `eip712_version` record the token's EIP-712 domain where a source gave
it. They are information, not what gets signed: an accept entry's own `extra.name` /
`extra.version` are signed (a wrong one only yields a signature that verifies nowhere).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from decimal import Decimal, localcontext
from types import MappingProxyType

from .solana_chain import (
    SOLANA_DEVNET,
    SOLANA_MAINNET,
    TOKEN_2022_PROGRAM,
    TOKEN_PROGRAM,
    is_pubkey,
    solana_network,
)

__all__ = ["KNOWN_ASSETS", "KNOWN_SVM_ASSETS", "Asset", "find_asset", "find_svm_asset"]

_ADDRESS_RE = re.compile(r"\A0x[0-9a-fA-F]{40}\Z")


@dataclasses.dataclass(frozen=True)
class Asset:
    """A token on an EVM chain, or a mint on Solana: `currency` (`"EUR"` or `"USD"`) is what
    caps and budgets count it as; `decimals` converts atomic amounts.

    ```python
    Asset(chain_id=8453, address="0x...", symbol="EURC", currency="EUR", decimals=6)
    Asset(chain_id="solana-devnet", address="<mint>", symbol="EURC", currency="EUR")
    ```

    On Solana, `chain_id` is the network (its CAIP-2 id or v1 name, kept as the CAIP-2 id)
    and `address` the mint; the decimals must be the mint's own (the payment is refused
    otherwise), and `token_program`, when given, the program that owns it.
    """

    chain_id: int | str
    address: str
    symbol: str
    currency: str
    decimals: int = 6
    #: Where the address was checked (for the built-in table).
    source: str = ""
    #: The token's EIP-712 domain name and version, where a source gave them.
    eip712_name: str | None = None
    eip712_version: str | None = None
    #: A Solana mint's token program (SPL Token or Token-2022), where a source gave it.
    token_program: str | None = None

    def __post_init__(self) -> None:
        from .errors import ConfigurationError

        if isinstance(self.chain_id, str) and self.chain_id.isascii() and self.chain_id.isdigit():
            # A chain id written as text (a JSON or environment configuration): the number.
            object.__setattr__(self, "chain_id", int(self.chain_id))
        if isinstance(self.chain_id, str):
            network = solana_network(self.chain_id)
            if network is None:
                raise ConfigurationError(
                    f"asset network {self.chain_id[:60]!r} is not a Solana network x402 pays "
                    "on (an EVM token takes its chain id, a number)"
                )
            object.__setattr__(self, "chain_id", network)
            if not is_pubkey(self.address):
                raise ConfigurationError(f"asset address {self.address!r} is not a Solana mint")
            if self.token_program not in (None, TOKEN_PROGRAM, TOKEN_2022_PROGRAM):
                raise ConfigurationError("asset token_program must be SPL Token or Token-2022")
        elif not _ADDRESS_RE.match(self.address):
            raise ConfigurationError(f"asset address {self.address!r} is not a 0x address")
        if self.currency.upper() not in ("EUR", "USD"):
            raise ConfigurationError("asset currency must be EUR or USD")
        if not 0 <= self.decimals <= 36:
            raise ConfigurationError("asset decimals must be between 0 and 36")
        object.__setattr__(self, "currency", self.currency.upper())

    @property
    def key(self) -> tuple[int | str, str]:
        # Base58 is case-sensitive: a Solana mint is kept as written.
        if isinstance(self.chain_id, str):
            return (self.chain_id, self.address)
        return (self.chain_id, self.address.lower())

    def amount(self, atomic: int) -> Decimal:
        """`atomic` units in currency units, exactly: `10000` -> `Decimal("0.010000")` at
        6 decimals (always `decimals` places, never through a float)."""
        if isinstance(atomic, bool) or not isinstance(atomic, int) or atomic < 0:
            raise ValueError("atomic amount must be a non-negative int")
        with localcontext() as ctx:
            # Enough digits for any uint256 at any allowed scale: the result is exact.
            ctx.prec = 120
            return (
                Decimal(atomic).scaleb(-self.decimals).quantize(Decimal(1).scaleb(-self.decimals))
            )


# Sources, cited once and referred to below.
#
# PKG: the x402 foundation's Python SDK, PyPI `x402` 2.25.0,
#   `x402/mechanisms/evm/default_assets.py` (read in the installed wheel): address, EIP-712
#   name and version of USDC per chain, which the foundation reads from the token's `name()`
#   and `version()` (its DEFAULT_ASSETS.md).
# CIRCLE_EURC: Circle's EURC page, developers.circle.com/stablecoins/eurc-contract-addresses
#   (mainnet table: Avalanche C-Chain and Base rows read).
# ETHERSCAN_EURC: etherscan.io/token/0x1abaea1f7c830bd89acc67ec4af516284b1bc33c, "EURC (EURC)",
#   FiatTokenProxy, 6 decimals, described as "a euro-backed stablecoin issued by Circle".
# Weaker, third-party ("secondary") sources are named in the entries that use them.
_PKG = "PyPI x402 2.25.0 x402/mechanisms/evm/default_assets.py"
_CIRCLE_EURC = "developers.circle.com/stablecoins/eurc-contract-addresses"

_TABLE: tuple[Asset, ...] = (
    # --- USDC ---------------------------------------------------------------------------
    # Ethereum: PKG; also docs.gelato.cloud/1Balance/USDC-Addresess and docs.iron.xyz.
    Asset(
        chain_id=1,
        address="0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48",
        symbol="USDC",
        currency="USD",
        source=f"{_PKG}; docs.gelato.cloud/1Balance/USDC-Addresess",
        eip712_name="USD Coin",
        eip712_version="2",
    ),
    # Base: PKG.
    Asset(
        chain_id=8453,
        address="0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
        symbol="USDC",
        currency="USD",
        source=_PKG,
        eip712_name="USD Coin",
        eip712_version="2",
    ),
    # Base Sepolia: PKG; also the example in the x402 spec, specs/transports-v2/http.md.
    # Its EIP-712 name is "USDC", not "USD Coin".
    Asset(
        chain_id=84532,
        address="0x036CbD53842c5426634e7929541eC2318f3dCF7e",
        symbol="USDC",
        currency="USD",
        source=f"{_PKG}; coinbase/x402 specs/transports-v2/http.md",
        eip712_name="USDC",
        eip712_version="2",
    ),
    # Avalanche C-Chain: PKG.
    Asset(
        chain_id=43114,
        address="0xB97EF9Ef8734C71904D8002F8b6Bc66Dd9c48a6E",
        symbol="USDC",
        currency="USD",
        source=_PKG,
        eip712_name="USD Coin",
        eip712_version="2",
    ),
    # Polygon PoS (native USDC, not the bridged USDC.e): PKG.
    Asset(
        chain_id=137,
        address="0x3c499c542cEF5E3811e1192ce70d8cC03d5c3359",
        symbol="USDC",
        currency="USD",
        source=_PKG,
        eip712_name="USD Coin",
        eip712_version="2",
    ),
    # Arbitrum One: PKG.
    Asset(
        chain_id=42161,
        address="0xaf88d065e77c8cC2239327C5EDb3A432268e5831",
        symbol="USDC",
        currency="USD",
        source=_PKG,
        eip712_name="USD Coin",
        eip712_version="2",
    ),
    # Arbitrum Sepolia: PKG.
    Asset(
        chain_id=421614,
        address="0x75faf114eafb1BDbe2F0316DF893fd58CE46AA4d",
        symbol="USDC",
        currency="USD",
        source=_PKG,
        eip712_name="USD Coin",
        eip712_version="2",
    ),
    # Ethereum Sepolia (testnet): secondary only, two third-party sources agree
    # (developer.interlace.money/docs/usdc-on-testing-networks; docs.rs crate usdshe
    # src/address/mod.rs). The EIP-712 domain is not recorded: not verified.
    Asset(
        chain_id=11155111,
        address="0x1c7D4B196Cb0C7B01d743Fbc6116a902379C7238",
        symbol="USDC",
        currency="USD",
        source=(
            "secondary: developer.interlace.money/docs/usdc-on-testing-networks; "
            "docs.rs usdshe src/address/mod.rs"
        ),
    ),
    # --- EURC (the foundation's package has no EURC entry) ------------------------------
    # Ethereum: ETHERSCAN_EURC; also GitHub dfinity/oisy-wallet
    # src/frontend/src/env/tokens/tokens-erc20/tokens.eurc.env.ts and docs.iron.xyz.
    # Circle's own page was not read this far. EIP-712 domain not verified (one third-party
    # table says "Euro Coin" / "2": not recorded here).
    Asset(
        chain_id=1,
        address="0x1aBaEA1f7C830bD89Acc67eC4af516284b1bC33c",
        symbol="EURC",
        currency="EUR",
        source=(
            "etherscan.io/token/0x1abaea1f7c830bd89acc67ec4af516284b1bc33c; "
            "dfinity/oisy-wallet tokens.eurc.env.ts"
        ),
    ),
    # Base: CIRCLE_EURC. EIP-712 name "EURC" (not "EUR Coin"), version "2": secondary,
    # GitHub coinbase/onchainkit issue #2561 (name() read on-chain by the commenter).
    Asset(
        chain_id=8453,
        address="0x60a3E35Cc302bFA44Cb288Bc5a4F316Fdb1adb42",
        symbol="EURC",
        currency="EUR",
        source=_CIRCLE_EURC,
        eip712_name="EURC",
        eip712_version="2",
    ),
    # Avalanche C-Chain: CIRCLE_EURC. EIP-712 domain not verified.
    Asset(
        chain_id=43114,
        address="0xC891EB4cbdEFf6e073e859e987815Ed1505c2ACD",
        symbol="EURC",
        currency="EUR",
        source=_CIRCLE_EURC,
    ),
    # Base Sepolia (testnet): secondary only: GitHub dfinity/oisy-wallet
    # src/frontend/src/env/tokens/tokens-evm/tokens-base/tokens-erc20/tokens.eurc.env.ts,
    # and several independent repositories agree. EIP-712 domain not verified.
    Asset(
        chain_id=84532,
        address="0x808456652fdb597867f38412077A9182bf77359F",
        symbol="EURC",
        currency="EUR",
        source="secondary: dfinity/oisy-wallet tokens-base tokens.eurc.env.ts",
    ),
    # Ethereum Sepolia (testnet): secondary only: dfinity/oisy-wallet
    # src/frontend/src/env/tokens/tokens-erc20/tokens.eurc.env.ts. EIP-712 domain not verified.
    Asset(
        chain_id=11155111,
        address="0x08210F9170F89Ab7658F0B5E3fF39b0E03C594D4",
        symbol="EURC",
        currency="EUR",
        source="secondary: dfinity/oisy-wallet tokens.eurc.env.ts",
    ),
)

# --- Solana ------------------------------------------------------------------------------
# SVM_PKG: the x402 foundation's Python SDK, PyPI `x402` 2.25.0,
#   `x402/mechanisms/svm/constants.py` (USDC_MAINNET_ADDRESS, USDC_DEVNET_ADDRESS; read in
#   the installed wheel), SPL Token mints with 6 decimals.
# Circle's own pages (developers.circle.com/stablecoins/usdc-contract-addresses and
# .../eurc-contract-addresses) were found, but their Solana rows were not read this far.
_SVM_PKG = "PyPI x402 2.25.0 x402/mechanisms/svm/constants.py"

_SVM_TABLE: tuple[Asset, ...] = (
    # USDC, mainnet: SVM_PKG; also docs.privy.io getSolanaUsdcMintAddressForCluster and
    # docs.coinflow.cash usdc-token-addresses ("Production Token").
    Asset(
        chain_id=SOLANA_MAINNET,
        address="EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v",
        symbol="USDC",
        currency="USD",
        source=f"{_SVM_PKG}; docs.privy.io getSolanaUsdcMintAddressForCluster",
        token_program=TOKEN_PROGRAM,
    ),
    # USDC, devnet: SVM_PKG; also Coinbase's docs.cdp.coinbase.com/custom-stablecoins/
    # key-addresses ("Solana Devnet | USDC") and docs.coinflow.cash ("Sandbox Token").
    Asset(
        chain_id=SOLANA_DEVNET,
        address="4zMMC9srt5Ri5X14GAgXhaHii3GnPAEERYPJgZJDncDU",
        symbol="USDC",
        currency="USD",
        source=f"{_SVM_PKG}; docs.cdp.coinbase.com/custom-stablecoins/key-addresses",
        token_program=TOKEN_PROGRAM,
    ),
    # EURC, mainnet: secondary only: GitHub BitGo/BitGoJS modules/statics/src/coins/
    # solTokens.ts (`sol:eurc`, 6 decimals), pull request 6810. Circle's EURC page lists
    # Solana, but its row was not read. EURC on devnet: no source found; not built in
    # (declare it in `PaymentOptions.assets` to pay it).
    Asset(
        chain_id=SOLANA_MAINNET,
        address="HzwqbKZw8HxMN6bF2yFZNrht3c2iXXzpKcFu7uBEDKtr",
        symbol="EURC",
        currency="EUR",
        source="secondary: BitGo/BitGoJS modules/statics/src/coins/solTokens.ts",
    ),
)

#: Built-in assets, by (chain id, lower-case address). Filled from cited public sources.
KNOWN_ASSETS: Mapping[tuple[int | str, str], Asset] = MappingProxyType(
    {asset.key: asset for asset in _TABLE}
)
#: Built-in Solana mints, by (CAIP-2 network, mint).
KNOWN_SVM_ASSETS: Mapping[tuple[int | str, str], Asset] = MappingProxyType(
    {asset.key: asset for asset in _SVM_TABLE}
)


def find_asset(chain_id: int, address: str, declared: Iterable[Asset] = ()) -> Asset | None:
    """The asset at `address` on `chain_id`: a declared one wins over the built-in table."""
    key = (chain_id, address.lower())
    for asset in declared:
        if asset.key == key:
            return asset
    return KNOWN_ASSETS.get(key)


def find_svm_asset(network: str, mint: str, declared: Iterable[Asset] = ()) -> Asset | None:
    """The Solana mint `mint` on `network` (CAIP-2 id or v1 name): a declared one wins over
    the built-in table; None for a mint neither knows (it is not paid)."""
    caip2 = solana_network(network)
    if caip2 is None:
        return None
    key: tuple[int | str, str] = (caip2, mint)
    for asset in declared:
        if asset.key == key:
            return asset
    return KNOWN_SVM_ASSETS.get(key)
