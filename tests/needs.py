"""What a test needs that `pip install` of the project may not have given: a package of an
extra, a program (redis-server), an environment built from a registry.

Where one is missing, the test is skipped on a developer's machine, with the command that
installs it; under CI (the `CI` variable set) it fails, because there everything is installed
(`make install`, `make test-environments`, redis-server) and a missing piece is a broken
install that a skip would hide. Shared by both test trees (tests/ and sandbox/tests/).
"""

from __future__ import annotations

import importlib
import os
import shutil
from types import ModuleType
from typing import NoReturn

import pytest

__all__ = ["missing", "require", "require_program"]


def missing(what: str) -> NoReturn:
    """Fail under CI, else skip: `what` (what is missing and how to install it) is absent.
    Usable at module level, in a fixture or in a test."""
    if os.environ.get("CI"):
        pytest.fail(f"{what} (required under CI: a missing dependency is a broken install)")
    pytest.skip(what, allow_module_level=True)


def require(module: str, install: str) -> ModuleType:
    """Import `module`; when it is not installed, `missing(...)` with `install`, the
    command that installs it. A module that is installed but fails to import raises."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is None or module.split(".")[0] != exc.name.split(".")[0]:
            raise  # installed, but something it imports is not: a broken install
        missing(f"{module} is not installed ({install})")


def require_program(name: str, install: str) -> str:
    """The path of the program `name` on PATH; `missing(...)` with `install` when absent."""
    path = shutil.which(name)
    if path is None:
        missing(f"{name} is not installed ({install})")
    return path
