"""The sessions' part of the benchmarks' smoke run (`run.py --smoke --only sessions`): our
client pays the sandbox's `batch-settlement` merchant and its `exact` EIP-3009 merchant on
one anvil chain, a few requests of each in interleaved rounds, and counts the transactions
each added to the chain.

No timing assertions: what is checked is that both figures were measured, that every
`exact` payment was one transaction, that each batch of the session was the merchant's
claim and settlement, and that the figure is the ratio of what was counted."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.integration.test_benchmarks_smoke import SESSION_SECTIONS, smoke_run


@pytest.mark.slow
def test_benchmarks_smoke_run_counts_a_sessions_transactions_against_exact(
    tmp_path: Path,
) -> None:
    figures = smoke_run(tmp_path, SESSION_SECTIONS)["figures"]
    assert set(figures) == {"sessions_tx", "sessions_cpu"}
    for key, figure in figures.items():
        assert figure["skipped"] is None, (key, figure["skipped"])

    tx = figures["sessions_tx"]
    n, rounds = tx["n"], tx["rounds"]
    assert n >= 1 and rounds >= 1 and tx["requests"] == n * rounds
    # One transfer on chain per exact payment, read from the chain's blocks.
    assert tx["exact_txs"] == [n] * rounds
    # Each round's batch: the merchant's claim of the vouchers, then its settlement.
    assert tx["session_batch_txs"] == 2 * rounds
    # A deposit lasts at least N requests: at most one top-up a round.
    assert 0 <= tx["session_deposit_txs"] <= rounds
    assert sum(tx["session_txs"]) == tx["session_batch_txs"] + tx["session_deposit_txs"]
    assert tx["value"] == pytest.approx(sum(tx["exact_txs"]) / sum(tx["session_txs"]))
    assert tx["target_value"] == pytest.approx(n / 3)
    assert tx["passed"] is (tx["value"] >= n / 3 * (1 - 1e-9))

    cpu = figures["sessions_cpu"]
    per_round = cpu["cpu_ms_per_round"]
    assert len(per_round["session"]) == len(per_round["exact"]) == rounds
    assert all(t > 0 for t in per_round["session"] + per_round["exact"])
    assert math.isclose(cpu["value"], sum(per_round["session"]) / sum(per_round["exact"]))
    assert cpu["passed"] is (cpu["value"] <= 1.5)
