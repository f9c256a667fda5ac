"""The lanes say what a test really uses: tests/unit and tests/flow open no socket (the
guard refuses it and fails the test), and a test in tests/integration that runs on
`httpx.MockTransport` alone belongs in tests/flow (tests/conftest.py `lane_guard`)."""

from __future__ import annotations

import ast
import socket
from pathlib import Path

import pytest

from tests.conftest import MOCKED_IN_INTEGRATION, REAL_IO, lane_of, misplaced

ROOT = Path(__file__).resolve().parents[2]


def test_a_socket_in_this_lane_is_refused_and_reported() -> None:
    with pytest.raises(ConnectionRefusedError, match="no connect in this lane"):
        socket.create_connection(("127.0.0.1", 9), timeout=5)
    assert REAL_IO.seen == ["socket.connect(('127.0.0.1', 9),)"]
    REAL_IO.seen.clear()  # this test's own socket was the point: the guard passes it


def test_a_listening_server_is_refused_too() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))  # a bind alone sends nothing (libraries probe so)
        with pytest.raises(ConnectionRefusedError, match="no listen in this lane"):
            server.listen()
    assert [call.split("(")[0] for call in REAL_IO.seen] == ["socket.listen"]
    REAL_IO.seen.clear()


def test_the_lane_is_the_folder_under_tests() -> None:
    assert lane_of(ROOT / "tests" / "flow" / "test_x.py") == "flow"
    assert lane_of(ROOT / "tests" / "integration" / "test_x.py") == "integration"
    assert lane_of(ROOT / "sandbox" / "tests" / "test_x.py") is None


@pytest.mark.parametrize(
    ("lane", "sockets", "mocked", "real", "belongs"),
    [
        ("unit", ["socket.connect(...)"], False, True, "tests/integration"),
        ("flow", ["socket.listen(...)"], True, True, "tests/integration"),
        ("unit", [], False, False, ""),
        ("flow", [], True, False, ""),
        ("integration", [], True, False, "tests/flow"),
        ("integration", [], True, True, ""),
        ("integration", [], False, False, ""),
    ],
)
def test_what_a_test_did_says_its_lane(
    lane: str, sockets: list[str], mocked: bool, real: bool, belongs: str
) -> None:
    said = misplaced(lane, "tests/x.py::test_x", sockets, mocked, real)
    assert (belongs in said) if belongs else said == ""


def test_every_mocked_test_kept_in_integration_exists_and_says_why() -> None:
    for nodeid, why in MOCKED_IN_INTEGRATION.items():
        path, _, name = nodeid.partition("::")
        assert lane_of(ROOT / path) == "integration", nodeid
        tree = ast.parse((ROOT / path).read_text("utf-8"))
        defined = {
            n.name for n in ast.walk(tree) if isinstance(n, ast.AsyncFunctionDef | ast.FunctionDef)
        }
        assert name in defined, nodeid
        assert why
        assert misplaced("integration", nodeid, [], True, False) == ""
