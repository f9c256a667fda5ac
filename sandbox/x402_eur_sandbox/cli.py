"""`x402-eur-sandbox`: the sandbox from the command line.

- `x402-eur-sandbox serve`: runs the sandbox until Ctrl-C or SIGTERM and prints its URLs,
  credentials and the `export` lines that make `x402-eur fetch` pay from the sandbox payer.
- `x402-eur-sandbox demo`: starts the sandbox and pays for resources on every rail it can
  run, with the x402-eur client (`x402_eur_sandbox.demo`; needs the client installed).

Exit codes: 0 ok, 1 error, 2 usage.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shlex
import shutil
import signal
import sys
import tempfile
from collections.abc import Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

from .__version__ import __version__
from ._console import Out, anvil_problem, service_prices
from ._merchant import Price
from ._sandbox import PORT_LAYOUT, Sandbox

__all__ = ["Out", "anvil_problem", "main", "money", "price_rows", "service_prices", "service_rows"]

PROG = "x402-eur-sandbox"


class UsageError(Exception):
    """A mistake in how the command was called: exit code 2."""


class Trouble(Exception):
    """Something outside the command line is wrong, said in one line: exit code 1."""


# --- serve ---------------------------------------------------------------------------------


def _open_env_file(path: str) -> int:
    """The `--env-file`, opened before the sandbox starts: mode 0600, it holds an API key."""
    try:
        fd = os.open(Path(path).expanduser(), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)  # an existing file keeps its mode through O_CREAT
    except OSError as exc:
        raise UsageError(
            f"{PROG} serve: cannot write the env file {path!r}: {exc.strerror or exc}\n"
            f"Try '{PROG} serve --help'."
        ) from None
    return fd


def price_rows(label: str, prices: Mapping[str, Price], unit: str) -> list[tuple[str, str]]:
    """One row per resource, by path, with its price (`label` on the first row only)."""
    width = max((len(path) for path in prices), default=0)
    return [
        (label if index == 0 else "", f"{path.ljust(width)}  {money(prices[path].amount)} {unit}")
        for index, path in enumerate(sorted(prices))
    ]


def money(amount: Decimal) -> str:
    """An amount as people read it: at least 2 decimals, no trailing zeros beyond them."""
    exponent = amount.normalize().as_tuple().exponent
    places = max(2, -exponent if isinstance(exponent, int) else 2)
    return f"{amount:.{places}f}"


def service_rows(sandbox: Sandbox) -> list[tuple[str, str]]:
    """Each running service under its own name, with its URL (and the merchants' prices)."""
    from ._hosted_mcp import mcp_available

    rows = [
        ("merchant", sandbox.merchant_url),
        *price_rows("paid resources", sandbox.prices, "EUR"),
        ("payment API", sandbox.payment_api_url),
        ("managed-account facilitator", sandbox.mcp_url + "/x402"),
        ("its discovery catalogue", sandbox.discovery_url + "/discovery/resources"),
    ]
    if mcp_available():
        rows.append(("hosted tool server (MCP)", sandbox.tool_server_url))
    if sandbox.evm is not None:
        rows.append(("on-chain facilitator", sandbox.evm.facilitator_url))
    if sandbox.chain_a is not None:
        chain = sandbox.chain_a
        rows += [
            ("chain-A indexer", chain.indexer_url),
            ("chain-A node", chain.algod_url),
            ("chain-A facilitator", chain.facilitator_url),
            ("chain-A payer wallet", chain.payer_wallet.address),
        ]
    if sandbox.standard is not None:
        rows.append(("standard x402 merchant", sandbox.standard.url))
        evm_prices = {
            path: price
            for path, price in sandbox.standard.prices.items()
            if path not in sandbox.standard.svm_paths
        }
        rows += price_rows("its resources", evm_prices, "sEURC")
        if mcp_available():
            rows.append(("paid tool server (MCP)", sandbox.paid_tool_server_url))
            rows += price_rows("its tools", sandbox.standard.tools.prices, "sEURC")
    if sandbox.batch is not None:
        rows.append(("batch-settlement merchant", sandbox.batch.url))
        rows += price_rows("its resources", sandbox.batch.merchant.prices, "sEURC")
        rows.append(("batch-settlement facilitator", sandbox.batch.facilitator_url))
    if sandbox.solana is not None:
        solana = sandbox.standard.solana
        rows += [
            *price_rows("its Solana resources", solana.prices, "sEURC or sUSDC"),
            ("Solana JSON-RPC", solana.rpc_url),
            ("SVM facilitator", solana.facilitator_url),
            *((f"Solana mint {a['symbol']}", a["address"]) for a in solana.asset_configs()),
            ("Solana payer", solana.payer_address),
            ("Solana payer secret key", solana.payer_secret_key),
        ]
    return rows


def _credential_rows(sandbox: Sandbox) -> list[tuple[str, str]]:
    return [
        ("payer account", sandbox.payer.code),
        ("payer API key", sandbox.payer.api_key),
        ("merchant account", sandbox.merchant.code),
    ]


def _print_exports(out: Out, env: dict[str, str], env_fd: int | None, env_path: str) -> None:
    exports = "".join(f"export {key}={shlex.quote(value)}\n" for key, value in env.items())
    if env_fd is not None:
        with os.fdopen(env_fd, "w") as env_file:
            env_file.write(exports)
        out.line(f"\n# make `x402-eur fetch` pay from the sandbox payer: . {env_path}")
    else:
        out.line("\n# make `x402-eur fetch` pay from the sandbox payer:")
    sys.stdout.flush()
    # Plain writes: rich would wrap a long line, and these are for copying.
    sys.stdout.write(exports)
    sys.stdout.flush()


class _Stopper:
    """SIGINT and SIGTERM alike stop the services and the anvil nodes (exit 0); while the
    sandbox is starting, they cancel the start (which stops what already runs)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.stop = asyncio.Event()
        self.task = asyncio.current_task()
        self.starting = True

    def _on_signal(self) -> None:
        self.stop.set()
        if self.starting and self.task is not None:
            self.task.cancel()

    def __enter__(self) -> _Stopper:
        for signum in self.SIGNALS:
            with contextlib.suppress(NotImplementedError):  # Windows: Ctrl-C still works
                self.loop.add_signal_handler(signum, self._on_signal)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum in self.SIGNALS:
            with contextlib.suppress(NotImplementedError):
                self.loop.remove_signal_handler(signum)

    def stopped_by_signal(self) -> bool:
        """After a `CancelledError`: True (and the cancel undone) when a signal caused it."""
        if not self.stop.is_set():
            return False
        uncancel = getattr(self.task, "uncancel", None)
        if uncancel is not None:
            uncancel()
        return True


async def _serve(args: argparse.Namespace) -> int:
    from ._server import PortInUse

    if args.evm and (problem := anvil_problem()) is not None:
        raise Trouble(f"--evm runs two anvil chains: {problem}")
    if args.svm:
        _check_svm()
    env_fd = _open_env_file(args.env_file) if args.env_file else None
    # The sandbox's payments go to a state file of their own, removed when it stops: they
    # must not mix with the real journal and budgets of the default state file.
    state_dir = tempfile.mkdtemp(prefix="x402-eur-sandbox-")
    out = Out()
    try:
        with _Stopper() as stopper:
            try:
                async with _sandbox_of(args) as sandbox:
                    stopper.starting = False
                    wallet = sandbox.chain_a.env() if args.chain_a_wallet else {}
                    env = {
                        **sandbox.env(),
                        **wallet,
                        "X402_EUR_STATE": str(Path(state_dir) / "state.sqlite3"),
                        # Not client settings: the merchant's and the facilitator's
                        # URLs, for the shell.
                        "X402_EUR_SANDBOX_MERCHANT": sandbox.merchant_url,
                        "X402_EUR_SANDBOX_FACILITATOR": sandbox.discovery_url,
                    }
                    out.title(f"{PROG} (Ctrl-C or SIGTERM stops it)")
                    out.table(service_rows(sandbox) + _credential_rows(sandbox))
                    fd, env_fd = env_fd, None
                    _print_exports(out, env, fd, args.env_file)
                    await stopper.stop.wait()
            except PortInUse as exc:
                raise Trouble(f"{exc.strerror}: choose another --port") from None
            except asyncio.CancelledError:
                if not stopper.stopped_by_signal():
                    raise
    finally:
        _clean_up(env_fd, args.env_file, state_dir)
    return 0


def _check_svm() -> None:
    """`--svm` needs `solders` (the `svm` extra) and anvil (the standard merchant's own
    EVM token)."""
    import importlib.util

    if importlib.util.find_spec("solders") is None:
        raise Trouble("--svm runs the Solana VM of solders: pip install 'x402-eur-sandbox[svm]'")
    if (problem := anvil_problem()) is not None:
        raise Trouble(f"--svm runs the standard merchant on an anvil chain: {problem}")


def _clean_up(env_fd: int | None, env_file: str | None, state_dir: str) -> None:
    """When the sandbox stops: its state directory goes, and so does the env file. Its URLs,
    key and state directory die with the sandbox: a stale file sourced later would point
    `x402-eur` at them (and re-create the removed directory)."""
    if env_fd is not None:
        os.close(env_fd)
    shutil.rmtree(state_dir, ignore_errors=True)
    if env_file:
        with contextlib.suppress(OSError):
            Path(env_file).expanduser().unlink()


def _sandbox_of(args: argparse.Namespace) -> Sandbox:
    args.chain_a = args.chain_a or args.chain_a_wallet
    return Sandbox(
        prices=service_prices(evm=args.evm, chain_a=args.chain_a),
        evm=args.evm,
        chain_a=args.chain_a,
        bridge_delay=args.bridge_delay,
        confirmation_delay=args.confirmation_delay,
        port=args.port,
        standard=args.evm,
        svm=args.svm,
        batch_settlement=args.evm,
    )


async def _demo(args: argparse.Namespace) -> int:
    try:
        from .demo import run_demo
    except ImportError as exc:
        if exc.name is None or not exc.name.startswith("x402_client"):
            raise
        raise Trouble(
            "the demo pays with the x402-eur client, which is not installed: "
            "pip install '.[evm]' (from the repository root)"
        ) from None
    return await run_demo(args)


# --- arguments -----------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse, answering a mistake in two short lines."""

    def error(self, message: str) -> Any:
        raise UsageError(f"{self.prog}: {message}\nTry '{self.prog} --help'.")


def _port(value: str) -> int:
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


def _global_options(parser: argparse.ArgumentParser, *, top: bool) -> None:
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    default = False if top else argparse.SUPPRESS
    parser.add_argument("--debug", action="store_true", default=default, help="show tracebacks")


def _serve_parser(commands: Any) -> None:
    serve = commands.add_parser(
        "serve",
        help="run the sandbox until Ctrl-C or SIGTERM",
        description="Run the sandbox on 127.0.0.1 until Ctrl-C or SIGTERM; print its URLs "
        "and the export lines that make x402-eur fetch pay from its payer.",
        epilog="With --port N: payment API on N, facilitator on N+1, merchant on N+2; the "
        "anvil chains, the on-chain facilitator and the chain-A indexer take free ports.",
    )
    serve.add_argument("--evm", action="store_true", help="also run the EVM chains (anvil)")
    serve.add_argument("--chain-a", action="store_true", help="also run chain A and the bridge")
    serve.add_argument(
        "--svm",
        action="store_true",
        help="also run a Solana chain (the svm extra) and the standard merchant's Solana routes",
    )
    serve.add_argument(
        "--chain-a-wallet",
        action="store_true",
        help="run chain A and export its payer wallet (X402_EUR_CHAIN_A_*): x402-eur then "
        "pays chain-A entries from that wallet before the bridge",
    )
    serve.add_argument(
        "--port", type=_port, metavar="N", help="fixed ports from N (default: free ports)"
    )
    serve.add_argument(
        "--env-file",
        metavar="PATH",
        help="also write the export lines to PATH (mode 0600: they hold a sandbox API key)",
    )
    serve.add_argument(
        "--bridge-delay", type=_seconds, default=3.0, metavar="S", help="seconds (default 3)"
    )
    serve.add_argument(
        "--confirmation-delay",
        type=_seconds,
        default=0.0,
        metavar="S",
        help="seconds before a payment request counts as paid (default 0)",
    )


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="The x402-eur sandbox: merchant gates, facilitators, payment API and "
        "chains on 127.0.0.1, with money that is not money.",
        epilog="Exit codes: 0 ok, 1 error, 2 usage.",
    )
    _global_options(parser, top=True)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _serve_parser(commands)
    demo = commands.add_parser("demo", help="start the sandbox and pay on every rail")
    demo.add_argument("--no-evm", action="store_true", help="skip the EVM permit rail")
    demo.add_argument("--no-bridge", action="store_true", help="skip the bridge rail")
    demo.add_argument(
        "--realistic",
        action="store_true",
        help="make the bridge take about a minute, as in real life",
    )
    for command in commands.choices.values():
        _global_options(command, top=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    debug = "--debug" in (sys.argv[1:] if argv is None else argv)
    try:
        args = _parser().parse_args(argv)
        debug = args.debug
        command = {"serve": _serve, "demo": _demo}[args.command]
        return asyncio.run(command(args))
    except KeyboardInterrupt:
        return 130
    except UsageError as exc:
        sys.stderr.write(f"{exc}\n")
        return 2
    except Trouble as exc:
        sys.stderr.write(f"{PROG}: {exc}\n")
        return 1
    except Exception as exc:
        if debug:
            raise
        text = " ".join(str(exc).split()) or type(exc).__name__
        sys.stderr.write(
            f"{PROG}: {type(exc).__name__}: {text}\n(run with --debug for the traceback)\n"
        )
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
