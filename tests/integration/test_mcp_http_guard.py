"""`x402-eur mcp --http` against DNS rebinding: a web page under another name (or from
another origin) cannot use the endpoint, on any loopback address, with or without the
token; only 127.0.0.1 may go without a token.

Every request goes to 127.0.0.1 or 127.0.0.2; `evil.example` and `app.example` appear only
in `Host` and `Origin` headers, as a browser would send them.
"""

# The imports of mcp follow the check that it is installed.
# ruff: noqa: E402

from __future__ import annotations

import os
import subprocess
from typing import Any

import httpx
import pytest

from tests.needs import require

require("mcp_types", "pip install 'x402-eur[mcp-server]'")

from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.integration.test_mcp_server import (
    COMMAND,
    ROOT,
    TOKEN,
    Tools,
    listener,
    own_state_file,  # noqa: F401 (an autouse fixture: every server gets its own state file)
    read_back,
    server_env,
    stderr_file,
)
from x402_client.mcp import ALLOW_ORIGIN_ENV, TOKEN_ENV, require_bearer, require_own_host

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw-test", "version": "0"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}
#: What a page at http://evil.example sends once that name resolves to the listener.
REBOUND = {"Host": "evil.example", "Origin": "http://evil.example"}


def run_mcp(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`x402-eur mcp ARGS` that is expected to exit at once, in the test's environment
    without the user's `X402_EUR_*` settings."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("X402_EUR_")}
    return subprocess.run(
        [*COMMAND, *args],
        capture_output=True,
        text=True,
        timeout=20,
        env={**clean, "X402_EUR_STATE": os.environ["X402_EUR_STATE"], **(env or {})},
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )


async def initialize(http: httpx.AsyncClient, base: str, **headers: str) -> httpx.Response:
    return await http.post(f"{base}/mcp", json=INITIALIZE, headers={**MCP_HEADERS, **headers})


def refused(answer: httpx.Response, status: int) -> None:
    """Refused by the listener's guard with a short JSON error, before the MCP layer (which
    would have opened a session)."""
    assert answer.status_code == status, (answer.status_code, answer.text)
    assert answer.headers["content-type"] == "application/json"
    assert answer.json()["error"] and len(answer.content) < 200
    assert "mcp-session-id" not in answer.headers
    assert TOKEN not in answer.text


def served(answer: httpx.Response) -> None:
    assert answer.status_code == 200, (answer.status_code, answer.text)
    assert answer.headers["mcp-session-id"]


@pytest.mark.anyio
async def test_on_127_0_0_2_a_rebound_page_is_refused_and_the_token_is_required(sandbox):
    account = sandbox.bank.open_account("1.00")
    env = server_env(sandbox, account, **{TOKEN_ENV: TOKEN})
    with stderr_file() as errlog:
        async with listener(env, "127.0.0.2", "--budget", "0.25", errlog=errlog) as base:
            own = base.removeprefix("http://")
            async with httpx.AsyncClient(timeout=30) as http:
                for auth in ({}, {"Authorization": f"Bearer {TOKEN}"}):
                    refused(await initialize(http, base, **REBOUND, **auth), 421)
                    refused(await initialize(http, base, Host="evil.example", **auth), 421)
                    refused(await initialize(http, base, Host="localhost", **auth), 421)
                    refused(await initialize(http, base, Origin="http://evil.example", **auth), 403)
                    # Another page on this machine is another origin, too.
                    refused(
                        await initialize(http, base, Origin="http://localhost:5173", **auth), 403
                    )
                    refused(await initialize(http, base, Origin="null", **auth), 403)

                for authorization in (None, TOKEN, f"Basic {TOKEN}", f"Bearer{TOKEN}", "Bearer"):
                    auth = {"Authorization": authorization} if authorization else {}
                    answer = await initialize(http, base, Host=own, **auth)
                    refused(answer, 401)
                    assert answer.headers["www-authenticate"].startswith("Bearer")

                for scheme in ("Bearer", "bearer", "BEARER"):
                    served(await initialize(http, base, Authorization=f"{scheme} {TOKEN}"))
                served(
                    await initialize(
                        http,
                        base,
                        Host=f"localhost:{base.rsplit(':', 1)[1]}",
                        Authorization=f"Bearer {TOKEN}",
                    )
                )
                served(
                    await initialize(
                        http, base, Origin=f"http://{own}", Authorization=f"bearer {TOKEN}"
                    )
                )

            async with (
                httpx.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}) as http,
                Client(
                    streamable_http_client(f"{base}/mcp", http_client=http),
                    read_timeout_seconds=60,
                ) as client,
            ):
                [budget] = (await Tools(client, account.api_key).ok("budget"))["budgets"]
                assert budget["remaining"] == "0.25"
        logs = read_back(errlog)
    assert "bearer token required" in logs
    assert "refused a request for Host 'evil.example'" in logs
    assert TOKEN not in logs and account.api_key not in logs


@pytest.mark.anyio
async def test_on_127_0_0_1_no_token_is_needed_but_only_its_own_pages_get_in(sandbox):
    account = sandbox.bank.open_account("1.00")
    env = server_env(sandbox, account)
    with stderr_file() as errlog:
        async with listener(env, "127.0.0.1", "--budget", "0.25", errlog=errlog) as base:
            port = base.rsplit(":", 1)[1]
            async with httpx.AsyncClient(timeout=30) as http:
                refused(await initialize(http, base, **REBOUND), 421)
                refused(await initialize(http, base, Host=f"evil.example:{port}"), 421)
                refused(await initialize(http, base, Host=f"127.0.0.2:{port}"), 421)
                refused(await initialize(http, base, Origin="http://evil.example"), 403)
                refused(await initialize(http, base, Origin=f"https://127.0.0.1:{port}"), 403)
                refused(await initialize(http, base, Origin="http://localhost:5173"), 403)

                served(await initialize(http, base))
                served(await initialize(http, base, Host=f"localhost:{port}"))
                served(await initialize(http, base, Host=f"LocalHost:{port}"))
                served(await initialize(http, base, Origin=f"http://127.0.0.1:{port}"))
                served(await initialize(http, base, Origin=f"http://localhost:{port}"))

            async with Client(f"{base}/mcp", read_timeout_seconds=60) as client:
                [budget] = (await Tools(client, account.api_key).ok("budget"))["budgets"]
                assert budget["remaining"] == "0.25"
        logs = read_back(errlog)
    assert "no authentication" in logs and account.api_key not in logs


@pytest.mark.anyio
@pytest.mark.parametrize("given_in", ["option", "environment"])
async def test_allow_origin_admits_exactly_that_origin(sandbox, given_in):
    account = sandbox.bank.open_account("1.00")
    if given_in == "option":
        env = server_env(sandbox, account, **{TOKEN_ENV: TOKEN})
        args: tuple[str, ...] = ("--allow-origin", "http://app.example")
    else:
        admitted = "https://other.example, HTTP://App.Example:80/"
        env = server_env(sandbox, account, **{TOKEN_ENV: TOKEN, ALLOW_ORIGIN_ENV: admitted})
        args = ()
    app = "http://app.example"
    with stderr_file() as errlog:
        async with listener(env, "127.0.0.2", "--budget", "0.25", *args, errlog=errlog) as base:
            token = {"Authorization": f"Bearer {TOKEN}"}
            async with httpx.AsyncClient(timeout=30) as http:
                answer = await initialize(http, base, Origin=app, **token)
                served(answer)
                assert answer.headers["access-control-allow-origin"] == app
                assert "mcp-session-id" in answer.headers["access-control-expose-headers"]

                # The token is still required, and the page can read that it is.
                answer = await initialize(http, base, Origin=app)
                refused(answer, 401)
                assert answer.headers["access-control-allow-origin"] == app

                for origin in (
                    "https://app.example",
                    "http://app.example:8080",
                    "http://www.app.example",
                    "http://app.example.evil.example",
                    "http://evil.example",
                ):
                    refused(await initialize(http, base, Origin=origin, **token), 403)
                # The Host must still name the listener.
                refused(await initialize(http, base, Host="app.example", Origin=app, **token), 421)

                # A browser's preflight carries no token: it is answered for the admitted
                # origin only.
                preflight = {
                    "Access-Control-Request-Method": "POST",
                    "Access-Control-Request-Headers": "authorization, content-type",
                }
                answer = await http.options(f"{base}/mcp", headers={"Origin": app, **preflight})
                assert answer.status_code == 204
                assert answer.headers["access-control-allow-origin"] == app
                assert "POST" in answer.headers["access-control-allow-methods"]
                allowed = answer.headers["access-control-allow-headers"].split(", ")
                assert {"authorization", "content-type", "mcp-session-id"} <= set(allowed)
                answer = await http.options(
                    f"{base}/mcp", headers={"Origin": "http://evil.example", **preflight}
                )
                refused(answer, 403)
                assert "access-control-allow-origin" not in answer.headers
        logs = read_back(errlog)
    assert f"pages from {'https://other.example, ' if args == () else ''}{app} admitted" in logs


@pytest.mark.parametrize("address", ["127.0.0.2", "localhost", "[::1]"])
def test_only_127_0_0_1_may_go_without_a_token(sandbox, address):
    env = server_env(sandbox, sandbox.bank.open_account("1.00"))
    result = run_mcp("--budget", "1", "--http", f"{address}:0", env=env)
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.splitlines()
    assert TOKEN_ENV in line and "127.0.0.1" in line and result.stdout == ""


@pytest.mark.parametrize(
    "origin",
    ["http://app.example/path", "null", "*", "ftp://app.example", "app.example", "http://u@a.b"],
)
def test_an_origin_that_is_not_one_is_a_usage_mistake(origin):
    result = run_mcp("--budget", "1", "--http", "127.0.0.1:0", "--allow-origin", origin)
    assert result.returncode == 2
    assert "is not an origin" in result.stderr and "Traceback" not in result.stderr
    result = run_mcp("--budget", "1", "--http", "127.0.0.1:0", env={ALLOW_ORIGIN_ENV: origin})
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert ALLOW_ORIGIN_ENV in line and "is not an origin" in line


# --- the guards themselves -------------------------------------------------------------------


async def _answer(app: Any, scope: dict[str, Any]) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


async def _reached(app: Any, scope: dict[str, Any]) -> int:
    """The status `app` (behind its guard) answers `scope` with."""
    return int((await _answer(app, scope))[0]["status"])


def request(server: tuple[str, int] | None, *headers: tuple[str, str]) -> dict[str, Any]:
    return {
        "type": "http",
        "method": "POST",
        "server": server,
        "headers": [(k.encode(), v.encode()) for k, v in headers],
    }


async def ok(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})


@pytest.mark.anyio
async def test_the_host_must_name_the_address_the_request_arrived_at():
    loopback = require_own_host(ok, "127.0.0.2")
    local = ("127.0.0.2", 8402)
    for host in ("127.0.0.2:8402", "localhost:8402", "LOCALHOST:8402"):
        assert await _reached(loopback, request(local, ("host", host))) == 200, host
    for headers in (
        [("host", "127.0.0.2")],
        [("host", "127.0.0.2:8403")],
        [("host", "127.0.0.1:8402")],
        [("host", "evil.example:8402")],
        [("host", "127.0.0.2:8402"), ("host", "evil.example")],
        [],
    ):
        assert await _reached(loopback, request(local, *headers)) == 421, headers
    assert await _reached(loopback, request(None, ("host", "127.0.0.2:8402"))) == 421

    # On port 80 a browser leaves the port out.
    assert await _reached(loopback, request(("127.0.0.2", 80), ("host", "127.0.0.2"))) == 200
    assert await _reached(loopback, request(("127.0.0.2", 80), ("host", "localhost"))) == 200

    six = require_own_host(ok, "::1")
    assert await _reached(six, request(("::1", 8402), ("host", "[::1]:8402"))) == 200
    assert await _reached(six, request(("::1", 8402), ("host", "::1:8402"))) == 421

    # On every address: the address the connection reached, or the name given to --http.
    everywhere = require_own_host(ok, "0.0.0.0")  # noqa: S104 (never bound: a scope only)
    lan = ("192.0.2.7", 8402)  # the local end of a connection, in a scope: nothing is sent
    assert await _reached(everywhere, request(lan, ("host", "192.0.2.7:8402"))) == 200
    assert await _reached(everywhere, request(lan, ("host", "localhost:8402"))) == 421
    assert await _reached(everywhere, request(lan, ("host", "0.0.0.0:8402"))) == 421
    named = require_own_host(ok, "MCP.lan")
    assert await _reached(named, request(lan, ("host", "mcp.lan:8402"))) == 200

    closed = await _answer(
        loopback, {**request(local, ("host", "evil.example")), "type": "websocket"}
    )
    assert closed == [{"type": "websocket.close", "code": 1008}]
    passed = await _answer(require_own_host(ok, "127.0.0.2"), {"type": "lifespan"})
    assert passed[0]["status"] == 200


@pytest.mark.anyio
async def test_an_origin_must_be_the_listener_itself_or_admitted():
    guard = require_own_host(ok, "127.0.0.1", ["http://app.example"])
    local = ("127.0.0.1", 8402)
    host = ("host", "127.0.0.1:8402")
    for origin in ("http://127.0.0.1:8402", "http://localhost:8402", "http://app.example"):
        assert await _reached(guard, request(local, host, ("origin", origin))) == 200, origin
    for origin in (
        "https://127.0.0.1:8402",
        "http://127.0.0.1:8403",
        "http://localhost",
        "http://app.example:8080",
        "null",
        "",
    ):
        assert await _reached(guard, request(local, host, ("origin", origin))) == 403, origin
    twice = request(local, host, ("origin", "http://app.example"), ("origin", "http://app.example"))
    assert await _reached(guard, twice) == 403


@pytest.mark.anyio
async def test_the_bearer_scheme_is_matched_in_any_case_and_the_token_exactly():
    guard = require_bearer(ok, TOKEN)
    for value in (f"Bearer {TOKEN}", f"bearer {TOKEN}", f"BEARER {TOKEN}", f"beArEr  {TOKEN}"):
        assert await _reached(guard, request(None, ("authorization", value))) == 200, value
    for value in (
        TOKEN,
        f"Basic {TOKEN}",
        f"Bearer{TOKEN}",
        f"Bearer {TOKEN.upper()}",
        f"Bearer {TOKEN[:-1]}",
        "Bearer",
    ):
        start, body = await _answer(guard, request(None, ("authorization", value)))
        assert start["status"] == 401, value
        assert TOKEN.encode() not in body["body"]
