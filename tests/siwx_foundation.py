"""The x402 foundation's merchant with its `sign-in-with-x` extension, in an environment of
its own (test helper).

The foundation's sign-in verification (`x402[extensions]`) needs `signinwithethereum`, which
pins web3 < 8 and eth-account < 0.14: older than the project's environment, so it cannot
share it. `siwx_foundation_python()` builds a virtual environment from
`tests/siwx_foundation_requirements.txt` once (under the user's cache directory, keyed by
that file and the Python version; pip's own cache is reused), `siwx_foundation_merchant()`
runs `tests/siwx_foundation_server.py` in it as a subprocess on 127.0.0.1, settling through
the foundation facilitator of a `FoundationStack`, and `foundation_sign_ins()` has the
foundation's own code write the EIP-4361 messages and headers of given challenges.

Only if the environment cannot be built (no registry reachable) do the tests skip, with
the reason pip gave; under CI they fail.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio

from tests.mcp_foundation import SideEnvironment, _announced
from tests.x402_foundation import TOKEN_NAME, TOKEN_VERSION, FoundationStack

__all__ = [
    "REQUIREMENTS",
    "build_environment",
    "foundation_sign_ins",
    "siwx_foundation_merchant",
    "siwx_foundation_python",
]

HERE = Path(__file__).parent
REQUIREMENTS = HERE / "siwx_foundation_requirements.txt"
SERVER = HERE / "siwx_foundation_server.py"


ENVIRONMENT = SideEnvironment(
    "siwx-foundation", REQUIREMENTS, "the x402 foundation's sign-in-with-x environment"
)
build_environment = ENVIRONMENT.build
siwx_foundation_python = ENVIRONMENT.python


def _environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}


@contextlib.asynccontextmanager
async def siwx_foundation_merchant(stack: FoundationStack, python: Path) -> AsyncIterator[str]:
    """Run the foundation's merchant that offers a sign-in for `stack`'s paid resource and
    yield its origin (`/paid`, and `/events`: what its sign-in extension reported)."""
    command = [
        str(python),
        str(SERVER),
        "serve",
        "--facilitator", stack.facilitator_url,
        "--network", stack.network,
        "--asset", stack.token,
        "--pay-to", stack.merchant_address,
        "--price", str(stack.price_atomic),
        "--token-name", TOKEN_NAME,
        "--token-version", TOKEN_VERSION,
    ]  # fmt: skip
    with tempfile.TemporaryFile() as errors:
        process = await anyio.open_process(command, env=_environment(), stderr=errors)
        try:
            yield await _announced(process, errors, "the foundation's sign-in merchant")
        finally:
            if process.returncode is None:
                process.terminate()
                with anyio.move_on_after(10):
                    await process.wait()
                if process.returncode is None:
                    process.kill()
            await process.aclose()


async def foundation_sign_ins(python: Path, cases: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The foundation's EIP-4361 message and `SIGN-IN-WITH-X` header of each case (`info`
    with `chainId` and `type`, `key`, `url`)."""
    with anyio.fail_after(120):
        done = await anyio.run_process(
            [str(python), str(SERVER), "format"],
            input=json.dumps(cases).encode(),
            env=_environment(),
            check=False,
        )
    if done.returncode != 0:
        raise AssertionError(
            f"the foundation's sign-in code failed: {done.stderr.decode(errors='replace')[-3000:]}"
        )
    results: list[dict[str, str]] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return results


if __name__ == "__main__":
    ENVIRONMENT.build_before_the_tests()
