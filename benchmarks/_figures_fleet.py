"""Figures 9a-9c: a fleet of worker processes paying from one budget of exactly K
payments, on one PostgreSQL state against the same fleet on one SQLite file.

Each run starts N worker processes (`_fleet_worker.py`, each in a directory of its own)
against the sandbox merchant's `/weather` (0.10 EUR, the euro rail), all with one euro
budget of K x 0.10 EUR in one state: a fresh PostgreSQL database, or a fresh SQLite file
(the reference: one machine). The workers start together and pay one request after
another until the budget refuses one. A run's figure is K over the wall time from the
start to the last worker's last answer. For each N the two stores alternate, the first
one changing every round; 9a-N is the mean of the rounds' ratios, PostgreSQL / SQLite.

9b is the budget's exactness, read at the sandbox's bank: the transactions each run
added, minus K, the worst run over both stores (0 when every run moved exactly K
payments). 9c is the database round trips per warm payment, counted at the server: the
cluster logs every statement of the measured database (`log_statement = all`, set on
that database only) and the statements one worker sends for `fleet_trips` payments, after
two warm-up ones, are counted in the server's log. The store sends no pipelines, so one
statement is one round trip.
"""

from __future__ import annotations

import collections
import contextlib
import json
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

from _figure import Figure, skipped, unless
from _procs import PY, Sandbox
from _stats import listed, over_blocks
from _targets import FLEET_OVERSPEND, FLEET_ROUND_TRIPS

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WORKER = HERE / "_fleet_worker.py"
PRICE = Decimal("0.10")  # the sandbox's `/weather`
STORES = ("postgres", "sqlite")
#: A statement line of the server's log: simple (`statement:`) or extended protocol
#: (`execute <name>:`), the one psycopg uses for a statement with parameters.
_STATEMENT = re.compile(r"LOG:  (statement|execute [^:]*): ")

Run = dict[str, Any]


@contextlib.contextmanager
def _cluster() -> Iterator[Any]:
    """A PostgreSQL cluster on a free loopback port, from the machine's own binaries: the
    tests' helper (`tests/postgres_server.py`), as the foundation's merchant reuses the
    tests' stack."""
    sys.path.insert(0, str(ROOT))
    try:
        from tests.postgres_server import INSTALL, PostgresCluster, server_bin
    finally:
        sys.path.remove(str(ROOT))
    bindir = server_bin()
    if bindir is None:
        raise RuntimeError(f"PostgreSQL is not installed: {INSTALL}")
    cluster = PostgresCluster(bindir)
    try:
        yield cluster.start()
    finally:
        cluster.stop()


def _state(store: str, cluster: Any, where: Path, *, logged: bool = False) -> str:
    """A fresh, empty state: a new database of the cluster, or a new SQLite file."""
    if store == "sqlite":
        return str(where / "state.sqlite3")
    dsn: str = cluster.database()
    if logged:
        import psycopg

        name = dsn.rsplit("/", 1)[1]
        with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
            conn.execute(f"ALTER DATABASE \"{name}\" SET log_statement = 'all'")
    return dsn


def _spawn(config: dict[str, Any], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [PY, str(WORKER), json.dumps(config)],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for(files: list[Path], procs: list[subprocess.Popen[str]]) -> None:
    """Until every file exists; a worker that exits first, or 5 minutes, is an error."""
    deadline = time.monotonic() + 300
    while not all(f.exists() for f in files):
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            for p in procs:
                p.kill()
            errors = [p.communicate()[1][-500:] for p in procs]
            raise RuntimeError(f"a fleet worker stopped early: {errors}")
        time.sleep(0.01)


def _reports(procs: list[subprocess.Popen[str]]) -> list[dict[str, Any]]:
    reports = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        if p.returncode != 0:
            raise RuntimeError(f"a fleet worker exited {p.returncode}: {err[-500:]}")
        reports.append(json.loads(out.strip().splitlines()[-1]))
    return reports


def _fleet(server: Sandbox, state: str, n: int, config: dict[str, Any], where: Path) -> Run:
    """Run `n` workers on `state` until the budget refuses; their reports and timing."""
    go = where / "go"
    procs, ready = [], []
    for index in range(n):
        machine = where / f"machine-{index}"
        machine.mkdir()
        ready.append(machine / "ready")
        worker = {**config, "state": state, "ready": str(ready[-1]), "go": str(go)}
        procs.append(_spawn(worker, machine))
    _wait_for(ready, procs)
    bank0 = server.stats()["bank_transactions"]
    started = time.time()
    go.touch()
    reports = _reports(procs)
    return {
        "workers": n,
        "paid": sum(r["paid"] for r in reports),
        "bank": server.stats()["bank_transactions"] - bank0,
        "refused": sum(r["refused"] for r in reports),
        "other": [o for r in reports for o in r["other"]],
        "seconds": max(r["finished"] for r in reports) - started,
    }


def _statements(log: Path, offset: int) -> collections.Counter[str]:
    """The statements logged from `offset` on, by their first words (which write)."""
    kinds: collections.Counter[str] = collections.Counter()
    with log.open("rb") as f:
        f.seek(offset)
        for line in f:
            text = line.decode(errors="replace")
            found = _STATEMENT.search(text)
            if found:
                kinds[" ".join(text[found.end() :].split()[:4])] += 1
    return kinds


def _round_trips(cluster: Any, base: dict[str, Any], n: int) -> Run:
    """One warm worker's statements per payment, counted in the server's log from the
    moment it is warm (ready) to its last payment (done), before it closes the store."""
    log = Path(cluster.root) / "server.log"
    with tempfile.TemporaryDirectory(prefix="x402-fleet-") as temp:
        where = Path(temp)
        files = {name: where / name for name in ("ready", "go", "done", "close")}
        config = {
            **base,
            "state": _state("postgres", cluster, where, logged=True),
            "limit": str(PRICE * (n + 10)),
            "warmup": 2,
            "n": n,
            **{name: str(path) for name, path in files.items()},
        }
        proc = _spawn(config, where)
        _wait_for([files["ready"]], [proc])
        offset = log.stat().st_size
        files["go"].touch()
        _wait_for([files["done"]], [proc])
        kinds = _statements(log, offset)
        files["close"].touch()
        (report,) = _reports([proc])
    if report["paid"] != n:
        raise RuntimeError(f"the round-trip worker paid {report['paid']} of {n}: {report}")
    statements = sum(kinds.values())
    return {"statements": statements, "paid": n, "per_payment": statements / n, "kinds": kinds}


def _measure(counts: dict[str, int]) -> dict[str, Any]:
    k = counts["fleet_k"]
    sizes = [s for s in (1, 2, 4, 8) if s <= counts["fleet_max_workers"]]
    runs: dict[str, list[dict[str, Run]]] = {str(n): [] for n in sizes}
    with Sandbox() as server, _cluster() as cluster:
        base = {"options": server.options, "url": server.url("/weather")}
        fleet = {**base, "limit": str(PRICE * k), "warmup": 0, "n": 0}
        for round_ in range(counts["fleet_rounds"]):
            order = STORES if round_ % 2 == 0 else STORES[::-1]
            for n in sizes:
                pair: dict[str, Run] = {}
                for store in order:
                    with tempfile.TemporaryDirectory(prefix="x402-fleet-") as where:
                        state = _state(store, cluster, Path(where))
                        pair[store] = _fleet(server, state, n, fleet, Path(where))
                        print(f"  {store} x {n}: {_line(pair[store], k)}", flush=True)
                runs[str(n)].append(pair)
        trips = _round_trips(cluster, base, counts["fleet_trips"])
    return {"k": k, "runs": runs, "trips": trips}


def _line(run: Run, k: int) -> str:
    return (
        f"{k / run['seconds']:.1f} paid/s, {run['paid']} paid by the workers, "
        f"{run['bank']} at the bank, {run['refused']} refused"
        + (f", other: {run['other'][:2]}" if run["other"] else "")
    )


def _throughput(n: str, pairs: list[dict[str, Run]], k: int) -> Figure:
    ratios = [p["sqlite"]["seconds"] / p["postgres"]["seconds"] for p in pairs]
    mean, spread = over_blocks(ratios)
    rate = {s: [k / p[s]["seconds"] for p in pairs] for s in STORES}
    return Figure(
        f"fleet_{n}",
        f"9a-{n}. Fleet of {n} worker process(es), one budget of {k} payments: paid "
        "requests per second, PostgreSQL state / one SQLite file (informational)",
        mean,
        "x",
        "informational (SQLite: one machine only)",
        None,
        f"{len(pairs)} rounds, the stores alternating; paid/s per round: PostgreSQL "
        f"{listed(rate['postgres'], '.1f')}, SQLite {listed(rate['sqlite'], '.1f')}; "
        f"ratio per round {listed(ratios, '.3f')}",
        ratios,
        None,
        {"rounds": pairs},
        spread=spread,
        spread_kind="95% t-interval over rounds",
    )


def _exactness(data: dict[str, Any]) -> Figure:
    k = data["k"]
    every = [(n, s, p[s]) for n, pairs in data["runs"].items() for p in pairs for s in STORES]
    off = [r["bank"] - k for _, _, r in every]
    worst = max(off, key=abs)
    agreed = all(r["bank"] == r["paid"] for _, _, r in every)
    ok = worst == 0 and agreed
    return Figure(
        "fleet_exact",
        f"9b. Fleet: payments at the bank beyond the budget of exactly {k} (worst run)",
        float(worst),
        "payments",
        f"{FLEET_OVERSPEND:.0f} (exactly {k} in every run, both stores)",
        ok,
        f"{len(every)} runs; payments at the bank per run "
        + ", ".join(f"{s} x {n}: {r['bank']}" for n, s, r in every)
        + ("" if agreed else "; the workers' paid counts DIFFER from the bank's")
        + unless(ok, abs(worst), FLEET_OVERSPEND, upper=True, unit="payments"),
        [float(o) for o in off],
        FLEET_OVERSPEND,
        {"paid_equals_bank": agreed, "k": k},
        spread=(float(worst), float(worst)),
        spread_kind="exact count",
    )


def _trips_figure(trips: Run) -> Figure:
    per = trips["per_payment"]
    ok = per <= FLEET_ROUND_TRIPS
    return Figure(
        "fleet_round_trips",
        "9c. PostgreSQL state: database round trips per warm payment (statements at the server)",
        per,
        "round trips",
        f"<= {FLEET_ROUND_TRIPS:.0f}",
        ok,
        f"{trips['statements']} statements logged by the server for {trips['paid']} warm "
        "payments of one worker (no pipelines: a statement is a round trip); by kind "
        f"{dict(trips['kinds'])}" + unless(ok, per, FLEET_ROUND_TRIPS, upper=True, unit="trips"),
        [],
        FLEET_ROUND_TRIPS,
        {"statements": trips["statements"], "payments": trips["paid"], "kinds": trips["kinds"]},
        spread=(per, per),
        spread_kind="exact count",
    )


def fig_fleet(counts: dict[str, int]) -> list[Figure]:
    """Figures 9a-N (one per fleet size), 9b and 9c; skipped with the reason when the
    sandbox or PostgreSQL does not work."""
    try:
        data = _measure(counts)
    except Exception as exc:
        reason = f"fleet not measured: {type(exc).__name__}: {exc}"[:300]
        return [
            skipped("fleet_exact", "9b. Fleet: budget exactness", "0", reason),
            skipped("fleet_round_trips", "9c. PostgreSQL round trips", "<= 3", reason),
        ]
    figures = [_throughput(n, pairs, data["k"]) for n, pairs in data["runs"].items()]
    return [*figures, _exactness(data), _trips_figure(data["trips"])]
