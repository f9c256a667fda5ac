"""The provider's hosted tool server (`{mcp_url}/mcp`): MCP over streamable HTTP, on the bank.

Three tools, each a thin door onto the same `Bank` the payment API serves:

- `pay_x402_challenge(challenge, paymentFrom)`: pays the `euro` entry of a 402 body as
  `POST /transaction/payment` with `toType: PaymentRequestCode` does, and hands back the
  `X-PAYMENT` value that proves it;
- `create_payment(paymentFrom, paymentTo, toType, amount)`: a `BlockchainAddress` payment
  (the bridge, path C); the chain-A part settles it and `blockchainTxId` appears later;
- `get_transactions(txCode)`: the transaction record, as `GET /transaction?txCode=` lists it.

Authentication: `X-API-KEY` on every HTTP request, read by each tool call from the request
that carried it. A missing or unknown key is a tool error `UNAUTHORIZED` (the handshake and
`tools/list` need no key: the catalogue is public, the money is not). Every failure is a
tool error (`isError`) whose text and `structuredContent` are
`{"error": {"code": ..., "message": ...}}`; the codes are `ERROR_CODES`, documented in
`docs/hosted-tool-server.md`. No message ever holds the key.

Amounts leave as decimal strings (`"0.10"`): JSON numbers become floats in most MCP SDKs.

The `mcp` package is optional and imported on the first request to `/mcp`, never at
import: without it `/mcp` answers 404 with a message saying so. The streamable HTTP session
manager needs its `run()` context entered; the sandbox serves with lifespan off, so
`HostedToolServer` enters it in a task of its own on first use and leaves it in `stop()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib.util
import json
import logging
import re
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from starlette.types import Receive, Scope, Send

from . import _wire as _json
from .__version__ import __version__
from ._bank import Account, Bank, BankError
from ._wire import (
    EURO_ASSET,
    PROVIDER_NETWORK,
    X402_VERSION,
    AmountError,
    Proof,
    WireError,
    encode_proof,
    parse_amount,
)

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext
    from mcp.server.lowlevel import Server
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from mcp_types import (
        CallToolRequestParams,
        CallToolResult,
        ListToolsResult,
        PaginatedRequestParams,
    )

__all__ = ["ERROR_CODES", "HostedToolServer", "McpEndpoint", "ToolError", "mcp_available"]

logger = logging.getLogger("x402_eur_sandbox")

#: Every error code a tool answers with, and what it means.
ERROR_CODES = {
    "UNAUTHORIZED": "X-API-KEY is missing or unknown",
    "INVALID_ARGUMENTS": "an argument is missing, of the wrong type, or not one of the tool's",
    "FORBIDDEN_ACCOUNT": "paymentFrom is not an account of this API key",
    "INVALID_CHALLENGE": "challenge is not an x402 version 2 402 body, or its euro entry is "
    "malformed",
    "NO_EURO_ENTRY": "the challenge has no euro entry on provider:mainnet",
    "PAYMENT_REQUEST_NOT_PAYABLE": "the payment request is unknown, expired, already paid, "
    "or its amount or payee differ from the challenge",
    "INVALID_AMOUNT": "amount is not a positive plain decimal with at most 6 decimals",
    "INSUFFICIENT_FUNDS": "the paying account holds less than the amount",
    "UNSUPPORTED_TO_TYPE": "create_payment takes toType BlockchainAddress only",
    "INVALID_ADDRESS": "paymentTo is not a chain-A address",
    "BRIDGE_UNAVAILABLE": "payments to chain addresses are not available",
    "TRANSACTION_NOT_FOUND": "no transaction with this code is visible to this API key",
    "UNKNOWN_TOOL": "no tool of that name",
    "INTERNAL_ERROR": "the server failed; nothing is known about the outcome",
}

#: The bank's error codes (the payment API's) as tool error codes.
_BANK_CODES = {
    "Unauthorized": "UNAUTHORIZED",
    "Forbidden": "FORBIDDEN_ACCOUNT",
    "InvalidAmount": "INVALID_AMOUNT",
    "InsufficientFunds": "INSUFFICIENT_FUNDS",
    "InvalidToType": "UNSUPPORTED_TO_TYPE",
    "PaymentRequestNotFound": "PAYMENT_REQUEST_NOT_PAYABLE",
    "PaymentRequestExpired": "PAYMENT_REQUEST_NOT_PAYABLE",
    "PaymentRequestAlreadyPaid": "PAYMENT_REQUEST_NOT_PAYABLE",
    "AmountMismatch": "PAYMENT_REQUEST_NOT_PAYABLE",
    "InvalidAddress": "INVALID_ADDRESS",
    "BridgeUnavailable": "BRIDGE_UNAVAILABLE",
}


class ToolError(Exception):
    """A tool's refusal: one of `ERROR_CODES` and a message that holds no secret."""

    def __init__(self, code: str, message: str) -> None:
        assert code in ERROR_CODES, code
        super().__init__(message)
        self.code = code
        self.message = message

    @classmethod
    def from_bank(cls, exc: BankError) -> ToolError:
        return cls(_BANK_CODES.get(exc.code, "INTERNAL_ERROR"), exc.message)

    def body(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message}}


def mcp_available() -> bool:
    """Whether the `mcp` package is installed (without importing it)."""
    return importlib.util.find_spec("mcp") is not None


# --- the tools: plain functions of the bank, the key's account and the arguments ----------


def _text(arguments: Mapping[str, Any], name: str) -> str:
    value = arguments.get(name)
    if not isinstance(value, str) or not value:
        raise ToolError("INVALID_ARGUMENTS", f"{name} must be a non-empty string")
    return value


def _amount(value: Any) -> Decimal:
    """A decimal string, or a JSON number read through its shortest decimal form."""
    if isinstance(value, float):
        # The SDK hands JSON numbers over as floats; `repr` is the shortest text that reads
        # back as the same float, which is what the caller wrote for any sane amount
        # (0.10 -> "0.1"). Exponents and more than 6 decimals are refused below.
        value = format(Decimal(repr(value)), "f")
    try:
        return parse_amount(value)
    except AmountError as exc:
        raise ToolError("INVALID_AMOUNT", str(exc)) from None


@dataclasses.dataclass(frozen=True)
class EuroEntry:
    """An accept entry of scheme `euro`: pay payment request `payment_request_code`."""

    network: str
    asset: str
    amount: Decimal
    pay_to: str
    payment_request_code: str
    scheme: str = "euro"

    @classmethod
    def from_wire(cls, raw: Mapping[str, Any]) -> EuroEntry:
        fields = {}
        for name, key in (
            ("network", "network"),
            ("asset", "asset"),
            ("pay_to", "payTo"),
            ("payment_request_code", "paymentRequestCode"),
        ):
            if not isinstance(raw.get(key), str):
                raise WireError(f"{key} must be a string")
            fields[name] = raw[key]
        if not _PR_CODE.match(fields["payment_request_code"]):
            raise WireError("paymentRequestCode must be a `pr_` code")
        if not isinstance(raw.get("amount"), str):
            raise WireError("amount must be a decimal string")
        return cls(amount=parse_amount(raw["amount"]), **fields)


_PR_CODE = re.compile(r"\Apr_[A-Za-z0-9_\-.:]{1,125}\Z")


def _accepts(challenge: Any) -> list[Any]:
    """The `accepts` of a 402 body (an object or its JSON text), checked as version 2."""
    if isinstance(challenge, str):
        try:
            challenge = _json.loads(challenge)
        except _json.JSONError:
            raise ToolError("INVALID_CHALLENGE", "challenge is not valid JSON") from None
    if not isinstance(challenge, dict):
        raise ToolError("INVALID_CHALLENGE", "challenge must be the 402 body, a JSON object")
    version, accepts = challenge.get("x402Version"), challenge.get("accepts")
    problem = None
    if isinstance(version, bool) or version != X402_VERSION:
        problem = f"x402Version: must be {X402_VERSION}"
    elif not isinstance(accepts, list) or not accepts:
        problem = "accepts: a non-empty list is required"
    if problem is not None:
        raise ToolError("INVALID_CHALLENGE", f"not an x402 version 2 402 body ({problem})")
    assert isinstance(accepts, list)
    return accepts


def _challenge_entry(challenge: Any) -> EuroEntry:
    """The first payable `euro` entry of a 402 body (an object or its JSON text)."""
    accepts = _accepts(challenge)
    malformed: str | None = None
    for raw in accepts:
        if not isinstance(raw, dict) or raw.get("scheme") != "euro":
            continue
        try:
            entry = EuroEntry.from_wire(raw)
        except WireError as exc:
            malformed = malformed or str(exc)
            continue
        if entry.network == PROVIDER_NETWORK and entry.asset == EURO_ASSET:
            return entry
    if malformed is not None:
        raise ToolError("INVALID_CHALLENGE", f"the euro entry is malformed: {malformed}")
    schemes = sorted({str(raw.get("scheme")) for raw in accepts if isinstance(raw, dict)})
    raise ToolError(
        "NO_EURO_ENTRY",
        f"the challenge offers no euro entry on {PROVIDER_NETWORK} (schemes: "
        f"{', '.join(schemes)[:200] or 'none'}); for a chain-A exact entry use create_payment "
        "with toType BlockchainAddress (the bridge)",
    )


def pay_x402_challenge(bank: Bank, holder: Account, arguments: Mapping[str, Any]) -> dict[str, Any]:
    entry = _challenge_entry(arguments.get("challenge"))
    payment_from = _text(arguments, "paymentFrom")
    code = entry.payment_request_code
    with bank.lock:
        # The request names its payee; refuse to pay one the agent was not shown.
        request = bank.payment_requests.get(code)
        if request is not None and request.account_code != entry.pay_to:
            raise ToolError(
                "PAYMENT_REQUEST_NOT_PAYABLE",
                f"payment request {code} pays another account than the challenge's payTo",
            )
        try:
            transaction = bank.pay(
                holder,
                payment_from=payment_from,
                to_type="PaymentRequestCode",
                payment_to=code,
                amount=entry.amount,
            )
        except BankError as exc:
            raise ToolError.from_bank(exc) from None
    proof = encode_proof(
        Proof(scheme=entry.scheme, network=entry.network, payload={"paymentRequestCode": code})
    )
    return {
        "xPaymentHeader": proof,
        "amount": format(entry.amount, "f"),
        "instruction": (
            f"Paid. Retry the same request with the header X-PAYMENT: {proof} . If the merchant "
            "answers 402 'Payment not confirmed', wait a moment and retry with the same header; "
            "do not pay again."
        ),
        "transactionCode": transaction.code,
        "paymentRequestCode": code,
    }


def create_payment(bank: Bank, holder: Account, arguments: Mapping[str, Any]) -> dict[str, Any]:
    payment_from = _text(arguments, "paymentFrom")
    payment_to = _text(arguments, "paymentTo")
    to_type = _text(arguments, "toType")
    if to_type != "BlockchainAddress":
        raise ToolError(
            "UNSUPPORTED_TO_TYPE",
            f"toType {to_type[:40]!r} is not supported: create_payment pays chain addresses "
            "(BlockchainAddress); pay a euro challenge with pay_x402_challenge",
        )
    amount = _amount(arguments.get("amount"))
    message = arguments.get("message", "")
    if not isinstance(message, str):
        raise ToolError("INVALID_ARGUMENTS", "message must be a string")
    try:
        transaction = bank.pay(
            holder,
            payment_from=payment_from,
            to_type=to_type,
            payment_to=payment_to,
            amount=amount,
            message=message,
        )
    except BankError as exc:
        raise ToolError.from_bank(exc) from None
    return {
        "transactionCode": transaction.code,
        "status": transaction.status,
        "amount": format(transaction.amount, "f"),
    }


def get_transactions(bank: Bank, holder: Account, arguments: Mapping[str, Any]) -> dict[str, Any]:
    code = _text(arguments, "txCode")
    with bank.lock:
        transaction = bank.transaction(code)
        # Someone else's transaction is as absent as a made-up code (the payment API's rule).
        if transaction is None or holder.code not in (transaction.from_account, transaction.to):
            raise ToolError("TRANSACTION_NOT_FOUND", f"no transaction {code[:64]!r}")
        record = transaction.record()
    record["amount"] = format(record["amount"], "f")
    return record


# --- the catalogue: names, schemas, handlers ---------------------------------------------------

_STRING = {"type": "string"}


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def _described(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {**schema, "description": description}


Handler = Callable[[Bank, Account, Mapping[str, Any]], dict[str, Any]]


@dataclasses.dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    handler: Handler
    read_only: bool = False


_PAYMENT_FROM = _described(_STRING, "The paying managed account (ACC_...) of this API key.")

TOOLS: dict[str, ToolSpec] = {
    spec.name: spec
    for spec in (
        ToolSpec(
            name="pay_x402_challenge",
            description=(
                "Pay an x402 402 challenge through its euro entry and get the X-PAYMENT header "
                "that proves it. Works only when the challenge holds a euro entry; money moves "
                "at once. Then retry the original request with header X-PAYMENT."
            ),
            input_schema=_object(
                {
                    "challenge": {
                        "type": ["object", "string"],
                        "description": "The full 402 body (x402Version, error, accepts), "
                        "as an object or as its JSON text.",
                    },
                    "paymentFrom": _PAYMENT_FROM,
                },
                ["challenge", "paymentFrom"],
            ),
            output_schema=_object(
                {
                    "xPaymentHeader": _described(_STRING, "The X-PAYMENT value (base64url)."),
                    "amount": _described(_STRING, "The euro amount paid, a decimal string."),
                    "instruction": _described(_STRING, "What to do next."),
                    "transactionCode": _described(_STRING, "The payment's transaction (QP...)."),
                    "paymentRequestCode": _described(_STRING, "The paid payment request."),
                },
                ["xPaymentHeader", "amount", "instruction"],
            ),
            handler=pay_x402_challenge,
        ),
        ToolSpec(
            name="create_payment",
            description=(
                "Pay a chain-A address from a managed account through the bridge (EURO to "
                "EURQ, path C). Returns the transactionCode at once; poll get_transactions "
                "until blockchainTxId appears (about 1 to 3 minutes), then prove the payment "
                "with the bridge payload."
            ),
            input_schema=_object(
                {
                    "paymentFrom": _PAYMENT_FROM,
                    "paymentTo": _described(_STRING, "The receiving chain-A address (payTo)."),
                    "toType": {"type": "string", "enum": ["BlockchainAddress"]},
                    "amount": {
                        "type": ["string", "number"],
                        "description": "Euros, a plain decimal with at most 6 decimals "
                        '("0.10"); a string is exact.',
                    },
                    "message": _described(_STRING, "Optional text stored with the payment."),
                },
                ["paymentFrom", "paymentTo", "toType", "amount"],
            ),
            output_schema=_object(
                {
                    "transactionCode": _described(_STRING, "The payment's code (QP...)."),
                    "status": _STRING,
                    "amount": _described(_STRING, "The euro amount, a decimal string."),
                },
                ["transactionCode"],
            ),
            handler=create_payment,
        ),
        ToolSpec(
            name="get_transactions",
            description=(
                "Look up a transaction of this API key's account by its code. A bridge "
                "payment carries blockchainTxId once its on-chain leg has settled."
            ),
            input_schema=_object(
                {"txCode": _described(_STRING, "The transaction code (QP...).")}, ["txCode"]
            ),
            output_schema={
                "type": "object",
                "properties": {
                    "transactionCode": _STRING,
                    "fromAccountCode": _STRING,
                    "toAccountCode": _STRING,
                    "amount": _described(_STRING, "Euros, a decimal string."),
                    "tokenCode": _STRING,
                    "created": _STRING,
                    "finished": {"type": ["string", "null"]},
                    "status": _STRING,
                    "type": _STRING,
                    "message": _STRING,
                    "blockchainTxId": _STRING,
                },
                "required": ["transactionCode", "status"],
            },
            handler=get_transactions,
            read_only=True,
        ),
    )
}


def call(
    bank: Bank, api_key: str | None, name: str, arguments: Mapping[str, Any]
) -> dict[str, Any]:
    """Run one tool as the holder of `api_key`; raises `ToolError`."""
    spec = TOOLS.get(name)
    if spec is None:
        raise ToolError("UNKNOWN_TOOL", f"no tool {name[:64]!r}; tools: {', '.join(TOOLS)}")
    try:
        holder = bank.account_for_key(api_key)
    except BankError as exc:
        raise ToolError.from_bank(exc) from None
    unknown = sorted(set(arguments) - set(spec.input_schema["properties"]))
    if unknown:
        raise ToolError("INVALID_ARGUMENTS", f"unknown argument(s): {', '.join(unknown)[:200]}")
    return spec.handler(bank, holder, arguments)


# --- MCP: the low-level server and the ASGI endpoint ------------------------------------------


def _build_server(bank: Bank) -> Server[Any]:
    from mcp.server.lowlevel import Server
    from mcp_types import CallToolResult, ListToolsResult, TextContent, Tool, ToolAnnotations

    tools = [
        Tool(
            name=spec.name,
            description=spec.description,
            input_schema=spec.input_schema,
            output_schema=spec.output_schema,
            annotations=ToolAnnotations(
                read_only_hint=spec.read_only,
                destructive_hint=False,
                idempotent_hint=spec.read_only,
                open_world_hint=False,
            ),
        )
        for spec in TOOLS.values()
    ]

    async def list_tools(
        ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        return ListToolsResult(tools=tools)

    async def call_tool(
        ctx: ServerRequestContext[Any], params: CallToolRequestParams
    ) -> CallToolResult:
        headers = getattr(ctx.request, "headers", None)
        api_key = headers.get("x-api-key") if headers is not None else None
        try:
            body = call(bank, api_key, params.name, params.arguments or {})
            is_error = False
        except ToolError as exc:
            body, is_error = exc.body(), True
        except Exception:
            # Logged without arguments or headers: those are the caller's, key included.
            logger.exception("hosted tool server: %s failed", params.name[:64])
            body = ToolError("INTERNAL_ERROR", "the tool failed unexpectedly").body()
            is_error = True
        text = json.dumps(body)
        if api_key and len(api_key) >= 8 and api_key in text:
            # An argument may carry the key (a confused agent); messages echo arguments.
            text = text.replace(api_key, "[redacted]")
            body = json.loads(text)
        return CallToolResult(
            content=[TextContent(type="text", text=text)],
            structured_content=body,
            is_error=is_error,
        )

    def input_schema(name: str) -> Mapping[str, Any] | None:
        spec = TOOLS.get(name)
        return None if spec is None else spec.input_schema

    return Server(
        "x402-eur-sandbox-tools",
        version=__version__,
        instructions=(
            "Pay x402 challenges from a managed euro account. Send X-API-KEY on every request. "
            "Errors are isError results holding {'error': {'code', 'message'}}."
        ),
        get_tool_input_schema=input_schema,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


async def _json_answer(send: Send, status: int, body: dict[str, Any]) -> None:
    raw = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(raw)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": raw})


class _Unavailable(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.body = {"error": {"code": code, "message": message}}


class McpEndpoint:
    """An MCP server's streamable HTTP endpoint (an ASGI app) and its lifecycle.

    The MCP server (`build_server`) and its session manager are built on the first
    request, so a sandbox that nobody asks for tools never imports `mcp`. The manager's
    `run()` context lives in a task owned by this object, from that first request until
    `stop()`. Stateless, one JSON answer per request: each call stands alone.
    """

    #: How the endpoint names itself in its errors and logs.
    name = "the tool server"

    def __init__(self) -> None:
        self._lock = asyncio.Lock()
        self._manager: StreamableHTTPSessionManager | None = None
        self._task: asyncio.Task[None] | None = None
        self._shutdown: asyncio.Event | None = None
        self._running = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}(started={self._manager is not None})"

    def build_server(self) -> Server[Any]:
        raise NotImplementedError

    async def start(self, sandbox: Any = None) -> None:
        self._lock = asyncio.Lock()  # bound to the loop that serves, if it changed
        self._running = True

    async def stop(self) -> None:
        self._running = False
        async with self._lock:
            task, shutdown = self._task, self._shutdown
            self._task = self._shutdown = self._manager = None
            if task is None or shutdown is None:
                return
            shutdown.set()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        try:
            manager = await self._session_manager()
        except _Unavailable as exc:
            await _json_answer(send, exc.status, exc.body)
            return
        await manager.handle_request(scope, receive, send)

    async def _session_manager(self) -> StreamableHTTPSessionManager:
        if not self._running:
            raise _Unavailable(503, "UNAVAILABLE", f"{self.name} is not running")
        if self._manager is not None:
            return self._manager
        async with self._lock:
            if self._manager is None:
                self._manager = await self._start_manager()
            return self._manager

    async def _start_manager(self) -> StreamableHTTPSessionManager:
        try:
            from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
            from mcp.server.transport_security import TransportSecuritySettings
        except ModuleNotFoundError as exc:
            if (exc.name or "").split(".")[0] not in ("mcp", "mcp_types"):
                raise
            raise _Unavailable(
                404,
                "NOT_AVAILABLE",
                f"{self.name} needs the `mcp` package (pip install mcp); "
                "this sandbox does not serve /mcp",
            ) from None
        manager = StreamableHTTPSessionManager(
            app=self.build_server(),
            # One JSON answer per request, no session state: each call stands alone,
            # authenticated (where it is) by the request that carries it.
            json_response=True,
            stateless=True,
            security_settings=TransportSecuritySettings(
                enable_dns_rebinding_protection=True,
                allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
                allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
            ),
        )
        started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        shutdown = asyncio.Event()

        async def run() -> None:
            try:
                async with manager.run():
                    if not started.done():
                        started.set_result(None)
                    await shutdown.wait()
            except Exception as exc:
                if started.done():
                    logger.exception("%s: the session manager failed", self.name)
                else:
                    started.set_exception(exc)

        task = asyncio.create_task(run(), name=self.name)
        try:
            await started
        except BaseException:
            shutdown.set()  # the task, if it got going, ends by itself
            raise
        self._task, self._shutdown = task, shutdown
        return manager


class HostedToolServer(McpEndpoint):
    """The `/mcp` endpoint of the managed-account facilitator (a `SandboxPart`): the
    hosted tools, on the bank."""

    name = "the hosted tool server"

    def __init__(self, bank: Bank) -> None:
        super().__init__()
        self._bank = bank

    def build_server(self) -> Server[Any]:
        return _build_server(self._bank)
