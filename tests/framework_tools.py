"""The agent frameworks' own tools, in an environment of their own (test helper).

LangChain, its MCP adapters (on `mcp` 1.x), the OpenAI Agents SDK and PydanticAI are no
dependency of the client: `framework_tools_python()` builds a virtual environment from
`tests/framework_tools_requirements.txt` and this checkout (`-e .[mcp,evm]`), once per
checkout, Python and dependency list (under the user's cache directory, pip's cache
reused), and `run_example()` runs one of `examples/agents/` in it, as a user runs it.

When the environment cannot be built (no registry reachable) the tests that need it skip
with the reason pip gave; under CI they fail.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Mapping
from pathlib import Path

import anyio

from tests.mcp_foundation import _cache_root, build_once, build_venv
from tests.needs import missing

__all__ = ["EXAMPLES", "REQUIREMENTS", "build_environment", "framework_tools_python", "run_example"]

HERE = Path(__file__).parent
ROOT = HERE.parent
REQUIREMENTS = HERE / "framework_tools_requirements.txt"
EXAMPLES = ROOT / "examples" / "agents"


def _venv_dir() -> Path:
    key = hashlib.sha256(
        REQUIREMENTS.read_bytes()
        + (ROOT / "pyproject.toml").read_bytes()
        + str(ROOT.resolve()).encode()
        + sys.version.encode()
    ).hexdigest()[:16]
    return _cache_root() / f"framework-tools-{key}"


def _build(venv: Path) -> str | None:
    return build_venv(venv, "-r", str(REQUIREMENTS), "-e", f"{ROOT}[mcp,evm]")


def build_environment() -> tuple[Path, str | None]:
    """Build the frameworks' environment unless it is built (once, under a file lock, so
    that parallel test workers build it once): its Python, and None or why it could not
    be built."""
    return build_once(_venv_dir(), _build)


def framework_tools_python() -> Path:
    """The Python of the frameworks' environment, built on first use; when it cannot be
    built, the calling test is skipped with the reason (under CI, it fails)."""
    python, problem = build_environment()
    if problem is not None:
        missing(
            "the agent frameworks' environment could not be built from "
            f"{REQUIREMENTS.name} (make test-environments): {problem}"
        )
    return python


async def run_example(
    python: Path, name: str, settings: Mapping[str, str], *arguments: str
) -> tuple[str, str]:
    """Run `examples/agents/<name>.py` with the client settings `settings` (the variables
    `PaymentOptions.from_env()` reads) and nothing else of this process's X402_EUR_* or
    PYTHON* variables; its stdout and stderr. It must exit 0."""
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PYTHON", "X402_EUR_"))
    }
    environment.update(settings)
    environment["PYTHONUNBUFFERED"] = "1"
    with anyio.fail_after(240):
        done = await anyio.run_process(
            [str(python), str(EXAMPLES / f"{name}.py"), *arguments],
            env=environment,
            check=False,
        )
    out, err = done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
    if done.returncode != 0:
        raise AssertionError(f"examples/agents/{name}.py failed ({done.returncode}): {err[-3000:]}")
    return out, err


if __name__ == "__main__":
    # `make test-environments` builds it before the tests start (a note if it cannot).
    _, reason = build_environment()
    if reason is not None:
        print(f"note: the agent frameworks' environment: {reason}", file=sys.stderr)
