"""The committed SandboxToken artifact matches a fresh compile of the source."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]  # the repository: node_modules lives there


def test_contract_artifact_is_up_to_date() -> None:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not installed: install Node.js 20+ and run `npm ci`")
    if not (ROOT / "node_modules" / "solc").is_dir():
        pytest.fail("node_modules is missing: run `npm ci` in the project root")
    result = subprocess.run(
        [node, "sandbox/scripts/compile_contracts.mjs", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
