"""Every function of the client reads in one screen: none is longer than 60 lines unless a
comment right above it (or on its `def` line) says why (`# long: ...`)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import x402_client

PACKAGE = Path(x402_client.__file__).parent
LIMIT = 60
MARK = "# long:"


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _long_functions(source: str, limit: int = LIMIT) -> list[tuple[str, int, int]]:
    """(name, first line, length) of each function longer than `limit` lines whose
    definition is not explained by a `# long:` comment just above it or on its line."""
    lines = source.splitlines()
    long = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        assert node.end_lineno is not None
        length = node.end_lineno - node.lineno + 1
        if length <= limit:
            continue
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        above = lines[first - 2].strip() if first >= 2 else ""
        if MARK in lines[node.lineno - 1] or above.startswith(MARK):
            continue
        long.append((node.name, node.lineno, length))
    return long


def test_the_scan_sees_a_long_function_and_its_reason():
    body = "\n".join(f"    x = {i}" for i in range(LIMIT))
    unexplained = f"def f():\n{body}\n"
    assert _long_functions(unexplained) == [("f", 1, LIMIT + 1)]
    explained = f"# long: one table, row by row\ndef f():\n{body}\n"
    assert _long_functions(explained) == []
    short = "def g():\n    return 1\n"
    assert _long_functions(short) == []


def test_the_scan_covers_every_module_of_the_client():
    names = {path.relative_to(PACKAGE).as_posix() for path in _modules()}
    assert {
        "_flow/payment.py",
        "_flow/resend.py",
        "_protocol/policy.py",
        "_rails/bridge.py",
    } <= names
    assert {"cli/_commands.py", "mcp/_tools.py", "_options.py", "_frontend/common.py"} <= names


@pytest.mark.parametrize("path", _modules(), ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_no_function_is_longer_than_a_screen(path: Path):
    assert _long_functions(path.read_text(encoding="utf-8")) == []
