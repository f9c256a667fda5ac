"""Figure 5: an EIP-3009 paid GET of the x402 foundation's own merchant (on anvil), the
client's CPU against the foundation's own client, interleaved."""

from __future__ import annotations

import importlib.util
import statistics

from _figure import Figure, skipped, unless
from _procs import HERE, Proc, client
from _stats import bootstrap, ratio_of_medians, summary
from _targets import EIP3009_RATIO

_TITLE = (
    "5. EIP-3009 payment: client CPU per paid GET (signing included), ours / x402 "
    "foundation's x402HttpxClient, same merchant"
)


def fig_eip3009(counts: dict[str, int]) -> Figure:
    target = f"<= {EIP3009_RATIO}"
    if importlib.util.find_spec("x402") is None:
        return skipped("eip3009", _TITLE, target, "the x402 package is not installed")
    pairs = counts["eip3009_pairs"]
    warmup = 3
    try:
        with Proc(
            str(HERE / "_foundation_server.py"), "--payments", str(2 * (pairs + warmup) + 10)
        ) as stack:
            data = client("eip3009", {**stack.info, "pairs": pairs, "warmup": warmup})
    except Exception as exc:
        reason = f"our client cannot pay the foundation's merchant: {type(exc).__name__}: {exc}"
        return skipped("eip3009", _TITLE, target, reason[:300])
    ours, theirs = data["cpu"]["ours"], data["cpu"]["foundation"]
    value = ratio_of_medians(ours, theirs)
    wall = ratio_of_medians(data["wall"]["ours"], data["wall"]["foundation"])
    ok = value <= EIP3009_RATIO
    return Figure(
        "eip3009",
        _TITLE,
        value,
        "x",
        target,
        ok,
        f"client CPU median {statistics.median(ours) * 1e3:.2f} ms vs "
        f"{statistics.median(theirs) * 1e3:.2f} ms over {pairs} interleaved pairs; wall "
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
