"""The standard merchant's paid MCP tool server (`{standard.url}/mcp`): MCP over streamable
HTTP, selling tool calls for an EIP-3009 price in the merchant's token.

It speaks the x402 foundation's MCP transport (its tool-result binding, as `x402.mcp`'s
payment wrapper does):

* a call to a paid tool without a payment is answered with a tool error (`isError`) whose
  `structuredContent`, and `content[0].text` as JSON, is the x402 v2 `PaymentRequired`
  (`x402Version`, `error`, `resource` = `mcp://tool/{name}`, `accepts`);
* the paid call carries the payment payload (what an HTTP `PAYMENT-SIGNATURE` carries in
  base64) in `params._meta["x402/payment"]`; it is matched against the tool's
  requirements, verified by the standard merchant's facilitator (its EIP-3009 checks and
  `eth_call` simulation), the tool runs, and when it succeeded the payment is settled
  with `transferWithAuthorization` from the merchant's hot wallet;
* the tool's result carries the settlement in `_meta["x402/payment-response"]`
  (`{success, payer, transaction, network}`);
* a refusal is another payment-required tool error whose `error` says why; a failed
  settlement adds `x402/payment-response` (`success: false`) inside it; a tool error after
  the payment is answered as it is, and nothing is settled.

With the merchant's Solana routes (`svm=True`), `solana_weather` and `solana_weather_usdc`
are sold on Solana: their entries are `/solana/eurc`'s (sEURC on SPL Token) and
`/solana/usdc`'s (sUSDC on Token-2022), `extra.feePayer` the SVM facilitator's, and the
payment is verified and settled by the SVM facilitator, as the route's are.

Free tools (`echo`) answer without payment. The `mcp` package is imported on the first
request to `/mcp` only (`McpEndpoint`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from .__version__ import __version__
from ._hosted_mcp import McpEndpoint
from ._merchant import Price

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext
    from mcp.server.lowlevel import Server
    from mcp_types import (
        CallToolRequestParams,
        CallToolResult,
        ListToolsResult,
        PaginatedRequestParams,
    )

    from ._standard import StandardMerchant

__all__ = [
    "PAYMENT_META",
    "PAYMENT_RESPONSE_META",
    "SVM_TOOL_ROUTES",
    "TOOL_PRICES",
    "PaidToolServer",
    "echo",
    "tool_resource",
    "weather",
]

#: `params._meta` key of the payment payload on a paid tool call.
PAYMENT_META = "x402/payment"
#: `result._meta` key of the settlement (and, in a failed settlement, key inside the error).
PAYMENT_RESPONSE_META = "x402/payment-response"

#: The paid tools and their prices (in the standard merchant's token, sEURC).
TOOL_PRICES: dict[str, Price] = {
    "weather": Price(Decimal("0.05"), "Today's weather in a city, as an MCP tool"),
}

_CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
_TEXT = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}


def weather(arguments: Mapping[str, Any]) -> dict[str, Any]:
    city = arguments.get("city")
    if not isinstance(city, str) or not city:
        raise ValueError("city must be a non-empty string")
    return {"city": city[:100], "forecast": "sunny", "temperatureC": 21}


def echo(arguments: Mapping[str, Any]) -> dict[str, Any]:
    text = arguments.get("text")
    if not isinstance(text, str):
        raise ValueError("text must be a string")
    return {"text": text}


@dataclasses.dataclass(frozen=True)
class _Tool:
    description: str
    input_schema: dict[str, Any]
    handler: Callable[[Mapping[str, Any]], dict[str, Any]]


#: The tools sold on Solana, and the merchant route whose entry each is paid with.
SVM_TOOL_ROUTES: dict[str, str] = {
    "solana_weather": "/solana/eurc",
    "solana_weather_usdc": "/solana/usdc",
}

_TOOLS = {
    "weather": _Tool("Today's weather in a city (paid: x402)", _CITY, weather),
    "solana_weather": _Tool("Today's weather in a city (paid on Solana: x402)", _CITY, weather),
    "solana_weather_usdc": _Tool(
        "Today's weather in a city (paid on Solana in sUSDC, Token-2022: x402)", _CITY, weather
    ),
    "echo": _Tool("Echo the text back (free)", _TEXT, echo),
}


def tool_resource(name: str) -> str:
    """A tool call's resource URL, as the foundation's wrapper names it."""
    return f"mcp://tool/{name}"


def _result(body: Mapping[str, Any], *, error: bool, meta: Mapping[str, Any] | None = None) -> Any:
    from mcp_types import CallToolResult, TextContent

    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(body))],
        structured_content=dict(body),
        is_error=error,
        _meta=dict(meta) if meta else None,
    )


def _payment_of(meta: Any) -> dict[str, Any] | None:
    """The payment payload in `_meta["x402/payment"]` (an object, or its JSON text), when
    it is a v2 payload; None otherwise (the call is then unpaid, as the foundation reads it)."""
    raw = meta.get(PAYMENT_META) if isinstance(meta, Mapping) else None
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return None
    if not isinstance(raw, dict):
        return None
    version = raw.get("x402Version")
    if isinstance(version, bool) or version != 2:
        return None
    if not isinstance(raw.get("payload"), dict) or not isinstance(raw.get("accepted"), dict):
        return None
    return raw


class PaidToolServer(McpEndpoint):
    """The paid tool server of a `StandardMerchant`: `prices` maps tool names to `Price`;
    `settlements` keeps every successful `x402/payment-response`."""

    name = "the paid tool server"

    def __init__(self, merchant: StandardMerchant, prices: Mapping[str, Price] | None = None):
        super().__init__()
        self.merchant = merchant
        self.prices: dict[str, Price] = dict(TOOL_PRICES if prices is None else prices)
        if prices is None and getattr(merchant, "svm_paths", None):
            for tool, route in SVM_TOOL_ROUTES.items():
                self.prices[tool] = merchant.prices[route]
        self.settlements: list[dict[str, Any]] = []

    def requirements(self, name: str) -> dict[str, Any]:
        """The tool's one accept entry: `exact` EIP-3009 in the merchant's token, or its
        Solana route's entry."""
        from ._standard import TOKEN_NAME, TOKEN_VERSION
        from ._wire import to_atomic

        merchant = self.merchant
        if name in SVM_TOOL_ROUTES:
            assert merchant.solana is not None
            return dict(merchant.solana.accepts(SVM_TOOL_ROUTES[name])[0])
        return {
            "scheme": "exact",
            "network": merchant.network,
            "asset": merchant.token,
            "amount": str(to_atomic(self.prices[name].amount)),
            "payTo": merchant.pay_to,
            "maxTimeoutSeconds": merchant.max_timeout_seconds,
            "extra": {"name": TOKEN_NAME, "version": TOKEN_VERSION},
        }

    def payment_required(self, name: str, error: str) -> dict[str, Any]:
        return {
            "x402Version": 2,
            "error": error,
            "resource": {
                "url": tool_resource(name),
                "description": self.prices[name].description,
                "mimeType": "application/json",
            },
            "accepts": [self.requirements(name)],
        }

    async def call(self, name: str, arguments: Mapping[str, Any], meta: Any) -> Any:
        """One tool call: the `CallToolResult` to answer."""
        tool = _TOOLS.get(name)
        if tool is None:
            return _result({"error": f"no tool {name[:64]!r}"}, error=True)
        if name not in self.prices:
            return self._run(tool, arguments)
        payment = _payment_of(meta)
        if payment is None:
            return self._required(name, "Payment required to access this tool")
        return await self._paid_call(name, tool, arguments, payment)

    async def _paid_call(
        self, name: str, tool: _Tool, arguments: Mapping[str, Any], payment: dict[str, Any]
    ) -> Any:
        from ._standard import _Refusal, requirements_match

        requirements = self.requirements(name)
        if not requirements_match(requirements, payment["accepted"]):
            return self._required(name, "No matching payment requirements found")
        try:
            if name in SVM_TOOL_ROUTES:
                settle = await self.merchant._verify_svm(payment, requirements)
            else:
                settlement = await self.merchant.verify_eip3009(payment, requirements)
                settle = functools.partial(self.merchant.settle, settlement)
        except _Refusal as refusal:
            return self._required(name, refusal.reason)
        result = self._run(tool, arguments)
        if result.is_error:  # the foundation settles only a successful tool call
            return result
        try:
            settled = await settle()
        except _Refusal as refusal:
            return self._settlement_failed(name, refusal.reason)
        self.settlements.append(settled)
        result.meta = {**(result.meta or {}), PAYMENT_RESPONSE_META: settled}
        return result

    def _run(self, tool: _Tool, arguments: Mapping[str, Any]) -> Any:
        try:
            return _result(tool.handler(arguments), error=False)
        except ValueError as exc:
            return _result({"error": str(exc)}, error=True)

    def _required(self, name: str, error: str) -> Any:
        return _result(self.payment_required(name, error), error=True)

    def _settlement_failed(self, name: str, reason: str) -> Any:
        body = self.payment_required(name, f"Payment settlement failed: {reason}")
        body[PAYMENT_RESPONSE_META] = {
            "success": False,
            "errorReason": reason,
            "transaction": "",
            "network": self.merchant.network,
        }
        return _result(body, error=True)

    def build_server(self) -> Server[Any]:
        from mcp.server.lowlevel import Server
        from mcp_types import ListToolsResult, Tool

        tools = [
            Tool(name=name, description=tool.description, input_schema=tool.input_schema)
            for name, tool in _TOOLS.items()
        ]

        async def list_tools(
            ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
        ) -> ListToolsResult:
            return ListToolsResult(tools=tools)

        async def call_tool(
            ctx: ServerRequestContext[Any], params: CallToolRequestParams
        ) -> CallToolResult:
            result: CallToolResult = await self.call(
                params.name, params.arguments or {}, params.meta
            )
            return result

        return Server(
            "x402-eur-sandbox-paid-tools",
            version=__version__,
            instructions="Paid tools (x402): pay a payment-required tool error and call again.",
            on_list_tools=list_tools,
            on_call_tool=call_tool,
        )
