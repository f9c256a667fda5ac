"""Short blocks spread over the whole run, and the quiet gate that measures a block again
when the machine was perturbed during it (hypervisor steal, the speed probe)."""

from __future__ import annotations

import collections
import itertools
import json
import math
import os
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Self

#: A block's measurement: the JSON its job returned, with the gate's readings added.
Result = dict[str, Any]


def cpu_ticks() -> tuple[int, int] | None:
    """(stolen, total) CPU ticks of the whole machine so far (`/proc/stat`).

    "Steal" is the time the hypervisor gave this VM's vCPUs to other machines while they
    had work to do. None where the kernel does not report it (not Linux)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    if len(fields) < 8:
        return None
    return fields[7], sum(fields[:8])


def stolen_between(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """The share of the machine's CPU time stolen by the hypervisor between two
    `cpu_ticks()` readings."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])


#: The speed probe's fixed piece of CPU work: what a client does most (JSON in and out of
#: small dicts), about a millisecond on this machine when it is quiet.
_PROBE_DOC = {
    "accepts": [
        {"scheme": "euro", "payTo": f"pr_{i}", "maxAmountRequired": "0.01", "extra": [1, 2]}
        for i in range(40)
    ]
}


def _probe_once() -> float:
    started = time.thread_time()
    for _ in range(10):
        json.loads(json.dumps(_PROBE_DOC))
    return time.thread_time() - started


class SpeedProbe:
    """How fast the machine runs a fixed piece of CPU work while a block is measured.

    The steal counter does not see everything a shared machine does to a block: a
    neighbour on the same physical core (its other hyperthread) or on the shared caches
    slows every instruction without stealing any time. The probe shows it: a thread
    of this (otherwise idle) orchestrating process times `_probe_once` in its own CPU
    time every `every` seconds, on each vCPU in turn, and the block keeps the median.
    On this machine the same work took 1.26-2.76 ms within 20 s of a busy spell.

    `Blocks` gates on it (`MAX_PROBE_MS`) as on the steal. Its cost is about 1 ms of CPU
    every quarter second, alike for both flows of a block."""

    def __init__(self, every: float = 0.25) -> None:
        self.every = every
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="speed-probe", daemon=True)

    def _loop(self) -> None:
        cpus: list[int | None] = [None]  # unpinned where the OS cannot pin (not Linux)
        if hasattr(os, "sched_setaffinity"):
            cpus = [*sorted(os.sched_getaffinity(0))]
        for cpu in itertools.cycle(cpus):
            if self._stop.wait(self.every):
                return
            if cpu is not None:
                os.sched_setaffinity(0, {cpu})  # this thread only (0: the calling thread)
            self.samples.append(_probe_once())

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def median_ms(self) -> float | None:
        return statistics.median(self.samples) * 1000 if self.samples else None


#: A block during which the hypervisor took more than this share of the CPU time is
#: measured again later (`Blocks`). Chosen from the steal seen on quiet blocks (0-3 %)
#: against perturbed ones (5-19 %); never from the figures' values.
MAX_STEAL = 0.05
#: A block during which the speed probe's median took longer than this (ms) is measured
#: again later too: the machine ran slow without the hypervisor stealing. Chosen from the
#: probe readings of 84 blocks of two full runs, never from the figures' values: quiet
#: blocks read 0.96-1.16 ms, busy ones 1.31-1.75 ms, one 1.22 ms.
MAX_PROBE_MS = 1.2
#: Each block is measured at most this many times; if every attempt was perturbed, the
#: least perturbed one is kept and the figure says so.
BLOCK_ATTEMPTS = 3


def perturbation(result: Result, max_steal: float, max_probe_ms: float | None) -> float:
    """How far over the gate a block's measurement was: the larger of its steal over
    `max_steal` and its probe over `max_probe_ms`. Over 1.0: perturbed. A reading that is
    missing (no /proc/stat, no samples) counts as quiet."""
    steal, probe = result.get("steal"), result.get("probe_ms")
    excess = 0.0 if steal is None else steal / max_steal
    if probe is not None and max_probe_ms is not None:
        excess = max(excess, probe / max_probe_ms)
    return excess


@dataclass
class _Attempt:
    """A block waiting to be measured, and its earlier (perturbed) attempts."""

    name: str
    job: Callable[[], Result]
    tried: list[Result] = field(default_factory=list)


class Blocks:
    """Short blocks of the latency, servers, throughput and EVM figures, run between the
    other sections.

    A single long measurement states a spread (a bootstrap over its own samples) that
    says nothing about the next run: on a shared machine the floor moves by a millisecond
    between runs. So those figures are measured as short blocks, each in fresh server
    and client processes, spread over the whole benchmark run; a figure's value is the
    mean over its blocks, its spread the 95% interval of that mean.

    The quiet gate: this machine is a VM whose vCPUs the hypervisor also gives to other
    machines ("steal", up to a fifth of the CPU time during a block), and whose cores
    neighbours slow without stealing (the speed probe). A block measured while more than
    `MAX_STEAL` was stolen, or while the probe read over `MAX_PROBE_MS`, goes back to the
    end of the queue, to be measured again later (at most `BLOCK_ATTEMPTS` times in
    all). The gate reads only the machine's counters and the probe, never the block's
    figures, and treats both flows of a block alike; what it removes is the neighbours'
    load, which pulls every ratio towards 1 (the floor's time grows, the client's work
    does not) and so flatters."""

    def __init__(
        self,
        jobs: dict[str, tuple[int, Callable[[], Result]]],
        max_steal: float = MAX_STEAL,
        attempts: int = BLOCK_ATTEMPTS,
        pause: float = 15.0,
        meter: Callable[[], tuple[int, int] | None] = cpu_ticks,
        max_probe_ms: float | None = MAX_PROBE_MS,
        probe: Callable[[], SpeedProbe] = SpeedProbe,
    ) -> None:
        # Interleave the kinds evenly: job i of n sits at (i + 0.5) / n of the run.
        placed = [((i + 0.5) / n, name, job) for name, (n, job) in jobs.items() for i in range(n)]
        self._queue: collections.deque[_Attempt] = collections.deque(
            _Attempt(name, job) for _, name, job in sorted(placed)
        )
        self.results: dict[str, list[Result]] = {name: [] for name in jobs}
        self.max_steal = max_steal
        self.attempts = attempts
        self.pause = pause
        self.meter = meter
        self.max_probe_ms = max_probe_ms
        self.probe = probe
        self._per_gap = 1

    def plan(self, gaps: int) -> None:
        """Spread the blocks over `gaps` places (between and after sections)."""
        self._per_gap = max(1, math.ceil(len(self._queue) / max(gaps, 1)))

    def run(self, count: int | None = None, *, draining: bool = False) -> None:
        for _ in range(self._per_gap if count is None else count):
            if not self._queue:
                return
            item = self._queue.popleft()
            if draining and item.tried:
                # Nothing else is left to run in between: let the neighbours' burst pass.
                time.sleep(self.pause)
            started = time.perf_counter()
            result = self._measure(item)
            seconds = time.perf_counter() - started
            state = ("n/a" if result["steal"] is None else f"{result['steal']:.1%}") + " stolen"
            if result["probe_ms"] is not None:
                state += f", probe {result['probe_ms']:.2f} ms"
            excess = perturbation(result, self.max_steal, self.max_probe_ms)
            if excess > 1.0 and len(item.tried) < self.attempts:
                print(f"   block {item.name}: {state}, measured again later", flush=True)
                self._queue.append(item)
                continue
            self._keep(item)
            done = len(self.results[item.name])
            print(f"   block {item.name} {done} ({seconds:.1f} s, {state})", flush=True)

    def _measure(self, item: _Attempt) -> Result:
        """One attempt at a block, with the steal and the probe's reading during it."""
        before = self.meter()
        with self.probe() as probe:
            result = item.job()
        result["steal"] = stolen_between(before, self.meter())
        result["probe_ms"] = probe.median_ms
        item.tried.append(result)
        return result

    def _keep(self, item: _Attempt) -> None:
        """Keep the least perturbed attempt. Readings that are missing (None) never send
        a block back: one attempt."""
        kept = min(item.tried, key=lambda r: perturbation(r, self.max_steal, self.max_probe_ms))
        kept["attempts"] = len(item.tried)
        kept["max_steal"] = self.max_steal
        kept["max_probe_ms"] = self.max_probe_ms
        kept["steal_of_attempts"] = [r["steal"] for r in item.tried]
        kept["probe_of_attempts"] = [r["probe_ms"] for r in item.tried]
        self.results[item.name].append(kept)

    def finish(self) -> None:
        while self._queue:
            self.run(1, draining=True)


def gate_summary(blocks: list[Result]) -> str:
    """What the quiet gate did to a figure's blocks, for its details."""
    steals = [b["steal"] for b in blocks if b.get("steal") is not None]
    if not steals:
        return "steal not measured (no /proc/stat)"
    gate = blocks[0].get("max_steal", MAX_STEAL)
    probe_gate = blocks[0].get("max_probe_ms")
    again = sum(b.get("attempts", 1) > 1 for b in blocks)
    over = sum(perturbation(b, gate, probe_gate) > 1.0 for b in blocks)
    why = f"> {gate:.0%} stolen"
    if probe_gate is not None:
        why += f" or speed probe > {probe_gate:.2f} ms"
    text = (
        f"hypervisor steal per block {min(steals):.1%}-{max(steals):.1%}; "
        f"{again} of {len(blocks)} blocks measured again ({why})"
    )
    text += f", {over} kept perturbed (every attempt was)" if over else ""
    probes = [b["probe_ms"] for b in blocks if b.get("probe_ms") is not None]
    if probes:
        text += f"; speed probe per block {min(probes):.2f}-{max(probes):.2f} ms"
    return text
