"""The x402-eur sandbox: merchant gate, facilitators, payment API and chains on 127.0.0.1.

Needs the `sandbox` extra (`pip install 'x402-eur[sandbox]'`). Nothing here moves real
money; everything here really moves sandbox money, so tests and demos exercise the real
protocol end to end.
"""

from __future__ import annotations

try:
    import starlette  # noqa: F401
    import uvicorn  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "x402_client.sandbox needs the sandbox extra: pip install 'x402-eur[sandbox]'"
    ) from exc

from ._bank import Account, Bank, BankError
from ._faults import Fault, Faults
from ._merchant import DEFAULT_PRICES, EuroOffer, MerchantGate, Offer, Price, Verdict, merchant_app
from ._sandbox import MERCHANT_ACCOUNT, PAYER_ACCOUNT, Sandbox, SandboxPart
from ._server import ServedApp

__all__ = [
    "DEFAULT_PRICES",
    "MERCHANT_ACCOUNT",
    "PAYER_ACCOUNT",
    "Account",
    "Bank",
    "BankError",
    "EuroOffer",
    "Fault",
    "Faults",
    "MerchantGate",
    "Offer",
    "Price",
    "Sandbox",
    "SandboxPart",
    "ServedApp",
    "Verdict",
    "merchant_app",
]
