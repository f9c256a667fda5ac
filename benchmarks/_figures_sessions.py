"""Figures 10a and 10b: N paid requests in one session (`batch-settlement`: one deposit,
then a voucher per request, claimed and settled by the merchant as one batch) against N
`exact` EIP-3009 payments (one transfer on chain each), our client paying the sandbox's
two merchants on one anvil chain in interleaved rounds."""

from __future__ import annotations

import statistics
from typing import Any

from _figure import Figure, skipped, unless
from _procs import HERE, Proc, client
from _stats import bootstrap_rows
from _targets import SESSIONS_CPU_RATIO, SESSIONS_TX_SHARE

_TITLE_TX = (
    "10a. Sessions: on-chain transactions per paid request, exact EIP-3009 / a session "
    "of N requests (its deposit, claim and settlement included)"
)
_TITLE_CPU = "10b. Sessions: client CPU per paid request, a session / exact EIP-3009"
_CPU_TARGET = f"<= {SESSIONS_CPU_RATIO}"


def _tx_target(n: int) -> str:
    return f">= N/3 = {SESSIONS_TX_SHARE * n:.3g} (N = {n})"


def fig_sessions(counts: dict[str, int]) -> list[Figure]:
    n, rounds = counts["sessions_n"], counts["sessions_rounds"]
    payments = (rounds + 1) * n + 10  # the warm-up round too
    try:
        with Proc(str(HERE / "_sessions_server.py"), "--payments", str(payments)) as stack:
            data = client("sessions", {**stack.info, "n": n, "rounds": rounds})
    except Exception as exc:
        reason = f"the sandbox's merchants cannot be paid: {type(exc).__name__}: {exc}"[:300]
        return [
            skipped("sessions_tx", _TITLE_TX, _tx_target(n), reason),
            skipped("sessions_cpu", _TITLE_CPU, _CPU_TARGET, reason),
        ]
    return [fig_sessions_tx(data["rounds"], n), fig_sessions_cpu(data["rounds"], n)]


def _session_txs(round_: dict[str, Any]) -> int:
    """A round's transactions for the session: its requests' (deposits) and its batch's."""
    return int(sum(round_["txs"]["session"])) + int(round_["batch_txs"])


def tx_factor(columns: list[list[float]]) -> float:
    """How many times fewer transactions per request the session made: exact's total
    over the session's (both paid the same number of requests)."""
    session, exact = columns
    return sum(exact) / sum(session)


def fig_sessions_tx(rounds: list[dict[str, Any]], n: int) -> Figure:
    session = [float(_session_txs(r)) for r in rounds]
    exact = [float(sum(r["txs"]["exact"])) for r in rounds]
    requests = n * len(rounds)
    value = tx_factor([session, exact])
    target = SESSIONS_TX_SHARE * n
    ok = value >= target * (1 - 1e-9)
    deposits = sum(sum(r["txs"]["session"]) for r in rounds)
    batches = sum(int(r["batch_txs"]) for r in rounds)
    return Figure(
        "sessions_tx",
        _TITLE_TX,
        value,
        "x",
        _tx_target(n),
        ok,
        f"{len(rounds)} rounds of N = {n} paid requests of each, on-chain transactions "
        f"per request: exact {sum(exact) / requests:.3g} ({sum(exact):g} in all), "
        f"the session {sum(session) / requests:.3g} ({deposits} during its requests: the "
        f"deposits; {batches} in the merchant's claims and settlements); per round, the "
        f"session {', '.join(f'{v:g}' for v in session)}" + unless(ok, value, target, upper=False),
        [e / s for s, e in zip(session, exact, strict=True)],
        target,
        {
            "n": n,
            "rounds": len(rounds),
            "requests": requests,
            "session_txs": session,
            "session_deposit_txs": deposits,
            "session_batch_txs": batches,
            "exact_txs": exact,
        },
        spread=bootstrap_rows([session, exact], tx_factor),
        spread_kind="95% bootstrap CI over rounds",
    )


def cpu_ratio(columns: list[list[float]]) -> float:
    """The session's CPU per request over exact's: the ratio of their totals (the same
    number of requests each), so that a session's deposit counts in full."""
    session, exact = columns
    return sum(session) / sum(exact)


def fig_sessions_cpu(rounds: list[dict[str, Any]], n: int) -> Figure:
    session = [sum(r["cpu"]["session"]) for r in rounds]
    exact = [sum(r["cpu"]["exact"]) for r in rounds]
    value = cpu_ratio([session, exact])
    ok = value <= SESSIONS_CPU_RATIO
    requests = n * len(rounds)
    per = {kind: [t for r in rounds for t in r["cpu"][kind]] for kind in ("session", "exact")}
    wall = {kind: [t for r in rounds for t in r["wall"][kind]] for kind in ("session", "exact")}
    return Figure(
        "sessions_cpu",
        _TITLE_CPU,
        value,
        "x",
        _CPU_TARGET,
        ok,
        f"client CPU per request {sum(session) / requests * 1e3:.2f} ms vs "
        f"{sum(exact) / requests * 1e3:.2f} ms over {len(rounds)} interleaved rounds of "
        f"N = {n} (medians {statistics.median(per['session']) * 1e3:.2f} ms vs "
        f"{statistics.median(per['exact']) * 1e3:.2f} ms: the median leaves out the "
        f"deposit, the mean does not); wall per request "
        f"{statistics.fmean(wall['session']) * 1e3:.1f} ms vs "
        f"{statistics.fmean(wall['exact']) * 1e3:.1f} ms (the exact merchant settles on "
        "chain before it answers)" + unless(ok, value, SESSIONS_CPU_RATIO, upper=True),
        [s / e for s, e in zip(session, exact, strict=True)],
        SESSIONS_CPU_RATIO,
        {
            "n": n,
            "cpu_ms_per_round": {
                "session": [t * 1e3 for t in session],
                "exact": [t * 1e3 for t in exact],
            },
            "wall_ms_mean": {k: statistics.fmean(v) * 1e3 for k, v in wall.items()},
        },
        spread=bootstrap_rows([session, exact], cpu_ratio),
        spread_kind="95% bootstrap CI over rounds",
    )
