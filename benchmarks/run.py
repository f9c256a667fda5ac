"""x402-eur benchmarks: `python benchmarks/run.py [--smoke|--quick] [--out DIR] [--only ...]`.

Measures every benchmark figure, prints a table and writes `<out>/latest.json`
(every sample, summaries, spreads, the machine) and `<out>/latest.png`. The floor of the
euro figures is a hand-written client against a LEAN merchant and payment API
(`_lean.py`, each in its own process); the client being measured runs in a third, fresh
process (`_client.py`). See `benchmarks/README.md` for the method and the targets.

`--compare A.json B.json C.json` prints, for each figure, the values of several runs
next to their stated spread (the reproducibility check of the README).

The figures live in `_figures_<family>.py`, their targets in `_targets.py`; this file
only decides what runs when.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _blocks import (  # noqa: E402
    BLOCK_ATTEMPTS,
    MAX_PROBE_MS,
    MAX_STEAL,
    Blocks,
    SpeedProbe,
    cpu_ticks,
    gate_summary,
    perturbation,
    stolen_between,
)
from _compare import (  # noqa: E402
    between_runs,
    compare,
    probe_of,
    relative_range,
    reproduced,
    run_signing_ms,
)
from _figure import Figure  # noqa: E402
from _figures_bridge import fig_bridge  # noqa: E402
from _figures_eip3009 import fig_eip3009  # noqa: E402
from _figures_evm import evm_block, fig_evm, mean_signing_ms  # noqa: E402
from _figures_fleet import fig_fleet  # noqa: E402
from _figures_gc import attribute_pauses, fig_gc  # noqa: E402
from _figures_latency import (  # noqa: E402
    fig_latency,
    fig_sandbox_latency,
    fig_servers,
    latency_block,
    servers_block,
)
from _figures_memory import fig_memory  # noqa: E402
from _figures_sessions import fig_sessions, fig_sessions_cpu, fig_sessions_tx  # noqa: E402
from _figures_startup import fig_startup  # noqa: E402
from _figures_throughput import fig_throughput, throughput_block, throughput_orders  # noqa: E402
from _procs import Lean, client  # noqa: E402
from _report import details, machine, summary_line, table, write  # noqa: E402
from _stats import BLOCK_SPREAD, over_blocks, t95  # noqa: E402
from _targets import FIGURES  # noqa: E402

__all__ = [  # what the tests read from here, besides `main`
    "BLOCK_SPREAD",
    "FIGURES",
    "Blocks",
    "SpeedProbe",
    "attribute_pauses",
    "between_runs",
    "compare",
    "fig_evm",
    "fig_sessions_cpu",
    "fig_sessions_tx",
    "fig_throughput",
    "gate_summary",
    "output_dir",
    "over_blocks",
    "perturbation",
    "probe_of",
    "relative_range",
    "reproduced",
    "run_signing_ms",
    "t95",
    "throughput_orders",
]

#: Repetitions per mode. `smoke` only proves that every figure still runs (CI, seconds).
COUNTS: dict[str, dict[str, int]] = {
    "smoke": {
        "latency_blocks": 2,
        "latency_pairs": 15,
        "warmup": 5,
        "server_blocks": 2,
        "server_pairs": 10,
        "tp_blocks": 1,
        "tp_n": 50,
        "gc_n": 100,
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
        "fleet_k": 2,
        "fleet_max_workers": 2,
        "fleet_rounds": 1,
        "fleet_trips": 3,
        "sessions_n": 3,
        "sessions_rounds": 2,
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
        "fleet_k": 20,
        "fleet_max_workers": 8,
        "fleet_rounds": 2,
        "fleet_trips": 20,
        "sessions_n": 10,
        "sessions_rounds": 3,
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
        "fleet_k": 40,
        "fleet_max_workers": 8,
        "fleet_rounds": 5,
        "fleet_trips": 50,
        "sessions_n": 20,
        "sessions_rounds": 10,
    },
}

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
    "fleet",
    "sessions",
)
#: Measured as short blocks spread over the run (`Blocks`), not as sections of their own.
BLOCK_SECTIONS = ("latency", "servers", "throughput", "evm")
#: Run only when named in --only: a tool for closing the gap, not a figure.
EXTRA_SECTIONS = ("profile",)

Job = Callable[[], dict[str, Any]]


@contextlib.contextmanager
def section(name: str) -> Iterator[None]:
    print(f"== {name}", flush=True)
    started, ticks = time.perf_counter(), cpu_ticks()
    yield
    steal = stolen_between(ticks, cpu_ticks())
    stolen = "" if steal is None else f", {steal:.1%} stolen by the hypervisor"
    print(f"   ({time.perf_counter() - started:.1f} s{stolen})", flush=True)


def output_dir(out: str | None, *, partial: bool) -> Path:
    """Where a run writes: `--out` when given; otherwise only a whole run (full or
    `--quick`) replaces `results/latest.{json,png}`, and a smoke run or a subset
    (`--only`) writes to `results/tmp/`."""
    if out:
        return Path(out)
    return HERE / "results" / ("tmp" if partial else "")


def run_profile(lean: Lean, counts: dict[str, int], out: Path) -> dict[str, Any]:
    """Where the client's time goes (cProfile, pyinstrument): not a figure."""
    args = {**lean.target, "n": counts["profile_n"], "warmup": counts["warmup"], "out": str(out)}
    data = client("profile", args)
    print("  own functions by self time (us per paid request):")
    for row in data["own_top"][:15]:
        print(
            f"    {row['tottime_us_per_request']:7.1f} self {row['cumtime_us_per_request']:7.1f} "
            f"cum  {row['function']}"
        )
    print(f"  wrote {out / 'profile-cprofile.txt'} and {data['pyinstrument']}")
    return data


def _block_jobs(
    counts: dict[str, int], wanted: Callable[[str], bool]
) -> dict[str, tuple[int, Job]]:
    """The block figures' jobs: how many blocks of each, and what one block runs."""
    jobs: dict[str, tuple[int, Job]] = {}
    if wanted("latency"):
        jobs["latency"] = (counts["latency_blocks"], lambda: latency_block(counts))
    if wanted("servers"):
        jobs["servers"] = (counts["server_blocks"], lambda: servers_block(counts))
    if wanted("evm"):
        jobs["evm"] = (counts["evm_blocks"], lambda: evm_block(counts))
    if wanted("throughput"):
        first = throughput_orders()
        jobs["throughput"] = (counts["tp_blocks"], lambda: throughput_block(counts, first()))
    if jobs:
        shape = ", ".join(f"{n} x {name}" for name, (n, _) in jobs.items())
        print(f"== blocks: {shape}, spread over the run", flush=True)
    return jobs


def _sections(
    counts: dict[str, int], wanted: Callable[[str], bool], blocks: Blocks, out: Path
) -> tuple[list[Figure], dict[str, Any]]:
    """The figures measured in one go, with a share of the blocks before each."""
    figures: list[Figure] = []
    extras: dict[str, Any] = {}
    if wanted("startup"):
        blocks.run()
        with section("3. start-up"):
            figures += fig_startup(counts)
    if any(wanted(s) for s in ("gc", "memory", "profile")):
        with Lean("raw") as lean:
            if wanted("gc"):
                blocks.run()
                with section("6. GC pauses (lean)"):
                    figures += fig_gc(lean, counts)
            if wanted("memory"):
                blocks.run()
                with section("7. memory (lean)"):
                    figures.append(fig_memory(lean, counts))
            if wanted("profile"):
                blocks.run()
                with section("profile (lean)"):
                    extras["profile"] = run_profile(lean, counts, out)
    for name, heading, measure in (
        ("sandbox", "1s. latency against the sandbox (informational)", fig_sandbox_latency),
        ("eip3009", "5. EIP-3009 vs the x402 foundation client", fig_eip3009),
        ("bridge", "8. bridge rail (sandbox)", fig_bridge),
        ("fleet", "9. a fleet of workers on one budget: PostgreSQL / SQLite", fig_fleet),
        ("sessions", "10. sessions (batch-settlement) vs exact EIP-3009", fig_sessions),
    ):
        if wanted(name):
            blocks.run()
            with section(heading):
                measured = measure(counts)
                figures += measured if isinstance(measured, list) else [measured]
    return figures, extras


def _block_figures(results: dict[str, list[dict[str, Any]]]) -> list[Figure]:
    figures: list[Figure] = []
    if results.get("latency"):
        figures += fig_latency(results["latency"])
    if results.get("servers"):
        figures.append(fig_servers(results["servers"]))
    if results.get("throughput"):
        figures.append(fig_throughput(results["throughput"]))
    if results.get("evm"):
        figures += fig_evm(results["evm"])
    return figures


def _parse() -> argparse.Namespace:
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
    args.only = {s.strip() for s in args.only.split(",") if s.strip()}
    unknown = args.only - set(SECTIONS) - set(EXTRA_SECTIONS)
    if unknown:
        parser.error(f"unknown sections: {sorted(unknown)}")
    args.mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    return args


def main() -> None:
    args = _parse()
    if args.compare:
        compare(args.compare, args.machine)
        return
    counts = COUNTS[args.mode]

    def wanted(name: str) -> bool:
        return name in args.only if args.only else name not in EXTRA_SECTIONS

    out = output_dir(args.out, partial=args.smoke or bool(args.only))
    out.mkdir(parents=True, exist_ok=True)
    started, ticks = time.perf_counter(), cpu_ticks()
    info = machine()
    info["mode"] = args.mode
    info["gate"] = {"max_steal": MAX_STEAL, "max_probe_ms": MAX_PROBE_MS}
    # The block figures are short blocks spread over the whole run (`Blocks`): between the
    # other sections, and the rest at the end. The smoke run (CI) only proves that every
    # figure runs: its blocks are measured once.
    blocks = Blocks(
        _block_jobs(counts, wanted), attempts=1 if args.mode == "smoke" else BLOCK_ATTEMPTS
    )
    others = [s for s in SECTIONS + EXTRA_SECTIONS if s not in BLOCK_SECTIONS]
    blocks.plan(1 + sum(wanted(s) for s in others))
    figures, extras = _sections(counts, wanted, blocks, out)
    blocks.finish()
    info["speed_probe_ms"] = {
        name: [b.get("probe_ms") for b in kept] for name, kept in blocks.results.items()
    }
    figures += _block_figures(blocks.results)
    figures.sort(key=lambda f: FIGURES.index(f.key) if f.key in FIGURES else len(FIGURES))
    info["seconds"] = round(time.perf_counter() - started, 1)
    info["loadavg_end"] = list(os.getloadavg())
    info["steal"] = stolen_between(ticks, cpu_ticks())
    print()
    print(table(figures))
    print(details(figures))
    signing = mean_signing_ms(blocks.results.get("evm") or [])
    print("\n" + summary_line(info, probe_of({"machine": info}), signing))
    write(out, info, figures, extras)


if __name__ == "__main__":
    main()
