"""A paying HTTP tool for an agent framework, run against the built-in sandbox.

    python examples/agent_tool.py

`paid_get(url, max_price)` is the plain async function you register as a tool (LangChain,
the OpenAI Agents SDK, PydanticAI, ... all accept one). It shares one paying client across
calls, so budgets, the ledger and connections carry over, and it returns a dict the model
reads, saying whether money moved when something went wrong.

Each call's price limit reaches the approval hook through a `ContextVar`: the hook runs
inside the call's own task, so concurrent calls with different limits do not mix, and no
shared object is changed per call. (The per-request extension
`{"x402": {"max_amount_per_payment": ...}}` does the same without a hook; the hook is the
place for approvals that need more than an amount: a list of merchants, a human.)

Against a real merchant, build the options with `PaymentOptions.from_env(...)` instead.
"""

from __future__ import annotations

import asyncio
import contextvars
from decimal import Decimal
from typing import Any

import httpx

from x402_client import (
    Budget,
    DestinationGuard,
    PaymentIntent,
    PaymentOptions,
    X402Error,
    with_eur_payment,
)
from x402_eur_sandbox import Sandbox

#: The price limit of the tool call in progress (euros); none set: pay nothing.
_call_limit: contextvars.ContextVar[Decimal] = contextvars.ContextVar(
    "call_limit", default=Decimal(0)
)
_client: httpx.AsyncClient | None = None


def approve(intent: PaymentIntent) -> bool:
    """`on_before_payment`: True only under the current call's limit (anything else refuses)."""
    return intent.amount <= _call_limit.get()


def open_tool(options: PaymentOptions, allow_hosts: tuple[str, ...] = ()) -> None:
    """Make the one paying client every call shares (at agent start-up). The model names
    the URLs, so the client reaches public addresses only (`DestinationGuard`), plus the
    hosts you admit: a prompt injection cannot send it to this machine or your network."""
    global _client
    guard = DestinationGuard(allow_hosts)
    options = options.model_copy(update={"on_before_payment": approve, "destination_guard": guard})
    client = httpx.AsyncClient(transport=guard.transport(), follow_redirects=True, timeout=60)
    _client = with_eur_payment(client, options)


async def close_tool() -> None:
    if _client is not None:
        await _client.aclose()


async def paid_get(url: str, max_price: str = "0.20") -> dict[str, Any]:
    """Fetch `url`, paying at most `max_price` euros if it asks for payment.

    Returns `{"ok", "status", "body", "paid"}` or, when it failed,
    `{"ok": False, "error", "money_moved"}` (False: nothing was paid; True or None: do not
    retry blindly, the payment may have gone through).
    """
    assert _client is not None, "call open_tool(options) first"
    token = _call_limit.set(Decimal(max_price))
    try:
        response = await _client.get(url)
    except X402Error as exc:
        return {
            "ok": False,
            "error": f"{type(exc).__name__}: {exc}",
            "money_moved": exc.money_moved,
        }
    except httpx.HTTPError as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}", "money_moved": False}
    finally:
        _call_limit.reset(token)
    receipt = response.extensions.get("x402_payment")
    return {
        "ok": response.is_success,
        "status": response.status_code,
        "body": response.text[:2000],
        "paid": None if receipt is None else f"{receipt.amount} {receipt.currency}",
    }


async def main() -> None:
    async with Sandbox() as sandbox:
        # The sandbox payer; a budget is still a good idea for an agent: 1 EUR per hour.
        open_tool(
            PaymentOptions.model_validate(
                sandbox.payment_config(budgets=[Budget("1.00", window=3600)])
            ),
            allow_hosts=tuple(sandbox.hosts),  # the sandbox runs on 127.0.0.1
        )
        try:
            print(await paid_get(sandbox.url("/weather"), max_price="0.20"))  # 0.10: paid
            print(await paid_get(sandbox.url("/report"), max_price="0.20"))  # 0.50: refused
        finally:
            await close_tool()
        print(f"payer balance: {sandbox.balance(sandbox.payer)} EURO")


if __name__ == "__main__":
    asyncio.run(main())
