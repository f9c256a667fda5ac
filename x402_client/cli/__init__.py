"""The `x402-eur` command line (the reference is docs/cli.md; `x402-eur help` prints it).

- `x402-eur fetch URL`: curl with payment, configured from the environment
  (`PaymentOptions.from_env()`); the body goes to stdout (or `-o FILE`), the receipt to
  stderr (`--json`: as JSON, on stdout when `-o` is given, else on stderr).
- `x402-eur quote URL`: what a resource costs and whether each offer would be paid;
  nothing is paid.
- `x402-eur payments`: the payments journaled in the state file; `x402-eur resume ID`
  finishes one that a failure left unfinished, never paying again.
- `x402-eur sessions`: the sessions (`batch-settlement` channels) of the state file;
  `sessions refund ID` and `sessions withdraw ID` take back what they did not spend.
- `x402-eur discover FACILITATOR [QUERY...]`: the paid resources a facilitator's catalogue
  lists, each with its prices and whether it would be paid; nothing is paid.
- `x402-eur mcp`: an MCP server whose tools pay for HTTP within a budget (`x402_client.mcp`).
- `x402-eur help`: the full reference (docs/cli.md, which the wheel carries as
  `x402_client/cli/reference.md`).

State: `fetch`, `quote`, `payments` and `resume` keep the payment journal and the budgets
in one SQLite file (`SqliteStore.default_path()`: `$X402_EUR_STATE`, else
`$XDG_DATA_HOME/x402-eur/state.sqlite3`), so `--budget 0.20/24h` holds across runs and a
payment a crash left unfinished can be resumed. `--state PATH` names another file,
`--no-state` keeps everything in memory for one run.

Heavy imports happen inside the commands, so `x402-eur --help` stays fast.

Layout: `_arguments` (the parser), `_commands` (the paying commands), `_bazaar`
(`discover`), `_sessions` (`sessions`), `_state_commands` (`state migrate|copy`),
`_render` (what they print),
`_common` (state file, options, bodies); the budget grammar, amounts, state path and
environment are `x402_client._frontend.common`'s, shared with the MCP server. The
sandbox and its demo are a distribution of their own (`x402-eur-sandbox serve|demo`).

Exit codes: 0 success; 1 an error (network, configuration, a port in use, a payment that
could not be finished); 2 a usage mistake (a bad option, a file named on the command line
or the state file that cannot be read or written, a payment id that is unknown, ambiguous
or too short); 3 the payment was refused or failed (an `X402Error`: the message says
whether money moved); 22 the server answered an HTTP error status (as curl's `--fail`).
Every mistake is answered in one or two lines; `--debug` shows the traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from .._frontend.common import one_line as _one_line
from .._frontend.common import plain_words as _plain_words
from .._frontend.common import public_name as _public_name

# `_parser`, `_url` and `_environment_help` are re-exported for the tests.
from ._arguments import _environment_help as _environment_help
from ._arguments import _parser as _parser
from ._arguments import _url as _url
from ._common import _Trouble, _UsageError
from ._render import _shell_logging

__all__ = ["main"]

_Handler = Callable[[argparse.Namespace], Coroutine[Any, Any, int]]


def _interruptible(handler: _Handler) -> _Handler:
    """`handler`, which Ctrl-C cancels: the loop hears the signal (it wakes at once, from
    any thread the signal lands on) and cancels the command's scope, again at every await
    until the command has left it, so no layer can lose the interrupt; shielded steps
    (a journal write, the answer to a payment call) finish first. It then ends as
    Ctrl-C does (`KeyboardInterrupt`, exit code 130); a second Ctrl-C stops at once."""

    async def run(args: argparse.Namespace) -> int:
        import anyio

        loop = asyncio.get_running_loop()
        with anyio.CancelScope() as scope:

            def interrupt() -> None:
                if scope.cancel_called:
                    # the second Ctrl-C: Python's own interrupt, wherever it lands
                    loop.remove_signal_handler(signal.SIGINT)
                    signal.raise_signal(signal.SIGINT)
                scope.cancel()

            # no signals where the loop cannot hear them (not the main thread, not Unix)
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(signal.SIGINT, interrupt)
            try:
                return await handler(args)
            finally:
                with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                    loop.remove_signal_handler(signal.SIGINT)
        raise KeyboardInterrupt

    return run


#: Commands that moved to the sandbox's own distribution, and where they went.
MOVED = {"demo": "x402-eur-sandbox demo", "sandbox": "x402-eur-sandbox serve"}


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in given
    command = next((word for word in given if not word.startswith("-")), None)
    moved = MOVED.get(command or "")
    if moved is not None:
        sys.stderr.write(
            f"x402-eur: the sandbox is its own distribution now: run `{moved}` "
            "(pip install ./sandbox from the x402-eur repository)\n"
        )
        return 2
    try:
        args = _parser().parse_args(argv)
        debug = args.debug
        # `x402-eur mcp` sets up its own logging.
        words = _shell_logging() if args.command != "mcp" else contextlib.nullcontext()
        with words:
            run = args.handler if args.command == "mcp" else _interruptible(args.handler)
            code: int = asyncio.run(run(args))
        return code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `x402-eur payments | head`: the reader left; say nothing more.
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except _UsageError as exc:
        sys.stderr.write(f"{exc}\n")
        return 2
    except _Trouble as exc:
        sys.stderr.write(f"x402-eur: {exc}\n")
        return 1
    except Exception as exc:
        if debug:
            raise
        # an error no command expected: named as the user imports it, to look up or catch
        line, bare = _plain_words(_one_line(exc)), f"{type(exc).__name__}: "
        if line.startswith(bare):
            line = f"{_public_name(exc)}: {line.removeprefix(bare)}"
        sys.stderr.write(f"x402-eur: {line}\n(run with --debug for the traceback)\n")
        return 1
