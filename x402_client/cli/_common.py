"""What the commands share: usage mistakes, the state file, the payment options, the
progress display, the request body and where a response body goes."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from contextlib import AbstractContextManager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from .._frontend import common as _frontend
from .._protocol.redact import safe_url

if TYPE_CHECKING:
    from .._options import PaymentOptions
    from .._protocol.dsn import PostgresDsn
    from .._state.stores import JournalStore


class _UsageError(Exception):
    """A mistake in how the command was called: exit code 2."""


class _Trouble(Exception):
    """Something outside the command line is wrong, said in one line: exit code 1."""


def _mistake(prog: str, message: str, hint: str | None = None) -> _UsageError:
    return _UsageError(f"{prog}: {message}\n" + (hint or f"Try '{prog} --help'."))


def _prog(args: argparse.Namespace) -> str:
    return f"x402-eur {args.command}"


# --- the state file --------------------------------------------------------------------------


def _state_path(args: argparse.Namespace) -> Path | PostgresDsn | None:
    """The state file the command uses: `--state`, else the default; None with `--no-state`."""
    return _frontend.state_path(args.state, no_state=args.no_state)


def _open_state(args: argparse.Namespace, options: PaymentOptions) -> None:
    """Open the options' state file now: a bad one is a usage mistake before anything is
    requested."""
    try:
        _frontend.open_state(options)
    except _frontend.StateFileMistake as exc:
        raise _mistake(_prog(args), str(exc), _frontend.STATE_FIX) from None


def _close_state(options: PaymentOptions | None) -> None:
    from .._state.shared import state_of

    # Only a state already opened: opening one here, to close it, could fail all over again.
    if options is not None and getattr(options, "_state", None) is not None:
        state_of(options).close()


def _open_store(args: argparse.Namespace, path: Path | PostgresDsn) -> JournalStore:
    import sqlite3

    from .._protocol.errors import ConfigurationError
    from .._state.stores import open_store

    try:
        return open_store(path)
    except (OSError, sqlite3.Error, ConfigurationError) as exc:
        message = _frontend.state_file_message(path, exc)
        raise _mistake(_prog(args), message, _frontend.STATE_FIX) from None


# --- the options a command pays with ---------------------------------------------------------


def _switch_line(intent: Any) -> str | None:
    """One line when a payment is in another currency because a budget refused the
    offers in the currency expected (`PaymentIntent.instead_of`); None otherwise."""
    from .._protocol.amounts import format_money

    if not intent.instead_of:
        return None
    why = _frontend.plain_words(intent.instead_of)
    paid = format_money(intent.amount, intent.currency, intent.asset_symbol)
    return f"x402-eur: paying {paid} instead: {why}\n"


def _announcer(args: argparse.Namespace) -> Any:
    """The hook that says a switch of currency before it is paid (not with -s)."""
    if getattr(args, "silent", False):
        return None

    def announce(intent: Any) -> bool:
        line = _switch_line(intent)
        if line is not None:
            sys.stderr.write(line)
            sys.stderr.flush()
        return True

    return announce


def _confirm(intent: Any) -> bool:
    from .._protocol.amounts import format_money

    line = _switch_line(intent)
    if line is not None:
        sys.stderr.write(line)
    sys.stderr.write(
        f"Pay {format_money(intent.amount, intent.currency)} ({intent.rail}) to "
        f"{intent.pay_to} for {safe_url(intent.resource)}? [y/N] "
    )
    sys.stderr.flush()
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def _payment_options(
    args: argparse.Namespace,
    *,
    on_progress: Any = None,
    state: bool = True,
    from_env: bool = True,
) -> PaymentOptions:
    """The options a command pays with: the environment, then the command line."""
    budgets = getattr(args, "budget", None)
    return _frontend.payment_options(
        from_env=from_env,
        state_path=_state_path(args) if state else None,
        max_amount_per_payment=getattr(args, "max_amount", None) or None,
        budgets=_frontend.parse_budget_texts(budgets, name=_frontend.BUDGET_NAME)
        if budgets
        else None,
        on_before_payment=_confirm if getattr(args, "confirm", False) else _announcer(args),
        on_progress=on_progress,
        sign_in_with_x=getattr(args, "sign_in", None),
    )


def _progress(args: argparse.Namespace) -> tuple[Any, AbstractContextManager[None]]:
    """The bridge progress display: on by default when stderr is a terminal."""
    terminal = sys.stderr.isatty()
    show = terminal if args.progress is None else args.progress
    show = show and not getattr(args, "silent", False)
    if not show:
        return None, contextlib.nullcontext()
    from ..progress import bridge_progress_display

    return bridge_progress_display(plain=not terminal, stream=sys.stderr)


# --- request and response bodies --------------------------------------------------------------


def _request_body(args: argparse.Namespace) -> bytes | None:
    """`-d TEXT`, `-d @FILE` (the file's bytes as they are) or `-d @-` (stdin)."""
    data: str | None = args.data
    if data is None:
        return None
    if not data.startswith("@"):
        return data.encode()
    name = data[1:]
    if name == "-":
        if getattr(args, "confirm", False):
            raise _mistake(
                _prog(args),
                "-d @- reads the body from stdin, which --confirm needs for its question",
                "Put the body in a file (-d @FILE) or drop --confirm.",
            )
        return sys.stdin.buffer.read()
    try:
        return Path(name).expanduser().read_bytes()
    except OSError as exc:
        raise _mistake(_prog(args), f"cannot read {name!r} for -d: {exc.strerror or exc}") from None


class _Output:
    """Where a body goes: stdout, or `-o FILE`.

    The file is made (as a temporary file beside it) before anything is requested, so a
    path that cannot be written is found before any money moves; it replaces FILE only
    once a response arrived, so a refused payment leaves an existing FILE as it was.
    """

    def __init__(self, args: argparse.Namespace) -> None:
        self.path: Path | None = None
        self.written = 0
        self.ends_with_newline = True
        self._tmp: str | None = None
        self._file: IO[bytes] = sys.stdout.buffer
        if args.output in (None, "-"):
            return
        self.path = Path(args.output).expanduser()
        try:
            if self.path.is_dir():
                raise IsADirectoryError(21, "is a directory")
            handle, self._tmp = tempfile.mkstemp(
                dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".part"
            )
        except OSError as exc:
            raise _mistake(
                _prog(args), f"cannot write {str(self.path)!r} for -o: {exc.strerror or exc}"
            ) from None
        self._file = os.fdopen(handle, "wb")

    @property
    def to_stdout(self) -> bool:
        return self.path is None

    def write(self, chunk: bytes) -> None:
        if chunk:
            self._file.write(chunk)
            self.written += len(chunk)
            self.ends_with_newline = chunk.endswith(b"\n")

    def finish(self) -> None:
        """Keep what was written: flush stdout, or move the file into place."""
        self._file.flush()
        if self._tmp is None or self.path is None:
            return
        self._file.close()
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(self._tmp, 0o666 & ~umask)
        os.replace(self._tmp, self.path)
        self._tmp = None

    def discard(self) -> None:
        """Nothing to keep (the request failed): remove the temporary file, if any."""
        if self._tmp is None:
            return
        self._file.close()
        with contextlib.suppress(OSError):
            os.unlink(self._tmp)
        self._tmp = None
