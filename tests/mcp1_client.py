"""The client on the 1.x MCP SDK, in an environment of its own (test helper).

The project's environment has `mcp` 2.x (`x402-eur mcp` needs it); a payer whose framework
brings `mcp` 1.x gets the same paid tool calls. `mcp1_client_python()` builds a virtual
environment from `tests/mcp1_client_requirements.txt` and this checkout (`-e .[mcp,evm]`),
once per checkout, Python and dependency list (under the user's cache directory, pip's cache
reused), and `run_mcp1_client()` runs `tests/mcp1_client_script.py` in it: one tool call on
an `mcp` 1.x `ClientSession`, paid by `with_eur_payment`, reported as JSON.

When the environment cannot be built (no registry reachable) the tests that need it skip
with the reason pip gave; under CI they fail.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio

from tests.mcp_foundation import _cache_root, build_once, build_venv
from tests.needs import missing

__all__ = ["REQUIREMENTS", "build_environment", "mcp1_client_python", "run_mcp1_client"]

HERE = Path(__file__).parent
ROOT = HERE.parent
REQUIREMENTS = HERE / "mcp1_client_requirements.txt"
SCRIPT = HERE / "mcp1_client_script.py"


def _venv_dir() -> Path:
    key = hashlib.sha256(
        REQUIREMENTS.read_bytes()
        + (ROOT / "pyproject.toml").read_bytes()
        + str(ROOT.resolve()).encode()
        + sys.version.encode()
    ).hexdigest()[:16]
    return _cache_root() / f"mcp1-client-{key}"


def _build(venv: Path) -> str | None:
    """Build the environment at `venv`; None, or why it could not be built."""
    return build_venv(venv, "-r", str(REQUIREMENTS), "-e", f"{ROOT}[mcp,evm]")


def build_environment() -> tuple[Path, str | None]:
    """Build the 1.x client environment unless it is built (once, under a file lock, so
    that parallel test workers build it once): its Python, and None or why it could not
    be built."""
    return build_once(_venv_dir(), _build)


def mcp1_client_python() -> Path:
    """The Python of the 1.x client environment, built on first use; when it cannot be
    built, the calling test is skipped with the reason (under CI, it fails)."""
    python, problem = build_environment()
    if problem is not None:
        missing(
            "the mcp 1.x client environment could not be built from "
            f"{REQUIREMENTS.name} (make test-environments): {problem}"
        )
    return python


async def run_mcp1_client(python: Path, call: dict[str, Any]) -> dict[str, Any]:
    """Run one paid tool call (`call`, see tests/mcp1_client_script.py) on `mcp` 1.x and
    return its report."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    with anyio.fail_after(180):
        done = await anyio.run_process(
            [str(python), str(SCRIPT), json.dumps(call)], env=environment, check=False
        )
    if done.returncode != 0:
        raise AssertionError(
            f"the mcp 1.x client failed ({done.returncode}): "
            f"{done.stderr.decode(errors='replace')[-3000:]}"
        )
    report: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return report


if __name__ == "__main__":
    # `make test-environments` builds it before the tests start (a note if it cannot).
    _, reason = build_environment()
    if reason is not None:
        print(f"note: the mcp 1.x client environment: {reason}", file=sys.stderr)
