"""An OpenAI Agents SDK function tool that pays.

    pip install x402-eur openai-agents
    python examples/agents/openai_agents_tool.py      # with the sandbox's variables set

`fetch_tool(client)` is a `FunctionTool` over the paying httpx client of `paid_fetch.py`:
the model gives a URL and the most it will pay; the agent's budget (0.25 EUR an hour) and
the approval hook (`on_before_payment`: nothing above that price) decide, and the model
reads back the answer, or why nothing was paid, or that money may have moved. Hand it to
`Agent(tools=[fetch_tool(client)], ...)`.

Run as a script, it calls the tool as the SDK's runner does (`on_invoke_tool` with the
model's JSON arguments, no model) against the sandbox merchant
(`X402_EUR_SANDBOX_MERCHANT`): a price above the model's limit (refused by the hook),
then paid calls until the budget refuses.
"""

from __future__ import annotations

import asyncio
import json
import os

import httpx
from agents import FunctionTool, function_tool
from agents.tool_context import ToolContext
from paid_fetch import agent_options, paid_fetch, paying_client


def fetch_tool(client: httpx.AsyncClient) -> FunctionTool:
    """The paying fetch as an Agents SDK function tool over `client`."""

    async def fetch_paid(url: str, max_price: str) -> str:
        """Fetch a URL; if it asks for payment (x402), pay at most max_price euros.

        Args:
            url: The http(s) URL to fetch.
            max_price: The most to pay, in euros (for example 0.20).
        """
        return await paid_fetch(client, url, max_price)

    return function_tool(fetch_paid)


async def main() -> None:
    weather = os.environ["X402_EUR_SANDBOX_MERCHANT"] + "/weather"  # 0.10 EUR
    async with paying_client(agent_options()) as client:
        tool = fetch_tool(client)
        for number, max_price in enumerate(("0.05", "0.20", "0.20", "0.20")):
            arguments = json.dumps({"url": weather, "max_price": max_price})
            context = ToolContext(
                context=None,
                tool_name=tool.name,
                tool_call_id=f"call_{number}",
                tool_arguments=arguments,
            )
            said = await tool.on_invoke_tool(context, arguments)
            print(f"max {max_price}: {said}")


if __name__ == "__main__":
    asyncio.run(main())
