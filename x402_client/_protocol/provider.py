"""What the client assumes about the managed-account payment API's bodies, in one place.

The protocol does not fix the payment API's bodies, and their shapes vary. Every such
assumption lives here, so it can change without touching the rest:

- successful bodies may be wrapped as `{"value": {...}}` or not;
- errors are `{"errors": [{"code", "message"}]}`, capitalised either way;
- payments answer `transactionCode` (prefix `QP`);
- `GET /transaction?txCode=` answers a page `{"value": {"items": [...]}}`;
- statuses seen: Open, Processing, Paid, Cancelled, Expired.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, ValidationError

from .models import JsonAmount, WireStr, _Wire

__all__ = [
    "FAILED_STATUSES",
    "ProviderError",
    "TransactionRecord",
    "find_transaction",
    "is_insufficient_funds",
    "provider_errors",
    "readable_page",
    "transaction_code_of",
    "unwrap",
]

#: Transaction statuses after which no `blockchainTxId` will ever appear.
FAILED_STATUSES = frozenset({"cancelled", "expired", "failed", "rejected", "error"})


class ProviderError:
    """One entry of an `errors` list."""

    __slots__ = ("code", "message")

    def __init__(self, code: str | None, message: str | None) -> None:
        self.code = code
        self.message = message


class TransactionRecord(_Wire):
    """An item of `GET /transaction`; only `transactionCode` is certain to be there."""

    transaction_code: WireStr = Field(alias="transactionCode")
    status: WireStr | None = None
    blockchain_tx_id: WireStr | None = Field(default=None, alias="blockchainTxId")
    amount: JsonAmount | None = None
    from_account_code: WireStr | None = Field(default=None, alias="fromAccountCode")
    to_account_code: WireStr | None = Field(default=None, alias="toAccountCode")
    token_code: WireStr | None = Field(default=None, alias="tokenCode")
    type: WireStr | None = None
    message: WireStr | None = None
    #: When the provider made it (ISO 8601, UTC when no offset is given).
    created: WireStr | None = None


def _get(mapping: dict[str, Any], key: str) -> Any:
    """`key` as written, or with its first letter capitalised (`errors` / `Errors`)."""
    if key in mapping:
        return mapping[key]
    return mapping.get(key[:1].upper() + key[1:])


def unwrap(body: Any) -> Any:
    """The payload of a success body: under `value` when wrapped, the body itself otherwise."""
    if isinstance(body, dict):
        inner = _get(body, "value")
        if isinstance(inner, dict):
            return inner
    return body


def provider_errors(body: Any) -> list[ProviderError]:
    """The `errors` entries of an error body (any capitalisation); empty if none."""
    if not isinstance(body, dict):
        return []
    raw = _get(body, "errors")
    if isinstance(raw, dict):
        raw = [raw]
    if not isinstance(raw, list):
        return []
    result = []
    for item in raw:
        if isinstance(item, dict):
            code, message = _get(item, "code"), _get(item, "message")
            result.append(
                ProviderError(
                    str(code) if code is not None else None,
                    str(message) if message is not None else None,
                )
            )
    return result


def is_insufficient_funds(error: ProviderError) -> bool:
    text = f"{error.code or ''} {error.message or ''}".lower().replace("_", "")
    return "insufficient" in text or "notenoughfunds" in text.replace(" ", "")


def transaction_code_of(body: Any) -> str | None:
    """`transactionCode` at the top level or under `value`."""
    for candidate in (body, unwrap(body)):
        if isinstance(candidate, dict):
            code = _get(candidate, "transactionCode")
            if isinstance(code, str) and code:
                return code
    return None


def _items(body: Any) -> list[Any] | None:
    """The items of a lookup answer: a page of `items`, or a bare record as one item; None
    when the answer is neither."""
    payload = unwrap(body)
    items: Any = None
    if isinstance(payload, dict):
        items = _get(payload, "items")
        if items is None and _get(payload, "transactionCode") is not None:
            items = [payload]
    elif isinstance(payload, list):
        items = payload
    return items if isinstance(items, list) else None


def find_transaction(body: Any, code: str) -> TransactionRecord | None:
    """The record for `code` in a lookup answer: a page of `items`, or a bare record."""
    for item in _items(body) or ():
        if not isinstance(item, dict):
            continue
        try:
            record = TransactionRecord.model_validate(item)
        except ValidationError:
            continue
        if record.transaction_code == code:
            return record
    return None


def readable_page(body: Any) -> bool:
    """Whether a lookup answer is a page (or a bare record) whose every item is a
    transaction record: only then does a code it does not hold count as not listed."""
    items = _items(body)
    if items is None:
        return False
    try:
        for item in items:
            TransactionRecord.model_validate(item)
    except ValidationError:
        return False
    return True
