"""One paid tool call on the 1.x MCP SDK's `ClientSession` (test helper).

Runs under the Python of the environment `tests/mcp1_client.py` builds (`mcp` 1.x and this
checkout), never under the project's own. Its one argument is JSON: `url` (the paid MCP
server's streamable HTTP endpoint), `key`, `chain_id`, `token` (the payer and its euro
token), `tool`, `arguments`, and optionally `max_amount_per_payment`. It installs payment on
the session with `with_eur_payment`, calls the tool once (for a free tool, once before
installing too) and prints one line of JSON: what came back or what was raised, and what
the ledger holds.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import importlib.util
import json
import sys
from typing import Any

from mcp import ClientSession, types
from mcp.client.streamable_http import streamablehttp_client

from x402_client import (
    Asset,
    EvmOptions,
    PaidToolResult,
    PaymentOptions,
    X402Error,
    payments,
    with_eur_payment,
)


def _options(call: dict[str, Any]) -> PaymentOptions:
    asset = Asset(chain_id=call["chain_id"], address=call["token"], symbol="EURC", currency="EUR")
    extra: dict[str, Any] = {}
    if "max_amount_per_payment" in call:
        extra["max_amount_per_payment"] = call["max_amount_per_payment"]
    return PaymentOptions(evm=EvmOptions(private_key=call["key"]), assets=[asset], **extra)


def _result(result: Any) -> dict[str, Any]:
    receipt = getattr(result, "x402_payment", None)
    return {
        "paid_tool_result": isinstance(result, PaidToolResult),
        "mcp1_call_tool_result": isinstance(result, types.CallToolResult),
        "is_error": result.isError,
        "text": result.content[0].text if result.content else None,
        "meta": result.meta,
        "dump": result.model_dump(mode="json", by_alias=True),
        "receipt": None
        if receipt is None
        else {
            "rail": receipt.rail,
            "network": receipt.network,
            "amount": str(receipt.amount),
            "currency": receipt.currency,
            "resource": receipt.resource,
            "tx_hash": receipt.tx_hash,
            "settled": (receipt.settlement or {}).get("success"),
        },
    }


async def _call(call: dict[str, Any]) -> dict[str, Any]:
    paying = _options(call)
    report: dict[str, Any] = {"mcp": importlib.metadata.version("mcp")}
    async with (
        streamablehttp_client(call["url"]) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        if call.get("unpaid_first"):
            report["unpaid"] = _result(await session.call_tool(call["tool"], call["arguments"]))
        report["installed_is_session"] = with_eur_payment(session, paying) is session
        try:
            report["result"] = _result(await session.call_tool(call["tool"], call["arguments"]))
        except X402Error as exc:
            report["error"] = {"type": type(exc).__name__, "money_moved": exc.money_moved}
    report["ledger"] = [entry.outcome for entry in payments(paying).ledger.entries()]
    report["mcp_types_installed"] = importlib.util.find_spec("mcp_types") is not None
    report["mcp_types_imported"] = "mcp_types" in sys.modules
    return report


if __name__ == "__main__":
    print(json.dumps(asyncio.run(_call(json.loads(sys.argv[1]))), default=str))
