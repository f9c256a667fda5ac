"""Two distributions: the client wheel holds only the client; the sandbox ships apart.

Both wheels are built here with hatchling (no build isolation: the dev extra installs it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from x402_client import __version__
from x402_eur_sandbox._anvil import ANVIL_DEV_KEYS

ROOT = Path(__file__).resolve().parents[2]


#: Where the wheel carries the command line's reference (docs/cli.md): `x402-eur help`.
REFERENCE = "x402_client/cli/reference.md"


def build_wheel(project: Path, into: Path) -> zipfile.ZipFile:
    try:
        from hatchling.builders.wheel import WheelBuilder
    except ImportError:
        pytest.fail("hatchling is not installed: it is in the dev extra (make install)")
    [built] = list(WheelBuilder(str(project)).build(directory=str(into), versions=["standard"]))
    return zipfile.ZipFile(built)


def test_the_client_wheel_holds_only_the_client(tmp_path: Path) -> None:
    with build_wheel(ROOT, tmp_path) as wheel:
        names = wheel.namelist()
        contents = {name: wheel.read(name) for name in names}
    assert "x402_client/__init__.py" in names
    assert "x402_client/py.typed" in names
    assert contents[REFERENCE] == (ROOT / "docs" / "cli.md").read_bytes()
    dist_info = {name.split("/", 1)[0] for name in names if ".dist-info/" in name}
    assert dist_info == {f"x402_eur-{__version__}.dist-info"}
    assert [
        n for n in names if not n.startswith(("x402_client/", f"x402_eur-{__version__}.dist-info/"))
    ] == []
    assert [name for name in names if "sandbox" in name.lower()] == []
    assert [name for name in names if name.endswith((".sol", ".json", ".mjs"))] == []
    keys = [key.removeprefix("0x").encode() for key in ANVIL_DEV_KEYS]
    assert len(keys) >= 5
    leaked = [name for name, data in contents.items() if any(key in data.lower() for key in keys)]
    assert leaked == []
    entry_points = next(
        data for name, data in contents.items() if name.endswith("entry_points.txt")
    )
    assert b"x402-eur-sandbox" not in entry_points


def test_the_sandbox_wheel_holds_the_sandbox_and_its_contracts(tmp_path: Path) -> None:
    with build_wheel(ROOT / "sandbox", tmp_path) as wheel:
        names = wheel.namelist()
        entry_points = next(wheel.read(n) for n in names if n.endswith("entry_points.txt"))
        metadata = next(wheel.read(n) for n in names if n.endswith(".dist-info/METADATA"))
    assert {
        "x402_eur_sandbox/__init__.py",
        "x402_eur_sandbox/py.typed",
        "x402_eur_sandbox/cli.py",
        "x402_eur_sandbox/contracts/SandboxToken.json",
        "x402_eur_sandbox/contracts/SandboxEip3009Token.json",
    } <= set(names)
    assert [n for n in names if not n.startswith(("x402_eur_sandbox/", "x402_eur_sandbox-"))] == []
    assert b"x402-eur-sandbox = x402_eur_sandbox.cli:main" in entry_points
    assert b"Name: x402-eur-sandbox" in metadata
    # The sandbox stands on its own: the client is no requirement of it.
    requirements = [line for line in metadata.splitlines() if line.startswith(b"Requires-Dist:")]
    assert requirements
    assert not any(b"x402-eur" in line and b"sandbox" not in line for line in requirements)


def test_x402_eur_help_prints_the_reference_the_wheel_carries(tmp_path: Path) -> None:
    """Unpacked alone (no docs/ beside it), the wheel's `x402-eur help` prints its own copy."""
    with build_wheel(ROOT, tmp_path / "dist") as wheel:
        wheel.extractall(tmp_path / "site")  # noqa: S202 (the wheel built just above)
    result = subprocess.run(
        [sys.executable, "-m", "x402_client.cli", "help"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path / "site")},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert not (tmp_path / "docs").exists()


def test_a_wheel_built_from_the_sdist_carries_the_reference(tmp_path: Path) -> None:
    from hatchling.builders.sdist import SdistBuilder

    [sdist] = list(SdistBuilder(str(ROOT)).build(directory=str(tmp_path), versions=["standard"]))
    with tarfile.open(sdist) as archive:
        archive.extractall(tmp_path / "src", filter="data")
    [unpacked] = list((tmp_path / "src").iterdir())
    with build_wheel(unpacked, tmp_path / "dist") as wheel:
        assert wheel.read(REFERENCE) == (ROOT / "docs" / "cli.md").read_bytes()
