"""The `x402-eur` command line: `demo`, `fetch` and `sandbox`.

- `x402-eur demo`: starts the sandbox and pays for resources on every rail it can run
  (euro; EVM permit when anvil is installed; the bridge with a live progress display).
- `x402-eur fetch URL`: curl with payment, configured from the environment
  (`PaymentOptions.from_env()`); the body goes to stdout, the receipt to stderr.
- `x402-eur sandbox`: runs the sandbox until Ctrl-C and prints its URLs, credentials and
  the `export` lines that make `fetch` pay from the sandbox payer.

Heavy imports happen inside the commands, so `x402-eur --help` stays fast.

Exit codes: 0 success; 1 an error (network, configuration); 2 a usage mistake; 3 the
payment was refused or failed (an `X402Error`: the message says whether money moved); 22
the server answered an HTTP error status (as curl's `--fail`). Every mistake is answered
in one or two lines; `--debug` shows the traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

__all__ = ["main"]


class _Out:
    """Rich output when the `cli` extra is installed, plain lines otherwise."""

    def __init__(self) -> None:
        try:
            from rich.console import Console
        except ImportError:
            self.console: Any = None
        else:
            self.console = Console(highlight=False)

    def title(self, text: str) -> None:
        if self.console is not None:
            self.console.rule(f"[bold]{text}")
        else:
            print(f"\n== {text} ==")

    def line(self, text: str = "", style: str | None = None) -> None:
        if self.console is not None:
            self.console.print(text, style=style, markup=False)
        else:
            print(text)

    def table(self, rows: Sequence[tuple[str, str]]) -> None:
        if self.console is not None:
            from rich.table import Table

            table = Table(show_header=False, box=None, pad_edge=False)
            table.add_column(style="dim")
            table.add_column()
            for key, value in rows:
                table.add_row(key, value)
            self.console.print(table)
        else:
            width = max(len(k) for k, _ in rows)
            for key, value in rows:
                print(f"  {key.ljust(width)}  {value}")


def _receipt_rows(receipt: Any) -> list[tuple[str, str]]:
    from ._amounts import format_amount

    rows = [
        ("rail", receipt.rail),
        ("scheme / network", f"{receipt.scheme} / {receipt.network}"),
        ("amount", f"{format_amount(receipt.amount)} {receipt.currency}"),
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


# --- demo ----------------------------------------------------------------------------------


def _demo_prices() -> dict[str, Any]:
    from .sandbox import DEFAULT_PRICES, Price

    return {
        **DEFAULT_PRICES,
        "/paid/evm-polygon": Price(
            Decimal("0.25"), "EVM permit on chain 137", rails=("eip155:137",)
        ),
        "/paid/evm-mainnet": Price(Decimal("0.25"), "EVM permit on chain 1", rails=("eip155:1",)),
        "/paid/bridge": Price(Decimal("0.30"), "Bridged to chain A", rails=("ledgera",)),
    }


def _anvil_problem() -> str | None:
    try:
        from .sandbox._anvil import find_anvil

        find_anvil()
    except (ImportError, RuntimeError) as exc:
        return str(exc)
    return None


async def _demo(args: argparse.Namespace) -> int:
    import httpx

    from . import X402Error, with_eur_payment
    from ._amounts import format_amount
    from .sandbox import Sandbox

    out = _Out()
    evm_problem = None if args.no_evm else _anvil_problem()
    use_evm = not args.no_evm and evm_problem is None
    bridge_delay = 60.0 if args.realistic else 3.0
    out.title("x402-eur demo: starting the sandbox on 127.0.0.1")
    async with Sandbox(
        prices=_demo_prices(), evm=use_evm, chain_a=not args.no_bridge, bridge_delay=bridge_delay
    ) as sandbox:
        rows = [
            ("merchant", sandbox.merchant_url),
            ("payment API", sandbox.payment_api_url),
            ("facilitator", sandbox.mcp_url + "/x402"),
            (
                "payer account",
                f"{sandbox.payer.code} ({format_amount(sandbox.balance(sandbox.payer))} EURO)",
            ),
        ]
        out.table(rows)
        failures = 0
        progress_cm: Any = None
        on_progress = None
        if not args.no_bridge:
            from ._cli_progress import bridge_progress_display

            on_progress, progress_cm = bridge_progress_display(console=out.console)
        options = sandbox.payment_options(on_progress=on_progress)
        async with with_eur_payment(httpx.AsyncClient(timeout=30), options) as client:
            steps: list[tuple[str, str]] = [("euro rail (managed account)", "/weather")]
            if use_evm:
                steps += [
                    ("EVM permit rail, chain 137", "/paid/evm-polygon"),
                    ("EVM permit rail, chain 1", "/paid/evm-mainnet"),
                ]
            if not args.no_bridge:
                steps.append(("bridge rail (EURO -> EURQ on chain A)", "/paid/bridge"))
            for title, path in steps:
                out.title(f"{title}: GET {path}")
                before = sandbox.balance(sandbox.payer)
                try:
                    if "bridge" in title and progress_cm is not None:
                        with progress_cm:
                            response = await client.get(sandbox.url(path))
                    else:
                        response = await client.get(sandbox.url(path))
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
                out.table(_receipt_rows(receipt))
                after = sandbox.balance(sandbox.payer)
                if after != before:
                    out.line(
                        f"payer EURO balance {format_amount(before)} -> {format_amount(after)}"
                    )
        if evm_problem is not None:
            out.line(f"EVM rail skipped: {evm_problem}", style="yellow")
        out.title("done" if failures == 0 else f"{failures} payment(s) failed")
        return 1 if failures else 0


# --- fetch ---------------------------------------------------------------------------------


async def _fetch(args: argparse.Namespace) -> int:
    import httpx

    from . import PaymentOptions, X402Error, with_eur_payment

    overrides: dict[str, Any] = {}
    if args.max_amount:
        overrides["max_amount_per_payment"] = args.max_amount
    if args.confirm:

        def confirm(intent: Any) -> bool:
            sys.stderr.write(
                f"Pay {intent.amount} {intent.currency} to {intent.pay_to} "
                f"for {intent.resource}? [y/N] "
            )
            sys.stderr.flush()
            return sys.stdin.readline().strip().lower() in ("y", "yes")

        overrides["on_before_payment"] = confirm
    options = PaymentOptions.from_env(**overrides)
    content = args.data.encode() if args.data is not None else None
    async with with_eur_payment(
        httpx.AsyncClient(follow_redirects=True, timeout=60), options
    ) as client:
        try:
            async with client.stream(
                args.method,
                args.url,
                headers=args.header,
                content=content,
            ) as response:
                async for chunk in response.aiter_bytes():
                    sys.stdout.buffer.write(chunk)
                sys.stdout.flush()
                receipt = response.extensions.get("x402_payment")
                sys.stderr.write(f"\nHTTP {response.status_code}\n")
                if receipt is not None:
                    for key, value in _receipt_rows(receipt):
                        sys.stderr.write(f"  {key}: {value}\n")
                return 0 if response.status_code < 400 else 22
        except X402Error as exc:
            sys.stderr.write(f"x402-eur: {type(exc).__name__}: {exc}\n")
            if exc.money_moved is not False:
                sys.stderr.write("x402-eur: money moved (or may have): see the ledger\n")
            return 3


# --- sandbox -------------------------------------------------------------------------------


async def _sandbox(args: argparse.Namespace) -> int:
    from .sandbox import Sandbox

    out = _Out()
    async with Sandbox(
        prices=_demo_prices(),
        evm=args.evm,
        chain_a=args.chain_a,
        bridge_delay=args.bridge_delay,
        confirmation_delay=args.confirmation_delay,
    ) as sandbox:
        out.title("x402-eur sandbox (Ctrl-C to stop)")
        rows = [
            ("merchant", sandbox.merchant_url),
            ("paid resources", ", ".join(sorted(sandbox.prices))),
            ("payment API", sandbox.payment_api_url),
            ("facilitator (mcp)", sandbox.mcp_url + "/x402"),
            ("payer account", sandbox.payer.code),
            ("payer API key", sandbox.payer.api_key),
            ("merchant account", sandbox.merchant.code),
        ]
        out.table(rows)
        out.line("\n# make `x402-eur fetch` pay from the sandbox payer:")
        for key, value in sandbox.env().items():
            out.line(f"export {key}={value}")
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.Event().wait()
    return 0


class _UsageError(Exception):
    """A mistake in how the command was called: exit code 2."""


class _Parser(argparse.ArgumentParser):
    """argparse, answering a mistake in two short lines (its default prints the whole usage,
    which wraps to many)."""

    def error(self, message: str) -> Any:
        raise _UsageError(f"{self.prog}: {message}\nTry '{self.prog} --help'.")


def _header(value: str) -> tuple[str, str]:
    name, colon, text = value.partition(":")
    if not colon or not name.strip():
        raise argparse.ArgumentTypeError(f"{value!r} is not a header: write 'Name: value'")
    return name.strip(), text.strip()


def _amount(value: str) -> str:
    from ._amounts import AmountError, parse_amount

    try:
        parse_amount(value, allow_zero=True)
    except AmountError as exc:
        raise argparse.ArgumentTypeError(f"{value!r} is not an amount: {exc}") from None
    return value


def _url(value: str) -> str:
    if not value.startswith(("http://", "https://")):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not an http(s) URL (did you mean https://{value}?)"
        )
    return value


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="x402-eur",
        description="Pay x402-gated HTTP resources in euros.",
        epilog="Exit codes: 0 ok, 1 error, 2 usage, 3 payment refused or failed, "
        "22 HTTP error status.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    demo = commands.add_parser("demo", help="start the sandbox and pay on every rail")
    demo.add_argument("--no-evm", action="store_true", help="skip the EVM permit rail")
    demo.add_argument("--no-bridge", action="store_true", help="skip the bridge rail")
    demo.add_argument(
        "--realistic",
        action="store_true",
        help="make the bridge take about a minute, as in real life",
    )

    fetch = commands.add_parser("fetch", help="fetch a URL, paying if asked (curl-like)")
    fetch.add_argument("url", type=_url)
    fetch.add_argument("-X", "--request", dest="method", default="GET")
    fetch.add_argument(
        "-H", "--header", action="append", default=[], type=_header, help="'Name: value'"
    )
    fetch.add_argument("-d", "--data", help="request body")
    fetch.add_argument("--max-amount", type=_amount, help="cap per payment in euros (default 1.00)")
    fetch.add_argument("--confirm", action="store_true", help="ask before paying")

    sandbox = commands.add_parser("sandbox", help="run the sandbox until Ctrl-C")
    sandbox.add_argument("--evm", action="store_true", help="also run the EVM chains (anvil)")
    sandbox.add_argument("--chain-a", action="store_true", help="also run chain A and the bridge")
    sandbox.add_argument("--bridge-delay", type=float, default=3.0)
    sandbox.add_argument("--confirmation-delay", type=float, default=0.0)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    debug = "--debug" in (sys.argv[1:] if argv is None else argv)
    try:
        args = _parser().parse_args(argv)
        command = {"demo": _demo, "fetch": _fetch, "sandbox": _sandbox}[args.command]
        return asyncio.run(command(args))
    except KeyboardInterrupt:
        return 130
    except _UsageError as exc:
        sys.stderr.write(f"{exc}\n")
        return 2
    except Exception as exc:
        if debug:
            raise
        sys.stderr.write(f"x402-eur: {_one_line(exc)}\n(run with --debug for the traceback)\n")
        return 1


def _one_line(exc: BaseException) -> str:
    """What went wrong, in one line a person can act on."""
    import httpx

    if isinstance(exc, httpx.ConnectError):
        where = exc.request.url if exc._request is not None else "the server"
        return f"cannot connect to {where}: {exc or 'connection refused'}"
    if isinstance(exc, httpx.TimeoutException):
        return f"timed out: {type(exc).__name__}"
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
