"""The x402-eur sandbox: merchant gate, facilitators, payment API and chains on 127.0.0.1.

A distribution of its own (`pip install ./sandbox`, command `x402-eur-sandbox`), speaking
the wire with its own code, never the client's. Nothing here moves real money; everything
here really moves sandbox money, so tests and demos exercise the real protocol end to end.
"""

from __future__ import annotations

from typing import Any

from .__version__ import __version__
from ._bank import Account, Bank, BankError
from ._faults import Fault, Faults
from ._merchant import DEFAULT_PRICES, EuroOffer, MerchantGate, Offer, Price, Verdict, merchant_app
from ._sandbox import ALLOW_HOSTS_ENV, MERCHANT_ACCOUNT, PAYER_ACCOUNT, Sandbox, SandboxPart
from ._server import PortInUse, ServedApp

# The EVM, chain-A and Solana parts load on first use: the EVM part imports web3, the
# Solana part `solders` (the `svm` extra).
_LAZY = {
    "EvmSandbox": "._evm",
    "EvmOffer": "._evm",
    "OnchainFacilitator": "._onchain",
    "onchain_facilitator_app": "._onchain",
    "ChainASandbox": "._chain_a",
    "ChainALedger": "._chain_a",
    "ChainABridgeOffer": "._chain_a",
    "AssetTransfer": "._chain_a",
    "EURQ_ASSET_ID": "._chain_a",
    "USDQ_ASSET_ID": "._chain_a",
    "StandardMerchant": "._standard",
    "BatchFacilitator": "._batch_facilitator",
    "BatchMerchant": "._batch_merchant",
    "BatchSettlement": "._batch_merchant",
    "SolanaNode": "._solana",
    "SvmFacilitator": "._svm_facilitator",
    "SolanaRoutes": "._standard_svm",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module, __name__), name)


__all__ = [
    "ALLOW_HOSTS_ENV",
    "DEFAULT_PRICES",
    "EURQ_ASSET_ID",
    "MERCHANT_ACCOUNT",
    "PAYER_ACCOUNT",
    "USDQ_ASSET_ID",
    "Account",
    "AssetTransfer",
    "Bank",
    "BankError",
    "BatchFacilitator",
    "BatchMerchant",
    "BatchSettlement",
    "ChainABridgeOffer",
    "ChainALedger",
    "ChainASandbox",
    "EuroOffer",
    "EvmOffer",
    "EvmSandbox",
    "Fault",
    "Faults",
    "MerchantGate",
    "Offer",
    "OnchainFacilitator",
    "PortInUse",
    "Price",
    "Sandbox",
    "SandboxPart",
    "ServedApp",
    "SolanaNode",
    "SolanaRoutes",
    "StandardMerchant",
    "SvmFacilitator",
    "Verdict",
    "__version__",
    "merchant_app",
    "onchain_facilitator_app",
]
