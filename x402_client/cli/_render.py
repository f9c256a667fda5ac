"""How the commands show things: tables, receipts, quotes, payments, failures and what to
do about them, in the words of someone at a shell."""

from __future__ import annotations

import contextlib
import json
import logging
import re
import sys
from collections.abc import Iterator, Sequence
from decimal import Decimal
from typing import IO, TYPE_CHECKING, Any

from .._frontend.common import plain_words, refusal_line, skipped_lines
from .._protocol.redact import safe_url

if TYPE_CHECKING:
    from .._protocol.assets import Asset
    from .._protocol.errors import X402Error
    from .._state.channels import ChannelRecord
    from .._state.sqlite_store import JournalRecord


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


def _grid(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    right: Sequence[int] = (),
    *,
    wrap: Sequence[int] = (),
    prefix: Sequence[int] = (),
    width: int | None = None,
) -> str:
    """A plain text table: stable to read, to grep and to pipe (no colour).

    It fits `width` (the terminal's: `COLUMNS`, else the terminal itself; piped without
    `COLUMNS`, no limit): first every hash or address is shortened explicitly (`0x1234…abcd`,
    never cut elsewhere), then the `wrap` columns wrap onto more lines, widest first, at
    spaces, commas and URL separators only, so a code, hash or word is never split; then
    the `prefix` columns (payment ids) show their first 12 characters and `…`, which
    `resume` takes as they are. What cannot fit that way overflows rather than being cut."""
    limit = _terminal_width() if width is None else width
    table = [list(headers), *(list(row) for row in rows)]
    if limit and _width_of(table) > limit:
        table = [[_short_hashes(cell) for cell in row] for row in table]
    widths = _fitted(table, wrap, limit)
    if limit and sum(widths) + 2 * (len(widths) - 1) > limit and prefix:
        for row in table[1:]:
            for index in prefix:
                row[index] = row[index] if len(row[index]) <= 13 else row[index][:12] + "…"
        widths = _fitted(table, wrap, limit)

    def lines(cells: Sequence[str]) -> list[str]:
        wrapped = [
            _wrapped(cell, width) if index in wrap else [cell]
            for index, (cell, width) in enumerate(zip(cells, widths, strict=True))
        ]
        out = []
        for line in range(max(len(parts) for parts in wrapped)):
            texts = [part[line] if line < len(part) else "" for part in wrapped]
            out.append(
                "  ".join(
                    text.rjust(width) if index in right else text.ljust(width)
                    for index, (text, width) in enumerate(zip(texts, widths, strict=True))
                ).rstrip()
            )
        return out

    return "\n".join(line for row in table for line in lines(row))


def _fitted(table: Sequence[Sequence[str]], wrap: Sequence[int], limit: int) -> list[int]:
    """The column widths: natural, then the `wrap` columns narrowed, widest first, as far
    as `limit` asks and their longest unbreakable piece allows."""
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for index in sorted(wrap, key=lambda i: -widths[i]):
        excess = sum(widths) + 2 * (len(widths) - 1) - limit
        if not limit or excess <= 0:
            break
        narrowest = max(len(piece.rstrip()) for row in table for piece in _pieces(row[index]))
        widths[index] = max(narrowest, widths[index] - excess)
    return widths


#: A hash or an address (0x and at least 16 hex digits), shortened as `0x1234…abcd`.
_HASH = re.compile(r"\b0x[0-9a-fA-F]{12,}([0-9a-fA-F]{4})\b")


def _short_hashes(cell: str) -> str:
    return _HASH.sub(lambda found: f"{found[0][:6]}…{found[1]}", cell)


def _width_of(table: Sequence[Sequence[str]]) -> int:
    columns = len(table[0])
    return sum(max(len(row[i]) for row in table) for i in range(columns)) + 2 * (columns - 1)


def _terminal_width() -> int:
    """`COLUMNS`, else the terminal's width; 0 (no limit) when stdout is not a terminal."""
    import os
    import shutil

    if os.environ.get("COLUMNS", "").isdigit() or sys.stdout.isatty():
        return shutil.get_terminal_size((0, 0)).columns
    return 0


def _pieces(text: str) -> list[str]:
    """`text` in the pieces a line may break after: a word with the separators (`/`, `?`,
    `&`, `,`) and spaces that follow it."""
    return re.findall(r"[^\s/?&,]+[/?&,]*\s*|[/?&,]+\s*|\s+", text) or [text]


def _wrapped(text: str, width: int) -> list[str]:
    lines = [""]
    for piece in _pieces(text):
        if lines[-1] and len(lines[-1] + piece.rstrip()) > width:
            lines[-1] = lines[-1].rstrip()
            lines.append("")
        lines[-1] += piece
    return [line.rstrip() for line in lines]


def _money(amount: Decimal | None, currency: str | None, symbol: str | None = None) -> str:
    from .._protocol.amounts import format_money

    if amount is None:
        return "?"
    return format_money(amount, currency, symbol)


def _receipt_rows(receipt: Any, symbol: str | None = None) -> list[tuple[str, str]]:
    """A receipt's lines; `symbol` is the paid asset's, when known (the receipt names the
    asset by its address or id)."""
    rows = [
        ("rail", receipt.rail),
        ("scheme / network", f"{receipt.scheme} / {receipt.network}"),
        ("amount", _money(receipt.amount, receipt.currency, symbol)),
        ("asset", receipt.asset),
        ("paid to", receipt.pay_to),
    ]
    # on the bridge the chain transaction id is also the tx hash: shown once
    tx_hash = None if receipt.tx_hash == receipt.blockchain_tx_id else receipt.tx_hash
    for label, value in (
        ("payment request", receipt.payment_request_code),
        ("transaction code", receipt.transaction_code),
        ("chain tx id", receipt.blockchain_tx_id),
        ("tx hash", tx_hash),
        ("payer", receipt.payer),
    ):
        if value:
            rows.append((label, str(value)))
    return rows


def _json_line(data: Any, stream: IO[str]) -> None:
    stream.write(json.dumps(data, default=str) + "\n")
    stream.flush()


def _flat(text: object) -> str:
    return " ".join(str(text).split())


# --- failures and what to do about them ------------------------------------------------------


def _next_step(exc: X402Error, journaled: bool) -> str | None:
    """What to do about a payment that moved money (or may have) and was not delivered,
    as the command to run; None when no money moved."""
    advice = exc.recovery()
    if advice is None:
        return None
    if advice.payment_id is not None:
        return f"finish it without paying again: x402-eur resume {advice.payment_id}"
    if not journaled:
        return "no state file (--no-state): keep the codes above to claim it"
    return "see x402-eur payments --unfinished"


def _failure_text(args: Any, exc: X402Error) -> str:
    """What failed, in the words of someone at a shell: a payment declined at the
    `--confirm` prompt is said so, not as the Python hook that refused it."""
    from .._protocol.errors import PaymentRejectedByHook

    if (
        isinstance(exc, PaymentRejectedByHook)
        and getattr(args, "confirm", False)
        and exc.__cause__ is None
    ):
        intent = exc.intent
        what = (
            ""
            if intent is None
            else f" ({_money(intent.amount, intent.currency)} to {intent.pay_to})"
        )
        return f"declined at the prompt: nothing was paid{what}"
    return f"{type(exc).__name__}: {refusal_line(exc)}"


def _fetch_json(
    args: Any,
    method: str,
    *,
    status: int | None = None,
    output: str | None = None,
    receipt: Any = None,
    error: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The one JSON object `fetch --json` prints: the same keys on success and failure."""
    return {
        "url": safe_url(args.url),
        "method": method,
        "status": status,
        "output": output,
        "receipt": None if receipt is None else receipt.to_json(),
        "error": error,
    }


def _error_json(exc: BaseException, money_moved: bool | None, text: str) -> dict[str, Any]:
    return {"type": type(exc).__name__, "message": text, "moneyMoved": money_moved}


def _report_failure(
    args: Any, exc: X402Error, hint: str | None, report: IO[str], method: str
) -> None:
    """A refusal in one line, its skipped offers counted by reason; each offer's own
    reason follows on `--debug`, and is in the JSON object's `skipped` with `--json`."""
    moved = exc.money_moved
    text = _failure_text(args, exc)
    if args.json:
        error = _error_json(exc, moved, text.removeprefix(f"{type(exc).__name__}: "))
        if exc.skipped:
            error["skipped"] = [
                {"index": s.index, "reason": s.reason.value, "message": line.split(": ", 1)[1]}
                for s, line in zip(exc.skipped, skipped_lines(exc), strict=True)
            ]
        if hint is not None:
            error["next"] = hint
        _json_line(_fetch_json(args, method, error=error), report)
        if report is sys.stderr:
            return
    debug = bool(getattr(args, "debug", False))
    more = "; --debug for each" if exc.skipped and not debug else ""
    sys.stderr.write(f"x402-eur: {text}{more}\n")
    if exc.skipped and debug:
        sys.stderr.writelines(f"  {line}\n" for line in skipped_lines(exc))
    if hint is not None:
        what = "money moved" if moved else "money may have moved"
        sys.stderr.write(f"x402-eur: {what}; {hint}\n")


def _interrupted(record: Any) -> str | None:
    """What to do about a payment interrupted (Ctrl-C) once its rail was called: the
    command that finishes it, or the code that identifies it; None before the rail."""
    if record is None or not record.rail_called:
        return None
    if record.journal_id is not None:
        hint = f"finish it without paying again: x402-eur resume {record.journal_id}"
    else:
        entry = record.entry
        code = entry.transaction_code or entry.payment_request_code
        hint = "no state file (--no-state)" + (f": keep {code} to claim it" if code else "")
    return f"x402-eur: interrupted; money may have moved; {hint}"


# --- quotes, payments, recoveries --------------------------------------------------------------


def _raw_price(accept: Any) -> str:
    """The price an entry states when no rail of ours could read it, as money is written
    everywhere (`0.10 USD (USDC)`): a euro entry's amount, or a token amount whose asset the
    client knows (`KNOWN_ASSETS`: its decimals and currency). Atomic units of an unknown
    asset are never shown as a price ("?"): `quote --json` keeps the entry as written."""
    from .._protocol.assets import find_asset

    amount, asset = accept.get("amount"), accept.get("asset")
    if accept.get("scheme") == "euro" and isinstance(amount, str):
        with contextlib.suppress(ArithmeticError, ValueError):
            return _money(Decimal(amount), asset if isinstance(asset, str) else None)
        return "?"
    atomic = accept.get("maxAmountRequired", amount)
    network = str(accept.get("network") or "")
    chain = network.removeprefix("eip155:")
    if not (isinstance(atomic, str) and atomic.isdigit() and chain.isdigit()):
        return "?"
    known = find_asset(int(chain), asset) if isinstance(asset, str) else None
    if known is None:
        return "?"
    return _money(Decimal(int(atomic)).scaleb(-known.decimals), known.currency, known.symbol)


def _quote_row(entry: Any) -> list[str]:
    data = entry.to_json()
    if entry.payable:
        verdict = "yes, tried first" if entry.first else "yes"
    else:
        verdict = f"no: {plain_words(_flat(entry.message or entry.reason or 'not payable'))}"
    return [
        str(entry.index),
        _money(entry.amount, entry.currency) if entry.intent else _raw_price(entry.accept),
        str(data["rail"] or data["scheme"] or "?"),
        str(data["network"] or "?"),
        str((entry.intent.asset_symbol if entry.intent else None) or data["asset"] or "?"),
        verdict,
    ]


def _print_quote(method: str, quote: Any) -> None:
    where = f"{method} {safe_url(quote.url)}"
    if quote.free and quote.status_code >= 400:
        # an error answer is no price: the resource may not exist, or want credentials
        print(f"{where}: HTTP {quote.status_code}, not a payment gate (nothing to pay)")
        return
    if quote.free:
        print(f"{where}: HTTP {quote.status_code}, free (nothing to pay)")
        return
    if quote.error is not None:
        print(f"{where}: 402, but not an x402 challenge: {_flat(quote.error)}")
        return
    print(
        f"{where}: 402 Payment Required, {len(quote.entries)} "
        f"offer{'' if len(quote.entries) == 1 else 's'}, "
        f"{len(quote.payable)} payable"
    )
    rows = [_quote_row(entry) for entry in quote.entries]
    headers = ["#", "PRICE", "RAIL", "NETWORK", "ASSET", "PAYABLE"]
    print(_grid(headers, rows, right=(0, 1), wrap=(5,)))


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


def _when(record: JournalRecord) -> str:
    return record.created_at.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def _payment_row(record: JournalRecord) -> list[str]:
    outcome = record.outcome + (" (gave up)" if record.unrecoverable else "")
    if record.in_progress:
        outcome += f" (in progress: {record.worker})" if record.worker else " (in progress)"
    return [
        record.id,
        _when(record),
        _money(record.amount, record.currency),
        record.rail,
        outcome,
        "yes" if record.delivered else "no",
        record.resource,
        _codes(record),
    ]


def _print_payments(records: Sequence[JournalRecord]) -> None:
    headers = ["ID", "WHEN", "AMOUNT", "RAIL", "OUTCOME", "DELIVERED", "RESOURCE", "CODES"]
    rows = [_payment_row(record) for record in records]
    print(_grid(headers, rows, right=(2,), wrap=(6, 7), prefix=(0,)))
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


def _print_sessions(records: Sequence[ChannelRecord], declared: Sequence[Asset]) -> None:
    """The sessions in a table, amounts in the asset's units; then how to take back what
    the open ones hold unspent."""
    from .._frontend import sessions

    headers = ["ID", "RESOURCE", "NETWORK", "ASSET", "DEPOSITED", "SPENT", "SIGNED"]
    headers += ["REFUNDED", "STATUS"]
    rows = []
    for record in records:
        data = sessions.session_json(record, sessions.symbol_of(record, declared))
        amounts = [data[key] for key in ("deposited", "spent", "signed", "refunded")]
        rows.append(
            [
                sessions.short_id(record.channel_id),
                record.origin,
                record.network,
                data["symbol"] or record.asset,
                *amounts,
                record.status,
            ]
        )
    print(_grid(headers, rows, right=(4, 5, 6, 7), wrap=(1,)))
    holding = [r for r in records if r.status == "open" and sessions.unspent(r) > 0]
    if holding:
        sys.stderr.write(
            f"x402-eur: {len(holding)} open session(s) hold an unspent deposit: x402-eur "
            f"sessions refund {holding[0].channel_id[:12]} asks its merchant to return it\n"
        )


def _candidates(found: Sequence[JournalRecord]) -> str:
    """The payments an ambiguous start of an id names, indented under the message."""
    rows = [[r.id, _money(r.amount, r.currency), r.resource, _when(r)] for r in found]
    table = _grid(["ID", "AMOUNT", "RESOURCE", "CREATED"], rows, right=(1,), width=0)
    return "\n".join(f"  {line}" for line in table.splitlines())


def _recovery_reason(recovery: Any) -> str:
    """What `resume` found and did, in words."""
    reason = _flat(recovery.reason)
    if recovery.reason == "done":
        return (
            "it was delivered earlier; nothing to do"
            if recovery.status == "delivered"
            else "it failed earlier; no money moved"
        )
    if recovery.status == "in_progress":
        return (
            "a running process is still paying or delivering it; nothing was sent. "
            "Try again once that process has ended"
        )
    if recovery.status == "failed":
        return f"no money moved, the budget was given back: {reason}"
    if recovery.status == "pending" and "again" not in reason and "x402-eur resume" not in reason:
        return f"{reason} (try again later)"
    return reason


class _ShellWords(logging.Filter):
    """Drops the library's instructions written for Python callers (`extensions={...}`):
    the command line says the command to run instead; and its note on an interrupted
    payment (a cancel scope's id), which the command line says in its last line, with the
    command that finishes it."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = str(record.msg)
        return "extensions=" not in text and not text.startswith("x402: payment interrupted")


@contextlib.contextmanager
def _shell_logging() -> Iterator[None]:
    """The library's warnings on stderr, as Python would print them unconfigured, minus
    what is said for Python callers only."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.WARNING)
    handler.addFilter(_ShellWords())
    ours = logging.getLogger("x402_client")
    ours.addHandler(handler)
    try:
        yield
    finally:
        ours.removeHandler(handler)
