"""x402-eur: a payer-side x402 client for euro pay-per-request APIs, built on httpx.

```python
import httpx
from x402_client import PaymentOptions, with_eur_payment

client = with_eur_payment(httpx.AsyncClient(), PaymentOptions.from_env())
response = await client.get("https://merchant.example/paid")
print(response.extensions["x402_payment"])
```
"""

# The public surface loads on first use (PEP 562): `import x402_client` stays cheap for
# command-line start-up, and web3 is only ever imported by the EVM rail.
from typing import TYPE_CHECKING, Any

from .__version__ import __version__

if TYPE_CHECKING:
    from ._amounts import (
        format_amount,
        from_atomic,
        to_atomic,
    )
    from ._budget import (
        Budget,
        BudgetStore,
        InMemoryBudgetStore,
        RedisBudgetStore,
    )
    from ._exceptions import (
        AmountLimitExceeded,
        BridgeResumeRefused,
        BridgeTransferFailed,
        BudgetExceeded,
        ChallengeError,
        ConfigurationError,
        InsufficientFunds,
        InvalidChallenge,
        NoSatisfiableOption,
        PaymentAPIError,
        PaymentFailed,
        PaymentNotConfirmed,
        PaymentOutcomeUnknown,
        PaymentRefused,
        PaymentRejectedByHook,
        PaymentVerificationFailed,
        SpenderMismatch,
        UnreplayableRequest,
        X402Error,
    )
    from ._ledger import LedgerEntry, PaymentLedger
    from ._options import EvmOptions, PaymentOptions
    from ._payer import EXTENSION, RECEIPT_EXTENSION
    from ._progress import PaymentProgress
    from ._proof import decode_proof, encode_proof
    from ._resume import resume_bridge_payment
    from ._transport import (
        PaymentTransport,
        payment_ledger,
        with_eur_payment,
    )
    from ._types import PaymentIntent, PaymentReceipt

_EXPORTS = {
    "AmountLimitExceeded": "._exceptions",
    "BridgeResumeRefused": "._exceptions",
    "BridgeTransferFailed": "._exceptions",
    "Budget": "._budget",
    "BudgetExceeded": "._exceptions",
    "BudgetStore": "._budget",
    "ChallengeError": "._exceptions",
    "ConfigurationError": "._exceptions",
    "EXTENSION": "._payer",
    "EvmOptions": "._options",
    "InMemoryBudgetStore": "._budget",
    "InsufficientFunds": "._exceptions",
    "InvalidChallenge": "._exceptions",
    "LedgerEntry": "._ledger",
    "NoSatisfiableOption": "._exceptions",
    "PaymentAPIError": "._exceptions",
    "PaymentFailed": "._exceptions",
    "PaymentIntent": "._types",
    "PaymentLedger": "._ledger",
    "PaymentNotConfirmed": "._exceptions",
    "PaymentOptions": "._options",
    "PaymentOutcomeUnknown": "._exceptions",
    "PaymentProgress": "._progress",
    "PaymentReceipt": "._types",
    "PaymentRefused": "._exceptions",
    "PaymentRejectedByHook": "._exceptions",
    "PaymentTransport": "._transport",
    "PaymentVerificationFailed": "._exceptions",
    "RECEIPT_EXTENSION": "._payer",
    "RedisBudgetStore": "._budget",
    "SpenderMismatch": "._exceptions",
    "UnreplayableRequest": "._exceptions",
    "X402Error": "._exceptions",
    "decode_proof": "._proof",
    "encode_proof": "._proof",
    "format_amount": "._amounts",
    "from_atomic": "._amounts",
    "payment_ledger": "._transport",
    "resume_bridge_payment": "._resume",
    "to_atomic": "._amounts",
    "with_eur_payment": "._transport",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


__all__ = [
    "EXTENSION",
    "RECEIPT_EXTENSION",
    "AmountLimitExceeded",
    "BridgeResumeRefused",
    "BridgeTransferFailed",
    "Budget",
    "BudgetExceeded",
    "BudgetStore",
    "ChallengeError",
    "ConfigurationError",
    "EvmOptions",
    "InMemoryBudgetStore",
    "InsufficientFunds",
    "InvalidChallenge",
    "LedgerEntry",
    "NoSatisfiableOption",
    "PaymentAPIError",
    "PaymentFailed",
    "PaymentIntent",
    "PaymentLedger",
    "PaymentNotConfirmed",
    "PaymentOptions",
    "PaymentOutcomeUnknown",
    "PaymentProgress",
    "PaymentReceipt",
    "PaymentRefused",
    "PaymentRejectedByHook",
    "PaymentTransport",
    "PaymentVerificationFailed",
    "RedisBudgetStore",
    "SpenderMismatch",
    "UnreplayableRequest",
    "X402Error",
    "__version__",
    "decode_proof",
    "encode_proof",
    "format_amount",
    "from_atomic",
    "payment_ledger",
    "resume_bridge_payment",
    "to_atomic",
    "with_eur_payment",
]
