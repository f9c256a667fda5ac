"""Where the client keeps its payment channels (the x402 `batch-settlement` scheme).

A channel is one deposit into an escrow, paid out by cumulative vouchers: each request signs
`Voucher(channelId, maxClaimableAmount)` with a higher cumulative amount. What must never
happen is a process signing a cumulative amount that was signed before, or a lower one: the
merchant could then claim a request twice, or a voucher would undo one. So the book keeps,
per channel, the highest cumulative amount signed (`signed`), and raises it only by
compare-and-set (`advance(expected=..., signed=...)`): two processes that read the same
`signed` both compute the next amount, and only one of them may record it; the other learns
that it lost (False) and reads again. A voucher leaves only once `advance` said True.

`hold(channel_id)` is the lock around read, sign and `advance`, so that processes sharing a
channel take turns rather than race (the compare-and-set keeps them right if they race
anyway). Its reach is the book's: one process (`MemoryChannelBook`), the processes of one
machine (`SqliteStore`: a lock file per channel that the operating system releases when
its holder dies), or a fleet (`PostgresStore`: an advisory lock that ends with its
holder's connection).

```python
book = MemoryChannelBook()
record = await book.open_channel(ChannelRecord(channel_id=CHANNEL, network="eip155:8453",
    origin="https://api.example", config=config, currency="USD", asset=USDC, decimals=6,
    deposited=5_000_000))
async with book.hold(CHANNEL):
    current = await book.channel(CHANNEL)
    assert current is not None
    amount = current.signed + 10_000
    if await book.advance(CHANNEL, expected=current.signed, signed=amount, signature=sig):
        ...  # the voucher for `amount` may leave now
```

Amounts are atomic units of the token (uint128 on chain), kept exactly at any size.
"""

from __future__ import annotations

import dataclasses
import re
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from datetime import datetime, timezone
from typing import Any, Literal, Protocol, cast, get_args
from urllib.parse import urlsplit

from .shared import KeyedLocks

__all__ = [
    "CHANNEL_STATUSES",
    "MAX_CHANNEL_AMOUNT",
    "ChannelBook",
    "ChannelRecord",
    "ChannelStatus",
    "MemoryChannelBook",
    "acknowledged_record",
    "advanced_record",
    "check_channel_id",
    "check_status",
    "check_voucher",
    "deposited_record",
    "refunded_record",
    "stamped",
    "utc_timestamp",
]

ChannelStatus = Literal["open", "refunding", "withdrawing", "disputed", "closed"]
#: Where a channel stands: paying, its unspent deposit being refunded (cooperatively) or
#: withdrawn (the timed withdrawal), closed to new vouchers because its merchant's answer
#: contradicted what was signed (`disputed`), or emptied.
CHANNEL_STATUSES: tuple[str, ...] = get_args(ChannelStatus)
#: The largest amount the escrow holds (`uint128`).
MAX_CHANNEL_AMOUNT = (1 << 128) - 1

_CHANNEL_ID = re.compile(r"0x[0-9a-f]{64}")
_NETWORK = re.compile(r"[-a-z0-9]{3,8}:[-_a-zA-Z0-9]{1,32}")
_SIGNATURE = re.compile(r"0x(?:[0-9a-fA-F]{2})+")


def utc_timestamp(seconds: float) -> str:
    """`seconds` since the epoch in ISO 8601, UTC, to the microsecond."""
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="microseconds")


def check_channel_id(channel_id: str) -> str:
    """`channel_id` when it is `0x` and 64 lower-case hex digits; else a ValueError (it
    names a lock file, so nothing else gets through)."""
    if not isinstance(channel_id, str) or not _CHANNEL_ID.fullmatch(channel_id):
        raise ValueError(f"a channel id is 0x and 64 lower-case hex digits, not {channel_id!r}")
    return channel_id


def check_status(status: str) -> ChannelStatus:
    if status not in CHANNEL_STATUSES:
        raise ValueError(f"a channel's status is one of {CHANNEL_STATUSES}, not {status!r}")
    return cast(ChannelStatus, status)


def _check_amount(name: str, value: object) -> int:
    if type(value) is not int or not 0 <= value <= MAX_CHANNEL_AMOUNT:
        raise ValueError(f"{name} is a whole number of atomic units from 0 to 2**128-1")
    return value


def _check_origin(origin: str) -> None:
    # The resource is journaled and asked for refunds: a URL with credentials, a query or a
    # fragment (where credentials hide) is refused.
    parts = urlsplit(origin) if isinstance(origin, str) else None
    if (
        parts is None
        or parts.scheme not in ("http", "https")
        or not parts.hostname
        or "@" in parts.netloc
        or parts.query
        or parts.fragment
    ):
        raise ValueError(
            "a channel's origin is the resource it pays, scheme://host[:port]/path, without "
            "credentials, query or fragment"
        )


@dataclasses.dataclass(frozen=True)
class ChannelRecord:
    """One payment channel as this client knows it.

    `origin` is the resource the channel was opened for (its URL without query or
    fragment): a cooperative refund is asked of it. `config` is the channel config as it
    travels on the wire (camelCase). Amounts are atomic
    units of `asset`: `deposited` is what this client deposited (verified on chain),
    `signed` the highest cumulative `maxClaimableAmount` it signed (`signature` is that
    voucher's), `acknowledged` the highest `chargedCumulativeAmount` the merchant
    acknowledged and the client verified (never above `signed`), `refunded` what came back
    to the payer. `opened_at` and `updated_at` are ISO 8601 in UTC; a record given to
    `open_channel` with them empty is stamped by the book.
    """

    channel_id: str
    network: str
    origin: str
    config: Mapping[str, Any] = dataclasses.field(repr=False, hash=False)
    currency: str
    asset: str
    decimals: int
    deposited: int = 0
    signed: int = 0
    signature: str | None = dataclasses.field(default=None, repr=False)
    acknowledged: int = 0
    refunded: int = 0
    status: ChannelStatus = "open"
    opened_at: str = ""
    updated_at: str = ""

    def __post_init__(self) -> None:
        check_channel_id(self.channel_id)
        if not isinstance(self.network, str) or not _NETWORK.fullmatch(self.network):
            raise ValueError(f"a channel's network is a CAIP-2 id, not {self.network!r}")
        _check_origin(self.origin)
        if not isinstance(self.config, Mapping):
            raise ValueError("a channel's config is a JSON object")
        for name in ("currency", "asset"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"a channel's {name} is a non-empty string")
        if type(self.decimals) is not int or not 0 <= self.decimals <= 255:
            raise ValueError("a channel's decimals are a whole number from 0 to 255")
        for name in ("deposited", "signed", "acknowledged", "refunded"):
            _check_amount(name, getattr(self, name))
        if self.acknowledged > self.signed:
            raise ValueError("a channel's acknowledged amount is never above what was signed")
        if self.signature is not None and not _SIGNATURE.fullmatch(self.signature):
            raise ValueError("a voucher's signature is 0x and hex digits")
        check_status(self.status)

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict: amounts as decimal strings (a uint128 is no JSON number a
        reader keeps exactly), the config as a plain object."""
        data = dataclasses.asdict(self)
        data["config"] = dict(self.config)
        for name in ("deposited", "signed", "acknowledged", "refunded"):
            data[name] = str(data[name])
        return data


class ChannelBook(Protocol):
    """The channels of a state (memory, a SQLite file, a PostgreSQL database)."""

    async def channel(self, channel_id: str) -> ChannelRecord | None:
        """The channel, or None when the book has never seen it."""
        ...

    async def open_channel(self, record: ChannelRecord) -> ChannelRecord:
        """Keep `record` unless the channel is in the book already; the stored record."""
        ...

    async def advance(self, channel_id: str, *, expected: int, signed: int, signature: str) -> bool:
        """Record a voucher for `signed`: True when the stored `signed` was `expected` and
        `signed` is above it; else False and nothing changes (another process signed first:
        read again). A KeyError for a channel not in the book."""
        ...

    async def acknowledge(self, channel_id: str, charged: int) -> None:
        """`acknowledged = max(acknowledged, charged)`; a ValueError above `signed`."""
        ...

    async def deposited(self, channel_id: str, amount: int) -> None:
        """`deposited += amount` (a deposit or a top-up, verified on chain)."""
        ...

    async def refunded(self, channel_id: str, amount: int, status: str) -> None:
        """`refunded += amount`, and the channel's status becomes `status`."""
        ...

    async def set_status(self, channel_id: str, status: str) -> None: ...

    async def channels(self, *, status: str | None = None) -> list[ChannelRecord]:
        """Every channel (with `status` only, if given), oldest first."""
        ...

    def hold(self, channel_id: str) -> AbstractAsyncContextManager[None]:
        """Hold the channel exclusively until the block ends (see the module docstring for
        how far the hold reaches)."""
        ...


# --- the rules, one copy for every book ------------------------------------------------------


def check_voucher(expected: int, signed: int, signature: str) -> None:
    """A ValueError unless the amounts of `advance` are amounts and `signature` one."""
    _check_amount("expected", expected)
    _check_amount("signed", signed)
    if not isinstance(signature, str) or not _SIGNATURE.fullmatch(signature):
        raise ValueError("a voucher's signature is 0x and hex digits")


def advanced_record(
    record: ChannelRecord, expected: int, signed: int, signature: str, now: str
) -> ChannelRecord | None:
    """`record` with the voucher for `signed` recorded, or None when the compare-and-set
    fails (`record.signed` is not `expected`, or `signed` is not above it)."""
    check_voucher(expected, signed, signature)
    if record.signed != expected or signed <= expected:
        return None
    return dataclasses.replace(record, signed=signed, signature=signature, updated_at=now)


def acknowledged_record(record: ChannelRecord, charged: int, now: str) -> ChannelRecord:
    _check_amount("charged", charged)
    if charged > record.signed:
        raise ValueError(
            f"channel {record.channel_id}: {charged} acknowledged is above the {record.signed} "
            "signed"
        )
    if charged <= record.acknowledged:
        return record
    return dataclasses.replace(record, acknowledged=charged, updated_at=now)


def deposited_record(record: ChannelRecord, amount: int, now: str) -> ChannelRecord:
    total = record.deposited + _check_amount("amount", amount)
    return dataclasses.replace(record, deposited=_check_amount("deposited", total), updated_at=now)


def refunded_record(record: ChannelRecord, amount: int, status: str, now: str) -> ChannelRecord:
    total = record.refunded + _check_amount("amount", amount)
    return dataclasses.replace(
        record,
        refunded=_check_amount("refunded", total),
        status=check_status(status),
        updated_at=now,
    )


def stamped(record: ChannelRecord, now: str) -> ChannelRecord:
    """`record` with its empty timestamps set to `now`."""
    opened = record.opened_at or now
    return dataclasses.replace(record, opened_at=opened, updated_at=record.updated_at or opened)


class MemoryChannelBook:
    """The channels of options without a state file: this process only, gone when it ends
    (thread-safe; `hold` is a lock any thread and event loop can wait on). `clock` (seconds
    since the epoch) is for tests."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._guard = threading.Lock()
        self._records: dict[str, ChannelRecord] = {}
        self._locks = KeyedLocks()
        self._clock = clock

    def __repr__(self) -> str:
        return f"MemoryChannelBook(channels={len(self._records)})"

    def _now(self) -> str:
        return utc_timestamp(self._clock())

    def _change(self, channel_id: str, change: Callable[[ChannelRecord], ChannelRecord]) -> None:
        with self._guard:
            record = self._records.get(check_channel_id(channel_id))
            if record is None:
                raise KeyError(f"no channel {channel_id} in the book")
            self._records[channel_id] = change(record)

    async def channel(self, channel_id: str) -> ChannelRecord | None:
        with self._guard:
            return self._records.get(check_channel_id(channel_id))

    async def open_channel(self, record: ChannelRecord) -> ChannelRecord:
        with self._guard:
            return self._records.setdefault(record.channel_id, stamped(record, self._now()))

    async def advance(self, channel_id: str, *, expected: int, signed: int, signature: str) -> bool:
        with self._guard:
            record = self._records.get(check_channel_id(channel_id))
            if record is None:
                raise KeyError(f"no channel {channel_id} in the book")
            changed = advanced_record(record, expected, signed, signature, self._now())
            if changed is None:
                return False
            self._records[channel_id] = changed
            return True

    async def acknowledge(self, channel_id: str, charged: int) -> None:
        self._change(channel_id, lambda r: acknowledged_record(r, charged, self._now()))

    async def deposited(self, channel_id: str, amount: int) -> None:
        self._change(channel_id, lambda r: deposited_record(r, amount, self._now()))

    async def refunded(self, channel_id: str, amount: int, status: str) -> None:
        self._change(channel_id, lambda r: refunded_record(r, amount, status, self._now()))

    async def set_status(self, channel_id: str, status: str) -> None:
        check_status(status)
        self._change(
            channel_id,
            lambda r: dataclasses.replace(r, status=check_status(status), updated_at=self._now()),
        )

    async def channels(self, *, status: str | None = None) -> list[ChannelRecord]:
        if status is not None:
            check_status(status)
        with self._guard:
            records = list(self._records.values())
        return [r for r in records if status is None or r.status == status]

    def hold(self, channel_id: str) -> AbstractAsyncContextManager[None]:
        return self._locks.hold(check_channel_id(channel_id))
