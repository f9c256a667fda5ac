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
    from ._adapters.httpx_async import (
        PaymentTransport,
        payment_ledger,
        with_eur_payment,
    )
    from ._adapters.httpx_sync import (
        SyncPaymentTransport,
        approve_permit2_sync,
        budget_status_sync,
        quote_payment_sync,
        recover_payment_sync,
        recover_payments_sync,
        resume_bridge_payment_sync,
        unfinished_payments_sync,
    )
    from ._adapters.mcp_session import PaidToolResult, with_eur_payment_mcp
    from ._adapters.requests_session import PaymentAdapter, payment_settings
    from ._flow.payment import EXTENSION, RECEIPT_EXTENSION
    from ._flow.quote import Quote, QuoteEntry, budget_status, quote_payment, quote_response
    from ._flow.recovery import Recovery, recover_payment, recover_payments, unfinished_payments
    from ._flow.resume import resume_bridge_payment
    from ._options import ChainAOptions, EvmOptions, PaymentOptions
    from ._protocol.amounts import (
        format_amount,
        format_money,
        from_atomic,
        to_atomic,
    )
    from ._protocol.assets import Asset
    from ._protocol.budgets import Budget, BudgetReport, BudgetStatus, BudgetStore, CurrencyStatus
    from ._protocol.errors import (
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
    from ._protocol.events import PaymentProgress
    from ._protocol.ledger import LedgerEntry, PaymentLedger
    from ._protocol.policy import SkippedEntry, SkipReason
    from ._protocol.proof import decode_proof, encode_proof
    from ._protocol.types import PaymentIntent, PaymentReceipt
    from ._rails.approval import Permit2Approval, approve_permit2
    from ._state.budget_stores import InMemoryBudgetStore, RedisBudgetStore
    from ._state.netguard import DestinationGuard
    from ._state.sqlite_store import JournalRecord, SqliteStore, default_state_path

_EXPORTS = {
    "AmountLimitExceeded": "._protocol.errors",
    "approve_permit2": "._rails.approval",
    "approve_permit2_sync": "._adapters.httpx_sync",
    "Asset": "._protocol.assets",
    "BridgeResumeRefused": "._protocol.errors",
    "BridgeTransferFailed": "._protocol.errors",
    "Budget": "._protocol.budgets",
    "budget_status": "._flow.quote",
    "budget_status_sync": "._adapters.httpx_sync",
    "BudgetExceeded": "._protocol.errors",
    "BudgetReport": "._protocol.budgets",
    "BudgetStatus": "._protocol.budgets",
    "BudgetStore": "._protocol.budgets",
    "ChallengeError": "._protocol.errors",
    "ConfigurationError": "._protocol.errors",
    "CurrencyStatus": "._protocol.budgets",
    "decode_proof": "._protocol.proof",
    "default_state_path": "._state.sqlite_store",
    "DestinationGuard": "._state.netguard",
    "DestinationRefused": "._protocol.errors",
    "encode_proof": "._protocol.proof",
    "EvmOptions": "._options",
    "ChainAOptions": "._options",
    "EXTENSION": "._flow.payment",
    "format_amount": "._protocol.amounts",
    "format_money": "._protocol.amounts",
    "from_atomic": "._protocol.amounts",
    "InMemoryBudgetStore": "._state.budget_stores",
    "InsufficientFunds": "._protocol.errors",
    "InvalidChallenge": "._protocol.errors",
    "JournalRecord": "._state.sqlite_store",
    "LedgerEntry": "._protocol.ledger",
    "NoSatisfiableOption": "._protocol.errors",
    "PaidToolResult": "._adapters.mcp_session",
    "payment_ledger": "._adapters.httpx_async",
    "PaymentAdapter": "._adapters.requests_session",
    "PaymentAPIError": "._protocol.errors",
    "PaymentFailed": "._protocol.errors",
    "PaymentIntent": "._protocol.types",
    "PaymentLedger": "._protocol.ledger",
    "PaymentNotConfirmed": "._protocol.errors",
    "PaymentOptions": "._options",
    "PaymentOutcomeUnknown": "._protocol.errors",
    "PaymentProgress": "._protocol.events",
    "PaymentReceipt": "._protocol.types",
    "PaymentRefused": "._protocol.errors",
    "payment_settings": "._adapters.requests_session",
    "PaymentRejectedByHook": "._protocol.errors",
    "PaymentTransport": "._adapters.httpx_async",
    "PaymentVerificationFailed": "._protocol.errors",
    "Permit2Approval": "._rails.approval",
    "Quote": "._flow.quote",
    "quote_payment": "._flow.quote",
    "quote_payment_sync": "._adapters.httpx_sync",
    "quote_response": "._flow.quote",
    "QuoteEntry": "._flow.quote",
    "RECEIPT_EXTENSION": "._flow.payment",
    "recover_payment": "._flow.recovery",
    "recover_payment_sync": "._adapters.httpx_sync",
    "recover_payments": "._flow.recovery",
    "recover_payments_sync": "._adapters.httpx_sync",
    "Recovery": "._flow.recovery",
    "RecoveryAdvice": "._protocol.errors",
    "RedisBudgetStore": "._state.budget_stores",
    "resume_bridge_payment": "._flow.resume",
    "resume_bridge_payment_sync": "._adapters.httpx_sync",
    "SkippedEntry": "._protocol.policy",
    "SkipReason": "._protocol.policy",
    "SpenderMismatch": "._protocol.errors",
    "SqliteStore": "._state.sqlite_store",
    "SyncPaymentTransport": "._adapters.httpx_sync",
    "to_atomic": "._protocol.amounts",
    "unfinished_payments": "._flow.recovery",
    "unfinished_payments_sync": "._adapters.httpx_sync",
    "UnreplayableRequest": "._protocol.errors",
    "with_eur_payment": "._adapters.httpx_async",
    "with_eur_payment_mcp": "._adapters.mcp_session",
    "X402Error": "._protocol.errors",
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
