"""The x402 foundation's paid MCP server, in an environment of its own (test helper).

The foundation's `x402.mcp` server wrapper is built on `mcp` 1.x (`mcp.server.fastmcp`,
removed in 2.x) while the client under test uses `mcp` 2.x, so the server cannot share the
project's environment. `foundation_mcp_python()` builds a virtual environment from
`tests/mcp_foundation_requirements.txt` once (under the user's cache directory, keyed by
that file and the Python version; pip's own cache is reused), and `foundation_mcp_server()`
runs `tests/mcp_foundation_server.py` in it as a subprocess speaking streamable HTTP on
127.0.0.1, settling through the foundation facilitator of a `FoundationStack`.
`foundation_svm_mcp_server()` runs their paid MCP server on Solana
(`tests/svm_foundation_mcp_server.py`) in the foundation's SVM environment
(`sandbox/tests/svm_foundation.py`), settling through their own SVM facilitator.

Only if the environment cannot be built (no registry reachable) do the tests skip, with
the reason pip gave.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import IO, Any

import anyio
import anyio.abc

from tests import tls_bundle
from tests.needs import missing
from tests.x402_foundation import TOKEN_NAME, TOKEN_VERSION, FoundationStack

__all__ = [
    "ENVIRONMENT",
    "REQUIREMENTS",
    "SideEnvironment",
    "build_environment",
    "build_once",
    "build_venv",
    "foundation_mcp_python",
    "foundation_mcp_server",
    "foundation_svm_mcp_server",
    "serving",
]

HERE = Path(__file__).parent
ROOT = HERE.parent
REQUIREMENTS = HERE / "mcp_foundation_requirements.txt"
SERVER = HERE / "mcp_foundation_server.py"
SVM_SERVER = HERE / "svm_foundation_mcp_server.py"
_BUILD_TIMEOUT = 900


def _cache_root() -> Path:
    configured = os.environ.get("X402_EUR_TEST_CACHE")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "x402-eur-tests"


def _python_of(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


@dataclasses.dataclass(frozen=True)
class SideEnvironment:
    """A virtual environment of its own for code the client must not depend on (another
    `mcp` generation, the foundation's pinned packages, agent frameworks), built once under
    the user's cache directory and keyed by what it installs, so a change rebuilds it. With
    `checkout_extras` it installs this checkout too (`-e ROOT[extras]`): then it is keyed by
    the checkout's path and pyproject as well, and built once per checkout."""

    name: str  # the cache directory's prefix
    requirements: Path
    what: str  # how a note or a skip names it
    checkout_extras: str | None = None

    def venv(self) -> Path:
        keyed = [self.requirements.read_bytes()]
        if self.checkout_extras is not None:
            keyed += [(ROOT / "pyproject.toml").read_bytes(), str(ROOT.resolve()).encode()]
        key = hashlib.sha256(b"".join(keyed) + sys.version.encode()).hexdigest()[:16]
        return _cache_root() / f"{self.name}-{key}"

    def build(self) -> tuple[Path, str | None]:
        """Build it unless it is built (once, under a file lock, so that parallel test
        workers build it once): its Python, and None or why it could not be built."""
        install = ["-r", str(self.requirements)]
        if self.checkout_extras is not None:
            install += ["-e", f"{ROOT}[{self.checkout_extras}]"]
        return build_once(self.venv(), lambda venv: build_venv(venv, *install))

    def python(self) -> Path:
        """Its Python, built on first use; when it cannot be built, the calling test is
        skipped with the reason (under CI, it fails)."""
        python, problem = self.build()
        if problem is not None:
            missing(
                f"{self.what} could not be built from {self.requirements.name} "
                f"(make test-environments): {problem}"
            )
        return python

    def build_before_the_tests(self) -> None:
        """`make test-environments`: build it before the tests start (a note if it cannot:
        the tests that need it then skip with the reason, or fail under CI)."""
        _, reason = self.build()
        if reason is not None:
            print(f"note: {self.what}: {reason}", file=sys.stderr)


ENVIRONMENT = SideEnvironment(
    "mcp-foundation", REQUIREMENTS, "the x402 foundation's MCP server environment"
)


def build_venv(venv: Path, *install: str) -> str | None:
    """A fresh virtual environment at `venv` with `pip install *install` in it: None, or
    why it could not be built (pip's last lines)."""
    steps = [
        [sys.executable, "-m", "venv", "--clear", str(venv)],
        [str(_python_of(venv)), "-m", "pip", "install", "--quiet", *install],
    ]
    for step in steps:
        try:
            done = subprocess.run(
                step,
                capture_output=True,
                text=True,
                timeout=_BUILD_TIMEOUT,
                env=tls_bundle.system_environment(),  # pip reaches a real registry
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{' '.join(step[:3])}: {exc}"
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            return f"{' '.join(step[:3])} failed: {' / '.join(tail)}"
    return None


def build_once(venv: Path, build: Callable[[Path], str | None]) -> tuple[Path, str | None]:
    """`build(venv)` unless the environment is built, under a file lock so that parallel
    test workers build it once: its Python, and None or why it could not be built."""
    ready = venv / ".ready"
    if ready.exists():
        return _python_of(venv), None
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        if os.name != "nt":
            import fcntl

            fcntl.flock(lock, fcntl.LOCK_EX)
        if not ready.exists():
            problem = build(venv)
            if problem is not None:
                return _python_of(venv), problem
            ready.write_text("built\n")
    return _python_of(venv), None


build_environment = ENVIRONMENT.build
foundation_mcp_python = ENVIRONMENT.python


@contextlib.asynccontextmanager
async def foundation_mcp_server(stack: FoundationStack, python: Path) -> AsyncIterator[str]:
    """Run the foundation's paid MCP server for `stack` and yield its streamable HTTP URL.

    The server fetches the facilitator's `/supported` at start-up, from this process's
    event loop: its announcement line is awaited, never read in a blocking way."""
    command = [
        str(python),
        str(SERVER),
        "--facilitator", stack.facilitator_url,
        "--network", stack.network,
        "--asset", stack.token,
        "--pay-to", stack.merchant_address,
        "--price", str(stack.price_atomic),
        "--token-name", TOKEN_NAME,
        "--token-version", TOKEN_VERSION,
    ]  # fmt: skip
    async with serving(command, "the foundation's MCP server") as url:
        yield url


@contextlib.asynccontextmanager
async def foundation_svm_mcp_server(python: Path, config: dict[str, Any]) -> AsyncIterator[str]:
    """Run the foundation's paid MCP server on Solana (`svm_foundation_mcp_server.py`, in
    the foundation's SVM environment at `python`) for `config` and yield its URL."""
    command = [str(python), str(SVM_SERVER), json.dumps(config)]
    async with serving(command, "the foundation's Solana MCP server") as url:
        yield url


@contextlib.asynccontextmanager
async def serving(command: list[str], name: str) -> AsyncIterator[str]:
    """Run a server `command` that announces `{"url": ...}` on its first line of stdout,
    yield that URL, and stop the server afterwards."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    with tempfile.TemporaryFile() as errors:
        process = await anyio.open_process(command, env=environment, stderr=errors)
        try:
            yield await _announced(process, errors, name)
        finally:
            if process.returncode is None:
                process.terminate()
                with anyio.move_on_after(10):
                    await process.wait()
                if process.returncode is None:
                    process.kill()
            await process.aclose()


async def _announced(
    process: anyio.abc.Process, errors: IO[bytes], name: str = "the foundation's MCP server"
) -> str:
    """The URL the server prints once it serves (what it wrote to stderr, if it died)."""
    assert process.stdout is not None
    line = b""
    with anyio.fail_after(60):
        async for chunk in process.stdout:
            line += chunk
            if b"\n" in line:
                break
    if not line.strip():
        errors.seek(0)
        problem = errors.read().decode(errors="replace")
        raise RuntimeError(f"{name} did not start: {problem[-2000:]}")
    return str(json.loads(line.splitlines()[0])["url"])


if __name__ == "__main__":
    ENVIRONMENT.build_before_the_tests()
