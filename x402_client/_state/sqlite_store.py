"""A SQLite file that keeps the budgets and the payment journal of one machine.

`SqliteStore(path)` is a `BudgetStore`: every process on the machine that opens the same
file shares its budgets and can never overshoot one (reserving is a `BEGIN IMMEDIATE`
transaction, which SQLite serialises across processes). It keeps what the in-memory
store keeps: a running total per total budget, one row per reservation for a windowed
budget, dropped once older than the window.

It is also the payment journal: one row per payment, written *before* money moves and
updated the moment each fact exists, so a crash leaves a record of what may have been
paid and what recovery needs (the proof, the codes, the request to re-send).

```python
store = SqliteStore(SqliteStore.default_path())
journal_id = await store.open_payment(
    intent=intent, request_method="GET", request_url=url, request_body=None,
    request_headers=list(request.headers.items()), reservations=[(key, reservation_id)],
)
await store.update_payment(journal_id, transaction_code="QP1", proof=proof, step="proof")
await store.finish_payment(journal_id, "paid", delivered=True)
for record in await store.unfinished():         # pending, unknown, or paid but undelivered
    print(record.to_json())
await store.aclose()
```

The journal's calls:

- `open_payment(*, intent, request_method, request_url, request_body, request_headers,
  reservations, id=None) -> str`: a new `pending` record and its journal id.
- `update_payment(id, *, payment_request_code=None, transaction_code=None, proof=None,
  blockchain_tx_id=None, tx_hash=None, step=None, detail="")`: sets the fields given
  and appends a step.
- `finish_payment(id, outcome, *, delivered, error=None)`: `paid`, `failed` or `unknown`.
- `mark_unrecoverable(id, reason)`: recovery gave up; the record leaves `unfinished()`
  and keeps its outcome.
- `unfinished()` (oldest first), `payments(limit=20, outcome=None)` (newest first),
  `get(id)`, `find_by_proof(proof, payment_request_code=None)`: `JournalRecord`s.
- `claim(id) -> bool`, `release_claim(id)`: recovery takes over a payment whose process
  died, and lets go of it (see "Owners" below).

Owners: a payment is in flight from `open_payment` to `finish_payment`, and while it is,
the store that opened it owns it (the `owner` column). Each store holds a lease, from
the first payment it owns until it is closed: a lock file `<state file>.owners/<lease
id>.lock` (mode 0600, in a 0700 directory) locked with `flock`, which the operating
system releases when the process dies, however it dies. An
owner is alive when it is this store or when its lock file is still locked; a record
whose owner is alive is `in_progress`, and `claim` refuses it, so recovery never re-sends
the proof of a request that a live process is still waiting on. A pid would not do: pids
are reused. A dead owner's lock file is removed by the first store that finds it
unlocked (a store taking its lease sweeps them). Where `fcntl` is missing (Windows),
nothing tells a dead owner from a live one: every other store's owner counts as alive
while its lock file exists; a process that closes its store removes its file, and after
a crash a person who knows the process is gone deletes it by hand. A forked child
inherits its parent's lock, which then lives as long as either.

Payment channels (the `batch-settlement` scheme): the store is also a `ChannelBook`
(`_state.channels`): `channel`, `open_channel`, `advance` (compare-and-set of the highest
cumulative amount signed, in one `BEGIN IMMEDIATE` transaction), `acknowledge`,
`deposited`, `refunded`, `set_status`, `channels`, and `hold(channel_id)`, a lock file
`<state file>.channels/<channel id>.lock` locked with `flock` (released by the operating
system when its holder dies), so the processes of the machine take turns on a channel.

Nothing secret is written: there is no field for an API key or a private key; request
headers that carry credentials (`authorization`, `cookie`, `x-api-key`, `x-payment`,
`payment-signature`, any name with `token`, `secret`, `key`, `auth`, `cookie`, `password`,
`session`, `signature` or `credential`) are dropped, and so are the values of query
parameters with such names and a password in the URL. A request body is kept without
its credentials (`_redact_body`): the values of form fields and JSON keys (an MCP tool's
arguments) with such names become `REDACTED`, and a body of another type is kept only when
no word in it is such a name; a body redacted or not kept is flagged
(`request_body_redacted`), and recovery asks for it instead of re-sending it. Request
bodies over 1 MiB are not kept (`request_body_omitted`). The proof is kept: it is what
recovery re-sends.

Threads: one connection per store, guarded by a lock, used from anyio's worker threads
(`anyio.to_thread.run_sync`) so the event loop never waits on the disk. One connection
is enough: SQLite lets one writer in at a time anyway, across processes, and the lock
keeps a transaction whole. Opening (the constructor) is synchronous: make the store at
start-up. The file is created with mode 0600 in WAL mode with `synchronous=FULL` (a
journal row written before money moves survives a power cut); `busy_timeout` is how long
a call waits for another process's transaction. Close it with `close()` or `aclose()`.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import os
import pathlib
import re
import sqlite3
import threading
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from datetime import datetime, timezone
from decimal import Decimal
from functools import partial
from typing import Any, Literal, TypeVar, cast, get_args

import anyio.to_thread

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

from .._protocol import exact_json as _json
from .._protocol.amounts import format_money, money_of
from .._protocol.budgets import (
    total_reservation_amount,
    total_reservation_id,
    window_reservation_id,
)
from .._protocol.dsn import PostgresDsn, is_postgres_dsn
from .._protocol.errors import ConfigurationError
from .._protocol.ledger import Outcome
from .._protocol.redact import redact_urls, safe_headers, safe_url
from .._protocol.redact_body import KeptBody, safe_body
from .._protocol.types import PaymentIntent, Rail
from .channels import (
    ChannelRecord,
    acknowledged_record,
    advanced_record,
    check_channel_id,
    check_status,
    deposited_record,
    refunded_record,
    stamped,
)
from .shared import KeyedLocks

__all__ = [
    "MAX_STORED_BODY",
    "SCHEMA_VERSION",
    "JournalRecord",
    "JournalStep",
    "SqliteStore",
    "default_state_path",
]

#: The schema this module writes (`PRAGMA user_version`).
SCHEMA_VERSION = 4
#: Request bodies larger than this (1 MiB) are not kept in the journal.
MAX_STORED_BODY = 1 << 20

Finished = Literal["paid", "failed", "unknown"]
_T = TypeVar("_T")

_SCHEMA_V1 = (
    """CREATE TABLE budget_totals (
        key TEXT PRIMARY KEY,
        spent INTEGER NOT NULL CHECK (spent >= 0)
    )""",
    """CREATE TABLE budget_reservations (
        id TEXT PRIMARY KEY,
        key TEXT NOT NULL,
        at REAL NOT NULL,
        amount INTEGER NOT NULL CHECK (amount >= 0)
    )""",
    "CREATE INDEX budget_reservations_by_key ON budget_reservations (key, at)",
    """CREATE TABLE payments (
        id TEXT PRIMARY KEY,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
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
        request_body BLOB,
        request_body_size INTEGER,
        request_body_omitted INTEGER NOT NULL,
        reservations TEXT NOT NULL,
        payment_request_code TEXT,
        transaction_code TEXT,
        proof TEXT,
        blockchain_tx_id TEXT,
        tx_hash TEXT,
        outcome TEXT NOT NULL CHECK (outcome IN ('pending', 'paid', 'failed', 'unknown')),
        delivered INTEGER NOT NULL,
        error TEXT,
        unrecoverable TEXT
    )""",
    "CREATE INDEX payments_by_outcome ON payments (outcome, delivered)",
    """CREATE TABLE payment_steps (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        payment_id TEXT NOT NULL REFERENCES payments (id),
        at TEXT NOT NULL,
        step TEXT NOT NULL,
        detail TEXT NOT NULL
    )""",
    "CREATE INDEX payment_steps_by_payment ON payment_steps (payment_id, seq)",
)
# Version 2: the owner of a payment in flight (a store's lease id), and the look-ups of a
# proof re-sent by hand.
_SCHEMA_V2 = (
    "ALTER TABLE payments ADD COLUMN owner TEXT",
    "CREATE INDEX payments_by_proof ON payments (proof)",
    "CREATE INDEX payments_by_request_code ON payments (payment_request_code)",
)
# Version 3: the stored request body is not the one sent (its credentials were redacted,
# or it may have held some and was not kept).
_SCHEMA_V3 = ("ALTER TABLE payments ADD COLUMN request_body_redacted INTEGER NOT NULL DEFAULT 0",)
# Version 4: the payment channels of the `batch-settlement` scheme (`_state.channels`).
# Amounts are decimal text: a uint128 does not fit SQLite's 64-bit integers.
_SCHEMA_V4 = (
    """CREATE TABLE channels (
        channel_id TEXT PRIMARY KEY,
        network TEXT NOT NULL,
        origin TEXT NOT NULL,
        config TEXT NOT NULL,
        currency TEXT NOT NULL,
        asset TEXT NOT NULL,
        decimals INTEGER NOT NULL,
        deposited TEXT NOT NULL,
        signed TEXT NOT NULL,
        signature TEXT,
        acknowledged TEXT NOT NULL,
        refunded TEXT NOT NULL,
        status TEXT NOT NULL
            CHECK (status IN ('open', 'refunding', 'withdrawing', 'disputed', 'closed')),
        opened_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
    )""",
    "CREATE INDEX channels_by_status ON channels (status)",
)
_MIGRATIONS: tuple[tuple[str, ...], ...] = (_SCHEMA_V1, _SCHEMA_V2, _SCHEMA_V3, _SCHEMA_V4)
assert len(_MIGRATIONS) == SCHEMA_VERSION

_UNFINISHED = (
    "unrecoverable IS NULL AND (outcome IN ('pending', 'unknown') "
    "OR (outcome = 'paid' AND delivered = 0))"
)
#: `upto` payments whose settlement the client could not verify on chain yet: a `held`
#: step and no `settled` one (the maximum stays booked until then).
_HELD = (
    "rail = 'upto' AND EXISTS (SELECT 1 FROM payment_steps s WHERE s.payment_id = payments.id "
    "AND s.step = 'held') AND NOT EXISTS (SELECT 1 FROM payment_steps s "
    "WHERE s.payment_id = payments.id AND s.step = 'settled')"
)


def default_state_path() -> pathlib.Path | PostgresDsn:
    """`$X402_EUR_STATE` (a path, or a `postgresql://` URL), else
    `$XDG_DATA_HOME/x402-eur/state.sqlite3` (XDG's default data home is `~/.local/share`)."""
    explicit = os.environ.get("X402_EUR_STATE")
    if is_postgres_dsn(explicit):
        return PostgresDsn(str(explicit))
    if explicit:
        return pathlib.Path(explicit).expanduser()
    data_home = os.environ.get("XDG_DATA_HOME", "")
    # the XDG spec: a relative path is invalid and must be ignored
    base = (
        pathlib.Path(data_home)
        if os.path.isabs(data_home)
        else pathlib.Path.home() / ".local" / "share"
    )
    return base / "x402-eur" / "state.sqlite3"


def _timestamp(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="microseconds")


def _jsonable(value: Any) -> Any:
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


_LEASE_ID = re.compile(r"[0-9a-f]{32}")


def _drop_lease(fd: int, path: pathlib.Path, pid: int) -> None:
    # Closed first (Windows removes no open file), then removed. A forked child that exits
    # only closes its copy: the lease stays its parent's.
    with contextlib.suppress(OSError):
        os.close(fd)
    if os.getpid() == pid:
        with contextlib.suppress(OSError):
            os.unlink(path)


class _Lease:
    """A store's claim on the payments it works on: `<directory>/<id>.lock`, locked for the
    store's life (see "Owners" in the module docstring)."""

    def __init__(self, directory: pathlib.Path) -> None:
        directory.mkdir(mode=0o700, exist_ok=True)
        self.directory = directory
        self.id = uuid.uuid4().hex
        path = directory / f"{self.id}.lock"
        if fcntl is None:  # pragma: no cover - Windows
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        else:
            # Locked before it gets its name: a store that finds `<id>.lock` unlocked knows
            # its owner is gone, never that it is still starting.
            temporary = directory / f".{self.id}.tmp"
            fd = os.open(temporary, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                os.replace(temporary, path)
            except BaseException:
                _drop_lease(fd, temporary, os.getpid())
                raise
        self._finalizer = weakref.finalize(self, _drop_lease, fd, path, os.getpid())
        # The files of owners that died owning nothing are swept when a lease is taken.
        for other in directory.glob("*.lock"):
            if other.stem != self.id:
                _lease_alive(directory, other.stem)

    def close(self) -> None:
        self._finalizer()


def _lease_alive(directory: pathlib.Path, owner: str) -> bool:
    """Whether the store that holds lease `owner` is still open in a live process (its
    lock file is locked); a dead one's file is removed."""
    if not _LEASE_ID.fullmatch(owner):
        return True  # not a lease id: never taken over
    path = directory / f"{owner}.lock"
    if fcntl is None:  # pragma: no cover - Windows
        return path.exists()
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    except OSError:
        return True  # cannot tell: count it alive
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True  # locked: its process is alive
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return False
    finally:
        os.close(fd)


@dataclasses.dataclass(frozen=True)
class JournalStep:
    at: datetime
    step: str
    detail: str = ""


@dataclasses.dataclass(frozen=True)
class JournalRecord:
    """One payment in the journal: its intent, the request it paid for, the facts known
    about it, its outcome and its steps.

    `outcome` is `pending` until finished; `paid` with `delivered=False` means money
    moved and the merchant has not served yet. `unrecoverable` holds the reason recovery
    gave up, if it did. `request_body` is None when there was none or when it was over
    1 MiB (`request_body_omitted`); `request_body_size` is its length either way.
    `request_body_redacted`: the body held credentials (or may have), so `request_body` is
    not the body sent: it has their values replaced by `REDACTED`, or is None (not kept).
    `in_progress`: a process that is still running is working on it (paying, waiting,
    delivering, or recovering it), as of when the record was read: leave it alone;
    `worker` names that process where the store knows it.
    """

    id: str
    created_at: datetime
    updated_at: datetime
    rail: str
    scheme: str
    network: str
    asset: str
    asset_symbol: str
    amount: Decimal
    currency: str
    pay_to: str
    resource: str
    atomic_amount: int | None
    description: str | None
    accept: Mapping[str, Any] = dataclasses.field(repr=False)
    request_method: str
    request_url: str
    request_headers: tuple[tuple[str, str], ...] = dataclasses.field(repr=False)
    request_body: bytes | None = dataclasses.field(repr=False)
    request_body_size: int | None
    request_body_omitted: bool
    reservations: tuple[tuple[str, str], ...]
    payment_request_code: str | None
    transaction_code: str | None
    proof: str | None = dataclasses.field(repr=False)
    blockchain_tx_id: str | None
    tx_hash: str | None
    outcome: Outcome
    delivered: bool
    error: str | None
    unrecoverable: str | None
    steps: tuple[JournalStep, ...] = dataclasses.field(repr=False)
    in_progress: bool = False
    request_body_redacted: bool = False
    #: The worker (`host:pid`) whose store owns the payment while it is in flight, where the
    #: store knows it (a PostgreSQL store does: a fleet's payments are all in one place).
    worker: str | None = None

    @property
    def state(self) -> str:
        """The one word for where the payment stands: `delivered`, `paid, not delivered`,
        `failed`, `unknown`, `pending` (`in progress` while a live process works on it,
        `unrecoverable` once recovery gave up)."""
        if self.in_progress:
            return "in progress"
        if self.unrecoverable:
            return "unrecoverable"
        if self.outcome == "paid":
            return "delivered" if self.delivered else "paid, not delivered"
        return self.outcome

    def __repr__(self) -> str:
        # Short, for a console: the full record is in its fields and `to_json()`.
        money = money_of(self.amount, self.currency, self.asset_symbol)
        return (
            f"JournalRecord({self.id[:12]}, {self.state}: {money} on {self.rail} "
            f"{self.network}, {self.request_method} {safe_url(self.resource)})"
        )

    def _repr_html_(self) -> str:
        from .._protocol.display import fields_table

        return fields_table(f"payment {self.id}", self.facts())

    @property
    def payment_identifier(self) -> str | None:
        """The x402 `payment-identifier` its proof carries (a standard v2 merchant that
        declared the extension deduplicates its re-sends by it), if any."""
        if not self.proof:
            return None
        # These load pydantic, which opening a journal does not: only when asked.
        from .._protocol.exact_json import ProofError, b64_json_decode
        from .._protocol.payment_id import payment_id_of

        try:
            decoded = b64_json_decode(self.proof)
        except ProofError:
            return None
        return payment_id_of(decoded) if isinstance(decoded, dict) else None

    def facts(self) -> list[tuple[str, object]]:
        """What a person reads of this payment, as (label, text) pairs (no proof)."""
        return [
            ("state", self.state),
            ("worker", self.worker if self.in_progress else None),
            ("amount", money_of(self.amount, self.currency, self.asset_symbol)),
            ("rail", self.rail),
            ("network", self.network),
            ("asset", self.asset),
            ("pay to", self.pay_to),
            ("request", f"{self.request_method} {safe_url(self.request_url)}"),
            ("created", self.created_at.isoformat(timespec="seconds")),
            ("updated", self.updated_at.isoformat(timespec="seconds")),
            ("payment request", self.payment_request_code),
            ("transaction", self.transaction_code),
            ("chain tx id", self.blockchain_tx_id),
            ("tx hash", self.tx_hash if self.tx_hash != self.blockchain_tx_id else None),
            ("payment identifier", self.payment_identifier),
            ("request body", self.body_kept),
            ("error", None if self.error is None else redact_urls(self.error)),
            (
                "unrecoverable",
                None if self.unrecoverable is None else redact_urls(self.unrecoverable),
            ),
        ]

    @property
    def body_kept(self) -> str | None:
        """How the journal kept the request body when it is not the body sent (recovery
        then asks for that body); None when it was kept as sent, or there was none."""
        if self.request_body_omitted:
            return f"not kept ({self.request_body_size} bytes, over 1 MiB)"
        if not self.request_body_redacted:
            return None
        if self.request_body is None:
            return "not kept (it may hold credentials)"
        return "kept with its credentials redacted"

    @property
    def intent(self) -> PaymentIntent:
        """The intent as it was journaled (URLs as redacted)."""
        return PaymentIntent(
            rail=cast(Rail, self.rail),
            scheme=self.scheme,
            network=self.network,
            asset=self.asset,
            asset_symbol=self.asset_symbol,
            amount=self.amount,
            currency=self.currency,
            pay_to=self.pay_to,
            resource=self.resource,
            atomic_amount=self.atomic_amount,
            description=self.description,
            accept=dict(self.accept),
        )

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict: amounts as decimal strings, times in ISO 8601, the body in
        base64 (`request_body_base64`)."""
        data: dict[str, Any] = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name == "request_body":
                data["request_body_base64"] = (
                    None if value is None else base64.b64encode(value).decode()
                )
            elif field.name == "steps":
                data["steps"] = [
                    {"at": s.at.isoformat(), "step": s.step, "detail": s.detail} for s in value
                ]
            elif isinstance(value, datetime):
                data[field.name] = value.isoformat()
            elif field.name == "atomic_amount":
                data[field.name] = None if value is None else str(value)
            else:
                data[field.name] = _jsonable(value)
        data["payment_identifier"] = self.payment_identifier
        return data


def _intent_columns(intent: PaymentIntent) -> dict[str, str | None]:
    """The journal's columns of a payment's intent (its resource URL redacted)."""
    return {
        "rail": intent.rail,
        "scheme": intent.scheme,
        "network": intent.network,
        "asset": intent.asset,
        "asset_symbol": intent.asset_symbol,
        "amount": format(intent.amount, "f"),
        "currency": intent.currency,
        "pay_to": intent.pay_to,
        "resource": safe_url(intent.resource),
        "atomic_amount": None if intent.atomic_amount is None else str(intent.atomic_amount),
        "description": intent.description,
        "accept": _json.dumps(dict(intent.accept)).decode(),
    }


def _body_columns(
    body: bytes | None, headers: Sequence[tuple[str, str]]
) -> dict[str, int | bytes | None]:
    """The journal's columns of a request body: none over `MAX_STORED_BODY`, and none of
    the credentials in it (`_redact_body`)."""
    omitted = body is not None and len(body) > MAX_STORED_BODY
    kept = KeptBody(None, False)
    if body is not None and not omitted:
        types = [value for name, value in headers if name.lower() == "content-type"]
        kept = safe_body(bytes(body), types[0] if types else None)
    return {
        "request_body": kept.body,
        "request_body_size": None if body is None else len(body),
        "request_body_omitted": int(omitted),
        "request_body_redacted": int(kept.redacted),
    }


def _record(row: sqlite3.Row, steps: Sequence[JournalStep], in_progress: bool) -> JournalRecord:
    atomic = row["atomic_amount"]
    return JournalRecord(
        id=row["id"],
        created_at=datetime.fromisoformat(row["created_at"]),
        updated_at=datetime.fromisoformat(row["updated_at"]),
        rail=row["rail"],
        scheme=row["scheme"],
        network=row["network"],
        asset=row["asset"],
        asset_symbol=row["asset_symbol"],
        amount=Decimal(row["amount"]),
        currency=row["currency"],
        pay_to=row["pay_to"],
        resource=row["resource"],
        atomic_amount=None if atomic is None else int(atomic),
        description=row["description"],
        accept=_json.loads(row["accept"]),
        request_method=row["request_method"],
        request_url=row["request_url"],
        request_headers=tuple((str(n), str(v)) for n, v in _json.loads(row["request_headers"])),
        request_body=row["request_body"],
        request_body_size=row["request_body_size"],
        request_body_omitted=bool(row["request_body_omitted"]),
        request_body_redacted=bool(row["request_body_redacted"]),
        reservations=tuple((str(k), str(r)) for k, r in _json.loads(row["reservations"])),
        payment_request_code=row["payment_request_code"],
        transaction_code=row["transaction_code"],
        proof=row["proof"],
        blockchain_tx_id=row["blockchain_tx_id"],
        tx_hash=row["tx_hash"],
        outcome=row["outcome"],
        delivered=bool(row["delivered"]),
        error=row["error"],
        unrecoverable=row["unrecoverable"],
        steps=tuple(steps),
        in_progress=in_progress,
    )


class SqliteStore:
    """Budgets and the payment journal in one SQLite file, shared by the processes of
    one machine (see the module docstring for the journal's calls).

    ```python
    store = SqliteStore(SqliteStore.default_path())
    options = PaymentOptions(..., budgets=[Budget("5", window=86400)], budget_store=store)
    ...
    await store.aclose()   # yours to close: several clients may share one store
    ```

    `busy_timeout` (seconds) is how long a call waits for another process's write;
    `synchronous="NORMAL"` trades durability across a power cut for speed; `clock`
    (seconds since the epoch) is for tests. Budget totals are SQLite 64-bit integers of
    atomic units: up to about 9.2 million million EUR.
    """

    @staticmethod
    def default_path() -> pathlib.Path | PostgresDsn:
        """Where the command line and the MCP server keep their state: `$X402_EUR_STATE`,
        else `$XDG_DATA_HOME/x402-eur/state.sqlite3` (XDG's default data home is
        `~/.local/share`)."""
        return default_state_path()

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout: float = 10.0,
        synchronous: Literal["FULL", "NORMAL"] = "FULL",
        clock: Callable[[], float] = time.time,
    ) -> None:
        if synchronous not in ("FULL", "NORMAL"):
            raise ConfigurationError("synchronous must be 'FULL' or 'NORMAL'")
        self.path = pathlib.Path(path)
        self._clock = clock
        self._lock = threading.Lock()
        #: Where the leases of the stores on this file live; this store's own lease is
        #: taken the first time it owns a payment.
        self._owners = self.path.with_name(self.path.name + ".owners")
        self._lease: _Lease | None = None
        #: Where the locks of `hold(channel_id)` live, and the hold within this store.
        self._channel_holds = self.path.with_name(self.path.name + ".channels")
        self._channel_locks = KeyedLocks()
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        # created here, not by SQLite, so that it is never readable by others; SQLite
        # gives its -wal and -shm files the same mode
        os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600))
        conn = sqlite3.connect(
            self.path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
        )
        try:
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
            conn.execute("PRAGMA journal_mode = WAL")
            # the -wal file is reused, not grown, between checkpoints; cap what it keeps
            conn.execute("PRAGMA journal_size_limit = 4194304")
            conn.execute(f"PRAGMA synchronous = {synchronous}")
            conn.execute("PRAGMA foreign_keys = ON")
            self._migrate(conn)
        except BaseException:
            conn.close()
            raise
        self._conn: sqlite3.Connection | None = conn

    def __repr__(self) -> str:
        return f"SqliteStore({str(self.path)!r})"

    def _migrate(self, conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])
            if version > SCHEMA_VERSION:
                raise ConfigurationError(
                    f"{self.path} has schema {version}, newer than this x402-eur "
                    f"({SCHEMA_VERSION}): upgrade x402-eur"
                )
            for statements in _MIGRATIONS[version:]:
                for statement in statements:
                    conn.execute(statement)
            if version != SCHEMA_VERSION:
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    # --- plumbing ---------------------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RuntimeError(f"{self!r} is closed")
        return self._conn

    def _write_now(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run `work` in one `BEGIN IMMEDIATE` transaction (in the calling thread)."""
        with self._lock:
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                result = work(conn)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            return result

    def _read_now(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run `work` in one read transaction: a consistent snapshot."""
        with self._lock:
            conn = self._connection()
            conn.execute("BEGIN")
            try:
                return work(conn)
            finally:
                conn.execute("COMMIT")

    async def _write(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        return await anyio.to_thread.run_sync(self._write_now, work)

    async def _read(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        return await anyio.to_thread.run_sync(self._read_now, work)

    def _now(self) -> str:
        return _timestamp(self._clock())

    def _owner_id(self) -> str:
        """This store's lease id (the lease is taken on first use; under `_lock`)."""
        if self._lease is None:
            self._lease = _Lease(self._owners)
        return self._lease.id

    def _alive(self, owner: str) -> bool:
        lease = self._lease
        if lease is not None and owner == lease.id:
            return True
        return _lease_alive(self._owners, owner)

    def close(self) -> None:
        """Close the file. The payments this store still owned are no longer in progress:
        recovery may take them over."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            if self._lease is not None:
                self._lease.close()
                self._lease = None

    async def aclose(self) -> None:
        await anyio.to_thread.run_sync(self.close)

    def __enter__(self) -> SqliteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> SqliteStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # --- BudgetStore --------------------------------------------------------------------------

    async def reserve(self, key: str, amount: int, limit: int, window: float | None) -> str | None:
        return await self._write(partial(self._reserve, key, amount, limit, window))

    def _reserve(
        self, key: str, amount: int, limit: int, window: float | None, conn: sqlite3.Connection
    ) -> str | None:
        if window is None:
            row = conn.execute("SELECT spent FROM budget_totals WHERE key = ?", (key,)).fetchone()
            spent = 0 if row is None else int(row[0])
            if spent + amount > limit:
                return None
            conn.execute(
                "INSERT INTO budget_totals (key, spent) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET spent = spent + excluded.spent",
                (key, amount),
            )
            return total_reservation_id(amount)
        now = self._clock()
        conn.execute(
            "DELETE FROM budget_reservations WHERE key = ? AND at < ?", (key, now - window)
        )
        spent = int(
            conn.execute(
                "SELECT COALESCE(SUM(amount), 0) FROM budget_reservations WHERE key = ?", (key,)
            ).fetchone()[0]
        )
        if spent + amount > limit:
            return None
        rid = window_reservation_id()
        conn.execute(
            "INSERT INTO budget_reservations (id, key, at, amount) VALUES (?, ?, ?, ?)",
            (rid, key, now, amount),
        )
        return rid

    def budget_spending(self) -> list[tuple[str, int, list[tuple[str, float, int]]]]:
        """Every budget's spending: (key, total, windowed reservations as (id, seconds
        since the epoch, amount)), by key."""

        def work(conn: sqlite3.Connection) -> list[tuple[str, int, list[tuple[str, float, int]]]]:
            totals = dict(conn.execute("SELECT key, spent FROM budget_totals").fetchall())
            windows: dict[str, list[tuple[str, float, int]]] = {}
            for rid, key, at, amount in conn.execute(
                "SELECT id, key, at, amount FROM budget_reservations ORDER BY at"
            ):
                windows.setdefault(key, []).append((rid, float(at), int(amount)))
            keys = sorted(set(totals) | set(windows))
            return [(k, int(totals.get(k, 0)), windows.get(k, [])) for k in keys]

        return self._read_now(work)

    async def release(self, key: str, reservation: str) -> None:
        amount = total_reservation_amount(reservation)

        def work(conn: sqlite3.Connection) -> None:
            if amount is None:
                conn.execute(
                    "DELETE FROM budget_reservations WHERE key = ? AND id = ?", (key, reservation)
                )
            else:
                conn.execute(
                    "UPDATE budget_totals SET spent = MAX(spent - ?, 0) WHERE key = ?",
                    (amount, key),
                )

        await self._write(work)

    async def spent(self, key: str, window: float | None) -> int:
        def work(conn: sqlite3.Connection) -> int:
            if window is None:
                row = conn.execute(
                    "SELECT spent FROM budget_totals WHERE key = ?", (key,)
                ).fetchone()
                return 0 if row is None else int(row[0])
            row = conn.execute(
                "SELECT COALESCE(SUM(amount), 0) FROM budget_reservations "
                "WHERE key = ? AND at >= ?",
                (key, self._clock() - window),
            ).fetchone()
            return int(row[0])

        return await self._read(work)

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
        """Journal a payment about to be made (`pending`); returns its journal id.

        Call it before any money moves. `reservations` are the `(budget key,
        reservation id)` pairs it holds, for recovery to release if nothing was paid. This
        store owns the payment until `finish_payment`: it is in progress, and recovery
        leaves it alone while this store is open in a live process.
        """
        journal_id = id if id is not None else uuid.uuid4().hex
        sent = list(request_headers)
        headers = safe_headers(sent)
        values: dict[str, Any] = {
            "id": journal_id,
            **_intent_columns(intent),
            "request_method": request_method,
            "request_url": safe_url(request_url),
            "request_headers": _json.dumps([list(h) for h in headers]).decode(),
            "reservations": _json.dumps([list(r) for r in reservations]).decode(),
            "payment_request_code": payment_request_code,
            "outcome": "pending",
            "delivered": 0,
        }

        def work(conn: sqlite3.Connection) -> None:
            now = self._now()
            row = {**values, "created_at": now, "updated_at": now, "owner": self._owner_id()}
            columns = ", ".join(row)
            marks = ", ".join(f":{name}" for name in row)
            conn.execute(f"INSERT INTO payments ({columns}) VALUES ({marks})", row)  # noqa: S608
            detail = f"{format_money(intent.amount, intent.currency)} to {intent.pay_to}"
            self._step(conn, journal_id, now, "intent", detail)

        def write() -> None:
            # Read for credentials before the write begins: a large body takes a while.
            values.update(_body_columns(request_body, sent))
            self._write_now(work)

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

        def work(conn: sqlite3.Connection) -> None:
            now = self._now()
            assignments = "".join(f", {name} = :{name}" for name in given)
            query = f"UPDATE payments SET updated_at = :now{assignments} WHERE id = :id"  # noqa: S608
            self._update(conn, id, query, {**given, "now": now, "id": id})
            self._step(conn, id, now, step or "update", detail or ", ".join(given))

        await self._write(work)

    async def finish_payment(
        self,
        id: str,
        outcome: Finished,
        *,
        delivered: bool,
        error: str | None = None,
        tx_hash: str | None = None,
    ) -> None:
        """Record how the payment ended: `paid` (money moved), `failed` (it did not) or
        `unknown` (it may have). The attempt is over: no store owns the payment any more."""
        if outcome not in get_args(Finished):
            raise ValueError(f"outcome must be one of {get_args(Finished)}, not {outcome!r}")

        def work(conn: sqlite3.Connection) -> None:
            now = self._now()
            self._update(
                conn,
                id,
                "UPDATE payments SET updated_at = ?, outcome = ?, delivered = ?, error = ?, "
                "tx_hash = COALESCE(?, tx_hash), owner = NULL WHERE id = ?",
                (now, outcome, int(delivered), error, tx_hash, id),
            )
            detail = error or ("delivered" if delivered else "not delivered")
            self._step(conn, id, now, outcome, detail)

        await self._write(work)

    async def mark_unrecoverable(self, id: str, reason: str) -> None:
        """Recovery gave up on this payment: it leaves `unfinished()`, its outcome stays."""

        def work(conn: sqlite3.Connection) -> None:
            now = self._now()
            self._update(
                conn,
                id,
                "UPDATE payments SET updated_at = ?, unrecoverable = ?, owner = NULL WHERE id = ?",
                (now, reason, id),
            )
            self._step(conn, id, now, "unrecoverable", reason)

        await self._write(work)

    async def claim(self, id: str) -> bool:
        """Take over payment `id` for recovery: True when no live process owned it (none
        did, or its owner died), and this store owns it now; False when a live process
        (this store included) is working on it. Atomic across processes. Let go of it with
        `finish_payment`, `mark_unrecoverable` or `release_claim`."""

        def work(conn: sqlite3.Connection) -> bool:
            row = conn.execute("SELECT owner FROM payments WHERE id = ?", (id,)).fetchone()
            if row is None:
                raise KeyError(f"no payment {id!r} in the journal")
            owner = row[0]
            if owner is not None and self._alive(owner):
                return False
            now = self._now()
            conn.execute(
                "UPDATE payments SET owner = ?, updated_at = ? WHERE id = ?",
                (self._owner_id(), now, id),
            )
            detail = "its process is gone" if owner is not None else ""
            self._step(conn, id, now, "recovering", detail)
            return True

        return await self._write(work)

    async def release_claim(self, id: str) -> None:
        """Let go of a payment this store owns without finishing it (recovery that could
        not decide yet); a payment it does not own is left as it is."""
        lease = self._lease
        if lease is None:
            return
        await self._write(
            lambda conn: conn.execute(
                "UPDATE payments SET owner = NULL WHERE id = ? AND owner = ?", (id, lease.id)
            )
        )

    async def get(self, id: str) -> JournalRecord | None:
        found = await self._read(partial(self._select, "id = ?", (id,), "", None))
        return found[0] if found else None

    async def starting_with(self, prefix: str, limit: int | None = None) -> list[JournalRecord]:
        """The payments whose id starts with `prefix`, newest first (at most `limit`)."""
        where, args = "substr(id, 1, ?) = ?", (len(prefix), prefix)
        return await self._read(partial(self._select, where, args, "DESC", limit))

    async def find_by_proof(
        self, proof: str, payment_request_code: str | None = None
    ) -> JournalRecord | None:
        """The newest payment whose proof is `proof`; else, given a euro payment request
        code, the newest euro payment of that request (one journaled before its proof
        existed, or whose proof was written differently): what a proof re-sent by hand
        belongs to."""

        def work(conn: sqlite3.Connection) -> list[JournalRecord]:
            found = self._select("proof = ?", (proof,), "DESC", 1, conn)
            if found or payment_request_code is None:
                return found
            return self._select(
                "rail = 'euro' AND payment_request_code = ?",
                (payment_request_code,),
                "DESC",
                1,
                conn,
            )

        found = await self._read(work)
        return found[0] if found else None

    async def with_transaction_code(self, code: str) -> JournalRecord | None:
        """The newest payment that journaled the provider's transaction `code`."""
        found = await self._read(partial(self._select, "transaction_code = ?", (code,), "DESC", 1))
        return found[0] if found else None

    async def unfinished(self) -> list[JournalRecord]:
        """Payments recovery should look at, oldest first: pending, unknown, or paid but
        not delivered (and not marked unrecoverable). Those a live process is still working
        on are listed too, `in_progress`."""
        return await self._read(partial(self._select, _UNFINISHED, (), "ASC", None))

    async def held_settlements(self) -> list[JournalRecord]:
        """`upto` payments whose settlement is not verified yet, oldest first: recovery asks
        the chain again (their maximum stays booked until it tells)."""
        return await self._read(partial(self._select, _HELD, (), "ASC", None))

    async def payments(
        self, limit: int = 20, outcome: Outcome | None = None
    ) -> list[JournalRecord]:
        """The latest `limit` payments, newest first; only those with `outcome` if given."""
        if limit < 0:
            raise ValueError("limit must not be negative")
        where, args = ("1", ()) if outcome is None else ("outcome = ?", (outcome,))
        return await self._read(partial(self._select, where, args, "DESC", limit))

    @staticmethod
    def _step(conn: sqlite3.Connection, id: str, at: str, step: str, detail: str) -> None:
        conn.execute(
            "INSERT INTO payment_steps (payment_id, at, step, detail) VALUES (?, ?, ?, ?)",
            (id, at, step, detail),
        )

    @staticmethod
    def _update(conn: sqlite3.Connection, id: str, query: str, args: Any) -> None:
        if conn.execute(query, args).rowcount != 1:
            raise KeyError(f"no payment {id!r} in the journal")

    def _select(
        self,
        where: str,
        args: tuple[Any, ...],
        order: str,
        limit: int | None,
        conn: sqlite3.Connection,
    ) -> list[JournalRecord]:
        query = f"SELECT * FROM payments WHERE {where}"  # noqa: S608 - constant fragments
        if order:
            query += f" ORDER BY rowid {order}"
        if limit is not None:
            query += f" LIMIT {int(limit)}"
        rows = conn.execute(query, args).fetchall()
        steps: dict[str, list[JournalStep]] = {row["id"]: [] for row in rows}
        ids = list(steps)
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            marks = ", ".join("?" * len(chunk))
            for payment_id, at, step, detail in conn.execute(
                "SELECT payment_id, at, step, detail FROM payment_steps "  # noqa: S608
                f"WHERE payment_id IN ({marks}) ORDER BY seq",
                chunk,
            ):
                steps[payment_id].append(JournalStep(datetime.fromisoformat(at), step, detail))
        alive: dict[str, bool] = {}
        records = []
        for row in rows:
            owner = row["owner"]
            if owner is not None and owner not in alive:
                alive[owner] = self._alive(owner)
            records.append(_record(row, steps[row["id"]], owner is not None and alive[owner]))
        return records

    # --- payment channels (`_state.channels`) -------------------------------------------------

    async def channel(self, channel_id: str) -> ChannelRecord | None:
        check_channel_id(channel_id)
        return await self._read(partial(_channel_row, channel_id))

    async def open_channel(self, record: ChannelRecord) -> ChannelRecord:
        def work(conn: sqlite3.Connection) -> ChannelRecord:
            stored = _channel_row(record.channel_id, conn)
            if stored is not None:
                return stored
            new = stamped(record, self._now())
            row = _channel_columns(new)
            columns = ", ".join(row)
            marks = ", ".join(f":{name}" for name in row)
            conn.execute(f"INSERT INTO channels ({columns}) VALUES ({marks})", row)  # noqa: S608
            return new

        return await self._write(work)

    async def _change_channel(
        self, channel_id: str, change: Callable[[ChannelRecord, str], ChannelRecord | None]
    ) -> bool:
        """Apply `change` to the stored channel in one `BEGIN IMMEDIATE` transaction, which
        SQLite serialises across processes: what it read is what it replaces. False when
        `change` returned None (nothing written)."""
        check_channel_id(channel_id)

        def work(conn: sqlite3.Connection) -> bool:
            record = _channel_row(channel_id, conn)
            if record is None:
                raise KeyError(f"no channel {channel_id} in the journal")
            changed = change(record, self._now())
            if changed is None:
                return False
            if changed is not record:
                row = _channel_columns(changed)
                conn.execute(
                    "UPDATE channels SET deposited = :deposited, signed = :signed, "
                    "signature = :signature, acknowledged = :acknowledged, refunded = :refunded, "
                    "status = :status, updated_at = :updated_at WHERE channel_id = :channel_id",
                    row,
                )
            return True

        return await self._write(work)

    async def advance(self, channel_id: str, *, expected: int, signed: int, signature: str) -> bool:
        return await self._change_channel(
            channel_id, lambda r, now: advanced_record(r, expected, signed, signature, now)
        )

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
        where, args = ("1", ()) if status is None else ("status = ?", (check_status(status),))

        def work(conn: sqlite3.Connection) -> list[ChannelRecord]:
            query = f"SELECT * FROM channels WHERE {where} ORDER BY rowid"  # noqa: S608
            return [_channel_of(row) for row in conn.execute(query, args)]

        return await self._read(work)

    @contextlib.asynccontextmanager
    async def hold(self, channel_id: str) -> AsyncIterator[None]:
        """Hold the channel against every process on this machine until the block ends:
        `<state file>.channels/<channel id>.lock` locked with `flock`, which the operating
        system releases when the holder dies, however it dies. Waits (polling) while
        another process holds it. Where `fcntl` is missing (Windows), the hold reaches
        this store only (the compare-and-set of `advance` still refuses a voucher signed
        twice)."""
        check_channel_id(channel_id)
        async with self._channel_locks.hold(channel_id):
            fd = await anyio.to_thread.run_sync(self._channel_lock_file, channel_id)
            try:
                # Another process's lock has no event to wait on here: poll it.
                while not _try_lock(fd):  # noqa: ASYNC110
                    await anyio.sleep(0.005)
                yield
            finally:
                os.close(fd)  # which lets go of the lock

    def _channel_lock_file(self, channel_id: str) -> int:
        # The files stay: one removed while another process waits on it would let two
        # processes lock two different files of one name.
        self._channel_holds.mkdir(mode=0o700, exist_ok=True)
        return os.open(self._channel_holds / f"{channel_id}.lock", os.O_RDWR | os.O_CREAT, 0o600)


def _try_lock(fd: int) -> bool:
    if fcntl is None:  # pragma: no cover - Windows
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _channel_columns(record: ChannelRecord) -> dict[str, Any]:
    """The journal's columns of a channel (amounts as decimal text)."""
    return {
        "channel_id": record.channel_id,
        "network": record.network,
        "origin": record.origin,
        "config": _json.dumps(dict(record.config)).decode(),
        "currency": record.currency,
        "asset": record.asset,
        "decimals": record.decimals,
        "deposited": str(record.deposited),
        "signed": str(record.signed),
        "signature": record.signature,
        "acknowledged": str(record.acknowledged),
        "refunded": str(record.refunded),
        "status": record.status,
        "opened_at": record.opened_at,
        "updated_at": record.updated_at,
    }


def _channel_of(row: Mapping[str, Any]) -> ChannelRecord:
    return ChannelRecord(
        channel_id=row["channel_id"],
        network=row["network"],
        origin=row["origin"],
        config=_json.loads(row["config"]),
        currency=row["currency"],
        asset=row["asset"],
        decimals=int(row["decimals"]),
        deposited=int(row["deposited"]),
        signed=int(row["signed"]),
        signature=row["signature"],
        acknowledged=int(row["acknowledged"]),
        refunded=int(row["refunded"]),
        status=check_status(row["status"]),
        opened_at=row["opened_at"],
        updated_at=row["updated_at"],
    )


def _channel_row(channel_id: str, conn: sqlite3.Connection) -> ChannelRecord | None:
    row = conn.execute("SELECT * FROM channels WHERE channel_id = ?", (channel_id,)).fetchone()
    return None if row is None else _channel_of(row)
