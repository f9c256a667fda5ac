"""The command line speaks to someone at a shell: the command to run, plain words, and
with --json one JSON object with the same keys whatever happened."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import pytest

from tests.conftest import bank_payments
from tests.integration.test_cli import env_of, run
from x402_eur_sandbox import Fault, Price, Sandbox

CLI = [sys.executable, "-m", "x402_client.cli"]
KEYS = ["url", "method", "status", "output", "receipt", "error"]


@pytest.fixture(autouse=True)
def own_state_file(tmp_path, monkeypatch) -> Path:
    """Every test gets a state file of its own: never the user's real one."""
    path = tmp_path / "state" / "state.sqlite3"
    monkeypatch.setenv("X402_EUR_STATE", str(path))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    return path


def test_a_payment_declined_at_the_prompt_is_said_in_plain_words(sandbox, payer) -> None:
    url = sandbox.url("/weather")
    declined = run("fetch", "--confirm", url, env=env_of(sandbox, payer), input="n\n")
    assert declined.returncode == 3
    assert declined.stderr == (
        f"Pay 0.10 EUR (euro) to {sandbox.merchant.code} for {url}? [y/N] "
        f"x402-eur: declined at the prompt: nothing was paid (0.10 EUR to "
        f"{sandbox.merchant.code})\n"
    )


def test_a_connection_error_with_json_is_the_json_object_of_a_success(sandbox, payer) -> None:
    result = run("fetch", "--json", "http://127.0.0.1:9/paid", env=env_of(sandbox, payer))
    assert result.returncode == 1
    assert json.loads(result.stderr) == {
        "url": "http://127.0.0.1:9/paid",
        "method": "GET",
        "status": None,
        "output": None,
        "receipt": None,
        "error": {
            "type": "ConnectError",
            "message": "cannot connect to http://127.0.0.1:9/paid: All connection attempts failed",
            "moneyMoved": False,
        },
    }
    assert result.stdout == ""


def test_a_connection_error_without_configuration_with_json_is_json_too(tmp_path) -> None:
    env = {k: "" for k in ("X402_EUR_API_KEY", "X402_EUR_ACCOUNT", "X402_EUR_API_URL")}
    out = tmp_path / "body"
    result = run("fetch", "--json", "-o", str(out), "-X", "post", "http://127.0.0.1:9/", env=env)
    assert result.returncode == 1 and result.stderr == ""
    assert json.loads(result.stdout) == {
        "url": "http://127.0.0.1:9/",
        "method": "POST",
        "status": None,
        "output": None,
        "receipt": None,
        "error": {
            "type": "ConnectError",
            "message": "cannot connect to http://127.0.0.1:9/: All connection attempts failed",
            "moneyMoved": False,
        },
    }


def test_without_configuration_a_free_url_is_fetched_and_a_paid_one_says_what_to_set(
    sandbox, payer
) -> None:
    env = {k: "" for k in ("X402_EUR_API_KEY", "X402_EUR_ACCOUNT", "X402_EUR_API_URL")}
    free = run("fetch", sandbox.url("/free"), env=env)
    assert free.returncode == 0 and free.stdout, free.stderr
    paid = run("fetch", sandbox.url("/weather"), env=env)
    assert paid.returncode == 3 and paid.stdout == ""
    assert paid.stderr.splitlines()[-1] == (
        "x402-eur: no payment configuration in the environment: set X402_EUR_API_KEY, "
        "X402_EUR_ACCOUNT and X402_EUR_API_URL (a managed account) or "
        "X402_EUR_EVM_PRIVATE_KEY (EVM)"
    )
    assert bank_payments(sandbox, payer) == []


def test_a_failed_payment_and_a_success_print_the_same_keys(sandbox, payer) -> None:
    env = env_of(sandbox, payer)
    paid = run("fetch", "--json", sandbox.url("/weather"), env=env)
    assert paid.returncode == 0, paid.stderr
    refused = run("fetch", "--json", "--max-amount", "0.01", sandbox.url("/weather"), env=env)
    assert refused.returncode == 3, refused.stderr
    success, failure = json.loads(paid.stderr), json.loads(refused.stderr)
    assert list(success) == list(failure) == KEYS
    assert failure["error"]["type"] == "AmountLimitExceeded"
    assert failure["error"]["moneyMoved"] is False


def test_an_unknown_outcome_names_the_command_that_finishes_it(sandbox, payer) -> None:
    sandbox.faults.arm("resource", Fault("status", "before", status=502, times=3))
    try:
        failed = run("fetch", sandbox.url("/weather"), env=env_of(sandbox, payer))
    finally:
        sandbox.faults.clear()
    assert failed.returncode == 3
    first, second = failed.stderr.splitlines()
    assert first.startswith("x402-eur: PaymentOutcomeUnknown: ")
    assert re.fullmatch(
        r"x402-eur: money moved; finish it without paying again: "
        r"x402-eur resume [0-9a-f]{32}",
        second,
    ), second


def test_ctrl_c_during_a_bridge_wait_prints_the_command_that_finishes_it(tmp_path) -> None:
    state = tmp_path / "bridge.sqlite3"
    bridged = {"/paid/bridge": Price(Decimal("0.30"), "Bridged to chain A", rails=("ledgera",))}
    with Sandbox.run_in_thread(chain_a=True, bridge_delay=60, prices=bridged) as sandbox:
        env = {**sandbox.env(), "X402_EUR_STATE": str(state)}
        url = sandbox.url("/paid/bridge")
        fetch = subprocess.Popen(
            [*CLI, "fetch", "--progress", url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            # a process stuck after the interrupt is made to show where (SIGABRT below)
            env={**os.environ, **env, "COLUMNS": "120", "PYTHONFAULTHANDLER": "1"},
        )
        try:
            assert fetch.stderr is not None
            deadline = time.monotonic() + 60
            seen = []
            while time.monotonic() < deadline:
                line = fetch.stderr.readline()
                seen.append(line)
                if "waiting for" in line or not line:
                    break
            assert "waiting for" in seen[-1], seen
            fetch.send_signal(signal.SIGINT)
            try:
                _, rest = fetch.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                fetch.send_signal(signal.SIGABRT)  # the fault handler prints every stack
                _, stacks = fetch.communicate(timeout=30)
                pytest.fail(f"still running a minute after Ctrl-C:\n{stacks}")
        finally:
            if fetch.poll() is None:
                fetch.kill()
            fetch.wait()
            for pipe in (fetch.stdout, fetch.stderr):
                if pipe is not None:
                    pipe.close()
        assert fetch.returncode == 130, rest
        unfinished = run("payments", "--unfinished", "--json", env=env)
        [record] = [json.loads(line) for line in unfinished.stdout.splitlines()]
        assert rest.splitlines()[-1] == (
            "x402-eur: interrupted; money may have moved; finish it without paying again: "
            f"x402-eur resume {record['id']}"
        )
        assert "extensions=" not in rest and "resume_transaction_code" not in rest
        assert "Traceback" not in rest
        # nothing but that line: no log line of the library's, no spinner left behind
        assert [line for line in rest.splitlines() if line] == [rest.splitlines()[-1]]


def test_a_refusal_is_one_line_and_debug_or_json_give_each_offer(sandbox, payer) -> None:
    env, url = env_of(sandbox, payer), sandbox.url("/weather")
    refused = run("fetch", "--max-amount", "0.05", url, env=env)
    assert refused.returncode == 3 and refused.stdout == ""
    assert refused.stderr == (
        "x402-eur: AmountLimitExceeded: no offer paid: 1 offer skipped (1 over --max-amount "
        "0.05 EUR); --debug for each\n"
    )
    debug = run("fetch", "--debug", "--max-amount", "0.05", url, env=env)
    assert debug.returncode == 3 and debug.stderr == (
        "x402-eur: AmountLimitExceeded: no offer paid: 1 offer skipped (1 over --max-amount "
        "0.05 EUR)\n"
        "  offer 0: 0.10 EUR is above --max-amount 0.05 EUR\n"
    )
    as_json = run("fetch", "--json", "--max-amount", "0.05", url, env=env)
    assert as_json.returncode == 3
    assert json.loads(as_json.stderr)["error"] == {
        "type": "AmountLimitExceeded",
        "message": "no offer paid: 1 offer skipped (1 over --max-amount 0.05 EUR)",
        "moneyMoved": False,
        "skipped": [
            {
                "index": 0,
                "reason": "over_cap",
                "message": "0.10 EUR is above --max-amount 0.05 EUR",
            }
        ],
    }
    assert bank_payments(sandbox, payer) == []


def test_a_budget_refusal_says_what_the_window_spent_already(sandbox, payer) -> None:
    env, url = env_of(sandbox, payer), sandbox.url("/weather")
    assert run("fetch", "--budget", "0.15/24h", url, env=env).returncode == 0
    refused = run("fetch", "--budget", "0.15/24h", url, env=env)
    assert refused.returncode == 3 and refused.stderr == (
        "x402-eur: BudgetExceeded: no offer paid: budget 0.15 EUR/24h: 0.10 EUR spent, this "
        "payment 0.10 EUR; 1 offer skipped (1 over the budget 0.15 EUR/24h); --debug for each\n"
    )


def test_a_currency_without_a_budget_names_the_flag_that_adds_one(sandbox, payer) -> None:
    refused = run("fetch", "--budget", "1USD", sandbox.url("/weather"), env=env_of(sandbox, payer))
    assert refused.returncode == 3 and refused.stderr == (
        "x402-eur: BudgetExceeded: no offer paid: 0.10 EUR: no budget covers EUR (once a "
        "budget is set, only currencies with a budget are paid): add one, e.g. --budget "
        "2.00EUR/24h; 1 offer skipped (1 no budget in EUR); --debug for each\n"
    )
    assert "Budget(" not in refused.stderr


def test_an_unexpected_error_names_the_class_users_import() -> None:
    env = {k: "" for k in ("X402_EUR_API_KEY", "X402_EUR_ACCOUNT", "X402_EUR_API_URL")}
    result = run("fetch", "http://127.0.0.1:9/", env={**env, "X402_EUR_API_KEY": "k"})
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr == (
        "x402-eur: x402_client.ConfigurationError: no usable payment configuration in the "
        "environment: X402_EUR_ACCOUNT, X402_EUR_API_URL are not set (set them for the managed "
        "account)\n"
        "(run with --debug for the traceback)\n"
    )


def test_a_redirect_is_followed_with_dash_l_only_as_curl_does(sandbox, payer) -> None:
    env = env_of(sandbox, payer)
    to_paid = sandbox.url("/redirect?to=/weather")
    kept = run("fetch", to_paid, env=env)
    assert kept.returncode == 0 and kept.stdout == ""
    assert kept.stderr == f"HTTP 302, redirects to {sandbox.url('/weather')} (-L follows)\n"
    assert bank_payments(sandbox, payer) == []
    # with -L the 402 behind the redirect is paid once, and its resource delivered
    followed = run("fetch", "-L", to_paid, env=env)
    assert followed.returncode == 0, followed.stderr
    assert json.loads(followed.stdout)["city"] == "Amsterdam"
    assert followed.stderr.startswith("\nHTTP 200\n  rail: euro\n")
    assert len(bank_payments(sandbox, payer)) == 1


def test_dash_s_silences_the_status_lines_but_never_an_error(sandbox, payer) -> None:
    env, url = env_of(sandbox, payer), sandbox.url("/weather")
    paid = run("fetch", "-s", "--progress", url, env=env)
    assert paid.returncode == 0 and paid.stderr == ""
    assert json.loads(paid.stdout)["city"] == "Amsterdam"
    refused = run("fetch", "-s", "--max-amount", "0.01", url, env=env)
    assert refused.returncode == 3 and refused.stderr == (
        "x402-eur: AmountLimitExceeded: no offer paid: 1 offer skipped (1 over --max-amount "
        "0.01 EUR); --debug for each\n"
    )


def test_dash_i_writes_the_status_line_and_headers_before_the_body(
    sandbox, payer, tmp_path
) -> None:
    saved = tmp_path / "free.http"
    to_file = run("fetch", "-i", "-o", str(saved), sandbox.url("/free"), env=env_of(sandbox, payer))
    assert to_file.returncode == 0 and to_file.stderr == "HTTP 200\n"
    written = saved.read_bytes()  # as on the wire: CRLF line ends, a blank line, the body
    assert written.startswith(b"HTTP/1.1 200 OK\r\n")
    assert written.endswith(b'content-type: application/json\r\n\r\n{"free":true}')
    result = run("fetch", "-i", "-s", sandbox.url("/free"), env=env_of(sandbox, payer))
    assert result.returncode == 0 and result.stderr == ""
    head, _, body = result.stdout.partition("\n\n")
    lines = head.split("\n")
    assert lines[0] == "HTTP/1.1 200 OK"
    assert [line for line in lines if not line.startswith("date: ")] == [
        "HTTP/1.1 200 OK",
        "server: uvicorn",
        "content-length: 13",
        "content-type: application/json",
    ]
    assert body == '{"free":true}'


def test_an_unconfirmed_payment_shows_its_re_sends_with_a_measure() -> None:
    slow = re.compile(
        r"x402 euro: the merchant has not confirmed the payment yet: poll (\d) of 8"
        r"(, again in \d+ s)? \(\d+ s\)"
    )
    with Sandbox.run_in_thread(confirmation_delay=2.0) as sandbox:
        payer = sandbox.bank.open_account("1.00")
        fetched = run("fetch", "--progress", sandbox.url("/weather"), env=env_of(sandbox, payer))
    assert fetched.returncode == 0, fetched.stderr
    lines = fetched.stderr.splitlines()
    shown = [line for line in lines if line.startswith("x402 euro:")]
    assert shown and all(slow.fullmatch(line) for line in shown), lines
    polls = [int(slow.fullmatch(line)[1]) for line in shown]  # type: ignore[index]
    assert polls == sorted(set(polls))
    assert lines[len(shown) :][:2] == ["", "HTTP 200"]


def test_a_bad_key_in_the_environment_is_named_by_its_variable() -> None:
    result = run("fetch", "http://127.0.0.1:9/", env={"X402_EUR_EVM_PRIVATE_KEY": "0x12"})
    assert result.returncode == 1 and result.stderr == (
        "x402-eur: x402_client.ConfigurationError: X402_EUR_EVM_PRIVATE_KEY: private_key must "
        "be 32 bytes of hex\n(run with --debug for the traceback)\n"
    )


class _HeldRpc:
    """A JSON-RPC proxy on 127.0.0.1 in front of `upstream` (anvil) that holds its first
    answer until `release` is set (or, after `slow(seconds)`, for that long)."""

    def __init__(self, upstream: str) -> None:
        import http.server
        import threading

        import httpx

        self.release = threading.Event()
        self.armed, self.hold = True, 120.0

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if outer.armed:
                    outer.armed = False
                    outer.release.wait(outer.hold)
                raw = httpx.post(
                    upstream, content=body, headers={"Content-Type": "application/json"}, timeout=60
                ).content
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args: object) -> None:
                pass

        outer = self
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def slow(self, seconds: float) -> None:
        """The next first answer comes after `seconds`: a node that is merely slow."""
        import threading

        self.release, self.armed, self.hold = threading.Event(), True, seconds

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(30)


def test_a_slow_chain_rpc_gets_a_status_line_and_none_with_s(tmp_path) -> None:
    with Sandbox.run_in_thread(evm=True) as sandbox:
        held = _HeldRpc(sandbox.evm.rpc_url(137))
        try:
            env = {
                **os.environ,
                **{k: "" for k in ("X402_EUR_API_KEY", "X402_EUR_ACCOUNT", "X402_EUR_API_URL")},
                "X402_EUR_EVM_PRIVATE_KEY": sandbox.evm.env()["X402_EUR_EVM_PRIVATE_KEY"],
                "X402_EUR_RPC_URL_137": held.url,
                "COLUMNS": "120",
            }
            fetch = subprocess.Popen(
                [*CLI, "fetch", "--progress", sandbox.url("/weather")],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
            assert fetch.stderr is not None
            first = fetch.stderr.readline()  # the status line comes while the RPC holds
            held.release.set()
            out, rest = fetch.communicate(timeout=120)
            # -s: the same slow node, two seconds this time, and not a word on stderr
            held.slow(2.0)
            quiet = run("fetch", "-s", "--progress", sandbox.url("/weather"), env=env)
            assert not held.armed  # the answer was held
        finally:
            held.close()
    assert fetch.returncode == 0 and out, first + rest
    shown = re.fullmatch(
        r"x402 evm-permit: waiting for the chain 137 RPC: endpoint 1 of 1, attempt 1 "
        r"\((\d+) s\)\n",
        first,
    )
    assert shown and int(shown[1]) >= 1, first
    assert "RPC" not in rest and held.url.rsplit(":", 1)[1] not in first + rest
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
