"""examples/notebook.ipynb runs top to bottom in a real kernel, as Jupyter would run it,
and is committed with its outputs (so it reads on a repository browser), none of them secret.
After changing it, `X402_EUR_WRITE_NOTEBOOK=1 pytest tests/integration/test_notebook.py`
writes the executed notebook back, outputs included, once it passed.

The kernel is this very interpreter (the project's venv), declared in a kernelspec written
to a temporary `JUPYTER_PATH`: nothing is installed into the user's Jupyter, and a fresh
CI machine needs only the dev dependencies (nbclient, nbformat, ipykernel, matplotlib).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import ipykernel  # noqa: F401  (dev dependencies: a missing one fails, never skips)
import matplotlib  # noqa: F401
import nbclient
import nbformat
import pytest

from x402_eur_sandbox._anvil import ANVIL_DEV_KEYS

NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "notebook.ipynb"
KERNEL = "x402-eur-tests"

#: Appended to the executed notebook: prints the secrets its settings hold, so that the
#: test can look for them in every other output.
PROBE = (
    "import json\nprint('SECRETS', json.dumps([options['api_key'], options['evm']['private_key']]))"
)

#: What each rail's paid fetch prints.
RAILS = (
    "on the euro rail (euro, provider:mainnet)",
    "on the evm-permit rail (exact, eip155:137)",
    "on the evm-permit rail (exact, eip155:1)",
    "on the eip3009 rail (exact, eip155:137)",
    "on the permit2 rail (exact, eip155:137)",
    "on the bridge rail (exact, ledgera:mainnet)",
)


@pytest.fixture
def kernel(tmp_path, monkeypatch) -> str:
    """The name of a kernel that runs `sys.executable`, known only to this test."""
    spec = tmp_path / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    spec.joinpath("kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "x402-eur tests", "language": "python"})
    )
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    # jupyter_core warns (an error here) unless told to use the platform's directories.
    monkeypatch.setenv("JUPYTER_PLATFORM_DIRS", "1")
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    monkeypatch.setenv("MPLCONFIGDIR", str(tmp_path / "matplotlib"))
    return KERNEL


def outputs(notebook, kind: str) -> list[str]:
    found = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if kind == "stream" and output.get("output_type") == "stream":
                found.append(output["text"])
            elif kind in output.get("data", {}):
                found.append(output["data"][kind])
    return found


def assert_paid_on_every_rail(notebook) -> None:
    printed = "".join(outputs(notebook, "stream"))
    assert "Amsterdam" in printed  # the euro rail's resource
    for rail in RAILS:
        assert rail in printed
    assert "x402 bridge: sending the proof" in printed  # the progress of the bridge's wait
    assert printed.rstrip().endswith("stopped")
    # The ledger's own table: the header and one row per payment, all paid.
    [table] = outputs(notebook, "text/html")
    assert table.startswith("<table><caption>6 payments</caption>")
    assert table.count("<tr") == 1 + len(RAILS)
    assert table.count(">paid<") == len(RAILS)
    assert len(outputs(notebook, "image/png")) == 1  # the chart
    assert [o for c in notebook.cells for o in c.get("outputs", []) if "ename" in o] == []


def assert_no_secret(notebook, secrets: list[str]) -> None:
    text = json.dumps([cell.get("outputs", []) for cell in notebook.cells])
    assert "sk_sandbox_" not in text and "private_key" not in text
    for secret in [*secrets, *ANVIL_DEV_KEYS]:
        assert secret.removeprefix("0x").lower() not in text.lower()


@pytest.mark.slow
def test_the_notebook_pays_on_every_rail_and_shows_the_ledger_and_the_spend(kernel) -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    notebook.cells.append(nbformat.v4.new_code_cell(PROBE))
    client = nbclient.NotebookClient(
        notebook,
        kernel_name=kernel,
        timeout=300,
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    )
    client.execute()  # raises CellExecutionError, with the cell and its traceback, on failure

    probe = notebook.cells.pop()
    [line] = [o["text"] for o in probe.outputs if o.get("name") == "stdout"]
    secrets = json.loads(line.removeprefix("SECRETS "))
    assert len(secrets) == 2 and all(len(secret) > 20 for secret in secrets)
    assert_paid_on_every_rail(notebook)
    assert_no_secret(notebook, secrets)
    if os.environ.get("X402_EUR_WRITE_NOTEBOOK") == "1":
        write_back(notebook)


def write_back(notebook) -> None:
    """The executed notebook as the repository keeps it: Jupyter's own kernel name, no
    timings."""
    notebook.metadata.kernelspec = nbformat.read(NOTEBOOK, as_version=4).metadata.kernelspec
    for cell in notebook.cells:
        cell.metadata.pop("execution", None)
    nbformat.write(notebook, NOTEBOOK)


def test_the_committed_notebook_shows_its_outputs_and_no_secret() -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert all(cell.execution_count is not None for cell in code)
    shown = [cell for cell in code if "print(" in cell.source and "def " not in cell.source]
    assert len(shown) >= 6 and all(cell.outputs for cell in shown)
    assert_paid_on_every_rail(notebook)
    assert_no_secret(notebook, [])
    # Its keys are random per run: every 32-byte hex string shown is a transaction hash.
    printed = "".join(outputs(notebook, "stream"))
    assert re.findall(r"[0-9a-fA-F]{64}", printed) == re.findall(
        r"tx hash 0x([0-9a-f]{64})", printed
    )
    assert notebook.metadata.kernelspec.name == "python3"
