"""Every Python block of the README and docs/ type-checks under `mypy --strict`.

A reader copies these blocks into code that their own `mypy --strict` checks, so a block
that only runs is not enough: a receipt read through `Any`, an option passed the wrong type
or a name the block never defines fails here.

A document's blocks are read in order as one program, the way a notebook runs its cells: a
later block uses what an earlier one made. Blocks are written for a notebook or an async
REPL (`await` at top level), so the program is checked as the body of one `async def`; a
block that is a whole script (`asyncio.run(main())`) is checked the same way.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = ("README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")))
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```\s*$", re.S | re.M)


@dataclasses.dataclass(frozen=True)
class Program:
    """A document's Python blocks as one module, and where each of its lines came from."""

    document: str
    source: str
    origin: tuple[int, ...]  # the document's line of each line of `source` (1-based)

    def where(self, line: int) -> str:
        return f"{self.document}:{self.origin[line - 1]}" if 0 < line <= len(self.origin) else "?"


def program_of(document: str, text: str) -> Program | None:
    """The document's Python blocks, indented into one `async def` in order; None if it has
    none."""
    source, origin = ["async def _document() -> None:"], [0]
    for match in FENCE.finditer(text):
        if match.group(1).lower() != "python":
            continue
        first = text.count("\n", 0, match.start()) + 2  # the line after the fence
        for offset, line in enumerate(match.group(2).splitlines()):
            source.append(f"    {line}" if line.strip() else "")
            origin.append(first + offset)
    if len(source) == 1:
        return None
    return Program(document, "\n".join(source) + "\n", tuple(origin))


def test_a_program_maps_each_line_back_to_its_document() -> None:
    text = "# T\n\n```python\nx = 1\n\nawait f(x)\n```\n\n```sh\nls\n```\n```python\ny = 2\n```\n"
    program = program_of("T.md", text)
    assert program is not None
    assert program.source == (
        "async def _document() -> None:\n    x = 1\n\n    await f(x)\n    y = 2\n"
    )
    assert [program.where(n) for n in (2, 4, 5)] == ["T.md:4", "T.md:6", "T.md:13"]
    assert program_of("T.md", "```sh\nls\n```\n") is None


@pytest.mark.slow
def test_every_documented_python_block_passes_mypy_strict() -> None:
    from mypy import api

    programs = [
        program
        for document in DOCUMENTS
        if (program := program_of(document, (ROOT / document).read_text("utf-8"))) is not None
    ]
    assert {program.document for program in programs} >= {"README.md", "docs/mcp-payments.md"}
    # A fixed place: mypy's cache remembers a module's errors by the path it was read from.
    folder = ROOT / ".mypy_cache" / "documents"
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for program in programs:
        path = folder / (re.sub(r"\W", "_", program.document.removesuffix(".md")) + ".py")
        path.write_text(program.source, encoding="utf-8")
        files[path.resolve()] = program
    # The project's own configuration (pyproject.toml: strict, the pydantic plugin), and its
    # cache, which `make lint` has usually filled for the package already.
    # A notebook rebinds a name from cell to cell (`client`, sync then async): so may a
    # document, as `--allow-redefinition-new` lets one scope do.
    flags = ["--strict", "--config-file", str(ROOT / "pyproject.toml"), "--no-error-summary"]
    flags += ["--allow-redefinition-new", "--local-partial-types"]
    flags += ["--cache-dir", str(ROOT / ".mypy_cache")]
    out, err, status = api.run([*flags, *map(str, files)])
    found = []
    for line in out.splitlines():
        match = re.match(r"(.+?\.py):(\d+): (error|note): (.*)", line)
        program = files.get(Path(match[1]).resolve()) if match else None
        if match is None or program is None:
            found.append(line)
        else:
            found.append(f"{program.where(int(match[2]))}: {match[3]}: {match[4]}")
    assert found == [] and err == ""
    assert status == 0, out
