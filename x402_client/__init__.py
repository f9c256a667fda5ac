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
        BudgetStatus,
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
    from ._policy import SkippedEntry, SkipReason
    from ._progress import PaymentProgress
    from ._proof import decode_proof, encode_proof
    from ._quote import Quote, QuoteEntry, budget_status, quote_payment, quote_response
    from ._resume import resume_bridge_payment
    from ._sqlite import SqliteStore
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
    "budget_status": "._quote",
    "BudgetExceeded": "._exceptions",
    "BudgetStatus": "._budget",
    "BudgetStore": "._budget",
    "ChallengeError": "._exceptions",
    "ConfigurationError": "._exceptions",
    "decode_proof": "._proof",
    "encode_proof": "._proof",
    "EvmOptions": "._options",
    "EXTENSION": "._payer",
    "format_amount": "._amounts",
    "from_atomic": "._amounts",
    "InMemoryBudgetStore": "._budget",
    "InsufficientFunds": "._exceptions",
    "InvalidChallenge": "._exceptions",
    "LedgerEntry": "._ledger",
    "NoSatisfiableOption": "._exceptions",
    "payment_ledger": "._transport",
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
    "Quote": "._quote",
    "quote_payment": "._quote",
    "quote_response": "._quote",
    "QuoteEntry": "._quote",
    "RECEIPT_EXTENSION": "._payer",
    "RedisBudgetStore": "._budget",
    "resume_bridge_payment": "._resume",
    "SkippedEntry": "._policy",
    "SkipReason": "._policy",
    "SpenderMismatch": "._exceptions",
    "SqliteStore": "._sqlite",
    "to_atomic": "._amounts",
    "UnreplayableRequest": "._exceptions",
    "with_eur_payment": "._transport",
    "X402Error": "._exceptions",
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
    "BudgetStatus",
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
    "Quote",
    "QuoteEntry",
    "RedisBudgetStore",
    "SkipReason",
    "SkippedEntry",
    "SpenderMismatch",
    "SqliteStore",
    "UnreplayableRequest",
    "X402Error",
    "__version__",
    "budget_status",
    "decode_proof",
    "encode_proof",
    "format_amount",
    "from_atomic",
    "payment_ledger",
    "quote_payment",
    "quote_response",
    "resume_bridge_payment",
    "to_atomic",
    "with_eur_payment",
]
