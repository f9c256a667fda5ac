"""`x402-eur-sandbox demo`: the sandbox on 127.0.0.1 and a paid fetch on every rail.

With chain A (unless `--no-bridge`): the chain-A entry is paid through the bridge, then
again from the payer's own chain-A wallet (path B), when the client has its `chain-a` extra.

The one module of this distribution that imports the x402-eur client: the demo is a paying
client of the sandbox, like any other.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections import defaultdict
from decimal import Decimal
from typing import Any

import httpx

from x402_client import X402Error, with_eur_payment

from ._chain_a import EURQ_ASSET_ID
from ._console import Out, anvil_problem, service_prices
from ._sandbox import Sandbox

__all__ = ["Paid", "Step", "money", "receipt_rows", "run_demo", "short", "summary_rows"]

#: The widest value a receipt row shows whole: with its label, a line fits 80 columns.
SHORT_WIDTH = 52


@dataclasses.dataclass(frozen=True)
class Paid:
    """One payment the demo made: on which step, how much, in which currency."""

    step: str
    amount: Decimal
    currency: str


def money(amount: Decimal | None, currency: str | None = None) -> str:
    """An amount as people read it: at least 2 decimals, no trailing zeros beyond them."""
    if amount is None:
        return "?"
    exponent = amount.normalize().as_tuple().exponent
    places = max(2, -exponent if isinstance(exponent, int) else 2)
    return f"{amount:.{places}f} {currency or ''}".rstrip()


def short(value: str, width: int = SHORT_WIDTH) -> str:
    """A long hash or address as its start and end, so that a row fits 80 columns."""
    if len(value) <= width:
        return value
    keep = width - 1
    return f"{value[: keep - keep // 3]}…{value[-(keep // 3) :]}"


def receipt_rows(receipt: Any) -> list[tuple[str, str]]:
    """A payment receipt as label/value rows; long hashes shortened to fit 80 columns."""
    rows = [
        ("rail", receipt.rail),
        ("scheme / network", f"{receipt.scheme} / {receipt.network}"),
        ("amount", money(receipt.amount, receipt.currency)),
        ("asset", short(receipt.asset)),
        ("paid to", short(receipt.pay_to)),
    ]
    authorized = getattr(receipt, "authorized_amount", None)
    if authorized is not None:
        rows.insert(3, ("authorized (at most)", money(authorized, receipt.currency)))
    for label, value in (
        ("payment request", receipt.payment_request_code),
        ("transaction code", receipt.transaction_code),
        ("chain tx id", receipt.blockchain_tx_id),
        ("tx hash", receipt.tx_hash),
        ("payer", receipt.payer),
        ("payment identifier", getattr(receipt, "payment_identifier", None)),
    ):
        if value:
            rows.append((label, short(str(value))))
    return rows


def summary_rows(paid: list[Paid], balances: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """What was paid on each step, the total per currency, and the balances left."""
    rows = [(item.step, money(item.amount, item.currency)) for item in paid]
    totals: dict[str, Decimal] = defaultdict(Decimal)
    for item in paid:
        totals[item.currency] += item.amount
    total = " + ".join(money(amount, currency) for currency, amount in sorted(totals.items()))
    rows.append(("total", total or "nothing paid"))
    return rows + balances


async def balances_left(sandbox: Sandbox) -> list[tuple[str, str]]:
    """The sandbox payer's balances: its managed account, and its tokens on each chain."""
    rows = [("payer account left", money(sandbox.balance(sandbox.payer), "EURO"))]
    scale = Decimal(10) ** 6  # EURQ and sEURC: 6 decimals
    if sandbox.evm is not None:
        for chain_id in sorted(sandbox.evm.nodes):
            atomic = await sandbox.evm.token_balance(chain_id, "EURQ", sandbox.evm.payer_address)
            rows.append((f"EVM payer left, chain {chain_id}", money(atomic / scale, "EURQ")))
    if sandbox.standard is not None:
        atomic = await sandbox.standard.token_balance(sandbox.standard.payer_address)
        rows.append(("EVM payer left, sEURC", money(atomic / scale, "sEURC")))
    if sandbox.chain_a is not None:
        chain = sandbox.chain_a
        atomic = chain.asset_balance(chain.payer_wallet.address, EURQ_ASSET_ID)
        rows.append(("chain-A wallet left", money(atomic / scale, "EURQ")))
    solana = sandbox.standard.solana if sandbox.standard is not None else None
    if solana is not None:
        atomic = solana.token_balance(solana.payer_address, "sEURC")
        rows.append(("Solana wallet left", money(atomic / scale, "sEURC")))
    return rows


@dataclasses.dataclass(frozen=True)
class Step:
    """One paid fetch of the demo: its title, its name in the summary, its URL."""

    title: str
    name: str
    url: str
    #: Send the paid proof again afterwards: a merchant deduplicating by the x402
    #: `payment-identifier` answers it with its first answer and settles nothing more.
    resend: bool = False


def _steps(sandbox: Sandbox, *, evm: bool, bridge: bool) -> list[Step]:
    steps = [Step("euro rail (managed account)", "euro rail", sandbox.url("/weather"))]
    if sandbox.solana is not None:
        steps.append(
            Step(
                "standard x402 v2 merchant, Solana (sEURC on SPL Token, own wallet)",
                "standard x402, Solana",
                sandbox.standard.resource_url("/solana/eurc"),
            )
        )
    if evm:
        steps += [
            Step(
                "EVM permit rail, chain 137",
                "EVM permit, chain 137",
                sandbox.url("/paid/evm-polygon"),
            ),
            Step(
                "EVM permit rail, chain 1", "EVM permit, chain 1", sandbox.url("/paid/evm-mainnet")
            ),
            Step(
                "standard x402 v2 merchant, EIP-3009 euro token on chain 137",
                "standard x402, EIP-3009",
                sandbox.standard.resource_url("/weather"),
            ),
            Step(
                "standard x402 v2 merchant, Permit2 (any ERC-20) on chain 137",
                "standard x402, Permit2",
                sandbox.standard.resource_url("/permit2"),
            ),
            Step(
                "standard x402 v2 merchant, upto (charged by use) on chain 137",
                "standard x402, upto",
                sandbox.standard.resource_url("/metered"),
            ),
            Step(
                "standard x402 v2 merchant, payment identifier required",
                "standard x402, identifier",
                sandbox.standard.resource_url("/order"),
                resend=True,
            ),
        ]
    if bridge:
        steps.append(
            Step(
                "bridge rail (EURO -> EURQ on chain A)",
                "bridge to chain A",
                sandbox.url("/paid/bridge"),
            )
        )
    return steps


async def _pay_each(
    out: Out, sandbox: Sandbox, client: httpx.AsyncClient, steps: list[Step],
    progress: Any,
) -> tuple[list[Paid], int]:  # fmt: skip
    """Fetch each step's URL, paying as the merchant asks: what was paid, and the number
    of failures."""
    failures = 0
    paid: list[Paid] = []
    for step in steps:
        out.title(f"{step.title}: GET {httpx.URL(step.url).path}")
        before = sandbox.balance(sandbox.payer)
        try:
            if "bridge" in step.title and progress is not None:
                with progress:
                    response = await client.get(step.url)
            else:
                response = await client.get(step.url)
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
        paid.append(Paid(step.name, receipt.amount, receipt.currency))
        if step.resend:
            failures += await _resend(out, sandbox, client, step, receipt)
        after = sandbox.balance(sandbox.payer)
        if after != before:
            out.line(f"payer EURO balance {money(before)} -> {money(after)}")
    return paid, failures


async def _resend(
    out: Out, sandbox: Sandbox, client: httpx.AsyncClient, step: Step, receipt: Any
) -> int:
    """Send the paid proof of `step` again, as after a lost answer: the merchant answers it
    from its first answer by the payment identifier and settles nothing more. The number
    of failures (0 or 1)."""
    standard = sandbox.standard
    settled = len(standard.settlements)
    balance = await standard.token_balance(standard.payer_address)
    again = await client.get(step.url, extensions={"x402": {"proof": receipt.proof}})
    same = again.extensions.get("x402_payment")
    once = len(standard.settlements) == settled
    unchanged = await standard.token_balance(standard.payer_address) == balance
    if again.status_code != 200 or same is None or not (once and unchanged):
        out.line(f"re-sent proof: HTTP {again.status_code}, settled again?", style="red")
        return 1
    out.line(
        f"re-sent the same proof: HTTP {again.status_code}, the merchant's first answer "
        "(same payment identifier), settled once, balance unchanged"
    )
    return 0


def mcp_problem() -> str | None:
    """Why the demo cannot call a paid MCP tool here (the `mcp` package missing), or None."""
    import importlib.util

    if importlib.util.find_spec("mcp") is None:
        return "it needs the client's mcp extra: pip install 'x402-eur[mcp]'"
    return None


async def _pay_tool(out: Out, sandbox: Sandbox, config: dict[str, Any]) -> tuple[list[Paid], int]:
    """A paid MCP tool call: the standard merchant's `weather` tool, through
    `with_eur_payment` on `mcp`'s client, with the same settings as the HTTP client."""
    from mcp import Client

    from x402_client import with_eur_payment

    url = sandbox.paid_tool_server_url
    out.title(f"paid MCP tool call, x402 MCP transport: weather at {httpx.URL(url).path}")
    try:
        async with Client(url) as client:
            with_eur_payment(client, config)
            result = await client.call_tool("weather", {"city": "Amsterdam"})
    except X402Error as exc:
        out.line(f"payment failed: {type(exc).__name__}: {exc}", style="red")
        return [], 1
    receipt = getattr(result, "x402_payment", None)
    first = result.content[0] if result.content else None
    out.line(f"tool result: {getattr(first, 'text', '')}")
    if receipt is None:
        out.line("no payment was needed?", style="red")
        return [], 1
    out.table(receipt_rows(receipt))
    return [Paid("paid MCP tool (weather)", receipt.amount, receipt.currency)], 0


async def _pay_session(out: Out, sandbox: Sandbox) -> tuple[list[Paid], int]:
    """Three requests to the batch-settlement merchant in one session: one deposit into
    the escrow, a voucher per request for the running total, then the refund of what the
    vouchers did not spend, read from the chain."""
    from x402_client import payments

    url = sandbox.batch.merchant.resource_url("/stream")
    out.title(f"session (batch-settlement) on chain 137: 3 x GET {httpx.URL(url).path}, refund")
    async with with_eur_payment(httpx.AsyncClient(timeout=30), sandbox.payment_config()) as client:
        try:
            receipts = []
            for number in range(1, 4):
                response = await client.get(url)
                receipt = response.extensions.get("x402_payment")
                if response.status_code != 200 or receipt is None:
                    out.line(f"request {number}: HTTP {response.status_code}, unpaid?", style="red")
                    return [], 1
                if number == 1:
                    (session,) = await payments(client).sessions()
                    deposit = Decimal(session.deposited).scaleb(-session.decimals)
                    out.line(
                        f"deposit: {money(deposit, receipt.currency)} into the escrow, session "
                        f"{short(session.channel_id, 24)}"
                    )
                cumulative = money(receipt.cumulative_amount, receipt.currency)
                out.line(
                    f"voucher {number}: +{money(receipt.amount, receipt.currency)}, "
                    f"running total {cumulative}"
                )
                receipts.append(receipt)
            refund = await payments(client).refund_session(receipts[0].channel_id)
        except X402Error as exc:
            out.line(f"session failed: {type(exc).__name__}: {exc}", style="red")
            return [], 1
    out.line(
        f"refund: {money(refund.refunded, refund.currency)} back to the payer, "
        f"{money(refund.charged, refund.currency)} kept by the merchant"
        + (", closed" if refund.closed else "")
    )
    spent = sum((r.amount for r in receipts), Decimal(0))
    return [Paid("session (3 vouchers)", spent, receipts[0].currency)], 0


def svm_problem() -> str | None:
    """Why the demo runs no Solana chain here (`solders` missing), or None."""
    import importlib.util

    if importlib.util.find_spec("solders") is None:
        return "it needs the svm extra: pip install 'x402-eur-sandbox[svm]' 'x402-eur[svm]'"
    return None


def chain_a_problem() -> str | None:
    """Why the client cannot pay from a chain-A wallet here (its extra missing), or None."""
    import importlib.util

    if importlib.util.find_spec("algosdk") is None:
        return "it needs the client's chain-a extra: pip install 'x402-eur[chain-a]'"
    return None


async def _pay_from_wallet(out: Out, sandbox: Sandbox) -> tuple[list[Paid], int]:
    """Path B: the chain-A entry again, paid from the payer's own chain-A wallet (a signed
    transfer the merchant's on-chain facilitator settles), not through the bridge."""
    step = Step(
        "chain A from your own wallet, no bridge",
        "chain A, own wallet",
        sandbox.url("/paid/bridge"),
    )
    config = sandbox.payment_config(chain_a=sandbox.chain_a.chain_a_config())
    async with with_eur_payment(httpx.AsyncClient(timeout=30), config) as client:
        return await _pay_each(out, sandbox, client, [step], None)


async def run_demo(args: argparse.Namespace) -> int:
    out = Out()
    evm_problem = None if args.no_evm else anvil_problem()
    use_evm = not args.no_evm and evm_problem is None
    solana_problem = svm_problem() if use_evm else None
    bridge = not args.no_bridge
    out.title("x402-eur-sandbox demo: starting the sandbox on 127.0.0.1")
    async with Sandbox(
        prices=service_prices(evm=use_evm, chain_a=bridge),
        evm=use_evm,
        chain_a=bridge,
        bridge_delay=60.0 if args.realistic else 3.0,
        standard=use_evm,
        svm=use_evm and solana_problem is None,
        batch_settlement=use_evm,
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
            paid, failures = await _pay_each(out, sandbox, client, steps, progress)
        if use_evm:
            session, failed = await _pay_session(out, sandbox)
            paid, failures = paid + session, failures + failed
        tool_problem = mcp_problem() if use_evm else None
        if use_evm and tool_problem is None:
            tool, failed = await _pay_tool(out, sandbox, sandbox.payment_config())
            paid, failures = paid + tool, failures + failed
        wallet_problem = chain_a_problem() if bridge else None
        if bridge and wallet_problem is None:
            direct, failed = await _pay_from_wallet(out, sandbox)
            paid, failures = paid + direct, failures + failed
        for skipped, problem in (("EVM rail", evm_problem), ("Solana", solana_problem)):
            if problem is not None:
                out.line(f"{skipped} skipped: {problem}", style="yellow")
        if wallet_problem is not None:
            out.line(f"chain-A wallet skipped: {wallet_problem}", style="yellow")
        if tool_problem is not None:
            out.line(f"paid MCP tool skipped: {tool_problem}", style="yellow")
        out.title("summary" if failures == 0 else f"summary: {failures} payment(s) failed")
        out.table(summary_rows(paid, await balances_left(sandbox)))
        return 1 if failures else 0
