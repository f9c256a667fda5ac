"""`run.py --compare`: do several runs agree? Each figure's values next to the smallest
spread the runs state, and the machine of each run (speed probe, eth-account's signing)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from _figures_evm import mean_signing_ms
from _report import fmt
from _stats import listed, over_blocks
from _targets import FIGURES


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
    """A run's eth-account signing time per permit, ms, from its JSON; None when it has no
    EVM blocks."""
    return mean_signing_ms((run.get("figures", {}).get("evm_rpc") or {}).get("blocks") or [])


def probe_of(run: dict[str, Any]) -> float | None:
    """The median speed-probe reading over every block of a run (`SpeedProbe`)."""
    per_kind = run["machine"].get("speed_probe_ms") or {}
    readings = [v for values in per_kind.values() for v in values if v is not None]
    return statistics.median(readings) if readings else None


def _figures_table(runs: list[dict[str, Any]]) -> None:
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
        shown = " | ".join(f"{fmt(v)}" for v in values)
        spread_text = "-" if spread is None else fmt(spread)
        verdict = reproduced(values, spreads)
        print(f"| {key} | {shown} | {fmt(max(values) - min(values))} | {spread_text} | {verdict} |")


def compare(paths: list[str], machine: list[str] | None = None) -> None:
    """Print each figure's value in several runs next to its stated spread.

    The figures are those this code writes (`FIGURES`): a key that older runs have and it
    no longer writes (such as `evm_cpu`) is not compared. Each run's machine follows: its
    speed probe and eth-account's signing time (`run_signing_ms`). With `machine` (runs
    made for the purpose, e.g. `--only evm`), the signing time is checked against the
    spread between those runs (`between_runs`)."""
    runs = [json.loads(Path(p).read_text()) for p in paths]
    _figures_table(runs)

    def per_run(values: list[float | None], fmt: str) -> str:
        return ", ".join("-" if v is None else format(v, fmt) for v in values)

    signing = [run_signing_ms(r) for r in runs]
    print(
        "\nThe machine (the speed probe's median over every block of the run, ms; lower is "
        f"quieter): {per_run([probe_of(r) for r in runs], '.2f')}; eth-account's signing "
        f"per permit, ms: {per_run(signing, '.3f')}"
    )
    if not machine:
        return
    purpose = [run_signing_ms(json.loads(Path(p).read_text())) for p in machine]
    if None in purpose or None in signing or len(purpose) < 2:
        print("\nSigning between runs: skipped (a run has no EVM blocks, or fewer than 2)")
        return
    verdict = between_runs(
        [v for v in signing if v is not None], [v for v in purpose if v is not None]
    )
    against = f"against {len(purpose)} runs made for the purpose"
    print(f"\nSigning between runs, {against}: {verdict}")
