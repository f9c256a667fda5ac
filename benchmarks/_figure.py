"""One row of the benchmark table (`Figure`) and the wording shared by every figure."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from _stats import summary


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


def unless(ok: bool, value: float, target: float, *, upper: bool, unit: str = "x") -> str:
    """`; missed by ...` for a figure's details when its target was missed, else ''."""
    return "" if ok else "; " + missed_by(value, target, upper=upper, unit=unit)
