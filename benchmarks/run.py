"""x402-eur benchmarks: `python benchmarks/run.py [--quick] [--out benchmarks/results]`.

Runs every figure of issue 6 against the sandbox on 127.0.0.1 (in its own process),
prints a table, and writes `<out>/latest.json` and `<out>/latest.png`. Every figure is a
ratio or a count measured in this same run; paired measurements are interleaved (the
order alternates from pair to pair) and summarised by their median and interquartile
range. See `benchmarks/README.md`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import datetime
import importlib.util
import json
import os
import platform
import pstats
import shutil
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _flows import SDK, HandWritten, euro_options  # noqa: E402

PY = sys.executable
MiB = 1024 * 1024


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
            "summary": summary(self.samples) if self.samples else None,
            "samples": self.samples,
            **self.extra,
        }


def skipped(key: str, title: str, target: str, reason: str) -> Figure:
    print(f"  skipped: {reason}", flush=True)
    return Figure(key, title, None, "", target, None, skipped=reason)


# --- the sandbox process ------------------------------------------------------------------


class Server:
    """`benchmarks/_server.py` in a subprocess; stops when its stdin is closed."""

    def __init__(self, *flags: str) -> None:
        self.flags = flags
        self.proc: subprocess.Popen[str] | None = None
        self.info: dict[str, Any] = {}

    def __enter__(self) -> Server:
        self.proc = subprocess.Popen(
            [PY, str(HERE / "_server.py"), *self.flags],
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
            raise RuntimeError("sandbox process failed: " + " | ".join(tail))
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


#: The user-side pool of both flows, sized for concurrency 50. httpx's default keeps only
#: 20 idle connections: at concurrency 50 it closes and re-opens a connection for nearly
#: every request, in both flows alike, which would measure httpx's defaults, not the SDK.
#: The 60 s keep-alive expiry (httpx: 5 s; the sandbox server keeps idle connections 65 s)
#: outlasts a round: with 5 s, connections the first-fit pool leaves idle for a few
#: seconds expire and are re-opened at the next peak in both flows, so the churn count
#: would measure the user's pool, not connections the SDK itself opens. See the README.
USER_LIMITS = httpx.Limits(
    max_connections=100, max_keepalive_connections=100, keepalive_expiry=60.0
)


def make_flow(kind: str, options: dict[str, Any]) -> SDK | HandWritten:
    client = httpx.AsyncClient(timeout=60, limits=USER_LIMITS)
    if kind == "sdk":
        return SDK(euro_options(options), client)
    return HandWritten(options, client)


async def _check(response: httpx.Response) -> None:
    if response.status_code != 200:
        raise RuntimeError(f"paid request answered {response.status_code}: {response.text[:200]}")


# --- 1. latency ---------------------------------------------------------------------------


async def _latency(server: Server, pairs: int, warmup: int) -> dict[str, Any]:
    url = server.url("/weather")
    flows = {k: make_flow(k, server.options) for k in ("sdk", "baseline")}
    try:
        for _ in range(warmup):
            for flow in flows.values():
                await _check(await flow.get(url))
        # Round trips per paid request, counted at the servers.
        trips: dict[str, dict[str, int]] = {}
        for kind, flow in flows.items():
            server.reset()
            for _ in range(10):
                await _check(await flow.get(url))
            stats = server.stats()
            trips[kind] = {
                "merchant": stats["merchant"]["requests"] // 10,
                "payment_api": stats["payment_api"]["requests"] // 10,
            }
        times: dict[str, list[float]] = {"sdk": [], "baseline": []}
        for i in range(pairs):
            order = ("sdk", "baseline") if i % 2 == 0 else ("baseline", "sdk")
            for kind in order:
                started = time.perf_counter()
                response = await flows[kind].get(url)
                times[kind].append(time.perf_counter() - started)
                await _check(response)
    finally:
        for flow in flows.values():
            await flow.aclose()
    return {"times": times, "round_trips": trips}


def fig_latency(server: Server, quick: bool) -> Figure:
    pairs = 100 if quick else 600
    data = asyncio.run(_latency(server, pairs, warmup=20))
    times = data["times"]
    ratios = [s / b for s, b in zip(times["sdk"], times["baseline"], strict=True)]
    s = summary(ratios)
    sdk_ms = statistics.median(times["sdk"]) * 1000
    base_ms = statistics.median(times["baseline"]) * 1000
    return Figure(
        "latency",
        "1. Paid euro request latency, SDK / hand-written",
        s["median"],
        "x",
        "median <= 1.05",
        s["median"] <= 1.05,
        f"IQR {s['p25']:.3f}-{s['p75']:.3f}, {pairs} interleaved pairs; "
        f"median {sdk_ms:.2f} ms vs {base_ms:.2f} ms",
        ratios,
        1.05,
        {
            "sdk_ms": summary([t * 1000 for t in times["sdk"]]),
            "baseline_ms": summary([t * 1000 for t in times["baseline"]]),
            "round_trips_per_paid_request": data["round_trips"],
        },
    )


# --- 2. throughput ------------------------------------------------------------------------


async def _burst(server: Server, kind: str, n: int, concurrency: int) -> dict[str, Any]:
    url = server.url("/weather")
    flow = make_flow(kind, server.options)
    server.reset()
    remaining = n
    failures = 0
    errors: dict[str, int] = {}

    async def worker() -> None:
        nonlocal remaining, failures
        while remaining > 0:
            remaining -= 1
            try:
                response = await flow.get(url)
            except Exception as exc:  # counted and reported, not fatal
                failures += 1
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                continue
            if response.status_code != 200:
                failures += 1
                errors[str(response.status_code)] = errors.get(str(response.status_code), 0) + 1

    try:
        started = time.perf_counter()
        async with asyncio.timeout(300):
            await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    finally:
        await flow.aclose()
    stats = server.stats()
    return {
        "seconds": elapsed,
        "rps": n / elapsed,
        "failures": failures,
        "errors": errors,
        "merchant_connections": stats["merchant"]["connections"],
        "payment_api_connections": stats["payment_api"]["connections"],
        "merchant_requests": stats["merchant"]["requests"],
        "payment_api_requests": stats["payment_api"]["requests"],
    }


def fig_throughput(server: Server, quick: bool) -> Figure:
    n, concurrency = (300, 50) if quick else (1000, 50)
    rounds = 2 if quick else 5
    runs: dict[str, list[dict[str, Any]]] = {"sdk": [], "baseline": []}
    asyncio.run(_burst(server, "sdk", 100, concurrency))  # warm both code paths
    asyncio.run(_burst(server, "baseline", 100, concurrency))
    for i in range(rounds):
        order = ("sdk", "baseline") if i % 2 == 0 else ("baseline", "sdk")
        for kind in order:
            result = asyncio.run(_burst(server, kind, n, concurrency))
            runs[kind].append(result)
            print(
                f"    {kind:8s} {result['rps']:7.1f} req/s  connections: merchant "
                f"{result['merchant_connections']}, payment API "
                f"{result['payment_api_connections']}, failures {result['failures']} "
                f"{result['errors']}",
                flush=True,
            )
    ratios = [s["rps"] / b["rps"] for s, b in zip(runs["sdk"], runs["baseline"], strict=True)]
    med = statistics.median(ratios)
    # Churn means connections that scale with the number of requests (closed and
    # re-opened along the run). A fresh pool opens about `concurrency` connections per
    # server; a pool hand-off race (a request asking for a connection a moment before
    # another one is returned) can add one or two. So: at most 1.1 x concurrency per
    # server for `n` requests, i.e. bounded by the concurrency, not by the request count.
    max_conn = {
        kind: max(max(r["merchant_connections"], r["payment_api_connections"]) for r in rs)
        for kind, rs in runs.items()
    }
    per_server = {
        kind: {
            "merchant": max(r["merchant_connections"] for r in rs),
            "payment_api": max(r["payment_api_connections"] for r in rs),
        }
        for kind, rs in runs.items()
    }
    failures = sum(r["failures"] for rs in runs.values() for r in rs)
    churn_bound = int(concurrency * 1.1)
    no_churn = max_conn["sdk"] <= churn_bound
    s = summary(ratios)
    return Figure(
        "throughput",
        f"2. Throughput, {n} paid requests at concurrency {concurrency}, SDK / hand-written",
        med,
        "x",
        f">= 0.90 and no connection churn (new connections per server <= {churn_bound} "
        f"for {n} requests)",
        med >= 0.9 and no_churn and failures == 0,
        f"IQR {s['p25']:.3f}-{s['p75']:.3f} over {rounds} interleaved rounds; "
        f"SDK {statistics.median(r['rps'] for r in runs['sdk']):.0f} req/s vs "
        f"{statistics.median(r['rps'] for r in runs['baseline']):.0f}; new connections, most "
        f"seen (merchant / payment API): SDK {per_server['sdk']['merchant']} / "
        f"{per_server['sdk']['payment_api']}, hand-written "
        f"{per_server['baseline']['merchant']} / {per_server['baseline']['payment_api']}; "
        f"failures {failures}",
        ratios,
        0.9,
        {
            "runs": runs,
            "max_new_connections_per_server": max_conn,
            "max_new_connections_by_server": per_server,
        },
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


def _import_time(key: str) -> tuple[float, list[str]]:
    out = subprocess.run(
        [PY, "-c", _IMPORT_SNIPPET.format(statement=IMPORTS[key])],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "0"},
    ).stdout.split()
    return float(out[0]), [m for m in (out[1] if len(out) > 1 else "").split(",") if m]


def _wall(cmd: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(cmd, capture_output=True, check=True)
    return time.perf_counter() - started


def import_profile(statement: str, top: int = 12) -> list[dict[str, Any]]:
    """`python -X importtime -c statement`: the heaviest imports (cumulative µs)."""
    err = subprocess.run(
        [PY, "-X", "importtime", "-c", statement],
        capture_output=True,
        text=True,
        check=True,
    ).stderr
    rows = []
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


def fig_startup(quick: bool) -> list[Figure]:
    runs = 12 if quick else 30
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
            "x402_client",
            "import",
            "3a. Start-up: `import x402_client` / `import httpx` (fresh processes)",
            True,
        ),
        (
            "api",
            "import_api",
            "3a'. Start-up: `from x402_client import with_eur_payment, PaymentOptions`"
            " / `import httpx`",
            False,
        ),
    ):
        ours_t = times[key]
        ratios = [o / h for o, h in zip(ours_t, httpx_t, strict=True)]
        s = summary(ratios)
        figures.append(
            Figure(
                fig_key,
                title,
                s["median"],
                "x",
                "median <= 1.30" if target else "informational (the 1.30 target is 3a's)",
                s["median"] <= 1.3 if target else None,
                f"IQR {s['p25']:.2f}-{s['p75']:.2f}, {runs} interleaved runs; median "
                f"{statistics.median(ours_t) * 1000:.0f} ms vs "
                f"{statistics.median(httpx_t) * 1000:.0f} ms",
                ratios,
                1.3,
                {
                    "statement": IMPORTS[key],
                    "ms": summary([t * 1000 for t in ours_t]),
                    "httpx_ms": summary([t * 1000 for t in httpx_t]),
                    "importtime_top": import_profile(IMPORTS[key]),
                    "importtime_httpx_top": import_profile(IMPORTS["httpx"]),
                },
            )
        )
    heavy = heavy_seen["x402_client"]
    figures.append(
        Figure(
            "lazy_evm",
            "3b. web3 / eth-account modules loaded by `import x402_client`",
            float(len(heavy)),
            "modules",
            "0",
            not heavy,
            (", ".join(sorted(heavy)) or "none of web3, eth_account, eth_abi")
            + "; with the usable API: "
            + (", ".join(sorted(heavy_seen["api"])) or "none"),
        )
    )
    if importlib.util.find_spec("x402_client.cli") is None:
        figures.append(
            skipped(
                "cli",
                "3c. Start-up: `x402-eur --help` / `python -c 'import httpx'` (wall)",
                "median <= 1.30",
                "x402_client.cli does not exist yet",
            )
        )
        return figures
    script = shutil.which("x402-eur", path=str(Path(PY).parent)) or ""
    cli = [script, "--help"] if script else [PY, "-m", "x402_client.cli", "--help"]
    base = [PY, "-c", "import httpx"]
    try:
        _wall(cli)
    except subprocess.CalledProcessError as exc:
        figures.append(
            skipped(
                "cli",
                "3c. Start-up: `x402-eur --help` / `python -c 'import httpx'` (wall)",
                "median <= 1.30",
                f"`{' '.join(cli)}` failed with exit code {exc.returncode}",
            )
        )
        return figures
    cli_t: list[float] = []
    base_t: list[float] = []
    for i in range(runs):
        pair = [(cli, cli_t), (base, base_t)]
        for cmd, bucket in pair if i % 2 == 0 else pair[::-1]:
            bucket.append(_wall(cmd))
    ratios = [c / b for c, b in zip(cli_t, base_t, strict=True)]
    s = summary(ratios)
    figures.append(
        Figure(
            "cli",
            "3c. Start-up: `x402-eur --help` / `python -c 'import httpx'` (wall)",
            s["median"],
            "x",
            "median <= 1.30",
            s["median"] <= 1.3,
            f"IQR {s['p25']:.2f}-{s['p75']:.2f}; median {statistics.median(cli_t) * 1000:.0f} ms "
            f"vs {statistics.median(base_t) * 1000:.0f} ms",
            ratios,
            1.3,
        )
    )
    return figures


# --- 6. memory ----------------------------------------------------------------------------


def fig_memory(server: Server, quick: bool) -> Figure:
    size = 200 * MiB
    repeats = 1 if quick else 3
    deltas: list[float] = []
    runs = []
    options = json.dumps(euro_options(server.options))
    for _ in range(repeats):
        out = subprocess.run(
            [PY, str(HERE / "_memory_child.py"), server.url("/download"), options, str(size)],
            capture_output=True,
            text=True,
            check=True,
            timeout=300,
        ).stdout
        result = json.loads(out.strip().splitlines()[-1])
        if result["received"] != size or not result["paid"]:
            raise RuntimeError(f"download incomplete or unpaid: {result}")
        runs.append(result)
        deltas.append((result["peak_after_kib"] - result["peak_before_kib"]) / 1024)
    worst = max(deltas)
    return Figure(
        "memory",
        "6. Peak RSS rise, paid 200 MB streamed download",
        worst,
        "MB",
        "< 30 MB",
        worst < 30,
        f"worst of {repeats} fresh processes; "
        f"{size / MiB / statistics.median(r['seconds'] for r in runs):.0f} MB/s",
        deltas,
        30.0,
        {"runs": runs},
    )


# --- 4. EVM rail --------------------------------------------------------------------------


def _sign_seconds(profile: cProfile.Profile) -> float:
    """Cumulative time in eth-account's signing entry points (the outermost ones)."""
    stats = pstats.Stats(profile)
    total = 0.0
    for (filename, _, name), row in stats.stats.items():  # type: ignore[attr-defined]
        if "eth_account" in filename and name.startswith("sign") and "account.py" in filename:
            total += row[3]
    return total


async def _evm_payments(server: Server, n: int) -> dict[str, Any]:
    from x402_client import with_eur_payment

    options = {"evm": server.options["evm"]}  # no managed account: the euro entry is skipped
    url = server.url("/weather")
    async with with_eur_payment(httpx.AsyncClient(timeout=60), options) as client:
        for _ in range(2):  # warm-up: token name, spender, nonce caches
            await _check(await client.get(url))
        server.reset()
        profile = cProfile.Profile()
        cpu0 = time.process_time()
        profile.enable()
        for _ in range(n):
            response = await client.get(url)
            await _check(response)
        profile.disable()
        cpu = time.process_time() - cpu0
    stats = server.stats()
    calls = sum(c["calls"] for c in stats["rpc"].values())
    methods: dict[str, int] = {}
    for chain in stats["rpc"].values():
        for method, count in chain["methods"].items():
            methods[method] = methods.get(method, 0) + count
    return {
        "rpc_calls_per_payment": calls / n,
        "methods": methods,
        "client_cpu_ms_per_payment": cpu * 1000 / n,
        "signing_cpu_ms_per_payment": _sign_seconds(profile) * 1000 / n,
    }


def fig_evm(quick: bool) -> list[Figure]:
    title_rpc = "4a. EVM rail: JSON-RPC calls per permit payment (after warm-up)"
    title_cpu = "4b. EVM rail: signing CPU per payment"
    reason = None
    if importlib.util.find_spec("x402_client._rails.evm") is None:
        reason = "the EVM rail (x402_client._rails.evm) does not exist yet"
    elif importlib.util.find_spec("x402_client.sandbox._evm") is None:
        reason = "Sandbox(evm=True) is not available yet (x402_client.sandbox._evm missing)"
    if reason:
        return [
            skipped("evm_rpc", title_rpc, "<= 2", reason),
            skipped("evm_cpu", title_cpu, "informational", reason),
        ]
    n = 5 if quick else 20
    try:
        with Server("--evm") as server:
            if "evm" not in server.options:
                raise RuntimeError("the sandbox gave no EVM options")
            data = asyncio.run(_evm_payments(server, n))
    except Exception as exc:
        reason = f"EVM sandbox or rail not working yet: {type(exc).__name__}: {exc}"[:300]
        return [
            skipped("evm_rpc", title_rpc, "<= 2", reason),
            skipped("evm_cpu", title_cpu, "informational", reason),
        ]
    calls = data["rpc_calls_per_payment"]
    return [
        Figure(
            "evm_rpc",
            title_rpc,
            calls,
            "calls",
            "<= 2",
            calls <= 2,
            f"{n} payments; by method: {data['methods']}",
            [],
            2.0,
            data,
        ),
        Figure(
            "evm_cpu",
            title_cpu,
            data["signing_cpu_ms_per_payment"],
            "ms",
            "informational",
            None,
            f"client CPU per paid request {data['client_cpu_ms_per_payment']:.1f} ms",
            [],
            None,
            data,
        ),
    ]


# --- 5. bridge rail -----------------------------------------------------------------------


async def _bridge_payments(server: Server, n: int) -> dict[str, Any]:
    from x402_client import with_eur_payment

    url = server.url("/report")
    async with with_eur_payment(httpx.AsyncClient(timeout=120), euro_options(server.options)) as c:
        server.reset()
        for _ in range(n):
            response = await c.get(url)
            await _check(response)
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


def fig_bridge(quick: bool) -> list[Figure]:
    title_delay = "5a. Bridge: blockchainTxId appearing -> proof sent"
    title_polls = "5b. Bridge: polls per minute of waiting"
    reason = None
    if importlib.util.find_spec("x402_client.sandbox._chain_a") is None:
        reason = "Sandbox(chain_a=True) is not available yet (x402_client.sandbox._chain_a missing)"
    if reason:
        return [
            skipped("bridge_delay", title_delay, "median < 0.5 s", reason),
            skipped("bridge_polls", title_polls, "<= 60 / min", reason),
        ]
    try:
        with Server("--chain-a", "--bridge-delay", "0.5") as server:
            short = asyncio.run(_bridge_payments(server, 3 if quick else 10))
        with Server("--chain-a", "--bridge-delay", "5" if quick else "20") as server:
            long = asyncio.run(_bridge_payments(server, 1))
    except Exception as exc:
        reason = f"chain-A sandbox or bridge rail not working yet: {type(exc).__name__}: {exc}"
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
        ),
    ]


# --- output -------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    return {
        "uname": " ".join(platform.uname()),
        "nproc": os.cpu_count(),
        "python": sys.version.split()[0],
        "httpx": httpx.__version__,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def table(figures: list[Figure]) -> str:
    rows = [("Figure", "Measured", "Target", "Result")]
    for f in figures:
        if f.skipped:
            rows.append((f.title, "-", f.target, f"skipped: {f.skipped}"))
            continue
        value = "-" if f.value is None else f"{f.value:.3g} {f.unit}"
        verdict = {True: "PASS", False: "FAIL", None: "info"}[f.passed]
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
    cols = 3
    rows = (len(shown) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.6 * rows), squeeze=False)
    for ax, f in zip(axes.flat, shown, strict=False):
        ax.set_title(textwrap.fill(f.title, 52), fontsize=8)
        if f.skipped:
            ax.text(
                0.5,
                0.5,
                "skipped:\n" + f.skipped[:90],
                ha="center",
                va="center",
                fontsize=7,
                wrap=True,
                transform=ax.transAxes,
            )
            ax.set_axis_off()
            continue
        if len(f.samples) > 1:
            ax.boxplot(f.samples, widths=0.5)
            ax.set_xticks([])
        else:
            ax.bar([0], [f.value or 0], width=0.5)
            ax.set_xticks([])
        if f.target_value is not None:
            ax.axhline(f.target_value, color="red", linestyle="--", label=f"target {f.target}")
            ax.legend(fontsize=6, loc="best")
        verdict = {True: "PASS", False: "FAIL", None: ""}[f.passed]
        ax.set_ylabel(f.unit)
        ax.set_xlabel(f"{f.value:.3g} {f.unit} {verdict}", fontsize=8)
    for ax in list(axes.flat)[len(shown) :]:
        ax.set_axis_off()
    fig.suptitle(
        f"x402-eur benchmarks — {info['date']} — {info['nproc']} CPUs, Python {info['python']}",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


@contextlib.contextmanager
def section(name: str) -> Iterator[None]:
    print(f"== {name}", flush=True)
    started = time.perf_counter()
    yield
    print(f"   ({time.perf_counter() - started:.1f} s)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (~1-2 min)")
    parser.add_argument("--out", default=str(HERE / "results"), help="output directory")
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated subset: latency,throughput,startup,memory,evm,bridge",
    )
    args = parser.parse_args()
    only = {s.strip() for s in args.only.split(",") if s.strip()}

    def wanted(name: str) -> bool:
        return not only or name in only

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    info = machine()
    figures: list[Figure] = []
    if wanted("startup"):
        with section("3. start-up"):
            figures += fig_startup(args.quick)
    if wanted("latency") or wanted("throughput") or wanted("memory"):
        with Server() as server:
            if wanted("latency"):
                with section("1. latency"):
                    figures.append(fig_latency(server, args.quick))
            if wanted("throughput"):
                with section("2. throughput"):
                    figures.append(fig_throughput(server, args.quick))
            if wanted("memory"):
                with section("6. memory"):
                    figures.append(fig_memory(server, args.quick))
    if wanted("evm"):
        with section("4. EVM rail"):
            figures += fig_evm(args.quick)
    if wanted("bridge"):
        with section("5. bridge rail"):
            figures += fig_bridge(args.quick)
    order = [
        "latency",
        "throughput",
        "import",
        "import_api",
        "lazy_evm",
        "cli",
        "evm_rpc",
        "evm_cpu",
        "bridge_delay",
        "bridge_polls",
        "memory",
    ]
    figures.sort(key=lambda f: order.index(f.key) if f.key in order else 99)
    info["seconds"] = round(time.perf_counter() - started, 1)
    info["mode"] = "quick" if args.quick else "full"
    print()
    print(table(figures))
    for f in figures:
        if f.detail:
            print(f"- {f.title.split(':')[0]}: {f.detail}")
    print(f"\n{info['mode']} run, {info['seconds']} s on {info['uname']}")
    result = {
        "machine": info,
        "figures": {f.key: f.as_json() for f in figures},
        "table": table(figures),
    }
    (out / "latest.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    chart(figures, out / "latest.png", info)
    print(f"wrote {out / 'latest.json'} and {out / 'latest.png'}")


if __name__ == "__main__":
    main()
