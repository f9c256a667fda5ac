"""Figure 7: peak RSS growth over a large paid streamed download, in fresh processes
(`_memory_child.py`) against the lean merchant."""

from __future__ import annotations

import json
import statistics
import subprocess

from _figure import Figure, unless
from _procs import HERE, PY, Lean
from _targets import MEMORY_MB

MiB = 1024 * 1024
#: The step of the peak RSS readings (glibc grows the heap by 128 KiB at a time).
RSS_STEP_MB = 0.125


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
        + unless(ok, worst, MEMORY_MB, upper=True, unit="MB"),
        deltas,
        MEMORY_MB,
        {"runs": runs},
        # Every reading is a whole number of the heap's growth steps (glibc grows it by
        # 128 KiB), so one reading cannot tell values within a step apart.
        spread=(min(deltas) - RSS_STEP_MB, max(deltas) + RSS_STEP_MB),
        spread_kind=f"range over {repeats} processes, +-1 heap step (128 KiB)",
    )
