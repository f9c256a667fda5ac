"""The command line, run as a user would: fresh processes."""

import os
import subprocess
import sys

import pytest


def run(*args: str, timeout: float = 180, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "x402_client.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {}), "COLUMNS": "120"},
    )


def test_help_lists_the_commands() -> None:
    result = run("--help")
    assert result.returncode == 0
    for command in ("demo", "fetch", "sandbox"):
        assert command in result.stdout


@pytest.mark.slow
def test_demo_pays_on_every_rail_and_prints_the_resources() -> None:
    result = run("demo")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "Amsterdam" in out  # the euro-paid resource
    assert "provider:mainnet" in out and "eip155:137" in out and "eip155:1" in out
    assert "ledgera:mainnet" in out
    assert "payment failed" not in out
    assert "sk_sandbox_" not in out + result.stderr


def test_fetch_pays_from_the_environment(sandbox, payer) -> None:
    env = {
        "X402_EUR_API_KEY": payer.api_key,
        "X402_EUR_ACCOUNT": payer.code,
        "X402_EUR_API_URL": sandbox.payment_api_url,
    }
    result = run("fetch", sandbox.url("/weather"), env=env)
    assert result.returncode == 0, result.stderr
    assert '"city":"Amsterdam"' in result.stdout.replace(" ", "")
    assert "0.10 EUR" in result.stderr and "pr_" in result.stderr
    assert payer.api_key not in result.stdout + result.stderr
    refused = run("fetch", sandbox.url("/premium"), env=env)
    assert refused.returncode == 3 and "AmountLimitExceeded" in refused.stderr


MISTAKES = [
    (("fetch", "merchant.example/paid"), 2, "not an http(s) URL"),
    (("fetch", "-H", "NoColon", "http://127.0.0.1:9/"), 2, "not a header"),
    (("fetch", "--max-amount", "abc", "http://127.0.0.1:9/"), 2, "not an amount"),
    (("fetch", "--max-amount", "-1", "http://127.0.0.1:9/"), 2, "not an amount"),
    (("fetch",), 2, "required"),
    (("bogus",), 2, "invalid choice"),
    (("fetch", "http://127.0.0.1:9/"), 1, "X402_EUR_API_KEY"),
]


@pytest.mark.parametrize(("args", "code", "says"), MISTAKES, ids=[" ".join(m[0]) for m in MISTAKES])
def test_everyday_mistakes_get_a_short_answer_and_no_traceback(args, code, says) -> None:
    env = {k: "" for k in ("X402_EUR_API_KEY", "X402_EUR_ACCOUNT", "X402_EUR_API_URL")}
    result = run(*args, timeout=60, env=env)
    assert result.returncode == code
    lines = result.stderr.strip().splitlines()
    assert 1 <= len(lines) <= 2, result.stderr
    assert says in result.stderr and "Traceback" not in result.stderr


def test_an_unreachable_merchant_is_one_line_and_debug_shows_the_traceback(sandbox, payer) -> None:
    env = {
        "X402_EUR_API_KEY": payer.api_key,
        "X402_EUR_ACCOUNT": payer.code,
        "X402_EUR_API_URL": sandbox.payment_api_url,
    }
    result = run("fetch", "http://127.0.0.1:9/paid", env=env, timeout=60)
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) <= 2 and "cannot connect" in result.stderr
    debug = run("--debug", "fetch", "http://127.0.0.1:9/paid", env=env, timeout=60)
    assert debug.returncode == 1 and "Traceback" in debug.stderr
    assert payer.api_key not in result.stderr + debug.stderr
