"""Assets the client may pay in the standard x402 world, and what each counts as.

Caps and budgets are in EUR and USD, so every payable asset needs a known currency and
decimals. An asset is known when it is in `KNOWN_ASSETS` (Circle's EURC and USDC, each
address checked against a public source cited beside it) or declared by the user
(`PaymentOptions.assets`). Anything else is skipped with a reason: fail closed, never
guessed from a name or symbol the merchant wrote.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping

__all__ = ["KNOWN_ASSETS", "Asset", "find_asset"]

_ADDRESS_RE = re.compile(r"\A0x[0-9a-fA-F]{40}\Z")


@dataclasses.dataclass(frozen=True)
class Asset:
    """A token on an EVM chain: `currency` (`"EUR"` or `"USD"`) is what caps and budgets
    count it as; `decimals` converts atomic amounts.

    ```python
    Asset(chain_id=8453, address="0x...", symbol="EURC", currency="EUR", decimals=6)
    ```
    """

    chain_id: int
    address: str
    symbol: str
    currency: str
    decimals: int = 6
    #: Where the address was checked (for the built-in table).
    source: str = ""

    def __post_init__(self) -> None:
        from ._exceptions import ConfigurationError

        if not _ADDRESS_RE.match(self.address):
            raise ConfigurationError(f"asset address {self.address!r} is not a 0x address")
        if self.currency.upper() not in ("EUR", "USD"):
            raise ConfigurationError("asset currency must be EUR or USD")
        if not 0 <= self.decimals <= 36:
            raise ConfigurationError("asset decimals must be between 0 and 36")
        object.__setattr__(self, "currency", self.currency.upper())

    @property
    def key(self) -> tuple[int, str]:
        return (self.chain_id, self.address.lower())


#: Built-in assets, by (chain id, lower-case address). Filled from cited public sources.
KNOWN_ASSETS: Mapping[tuple[int, str], Asset] = {}


def find_asset(chain_id: int, address: str, declared: Iterable[Asset] = ()) -> Asset | None:
    """The asset at `address` on `chain_id`: a declared one wins over the built-in table."""
    key = (chain_id, address.lower())
    for asset in declared:
        if asset.key == key:
            return asset
    return KNOWN_ASSETS.get(key)
