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

import os
from collections.abc import Mapping
from pathlib import Path

import anyio

from tests.mcp_foundation import SideEnvironment

__all__ = ["EXAMPLES", "REQUIREMENTS", "build_environment", "framework_tools_python", "run_example"]

HERE = Path(__file__).parent
ROOT = HERE.parent
REQUIREMENTS = HERE / "framework_tools_requirements.txt"
EXAMPLES = ROOT / "examples" / "agents"


ENVIRONMENT = SideEnvironment(
    "framework-tools",
    REQUIREMENTS,
    "the agent frameworks' environment",
    checkout_extras="mcp,evm",
)
build_environment = ENVIRONMENT.build
framework_tools_python = ENVIRONMENT.python


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
    ENVIRONMENT.build_before_the_tests()
