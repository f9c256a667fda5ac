"""The pure band (`x402_client/_protocol/`) sends nothing: it may name httpx's request and
response types (its errors are httpx errors, its rules read answers), but never a client
or a transport, which is what sends. The forbidden contract of `[tool.importlinter]`
keeps event loops, sockets, TLS, SQLite and Redis out; httpx is one package to it, so this
test draws the line inside httpx."""

from __future__ import annotations

import ast
from pathlib import Path

import x402_client

PURE = Path(x402_client.__file__).parent / "_protocol"

#: What sends, in httpx.
SENDERS = frozenset(
    {
        "AsyncClient",
        "Client",
        "AsyncBaseTransport",
        "BaseTransport",
        "AsyncHTTPTransport",
        "HTTPTransport",
        "MockTransport",
        "WSGITransport",
        "ASGITransport",
        "request",
        "get",
        "post",
        "stream",
    }
)


def senders_used(source: str) -> list[str]:
    """`httpx.<sender>` attributes and `from httpx import <sender>` names in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "httpx"
            and node.attr in SENDERS
        ):
            found.append(f"httpx.{node.attr}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("httpx"):
            found += [f"httpx.{alias.name}" for alias in node.names if alias.name in SENDERS]
    return found


def test_the_pure_band_names_no_client_or_transport() -> None:
    used = {
        path.name: senders_used(path.read_text())
        for path in sorted(PURE.glob("*.py"))
        if senders_used(path.read_text())
    }
    assert used == {}


def test_the_rule_sees_a_sender_however_it_is_named() -> None:
    assert senders_used("import httpx\nhttpx.AsyncClient()\n") == ["httpx.AsyncClient"]
    assert senders_used("from httpx import MockTransport\n") == ["httpx.MockTransport"]
    assert senders_used("import httpx\nx: httpx.Response\nhttpx.Request('GET', 'u')\n") == []
