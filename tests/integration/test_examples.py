"""The examples run as a user runs them: `python examples/<name>.py`, each in its own
process with the client and the sandbox importable (as once installed), each starting
its own sandbox on 127.0.0.1. Each exits 0 and prints what its docstring promises."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

#: The command line of each example (after `python examples/<name>.py`), and the lines its
#: output must hold (regular expressions, each matched against one line).
RUNS: dict[str, tuple[list[str], list[str]]] = {
    "euro_rail": (
        [],
        [
            r"^about to pay 0\.10 EUR to ACC_\w+ for http://127\.0\.0\.1:\d+/weather$",
            r"^200 \{'city': 'Amsterdam', .*\}$",
            r"^paid 0\.10 EUR, request pr_\w+$",
            r"^refused: AmountLimitExceeded: .*2\.00 EUR is above max_amount_per_payment "
            r"1\.00 EUR; nothing was paid",
            r"^payer balance: 99\.90 EURO$",
        ],
    ),
    "evm_permit": (
        [],
        [
            r"^HTTP 200: \{'city': 'Amsterdam', .*\}$",
            r"^paid 0\.10 EUR \(evm-permit\) on eip155:137 to 0x[0-9a-fA-F]{40}$",
            r"^payer 0x[0-9a-fA-F]{40}: 100\.00 -> 99\.90 EURQ$",
            r"^settlement tx 0x[0-9a-f]{64}$",
            r"^payer gas coin: 0 wei$",
        ],
    ),
    "bridge": (
        ["--delay", "0.5"],
        [
            r"^merchant http://127\.0\.0\.1:\d+, bridge settles after 0\.5 s$",
            r"^HTTP 200: \{'city': 'Amsterdam', .*\}$",
            r"^paid 0\.10 EUR \(bridge\) on ledgera:mainnet to [A-Z2-7]{58}$",
            r"^transaction QP\w+, on chain [A-Z2-7]+$",
            r"^payer EURO balance: 99\.90$",
            r"^merchant EURQ on chain A: 0\.00 -> 0\.10$",
        ],
    ),
    "agent_tool": (
        [],
        [
            r"^\{'ok': True, 'status': 200, 'body': .*Amsterdam.*, 'paid': '0\.10 EUR'\}$",
            r"^\{'ok': False, 'error': 'PaymentRejectedByHook: .*nothing was paid', "
            r"'money_moved': False\}$",
            r"^payer balance: 99\.90 EURO$",
        ],
    ),
    "chain_a_direct": (
        [],
        [
            r"^merchant http://127\.0\.0\.1:\d+; paying from chain-A wallet [A-Z2-7]{58}$",
            r"^HTTP 200 in \d+ ms: \{'city': 'Amsterdam', .*\}$",
            r"^paid 0\.10 EUR \(chain-a\) on ledgera:mainnet to [A-Z2-7]{58}; transaction \w+$",
            r"^wallet EURQ: +100\.00 -> 99\.90$",
            r"^merchant EURQ: 0\.00 -> 0\.10$",
            r"^with prefer=\['bridge'\]: paid by the bridge \(transaction QP\w+\); payer EURO "
            r"balance 99\.90$",
        ],
    ),
}


def test_every_example_is_run() -> None:
    assert sorted(RUNS) == sorted(path.stem for path in EXAMPLES.glob("*.py"))


def _environment() -> dict[str, str]:
    """This process's environment, with the client and the sandbox importable from the
    source tree (a user has them installed) and no X402_EUR_* setting of the caller's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("X402_EUR_")}
    paths = [str(ROOT), str(ROOT / "sandbox"), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(RUNS))
def test_the_example_runs_and_prints_what_it_promises(name: str, tmp_path: Path) -> None:
    arguments, expected = RUNS[name]
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / f"{name}.py"), *arguments],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,  # nothing of the repository's working directory is needed
        env=_environment(),
        check=False,
    )
    output = (done.stdout[-3000:], done.stderr[-3000:])
    assert done.returncode == 0, output
    assert "Traceback" not in done.stderr, output
    lines = done.stdout.splitlines()
    for pattern in expected:
        assert any(re.search(pattern, line) for line in lines), (pattern, output)
