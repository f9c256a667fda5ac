"""The budget stores, and the runtime that reserves in them (`Budgets`).

What a budget is, what a store must do and the reservation ids are `_protocol.budgets`'s.
A payment reserves its amount in every matching budget *before* any money moves, and after
it either commits the reservation (money moved, or may have) or releases it (no money
moved). Reserving is atomic in the store, so concurrent requests can never overshoot.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import anyio

from .._protocol.amounts import (
    AmountError,
    format_amount,
    from_atomic,
    to_atomic,
    to_atomic_ceiling,
    trim_amount,
)
from .._protocol.budgets import (
    Budget,
    BudgetReport,
    BudgetStatus,
    BudgetStore,
    CurrencyStatus,
    over_budget,
    total_reservation_amount,
    total_reservation_id,
    uncovered_currency,
    window_reservation_id,
)
from .._protocol.errors import BudgetExceeded, ConfigurationError

if TYPE_CHECKING:
    from .._protocol.types import PaymentIntent

__all__ = ["Budgets", "InMemoryBudgetStore", "RedisBudgetStore", "Reservation"]

logger = logging.getLogger("x402_client")


class InMemoryBudgetStore:
    """A process-local store (thread-safe). `clock` (seconds) is for tests."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._lock = threading.Lock()
        self._totals: dict[str, int] = {}
        self._entries: dict[str, dict[str, tuple[float, int]]] = {}
        self._clock = clock

    def _live(self, key: str, window: float) -> dict[str, tuple[float, int]]:
        entries = self._entries.setdefault(key, {})
        horizon = self._clock() - window
        for rid in [r for r, (at, _) in entries.items() if at < horizon]:
            del entries[rid]
        if not entries:
            del self._entries[key]
        return entries

    async def reserve(self, key: str, amount: int, limit: int, window: float | None) -> str | None:
        with self._lock:
            if window is None:
                total = self._totals.get(key, 0)
                if total + amount > limit:
                    return None
                self._totals[key] = total + amount
                return total_reservation_id(amount)
            entries = self._live(key, window)
            if sum(a for _, a in entries.values()) + amount > limit:
                return None
            rid = window_reservation_id()
            self._entries.setdefault(key, entries)[rid] = (self._clock(), amount)
            return rid

    async def release(self, key: str, reservation: str) -> None:
        amount = total_reservation_amount(reservation)
        with self._lock:
            if amount is not None:
                if key in self._totals:
                    self._totals[key] = max(self._totals[key] - amount, 0)
                return
            entries = self._entries.get(key)
            if entries is not None:
                entries.pop(reservation, None)

    async def spent(self, key: str, window: float | None) -> int:
        with self._lock:
            if window is None:
                return self._totals.get(key, 0)
            return sum(a for _, a in self._live(key, window).values())


# KEYS: total, at (zset), amount (hash); ARGV: amount, limit. Amounts are passed to INCRBY
# as the strings they arrived as, never through a Lua number.
_RESERVE_TOTAL_LUA = """
local tkey, zkey, hkey = KEYS[1], KEYS[2], KEYS[3]
if redis.call('EXISTS', hkey) == 1 then
  -- reservations kept one per payment by an earlier version: fold them into the total
  for _, value in ipairs(redis.call('HVALS', hkey)) do redis.call('INCRBY', tkey, value) end
  redis.call('DEL', hkey, zkey)
end
local total = tonumber(redis.call('GET', tkey) or '0')
if total + tonumber(ARGV[1]) > tonumber(ARGV[2]) then return 0 end
redis.call('INCRBY', tkey, ARGV[1])
return 1
"""

_RELEASE_TOTAL_LUA = """
if redis.call('DECRBY', KEYS[1], ARGV[1]) < 0 then redis.call('SET', KEYS[1], 0) end
return 0
"""

# Windows are measured by the Redis server's clock (`TIME`), never a caller's: one host
# whose clock runs ahead would otherwise prune everyone's spending from a shared window.
# Redis before 5 needs effects replication to write after reading `TIME` in a script.
_NOW_LUA = """
if redis.replicate_commands then pcall(redis.replicate_commands) end
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
"""

# KEYS: at (zset), amount (hash); ARGV: window, amount, limit, id.
_RESERVE_WINDOW_LUA = (
    _NOW_LUA
    + """
local zkey, hkey = KEYS[1], KEYS[2]
local window = tonumber(ARGV[1])
local amount, limit, id = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local old = redis.call('ZRANGEBYSCORE', zkey, '-inf', '(' .. tostring(now - window))
for i = 1, #old do
  redis.call('ZREM', zkey, old[i])
  redis.call('HDEL', hkey, old[i])
end
local total = 0
for _, value in ipairs(redis.call('HVALS', hkey)) do total = total + tonumber(value) end
if total + amount > limit then return 0 end
redis.call('ZADD', zkey, now, id)
redis.call('HSET', hkey, id, ARGV[2])
-- every entry is stale one window after the newest: an idle budget leaves nothing behind
local ttl = math.ceil(window * 1000) + 1000
redis.call('PEXPIRE', zkey, ttl)
redis.call('PEXPIRE', hkey, ttl)
return 1
"""
)

# KEYS: total, at (zset), amount (hash); ARGV: window (0 for a total).
_SPENT_LUA = (
    _NOW_LUA
    + """
local tkey, zkey, hkey = KEYS[1], KEYS[2], KEYS[3]
local window = tonumber(ARGV[1])
local total = 0
if window > 0 then
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', zkey, tostring(now - window), '+inf')) do
    total = total + tonumber(redis.call('HGET', hkey, id) or '0')
  end
  return total
end
total = tonumber(redis.call('GET', tkey) or '0')
for _, value in ipairs(redis.call('HVALS', hkey)) do total = total + tonumber(value) end
return total
"""
)


class RedisBudgetStore:
    """A budget shared by every process that points at the same Redis (extra `redis`).

    A total budget is one integer per key (`<prefix><key>:total`, `INCRBY`); a windowed
    one is a sorted set (by time) and a hash (amounts) of its reservations, which expire
    with the window. Reserving is one Lua script, so it is atomic across processes.
    Totals are Redis 64-bit integers: up to about 9.2 million million EUR. A window is
    measured by the Redis server's clock (`TIME`, read inside the script), so hosts whose
    clocks disagree still share one window.

    ```python
    store = RedisBudgetStore("redis://127.0.0.1:6379/0")
    options = PaymentOptions(..., budgets=[Budget("5", window=86400)], budget_store=store)
    ...
    await store.aclose()   # yours to close: several clients may share one store
    ```
    """

    def __init__(self, redis: Any, *, prefix: str = "x402:budget:") -> None:
        try:
            importlib.import_module("redis.asyncio")  # not `import redis`: the argument's name
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ConfigurationError(
                "RedisBudgetStore needs the redis extra: pip install 'x402-eur[redis]'"
            ) from exc
        self._given = None if isinstance(redis, str) else redis
        self._url = redis if isinstance(redis, str) else None
        self._prefix = prefix
        # A redis.asyncio client belongs to one event loop; a store shared by an async client
        # and a sync one (which runs its own loop) keeps one connection per loop.
        self._lock = threading.Lock()
        self._conns: weakref.WeakKeyDictionary[Any, _RedisConn] = weakref.WeakKeyDictionary()

    def __repr__(self) -> str:
        return f"RedisBudgetStore(prefix={self._prefix!r})"

    def _conn(self) -> _RedisConn:
        import asyncio

        import redis.asyncio as aioredis

        loop = asyncio.get_running_loop()
        with self._lock:
            conn = self._conns.get(loop)
            if conn is None:
                client: Any
                if self._url is not None:
                    client, owned = aioredis.from_url(self._url), True
                elif not any(c.owned is False for c in self._conns.values()):
                    client, owned = self._given, False  # the caller's client, on its first loop
                else:
                    given: Any = self._given
                    pool = aioredis.ConnectionPool(**given.connection_pool.connection_kwargs)
                    client, owned = aioredis.Redis(connection_pool=pool), True
                conn = self._conns[loop] = _RedisConn(client, owned)
            return conn

    def _keys(self, key: str) -> list[str]:
        """The total, the reservation times (zset) and amounts (hash) of `key`."""
        base = f"{self._prefix}{key}"
        return [f"{base}:total", f"{base}:at", f"{base}:amount"]

    async def reserve(self, key: str, amount: int, limit: int, window: float | None) -> str | None:
        conn = self._conn()
        keys = self._keys(key)
        if window is None:
            ok = await conn.reserve_total(keys=keys, args=[str(amount), str(limit)])
            return total_reservation_id(amount) if int(ok) else None
        rid = window_reservation_id()
        ok = await conn.reserve_window(keys=keys[1:], args=[repr(window), amount, limit, rid])
        return rid if int(ok) else None

    async def release(self, key: str, reservation: str) -> None:
        conn = self._conn()
        total, at, amount = self._keys(key)
        atomic = total_reservation_amount(reservation)
        if atomic is not None:
            await conn.release_total(keys=[total], args=[str(atomic)])
            return
        # a windowed reservation (or one an earlier version kept per payment)
        async with conn.client.pipeline(transaction=True) as pipe:
            pipe.zrem(at, reservation)
            pipe.hdel(amount, reservation)
            await pipe.execute()

    async def spent(self, key: str, window: float | None) -> int:
        conn = self._conn()
        return int(await conn.spent(keys=self._keys(key), args=[repr(window or 0)]))

    async def aclose_loop(self) -> None:
        """Close this event loop's connection (a sync client calls it before its loop ends)."""
        import asyncio

        with self._lock:
            conn = self._conns.pop(asyncio.get_running_loop(), None)
        if conn is not None and conn.owned:
            await conn.client.aclose()

    async def aclose(self) -> None:
        """Close the connection of the running loop (the store's own; not one you gave)."""
        await self.aclose_loop()


class _RedisConn:
    """One event loop's redis client and the store's scripts registered on it."""

    def __init__(self, client: Any, owned: bool) -> None:
        self.client = client
        self.owned = owned
        self.reserve_total = client.register_script(_RESERVE_TOTAL_LUA)
        self.release_total = client.register_script(_RELEASE_TOTAL_LUA)
        self.reserve_window = client.register_script(_RESERVE_WINDOW_LUA)
        self.spent = client.register_script(_SPENT_LUA)


@dataclasses.dataclass(frozen=True)
class Reservation:
    budget: Budget
    id: str


class Budgets:
    """The budgets of one payer over one store: reserve all matching, or none.

    `currencies` maps each currency the options can pay to its per-payment cap (None: no
    cap); `status()` reports on each of them.
    """

    def __init__(
        self,
        budgets: Sequence[Budget],
        store: BudgetStore | None,
        currencies: Mapping[str, Decimal | None] | None = None,
    ) -> None:
        self.budgets = list(budgets)
        self.store: BudgetStore = store if store is not None else InMemoryBudgetStore()
        self.currencies: dict[str, Decimal | None] = dict(currencies or {})

    def covers(self, currency: str) -> bool:
        """Whether a payment in `currency` may be made: no budget is set, or one is in it."""
        return not self.budgets or any(b.currency == currency for b in self.budgets)

    async def reserve(self, intent: PaymentIntent) -> list[Reservation]:
        """Reserve the intent's amount in every budget of its currency, or raise
        `BudgetExceeded` (also when budgets are set and none is in its currency)."""
        shown = f"{format_amount(intent.amount)} {intent.currency}"
        mine = [b for b in self.budgets if b.currency == intent.currency]
        if not mine:
            if not self.budgets:
                return []
            raise BudgetExceeded(
                f"refusing to pay {shown}: {uncovered_currency(intent.currency)}; nothing was paid",
                intent=intent,
            )
        try:
            amount = to_atomic_ceiling(intent.amount)
        except AmountError as exc:
            raise BudgetExceeded(
                f"refusing to pay {shown}: it cannot be counted against the budget ({exc}); "
                "nothing was paid",
                intent=intent,
            ) from None
        held: list[Reservation] = []
        refused: Budget | None = None
        try:
            for budget in mine:
                limit = to_atomic(Decimal(budget.limit))
                if amount > limit:  # never fits: the store need not hear of it
                    refused = budget
                    break
                rid = await self.store.reserve(budget.key, amount, limit, budget.window_seconds)
                if rid is None:
                    refused = budget
                    break
                held.append(Reservation(budget, rid))
        except BaseException:
            # cancelled or broken half-way: what this call holds goes back, no money moved
            import anyio  # here, not at the top: `import x402_client` stays light

            with anyio.CancelScope(shield=True):
                await self.release(held)
            raise
        if refused is None:
            return held
        await self.release(held)
        spent = trim_amount(
            from_atomic(await self.store.spent(refused.key, refused.window_seconds))
        )
        raise BudgetExceeded(
            f"refusing to pay: {over_budget(refused, spent, intent.amount)}; nothing was paid",
            intent=intent,
        )

    async def settle(
        self, held: Sequence[Reservation], reserved: Decimal, kept: Decimal
    ) -> list[Reservation]:
        """Keep `kept` of reservations of `reserved` each (an `upto` payment settled less
        than it authorized) and give back the rest; the reservations now held. Never
        undercounts: the kept amount is reserved first (allowed past the limit by what the
        held reservation covers), then the held one is released; a reservation the store
        does not take back stays whole."""
        kept_atomic = to_atomic_ceiling(kept)
        reserved_atomic = to_atomic_ceiling(reserved)
        now: list[Reservation] = []
        for reservation in held:
            budget = reservation.budget
            if kept_atomic >= reserved_atomic:
                now.append(reservation)
                continue
            rid: str | None = None
            if kept_atomic:
                limit = to_atomic(Decimal(budget.limit)) + reserved_atomic
                rid = await self.store.reserve(
                    budget.key, kept_atomic, limit, budget.window_seconds
                )
                if rid is None:
                    now.append(reservation)
                    continue
                now.append(Reservation(budget, rid))
            await self.store.release(budget.key, reservation.id)
        return now

    async def give_back(
        self, held: Sequence[Reservation], authorized: Decimal, settled: Decimal, id: str
    ) -> Sequence[Reservation]:
        """The budgets keep `settled` of the `authorized` amount `held` and give back the rest;
        the reservations now held. A budget store that fails keeps the maximum, and says so in
        the log (the money moved: never an error)."""
        if settled >= authorized or not held:
            return held
        try:
            with anyio.CancelScope(shield=True):
                kept = await self.settle(held, authorized, settled)
        except Exception as exc:
            logger.error(
                "x402: the budget store could not give back the unsettled rest of payment %s "
                "(%s); the authorized maximum stays counted",
                id,
                type(exc).__name__,
            )
            return held
        return kept

    async def release(self, held: Sequence[Reservation]) -> None:
        for reservation in held:
            await self.store.release(reservation.budget.key, reservation.id)

    async def status(self) -> BudgetReport:
        """Each budget with what it has spent and what remains, in the order given; and each
        currency of `currencies` with its cap and budgets (`BudgetReport.currencies`)."""
        result: list[BudgetStatus] = []
        for budget in self.budgets:
            # Written as the library writes money (0.10, not 0.100000): the same amounts.
            spent = trim_amount(
                from_atomic(await self.store.spent(budget.key, budget.window_seconds))
            )
            remaining = trim_amount(max(Decimal(budget.limit) - spent, Decimal(0)))
            result.append(BudgetStatus(budget, spent, remaining))
        currencies: list[CurrencyStatus] = []
        for currency, cap in self.currencies.items():
            mine = tuple(s for s in result if s.budget.currency == currency)
            note: str | None = None
            if cap is None:
                note = (
                    f"no max_amount_per_payment for {currency}: name it in the mapping of "
                    "caps, or give one amount for every currency"
                )
            elif not self.covers(currency):
                note = uncovered_currency(currency)
            currencies.append(
                CurrencyStatus(
                    currency=currency,
                    max_amount_per_payment=cap,
                    budgets=mine,
                    remaining=min((s.remaining for s in mine), default=None),
                    payable=note is None,
                    note=note,
                )
            )
        return BudgetReport(result, currencies)

    async def headroom(self) -> dict[str, Decimal]:
        """Per currency with a budget, the most one more payment may cost now: the
        smallest `remaining` of that currency's budgets. Currencies without one are absent.
        """
        return {currency: status.remaining for currency, status in (await self.tightest()).items()}

    async def tightest(self) -> dict[str, BudgetStatus]:
        """Per currency with a budget, the status of the one with the least left (its
        `remaining` is `headroom()`'s; its `spent` says why a refusal refuses)."""
        room: dict[str, BudgetStatus] = {}
        for status in await self.status():
            currency = status.budget.currency
            if currency not in room or status.remaining < room[currency].remaining:
                room[currency] = status
        return room
