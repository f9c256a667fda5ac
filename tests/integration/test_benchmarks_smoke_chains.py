"""The chains' half of the benchmarks' smoke run (`run.py --smoke --only` the sandbox, EVM,
EIP-3009 and bridge sections), in a module of its own so that a parallel worker runs it
beside the other half (`test_benchmarks_smoke.py`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.test_benchmarks_smoke import CHAIN_FIGURES, CHAIN_SECTIONS, smoke_run


@pytest.mark.slow
def test_benchmarks_smoke_run_writes_every_chain_figure(tmp_path: Path) -> None:
    figures = smoke_run(tmp_path, CHAIN_SECTIONS)["figures"]
    assert set(figures) == CHAIN_FIGURES, sorted(set(figures) ^ CHAIN_FIGURES)
