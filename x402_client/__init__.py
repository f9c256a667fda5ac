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
        format_money,
        from_atomic,
        to_atomic,
    )
    from ._assets import Asset
    from ._budget import (
        Budget,
        BudgetReport,
        BudgetStatus,
        BudgetStore,
        CurrencyStatus,
        InMemoryBudgetStore,
        RedisBudgetStore,
    )
    from ._chain_a_options import ChainAOptions
    from ._exceptions import (
        AmountLimitExceeded,
        BridgeResumeRefused,
        BridgeTransferFailed,
        BudgetExceeded,
        ChallengeError,
        ConfigurationError,
        DestinationRefused,
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
        RecoveryAdvice,
        SpenderMismatch,
        UnreplayableRequest,
        X402Error,
    )
    from ._ledger import LedgerEntry, PaymentLedger
    from ._mcp_pay import PaidToolResult, with_eur_payment_mcp
    from ._netguard import DestinationGuard
    from ._options import EvmOptions, PaymentOptions
    from ._permit2 import Permit2Approval, approve_permit2, approve_permit2_sync
    from ._policy import SkippedEntry, SkipReason
    from ._progress import PaymentProgress
    from ._proof import decode_proof, encode_proof
    from ._quote import Quote, QuoteEntry, budget_status, quote_payment, quote_response
    from ._recovery import Recovery, recover_payment, recover_payments, unfinished_payments
    from ._request import EXTENSION, RECEIPT_EXTENSION
    from ._requests import PaymentAdapter, payment_settings
    from ._resume import resume_bridge_payment
    from ._sqlite import JournalRecord, SqliteStore, default_state_path
    from ._sync import (
        SyncPaymentTransport,
        budget_status_sync,
        quote_payment_sync,
        recover_payment_sync,
        recover_payments_sync,
        resume_bridge_payment_sync,
        unfinished_payments_sync,
    )
    from ._transport import (
        PaymentTransport,
        payment_ledger,
        with_eur_payment,
    )
    from ._types import PaymentIntent, PaymentReceipt

_EXPORTS = {
    "AmountLimitExceeded": "._exceptions",
    "approve_permit2": "._permit2",
    "approve_permit2_sync": "._permit2",
    "Asset": "._assets",
    "BridgeResumeRefused": "._exceptions",
    "BridgeTransferFailed": "._exceptions",
    "Budget": "._budget",
    "budget_status": "._quote",
    "budget_status_sync": "._sync",
    "BudgetExceeded": "._exceptions",
    "BudgetReport": "._budget",
    "BudgetStatus": "._budget",
    "BudgetStore": "._budget",
    "ChallengeError": "._exceptions",
    "ConfigurationError": "._exceptions",
    "CurrencyStatus": "._budget",
    "decode_proof": "._proof",
    "default_state_path": "._sqlite",
    "DestinationGuard": "._netguard",
    "DestinationRefused": "._exceptions",
    "encode_proof": "._proof",
    "EvmOptions": "._options",
    "ChainAOptions": "._chain_a_options",
    "EXTENSION": "._request",
    "format_amount": "._amounts",
    "format_money": "._amounts",
    "from_atomic": "._amounts",
    "InMemoryBudgetStore": "._budget",
    "InsufficientFunds": "._exceptions",
    "InvalidChallenge": "._exceptions",
    "JournalRecord": "._sqlite",
    "LedgerEntry": "._ledger",
    "NoSatisfiableOption": "._exceptions",
    "PaidToolResult": "._mcp_pay",
    "payment_ledger": "._transport",
    "PaymentAdapter": "._requests",
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
    "payment_settings": "._requests",
    "PaymentRejectedByHook": "._exceptions",
    "PaymentTransport": "._transport",
    "PaymentVerificationFailed": "._exceptions",
    "Permit2Approval": "._permit2",
    "Quote": "._quote",
    "quote_payment": "._quote",
    "quote_payment_sync": "._sync",
    "quote_response": "._quote",
    "QuoteEntry": "._quote",
    "RECEIPT_EXTENSION": "._request",
    "recover_payment": "._recovery",
    "recover_payment_sync": "._sync",
    "recover_payments": "._recovery",
    "recover_payments_sync": "._sync",
    "Recovery": "._recovery",
    "RecoveryAdvice": "._exceptions",
    "RedisBudgetStore": "._budget",
    "resume_bridge_payment": "._resume",
    "resume_bridge_payment_sync": "._sync",
    "SkippedEntry": "._policy",
    "SkipReason": "._policy",
    "SpenderMismatch": "._exceptions",
    "SqliteStore": "._sqlite",
    "SyncPaymentTransport": "._sync",
    "to_atomic": "._amounts",
    "unfinished_payments": "._recovery",
    "unfinished_payments_sync": "._sync",
    "UnreplayableRequest": "._exceptions",
    "with_eur_payment": "._transport",
    "with_eur_payment_mcp": "._mcp_pay",
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
    "Asset",
    "BridgeResumeRefused",
    "BridgeTransferFailed",
    "Budget",
    "BudgetExceeded",
    "BudgetReport",
    "BudgetStatus",
    "BudgetStore",
    "ChainAOptions",
    "ChallengeError",
    "ConfigurationError",
    "CurrencyStatus",
    "DestinationGuard",
    "DestinationRefused",
    "EvmOptions",
    "InMemoryBudgetStore",
    "InsufficientFunds",
    "InvalidChallenge",
    "JournalRecord",
    "LedgerEntry",
    "NoSatisfiableOption",
    "PaidToolResult",
    "PaymentAPIError",
    "PaymentAdapter",
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
    "Permit2Approval",
    "Quote",
    "QuoteEntry",
    "Recovery",
    "RecoveryAdvice",
    "RedisBudgetStore",
    "SkipReason",
    "SkippedEntry",
    "SpenderMismatch",
    "SqliteStore",
    "SyncPaymentTransport",
    "UnreplayableRequest",
    "X402Error",
    "__version__",
    "approve_permit2",
    "approve_permit2_sync",
    "budget_status",
    "budget_status_sync",
    "decode_proof",
    "default_state_path",
    "encode_proof",
    "format_amount",
    "format_money",
    "from_atomic",
    "payment_ledger",
    "payment_settings",
    "quote_payment",
    "quote_payment_sync",
    "quote_response",
    "recover_payment",
    "recover_payment_sync",
    "recover_payments",
    "recover_payments_sync",
    "resume_bridge_payment",
    "resume_bridge_payment_sync",
    "to_atomic",
    "unfinished_payments",
    "unfinished_payments_sync",
    "with_eur_payment",
    "with_eur_payment_mcp",
]
