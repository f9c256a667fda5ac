"""Module names a reader cannot confuse: no two of the client's modules (or packages)
whose names differ by one letter, wherever they live (`_request` beside `_requests`,
`_deliver` beside `_delivery` once made a newcomer open the wrong file)."""

from __future__ import annotations

import itertools
from pathlib import Path

import x402_client

PACKAGE = Path(x402_client.__file__).parent


def one_letter_apart(a: str, b: str) -> bool:
    """Whether `b` is `a` with one letter added, removed or changed (the edit distance
    is 1), underscores and case ignored."""
    a, b = a.strip("_").lower(), b.strip("_").lower()
    if a == b:
        return False
    if len(a) > len(b):
        a, b = b, a
    if len(b) - len(a) > 1:
        return False
    if len(a) == len(b):
        return sum(x != y for x, y in zip(a, b, strict=True)) == 1
    return any(b[:i] + b[i + 1 :] == a for i in range(len(b)))


def module_names(root: Path) -> set[str]:
    """Every module's and package's own name under `root` (not `__init__`/`__main__`)."""
    names = {path.stem for path in root.rglob("*.py") if "__pycache__" not in path.parts}
    names |= {path.name for path in root.rglob("*") if (path / "__init__.py").is_file()}
    return {name for name in names if not name.startswith("__")}


def confusable(names: set[str]) -> list[tuple[str, str]]:
    return [(a, b) for a, b in itertools.combinations(sorted(names), 2) if one_letter_apart(a, b)]


def test_no_two_module_names_differ_by_one_letter() -> None:
    assert confusable(module_names(PACKAGE)) == []


def test_the_rule_catches_the_pairs_it_is_for() -> None:
    assert confusable({"_request", "_requests", "_deliver", "_delivery", "quote"}) == [
        ("_deliver", "_delivery"),
        ("_request", "_requests"),
    ]
    assert one_letter_apart("progress", "_progress") is False  # the same name: caught as a twin
    assert not one_letter_apart("evm", "euro") and not one_letter_apart("mcp", "cli")
