"""The `x402-eur` command line (the reference is docs/cli.md).

- `x402-eur fetch URL`: curl with payment, configured from the environment
  (`PaymentOptions.from_env()`); the body goes to stdout (or `-o FILE`), the receipt to
  stderr (`--json`: as JSON, on stdout when `-o` is given, else on stderr).
- `x402-eur quote URL`: what a resource costs and whether each offer would be paid;
  nothing is paid.
- `x402-eur payments`: the payments journaled in the state file; `x402-eur resume ID`
  finishes one that a failure left unfinished, never paying again.
- `x402-eur demo`: starts the sandbox and pays for resources on every rail it can run
  (euro; EVM permit when anvil is installed; the bridge with a live progress display).
- `x402-eur sandbox`: runs the sandbox until Ctrl-C or SIGTERM and prints its URLs,
  credentials and the `export` lines that make `fetch` pay from the sandbox payer.
- `x402-eur mcp`: an MCP server whose tools pay for HTTP within a budget (`mcp_server`).

State: `fetch`, `quote`, `payments` and `resume` keep the payment journal and the budgets
in one SQLite file (`default_state_path()`: `$X402_EUR_STATE`, else
`$XDG_DATA_HOME/x402-eur/state.sqlite3`), so `--budget 0.20/24h` holds across runs and a
payment a crash left unfinished can be resumed. `--state PATH` names another file,
`--no-state` keeps everything in memory for one run.

Heavy imports happen inside the commands, so `x402-eur --help` stays fast.

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
import json
import os
import sys
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from .__version__ import __version__
from ._redact import safe_url

if TYPE_CHECKING:
    from ._options import PaymentOptions
    from ._sqlite import JournalRecord, SqliteStore

__all__ = ["main"]

#: The name of the budgets `--budget` sets: it keeps them apart from other tools' budgets in
#: the state file and does not depend on the limit, so raising or lowering a daily limit
#: keeps what was already spent that day.
BUDGET_NAME = "x402-eur"


class _UsageError(Exception):
    """A mistake in how the command was called: exit code 2."""


class _Trouble(Exception):
    """Something outside the command line is wrong, said in one line: exit code 1."""


def _mistake(prog: str, message: str, hint: str | None = None) -> _UsageError:
    return _UsageError(f"{prog}: {message}\n" + (hint or f"Try '{prog} --help'."))


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


def _grid(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[int] = ()) -> str:
    """A plain text table: stable to read, to grep and to pipe (no wrapping, no colour)."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]

    def line(cells: Sequence[str]) -> str:
        parts = [
            cell.rjust(width) if index in right else cell.ljust(width)
            for index, (cell, width) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(parts).rstrip()

    return "\n".join([line(headers), *(line(row) for row in rows)])


def _money(amount: Decimal | None, currency: str | None) -> str:
    from ._amounts import format_amount

    if amount is None:
        return "?"
    return f"{format_amount(amount)} {currency or ''}".rstrip()


def _receipt_rows(receipt: Any) -> list[tuple[str, str]]:
    rows = [
        ("rail", receipt.rail),
        ("scheme / network", f"{receipt.scheme} / {receipt.network}"),
        ("amount", _money(receipt.amount, receipt.currency)),
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


def _receipt_json(receipt: Any) -> dict[str, Any]:
    data: dict[str, Any] = receipt.to_json()
    return data


def _json_line(data: Any, stream: IO[str]) -> None:
    stream.write(json.dumps(data, default=str) + "\n")
    stream.flush()


def _flat(text: object) -> str:
    return " ".join(str(text).split())


# --- state, options and progress, shared by the commands -----------------------------------


def _state_path(args: argparse.Namespace) -> Path | None:
    """The state file the command uses: `--state`, else the default; None with `--no-state`."""
    if args.no_state:
        return None
    if args.state:
        return Path(args.state).expanduser()
    from ._sqlite import default_state_path

    return default_state_path()


def _state_mistake(args: argparse.Namespace, path: Path | None, exc: BaseException) -> _UsageError:
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else _flat(exc)
    return _mistake(
        f"x402-eur {args.command}",
        f"cannot open the state file {path}: {reason}",
        "Name another with --state PATH (or set X402_EUR_STATE), or use --no-state.",
    )


def _open_state(args: argparse.Namespace, options: PaymentOptions) -> None:
    """Open the options' state file now, so that a bad one is a short message before
    anything is requested, not an error in the middle of a payment."""
    import sqlite3

    from ._exceptions import ConfigurationError
    from ._state import state_of

    try:
        state_of(options)
    except (OSError, sqlite3.Error, ConfigurationError) as exc:
        raise _state_mistake(args, options.state_path, exc) from None


def _close_state(options: PaymentOptions | None) -> None:
    from ._state import state_of

    # Only a state already opened: opening one here, to close it, could fail all over again.
    if options is not None and getattr(options, "_state", None) is not None:
        state_of(options).close()


def _open_store(args: argparse.Namespace, path: Path) -> SqliteStore:
    import sqlite3

    from ._exceptions import ConfigurationError
    from ._sqlite import SqliteStore

    try:
        return SqliteStore(path)
    except (OSError, sqlite3.Error, ConfigurationError) as exc:
        raise _state_mistake(args, path, exc) from None


def _confirm(intent: Any) -> bool:
    from ._amounts import format_amount

    sys.stderr.write(
        f"Pay {format_amount(intent.amount)} {intent.currency} ({intent.rail}) to "
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
    from ._budget_spec import parse_budgets
    from ._options import PaymentOptions

    overrides: dict[str, Any] = {"state_path": _state_path(args) if state else None}
    if getattr(args, "max_amount", None):
        overrides["max_amount_per_payment"] = args.max_amount
    if getattr(args, "budget", None):
        overrides["budgets"] = parse_budgets(args.budget, name=BUDGET_NAME)
    if getattr(args, "confirm", False):
        overrides["on_before_payment"] = _confirm
    if on_progress is not None:
        overrides["on_progress"] = on_progress
    if not from_env:
        return PaymentOptions(**overrides)
    return PaymentOptions.from_env(**overrides)


def _progress(args: argparse.Namespace) -> tuple[Any, AbstractContextManager[None]]:
    """The bridge progress display: on by default when stderr is a terminal."""
    terminal = sys.stderr.isatty()
    show = terminal if args.progress is None else args.progress
    if not show:
        return None, contextlib.nullcontext()
    from .progress import bridge_progress_display

    return bridge_progress_display(plain=not terminal, stream=sys.stderr)


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
                f"x402-eur {args.command}",
                "-d @- reads the body from stdin, which --confirm needs for its question",
                "Put the body in a file (-d @FILE) or drop --confirm.",
            )
        return sys.stdin.buffer.read()
    try:
        return Path(name).expanduser().read_bytes()
    except OSError as exc:
        raise _mistake(
            f"x402-eur {args.command}", f"cannot read {name!r} for -d: {exc.strerror or exc}"
        ) from None


class _Output:
    """Where a body goes: stdout, or `-o FILE`.

    The file is made (as a temporary file beside it) before anything is requested, so a
    path that cannot be written is found before any money moves; it replaces FILE only
    once a response arrived, so a refused payment leaves an existing FILE as it was.
    """

    def __init__(self, args: argparse.Namespace) -> None:
        import tempfile

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
                f"x402-eur {args.command}",
                f"cannot write {str(self.path)!r} for -o: {exc.strerror or exc}",
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


async def _resume_hint(options: PaymentOptions, since: datetime) -> str:
    """What to do about a payment that moved money (or may have) and was not delivered."""
    from ._state import state_of

    journal = state_of(options).journal
    if journal is None:
        return "no state file (--no-state): keep the codes above to claim it"
    ids = [r.id for r in await journal.unfinished() if r.created_at >= since]
    if not ids:
        return "see x402-eur payments --unfinished"
    return f"finish it without paying again: x402-eur resume {ids[-1]}"


# --- fetch ---------------------------------------------------------------------------------


async def _fetch(args: argparse.Namespace) -> int:
    import httpx

    from . import X402Error, with_eur_payment

    body = _request_body(args)
    method = args.method or ("POST" if body is not None else "GET")
    on_progress, display = _progress(args)
    options = _payment_options(args, on_progress=on_progress)
    try:
        _open_state(args, options)
        output = _Output(args)
        # With -o the body has a file of its own, and stdout is free for the JSON receipt.
        report = sys.stdout if args.json and not output.to_stdout else sys.stderr
        since = datetime.now(timezone.utc)
        try:
            client = httpx.AsyncClient(follow_redirects=True, timeout=60)
            async with with_eur_payment(client, options) as client:
                request = client.build_request(method, args.url, headers=args.header, content=body)
                try:
                    with display:
                        response = await client.send(request, stream=True)
                    try:
                        async for chunk in response.aiter_bytes():
                            output.write(chunk)
                    finally:
                        await response.aclose()
                except X402Error as exc:
                    hint = None if exc.money_moved is False else await _resume_hint(options, since)
                    if output.written:
                        output.finish()  # a body cut short after payment: keep what came
                    _report_failure(args, exc, hint, report)
                    return 3
                output.finish()
        finally:
            output.discard()
        receipt = response.extensions.get("x402_payment")
        if args.json:
            _json_line(
                {
                    "url": safe_url(args.url),
                    "method": method,
                    "status": response.status_code,
                    "output": None if output.path is None else str(output.path),
                    "receipt": None if receipt is None else _receipt_json(receipt),
                    "error": None,
                },
                report,
            )
        else:
            lead = "\n" if output.to_stdout and not output.ends_with_newline else ""
            sys.stderr.write(f"{lead}HTTP {response.status_code}\n")
            if receipt is not None:
                for key, value in _receipt_rows(receipt):
                    sys.stderr.write(f"  {key}: {value}\n")
        return 0 if response.status_code < 400 else 22
    finally:
        _close_state(options)


def _report_failure(args: argparse.Namespace, exc: Any, hint: str | None, report: IO[str]) -> None:
    moved = exc.money_moved
    if args.json:
        error = {"type": type(exc).__name__, "message": _flat(exc), "moneyMoved": moved}
        if hint is not None:
            error["next"] = hint
        _json_line(
            {"url": safe_url(args.url), "status": None, "receipt": None, "error": error},
            report,
        )
        if report is sys.stderr:
            return
    sys.stderr.write(f"x402-eur: {type(exc).__name__}: {_flat(exc)}\n")
    if hint is not None:
        what = "money moved" if moved else "money may have moved"
        sys.stderr.write(f"x402-eur: {what}; {hint}\n")


# --- quote ---------------------------------------------------------------------------------


def _configured_in_env() -> bool:
    from ._options import ENV_VARS

    return any(os.environ.get(var) for names in ENV_VARS.values() for var in names)


async def _quote(args: argparse.Namespace) -> int:
    import httpx

    from ._amounts import format_amount
    from ._quote import quote_payment
    from ._transport import with_eur_payment

    body = _request_body(args)
    method = args.method or ("POST" if body is not None else "GET")
    configured = _configured_in_env()
    # The state file is read only to count --budget: a quote never writes a journal entry.
    options = _payment_options(args, state=bool(args.budget), from_env=configured)
    try:
        _open_state(args, options)
        client = httpx.AsyncClient(follow_redirects=True, timeout=60)
        async with with_eur_payment(client, options) as client:
            quote = await quote_payment(client, args.url, method, headers=args.header, content=body)
    finally:
        _close_state(options)
    if args.json:
        data = quote.to_json()
        for entry in data["entries"]:
            if entry["amount"] is not None:  # written the same way on every rail
                entry["amount"] = format_amount(Decimal(entry["amount"]))
        _json_line(data, sys.stdout)
    else:
        if not configured:
            sys.stderr.write(
                "x402-eur: no payment configuration in the environment (X402_EUR_API_KEY, ...): "
                "nothing is payable, prices only\n"
            )
        _print_quote(method, quote)
    if quote.error is not None:
        return 1
    return 0 if quote.status_code < 400 or quote.status_code == 402 else 22


def _raw_price(accept: Any) -> str:
    """The price an entry states, as written, when no rail of ours could read it."""
    amount, asset = accept.get("amount"), accept.get("asset")
    if isinstance(amount, str):
        return f"{amount} {asset}" if isinstance(asset, str) else amount
    atomic = accept.get("maxAmountRequired")
    return f"{atomic} units" if isinstance(atomic, str) else "?"


def _print_quote(method: str, quote: Any) -> None:
    if quote.free:
        print(f"{method} {safe_url(quote.url)}: HTTP {quote.status_code}, free (nothing to pay)")
        return
    if quote.error is not None:
        print(
            f"{method} {safe_url(quote.url)}: 402, but not an x402 challenge: {_flat(quote.error)}"
        )
        return
    payable = len(quote.payable)
    print(
        f"{method} {safe_url(quote.url)}: 402 Payment Required, {len(quote.entries)} offer(s), "
        f"{payable} payable"
    )
    rows = []
    for entry in quote.entries:
        data = entry.to_json()
        if entry.payable:
            verdict = "yes, tried first" if entry.first else "yes"
        else:
            verdict = f"no: {_flat(entry.message or entry.reason or 'not payable')}"
        rows.append(
            [
                str(entry.index),
                _money(entry.amount, entry.currency) if entry.intent else _raw_price(entry.accept),
                str(data["rail"] or data["scheme"] or "?"),
                str(data["network"] or "?"),
                str(data["asset"] or "?"),
                verdict,
            ]
        )
    print(_grid(["#", "PRICE", "RAIL", "NETWORK", "ASSET", "PAYABLE"], rows, right=(0, 1)))


# --- payments and resume -------------------------------------------------------------------


def _journal_path(args: argparse.Namespace) -> tuple[Path, bool]:
    """The state file `payments` and `resume` read, and whether it exists (they never
    create one)."""
    path = _state_path(args)
    if path is None:
        raise _mistake(
            f"x402-eur {args.command}",
            f"{args.command} reads the payment journal in the state file: drop --no-state",
        )
    return path, path.exists()


def _codes(record: JournalRecord) -> str:
    # dict.fromkeys: on the bridge the chain transaction id is also the tx hash
    found = (
        record.payment_request_code,
        record.transaction_code,
        record.blockchain_tx_id,
        record.tx_hash,
    )
    return ", ".join(dict.fromkeys(code for code in found if code))


def _unfinished(record: JournalRecord) -> bool:
    return record.unrecoverable is None and (
        record.outcome in ("pending", "unknown")
        or (record.outcome == "paid" and not record.delivered)
    )


async def _payments(args: argparse.Namespace) -> int:
    path, exists = _journal_path(args)
    if not exists:
        if not args.json:
            sys.stderr.write(f"x402-eur: no payments yet ({path} does not exist)\n")
        return 0
    store = _open_store(args, path)
    try:
        if args.unfinished:
            records = (await store.unfinished())[: args.limit]
        else:
            records = await store.payments(limit=args.limit)
    finally:
        store.close()
    if args.json:
        from ._amounts import format_amount

        for record in records:
            # the amount written the same way on every rail (the journal keeps 6 decimals
            # for chain amounts); `atomic_amount` keeps the exact chain value
            _json_line({**record.to_json(), "amount": format_amount(record.amount)}, sys.stdout)
        return 0
    if not records:
        what = "unfinished payments" if args.unfinished else "payments"
        sys.stderr.write(f"x402-eur: no {what} in {path}\n")
        return 0
    rows = []
    for record in records:
        outcome = record.outcome + (" (gave up)" if record.unrecoverable else "")
        if record.in_progress:
            outcome += " (in progress)"
        rows.append(
            [
                record.id,
                record.created_at.astimezone().strftime("%Y-%m-%d %H:%M:%S"),
                _money(record.amount, record.currency),
                record.rail,
                outcome,
                "yes" if record.delivered else "no",
                record.resource,
                _codes(record),
            ]
        )
    headers = ["ID", "WHEN", "AMOUNT", "RAIL", "OUTCOME", "DELIVERED", "RESOURCE", "CODES"]
    print(_grid(headers, rows, right=(2,)))
    unfinished = [r for r in records if _unfinished(r)]
    waiting = [r for r in unfinished if not r.in_progress]
    if waiting:
        sys.stderr.write(
            f"x402-eur: {len(waiting)} unfinished: x402-eur resume {waiting[0].id} finishes it "
            "without paying again\n"
        )
    if len(unfinished) > len(waiting):
        sys.stderr.write(
            f"x402-eur: {len(unfinished) - len(waiting)} in progress: a running process is "
            "still paying or delivering; leave them to it\n"
        )
    return 0


#: The fewest characters of an id that name a payment (`resume 3f9c2a`).
MIN_ID_PREFIX = 6
#: How many payments an ambiguous start of an id lists.
_CANDIDATES = 10


async def _find_record(args: argparse.Namespace) -> JournalRecord:
    """The journaled payment `args.id` names: its id, or a unique start of it (at least
    `MIN_ID_PREFIX` characters)."""
    prog = f"x402-eur {args.command}"
    hint = "List them with: x402-eur payments --unfinished"
    path, exists = _journal_path(args)
    store = _open_store(args, path) if exists else None
    try:
        record = None if store is None else await store.get(args.id)
        if record is not None:
            return record
        if len(args.id) < MIN_ID_PREFIX:
            raise _mistake(
                prog,
                f"{args.id!r} is too short: give at least {MIN_ID_PREFIX} characters of the id",
                hint,
            )
        found = [] if store is None else await store.starting_with(args.id, _CANDIDATES + 1)
    finally:
        if store is not None:
            store.close()
    if not found:
        raise _mistake(prog, f"no payment {args.id!r} in {path}", hint)
    if len(found) == 1:
        return found[0]
    many = (
        f"more than {_CANDIDATES} payments; the newest {_CANDIDATES}"
        if len(found) > _CANDIDATES
        else f"{len(found)} payments"
    )
    rows = [
        [
            record.id,
            _money(record.amount, record.currency),
            record.resource,
            record.created_at.astimezone().strftime("%Y-%m-%d %H:%M:%S"),
        ]
        for record in found[:_CANDIDATES]
    ]
    table = _grid(["ID", "AMOUNT", "RESOURCE", "CREATED"], rows, right=(1,))
    listed = "\n".join(f"  {line}" for line in table.splitlines())
    raise _mistake(
        prog, f"{args.id!r} matches {many}:\n{listed}", "Give more characters of the id."
    )


async def _resume(args: argparse.Namespace) -> int:
    import httpx

    from ._recovery import recover_payment
    from ._transport import with_eur_payment

    record = await _find_record(args)
    about = f"{_money(record.amount, record.currency)}, {record.rail}, {record.resource}"
    on_progress, display = _progress(args)
    options = _payment_options(args, on_progress=on_progress)
    try:
        _open_state(args, options)
        output = _Output(args)
        try:
            client = httpx.AsyncClient(follow_redirects=True, timeout=60)
            async with with_eur_payment(client, options) as client:
                with display:
                    recovery = await recover_payment(client, record.id, headers=args.header)
            if recovery.response is not None:
                output.write(recovery.response.content)
                output.finish()
        finally:
            output.discard()
    finally:
        _close_state(options)
    reason = _flat(recovery.reason)
    if recovery.reason == "done":
        reason = (
            "it was delivered earlier; nothing to do"
            if recovery.status == "delivered"
            else "it failed earlier; no money moved"
        )
    elif recovery.status == "in_progress":
        reason = (
            "a running process is still paying or delivering it; nothing was sent. "
            "Try again once that process has ended"
        )
    elif recovery.status == "failed":
        reason = f"no money moved, the budget was given back: {reason}"
    elif recovery.status == "pending" and "again" not in reason and "-H" not in reason:
        reason = f"{reason} (try again later)"
    body_shown = recovery.response is not None and output.to_stdout
    lead = "\n" if body_shown and not output.ends_with_newline else ""
    sys.stderr.write(f"{lead}x402-eur: {recovery.status}: {reason} ({about})\n")
    return 0 if recovery.status == "delivered" else 1


# --- demo ----------------------------------------------------------------------------------


def _demo_prices(*, evm: bool = True, chain_a: bool = True) -> dict[str, Any]:
    """The sandbox's resources: the euro ones, plus those of the rails it runs."""
    from .sandbox import DEFAULT_PRICES, Price

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
            from .progress import bridge_progress_display

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

    from .sandbox import Sandbox
    from .sandbox._server import PortInUse

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


async def _mcp(args: argparse.Namespace) -> int:
    from .mcp_server import run

    return await run(args)


# --- the parser ----------------------------------------------------------------------------


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
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras

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


def _amount(value: str) -> str:
    from ._amounts import AmountError, parse_amount

    try:
        parse_amount(value, allow_zero=True)
    except AmountError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def _budget(value: str) -> str:
    from ._budget_spec import parse_budgets

    try:
        if not parse_budgets([value]):
            raise ValueError(f"{value!r} holds no budget")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def _url(value: str) -> str:
    if not value.startswith(("http://", "https://")):
        import re

        scheme = re.match(r"\A([A-Za-z][A-Za-z0-9+.-]*)://", value)
        if scheme is not None:
            raise argparse.ArgumentTypeError(
                f"{value[:80]!r}: the {scheme[1]}:// scheme is not supported "
                "(http:// and https:// only)"
            )
        raise argparse.ArgumentTypeError(
            f"{value!r} is not an http(s) URL (did you mean https://{value}?)"
        )
    return value


def _count(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a count: write a whole number >= 1")
    return int(value)


def _port(value: str) -> int:
    from .sandbox._sandbox import PORT_LAYOUT

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


_ENV_ABOUT = {
    "api_key": "the managed account's API key",
    "from_account": "the account that pays (ACC_...)",
    "api_url": "the payment API (https://, or http:// on loopback)",
    "max_amount_per_payment": "cap per payment, in every currency (--max-amount wins)",
    "evm_private_key": "the key that signs EVM permits (hex)",
    "evm_rpc_url_1": "RPC URL(s) of chain 1, comma-separated",
    "evm_rpc_url_137": "RPC URL(s) of chain 137, comma-separated",
    "assets": "tokens to pay standard x402 exact entries in, comma-separated, each\n"
    "      CHAIN:ADDRESS:SYMBOL:CURRENCY[:DECIMALS] (CURRENCY EUR or USD, DECIMALS\n"
    "      default 6), e.g. 8453:0x...:EURC:EUR:6",
}


def _environment_help() -> str:
    """The environment variables the paying commands read (`ENV_VARS`), for `--help`."""
    from ._options import ENV_VARS

    lines = ["environment:"]
    for name, variables in ENV_VARS.items():
        label = variables[0] + (f" (or {', '.join(variables[1:])})" if variables[1:] else "")
        lines.append(f"  {label}\n      {_ENV_ABOUT.get(name, name.replace('_', ' '))}")
    lines.append(
        "  X402_EUR_STATE\n      the state file (--state wins; default:\n"
        "      $XDG_DATA_HOME/x402-eur/state.sqlite3, i.e. ~/.local/share/x402-eur/state.sqlite3)"
    )
    lines.append(
        "\nbudgets: AMOUNT[CURRENCY][/WINDOW], e.g. 5.00/24h, 2.00USD/24h, 1.00 (a total);\n"
        "window units s, m, h, d. They are kept in the state file: repeated runs share them.\n"
        "With any budget given, offers in a currency no budget covers are refused: add\n"
        "--budget 2.00USD/24h to pay dollar offers under a euro budget."
    )
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="x402-eur",
        description="Pay x402-gated HTTP resources in euros.",
        epilog="Exit codes: 0 ok, 1 error, 2 usage, 3 payment refused or failed, "
        "22 HTTP error status. Reference: docs/cli.md.",
    )
    _global_options(parser, top=True)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    state = _Parser(add_help=False)
    where = state.add_mutually_exclusive_group()
    where.add_argument(
        "--state",
        metavar="PATH",
        help="the state file: journal and budgets (default $X402_EUR_STATE, else "
        "~/.local/share/x402-eur/state.sqlite3)",
    )
    where.add_argument(
        "--no-state", action="store_true", help="no state file: journal and budgets in memory"
    )
    progress = _Parser(add_help=False)
    progress.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show the progress of long bridge waits on stderr (default: when it is a terminal)",
    )
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
    raw = argparse.RawDescriptionHelpFormatter

    fetch = commands.add_parser(
        "fetch",
        help="fetch a URL, paying if asked (curl-like)",
        parents=[request, limits, state, progress],
        formatter_class=raw,
        description="Fetch URL; when it answers 402, pay within the limits and fetch it\n"
        "again. The body goes to stdout (or -o FILE), the receipt to stderr\n"
        "(with --json: one JSON object, on stdout when -o FILE is given, else on stderr).",
    )
    fetch.add_argument("-o", "--output", metavar="FILE", help="write the body to FILE")
    fetch.add_argument(
        "--json",
        action="store_true",
        help="print the receipt as one JSON object: on stdout with -o FILE, else on stderr",
    )
    fetch.add_argument("--confirm", action="store_true", help="ask before paying")
    fetch.epilog_factory = _environment_help

    quote = commands.add_parser(
        "quote",
        help="what a URL costs, and whether each offer would be paid (pays nothing)",
        parents=[request, limits, state],
        formatter_class=raw,
        description="Request URL without paying and show its price options: for each,\n"
        "whether this configuration would pay it, and why not. Nothing is paid.",
    )
    quote.add_argument("--json", action="store_true", help="print the quote as JSON")
    quote.epilog_factory = _environment_help

    payments = commands.add_parser(
        "payments",
        help="the payments journaled in the state file",
        parents=[state],
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

    resume = commands.add_parser(
        "resume",
        help="finish an unfinished payment, never paying again",
        parents=[state, progress],
        formatter_class=raw,
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
    resume.epilog_factory = _environment_help

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

    from . import mcp_server

    mcp_server.configure_parser(
        commands.add_parser("mcp", help="serve MCP tools that pay for HTTP within a budget")
    )
    for command in commands.choices.values():
        _global_options(command, top=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    debug = "--debug" in (sys.argv[1:] if argv is None else argv)
    try:
        args = _parser().parse_args(argv)
        debug = args.debug
        command = {
            "demo": _demo,
            "fetch": _fetch,
            "sandbox": _sandbox,
            "mcp": _mcp,
            "quote": _quote,
            "payments": _payments,
            "resume": _resume,
        }[args.command]
        return asyncio.run(command(args))
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
        sys.stderr.write(f"x402-eur: {_one_line(exc)}\n(run with --debug for the traceback)\n")
        return 1


def _one_line(exc: BaseException) -> str:
    """What went wrong, in one line a person can act on."""
    import httpx

    if isinstance(exc, httpx.ConnectError):
        where = safe_url(str(exc.request.url)) if exc._request is not None else "the server"
        return f"cannot connect to {where}: {exc or 'connection refused'}"
    if isinstance(exc, httpx.TimeoutException):
        return f"timed out: {type(exc).__name__}"
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
