"""Paid MCP tool calls: the payment core behind an MCP client session.

```python
from mcp import Client                      # or a ClientSession you opened yourself
async with Client("https://tools.example/mcp") as client:
    with_eur_payment(client, options)       # the same options an httpx client pays with
    result = await client.call_tool("weather", {"city": "Paris"})
    receipt = getattr(result, "x402_payment", None)   # a PaidToolResult's PaymentReceipt
```

The wire is the x402 foundation's MCP transport (its tool-result binding):

- a paid tool answers an unpaid call with a tool error (`isError: true`) whose
  `structuredContent` (or else `content[0].text`, as JSON) is the x402 `PaymentRequired`
  object (`x402Version`, `accepts`, `resource`, `error`); a JSON-RPC error of code 402
  with that object in `error.data` (an earlier draft's binding) is read the same way;
- the client calls the tool again with the payment payload (the object an HTTP
  `PAYMENT-SIGNATURE` header carries in base64) in `params._meta["x402/payment"]`;
- the server answers with the tool's result and its settlement in
  `result._meta["x402/payment-response"]`; a refusal is another payment-required tool
  error whose `error` says why (with `x402/payment-response` inside it when settlement
  failed).

There is no second copy of the payment rules. Each tool call is one hop of a logical
request, seen by the payer the way an HTTP exchange is (`_ToolCalls.send`, a `Send`): a
payment-required result is a 402 carrying the challenge (`PAYMENT-REQUIRED` for v2, the body
for v1), the tool's result a 200 carrying the settlement (`PAYMENT-RESPONSE`), a tool error
after the payment an answer that is not the resource (424), and the payment header of a
paid hop becomes `_meta["x402/payment"]`. So selection, caps, budgets, the hook, ledger,
journal, the delivery rules (the same proof re-sent on "not confirmed", one fresh payment
on "already used" / "expired") and the truthful errors are the HTTP client's own
(`Payer.handle_402`, `Payer.conclude`). The resource of a tool call, in intents, receipts,
the ledger and the journal, is `mcp://tool/{name}`.

Each call that meets a 402 pays with a payer of its own, closed when the call ends; what
must hold across calls and clients (budgets, ledger, journal, nonce locks) belongs to the
options object, so one `PaymentOptions` spends one budget over HTTP and MCP alike.

Both generations of the `mcp` SDK, and any session shaped like theirs, pay the same way:
nothing here imports `mcp`. A tool result is read by its fields, under either generation's
name (`is_error` / `isError`, `structured_content` / `structuredContent`, `meta`), and a
JSON-RPC error by its `error.code` and `error.data` (`MCPError` in 2.x, `McpError` in 1.x).
The payment travels as `call_tool(..., meta=...)`, which `mcp` 1.x has taken since 1.19
and 2.x takes too. A paid result is an instance of the session's own result class: for each
pydantic result class met, one subclass of it adding the `x402_payment` field is made (and
kept), and registered as a virtual subclass of the abstract `PaidToolResult`. So a 1.x user
gets a 1.x `CallToolResult`, a 2.x user a 2.x one, everything a framework reads of it is
where that framework expects it, and `isinstance(result, PaidToolResult)` holds for both:
one public name, no class tied to one generation.
"""

from __future__ import annotations

import abc
import base64
import dataclasses
import threading
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ConfigDict, Field

from .._flow.payment import (
    EXTENSION,
    RECEIPT_EXTENSION,
    Boundary,
    LogicalRequest,
    Payer,
    parse_settings,
)
from .._options import PaymentOptions, coerce_options
from .._protocol import exact_json as _json
from .._protocol.dialects import PAYMENT_REQUIRED, PAYMENT_SIGNATURE, X_PAYMENT
from .._protocol.errors import ConfigurationError, X402Error
from .._protocol.exact_json import ProofError, b64_json_decode
from .._protocol.types import PaymentReceipt
from .httpx_blocking import ADAPTER_SETTINGS

__all__ = [
    "PAYMENT_META",
    "PAYMENT_RESPONSE_META",
    "PaidToolResult",
    "install",
    "payment_required_of",
]

#: `params._meta` key of the payment payload on a paid tool call.
PAYMENT_META = "x402/payment"
#: `result._meta` key of the settlement (and, in a refusal, key inside the challenge).
PAYMENT_RESPONSE_META = "x402/payment-response"
#: The status a tool error answering a paid call stands for: not the resource.
_TOOL_ERROR = 424
#: Request extension: the tool call a hop stands for. Response extension: its result.
_CALL = "x402_mcp_call"
_RESULT = "x402_mcp_result"
#: Where `with_eur_payment` keeps what it installed on a session.
_INSTALLED = "_x402_mcp_payment"

_Session = TypeVar("_Session")


class PaidToolResult(abc.ABC):
    """A tool's `CallToolResult`, paid for: an instance of the session's own result class
    (`mcp` 1.x or 2.x) whose `x402_payment` is the payment's `PaymentReceipt` (never
    serialized: `model_dump()` is the result the server sent). Check it with
    `isinstance(result, PaidToolResult)`; it is never instantiated itself."""

    x402_payment: PaymentReceipt | None


_paid_classes: dict[type[BaseModel], type[BaseModel]] = {}
_paid_classes_lock = threading.Lock()


def _paid_class(result_class: type[BaseModel]) -> type[BaseModel]:
    """`result_class` with the `x402_payment` field: made once per class, and a
    `PaidToolResult`."""
    with _paid_classes_lock:
        made = _paid_classes.get(result_class)
        if made is None:
            namespace = {
                "__module__": __name__,
                "__doc__": PaidToolResult.__doc__,
                "__annotations__": {"x402_payment": PaymentReceipt | None},
                "model_config": ConfigDict(arbitrary_types_allowed=True),
                "x402_payment": Field(default=None, exclude=True),
            }
            made = type(f"Paid{result_class.__name__}", (result_class,), namespace)
            PaidToolResult.register(made)
            _paid_classes[result_class] = made
        return made


def _field(result: Any, *names: str) -> Any:
    """A result's field under the first of its generations' `names` that it has."""
    for name in names:
        value = getattr(result, name, None)
        if value is not None:
            return value
    return None


def _is_error(result: Any) -> bool:
    return bool(_field(result, "is_error", "isError"))


def _json_rpc_402(exc: Exception) -> dict[str, Any] | None:
    """The `PaymentRequired` a JSON-RPC error 402 carries in `error.data`, or None."""
    error = getattr(exc, "error", None)
    data: Any = getattr(error, "data", None)
    if getattr(error, "code", None) != 402 or not _is_required(data):
        return None
    return dict(data)


def _is_required(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and "x402Version" in value
        and isinstance(value.get("accepts"), list)
    )


def payment_required_of(result: Any, limit: int = 1_000_000) -> dict[str, Any] | None:
    """The x402 `PaymentRequired` a tool result carries, or None: a tool error whose
    `structuredContent`, or else whose first text block (JSON, at most `limit` bytes), is
    an object with `x402Version` and `accepts`."""
    if not _is_error(result):
        return None
    structured = _field(result, "structured_content", "structuredContent")
    if isinstance(structured, dict) and _is_required(structured):
        return dict(structured)
    content = getattr(result, "content", None) or []
    first = content[0] if content else None
    text = getattr(first, "text", None) if getattr(first, "type", None) == "text" else None
    if not isinstance(text, str) or len(text) > limit or "x402Version" not in text:
        return None
    try:
        parsed = _json.loads(text.encode())
    except _json.JSONError:
        return None
    return dict(parsed) if isinstance(parsed, dict) and _is_required(parsed) else None


def _b64(value: Mapping[str, Any]) -> str:
    return base64.b64encode(_json.dumps(dict(value))).decode("ascii")


@dataclasses.dataclass(frozen=True)
class _ToolCall:
    """One `call_tool` of the caller's: what every hop of it sends."""

    name: str
    arguments: Any
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]

    def sent_with(self, payment: Any) -> dict[str, Any]:
        """The call's keyword arguments, its `meta` carrying `payment` when there is one."""
        kwargs = dict(self.kwargs)
        if payment is not None:
            meta = dict(kwargs.get("meta") or {})
            meta[PAYMENT_META] = payment
            kwargs["meta"] = meta
        return kwargs


def _payment_in(request: httpx.Request) -> Any:
    """The payment payload a paid hop carries in its proof header, decoded; None unpaid."""
    header = request.headers.get(PAYMENT_SIGNATURE) or request.headers.get(X_PAYMENT)
    if header is None:
        return None
    try:
        return b64_json_decode(header)
    except ProofError as exc:  # the payer framed it: never happens
        raise ConfigurationError(f"the payment could not be framed for MCP: {exc}") from None


def _required_answer(
    required: Mapping[str, Any], request: httpx.Request, result: Any
) -> httpx.Response:
    """A payment-required tool result as the 402 it stands for."""
    headers: dict[str, str] = {}
    if required.get("x402Version") == 2:
        headers[PAYMENT_REQUIRED] = _b64(required)
    settlement = required.get(PAYMENT_RESPONSE_META)
    if isinstance(settlement, dict):
        headers["PAYMENT-RESPONSE"] = _b64(settlement)
    return httpx.Response(
        402,
        headers=headers,
        content=_json.dumps(dict(required)),
        request=request,
        extensions={_RESULT: result},
    )


def _answer(result: Any, request: httpx.Request, limit: int) -> httpx.Response:
    """A tool result as the HTTP answer it stands for: a 402 when it asks for payment,
    else 200 (the tool's result) or `_TOOL_ERROR` (a tool error), with the settlement
    in `PAYMENT-RESPONSE` when the result's `_meta` carries one."""
    required = payment_required_of(result, limit)
    if required is not None:
        return _required_answer(required, request, result)
    headers: dict[str, str] = {}
    meta = getattr(result, "meta", None)
    settlement = meta.get(PAYMENT_RESPONSE_META) if isinstance(meta, dict) else None
    if isinstance(settlement, dict):
        headers["PAYMENT-RESPONSE"] = _b64(settlement)
    status = _TOOL_ERROR if _is_error(result) else 200
    return httpx.Response(status, headers=headers, request=request, extensions={_RESULT: result})


class _ToolCalls:
    """One session's tool calls, each hop sent as the tool call it stands for."""

    def __init__(self, call_tool: Callable[..., Awaitable[Any]], options: PaymentOptions) -> None:
        self.call_tool = call_tool
        self.options = options

    async def send(self, request: httpx.Request) -> httpx.Response:
        """`Send` for the payer: call the tool (paid when the hop carries a payment)."""
        call: _ToolCall = request.extensions[_CALL]
        kwargs = call.sent_with(_payment_in(request))
        try:
            result = await self.call_tool(call.name, call.arguments, *call.args, **kwargs)
        except Exception as exc:
            # The JSON-RPC binding: error 402 with the PaymentRequired in `error.data`.
            required = _json_rpc_402(exc)
            if required is None:
                raise
            return _required_answer(required, request, None)
        return _answer(result, request, self.options.max_body_bytes)

    async def __call__(
        self,
        name: str,
        arguments: Any = None,
        *args: Any,
        x402: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        """The session's `call_tool`, paying a tool call answered with x402 payment
        requirements; a free tool's result comes back untouched. `x402`: this call's
        settings, what `extensions={"x402": ...}` is to an httpx request; without it, those
        of an enclosing `PaymentAdapter.settings(...)` block (the typed way: a session's
        `call_tool` signature is the SDK's and has no `x402`)."""
        if x402 is None:
            x402 = ADAPTER_SETTINGS.get()
        if x402 is not None:
            parse_settings(x402)  # a mistake is said before anything is sent
        call = _ToolCall(name, arguments, args, kwargs)
        extensions: dict[str, Any] = {_CALL: call}
        if x402 is not None:
            extensions[EXTENSION] = dict(x402)
        request = httpx.Request(
            "POST",
            f"mcp://tool/{quote(name, safe='')}",
            # JSON, said so: the journal keeps the arguments less their credentials.
            headers={"Content-Type": "application/json"},
            content=_json.dumps(arguments if arguments is not None else {}),
            extensions=extensions,
        )
        first = await self.send(request)
        if first.status_code != 402:
            return first.extensions[_RESULT]
        return await self._pay(request, first)

    async def _pay(self, request: httpx.Request, first: httpx.Response) -> Any:
        """Pay the 402 `first` stands for, within the truth boundary of this call."""
        guard = LogicalRequest.begin(request)
        payer = Payer(self.options)
        try:
            async with Boundary(guard):
                try:
                    answer = await payer.handle_402(guard, request, first, self.send)
                except Exception as exc:
                    _say_tool_error(exc)
                    raise
        finally:
            await payer.aclose()
        return _paid(answer.extensions.get(_RESULT), answer.extensions.get(RECEIPT_EXTENSION))


def _say_tool_error(exc: Exception) -> None:
    """An error about a tool error answering the paid call says so in MCP's words (the
    delivery rules speak of the status it stands for), with the tool's own text."""
    response = exc.response if isinstance(exc, X402Error) else None
    if response is None or response.status_code != _TOOL_ERROR or not exc.args:
        return
    content = getattr(response.extensions.get(_RESULT), "content", None) or []
    text = getattr(content[0], "text", None) if content else None
    said = f" ({text[:200]!r})" if isinstance(text, str) and text else ""
    exc.args = (
        str(exc.args[0]).replace(
            f"the merchant answered {_TOOL_ERROR} to the paid request instead of the resource",
            f"the tool answered the paid call with an error{said}",
        ),
        *exc.args[1:],
    )


def _paid(result: Any, receipt: PaymentReceipt | None) -> Any:
    """The tool's result, as a `PaidToolResult` carrying `receipt` when it was paid."""
    if receipt is None or not isinstance(result, BaseModel):
        return result
    if isinstance(result, PaidToolResult):
        return result.model_copy(update={"x402_payment": receipt})
    paid = _paid_class(type(result))
    values = {name: getattr(result, name) for name in type(result).model_fields}
    made = paid.model_construct(
        set(result.model_fields_set) | {"x402_payment"}, **values, x402_payment=receipt
    )
    if result.__pydantic_extra__ is not None:
        object.__setattr__(made, "__pydantic_extra__", dict(result.__pydantic_extra__))
    return made


def install(session: _Session, options: PaymentOptions | Mapping[str, Any] | None) -> _Session:
    """Install x402 payment on an MCP client `session` and return that same session.

    `session` is an `mcp.ClientSession` (`mcp` 1.19 or newer, 1.x or 2.x) or an `mcp.Client`
    (2.x), or any object whose `call_tool(name, arguments, ..., meta=...)` returns a
    `CallToolResult` of either generation (or a pydantic model with the same fields). From now
    on its `call_tool` pays a tool that answers with x402 payment requirements and hands
    back a `PaidToolResult` (the tool's result, of its own class, its receipt in
    `x402_payment`); a free
    tool's result, and every other method, are untouched. Everything else is
    `with_eur_payment`'s: `options` (a `PaymentOptions`, a mapping, or None for
    `PaymentOptions.from_env()`), the caps, budgets, hook, ledger, journal and errors.
    One options object shared with httpx clients spends one budget.

    Calling it again on the same session replaces the options.
    """
    resolved = coerce_options(options)
    installed = getattr(session, _INSTALLED, None)
    if isinstance(installed, _ToolCalls):
        installed.options = resolved
        return session
    call_tool = getattr(session, "call_tool", None)
    if not callable(call_tool):
        raise ConfigurationError(
            "with_eur_payment needs an MCP client session (mcp.ClientSession or "
            f"mcp.Client), not {type(session).__name__}"
        )
    calls = _ToolCalls(call_tool, resolved)
    object.__setattr__(session, _INSTALLED, calls)
    object.__setattr__(session, "call_tool", calls)
    return session
