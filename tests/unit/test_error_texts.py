"""The rails build the text a user reads from its parts, never by rewriting another text with
`.replace(...)`: a rewrite silently stops matching when the text it rewrites changes, and
then says the wrong thing (one rail's name in another rail's reason).

The rule, checked on the source of every module under `x402_client/_rails/`: the result of a
`.replace(...)` call (on anything but the `dataclasses` module) must not reach

- a `raise` statement,
- a call to a class (an exception, a result that carries a reason) or to `unpayable`,
- an f-string,
- what a rail's `describe` or `prepare` returns (its skip reasons),

either directly or through a name assigned from it in the same function."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import x402_client

RAILS = Path(x402_client.__file__).parent / "_rails"
#: The methods whose returned strings are a rail's reasons.
REASON_METHODS = frozenset({"describe", "prepare"})


def _is_text_replace(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return False
    receiver = node.func.value
    return node.func.attr == "replace" and not (
        isinstance(receiver, ast.Name) and receiver.id == "dataclasses"
    )


def _fed(node: ast.AST, rewritten: set[str]) -> bool:
    """Whether `node` holds a `.replace(...)` result or a name assigned from one."""
    return any(
        _is_text_replace(sub) or (isinstance(sub, ast.Name) and sub.id in rewritten)
        for sub in ast.walk(node)
    )


def _rewritten_names(scope: ast.AST) -> set[str]:
    """The names a `.replace(...)` result reaches by assignment in `scope`."""
    rewritten: set[str] = set()
    while True:
        before = len(rewritten)
        for node in ast.walk(scope):
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                value = node.value
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if value is not None and _fed(value, rewritten):
                    rewritten |= {
                        n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)
                    }
        if len(rewritten) == before:
            return rewritten


def _is_sink(node: ast.AST, scope: ast.AST) -> bool:
    if isinstance(node, (ast.Raise, ast.JoinedStr)):
        return True
    if isinstance(node, ast.Call):
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        return name[:1].isupper() or name == "unpayable"
    name = getattr(scope, "name", "")
    return isinstance(node, ast.Return) and name in REASON_METHODS


def rewritten_texts(source: str) -> list[int]:
    """The lines where a `.replace(...)` result reaches a text a user reads (the rule of the
    module doc), each function (and the module's own statements) read on its own."""
    tree = ast.parse(source)
    functions = (ast.FunctionDef, ast.AsyncFunctionDef)
    scopes = [tree, *(n for n in ast.walk(tree) if isinstance(n, functions))]
    lines = set()
    for scope in scopes:
        rewritten = _rewritten_names(scope)
        for node in ast.walk(scope):
            if _is_sink(node, scope) and _fed(node, rewritten):
                lines.add(getattr(node, "lineno", 0))
    return sorted(lines)


def _rail_modules() -> list[Path]:
    return sorted(RAILS.rglob("*.py"))


def test_the_scan_sees_a_reason_rewritten_from_another_rails():
    rewritten_reason = (
        "class R:\n"
        "    def describe(self, entry, resource):\n"
        "        described = super().describe(entry, resource)\n"
        "        text = described.replace('Permit2 transfer', 'upto authorization', 1)\n"
        "        return text\n"
    )
    assert rewritten_texts(rewritten_reason) == [5]
    in_an_fstring = "def f(why):\n    text = why.replace('a', 'b')\n    return f'{text}; more'\n"
    assert rewritten_texts(in_an_fstring) == [3]
    raised = "def f(why):\n    raise ValueError(why.replace('a', 'b'))\n"
    assert rewritten_texts(raised) == [2]
    through_two_names = (
        "def f(why):\n"
        "    first = why.replace('a', 'b')\n"
        "    second = first + '.'\n"
        "    return unpayable(second, [])\n"
    )
    assert rewritten_texts(through_two_names) == [4]


def test_the_scan_leaves_replacements_that_make_no_text_alone():
    a_dataclass_copy = (
        "def describe(self, entry, resource):\n"
        "    return dataclasses.replace(intent, rail='upto')\n"
    )
    assert rewritten_texts(a_dataclass_copy) == []
    a_cache_key = (
        "def read(self, url):\n    key = url.replace('-', '_')\n    return self._cache[key]\n"
    )
    assert rewritten_texts(a_cache_key) == []
    built_from_parts = (
        "def describe(self, entry, resource):\n"
        "    return unpayable(f'{self.paying} for {label}', blockers)\n"
    )
    assert rewritten_texts(built_from_parts) == []


def test_the_scan_covers_every_rail():
    names = {path.name for path in _rail_modules()}
    assert {"evm.py", "eip3009.py", "permit2.py", "upto.py", "euro.py", "bridge.py"} <= names


@pytest.mark.parametrize("path", _rail_modules(), ids=lambda p: p.name)
def test_no_rail_builds_a_message_by_rewriting_another(path: Path):
    found = rewritten_texts(path.read_text(encoding="utf-8"))
    assert not found, (
        f"{path.name}: text built with .replace(...) reaches a message on lines {found}; "
        "build it from its parts (e.g. the rail's own words passed in)"
    )
