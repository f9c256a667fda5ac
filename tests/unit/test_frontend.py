"""The command line and the MCP server read budgets, amounts, hosts and state files through
one layer: the same mistake gets the same message from both."""

from __future__ import annotations

from pathlib import Path

import pytest

from x402_client import cli
from x402_client._frontend import common as _frontend
from x402_client.cli._common import _open_state, _UsageError
from x402_client.mcp import _launch

URL = "http://127.0.0.1:9/"


def _cli_says(*args: str) -> str:
    with pytest.raises(_UsageError) as caught:
        cli._parser().parse_args(["fetch", *args, URL])
    first = str(caught.value).splitlines()[0]
    return first.removeprefix("x402-eur fetch: ")


def _mcp_says(*args: str) -> str:
    with pytest.raises(_UsageError) as caught:
        cli._parser().parse_args(["mcp", *args])
    first = str(caught.value).splitlines()[0]
    return first.removeprefix("x402-eur mcp: ")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--budget", "five"),
            "argument --budget: 'five' is not a budget: write AMOUNT[CURRENCY][/WINDOW], "
            "e.g. 5.00/24h, 2.00USD/24h or 1.00 (a total)",
        ),
        (("--budget", "5/24x"), "argument --budget: budget window unit 'x': use s, m, h or d"),
        (("--budget", "5GBP/1d"), "argument --budget: budget currency 'GBP': must be EUR or USD"),
        (("--budget", ""), "argument --budget: '' holds no budget"),
        (
            ("--max-amount", "-1"),
            "argument --max-amount: amount '-1' is negative: it must be positive (or zero)",
        ),
        (
            ("--max-amount", "0.1234567"),
            "argument --max-amount: amount '0.1234567' is not a plain decimal with at most 6 "
            "decimals",
        ),
        (
            ("--state", "x", "--no-state"),
            "argument --no-state: not allowed with argument --state",
        ),
    ],
)
def test_the_same_mistake_gets_the_same_message_from_both_front_ends(
    args: tuple[str, ...], message: str
) -> None:
    assert _cli_says(*args) == message
    assert _mcp_says(*args) == message


def test_a_state_file_that_cannot_be_opened_is_said_the_same_way(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("X402_EUR_API_KEY", "sandbox-key-1234567890")
    monkeypatch.setenv("X402_EUR_ACCOUNT", "ACC_PAYER")
    monkeypatch.setenv("X402_EUR_API_URL", "http://127.0.0.1:9")
    garbage = tmp_path / "garbage.sqlite3"
    garbage.write_bytes(b"this is not a database, not even close" * 100)
    expected = (
        f"cannot open the state file {garbage}: file is not a database. Name another with "
        "--state PATH (or set X402_EUR_STATE), or use --no-state."
    )

    fetch = cli._parser().parse_args(["fetch", "--state", str(garbage), URL])
    options = _frontend.payment_options(state_path=garbage)
    with pytest.raises(_UsageError) as caught:
        _open_state(fetch, options)
    assert str(caught.value) == f"x402-eur fetch: {expected.replace('. Name', chr(10) + 'Name')}"

    mcp = cli._parser().parse_args(["mcp", "--budget", "1", "--state", str(garbage)])
    with pytest.raises(_launch._Refusal) as refused:
        _launch._options(mcp, [])
    assert str(refused.value) == expected


def test_the_state_path_is_the_same_for_both(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("X402_EUR_STATE", str(tmp_path / "env.sqlite3"))
    assert _frontend.state_path(None) == tmp_path / "env.sqlite3"
    assert _frontend.state_path("~/x.sqlite3") == Path("~/x.sqlite3").expanduser()
    assert _frontend.state_path("given", no_state=True) is None
    fetch = cli._parser().parse_args(["fetch", URL])
    mcp = cli._parser().parse_args(["mcp"])
    for args in (fetch, mcp):
        assert _frontend.state_path(args.state, no_state=args.no_state) == tmp_path / "env.sqlite3"


def test_a_bad_allowed_host_is_said_the_same_way_on_the_command_line_and_in_the_env(
    monkeypatch,
) -> None:
    said = _mcp_says("--allow-host", "http://x/")
    with pytest.raises(ValueError) as caught:
        _frontend.check_allowed_host("http://x/")
    assert said == f"argument --allow-host: {caught.value}"
    monkeypatch.setenv(_frontend.ALLOW_HOSTS_ENV, "http://x/")
    with pytest.raises(ValueError) as from_env:
        _frontend.destination_guard([])
    assert str(from_env.value) == str(caught.value)
