"""The `x402-eur` argument parser: its commands, their options, and the mistakes it
answers in two short lines."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

from ..__version__ import __version__
from .._frontend import common as _frontend
from . import _bazaar, _commands, _reference, _sessions, _state_commands
from ._common import _UsageError


class _Parser(argparse.ArgumentParser):
    """argparse, answering a mistake in two short lines (its default prints the whole usage,
    which wraps to many)."""

    #: Builds the epilog when help is shown (it may import what `--help` alone should not).
    epilog_factory: Callable[[], str] | None = None

    def error(self, message: str) -> Any:
        raise _UsageError(f"{self.prog}: {message}\nTry '{self.prog} --help'.")

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        # An option a command does not know is that command's mistake, answered with its own
        # `--help` (argparse would leave it to the top-level parser).
        if not self._subparsers and args is not None:
            self._refuse_unknown_options(args)
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras

    def _refuse_unknown_options(self, args: Sequence[str]) -> None:
        """`--max-amout 0.05` is a mistyped option, not a URL `0.05`: said before the
        arguments are read, with the option meant when one is close."""
        import difflib

        known = [name for name in self._option_string_actions if name.startswith("--")]
        for word in args:
            if word == "--":
                return
            name = word.split("=", 1)[0]
            if not name.startswith("--") or name in self._option_string_actions:
                continue
            if any(option.startswith(name) for option in known):
                continue  # argparse's own abbreviation, or its ambiguity error
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.7)
            meant = f"; did you mean {close[0]}?" if close else ""
            self.error(f"unknown option {name}{meant}")

    def format_help(self) -> str:
        if self.epilog_factory is not None:
            self.epilog = self.epilog_factory()
        return super().format_help()


def _global_options(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """`--version` and `--debug`, taken before or after the command (`x402-eur fetch --debug
    URL`); a command's parser leaves `--debug` unset unless given, so that it does not
    undo one given before the command."""
    version = f"x402-eur {__version__}"
    parser.add_argument("--version", action="version", version=version)
    default = False if top else argparse.SUPPRESS
    parser.add_argument("--debug", action="store_true", default=default, help="show tracebacks")


def _header(value: str) -> tuple[str, str]:
    name, colon, text = value.partition(":")
    if not colon or not name.strip():
        raise argparse.ArgumentTypeError(f"{value!r} is not a header: write 'Name: value'")
    return name.strip(), text.strip()


def _count(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a count: write a whole number >= 1")
    return int(value)


_url = _frontend.argument_type(_frontend.check_url)
_amount = _frontend.argument_type(_frontend.check_amount)
_budget = _frontend.argument_type(_frontend.check_budget)
_environment_help = _frontend.environment_help


# --- option groups shared by several commands ------------------------------------------------


def _state_group(*, quiet: bool = False) -> argparse.ArgumentParser:
    """`--state` and `--no-state`; `quiet`: unset unless given (for a command's action,
    so that it leaves alone what was given before it)."""
    state = _Parser(add_help=False, argument_default=argparse.SUPPRESS if quiet else None)
    where = state.add_mutually_exclusive_group()
    where.add_argument(
        "--state",
        metavar="PATH|DSN",
        help="the state file: journal and budgets (default $X402_EUR_STATE, else "
        "~/.local/share/x402-eur/state.sqlite3); or a postgresql:// URL, shared by a fleet",
    )
    where.add_argument(
        "--no-state", action="store_true", help="no state file: journal and budgets in memory"
    )
    return state


def _progress_group() -> argparse.ArgumentParser:
    progress = _Parser(add_help=False)
    progress.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show the progress of long waits on stderr: the bridge, a payment the merchant "
        "has not confirmed yet, a chain's RPC slower than a second (default: when it is a "
        "terminal)",
    )
    return progress


def _request_group() -> argparse.ArgumentParser:
    request = _Parser(add_help=False)
    request.add_argument("url", type=_url)
    request.add_argument(
        "-X", "--request", dest="method", type=str.upper, help="method (default GET, POST with -d)"
    )
    request.add_argument(
        "-H", "--header", action="append", default=[], type=_header, help="'Name: value'"
    )
    request.add_argument(
        "-d", "--data", help="request body: TEXT, @FILE (its bytes as they are) or @- (stdin)"
    )
    return request


def _limits_group() -> argparse.ArgumentParser:
    limits = _Parser(add_help=False)
    limits.add_argument(
        "--max-amount",
        type=_amount,
        metavar="AMOUNT",
        help="cap per payment, in every currency (default 1.00 EUR and 1.00 USD)",
    )
    limits.add_argument(
        "--budget",
        action="append",
        type=_budget,
        metavar="AMOUNT[CURRENCY][/WINDOW]",
        help="spend at most AMOUNT (per WINDOW), counted across runs in the state file; "
        "e.g. 5.00/24h, 2.00USD/24h, 1.00 (a total); may be repeated; offers in a currency "
        "no budget covers are then refused",
    )
    return limits


# --- the commands ----------------------------------------------------------------------------

_RAW = argparse.RawDescriptionHelpFormatter


def _add_fetch(commands: Any, groups: dict[str, argparse.ArgumentParser]) -> None:
    fetch = commands.add_parser(
        "fetch",
        help="fetch a URL, paying if asked (curl-like)",
        parents=[groups["request"], groups["limits"], groups["state"], groups["progress"]],
        formatter_class=_RAW,
        description="Fetch URL; when it answers 402, pay within the limits and fetch it\n"
        "again. The body goes to stdout (or -o FILE), the receipt to stderr\n"
        "(with --json: one JSON object, on stdout when -o FILE is given, else on stderr).",
    )
    fetch.add_argument("-o", "--output", metavar="FILE", help="write the body to FILE")
    _curl_options(fetch)
    fetch.add_argument(
        "--json",
        action="store_true",
        help="print the receipt as one JSON object: on stdout with -o FILE, else on stderr",
    )
    fetch.add_argument("--confirm", action="store_true", help="ask before paying")
    fetch.add_argument(
        "--sign-in",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="where the merchant offers it (x402 sign-in-with-x), sign in with the EVM key "
        "instead of paying again for what that wallet already paid (default: on, or "
        "$X402_EUR_SIGN_IN_WITH_X)",
    )
    fetch.epilog_factory = _environment_help
    fetch.set_defaults(handler=_commands._fetch)


def _curl_options(fetch: argparse.ArgumentParser) -> None:
    """`-L`, `-s`, `-i` as curl has them. A redirect is followed only with -L (a 402 behind
    it is paid once, as any request; a paid answer that redirects is followed to what it
    leads to, and the payment is delivered only when that is a success); without -L the
    3xx answer is the response, and the status line says where it leads. -s silences the
    progress display and the status and receipt lines, never an error (curl's -sS): a
    failure always says whether money moved. -i writes the final answer's status line and
    headers before its body, where the body goes."""
    fetch.add_argument(
        "-L", "--location", action="store_true", help="follow redirects (as curl -L)"
    )
    fetch.add_argument(
        "-s",
        "--silent",
        action="store_true",
        help="no progress, no status or receipt lines on stderr; errors are still said",
    )
    fetch.add_argument(
        "-i",
        "--include",
        action="store_true",
        help="write the status line and the response headers before the body",
    )


def _add_quote(commands: Any, groups: dict[str, argparse.ArgumentParser]) -> None:
    quote = commands.add_parser(
        "quote",
        help="what a URL costs, and whether each offer would be paid (pays nothing)",
        parents=[groups["request"], groups["limits"], groups["state"]],
        formatter_class=_RAW,
        description="Request URL without paying and show its price options: for each,\n"
        "whether this configuration would pay it, and why not. Nothing is paid.",
    )
    quote.add_argument("--json", action="store_true", help="print the quote as JSON")
    quote.epilog_factory = _environment_help
    quote.set_defaults(handler=_commands._quote)


def _add_payments(commands: Any, groups: dict[str, argparse.ArgumentParser]) -> None:
    payments = commands.add_parser(
        "payments",
        help="the payments journaled in the state file",
        parents=[groups["state"]],
        description="List the payments journaled in the state file, newest first.",
    )
    payments.add_argument(
        "--limit", type=_count, default=20, metavar="N", help="at most N (default 20)"
    )
    payments.add_argument(
        "--unfinished",
        action="store_true",
        help="only those whose money moved (or may have) and that were not delivered",
    )
    payments.add_argument("--json", action="store_true", help="JSON lines, one per payment")
    payments.set_defaults(handler=_commands._payments)


def _add_resume(commands: Any, groups: dict[str, argparse.ArgumentParser]) -> None:
    resume = commands.add_parser(
        "resume",
        help="finish an unfinished payment, never paying again",
        parents=[groups["state"], groups["progress"]],
        formatter_class=_RAW,
        description="Finish one unfinished payment of the journal: re-send its proof or\n"
        "resume its bridge wait, never paying again. The body goes to stdout (or -o FILE),\n"
        "one status line to stderr. Exit 0 when it was delivered (now or earlier), 1\n"
        "otherwise (also when a running process is still paying it: it is left alone).",
    )
    resume.add_argument(
        "id", help="the payment's id (x402-eur payments), or its first 6 or more characters"
    )
    resume.add_argument("-o", "--output", metavar="FILE", help="write the body to FILE")
    resume.add_argument(
        "-H",
        "--header",
        action="append",
        default=[],
        type=_header,
        help="'Name: value', sent with the re-sent request (credentials the journal does "
        "not keep); may be repeated",
    )
    resume.add_argument(
        "-d",
        "--data",
        metavar="BODY",
        help="the request's body, sent in place of the journaled one (the journal keeps no "
        "body that held credentials): TEXT, @FILE (its bytes as they are) or @- (stdin)",
    )
    resume.epilog_factory = _environment_help
    resume.set_defaults(handler=_commands._resume)


def _add_mcp(commands: Any) -> None:
    mcp = commands.add_parser("mcp", help="serve MCP tools that pay for HTTP within a budget")
    _commands._mcp_command().configure_parser(mcp)
    mcp.set_defaults(handler=_commands._mcp)


def _add_help(commands: Any) -> None:
    reference = commands.add_parser(
        "help",
        help="print the full reference of the command line (Markdown)",
        description="Print the full reference of the command line, in Markdown: every "
        "command, option, environment variable and exit code.",
    )
    reference.add_argument(
        "topic",
        nargs="?",
        choices=sorted(name for name in commands.choices if name != "help"),
        metavar="COMMAND",
        help="show this command's options instead (as COMMAND --help)",
    )
    reference.set_defaults(handler=_reference._help)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="x402-eur",
        description="Pay x402-gated HTTP resources in euros.",
        epilog="Exit codes: 0 ok, 1 error, 2 usage, 3 payment refused or failed, "
        "22 HTTP error status. The full reference: x402-eur help.",
    )
    _global_options(parser, top=True)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    groups = {
        "state": _state_group(),
        "progress": _progress_group(),
        "request": _request_group(),
        "limits": _limits_group(),
    }
    _add_fetch(commands, groups)
    _add_quote(commands, groups)
    _bazaar.add_discover(commands, groups)
    _add_payments(commands, groups)
    _add_resume(commands, groups)
    actions = _sessions.add_sessions(commands, groups["state"], _state_group(quiet=True))
    _state_commands.add_state(commands, groups["state"])
    _add_mcp(commands)
    _add_help(commands)
    for command in [*commands.choices.values(), *actions]:
        _global_options(command, top=False)
    return parser
