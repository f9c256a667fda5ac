"""`x402-eur-sandbox demo`: the sandbox on 127.0.0.1 and a paid fetch on every rail.

The one module of this distribution that imports the x402-eur client: the demo is a paying
client of the sandbox, like any other.
"""

from __future__ import annotations

import argparse
from decimal import Decimal
from typing import Any

import httpx

from x402_client import X402Error, with_eur_payment

from ._sandbox import Sandbox
from .cli import Out, anvil_problem, service_prices

__all__ = ["money", "receipt_rows", "run_demo"]


def money(amount: Decimal | None, currency: str | None = None) -> str:
    """An amount as people read it: at least 2 decimals, no trailing zeros beyond them."""
    if amount is None:
        return "?"
    exponent = amount.normalize().as_tuple().exponent
    places = max(2, -exponent if isinstance(exponent, int) else 2)
    return f"{amount:.{places}f} {currency or ''}".rstrip()


def receipt_rows(receipt: Any) -> list[tuple[str, str]]:
    """A payment receipt as label/value rows."""
    rows = [
        ("rail", receipt.rail),
        ("scheme / network", f"{receipt.scheme} / {receipt.network}"),
        ("amount", money(receipt.amount, receipt.currency)),
        ("asset", receipt.asset),
        ("paid to", receipt.pay_to),
    ]
    for label, value in (
        ("payment request", receipt.payment_request_code),
        ("transaction code", receipt.transaction_code),
        ("chain tx id", receipt.blockchain_tx_id),
        ("tx hash", receipt.tx_hash),
        ("payer", receipt.payer),
    ):
        if value:
            rows.append((label, str(value)))
    return rows


def _steps(sandbox: Sandbox, *, evm: bool, bridge: bool) -> list[tuple[str, str]]:
    steps = [("euro rail (managed account)", sandbox.url("/weather"))]
    if evm:
        steps += [
            ("EVM permit rail, chain 137", sandbox.url("/paid/evm-polygon")),
            ("EVM permit rail, chain 1", sandbox.url("/paid/evm-mainnet")),
            (
                "standard x402 v2 merchant, EIP-3009 euro token on chain 137",
                sandbox.standard.resource_url("/weather"),
            ),
        ]
    if bridge:
        steps.append(("bridge rail (EURO -> EURQ on chain A)", sandbox.url("/paid/bridge")))
    return steps


async def _pay_each(
    out: Out, sandbox: Sandbox, client: httpx.AsyncClient, steps: list[tuple[str, str]],
    progress: Any,
) -> int:  # fmt: skip
    """Fetch each step's URL, paying as the merchant asks; the number of failures."""
    failures = 0
    for title, url in steps:
        out.title(f"{title}: GET {httpx.URL(url).path}")
        before = sandbox.balance(sandbox.payer)
        try:
            if "bridge" in title and progress is not None:
                with progress:
                    response = await client.get(url)
            else:
                response = await client.get(url)
        except X402Error as exc:
            failures += 1
            out.line(f"payment failed: {type(exc).__name__}: {exc}", style="red")
            continue
        out.line(f"HTTP {response.status_code}: {response.text.strip()}")
        receipt = response.extensions.get("x402_payment")
        if receipt is None:
            failures += 1
            out.line("no payment was needed?", style="red")
            continue
        out.table(receipt_rows(receipt))
        after = sandbox.balance(sandbox.payer)
        if after != before:
            out.line(f"payer EURO balance {money(before)} -> {money(after)}")
    return failures


async def run_demo(args: argparse.Namespace) -> int:
    out = Out()
    evm_problem = None if args.no_evm else anvil_problem()
    use_evm = not args.no_evm and evm_problem is None
    bridge = not args.no_bridge
    out.title("x402-eur-sandbox demo: starting the sandbox on 127.0.0.1")
    async with Sandbox(
        prices=service_prices(evm=use_evm, chain_a=bridge),
        evm=use_evm,
        chain_a=bridge,
        bridge_delay=60.0 if args.realistic else 3.0,
        standard=use_evm,
    ) as sandbox:
        payer = f"{sandbox.payer.code} ({money(sandbox.balance(sandbox.payer))} EURO)"
        out.table(
            [
                ("merchant", sandbox.merchant_url),
                ("payment API", sandbox.payment_api_url),
                ("facilitator", sandbox.mcp_url + "/x402"),
                ("payer account", payer),
            ]
        )
        on_progress = progress = None
        if bridge:
            from x402_client.progress import bridge_progress_display

            on_progress, progress = bridge_progress_display(console=out.console)
        config = sandbox.payment_config(on_progress=on_progress)
        async with with_eur_payment(httpx.AsyncClient(timeout=30), config) as client:
            steps = _steps(sandbox, evm=use_evm, bridge=bridge)
            failures = await _pay_each(out, sandbox, client, steps, progress)
        if evm_problem is not None:
            out.line(f"EVM rail skipped: {evm_problem}", style="yellow")
        out.title("done" if failures == 0 else f"{failures} payment(s) failed")
        return 1 if failures else 0
