"""`x402-eur mcp`: its options and the checks made before serving (a budget, a token
that can guard the endpoint, a loopback address unless allowed, a usable state file)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any

from .._frontend import common as _frontend
from .._frontend.common import (
    ALLOW_HOSTS_ENV,
    ALLOW_ORIGIN_ENV,
    BUDGET_ENV,
    TOKEN_ENV,
    argument_type,
)
from .._protocol.budget_spec import CURRENCIES
from ._tools import DEFAULT_MAX_BODY_BYTES

if TYPE_CHECKING:
    from .._options import PaymentOptions
    from .._protocol.budgets import Budget

__all__ = ["configure_parser", "run"]


class _Refusal(Exception):
    """A reason not to start, said in one line: exit code 2 (1 with `code=1`)."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


def _host_port(value: str) -> tuple[str, int]:
    host, colon, port = value.rpartition(":")
    host = host.strip("[]")
    if not colon or not host or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"{value!r} is not HOST:PORT (e.g. 127.0.0.1:8402)")
    return host, int(port)


def _positive_int(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a positive whole number")
    return int(value)


_budget_argument = argument_type(_frontend.check_budget)
_amount_option = argument_type(_frontend.check_amount)
_origin = argument_type(_frontend.check_origin)
_allow_host_argument = argument_type(_frontend.check_allowed_host)


def _limit_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--budget",
        action="append",
        type=_budget_argument,
        metavar="AMOUNT[CURRENCY][/WINDOW]",
        help="spend at most AMOUNT (per WINDOW); may be repeated; all are enforced; offers in "
        "a currency no budget covers are refused (add e.g. 2.00USD/24h for dollar offers)",
    )
    parser.add_argument(
        "--budget-currency",
        type=str.upper,
        choices=CURRENCIES,
        default="EUR",
        help="currency of budgets that name none (default EUR)",
    )
    parser.add_argument(
        "--no-budget",
        action="store_true",
        help="allow starting without any budget (only the per-payment cap limits spending)",
    )
    parser.add_argument(
        "--max-amount",
        type=_amount_option,
        metavar="AMOUNT",
        help="cap per payment, in every currency (default 1.00 EUR and 1.00 USD)",
    )
    state = parser.add_mutually_exclusive_group()
    state.add_argument(
        "--state",
        metavar="PATH|DSN",
        help="the state file (budgets and payment journal; default: $X402_EUR_STATE, else "
        "the user's data directory), so budgets hold across restarts; or a postgresql:// "
        "URL: one journal and one set of budgets for a fleet",
    )
    state.add_argument(
        "--no-state", action="store_true", help="keep budgets and payments in memory only"
    )


def _serving_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--http",
        type=_host_port,
        metavar="HOST:PORT",
        help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio",
    )
    parser.add_argument(
        "--allow-remote",
        action="store_true",
        help=f"allow --http on a non-loopback address ({TOKEN_ENV} required: whoever "
        "reaches the endpoint spends your budget)",
    )
    parser.add_argument(
        "--allow-origin",
        action="append",
        type=_origin,
        metavar="ORIGIN",
        help="with --http: also admit browser requests from the web page origin ORIGIN "
        "(scheme://host[:port]); may be repeated; without it, "
        f"{ALLOW_ORIGIN_ENV} is read (comma-separated)",
    )
    parser.add_argument(
        "--allow-host",
        action="append",
        type=_allow_host_argument,
        default=[],
        metavar="HOST[:PORT]",
        help="let fetch and quote reach HOST (a name or an IP address; with :PORT, that port "
        "only) although it is not a public address (loopback, private network, ...); may "
        f"be repeated; {ALLOW_HOSTS_ENV} (comma-separated) adds more",
    )
    parser.add_argument(
        "--max-body-bytes",
        type=_positive_int,
        default=DEFAULT_MAX_BODY_BYTES,
        help=f"largest response body a fetch returns (default {DEFAULT_MAX_BODY_BYTES})",
    )
    parser.add_argument(
        "--log-level",
        type=str.lower,
        choices=("debug", "info", "warning", "error"),
        default="info",
        help="log level on stderr (default info)",
    )


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Add the `x402-eur mcp` arguments to `parser` (the CLI's subcommand)."""
    parser.description = (
        "Serve MCP tools (fetch, quote, payments, budget) that pay x402 resources in euros "
        "from the account in the environment (X402_EUR_API_KEY, X402_EUR_ACCOUNT, "
        "X402_EUR_API_URL), within a budget. Logs go to stderr."
    )
    parser.epilog = (
        f"Budgets: AMOUNT[CURRENCY][/WINDOW], e.g. 5.00/24h, 2.00USD/24h, 0.25 (a total); "
        f"window units s, m, h, d. Without --budget, {BUDGET_ENV} is read (comma-separated). "
        "Offers in a currency no budget covers are refused."
    )
    _limit_options(parser)
    _serving_options(parser)


def _say(message: str) -> None:
    sys.stderr.write(f"x402-eur mcp: {message}\n")
    sys.stderr.flush()


_TOKEN_EXAMPLE = "(e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))')"  # noqa: S105


def _budgets(args: argparse.Namespace) -> list[Budget]:
    """The budgets to serve with: `--budget`, else `X402_EUR_BUDGET`."""
    if args.budget and args.no_budget:
        raise _Refusal("give --budget or --no-budget, not both")
    texts = args.budget or ([os.environ[BUDGET_ENV]] if os.environ.get(BUDGET_ENV) else [])
    try:
        budgets = _frontend.parse_budget_texts(texts, args.budget_currency)
    except ValueError as exc:
        raise _Refusal(f"{BUDGET_ENV}: {exc}") from None
    if not budgets and not args.no_budget:
        raise _Refusal(
            f"no budget: give --budget AMOUNT[/WINDOW] (e.g. 5.00/24h) or set {BUDGET_ENV}; "
            "--no-budget starts without one"
        )
    return budgets


def _token(args: argparse.Namespace) -> str | None:
    """The bearer token of `--http`, after checking that the endpoint may serve with it."""
    from .._options import is_loopback

    token = os.environ.get(TOKEN_ENV) or None
    if token is not None and (problem := _frontend.token_problem(token)):
        raise _Refusal(f"{TOKEN_ENV} {problem} {_TOKEN_EXAMPLE}")
    if args.http is None:
        return token
    host = args.http[0]
    if not is_loopback(host) and not args.allow_remote:
        raise _Refusal(
            f"refusing to serve on {host}: not a loopback address, and whoever reaches "
            f"the endpoint spends your budget; add --allow-remote, with {TOKEN_ENV} set"
        )
    if token is None and host != "127.0.0.1":
        raise _Refusal(
            f"refusing to serve on {host} without a token: only 127.0.0.1 may go "
            f"without one; set {TOKEN_ENV} {_TOKEN_EXAMPLE}"
        )
    return token


def _options(args: argparse.Namespace, budgets: list[Budget]) -> PaymentOptions:
    try:
        guard = _frontend.destination_guard(args.allow_host)
    except ValueError as exc:
        raise _Refusal(f"{ALLOW_HOSTS_ENV}: {exc}") from None
    options = _frontend.payment_options(
        budgets=budgets,
        destination_guard=guard,
        max_amount_per_payment=args.max_amount,
        state_path=_frontend.state_path(args.state, no_state=args.no_state),
    )
    try:
        _frontend.open_state(options)
    except _frontend.StateFileMistake as exc:
        raise _Refusal(f"{exc}. {_frontend.STATE_FIX}") from None
    return options


def _prepare(args: argparse.Namespace) -> tuple[PaymentOptions, str | None]:
    """The options and the token to serve with, or `_Refusal` saying why not."""
    import importlib.util

    budgets = _budgets(args)
    token = _token(args)
    if not args.allow_origin:
        try:
            args.allow_origin = _frontend.allowed_origins_from_env()
        except ValueError as exc:
            raise _Refusal(str(exc)) from None
    # `mcp_types` comes with the 2.x SDK only: a 1.x `mcp` (enough to pay tools) cannot serve.
    if importlib.util.find_spec("mcp_types") is None:
        raise _Refusal(
            "needs the `mcp` package, version 2: pip install 'x402-eur[mcp-server]'", code=1
        )
    return _options(args, budgets), token


async def run(args: argparse.Namespace) -> int:
    """Run the server until its client leaves (stdio) or it is stopped (HTTP). Exit code."""
    try:
        options, token = _prepare(args)
    except _Refusal as exc:
        _say(str(exc))
        return exc.code
    try:
        return await _serve(args, options, token)
    finally:
        from .._state.shared import state_of

        if options.state_path is not None:
            state_of(options).close()


async def _serve(args: argparse.Namespace, options: Any, token: str | None) -> int:
    from ._server import serve

    return await serve(args, options, token)
