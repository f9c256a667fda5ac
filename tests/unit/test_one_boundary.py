"""One error boundary: the step that turns an error leaving a logical request into the
truthful one (`conclude`) is written once, in `Boundary` (`_flow/payment.py`, its exits);
every entry (httpx async and sync, `requests`, MCP) holds a `Boundary` instead of writing
its own try / except / conclude / raise."""

from __future__ import annotations

import ast
from pathlib import Path

import x402_client

PACKAGE = Path(x402_client.__file__).parent


def concluding_handlers(source: str) -> int:
    """How many `except` blocks in `source` call something's `conclude(...)`."""
    found = 0
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ExceptHandler):
            calls = [
                inner
                for statement in node.body
                for inner in ast.walk(statement)
                if isinstance(inner, ast.Call)
                and isinstance(inner.func, ast.Attribute | ast.Name)
                and getattr(inner.func, "attr", getattr(inner.func, "id", "")) == "conclude"
            ]
            found += bool(calls)
    return found


def test_only_the_boundary_concludes_an_error() -> None:
    import inspect

    from x402_client._flow.payment import Boundary

    by_hand = {
        str(path.relative_to(PACKAGE)): concluding_handlers(path.read_text())
        for path in PACKAGE.rglob("*.py")
        if concluding_handlers(path.read_text())
    }
    assert by_hand == {}
    for leaving in (Boundary.__aexit__, Boundary.__exit__):
        assert "conclude" in inspect.getsource(leaving)


def test_the_rule_sees_a_boundary_written_again() -> None:
    again = (
        "async def send(request):\n"
        "    try:\n"
        "        return await inner(request)\n"
        "    except Exception as exc:\n"
        "        raise await payer.conclude(guard, exc) from exc\n"
    )
    assert concluding_handlers(again) == 1
    assert concluding_handlers("try:\n    pass\nexcept Exception:\n    raise\n") == 0
