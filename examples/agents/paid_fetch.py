"""What the framework tools of this directory share: one paying client with a budget and
an approval hook, and the words the model reads back.

`paid_fetch(client, url, max_price)` fetches a URL and pays at most `max_price` euros for
it; it returns one short string, never raises, and when a payment was refused or its
outcome is unknown it says whether money moved in words a model acts on:

    Not paid (BudgetExceeded): refusing to pay: ...; nothing was paid. No money moved.
    Payment outcome unknown (PaymentOutcomeUnknown): .... Money may have moved: do not
    pay for this again; ask the user to check the payments.

The framework files wrap it in their own kind of tool: `langchain_tool.py` (LangChain,
LangGraph), `openai_agents_tool.py` (the OpenAI Agents SDK), `pydantic_ai_tool.py`
(PydanticAI); `langchain_mcp_tools.py` pays the tools of an MCP server through LangChain's
MCP adapters. None of the frameworks is a dependency of x402-eur.

The examples read the payer from the environment (`PaymentOptions.from_env()`); against
the sandbox: `x402-eur-sandbox serve --env-file sandbox.env` in one shell, `. ./sandbox.env`
in the other, then `python examples/agents/<name>.py`.
"""

from __future__ import annotations

import contextvars
import os
from decimal import Decimal, InvalidOperation

import httpx

from x402_client import (
    Budget,
    DestinationGuard,
    PaymentIntent,
    PaymentOptions,
    PaymentReceipt,
    X402Error,
    with_eur_payment,
)

__all__ = [
    "agent_options",
    "approve",
    "in_words",
    "paid_fetch",
    "payer_options",
    "paying_client",
]

#: The budget of the agent: 0.25 EUR an hour, whatever the model asks for.
BUDGET = Budget("0.25", window=3600)

#: The price limit of the tool call in progress (euros); none set: pay nothing.
_call_limit: contextvars.ContextVar[Decimal] = contextvars.ContextVar(
    "call_limit", default=Decimal(0)
)


def approve(intent: PaymentIntent) -> bool:
    """`on_before_payment`: True only under the current call's limit. It runs inside the
    call's own task, so concurrent calls with different limits do not mix. This is also the
    place for approvals that need more than an amount: a list of merchants, a human."""
    return intent.amount <= _call_limit.get()


def payer_options() -> PaymentOptions:
    """The payer of the environment (`PaymentOptions.from_env()`)."""
    options = PaymentOptions.from_env()
    if options is None:
        raise SystemExit(
            "no payer configured: set the X402_EUR_* variables (the sandbox writes them: "
            "x402-eur-sandbox serve --env-file sandbox.env)"
        )
    return options


def agent_options() -> PaymentOptions:
    """The payer of the environment, with the agent's budget and approval hook."""
    return payer_options().model_copy(update={"budgets": [BUDGET], "on_before_payment": approve})


def paying_client(options: PaymentOptions) -> httpx.AsyncClient:
    """The one paying client every call shares (budgets, ledger and connections carry
    over). The model names the URLs, so the client reaches public addresses only, plus the
    hosts `X402_EUR_MCP_ALLOW_HOSTS` admits (the sandbox's, on 127.0.0.1): a prompt
    injection cannot send it to this machine or your network."""
    allowed = os.environ.get("X402_EUR_MCP_ALLOW_HOSTS", "")
    guard = DestinationGuard(tuple(host for host in allowed.split(",") if host))
    options = options.model_copy(update={"destination_guard": guard})
    client = httpx.AsyncClient(transport=guard.transport(), follow_redirects=True, timeout=60)
    return with_eur_payment(client, options)


def in_words(error: X402Error) -> str:
    """What the model reads when a payment did not complete: why, and whether money moved
    (`error.money_moved`: False, True or None for maybe)."""
    reason = str(error).splitlines()[0][:300].rstrip(".")
    if error.money_moved is False:
        return f"Not paid ({type(error).__name__}): {reason}. No money moved."
    if error.money_moved:
        return (
            f"Paid, but no answer ({type(error).__name__}): {reason}. Money moved: do not "
            "pay for this again; ask the user to check the payments."
        )
    return (
        f"Payment outcome unknown ({type(error).__name__}): {reason}. Money may have moved: "
        "do not pay for this again; ask the user to check the payments."
    )


async def paid_fetch(client: httpx.AsyncClient, url: str, max_price: str = "0.20") -> str:
    """Fetch `url`, paying at most `max_price` euros if it asks for payment: the answer,
    or why it failed and whether money moved, as one short string."""
    try:
        limit = Decimal(max_price)
    except InvalidOperation:
        limit = Decimal(-1)
    if not limit.is_finite() or limit < 0:
        return (
            f"max_price must be an amount in euros such as 0.20, not {max_price!r}. No money moved."
        )
    token = _call_limit.set(limit)
    try:
        response = await client.get(url)
    except X402Error as error:
        return in_words(error)
    except httpx.HTTPError as error:
        return f"Request failed ({type(error).__name__}): {error}. No money moved."
    finally:
        _call_limit.reset(token)
    receipt = PaymentReceipt.of(response)
    paid = "free" if receipt is None else f"paid {receipt.amount} {receipt.currency}"
    return f"HTTP {response.status_code}, {paid}: {response.text[:2000]}"
