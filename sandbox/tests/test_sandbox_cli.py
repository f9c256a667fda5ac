"""`x402-eur-sandbox serve|demo`, run as a user would: fresh processes."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.needs import require
from x402_eur_sandbox import __version__

SANDBOX = [sys.executable, "-m", "x402_eur_sandbox.cli"]
CLIENT = [sys.executable, "-m", "x402_client.cli"]


def run(
    *args: str,
    command: list[str] = SANDBOX,
    timeout: float = 180,
    env: dict | None = None,
    columns: int = 120,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*command, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {}), "COLUMNS": str(columns)},
        stdin=subprocess.DEVNULL,
    )


def client(*args: str, env: dict | None = None) -> subprocess.CompletedProcess[str]:
    """The x402-eur client's command, paying the sandbox."""
    return run(*args, command=CLIENT, env=env)


def test_help_lists_the_commands_and_version() -> None:
    result = run("--help")
    assert result.returncode == 0
    assert "serve" in result.stdout and "demo" in result.stdout
    version = run("--version")
    assert version.returncode == 0 and version.stdout.strip() == f"x402-eur-sandbox {__version__}"


@pytest.mark.slow
def test_demo_pays_on_every_rail_and_prints_the_resources() -> None:
    result = run("demo", columns=80)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    # It ends with what was paid on each rail, the total and the balances left, and every
    # line (long hashes too) fits 80 columns.
    summary = out.rsplit("summary", 1)[1]
    for paid in (
        "euro rail                  0.10 EUR",
        "standard x402, Solana      0.05 EUR",
        "EVM permit, chain 137      0.25 EUR",
        "EVM permit, chain 1        0.25 EUR",
        "standard x402, EIP-3009    0.10 EUR",
        "standard x402, Permit2     0.05 EUR",
        "standard x402, upto        0.02 EUR",
        "standard x402, identifier  0.20 EUR",
        "bridge to chain A          0.30 EUR",
        "session (3 vouchers)       0.03 EUR",
        "paid MCP tool (weather)    0.05 EUR",
        "chain A, own wallet        0.30 EUR",
        "total                      1.70 EUR",
        "payer account left         99.60 EURO",
        "EVM payer left, chain 137  99.75 EURQ",
        "EVM payer left, chain 1    99.75 EURQ",
        "EVM payer left, sEURC      99.55 sEURC",
        "chain-A wallet left        99.70 EURQ",
        "Solana wallet left         99.95 sEURC",
    ):
        assert paid in summary, summary
    assert max(len(line.rstrip()) for line in out.splitlines()) <= 80
    assert re.search(r"^tx hash +0x[0-9a-f]{20,}…[0-9a-f]{8,} *$", out, re.MULTILINE)
    assert "Amsterdam" in out  # the euro-paid resource
    assert "provider:mainnet" in out and "eip155:137" in out and "eip155:1" in out
    assert "eip3009" in out  # the standard x402 merchant, paid with EIP-3009
    assert "permit2" in out  # and through Permit2
    # The identifier-declaring route: the receipt names the identifier, and the proof
    # sent again is answered from the first answer, settled once.
    assert re.search(r"^payment identifier +pay_[0-9a-f]{32} *$", out, re.MULTILINE)
    assert "re-sent the same proof: HTTP 200, the merchant's first answer" in out
    assert "settled once, balance unchanged" in out
    # One session: one deposit, a voucher per request for the running total, the refund.
    session = out.split("session (batch-settlement)", 1)[1].split("paid MCP tool call", 1)[0]
    assert re.search(r"^deposit: 0\.10 EUR into the escrow, session 0x[0-9a-f]+…", session, re.M)
    for number in (1, 2, 3):
        assert f"voucher {number}: +0.01 EUR, running total 0.0{number} EUR" in session
    assert session.count("deposit:") == 1 and session.count("voucher ") == 3
    assert "refund: 0.07 EUR back to the payer, 0.03 EUR kept by the merchant, closed" in session
    # The paid MCP tool call, through with_eur_payment.
    assert 'tool result: {"city": "Amsterdam", "forecast": "sunny"' in out
    assert "ledgera:mainnet" in out
    assert "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1" in out  # paid from the Solana wallet
    assert "payment failed" not in out
    assert "sk_sandbox_" not in out + result.stderr


# --- serve ---------------------------------------------------------------------------------


def free_base_port(count: int = 3) -> int:
    """A port N such that N .. N+count-1 are free right now."""
    for _ in range(200):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + count > 65535:
            continue
        try:
            for port in range(base, base + count):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise RuntimeError("no free port range")


@contextmanager
def running_sandbox(*args: str, timeout: float = 120) -> Iterator[tuple[subprocess.Popen, str]]:
    """`x402-eur-sandbox serve ARGS` in the background: yields (process, stdout so far)."""
    process = subprocess.Popen(
        [*SANDBOX, "serve", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "120"},
    )
    lines: list[str] = []
    try:
        deadline = time.monotonic() + timeout
        assert process.stdout is not None
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                raise AssertionError(f"the sandbox ended: {process.wait()} {process.stderr.read()}")
            lines.append(line)
            if line.startswith("export X402_EUR_STATE="):
                break
        else:
            raise AssertionError("the sandbox did not start in time")
        yield process, "".join(lines)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found |= {int(child) for child in text}
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def resources_of(out: str, label: str = "paid resources") -> str:
    """The resources and prices listed under `label`, one per line, joined."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(label))
    found = [lines[start][len(label) :].strip()]
    for line in lines[start + 1 :]:
        if not line.startswith(" ") or not line.strip():
            break
        found.append(line.strip())
    return ", ".join(found)


def exports_of(text: str) -> dict[str, str]:
    found = dict(re.findall(r"^export (X402_EUR_[A-Z0-9_]+)=(.*)$", text, re.MULTILINE))
    return {key: value.strip("'") for key, value in found.items()}


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs /proc")
def test_sigterm_stops_the_sandbox_and_its_anvil_nodes(tmp_path) -> None:
    port = free_base_port()
    env_file = tmp_path / "sandbox.env"
    with running_sandbox("--evm", "--port", str(port), "--env-file", str(env_file)) as (
        process,
        out,
    ):
        assert f"http://127.0.0.1:{port + 2}" in out  # the merchant, at N+2
        resources = resources_of(out)
        assert "/paid/evm-polygon" in resources and "/paid/bridge" not in resources
        # The standard merchant's paid MCP tool server, with its tools' prices.
        assert re.search(r"^paid tool server \(MCP\) +http://127\.0\.0\.1:\d+/mcp *$", out, re.M)
        assert re.search(r"^its tools +weather +0\.05 sEURC *$", out, re.M)
        assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
        exported = exports_of(env_file.read_text())
        assert exported["X402_EUR_API_URL"] == f"http://127.0.0.1:{port}"
        assert exported["X402_EUR_SANDBOX_MERCHANT"] == f"http://127.0.0.1:{port + 2}"
        assert {"X402_EUR_EVM_PRIVATE_KEY", "X402_EUR_RPC_URL_137", "X402_EUR_STATE"} <= set(
            exported
        )
        quoted = client("quote", f"http://127.0.0.1:{port + 2}/paid/evm-polygon", env=exported)
        assert quoted.returncode == 0 and "eip155:137" in quoted.stdout and "yes" in quoted.stdout
        anvils = {
            pid
            for pid in children(process.pid)
            if "anvil" in Path(f"/proc/{pid}/cmdline").read_text()
        }
        assert len(anvils) == 2
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0, process.stderr.read()
        assert time.monotonic() - started < 15
        assert not any(alive(pid) for pid in anvils)
        assert process.stderr.read() == ""
        assert not Path(exported["X402_EUR_STATE"]).parent.exists()  # its own state, removed
        assert not env_file.exists()  # a stale env file would point at the removed state


def _drawn_on_a_terminal(url: str, env: dict[str, str]) -> tuple[int, str]:
    """`x402-eur fetch URL` with stderr on a pseudo-terminal: (exit code, what it drew)."""
    controller, terminal = pty.openpty()
    drawn: list[bytes] = []

    def drain() -> None:
        while True:
            ready, _, _ = select.select([controller], [], [], 30)
            if not ready:
                return
            try:
                chunk = os.read(controller, 4096)
            except OSError:
                return
            if not chunk:
                return
            drawn.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        live = subprocess.run(
            [*CLIENT, "fetch", url], stdout=subprocess.PIPE, stderr=terminal,
            env={**os.environ, **env, "COLUMNS": "120", "TERM": "xterm"}, timeout=120,
        )  # fmt: skip
    finally:
        os.close(terminal)
        reader.join(10)
        os.close(controller)
    return live.returncode, b"".join(drawn).decode(errors="replace")


@pytest.mark.slow
def test_a_bridge_wait_shows_progress_on_a_terminal_and_when_asked(tmp_path) -> None:
    with running_sandbox("--chain-a", "--bridge-delay", "1.5") as (process, out):
        resources = resources_of(out)
        assert "/paid/bridge" in resources and "/paid/evm" not in resources
        env = exports_of(out)
        url = re.search(r"merchant\s+(http://\S+)", out).group(1) + "/paid/bridge"

        asked = client("fetch", "--progress", url, env=env)
        assert asked.returncode == 0, asked.stderr
        assert "x402 bridge: waiting for" in asked.stderr and "ledgera:mainnet" in asked.stderr
        quiet = client("fetch", "--json", url, env=env)  # stderr is a pipe: no progress
        assert quiet.returncode == 0 and "x402 bridge" not in quiet.stderr
        receipt = json.loads(quiet.stderr)["receipt"]
        assert (receipt["rail"], receipt["amount"], receipt["currency"]) == (
            "bridge",
            "0.30",
            "EUR",
        )
        journaled = [
            json.loads(line) for line in client("payments", "--json", env=env).stdout.splitlines()
        ]
        assert [(r["rail"], r["amount"]) for r in journaled] == [("bridge", "0.30")] * 2
        assert " 0.30 EUR  bridge " in client("payments", env=env).stdout

        # On a terminal, the live display is on by default (rich draws it).
        code, screen = _drawn_on_a_terminal(url, env)
        assert code == 0, screen
        assert "on chain" in screen or "waiting for" in screen, screen
        assert "x402 bridge:" not in screen  # the live display, not the plain lines
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0


def test_a_port_in_use_is_one_line_and_a_plain_sandbox_lists_only_its_euro_resources() -> None:
    port = free_base_port()
    with running_sandbox("--port", str(port)) as (process, out):
        resources = resources_of(out)
        assert "/weather" in resources and "/paid/" not in resources
        # Each service under its own name, and each resource with its price.
        assert re.search(r"/weather +0\.10 EUR, ", resources + ", ")
        assert re.search(r"/premium +2\.00 EUR, ", resources + ", ")
        assert f"managed-account facilitator  http://127.0.0.1:{port + 1}/x402" in out
        assert f"hosted tool server (MCP)     http://127.0.0.1:{port + 1}/mcp" in out
        assert "facilitator (mcp)" not in out
        second = run("serve", "--port", str(port), timeout=60)
        assert second.returncode == 1
        assert second.stderr.strip() == (
            f"x402-eur-sandbox: 127.0.0.1:{port} (payment-api) is in use: choose another --port"
        )
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0


def test_without_anvil_evm_is_one_line_naming_what_to_install() -> None:
    result = run("serve", "--evm", env={"X402_ANVIL_BIN": "/nonexistent/anvil"}, timeout=60)
    assert result.returncode == 1
    assert result.stderr == (
        "x402-eur-sandbox: --evm runs two anvil chains: "
        "X402_ANVIL_BIN=/nonexistent/anvil is not an executable file\n"
    )
    assert result.stdout == ""


MISTAKES = [
    (("serve", "--port", "70000"), 2, "not a port"),
    (("serve", "--bridge-delay", "-1"), 2, "seconds"),
    (("serve", "--env-file", "{file}/env.sh"), 2, "cannot write the env file"),
    (("bogus",), 2, "invalid choice"),
]


@pytest.mark.parametrize(("args", "code", "says"), MISTAKES, ids=[" ".join(m[0]) for m in MISTAKES])
def test_everyday_mistakes_get_a_short_answer_and_no_traceback(args, code, says, tmp_path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory")
    result = run(*(arg.format(file=str(a_file)) for arg in args), timeout=60)
    assert result.returncode == code, result.stderr
    lines = result.stderr.strip().splitlines()
    assert 1 <= len(lines) <= 2, result.stderr
    assert says in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow
def test_serve_with_the_chain_a_wallet_makes_x402_eur_pay_from_it() -> None:
    require("algosdk", "pip install 'x402-eur[chain-a]'")
    with running_sandbox("--chain-a-wallet") as (process, out):
        for service in ("chain-A node", "chain-A facilitator", "chain-A payer wallet"):
            assert service in out, out
        env = exports_of(out)
        assert {"X402_EUR_CHAIN_A_PRIVATE_KEY", "X402_EUR_CHAIN_A_ALGOD_URL"} <= set(env)
        url = re.search(r"merchant\s+(http://\S+)", out).group(1) + "/paid/bridge"
        paid = client("fetch", "--json", url, env=env)
        assert paid.returncode == 0, paid.stderr
        receipt = json.loads(paid.stderr)["receipt"]
        assert (receipt["rail"], receipt["amount"], receipt["currency"]) == (
            "chain-a",
            "0.30",
            "EUR",
        )
        assert env["X402_EUR_CHAIN_A_PRIVATE_KEY"] not in paid.stdout + paid.stderr
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0


def test_serve_with_svm_prints_the_solana_chain_its_mints_and_its_payer() -> None:
    require("solders", "pip install 'x402-eur-sandbox[svm]'")
    with running_sandbox("--svm") as (process, out):
        rpc = re.search(r"^Solana JSON-RPC +(http://127\.0\.0\.1:\d+) *$", out, re.M)
        assert rpc is not None
        assert re.search(r"^SVM facilitator +http://127\.0\.0\.1:\d+ *$", out, re.M)
        mints = dict(re.findall(r"^Solana mint (sEURC|sUSDC) +(\w+) *$", out, re.M))
        assert set(mints) == {"sEURC", "sUSDC"}
        payer = re.search(r"^Solana payer +(\w+) *$", out, re.M)
        assert payer is not None
        assert re.search(r"^ +/solana/usdc +0\.05 sEURC or sUSDC *$", out, re.M)
        assert re.search(r"^its Solana resources +/solana +0\.05 sEURC or sUSDC *$", out, re.M)
        assert re.search(r"^ +/order +0\.20 sEURC *$", out, re.M)
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "getTokenAccountsByOwner",
            "params": [payer.group(1), {"mint": mints["sUSDC"]}, {"encoding": "jsonParsed"}],
        }
        import httpx

        answer = httpx.post(rpc.group(1), json=body, trust_env=False, timeout=30).json()
        [account] = answer["result"]["value"]
        assert (
            account["account"]["data"]["parsed"]["info"]["tokenAmount"]["uiAmountString"] == "100"
        )
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0, process.stderr.read()
