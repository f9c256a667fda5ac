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
