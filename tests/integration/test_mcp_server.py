"""`x402-eur mcp`, run as an MCP host runs it: a real process, over stdio or streamable HTTP,
paying the session sandbox (`/weather` costs 0.10 EUR) from a fresh account per test.

Every tool result goes through `Tools.call`, which checks that the account's API key shows
up nowhere; every test also reads the server's stderr for it.
"""

# The imports of mcp follow the check that it is installed.
# ruff: noqa: E402

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Iterator
from decimal import Decimal
from pathlib import Path
from typing import IO, Any

import anyio
import pytest

from tests.needs import require

require("mcp_types", "pip install 'x402-eur[mcp-server]'")

from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp_types import CallToolResult

from tests.conftest import scan_for_secrets
from x402_client import PaymentOutcomeUnknown, PaymentReceipt
from x402_client.mcp import (
    TOKEN_ENV,
    TOOLS,
    ToolError,
    parse_budget,
    parse_budgets,
    require_bearer,
)
from x402_client.mcp._results import _body_json, _error_json
from x402_eur_sandbox import Account, Sandbox

ROOT = Path(__file__).resolve().parents[2]
TOOL_NAMES = {
    "fetch",
    "quote",
    "discover",
    "payments",
    "budget",
    "resume",
    "sessions",
    "refund_session",
}
COMMAND = [sys.executable, "-m", "x402_client.cli", "mcp"]


@pytest.fixture(autouse=True)
def own_state_file(tmp_path, monkeypatch) -> None:
    """Every test's server gets a state file of its own: never the user's real one."""
    monkeypatch.setenv("X402_EUR_STATE", str(tmp_path / "state" / "state.sqlite3"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))


def server_env(sandbox: Sandbox, account: Account, **extra: str) -> dict[str, str]:
    return {
        "X402_EUR_API_KEY": account.api_key,
        "X402_EUR_ACCOUNT": account.code,
        "X402_EUR_API_URL": sandbox.payment_api_url,
        # The stdio client passes only this environment: name the test's own state file.
        "X402_EUR_STATE": os.environ["X402_EUR_STATE"],
        # The sandbox runs on 127.0.0.1: admitted by name, as its env file does.
        "X402_EUR_MCP_ALLOW_HOSTS": ",".join(sandbox.hosts),
        **extra,
    }


class Tools:
    """An MCP client session with the server, checking every result for the API key."""

    def __init__(self, client: Client, secret: str) -> None:
        self.client = client
        self.secret = secret

    async def call(self, name: str, **arguments: Any) -> CallToolResult:
        result = await self.client.call_tool(name, arguments)
        dumped = scan_for_secrets(result.model_dump_json(by_alias=True))
        assert self.secret not in dumped, "the API key leaked into a tool result"
        assert "sk_sandbox_" not in dumped
        [text] = result.content
        assert json.loads(text.text) == result.structured_content  # type: ignore[union-attr]
        return result

    async def ok(self, name: str, **arguments: Any) -> dict[str, Any]:
        result = await self.call(name, **arguments)
        assert not result.is_error, result.structured_content
        assert isinstance(result.structured_content, dict)
        return result.structured_content

    async def error(self, name: str, **arguments: Any) -> tuple[dict[str, Any], str]:
        """The `error` object of a tool error, and the text the agent reads."""
        result = await self.call(name, **arguments)
        assert result.is_error, result.structured_content
        [text] = result.content
        return result.structured_content["error"], text.text  # type: ignore[index,union-attr]


@contextlib.contextmanager
def stderr_file() -> Iterator[IO[str]]:
    with tempfile.TemporaryFile("w+", encoding="utf-8") as file:
        yield file


def read_back(file: IO[str]) -> str:
    file.flush()
    file.seek(0)
    return scan_for_secrets(file.read())


@contextlib.asynccontextmanager
async def stdio_tools(env: dict[str, str], *args: str, errlog: IO[str]) -> AsyncIterator[Tools]:
    params = StdioServerParameters(
        command=COMMAND[0], args=[*COMMAND[1:], *args], env=env, cwd=str(ROOT)
    )
    async with Client(stdio_client(params, errlog=errlog), read_timeout_seconds=60) as client:
        yield Tools(client, env["X402_EUR_API_KEY"])


def unknown_proof() -> str:
    from x402_client._protocol.models import EuroPayload, PaymentProof
    from x402_client._protocol.proof import encode_proof

    payload = EuroPayload(payment_request_code="pr_never_issued").to_wire()
    return encode_proof(PaymentProof(scheme="euro", network="provider:mainnet", payload=payload))


def free_port(address: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((address, 0))
        return int(probe.getsockname()[1])


@contextlib.asynccontextmanager
async def listener(
    env: dict[str, str], address: str, *args: str, errlog: IO[str]
) -> AsyncIterator[str]:
    """Start `x402-eur mcp --http ADDRESS:PORT`; yield `http://ADDRESS:PORT`; stop it."""
    port = free_port(address)
    process = await anyio.open_process(
        [*COMMAND, "--http", f"{address}:{port}", *args],
        env={**os.environ, **env},
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=errlog,
        stderr=errlog,
    )
    try:
        with anyio.fail_after(60):
            while True:
                assert process.returncode is None, read_back(errlog)
                with contextlib.suppress(OSError), socket.create_connection((address, port)):
                    break
                await anyio.sleep(0.1)
        yield f"http://{address}:{port}"
    finally:
        process.terminate()
        with anyio.move_on_after(20) as waiting:
            await process.wait()
        if waiting.cancelled_caught:  # pragma: no cover
            process.kill()
            await process.wait()


@contextlib.asynccontextmanager
async def http_server(env: dict[str, str], *args: str, errlog: IO[str]) -> AsyncIterator[str]:
    """Start `x402-eur mcp --http 127.0.0.1:PORT`; yield its MCP URL; stop it."""
    async with listener(env, "127.0.0.1", *args, errlog=errlog) as base:
        yield f"{base}/mcp"


# --- stdio: the whole flow -----------------------------------------------------------------------


@pytest.mark.anyio
async def test_over_stdio_it_pays_within_the_budget_and_says_when_it_refuses(sandbox):
    account = sandbox.bank.open_account("10.00")
    weather = sandbox.url("/weather")
    env = server_env(sandbox, account)
    with stderr_file() as errlog:
        async with stdio_tools(env, "--budget", "0.25", errlog=errlog) as tools:
            listed = {tool.name: tool for tool in (await tools.client.list_tools()).tools}
            assert set(listed) == TOOL_NAMES
            for tool in listed.values():
                assert tool.input_schema["type"] == "object" and tool.description
                assert tool.output_schema is not None
                for prop in tool.input_schema["properties"].values():
                    assert "type" in prop and prop["description"]
            assert listed["fetch"].input_schema["required"] == ["url"]
            assert listed["quote"].annotations.read_only_hint is True
            assert listed["fetch"].annotations.read_only_hint is False

            quote = await tools.ok("quote", url=weather)
            assert quote["status"] == 402 and not quote["free"]
            [first] = [e for e in quote["entries"] if e["first"]]
            assert first["payable"] and first["amount"] == "0.10" and first["currency"] == "EUR"
            assert sandbox.balance(account) == Decimal("10.00")  # quoting pays nothing

            paid = await tools.ok("fetch", url=weather)
            assert paid["status"] == 200 and paid["bodyEncoding"] == "text"
            assert json.loads(paid["body"])["city"] == "Amsterdam"
            assert not paid["truncated"]
            receipt = paid["receipt"]
            assert (receipt["amount"], receipt["currency"], receipt["rail"]) == (
                "0.10",
                "EUR",
                "euro",
            )
            assert receipt["paymentRequestCode"].startswith("pr_") and receipt["transactionCode"]
            assert "proof" not in receipt
            assert sandbox.balance(account) == Decimal("9.90")  # exactly the price

            await tools.ok("fetch", url=weather)
            assert sandbox.balance(account) == Decimal("9.80")

            refused, text = await tools.error("fetch", url=weather)
            assert refused["type"] == "BudgetExceeded" and refused["moneyMoved"] is False
            assert "No money moved" in text
            assert sandbox.balance(account) == Decimal("9.80")

            listing = await tools.ok("payments")
            assert listing["count"] == 2
            newest, oldest = listing["payments"]
            assert newest["startedAt"] >= oldest["startedAt"]
            assert {p["outcome"] for p in listing["payments"]} == {"paid"}
            assert all(p["delivered"] and p["proof"] is None for p in listing["payments"])
            assert newest["paymentRequestCode"] != receipt["paymentRequestCode"]
            assert oldest["paymentRequestCode"] == receipt["paymentRequestCode"]
            assert len((await tools.ok("payments", limit=1))["payments"]) == 1

            left = await tools.ok("budget")
            [budget] = left["budgets"]
            assert (budget["limit"], budget["spent"], budget["remaining"]) == (
                "0.25",
                "0.20",
                "0.05",
            )
            assert budget["window"] is None and budget["currency"] == "EUR"
            assert left["maxAmountPerPayment"]["EUR"] == "1.00"

            bad, text = await tools.error("fetch", url="ftp://example.com/", method="GET")
            assert bad["type"] == "InvalidArguments" and bad["moneyMoved"] is False
            bad, text = await tools.error("fetch", url=weather, headers={"X-City": "Zürich"})
            assert bad["type"] == "InvalidArguments" and "No money moved" in text
            bad, text = await tools.error("payments", limit=0)
            assert bad["type"] == "InvalidArguments" and bad["message"].startswith("limit:")
            assert sandbox.balance(account) == Decimal("9.80")
        logs = read_back(errlog)
    assert "paid 0.10 EUR" in logs and "BudgetExceeded (no money moved)" in logs
    assert account.api_key not in logs
    assert "Traceback" not in logs


@pytest.mark.anyio
async def test_no_budget_starts_only_when_asked_to(sandbox):
    account = sandbox.bank.open_account("1.00")
    env = server_env(sandbox, account)
    with stderr_file() as errlog:
        async with stdio_tools(env, "--no-budget", "--max-amount", "0.05", errlog=errlog) as tools:
            left = await tools.ok("budget")
            assert left["budgets"] == [] and "no budget" in left["note"]
            assert left["maxAmountPerPayment"]["EUR"] == "0.05"
            refused, text = await tools.error("fetch", url=sandbox.url("/weather"))
            assert refused["type"] == "AmountLimitExceeded" and "No money moved" in text
        assert account.api_key not in read_back(errlog)
    assert sandbox.balance(account) == Decimal("1.00")


@pytest.mark.anyio
async def test_discover_lists_the_facilitator_s_resources_with_what_would_be_paid(sandbox):
    account = sandbox.bank.open_account("1.00")
    env = server_env(sandbox, account)
    with stderr_file() as errlog:
        async with stdio_tools(env, "--budget", "0.25", errlog=errlog) as tools:
            listed = {tool.name: tool for tool in (await tools.client.list_tools()).tools}
            assert listed["discover"].annotations.read_only_hint is True
            found = await tools.ok("discover", facilitator=sandbox.discovery_url)
            by_path = {
                r["resource"].removeprefix(sandbox.merchant_url): r for r in found["resources"]
            }
            assert sorted(by_path) == ["/echo", "/premium", "/report", "/weather"]
            [weather] = by_path["/weather"]["entries"]
            assert (weather["payable"], weather["amount"], weather["currency"]) == (
                True,
                "0.10",
                "EUR",
            )
            assert by_path["/echo"]["method"] == "POST" and by_path["/echo"]["payable"]
            [report] = by_path["/report"]["entries"]
            assert (report["payable"], report["reason"]) == (False, "over_budget")
            assert by_path["/premium"]["entries"][0]["reason"] == "over_cap"
            assert found["skipped"] == [] and found["nextOffset"] is None

            searched = await tools.ok(
                "discover", facilitator=sandbox.discovery_url, query="weather", limit=5
            )
            assert [r["resource"] for r in searched["resources"]] == [sandbox.url("/weather")]

            elsewhere = f"http://127.0.0.1:{free_port()}"  # loopback, but not admitted
            refused, text = await tools.error("discover", facilitator=elsewhere)
            assert refused["type"] == "DestinationRefused" and refused["moneyMoved"] is False
            assert "No money moved" in text
            bad, _ = await tools.error("discover", facilitator=sandbox.discovery_url, limit=0)
            assert bad["type"] == "InvalidArguments" and bad["moneyMoved"] is False
        logs = read_back(errlog)
    assert "discover" in logs and account.api_key not in logs
    assert sandbox.balance(account) == Decimal("1.00")  # discovery pays nothing


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("X402_EUR_", "QUANTOZ_"))}
    return subprocess.run(
        [*COMMAND, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**clean, **(env or {})},
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )


def test_without_a_budget_it_refuses_to_start_in_one_line(sandbox):
    account = sandbox.bank.open_account("1.00")
    result = run_cli(env=server_env(sandbox, account))
    assert result.returncode == 2
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert "no budget" in line and "--budget" in line and "--no-budget" in line


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--budget", "5/24x"), "use s, m, h or d"),
        (("--budget", "five"), "not a budget"),
        (("--budget", "5GBP"), "EUR or USD"),
        (("--budget", "1", "--no-budget"), "not both"),
        (("--budget", "1", "--http", "0.0.0.0:8402"), "--allow-remote"),
        (("--budget", "1", "--http", "example.com:8402"), "not a loopback"),
        (("--budget", "1", "--http", "8402"), "HOST:PORT"),
    ],
)
def test_usage_mistakes_exit_2_without_a_traceback(args, expected):
    result = run_cli(*args)
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.splitlines()) <= 2 and result.stdout == ""


@pytest.mark.parametrize(
    ("token", "expected"),
    [
        ("short-secret", "16 characters"),
        ("a token with spaces in it", "printable ASCII without spaces"),
        ("jeton-très-long-et-secret", "printable ASCII without spaces"),
    ],
)
def test_a_token_that_cannot_guard_the_endpoint_is_a_usage_mistake(token, expected):
    result = run_cli("--budget", "1", "--http", "127.0.0.1:8402", env={TOKEN_ENV: token})
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert TOKEN_ENV in line and expected in line and token not in line


def test_a_bad_budget_in_the_environment_is_a_usage_mistake():
    result = run_cli(env={"X402_EUR_BUDGET": "1.00/fortnight"})
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert "X402_EUR_BUDGET" in line


# --- stdout carries the protocol and nothing else ---------------------------------------------


def test_stdout_carries_only_protocol_messages_even_at_debug(sandbox):
    account = sandbox.bank.open_account("1.00")
    env = {**os.environ, **server_env(sandbox, account, X402_EUR_BUDGET="0.15/1h,5/24h")}
    messages = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "raw-test", "version": "0"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "fetch", "arguments": {"url": sandbox.url("/weather")}},
        },
        {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "budget"}},
    ]
    with stderr_file() as errlog:
        process = subprocess.Popen(
            [*COMMAND, "--log-level", "debug"],
            env=env,
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errlog,
            text=True,
        )
        watchdog = threading.Timer(60, process.kill)
        watchdog.start()
        answers: dict[int, Any] = {}
        lines: list[str] = []
        try:
            assert process.stdin is not None and process.stdout is not None
            for message in messages:
                process.stdin.write(json.dumps(message) + "\n")
                process.stdin.flush()
                if "id" not in message:
                    continue
                while message["id"] not in answers:
                    line = process.stdout.readline()
                    assert line, read_back(errlog)
                    lines.append(line)
                    parsed = json.loads(line)  # every line is one JSON-RPC message
                    assert parsed["jsonrpc"] == "2.0"
                    if "id" in parsed:
                        answers[parsed["id"]] = parsed
            process.stdin.close()
            lines += process.stdout.readlines()
            assert process.wait(20) == 0
        finally:
            watchdog.cancel()
            if process.poll() is None:  # pragma: no cover
                process.kill()
                process.wait()
            if process.stdout is not None:
                process.stdout.close()
        logs = read_back(errlog)
    for line in lines:
        assert json.loads(line)["jsonrpc"] == "2.0"
    assert {t["name"] for t in answers[2]["result"]["tools"]} == TOOL_NAMES
    fetched = answers[3]["result"]
    assert not fetched["isError"] and fetched["structuredContent"]["receipt"]["amount"] == "0.10"
    budgets = answers[4]["result"]["structuredContent"]["budgets"]
    assert [(b["name"], b["window"], b["remaining"]) for b in budgets] == [
        ("0.15 EUR/1h", "1h", "0.05"),
        ("5 EUR/24h", "24h", "4.90"),
    ]
    assert "serving MCP on stdio" in logs and "DEBUG" in logs  # the logs went to stderr
    assert account.api_key not in logs and account.api_key not in "".join(lines)


# --- streamable HTTP ----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_over_http_the_same_tools_pay_and_refuse(sandbox):
    account = sandbox.bank.open_account("10.00")
    env = server_env(sandbox, account)
    weather = sandbox.url("/weather")
    with stderr_file() as errlog:
        async with (
            http_server(
                env,
                *("--budget", "0.25", "--max-body-bytes", "1000"),
                *("--allow-host", "127.0.0.1:9"),  # nothing listens there: a ConnectError
                errlog=errlog,
            ) as url,
            Client(url, read_timeout_seconds=60) as client,
        ):
            tools = Tools(client, account.api_key)
            assert {t.name for t in (await client.list_tools()).tools} == TOOL_NAMES

            assert (await tools.ok("quote", url=weather))["status"] == 402
            assert sandbox.balance(account) == Decimal("10.00")

            # Re-sending a proof pays nothing: the merchant's refusal of one it does not know
            # is about the payment the proof stands for, and one that is not a proof at all
            # is refused before anything is sent.
            refused, _ = await tools.error("fetch", url=weather, proof=unknown_proof())
            assert refused["type"] == "PaymentVerificationFailed" and refused["proof"]
            garbled, _ = await tools.error("fetch", url=weather, proof="bm90LWEtcHJvb2Y")
            assert garbled["type"] == "ConfigurationError" and garbled["moneyMoved"] is False
            assert sandbox.balance(account) == Decimal("10.00")

            over, text = await tools.error("fetch", url=sandbox.url("/report"), max_amount="0.20")
            assert over["type"] == "AmountLimitExceeded" and "No money moved" in text
            assert over["intent"]["amount"] == "0.50"

            paid = await tools.ok("fetch", url=weather, max_amount=0.1)
            assert paid["receipt"]["amount"] == "0.10"
            await tools.ok("fetch", url=weather)
            refused, text = await tools.error("fetch", url=weather)
            assert refused["type"] == "BudgetExceeded" and "No money moved" in text
            assert sandbox.balance(account) == Decimal("9.80")

            big = await tools.ok("fetch", url=sandbox.url("/stream?size=5000"))
            assert big["truncated"] and big["bytes"] == 1000 and big["bodyEncoding"] == "base64"
            assert big["receipt"] is None

            [budget] = (await tools.ok("budget"))["budgets"]
            assert budget["remaining"] == "0.05"
            assert [p["amount"] for p in (await tools.ok("payments"))["payments"]] == [
                "0.10",
                "0.10",
            ]

            down, text = await tools.error("fetch", url="http://127.0.0.1:9/nothing")
            assert down["type"] == "ConnectError" and down["moneyMoved"] is False
            assert "No money moved" in text
        logs = read_back(errlog)
    assert "serving MCP over streamable HTTP at http://127.0.0.1:" in logs
    assert account.api_key not in logs


#: A bearer token for the HTTP endpoint (as `secrets.token_urlsafe(24)` would give).
TOKEN = "tok-4fN0cY5mZ3p8QaW1rT6vB9xK"


@pytest.mark.anyio
async def test_over_http_a_token_keeps_out_whoever_does_not_carry_it(sandbox):
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    account = sandbox.bank.open_account("10.00")
    env = server_env(sandbox, account, **{TOKEN_ENV: TOKEN})
    weather = sandbox.url("/weather")
    mcp_headers = {"Accept": "application/json, text/event-stream"}
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "fetch", "arguments": {"url": weather}},
    }
    with stderr_file() as errlog:
        async with http_server(env, "--budget", "0.25", errlog=errlog) as url:
            async with httpx2.AsyncClient(timeout=30) as plain:
                for authorization in (None, "Bearer wrong-token-of-some-length", TOKEN, "Bearer"):
                    headers = dict(mcp_headers)
                    if authorization is not None:
                        headers["Authorization"] = authorization
                    refused = await plain.post(url, json=call, headers=headers)
                    assert refused.status_code == 401, (authorization, refused.text)
                    assert refused.headers["www-authenticate"].startswith("Bearer")
                    assert TOKEN not in refused.text
                # The same request with the token reaches the MCP layer (which then wants a
                # session): the 401s above were the token's doing.
                reached = await plain.post(
                    url, json=call, headers={**mcp_headers, "Authorization": f"Bearer {TOKEN}"}
                )
                assert reached.status_code != 401
            assert sandbox.balance(account) == Decimal("10.00")

            async with (
                httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}) as http,
                Client(
                    streamable_http_client(url, http_client=http), read_timeout_seconds=60
                ) as client,
            ):
                tools = Tools(client, account.api_key)
                paid = await tools.ok("fetch", url=weather)
                assert paid["receipt"]["amount"] == "0.10"
        logs = read_back(errlog)
    assert sandbox.balance(account) == Decimal("9.90")
    assert "bearer token required" in logs
    assert TOKEN not in logs and account.api_key not in logs


# --- pure parts ---------------------------------------------------------------------------------


async def _asgi_answer(app: Any, headers: list[tuple[bytes, bytes]]) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app({"type": "http", "headers": headers}, receive, send)
    return sent


@pytest.mark.anyio
async def test_require_bearer_lets_through_exactly_the_token():
    reached: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        reached.append(scope)
        await send({"type": "http.response.start", "status": 200, "headers": []})

    guarded = require_bearer(app, TOKEN)
    good = (b"authorization", f"Bearer {TOKEN}".encode())
    assert (await _asgi_answer(guarded, [good]))[0]["status"] == 200
    assert (await _asgi_answer(guarded, [(b"Authorization", good[1])]))[0]["status"] == 200
    for headers in (
        [],
        [(b"authorization", TOKEN.encode())],
        [(b"authorization", f"bearer {TOKEN}x".encode())],
        [(b"authorization", f"Bearer {TOKEN[:-1]}".encode())],
        [good, (b"authorization", b"Bearer other")],  # two answers: which one counts?
    ):
        start, body = await _asgi_answer(guarded, headers)
        assert start["status"] == 401, headers
        assert TOKEN.encode() not in body["body"]
    assert len(reached) == 2

    closed: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        closed.append(message)

    await guarded({"type": "websocket", "headers": []}, None, send)
    assert closed == [{"type": "websocket.close", "code": 1008}] and len(reached) == 2

    await guarded({"type": "lifespan"}, None, send)
    assert len(reached) == 3  # lifespan events pass without a token


@pytest.mark.parametrize(
    ("text", "limit", "currency", "window", "name"),
    [
        ("0.25", "0.25", "EUR", None, "0.25 EUR"),
        ("5.00/24h", "5.00", "EUR", 86400.0, "5.00 EUR/24h"),
        ("5.00USD/24h", "5.00", "USD", 86400.0, "5.00 USD/24h"),
        ("2 eur / 30m", "2", "EUR", 1800.0, "2 EUR/30m"),
        ("1/h", "1", "EUR", 3600.0, "1 EUR/1h"),
        ("10/7d", "10", "EUR", 604800.0, "10 EUR/7d"),
        ("3/90s", "3", "EUR", 90.0, "3 EUR/90s"),
    ],
)
def test_budgets_are_read_from_their_short_form(text, limit, currency, window, name):
    budget = parse_budget(text)
    assert (budget.limit, budget.currency, budget.window, budget.name) == (
        Decimal(limit),
        currency,
        window,
        name,
    )


def test_budget_currency_applies_to_budgets_that_name_none():
    assert [b.currency for b in parse_budgets(["1, 2EUR/1d"], currency="USD")] == ["USD", "EUR"]
    assert len(parse_budgets(["1/1h", "1/1h", "1/60m"])) == 1  # the same budget counts once


@pytest.mark.parametrize("text", ["", "-1", "1e3", "1/0h", "1/week", "1/h/2", "1 GBP", "0.1234567"])
def test_malformed_budgets_are_refused(text):
    with pytest.raises(ValueError):
        parse_budget(text)


def test_bodies_are_text_when_they_say_so_and_base64_otherwise():
    assert _body_json("héllo".encode(), "text/plain; charset=utf-8", "utf-8", True) == (
        "héllo",
        "text",
    )
    # Cut inside a character: the half character is dropped, not garbled.
    assert _body_json("hé".encode()[:2], "text/plain", None, False) == ("h", "text")
    assert _body_json(b"\x00\x01\xff", "application/octet-stream", None, True) == ("AAH/", "base64")
    assert _body_json(b"plain", None, None, True) == ("plain", "text")
    assert _body_json(b"\xff\xfe", None, None, True) == ("//4=", "base64")


def test_an_unknown_outcome_says_how_to_recover_without_paying_again():
    from datetime import datetime, timezone

    receipt = PaymentReceipt(
        rail="euro",
        scheme="euro",
        network="provider:mainnet",
        asset="EURO",
        amount=Decimal("0.10"),
        currency="EUR",
        pay_to="ACC_MERCHANT",
        resource="https://merchant.example/paid",
        paid_at=datetime.now(timezone.utc),
        proof="cHJvb2Y",
        payment_request_code="pr_1",
    )
    error = _error_json(
        PaymentOutcomeUnknown(
            "the paid retry timed out",
            proof="cHJvb2Y",
            payment_request_code="pr_1",
            receipt=receipt,
        )
    )
    assert error["moneyMoved"] is None and error["summary"].startswith("Money may have moved")
    assert error["proof"] == "cHJvb2Y" and error["paymentRequestCode"] == "pr_1"
    assert error["receipts"][0]["amount"] == "0.10" and "proof" not in error["receipts"][0]
    assert "Do not pay again" in error["recovery"] and "proof" in error["recovery"]
    refused = _error_json(ToolError("InvalidArguments", "url: bad"))
    assert refused["moneyMoved"] is False


def test_every_tool_schema_is_valid_json_schema():
    jsonschema = require("jsonschema", "pip install 'x402-eur[dev]'")
    for spec in TOOLS.values():
        jsonschema.Draft202012Validator.check_schema(spec.input_schema)
        jsonschema.Draft202012Validator.check_schema(spec.output_schema)


def test_importing_the_module_does_not_import_mcp():
    code = (
        "import sys, x402_client.mcp, x402_client.cli; x402_client.cli._parser(); "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('mcp', 'mcp_types', 'uvicorn')]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.anyio
async def test_a_euro_budget_refuses_dollar_offers_and_the_budget_tool_says_so(sandbox, serve):
    from tests.flow.test_every_currency import EVM_KEY, Merchant

    merchant = Merchant()  # one offer: 0.10 USD in USDC, which an EVM key alone can pay
    url = await serve(merchant) + "/paid"
    account = sandbox.bank.open_account("1.00")
    env = server_env(sandbox, account, X402_EUR_EVM_PRIVATE_KEY=EVM_KEY)
    with stderr_file() as errlog:
        admitted = url.split("/")[2]  # the merchant, on 127.0.0.1
        async with stdio_tools(
            env, "--budget", "0.15/24h", "--allow-host", admitted, errlog=errlog
        ) as tools:
            refused, text = await tools.error("fetch", url=url)
            assert refused["type"] == "BudgetExceeded" and refused["moneyMoved"] is False
            assert "No money moved" in text
            [skipped] = refused["skipped"]
            assert skipped["reason"] == "no_budget"
            assert "no budget covers USD" in refused["message"]
            assert "--budget 2.00USD/24h" in refused["message"]

            left = await tools.ok("budget")
            euros, dollars = left["currencies"]
            assert euros == {
                "currency": "EUR",
                "maxAmountPerPayment": "1.00",
                "budgeted": True,
                "remaining": "0.15",
                "payable": True,
                "note": None,
            }
            assert (dollars["currency"], dollars["maxAmountPerPayment"]) == ("USD", "1.00")
            assert not dollars["budgeted"] and not dollars["payable"]
            assert dollars["remaining"] is None and "2.00USD/24h" in dollars["note"]
        logs = read_back(errlog)
    assert merchant.paid == []
    assert "USD offers refused: no budget covers them" in logs


@pytest.mark.anyio
async def test_two_servers_on_one_postgres_state_share_one_budget(sandbox, postgres_dsn):
    """Two MCP servers (two machines' agents) started with `--state postgresql://...` spend
    one budget: what one spent, the other's `budget` tool reports, and refuses past it."""
    account = sandbox.bank.open_account("10.00")
    weather = sandbox.url("/weather")
    env = server_env(sandbox, account, X402_EUR_STATE=postgres_dsn)
    with stderr_file() as errlog:
        async with (
            stdio_tools(env, "--budget", "0.25", errlog=errlog) as first,
            stdio_tools(env, "--budget", "0.25", errlog=errlog) as second,
        ):
            await first.ok("fetch", url=weather)
            await second.ok("fetch", url=weather)
            [budget] = (await first.ok("budget"))["budgets"]
            assert (budget["spent"], budget["remaining"]) == ("0.20", "0.05")
            refused, _ = await first.error("fetch", url=weather)
            assert refused["type"] == "BudgetExceeded" and refused["moneyMoved"] is False
        logs = read_back(errlog)
    assert sandbox.balance(account) == Decimal("9.80")
    assert postgres_dsn.split("@")[0].split(":")[-1] not in logs  # the DSN's password
