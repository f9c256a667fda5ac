"""The sandbox distribution's own tests: its command, its wire code, its imports."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def own_state_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets a state file of its own: never the user's real one."""
    path = tmp_path / "state" / "state.sqlite3"
    monkeypatch.setenv("X402_EUR_STATE", str(path))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    return path


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
