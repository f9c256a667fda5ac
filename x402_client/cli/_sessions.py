"""`x402-eur sessions`: the sessions (`batch-settlement` channels) of the state, and the two
ways to take back what their vouchers did not spend.

- `sessions`: each session's id, resource, network, asset, and what it deposited, spent
  (the merchant acknowledged), signed and got back; `--json` as JSON lines.
- `sessions refund ID [--amount X]`: the merchant returns the unspent deposit (all of it,
  or X), read from the chain (`payments(client).refund_session`).
- `sessions withdraw ID`: the escrow's timed withdrawal, without the merchant: the first
  call starts it, a call after the channel's delay finishes it (`withdraw_session`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._frontend import sessions as _sessions
from ._common import (
    _close_state,
    _mistake,
    _open_state,
    _open_store,
    _payment_options,
    _prog,
    _Trouble,
)
from ._render import _json_line, _money, _print_sessions

if TYPE_CHECKING:
    import httpx

    from .._protocol.assets import Asset
    from .._protocol.dsn import PostgresDsn
    from .._protocol.errors import X402Error
    from .._state.channels import ChannelRecord

_HINT = "List them with: x402-eur sessions"
_MOVED = {False: "no money moved", True: "money moved", None: "money may have moved"}


async def _sessions_command(args: argparse.Namespace) -> int:
    if args.action == "refund":
        return await _refund(args)
    if args.action == "withdraw":
        return await _withdraw(args)
    return await _list(args)


async def _records(args: argparse.Namespace) -> tuple[Path | PostgresDsn, list[ChannelRecord]]:
    """The state's sessions, oldest first (none when its file does not exist: it is never
    created here)."""
    from ._commands import _journal_path

    path, exists = _journal_path(args)
    if not exists:
        return path, []
    store = _open_store(args, path)
    try:
        return path, await store.channels()
    finally:
        store.close()


def _declared() -> list[Asset]:
    """The assets `X402_EUR_ASSETS` declares, for their symbols (none when it is unset or
    not readable: the table then shows the asset's address)."""
    from .._options import _assets_from_text

    text = os.environ.get("X402_EUR_ASSETS")
    if not text:
        return []
    with contextlib.suppress(Exception):
        return _assets_from_text(text, "X402_EUR_ASSETS")
    return []


async def _list(args: argparse.Namespace) -> int:
    path, records = await _records(args)
    if args.status is not None:
        records = [r for r in records if r.status == args.status]
    declared = _declared()
    if args.json:
        for record in records:
            symbol = _sessions.symbol_of(record, declared)
            _json_line(_sessions.session_json(record, symbol), sys.stdout)
    elif not records:
        what = f"{args.status} sessions" if args.status else "sessions"
        sys.stderr.write(f"x402-eur: no {what} in {path}\n")
    else:
        _print_sessions(records, declared)
    return 0


async def _find(args: argparse.Namespace) -> ChannelRecord:
    _, records = await _records(args)
    try:
        return _sessions.find_session(records, args.id)
    except _sessions.SessionMistake as exc:
        raise _mistake(_prog(args), str(exc), _HINT) from None


@contextlib.asynccontextmanager
async def _paying(args: argparse.Namespace) -> AsyncIterator[httpx.AsyncClient]:
    """A paying client with the environment's EVM key and the state: sessions are paid,
    refunded and withdrawn with that key."""
    import httpx

    from .._adapters.httpx_async import with_eur_payment
    from .._state.http import default_ssl_context

    options = _payment_options(args)
    try:
        if options.evm is None:
            raise _Trouble(
                "sessions are refunded and withdrawn with the EVM key that paid them: set "
                "X402_EUR_EVM_PRIVATE_KEY (and X402_EUR_RPC_URL_<chain>)"
            )
        _open_state(args, options)
        client = httpx.AsyncClient(follow_redirects=False, timeout=60, verify=default_ssl_context())
        async with with_eur_payment(client, options) as paying:
            yield paying
    finally:
        _close_state(options)


def _failed(args: argparse.Namespace, exc: X402Error) -> int:
    """A refund or withdrawal that did not happen, in one line that says whether money
    moved: exit 3 (exit 1 for configuration the environment got wrong)."""
    from .._frontend.common import refusal_line
    from .._protocol.errors import ConfigurationError

    # the library names its own call; at a shell it is this command
    text = refusal_line(exc).replace("withdraw_session", f"x402-eur sessions withdraw {args.id}")
    if "money" not in text:
        text += f"; {_MOVED[exc.money_moved]}"
    if isinstance(exc, ConfigurationError):
        raise _Trouble(text) from None
    sys.stderr.write(f"x402-eur: {type(exc).__name__}: {text}\n")
    return 3


async def _refund(args: argparse.Namespace) -> int:
    from .._adapters.paying_client import payments
    from .._protocol.errors import X402Error

    record = await _find(args)
    try:
        amount = _sessions.refund_amount(record, args.amount)
    except _sessions.SessionMistake as exc:
        raise _mistake(_prog(args), str(exc), _HINT) from None
    async with _paying(args) as client:
        try:
            refund = await payments(client).refund_session(record.channel_id, amount)
        except X402Error as exc:
            return _failed(args, exc)
    name = _sessions.short_id(record.channel_id)
    after = "closed" if refund.closed else "still open"
    tx = f"; refund transaction {refund.tx_hash}" if refund.tx_hash else ""
    sys.stderr.write(
        f"x402-eur: session {name}: {_money(refund.refunded, refund.currency)} refunded to "
        f"the payer, {_money(refund.charged, refund.currency)} kept by the merchant for its "
        f"requests; {after}{tx}\n"
    )
    return 0


def _when(finalize_after: int | None) -> str:
    if finalize_after is None:
        return "?"
    moment = datetime.fromtimestamp(finalize_after, timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


async def _withdraw(args: argparse.Namespace) -> int:
    from .._adapters.paying_client import payments
    from .._protocol.errors import X402Error

    record = await _find(args)
    async with _paying(args) as client:
        try:
            step = await payments(client).withdraw_session(record.channel_id)
        except X402Error as exc:
            return _failed(args, exc)
    name = _sessions.short_id(record.channel_id)
    again = f"x402-eur sessions withdraw {record.channel_id[:12]}"
    when = _when(step.finalize_after)
    if step.step == "initiated":
        sys.stderr.write(
            f"x402-eur: session {name}: withdrawal of {_money(step.withdrawn, step.currency)} "
            f"initiated (transaction {step.tx_hash}); the escrow releases it after {when} "
            f"by the chain's clock: run `{again}` then\n"
        )
        return 0
    if step.step == "waiting":
        sys.stderr.write(
            f"x402-eur: session {name}: its withdrawal is waiting until {when} by the chain's "
            f"clock; nothing was sent: run `{again}` then\n"
        )
        return 1
    sys.stderr.write(
        f"x402-eur: session {name}: withdrawal finalized, "
        f"{_money(step.withdrawn, step.currency)} back to the payer (transaction "
        f"{step.tx_hash})\n"
    )
    return 0


def add_sessions(
    commands: Any, state: argparse.ArgumentParser, quiet_state: argparse.ArgumentParser
) -> list[argparse.ArgumentParser]:
    """`sessions`, and its actions' parsers; `quiet_state` is the state options of
    `refund` and `withdraw`, whose defaults leave alone a `--state` given before them
    (`sessions --state F refund ID`)."""
    from .._state.channels import CHANNEL_STATUSES

    parser = commands.add_parser(
        "sessions",
        help="the sessions (batch-settlement channels) of the state; refund or withdraw one",
        parents=[state],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="List the sessions of the state file, oldest first: one deposit into an\n"
        "escrow, paid out by a voucher per request. `refund ID` asks the merchant to return\n"
        "what the vouchers did not spend; `withdraw ID` takes it back without the merchant\n"
        "(the escrow's timed withdrawal: run it again once the delay has passed).",
    )
    parser.add_argument(
        "--status", choices=CHANNEL_STATUSES, help="only the sessions with this status"
    )
    parser.add_argument("--json", action="store_true", help="JSON lines, one per session")
    actions = parser.add_subparsers(
        dest="action", parser_class=type(parser), metavar="{refund,withdraw}"
    )
    refund = actions.add_parser(
        "refund",
        help="ask the merchant to refund what the vouchers did not spend",
        parents=[quiet_state],
    )
    refund.add_argument("id", help="the session's id (x402-eur sessions), or its first characters")
    refund.add_argument(
        "--amount",
        metavar="X",
        help="refund X only (in the asset's units; at most what the session holds unspent)",
    )
    withdraw = actions.add_parser(
        "withdraw",
        help="take back what the vouchers did not spend without the merchant (timed)",
        parents=[quiet_state],
    )
    withdraw.add_argument(
        "id", help="the session's id (x402-eur sessions), or its first characters"
    )
    parser.set_defaults(handler=_sessions_command, action=None)
    return [refund, withdraw]
