"""The tools as MCP describes them: names, descriptions, and the JSON schemas of
their arguments and results."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from .._state.channels import CHANNEL_STATUSES

__all__ = ["METHODS", "TOOLS", "ToolSpec"]

#: The HTTP methods `fetch` and `quote` take.
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
_METHODS = METHODS

_STRING = {"type": "string"}
_OPTIONAL_STRING = {"type": ["string", "null"]}
_AMOUNT = {"type": ["string", "number", "null"]}
_SESSION_STATUSES = list(CHANNEL_STATUSES)


def _object(
    properties: dict[str, Any], required: Sequence[str] = (), *, closed: bool = True
) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = list(required)
    if closed:
        schema["additionalProperties"] = False
    return schema


def _d(schema: Mapping[str, Any], description: str, **extra: Any) -> dict[str, Any]:
    return {**schema, "description": description, **extra}


_RECEIPT_SCHEMA = _d(
    {
        "type": ["object", "null"],
        "properties": {
            "amount": _d(_STRING, "The amount paid, a decimal string."),
            "currency": _d(_STRING, "EUR (EURO, EURQ) or USD (USDQ)."),
            "rail": _d(_STRING, "euro, evm-permit or bridge."),
            "scheme": _STRING,
            "network": _STRING,
            "asset": _STRING,
            "payTo": _d(_STRING, "Who was paid."),
            "resource": _STRING,
            "paidAt": _STRING,
            "payments": _d({"type": "integer"}, "Payments made for this request (normally 1)."),
            "paymentRequestCode": _OPTIONAL_STRING,
            "transactionCode": _OPTIONAL_STRING,
            "blockchainTxId": _OPTIONAL_STRING,
            "txHash": _OPTIONAL_STRING,
            "payer": _OPTIONAL_STRING,
        },
    },
    "What was paid for this response; null when nothing was paid.",
)


@dataclasses.dataclass(frozen=True)
class ToolSpec:
    name: str
    title: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    read_only: bool
    open_world: bool


TOOLS: dict[str, ToolSpec] = {
    spec.name: spec
    for spec in (
        ToolSpec(
            name="fetch",
            title="Fetch a URL, paying if asked",
            description=(
                "Make an HTTP request. When the server answers 402 Payment Required (x402), "
                "pay it (in euros, or in dollars where a budget allows) within the configured "
                "budgets and per-payment caps, and return the paid response with a receipt. "
                "Use quote first to see the price. On an "
                "error, moneyMoved says whether money moved; when it is true or null, do NOT "
                "call fetch again plainly: re-send with the proof (or "
                "resume_transaction_code) the error gives, which never pays twice."
            ),
            input_schema=_object(
                {
                    "url": _d(_STRING, "The http(s) URL.", pattern="^https?://"),
                    "method": _d(_STRING, "The HTTP method.", enum=list(_METHODS), default="GET"),
                    "headers": _d(
                        {"type": ["object", "null"], "additionalProperties": _STRING},
                        "Request headers, name to value.",
                    ),
                    "body": _d(_OPTIONAL_STRING, "The request body, sent as UTF-8 text."),
                    "max_amount": _d(
                        _AMOUNT,
                        "The most to pay for this request, a decimal string such as "
                        '"0.20", in any currency. It can only lower the server\'s caps, '
                        "never raise them.",
                    ),
                    "proof": _d(
                        _OPTIONAL_STRING,
                        "Recovery: an X-PAYMENT proof from an earlier error to re-send "
                        "instead of paying. Pays nothing; a 402 comes back as it is.",
                    ),
                    "resume_transaction_code": _d(
                        _OPTIONAL_STRING,
                        "Recovery: the transactionCode of an earlier bridge payment to prove "
                        "instead of paying again.",
                    ),
                },
                ["url"],
            ),
            output_schema=_object(
                {
                    "url": _d(_STRING, "The final URL, after redirects."),
                    "status": _d({"type": "integer"}, "The HTTP status."),
                    "contentType": _d(_OPTIONAL_STRING, "The Content-Type header."),
                    "body": _d(_STRING, "The body: text, or base64 (see bodyEncoding)."),
                    "bodyEncoding": {"type": "string", "enum": ["text", "base64"]},
                    "bytes": _d({"type": "integer"}, "Body bytes returned."),
                    "truncated": _d({"type": "boolean"}, "True when the body was cut."),
                    "receipt": _RECEIPT_SCHEMA,
                },
                ["url", "status", "body", "bodyEncoding", "truncated", "receipt"],
                closed=False,
            ),
            read_only=False,
            open_world=True,
        ),
        ToolSpec(
            name="quote",
            title="What does a URL cost?",
            description=(
                "Ask a URL what it costs without paying: the offers of its 402 answer (amount, "
                "currency, network), whether each would be paid under the current caps and "
                "budget, and why not. A status other than 402 means it is free. Nothing is "
                "paid."
            ),
            input_schema=_object(
                {
                    "url": _d(_STRING, "The http(s) URL.", pattern="^https?://"),
                    "method": _d(_STRING, "The HTTP method.", enum=list(_METHODS), default="GET"),
                },
                ["url"],
            ),
            output_schema=_object(
                {
                    "url": _STRING,
                    "status": _d({"type": "integer"}, "The status of the unpaid answer."),
                    "free": _d({"type": "boolean"}, "True when no payment is asked."),
                    "error": _d(_OPTIONAL_STRING, "Why the 402 could not be read, if so."),
                    "entries": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "index": {"type": "integer"},
                                "payable": {"type": "boolean"},
                                "first": _d({"type": "boolean"}, "The one fetch would pay."),
                                "reason": _d(_OPTIONAL_STRING, "Why not payable (a code)."),
                                "message": _d(_OPTIONAL_STRING, "Why not payable, in words."),
                                "scheme": _OPTIONAL_STRING,
                                "network": _OPTIONAL_STRING,
                                "rail": _d(_OPTIONAL_STRING, "How it would be paid."),
                                "asset": _OPTIONAL_STRING,
                                "amount": _d(_OPTIONAL_STRING, "A decimal string."),
                                "currency": _d(_OPTIONAL_STRING, "EUR or USD."),
                                "payTo": _d(_OPTIONAL_STRING, "Who would be paid."),
                            },
                            "required": ["index", "payable", "first"],
                        },
                    },
                },
                ["url", "status", "free", "entries"],
                closed=False,
            ),
            read_only=True,
            open_world=True,
        ),
        ToolSpec(
            name="discover",
            title="Find paid resources and their prices",
            description=(
                "List the paid resources an x402 facilitator's discovery catalogue (x402 "
                "Bazaar) knows, or search it with query: each resource's URL, description "
                "and price options, whether each would be paid under the current caps and "
                "budget, and why not. Nothing is paid. Listed prices are the facilitator's "
                "claims: fetch pays what the resource itself asks; use quote for its live "
                "price. Page on with offset (list) or cursor (search)."
            ),
            input_schema=_object(
                {
                    "facilitator": _d(
                        _STRING, "The facilitator's http(s) URL.", pattern="^https?://"
                    ),
                    "query": _d(_OPTIONAL_STRING, "Search words; none: the whole list."),
                    "type": _d(
                        {"type": ["string", "null"], "enum": ["http", "mcp", None]},
                        "Only HTTP resources or MCP tools.",
                    ),
                    "network": _d(_OPTIONAL_STRING, "Only offers on this network."),
                    "limit": _d(
                        {"type": "integer", "minimum": 1, "maximum": 100},
                        "At most this many resources.",
                        default=20,
                    ),
                    "offset": _d(
                        {"type": "integer", "minimum": 0}, "The list from this row.", default=0
                    ),
                    "cursor": _d(_OPTIONAL_STRING, "A search's nextCursor, for its next page."),
                },
                ["facilitator"],
            ),
            output_schema=_object(
                {
                    "facilitator": _STRING,
                    "query": _OPTIONAL_STRING,
                    "resources": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "resource": _d(_STRING, "The resource's URL."),
                                "type": _d(_STRING, "http or mcp."),
                                "method": _OPTIONAL_STRING,
                                "toolName": _OPTIONAL_STRING,
                                "description": _OPTIONAL_STRING,
                                "payable": _d({"type": "boolean"}, "Some option would be paid."),
                                "entries": _d(
                                    {"type": "array", "items": {"type": "object"}},
                                    "The price options, as quote gives them.",
                                ),
                            },
                            "required": ["resource", "type", "payable", "entries"],
                        },
                    },
                    "skipped": _d(
                        {"type": "array", "items": {"type": "object"}},
                        "Rows that could not be read, with why.",
                    ),
                    "nextOffset": {"type": ["integer", "null"]},
                    "nextCursor": _OPTIONAL_STRING,
                },
                ["facilitator", "resources", "skipped"],
                closed=False,
            ),
            read_only=True,
            open_world=True,
        ),
        ToolSpec(
            name="payments",
            title="Recent payments",
            description=(
                "The latest payments this server made or attempted, newest first: outcome "
                "(paid, failed, unknown, pending), amount, who was paid, the codes that "
                "identify the payment, and the proof while it can still be used to recover. "
                "With unfinished: the payments of the whole state (every process and "
                "machine that pays from it) whose money moved or may have and whose "
                "resource was not delivered, oldest first, each with the worker that owns "
                "it and whether that worker is alive (live: leave it alone); resume "
                "finishes the others."
            ),
            input_schema=_object(
                {
                    "limit": _d(
                        {"type": "integer", "minimum": 1, "maximum": 1000},
                        "At most this many entries.",
                        default=20,
                    ),
                    "unfinished": _d(
                        {"type": "boolean"},
                        "List the state's unfinished payments instead of this server's latest.",
                        default=False,
                    ),
                }
            ),
            output_schema=_object(
                {
                    "payments": {"type": "array", "items": {"type": "object"}},
                    "count": _d(
                        {"type": "integer"},
                        "Entries in the ledger in all; with unfinished, unfinished payments.",
                    ),
                },
                ["payments", "count"],
                closed=False,
            ),
            read_only=True,
            open_world=False,
        ),
        ToolSpec(
            name="resume",
            title="Finish unfinished payments, never paying again",
            description=(
                "Finish a payment a process left unfinished (it died, or the request failed "
                "after paying): by its id (or the first 6 or more characters of it), or all "
                "of them with all set to true. It re-sends the proof already paid or resumes "
                "the payment already started, and returns the resource when the merchant "
                "serves it; it never pays again. A payment a live worker is still making is "
                "left alone and reported in_progress. Each result says whether the payment's "
                "money moved (moneyMoved: true, false, or null when not known yet)."
            ),
            input_schema=_object(
                {
                    "id": _d(
                        {"type": ["string", "null"], "minLength": 6, "maxLength": 64},
                        "The payment's id, as payments lists it, or its first characters.",
                    ),
                    "all": _d(
                        {"type": "boolean"},
                        "Finish every unfinished payment no live worker is making.",
                        default=False,
                    ),
                    "headers": _d(
                        {"type": ["object", "null"], "additionalProperties": _STRING},
                        "Headers to send with the re-sent request (the journal keeps no "
                        "credentials).",
                    ),
                }
            ),
            output_schema=_object(
                {
                    "recoveries": {"type": "array", "items": {"type": "object"}},
                    "skipped": _d(
                        {"type": "integer"}, "Payments left alone: a live worker is making them."
                    ),
                    "paidNow": _d({"type": "boolean"}, "Always false: resume never pays."),
                },
                ["recoveries", "skipped", "paidNow"],
                closed=False,
            ),
            read_only=False,
            open_world=True,
        ),
        ToolSpec(
            name="budget",
            title="What is left to spend",
            description=(
                "Each budget (limit, window, spent, remaining), the per-payment caps, and for "
                "every currency this server can pay whether a budget covers it (offers in a "
                "currency no budget covers are refused)."
            ),
            input_schema=_object({}),
            output_schema=_object(
                {
                    "budgets": {
                        "type": "array",
                        "items": _object(
                            {
                                "name": _STRING,
                                "currency": _STRING,
                                "limit": _STRING,
                                "window": _d(_OPTIONAL_STRING, "e.g. 24h; null: a total."),
                                "windowSeconds": {"type": ["number", "null"]},
                                "spent": _STRING,
                                "remaining": _STRING,
                            },
                            closed=False,
                        ),
                    },
                    "maxAmountPerPayment": {"type": "object", "additionalProperties": _STRING},
                    "currencies": {
                        "type": "array",
                        "items": _object(
                            {
                                "currency": _STRING,
                                "maxAmountPerPayment": _d(
                                    _OPTIONAL_STRING, "null: no cap, nothing in it is paid."
                                ),
                                "budgeted": _d({"type": "boolean"}, "A budget covers it."),
                                "remaining": _d(
                                    _OPTIONAL_STRING,
                                    "The least its budgets have left; null: no budget.",
                                ),
                                "payable": _d(
                                    {"type": "boolean"}, "The limits let payments in it through."
                                ),
                                "note": _d(_OPTIONAL_STRING, "Why not payable, and the fix."),
                            },
                            closed=False,
                        ),
                    },
                },
                ["budgets", "maxAmountPerPayment", "currencies"],
                closed=False,
            ),
            read_only=True,
            open_world=False,
        ),
        ToolSpec(
            name="sessions",
            title="Sessions and what they hold unspent",
            description=(
                "The sessions (batch-settlement channels) of the state, oldest first: one "
                "deposit into an escrow paid out by a voucher per request. Each gives its "
                "id, the resource it pays, network and asset, and in the asset's units what "
                "was deposited, spent (acknowledged by the merchant), signed, refunded, and "
                "unspent (the most refund_session can return), with its status."
            ),
            input_schema=_object(
                {
                    "status": _d(
                        {"type": ["string", "null"], "enum": [*_SESSION_STATUSES, None]},
                        "Only the sessions with this status.",
                    ),
                }
            ),
            output_schema=_object(
                {
                    "sessions": {
                        "type": "array",
                        "items": _object(
                            {
                                "id": _d(_STRING, "The session's id (0x and 64 hex digits)."),
                                "resource": _d(_STRING, "The resource the session pays."),
                                "network": _STRING,
                                "asset": _STRING,
                                "symbol": _OPTIONAL_STRING,
                                "currency": _STRING,
                                "deposited": _d(_STRING, "A decimal string, as all amounts."),
                                "spent": _d(_STRING, "What the merchant acknowledged charging."),
                                "signed": _d(_STRING, "The total the vouchers signed."),
                                "refunded": _STRING,
                                "unspent": _d(_STRING, "The most a refund can return."),
                                "status": {"type": "string", "enum": _SESSION_STATUSES},
                            },
                            closed=False,
                        ),
                    },
                    "count": _d({"type": "integer"}, "Sessions listed."),
                },
                ["sessions", "count"],
                closed=False,
            ),
            read_only=True,
            open_world=False,
        ),
        ToolSpec(
            name="refund_session",
            title="Refund a session's unspent deposit to the payer",
            description=(
                "Ask a session's merchant to refund what its vouchers did not spend: all of "
                "it, or amount (at most the session's unspent, as sessions lists it). The "
                "refund goes back to the payer only; it signs nothing new to the merchant "
                "and pays nothing. What was refunded is read from the chain. On an error, "
                "moneyMoved says whether money moved (false: nothing was refunded)."
            ),
            input_schema=_object(
                {
                    "id": _d(
                        {"type": "string", "minLength": 6, "maxLength": 67},
                        "The session's id, as sessions lists it, or its first characters.",
                    ),
                    "amount": _d(
                        _AMOUNT,
                        'Refund this much only, a decimal string such as "0.05" in the '
                        "session's asset; at most its unspent. None: all of it.",
                    ),
                },
                ["id"],
            ),
            output_schema=_object(
                {
                    "session": _d(_STRING, "The session's id."),
                    "refunded": _d(_STRING, "What left the escrow for the payer."),
                    "charged": _d(_STRING, "What the merchant kept: its claims on the session."),
                    "currency": _STRING,
                    "closed": _d({"type": "boolean"}, "Nothing is left in the session."),
                    "txHash": _OPTIONAL_STRING,
                    "moneyMoved": _d({"type": "boolean"}, "True: the refund is on chain."),
                },
                ["session", "refunded", "charged", "currency", "closed", "moneyMoved"],
                closed=False,
            ),
            read_only=False,
            open_world=True,
        ),
    )
}
