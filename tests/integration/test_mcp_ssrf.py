"""Where `x402-eur mcp` lets an agent's `fetch` and `quote` go: public addresses, plus the
hosts its user admits (`--allow-host`, `X402_EUR_MCP_ALLOW_HOSTS`, the sandbox's env).

Driven as an MCP host drives it (the `mcp` client over stdio, one HTTP case), against
recording servers on 127.0.0.1: a refused destination is a structured tool error, and the
recorder behind it sees no request. Every other kind of address is refused through the
guard's decision and its transport without a connection (tests/unit/test_netguard.py)."""

# The imports of mcp follow the check that it is installed.
# ruff: noqa: E402

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

import pytest

from tests.needs import require

require("mcp_types", "pip install 'x402-eur[mcp-server]'")

from mcp import Client

from tests.conftest import Recorder
from tests.integration.test_mcp_server import (
    Tools,
    http_server,
    read_back,
    run_cli,
    server_env,
    stderr_file,
    stdio_tools,
)

pytestmark = pytest.mark.anyio

SECRET_QUERY = "q=agent-token-7f3a"


@pytest.fixture(autouse=True)
def own_state_file(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("X402_EUR_STATE", str(tmp_path / "state" / "state.sqlite3"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))


def redirector() -> Recorder:
    """Answers `?to=URL` with a 302 to URL, anything else with 200; records every request."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        target = parse_qs(scope["query_string"].decode()).get("to")
        headers = [(b"content-type", b"text/plain")]
        if target:
            headers.append((b"location", target[0].encode()))
        await send(
            {"type": "http.response.start", "status": 302 if target else 200, "headers": headers}
        )
        await send({"type": "http.response.body", "body": b"fine"})

    return Recorder(app)


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/", 1)[0])


def loopback_targets(port: int) -> list[tuple[str, str]]:
    """URLs that reach this machine on `port`, each with the host the refusal names."""
    return [
        (f"http://127.0.0.1:{port}/admin?{SECRET_QUERY}", f"127.0.0.1:{port}"),
        (f"http://127.0.0.2:{port}/admin?{SECRET_QUERY}", f"127.0.0.2:{port}"),
        (f"http://[::1]:{port}/admin?{SECRET_QUERY}", f"[::1]:{port}"),
        (f"http://localhost:{port}/admin?{SECRET_QUERY}", f"localhost:{port}"),
    ]


def assert_refused(error: dict[str, Any], text: str, names: str) -> None:
    assert error["type"] == "DestinationRefused", error
    assert error["moneyMoved"] is False and "No money moved" in text
    assert names in error["message"] and "loopback" in error["message"]
    assert "agent-token-7f3a" not in text and "/admin" not in error["message"]


async def test_loopback_destinations_are_refused_and_nothing_reaches_them(sandbox, serve):
    internal = Recorder()  # the service an injected instruction is after
    internal_url = await serve(internal)
    hop = redirector()  # admitted, and it redirects wherever it is told
    hop_url = await serve(hop)
    account = sandbox.bank.open_account("1.00")
    # The sandbox's own ports on 127.0.0.1 are admitted (as its env file does), and the
    # redirector's: the recorder is on 127.0.0.1 too, on a port nobody admitted.
    env = server_env(sandbox, account)
    admitted = hop_url.removeprefix("http://")
    with stderr_file() as errlog:
        async with stdio_tools(
            env, "--budget", "0.50", "--allow-host", admitted, errlog=errlog
        ) as tools:
            for url, names in loopback_targets(port_of(internal_url)):
                for tool in ("fetch", "quote"):
                    error, text = await tools.error(tool, url=url)
                    assert_refused(error, text, names)
                    bounced = f"{hop_url}/go?to={url}"
                    error, text = await tools.error(tool, url=bounced)
                    assert_refused(error, text, names)
            # The redirector itself was reached each time: the second hop was refused.
            assert len(hop.requests) == 8
            assert (await tools.ok("fetch", url=hop_url + "/plain"))["status"] == 200
        logs = read_back(errlog)
    assert internal.requests == []
    assert "DestinationRefused (no money moved)" in logs
    assert sandbox.balance(account) == 1


async def test_allow_host_admits_exactly_the_host_and_port_it_names(sandbox, serve):
    first = redirector()
    first_url = await serve(first)
    second = Recorder()
    second_url = await serve(second)
    one, two = port_of(first_url), port_of(second_url)
    account = sandbox.bank.open_account("1.00")
    # One by IP and port on the command line, one by name and port in the environment.
    env = server_env(sandbox, account)
    env["X402_EUR_MCP_ALLOW_HOSTS"] += f",localhost:{two}"
    with stderr_file() as errlog:
        async with stdio_tools(
            env, "--budget", "0.50", "--allow-host", f"127.0.0.1:{one}", errlog=errlog
        ) as tools:
            ok = await tools.ok("fetch", url=f"http://127.0.0.1:{one}/plain")
            assert ok["status"] == 200 and ok["body"] == "fine"
            assert (await tools.ok("quote", url=f"http://127.0.0.1:{one}/plain"))["free"]
            assert (await tools.ok("fetch", url=f"http://localhost:{two}/named"))["status"] == 200
            for url, names in [
                (f"http://127.0.0.1:{two}/by-ip", f"127.0.0.1:{two}"),  # admitted by name only
                (f"http://127.0.0.2:{one}/other-ip", f"127.0.0.2:{one}"),
                (f"http://127.0.0.1:{one}/go?to=http://127.0.0.1:{two}/hop", f"127.0.0.1:{two}"),
            ]:
                error, _ = await tools.error("fetch", url=url)
                assert error["type"] == "DestinationRefused" and names in error["message"]
        read_back(errlog)
    assert [path for _, path, _ in first.requests] == ["/plain", "/plain", "/go"]
    assert [path for _, path, _ in second.requests] == ["/named"]


async def test_over_http_a_redirect_into_this_machine_is_refused(sandbox, serve):
    internal = Recorder()
    internal_url = await serve(internal)
    hop = redirector()
    hop_url = await serve(hop)
    account = sandbox.bank.open_account("1.00")
    env = server_env(sandbox, account)
    admitted = hop_url.removeprefix("http://")
    with stderr_file() as errlog:
        async with (
            http_server(env, "--budget", "0.50", "--allow-host", admitted, errlog=errlog) as url,
            Client(url, read_timeout_seconds=60) as client,
        ):
            tools = Tools(client, account.api_key)
            target = f"http://localhost:{port_of(internal_url)}/admin?{SECRET_QUERY}"
            error, text = await tools.error("fetch", url=f"{hop_url}/go?to={target}")
            assert_refused(error, text, f"localhost:{port_of(internal_url)}")
        read_back(errlog)
    assert internal.requests == [] and len(hop.requests) == 1


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (("--allow-host", "127.0.0.1:http"), {}, "port must be a number"),
        (("--allow-host", "http://example.com"), {}, "not a host name"),
        ((), {"X402_EUR_MCP_ALLOW_HOSTS": "ok.example,[::1"}, "X402_EUR_MCP_ALLOW_HOSTS"),
    ],
)
def test_a_malformed_allowed_host_is_a_usage_mistake(args, env, expected):
    result = run_cli("--budget", "1", *args, env=env)
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.splitlines()) <= 2


async def test_the_server_hands_its_guard_to_the_payment_options(monkeypatch, sandbox):
    from x402_client import cli
    from x402_client.mcp import _launch as mcp_server

    served: list[Any] = []

    async def keep(args: argparse.Namespace, options: Any, *rest: Any) -> int:
        served.append(options)
        return 0

    account = sandbox.bank.open_account("1.00")
    for key, value in server_env(sandbox, account).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("X402_EUR_MCP_ALLOW_HOSTS", "build.internal:8080, 10.0.0.7")
    monkeypatch.setattr(mcp_server, "_serve", keep)
    args = cli._parser().parse_args(
        ["mcp", "--budget", "1", "--no-state", "--allow-host", "127.0.0.1:8402"]
    )
    assert await mcp_server.run(args) == 0
    [options] = served
    guard = options.destination_guard
    assert [str(a) for a in guard.allow] == ["127.0.0.1:8402", "build.internal:8080", "10.0.0.7"]
    assert guard.refusal("127.0.0.1", 8402) is None
    assert guard.refusal("127.0.0.1", 8403) is not None
    assert guard.refusal("10.0.0.7", 1, "anything.example") is None


def test_the_sandbox_env_admits_the_sandbox_and_nothing_else(sandbox):
    from x402_client._state.netguard import DestinationGuard, parse_allowed_hosts

    text = sandbox.env()["X402_EUR_MCP_ALLOW_HOSTS"]
    guard = DestinationGuard(parse_allowed_hosts([text]))
    for url in (sandbox.merchant_url, sandbox.mcp_url):
        assert guard.refusal("127.0.0.1", port_of(url)) is None, url
    assert {str(a) for a in guard.allow} == {
        u.removeprefix("http://") for u in (sandbox.merchant_url, sandbox.mcp_url)
    }
    assert guard.refusal("127.0.0.1", port_of(sandbox.payment_api_url)) is not None


# --- the EVM permit rail's facilitator: a URL the merchant writes ---------------------------------


class _Context:
    def __init__(self, options: Any) -> None:
        self.options = options


async def test_a_facilitator_on_a_refused_address_is_never_asked(serve):
    require("eth_account", "pip install 'x402-eur[evm]'")
    from x402_client import EvmOptions, PaymentOptions
    from x402_client._protocol.models import parse_accept
    from x402_client._rails.evm import EvmPermitRail, classify_evm_extra
    from x402_client._state.netguard import DestinationGuard

    facilitator = Recorder()
    facilitator_url = await serve(facilitator)
    raw = {
        "scheme": "exact",
        "network": "eip155:137",
        "asset": "0x5FbDB2315678afecb367f032d93F642f64180aa3",
        "maxAmountRequired": "100000",
        "payTo": "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",
        "maxTimeoutSeconds": 300,
        "resource": "https://merchant.example/weather",
        "facilitator": f"{facilitator_url}/x402",
        "extra": {"symbol": "EURQ", "spender": "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"},
    }
    entry = parse_accept(raw)
    extra = classify_evm_extra(raw["extra"])
    evm = EvmOptions(private_key="0x" + "11" * 32, rpc_urls={137: "http://127.0.0.1:1"})

    def rail(guard: DestinationGuard | None) -> Callable[[], Any]:
        options = PaymentOptions(evm=evm, destination_guard=guard)
        made = EvmPermitRail(_Context(options), evm)  # type: ignore[arg-type]

        async def check() -> Any:
            try:
                return await made._check_spender(entry, extra)  # type: ignore[arg-type]
            finally:
                await made.aclose()

        return check

    refused = await rail(DestinationGuard())()
    assert refused is not None and "DestinationRefused" in refused and "loopback" in refused
    assert facilitator.requests == []

    # The same facilitator, admitted (and with no guard at all, as the library defaults):
    # it is asked, so the refusal above was the guard's doing.
    admitted = DestinationGuard([facilitator_url.removeprefix("http://")])
    for guard in (admitted, None):
        answer = await rail(guard)()
        assert answer is not None and "DestinationRefused" not in answer
    assert [path for _, path, _ in facilitator.requests] == ["/x402/supported"] * 2
