"""The x402 foundation's Python SVM client and facilitator, in an environment of their
own (test helper).

`x402[svm]` breaks with `solana` >= 0.40 and pins a `solders` older than the sandbox's, so
it cannot share the project's environment. `build_environment()` builds a virtual
environment from `svm_foundation_requirements.txt` once per machine (under the user's
cache directory, keyed by that file and the Python version; pip's cache is reused), and
`run_tool()` runs `svm_foundation_tool.py` in it. It carries `mcp` 1.x too, for the
foundation's paid MCP server on Solana (`tests/svm_foundation_mcp_server.py`). Only if the environment cannot be built
(no registry reachable) do the tests skip, with the reason pip gave. `make
test-environments` builds it before the tests start.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio

__all__ = ["build_environment", "foundation_python", "run_tool"]

HERE = Path(__file__).parent
REQUIREMENTS = HERE / "svm_foundation_requirements.txt"
TOOL = HERE / "svm_foundation_tool.py"
_BUILD_TIMEOUT = 900


def _venv_dir() -> Path:
    configured = os.environ.get("X402_EUR_TEST_CACHE")
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    root = Path(configured) if configured else Path(base) / "x402-eur-tests"
    key = hashlib.sha256(REQUIREMENTS.read_bytes() + sys.version.encode()).hexdigest()[:16]
    return root / f"svm-foundation-{key}"


def _python_of(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _registry_environment() -> dict[str, str]:
    """The environment with the CA bundle the test session replaced (pip reaches a real
    registry)."""
    environment = dict(os.environ)
    saved = environment.pop("X402_EUR_TESTS_SYSTEM_SSL_CERT_FILE", None)
    if saved:
        environment["SSL_CERT_FILE"] = saved
    elif saved is not None:
        environment.pop("SSL_CERT_FILE", None)
    return environment


def build_environment() -> tuple[Path, str | None]:
    """The environment's Python, and None or why it could not be built (built once, under
    a file lock so parallel workers build it once)."""
    venv = _venv_dir()
    ready = venv / ".ready"
    if ready.exists():
        return _python_of(venv), None
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        if os.name != "nt":
            import fcntl

            fcntl.flock(lock, fcntl.LOCK_EX)
        if ready.exists():
            return _python_of(venv), None
        steps = [
            [sys.executable, "-m", "venv", "--clear", str(venv)],
            [str(_python_of(venv)), "-m", "pip", "install", "--quiet", "-r", str(REQUIREMENTS)],
        ]
        for step in steps:
            try:
                done = subprocess.run(
                    step,
                    capture_output=True,
                    text=True,
                    timeout=_BUILD_TIMEOUT,
                    env=_registry_environment(),
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                return _python_of(venv), f"{' '.join(step[:3])}: {exc}"
            if done.returncode != 0:
                tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
                return _python_of(venv), f"{' '.join(step[:3])} failed: {' / '.join(tail)}"
        ready.write_text("built\n")
    return _python_of(venv), None


def foundation_python() -> Path:
    """The environment's Python, built on first use. When it cannot be built, the calling
    test is skipped with the reason (under CI, it fails)."""
    from tests.needs import missing  # the suite's own rule (this file also runs alone)

    python, problem = build_environment()
    if problem is not None:
        missing(
            "the x402 foundation's SVM environment could not be built "
            f"(make test-environments): {problem}"
        )
    return python


async def run_tool(python: Path, command: str, request: dict[str, Any]) -> Any:
    """Run the foundation's code on `request` (without blocking the event loop that serves
    the sandbox it talks to): its JSON answer."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    with anyio.fail_after(120):
        done = await anyio.run_process(
            [str(python), str(TOOL), command],
            input=json.dumps(request).encode(),
            env=environment,
            check=False,
        )
    if done.returncode != 0:
        raise RuntimeError(f"the foundation's {command} failed: {done.stderr.decode()[-2000:]}")
    return json.loads(done.stdout)


if __name__ == "__main__":
    _, reason = build_environment()
    if reason is not None:
        print(f"note: the x402 foundation's SVM environment: {reason}", file=sys.stderr)
