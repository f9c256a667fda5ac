"""Figure 4a: JSON-RPC round trips per warm EVM permit payment (sandbox chains, in
blocks), with eth-account's signing time in its details."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import statistics
import time
from collections.abc import Iterator
from typing import Any

import httpx
from _blocks import gate_summary
from _client import GcClock
from _figure import Figure, skipped, unless
from _procs import Sandbox
from _stats import listed
from _targets import EVM_ROUND_TRIPS

Block = dict[str, Any]


@contextlib.contextmanager
def _signing_clock() -> Iterator[list[tuple[float, float]]]:
    """Time every permit signature the EVM rail makes, in the signing thread's CPU time
    (`time.thread_time`: what the machine gave other processes meanwhile is not counted,
    and no profiler adds its own overhead). Yields the list that each signature's
    `(cpu seconds, of which garbage collection)` goes to: a collection runs in whichever
    call happens to allocate past the threshold, so a signature can be charged a
    collection that the whole payment's allocations triggered."""
    from x402_client._rails.evm import EvmPermitRail

    spent: list[tuple[float, float]] = []
    clock = GcClock()
    original = EvmPermitRail._sign

    def timed(self: EvmPermitRail, typed: dict[str, Any]) -> bytes:
        started, seen = time.thread_time(), len(clock.events)
        try:
            return original(self, typed)
        finally:
            collected = sum(cpu for *_, cpu in clock.events[seen:])
            spent.append((time.thread_time() - started, collected))

    EvmPermitRail._sign = timed  # type: ignore[method-assign]
    clock.install()
    try:
        yield spent
    finally:
        clock.remove()
        EvmPermitRail._sign = original  # type: ignore[method-assign]


async def _paid_get(http: httpx.AsyncClient, url: str) -> None:
    response = await http.get(url)
    if response.status_code != 200:
        raise RuntimeError(f"EVM payment answered {response.status_code}")


async def _evm_payments(server: Sandbox, n: int) -> Block:
    from x402_client import with_eur_payment

    options = {"evm": server.options["evm"]}  # no managed account: the euro entry is skipped
    url = server.url("/weather")
    async with with_eur_payment(httpx.AsyncClient(timeout=60), options) as http:
        for _ in range(2):  # warm-up: chain id, token name and symbol, spender
            await _paid_get(http, url)
        server.reset()
        cpu0 = time.process_time()
        with _signing_clock() as signatures:
            for _ in range(n):
                await _paid_get(http, url)
        cpu = time.process_time() - cpu0
        if len(signatures) != n:
            raise RuntimeError("expected one permit signature per payment")
    stats = server.stats()
    calls = sum(c["calls"] for c in stats["rpc"].values())
    trips = sum(c["http_requests"] for c in stats["rpc"].values())
    methods: collections.Counter[str] = collections.Counter()
    for chain in stats["rpc"].values():
        methods.update(chain["methods"])
    return {
        "payments": n,
        "rpc_round_trips_per_payment": trips / n,
        "rpc_calls_per_payment": calls / n,
        "methods": dict(methods),
        "client_cpu_ms_per_payment": cpu * 1000 / n,
        "signing_cpu_ms": [total * 1000 for total, _ in signatures],
        "signing_gc_ms": [collected * 1000 for _, collected in signatures],
    }


def evm_block(counts: dict[str, int]) -> Block:
    """One block of figure 4a (and of the signing time beside it): a fresh EVM sandbox,
    2 warm-up payments, then `evm_n` timed ones. A sandbox that does not work is reported,
    not raised: the figure is then skipped with the reason."""
    try:
        with Sandbox("--evm") as server:
            if "evm" not in server.options:
                raise RuntimeError("the sandbox gave no EVM options")
            return asyncio.run(_evm_payments(server, counts["evm_n"]))
    except Exception as exc:
        return {"error": f"EVM sandbox or rail not working: {type(exc).__name__}: {exc}"[:300]}


def signing_ms(block: Block) -> float:
    """An EVM block's mean signing CPU per signature, ms: each signature's own CPU. A
    collection that ran inside one was triggered by the whole payment's allocations, and
    is counted in the client CPU per payment instead."""
    return statistics.fmean(
        t - g for t, g in zip(block["signing_cpu_ms"], block["signing_gc_ms"], strict=True)
    )


def mean_signing_ms(blocks: list[Block]) -> float | None:
    """The mean over EVM blocks of `signing_ms`; None when there are none, or one failed."""
    if not blocks or any("signing_cpu_ms" not in b for b in blocks):
        return None
    return statistics.fmean(signing_ms(b) for b in blocks)


def _signing_text(blocks: list[Block], n: int) -> str:
    """The client's CPU per payment and eth-account's share of it, for the details."""
    signing = [signing_ms(b) for b in blocks]
    hosted = [g for b in blocks for g in b["signing_gc_ms"] if g > 0]
    client_cpu = sum(b["client_cpu_ms_per_payment"] * b["payments"] for b in blocks) / n
    return (
        f"Client CPU per paid request {client_cpu:.1f} ms, of which eth-account's "
        f"signing {statistics.fmean(signing):.2f} ms (the machine's speed, not a figure; "
        f"thread CPU time, collections inside it left out: {len(hosted)} of {n} "
        f"signatures hosted one, {sum(hosted):.1f} ms in all; per block "
        f"{listed(signing, '.2f')} ms)"
    )


def fig_evm(blocks: list[Block]) -> list[Figure]:
    """Figure 4a, with the signing time in its details.

    The signing time is not a figure. It times one call, eth-account's
    `Account.sign_typed_data` (all that `EvmPermitRail._sign` does), so it is the
    machine's speed at that library's work, not the client's; between runs it moves by
    more than any spread measured within a run (benchmarks/README.md). It is reported
    beside the speed probe (the summary line and `--compare`)."""
    title_rpc = "4a. EVM permit payment: RPC round trips when warm (JSON-RPC calls in detail)"
    failed = next((b["error"] for b in blocks if "error" in b), None)
    if failed is not None:
        return [skipped("evm_rpc", title_rpc, f"<= {EVM_ROUND_TRIPS:.0f}", failed)]
    n = sum(b["payments"] for b in blocks)
    # Every payment counts: the figure is the worst block's round trips per payment.
    per_block = [b["rpc_round_trips_per_payment"] for b in blocks]
    trips = max(per_block)
    calls = sum(b["rpc_calls_per_payment"] * b["payments"] for b in blocks) / n
    tally: collections.Counter[str] = collections.Counter()
    for b in blocks:
        tally.update(b["methods"])
    methods = dict(tally)
    ok = trips <= EVM_ROUND_TRIPS
    shape = f"{len(blocks)} blocks of {blocks[0]['payments']} warm payments"
    return [
        Figure(
            "evm_rpc",
            title_rpc,
            trips,
            "round trips",
            f"<= {EVM_ROUND_TRIPS:.0f} (a batch is one)",
            ok,
            f"{shape}, counted at the RPC proxy: at most {trips:g} HTTP round trips per "
            f"payment in a block (per block {listed(per_block, 'g')}) and {calls:g} JSON-RPC "
            f"calls per payment; by method: {methods}"
            + unless(ok, trips, EVM_ROUND_TRIPS, upper=True, unit="trips")
            + f". {_signing_text(blocks, n)}; "
            + gate_summary(blocks),
            [],
            EVM_ROUND_TRIPS,
            {"blocks": blocks, "methods": methods},
            spread=(trips, trips),
            spread_kind="exact count",
        )
    ]
