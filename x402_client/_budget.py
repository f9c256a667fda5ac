"""Cumulative budgets: a total, or a rolling window ("5 EUR per 24 h"), per currency.

A payment reserves its amount in every matching budget *before* any money moves, and
after it either commits the reservation (money moved, or may have) or releases it (no
money moved). Reserving is atomic in the store, so concurrent requests can never
overshoot: 500 concurrent paid requests against a budget of 10 payments pay exactly 10.

Stores implement `BudgetStore`. `InMemoryBudgetStore` (the default) serves one process;
`RedisBudgetStore` (extra `redis`) lets a fleet of agent processes share one budget,
atomically, through a Lua script. Amounts are kept as integer atomic units (10^-6).
"""

from __future__ import annotations

import dataclasses
import secrets
import threading
import time
from collections.abc import Sequence
from datetime import timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ._amounts import AmountError, format_amount, from_atomic, parse_amount, to_atomic
from ._exceptions import BudgetExceeded, ConfigurationError

if TYPE_CHECKING:
    from ._types import PaymentIntent

__all__ = ["Budget", "BudgetStore", "Budgets", "InMemoryBudgetStore", "RedisBudgetStore"]


@dataclasses.dataclass(frozen=True)
class Budget:
    """At most `limit` (in `currency`) spent per `window` (seconds or a `timedelta`;
    None for a lifetime total). `name` separates budgets that share a store.

    ```python
    Budget("5.00", window=timedelta(hours=24))          # 5 EUR per rolling day
    Budget("20", currency="USD", name="agent-7")        # 20 USD in total
    ```
    """

    limit: Decimal | str | int
    currency: str = "EUR"
    window: float | timedelta | None = None
    name: str = "default"

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "limit", parse_amount(self.limit, allow_zero=True))
        except AmountError as exc:
            raise ConfigurationError(f"budget limit: {exc}") from None
        object.__setattr__(self, "currency", self.currency.upper())
        window = self.window
        if isinstance(window, timedelta):
            window = window.total_seconds()
        if window is not None and window <= 0:
            raise ConfigurationError("budget window must be positive")
        object.__setattr__(self, "window", float(window) if window is not None else None)

    @property
    def key(self) -> str:
        span = "total" if self.window is None else f"{self.window:g}s"
        return f"{self.name}:{self.currency}:{span}"

    @property
    def window_seconds(self) -> float | None:
        assert not isinstance(self.window, timedelta)
        return self.window


@runtime_checkable
class BudgetStore(Protocol):
    """Where reservations live. All three calls must be atomic per key."""

    async def reserve(self, key: str, amount: int, limit: int, window: float | None) -> str | None:
        """Reserve `amount` if the sum within `window` stays <= `limit`: an id, or None."""
        ...

    async def release(self, key: str, reservation: str) -> None:
        """Give a reservation back (no money moved)."""
        ...

    async def spent(self, key: str, window: float | None) -> int:
        """The amount reserved or committed within `window`."""
        ...


class InMemoryBudgetStore:
    """A process-local store (thread-safe)."""

    def __init__(self, clock: Any = time.time) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, dict[str, tuple[float, int]]] = {}
        self._clock = clock

    def _live(self, key: str, window: float | None) -> dict[str, tuple[float, int]]:
        entries = self._entries.setdefault(key, {})
        if window is not None:
            horizon = self._clock() - window
            for rid in [r for r, (at, _) in entries.items() if at < horizon]:
                del entries[rid]
        return entries

    async def reserve(self, key: str, amount: int, limit: int, window: float | None) -> str | None:
        with self._lock:
            entries = self._live(key, window)
            if sum(a for _, a in entries.values()) + amount > limit:
                return None
            rid = secrets.token_hex(8)
            entries[rid] = (self._clock(), amount)
            return rid

    async def release(self, key: str, reservation: str) -> None:
        with self._lock:
            self._entries.get(key, {}).pop(reservation, None)

    async def spent(self, key: str, window: float | None) -> int:
        with self._lock:
            return sum(a for _, a in self._live(key, window).values())


_RESERVE_LUA = """
local zkey, hkey = KEYS[1], KEYS[2]
local now, window = tonumber(ARGV[1]), tonumber(ARGV[2])
local amount, limit, id = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
if window > 0 then
  local old = redis.call('ZRANGEBYSCORE', zkey, '-inf', '(' .. tostring(now - window))
  for i = 1, #old do
    redis.call('ZREM', zkey, old[i])
    redis.call('HDEL', hkey, old[i])
  end
end
local total = 0
for _, value in ipairs(redis.call('HVALS', hkey)) do total = total + tonumber(value) end
if total + amount > limit then return false end
redis.call('ZADD', zkey, now, id)
redis.call('HSET', hkey, id, amount)
return id
"""

_SPENT_LUA = """
local zkey, hkey = KEYS[1], KEYS[2]
local now, window = tonumber(ARGV[1]), tonumber(ARGV[2])
local total = 0
if window > 0 then
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', zkey, tostring(now - window), '+inf')) do
    total = total + tonumber(redis.call('HGET', hkey, id) or '0')
  end
else
  for _, value in ipairs(redis.call('HVALS', hkey)) do total = total + tonumber(value) end
end
return total
"""


class RedisBudgetStore:
    """A budget shared by every process that points at the same Redis (extra `redis`).

    Reservations are a sorted set (by time) and a hash (amounts) per budget key; reserving
    is one Lua script, so it is atomic across processes.

    ```python
    store = RedisBudgetStore("redis://127.0.0.1:6379/0")
    options = PaymentOptions(..., budgets=[Budget("5", window=86400)], budget_store=store)
    ...
    await store.aclose()   # yours to close: several clients may share one store
    ```
    """

    def __init__(self, redis: Any, *, prefix: str = "x402:budget:") -> None:
        try:
            import redis.asyncio as aioredis
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ConfigurationError(
                "RedisBudgetStore needs the redis extra: pip install 'x402-eur[redis]'"
            ) from exc
        self._redis = aioredis.from_url(redis) if isinstance(redis, str) else redis
        self._owned = isinstance(redis, str)
        self._prefix = prefix
        self._reserve = self._redis.register_script(_RESERVE_LUA)
        self._spent = self._redis.register_script(_SPENT_LUA)

    def __repr__(self) -> str:
        return f"RedisBudgetStore(prefix={self._prefix!r})"

    def _keys(self, key: str) -> list[str]:
        return [f"{self._prefix}{key}:at", f"{self._prefix}{key}:amount"]

    async def reserve(self, key: str, amount: int, limit: int, window: float | None) -> str | None:
        rid = secrets.token_hex(8)
        result = await self._reserve(
            keys=self._keys(key), args=[repr(time.time()), repr(window or 0), amount, limit, rid]
        )
        return rid if result else None

    async def release(self, key: str, reservation: str) -> None:
        at, amount = self._keys(key)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.zrem(at, reservation)
            pipe.hdel(amount, reservation)
            await pipe.execute()

    async def spent(self, key: str, window: float | None) -> int:
        return int(
            await self._spent(keys=self._keys(key), args=[repr(time.time()), repr(window or 0)])
        )

    async def aclose(self) -> None:
        if self._owned:
            await self._redis.aclose()


@dataclasses.dataclass(frozen=True)
class Reservation:
    budget: Budget
    id: str


class Budgets:
    """The budgets of one payer over one store: reserve all matching, or none."""

    def __init__(self, budgets: Sequence[Budget], store: BudgetStore | None) -> None:
        self.budgets = list(budgets)
        self.store: BudgetStore = store if store is not None else InMemoryBudgetStore()

    async def reserve(self, intent: PaymentIntent) -> list[Reservation]:
        """Reserve the intent's amount in every budget of its currency, or raise."""
        held: list[Reservation] = []
        amount = to_atomic(intent.amount)
        for budget in self.budgets:
            if budget.currency != intent.currency:
                continue
            limit = to_atomic(Decimal(budget.limit))
            rid = await self.store.reserve(budget.key, amount, limit, budget.window_seconds)
            if rid is None:
                await self.release(held)
                spent = await self.store.spent(budget.key, budget.window_seconds)
                span = "in total" if budget.window is None else f"per {budget.window:g} s"
                raise BudgetExceeded(
                    f"paying {format_amount(intent.amount)} {intent.currency} would exceed the "
                    f"budget {budget.name!r} of {format_amount(Decimal(budget.limit))} "
                    f"{budget.currency} {span} ({format_amount(from_atomic(spent))} used)",
                    intent=intent,
                )
            held.append(Reservation(budget, rid))
        return held

    async def release(self, held: Sequence[Reservation]) -> None:
        for reservation in held:
            await self.store.release(reservation.budget.key, reservation.id)
