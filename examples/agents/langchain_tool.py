"""A LangChain tool that pays (LangGraph's `ToolNode` and `create_react_agent` run the same
tool).

    pip install x402-eur langchain-core
    python examples/agents/langchain_tool.py      # with the sandbox's variables set

`fetch_tool(client)` is a `StructuredTool` over the paying httpx client of `paid_fetch.py`:
the model gives a URL and the most it will pay; the agent's budget (0.25 EUR an hour) and
the approval hook (`on_before_payment`: nothing above that price) decide, and the model
reads back the answer, or why nothing was paid, or that money may have moved.

Run as a script, it calls the tool as an agent would (`tool.ainvoke(arguments)`, no model)
against the sandbox merchant (`X402_EUR_SANDBOX_MERCHANT`): a price above the model's limit
(refused by the hook), then paid calls until the budget refuses.
"""

from __future__ import annotations

import asyncio
import os

import httpx
from langchain_core.tools import BaseTool, StructuredTool
from paid_fetch import agent_options, paid_fetch, paying_client


def fetch_tool(client: httpx.AsyncClient) -> BaseTool:
    """The paying fetch as a LangChain tool over `client`."""

    async def fetch_paid(url: str, max_price: str = "0.20") -> str:
        """Fetch a URL; if it asks for payment (x402), pay at most max_price euros."""
        return await paid_fetch(client, url, max_price)

    return StructuredTool.from_function(coroutine=fetch_paid, name="fetch_paid")


async def main() -> None:
    weather = os.environ["X402_EUR_SANDBOX_MERCHANT"] + "/weather"  # 0.10 EUR
    async with paying_client(agent_options()) as client:
        tool = fetch_tool(client)
        for max_price in ("0.05", "0.20", "0.20", "0.20"):
            said = await tool.ainvoke({"url": weather, "max_price": max_price})
            print(f"max {max_price}: {said}")


if __name__ == "__main__":
    asyncio.run(main())
