"""What a run reports: the table (printed and in the JSON), each figure's details, the
machine's summary line, `latest.json` and the chart `latest.png`."""

from __future__ import annotations

import datetime
import json
import os
import platform
import sys
import textwrap
from pathlib import Path
from typing import Any

import httpx
from _figure import Figure

VERDICTS = {True: "met", False: "MISSED", None: "info"}


def machine() -> dict[str, Any]:
    return {
        "uname": " ".join(platform.uname()),
        "nproc": os.cpu_count(),
        "python": sys.version.split()[0],
        "httpx": httpx.__version__,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "loadavg_start": list(os.getloadavg()),
    }


def fmt(value: float) -> str:
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"


def _row(f: Figure) -> tuple[str, str, str, str]:
    if f.skipped:
        return f.title, "-", f.target, f"skipped: {f.skipped}"
    value = "-" if f.value is None else f"{fmt(f.value)} {f.unit}"
    if f.spread is not None and f.spread[0] != f.spread[1]:
        value += f" [{fmt(f.spread[0])}-{fmt(f.spread[1])}]"
    return f.title, value, f.target, VERDICTS[f.passed]


def table(figures: list[Figure]) -> str:
    rows = [("Figure", "Measured [spread]", "Target", "Result"), *map(_row, figures)]
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


def details(figures: list[Figure]) -> str:
    """Each figure's details, one line each, under its number."""
    return "\n".join(
        f"- {f.title.split(':')[0].split(',')[0]}: {f.detail}" for f in figures if f.detail
    )


def summary_line(info: dict[str, Any], probe_ms: float | None, signing: float | None) -> str:
    """The run and the machine in one line: duration, load, steal, probe, signing."""
    return (
        f"{info['mode']} run, {info['seconds']} s on {info['uname']}; load average "
        f"{info['loadavg_start'][0]:.2f} -> {info['loadavg_end'][0]:.2f}; hypervisor steal "
        + ("n/a" if info["steal"] is None else f"{info['steal']:.1%} of the CPU time")
        + ("" if probe_ms is None else f"; speed probe {probe_ms:.2f} ms")
        + ("" if signing is None else f"; eth-account signs a permit in {signing:.2f} ms")
    )


def write(out: Path, info: dict[str, Any], figures: list[Figure], extras: dict[str, Any]) -> None:
    """`latest.json` (every figure, the machine, the table) and the chart `latest.png`."""
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


def _panel(ax: Any, f: Figure) -> None:
    """One figure's panel: its samples, value, spread and target."""
    ax.set_title(textwrap.fill(f.title, 48), fontsize=7)
    if f.skipped:
        text = "skipped:\n" + textwrap.fill(f.skipped[:160], 40)
        ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=7, transform=ax.transAxes)
        ax.set_axis_off()
        return
    if len(f.samples) > 1:
        ax.boxplot(f.samples, widths=0.5, showfliers=False)
        ax.plot([1], [f.value], marker="D", color="black", label=f"value {fmt(f.value or 0)}")
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
    ax.set_xlabel(f"{fmt(f.value or 0)} {f.unit} {verdict}", fontsize=8)


def chart(figures: list[Figure], path: Path, info: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [f for f in figures if f.key != "lazy_evm"]
    cols = 4
    rows = (len(shown) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.6 * rows), squeeze=False)
    for ax, f in zip(axes.flat, shown, strict=False):
        _panel(ax, f)
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
