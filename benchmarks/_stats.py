"""The statistics of the benchmark figures: medians, quartiles, bootstrap intervals of a
ratio of medians, and the mean over blocks with its Student-t interval."""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable

#: A statistic of two paired samples, e.g. the ratio of their medians.
Stat = Callable[[list[float], list[float]], float]

#: The spread kind of a figure measured as short blocks (`over_blocks`).
BLOCK_SPREAD = "95% t-interval over blocks"


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
    a: list[float], b: list[float], stat: Stat, resamples: int = 1000, seed: int = 6
) -> tuple[float, float]:
    """95% percentile-bootstrap interval of `stat(a', b')` over resampled *pairs*."""
    return bootstrap_rows([a, b], lambda cols: stat(cols[0], cols[1]), resamples, seed)


def bootstrap_rows(
    columns: list[list[float]],
    stat: Callable[[list[list[float]]], float],
    resamples: int = 1000,
    seed: int = 6,
) -> tuple[float, float]:
    """95% percentile-bootstrap interval of `stat(columns')` over resampled *rows*: the
    i-th values of every column were measured together (one interleaved round)."""
    n = len(columns[0])
    if n < 3:
        value = stat(columns)
        return value, value
    rng = random.Random(seed)
    indices = range(n)
    values = []
    for _ in range(resamples):
        pick = rng.choices(indices, k=n)
        values.append(stat([[column[i] for i in pick] for column in columns]))
    values.sort()
    return values[int(0.025 * resamples)], values[int(0.975 * resamples) - 1]


def ratio_of_medians(a: list[float], b: list[float]) -> float:
    return statistics.median(a) / statistics.median(b)


def diff_of_medians(a: list[float], b: list[float]) -> float:
    return statistics.median(a) - statistics.median(b)


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


def listed(values: list[float], fmt: str = ".3f") -> str:
    """Per-block values for a figure's details: `1.021, 1.000, ...`."""
    return ", ".join(format(v, fmt) for v in values)
