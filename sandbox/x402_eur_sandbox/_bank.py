"""The provider's managed-account backend: accounts, API keys, payment requests, transactions.

One `Bank` is shared by the payment API and the managed-account facilitator, as the two
are one system at the provider. Balances are `Decimal` euros; every payment really moves
balance. Time-dependent transitions are applied lazily on every access (`_advance`), so
there are no background timers to leak:

- a payment of a payment request debits the payer at once and leaves the request `Open`
  until `confirmation_delay` has passed; then the merchant is credited and the request
  and its transaction are `Paid`;
- a request still `Open` when `expires_at` passes becomes `Expired`; a payment still
  waiting for confirmation is then refunded and its transaction `Cancelled`.

Thread-safe: tests may read and change it from another thread while it serves.
"""

from __future__ import annotations

import dataclasses
import secrets
import threading
import time
from collections.abc import Callable
from decimal import Decimal
from typing import Any

__all__ = ["Account", "Bank", "BankError", "PaymentRequest", "Transaction"]


class BankError(Exception):
    """An error the payment API answers in the field notes' shape."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message

    def body(self) -> dict[str, Any]:
        return {"errors": [{"code": self.code, "message": self.message}]}


@dataclasses.dataclass
class Account:
    code: str
    balance: Decimal
    api_key: str = dataclasses.field(repr=False)
    #: A chain-A address linked to this account (the bridge sends from the provider).
    token_code: str = "EURO"  # noqa: S105 - a token symbol, not a secret


@dataclasses.dataclass
class PaymentRequest:
    code: str
    account_code: str
    amount: Decimal
    message: str
    created: float
    expires_at: float
    status: str = "Open"  # Open -> Paid | Expired
    used: bool = False
    transaction_code: str | None = None


@dataclasses.dataclass
class Transaction:
    code: str
    from_account: str
    to: str
    to_type: str
    amount: Decimal
    created: float
    status: str = "Processing"  # Processing -> Paid | Cancelled | Expired | Failed
    finished: float | None = None
    message: str = ""
    blockchain_tx_id: str | None = None
    confirm_at: float | None = None
    payment_request_code: str | None = None

    def record(self) -> dict[str, Any]:
        """The transaction as `GET /transaction` lists it (field notes' item shape)."""
        item: dict[str, Any] = {
            "transactionCode": self.code,
            "fromAccountCode": self.from_account,
            "toAccountCode": self.to,
            "amount": self.amount,
            "tokenCode": "EURO",
            "created": _iso(self.created),
            "finished": _iso(self.finished) if self.finished else None,
            "status": self.status,
            "type": self.to_type,
            "message": self.message,
        }
        if self.blockchain_tx_id is not None:
            item["blockchainTxId"] = self.blockchain_tx_id
        return item


def _iso(timestamp: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(timestamp))


#: Handles `toType: BlockchainAddress` payments (the bridge). Called under the bank's lock
#: with the new transaction; it schedules the on-chain leg and may raise `BankError`.
BridgeHandler = Callable[["Bank", Transaction], None]


class Bank:
    """Accounts and payment state of the sandbox provider."""

    def __init__(
        self,
        *,
        confirmation_delay: float = 0.0,
        request_lifetime: float = 300.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.confirmation_delay = confirmation_delay
        self.request_lifetime = request_lifetime
        self.clock = clock
        self.lock = threading.RLock()
        self.accounts: dict[str, Account] = {}
        self.payment_requests: dict[str, PaymentRequest] = {}
        self.transactions: dict[str, Transaction] = {}
        self._open: set[str] = set()  # codes of requests still Open (what _advance scans)
        self.bridge: BridgeHandler | None = None
        #: Every `POST /transaction/payment` that moved money, in order (for tests).
        self.payments_made: list[Transaction] = []

    # --- accounts --------------------------------------------------------------------------

    def open_account(
        self, balance: Decimal | str = "0", *, code: str | None = None, api_key: str | None = None
    ) -> Account:
        with self.lock:
            code = code or f"ACC_{secrets.token_hex(4).upper()}"
            if code in self.accounts:
                raise ValueError(f"account {code} exists")
            account = Account(
                code=code,
                balance=Decimal(balance),
                api_key=api_key or f"sk_sandbox_{secrets.token_urlsafe(18)}",
            )
            self.accounts[code] = account
            return account

    def account_for_key(self, api_key: str | None) -> Account:
        with self.lock:
            for account in self.accounts.values():
                if api_key and secrets.compare_digest(account.api_key, api_key):
                    return account
        raise BankError(401, "Unauthorized", "missing or unknown X-API-KEY")

    def balance(self, code: str) -> Decimal:
        with self.lock:
            self._advance()
            return self.accounts[code].balance

    # --- payment requests -----------------------------------------------------------------

    def create_payment_request(
        self, account_code: str, amount: Decimal, message: str
    ) -> PaymentRequest:
        with self.lock:
            if account_code not in self.accounts:
                raise BankError(404, "AccountNotFound", f"account {account_code} not found")
            if amount <= 0:
                raise BankError(400, "InvalidAmount", "amount must be positive")
            now = self.clock()
            request = PaymentRequest(
                code=f"pr_{secrets.token_hex(10)}",
                account_code=account_code,
                amount=amount,
                message=message,
                created=now,
                expires_at=now + self.request_lifetime,
            )
            self.payment_requests[request.code] = request
            self._open.add(request.code)
            return request

    def verify_payment_request(
        self, code: str, merchant: str
    ) -> tuple[bool, str, PaymentRequest | None]:
        """The facilitator's verification: (valid, reason, request). Valid marks it used."""
        with self.lock:
            self._advance()
            request = self.payment_requests.get(code)
            if request is None or request.account_code != merchant:
                return False, "Payment request not found", None
            if request.used:
                return False, "Payment request already used", request
            if request.status == "Expired":
                return False, "Payment request expired", request
            if request.status != "Paid":
                return False, f"Payment not confirmed (status: {request.status})", request
            request.used = True
            return True, "", request

    # --- payments -----------------------------------------------------------------------------

    def pay(
        self,
        payer: Account,
        *,
        payment_from: str,
        to_type: str,
        payment_to: str,
        amount: Decimal,
        message: str = "",
    ) -> Transaction:
        with self.lock:
            self._advance()
            if payment_from != payer.code:
                raise BankError(403, "Forbidden", "paymentFrom is not an account of this API key")
            if amount <= 0 or amount != amount.quantize(Decimal("0.000001")):
                raise BankError(400, "InvalidAmount", "amount must be positive, at most 6 decimals")
            if to_type == "PaymentRequestCode":
                return self._pay_request(payer, payment_to, amount)
            if to_type == "BlockchainAddress":
                return self._pay_address(payer, payment_to, amount, message)
            raise BankError(400, "InvalidToType", f"toType {to_type!r} is not supported")

    def _new_transaction(
        self, payer: Account, to: str, to_type: str, amount: Decimal, message: str
    ) -> Transaction:
        if payer.balance < amount:
            raise BankError(
                400,
                "InsufficientFunds",
                f"Insufficient funds: balance {payer.balance} EURO, needed {amount} EURO",
            )
        payer.balance -= amount
        transaction = Transaction(
            code=f"QP{secrets.token_hex(8).upper()}",
            from_account=payer.code,
            to=to,
            to_type=to_type,
            amount=amount,
            created=self.clock(),
            message=message,
        )
        self.transactions[transaction.code] = transaction
        self.payments_made.append(transaction)
        return transaction

    def _pay_request(self, payer: Account, code: str, amount: Decimal) -> Transaction:
        request = self.payment_requests.get(code)
        if request is None:
            raise BankError(404, "PaymentRequestNotFound", f"payment request {code} not found")
        if request.status == "Expired":
            raise BankError(400, "PaymentRequestExpired", f"payment request {code} has expired")
        if request.status != "Open" or request.transaction_code is not None:
            raise BankError(400, "PaymentRequestAlreadyPaid", f"payment request {code} is paid")
        if amount != request.amount:
            raise BankError(
                400,
                "AmountMismatch",
                f"amount {amount} differs from the request's {request.amount}",
            )
        transaction = self._new_transaction(
            payer, request.account_code, "PaymentRequestCode", amount, request.message
        )
        transaction.payment_request_code = code
        transaction.confirm_at = transaction.created + self.confirmation_delay
        request.transaction_code = transaction.code
        self._advance()
        return transaction

    def _pay_address(
        self, payer: Account, address: str, amount: Decimal, message: str
    ) -> Transaction:
        if self.bridge is None:
            raise BankError(400, "BridgeUnavailable", "payments to blockchain addresses are off")
        transaction = self._new_transaction(payer, address, "BlockchainAddress", amount, message)
        try:
            self.bridge(self, transaction)
        except BankError:
            payer.balance += amount
            del self.transactions[transaction.code]
            self.payments_made.pop()
            raise
        return transaction

    def finish(self, transaction: Transaction, status: str, *, refund: bool = False) -> None:
        """End a transaction (used by the bridge); `refund` gives the payer its money back."""
        with self.lock:
            transaction.status = status
            transaction.finished = self.clock()
            if refund:
                self.accounts[transaction.from_account].balance += transaction.amount

    def transaction(self, code: str) -> Transaction | None:
        with self.lock:
            self._advance()
            return self.transactions.get(code)

    def _advance(self) -> None:
        now = self.clock()
        for code in list(self._open):
            request = self.payment_requests[code]
            transaction = (
                self.transactions.get(request.transaction_code)
                if request.transaction_code
                else None
            )
            confirm_at = transaction.confirm_at if transaction else None
            if (
                transaction is not None
                and confirm_at is not None
                and confirm_at <= min(now, request.expires_at)
            ):
                self.accounts[request.account_code].balance += transaction.amount
                request.status = "Paid"
                transaction.status = "Paid"
                transaction.finished = confirm_at
                self._open.discard(code)
            elif now >= request.expires_at:
                request.status = "Expired"
                self._open.discard(code)
                if transaction is not None:
                    self.accounts[transaction.from_account].balance += transaction.amount
                    transaction.status = "Cancelled"
                    transaction.finished = now
