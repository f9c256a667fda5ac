"""The fleet's part of the benchmarks' smoke run (`run.py --smoke --only fleet`): one and
two worker processes sharing a budget of exactly two payments, on a PostgreSQL state and on
a SQLite file, and one warm worker's statements counted at the PostgreSQL server.

No timing assertions: the run must show the budget held exactly (every run moved exactly
K payments at the sandbox's bank, as many as the workers say they paid) and that the round
trips were counted, not that anything was fast."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.test_benchmarks_smoke import smoke_run
from tests.needs import missing
from tests.postgres_server import INSTALL, server_bin


@pytest.mark.slow
def test_benchmarks_smoke_run_measures_the_fleet_on_one_exact_budget(tmp_path: Path) -> None:
    if server_bin() is None:
        missing(f"PostgreSQL is not installed: {INSTALL}")
    figures = smoke_run(tmp_path, "fleet")["figures"]
    assert set(figures) == {"fleet_1", "fleet_2", "fleet_exact", "fleet_round_trips"}
    for key, figure in figures.items():
        assert figure["skipped"] is None, (key, figure["skipped"])

    exact = figures["fleet_exact"]
    k = exact["k"]
    assert k >= 1
    assert exact["value"] == 0 and exact["passed"] is True
    assert exact["paid_equals_bank"] is True
    for size in ("fleet_1", "fleet_2"):
        for pair in figures[size]["rounds"]:
            for store in ("postgres", "sqlite"):
                run = pair[store]
                assert run["bank"] == k and run["paid"] == k, (size, store, run)
                # Every worker stopped at the budget's refusal, not at an error.
                assert run["refused"] == run["workers"] and run["other"] == [], run

    trips = figures["fleet_round_trips"]
    assert trips["payments"] >= 1
    # Counted at the server: a paid request writes its reservation and its journal.
    assert trips["statements"] >= 2 * trips["payments"]
    assert trips["value"] == trips["statements"] / trips["payments"]
