"""LangChain's MCP adapters, loading the tools of a paid MCP server through a paying session.

    pip install 'x402-eur[mcp,evm]' langchain-mcp-adapters
    python examples/agents/langchain_mcp_tools.py URL    # the paid MCP server's URL

`with_eur_payment(session, options)` installs payment on the `mcp` `ClientSession` the
adapters call (`mcp` 1.x, which they need, or 2.x), and `load_mcp_tools(session, ...)`
turns the server's tools into LangChain tools that pay when a tool asks for payment. The
agent's budget (0.10 EUR an hour) and the approval hook (`on_before_payment`: only the
tools the user approved, each up to its price) decide. The interceptor `money_in_words`
hands the model, instead of an exception, why a call was not paid or that money may have
moved (the words of `paid_fetch.in_words`), as the tool's error result.

Against the sandbox: `x402-eur-sandbox serve --evm --env-file sandbox.env` runs the
standard merchant's paid tool server (`weather`, 0.05 sEURC a call; the URL is in its
table), `. ./sandbox.env`, then run this with that URL. It calls the `weather` tool as a
LangGraph `ToolNode` does (`tool.ainvoke(tool_call)`, no model): before the user approved
the tool (refused by the hook), paid, a call the tool fails after the payment (money may
have moved), and one the budget refuses.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from decimal import Decimal
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_mcp_adapters.interceptors import MCPToolCallRequest
from langchain_mcp_adapters.tools import load_mcp_tools
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client
from mcp.types import CallToolResult, TextContent
from paid_fetch import in_words, payer_options

from x402_client import Budget, PaymentIntent, PaymentOptions, X402Error, with_eur_payment

#: The tools the user approved, each with the most one call may cost (EUR).
approved: dict[str, Decimal] = {}


def approve(intent: PaymentIntent) -> bool:
    """`on_before_payment`: only approved tools (`mcp://tool/{name}`), up to their price."""
    tool = intent.resource.removeprefix("mcp://tool/")
    return intent.amount <= approved.get(tool, Decimal(0))


def agent_options() -> PaymentOptions:
    budget = Budget("0.10", window=3600)
    return payer_options().model_copy(update={"budgets": [budget], "on_before_payment": approve})


async def money_in_words(
    request: MCPToolCallRequest, handler: Callable[[MCPToolCallRequest], Awaitable[Any]]
) -> Any:
    """A tool interceptor: a payment that did not complete becomes the tool's error result,
    in words the model reads, saying whether money moved."""
    try:
        return await handler(request)
    except X402Error as error:
        return CallToolResult(
            content=[TextContent(type="text", text=in_words(error))], isError=True
        )


async def call(tool: Any, number: int, city: str) -> str:
    """Call `tool` as a LangGraph `ToolNode` does, with a model's tool call: what the model
    reads back (and whether the tool message is an error)."""
    tool_call = {"type": "tool_call", "id": f"call_{number}", "name": tool.name}
    message: ToolMessage = await tool.ainvoke({**tool_call, "args": {"city": city}})
    return f"[{message.status}] {message.text}"


async def main(url: str) -> None:
    async with (
        streamablehttp_client(url) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        with_eur_payment(session, agent_options())
        tools = await load_mcp_tools(session, tool_interceptors=[money_in_words])
        weather = next(tool for tool in tools if tool.name == "weather")
        print("not approved yet:", await call(weather, 1, "Paris"))
        approved["weather"] = Decimal("0.05")  # the user approves the tool
        print("approved:", await call(weather, 2, "Paris"))
        print("the tool fails after the payment:", await call(weather, 3, ""))
        print("over the budget:", await call(weather, 4, "Berlin"))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(f"usage: python {sys.argv[0]} URL  (a paid MCP server)")
    asyncio.run(main(sys.argv[1]))
