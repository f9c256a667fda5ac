"""x402-eur: a payer-side x402 client for euro pay-per-request APIs, built on httpx.

```python
import httpx
from x402_client import PaymentOptions, with_eur_payment

client = with_eur_payment(httpx.AsyncClient(), PaymentOptions.from_env())
response = await client.get("https://merchant.example/paid")
print(response.extensions["x402_payment"])
```
"""

from .__version__ import __version__
from ._amounts import format_amount, from_atomic, to_atomic
from ._budget import Budget, BudgetStore, InMemoryBudgetStore, RedisBudgetStore
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
from ._transport import PaymentTransport, payment_ledger, with_eur_payment
from ._types import PaymentIntent, PaymentReceipt

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
