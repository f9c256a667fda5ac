"""One PostgreSQL database that keeps the budgets and the payment journal of a fleet.

`PostgresStore(dsn)` is what `SqliteStore` is for one machine, for many processes on many
machines at once (extra `postgres`, psycopg 3, imported when a store is made): the same
calls (a `BudgetStore`, and the journal's `open_payment`, `update_payment`,
`finish_payment`, `claim`, `unfinished`, ...), the same records (`JournalRecord`, with the
`worker` that owns a payment in flight), in tables of the schema `x402_eur`.

How the database keeps it right, whoever asks at once:

- **Budgets: explicit locks, never the client's arithmetic.** A total budget is one row,
  reserved by one `INSERT ... ON CONFLICT DO UPDATE ... WHERE spent + amount <= limit`:
  the row's lock orders the reservations of every machine, and one that would overshoot
  changes nothing. A windowed budget is one row per reservation, reserved in a transaction
  that first takes the budget's transaction-level advisory lock (so the sum it reads is
  the sum it adds to). Windows are measured by the database's clock (`clock_timestamp()`),
  never a worker's: a machine whose clock runs ahead cannot prune the fleet's spending.
- **Owners die with their machine.** A payment in flight is owned by the store that
  opened it (or recovers it). The store's lease is a row of `x402_eur.leases` (its id, the
  worker `host:pid`, a lock key) and a *session-level advisory lock* on that key, held by
  the store's connection: when the process dies, or its machine, or the network between
  them and the database, the connection ends and PostgreSQL releases the lock (for a
  machine that is gone, once the server's TCP keepalive gives up: docs/fleet.md). An owner
  is alive while its lock is held (`pg_locks`), so recovery on any machine skips a live
  worker's payment and takes over a dead one's. A store whose connection is lost stops
  (every call fails): its payments in flight are then another store's to recover, and it
  must not go on as their owner.
- **EVM permit nonces across machines.** `hold_nonce(key)` holds a session-level advisory
  lock on the (chain, token, owner) key for as long as a permit is signed and answered, so
  two machines never sign two permits with one nonce.
- **Payment channels** (`_state.channels`): the highest cumulative amount a channel
  signed is raised by one `UPDATE ... WHERE signed = <expected> AND <new> > signed`, so two
  machines that read the same total never both record a voucher for the next; `hold`
  (`channel_id`) is a session-level advisory lock, as `hold_nonce`'s, for workers to take
  turns on a channel.
- **Migrations.** The schema has a version (`x402_eur.schema_version`); a store brings it
  up to date when it opens, in one transaction under an advisory lock, so two machines
  starting at once migrate it once. `x402-eur state migrate --state DSN` does the same for
  an operator; `x402-eur state copy` moves a SQLite journal and its budgets in.

The password of the DSN never leaves it: the store keeps a `PostgresDsn` (shown without
it), connects with it in one call, and a connection error is raised as a
`ConfigurationError` whose message has it masked and which carries no driver traceback.

Threads: one connection per store, guarded by a lock, used from anyio's worker threads.
Opening (the constructor) connects and migrates: make the store at start-up. Close it
with `close()` or `aclose()`.
"""

# Every query is built from this module's constants only (the schema's name, fixed
# fragments, column names); values always travel as parameters.
# ruff: noqa: S608

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import threading
import uuid
import zlib
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import timezone
from functools import partial
from typing import Any, Literal, TypeVar, get_args

import anyio
import anyio.to_thread

from .._protocol import exact_json as _json
from .._protocol.amounts import format_money
from .._protocol.budgets import (
    total_reservation_amount,
    total_reservation_id,
    window_reservation_id,
)
from .._protocol.dsn import PostgresDsn, state_location
from .._protocol.errors import ConfigurationError
from .._protocol.ledger import Outcome
from .._protocol.redact import safe_headers, safe_url
from .._protocol.types import PaymentIntent
from .channels import (
    ChannelRecord,
    acknowledged_record,
    check_channel_id,
    check_status,
    check_voucher,
    deposited_record,
    refunded_record,
)
from .shared import KeyedLocks
from .sqlite_store import (
    JournalRecord,
    JournalStep,
    _body_columns,
    _channel_columns,
    _channel_of,
    _intent_columns,
    _record,
)

__all__ = ["SCHEMA", "SCHEMA_VERSION", "PostgresStore", "StateUnavailable", "migrate_schema"]

#: The schema (namespace) of the store's tables.
SCHEMA = "x402_eur"
#: The schema version this module writes (`x402_eur.schema_version`).
SCHEMA_VERSION = 3

Finished = Literal["paid", "failed", "unknown"]
_T = TypeVar("_T")

# Advisory-lock namespaces (the first key of the two-key form), one per use.
_LEASES = 0x402E
_NONCES = 0x402F
_BUDGETS = 0x4030
_MIGRATIONS_LOCK = 0x4031
_CHANNELS = 0x4032

_V1 = (
    f"""CREATE TABLE {SCHEMA}.budget_totals (
        key TEXT PRIMARY KEY,
        spent BIGINT NOT NULL CHECK (spent >= 0)
    )""",
    f"""CREATE TABLE {SCHEMA}.budget_reservations (
        id TEXT PRIMARY KEY,
        key TEXT NOT NULL,
        at TIMESTAMPTZ NOT NULL,
        amount BIGINT NOT NULL CHECK (amount >= 0)
    )""",
    f"CREATE INDEX budget_reservations_by_key ON {SCHEMA}.budget_reservations (key, at)",
    f"""CREATE TABLE {SCHEMA}.payments (
        seq BIGSERIAL UNIQUE,
        id TEXT PRIMARY KEY,
        created_at TIMESTAMPTZ NOT NULL,
        updated_at TIMESTAMPTZ NOT NULL,
        rail TEXT NOT NULL,
        scheme TEXT NOT NULL,
        network TEXT NOT NULL,
        asset TEXT NOT NULL,
        asset_symbol TEXT NOT NULL,
        amount TEXT NOT NULL,
        currency TEXT NOT NULL,
        pay_to TEXT NOT NULL,
        resource TEXT NOT NULL,
        atomic_amount TEXT,
        description TEXT,
        accept TEXT NOT NULL,
        request_method TEXT NOT NULL,
        request_url TEXT NOT NULL,
        request_headers TEXT NOT NULL,
        request_body BYTEA,
        request_body_size INTEGER,
        request_body_omitted BOOLEAN NOT NULL,
        request_body_redacted BOOLEAN NOT NULL DEFAULT FALSE,
        reservations TEXT NOT NULL,
        payment_request_code TEXT,
        transaction_code TEXT,
        proof TEXT,
        blockchain_tx_id TEXT,
        tx_hash TEXT,
        outcome TEXT NOT NULL CHECK (outcome IN ('pending', 'paid', 'failed', 'unknown')),
        delivered BOOLEAN NOT NULL,
        error TEXT,
        unrecoverable TEXT,
        owner TEXT
    )""",
    f"CREATE INDEX payments_by_outcome ON {SCHEMA}.payments (outcome, delivered)",
    f"CREATE INDEX payments_by_proof ON {SCHEMA}.payments (proof)",
    f"CREATE INDEX payments_by_request_code ON {SCHEMA}.payments (payment_request_code)",
    f"CREATE INDEX payments_by_transaction ON {SCHEMA}.payments (transaction_code)",
    f"""CREATE TABLE {SCHEMA}.payment_steps (
        seq BIGSERIAL PRIMARY KEY,
        payment_id TEXT NOT NULL REFERENCES {SCHEMA}.payments (id),
        at TIMESTAMPTZ NOT NULL,
        step TEXT NOT NULL,
        detail TEXT NOT NULL
    )""",
    f"CREATE INDEX payment_steps_by_payment ON {SCHEMA}.payment_steps (payment_id, seq)",
)
# Version 2: the leases of the workers that own payments in flight (their lock keys, and
# which worker each is), so that an operator sees who owns what.
_V2 = (
    f"CREATE SEQUENCE {SCHEMA}.lease_keys AS INTEGER MINVALUE 1 NO CYCLE",
    f"""CREATE TABLE {SCHEMA}.leases (
        id TEXT PRIMARY KEY,
        lock_key INTEGER NOT NULL UNIQUE,
        worker TEXT NOT NULL,
        started_at TIMESTAMPTZ NOT NULL DEFAULT now()
    )""",
    f"CREATE INDEX payments_by_owner ON {SCHEMA}.payments (owner) WHERE owner IS NOT NULL",
)
# Version 3: the payment channels of the `batch-settlement` scheme (`_state.channels`);
# amounts are uint128, kept exactly as NUMERIC.
_V3 = (
    f"""CREATE TABLE {SCHEMA}.channels (
        seq BIGSERIAL UNIQUE,
        channel_id TEXT PRIMARY KEY,
        network TEXT NOT NULL,
        origin TEXT NOT NULL,
        config TEXT NOT NULL,
        currency TEXT NOT NULL,
        asset TEXT NOT NULL,
        decimals INTEGER NOT NULL,
        deposited NUMERIC(39, 0) NOT NULL CHECK (deposited >= 0),
        signed NUMERIC(39, 0) NOT NULL CHECK (signed >= 0),
        signature TEXT,
        acknowledged NUMERIC(39, 0) NOT NULL CHECK (acknowledged BETWEEN 0 AND signed),
        refunded NUMERIC(39, 0) NOT NULL CHECK (refunded >= 0),
        status TEXT NOT NULL
            CHECK (status IN ('open', 'refunding', 'withdrawing', 'disputed', 'closed')),
        opened_at TIMESTAMPTZ NOT NULL,
        updated_at TIMESTAMPTZ NOT NULL
    )""",
    f"CREATE INDEX channels_by_status ON {SCHEMA}.channels (status, seq)",
)
MIGRATIONS: tuple[tuple[str, ...], ...] = (_V1, _V2, _V3)
assert len(MIGRATIONS) == SCHEMA_VERSION

_UNFINISHED = (
    "p.unrecoverable IS NULL AND (p.outcome IN ('pending', 'unknown') "
    "OR (p.outcome = 'paid' AND NOT p.delivered))"
)
_HELD = (
    f"p.rail = 'upto' AND EXISTS (SELECT 1 FROM {SCHEMA}.payment_steps s "
    "WHERE s.payment_id = p.id AND s.step = 'held') AND NOT EXISTS (SELECT 1 FROM "
    f"{SCHEMA}.payment_steps s WHERE s.payment_id = p.id AND s.step = 'settled')"
)
#: The start of a statement that appends a step to each payment id a CTE returns.
_STEP_OF = f"INSERT INTO {SCHEMA}.payment_steps (payment_id, at, step, detail) SELECT id, now(),"
#: Whether the lease `l` is held: its advisory lock is granted to a live session.
_LEASE_HELD = (
    "EXISTS (SELECT 1 FROM pg_locks k WHERE k.locktype = 'advisory' AND k.granted "
    "AND k.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
    f"AND k.classid::bigint = {_LEASES} AND k.objid::bigint = l.lock_key AND k.objsubid = 2)"
)


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:  # pragma: no cover - depends on the environment
        raise ConfigurationError(
            "a postgresql:// state needs the postgres extra: pip install 'x402-eur[postgres]'"
        ) from None
    return psycopg


def _key(text: str) -> int:
    """A 32-bit advisory-lock key for `text` (the same on every machine)."""
    return zlib.crc32(text.encode()) - (1 << 31)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def this_worker() -> str:
    """How a worker is named to an operator: `host:pid`."""
    return f"{socket.gethostname()}:{os.getpid()}"


class StateUnavailable(ConfigurationError):
    """The PostgreSQL state cannot be reached or used; the message masks the password."""


def connect(dsn: PostgresDsn, *, connect_timeout: float = 10.0) -> Any:
    """A psycopg connection (autocommit) to `dsn`. A failure is a `StateUnavailable` with the
    password masked, raised without the driver's traceback (whose frames hold it)."""
    psycopg = _psycopg()
    message = ""
    try:
        return psycopg.connect(
            dsn.reveal(),
            autocommit=True,
            connect_timeout=max(1, int(connect_timeout)),
            application_name="x402-eur",
        )
    except psycopg.Error as exc:
        message = dsn.redact(_first_line(exc))
        del exc
    raise StateUnavailable(f"cannot connect to the PostgreSQL state {dsn}: {message}")


def migrate_schema(conn: Any, *, upto: int = SCHEMA_VERSION) -> int:
    """Bring the schema to version `upto` (created when missing) in one transaction under
    an advisory lock: two machines starting at once migrate it once. Returns the version
    found before."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s, 0)", (_MIGRATIONS_LOCK,))
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
        conn.execute(f"CREATE TABLE IF NOT EXISTS {SCHEMA}.schema_version (version INTEGER)")
        row = conn.execute(f"SELECT version FROM {SCHEMA}.schema_version").fetchone()
        version = 0 if row is None else int(row[0])
        if version > SCHEMA_VERSION:
            raise ConfigurationError(
                f"the PostgreSQL state has schema {version}, newer than this x402-eur "
                f"({SCHEMA_VERSION}): upgrade x402-eur"
            )
        for statements in MIGRATIONS[version:upto]:
            for statement in statements:
                conn.execute(statement)
        if row is None:
            conn.execute(f"INSERT INTO {SCHEMA}.schema_version VALUES (%s)", (upto,))
        elif version < upto:
            conn.execute(f"UPDATE {SCHEMA}.schema_version SET version = %s", (upto,))
    return version


@dataclasses.dataclass
class _Lease:
    id: str
    lock_key: int


class PostgresStore:
    """Budgets and the payment journal in one PostgreSQL database, shared by a fleet of
    workers (see the module docstring for how it stays right under concurrency).

    ```python
    from x402_client.postgres import PostgresStore

    store = PostgresStore("postgresql://payer@db.internal/x402")
    ...
    await store.aclose()
    ```

    Or give the DSN wherever a state file is taken: `PaymentOptions(state_path=DSN)`,
    `X402_EUR_STATE=DSN`, `x402-eur --state DSN`. Budget totals are 64-bit integers of
    atomic units.
    """

    def __init__(
        self, dsn: str | PostgresDsn, *, connect_timeout: float = 10.0, migrate: bool = True
    ) -> None:
        location = state_location(dsn)
        # The text given holds the password: no frame of the store keeps it.
        del dsn
        if not isinstance(location, PostgresDsn):
            raise ConfigurationError("PostgresStore needs a postgresql:// URL")
        self.dsn = location
        self.worker = this_worker()
        self._lock = threading.Lock()
        self._lease: _Lease | None = None
        #: Tasks and threads of this process take turns on a channel before its advisory lock.
        self._channel_locks = KeyedLocks()
        conn = connect(location, connect_timeout=connect_timeout)
        try:
            if migrate:
                migrate_schema(conn)
            self._check_schema(conn)
        except BaseException:
            conn.close()
            raise
        self._conn: Any = conn

    def __repr__(self) -> str:
        return f"PostgresStore({str(self.dsn)!r})"

    @staticmethod
    def _check_schema(conn: Any) -> None:
        row = conn.execute(
            "SELECT to_regclass(%s) IS NOT NULL", (f"{SCHEMA}.schema_version",)
        ).fetchone()
        version = 0
        if row[0]:
            found = conn.execute(f"SELECT version FROM {SCHEMA}.schema_version").fetchone()
            version = 0 if found is None else int(found[0])
        if version != SCHEMA_VERSION:
            raise ConfigurationError(
                f"the PostgreSQL state has schema {version}, this x402-eur needs "
                f"{SCHEMA_VERSION}: run x402-eur state migrate"
            )

    # --- plumbing ---------------------------------------------------------------------------

    def _connection(self) -> Any:
        if self._conn is None:
            raise RuntimeError(f"{self!r} is closed")
        return self._conn

    def _run_now(
        self, work: Callable[[Any], _T], *, lease: bool = False, single: bool = False
    ) -> _T:
        """Run `work` in one transaction (READ COMMITTED; what needs more locks it), after
        taking this store's lease when `lease` (it is about to own a payment). `single`:
        `work` runs one statement, atomic by itself: no transaction block (no `BEGIN` and
        `COMMIT` round trips). A lost connection is a `StateUnavailable`: the store stops."""
        psycopg = _psycopg()
        failure = ""
        with self._lock:
            conn = self._connection()
            if conn.closed or conn.broken:
                failure = "was lost"
            else:
                try:
                    if lease and self._lease is None:
                        with conn.transaction():
                            self._lease = self._take_lease(conn)
                    if single:
                        return work(conn)
                    with conn.transaction():
                        return work(conn)
                except psycopg.OperationalError as exc:
                    if not conn.broken:
                        raise
                    failure = f"was lost ({self.dsn.redact(_first_line(exc))})"
                    del exc
        raise StateUnavailable(
            f"the connection to the PostgreSQL state {self.dsn} {failure}: this store stops, "
            "and the payments it had in flight are another worker's to recover; make a new one"
        )

    async def _run(
        self, work: Callable[[Any], _T], *, lease: bool = False, single: bool = False
    ) -> _T:
        return await anyio.to_thread.run_sync(
            partial(self._run_now, work, lease=lease, single=single)
        )

    def _owner_id(self, conn: Any) -> str:
        """This store's lease id (taken by `_run_now(..., lease=True)`)."""
        assert self._lease is not None, "the lease is taken before the work that needs it"
        return self._lease.id

    def _take_lease(self, conn: Any) -> _Lease:
        """A new lease: its row, and its lock held by this store's connection for the
        connection's life (session-level: it outlives the transaction, and a rolled-back
        transaction does not take it back)."""
        lease_id = uuid.uuid4().hex
        # Leases of dead workers that own nothing any more are swept first.
        conn.execute(
            f"DELETE FROM {SCHEMA}.leases l WHERE NOT {_LEASE_HELD} AND NOT EXISTS "
            f"(SELECT 1 FROM {SCHEMA}.payments p WHERE p.owner = l.id)"
        )
        row = conn.execute(
            f"INSERT INTO {SCHEMA}.leases (id, lock_key, worker) VALUES "
            f"(%s, nextval('{SCHEMA}.lease_keys'), %s) RETURNING lock_key",
            (lease_id, self.worker),
        ).fetchone()
        conn.execute("SELECT pg_advisory_lock(%s, %s)", (_LEASES, row[0]))
        return _Lease(lease_id, int(row[0]))

    def close(self) -> None:
        """Close the connection: the payments this store still owned are no longer in
        progress (its lease's lock ends with it); recovery may take them over."""
        with self._lock:
            if self._conn is not None:
                with contextlib.suppress(Exception):
                    # Let go now, not when the server notices the connection is gone.
                    if self._lease is not None and not self._conn.broken:
                        self._conn.execute("SELECT pg_advisory_unlock_all()")
                with contextlib.suppress(Exception):
                    self._conn.close()
                self._conn = None
            self._lease = None

    async def aclose(self) -> None:
        await anyio.to_thread.run_sync(self.close)

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> PostgresStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # --- BudgetStore --------------------------------------------------------------------------

    async def reserve(self, key: str, amount: int, limit: int, window: float | None) -> str | None:
        if amount > limit:
            return None
        # A total is one statement; a window's transaction takes its advisory lock first.
        work = partial(self._reserve, key, amount, limit, window)
        return await self._run(work, single=window is None)

    @staticmethod
    def _reserve(key: str, amount: int, limit: int, window: float | None, conn: Any) -> str | None:
        if window is None:
            row = conn.execute(
                f"INSERT INTO {SCHEMA}.budget_totals AS t (key, spent) VALUES (%s, %s) "
                "ON CONFLICT (key) DO UPDATE SET spent = t.spent + excluded.spent "
                "WHERE t.spent + excluded.spent <= %s RETURNING t.spent",
                (key, amount, limit),
            ).fetchone()
            return None if row is None else total_reservation_id(amount)
        conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (_BUDGETS, _key(key)))
        conn.execute(
            f"DELETE FROM {SCHEMA}.budget_reservations WHERE key = %s "
            "AND at < clock_timestamp() - make_interval(secs => %s)",
            (key, window),
        )
        spent = conn.execute(
            f"SELECT COALESCE(SUM(amount), 0) FROM {SCHEMA}.budget_reservations WHERE key = %s",
            (key,),
        ).fetchone()[0]
        if int(spent) + amount > limit:
            return None
        rid = window_reservation_id()
        conn.execute(
            f"INSERT INTO {SCHEMA}.budget_reservations (id, key, at, amount) "
            "VALUES (%s, %s, clock_timestamp(), %s)",
            (rid, key, amount),
        )
        return rid

    async def release(self, key: str, reservation: str) -> None:
        amount = total_reservation_amount(reservation)

        def work(conn: Any) -> None:
            if amount is None:
                conn.execute(
                    f"DELETE FROM {SCHEMA}.budget_reservations WHERE key = %s AND id = %s",
                    (key, reservation),
                )
            else:
                conn.execute(
                    f"UPDATE {SCHEMA}.budget_totals SET spent = GREATEST(spent - %s, 0) "
                    "WHERE key = %s",
                    (amount, key),
                )

        await self._run(work, single=True)

    async def spent(self, key: str, window: float | None) -> int:
        def work(conn: Any) -> int:
            if window is None:
                row = conn.execute(
                    f"SELECT spent FROM {SCHEMA}.budget_totals WHERE key = %s", (key,)
                ).fetchone()
                return 0 if row is None else int(row[0])
            row = conn.execute(
                f"SELECT COALESCE(SUM(amount), 0) FROM {SCHEMA}.budget_reservations "
                "WHERE key = %s AND at >= clock_timestamp() - make_interval(secs => %s)",
                (key, window),
            ).fetchone()
            return int(row[0])

        return await self._run(work, single=True)

    async def budget_keys(self) -> list[tuple[str, int, int]]:
        """Every budget key the store holds: (key, total spent, windowed reservations)."""

        def work(conn: Any) -> list[tuple[str, int, int]]:
            rows = conn.execute(
                f"SELECT key, SUM(t), SUM(w) FROM (SELECT key, spent AS t, 0 AS w FROM "
                f"{SCHEMA}.budget_totals UNION ALL SELECT key, 0, amount FROM "
                f"{SCHEMA}.budget_reservations) b GROUP BY key ORDER BY key"
            ).fetchall()
            return [(str(k), int(t), int(w)) for k, t, w in rows]

        return await self._run(work)

    # --- EVM permit nonces across machines ----------------------------------------------------

    def hold_nonce(self, key: str) -> AbstractAsyncContextManager[None]:
        """Hold the fleet-wide lock of a permit nonce `key` (chain, token, owner) until the
        block ends; waits (polling, without holding the connection) while another worker
        holds it. The lock is the connection's: it ends if this process dies."""
        return self._hold_advisory(_NONCES, key)

    @contextlib.asynccontextmanager
    async def _hold_advisory(self, namespace: int, key: str) -> AsyncIterator[None]:
        """A session-level advisory lock on (`namespace`, `key`) for the block. The session
        is this store's: callers in one process take turns before they ask for it (a
        session may take its own lock twice)."""
        lock_key = _key(key)

        def attempt(conn: Any) -> bool:
            row = conn.execute("SELECT pg_try_advisory_lock(%s, %s)", (namespace, lock_key))
            return bool(row.fetchone()[0])

        # Another machine's lock has no event to wait on here: poll it.
        while not await self._run(attempt):  # noqa: ASYNC110
            await anyio.sleep(0.005)
        try:
            yield
        finally:
            with anyio.CancelScope(shield=True):
                await self._run(
                    lambda conn: conn.execute(
                        "SELECT pg_advisory_unlock(%s, %s)", (namespace, lock_key)
                    )
                )

    # --- the payment journal -----------------------------------------------------------------

    async def open_payment(
        self,
        *,
        intent: PaymentIntent,
        request_method: str,
        request_url: str,
        request_body: bytes | None,
        request_headers: Iterable[tuple[str, str]],
        reservations: Iterable[tuple[str, str]],
        id: str | None = None,
        payment_request_code: str | None = None,
    ) -> str:
        """Journal a payment about to be made (`pending`), owned by this store; returns its
        journal id. Call it before any money moves."""
        journal_id = id if id is not None else uuid.uuid4().hex
        sent = list(request_headers)
        values: dict[str, Any] = {
            "id": journal_id,
            **_intent_columns(intent),
            "request_method": request_method,
            "request_url": safe_url(request_url),
            "request_headers": _json.dumps([list(h) for h in safe_headers(sent)]).decode(),
            "reservations": _json.dumps([list(r) for r in reservations]).decode(),
            "payment_request_code": payment_request_code,
            "outcome": "pending",
            "delivered": False,
        }

        def work(conn: Any) -> None:
            row = {**values, "owner": self._owner_id(conn)}
            columns = ", ".join([*row, "created_at", "updated_at"])
            marks = ", ".join([*(f"%({name})s" for name in row), "now()", "now()"])
            detail = f"{format_money(intent.amount, intent.currency)} to {intent.pay_to}"
            # The row and its first step in one statement: one round trip, atomic.
            conn.execute(
                f"WITH p AS (INSERT INTO {SCHEMA}.payments ({columns}) VALUES ({marks}) "
                f"RETURNING id) {_STEP_OF} 'intent', %(step_detail)s FROM p",
                {**row, "step_detail": detail},
            )

        def write() -> None:
            body = _body_columns(request_body, sent)
            values.update(
                request_body=body["request_body"],
                request_body_size=body["request_body_size"],
                request_body_omitted=bool(body["request_body_omitted"]),
                request_body_redacted=bool(body["request_body_redacted"]),
            )
            self._run_now(work, lease=True, single=True)

        await anyio.to_thread.run_sync(write)
        return journal_id

    async def update_payment(
        self,
        id: str,
        *,
        payment_request_code: str | None = None,
        transaction_code: str | None = None,
        proof: str | None = None,
        blockchain_tx_id: str | None = None,
        tx_hash: str | None = None,
        step: str | None = None,
        detail: str = "",
    ) -> None:
        """Record facts the moment they exist: sets only the fields given (not None) and
        appends a step (`step`, or `update` naming the fields set)."""
        fields = {
            "payment_request_code": payment_request_code,
            "transaction_code": transaction_code,
            "proof": proof,
            "blockchain_tx_id": blockchain_tx_id,
            "tx_hash": tx_hash,
        }
        given = {name: value for name, value in fields.items() if value is not None}
        if not given and step is None:
            return

        def work(conn: Any) -> None:
            assignments = "".join(f", {name} = %({name})s" for name in given)
            self._update_with_step(
                conn,
                id,
                f"updated_at = now(){assignments}",
                {**given, "step": step or "update", "detail": detail or ", ".join(given)},
            )

        await self._run(work, single=True)

    async def finish_payment(
        self,
        id: str,
        outcome: Finished,
        *,
        delivered: bool,
        error: str | None = None,
        tx_hash: str | None = None,
    ) -> None:
        """Record how the payment ended: `paid`, `failed` or `unknown`; no store owns it
        any more."""
        if outcome not in get_args(Finished):
            raise ValueError(f"outcome must be one of {get_args(Finished)}, not {outcome!r}")

        def work(conn: Any) -> None:
            self._update_with_step(
                conn,
                id,
                "updated_at = now(), outcome = %(outcome)s, delivered = %(delivered)s, "
                "error = %(error)s, tx_hash = COALESCE(%(tx_hash)s, tx_hash), owner = NULL",
                {
                    "outcome": outcome,
                    "delivered": delivered,
                    "error": error,
                    "tx_hash": tx_hash,
                    "step": outcome,
                    "detail": error or ("delivered" if delivered else "not delivered"),
                },
            )

        await self._run(work, single=True)

    async def mark_unrecoverable(self, id: str, reason: str) -> None:
        """Recovery gave up on this payment: it leaves `unfinished()`, its outcome stays."""

        def work(conn: Any) -> None:
            self._update_with_step(
                conn,
                id,
                "updated_at = now(), unrecoverable = %(reason)s, owner = NULL",
                {"reason": reason, "step": "unrecoverable", "detail": reason},
            )

        await self._run(work, single=True)

    async def claim(self, id: str) -> bool:
        """Take over payment `id` for recovery: True when no live worker owned it (none
        did, or its owner's connection ended), and this store owns it now; False when a
        live worker (this store included) is working on it. Atomic across machines: the
        payment's row is locked while its owner is judged."""

        def work(conn: Any) -> bool:
            row = conn.execute(
                f"SELECT p.owner, l.lock_key, {_LEASE_HELD} FROM {SCHEMA}.payments p "
                f"LEFT JOIN {SCHEMA}.leases l ON l.id = p.owner WHERE p.id = %s "
                "FOR UPDATE OF p",
                (id,),
            ).fetchone()
            if row is None:
                raise KeyError(f"no payment {id!r} in the journal")
            owner, _, held = row
            mine = self._lease is not None and owner == self._lease.id
            if owner is not None and (mine or held):
                return False
            conn.execute(
                f"UPDATE {SCHEMA}.payments SET owner = %s, updated_at = now() WHERE id = %s",
                (self._owner_id(conn), id),
            )
            detail = "its worker is gone" if owner is not None else ""
            self._step(conn, id, "recovering", detail)
            return True

        return await self._run(work, lease=True)

    async def release_claim(self, id: str) -> None:
        """Let go of a payment this store owns without finishing it."""
        lease = self._lease
        if lease is None:
            return
        await self._run(
            lambda conn: conn.execute(
                f"UPDATE {SCHEMA}.payments SET owner = NULL WHERE id = %s AND owner = %s",
                (id, lease.id),
            )
        )

    async def get(self, id: str) -> JournalRecord | None:
        found = await self._run(partial(self._select, "p.id = %s", (id,), "", None))
        return found[0] if found else None

    async def starting_with(self, prefix: str, limit: int | None = None) -> list[JournalRecord]:
        """The payments whose id starts with `prefix`, newest first (at most `limit`)."""
        return await self._run(
            partial(self._select, "starts_with(p.id, %s)", (prefix,), "DESC", limit)
        )

    async def find_by_proof(
        self, proof: str, payment_request_code: str | None = None
    ) -> JournalRecord | None:
        """The newest payment whose proof is `proof`; else, given a euro payment request
        code, the newest euro payment of that request."""

        def work(conn: Any) -> list[JournalRecord]:
            found = self._select("p.proof = %s", (proof,), "DESC", 1, conn)
            if found or payment_request_code is None:
                return found
            return self._select(
                "p.rail = 'euro' AND p.payment_request_code = %s",
                (payment_request_code,),
                "DESC",
                1,
                conn,
            )

        found = await self._run(work)
        return found[0] if found else None

    async def with_transaction_code(self, code: str) -> JournalRecord | None:
        """The newest payment that journaled the provider's transaction `code`."""
        found = await self._run(
            partial(self._select, "p.transaction_code = %s", (code,), "DESC", 1)
        )
        return found[0] if found else None

    async def unfinished(self) -> list[JournalRecord]:
        """Payments recovery should look at, oldest first, every worker's: pending,
        unknown, or paid but not delivered. Those a live worker owns are `in_progress`, with
        their `worker`."""
        return await self._run(partial(self._select, _UNFINISHED, (), "ASC", None))

    async def held_settlements(self) -> list[JournalRecord]:
        """`upto` payments whose settlement is not verified yet, oldest first."""
        return await self._run(partial(self._select, _HELD, (), "ASC", None))

    async def payments(
        self, limit: int = 20, outcome: Outcome | None = None
    ) -> list[JournalRecord]:
        """The latest `limit` payments, newest first; only those with `outcome` if given."""
        if limit < 0:
            raise ValueError("limit must not be negative")
        where, args = ("TRUE", ()) if outcome is None else ("p.outcome = %s", (outcome,))
        return await self._run(partial(self._select, where, args, "DESC", limit))

    async def import_payment(self, record: JournalRecord) -> bool:
        """Copy a payment of another journal in, as it is, owned by nobody (`state copy`);
        False when a payment with its id is here already."""

        def work(conn: Any) -> bool:
            row = _row_of(record)
            columns = ", ".join(row)
            marks = ", ".join(f"%({name})s" for name in row)
            inserted = conn.execute(
                f"INSERT INTO {SCHEMA}.payments ({columns}) VALUES ({marks}) "
                "ON CONFLICT (id) DO NOTHING",
                row,
            ).rowcount
            if inserted != 1:
                return False
            for step in record.steps:
                conn.execute(
                    f"INSERT INTO {SCHEMA}.payment_steps (payment_id, at, step, detail) "
                    "VALUES (%s, %s, %s, %s)",
                    (record.id, step.at, step.step, step.detail),
                )
            return True

        return await self._run(work)

    async def import_budget(
        self, key: str, total: int, reservations: Sequence[tuple[str, float, int]]
    ) -> None:
        """Add a budget's spending from another store (`state copy`): its total, and its
        windowed reservations as (id, seconds since the epoch, amount)."""

        def work(conn: Any) -> None:
            if total:
                conn.execute(
                    f"INSERT INTO {SCHEMA}.budget_totals AS t (key, spent) VALUES (%s, %s) "
                    "ON CONFLICT (key) DO UPDATE SET spent = t.spent + excluded.spent",
                    (key, total),
                )
            for rid, at, amount in reservations:
                conn.execute(
                    f"INSERT INTO {SCHEMA}.budget_reservations (id, key, at, amount) "
                    "VALUES (%s, %s, to_timestamp(%s), %s) ON CONFLICT (id) DO NOTHING",
                    (rid, key, at, amount),
                )

        await self._run(work)

    # --- payment channels (`_state.channels`) -------------------------------------------------

    async def channel(self, channel_id: str) -> ChannelRecord | None:
        check_channel_id(channel_id)

        def work(conn: Any) -> ChannelRecord | None:
            cursor = conn.cursor(row_factory=_dict_rows())
            row = cursor.execute(
                f"SELECT * FROM {SCHEMA}.channels WHERE channel_id = %s", (channel_id,)
            ).fetchone()
            return None if row is None else _pg_channel(row)

        return await self._run(work, single=True)

    async def open_channel(self, record: ChannelRecord) -> ChannelRecord:
        row = _channel_columns(record)
        columns = ", ".join(row)
        marks = ", ".join(_CHANNEL_VALUES.get(name, f"%({name})s") for name in row)

        def work(conn: Any) -> ChannelRecord:
            conn.execute(
                f"INSERT INTO {SCHEMA}.channels ({columns}) VALUES ({marks}) "
                "ON CONFLICT (channel_id) DO NOTHING",
                row,
            )
            cursor = conn.cursor(row_factory=_dict_rows())
            stored = cursor.execute(
                f"SELECT * FROM {SCHEMA}.channels WHERE channel_id = %s", (record.channel_id,)
            ).fetchone()
            return _pg_channel(stored)

        return await self._run(work)

    async def advance(self, channel_id: str, *, expected: int, signed: int, signature: str) -> bool:
        check_channel_id(channel_id)
        check_voucher(expected, signed, signature)

        def work(conn: Any) -> bool:
            # One statement: the row's lock orders every machine's attempts, and an attempt
            # whose `expected` is stale (or whose amount is not above it) changes nothing.
            changed = conn.execute(
                f"UPDATE {SCHEMA}.channels SET signed = %(signed)s::numeric, "
                "signature = %(signature)s, updated_at = now() WHERE channel_id = %(id)s "
                "AND signed = %(expected)s::numeric AND %(signed)s::numeric > signed",
                {"id": channel_id, "expected": expected, "signed": signed, "signature": signature},
            ).rowcount
            if changed == 1:
                return True
            found = conn.execute(
                f"SELECT 1 FROM {SCHEMA}.channels WHERE channel_id = %s", (channel_id,)
            ).fetchone()
            if found is None:
                raise KeyError(f"no channel {channel_id} in the journal")
            return False

        return await self._run(work)

    async def _change_channel(
        self, channel_id: str, change: Callable[[ChannelRecord, str], ChannelRecord]
    ) -> None:
        """Apply `change` to the channel's row, locked (`FOR UPDATE`) from the read to the
        write: no other machine changes it in between. Its time is the database's."""
        check_channel_id(channel_id)

        def work(conn: Any) -> None:
            cursor = conn.cursor(row_factory=_dict_rows())
            row = cursor.execute(
                f"SELECT *, now() AS database_now FROM {SCHEMA}.channels "
                "WHERE channel_id = %s FOR UPDATE",
                (channel_id,),
            ).fetchone()
            if row is None:
                raise KeyError(f"no channel {channel_id} in the journal")
            record = _pg_channel(row)
            changed = change(record, _iso(row["database_now"]))
            if changed is record:
                return
            conn.execute(
                f"UPDATE {SCHEMA}.channels SET deposited = %(deposited)s::numeric, "
                "signed = %(signed)s::numeric, signature = %(signature)s, "
                "acknowledged = %(acknowledged)s::numeric, refunded = %(refunded)s::numeric, "
                "status = %(status)s, updated_at = %(updated_at)s::timestamptz "
                "WHERE channel_id = %(channel_id)s",
                _channel_columns(changed),
            )

        await self._run(work)

    async def acknowledge(self, channel_id: str, charged: int) -> None:
        await self._change_channel(channel_id, lambda r, now: acknowledged_record(r, charged, now))

    async def deposited(self, channel_id: str, amount: int) -> None:
        await self._change_channel(channel_id, lambda r, now: deposited_record(r, amount, now))

    async def refunded(self, channel_id: str, amount: int, status: str) -> None:
        check_status(status)
        await self._change_channel(
            channel_id, lambda r, now: refunded_record(r, amount, status, now)
        )

    async def set_status(self, channel_id: str, status: str) -> None:
        new = check_status(status)
        await self._change_channel(
            channel_id, lambda r, now: dataclasses.replace(r, status=new, updated_at=now)
        )

    async def channels(self, *, status: str | None = None) -> list[ChannelRecord]:
        where, args = ("TRUE", ()) if status is None else ("status = %s", (check_status(status),))

        def work(conn: Any) -> list[ChannelRecord]:
            cursor = conn.cursor(row_factory=_dict_rows())
            rows = cursor.execute(
                f"SELECT * FROM {SCHEMA}.channels WHERE {where} ORDER BY seq", args
            ).fetchall()
            return [_pg_channel(row) for row in rows]

        return await self._run(work, single=True)

    @contextlib.asynccontextmanager
    async def hold(self, channel_id: str) -> AsyncIterator[None]:
        """Hold the channel against every worker of the fleet until the block ends: a
        session-level advisory lock, which ends with this store's connection (its process
        or machine gone). Waits (polling) while another worker holds it."""
        check_channel_id(channel_id)
        async with (
            self._channel_locks.hold(channel_id),
            self._hold_advisory(_CHANNELS, channel_id),
        ):
            yield

    @staticmethod
    def _step(conn: Any, id: str, step: str, detail: str) -> None:
        conn.execute(
            f"INSERT INTO {SCHEMA}.payment_steps (payment_id, at, step, detail) "
            "VALUES (%s, now(), %s, %s)",
            (id, step, detail),
        )

    @staticmethod
    def _update_with_step(conn: Any, id: str, assignments: str, args: dict[str, Any]) -> None:
        """`UPDATE ... SET assignments` of payment `id` and its step (`args["step"]`,
        `args["detail"]`), in one statement: one round trip, atomic."""
        inserted = conn.execute(
            f"WITH u AS (UPDATE {SCHEMA}.payments SET {assignments} WHERE id = %(id)s "
            f"RETURNING id) {_STEP_OF} %(step)s, %(detail)s FROM u",
            {**args, "id": id},
        ).rowcount
        if inserted != 1:
            raise KeyError(f"no payment {id!r} in the journal")

    def _select(
        self, where: str, args: tuple[Any, ...], order: str, limit: int | None, conn: Any
    ) -> list[JournalRecord]:
        mine = self._lease.id if self._lease is not None else None
        query = (
            f"SELECT p.*, l.worker AS lease_worker, (p.owner IS NOT NULL AND (p.owner = %s OR "
            f"{_LEASE_HELD})) AS alive FROM {SCHEMA}.payments p "
            f"LEFT JOIN {SCHEMA}.leases l ON l.id = p.owner WHERE {where}"
        )
        if order:
            query += f" ORDER BY p.seq {order}"
        if limit is not None:
            query += f" LIMIT {int(limit)}"
        cursor = conn.cursor(row_factory=_dict_rows())
        rows = cursor.execute(query, (mine, *args)).fetchall()
        steps: dict[str, list[JournalStep]] = {row["id"]: [] for row in rows}
        if steps:
            for payment_id, at, step, detail in conn.execute(
                f"SELECT payment_id, at, step, detail FROM {SCHEMA}.payment_steps "
                "WHERE payment_id = ANY(%s) ORDER BY seq",
                (list(steps),),
            ):
                steps[payment_id].append(JournalStep(at, step, detail))
        return [_journal_record(row, steps[row["id"]]) for row in rows]


def _dict_rows() -> Any:
    from psycopg.rows import dict_row

    return dict_row


def _journal_record(row: Mapping[str, Any], steps: Sequence[JournalStep]) -> JournalRecord:
    as_sqlite = {
        **row,
        "created_at": row["created_at"].isoformat(),
        "updated_at": row["updated_at"].isoformat(),
        "request_body": None if row["request_body"] is None else bytes(row["request_body"]),
    }
    record = _record(as_sqlite, steps, bool(row["alive"]))  # type: ignore[arg-type]
    return dataclasses.replace(record, worker=row["lease_worker"] if row["alive"] else None)


def _row_of(record: JournalRecord) -> dict[str, Any]:
    """The columns of `record`, as another store journaled it."""
    return {
        "id": record.id,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        **_intent_columns(record.intent),
        "request_method": record.request_method,
        "request_url": record.request_url,
        "request_headers": _json.dumps([list(h) for h in record.request_headers]).decode(),
        "request_body": record.request_body,
        "request_body_size": record.request_body_size,
        "request_body_omitted": record.request_body_omitted,
        "request_body_redacted": record.request_body_redacted,
        "reservations": _json.dumps([list(r) for r in record.reservations]).decode(),
        "payment_request_code": record.payment_request_code,
        "transaction_code": record.transaction_code,
        "proof": record.proof,
        "blockchain_tx_id": record.blockchain_tx_id,
        "tx_hash": record.tx_hash,
        "outcome": record.outcome,
        "delivered": record.delivered,
        "error": record.error,
        "unrecoverable": record.unrecoverable,
    }


#: How `open_channel` writes the columns that are not plain text: amounts as NUMERIC, and
#: the times a record leaves empty as the database's.
_CHANNEL_VALUES = {
    **{
        name: f"%({name})s::numeric" for name in ("deposited", "signed", "acknowledged", "refunded")
    },
    "opened_at": "COALESCE(NULLIF(%(opened_at)s, '')::timestamptz, now())",
    "updated_at": "COALESCE(NULLIF(%(updated_at)s, '')::timestamptz, "
    "NULLIF(%(opened_at)s, '')::timestamptz, now())",
}


def _iso(at: Any) -> str:
    return str(at.astimezone(timezone.utc).isoformat(timespec="microseconds"))


def _pg_channel(row: Mapping[str, Any]) -> ChannelRecord:
    return _channel_of(
        {**row, "opened_at": _iso(row["opened_at"]), "updated_at": _iso(row["updated_at"])}
    )
