"""A PydanticAI agent tool that pays.

    pip install x402-eur pydantic-ai-slim
    python examples/agents/pydantic_ai_tool.py      # with the sandbox's variables set

`agent` has one tool, `fetch_paid`, whose dependency is the paying httpx client of
`paid_fetch.py` (`agent.run(..., deps=client)`): the model gives a URL and the most it
will pay; the agent's budget (0.25 EUR an hour) and the approval hook
(`on_before_payment`: nothing above that price) decide, and the model reads back the
answer, or why nothing was paid, or that money may have moved.

Run as a script, the agent runs on a `FunctionModel` that stands in for the model (it
calls the tool with the arguments given, then answers with what the tool returned; no
LLM) against the sandbox merchant (`X402_EUR_SANDBOX_MERCHANT`): a price above the
model's limit (refused by the hook), then paid calls until the budget refuses.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import httpx
from paid_fetch import agent_options, paid_fetch, paying_client
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

agent = Agent(deps_type=httpx.AsyncClient, instructions="Fetch what the user asks for.")


@agent.tool
async def fetch_paid(ctx: RunContext[httpx.AsyncClient], url: str, max_price: str) -> str:
    """Fetch a URL; if it asks for payment (x402), pay at most max_price euros.

    Args:
        url: The http(s) URL to fetch.
        max_price: The most to pay, in euros (for example 0.20).
    """
    return await paid_fetch(ctx.deps, url, max_price)


def calling(arguments: dict[str, Any]) -> FunctionModel:
    """A stand-in model: calls `fetch_paid` with `arguments`, then answers with its return."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        if isinstance(last, ModelRequest):
            for part in last.parts:
                if isinstance(part, ToolReturnPart):
                    return ModelResponse(parts=[TextPart(part.model_response_str())])
        return ModelResponse(parts=[ToolCallPart("fetch_paid", arguments)])

    return FunctionModel(respond)


async def main() -> None:
    weather = os.environ["X402_EUR_SANDBOX_MERCHANT"] + "/weather"  # 0.10 EUR
    async with paying_client(agent_options()) as client:
        for max_price in ("0.05", "0.20", "0.20", "0.20"):
            model = calling({"url": weather, "max_price": max_price})
            run = await agent.run("What is the weather?", deps=client, model=model)
            print(f"max {max_price}: {run.output}")


if __name__ == "__main__":
    asyncio.run(main())
