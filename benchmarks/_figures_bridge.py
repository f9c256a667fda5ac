"""Figures 8a-8b: the bridge rail against the sandbox (chain A, a bridge with a delay):
how soon the proof follows the `blockchainTxId`, and how often the client polls."""

from __future__ import annotations

import asyncio
import statistics
from typing import Any

import httpx
from _figure import Figure, skipped
from _flows import euro_options
from _procs import Sandbox
from _targets import BRIDGE_DELAY_S, BRIDGE_POLLS_PER_MIN

_TITLE_DELAY = "8a. Bridge (sandbox): blockchainTxId appearing -> proof sent"
_TITLE_POLLS = "8b. Bridge (sandbox): polls per minute of waiting"
_TARGET_DELAY = f"median < {BRIDGE_DELAY_S:g} s"
_TARGET_POLLS = f"<= {BRIDGE_POLLS_PER_MIN:g} / min"


async def _bridge_payments(server: Sandbox, n: int) -> dict[str, Any]:
    from x402_client import with_eur_payment

    url = server.url("/report")
    async with with_eur_payment(
        httpx.AsyncClient(timeout=120), euro_options(server.options)
    ) as http:
        server.reset()
        for _ in range(n):
            response = await http.get(url)
            if response.status_code != 200:
                raise RuntimeError(f"bridge payment answered {response.status_code}")
            receipt = response.extensions.get("x402_payment")
            if receipt is None or receipt.rail == "euro":
                raise RuntimeError(f"not paid through the bridge: {receipt!r}")
    return _timings(server.stats())


def _timings(stats: dict[str, Any]) -> dict[str, Any]:
    """From the sandbox's records: each payment's delay from its `blockchainTxId`
    appearing to the proof arriving, and the polls per minute spent waiting."""
    appeared = sorted(stats["blockchain_tx_appeared"].values())
    arrivals = sorted(stats["merchant"]["proof_arrivals"])
    paid_at = sorted(stats["payment_api"]["payments"])
    delays = []
    for seen in appeared:
        after = [a for a in arrivals if a >= seen]
        if after:
            delays.append(after[0] - seen)
    waiting = sum(min([a for a in arrivals if a >= p] or [p]) - p for p in paid_at)
    polls = stats["payment_api"]["paths"].get("GET /transaction", 0)
    return {
        "delays": delays,
        "polls": polls,
        "waiting_seconds": waiting,
        "polls_per_minute": polls / waiting * 60 if waiting > 0 else None,
    }


def _fig_delay(short: dict[str, Any]) -> Figure:
    delays = short["delays"]
    delay = statistics.median(delays) if delays else float("nan")
    return Figure(
        "bridge_delay",
        _TITLE_DELAY,
        delay,
        "s",
        _TARGET_DELAY,
        delay < BRIDGE_DELAY_S,
        f"{len(delays)} payments, bridge delay 0.5 s",
        delays,
        BRIDGE_DELAY_S,
        short,
        spread=(min(delays), max(delays)) if delays else None,
        spread_kind="range",
    )


def _fig_polls(long: dict[str, Any]) -> Figure:
    rate = long["polls_per_minute"] or float("nan")
    waiting = long["waiting_seconds"]
    return Figure(
        "bridge_polls",
        _TITLE_POLLS,
        rate,
        "/min",
        _TARGET_POLLS,
        rate <= BRIDGE_POLLS_PER_MIN,
        f"{long['polls']} polls over {waiting:.1f} s of waiting",
        [],
        BRIDGE_POLLS_PER_MIN,
        long,
        # A count of polls over a measured wait: its resolution is one poll.
        spread=(
            (max(long["polls"] - 1, 0) / waiting * 60, (long["polls"] + 1) / waiting * 60)
            if waiting
            else None
        ),
        spread_kind="+-1 poll (the count's resolution)",
    )


def fig_bridge(counts: dict[str, int]) -> list[Figure]:
    try:
        with Sandbox("--chain-a", "--bridge-delay", "0.5") as server:
            short = asyncio.run(_bridge_payments(server, counts["bridge_short"]))
        with Sandbox("--chain-a", "--bridge-delay", str(counts["bridge_long_s"])) as server:
            long = asyncio.run(_bridge_payments(server, 1))
    except Exception as exc:
        reason = f"chain-A sandbox or bridge rail not working: {type(exc).__name__}: {exc}"
        return [
            skipped("bridge_delay", _TITLE_DELAY, _TARGET_DELAY, reason[:300]),
            skipped("bridge_polls", _TITLE_POLLS, _TARGET_POLLS, reason[:300]),
        ]
    return [_fig_delay(short), _fig_polls(long)]
