"""The client's own value objects: what it is about to pay, and what it paid."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal

from .redact import resource_repr, safe_url

__all__ = ["Paid", "PaymentIntent", "PaymentReceipt", "Rail"]

Rail = Literal[
    "euro", "evm-permit", "bridge", "eip3009", "permit2", "upto", "chain-a", "svm", "session"
]


@dataclasses.dataclass(frozen=True, slots=True)
class PaymentIntent:
    """A payment the client is about to make for one request.

    `amount` is in `currency` units (`"EUR"` for EURO and EURQ, `"USD"` for USDQ);
    `atomic_amount` is the on-chain integer amount for `exact` entries. `accept` is the
    merchant's accept entry as it arrived. `resource` is the URL as requested; `repr`
    redacts its credentials.

    `instead_of` is set when this payment is in another currency than offers of the same
    402 that a budget refused: why those were not paid, e.g. `budget 0.15 EUR/24h: 0.10 EUR
    spent, this payment 0.10 EUR`. An `on_before_payment` hook sees it, to approve the
    switch or not (the command line says it in one line).
    """

    rail: Rail
    scheme: str
    network: str
    asset: str
    asset_symbol: str
    amount: Decimal
    currency: str
    pay_to: str
    resource: str
    atomic_amount: int | None = None
    description: str | None = None
    accept: Mapping[str, Any] = dataclasses.field(default_factory=dict, repr=False, compare=False)
    instead_of: str | None = dataclasses.field(default=None, compare=False)

    def __repr__(self) -> str:
        return resource_repr(self)

    def amount_of(self, atomic: int) -> Decimal | None:
        """`atomic` units of this intent's asset in `currency` units (None when the intent
        has no atomic amount to scale by)."""
        if self.atomic_amount is None:
            return None
        if self.atomic_amount == 0:
            return None if atomic else Decimal(0)
        return self.amount * atomic / self.atomic_amount


@dataclasses.dataclass(frozen=True, slots=True)
class PaymentReceipt:
    """What a payment was: found in `response.extensions["x402_payment"]`.

    `payment_request_code` is set on the euro rail, `transaction_code` when the payment API
    returned one, `blockchain_tx_id` on the bridge, `tx_hash` when the merchant's
    settlement header named one. `settlement` is the decoded `X-PAYMENT-RESPONSE` (or
    `PAYMENT-RESPONSE`) header when the merchant sent one. `payments` counts the payments
    made for this request (2 when a proof expired and the client paid a fresh 402).
    `reused` is True on the receipt of a proof paid earlier and re-sent (recovery, or
    `extensions={"x402": {"proof": ...}}`): that request moved no money (`payments` is 0).
    `resource` is the URL as requested; `repr` and `to_json` redact its credentials.
    `asset_symbol` names the asset paid in (`EURQ`, `EURC`, `EURO`) where the offer made it
    known; `asset` is its address or the merchant's id for it. `payment_identifier` is the
    x402 `payment-identifier` the proof carried (a standard v2 merchant that declared the
    extension deduplicates by it), if any.

    An `upto` payment (authorize at most an amount, the merchant settles what was used)
    says more: `authorized_amount` is the most the payer signed for, `claimed_amount` what
    the merchant's settlement response says it took, and `settlement_verified` whether the
    client read what moved from the chain itself. When it did, `settled_amount` is that and
    `amount` equals it; when it could not (the RPC endpoint did not answer, the merchant
    named no transaction that settled the authorization), `settled_amount` is None and
    `amount` is the authorized maximum, booked until the authorization's deadline has passed
    and recovery can tell (`payments(client).recover_all()`). Other rails leave all four None: their
    `amount` is exactly what moved.

    A session payment (scheme `batch-settlement`: one deposit, a voucher per request) names
    its `channel_id`; `amount` is this request's increment (what the voucher added, booked
    as spent), `cumulative_amount` the voucher's total over the channel so far, and
    `claimed_amount` what the merchant said it charged (at most the increment), after the
    client checked it against what it signed.

    A re-sent proof's receipt (`reused`) says in `closed_payment` which payment it finished
    (its ledger id), or None when it finished none: a proof sent to another origin than the
    one it paid, or answering a 402 that asks for another payment, is a new request that
    books, frees and closes nothing.
    """

    rail: Rail
    scheme: str
    network: str
    asset: str
    amount: Decimal
    currency: str
    pay_to: str
    resource: str
    paid_at: datetime
    proof: str = dataclasses.field(repr=False)
    payment_request_code: str | None = None
    transaction_code: str | None = None
    blockchain_tx_id: str | None = None
    tx_hash: str | None = None
    payer: str | None = None
    settlement: Mapping[str, Any] | None = None
    payments: int = 1
    reused: bool = False
    asset_symbol: str | None = None
    authorized_amount: Decimal | None = None
    settled_amount: Decimal | None = None
    claimed_amount: Decimal | None = None
    settlement_verified: bool | None = None
    closed_payment: str | None = None
    channel_id: str | None = None
    cumulative_amount: Decimal | None = None

    @classmethod
    def of(cls, answer: object) -> PaymentReceipt | None:
        """The receipt of a paid answer, None when nothing was paid for it: an httpx
        response (`response.extensions["x402_payment"]`), a `requests` response or an MCP
        tool result (`.x402_payment`), or anything else (None, never an AttributeError).

        ```python
        receipt = PaymentReceipt.of(response)   # typed: PaymentReceipt | None
        ```
        """
        extensions = getattr(answer, "extensions", None)
        found = extensions.get("x402_payment") if isinstance(extensions, Mapping) else None
        if found is None:
            found = getattr(answer, "x402_payment", None)
        return found if isinstance(found, cls) else None

    def __repr__(self) -> str:
        # Short: the money as the library writes it, the rail, the resource, the codes.
        from .amounts import format_amount, money_of

        shown = [
            f"{money_of(self.amount, self.currency, self.asset_symbol)} on {self.rail} "
            f"{self.network}"
        ]
        if not self.asset_symbol:
            shown.append(f"asset={self.asset!r}")
        shown.append(f"resource={safe_url(self.resource)!r}")
        for name in ("payment_request_code", "transaction_code", "blockchain_tx_id", "tx_hash"):
            value = getattr(self, name)
            if value:
                shown.append(f"{name}={value!r}")
        if self.authorized_amount is not None:
            shown.append(f"authorized={format_amount(self.authorized_amount)}")
            shown.append("verified" if self.settlement_verified else "held at the maximum")
        if self.reused:
            shown.append("reused=True")
        elif self.payments != 1:
            shown.append(f"payments={self.payments}")
        return f"PaymentReceipt({', '.join(shown)})"

    @property
    def payment_identifier(self) -> str | None:
        """The x402 `payment-identifier` the proof carried, if any."""
        # These load pydantic, which the receipt's module does not: only when asked.
        from .exact_json import ProofError, b64_json_decode
        from .payment_id import payment_id_of

        try:
            decoded = b64_json_decode(self.proof)
        except ProofError:
            return None
        return payment_id_of(decoded) if isinstance(decoded, dict) else None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (camelCase, the amount as `format_amount` writes it on every
        rail). Not the proof: it was spent on the response this receipt came with. The
        resource's credentials are redacted (`safe_url`)."""
        from .amounts import format_amount

        return {
            "amount": format_amount(self.amount),
            "authorizedAmount": _amount_text(self.authorized_amount),
            "settledAmount": _amount_text(self.settled_amount),
            "claimedAmount": _amount_text(self.claimed_amount),
            "settlementVerified": self.settlement_verified,
            "currency": self.currency,
            "rail": self.rail,
            "scheme": self.scheme,
            "network": self.network,
            "asset": self.asset,
            "assetSymbol": self.asset_symbol,
            "payTo": self.pay_to,
            "resource": safe_url(self.resource),
            "paidAt": self.paid_at.isoformat(),
            "payments": self.payments,
            "reused": self.reused,
            "closedPayment": self.closed_payment,
            "paymentRequestCode": self.payment_request_code,
            "transactionCode": self.transaction_code,
            "blockchainTxId": self.blockchain_tx_id,
            "txHash": self.tx_hash,
            "payer": self.payer,
            "paymentIdentifier": self.payment_identifier,
        }


def _amount_text(amount: Decimal | None) -> str | None:
    from .amounts import format_amount

    return None if amount is None else format_amount(amount)


@dataclasses.dataclass(frozen=True, slots=True)
class Paid:
    """The outcome of paying: the X-PAYMENT value and the codes that identify the payment.

    A rail of the standard x402 world yields `payload` (the scheme's payload object) and
    leaves `proof` empty: the payer frames it in the dialect the 402 spoke (`_dialects`),
    which decides the header and its encoding.
    """

    proof: str = dataclasses.field(repr=False)
    payment_request_code: str | None = None
    transaction_code: str | None = None
    blockchain_tx_id: str | None = None
    payer: str | None = None
    payload: Mapping[str, Any] | None = dataclasses.field(default=None, repr=False)
    #: The request header that carries `proof` (the euro gates' `X-PAYMENT` unless the
    #: dialect framing it says otherwise: `_protocol.dialects`).
    header: str = "X-PAYMENT"
    #: The most this proof can add to what may move, in atomic units, when less than the
    #: intent's amount (a session voucher that re-signs at or near a cumulative amount
    #: signed before adds only the difference); None: the intent's amount.
    adds: int | None = None
