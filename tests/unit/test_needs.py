"""A missing test dependency skips a test on a developer's machine and fails it under CI;
a dependency that is installed but broken fails everywhere; and no test skips for a
missing dependency any other way."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.needs import missing, require, require_program

ROOT = Path(__file__).resolve().parents[2]
NOT_INSTALLED = "x402_eur_not_installed_anywhere"


def _outcome(call: Callable[[], object]) -> BaseException:
    """What `call` raised: a skip or a failure is caught here, so that it is checked, not
    reported as this test's own outcome."""
    try:
        call()
    except BaseException as exc:  # pytest's skip and fail are BaseExceptions
        return exc
    raise AssertionError("it returned")


def test_a_missing_module_skips_with_its_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    skipped = _outcome(lambda: require(NOT_INSTALLED, "pip install it"))
    assert isinstance(skipped, pytest.skip.Exception), skipped
    assert "not installed (pip install it)" in str(skipped)


def test_under_ci_a_missing_module_or_program_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    for call, says in [
        (lambda: require(NOT_INSTALLED, "pip install it"), "pip install it"),
        (lambda: require_program(NOT_INSTALLED, "apt-get install it"), "apt-get install it"),
        (lambda: missing("the environment could not be built"), "could not be built"),
    ]:
        failed = _outcome(call)
        assert isinstance(failed, pytest.fail.Exception), failed
        assert says in str(failed) and "required under CI" in str(failed)


def test_an_installed_module_is_imported() -> None:
    assert require("json", "it is in the standard library") is sys.modules["json"]
    assert Path(require_program("sh", "it comes with the system")).name == "sh"


def test_an_installed_module_that_cannot_import_what_it_needs_fails_everywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "x402_eur_broken_install.py").write_text(f"import {NOT_INSTALLED}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("CI", raising=False)
    broken = _outcome(lambda: require("x402_eur_broken_install", "pip install it"))
    assert isinstance(broken, ModuleNotFoundError) and broken.name == NOT_INSTALLED, broken


def test_no_test_skips_for_a_missing_dependency_but_through_require() -> None:
    """`pytest.importorskip` and a bare `pytest.skip` would pass a broken CI install as
    skipped: the suites go through `tests/needs.py` instead."""
    own = ROOT / "tests" / "needs.py"
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for tree in ("tests", "sandbox/tests")
        for path in sorted((ROOT / tree).rglob("*.py"))
        if path != own and path != Path(__file__).resolve()
        for number, line in enumerate(path.read_text("utf-8").splitlines(), 1)
        if re.search(r"\bimportorskip\(|\bpytest\.skip\(", line)
    ]
    assert found == [], "\n".join(found)
