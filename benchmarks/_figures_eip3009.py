"""Figures 5 and 5b: an EIP-3009 paid GET of the x402 foundation's own merchant (on
anvil), the client against the foundation's own client and against the pre-signed floor
(the same two round trips by hand, headers signed beforehand), interleaved."""

from __future__ import annotations

import importlib.util
import statistics
from typing import Any

from _figure import Figure, skipped, unless
from _procs import HERE, Proc, client
from _stats import bootstrap, bootstrap_rows, ratio_of_medians, summary
from _targets import EIP3009_OWN_RATIO, EIP3009_RATIO

_TITLE = (
    "5. EIP-3009 payment: client CPU per paid GET (signing included), ours / x402 "
    "foundation's x402HttpxClient, same merchant"
)
_TITLE_OWN = (
    "5b. EIP-3009 paid GET: client's own CPU (median minus the pre-signed floor's), ours / "
    "x402 foundation's"
)
_TARGET = f"<= {EIP3009_RATIO}"
_TARGET_OWN = f"<= {EIP3009_OWN_RATIO}"
_WARMUP = 3


def fig_eip3009(counts: dict[str, int]) -> list[Figure]:
    if importlib.util.find_spec("x402") is None:
        return _skipped("the x402 package is not installed")
    pairs = counts["eip3009_pairs"]
    payments = 3 * (pairs + _WARMUP) + 10  # three flows, each pays every round
    try:
        with Proc(str(HERE / "_foundation_server.py"), "--payments", str(payments)) as stack:
            data = client("eip3009", {**stack.info, "pairs": pairs, "warmup": _WARMUP})
    except Exception as exc:
        reason = f"our client cannot pay the foundation's merchant: {type(exc).__name__}: {exc}"
        return _skipped(reason[:300])
    return [_fig_ratio(data, pairs), _fig_own(data, pairs)]


def _skipped(reason: str) -> list[Figure]:
    return [
        skipped("eip3009", _TITLE, _TARGET, reason),
        skipped("eip3009_own", _TITLE_OWN, _TARGET_OWN, reason),
    ]


def _fig_ratio(data: dict[str, Any], pairs: int) -> Figure:
    ours, theirs = data["cpu"]["ours"], data["cpu"]["foundation"]
    value = ratio_of_medians(ours, theirs)
    wall = ratio_of_medians(data["wall"]["ours"], data["wall"]["foundation"])
    ok = value <= EIP3009_RATIO
    return Figure(
        "eip3009",
        _TITLE,
        value,
        "x",
        _TARGET,
        ok,
        f"client CPU median {statistics.median(ours) * 1e3:.2f} ms vs "
        f"{statistics.median(theirs) * 1e3:.2f} ms over {pairs} interleaved rounds; wall "
        f"{statistics.median(data['wall']['ours']) * 1e3:.1f} ms vs "
        f"{statistics.median(data['wall']['foundation']) * 1e3:.1f} ms ({wall:.3f} x; the "
        "merchant settles on anvil before answering)"
        + unless(ok, value, EIP3009_RATIO, upper=True),
        [o / t for o, t in zip(ours, theirs, strict=True)],
        EIP3009_RATIO,
        {
            "cpu_ms": {k: summary([t * 1e3 for t in v]) for k, v in data["cpu"].items()},
            "wall_ms": {k: summary([t * 1e3 for t in v]) for k, v in data["wall"].items()},
            "wall_ratio": wall,
            "gc": data["gc"],
        },
        spread=bootstrap(ours, theirs, ratio_of_medians),
        spread_kind="95% bootstrap CI",
    )


def own_ratio(columns: list[list[float]]) -> float:
    """(median ours - median floor) / (median foundation's - median floor): each client's
    own time over the pre-signed floor, ours against the foundation's."""
    ours, theirs, floor = (statistics.median(c) for c in columns)
    return (ours - floor) / (theirs - floor)


def _fig_own(data: dict[str, Any], pairs: int) -> Figure:
    columns = [data["cpu"][k] for k in ("ours", "foundation", "floor")]
    ours, theirs, floor = (statistics.median(c) * 1e6 for c in columns)
    value = own_ratio(columns)
    walls = [data["wall"][k] for k in ("ours", "foundation", "floor")]
    w_ours, w_theirs, w_floor = (statistics.median(c) * 1e6 for c in walls)
    ok = value <= EIP3009_OWN_RATIO
    return Figure(
        "eip3009_own",
        _TITLE_OWN,
        value,
        "x",
        _TARGET_OWN,
        ok,
        f"client CPU over the floor's {floor:.0f} us: ours {ours - floor:.0f} us, the "
        f"foundation's {theirs - floor:.0f} us, over {pairs} interleaved rounds; by wall "
        f"time (floor {w_floor / 1e3:.1f} ms): ours {w_ours - w_floor:+.0f} us, the "
        f"foundation's {w_theirs - w_floor:+.0f} us ({own_ratio(walls):.3f} x)"
        + unless(ok, value, EIP3009_OWN_RATIO, upper=True),
        [],
        EIP3009_OWN_RATIO,
        {
            "own_cpu_us": {"ours": ours - floor, "foundation": theirs - floor},
            "own_wall_us": {"ours": w_ours - w_floor, "foundation": w_theirs - w_floor},
            "wall_ratio": own_ratio(walls),
        },
        spread=bootstrap_rows(columns, own_ratio),
        spread_kind="95% bootstrap CI",
    )
