"""`x402-eur state`: an operator's commands for a PostgreSQL state.

- `state migrate --state DSN`: create the schema, or bring it to this version, in place
  (what every store does when it opens; safe while workers start).
- `state copy FILE --state DSN`: move a machine's SQLite journal and its budgets' spending
  into the PostgreSQL state: every payment as it is (unfinished ones stay unfinished, for
  recovery on any machine), every payment channel with the amounts it signed, every
  budget's total and windowed reservations.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from .._protocol.dsn import PostgresDsn
from .._protocol.errors import ConfigurationError
from ._common import _mistake, _prog, _state_path, _Trouble

if TYPE_CHECKING:
    from .._state.channels import ChannelRecord
    from .._state.postgres_store import PostgresStore
    from .._state.sqlite_store import SqliteStore

STATE_HINT = "Name the PostgreSQL state with --state postgresql://... (or X402_EUR_STATE)."


def _dsn(args: argparse.Namespace) -> PostgresDsn:
    where = _state_path(args)
    if not isinstance(where, PostgresDsn):
        given = "no state (--no-state)" if where is None else str(where)
        raise _mistake(
            _prog(args), f"{args.action} works on a PostgreSQL state, not {given}", STATE_HINT
        )
    return where


async def _state(args: argparse.Namespace) -> int:
    handler = _migrate if args.action == "migrate" else _copy
    return await handler(args)


async def _migrate(args: argparse.Namespace) -> int:
    from .._state.postgres_store import SCHEMA_VERSION, connect, migrate_schema

    dsn = _dsn(args)
    try:
        conn = connect(dsn)
        try:
            before = migrate_schema(conn)
        finally:
            conn.close()
    except ConfigurationError as exc:
        raise _Trouble(str(exc)) from None
    if before == SCHEMA_VERSION:
        sys.stderr.write(f"x402-eur: {dsn} is at schema {SCHEMA_VERSION}: nothing to do\n")
    else:
        sys.stderr.write(f"x402-eur: {dsn} migrated from schema {before} to {SCHEMA_VERSION}\n")
    return 0


async def _copy(args: argparse.Namespace) -> int:
    from .._state.postgres_store import PostgresStore
    from .._state.sqlite_store import SqliteStore

    dsn = _dsn(args)
    source = await anyio.Path(args.source).expanduser()
    if not await source.is_file():
        raise _mistake(_prog(args), f"no state file {source}")
    try:
        with SqliteStore(Path(source)) as file, PostgresStore(dsn) as database:
            records = await file.payments(limit=1 << 62)
            unfinished = len(await file.unfinished())
            busy = [r.id for r in records if r.in_progress]
            if busy:
                raise _Trouble(
                    f"a running process is still paying {len(busy)} payment(s) of {source} "
                    f"({busy[0]}, ...): stop the processes that use it, then copy"
                )
            present = [r.id for r in records if await database.get(r.id) is not None]
            if present:
                raise _Trouble(
                    f"{len(present)} payment(s) of {source} are in {dsn} already "
                    f"({present[0]}, ...): it was copied before; nothing copied"
                )
            channels = await _channels_to_copy(file, database, source, dsn)
            for record in reversed(records):  # oldest first: the database keeps their order
                await database.import_payment(record)
            for channel in channels:  # oldest first, as they are listed
                await database.open_channel(channel)
            budgets = file.budget_spending()
            for key, total, reservations in budgets:
                await database.import_budget(key, total, reservations)
    except (OSError, sqlite3.Error, ConfigurationError) as exc:
        raise _Trouble(str(exc)) from None
    sys.stderr.write(
        f"x402-eur: copied {len(records)} payment(s) ({unfinished} unfinished), "
        f"{len(channels)} payment channel(s) and the spending of {len(budgets)} budget(s) "
        f"from {source} into {dsn}\n"
    )
    return 0


async def _channels_to_copy(
    file: SqliteStore, database: PostgresStore, source: anyio.Path, dsn: PostgresDsn
) -> list[ChannelRecord]:
    """The file's payment channels, none of which the database has: a channel in both
    places may have signed vouchers in both, and neither copy knows the other's (a worker
    must never sign below what was signed)."""
    channels = await file.channels()
    present = [c.channel_id for c in channels if await database.channel(c.channel_id)]
    if present:
        raise _Trouble(
            f"{len(present)} payment channel(s) of {source} are in {dsn} already "
            f"({present[0]}, ...): nothing copied"
        )
    return channels


def add_state(commands: Any, state: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "state",
        help="migrate a PostgreSQL state, or copy a state file into one",
        description="An operator's commands for a PostgreSQL state (--state postgresql://...):\n"
        "`migrate` creates its schema or brings it to this version in place; `copy FILE`\n"
        "moves a state file's payments (unfinished ones stay unfinished), payment channels\n"
        "and budgets in.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(
        dest="action", required=True, parser_class=type(parser), metavar="{migrate,copy}"
    )
    actions.add_parser("migrate", help="create or migrate the schema", parents=[state])
    copy = actions.add_parser(
        "copy", help="copy a SQLite state file into the PostgreSQL state", parents=[state]
    )
    copy.add_argument("source", metavar="FILE", help="the SQLite state file to copy")
    parser.set_defaults(handler=_state)
