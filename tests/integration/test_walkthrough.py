"""The README and docs/cli.md, pasted as written against the sandbox.

The code blocks are found in the documents themselves, so a block added later is walked
too. The sandbox runs as a user runs it (`x402-eur-sandbox serve --env-file`), and every
block gets the environment its env file exports (a state file of the block's own):

- each document's Python blocks run in order in one kernel, as cells of a notebook (the
  way examples/notebook.ipynb is executed): a later block uses what an earlier one made;
- each shell block that runs `x402-eur` runs in bash (`-e -o pipefail`) in a directory of
  its own; a line commented `# exit N` must exit N.

A block that cannot run as written is listed in `ILLUSTRATIONS`, with the reason; shell
blocks that do not run `x402-eur` (`make demo`) are not part of the walk-through.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import nbclient
import nbformat
import pytest

from tests.integration.test_notebook import kernel  # noqa: F401  (the fixture)

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = ("README.md", "docs/cli.md")
SHELLS = ("sh", "bash", "shell", "console")

#: Blocks that only illustrate, by document and first line, and why they cannot run.
ILLUSTRATIONS = {
    ("README.md", "from x402_client import Asset, EvmOptions, PaymentOptions"): (
        'a reader\'s own key and token ("0x...") on a chain the sandbox does not run (8453)'
    ),
    ("README.md", "from mcp import Client"): (
        "a paid MCP tool server of the reader's own (tests/integration/test_mcp_payments.py "
        "pays the x402 foundation's)"
    ),
    ("README.md", "from datetime import timedelta"): (
        "RedisBudgetStore needs a Redis server of the reader's own"
    ),
}


@dataclasses.dataclass(frozen=True)
class Block:
    document: str
    line: int
    language: str
    code: str

    @property
    def key(self) -> tuple[str, str]:
        return self.document, self.code.strip().splitlines()[0].strip()

    @property
    def name(self) -> str:
        return f"{self.document}:{self.line}"


def blocks(document: str) -> list[Block]:
    """The fenced code blocks of a document, with the line each starts on."""
    text = (ROOT / document).read_text(encoding="utf-8")
    found = []
    for match in re.finditer(r"^```(\w*)[^\n]*\n(.*?)^```\s*$", text, re.S | re.M):
        line = text.count("\n", 0, match.start()) + 1
        found.append(Block(document, line, match.group(1).lower(), match.group(2)))
    return found


ALL = [block for document in DOCUMENTS for block in blocks(document)]
WALKED = [block for block in ALL if block.key not in ILLUSTRATIONS]
PYTHON = [block for block in WALKED if block.language == "python"]
SHELL = [b for b in WALKED if b.language in SHELLS and re.search(r"\bx402-eur\b", b.code)]


def test_the_walk_through_covers_the_documents() -> None:
    """Every illustration is still in its document; the walk-through is no empty one."""
    keys = {block.key for block in ALL}
    assert [key for key in ILLUSTRATIONS if key not in keys] == []
    assert {block.document for block in PYTHON} >= {"README.md"}
    assert {block.document for block in SHELL} == set(DOCUMENTS)
    assert len(SHELL) >= 4 and len(PYTHON) >= 3


def exports_of(text: str) -> dict[str, str]:
    pairs = re.findall(r"^export ([A-Z0-9_]+)=(.*)$", text, re.M)
    return {name: shlex.split(value)[0] if value else "" for name, value in pairs}


def command_environment() -> dict[str, str]:
    """The user's shell: the console scripts of this interpreter on the PATH."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return {**os.environ, "PATH": path}


def stop_group(process: subprocess.Popen) -> None:
    """Stops what a block or the fixture started: its own process group, by its id."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[dict[str, str]]:
    """`x402-eur-sandbox serve --evm --chain-a --env-file`: what its env file exports."""
    directory = tmp_path_factory.mktemp("sandbox")
    env_file, log = directory / "sandbox.env", directory / "serve.log"
    argv = ["x402-eur-sandbox", "serve", "--evm", "--chain-a", "--env-file", str(env_file)]
    with log.open("w") as output:
        process = subprocess.Popen(
            argv,
            env=command_environment(),
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 120
        while not (env_file.exists() and env_file.stat().st_size):
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"the sandbox did not start:\n{log.read_text()}"
            time.sleep(0.2)
        yield exports_of(env_file.read_text())
    finally:
        stop_group(process)


def shell_script(code: str) -> str:
    """The block as written; a line commented `# exit N` must exit N."""
    lines = []
    for line in code.splitlines():
        expected = re.search(r"#\s*exit (\d+)\b", line)
        if expected is None:
            lines.append(line)
            continue
        command = line[: line.index("#")].rstrip()
        lines.append(f"if {command}; then code=0; else code=$?; fi; [ $code -eq {expected[1]} ]")
    return "\n".join(lines) + "\n"


@pytest.mark.slow
@pytest.mark.parametrize("block", SHELL, ids=[block.name for block in SHELL])
def test_a_shell_block_runs_as_written(block: Block, served, tmp_path) -> None:
    env = {**command_environment(), **served, "X402_EUR_STATE": str(tmp_path / "state.db")}
    log = tmp_path / "output.log"
    with log.open("w") as output:
        process = subprocess.Popen(
            ["bash", "-e", "-o", "pipefail", "-c", shell_script(block.code)],
            cwd=tmp_path,
            env={**env, "COLUMNS": "100"},
            stdout=output,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            process.wait(timeout=180)
        finally:
            stop_group(process)  # what the block left running (`serve ... &`)
    output = log.read_text()
    assert process.returncode == 0, f"{block.name}:\n{block.code}\n{output}"
    assert "Traceback" not in output


@pytest.mark.slow
@pytest.mark.parametrize("document", sorted({block.document for block in PYTHON}))
def test_the_python_blocks_run_in_order_as_written(
    document: str,
    served,
    kernel,  # noqa: F811  (the fixture imported above)
    tmp_path,
    monkeypatch,
) -> None:
    for name, value in {**served, "X402_EUR_STATE": str(tmp_path / "state.db")}.items():
        monkeypatch.setenv(name, value)
    cells = [block for block in PYTHON if block.document == document]
    notebook = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(block.code) for block in cells]
    )
    client = nbclient.NotebookClient(
        notebook, kernel_name=kernel, timeout=300, resources={"metadata": {"path": str(tmp_path)}}
    )
    try:
        client.execute()
    except nbclient.exceptions.CellExecutionError as exc:
        failed = next(
            b for b, c in zip(cells, notebook.cells, strict=True) if "ename" in str(c.outputs)
        )
        pytest.fail(f"{failed.name} does not run as written:\n{exc}")
