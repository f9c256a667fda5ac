"""`x402-eur mcp`: an MCP server that lets any agent pay for HTTP, within a budget.

Four tools over one paying `httpx.AsyncClient` that lives as long as the server:

- `fetch(url, method, headers, body, max_amount, proof, resume_transaction_code)`: the
  resource, paid when it answers 402, with its receipt; the body is bounded
  (`--max-body-bytes`, 100 kB) and `truncated` says when it was cut;
- `quote(url, method)`: what the resource costs and whether each offer would be paid; pays
  nothing;
- `payments(limit)`: the latest ledger entries, newest first;
- `budget()`: what each budget has left, and for every currency the server can pay its
  per-payment cap and whether a budget covers it.

Every result is `structuredContent` plus a text block holding the same JSON. Every failure
is a tool error (`isError`) whose `{"error": {...}}` says whether money moved
(`moneyMoved`: false, true or null for "may have"), with what recovery needs.

Configuration comes from the environment (`PaymentOptions.from_env()`) plus a budget
(`--budget 5.00/24h` or `X402_EUR_BUDGET`): without one the server refuses to start,
unless `--no-budget` allows it. A budget names its currency: offers in a currency that no
budget covers are refused (`--budget 5.00/24h --budget 2.00USD/24h` pays both).
Transport: stdio by default; `--http HOST:PORT` serves streamable HTTP, on a loopback
address only unless `--allow-remote`. Every HTTP request must name the listener in `Host`
(421 otherwise) and, when it carries an `Origin`, come from the listener itself or an
`--allow-origin` (403 otherwise), so a web page cannot drive the tools (DNS rebinding).
With `X402_EUR_MCP_TOKEN` set, every HTTP request must carry `Authorization: Bearer <token>`
(401 otherwise); only a listener on 127.0.0.1 may go without one, and then whoever reaches
it spends the budget.

Built on the `mcp` SDK's low-level `Server`, not `MCPServer`: the latter calls
`logging.basicConfig` on the root logger, and on stdio the process's stdout *is* the
protocol channel. Here logs go to stderr through one handler that blanks the API key and
the EVM key, and the SDK's stdio transport points fd 1 at stderr while it serves, so stray
output cannot corrupt the protocol. The `mcp` package is imported by `run` only.

Proofs (`X-PAYMENT` values) are not the user's secret (they cannot move more money) but a
bearer token for one paid resource: they appear only where recovery needs them, in
money-moved errors and in `payments` entries not yet delivered, and never in logs.

Destinations: `fetch` and `quote` (and the EVM rail's facilitator check) reach public
addresses only, checked after DNS resolution and on every redirect hop
(`_netguard.DestinationGuard`); `--allow-host HOST[:PORT]` and `X402_EUR_MCP_ALLOW_HOSTS`
admit more. A refusal is `DestinationRefused`: nothing was sent, no money moved.
"""

from __future__ import annotations

import argparse
import base64
import codecs
import contextlib
import dataclasses
import json
import logging
import sys
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from ._amounts import AmountError, parse_amount
from ._budget_spec import CURRENCIES, parse_budget, parse_budgets, window_text
from ._redact import redact_secrets, redact_urls, safe_url, secrets_of

if TYPE_CHECKING:
    import httpx
    from mcp.server.lowlevel import Server

    from ._budget import Budget
    from ._ledger import LedgerEntry
    from ._options import PaymentOptions
    from ._types import PaymentReceipt

__all__ = [
    "ALLOW_HOSTS_ENV",
    "ALLOW_ORIGIN_ENV",
    "BUDGET_ENV",
    "DEFAULT_MAX_BODY_BYTES",
    "MIN_TOKEN_LENGTH",
    "TOKEN_ENV",
    "TOOLS",
    "PaymentTools",
    "ToolError",
    "ToolSpec",
    "build_server",
    "configure_parser",
    "parse_budget",
    "parse_budgets",
    "require_bearer",
    "require_own_host",
    "run",
]

logger = logging.getLogger("x402_client.mcp")

#: The environment variable read when no `--budget` is given (comma-separated budgets).
BUDGET_ENV = "X402_EUR_BUDGET"
#: The largest response body a `fetch` result holds, in bytes.
DEFAULT_MAX_BODY_BYTES = 100_000
#: The environment variable holding the bearer token that `--http` requires when set. Read
#: from the environment only: a command line is visible to every local user (`ps`).
TOKEN_ENV = "X402_EUR_MCP_TOKEN"  # noqa: S105 (the variable's name, not a token)
#: The shortest token accepted: 16 characters (e.g. `secrets.token_urlsafe(32)` gives 43).
MIN_TOKEN_LENGTH = 16
#: The environment variable read when no `--allow-origin` is given (comma-separated origins).
ALLOW_ORIGIN_ENV = "X402_EUR_MCP_ALLOW_ORIGINS"
#: Hosts `fetch` and `quote` may reach although they are not public (comma-separated
#: `HOST[:PORT]`), admitted along with every `--allow-host`.
ALLOW_HOSTS_ENV = "X402_EUR_MCP_ALLOW_HOSTS"

_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
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


# --- the tools: plain async methods over one paying client -------------------------------------


class ToolError(Exception):
    """A tool refusal that is not an `X402Error` (bad arguments, unknown tool)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


_STRING = {"type": "string"}
_OPTIONAL_STRING = {"type": ["string", "null"]}
_AMOUNT = {"type": ["string", "number", "null"]}


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
            name="payments",
            title="Recent payments",
            description=(
                "The latest payments this server made or attempted, newest first: outcome "
                "(paid, failed, unknown, pending), amount, who was paid, the codes that "
                "identify the payment, and the proof while it can still be used to recover."
            ),
            input_schema=_object(
                {
                    "limit": _d(
                        {"type": "integer", "minimum": 1, "maximum": 1000},
                        "At most this many entries.",
                        default=20,
                    )
                }
            ),
            output_schema=_object(
                {
                    "payments": {"type": "array", "items": {"type": "object"}},
                    "count": _d({"type": "integer"}, "Entries in the ledger in all."),
                },
                ["payments", "count"],
                closed=False,
            ),
            read_only=True,
            open_world=False,
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
    )
}


def _amount_argument(value: Any) -> Decimal:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        # A JSON number: read through its shortest decimal form (0.1 -> "0.1").
        value = format(Decimal(repr(value)), "f")
    try:
        return parse_amount(value, allow_zero=True)
    except AmountError as exc:
        raise ToolError("InvalidArguments", f"max_amount: {exc}") from None


def _receipt_json(receipt: PaymentReceipt) -> dict[str, Any]:
    return receipt.to_json()


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


def _outcome_text(money_moved: bool | None) -> str:
    if money_moved is False:
        return "No money moved."
    if money_moved is True:
        return "Money moved: it was paid and the resource was not delivered."
    return "Money may have moved: the outcome of the payment is unknown."


def _error_json(exc: BaseException) -> dict[str, Any]:
    """The `error` object of a tool error: what happened, whether money moved, how to recover."""
    import httpx

    from ._exceptions import (
        BridgeResumeRefused,
        BridgeTransferFailed,
        PaymentAPIError,
        PaymentOutcomeUnknown,
        PaymentVerificationFailed,
        X402Error,
    )

    if isinstance(exc, ToolError):
        return {
            "type": exc.kind,
            "message": exc.message,
            "moneyMoved": False,
            "summary": f"No money moved: {exc.message}",
        }
    if isinstance(exc, X402Error):
        moved = exc.money_moved
        body: dict[str, Any] = {
            "type": type(exc).__name__,
            "message": str(exc),
            "moneyMoved": moved,
            "summary": f"{_outcome_text(moved)} {type(exc).__name__}: {exc}",
        }
        intent = exc.intent
        if intent is not None:
            body["intent"] = {
                "amount": str(intent.amount),
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
                    "message": s.message,
                }
                for s in exc.skipped
            ]
        if isinstance(exc, PaymentAPIError):
            body["providerCode"] = exc.code
        if isinstance(exc, (BridgeResumeRefused, BridgeTransferFailed)):
            body["transactionCode"] = exc.transaction_code
        if isinstance(exc, (PaymentVerificationFailed, PaymentOutcomeUnknown)):
            body["receipts"] = [_receipt_json(r) for r in exc.receipts]
            body["proof"] = exc.proof
        if isinstance(exc, PaymentVerificationFailed):
            body["reason"] = exc.reason
            body["recovery"] = (
                "Do not pay again. "
                + (
                    "Re-sending the proof later is safe: call fetch with the same request and "
                    "proof set to the proof above. "
                    if exc.proof
                    else ""
                )
                + "The receipts identify the payment for the merchant or the provider."
            )
        elif isinstance(exc, PaymentOutcomeUnknown):
            body["paymentRequestCode"] = exc.payment_request_code
            body["transactionCode"] = exc.transaction_code
            steps = []
            if exc.proof:
                steps.append(
                    "call fetch with the same request and proof set to the proof above (pays "
                    "nothing: the merchant serves the resource or says the proof was used)"
                )
            if exc.transaction_code:
                steps.append(
                    "call fetch with the same request and resume_transaction_code set to the "
                    "transactionCode above (proves the earlier payment, pays nothing)"
                )
            body["recovery"] = (
                "Do not pay again. "
                + ("Recover: " + "; or ".join(steps) + ". " if steps else "")
                + "The payments tool lists it with outcome unknown."
            )
        return body
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
            "amount": str(e.intent.amount),
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


class PaymentTools:
    """The four tools over one paying client. `call(name, arguments)` runs one and returns
    `(body, is_error)`; it raises nothing but cancellation.

    ```python
    async with with_eur_payment(httpx.AsyncClient(follow_redirects=True), options) as client:
        tools = PaymentTools(client, options)
        body, is_error = await tools.call("fetch", {"url": "https://merchant.example/paid"})
    ```
    """

    def __init__(
        self,
        client: httpx.AsyncClient,
        options: PaymentOptions,
        *,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ) -> None:
        self.client = client
        self.options = options
        self.max_body_bytes = max_body_bytes
        self._secrets = secrets_of(self.options)
        self._handlers: dict[str, Callable[..., Awaitable[dict[str, Any]]]] = {
            "fetch": self.fetch,
            "quote": self.quote,
            "payments": self.payments,
            "budget": self.budget,
        }

    def redact(self, text: str) -> str:
        """`text` with the API key and the EVM key blanked out."""
        return redact_secrets(text, self._secrets)

    async def call(
        self, name: str, arguments: Mapping[str, Any] | None
    ) -> tuple[dict[str, Any], bool]:
        import importlib

        # Untyped, and always there: the `mcp` SDK depends on it.
        jsonschema: Any = importlib.import_module("jsonschema")
        arguments = dict(arguments or {})
        spec = TOOLS.get(name)
        try:
            if spec is None:
                raise ToolError("UnknownTool", f"no tool {name[:64]!r}; tools: {', '.join(TOOLS)}")
            if isinstance(arguments.get("method"), str):
                arguments["method"] = arguments["method"].upper()
            problem = jsonschema.exceptions.best_match(
                jsonschema.Draft202012Validator(spec.input_schema).iter_errors(arguments)
            )
            if problem is not None:
                where = ".".join(str(p) for p in problem.absolute_path) or "arguments"
                raise ToolError("InvalidArguments", f"{where}: {problem.message}")
            arguments = {k: v for k, v in arguments.items() if v is not None}
            body, is_error = await self._handlers[name](**arguments), False
        except Exception as exc:
            if not _expected(exc):
                logger.error(
                    "%s failed unexpectedly: %s", name[:64], type(exc).__name__, exc_info=exc
                )
            error = _error_json(exc)
            _add_payments_made(error, getattr(exc, "x402_payments", ()))
            body, is_error = {"error": error}, True
        # A body may echo an argument or a merchant's answer: neither may carry a key out.
        text = self.redact(json.dumps(body, default=str))
        return json.loads(text), is_error

    async def fetch(
        self,
        url: str,
        method: str = "GET",
        headers: Mapping[str, str] | None = None,
        body: str | None = None,
        max_amount: Any = None,
        proof: str | None = None,
        resume_transaction_code: str | None = None,
    ) -> dict[str, Any]:
        import httpx

        from ._request import EXTENSION, GUARD, RECEIPT_EXTENSION
        from ._types import PaymentReceipt

        settings: dict[str, Any] = {}
        if max_amount is not None:
            # One amount lowers every currency's cap (never raises one).
            settings["max_amount_per_payment"] = _amount_argument(max_amount)
        if proof:
            settings["proof"] = proof
        if resume_transaction_code:
            settings["resume_transaction_code"] = resume_transaction_code
        where = f"{method} {safe_url(url)}"
        try:
            request = self.client.build_request(
                method,
                url,
                headers=dict(headers or {}),
                content=body.encode() if body is not None else None,
                extensions={EXTENSION: settings} if settings else {},
            )
        except (ValueError, TypeError, httpx.InvalidURL) as exc:
            # A header that is not ASCII, a URL httpx cannot read: nothing was sent.
            raise ToolError("InvalidArguments", f"the request cannot be made: {exc}") from None
        try:
            response = await self.client.send(request, stream=True)
            try:
                data, truncated = await _read_prefix(response, self.max_body_bytes)
            finally:
                await response.aclose()
            receipt = response.extensions.get(RECEIPT_EXTENSION)
            content_type = response.headers.get("content-type")
            text, encoding = _body_json(
                data, content_type, response.charset_encoding, complete=not truncated
            )
        except Exception as exc:
            _log_failure("fetch", where, exc)
            # What this request's payment attempt recorded, whatever the error says.
            guard = request.extensions.get(GUARD)
            record = getattr(guard, "record", None)
            if record is not None:
                with contextlib.suppress(AttributeError):
                    exc.x402_payments = [record.entry]  # type: ignore[attr-defined]
            raise
        paid = receipt if isinstance(receipt, PaymentReceipt) else None
        if paid is not None:
            logger.info(
                "fetch %s -> %d, paid %s %s (%s, %s)",
                where,
                response.status_code,
                paid.amount,
                paid.currency,
                paid.rail,
                paid.payment_request_code or paid.transaction_code or paid.network,
            )
        else:
            logger.info("fetch %s -> %d, nothing paid", where, response.status_code)
        return {
            "url": safe_url(str(response.url)),
            "status": response.status_code,
            "contentType": content_type,
            "body": text,
            "bodyEncoding": encoding,
            "bytes": len(data),
            "truncated": truncated,
            "receipt": _receipt_json(paid) if paid is not None else None,
        }

    async def quote(self, url: str, method: str = "GET") -> dict[str, Any]:
        import httpx

        from ._quote import quote_payment

        where = f"{method} {safe_url(url)}"
        try:
            quote = await quote_payment(self.client, url, method)
        except httpx.InvalidURL as exc:
            raise ToolError("InvalidArguments", f"the request cannot be made: {exc}") from None
        except Exception as exc:
            _log_failure("quote", where, exc)
            raise
        logger.info("quote %s -> %d, %d payable", where, quote.status_code, len(quote.payable))
        return quote.to_json()

    async def payments(self, limit: int = 20) -> dict[str, Any]:
        from ._transport import payment_ledger

        entries = payment_ledger(self.options).entries()
        listed = []
        for entry in reversed(entries[-limit:]):
            item = entry.to_json()
            item.pop("steps", None)
            item["proof"] = _useful_proof(entry)
            listed.append(item)
        return {"payments": listed, "count": len(entries)}

    async def budget(self) -> dict[str, Any]:
        from ._amounts import format_amount
        from ._quote import budget_status

        report = await budget_status(self.options)
        budgets = []
        for status in report:
            budget = status.budget
            budgets.append(
                {
                    "name": budget.name,
                    "currency": budget.currency,
                    "limit": format_amount(Decimal(budget.limit)),
                    "window": window_text(budget.window_seconds),
                    "windowSeconds": budget.window_seconds,
                    "spent": format_amount(status.spent),
                    "remaining": format_amount(status.remaining),
                }
            )
        body: dict[str, Any] = {
            "budgets": budgets,
            "maxAmountPerPayment": {
                currency: format_amount(cap)
                for currency, cap in self.options.max_amount_per_payment.items()
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
                    "note": each.note,
                }
                for each in report.currencies
            ],
        }
        if not budgets:
            body["note"] = "no budget: only the per-payment caps limit spending"
        return body


def _expected(exc: BaseException) -> bool:
    import httpx

    return isinstance(exc, (ToolError, httpx.HTTPError))


def _log_failure(tool: str, where: str, exc: BaseException) -> None:
    from ._exceptions import X402Error

    if isinstance(exc, X402Error):
        moved = {False: "no money moved", True: "money moved", None: "money may have moved"}
        level = logging.INFO if exc.money_moved is False else logging.WARNING
        logger.log(
            level, "%s %s -> %s (%s)", tool, where, type(exc).__name__, moved[exc.money_moved]
        )
    elif _expected(exc):
        logger.info("%s %s -> %s (no money moved)", tool, where, type(exc).__name__)


async def _read_prefix(response: httpx.Response, limit: int) -> tuple[bytes, bool]:
    """At most `limit` bytes of the body (decoded), and whether there was more."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        if size + len(chunk) > limit:
            chunks.append(chunk[: limit - size])
            return b"".join(chunks), True
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks), False


# --- MCP ---------------------------------------------------------------------------------------


def _instructions(options: PaymentOptions) -> str:
    from ._amounts import format_amount

    limits = [budget.name + ("" if budget.window else " in total") for budget in options.budgets]
    caps = ", ".join(
        f"{format_amount(cap)} {currency}"
        for currency, cap in options.max_amount_per_payment.items()
    )
    refused = _uncovered(options)
    return (
        "Fetches HTTP resources and pays x402 (402 Payment Required) answers from the "
        f"user's account, within the budget ({'; '.join(limits) or 'none set'}) and at "
        f"most {caps or 'nothing'} per payment."
        + (
            f" Offers in {' or '.join(refused)} are refused: no budget covers them."
            if refused
            else ""
        )
        + " Use quote to see a price without paying, budget to see what is left. Every error "
        "says whether money moved (moneyMoved). When money moved or may have, never repeat "
        "the fetch plainly: re-send with the proof the error gives."
    )


def _uncovered(options: PaymentOptions) -> list[str]:
    """The currencies the options could pay that budgets leave out (so none is paid)."""
    if not options.budgets:
        return []
    budgeted = {budget.currency for budget in options.budgets}
    return [currency for currency in options.currencies if currency not in budgeted]


def build_server(tools: PaymentTools) -> Server[Any]:
    """The low-level MCP `Server` serving `tools` (imports `mcp`)."""
    from mcp.server.lowlevel import Server
    from mcp_types import CallToolResult, ListToolsResult, TextContent, Tool, ToolAnnotations

    from .__version__ import __version__

    if TYPE_CHECKING:
        from mcp.server.context import ServerRequestContext
        from mcp_types import CallToolRequestParams, PaginatedRequestParams

    listed = [
        Tool(
            name=spec.name,
            title=spec.title,
            description=spec.description,
            input_schema=spec.input_schema,
            output_schema=spec.output_schema,
            annotations=ToolAnnotations(
                title=spec.title,
                read_only_hint=spec.read_only,
                destructive_hint=False,
                idempotent_hint=spec.read_only,
                open_world_hint=spec.open_world,
            ),
        )
        for spec in TOOLS.values()
    ]

    async def list_tools(
        ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        return ListToolsResult(tools=listed)

    async def call_tool(
        ctx: ServerRequestContext[Any], params: CallToolRequestParams
    ) -> CallToolResult:
        body, is_error = await tools.call(params.name, params.arguments)
        return CallToolResult(
            content=[TextContent(type="text", text=json.dumps(body))],
            structured_content=body,
            is_error=is_error,
        )

    def input_schema(name: str) -> Mapping[str, Any] | None:
        spec = TOOLS.get(name)
        return None if spec is None else spec.input_schema

    return Server(
        "x402-eur",
        version=__version__,
        title="x402-eur: pay for HTTP within a budget",
        instructions=_instructions(tools.options),
        get_tool_input_schema=input_schema,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


# --- the command -------------------------------------------------------------------------------


def _budget_argument(value: str) -> str:
    try:
        parse_budgets([value])
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def _amount_option(value: str) -> str:
    try:
        parse_amount(value, allow_zero=True)
    except AmountError as exc:
        raise argparse.ArgumentTypeError(f"{value!r} is not an amount: {exc}") from None
    return value


def _host_port(value: str) -> tuple[str, int]:
    host, colon, port = value.rpartition(":")
    host = host.strip("[]")
    if not colon or not host or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"{value!r} is not HOST:PORT (e.g. 127.0.0.1:8402)")
    return host, int(port)


def _origin(value: str) -> str:
    """`value` as a browser writes it in `Origin`: `scheme://host[:port]`, in lower case,
    without the scheme's default port. Not `null` or `*`: they would admit any page."""
    from urllib.parse import urlsplit

    mistake = argparse.ArgumentTypeError(
        f"{value!r} is not an origin: give scheme://host[:port], e.g. http://localhost:6274"
    )
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:
        raise mistake from None
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or "@" in parts.netloc
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
        or "?" in value
        or "#" in value
    ):
        raise mistake
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    default = 80 if parts.scheme == "http" else 443
    return f"{parts.scheme}://{host}" + (f":{port}" if port not in (None, default) else "")


def _allow_host_argument(value: str) -> Any:
    from ._netguard import parse_allowed_host

    try:
        return parse_allowed_host(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _destination_guard(allowed: Sequence[Any]) -> Any:
    """The guard of `fetch` and `quote`: public addresses, plus the `--allow-host` ones
    and those of `X402_EUR_MCP_ALLOW_HOSTS`. `ValueError` for a bad variable."""
    import os

    from ._netguard import DestinationGuard, parse_allowed_hosts

    return DestinationGuard([*allowed, *parse_allowed_hosts([os.environ.get(ALLOW_HOSTS_ENV, "")])])


def _positive_int(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a positive whole number")
    return int(value)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Add the `x402-eur mcp` arguments to `parser` (the CLI's subcommand)."""
    parser.description = (
        "Serve MCP tools (fetch, quote, payments, budget) that pay x402 resources in euros "
        "from the account in the environment (X402_EUR_API_KEY, X402_EUR_ACCOUNT, "
        "X402_EUR_API_URL), within a budget. Logs go to stderr."
    )
    parser.epilog = (
        f"Budgets: AMOUNT[CURRENCY][/WINDOW], e.g. 5.00/24h, 2.00USD/24h, 0.25 (a total); "
        f"window units s, m, h, d. Without --budget, {BUDGET_ENV} is read (comma-separated). "
        "Offers in a currency no budget covers are refused."
    )
    parser.add_argument(
        "--budget",
        action="append",
        type=_budget_argument,
        metavar="AMOUNT[CURRENCY][/WINDOW]",
        help="spend at most AMOUNT (per WINDOW); may be repeated; all are enforced; offers in "
        "a currency no budget covers are refused (add e.g. 2.00USD/24h for dollar offers)",
    )
    parser.add_argument(
        "--budget-currency",
        type=str.upper,
        choices=CURRENCIES,
        default="EUR",
        help="currency of budgets that name none (default EUR)",
    )
    parser.add_argument(
        "--no-budget",
        action="store_true",
        help="allow starting without any budget (only the per-payment cap limits spending)",
    )
    parser.add_argument(
        "--max-amount",
        type=_amount_option,
        help="cap per payment, in every currency (default 1.00 EUR and 1.00 USD)",
    )
    state = parser.add_mutually_exclusive_group()
    state.add_argument(
        "--state",
        metavar="PATH",
        help="the state file (budgets and payment journal; default: $X402_EUR_STATE, else "
        "the user's data directory), so budgets hold across restarts",
    )
    state.add_argument(
        "--no-state", action="store_true", help="keep budgets and payments in memory only"
    )
    parser.add_argument(
        "--http",
        type=_host_port,
        metavar="HOST:PORT",
        help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio",
    )
    parser.add_argument(
        "--allow-remote",
        action="store_true",
        help=f"allow --http on a non-loopback address ({TOKEN_ENV} required: whoever "
        "reaches the endpoint spends your budget)",
    )
    parser.add_argument(
        "--allow-origin",
        action="append",
        type=_origin,
        metavar="ORIGIN",
        help="with --http: also admit browser requests from the web page origin ORIGIN "
        "(scheme://host[:port]); may be repeated; without it, "
        f"{ALLOW_ORIGIN_ENV} is read (comma-separated)",
    )
    parser.add_argument(
        "--allow-host",
        action="append",
        type=_allow_host_argument,
        default=[],
        metavar="HOST[:PORT]",
        help="let fetch and quote reach HOST (a name or an IP address; with :PORT, that port "
        "only) although it is not a public address (loopback, private network, ...); may "
        f"be repeated; {ALLOW_HOSTS_ENV} (comma-separated) adds more",
    )
    parser.add_argument(
        "--max-body-bytes",
        type=_positive_int,
        default=DEFAULT_MAX_BODY_BYTES,
        help=f"largest response body a fetch returns (default {DEFAULT_MAX_BODY_BYTES})",
    )
    parser.add_argument(
        "--log-level",
        type=str.lower,
        choices=("debug", "info", "warning", "error"),
        default="info",
        help="log level on stderr (default info)",
    )


class _RedactingFormatter(logging.Formatter):
    def __init__(self, secrets: Sequence[str]) -> None:
        super().__init__("x402-eur mcp: %(levelname)s %(name)s: %(message)s")
        self.secrets = list(secrets)

    def format(self, record: logging.LogRecord) -> str:
        return redact_secrets(redact_urls(super().format(record)), self.secrets)


@contextlib.contextmanager
def _logging_to_stderr(level: str, secrets: Sequence[str]) -> Iterator[None]:
    """Every log record of the process to stderr, secrets blanked and the credentials of
    URLs redacted; ours at `level`, the libraries' (httpx, mcp, uvicorn) at WARNING unless
    `level` is debug."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_RedactingFormatter(secrets))
    root = logging.getLogger()
    ours = logging.getLogger("x402_client")
    saved = root.level, ours.level
    numeric = getattr(logging, level.upper())
    root.addHandler(handler)
    root.setLevel(numeric if numeric == logging.DEBUG else logging.WARNING)
    ours.setLevel(numeric)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(saved[0])
        ours.setLevel(saved[1])


def _say(message: str) -> None:
    sys.stderr.write(f"x402-eur mcp: {message}\n")
    sys.stderr.flush()


async def run(args: argparse.Namespace) -> int:
    """Run the server until its client leaves (stdio) or it is stopped (HTTP). Exit code."""
    import importlib.util
    import os

    from ._options import _is_loopback

    if args.budget and args.no_budget:
        _say("give --budget or --no-budget, not both")
        return 2
    texts = args.budget or ([os.environ[BUDGET_ENV]] if os.environ.get(BUDGET_ENV) else [])
    try:
        budgets = parse_budgets(texts, args.budget_currency)
    except ValueError as exc:
        _say(f"{BUDGET_ENV}: {exc}")
        return 2
    if not budgets and not args.no_budget:
        _say(
            f"no budget: give --budget AMOUNT[/WINDOW] (e.g. 5.00/24h) or set {BUDGET_ENV}; "
            "--no-budget starts without one"
        )
        return 2
    token = os.environ.get(TOKEN_ENV) or None
    if token is not None and (problem := _token_problem(token)):
        _say(
            f"{TOKEN_ENV} {problem} (e.g. python -c 'import secrets; "
            "print(secrets.token_urlsafe(32))')"
        )
        return 2
    if args.http is not None and not _is_loopback(args.http[0]) and not args.allow_remote:
        _say(
            f"refusing to serve on {args.http[0]}: not a loopback address, and whoever reaches "
            f"the endpoint spends your budget; add --allow-remote, with {TOKEN_ENV} set"
        )
        return 2
    if args.http is not None and token is None and args.http[0] != "127.0.0.1":
        _say(
            f"refusing to serve on {args.http[0]} without a token: only 127.0.0.1 may go "
            f"without one; set {TOKEN_ENV} (e.g. python -c 'import secrets; "
            "print(secrets.token_urlsafe(32))')"
        )
        return 2
    if not args.allow_origin and os.environ.get(ALLOW_ORIGIN_ENV):
        try:
            args.allow_origin = [
                _origin(o) for o in os.environ[ALLOW_ORIGIN_ENV].split(",") if o.strip()
            ]
        except argparse.ArgumentTypeError as exc:
            _say(f"{ALLOW_ORIGIN_ENV}: {exc}")
            return 2
    if importlib.util.find_spec("mcp") is None:
        _say("needs the `mcp` package: pip install 'x402-eur[mcp]'")
        return 1

    from ._options import PaymentOptions

    overrides: dict[str, Any] = {"budgets": budgets}
    try:
        overrides["destination_guard"] = _destination_guard(args.allow_host)
    except ValueError as exc:
        _say(f"{ALLOW_HOSTS_ENV}: {exc}")
        return 2
    if args.max_amount is not None:
        overrides["max_amount_per_payment"] = args.max_amount
    if not args.no_state:
        try:
            overrides["state_path"] = _state_path(args.state)
        except OSError as exc:
            _say(f"cannot use the state file: {exc.strerror or exc}; or give --no-state")
            return 2
    options = PaymentOptions.from_env(**overrides)
    try:
        return await _serve(args, options, budgets, token)
    finally:
        from ._state import state_of

        if options.state_path is not None:
            state_of(options).close()


def _token_problem(token: str) -> str | None:
    """Why `token` cannot guard the HTTP endpoint, or None. A header carries it as
    `Bearer <token>`: printable ASCII without spaces (as `secrets.token_urlsafe` gives)."""
    if len(token) < MIN_TOKEN_LENGTH:
        return f"is too short to guard a budget: give at least {MIN_TOKEN_LENGTH} characters"
    if not (token.isascii() and token.isprintable()) or " " in token:
        return "must be printable ASCII without spaces, as an HTTP header carries it"
    return None


def _state_path(given: str | None) -> Any:
    """The state file: `--state`, else the default (XDG); its directory made."""
    from pathlib import Path

    from ._sqlite import default_state_path

    path = Path(given).expanduser() if given else default_state_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


async def _serve(
    args: argparse.Namespace, options: Any, budgets: Sequence[Budget], token: str | None
) -> int:
    import httpx

    from ._transport import with_eur_payment

    secrets = secrets_of(options) + ([token] if token else [])
    with _logging_to_stderr(args.log_level, secrets):
        spending = "; ".join(b.name for b in budgets) or "no budget"
        refused = _uncovered(options)
        if refused:
            spending += f" ({', '.join(refused)} offers refused: no budget covers them)"
        # Below httpx's redirect handling: every hop's destination is checked.
        guard = options.destination_guard
        client = httpx.AsyncClient(
            follow_redirects=True,
            timeout=httpx.Timeout(60.0),
            transport=None if guard is None else guard.transport(),
        )
        if guard is not None:
            admitted = ", ".join(str(a) for a in guard.allow)
            logger.info(
                "fetch and quote reach public addresses%s",
                f" and {admitted}" if admitted else " only",
            )
        async with with_eur_payment(client, options) as paying:
            tools = PaymentTools(paying, options, max_body_bytes=args.max_body_bytes)
            server = build_server(tools)
            if args.http is None:
                logger.info("serving MCP on stdio; budget: %s", spending)
                await _serve_stdio(server)
            else:
                await _serve_http(
                    server,
                    *args.http,
                    spending=spending,
                    token=token,
                    origins=args.allow_origin or (),
                )
    return 0


async def _serve_stdio(server: Server[Any]) -> None:
    from mcp.server.stdio import stdio_server

    # While it serves, the transport points fd 1 at stderr: nothing but the protocol can
    # reach the real stdout, even a stray print().
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


async def _serve_http(
    server: Server[Any],
    host: str,
    port: int,
    *,
    spending: str,
    token: str | None,
    origins: Sequence[str] = (),
) -> None:
    import socket

    import uvicorn
    from mcp.server.transport_security import TransportSecuritySettings

    class Announcing(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if not self.started:
                return
            bound = [s.getsockname() for server_ in self.servers for s in server_.sockets]
            address, actual = bound[0][:2] if bound else (host, port)
            shown = f"[{address}]" if ":" in str(address) else address
            logger.info(
                "serving MCP over streamable HTTP at http://%s:%d/mcp; budget: %s; %s%s",
                shown,
                actual,
                spending,
                "bearer token required" if token else f"no authentication ({TOKEN_ENV} unset)",
                f"; pages from {', '.join(origins)} admitted" if origins else "",
            )

    # `require_own_host` checks Host and Origin on every address, so the SDK's own check
    # (on 127.0.0.1, localhost and ::1 only, admitting pages from any local port) is off.
    app: Any = server.streamable_http_app(
        host=host,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    if token is not None:
        app = require_bearer(app, token)
    app = require_own_host(app, host, origins)
    # No uvicorn logging config: its records reach our stderr handler; its access log
    # (which would go to stdout) is off.
    config = uvicorn.Config(
        app, host=host, port=port, log_config=None, access_log=False, lifespan="on"
    )
    await Announcing(config).serve()


#: An ASGI application: `(scope, receive, send)`.
_Asgi = Callable[[Any, Any, Any], Awaitable[None]]
#: What a browser may send to the endpoint across origins, and read of its answers.
_CORS_METHODS = b"GET, POST, DELETE"
_CORS_HEADERS = (
    b"authorization, content-type, accept, mcp-session-id, mcp-protocol-version, last-event-id"
)
_CORS_EXPOSED = b"mcp-session-id, mcp-protocol-version, www-authenticate"


async def _refuse(
    scope: Any, send: Any, status: int, body: bytes, *extra: tuple[bytes, bytes]
) -> None:
    """Answer `status` with the JSON `body`; a WebSocket is closed (1008, policy
    violation) instead."""
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008})
        return
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": [*headers, *extra]})
    await send({"type": "http.response.body", "body": body})


def _names_of(address: str, port: int, given: str | None) -> frozenset[str]:
    """The `Host` values that name a listener reached at `address`:`port` (its own end
    of the connection): that address, the HOST given to `--http`, and `localhost` when the
    address is loopback, each with `:port` (and without it on port 80)."""
    import ipaddress

    names = {address.lower()}
    if given:
        names.add(given)
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        ip = None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        names.add(str(ip.ipv4_mapped))
        ip = ip.ipv4_mapped
    if ip is not None and ip.is_loopback:
        names.add("localhost")
    hosts = set()
    for name in names:
        bracketed = f"[{name}]" if ":" in name else name
        hosts.add(f"{bracketed}:{port}")
        if port == 80:
            hosts.add(bracketed)
    return frozenset(hosts)


def require_own_host(app: _Asgi, host: str, origins: Sequence[str] = ()) -> _Asgi:
    """`app` behind a DNS-rebinding check, for a listener given `--http host:...`.

    `Host` must name the listener (`_names_of` the local address and port the request
    arrived at), else 421. An `Origin`, when sent, must be the listener's own
    (`http://` + such a `Host`) or one of `origins` (as `_origin` writes them), else 403.
    Refused requests never reach `app`; WebSockets are closed (1008); lifespan events
    pass. A CORS preflight from an admitted origin is answered here (204, without a
    token: a browser never sends one on a preflight), and answers to an admitted origin
    carry `Access-Control-Allow-Origin`."""
    import ipaddress

    try:
        given: str | None = None if ipaddress.ip_address(host).is_unspecified else host.lower()
    except ValueError:
        given = host.lower()
    admitted_origins = frozenset(origins)
    misdirected = b'{"error":"misdirected request: the Host header does not name this server"}'
    forbidden = b'{"error":"forbidden: pages from this Origin may not use this server"}'

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await app(scope, receive, send)
            return
        server = scope.get("server") or (None, None)
        names = frozenset() if server[1] is None else _names_of(str(server[0]), server[1], given)
        hosts = [v for k, v in scope["headers"] if k.lower() == b"host"]
        host_header = hosts[0].decode("latin-1").lower() if len(hosts) == 1 else None
        if host_header not in names:
            logger.warning("refused a request for Host %.100r: not this server", host_header)
            await _refuse(scope, send, 421, misdirected)
            return
        sent = [v for k, v in scope["headers"] if k.lower() == b"origin"]
        origin = sent[0].decode("latin-1").lower() if len(sent) == 1 else None
        if sent and not (
            origin in admitted_origins
            or (origin is not None and origin.startswith("http://") and origin[7:] in names)
        ):
            logger.warning(
                "refused a request from Origin %.100r (--allow-origin admits one)", origin
            )
            await _refuse(scope, send, 403, forbidden)
            return
        if origin is None or scope["type"] != "http":
            await app(scope, receive, send)
            return
        cors = [(b"access-control-allow-origin", origin.encode()), (b"vary", b"origin")]
        if scope["method"] == "OPTIONS" and any(
            k.lower() == b"access-control-request-method" for k, _ in scope["headers"]
        ):
            cors += [
                (b"access-control-allow-methods", _CORS_METHODS),
                (b"access-control-allow-headers", _CORS_HEADERS),
                (b"access-control-max-age", b"600"),
            ]
            await send({"type": "http.response.start", "status": 204, "headers": cors})
            await send({"type": "http.response.body", "body": b""})
            return
        cors.append((b"access-control-expose-headers", _CORS_EXPOSED))

        async def send_with_cors(message: Any) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), *cors]}
            await send(message)

        await app(scope, receive, send_with_cors)

    return guarded


def require_bearer(app: _Asgi, token: str) -> _Asgi:
    """`app` behind a bearer token: an HTTP request whose `Authorization` is not
    `Bearer <token>` (the scheme in any case, RFC 7235) gets 401
    (`WWW-Authenticate: Bearer`) and never reaches `app`.

    Compared in constant time; the token appears in no answer. A WebSocket without it is
    closed (1008, policy violation); lifespan events pass."""
    import hmac

    expected = token.encode()
    body = b'{"error":"unauthorized: send Authorization: Bearer <token>"}'

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            given = [v for k, v in scope["headers"] if k.lower() == b"authorization"]
            scheme, _, credentials = (
                given[0].partition(b" ") if len(given) == 1 else (b"", b"", b"")
            )
            if not (
                scheme.lower() == b"bearer"
                and hmac.compare_digest(credentials.lstrip(b" "), expected)
            ):
                challenge = (b"www-authenticate", b'Bearer realm="x402-eur mcp"')
                await _refuse(scope, send, 401, body, challenge)
                return
        await app(scope, receive, send)

    return guarded


if __name__ == "__main__":  # pragma: no cover
    from .cli import main

    sys.exit(main(["mcp", *sys.argv[1:]]))
