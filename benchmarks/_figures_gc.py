"""Figure 6: garbage-collection pauses the client causes in paid requests, each flow in
its own process against the lean servers."""

from __future__ import annotations

import math
import statistics
from typing import Any

from _figure import Figure
from _procs import Lean, client
from _targets import GC_PAUSE_MS

#: Figure 6b counts full collections per this many paid requests.
FULL_PER = 10_000

#: A pause: (generation, CPU ms).
Pause = tuple[int, float]


def attribute_pauses(sdk: list[Pause], floor: list[Pause]) -> list[Pause]:
    """The SDK process's pauses over the threshold that are the client's.

    Pauses are `(generation, CPU ms)`: the collecting thread's CPU time, so that time the
    machine gave to other processes during a collection is charged to neither flow. Per
    generation, the SDK's pauses and the floor process's (same load) are matched
    longest first; an SDK pause over the threshold is attributable to the client when the
    floor has no counterpart for it (the client made that generation collect more often)
    or the SDK's is more than the threshold longer than its counterpart (the client made
    the collection longer: more objects to scan)."""
    out: list[Pause] = []
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


def _per_generation(run: dict[str, Any]) -> dict[str, dict[str, float]]:
    """One process's pauses by generation: count, longest, median and total (CPU ms)."""
    rows = {}
    for gen in (0, 1, 2):
        ms = [cpu for g, _, cpu in run["pauses_ms"] if g == gen]
        wall = [w for g, w, _ in run["pauses_ms"] if g == gen]
        rows[str(gen)] = {
            "count": len(ms),
            "max_ms": max(ms) if ms else 0.0,
            "median_ms": statistics.median(ms) if ms else 0.0,
            "total_ms": sum(ms),
            "max_wall_ms": max(wall) if wall else 0.0,
        }
    return rows


def _generations_text(per_gen: dict[str, dict[str, dict[str, float]]]) -> str:
    return "; ".join(
        f"{flow}: "
        + ", ".join(
            f"gen{g} {row['count']}x max {row['max_ms']:.2f} ms" for g, row in per_gen[flow].items()
        )
        for flow in ("sdk", "floor")
    )


def fig_gc(lean: Lean, counts: dict[str, int]) -> list[Figure]:
    n = counts["gc_n"]
    runs = {
        flow: client("gc", {**lean.target, "flow": flow, "n": n, "warmup": counts["warmup"]})
        for flow in ("sdk", "floor")
    }
    per_gen = {flow: _per_generation(r) for flow, r in runs.items()}
    return [_fig_pauses(runs, per_gen, n), _fig_full(per_gen, n)]


def _fig_full(per_gen: dict[str, dict[str, dict[str, float]]], n: int) -> Figure:
    """Full (generation 2) collections the client caused: the SDK process's beyond the
    floor process's under the same load, per 10,000 paid requests."""
    sdk, floor = (int(per_gen[flow]["2"]["count"]) for flow in ("sdk", "floor"))
    caused = max(0, sdk - floor)
    value = caused * FULL_PER / n
    half = math.sqrt(caused) * FULL_PER / n
    return Figure(
        "gc_full",
        f"6b. Full (gen-2) collections the client causes, per {FULL_PER} paid requests",
        value,
        "collections",
        "0 (and 6: no pause > 5 ms)",
        caused == 0,
        f"{n} paid requests per flow, each in its own process: gen-2 collections SDK {sdk}, "
        f"floor {floor}; longest gen-2 CPU ms SDK {per_gen['sdk']['2']['max_ms']:.1f}, "
        f"floor {per_gen['floor']['2']['max_ms']:.1f}",
        [],
        0.0,
        {"gen2": {"sdk": sdk, "floor": floor}},
        spread=(max(0.0, value - half), value + half),
        spread_kind="+-sqrt(n): a count of rare events (Poisson)",
    )


def _fig_pauses(
    runs: dict[str, dict[str, Any]], per_gen: dict[str, dict[str, dict[str, float]]], n: int
) -> Figure:
    cpu = {flow: [(g, c) for g, _, c in r["pauses_ms"]] for flow, r in runs.items()}
    over = {flow: [p for _, p in pauses if p > GC_PAUSE_MS] for flow, pauses in cpu.items()}
    over_wall = {
        flow: [w for _, w, _ in r["pauses_ms"] if w > GC_PAUSE_MS] for flow, r in runs.items()
    }
    attributable = attribute_pauses(cpu["sdk"], cpu["floor"])
    sdk_max = max((p for _, p in cpu["sdk"]), default=0.0)
    sdk_max_wall = max((w for _, w, _ in runs["sdk"]["pauses_ms"]), default=0.0)
    count = len(attributable)
    return Figure(
        "gc",
        f"6. GC pauses > {GC_PAUSE_MS:g} ms attributable to the client in {n} paid requests",
        float(count),
        "pauses",
        "0",
        not attributable,
        f"pauses (CPU time of the collection) > {GC_PAUSE_MS:g} ms: SDK process "
        f"{len(over['sdk'])}, floor process {len(over['floor'])} (same load, each flow in its "
        f"own process; by wall time {len(over_wall['sdk'])} and {len(over_wall['floor'])}); "
        "attributable "
        f"(no floor counterpart of the same generation, or > {GC_PAUSE_MS:g} ms longer than "
        f"it): {', '.join(f'gen{g} {p:.1f} ms' for g, p in attributable) or 'none'}; "
        "longest SDK pause "
        f"{sdk_max:.2f} ms CPU ({sdk_max_wall:.2f} ms wall); {_generations_text(per_gen)}; "
        f"tracked objects at the end: SDK {runs['sdk']['tracked_objects']}, floor "
        f"{runs['floor']['tracked_objects']}",
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
        spread=(max(0.0, count - math.sqrt(count)), count + math.sqrt(count)),
        spread_kind="+-sqrt(n): a count of rare events (Poisson)",
    )
