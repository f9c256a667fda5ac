"""The client process of the benchmarks: `python benchmarks/_client.py WORKLOAD ARGS_JSON`.

`run.py` starts the servers in their own processes and runs each measured workload in a
fresh one of these, so the client being measured shares its process (heap, GIL, garbage
collector) with nothing but the flows it compares. It prints one JSON line.

Garbage collection is counted the same way for every flow: the collector stays enabled
with Python's default thresholds (nothing is frozen or disabled), the flows being
compared run interleaved in this one process, and `gc.callbacks` times every collection
and books it to the flow whose request was running when it happened. A collection is
triggered by allocations, so the flow that allocates more triggers more of them and
pays for them in its own timings; `gc` in the output says how much each flow paid.

Workloads:

- `latency`: paid GETs, SDK vs hand-written floor, and free GETs, SDK vs a bare client,
  interleaved (`pairs` of each, order alternating), after `warmup` of each;
- `floor`: the floor flow against several server sets, interleaved;
- `throughput`: one burst of `n` paid requests at `concurrency` per flow, SDK and floor
  (`first` goes first), each in a fresh flow, with the servers' connection counts per
  burst;
- `gc`: `n` sequential paid requests of one flow in this process alone, every collection
  timed (generation, duration);
- `profile`: `n` paid requests interleaved SDK / floor, the SDK's profiled (cProfile and,
  if installed, pyinstrument);
- `eip3009`: paid GETs of the x402 foundation's merchant, our client vs the foundation's
  `x402HttpxClient` vs the pre-signed floor (`PreSigned`), interleaved, wall and
  client-process CPU time per request;
- `sessions`: paid GETs of the sandbox's `batch-settlement` merchant (one session: a
  deposit, then a voucher per request) and of its standard `exact` EIP-3009 merchant on
  the same anvil chain, interleaved, client-process CPU time per request and the
  transactions each request (and each batch the merchant claims and settles) added to
  the chain.
"""

from __future__ import annotations

import asyncio
import gc
import json
import random
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import httpx  # noqa: E402
from _flows import make_flow  # noqa: E402


class GcClock:
    """`gc.callbacks` entry: times each collection and books it to the running flow.

    Each collection is timed twice: wall time (`perf_counter`), and the CPU time of the
    collecting thread (`thread_time`), which leaves out the time the thread was not
    running (other processes on a shared machine) and so measures the collection's own
    work: the objects it had to scan.
    """

    def __init__(self) -> None:
        self.flow = "idle"
        self._started = 0.0
        self._cpu = 0.0
        #: (flow, generation, wall seconds, CPU seconds)
        self.events: list[tuple[str, int, float, float]] = []

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._cpu = time.thread_time()
            self._started = time.perf_counter()
        else:
            wall = time.perf_counter() - self._started
            cpu = time.thread_time() - self._cpu
            self.events.append((self.flow, info["generation"], wall, cpu))

    def install(self) -> GcClock:
        gc.callbacks.append(self)
        return self

    def remove(self) -> None:
        if self in gc.callbacks:
            gc.callbacks.remove(self)

    def clear(self) -> None:
        self.events.clear()

    def by_flow(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for flow, generation, seconds, _ in self.events:
            row = out.setdefault(
                flow, {"collections": [0, 0, 0], "seconds": [0.0, 0.0, 0.0], "max_ms": 0.0}
            )
            row["collections"][generation] += 1
            row["seconds"][generation] += seconds
            row["max_ms"] = max(row["max_ms"], seconds * 1000)
        return out


async def _timed(
    clock: GcClock,
    flow: str,
    get: Callable[[str], Awaitable[httpx.Response]],
    url: str,
    wall: list[float],
    cpu: list[float],
) -> None:
    """One GET booked to `flow`: its wall time, the client process's CPU time (the
    servers run elsewhere, so this is the client's own work) and its collections."""
    clock.flow = flow
    c0, t0 = time.process_time(), time.perf_counter()
    response = await get(url)
    wall.append(time.perf_counter() - t0)
    cpu.append(time.process_time() - c0)
    clock.flow = "idle"
    await _ok(response)


async def _ok(response: httpx.Response) -> None:
    if response.status_code != 200:
        raise RuntimeError(f"answered {response.status_code}: {response.text[:200]}")


# --- latency --------------------------------------------------------------------------------


async def latency(args: dict[str, Any]) -> dict[str, Any]:
    merchant = args["merchant"]
    paid_url, free_url = merchant + "/weather", merchant + "/free"
    options = args["options"]
    flows = {k: make_flow(k, options) for k in ("sdk", "floor", "bare")}
    clock = GcClock()
    times: dict[str, list[float]] = {"sdk": [], "floor": [], "sdk_free": [], "bare_free": []}
    #: Client-process CPU per request (`time.process_time`): the servers run elsewhere, so
    #: this is the client's own work, much less noisy than wall time on a shared machine.
    cpu: dict[str, list[float]] = {k: [] for k in times}
    try:
        for _ in range(args["warmup"]):
            for kind in ("sdk", "floor"):
                await _ok(await flows[kind].get(paid_url))
            for kind in ("sdk", "bare"):
                await _ok(await flows[kind].get(free_url))
        clock.install()
        # The four requests of each round run in a random order (seeded: the same order
        # every run). A fixed order lets the collector's allocation-count trigger lock
        # into phase with the pattern, so that one flow would take nearly every collection
        # whatever its own allocations (seen: 142 to 0 between two flows that allocate
        # alike); shuffled, each flow is charged in proportion to what it allocates.
        order = random.Random(402)
        plan = [
            ("sdk", paid_url, "sdk"),
            ("floor", paid_url, "floor"),
            ("sdk_free", free_url, "sdk"),
            ("bare_free", free_url, "bare"),
        ]
        for _ in range(args["pairs"]):
            order.shuffle(plan)
            for name, url, kind in plan:
                await _timed(clock, name, flows[kind].get, url, times[name], cpu[name])
        clock.remove()
    finally:
        for flow in flows.values():
            await flow.aclose()
    return {
        "times": times,
        "cpu": cpu,
        "gc": clock.by_flow(),
        "gc_threshold": list(gc.get_threshold()),
    }


async def floor(args: dict[str, Any]) -> dict[str, Any]:
    """The floor flow against several server sets, interleaved (which server is leaner)."""
    targets = args["targets"]
    flows = [make_flow("floor", t["options"]) for t in targets]
    urls = [t["merchant"] + "/weather" for t in targets]
    times: list[list[float]] = [[] for _ in targets]
    order = list(range(len(targets)))
    try:
        for _ in range(args["warmup"]):
            for i in order:
                await _ok(await flows[i].get(urls[i]))
        for n in range(args["pairs"]):
            for i in order if n % 2 == 0 else order[::-1]:
                started = time.perf_counter()
                response = await flows[i].get(urls[i])
                times[i].append(time.perf_counter() - started)
                await _ok(response)
    finally:
        for flow in flows:
            await flow.aclose()
    return {"times": times}


# --- throughput -----------------------------------------------------------------------------


async def _control(url: str, path: str) -> dict[str, Any]:
    async with httpx.AsyncClient() as http:
        response = await (http.post(url + path) if path == "/reset" else http.get(url + path))
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result


async def _burst(flow: Any, url: str, n: int, concurrency: int) -> dict[str, Any]:
    remaining = n
    failures = 0
    errors: dict[str, int] = {}

    async def worker() -> None:
        nonlocal remaining, failures
        while remaining > 0:
            remaining -= 1
            try:
                response = await flow.get(url)
            except Exception as exc:  # counted and reported, not fatal
                failures += 1
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                continue
            if response.status_code != 200:
                failures += 1
                errors[str(response.status_code)] = errors.get(str(response.status_code), 0) + 1

    cpu = time.process_time()
    started = time.perf_counter()
    async with asyncio.timeout(600):
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    return {
        "seconds": elapsed,
        "rps": n / elapsed,
        "cpu_seconds": time.process_time() - cpu,
        "failures": failures,
        "errors": errors,
    }


async def throughput(args: dict[str, Any]) -> dict[str, Any]:
    url = args["merchant"] + "/weather"
    options = args["options"]
    controls = args["controls"]  # {"merchant": url, "payment_api": url}
    n, concurrency = args["n"], args["concurrency"]
    order = ("sdk", "floor") if args.get("first", "sdk") == "sdk" else ("floor", "sdk")
    for kind in order:  # warm both code paths
        flow = make_flow(kind, options)
        await _burst(flow, url, min(n, 100), concurrency)
        await flow.aclose()
    runs: dict[str, list[dict[str, Any]]] = {"sdk": [], "floor": []}
    for kind in order:
        for control in controls.values():
            await _control(control, "/reset")
        flow = make_flow(kind, options)
        try:
            result = await _burst(flow, url, n, concurrency)
        finally:
            await flow.aclose()
        stats = {name: await _control(c, "/stats") for name, c in controls.items()}
        result["connections"] = {name: s["connections"] for name, s in stats.items()}
        result["requests"] = {name: s["requests"] for name, s in stats.items()}
        digests = {name: s.get("codes_digest") for name, s in stats.items()}
        result["paid_codes_match"] = len(set(digests.values())) == 1
        runs[kind].append(result)
        print(
            f"    {kind:6s} {result['rps']:7.1f} req/s  connections {result['connections']}"
            f"  failures {result['failures']} {result['errors']}",
            file=sys.stderr,
            flush=True,
        )
    return {"runs": runs}


# --- garbage-collection pauses ----------------------------------------------------------------


async def gc_pauses(args: dict[str, Any]) -> dict[str, Any]:
    url = args["merchant"] + "/weather"
    flow = make_flow(args["flow"], args["options"])
    clock = GcClock()
    try:
        for _ in range(args["warmup"]):
            await _ok(await flow.get(url))
        clock.install()
        clock.flow = args["flow"]
        perf = time.perf_counter
        slowest = 0.0
        started = perf()
        for _ in range(args["n"]):
            t = perf()
            response = await flow.get(url)
            slowest = max(slowest, perf() - t)
            await _ok(response)
        elapsed = perf() - started
        clock.remove()
    finally:
        await flow.aclose()
    pauses = [(g, wall * 1000, cpu * 1000) for _, g, wall, cpu in clock.events]
    return {
        "flow": args["flow"],
        "n": args["n"],
        "seconds": elapsed,
        "slowest_request_ms": slowest * 1000,
        "pauses_ms": pauses,
        "tracked_objects": len(gc.get_objects()),
        "modules": len(sys.modules),
        "gc_threshold": list(gc.get_threshold()),
    }


# --- profile ------------------------------------------------------------------------------


async def profile(args: dict[str, Any]) -> dict[str, Any]:
    import cProfile
    import io
    import pstats

    url = args["merchant"] + "/weather"
    options = args["options"]
    flows = {k: make_flow(k, options) for k in ("sdk", "floor")}
    out = Path(args["out"])
    try:
        for _ in range(args["warmup"]):
            for flow in flows.values():
                await _ok(await flow.get(url))
        prof = cProfile.Profile()
        for i in range(args["n"]):
            for kind in ("sdk", "floor") if i % 2 == 0 else ("floor", "sdk"):
                if kind == "sdk":
                    prof.enable()
                    response = await flows[kind].get(url)
                    prof.disable()
                else:
                    response = await flows[kind].get(url)
                await _ok(response)
        text = io.StringIO()
        stats = pstats.Stats(prof, stream=text)
        stats.sort_stats("tottime").print_stats(60)
        stats.sort_stats("cumulative").print_stats(80)
        (out / "profile-cprofile.txt").write_text(text.getvalue())
        own = []
        for (filename, line, name), row in stats.stats.items():  # type: ignore[attr-defined]
            if "x402_client" in filename:
                own.append(
                    {
                        "function": f"{Path(filename).name}:{line}({name})",
                        "calls_per_request": row[1] / args["n"],
                        "tottime_us_per_request": row[2] / args["n"] * 1e6,
                        "cumtime_us_per_request": row[3] / args["n"] * 1e6,
                    }
                )
        own.sort(key=lambda r: -r["tottime_us_per_request"])
        result: dict[str, Any] = {"own_top": own[:25], "pyinstrument": None}
        try:
            from pyinstrument import Profiler  # type: ignore[import-not-found, unused-ignore]
        except ImportError:
            return result
        # Sampling the thread, not the coroutines: time spent waiting for the servers shows
        # up as the event loop's select, not as the SDK function that awaits.
        profiler = Profiler(interval=0.0005, async_mode="disabled")
        profiler.start()
        for _ in range(args["n"]):
            await _ok(await flows["sdk"].get(url))
        profiler.stop()
        (out / "profile-pyinstrument.txt").write_text(
            profiler.output_text(unicode=False, color=False, show_all=False)
        )
        result["pyinstrument"] = str(out / "profile-pyinstrument.txt")
        return result
    finally:
        for flow in flows.values():
            await flow.aclose()


# --- EIP-3009: our client vs the x402 foundation's -------------------------------------------


def _foundation(args: dict[str, Any]) -> Any:
    """The x402 foundation's own client, paying with the benchmark's throwaway key."""
    from eth_account import Account
    from x402 import x402Client
    from x402.mechanisms.evm.exact import register_exact_evm_client

    foundation = x402Client()
    register_exact_evm_client(foundation, Account.from_key(args["payer_key"]))
    foundation.set_spend_controls(
        {"allowed_assets": [{"network": args["network"], "asset": args["token"]}]}
    )
    return foundation


async def _presigned(foundation: Any, url: str, n: int) -> list[dict[str, str]]:
    """`n` payment headers for `url`, built by the foundation's own code (its challenge
    parsing, its EIP-3009 signing, its header encoding) before any timing starts."""
    from x402.http import x402HTTPClient

    codec = x402HTTPClient(foundation)
    async with httpx.AsyncClient(timeout=60) as http:
        challenge = await http.get(url)
    body = challenge.json() if challenge.content else None
    required = codec.get_payment_required_response(challenge.headers.get, body)
    headers = []
    for _ in range(n):
        payload = await foundation.create_payment_payload(required)
        headers.append(dict(codec.encode_payment_signature_header(payload)))
    return headers


class PreSigned:
    """The EIP-3009 floor: the same two round trips as a paying client (the GET that
    gets the 402, the GET with the payment header), by hand, with headers signed
    beforehand. What a client spends over it is its own work."""

    def __init__(self, headers: list[dict[str, str]]) -> None:
        self._headers = iter(headers)
        self._http = httpx.AsyncClient(timeout=60)

    async def get(self, url: str) -> httpx.Response:
        challenge = await self._http.get(url)
        if challenge.status_code != 402:
            return challenge
        return await self._http.get(url, headers=next(self._headers))

    async def aclose(self) -> None:
        await self._http.aclose()


async def eip3009(args: dict[str, Any]) -> dict[str, Any]:
    from x402.http.clients.httpx import x402HttpxClient

    from x402_client import Asset, EvmOptions, PaymentOptions, with_eur_payment

    url = args["paid_url"]
    ours = with_eur_payment(
        httpx.AsyncClient(timeout=60),
        PaymentOptions(
            evm=EvmOptions(private_key=args["payer_key"]),
            assets=[Asset(args["chain_id"], args["token"], "EURC", "EUR")],
        ),
    )
    foundation = _foundation(args)
    floor = PreSigned(await _presigned(foundation, url, args["warmup"] + args["pairs"]))
    clients: dict[str, Any] = {
        "ours": ours,
        "foundation": x402HttpxClient(foundation, timeout=60),
        "floor": floor,
    }
    kinds = list(clients)
    wall: dict[str, list[float]] = {kind: [] for kind in kinds}
    cpu: dict[str, list[float]] = {kind: [] for kind in kinds}
    clock = GcClock()
    try:
        for _ in range(args["warmup"]):
            for client in clients.values():
                await _ok(await client.get(url))
        clock.install()
        for i in range(args["pairs"]):
            # Rotate the order so that no flow always goes first (or last).
            for kind in kinds[i % 3 :] + kinds[: i % 3]:
                await _timed(clock, kind, clients[kind].get, url, wall[kind], cpu[kind])
        clock.remove()
    finally:
        for client in clients.values():
            await client.aclose()
    return {"wall": wall, "cpu": cpu, "gc": clock.by_flow()}


# --- sessions (batch-settlement) vs exact EIP-3009 ---------------------------------------------


class ChainCounter:
    """The transactions mined on one anvil chain since the last reading: every block's
    transaction list, read block by block (a block may hold more than one)."""

    def __init__(self, rpc_url: str) -> None:
        self._url = rpc_url
        self._http = httpx.AsyncClient(timeout=60)
        self._seen: int | None = None

    async def _rpc(self, method: str, *params: Any) -> Any:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": list(params)}
        response = await self._http.post(self._url, json=body)
        response.raise_for_status()
        answer = response.json()
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        return answer["result"]

    async def new_transactions(self) -> int:
        """How many transactions the blocks mined since the last call hold (the first
        call only takes the chain's height)."""
        head = int(await self._rpc("eth_blockNumber"), 16)
        start, self._seen = self._seen, head
        if start is None:
            return 0
        count = 0
        for number in range(start + 1, head + 1):
            block = await self._rpc("eth_getBlockByNumber", hex(number), False)
            count += len(block["transactions"])
        return count

    async def aclose(self) -> None:
        await self._http.aclose()


def _session_clients(args: dict[str, Any]) -> dict[str, Any]:
    """Our client twice, one per merchant, each with its own state: a session deposits
    for `n` requests (`EvmOptions.session_requests`), so that one round of `n` requests
    is one deposit's worth."""
    from x402_client import Asset, EvmOptions, PaymentOptions, with_eur_payment

    def options() -> PaymentOptions:
        return PaymentOptions(
            evm=EvmOptions(
                private_key=args["payer_key"],
                rpc_urls={args["chain_id"]: args["rpc_url"]},
                session_requests=args["n"],
            ),
            assets=[Asset(args["chain_id"], args["token"], "sEURC", "EUR")],
        )

    return {
        kind: with_eur_payment(httpx.AsyncClient(timeout=60), options())
        for kind in ("session", "exact")
    }


async def _claim_and_settle(url: str) -> None:
    """The merchant's batch: it claims the session's vouchers and settles (its own work,
    not the client's, so it is not timed; its transactions count for the session)."""
    async with httpx.AsyncClient(timeout=120) as http:
        response = await http.post(url)
        response.raise_for_status()


async def _session_round(
    args: dict[str, Any], clients: dict[str, Any], chain: ChainCounter, clock: GcClock
) -> dict[str, Any]:
    """One round: `n` paid GETs of each merchant, one of each at a time (the first of
    the pair alternating), each timed and its transactions counted; then the merchant's
    claim and settlement of the session's vouchers, counted apart."""
    urls = {"session": args["session_url"], "exact": args["exact_url"]}
    cpu: dict[str, list[float]] = {kind: [] for kind in urls}
    wall: dict[str, list[float]] = {kind: [] for kind in urls}
    txs: dict[str, list[int]] = {kind: [] for kind in urls}
    await chain.new_transactions()
    for i in range(args["n"]):
        for kind in ("session", "exact") if i % 2 == 0 else ("exact", "session"):
            await _timed(clock, kind, clients[kind].get, urls[kind], wall[kind], cpu[kind])
            txs[kind].append(await chain.new_transactions())
    await _claim_and_settle(args["claim_url"])
    return {"cpu": cpu, "wall": wall, "txs": txs, "batch_txs": await chain.new_transactions()}


async def sessions(args: dict[str, Any]) -> dict[str, Any]:
    """`rounds` measured rounds (`_session_round`) after one round of warm-up, which
    opens the channel: every measured round then starts on a spent deposit, as a new
    session of `n` requests does."""
    clients = _session_clients(args)
    chain = ChainCounter(args["rpc_url"])
    clock = GcClock()
    rounds = []
    try:
        await _session_round(args, clients, chain, clock)
        clock.install()
        for _ in range(args["rounds"]):
            rounds.append(await _session_round(args, clients, chain, clock))
        clock.remove()
    finally:
        for client in clients.values():
            await client.aclose()
        await chain.aclose()
    return {"rounds": rounds, "gc": clock.by_flow()}


WORKLOADS = {
    "latency": latency,
    "floor": floor,
    "throughput": throughput,
    "gc": gc_pauses,
    "profile": profile,
    "eip3009": eip3009,
    "sessions": sessions,
}


def main() -> None:
    workload, raw = sys.argv[1], sys.argv[2]
    args = json.loads(raw)
    result = asyncio.run(WORKLOADS[workload](args))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
