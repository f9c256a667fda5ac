"""What the tools answer: bodies as text or base64, receipts, budgets, and errors that say
whether money moved and, when it did or may have, how to recover without paying again."""

from __future__ import annotations

import base64
import codecs
import contextlib
from collections.abc import Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from .._protocol.amounts import format_amount

if TYPE_CHECKING:
    from .._flow.recovery import Recovery
    from .._options import PaymentOptions
    from .._protocol.budgets import BudgetReport
    from .._protocol.errors import DestinationRefused, RecoveryAdvice, X402Error
    from .._protocol.ledger import LedgerEntry
    from .._protocol.types import PaymentReceipt
    from .._state.sqlite_store import JournalRecord

__all__ = ["ToolError"]

_TEXT_TYPES = frozenset(
    {
        "application/json",
        "application/xml",
        "application/javascript",
        "application/ecmascript",
        "application/x-www-form-urlencoded",
        "application/yaml",
        "application/x-yaml",
        "application/graphql",
        "application/x-ndjson",
    }
)


class ToolError(Exception):
    """A tool refusal that is not an `X402Error` (bad arguments, unknown tool)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


def _receipt_json(receipt: PaymentReceipt) -> dict[str, Any]:
    return receipt.to_json()


# --- bodies --------------------------------------------------------------------------------


def _is_text(content_type: str) -> bool:
    mime = content_type.split(";")[0].strip().lower()
    return (
        mime.startswith("text/")
        or mime in _TEXT_TYPES
        or mime.endswith(("+json", "+xml"))
        or "charset=" in content_type.lower()
    )


def _body_json(
    data: bytes, content_type: str | None, charset: str | None, complete: bool
) -> tuple[str, str]:
    """`(body, encoding)`: text when the type says so (or it is plain UTF-8), else base64."""
    if content_type is None or _is_text(content_type):
        encoding = charset or "utf-8"
        try:
            decoder = codecs.getincrementaldecoder(encoding)
        except LookupError:
            decoder = codecs.getincrementaldecoder("utf-8")
        if content_type is not None:
            # final=False on a cut body drops a character split by the cut.
            return decoder(errors="replace").decode(data, final=complete), "text"
        with contextlib.suppress(UnicodeDecodeError):
            text = decoder(errors="strict").decode(data, final=complete)
            if "\x00" not in text:
                return text, "text"
    return base64.b64encode(data).decode("ascii"), "base64"


# --- the budget tool -----------------------------------------------------------------------


def _budget_json(report: BudgetReport, options: PaymentOptions) -> dict[str, Any]:
    from .._frontend.common import plain_words
    from .._protocol.budget_spec import window_text

    budgets = [
        {
            "name": status.budget.name,
            "currency": status.budget.currency,
            "limit": format_amount(Decimal(status.budget.limit)),
            "window": window_text(status.budget.window_seconds),
            "windowSeconds": status.budget.window_seconds,
            "spent": format_amount(status.spent),
            "remaining": format_amount(status.remaining),
        }
        for status in report
    ]
    body: dict[str, Any] = {
        "budgets": budgets,
        "maxAmountPerPayment": {
            currency: format_amount(cap) for currency, cap in options.max_amount_per_payment.items()
        },
        "currencies": [
            {
                "currency": each.currency,
                "maxAmountPerPayment": None
                if each.max_amount_per_payment is None
                else format_amount(each.max_amount_per_payment),
                "budgeted": each.budgeted,
                "remaining": None if each.remaining is None else format_amount(each.remaining),
                "payable": each.payable,
                "note": None if each.note is None else plain_words(each.note, "mcp"),
            }
            for each in report.currencies
        ],
    }
    if not budgets:
        body["note"] = "no budget: only the per-payment caps limit spending"
    return body


# --- errors --------------------------------------------------------------------------------


def _outcome_text(money_moved: bool | None) -> str:
    if money_moved is False:
        return "No money moved."
    if money_moved is True:
        return "Money moved: it was paid and the resource was not delivered."
    return "Money may have moved: the outcome of the payment is unknown."


def _recovery_text(advice: RecoveryAdvice) -> str:
    """What to do, for an agent that calls the tools."""
    if advice.outcome == "paid":
        resend = (
            "Re-sending the proof later is safe: call fetch with the same request and "
            "proof set to the proof above. "
            if advice.proof
            else ""
        )
        return (
            f"Do not pay again. {resend}"
            "The receipts identify the payment for the merchant or the provider."
        )
    steps = []
    if advice.proof:
        steps.append(
            "call fetch with the same request and proof set to the proof above (pays "
            "nothing: the merchant serves the resource or says the proof was used)"
        )
    if advice.transaction_code:
        steps.append(
            "call fetch with the same request and resume_transaction_code set to the "
            "transactionCode above (proves the earlier payment, pays nothing)"
        )
    recover = "Recover: " + "; or ".join(steps) + ". " if steps else ""
    return f"Do not pay again. {recover}The payments tool lists it with outcome unknown."


def _recovery_json(advice: RecoveryAdvice) -> dict[str, Any]:
    """The recovery fields of a money-moved error: the codes, the proof, and `recoverWith`,
    the fetch arguments that finish the payment when added to the same request."""
    body: dict[str, Any] = {
        "receipts": [_receipt_json(r) for r in advice.receipts],
        "proof": advice.proof,
    }
    if advice.outcome == "unknown":
        body["paymentRequestCode"] = advice.payment_request_code
        body["transactionCode"] = advice.transaction_code
    if advice.payment_id is not None:
        body["paymentId"] = advice.payment_id
    ways: list[dict[str, str]] = []
    if advice.proof:
        ways.append({"proof": advice.proof})
    if advice.transaction_code and advice.outcome == "unknown":
        ways.append({"resume_transaction_code": advice.transaction_code})
    body["recoverWith"] = ways
    body["recovery"] = _recovery_text(advice)
    return body


def _admit_hint(exc: DestinationRefused) -> str:
    """How the server's operator admits a host the guard refused: the agent cannot, so the
    message names the server's own settings (`--allow-host`, `X402_EUR_MCP_ALLOW_HOSTS`)."""
    from .._frontend.common import ALLOW_HOSTS_ENV

    host = f"[{exc.host}]" if ":" in exc.host else exc.host
    return (
        f". The server reaches it once started with --allow-host {host}:{exc.port} "
        f"(x402-eur mcp) or with {ALLOW_HOSTS_ENV}={host}:{exc.port} in its environment"
    )


def _x402_error_json(exc: X402Error) -> dict[str, Any]:
    from .._frontend.common import refusal_line, skipped_lines
    from .._protocol.errors import (
        BridgeResumeRefused,
        BridgeTransferFailed,
        DestinationRefused,
        PaymentAPIError,
        PaymentVerificationFailed,
    )

    moved = exc.money_moved
    # one line, its skipped offers counted (each one's reason is in `skipped`), with no
    # Python in it: an agent calls tools, it does not write PaymentOptions
    message = refusal_line(exc, "mcp")
    if isinstance(exc, DestinationRefused) and exc.address is not None:
        message += _admit_hint(exc)
    body: dict[str, Any] = {
        "type": type(exc).__name__,
        "message": message,
        "moneyMoved": moved,
        "summary": f"{_outcome_text(moved)} {type(exc).__name__}: {message}",
    }
    intent = exc.intent
    if intent is not None:
        body["intent"] = {
            "amount": format_amount(intent.amount),
            "currency": intent.currency,
            "rail": intent.rail,
            "network": intent.network,
            "payTo": intent.pay_to,
        }
    if exc.skipped:
        body["skipped"] = [
            {
                "index": s.index,
                "reason": getattr(s.reason, "value", s.reason),
                "message": line.split(": ", 1)[1],
            }
            for s, line in zip(exc.skipped, skipped_lines(exc, "mcp"), strict=True)
        ]
    if isinstance(exc, PaymentAPIError):
        body["providerCode"] = exc.code
    if isinstance(exc, (BridgeResumeRefused, BridgeTransferFailed)):
        body["transactionCode"] = exc.transaction_code
    if isinstance(exc, PaymentVerificationFailed):
        body["reason"] = exc.reason
    advice = exc.recovery()
    if advice is not None:
        body.update(_recovery_json(advice))
    return body


def _error_json(exc: BaseException) -> dict[str, Any]:
    """The `error` object of a tool error: what happened, whether money moved, how to recover."""
    import httpx

    from .._protocol.errors import X402Error

    if isinstance(exc, ToolError):
        return {
            "type": exc.kind,
            "message": exc.message,
            "moneyMoved": False,
            "summary": f"No money moved: {exc.message}",
        }
    if isinstance(exc, X402Error):
        return _x402_error_json(exc)
    if isinstance(exc, httpx.HTTPError):
        # Whether money moved is not read off the kind of error: the caller (`call`) looks
        # at what the ledger recorded during the call and says so.
        message = " ".join(str(exc).split()) or type(exc).__name__
        return {
            "type": type(exc).__name__,
            "message": message,
            "moneyMoved": False,
            "summary": f"No money moved: the request failed ({type(exc).__name__}: {message}).",
        }
    return {
        "type": "InternalError",
        "message": "the tool failed unexpectedly (the server's log has the details)",
        "moneyMoved": None,
        "summary": "Money may have moved: the tool failed unexpectedly. Check the payments "
        "tool before trying again.",
    }


def _add_payments_made(error: dict[str, Any], made: Sequence[LedgerEntry]) -> None:
    """Make `error` say what the ledger recorded during the call: a payment that moved
    money, or may have, is never reported as "no money moved", and the error carries
    what recovers it."""
    moving = [e for e in made if e.outcome != "failed"]
    if not moving or (error["moneyMoved"] is not False and "receipts" in error):
        return  # nothing moved, or a "money moved" error that carries its receipts already
    moved: bool | None = True if all(e.outcome == "paid" for e in moving) else None
    error["moneyMoved"] = moved
    error["summary"] = f"{_outcome_text(moved)} {error['summary']}"
    error["payments"] = [
        {
            "id": e.id,
            "outcome": e.outcome,
            "delivered": e.delivered,
            "amount": format_amount(e.intent.amount),
            "currency": e.intent.currency,
            "rail": e.intent.rail,
            "paymentRequestCode": e.payment_request_code,
            "transactionCode": e.transaction_code,
            "proof": _useful_proof(e),
        }
        for e in moving
    ]
    error["recovery"] = (
        "Do not pay again. Re-send a payment's proof with fetch (proof set to it), or "
        "resume its transactionCode; the payments tool lists them."
    )


def _useful_proof(entry: LedgerEntry) -> str | None:
    """A ledger entry's proof while it can still get the resource: after an unknown
    outcome, or a payment that was not delivered."""
    if entry.outcome == "unknown" or (entry.outcome == "paid" and not entry.delivered):
        return entry.proof
    return None


# --- unfinished payments and their recovery ------------------------------------------------


def _journal_json(record: JournalRecord) -> dict[str, Any]:
    """A journaled payment as the payments and resume tools show it (no proof, no body)."""
    from .._protocol.redact import redact_urls, safe_url

    return {
        "id": record.id,
        "state": record.state,
        "outcome": record.outcome,
        "delivered": record.delivered,
        # A live worker is paying, waiting for or delivering it: resume leaves it alone.
        "live": record.in_progress,
        "worker": record.worker,
        "amount": format_amount(record.amount),
        "currency": record.currency,
        "rail": record.rail,
        "network": record.network,
        "payTo": record.pay_to,
        "request": f"{record.request_method} {safe_url(record.request_url)}",
        "createdAt": record.created_at.isoformat(timespec="seconds"),
        "updatedAt": record.updated_at.isoformat(timespec="seconds"),
        "paymentRequestCode": record.payment_request_code,
        "transactionCode": record.transaction_code,
        "blockchainTxId": record.blockchain_tx_id,
        "error": None if record.error is None else redact_urls(record.error),
        "unrecoverable": None
        if record.unrecoverable is None
        else redact_urls(record.unrecoverable),
    }


def _moved_by(recovery: Recovery) -> bool | None:
    """Whether the recovered payment's money moved, as far as recovery knows: it was
    delivered (paid), given up as failed (nothing moved), or given up as unrecoverable
    with the journal saying it was paid; anything else is not known yet."""
    if recovery.status == "delivered":
        return True
    if recovery.status == "failed":
        return False
    record = recovery.record
    if recovery.status == "unrecoverable" and record is not None and record.outcome == "paid":
        return True
    return None


def _recovered_json(recovery: Recovery, max_body_bytes: int) -> dict[str, Any]:
    """What `resume` did with one payment, and the resource when the merchant served it."""
    from .._protocol.redact import redact_urls

    body: dict[str, Any] = {
        "id": None if recovery.record is None else recovery.record.id,
        "status": recovery.status,
        "reason": redact_urls(recovery.reason),
        "moneyMoved": _moved_by(recovery),
        "payment": None if recovery.record is None else _journal_json(recovery.record),
        "response": None,
    }
    response = recovery.response
    if response is not None:
        data = response.content[:max_body_bytes]
        truncated = len(response.content) > max_body_bytes
        content_type = response.headers.get("content-type")
        text, encoding = _body_json(
            data, content_type, response.charset_encoding, complete=not truncated
        )
        body["response"] = {
            "status": response.status_code,
            "contentType": content_type,
            "body": text,
            "bodyEncoding": encoding,
            "bytes": len(data),
            "truncated": truncated,
        }
    return body
