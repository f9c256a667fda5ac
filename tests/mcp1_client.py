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

import json
import os
from pathlib import Path
from typing import Any

import anyio

from tests.mcp_foundation import SideEnvironment

__all__ = ["REQUIREMENTS", "build_environment", "mcp1_client_python", "run_mcp1_client"]

HERE = Path(__file__).parent
ROOT = HERE.parent
REQUIREMENTS = HERE / "mcp1_client_requirements.txt"
SCRIPT = HERE / "mcp1_client_script.py"


ENVIRONMENT = SideEnvironment(
    "mcp1-client", REQUIREMENTS, "the mcp 1.x client environment", checkout_extras="mcp,evm"
)
build_environment = ENVIRONMENT.build
mcp1_client_python = ENVIRONMENT.python


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
    ENVIRONMENT.build_before_the_tests()
