"""The benchmarks still run: `benchmarks/run.py --smoke` end to end, so they never rot.

Tiny counts and no timing assertions: met, missed, informational and skipped are all fine
here. What is checked is that every benchmark figure is present in the JSON,
well formed, with a value or a reason for skipping, and that the chart was drawn.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.waiting import eventually_sync

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "benchmarks" / "run.py"

#: The benchmark targets: each has a target value (or is skipped with a reason).
TARGETED = {
    "latency",
    "latency_overhead",
    "passthrough",
    "throughput",
    "import_api",
    "evm_rpc",
    "eip3009",
    "gc",
    "memory",
    "sessions_tx",
    "sessions_cpu",
}


def _check_figure(key: str, figure: dict[str, Any]) -> None:
    assert figure["title"], key
    assert figure["passed"] in (True, False, None), key
    if figure["skipped"] is not None:
        assert isinstance(figure["skipped"], str) and figure["skipped"], key
        assert figure["value"] is None and figure["passed"] is None, key
        return
    assert isinstance(figure["value"], (int, float)), key
    assert math.isfinite(figure["value"]) or key.startswith("bridge"), key
    if key in TARGETED:
        assert figure["passed"] in (True, False), key
        assert figure["target"], key
    if figure["spread"] is not None:
        low, high = figure["spread"]
        assert low <= high, key


def _run_module() -> Any:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import run
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return run


#: The smoke run in four parts, each in its own test module so that parallel workers run
#: them side by side: the chains' figures (`test_benchmarks_smoke_chains.py`), the fleet's
#: (`test_benchmarks_smoke_fleet.py`), the sessions' (`test_benchmarks_smoke_sessions.py`)
#: and the rest.
CHAIN_SECTIONS = "sandbox,evm,eip3009,bridge"
FLEET_SECTIONS = "fleet"
SESSION_SECTIONS = "sessions"
OTHER_SECTIONS = "startup,servers,latency,throughput,gc,memory"
CHAIN_FIGURES = {
    "bridge_delay",
    "bridge_polls",
    "eip3009",
    "eip3009_own",
    "evm_rpc",
    "latency_sandbox",
}


def smoke_run(tmp_path: Path, sections: str) -> dict[str, Any]:
    """`run.py --smoke --only SECTIONS`: its JSON, after checking every figure it wrote."""
    done = subprocess.run(
        [sys.executable, str(RUN), "--smoke", "--only", sections, "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    data: dict[str, Any] = json.loads((tmp_path / "latest.json").read_text())
    assert data["machine"]["mode"] == "smoke"
    assert data["machine"]["nproc"] >= 1
    for key, figure in data["figures"].items():
        _check_figure(key, figure)
    assert "| Figure" in data["table"]
    assert (tmp_path / "latest.png").stat().st_size > 10_000
    return data


def test_the_two_halves_of_the_smoke_run_cover_every_figure() -> None:
    expected = set(_run_module().FIGURES)
    assert expected >= CHAIN_FIGURES
    parts = (CHAIN_SECTIONS, FLEET_SECTIONS, SESSION_SECTIONS, OTHER_SECTIONS)
    sections = {name for part in parts for name in part.split(",")}
    assert sections == set(_run_module().SECTIONS)


@pytest.mark.slow
def test_benchmarks_smoke_run_writes_every_figure_but_the_chains(tmp_path: Path) -> None:
    figures = smoke_run(tmp_path, OTHER_SECTIONS)["figures"]
    expected = {
        f for f in _run_module().FIGURES if not f.startswith(("fleet", "sessions"))
    } - CHAIN_FIGURES
    assert set(figures) == expected, sorted(set(figures) ^ expected)


def test_gc_pause_attribution() -> None:
    # Pure helper of the GC figure: matched per generation, longest first.
    run = _run_module()
    sdk = [(0, 0.4), (2, 30.0), (2, 12.0), (2, 6.0), (1, 5.5)]
    floor = [(0, 0.3), (2, 20.0), (2, 11.0), (1, 2.0)]
    # gen2 30 vs 20: 10 ms longer -> the client's; 12 vs 11: not; 6 vs none -> the client's;
    # gen1 5.5 vs 2.0: only 3.5 ms longer -> not.
    assert run.attribute_pauses(sdk, floor) == [(2, 30.0), (2, 6.0)]
    assert run.attribute_pauses(floor, floor) == []


def test_over_blocks_is_the_mean_and_its_student_t_interval() -> None:
    run = _run_module()
    mean, (low, high) = run.over_blocks([1.0, 2.0, 3.0, 4.0])
    # mean 2.5, sample sd 1.2910, t(3) = 3.182: half-width 3.182 * 1.2910 / 2 = 2.054
    assert mean == 2.5
    assert math.isclose(high - mean, 2.0540, abs_tol=1e-3)
    assert math.isclose(mean - low, high - mean)
    assert run.over_blocks([7.0]) == (7.0, (7.0, 7.0))
    assert run.over_blocks([5.0, 5.0, 5.0]) == (5.0, (5.0, 5.0))
    assert run.t95(3) == 3.182
    assert run.t95(22) == run.t95(25)  # between table rows: the next (wider) row
    assert run.t95(1000) == 1.96


def test_blocks_are_spread_over_the_run_and_interleaved() -> None:
    run = _run_module()
    seen: list[str] = []

    def job(name: str) -> Any:
        return lambda: seen.append(name) or {"name": name}

    blocks = run.Blocks(
        {"latency": (4, job("latency")), "servers": (2, job("servers"))}, meter=lambda: None
    )
    blocks.plan(3)  # 6 blocks over 3 places: 2 each
    blocks.run()
    assert len(seen) == 2
    blocks.run()
    assert len(seen) == 4
    blocks.finish()
    assert len(seen) == 6
    blocks.run()  # nothing left
    assert len(seen) == 6
    # Each kind is spread evenly, not run back to back.
    assert seen == ["latency", "servers", "latency", "latency", "servers", "latency"]
    assert [r["name"] for r in blocks.results["latency"]] == ["latency"] * 4
    assert len(blocks.results["servers"]) == 2


def _abc_blocks(run: Any, **gate: Any) -> tuple[Any, list[str]]:
    """Blocks a, b and c, one of each, gated as `gate` says (at most 3 attempts, no
    pause), planned in one place; each job records the order the blocks ran in and
    returns how many times its block has run (`n`)."""
    seen: list[str] = []

    def job(name: str) -> Any:
        return lambda: seen.append(name) or {"name": name, "n": seen.count(name)}

    blocks = run.Blocks({k: (1, job(k)) for k in "abc"}, attempts=3, pause=0, **gate)
    blocks.plan(1)
    return blocks, seen


def test_quiet_gate_measures_a_perturbed_block_again_later() -> None:
    """A block during which the hypervisor stole more than the gate allows goes to the
    back of the queue; after its last attempt the least perturbed measurement is kept."""
    run = _run_module()
    # Each block reads the meter twice (before, after): (stolen, total) ticks. The steal
    # shares per measurement, in the order they run, are scripted: a 20 %, b 0 %, c 30 %,
    # a again 1 %, then c 40 % and 25 %.
    shares = iter([0.20, 0.0, 0.30, 0.01, 0.40, 0.25])
    ticks = {"stolen": 0, "total": 0}
    reads = {"n": 0}

    def meter() -> tuple[int, int]:
        reads["n"] += 1
        if reads["n"] % 2 == 0:  # the reading after a block
            ticks["stolen"] += round(next(shares) * 100)
            ticks["total"] += 100
        return ticks["stolen"], ticks["total"]

    # Steal alone decides here: the speed probe's gate is off.
    blocks, seen = _abc_blocks(run, max_steal=0.05, meter=meter, max_probe_ms=None)
    blocks.run()  # a (perturbed: back of the queue), b, c (perturbed)
    assert seen == ["a", "b", "c"]
    assert blocks.results["a"] == [] and len(blocks.results["b"]) == 1
    blocks.finish()  # a again (quiet), c twice more (perturbed each time)
    assert seen == ["a", "b", "c", "a", "c", "c"]
    a, b, c = (blocks.results[k][0] for k in "abc")
    assert (a["n"], a["attempts"], a["steal"]) == (2, 2, 0.01)
    assert (b["attempts"], b["steal"]) == (1, 0.0)
    assert a["steal_of_attempts"] == [0.2, 0.01]
    # Every attempt of c was perturbed: the least perturbed (25 %, its third) is kept.
    assert (c["n"], c["attempts"], c["steal"]) == (3, 3, 0.25)
    summary = run.gate_summary([a, b, c])
    assert "2 of 3 blocks measured again" in summary
    assert "1 kept perturbed" in summary
    assert run.gate_summary([{"steal": None}]).startswith("steal not measured")


def test_quiet_gate_measures_a_slow_block_again_later() -> None:
    """A block during which the speed probe read over `max_probe_ms` goes back to the
    queue like a stolen one, whatever its steal; a block whose every attempt was slow
    keeps the least perturbed attempt, steal and probe weighed against their gates."""
    run = _run_module()
    readings = iter([1.5, 1.0, 1.3, 1.1, 1.4, 1.25])

    class Probe:
        def __enter__(self) -> Any:
            self.median_ms = next(readings)
            return self

        def __exit__(self, *exc: object) -> None:
            pass

    blocks, seen = _abc_blocks(
        run,
        max_steal=0.05,
        meter=lambda: None,  # no steal readings: the probe alone decides
        max_probe_ms=1.2,
        probe=Probe,
    )
    blocks.run()  # a 1.5 (slow), b 1.0, c 1.3 (slow)
    assert seen == ["a", "b", "c"] and blocks.results["a"] == []
    blocks.finish()  # a 1.1 (quiet), c 1.4 then 1.25: slow every time
    assert seen == ["a", "b", "c", "a", "c", "c"]
    a, b, c = (blocks.results[k][0] for k in "abc")
    assert (a["n"], a["attempts"], a["probe_ms"]) == (2, 2, 1.1)
    assert a["probe_of_attempts"] == [1.5, 1.1] and a["max_probe_ms"] == 1.2
    assert (b["attempts"], b["probe_ms"]) == (1, 1.0)
    assert (c["n"], c["attempts"], c["probe_ms"]) == (3, 3, 1.25)
    assert run.perturbation(c, 0.05, 1.2) > 1.0 >= run.perturbation(a, 0.05, 1.2)
    # Steal and probe are weighed against their own gates: 10 % stolen (2x) is worse
    # than a probe at 1.5 ms (1.25x); a missing reading counts as quiet.
    assert run.perturbation({"steal": 0.10, "probe_ms": 1.0}, 0.05, 1.2) == pytest.approx(2.0)
    assert run.perturbation({"steal": 0.0, "probe_ms": 1.5}, 0.05, 1.2) == pytest.approx(1.25)
    assert run.perturbation({"steal": None, "probe_ms": None}, 0.05, 1.2) == 0.0
    assert run.perturbation({"steal": 0.01, "probe_ms": 9.0}, 0.05, None) == pytest.approx(0.2)


def test_throughput_is_the_mean_over_blocks_of_paired_bursts() -> None:
    """Figure 2 pairs each block's SDK burst with its floor burst: the value is the mean
    of the per-block ratios of req/s, the spread their t-interval; the burst order
    alternates from block to block."""
    run = _run_module()

    def burst(rps: float, digest_ok: bool = True) -> dict[str, Any]:
        return {
            "rps": rps,
            "cpu_seconds": 10.0 / rps,
            "connections": {"merchant": 50, "payment_api": 50},
            "failures": 0,
            "paid_codes_match": digest_ok,
        }

    def block(sdk: float, floor: float, steal: float = 0.01) -> dict[str, Any]:
        return {
            "n": 500,
            "runs": {"sdk": [burst(sdk)], "floor": [burst(floor)]},
            "steal": steal,
            "attempts": 1,
            "max_steal": 0.05,
        }

    blocks = [block(50, 50), block(60, 50), block(40, 50)]
    figure = run.fig_throughput(blocks)
    assert figure.key == "throughput"
    assert figure.samples == [1.0, 1.2, 0.8]
    assert math.isclose(figure.value, 1.0)
    assert figure.spread == run.over_blocks([1.0, 1.2, 0.8])[1]
    assert figure.spread_kind == run.BLOCK_SPREAD
    assert figure.passed is True
    assert "per block 1.000, 1.200, 0.800" in figure.detail

    slower = run.fig_throughput([block(45, 50), block(47, 50)])
    assert slower.passed is False and "missed by" in slower.detail
    unpaid = [block(60, 50), block(60, 50)]
    unpaid[1]["runs"]["floor"][0]["paid_codes_match"] = False
    assert run.fig_throughput(unpaid).passed is False  # a value met, a proof unpaid

    first = run.throughput_orders()
    assert [first() for _ in range(4)] == ["sdk", "floor", "sdk", "floor"]


def test_evm_figures_over_blocks_count_the_worst_block_and_skip_on_failure() -> None:
    run = _run_module()

    def block(trips: float, signing: list[float], collected: list[float]) -> dict[str, Any]:
        return {
            "payments": len(signing),
            "rpc_round_trips_per_payment": trips,
            "rpc_calls_per_payment": 2.0,
            "methods": {"eth_call": 10},
            "client_cpu_ms_per_payment": 8.0,
            "signing_cpu_ms": signing,
            "signing_gc_ms": collected,
            "steal": 0.0,
            "attempts": 1,
            "max_steal": 0.05,
        }

    [rpc] = run.fig_evm(
        [
            block(1.0, [0.9, 1.1], [0.0, 0.0]),
            # The second signature hosted a 4 ms collection: left out of signing's own CPU.
            block(1.2, [1.2, 5.2], [0.0, 4.0]),
            block(1.0, [1.0, 1.2], [0.0, 0.0]),
        ]
    )
    assert (rpc.key, rpc.value, rpc.passed) == ("evm_rpc", 1.2, False)  # the worst block
    assert "'eth_call': 30" in rpc.detail
    # The signing time is in the details, not a figure.
    assert "of which eth-account's signing 1.10 ms" in rpc.detail
    assert "per block 1.00, 1.20, 1.10 ms" in rpc.detail
    assert "1 of 6 signatures hosted one, 4.0 ms" in rpc.detail
    assert math.isclose(run.run_signing_ms({"figures": {"evm_rpc": rpc.extra}}), 1.1)
    assert run.run_signing_ms({"figures": {}}) is None

    broken = run.fig_evm(
        [block(1.0, [1.0], [0.0]), {"error": "EVM sandbox or rail not working: x"}]
    )
    assert [f.skipped for f in broken] == ["EVM sandbox or rail not working: x"]


def _session_round(deposits: list[int], batch: int, cpu: tuple[float, float]) -> dict[str, Any]:
    """One round of the sessions workload as `_client.sessions` reports it: per request,
    the transactions it added (a deposit, or none; one for each exact payment) and its
    CPU seconds; then the merchant's batch."""
    n = len(deposits)
    return {
        "txs": {"session": deposits, "exact": [1] * n},
        "batch_txs": batch,
        "cpu": {"session": [cpu[0]] * n, "exact": [cpu[1]] * n},
        "wall": {"session": [0.002] * n, "exact": [0.030] * n},
    }


def test_session_figures_count_every_deposit_and_batch_and_weigh_cpu_by_totals() -> None:
    run = _run_module()
    # N = 4: a top-up on the first request of two rounds, none in the third; each batch
    # is a claim and a settlement. Exact: 12 transactions; the session: 2 + 6 = 8.
    rounds = [
        _session_round([1, 0, 0, 0], 2, (0.002, 0.001)),
        _session_round([0, 0, 0, 0], 2, (0.001, 0.001)),
        _session_round([1, 0, 0, 0], 2, (0.003, 0.001)),
    ]
    tx = run.fig_sessions_tx(rounds, 4)
    assert (tx.key, tx.value) == ("sessions_tx", 1.5)
    assert math.isclose(tx.target_value, 4 / 3)
    assert tx.passed is True and "missed by" not in tx.detail
    assert tx.samples == [4 / 3, 2.0, 4 / 3]
    assert tx.extra["session_deposit_txs"] == 2 and tx.extra["session_batch_txs"] == 6
    assert "the session 0.667 (2 during its requests" in tx.detail
    assert tx.spread is not None and tx.spread[0] <= 1.5 <= tx.spread[1]

    # CPU by totals, so that a deposit's request counts in full: (8+4+12) / 12 ms = 2.
    cpu = run.fig_sessions_cpu(rounds, 4)
    assert (cpu.key, cpu.target_value) == ("sessions_cpu", 1.5)
    assert math.isclose(cpu.value, 2.0) and cpu.passed is False
    assert cpu.samples == pytest.approx([2.0, 1.0, 3.0])

    # N = 20, one top-up and one batch a round: 20 / 3 times fewer, exactly N/3.
    long_rounds = [_session_round([1] + [0] * 19, 2, (0.001, 0.001)) for _ in range(3)]
    long = run.fig_sessions_tx(long_rounds, 20)
    assert math.isclose(long.value, 20 / 3) and long.passed is True
    # Two top-ups a round: 20 / 4 times fewer, short of N/3.
    short = run.fig_sessions_tx([_session_round([1] * 2 + [0] * 18, 2, (0.001, 0.001))], 20)
    assert short.value == 5.0 and short.passed is False and "missed by" in short.detail
    assert long.spread == pytest.approx((20 / 3, 20 / 3))
    assert run.fig_sessions_cpu(long_rounds, 20).passed is True
    # A session of N = 40 with one top-up and a one-transaction batch meets it.
    wide = run.fig_sessions_tx([_session_round([1] + [0] * 39, 1, (0.001, 0.001))], 40)
    assert wide.value == 20.0 and wide.passed is True


def test_speed_probe_times_the_machine_from_its_own_thread_and_leaves_affinity_alone() -> None:
    run = _run_module()
    before = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    with run.SpeedProbe(every=0.02) as probe:
        eventually_sync(lambda: len(probe.samples) >= 3, "three samples of the probe")
    assert all(s > 0 for s in probe.samples)
    assert probe.median_ms == pytest.approx(statistics.median(probe.samples) * 1000)
    if before is not None:
        assert os.sched_getaffinity(0) == before  # pinning was the probe thread's own
    assert run.SpeedProbe().median_ms is None  # never started: nothing to report

    blocks = [{"steal": 0.01, "max_steal": 0.05, "probe_ms": v} for v in (1.2, 2.5, None)]
    assert "speed probe per block 1.20-2.50 ms" in run.gate_summary(blocks)
    assert run.probe_of({"machine": {"speed_probe_ms": {"a": [1.0, 3.0], "b": [2.0, None]}}}) == 2.0
    assert run.probe_of({"machine": {}}) is None


def evm_run(probes: list[float], signing: list[list[float]]) -> dict[str, Any]:
    """A run's JSON as far as `compare` reads it; the last signature of each block hosted
    a 0.5 ms collection, which the signing time leaves out. It also has `evm_cpu`, as runs
    written by earlier versions of run.py do."""
    blocks = [
        {"probe_ms": p, "signing_cpu_ms": s, "signing_gc_ms": [0.0] * (len(s) - 1) + [0.5]}
        for p, s in zip(probes, signing, strict=True)
    ]
    return {
        "machine": {"speed_probe_ms": {"evm": probes}},
        "figures": {
            "evm_rpc": {"value": 1.0, "spread": [1.0, 1.0], "blocks": blocks},
            "evm_cpu": {"value": 9.0, "spread": [8.99, 9.01]},
        },
    }


def test_reproducibility_verdicts_and_the_machine_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _run_module()
    assert run.reproduced([1.0, 1.02], [(0.97, 1.03), (0.99, 1.05)]) == "yes"
    # The smallest stated spread decides: 0.03 here, and the runs differ by 0.04.
    assert run.reproduced([1.0, 1.04], [(0.9, 1.1), (1.02, 1.05)]) == "NO"
    assert run.reproduced([1.0, 1.0], [(1.0, 1.0)]) == "yes (identical)"
    assert run.reproduced([1.0, 2.0], [(1.0, 1.0)]) == "NO"
    assert run.reproduced([1.0, 2.0], []) == "no spread stated"

    # Twice as slow a machine: signatures take twice the ms.
    quiet = evm_run([1.0, 1.0], [[1.0, 1.5], [1.0, 1.5]])
    busy = evm_run([2.0, 2.0], [[2.0, 2.5], [2.0, 2.5]])
    assert run.run_signing_ms(quiet) == 1.0
    paths = []
    for name, data in (("quiet", quiet), ("busy", busy)):
        (tmp_path / name).write_text(json.dumps(data))
        paths.append(str(tmp_path / name))
    run.compare(paths)
    table = capsys.readouterr().out
    assert "| evm_rpc | 1 | 1 | 0 | 0 | yes (identical) |" in table
    assert "evm_cpu" not in table  # no longer a figure: not compared
    assert "quieter): 1.00, 2.00; eth-account's signing per permit, ms: 1.000, 2.000" in table


def test_signing_between_runs_against_runs_made_for_the_purpose(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _run_module()
    assert run.relative_range([1.0, 1.1, 1.05]) == pytest.approx(0.1 / 1.05)
    # Purpose runs 0.9, 1.0, 1.1: mean 1.0, t95(2) = 4.303, s = 0.1, so a half-width of
    # 4.303 * 0.1 / sqrt(3) and a relative width of about 0.497.
    wide = run.between_runs([1.0, 1.1], [0.9, 1.0, 1.1])
    assert wide.startswith("relative range 0.095 against a relative spread of 0.497")
    assert wide.endswith(": yes")
    # A steady machine: the same two runs are too far apart.
    assert run.between_runs([1.0, 1.1], [1.0, 1.01, 1.0, 1.01]).endswith(": NO")

    def written(name: str, data: dict[str, Any]) -> str:
        (tmp_path / name).write_text(json.dumps(data))
        return str(tmp_path / name)

    def signing(ms: float) -> dict[str, Any]:
        return evm_run([1.0], [[ms, ms + 0.5]])

    compared = [written("a", signing(1.0)), written("b", signing(1.1))]
    run.compare(compared, [written(f"m{i}", signing(v)) for i, v in enumerate((0.9, 1.0, 1.1))])
    out = capsys.readouterr().out
    assert "against 3 runs made for the purpose: relative range 0.095" in out
    assert "(purpose runs 0.900, 1.000, 1.100): yes" in out
    run.compare(compared, [written("m-none", {"figures": {}}), written("m1", signing(1.0))])
    assert "Signing between runs: skipped" in capsys.readouterr().out


def test_only_a_whole_run_replaces_results_latest() -> None:
    run = _run_module()
    results = ROOT / "benchmarks" / "results"
    assert run.output_dir(None, partial=False) == results
    assert run.output_dir(None, partial=True) == results / "tmp"
    assert run.output_dir("/x/y", partial=True) == Path("/x/y")
    assert run.output_dir("/x/y", partial=False) == Path("/x/y")


@pytest.mark.parametrize("suspend", [False, True])
def test_in_process_diagnostic_pays_every_request_once(suspend: bool) -> None:
    """`benchmarks/inprocess.py` (the paid GET without sockets) still runs: both flows pay
    through the lean handlers, every served code was paid once, and each block reports
    its medians. No timing is asserted."""
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "inprocess.py"),
            "--pairs",
            "10",
            "--blocks",
            "2",
            *(["--suspend"] if suspend else []),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["served_codes_paid_once"] is True
    assert result["suspend"] is suspend and result["pairs"] == 10
    assert len(result["blocks"]) == 2
    for row in result["blocks"]:
        assert row["sdk_median_us"] > 0 and row["floor_median_us"] > 0
        assert math.isfinite(row["over_p10_us"])
