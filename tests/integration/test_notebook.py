"""examples/notebook.ipynb runs top to bottom in a real kernel, as Jupyter would run it.

The kernel is this very interpreter (the project's venv), declared in a kernelspec written
to a temporary `JUPYTER_PATH`: nothing is installed into the user's Jupyter, and a fresh
CI machine needs only the dev dependencies (nbclient, nbformat, ipykernel, matplotlib).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import ipykernel  # noqa: F401  (dev dependencies: a missing one fails, never skips)
import matplotlib  # noqa: F401
import nbclient
import nbformat
import pytest

NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "notebook.ipynb"
KERNEL = "x402-eur-tests"


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


@pytest.mark.slow
def test_the_notebook_pays_on_every_rail_and_shows_the_ledger_and_the_spend(kernel) -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        notebook,
        kernel_name=kernel,
        timeout=300,
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    )
    client.execute()  # raises CellExecutionError, with the cell and its traceback, on failure

    printed = "".join(outputs(notebook, "stream"))
    assert "Amsterdam" in printed  # the euro rail's resource
    assert "on the euro rail (provider:mainnet" in printed
    assert "on the evm-permit rail (eip155:137" in printed
    assert "on the bridge rail (ledgera:mainnet" in printed
    assert "x402 bridge: sending the proof" in printed  # the progress of the bridge's wait
    assert printed.rstrip().endswith("stopped")

    tables = outputs(notebook, "text/html")
    assert len(tables) == 1
    assert tables[0].count("<tr") == 4  # the header and one row per payment
    assert tables[0].count(">paid<") == 3
    assert len(outputs(notebook, "image/png")) == 1  # the chart
