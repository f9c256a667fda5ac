"""Figures 0 (which lean server), 1a-1d (the paid GET and the pass-through GET against
the lean floor, in blocks) and 1s (the paid GET against the sandbox merchant)."""

from __future__ import annotations

import statistics
from typing import Any

from _blocks import gate_summary
from _figure import Figure, unless
from _flows import euro_options
from _procs import Lean, Sandbox, client
from _stats import (
    BLOCK_SPREAD,
    Stat,
    bootstrap,
    diff_of_medians,
    listed,
    over_blocks,
    ratio_of_medians,
    summary,
)
from _targets import LATENCY_RATIO, OVERHEAD_US, PASSTHROUGH_RATIO

Block = dict[str, Any]


# --- 0. which lean server ---------------------------------------------------------------------


def servers_block(counts: dict[str, int]) -> Block:
    """One block of figure 0: the floor against raw and ASGI servers, interleaved."""
    with Lean("raw") as raw, Lean("asgi") as asgi:
        targets = [raw.target, asgi.target]
        return client("floor", {"targets": targets, "pairs": counts["server_pairs"], "warmup": 20})


def fig_servers(blocks: list[Block]) -> Figure:
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


def latency_block(counts: dict[str, int]) -> Block:
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


def _merge_gc(blocks: list[Block]) -> dict[str, Any]:
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


class _Latency:
    """The latency blocks, read the ways figures 1a-1d need them."""

    def __init__(self, blocks: list[Block]) -> None:
        self.blocks = blocks
        self.codes_ok = all(b["paid_codes_match"] for b in blocks)
        self.gc = _merge_gc(blocks)
        self.pairs = len(self.pooled("sdk"))
        self.shape = f"{len(blocks)} blocks of {len(blocks[0]['times']['sdk'])} interleaved rounds"

    def pooled(self, name: str, source: str = "times") -> list[float]:
        return [t for b in self.blocks for t in b[source][name]]

    def per_block(self, stat: Stat, a: str, b: str, source: str = "times") -> list[float]:
        return [stat(blk[source][a], blk[source][b]) for blk in self.blocks]

    def gc_text(self, *flows: str) -> str:
        return "; ".join(_gc_summary(self.gc, f, self.pairs) for f in flows)


def fig_latency(blocks: list[Block]) -> list[Figure]:
    data = _Latency(blocks)
    return [_fig_ratio(data), _fig_overhead(data), _fig_passthrough(data), _fig_cpu(data)]


def _fig_ratio(data: _Latency) -> Figure:
    sdk, floor = data.pooled("sdk"), data.pooled("floor")
    ratios = data.per_block(ratio_of_medians, "sdk", "floor")
    ratio, ratio_ci = over_blocks(ratios)
    per_pair_diff = [(s - f) * 1e6 for s, f in zip(sdk, floor, strict=True)]
    common = {
        "sdk_us": summary([t * 1e6 for t in sdk]),
        "floor_us": summary([t * 1e6 for t in floor]),
        "floor_median_us_per_block": [
            statistics.median(b["times"]["floor"]) * 1e6 for b in data.blocks
        ],
        "median_of_pair_differences_us": statistics.median(per_pair_diff),
        "gc": data.gc,
        "gc_threshold": data.blocks[0]["gc_threshold"],
        "paid_codes_match": data.codes_ok,
    }
    ok = ratio <= LATENCY_RATIO
    return Figure(
        "latency",
        "1a. Paid euro GET, SDK / hand-written floor (lean merchant), ratio of medians",
        ratio,
        "x",
        f"<= {LATENCY_RATIO}",
        ok and data.codes_ok,
        f"mean over {data.shape} of the ratio of medians; pooled medians "
        f"{statistics.median(sdk) * 1e6:.0f} us vs {statistics.median(floor) * 1e6:.0f} us; "
        f"per block {listed(ratios)}; GC {data.gc_text('sdk', 'floor')}; every served "
        f"proof paid once: {data.codes_ok}; {gate_summary(data.blocks)}"
        + unless(ok, ratio, LATENCY_RATIO, upper=True),
        ratios,
        LATENCY_RATIO,
        common,
        spread=ratio_ci,
        spread_kind=BLOCK_SPREAD,
    )


def _fig_overhead(data: _Latency) -> Figure:
    overheads = [d * 1e6 for d in data.per_block(diff_of_medians, "sdk", "floor")]
    overhead, overhead_ci = over_blocks(overheads)
    pairs = zip(data.pooled("sdk"), data.pooled("floor"), strict=True)
    per_pair_diff = [(s - f) * 1e6 for s, f in pairs]
    ok = overhead <= OVERHEAD_US
    return Figure(
        "latency_overhead",
        "1b. Paid euro GET: client overhead, median SDK - median floor (lean merchant)",
        overhead,
        "us",
        f"<= {OVERHEAD_US:.0f} us",
        ok,
        f"mean over {data.shape}; per block {listed(overheads, '.0f')} us; "
        f"median of all per-pair differences {statistics.median(per_pair_diff):.0f} us"
        + unless(ok, overhead, OVERHEAD_US, upper=True, unit="us"),
        overheads,
        OVERHEAD_US,
        spread=overhead_ci,
        spread_kind=BLOCK_SPREAD,
    )


def _fig_passthrough(data: _Latency) -> Figure:
    sdk_free, bare = data.pooled("sdk_free"), data.pooled("bare_free")
    pts = data.per_block(ratio_of_medians, "sdk_free", "bare_free")
    pt, pt_ci = over_blocks(pts)
    ok = pt <= PASSTHROUGH_RATIO
    return Figure(
        "passthrough",
        "1c. Pass-through (non-402) GET, SDK client / bare httpx client (lean merchant)",
        pt,
        "x",
        f"<= {PASSTHROUGH_RATIO}",
        ok,
        f"mean over {data.shape}; pooled medians {statistics.median(sdk_free) * 1e6:.0f} us vs "
        f"{statistics.median(bare) * 1e6:.0f} us ({diff_of_medians(sdk_free, bare) * 1e6:+.0f}"
        f" us); per block {listed(pts)}; GC "
        + data.gc_text("sdk_free", "bare_free")
        + unless(ok, pt, PASSTHROUGH_RATIO, upper=True),
        pts,
        PASSTHROUGH_RATIO,
        {
            "sdk_us": summary([t * 1e6 for t in sdk_free]),
            "bare_us": summary([t * 1e6 for t in bare]),
        },
        spread=pt_ci,
        spread_kind=BLOCK_SPREAD,
    )


def _fig_cpu(data: _Latency) -> Figure:
    """The client process's CPU per request: the servers run elsewhere, so this is the
    client's own work (GC included), which other processes on the machine barely move."""
    cpu_diffs = [d * 1e6 for d in data.per_block(diff_of_medians, "sdk", "floor", "cpu")]
    cpu_diff, cpu_ci = over_blocks(cpu_diffs)
    cpu_sdk = statistics.median(data.pooled("sdk", "cpu"))
    cpu_floor = statistics.median(data.pooled("floor", "cpu"))
    free = data.per_block(diff_of_medians, "sdk_free", "bare_free", "cpu")
    free_diffs = [d * 1e6 for d in free]
    return Figure(
        "latency_cpu",
        "1d. Paid euro GET: client-process CPU, median SDK - median floor (informational)",
        cpu_diff,
        "us",
        "informational (the client's own work; 1b is what a user waits)",
        None,
        f"mean over {data.shape}; pooled medians {cpu_sdk * 1e6:.0f} us vs "
        f"{cpu_floor * 1e6:.0f} us of CPU per paid GET; per block "
        f"{listed(cpu_diffs, '.0f')} us; pass-through (SDK client - bare): "
        f"{statistics.fmean(free_diffs):+.1f} us",
        cpu_diffs,
        None,
        {"samples_per_flow": data.pairs},
        spread=cpu_ci,
        spread_kind=BLOCK_SPREAD,
    )


# --- 1s. against the sandbox merchant ----------------------------------------------------------


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
