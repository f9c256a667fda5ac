"""The tools as plain async methods over one paying client (`PaymentTools`)."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from .._frontend import common as _frontend
from .._protocol.redact import redact_secrets, safe_url, secrets_of
from ._results import (
    ToolError,
    _add_payments_made,
    _body_json,
    _budget_json,
    _error_json,
    _journal_json,
    _receipt_json,
    _recovered_json,
    _useful_proof,
)
from ._schemas import TOOLS

if TYPE_CHECKING:
    import httpx

    from .._options import PaymentOptions
    from .._protocol.types import PaymentReceipt
    from .._state.sqlite_store import JournalRecord
    from .._state.stores import JournalStore

__all__ = ["DEFAULT_MAX_BODY_BYTES", "PaymentTools"]

logger = logging.getLogger("x402_client.mcp")

#: The largest response body a `fetch` result holds, in bytes.
DEFAULT_MAX_BODY_BYTES = 100_000


def _amount_argument(value: Any) -> Decimal:
    """`max_amount` as a JSON string or number, read as `--max-amount` reads it."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        # A JSON number: read through its shortest decimal form (0.1 -> "0.1").
        value = format(Decimal(repr(value)), "f")
    try:
        return Decimal(_frontend.check_amount(value if isinstance(value, str) else str(value)))
    except ValueError as exc:
        raise ToolError("InvalidArguments", f"max_amount: {exc}") from None


def _validated(name: str, arguments: Mapping[str, Any] | None) -> dict[str, Any]:
    """The arguments of tool `name`, checked against its schema (`ToolError` if not)."""
    import importlib

    # Untyped, and always there: the `mcp` SDK depends on it.
    jsonschema: Any = importlib.import_module("jsonschema")
    given = dict(arguments or {})
    spec = TOOLS.get(name)
    if spec is None:
        raise ToolError("UnknownTool", f"no tool {name[:64]!r}; tools: {', '.join(TOOLS)}")
    if isinstance(given.get("method"), str):
        given["method"] = given["method"].upper()
    problem = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(spec.input_schema).iter_errors(given)
    )
    if problem is not None:
        where = ".".join(str(p) for p in problem.absolute_path) or "arguments"
        raise ToolError("InvalidArguments", f"{where}: {problem.message}")
    return {k: v for k, v in given.items() if v is not None}


def _request_settings(
    max_amount: Any, proof: str | None, resume_transaction_code: str | None
) -> dict[str, Any]:
    """The `x402` extension of one `fetch`: its cap, or the proof or code that recovers."""
    settings: dict[str, Any] = {}
    if max_amount is not None:
        # One amount lowers every currency's cap (never raises one).
        settings["max_amount_per_payment"] = _amount_argument(max_amount)
    if proof:
        settings["proof"] = proof
    if resume_transaction_code:
        settings["resume_transaction_code"] = resume_transaction_code
    return settings


class PaymentTools:
    """The tools over one paying client. `call(name, arguments)` runs one and returns
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
            "discover": self.discover,
            "payments": self.payments,
            "budget": self.budget,
            "resume": self.resume,
            "sessions": self.sessions,
            "refund_session": self.refund_session,
        }

    def redact(self, text: str) -> str:
        """`text` with the API key and the EVM key blanked out."""
        return redact_secrets(text, self._secrets)

    async def call(
        self, name: str, arguments: Mapping[str, Any] | None
    ) -> tuple[dict[str, Any], bool]:
        try:
            given = _validated(name, arguments)
            body, is_error = await self._handlers[name](**given), False
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

        from .._flow.payment import EXTENSION

        settings = _request_settings(max_amount, proof, resume_transaction_code)
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
        return await self._send(request, f"{method} {safe_url(url)}")

    async def _send(self, request: httpx.Request, where: str) -> dict[str, Any]:
        """`fetch`'s result for `request`: the status, the body (bounded) and the receipt."""
        from .._flow.payment import RECEIPT_EXTENSION
        from .._protocol.errors import X402Error
        from .._protocol.types import PaymentReceipt

        try:
            response = await self.client.send(request, stream=True)
            try:
                data, truncated = await _read_prefix(response, self.max_body_bytes)
            finally:
                await response.aclose()
        except Exception as exc:
            _log_failure("fetch", where, exc)
            # What this request's payment attempt recorded, whatever the error says.
            record = _frontend.payment_record(request)
            if record is not None:
                with contextlib.suppress(AttributeError):
                    exc.x402_payments = [record.entry]  # type: ignore[attr-defined]
            if isinstance(exc, X402Error):
                _frontend.note_payment_id(exc, request)
            raise
        receipt = response.extensions.get(RECEIPT_EXTENSION)
        paid = receipt if isinstance(receipt, PaymentReceipt) else None
        _log_fetched(where, response.status_code, paid)
        content_type = response.headers.get("content-type")
        text, encoding = _body_json(
            data, content_type, response.charset_encoding, complete=not truncated
        )
        return {
            "url": safe_url(str(response.url)),
            "status": response.status_code,
            "contentType": content_type,
            "body": text,
            "bodyEncoding": encoding,
            "bytes": len(data),
            "truncated": truncated,
            "receipt": _receipt_json(paid) if paid is not None else None,
            **_resent_note(paid),
        }

    async def quote(self, url: str, method: str = "GET") -> dict[str, Any]:
        import httpx

        from .._adapters.paying_client import payments

        where = f"{method} {safe_url(url)}"
        try:
            quote = await payments(self.client).quote(url, method)
        except httpx.InvalidURL as exc:
            raise ToolError("InvalidArguments", f"the request cannot be made: {exc}") from None
        except Exception as exc:
            _log_failure("quote", where, exc)
            raise
        logger.info("quote %s -> %d, %d payable", where, quote.status_code, len(quote.payable))
        return _frontend.quote_json(quote, "mcp")

    async def discover(
        self,
        facilitator: str,
        query: str | None = None,
        type: str | None = None,
        network: str | None = None,
        limit: int = 20,
        offset: int = 0,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        from .._adapters.paying_client import payments
        from .._protocol.errors import ConfigurationError

        where = f"{safe_url(facilitator)}" + (f" {query!r}" if query else "")
        try:
            found = await payments(self.client).discover(
                facilitator,
                query,
                type=type,
                network=network,
                limit=limit,
                offset=offset,
                cursor=cursor,
            )
        except ConfigurationError as exc:
            raise ToolError("InvalidArguments", str(exc)) from None
        except Exception as exc:
            _log_failure("discover", where, exc)
            raise
        payable = sum(1 for r in found.resources if r.payable)
        logger.info("discover %s -> %d listed, %d payable", where, len(found.resources), payable)
        return _frontend.discovery_json(found)

    async def payments(self, limit: int = 20, unfinished: bool = False) -> dict[str, Any]:
        from .._protocol.amounts import format_amount
        from .._state.shared import state_of

        if unfinished:
            records = await self._journal().unfinished()
            return {"payments": [_journal_json(r) for r in records[:limit]], "count": len(records)}
        entries = state_of(self.options).ledger.entries()
        listed = []
        for entry in reversed(entries[-limit:]):
            item = entry.to_json()
            item["amount"] = format_amount(entry.intent.amount)
            item.pop("steps", None)
            item["proof"] = _useful_proof(entry)
            listed.append(item)
        return {"payments": listed, "count": len(entries)}

    async def resume(
        self, id: str | None = None, all: bool = False, headers: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        """Finish one unfinished payment, or every one no live worker is making, through
        the paying client (and so its destination guard): never a new payment."""
        from .._adapters.paying_client import payments

        if (id is None) == (not all):
            raise ToolError("InvalidArguments", "give either id (one payment) or all: true")
        self._journal()
        pay = payments(self.client)
        if id is not None:
            record = await self._find(id)
            logger.info("resume %s", record.id)
            recoveries = [await pay.recover(record.id, headers=headers)]
        else:
            logger.info("resume all unfinished payments")
            recoveries = await pay.recover_all(headers=headers)
        for recovery in recoveries:
            logger.info(
                "resume %s -> %s",
                "?" if recovery.record is None else recovery.record.id,
                recovery.status,
            )
        return {
            "recoveries": [_recovered_json(r, self.max_body_bytes) for r in recoveries],
            "skipped": sum(1 for r in recoveries if r.status == "in_progress"),
            "paidNow": False,
        }

    def _journal(self) -> JournalStore:
        from .._state.shared import state_of

        journal = state_of(self.options).journal
        if journal is None:
            raise ToolError(
                "NoJournal",
                "this server keeps no payment journal (it was started with --no-state): "
                "there are no unfinished payments to list or finish",
            )
        return journal

    async def _find(self, id: str) -> JournalRecord:
        """The journaled payment `id` names: its id, or a unique start of it."""
        journal = self._journal()
        record = await journal.get(id)
        if record is not None:
            return record
        found = await journal.starting_with(id, 2)
        if len(found) == 1:
            return found[0]
        raise ToolError(
            "UnknownPayment",
            f"no payment {id!r}"
            if not found
            else f"{id!r} names more than one payment: give more characters of the id",
        )

    async def sessions(self, status: str | None = None) -> dict[str, Any]:
        from .._adapters.paying_client import payments
        from .._frontend.sessions import session_json, symbol_of

        records = await payments(self.client).sessions(status=status)
        declared = self.options.assets
        listed = [session_json(r, symbol_of(r, declared)) for r in records]
        return {"sessions": listed, "count": len(listed)}

    async def refund_session(self, id: str, amount: Any = None) -> dict[str, Any]:
        """Refund one session's unspent deposit to the payer: the session is the state's
        own (its merchant's resource comes from the journal, never from the agent), and
        the amount is at most what it holds unspent, checked before anything is sent."""
        from .._adapters.paying_client import payments
        from .._frontend import sessions
        from .._protocol.amounts import format_amount

        pay = payments(self.client)
        try:
            record = sessions.find_session(await pay.sessions(), id)
            if isinstance(amount, (int, float)) and not isinstance(amount, bool):
                amount = format(Decimal(repr(amount)), "f")
            value = sessions.refund_amount(record, amount)
        except sessions.SessionMistake as exc:
            raise ToolError("InvalidArguments", str(exc)) from None
        where = sessions.short_id(record.channel_id)
        try:
            refund = await pay.refund_session(record.channel_id, value)
        except Exception as exc:
            _log_failure("refund_session", where, exc)
            raise
        logger.info("refund_session %s -> %s refunded", where, refund.refunded)
        return {
            "session": refund.channel_id,
            "refunded": format_amount(refund.refunded),
            "charged": format_amount(refund.charged),
            "currency": refund.currency,
            "closed": refund.closed,
            "txHash": refund.tx_hash,
            "moneyMoved": True,
        }

    async def budget(self) -> dict[str, Any]:
        from .._state.shared import state_of

        report = await state_of(self.options).budgets.status()
        return _budget_json(report, self.options)


def _expected(exc: BaseException) -> bool:
    import httpx

    return isinstance(exc, (ToolError, httpx.HTTPError))


def _log_fetched(where: str, status: int, paid: Any) -> None:
    if paid is None:
        logger.info("fetch %s -> %d, nothing paid", where, status)
        return
    logger.info(
        "fetch %s -> %d, paid %s %s (%s, %s)",
        where,
        status,
        paid.amount,
        paid.currency,
        paid.rail,
        paid.payment_request_code or paid.transaction_code or paid.network,
    )


def _log_failure(tool: str, where: str, exc: BaseException) -> None:
    from .._protocol.errors import X402Error

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


def _resent_note(paid: PaymentReceipt | None) -> dict[str, str]:
    """What a re-sent proof did, in words an agent reads: which payment it finished, or
    that it finished none (sent elsewhere than where it was paid, or answering a 402 that
    asks for another payment)."""
    if paid is None or not paid.reused:
        return {}
    if paid.closed_payment is not None:
        return {
            "proofNote": f"the re-sent proof finished payment {paid.closed_payment}; it moved "
            "no money now"
        }
    return {
        "proofNote": "the re-sent proof was not sent where it was paid (another origin, or a "
        "402 that asks for another payment): it finished no payment, and nothing was booked, "
        "freed or closed; it moved no money now"
    }
