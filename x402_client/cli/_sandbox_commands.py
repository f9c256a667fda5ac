"""The sandbox's commands, `x402-eur demo` and `x402-eur sandbox`: the sandbox on
127.0.0.1, a paid fetch on every rail it runs, or the sandbox until Ctrl-C.

They live here, apart from the paying commands, while the sandbox ships with the client:
this module is the whole of them (`add_commands` registers both). `_demo` and `_sandbox`
are longer than the other commands' functions: each is one start-to-stop script of the
sandbox's life, read top to bottom.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

from ._common import _mistake, _Trouble
from ._render import _Out, _receipt_rows

# --- demo ----------------------------------------------------------------------------------


def _demo_prices(*, evm: bool = True, chain_a: bool = True) -> dict[str, Any]:
    """The sandbox's resources: the euro ones, plus those of the rails it runs."""
    from ..sandbox import DEFAULT_PRICES, Price

    prices: dict[str, Any] = dict(DEFAULT_PRICES)
    if evm:
        prices["/paid/evm-polygon"] = Price(
            Decimal("0.25"), "EVM permit on chain 137", rails=("eip155:137",)
        )
        prices["/paid/evm-mainnet"] = Price(
            Decimal("0.25"), "EVM permit on chain 1", rails=("eip155:1",)
        )
    if chain_a:
        prices["/paid/bridge"] = Price(Decimal("0.30"), "Bridged to chain A", rails=("ledgera",))
    return prices


def _anvil_problem() -> str | None:
    try:
        from ..sandbox._anvil import find_anvil

        find_anvil()
    except (ImportError, RuntimeError) as exc:
        return str(exc)
    return None


async def _demo(args: argparse.Namespace) -> int:
    import httpx

    from .. import X402Error, with_eur_payment
    from .._amounts import format_amount
    from ..sandbox import Sandbox

    out = _Out()
    evm_problem = None if args.no_evm else _anvil_problem()
    use_evm = not args.no_evm and evm_problem is None
    bridge_delay = 60.0 if args.realistic else 3.0
    out.title("x402-eur demo: starting the sandbox on 127.0.0.1")
    async with Sandbox(
        prices=_demo_prices(evm=use_evm, chain_a=not args.no_bridge),
        evm=use_evm,
        chain_a=not args.no_bridge,
        bridge_delay=bridge_delay,
        standard=use_evm,
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
            from ..progress import bridge_progress_display

            on_progress, progress_cm = bridge_progress_display(console=out.console)
        options = sandbox.payment_options(on_progress=on_progress)
        async with with_eur_payment(httpx.AsyncClient(timeout=30), options) as client:
            steps: list[tuple[str, str]] = [
                ("euro rail (managed account)", sandbox.url("/weather"))
            ]
            if use_evm:
                steps += [
                    ("EVM permit rail, chain 137", sandbox.url("/paid/evm-polygon")),
                    ("EVM permit rail, chain 1", sandbox.url("/paid/evm-mainnet")),
                    (
                        "standard x402 v2 merchant, EIP-3009 euro token on chain 137",
                        sandbox.standard.resource_url("/weather"),
                    ),
                ]
            if not args.no_bridge:
                steps.append(("bridge rail (EURO -> EURQ on chain A)", sandbox.url("/paid/bridge")))
            for title, url in steps:
                out.title(f"{title}: GET {httpx.URL(url).path}")
                before = sandbox.balance(sandbox.payer)
                try:
                    if "bridge" in title and progress_cm is not None:
                        with progress_cm:
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


# --- sandbox -------------------------------------------------------------------------------


def _open_env_file(path: str) -> int:
    """The `--env-file`, opened before the sandbox starts: mode 0600, it holds an API key."""
    try:
        fd = os.open(Path(path).expanduser(), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)  # an existing file keeps its mode through O_CREAT
    except OSError as exc:
        raise _mistake(
            "x402-eur sandbox", f"cannot write the env file {path!r}: {exc.strerror or exc}"
        ) from None
    return fd


async def _sandbox(args: argparse.Namespace) -> int:
    import shlex
    import shutil
    import signal
    import tempfile

    from ..sandbox import Sandbox
    from ..sandbox._server import PortInUse

    env_fd = _open_env_file(args.env_file) if args.env_file else None
    # The sandbox's payments go to a state file of their own, removed when it stops: they
    # must not mix with the real journal and budgets of the default state file.
    state_dir = tempfile.mkdtemp(prefix="x402-eur-sandbox-")
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    main_task = asyncio.current_task()
    starting = True

    def on_signal() -> None:
        # SIGINT and SIGTERM alike: stop the services and the anvil nodes, exit 0. While
        # starting, cancel the start (it stops what already runs).
        stop.set()
        if starting and main_task is not None:
            main_task.cancel()

    signals = (signal.SIGINT, signal.SIGTERM)
    for signum in signals:
        with contextlib.suppress(NotImplementedError):  # Windows: Ctrl-C still works
            loop.add_signal_handler(signum, on_signal)
    out = _Out()
    try:
        async with Sandbox(
            prices=_demo_prices(evm=args.evm, chain_a=args.chain_a),
            evm=args.evm,
            chain_a=args.chain_a,
            bridge_delay=args.bridge_delay,
            confirmation_delay=args.confirmation_delay,
            port=args.port,
            standard=args.evm,
        ) as sandbox:
            starting = False
            env = {**sandbox.env(), "X402_EUR_STATE": str(Path(state_dir) / "state.sqlite3")}
            out.title("x402-eur sandbox (Ctrl-C or SIGTERM stops it)")
            rows = [
                ("merchant", sandbox.merchant_url),
                ("paid resources", ", ".join(sorted(sandbox.prices))),
                ("payment API", sandbox.payment_api_url),
                ("facilitator (mcp)", sandbox.mcp_url + "/x402"),
                ("payer account", sandbox.payer.code),
                ("payer API key", sandbox.payer.api_key),
                ("merchant account", sandbox.merchant.code),
            ]
            if sandbox.standard is not None:
                rows.append(
                    (
                        "standard x402 merchant",
                        f"{sandbox.standard.url} ({', '.join(sorted(sandbox.standard.prices))})",
                    )
                )
            out.table(rows)
            exports = "".join(f"export {key}={shlex.quote(value)}\n" for key, value in env.items())
            if env_fd is not None:
                with os.fdopen(env_fd, "w") as env_file:
                    env_fd = None
                    env_file.write(exports)
                out.line(f"\n# make `x402-eur fetch` pay from the sandbox payer: . {args.env_file}")
            else:
                out.line("\n# make `x402-eur fetch` pay from the sandbox payer:")
            sys.stdout.flush()
            # Plain writes: rich would wrap a long line, and these are for copying.
            sys.stdout.write(exports)
            sys.stdout.flush()
            await stop.wait()
    except PortInUse as exc:
        raise _Trouble(f"{exc.strerror}: choose another --port") from None
    except asyncio.CancelledError:
        if not stop.is_set():
            raise
        uncancel = getattr(main_task, "uncancel", None)
        if uncancel is not None:
            uncancel()
    finally:
        for signum in signals:
            with contextlib.suppress(NotImplementedError):
                loop.remove_signal_handler(signum)
        if env_fd is not None:
            os.close(env_fd)
        shutil.rmtree(state_dir, ignore_errors=True)
    return 0


def _port(value: str) -> int:
    from ..sandbox._sandbox import PORT_LAYOUT

    highest = 65535 - max(PORT_LAYOUT.values())
    if not value.isdigit() or not 1 <= int(value) <= highest:
        raise argparse.ArgumentTypeError(f"{value!r} is not a port: write 1 to {highest}")
    return int(value)


def _seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0 or seconds == float("inf"):
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds >= 0")
    return seconds


def add_commands(commands: Any) -> None:
    """The `demo` and `sandbox` commands, on the CLI's subcommand parsers."""
    demo = commands.add_parser("demo", help="start the sandbox and pay on every rail")
    demo.add_argument("--no-evm", action="store_true", help="skip the EVM permit rail")
    demo.add_argument("--no-bridge", action="store_true", help="skip the bridge rail")
    demo.add_argument(
        "--realistic",
        action="store_true",
        help="make the bridge take about a minute, as in real life",
    )

    sandbox = commands.add_parser(
        "sandbox",
        help="run the sandbox until Ctrl-C or SIGTERM",
        description="Run the sandbox on 127.0.0.1 until Ctrl-C or SIGTERM; print its URLs "
        "and the export lines that make x402-eur fetch pay from its payer.",
        epilog="With --port N: payment API on N, facilitator on N+1, merchant on N+2; the "
        "anvil chains, the on-chain facilitator and the chain-A indexer take free ports.",
    )
    sandbox.add_argument("--evm", action="store_true", help="also run the EVM chains (anvil)")
    sandbox.add_argument("--chain-a", action="store_true", help="also run chain A and the bridge")
    sandbox.add_argument(
        "--port", type=_port, metavar="N", help="fixed ports from N (default: free ports)"
    )
    sandbox.add_argument(
        "--env-file",
        metavar="PATH",
        help="also write the export lines to PATH (mode 0600: they hold a sandbox API key)",
    )
    sandbox.add_argument(
        "--bridge-delay", type=_seconds, default=3.0, metavar="S", help="seconds (default 3)"
    )
    sandbox.add_argument(
        "--confirmation-delay",
        type=_seconds,
        default=0.0,
        metavar="S",
        help="seconds before a payment request counts as paid (default 0)",
    )
    demo.set_defaults(handler=_demo)
    sandbox.set_defaults(handler=_sandbox)
