"""The paying commands: `fetch`, `quote`, `payments`, `resume`, and `mcp` (served by the
MCP package, reached through its name)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from contextlib import AbstractContextManager
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from .._frontend import common as _frontend
from .._frontend.common import one_line as _one_line
from .._protocol.redact import safe_url
from ._common import (
    _close_state,
    _mistake,
    _open_state,
    _open_store,
    _Output,
    _payment_options,
    _prog,
    _progress,
    _request_body,
    _state_path,
)
from ._render import (
    _candidates,
    _error_json,
    _fetch_json,
    _interrupted,
    _json_line,
    _money,
    _next_step,
    _print_payments,
    _print_quote,
    _receipt_rows,
    _recovery_reason,
    _report_failure,
)

if TYPE_CHECKING:
    import httpx

    from .._options import PaymentOptions
    from .._protocol.dsn import PostgresDsn
    from .._state.sqlite_store import JournalRecord

# --- fetch ---------------------------------------------------------------------------------


class _RequestFailed(Exception):
    """The request failed with an error that is not a payment's (a connection refused,
    a timeout); `money_moved` says whether a payment of it may have moved money."""

    def __init__(self, error: Exception, money_moved: bool | None) -> None:
        super().__init__(str(error))
        self.error = error
        self.money_moved = money_moved


async def _fetch(args: argparse.Namespace) -> int:
    import httpx

    # With -o the body has a file of its own, and stdout is free for the JSON receipt.
    report = sys.stdout if args.json and args.output not in (None, "-") else sys.stderr
    try:
        return await _fetch_reporting(args, report)
    except (_RequestFailed, httpx.HTTPError) as exc:
        # The payment's own failures are reported where they happen (exit 3); these are
        # the others (configuration, connection): as JSON with the same keys, with --json.
        error, moved = (
            (exc.error, exc.money_moved) if isinstance(exc, _RequestFailed) else (exc, False)
        )
        if not args.json:
            raise error from None
        method = args.method or ("POST" if args.data is not None else "GET")
        _json_line(
            _fetch_json(
                args,
                method,
                error=_error_json(
                    error, moved, _one_line(error).removeprefix(f"{type(error).__name__}: ")
                ),
            ),
            report,
        )
        return 1


_NOT_CONFIGURED = (
    "no payment configuration in the environment: set X402_EUR_API_KEY, X402_EUR_ACCOUNT "
    "and X402_EUR_API_URL (a managed account) or X402_EUR_EVM_PRIVATE_KEY (EVM)"
)


async def _fetch_reporting(args: argparse.Namespace, report: IO[str]) -> int:
    body = _request_body(args)
    method = args.method or ("POST" if body is not None else "GET")
    on_progress, display = _progress(args)
    # A free URL needs no payment configuration: without one, nothing can be paid.
    configured = _frontend.configured_in_env()
    options = _payment_options(args, on_progress=on_progress, from_env=configured)
    try:
        _open_state(args, options)
        output = _Output(args)
        try:
            response = await _fetch_into(args, options, (method, body), display, output, report)
        finally:
            output.discard()
    finally:
        _close_state(options)
    if response is None:
        if not configured:
            sys.stderr.write(f"x402-eur: {_NOT_CONFIGURED}\n")
        return 3
    _report_response(args, method, response, output, report)
    return 0 if response.status_code < 400 else 22


async def _fetch_into(
    args: argparse.Namespace,
    options: PaymentOptions,
    what: tuple[str, bytes | None],
    display: AbstractContextManager[None],
    output: _Output,
    report: IO[str],
) -> httpx.Response | None:
    """The response, its body written to `output`; None when the payment failed (said)."""
    import httpx

    from .. import X402Error, with_eur_payment
    from .._state.http import default_ssl_context

    method, body = what
    since = datetime.now(timezone.utc)
    client = httpx.AsyncClient(
        follow_redirects=args.location, timeout=60, verify=default_ssl_context()
    )
    async with with_eur_payment(client, options) as client:
        request = client.build_request(method, args.url, headers=args.header, content=body)
        try:
            with display:
                response = await client.send(request, stream=True)
            try:
                if args.include:
                    output.write(_head(response))
                async for chunk in response.aiter_bytes():
                    output.write(chunk)
            finally:
                await response.aclose()
        except (asyncio.CancelledError, KeyboardInterrupt):
            said = _interrupted(_frontend.payment_record(request))
            if said is not None:
                sys.stderr.write(f"\n{said}\n")
            raise
        except httpx.HTTPError as exc:
            if not isinstance(exc, X402Error):
                # a failure that says nothing of money: a payment whose rail was called
                # may have moved it
                record = _frontend.payment_record(request)
                moved = None if record is not None and record.rail_called else False
                raise _RequestFailed(exc, moved) from exc
            _frontend.note_payment_id(exc, request)
            if exc.payment_id is None and exc.money_moved is not False:
                exc.payment_id = await _latest_unfinished(options, since)
            if output.written:
                output.finish()  # a body cut short after payment: keep what came
            hint = _next_step(exc, journaled=options.state_path is not None)
            _report_failure(args, exc, hint, report, method)
            return None
        output.finish()
        return response


def _head(response: httpx.Response) -> bytes:
    """The status line and headers as they came (curl -i), each line ended by CRLF."""
    lines = [f"{response.http_version} {response.status_code} {response.reason_phrase}"]
    lines += [f"{name}: {value}" for name, value in response.headers.multi_items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace")


async def _latest_unfinished(options: PaymentOptions, since: datetime) -> str | None:
    """The journal id of the newest unfinished payment made since `since`, if any."""
    from .._state.shared import state_of

    journal = state_of(options).journal
    if journal is None:
        return None
    ids = [r.id for r in await journal.unfinished() if r.created_at >= since]
    return ids[-1] if ids else None


def _report_response(
    args: argparse.Namespace,
    method: str,
    response: httpx.Response,
    output: _Output,
    report: IO[str],
) -> None:
    receipt = response.extensions.get("x402_payment")
    if args.json:
        path = None if output.path is None else str(output.path)
        data = _fetch_json(args, method, status=response.status_code, output=path, receipt=receipt)
        _json_line(data, report)
        return
    if args.silent:
        return
    lead = "\n" if output.to_stdout and not output.ends_with_newline else ""
    where = response.headers.get("location")
    if where is not None and response.is_redirect:
        # not followed (no -L): say where it leads, without the URL's credentials
        target = safe_url(str(response.url.join(where)))
        sys.stderr.write(f"{lead}HTTP {response.status_code}, redirects to {target} (-L follows)\n")
    else:
        sys.stderr.write(f"{lead}HTTP {response.status_code}\n")
    if receipt is not None:
        symbol = _frontend.paid_symbol(response)
        for key, value in _receipt_rows(receipt, symbol):
            sys.stderr.write(f"  {key}: {value}\n")


# --- quote ---------------------------------------------------------------------------------


async def _quote(args: argparse.Namespace) -> int:
    import httpx

    from .._adapters.httpx_async import with_eur_payment
    from .._adapters.paying_client import payments
    from .._state.http import default_ssl_context

    body = _request_body(args)
    method = args.method or ("POST" if body is not None else "GET")
    configured = _frontend.configured_in_env()
    # The state file is read only to count --budget: a quote never writes a journal entry.
    options = _payment_options(args, state=bool(args.budget), from_env=configured)
    try:
        _open_state(args, options)
        client = httpx.AsyncClient(follow_redirects=True, timeout=60, verify=default_ssl_context())
        async with with_eur_payment(client, options) as client:
            quote = await payments(client).quote(
                args.url, method, headers=args.header, content=body
            )
    finally:
        _close_state(options)
    if args.json:
        _json_line(_frontend.quote_json(quote), sys.stdout)
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


# --- payments and resume -------------------------------------------------------------------


def _journal_path(args: argparse.Namespace) -> tuple[Path | PostgresDsn, bool]:
    """The state `payments` and `resume` read, and whether it exists (they never create a
    file; a PostgreSQL state is always there)."""
    path = _state_path(args)
    if path is None:
        raise _mistake(
            _prog(args),
            f"{args.command} reads the payment journal in the state file: drop --no-state",
        )
    return path, not isinstance(path, Path) or path.exists()


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
        from .._protocol.amounts import format_amount

        for record in records:
            # the amount written the same way on every rail (the journal keeps 6 decimals
            # for chain amounts); `atomic_amount` keeps the exact chain value
            _json_line({**record.to_json(), "amount": format_amount(record.amount)}, sys.stdout)
    elif not records:
        what = "unfinished payments" if args.unfinished else "payments"
        sys.stderr.write(f"x402-eur: no {what} in {path}\n")
    else:
        _print_payments(records)
    return 0


#: The fewest characters of an id that name a payment (`resume 3f9c2a`).
MIN_ID_PREFIX = 6
#: How many payments an ambiguous start of an id lists.
_CANDIDATES = 10


async def _find_record(args: argparse.Namespace) -> JournalRecord:
    """The journaled payment `args.id` names: its id, or a unique start of it (at least
    `MIN_ID_PREFIX` characters)."""
    hint = "List them with: x402-eur payments --unfinished"
    args.id = args.id.rstrip("…")  # as a narrow `payments` table shows it
    path, exists = _journal_path(args)
    store = _open_store(args, path) if exists else None
    try:
        record = None if store is None else await store.get(args.id)
        if record is not None:
            return record
        if len(args.id) < MIN_ID_PREFIX:
            raise _mistake(
                _prog(args),
                f"{args.id!r} is too short: give at least {MIN_ID_PREFIX} characters of the id",
                hint,
            )
        found = [] if store is None else await store.starting_with(args.id, _CANDIDATES + 1)
    finally:
        if store is not None:
            store.close()
    if not found:
        raise _mistake(_prog(args), f"no payment {args.id!r} in {path}", hint)
    if len(found) == 1:
        return found[0]
    many = (
        f"more than {_CANDIDATES} payments; the newest {_CANDIDATES}"
        if len(found) > _CANDIDATES
        else f"{len(found)} payments"
    )
    listed = _candidates(found[:_CANDIDATES])
    raise _mistake(
        _prog(args), f"{args.id!r} matches {many}:\n{listed}", "Give more characters of the id."
    )


async def _resume(args: argparse.Namespace) -> int:
    import httpx

    from .._adapters.httpx_async import with_eur_payment
    from .._adapters.paying_client import payments
    from .._state.http import default_ssl_context

    record = await _find_record(args)
    body = _request_body(args)
    about = f"{_money(record.amount, record.currency)}, {record.rail}, {record.resource}"
    on_progress, display = _progress(args)
    options = _payment_options(args, on_progress=on_progress)
    try:
        _open_state(args, options)
        output = _Output(args)
        try:
            client = httpx.AsyncClient(
                follow_redirects=True, timeout=60, verify=default_ssl_context()
            )
            async with with_eur_payment(client, options) as client:
                with display:
                    recovery = await payments(client).recover(
                        record.id, headers=args.header, content=body
                    )
            if recovery.response is not None:
                output.write(recovery.response.content)
                output.finish()
        finally:
            output.discard()
    finally:
        _close_state(options)
    body_shown = recovery.response is not None and output.to_stdout
    lead = "\n" if body_shown and not output.ends_with_newline else ""
    reason = _recovery_reason(recovery)
    sys.stderr.write(f"{lead}x402-eur: {recovery.status}: {reason} ({about})\n")
    return 0 if recovery.status == "delivered" else 1


# --- mcp -----------------------------------------------------------------------------------

#: The MCP server's own package: the command line reaches it by name only, so the two
#: front ends import nothing of each other.
MCP_COMMAND = "x402_client.mcp"


def _mcp_command() -> Any:
    import importlib

    return importlib.import_module(MCP_COMMAND)


async def _mcp(args: argparse.Namespace) -> int:
    result: int = await _mcp_command().run(args)
    return result
