"""x402-eur benchmarks: `python benchmarks/run.py [--smoke|--quick] [--out DIR] [--only ...]`.

Measures every benchmark figure, prints a table and writes `<out>/latest.json`
(every sample, summaries, spreads, the machine) and `<out>/latest.png`. The floor of the
euro figures is a hand-written client against a LEAN merchant and payment API
(`_lean.py`, each in its own process); the client being measured runs in a third, fresh
process (`_client.py`). See `benchmarks/README.md` for the method and the targets.

`--compare A.json B.json C.json` prints, for each figure, the values of several runs
next to their stated spread (the reproducibility check of the README).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import datetime
import importlib.util
import itertools
import json
import math
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _client import GcClock  # noqa: E402
from _flows import euro_options  # noqa: E402

PY = sys.executable
MiB = 1024 * 1024

#: Repetitions per mode. `smoke` only proves that every figure still runs (CI, seconds).
COUNTS: dict[str, dict[str, int]] = {
    "smoke": {
        "latency_blocks": 2,
        "latency_pairs": 15,
        "warmup": 5,
        "server_blocks": 2,
        "server_pairs": 10,
        "tp_blocks": 1,
        "tp_n": 100,
        "gc_n": 200,
        "import_runs": 3,
        "memory_mb": 8,
        "memory_repeats": 1,
        "evm_blocks": 1,
        "evm_n": 2,
        "eip3009_pairs": 3,
        "sandbox_pairs": 10,
        "bridge_short": 1,
        "bridge_long_s": 1,
        "profile_n": 20,
    },
    "quick": {
        "latency_blocks": 4,
        "latency_pairs": 150,
        "warmup": 30,
        "server_blocks": 2,
        "server_pairs": 100,
        "tp_blocks": 3,
        "tp_n": 300,
        "gc_n": 2000,
        "import_runs": 12,
        "memory_mb": 200,
        "memory_repeats": 1,
        "evm_blocks": 3,
        "evm_n": 10,
        "eip3009_pairs": 20,
        "sandbox_pairs": 100,
        "bridge_short": 3,
        "bridge_long_s": 5,
        "profile_n": 500,
    },
    "full": {
        "latency_blocks": 10,
        "latency_pairs": 300,
        "warmup": 50,
        "server_blocks": 10,
        "server_pairs": 150,
        "tp_blocks": 12,
        "tp_n": 500,
        "gc_n": 10_000,
        "import_runs": 30,
        "memory_mb": 200,
        "memory_repeats": 3,
        "evm_blocks": 10,
        "evm_n": 20,
        "eip3009_pairs": 60,
        "sandbox_pairs": 400,
        "bridge_short": 10,
        "bridge_long_s": 20,
        "profile_n": 500,
    },
}

#: The targets (benchmarks/README.md, "Targets").
LATENCY_RATIO = 1.03
OVERHEAD_US = 100.0
PASSTHROUGH_RATIO = 1.01
THROUGHPUT_RATIO = 1.0
IMPORT_RATIO = 1.3
EVM_ROUND_TRIPS = 1.0
EIP3009_RATIO = 0.95
GC_PAUSE_MS = 5.0
MEMORY_MB = 2.0
#: The step of the peak RSS readings (glibc grows the heap by 128 KiB at a time).
RSS_STEP_MB = 0.125
CONCURRENCY = 50


#: Every figure, in the order of the table.
FIGURES = (
    "latency",
    "latency_overhead",
    "passthrough",
    "latency_cpu",
    "throughput",
    "import_api",
    "import",
    "lazy_evm",
    "cli",
    "evm_rpc",
    "eip3009",
    "gc",
    "memory",
    "latency_sandbox",
    "servers",
    "bridge_delay",
    "bridge_polls",
)


# --- statistics ------------------------------------------------------------------------


def quartiles(values: list[float]) -> tuple[float, float, float]:
    """(p25, median, p75); with fewer than 2 values all three are the one value."""
    if len(values) < 2:
        v = values[0] if values else float("nan")
        return v, v, v
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[1], q[2]


def summary(values: list[float]) -> dict[str, float]:
    p25, p50, p75 = quartiles(values)
    return {"median": p50, "p25": p25, "p75": p75, "iqr": p75 - p25, "n": len(values)}


def bootstrap(
    a: list[float], b: list[float], stat: Any, resamples: int = 1000, seed: int = 6
) -> tuple[float, float]:
    """95% percentile-bootstrap interval of `stat(a', b')` over resampled *pairs*."""
    n = len(a)
    if n < 3:
        value = stat(a, b)
        return value, value
    rng = random.Random(seed)
    indices = range(n)
    values = []
    for _ in range(resamples):
        pick = rng.choices(indices, k=n)
        values.append(stat([a[i] for i in pick], [b[i] for i in pick]))
    values.sort()
    return values[int(0.025 * resamples)], values[int(0.975 * resamples) - 1]


def ratio_of_medians(a: list[float], b: list[float]) -> float:
    return statistics.median(a) / statistics.median(b)


def diff_of_medians(a: list[float], b: list[float]) -> float:
    return statistics.median(a) - statistics.median(b)


@dataclass
class Figure:
    """One row of the table."""

    key: str
    title: str
    value: float | None
    unit: str
    target: str
    passed: bool | None  # None: skipped or informational
    detail: str = ""
    samples: list[float] = field(default_factory=list)
    target_value: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    skipped: str | None = None
    #: The value's stated spread: a 95% bootstrap interval, or the range over repeats.
    spread: tuple[float, float] | None = None
    spread_kind: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "value": self.value,
            "unit": self.unit,
            "target": self.target,
            "target_value": self.target_value,
            "passed": self.passed,
            "detail": self.detail,
            "skipped": self.skipped,
            "spread": list(self.spread) if self.spread else None,
            "spread_kind": self.spread_kind,
            "summary": summary(self.samples) if self.samples else None,
            "samples": self.samples,
            **self.extra,
        }


def skipped(key: str, title: str, target: str, reason: str) -> Figure:
    print(f"  skipped: {reason}", flush=True)
    return Figure(key, title, None, "", target, None, skipped=reason)


def missed_by(value: float, target: float, *, upper: bool, unit: str = "x") -> str:
    """'missed by ...' text for a failed target (upper: the target is a maximum)."""
    gap = value - target if upper else target - value
    if unit == "x":
        return f"missed by {gap:.3f} x ({gap / target * 100:.1f}% of the target)"
    return f"missed by {gap:.3g} {unit}"


# --- processes ------------------------------------------------------------------------------


class Proc:
    """A server process that prints one JSON line when ready and stops when stdin closes."""

    def __init__(self, *argv: str, ready_timeout: float = 180) -> None:
        self.argv = argv
        self.ready_timeout = ready_timeout
        self.proc: subprocess.Popen[str] | None = None
        self.info: dict[str, Any] = {}

    def __enter__(self) -> Self:
        self.proc = subprocess.Popen(
            [PY, *self.argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            _, err = self.proc.communicate(timeout=30)
            tail = (err or "").strip().splitlines()[-3:]
            raise RuntimeError(f"{self.argv[0]} failed: " + " | ".join(tail))
        self.info = json.loads(line)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None
        with contextlib.suppress(Exception):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Sandbox(Proc):
    """`benchmarks/_server.py`: the sandbox (merchant, payment API, facilitator, chains)."""

    def __init__(self, *flags: str) -> None:
        super().__init__(str(HERE / "_server.py"), *flags)

    def url(self, path: str) -> str:
        return str(self.info["merchant_url"]) + path

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.info["options"])

    def reset(self) -> None:
        httpx.post(self.info["control_url"] + "/reset").raise_for_status()

    def stats(self) -> dict[str, Any]:
        response = httpx.get(self.info["control_url"] + "/stats")
        response.raise_for_status()
        return dict(response.json())


class Lean:
    """The lean merchant and payment API (`_lean.py`), each in its own process."""

    def __init__(self, impl: str = "raw") -> None:
        self.impl = impl
        self._stack = contextlib.ExitStack()
        self.merchant: dict[str, Any] = {}
        self.api: dict[str, Any] = {}

    def __enter__(self) -> Lean:
        script = str(HERE / "_lean.py")
        self.merchant = self._stack.enter_context(
            Proc(script, "merchant", "--impl", self.impl)
        ).info
        self.api = self._stack.enter_context(Proc(script, "payment-api", "--impl", self.impl)).info
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    @property
    def options(self) -> dict[str, Any]:
        from _lean import API_KEY, PAYER_ACCOUNT

        return {"api_key": API_KEY, "from_account": PAYER_ACCOUNT, "api_url": self.api["url"]}

    @property
    def target(self) -> dict[str, Any]:
        """What a client workload needs to reach these servers: the merchant and options."""
        return {"merchant": self.merchant["url"], "options": self.options}

    @property
    def controls(self) -> dict[str, str]:
        return {"merchant": self.merchant["control_url"], "payment_api": self.api["control_url"]}

    def stats(self) -> dict[str, dict[str, Any]]:
        return {k: httpx.get(v + "/stats").json() for k, v in self.controls.items()}

    def reset(self) -> None:
        for url in self.controls.values():
            httpx.post(url + "/reset").raise_for_status()

    def paid_codes_match(self) -> bool:
        """Every proof the merchant served was paid at the payment API, exactly once."""
        stats = self.stats()
        return bool(stats["merchant"]["codes_digest"] == stats["payment_api"]["codes_digest"])


def client(workload: str, args: dict[str, Any], timeout: float = 1800) -> dict[str, Any]:
    """Run one workload in a fresh client process (`_client.py`); its JSON result."""
    done = subprocess.run(
        [PY, str(HERE / "_client.py"), workload, json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.stderr.strip():
        print(textwrap.indent(done.stderr.rstrip()[-3000:], "  "), flush=True)
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"client {workload} exited {done.returncode}: {tail[0]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# --- blocks: short repeats spread over the whole run -------------------------------------------


#: Student's t, two-sided 95%, by degrees of freedom (more than 30: the normal's 1.96).
_T95 = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
    9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120,
    17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086, 25: 2.060, 30: 2.042,
}  # fmt: skip


def t95(df: int) -> float:
    if df in _T95:
        return _T95[df]
    return next((_T95[k] for k in sorted(_T95) if k >= df), 1.96)


def over_blocks(values: list[float]) -> tuple[float, tuple[float, float]]:
    """The mean of per-block values and its 95% Student-t interval.

    Each block is an independent short repeat (fresh processes, at a different time of
    the run), so the interval covers what changes between processes and over minutes on a
    shared machine, not only the noise within one long run."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, (mean, mean)
    half = t95(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, (mean - half, mean + half)


BLOCK_SPREAD = "95% t-interval over blocks"


def listed(values: list[float], fmt: str = ".3f") -> str:
    """Per-block values for a figure's details: `1.021, 1.000, ...`."""
    return ", ".join(format(v, fmt) for v in values)


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
#: measured again later (`Blocks`). Chosen before the runs, from the steal seen on quiet
#: blocks (0-3 %) against perturbed ones (5-19 %); never from the figures' values.
MAX_STEAL = 0.05
#: A block during which the speed probe's median took longer than this (ms) is measured
#: again later too: the machine ran slow without the hypervisor stealing. Chosen from the
#: probe readings of 84 blocks of two full runs, never from the figures' values: quiet
#: blocks read 0.96-1.16 ms, busy ones 1.31-1.75 ms, one 1.22 ms.
MAX_PROBE_MS = 1.2
#: Each block is measured at most this many times; if every attempt was perturbed, the
#: least perturbed one is kept and the figure says so.
BLOCK_ATTEMPTS = 3


def perturbation(result: dict[str, Any], max_steal: float, max_probe_ms: float | None) -> float:
    """How far over the gate a block's measurement was: the larger of its steal over
    `max_steal` and its probe over `max_probe_ms`. Over 1.0: perturbed. A reading that is
    missing (no /proc/stat, no samples) counts as quiet."""
    steal, probe = result.get("steal"), result.get("probe_ms")
    excess = 0.0 if steal is None else steal / max_steal
    if probe is not None and max_probe_ms is not None:
        excess = max(excess, probe / max_probe_ms)
    return excess


class Blocks:
    """Short blocks of the latency, servers, throughput and EVM figures, run between the
    other sections.

    A single long measurement states a spread (a bootstrap over its own samples) that
    says nothing about the next run: on a shared machine the floor moves by a millisecond
    between runs. So those figures are measured as short blocks, each in fresh server
    and client processes, spread over the whole benchmark
    run; a figure's value is the mean over its blocks, its spread the 95% interval of
    that mean.

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
        jobs: dict[str, tuple[int, Callable[[], dict[str, Any]]]],
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
        self.results: dict[str, list[dict[str, Any]]] = {name: [] for name in jobs}
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
            before = self.meter()
            with self.probe() as probe:
                result = item.job()
            steal = stolen_between(before, self.meter())
            result["steal"] = steal
            result["probe_ms"] = probe.median_ms
            item.tried.append(result)
            seconds = time.perf_counter() - started
            state = ("n/a" if steal is None else f"{steal:.1%}") + " stolen"
            if probe.median_ms is not None:
                state += f", probe {probe.median_ms:.2f} ms"
            excess = perturbation(result, self.max_steal, self.max_probe_ms)
            if excess > 1.0 and len(item.tried) < self.attempts:
                print(f"   block {item.name}: {state}, measured again later", flush=True)
                self._queue.append(item)
                continue
            # Readings that are missing (None) never send a block back: one attempt.
            kept = min(item.tried, key=lambda r: perturbation(r, self.max_steal, self.max_probe_ms))
            kept["attempts"] = len(item.tried)
            kept["max_steal"] = self.max_steal
            kept["max_probe_ms"] = self.max_probe_ms
            kept["steal_of_attempts"] = [r["steal"] for r in item.tried]
            kept["probe_of_attempts"] = [r["probe_ms"] for r in item.tried]
            self.results[item.name].append(kept)
            done = len(self.results[item.name])
            print(f"   block {item.name} {done} ({seconds:.1f} s, {state})", flush=True)

    def finish(self) -> None:
        while self._queue:
            self.run(1, draining=True)


@dataclass
class _Attempt:
    """A block waiting to be measured, and its earlier (perturbed) attempts."""

    name: str
    job: Callable[[], dict[str, Any]]
    tried: list[dict[str, Any]] = field(default_factory=list)


def gate_summary(blocks: list[dict[str, Any]]) -> str:
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


# --- 0. which lean server ---------------------------------------------------------------------


def servers_block(counts: dict[str, int]) -> dict[str, Any]:
    """One block of figure 0: the floor against raw and ASGI servers, interleaved."""
    with Lean("raw") as raw, Lean("asgi") as asgi:
        targets = [raw.target, asgi.target]
        return client("floor", {"targets": targets, "pairs": counts["server_pairs"], "warmup": 20})


def fig_servers(blocks: list[dict[str, Any]]) -> Figure:
    """The floor against the raw asyncio servers and against the same handlers as ASGI
    apps under uvicorn: the floor figures use the leaner (raw)."""
    title = "0. Lean floor servers: paid GET floor, uvicorn ASGI / raw asyncio (informational)"
    raw_t = [t for b in blocks for t in b["times"][0]]
    asgi_t = [t for b in blocks for t in b["times"][1]]
    per_block = [ratio_of_medians(b["times"][1], b["times"][0]) for b in blocks]
    value, spread = over_blocks(per_block)
    return Figure(
        "servers",
        title,
        value,
        "x",
        "informational (the floor uses the leaner)",
        None,
        f"floor median {statistics.median(raw_t) * 1e6:.0f} us on raw asyncio vs "
        f"{statistics.median(asgi_t) * 1e6:.0f} us on uvicorn/h11 ASGI; {len(blocks)} blocks "
        f"of {len(blocks[0]['times'][0])} interleaved pairs; per block {listed(per_block)}; "
        + gate_summary(blocks),
        per_block,
        None,
        {
            "raw_us": summary([t * 1e6 for t in raw_t]),
            "asgi_us": summary([t * 1e6 for t in asgi_t]),
        },
        spread=spread,
        spread_kind=BLOCK_SPREAD,
    )


# --- 1. latency and pass-through ---------------------------------------------------------------


def _gc_summary(gc: dict[str, Any], flow: str, n: int) -> str:
    row = gc.get(flow)
    if not row:
        return f"{flow}: no collections"
    total_us = sum(row["seconds"]) * 1e6 / n
    return (
        f"{flow}: {sum(row['collections'])} collections (gen0/1/2 "
        f"{'/'.join(str(c) for c in row['collections'])}), {total_us:.1f} us per request, "
        f"longest {row['max_ms']:.2f} ms"
    )


def latency_block(counts: dict[str, int]) -> dict[str, Any]:
    """One block of figures 1a-1d: fresh lean servers, a fresh client process."""
    with Lean("raw") as lean:
        data = client(
            "latency",
            {
                **lean.target,
                "pairs": counts["latency_pairs"],
                "warmup": counts["warmup"],
            },
        )
        data["paid_codes_match"] = lean.paid_codes_match()
    return data


def _merge_gc(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for b in blocks:
        for flow, row in b["gc"].items():
            into = out.setdefault(
                flow, {"collections": [0, 0, 0], "seconds": [0.0, 0.0, 0.0], "max_ms": 0.0}
            )
            for g in range(3):
                into["collections"][g] += row["collections"][g]
                into["seconds"][g] += row["seconds"][g]
            into["max_ms"] = max(into["max_ms"], row["max_ms"])
    return out


def fig_latency(blocks: list[dict[str, Any]]) -> list[Figure]:
    codes_ok = all(b["paid_codes_match"] for b in blocks)

    def pooled(name: str, source: str = "times") -> list[float]:
        return [t for b in blocks for t in b[source][name]]

    def per_block(stat: Any, a: str, b: str, source: str = "times") -> list[float]:
        return [stat(blk[source][a], blk[source][b]) for blk in blocks]

    sdk, floor = pooled("sdk"), pooled("floor")
    pairs = len(sdk)
    shape = f"{len(blocks)} blocks of {len(blocks[0]['times']['sdk'])} interleaved rounds"
    ratios = per_block(ratio_of_medians, "sdk", "floor")
    ratio, ratio_ci = over_blocks(ratios)
    overheads = [d * 1e6 for d in per_block(diff_of_medians, "sdk", "floor")]
    overhead, overhead_ci = over_blocks(overheads)
    per_pair_diff = [(s - f) * 1e6 for s, f in zip(sdk, floor, strict=True)]
    gc = _merge_gc(blocks)
    gc_text = "; ".join(_gc_summary(gc, f, pairs) for f in ("sdk", "floor"))
    common = {
        "sdk_us": summary([t * 1e6 for t in sdk]),
        "floor_us": summary([t * 1e6 for t in floor]),
        "floor_median_us_per_block": [statistics.median(b["times"]["floor"]) * 1e6 for b in blocks],
        "median_of_pair_differences_us": statistics.median(per_pair_diff),
        "gc": gc,
        "gc_threshold": blocks[0]["gc_threshold"],
        "paid_codes_match": codes_ok,
    }
    ratio_ok = ratio <= LATENCY_RATIO
    overhead_ok = overhead <= OVERHEAD_US
    figures = [
        Figure(
            "latency",
            "1a. Paid euro GET, SDK / hand-written floor (lean merchant), ratio of medians",
            ratio,
            "x",
            f"<= {LATENCY_RATIO}",
            ratio_ok and codes_ok,
            f"mean over {shape} of the ratio of medians; pooled medians "
            f"{statistics.median(sdk) * 1e6:.0f} us vs {statistics.median(floor) * 1e6:.0f} us; "
            f"per block {listed(ratios)}; GC {gc_text}; every served "
            f"proof paid once: {codes_ok}; {gate_summary(blocks)}"
            + ("" if ratio_ok else f"; {missed_by(ratio, LATENCY_RATIO, upper=True)}"),
            ratios,
            LATENCY_RATIO,
            common,
            spread=ratio_ci,
            spread_kind=BLOCK_SPREAD,
        ),
        Figure(
            "latency_overhead",
            "1b. Paid euro GET: client overhead, median SDK - median floor (lean merchant)",
            overhead,
            "us",
            f"<= {OVERHEAD_US:.0f} us",
            overhead_ok,
            f"mean over {shape}; per block {listed(overheads, '.0f')} us; "
            f"median of all per-pair differences {statistics.median(per_pair_diff):.0f} us"
            + (
                ""
                if overhead_ok
                else f"; {missed_by(overhead, OVERHEAD_US, upper=True, unit='us')}"
            ),
            overheads,
            OVERHEAD_US,
            spread=overhead_ci,
            spread_kind=BLOCK_SPREAD,
        ),
    ]
    sdk_free, bare = pooled("sdk_free"), pooled("bare_free")
    pts = per_block(ratio_of_medians, "sdk_free", "bare_free")
    pt, pt_ci = over_blocks(pts)
    pt_ok = pt <= PASSTHROUGH_RATIO
    figures.append(
        Figure(
            "passthrough",
            "1c. Pass-through (non-402) GET, SDK client / bare httpx client (lean merchant)",
            pt,
            "x",
            f"<= {PASSTHROUGH_RATIO}",
            pt_ok,
            f"mean over {shape}; pooled medians {statistics.median(sdk_free) * 1e6:.0f} us vs "
            f"{statistics.median(bare) * 1e6:.0f} us ({diff_of_medians(sdk_free, bare) * 1e6:+.0f}"
            f" us); per block {listed(pts)}; GC "
            + "; ".join(_gc_summary(gc, f, pairs) for f in ("sdk_free", "bare_free"))
            + ("" if pt_ok else f"; {missed_by(pt, PASSTHROUGH_RATIO, upper=True)}"),
            pts,
            PASSTHROUGH_RATIO,
            {
                "sdk_us": summary([t * 1e6 for t in sdk_free]),
                "bare_us": summary([t * 1e6 for t in bare]),
            },
            spread=pt_ci,
            spread_kind=BLOCK_SPREAD,
        )
    )
    # The client process's CPU per request: the servers run elsewhere, so this is the
    # client's own work (GC included), which other processes on the machine barely move.
    cpu_diffs = [d * 1e6 for d in per_block(diff_of_medians, "sdk", "floor", "cpu")]
    cpu_diff, cpu_ci = over_blocks(cpu_diffs)
    cpu_sdk = statistics.median(pooled("sdk", "cpu"))
    cpu_floor = statistics.median(pooled("floor", "cpu"))
    free_diffs = [d * 1e6 for d in per_block(diff_of_medians, "sdk_free", "bare_free", "cpu")]
    figures.append(
        Figure(
            "latency_cpu",
            "1d. Paid euro GET: client-process CPU, median SDK - median floor (informational)",
            cpu_diff,
            "us",
            "informational (the client's own work; 1b is what a user waits)",
            None,
            f"mean over {shape}; pooled medians {cpu_sdk * 1e6:.0f} us vs "
            f"{cpu_floor * 1e6:.0f} us of CPU per paid GET; per block "
            f"{listed(cpu_diffs, '.0f')} us; pass-through (SDK client - bare): "
            f"{statistics.fmean(free_diffs):+.1f} us",
            cpu_diffs,
            None,
            {"samples_per_flow": pairs},
            spread=cpu_ci,
            spread_kind=BLOCK_SPREAD,
        )
    )
    return figures


def fig_sandbox_latency(counts: dict[str, int]) -> Figure:
    title = "1s. Paid euro GET, SDK / hand-written floor, SANDBOX merchant (informational)"
    with Sandbox() as server:
        data = client(
            "latency",
            {
                "merchant": server.info["merchant_url"],
                "options": euro_options(server.options),
                "pairs": counts["sandbox_pairs"],
                "warmup": counts["warmup"],
            },
        )
    sdk, floor = data["times"]["sdk"], data["times"]["floor"]
    return Figure(
        "latency_sandbox",
        title,
        ratio_of_medians(sdk, floor),
        "x",
        "informational: the sandbox merchant's own work is most of the floor",
        None,
        f"median {statistics.median(sdk) * 1e3:.2f} ms vs {statistics.median(floor) * 1e3:.2f} ms"
        f" ({diff_of_medians(sdk, floor) * 1e6:+.0f} us); the sandbox merchant makes two "
        "internal HTTP calls per paid request and validates with pydantic",
        [s / f for s, f in zip(sdk, floor, strict=True)],
        None,
        {
            "sdk_us": summary([t * 1e6 for t in sdk]),
            "floor_us": summary([t * 1e6 for t in floor]),
        },
        spread=bootstrap(sdk, floor, ratio_of_medians),
        spread_kind="95% bootstrap CI",
    )


# --- 2. throughput ------------------------------------------------------------------------


def throughput_block(counts: dict[str, int], first: str) -> dict[str, Any]:
    """One block of figure 2: fresh lean servers, a fresh client process, one burst of
    each flow (`first` first)."""
    with Lean("raw") as lean:
        data = client(
            "throughput",
            {
                **lean.target,
                "controls": lean.controls,
                "n": counts["tp_n"],
                "concurrency": CONCURRENCY,
                "first": first,
            },
        )
    data["n"] = counts["tp_n"]
    return data


def throughput_orders() -> Callable[[], str]:
    """Which flow bursts first in the next throughput block: alternating, sdk first."""
    turns = itertools.cycle(("sdk", "floor"))
    return lambda: next(turns)


def fig_throughput(blocks: list[dict[str, Any]]) -> Figure:
    n = blocks[0]["n"]
    runs = {kind: [r for b in blocks for r in b["runs"][kind]] for kind in ("sdk", "floor")}
    pairs = list(zip(runs["sdk"], runs["floor"], strict=True))
    ratios = [s["rps"] / f["rps"] for s, f in pairs]
    value, spread = over_blocks(ratios)
    overhead = [(1 / s["rps"] - 1 / f["rps"]) * 1e6 for s, f in pairs]
    cpu = {
        kind: statistics.median(r["cpu_seconds"] / n * 1e6 for r in rs) for kind, rs in runs.items()
    }
    connections = {
        kind: {
            server: max(r["connections"][server] for r in rs)
            for server in ("merchant", "payment_api")
        }
        for kind, rs in runs.items()
    }
    failures = sum(r["failures"] for rs in runs.values() for r in rs)
    codes_ok = all(r["paid_codes_match"] for rs in runs.values() for r in rs)
    churn_bound = int(CONCURRENCY * 1.1)
    no_churn = all(c <= churn_bound for c in connections["sdk"].values())
    ok = value >= THROUGHPUT_RATIO
    return Figure(
        "throughput",
        f"2. Throughput, {n} paid requests at concurrency {CONCURRENCY}, SDK / floor with one "
        "pool per origin (lean)",
        value,
        "x",
        f">= {THROUGHPUT_RATIO}",
        ok and failures == 0 and codes_ok,
        f"mean over {len(blocks)} blocks of one burst per flow of the ratio of req/s; per "
        f"block {listed(ratios)}; SDK {statistics.median(r['rps'] for r in runs['sdk']):.0f}"
        f" req/s vs {statistics.median(r['rps'] for r in runs['floor']):.0f} (medians); "
        f"client time {statistics.median(overhead):+.0f} us per request (wall, 1/rps), client "
        f"CPU {cpu['sdk']:.0f} vs {cpu['floor']:.0f} us per request; new connections, most "
        f"seen (merchant / payment API): SDK {connections['sdk']['merchant']} / "
        f"{connections['sdk']['payment_api']}, floor {connections['floor']['merchant']} / "
        f"{connections['floor']['payment_api']} (churn bound {churn_bound}: "
        f"{'none' if no_churn else 'CHURN'}); failures {failures}; every served proof paid "
        f"once: {codes_ok}; {gate_summary(blocks)}"
        + ("" if ok else f"; {missed_by(value, THROUGHPUT_RATIO, upper=False)}"),
        ratios,
        THROUGHPUT_RATIO,
        {
            "runs": runs,
            "overhead_us_per_request": overhead,
            "cpu_us_per_request": cpu,
            "max_new_connections": connections,
        },
        spread=spread,
        spread_kind=BLOCK_SPREAD,
    )


# --- 3. start-up --------------------------------------------------------------------------

#: What each import figure runs. `import x402_client` is lazy (PEP 562): it loads
#: neither httpx nor pydantic; the usable API (`with_eur_payment`, `PaymentOptions`) does.
IMPORTS = {
    "httpx": "import httpx",
    "x402_client": "import x402_client",
    "api": "from x402_client import with_eur_payment, PaymentOptions",
}

_IMPORT_SNIPPET = """
import sys, time
t = time.perf_counter()
{statement}
elapsed = time.perf_counter() - t
heavy = sorted(m for m in ("web3", "eth_account", "eth_abi") if m in sys.modules)
print(elapsed, ",".join(heavy))
"""


#: Fresh processes that may write bytecode caches: a user's installed package has them, so
#: a stale or missing `__pycache__` (an editable install being edited, or an environment
#: with PYTHONDONTWRITEBYTECODE set) must not be measured as import time. The warm-up
#: import of each statement writes them.
IMPORT_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _import_time(key: str) -> tuple[float, list[str]]:
    out = subprocess.run(
        [PY, "-c", _IMPORT_SNIPPET.format(statement=IMPORTS[key])],
        capture_output=True,
        text=True,
        check=True,
        env=IMPORT_ENV,
    ).stdout.split()
    return float(out[0]), [m for m in (out[1] if len(out) > 1 else "").split(",") if m]


def _wall(cmd: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(cmd, capture_output=True, check=True, env=IMPORT_ENV)
    return time.perf_counter() - started


def import_profile(statement: str, top: int = 15) -> list[dict[str, Any]]:
    """`python -X importtime -c statement`: the heaviest imports (cumulative µs)."""
    err = subprocess.run(
        [PY, "-X", "importtime", "-c", statement],
        capture_output=True,
        text=True,
        check=True,
        env=IMPORT_ENV,
    ).stderr
    rows: list[dict[str, Any]] = []
    for line in err.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, cumulative, name = line.split(":", 1)[1].split("|")
        depth = (len(name) - len(name.lstrip()) - 1) // 2
        rows.append(
            {
                "module": name.strip(),
                "self_us": int(self_us),
                "cumulative_us": int(cumulative),
                "depth": depth,
            }
        )
    tops = [r for r in rows if r["depth"] <= 2]
    return sorted(tops, key=lambda r: -r["cumulative_us"])[:top]


def fig_startup(counts: dict[str, int]) -> list[Figure]:
    runs = counts["import_runs"]
    keys = list(IMPORTS)
    for key in keys:  # warm the bytecode caches
        _import_time(key)
    times: dict[str, list[float]] = {key: [] for key in keys}
    heavy_seen: dict[str, set[str]] = {key: set() for key in keys}
    for i in range(runs):
        # Rotate the order so that no statement always runs first (or last).
        for key in keys[i % 3 :] + keys[: i % 3]:
            elapsed, heavy = _import_time(key)
            times[key].append(elapsed)
            heavy_seen[key].update(heavy)
    httpx_t = times["httpx"]
    figures = []
    for key, fig_key, title, target in (
        (
            "api",
            "import_api",
            "3a. Start-up: `from x402_client import with_eur_payment, PaymentOptions` / "
            "`import httpx`",
            True,
        ),
        (
            "x402_client",
            "import",
            "3a'. Start-up: `import x402_client` (lazy stub) / `import httpx` (informational)",
            False,
        ),
    ):
        ours_t = times[key]
        value = ratio_of_medians(ours_t, httpx_t)
        ok = value <= IMPORT_RATIO
        figures.append(
            Figure(
                fig_key,
                title,
                value,
                "x",
                f"<= {IMPORT_RATIO}" if target else "informational",
                ok if target else None,
                f"median {statistics.median(ours_t) * 1000:.0f} ms vs "
                f"{statistics.median(httpx_t) * 1000:.0f} ms, {runs} interleaved fresh processes"
                + ("" if ok or not target else f"; {missed_by(value, IMPORT_RATIO, upper=True)}"),
                [o / h for o, h in zip(ours_t, httpx_t, strict=True)],
                IMPORT_RATIO if target else None,
                {
                    "statement": IMPORTS[key],
                    "ms": summary([t * 1000 for t in ours_t]),
                    "httpx_ms": summary([t * 1000 for t in httpx_t]),
                    "importtime_top": import_profile(IMPORTS[key]),
                    "importtime_httpx_top": import_profile(IMPORTS["httpx"]),
                },
                spread=bootstrap(ours_t, httpx_t, ratio_of_medians),
                spread_kind="95% bootstrap CI",
            )
        )
    heavy = sorted(heavy_seen["x402_client"] | heavy_seen["api"])
    figures.append(
        Figure(
            "lazy_evm",
            "3b. web3 / eth-account modules loaded by the import a user writes",
            float(len(heavy)),
            "modules",
            "0",
            not heavy,
            ", ".join(heavy) or "none of web3, eth_account, eth_abi",
            spread=(float(len(heavy)), float(len(heavy))),
            spread_kind="exact count",
        )
    )
    cli_title = "3c. Start-up: `x402-eur --help` / `python -c 'import httpx'` (wall, informational)"
    if importlib.util.find_spec("x402_client.cli") is None:
        figures.append(skipped("cli", cli_title, "informational", "x402_client.cli is missing"))
        return figures
    script = shutil.which("x402-eur", path=str(Path(PY).parent)) or ""
    cli = [script, "--help"] if script else [PY, "-m", "x402_client.cli", "--help"]
    base = [PY, "-c", "import httpx"]
    try:
        _wall(cli)
    except subprocess.CalledProcessError as exc:
        figures.append(
            skipped(
                "cli", cli_title, "informational", f"`{' '.join(cli)}` failed: {exc.returncode}"
            )
        )
        return figures
    cli_t: list[float] = []
    base_t: list[float] = []
    for i in range(runs):
        pair = [(cli, cli_t), (base, base_t)]
        for cmd, bucket in pair if i % 2 == 0 else pair[::-1]:
            bucket.append(_wall(cmd))
    figures.append(
        Figure(
            "cli",
            cli_title,
            ratio_of_medians(cli_t, base_t),
            "x",
            "informational",
            None,
            f"median {statistics.median(cli_t) * 1000:.0f} ms vs "
            f"{statistics.median(base_t) * 1000:.0f} ms",
            [c / b for c, b in zip(cli_t, base_t, strict=True)],
            None,
            spread=bootstrap(cli_t, base_t, ratio_of_medians),
            spread_kind="95% bootstrap CI",
        )
    )
    return figures


# --- 4. EVM permit rail -------------------------------------------------------------------


@contextlib.contextmanager
def _signing_clock() -> Iterator[list[tuple[float, float]]]:
    """Time every permit signature the EVM rail makes, in the signing thread's CPU time
    (`time.thread_time`: what the machine gave other processes meanwhile is not counted,
    and no profiler adds its own overhead). Yields the list that each signature's
    `(cpu seconds, of which garbage collection)` goes to: a collection runs in whichever
    call happens to allocate past the threshold, so a signature can be charged a
    collection that the whole payment's allocations triggered."""
    from x402_client._rails.evm import EvmPermitRail

    spent: list[tuple[float, float]] = []
    clock = GcClock()
    original = EvmPermitRail._sign

    def timed(self: EvmPermitRail, typed: dict[str, Any]) -> bytes:
        started, seen = time.thread_time(), len(clock.events)
        try:
            return original(self, typed)
        finally:
            collected = sum(cpu for *_, cpu in clock.events[seen:])
            spent.append((time.thread_time() - started, collected))

    EvmPermitRail._sign = timed  # type: ignore[method-assign]
    clock.install()
    try:
        yield spent
    finally:
        clock.remove()
        EvmPermitRail._sign = original  # type: ignore[method-assign]


async def _evm_payments(server: Sandbox, n: int) -> dict[str, Any]:
    from x402_client import with_eur_payment

    options = {"evm": server.options["evm"]}  # no managed account: the euro entry is skipped
    url = server.url("/weather")
    async with with_eur_payment(httpx.AsyncClient(timeout=60), options) as http:
        for _ in range(2):  # warm-up: chain id, token name and symbol, spender
            response = await http.get(url)
            if response.status_code != 200:
                raise RuntimeError(f"EVM payment answered {response.status_code}")
        server.reset()
        cpu0 = time.process_time()
        with _signing_clock() as signatures:
            for _ in range(n):
                response = await http.get(url)
                if response.status_code != 200:
                    raise RuntimeError(f"EVM payment answered {response.status_code}")
        cpu = time.process_time() - cpu0
        if len(signatures) != n:
            raise RuntimeError("expected one permit signature per payment")
    stats = server.stats()
    calls = sum(c["calls"] for c in stats["rpc"].values())
    trips = sum(c["http_requests"] for c in stats["rpc"].values())
    methods: collections.Counter[str] = collections.Counter()
    for chain in stats["rpc"].values():
        methods.update(chain["methods"])
    return {
        "payments": n,
        "rpc_round_trips_per_payment": trips / n,
        "rpc_calls_per_payment": calls / n,
        "methods": dict(methods),
        "client_cpu_ms_per_payment": cpu * 1000 / n,
        "signing_cpu_ms": [total * 1000 for total, _ in signatures],
        "signing_gc_ms": [collected * 1000 for _, collected in signatures],
    }


def evm_block(counts: dict[str, int]) -> dict[str, Any]:
    """One block of figure 4a (and of the signing time beside it): a fresh EVM sandbox,
    2 warm-up payments, then `evm_n` timed ones. A sandbox that does not work is reported,
    not raised: the figure is then skipped with the reason."""
    try:
        with Sandbox("--evm") as server:
            if "evm" not in server.options:
                raise RuntimeError("the sandbox gave no EVM options")
            return asyncio.run(_evm_payments(server, counts["evm_n"]))
    except Exception as exc:
        return {"error": f"EVM sandbox or rail not working: {type(exc).__name__}: {exc}"[:300]}


def signing_ms(block: dict[str, Any]) -> float:
    """An EVM block's mean signing CPU per signature, ms: each signature's own CPU. A
    collection that ran inside one was triggered by the whole payment's allocations, and
    is counted in the client CPU per payment instead."""
    return statistics.fmean(
        t - g for t, g in zip(block["signing_cpu_ms"], block["signing_gc_ms"], strict=True)
    )


def fig_evm(blocks: list[dict[str, Any]]) -> list[Figure]:
    """Figure 4a, with the signing time in its details.

    The signing time is not a figure. It times one call, eth-account's
    `Account.sign_typed_data` (all that `EvmPermitRail._sign` does), so it is the
    machine's speed at that library's work, not the client's; between runs it moves by
    more than any spread measured within a run (benchmarks/README.md). It is reported
    beside the speed probe (the summary line and `--compare`)."""
    title_rpc = "4a. EVM permit payment: RPC round trips when warm (JSON-RPC calls in detail)"
    failed = next((b["error"] for b in blocks if "error" in b), None)
    if failed is not None:
        return [skipped("evm_rpc", title_rpc, f"<= {EVM_ROUND_TRIPS:.0f}", failed)]
    n = sum(b["payments"] for b in blocks)
    # Every payment counts: the figure is the worst block's round trips per payment.
    per_block = [b["rpc_round_trips_per_payment"] for b in blocks]
    trips = max(per_block)
    calls = sum(b["rpc_calls_per_payment"] * b["payments"] for b in blocks) / n
    tally: collections.Counter[str] = collections.Counter()
    for b in blocks:
        tally.update(b["methods"])
    methods = dict(tally)
    signing = [signing_ms(b) for b in blocks]
    hosted = [g for b in blocks for g in b["signing_gc_ms"] if g > 0]
    client_cpu = sum(b["client_cpu_ms_per_payment"] * b["payments"] for b in blocks) / n
    ok = trips <= EVM_ROUND_TRIPS
    shape = f"{len(blocks)} blocks of {blocks[0]['payments']} warm payments"
    return [
        Figure(
            "evm_rpc",
            title_rpc,
            trips,
            "round trips",
            f"<= {EVM_ROUND_TRIPS:.0f} (a batch is one)",
            ok,
            f"{shape}, counted at the RPC proxy: at most {trips:g} HTTP round trips per "
            f"payment in a block (per block {listed(per_block, 'g')}) and {calls:g} JSON-RPC "
            f"calls per payment; by method: {methods}"
            + ("" if ok else f"; {missed_by(trips, EVM_ROUND_TRIPS, upper=True, unit='trips')}")
            + f". Client CPU per paid request {client_cpu:.1f} ms, of which eth-account's "
            f"signing {statistics.fmean(signing):.2f} ms (the machine's speed, not a figure; "
            f"thread CPU time, collections inside it left out: {len(hosted)} of {n} "
            f"signatures hosted one, {sum(hosted):.1f} ms in all; per block "
            f"{listed(signing, '.2f')} ms); " + gate_summary(blocks),
            [],
            EVM_ROUND_TRIPS,
            {"blocks": blocks, "methods": methods},
            spread=(trips, trips),
            spread_kind="exact count",
        )
    ]


# --- 5. EIP-3009 vs the x402 foundation's client ---------------------------------------------


def fig_eip3009(counts: dict[str, int]) -> Figure:
    title = (
        "5. EIP-3009 payment: client CPU per paid GET (signing included), ours / x402 "
        "foundation's x402HttpxClient, same merchant"
    )
    target = f"<= {EIP3009_RATIO}"
    if importlib.util.find_spec("x402") is None:
        return skipped("eip3009", title, target, "the x402 package is not installed")
    pairs = counts["eip3009_pairs"]
    warmup = 3
    try:
        with Proc(
            str(HERE / "_foundation_server.py"), "--payments", str(2 * (pairs + warmup) + 10)
        ) as stack:
            data = client("eip3009", {**stack.info, "pairs": pairs, "warmup": warmup})
    except Exception as exc:
        return skipped(
            "eip3009",
            title,
            target,
            f"our client cannot pay the foundation's merchant yet: {type(exc).__name__}: {exc}"[
                :300
            ],
        )
    ours, theirs = data["cpu"]["ours"], data["cpu"]["foundation"]
    value = ratio_of_medians(ours, theirs)
    wall = ratio_of_medians(data["wall"]["ours"], data["wall"]["foundation"])
    ok = value <= EIP3009_RATIO
    return Figure(
        "eip3009",
        title,
        value,
        "x",
        target,
        ok,
        f"client CPU median {statistics.median(ours) * 1e3:.2f} ms vs "
        f"{statistics.median(theirs) * 1e3:.2f} ms over {pairs} interleaved pairs; wall "
        f"{statistics.median(data['wall']['ours']) * 1e3:.1f} ms vs "
        f"{statistics.median(data['wall']['foundation']) * 1e3:.1f} ms ({wall:.3f} x; the "
        "merchant settles on anvil before answering)"
        + ("" if ok else f"; {missed_by(value, EIP3009_RATIO, upper=True)}"),
        [o / t for o, t in zip(ours, theirs, strict=True)],
        EIP3009_RATIO,
        {
            "cpu_ms": {k: summary([t * 1e3 for t in v]) for k, v in data["cpu"].items()},
            "wall_ms": {k: summary([t * 1e3 for t in v]) for k, v in data["wall"].items()},
            "wall_ratio": wall,
            "gc": data["gc"],
        },
        spread=bootstrap(ours, theirs, ratio_of_medians),
        spread_kind="95% bootstrap CI",
    )


# --- 6. garbage-collection pauses -------------------------------------------------------------


def attribute_pauses(
    sdk: list[tuple[int, float]], floor: list[tuple[int, float]]
) -> list[tuple[int, float]]:
    """The SDK process's pauses over the threshold that are the client's.

    Pauses are `(generation, CPU ms)`: the collecting thread's CPU time, so that time the
    machine gave to other processes during a collection is charged to neither flow. Per
    generation, the SDK's pauses and the floor process's (same load) are matched
    longest first; an SDK pause over the threshold is attributable to the client when the
    floor has no counterpart for it (the client made that generation collect more often)
    or the SDK's is more than the threshold longer than its counterpart (the client made
    the collection longer: more objects to scan)."""
    out: list[tuple[int, float]] = []
    for gen in (0, 1, 2):
        ours = sorted((p for g, p in sdk if g == gen), reverse=True)
        theirs = sorted((p for g, p in floor if g == gen), reverse=True)
        for i, pause in enumerate(ours):
            if pause <= GC_PAUSE_MS:
                break
            counterpart = theirs[i] if i < len(theirs) else None
            if counterpart is None or pause - counterpart > GC_PAUSE_MS:
                out.append((gen, pause))
    return out


def fig_gc(lean: Lean, counts: dict[str, int]) -> Figure:
    n = counts["gc_n"]
    runs = {}
    for flow in ("sdk", "floor"):
        runs[flow] = client(
            "gc",
            {
                **lean.target,
                "flow": flow,
                "n": n,
                "warmup": counts["warmup"],
            },
        )
    per_gen: dict[str, dict[str, Any]] = {}
    for flow, r in runs.items():
        rows = {}
        for gen in (0, 1, 2):
            ms = [cpu for g, _, cpu in r["pauses_ms"] if g == gen]
            wall = [w for g, w, _ in r["pauses_ms"] if g == gen]
            rows[str(gen)] = {
                "count": len(ms),
                "max_ms": max(ms) if ms else 0.0,
                "median_ms": statistics.median(ms) if ms else 0.0,
                "total_ms": sum(ms),
                "max_wall_ms": max(wall) if wall else 0.0,
            }
        per_gen[flow] = rows
    cpu = {flow: [(g, c) for g, _, c in r["pauses_ms"]] for flow, r in runs.items()}
    over = {flow: [p for _, p in pauses if p > GC_PAUSE_MS] for flow, pauses in cpu.items()}
    over_wall = {
        flow: [w for _, w, _ in r["pauses_ms"] if w > GC_PAUSE_MS] for flow, r in runs.items()
    }
    attributable = attribute_pauses(cpu["sdk"], cpu["floor"])
    ok = not attributable
    gen_text = "; ".join(
        f"{flow}: "
        + ", ".join(
            f"gen{g} {row['count']}x max {row['max_ms']:.2f} ms" for g, row in per_gen[flow].items()
        )
        for flow in ("sdk", "floor")
    )
    sdk_max = max((p for _, p in cpu["sdk"]), default=0.0)
    sdk_max_wall = max((w for _, w, _ in runs["sdk"]["pauses_ms"]), default=0.0)
    return Figure(
        "gc",
        f"6. GC pauses > {GC_PAUSE_MS:g} ms attributable to the client in {n} paid requests",
        float(len(attributable)),
        "pauses",
        "0",
        ok,
        f"pauses (CPU time of the collection) > {GC_PAUSE_MS:g} ms: SDK process "
        f"{len(over['sdk'])}, floor process {len(over['floor'])} (same load, each flow in its "
        f"own process; by wall time {len(over_wall['sdk'])} and {len(over_wall['floor'])}); "
        "attributable "
        f"(no floor counterpart of the same generation, or > {GC_PAUSE_MS:g} ms longer than "
        f"it): {', '.join(f'gen{g} {p:.1f} ms' for g, p in attributable) or 'none'}; "
        "longest SDK pause "
        f"{sdk_max:.2f} ms CPU ({sdk_max_wall:.2f} ms wall); {gen_text}; tracked objects at "
        f"the end: SDK {runs['sdk']['tracked_objects']}, floor {runs['floor']['tracked_objects']}",
        [],
        0.0,
        {
            "sdk_pauses_ms": [p for _, p in cpu["sdk"]],
            "sdk_pauses_wall_ms": [w for _, w, _ in runs["sdk"]["pauses_ms"]],
            "per_generation": per_gen,
            "over_threshold_ms": over,
            "over_threshold_wall_ms": over_wall,
            "attributable": attributable,
            "runs": {
                k: {kk: vv for kk, vv in v.items() if kk != "pauses_ms"} for k, v in runs.items()
            },
        },
        spread=(
            max(0.0, len(attributable) - math.sqrt(len(attributable))),
            len(attributable) + math.sqrt(len(attributable)),
        ),
        spread_kind="+-sqrt(n): a count of rare events (Poisson)",
    )


# --- 7. memory ----------------------------------------------------------------------------


def fig_memory(lean: Lean, counts: dict[str, int]) -> Figure:
    size = counts["memory_mb"] * MiB
    repeats = counts["memory_repeats"]
    deltas: list[float] = []
    runs = []
    options = json.dumps(lean.options)
    url = lean.merchant["url"] + "/download"
    for _ in range(repeats):
        out = subprocess.run(
            [PY, str(HERE / "_memory_child.py"), url, options, str(size)],
            capture_output=True,
            text=True,
            check=True,
            timeout=600,
        ).stdout
        result = json.loads(out.strip().splitlines()[-1])
        if result["received"] != size or not result["paid"]:
            raise RuntimeError(f"download incomplete or unpaid: {result}")
        runs.append(result)
        deltas.append((result["peak_after_kib"] - result["peak_before_kib"]) / 1024)
    worst = max(deltas)
    ok = worst < MEMORY_MB
    return Figure(
        "memory",
        f"7. Peak RSS growth, paid {counts['memory_mb']} MB streamed download",
        worst,
        "MB",
        f"< {MEMORY_MB:g} MB",
        ok,
        f"worst of {repeats} fresh processes (ru_maxrss after warm-up vs after); "
        f"{size / MiB / statistics.median(r['seconds'] for r in runs):.0f} MB/s"
        + ("" if ok else f"; {missed_by(worst, MEMORY_MB, upper=True, unit='MB')}"),
        deltas,
        MEMORY_MB,
        {"runs": runs},
        # Every reading is a whole number of the heap's growth steps (glibc grows it by
        # 128 KiB), so one reading cannot tell values within a step apart.
        spread=(min(deltas) - RSS_STEP_MB, max(deltas) + RSS_STEP_MB),
        spread_kind=f"range over {repeats} processes, +-1 heap step (128 KiB)",
    )


# --- 8. bridge rail (sandbox) -------------------------------------------------------------


async def _bridge_payments(server: Sandbox, n: int) -> dict[str, Any]:
    from x402_client import with_eur_payment

    url = server.url("/report")
    async with with_eur_payment(
        httpx.AsyncClient(timeout=120), euro_options(server.options)
    ) as http:
        server.reset()
        for _ in range(n):
            response = await http.get(url)
            if response.status_code != 200:
                raise RuntimeError(f"bridge payment answered {response.status_code}")
            receipt = response.extensions.get("x402_payment")
            if receipt is None or receipt.rail == "euro":
                raise RuntimeError(f"not paid through the bridge: {receipt!r}")
    stats = server.stats()
    appeared = sorted(stats["blockchain_tx_appeared"].values())
    arrivals = sorted(stats["merchant"]["proof_arrivals"])
    paid_at = sorted(stats["payment_api"]["payments"])
    delays = []
    for seen in appeared:
        after = [a for a in arrivals if a >= seen]
        if after:
            delays.append(after[0] - seen)
    waiting = sum(min([a for a in arrivals if a >= p] or [p]) - p for p in paid_at)
    polls = stats["payment_api"]["paths"].get("GET /transaction", 0)
    return {
        "delays": delays,
        "polls": polls,
        "waiting_seconds": waiting,
        "polls_per_minute": polls / waiting * 60 if waiting > 0 else None,
    }


def fig_bridge(counts: dict[str, int]) -> list[Figure]:
    title_delay = "8a. Bridge (sandbox): blockchainTxId appearing -> proof sent"
    title_polls = "8b. Bridge (sandbox): polls per minute of waiting"
    try:
        with Sandbox("--chain-a", "--bridge-delay", "0.5") as server:
            short = asyncio.run(_bridge_payments(server, counts["bridge_short"]))
        with Sandbox("--chain-a", "--bridge-delay", str(counts["bridge_long_s"])) as server:
            long = asyncio.run(_bridge_payments(server, 1))
    except Exception as exc:
        reason = f"chain-A sandbox or bridge rail not working: {type(exc).__name__}: {exc}"
        return [
            skipped("bridge_delay", title_delay, "median < 0.5 s", reason[:300]),
            skipped("bridge_polls", title_polls, "<= 60 / min", reason[:300]),
        ]
    delay = statistics.median(short["delays"]) if short["delays"] else float("nan")
    rate = long["polls_per_minute"] or float("nan")
    return [
        Figure(
            "bridge_delay",
            title_delay,
            delay,
            "s",
            "median < 0.5 s",
            delay < 0.5,
            f"{len(short['delays'])} payments, bridge delay 0.5 s",
            short["delays"],
            0.5,
            short,
            spread=(min(short["delays"]), max(short["delays"])) if short["delays"] else None,
            spread_kind="range",
        ),
        Figure(
            "bridge_polls",
            title_polls,
            rate,
            "/min",
            "<= 60 / min",
            rate <= 60,
            f"{long['polls']} polls over {long['waiting_seconds']:.1f} s of waiting",
            [],
            60.0,
            long,
            # A count of polls over a measured wait: its resolution is one poll.
            spread=(
                (
                    max(long["polls"] - 1, 0) / long["waiting_seconds"] * 60,
                    (long["polls"] + 1) / long["waiting_seconds"] * 60,
                )
                if long["waiting_seconds"]
                else None
            ),
            spread_kind="+-1 poll (the count's resolution)",
        ),
    ]


# --- profile (not a figure) ----------------------------------------------------------------


def run_profile(lean: Lean, counts: dict[str, int], out: Path) -> dict[str, Any]:
    data = client(
        "profile",
        {
            **lean.target,
            "n": counts["profile_n"],
            "warmup": counts["warmup"],
            "out": str(out),
        },
    )
    print("  own functions by self time (us per paid request):")
    for row in data["own_top"][:15]:
        print(
            f"    {row['tottime_us_per_request']:7.1f} self {row['cumtime_us_per_request']:7.1f} "
            f"cum  {row['function']}"
        )
    print(f"  wrote {out / 'profile-cprofile.txt'} and {data['pyinstrument']}")
    return data


# --- output -------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    return {
        "uname": " ".join(platform.uname()),
        "nproc": os.cpu_count(),
        "python": sys.version.split()[0],
        "httpx": httpx.__version__,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "loadavg_start": list(os.getloadavg()),
    }


def _fmt(value: float) -> str:
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"


def table(figures: list[Figure]) -> str:
    rows = [("Figure", "Measured [spread]", "Target", "Result")]
    for f in figures:
        if f.skipped:
            rows.append((f.title, "-", f.target, f"skipped: {f.skipped}"))
            continue
        value = "-" if f.value is None else f"{_fmt(f.value)} {f.unit}"
        if f.spread is not None and f.spread[0] != f.spread[1]:
            value += f" [{_fmt(f.spread[0])}-{_fmt(f.spread[1])}]"
        verdict = {True: "met", False: "MISSED", None: "info"}[f.passed]
        rows.append((f.title, value, f.target, verdict))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = []
    for i, r in enumerate(rows):
        lines.append(
            f"| {r[0]:<{widths[0]}} | {r[1]:<{widths[1]}} | {r[2]:<{widths[2]}} | {r[3]} |"
        )
        if i == 0:
            lines.append(
                f"|{'-' * (widths[0] + 2)}|{'-' * (widths[1] + 2)}|"
                f"{'-' * (widths[2] + 2)}|--------|"
            )
    return "\n".join(lines)


def chart(figures: list[Figure], path: Path, info: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [f for f in figures if f.key != "lazy_evm"]
    cols = 4
    rows = (len(shown) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.6 * rows), squeeze=False)
    for ax, f in zip(axes.flat, shown, strict=False):
        ax.set_title(textwrap.fill(f.title, 48), fontsize=7)
        if f.skipped:
            ax.text(
                0.5,
                0.5,
                "skipped:\n" + textwrap.fill(f.skipped[:160], 40),
                ha="center",
                va="center",
                fontsize=7,
                transform=ax.transAxes,
            )
            ax.set_axis_off()
            continue
        if len(f.samples) > 1:
            ax.boxplot(f.samples, widths=0.5, showfliers=False)
            ax.plot([1], [f.value], marker="D", color="black", label=f"value {_fmt(f.value or 0)}")
            ax.set_xticks([])
        else:
            ax.bar([0], [f.value or 0], width=0.5)
            ax.set_xticks([])
        if f.spread is not None and f.spread[0] != f.spread[1]:
            ax.axhspan(f.spread[0], f.spread[1], color="grey", alpha=0.25, label=f.spread_kind)
        if f.target_value is not None:
            ax.axhline(f.target_value, color="red", linestyle="--", label=f"target {f.target}")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6, loc="best")
        verdict = {True: "met", False: "MISSED", None: ""}[f.passed]
        ax.set_ylabel(f.unit)
        ax.set_xlabel(f"{_fmt(f.value or 0)} {f.unit} {verdict}", fontsize=8)
    for ax in list(axes.flat)[len(shown) :]:
        ax.set_axis_off()
    fig.suptitle(
        f"x402-eur benchmarks ({info['mode']}) - {info['date']} - {info['nproc']} CPUs, "
        f"Python {info['python']}",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def compare(paths: list[str], machine: list[str] | None = None) -> None:
    """Print each figure's value in several runs next to its stated spread.

    The figures are those this code writes (`FIGURES`): a key that older runs have and it
    no longer writes (`evm_cpu`, the signing time of earlier versions) is not compared. Each run's
    machine follows: its speed probe and eth-account's signing time (`run_signing_ms`).
    With `machine` (runs made for the purpose, e.g. `--only evm`), the signing time is
    checked against the spread between those runs (`between_runs`)."""
    runs = [json.loads(Path(p).read_text()) for p in paths]
    keys = [k for k in FIGURES if all(k in r["figures"] for r in runs)]
    print(
        f"| Figure | {' | '.join(f'run {i + 1}' for i in range(len(runs)))} | range | "
        "smallest stated spread | range < spread? |"
    )
    print("|---|" + "---|" * (len(runs) + 3))
    for key in keys:
        figs = [r["figures"][key] for r in runs]
        values = [f["value"] for f in figs]
        spreads = [f["spread"] for f in figs if f.get("spread")]
        if None in values:
            print(f"| {key} | " + " | ".join("-" for _ in runs) + " | - | - | skipped |")
            continue
        spread = min((hi - lo for lo, hi in spreads), default=None)
        shown = " | ".join(f"{_fmt(v)}" for v in values)
        spread_text = "-" if spread is None else _fmt(spread)
        verdict = reproduced(values, spreads)
        print(
            f"| {key} | {shown} | {_fmt(max(values) - min(values))} | {spread_text} | {verdict} |"
        )

    def per_run(values: list[float | None], fmt: str) -> str:
        return ", ".join("-" if v is None else format(v, fmt) for v in values)

    signing = [run_signing_ms(r) for r in runs]
    print(
        "\nThe machine (the speed probe's median over every block of the run, ms; lower is "
        f"quieter): {per_run([probe_of(r) for r in runs], '.2f')}; eth-account's signing "
        f"per permit, ms: {per_run(signing, '.3f')}"
    )
    if machine:
        purpose = [run_signing_ms(json.loads(Path(p).read_text())) for p in machine]
        if None in purpose or None in signing or len(purpose) < 2:
            print("\nSigning between runs: skipped (a run has no EVM blocks, or fewer than 2)")
            return
        verdict = between_runs(
            [v for v in signing if v is not None], [v for v in purpose if v is not None]
        )
        against = f"against {len(purpose)} runs made for the purpose"
        print(f"\nSigning between runs, {against}: {verdict}")


def reproduced(values: list[float], spreads: list[tuple[float, float]]) -> str:
    """The reproducibility verdict of one figure over several runs: `yes` when the runs'
    values differ by less than the smallest spread any of them states (an exact count, a
    spread of width 0, must be identical)."""
    if not spreads:
        return "no spread stated"
    spread = min(hi - lo for lo, hi in spreads)
    width = max(values) - min(values)
    if spread == 0:
        return "yes (identical)" if width == 0 else "NO"
    return "yes" if width < spread else "NO"


def relative_range(values: list[float]) -> float:
    """How far apart runs are, relative to their mean: (max - min) / mean."""
    return (max(values) - min(values)) / statistics.fmean(values)


def between_runs(compared: list[float], purpose: list[float]) -> str:
    """The verdict on an absolute time (eth-account's signing, ms of CPU) whose spread must
    be the machine's between runs: the compared runs' relative range against the relative
    width of the 95% Student-t interval of the mean over runs made for the purpose
    (`over_blocks`, with a run as the block). Relative, because a machine's level differs
    from one day to the next.

    A block spread cannot serve here: the blocks of one run share its machine state. The
    purpose runs must not include the compared ones: widening a spread from the runs it
    judges would pass them by construction."""
    mean, (lo, hi) = over_blocks(purpose)
    width = (hi - lo) / mean
    spread = relative_range(compared)
    return (
        f"relative range {spread:.3f} against a relative spread of {width:.3f} "
        f"(purpose runs {listed(purpose, '.3f')}): {'yes' if spread < width else 'NO'}"
    )


def run_signing_ms(run: dict[str, Any]) -> float | None:
    """A run's eth-account signing time per permit, ms (what figure 4b was), from its
    JSON; None when it has no EVM blocks."""
    return mean_signing_ms((run.get("figures", {}).get("evm_rpc") or {}).get("blocks") or [])


def mean_signing_ms(blocks: list[dict[str, Any]]) -> float | None:
    """The mean over EVM blocks of `signing_ms`; None when there are none, or one failed."""
    if not blocks or any("signing_cpu_ms" not in b for b in blocks):
        return None
    return statistics.fmean(signing_ms(b) for b in blocks)


def probe_of(run: dict[str, Any]) -> float | None:
    """The median speed-probe reading over every block of a run (`SpeedProbe`)."""
    per_kind = run["machine"].get("speed_probe_ms") or {}
    readings = [v for values in per_kind.values() for v in values if v is not None]
    return statistics.median(readings) if readings else None


@contextlib.contextmanager
def section(name: str) -> Iterator[None]:
    print(f"== {name}", flush=True)
    started, ticks = time.perf_counter(), cpu_ticks()
    yield
    steal = stolen_between(ticks, cpu_ticks())
    stolen = "" if steal is None else f", {steal:.1%} stolen by the hypervisor"
    print(f"   ({time.perf_counter() - started:.1f} s{stolen})", flush=True)


SECTIONS = (
    "startup",
    "servers",
    "latency",
    "throughput",
    "gc",
    "memory",
    "sandbox",
    "evm",
    "eip3009",
    "bridge",
)
#: Measured as short blocks spread over the run (`Blocks`), not as sections of their own.
BLOCK_SECTIONS = ("latency", "servers", "throughput", "evm")
#: Run only when named in --only: a tool for closing the gap, not a figure.
EXTRA_SECTIONS = ("profile",)


def output_dir(out: str | None, *, partial: bool) -> Path:
    """Where a run writes: `--out` when given; otherwise only a whole run (full or
    `--quick`) replaces `results/latest.{json,png}`, and a smoke run or a subset
    (`--only`) writes to `results/tmp/`."""
    if out:
        return Path(out)
    return HERE / "results" / ("tmp" if partial else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--smoke", action="store_true", help="tiny counts, seconds: CI")
    mode.add_argument("--quick", action="store_true", help="fewer repetitions (~4 min)")
    parser.add_argument("--out", default=None, help="output directory")
    parser.add_argument(
        "--only", default="", help="comma-separated: " + ",".join(SECTIONS + EXTRA_SECTIONS)
    )
    parser.add_argument("--compare", nargs="+", metavar="JSON", help="compare runs and exit")
    parser.add_argument(
        "--machine",
        nargs="+",
        metavar="JSON",
        help="with --compare: runs made to measure the machine between runs (the signing "
        "time's spread)",
    )
    args = parser.parse_args()
    if args.machine and not args.compare:
        parser.error("--machine goes with --compare")
    if args.compare:
        compare(args.compare, args.machine)
        return
    mode_name = "smoke" if args.smoke else "quick" if args.quick else "full"
    counts = COUNTS[mode_name]
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    unknown = only - set(SECTIONS) - set(EXTRA_SECTIONS)
    if unknown:
        parser.error(f"unknown sections: {sorted(unknown)}")

    def wanted(name: str) -> bool:
        return name in only if only else name not in EXTRA_SECTIONS

    out = output_dir(args.out, partial=args.smoke or bool(only))
    out.mkdir(parents=True, exist_ok=True)
    started, ticks = time.perf_counter(), cpu_ticks()
    info = machine()
    info["mode"] = mode_name
    info["gate"] = {"max_steal": MAX_STEAL, "max_probe_ms": MAX_PROBE_MS}
    figures: list[Figure] = []
    extras: dict[str, Any] = {}
    # The latency figures, throughput and figure 0 are short blocks spread over the whole run
    # (`Blocks`): between the other sections, and the rest at the end.
    block_jobs: dict[str, tuple[int, Callable[[], dict[str, Any]]]] = {}
    if wanted("latency"):
        block_jobs["latency"] = (counts["latency_blocks"], lambda: latency_block(counts))
    if wanted("servers"):
        block_jobs["servers"] = (counts["server_blocks"], lambda: servers_block(counts))
    if wanted("evm"):
        block_jobs["evm"] = (counts["evm_blocks"], lambda: evm_block(counts))
    if wanted("throughput"):
        first = throughput_orders()
        block_jobs["throughput"] = (counts["tp_blocks"], lambda: throughput_block(counts, first()))
    # The smoke run (CI) only proves that every figure runs: its blocks are measured once.
    blocks = Blocks(block_jobs, attempts=1 if mode_name == "smoke" else BLOCK_ATTEMPTS)
    others = [s for s in SECTIONS + EXTRA_SECTIONS if s not in BLOCK_SECTIONS]
    blocks.plan(1 + sum(wanted(s) for s in others))
    if block_jobs:
        print(
            "== blocks: "
            + ", ".join(f"{n} x {name}" for name, (n, _) in block_jobs.items())
            + ", spread over the run",
            flush=True,
        )
    if wanted("startup"):
        blocks.run()
        with section("3. start-up"):
            figures += fig_startup(counts)
    lean_sections = ("gc", "memory", "profile")
    if any(wanted(s) for s in lean_sections):
        with Lean("raw") as lean:
            if wanted("gc"):
                blocks.run()
                with section("6. GC pauses (lean)"):
                    figures.append(fig_gc(lean, counts))
            if wanted("memory"):
                blocks.run()
                with section("7. memory (lean)"):
                    figures.append(fig_memory(lean, counts))
            if wanted("profile"):
                blocks.run()
                with section("profile (lean)"):
                    extras["profile"] = run_profile(lean, counts, out)
    if wanted("sandbox"):
        blocks.run()
        with section("1s. latency against the sandbox (informational)"):
            figures.append(fig_sandbox_latency(counts))
    if wanted("eip3009"):
        blocks.run()
        with section("5. EIP-3009 vs the x402 foundation client"):
            figures.append(fig_eip3009(counts))
    if wanted("bridge"):
        blocks.run()
        with section("8. bridge rail (sandbox)"):
            figures += fig_bridge(counts)
    blocks.finish()
    info["speed_probe_ms"] = {
        name: [b.get("probe_ms") for b in kept] for name, kept in blocks.results.items()
    }
    if blocks.results.get("latency"):
        figures += fig_latency(blocks.results["latency"])
    if blocks.results.get("servers"):
        figures.append(fig_servers(blocks.results["servers"]))
    if blocks.results.get("throughput"):
        figures.append(fig_throughput(blocks.results["throughput"]))
    if blocks.results.get("evm"):
        figures += fig_evm(blocks.results["evm"])
    figures.sort(key=lambda f: FIGURES.index(f.key) if f.key in FIGURES else len(FIGURES))
    info["seconds"] = round(time.perf_counter() - started, 1)
    info["loadavg_end"] = list(os.getloadavg())
    info["steal"] = stolen_between(ticks, cpu_ticks())
    print()
    print(table(figures))
    for f in figures:
        if f.detail:
            print(f"- {f.title.split(':')[0].split(',')[0]}: {f.detail}")
    print(
        f"\n{mode_name} run, {info['seconds']} s on {info['uname']}; load average "
        f"{info['loadavg_start'][0]:.2f} -> {info['loadavg_end'][0]:.2f}; hypervisor steal "
        + ("n/a" if info["steal"] is None else f"{info['steal']:.1%} of the CPU time")
        + ("" if (p := probe_of({"machine": info})) is None else f"; speed probe {p:.2f} ms")
        + (
            ""
            if (sig := mean_signing_ms(blocks.results.get("evm") or [])) is None
            else f"; eth-account signs a permit in {sig:.2f} ms"
        )
    )
    result = {
        "machine": info,
        "figures": {f.key: f.as_json() for f in figures},
        "table": table(figures),
        **extras,
    }
    (out / "latest.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    if figures:
        chart(figures, out / "latest.png", info)
    print(f"wrote {out / 'latest.json'}" + (f" and {out / 'latest.png'}" if figures else ""))


if __name__ == "__main__":
    main()
