"""Figure 2: paid requests per second at concurrency 50, the client against the floor,
one burst of each per block."""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable
from typing import Any

from _blocks import gate_summary
from _figure import Figure, unless
from _procs import Lean, client
from _stats import BLOCK_SPREAD, listed, over_blocks
from _targets import THROUGHPUT_RATIO

#: Paid requests in flight at once.
CONCURRENCY = 50

Block = dict[str, Any]


def throughput_block(counts: dict[str, int], first: str) -> Block:
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


def _connections(runs: dict[str, list[Block]]) -> dict[str, dict[str, int]]:
    """The most new connections any burst of each flow opened, per server."""
    return {
        kind: {
            server: max(r["connections"][server] for r in rs)
            for server in ("merchant", "payment_api")
        }
        for kind, rs in runs.items()
    }


def _connections_text(connections: dict[str, dict[str, int]]) -> str:
    churn_bound = int(CONCURRENCY * 1.1)
    no_churn = all(c <= churn_bound for c in connections["sdk"].values())
    sdk, floor = connections["sdk"], connections["floor"]
    return (
        f"new connections, most seen (merchant / payment API): SDK {sdk['merchant']} / "
        f"{sdk['payment_api']}, floor {floor['merchant']} / {floor['payment_api']} (churn "
        f"bound {churn_bound}: {'none' if no_churn else 'CHURN'})"
    )


def fig_throughput(blocks: list[Block]) -> Figure:
    n = blocks[0]["n"]
    runs = {kind: [r for b in blocks for r in b["runs"][kind]] for kind in ("sdk", "floor")}
    pairs = list(zip(runs["sdk"], runs["floor"], strict=True))
    ratios = [s["rps"] / f["rps"] for s, f in pairs]
    value, spread = over_blocks(ratios)
    overhead = [(1 / s["rps"] - 1 / f["rps"]) * 1e6 for s, f in pairs]
    cpu = {
        kind: statistics.median(r["cpu_seconds"] / n * 1e6 for r in rs) for kind, rs in runs.items()
    }
    connections = _connections(runs)
    failures = sum(r["failures"] for rs in runs.values() for r in rs)
    codes_ok = all(r["paid_codes_match"] for rs in runs.values() for r in rs)
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
        f"CPU {cpu['sdk']:.0f} vs {cpu['floor']:.0f} us per request; "
        f"{_connections_text(connections)}; failures {failures}; every served proof paid "
        f"once: {codes_ok}; {gate_summary(blocks)}"
        + unless(ok, value, THROUGHPUT_RATIO, upper=False),
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
