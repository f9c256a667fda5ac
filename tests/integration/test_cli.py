"""The command line, run as a user would: fresh processes."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import bank_payments
from x402_client import __version__
from x402_client._options import ENV_VARS
from x402_eur_sandbox import Fault

CLI = [sys.executable, "-m", "x402_client.cli"]


def run(
    *args: str, timeout: float = 180, env: dict | None = None, **kwargs
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {}), "COLUMNS": "120"},
        **kwargs,
    )


@pytest.fixture(autouse=True)
def own_state_file(tmp_path, monkeypatch) -> Path:
    """Every test gets a state file of its own: never the user's real one."""
    path = tmp_path / "state" / "state.sqlite3"
    monkeypatch.setenv("X402_EUR_STATE", str(path))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    return path


def env_of(sandbox, payer) -> dict[str, str]:
    return {
        "X402_EUR_API_KEY": payer.api_key,
        "X402_EUR_ACCOUNT": payer.code,
        "X402_EUR_API_URL": sandbox.payment_api_url,
    }


def test_help_lists_the_commands() -> None:
    result = run("--help")
    assert result.returncode == 0
    for command in ("fetch", "quote", "payments", "resume", "sessions", "mcp"):
        assert command in result.stdout


def test_help_points_at_the_reference_the_command_prints() -> None:
    result = run("--help")
    words = " ".join(result.stdout.split())
    assert "The full reference: x402-eur help." in words
    assert "docs/cli.md" not in words
    reference = run("help")
    assert reference.returncode == 0 and reference.stderr == ""
    root = Path(__file__).resolve().parents[2]
    assert reference.stdout == (root / "docs" / "cli.md").read_text(encoding="utf-8")


def test_help_with_a_command_is_that_command_s_help() -> None:
    assert run("help", "fetch").stdout == run("fetch", "--help").stdout
    mistake = run("help", "fecth")
    assert mistake.returncode == 2 and mistake.stdout == ""
    # argparse quotes the choices differently across Python versions.
    first, second = mistake.stderr.splitlines()
    assert first.startswith("x402-eur help: argument COMMAND: invalid choice: 'fecth' (choose")
    assert re.sub(r"'", "", first).endswith("fetch, mcp, payments, quote, resume, sessions, state)")
    assert second == "Try 'x402-eur help --help'."


@pytest.mark.parametrize(
    ("args", "moved"),
    [
        (("demo",), "x402-eur-sandbox demo"),
        (("--debug", "sandbox", "--evm"), "x402-eur-sandbox serve"),
    ],
)
def test_the_sandbox_commands_point_to_their_own_distribution(args, moved) -> None:
    result = run(*args)
    assert result.returncode == 2
    assert f"run `{moved}`" in result.stderr and "Traceback" not in result.stderr


def test_version() -> None:
    result = run("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"x402-eur {__version__}"


def test_fetch_help_lists_the_environment_it_reads() -> None:
    result = run("fetch", "--help")
    assert result.returncode == 0
    for variables in ENV_VARS.values():
        for variable in variables:
            assert variable in result.stdout
    assert "X402_EUR_STATE" in result.stdout
    assert "on stdout with -o FILE, else on stderr" in " ".join(result.stdout.split())


def test_fetch_pays_from_the_environment(sandbox, payer) -> None:
    env = env_of(sandbox, payer)
    result = run("fetch", sandbox.url("/weather"), env=env)
    assert result.returncode == 0, result.stderr
    assert '"city":"Amsterdam"' in result.stdout.replace(" ", "")
    assert "0.10 EUR" in result.stderr and "pr_" in result.stderr
    assert payer.api_key not in result.stdout + result.stderr
    refused = run("fetch", sandbox.url("/premium"), env=env)
    assert refused.returncode == 3 and "AmountLimitExceeded" in refused.stderr


def test_fetch_posts_a_file_writes_the_body_to_a_file_and_the_json_receipt_to_stdout(
    sandbox, payer, tmp_path
) -> None:
    body = tmp_path / "body.bin"
    body.write_bytes(b"line one\nline two\n\x00\xff")
    out = tmp_path / "answer.bin"
    result = run(
        "fetch", "-d", f"@{body}", "-o", str(out), "--json", sandbox.url("/echo"),
        env=env_of(sandbox, payer),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert out.read_bytes() == body.read_bytes()  # sent and written as they are
    report = json.loads(result.stdout)
    assert (report["method"], report["status"], report["output"]) == ("POST", 200, str(out))
    receipt = report["receipt"]
    assert (receipt["amount"], receipt["currency"], receipt["rail"]) == ("0.05", "EUR", "euro")
    assert receipt["paymentRequestCode"].startswith("pr_") and "proof" not in receipt
    assert result.stderr == ""
    assert not list(tmp_path.glob(".answer.bin.*"))  # no temporary file left behind


def test_without_o_the_body_is_on_stdout_and_the_json_receipt_on_stderr(sandbox, payer) -> None:
    result = run(
        "fetch", "--json", "-X", "put", "-d", "hi", sandbox.url("/echo"), env=env_of(sandbox, payer)
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "hi"
    report = json.loads(result.stderr)
    assert report["method"] == "PUT" and report["receipt"]["amount"] == "0.05"


def test_a_refused_payment_leaves_the_output_file_as_it_was(sandbox, payer, tmp_path) -> None:
    out = tmp_path / "kept.txt"
    out.write_text("old")
    result = run(
        "fetch", "-o", str(out), "--json", sandbox.url("/premium"), env=env_of(sandbox, payer)
    )
    assert result.returncode == 3
    error = json.loads(result.stdout)["error"]
    assert error["type"] == "AmountLimitExceeded" and error["moneyMoved"] is False
    assert "AmountLimitExceeded" in result.stderr and len(result.stderr.splitlines()) == 1
    assert out.read_text() == "old"
    assert not list(tmp_path.glob(".kept.txt.*"))


def test_a_daily_budget_holds_across_runs(sandbox, payer, own_state_file) -> None:
    env = env_of(sandbox, payer)
    first = run("fetch", "--budget", "0.15/24h", sandbox.url("/weather"), env=env)
    assert first.returncode == 0, first.stderr
    second = run("fetch", "--budget", "0.15/24h", sandbox.url("/weather"), env=env)
    assert second.returncode == 3 and second.stderr == (
        "x402-eur: BudgetExceeded: no offer paid: budget 0.15 EUR/24h: 0.10 EUR spent, this "
        "payment 0.10 EUR; 1 offer skipped (1 over the budget 0.15 EUR/24h); --debug for each\n"
    )
    # The same day written another way, with a higher limit: what was spent still counts.
    third = run("fetch", "--budget", "0.25/1d", sandbox.url("/weather"), env=env)
    assert third.returncode == 0, third.stderr
    fourth = run("fetch", "--budget", "0.25/1d", sandbox.url("/weather"), env=env)
    assert fourth.returncode == 3
    # --no-state: a budget for this run only.
    alone = run("fetch", "--no-state", "--budget", "0.15/24h", sandbox.url("/weather"), env=env)
    assert alone.returncode == 0, alone.stderr
    assert len(bank_payments(sandbox, payer)) == 3

    listed = run("payments")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split() == [
        "ID",
        "WHEN",
        "AMOUNT",
        "RAIL",
        "OUTCOME",
        "DELIVERED",
        "RESOURCE",
        "CODES",
    ]
    # COLUMNS=120: the table fits it, a row's long cells wrapping onto indented lines
    assert max(len(line) for line in lines) <= 120
    rows = [line for line in lines[1:] if not line.startswith(" ")]
    assert len(rows) == 2 and all("0.10 EUR" in line and " paid " in line for line in rows)
    records = [json.loads(line) for line in run("payments", "--json").stdout.splitlines()]
    assert len(records) == 2 and {r["outcome"] for r in records} == {"paid"}
    assert all(r["delivered"] and r["resource"] == sandbox.url("/weather") for r in records)
    assert len(run("payments", "--json", "--limit", "1").stdout.splitlines()) == 1
    assert run("payments", "--unfinished").stderr.startswith("x402-eur: no unfinished payments")
    other = run("payments", "--state", str(own_state_file.parent / "other.sqlite3"))
    assert other.returncode == 0 and "no payments yet" in other.stderr
    assert not (own_state_file.parent / "other.sqlite3").exists()  # listing creates nothing


def test_quote_shows_the_options_and_pays_nothing(sandbox, payer) -> None:
    env = env_of(sandbox, payer)
    before = sandbox.balance(payer)
    result = run("quote", sandbox.url("/weather"), env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"GET {sandbox.url('/weather')}: 402 Payment Required, 1 offer, 1 payable",
        "#     PRICE  RAIL  NETWORK           ASSET  PAYABLE",
        "0  0.10 EUR  euro  provider:mainnet  EURO   yes, tried first",
    ]
    capped = json.loads(
        run("quote", "--json", "--max-amount", "0.05", sandbox.url("/weather"), env=env).stdout
    )
    assert capped["status"] == 402 and capped["entries"]
    assert not any(entry["payable"] for entry in capped["entries"])
    assert capped["entries"][0]["reason"] == "over_cap"
    free = run("quote", sandbox.url("/free"), env=env)
    assert free.returncode == 0 and "free" in free.stdout
    # Without any configuration: the prices, and nothing payable.
    bare = run(
        "quote",
        sandbox.url("/weather"),
        env={k: "" for k in ("X402_EUR_API_KEY", "X402_EUR_ACCOUNT", "X402_EUR_API_URL")},
    )
    assert bare.returncode == 0 and "0.10 EURO" in bare.stdout and "0 payable" in bare.stdout
    assert "no payment configuration" in bare.stderr
    assert sandbox.balance(payer) == before and bank_payments(sandbox, payer) == []


def test_an_unfinished_payment_is_resumed_without_paying_again(sandbox, payer) -> None:
    env = env_of(sandbox, payer)
    # The merchant answers the paid retry (and both re-sends of the proof) with 502.
    sandbox.faults.arm("resource", Fault("status", "before", status=502, times=3))
    try:
        failed = run("fetch", sandbox.url("/weather"), env=env)
    finally:
        sandbox.faults.clear()
    assert failed.returncode == 3, failed.stderr
    lines = failed.stderr.strip().splitlines()
    assert len(lines) == 2 and "PaymentOutcomeUnknown" in lines[0]
    match = re.search(r"x402-eur resume ([0-9a-f]{32})", lines[1])
    assert match is not None, lines[1]
    journal_id = match.group(1)
    assert len(bank_payments(sandbox, payer)) == 1

    unfinished = run("payments", "--unfinished")
    # 120 columns: the table shows the id's start, which resume takes as it is shown
    shown = f"{journal_id[:12]}…"
    assert shown in unfinished.stdout and f"x402-eur resume {journal_id}" in unfinished.stderr

    resumed = run("resume", shown, env=env)  # a unique start of the id will do
    assert resumed.returncode == 0, resumed.stderr
    assert "Amsterdam" in resumed.stdout
    assert (
        resumed.stderr.strip().startswith("x402-eur: delivered:") and "0.10 EUR" in resumed.stderr
    )
    again = run("resume", journal_id, env=env)
    assert again.returncode == 0 and "delivered earlier" in again.stderr and again.stdout == ""
    assert len(bank_payments(sandbox, payer)) == 1  # paid once, delivered once
    assert run("payments", "--unfinished").stdout == ""


def test_resume_sends_the_body_the_journal_did_not_keep(sandbox, payer, own_state_file) -> None:
    env = env_of(sandbox, payer)
    form = "username=alice&password=s3cret"
    sandbox.faults.arm("resource", Fault("status", "before", status=502, times=3))
    try:
        failed = run(
            "fetch", "-d", form, "-H", "Content-Type: application/x-www-form-urlencoded",
            sandbox.url("/echo"), env=env,
        )  # fmt: skip
    finally:
        sandbox.faults.clear()
    assert failed.returncode == 3, failed.stderr
    match = re.search(r"x402-eur resume ([0-9a-f]{32})", failed.stderr)
    assert match is not None, failed.stderr
    journal_id = match.group(1)
    state = [own_state_file, own_state_file.with_name(own_state_file.name + "-wal")]
    assert all(b"s3cret" not in file.read_bytes() for file in state if file.exists())

    bare = run("resume", journal_id, env=env)
    assert bare.returncode == 1 and bare.stdout == ""
    said = " ".join(bare.stderr.split())
    assert said.startswith("x402-eur: pending: the request body held credentials"), said
    assert f"x402-eur resume {journal_id} -d BODY" in said and "try again later" not in said

    body = own_state_file.parent / "body.txt"
    body.write_text(form)
    resumed = run("resume", journal_id[:8], "--data", f"@{body}", env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout == form  # the merchant echoes the body it was sent
    assert resumed.stderr.strip().startswith("x402-eur: delivered:")
    assert len(bank_payments(sandbox, payer)) == 1
    assert run("payments", "--unfinished").stdout == ""


# --- the sandbox command ---------------------------------------------------------------------


# --- mistakes ----------------------------------------------------------------------------------

MISTAKES = [
    (("fetch", "merchant.example/paid"), 2, "not an http(s) URL"),
    (("fetch", "-H", "NoColon", "http://127.0.0.1:9/"), 2, "not a header"),
    (("fetch", "--max-amount", "abc", "http://127.0.0.1:9/"), 2, "is not a plain decimal"),
    (
        ("fetch", "--max-amount", "-1", "http://127.0.0.1:9/"),
        2,
        "argument --max-amount: amount '-1' is negative: it must be positive (or zero)\n",
    ),
    (
        ("fetch", "ftp://127.0.0.1/x"),
        2,
        "argument url: 'ftp://127.0.0.1/x': the ftp:// scheme is not supported "
        "(http:// and https:// only)\n",
    ),
    (("fetch",), 2, "required"),
    (("bogus",), 2, "invalid choice"),
    (("fetch", "http://127.0.0.1:9/"), 1, "cannot connect"),
    (("fetch", "-d", "@{tmp}/missing.json", "http://127.0.0.1:9/"), 2, "cannot read"),
    (("fetch", "--confirm", "-d", "@-", "http://127.0.0.1:9/"), 2, "--confirm"),
    (("fetch", "--budget", "five", "http://127.0.0.1:9/"), 2, "not a budget"),
    (("fetch", "--budget", "5/24x", "http://127.0.0.1:9/"), 2, "use s, m, h or d"),
    (("fetch", "--budget", "5GBP/1d", "http://127.0.0.1:9/"), 2, "EUR or USD"),
    (("fetch", "--state", "x", "--no-state", "http://127.0.0.1:9/"), 2, "not allowed with"),
    (("quote", "example.com"), 2, "not an http(s) URL"),
    (("quote", "http://127.0.0.1:9/"), 1, "cannot connect"),
    (
        ("quote", "--budget", "1", "--state", "{file}/state.sqlite3", "http://127.0.0.1:9/"),
        2,
        "cannot open the state file",
    ),
    (("payments", "--limit", "0"), 2, "not a count"),
    (("payments", "--no-state"), 2, "drop --no-state"),
    (("payments", "--state", "{garbage}"), 2, "not a database"),
    (("resume",), 2, "required"),
    (("resume", "0123456789abcdef"), 2, "no payment '0123456789abcdef'"),
]


@pytest.mark.parametrize(("args", "code", "says"), MISTAKES, ids=[" ".join(m[0]) for m in MISTAKES])
def test_everyday_mistakes_get_a_short_answer_and_no_traceback(args, code, says, tmp_path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory")
    garbage = tmp_path / "garbage.sqlite3"
    garbage.write_bytes(b"this is not a database, not even close" * 100)
    places = {"tmp": str(tmp_path), "file": str(a_file), "garbage": str(garbage)}
    env = {k: "" for k in ("X402_EUR_API_KEY", "X402_EUR_ACCOUNT", "X402_EUR_API_URL")}
    result = run(
        *(arg.format(**places) for arg in args), timeout=60, env=env, stdin=subprocess.DEVNULL
    )
    assert result.returncode == code, result.stderr
    lines = result.stderr.strip().splitlines()
    assert 1 <= len(lines) <= 2, result.stderr
    assert says in result.stderr and "Traceback" not in result.stderr


def test_an_unreachable_merchant_is_one_line_and_debug_shows_the_traceback(sandbox, payer) -> None:
    env = env_of(sandbox, payer)
    result = run("fetch", "http://127.0.0.1:9/paid", env=env, timeout=60)
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) <= 2 and "cannot connect" in result.stderr
    debug = run("--debug", "fetch", "http://127.0.0.1:9/paid", env=env, timeout=60)
    assert debug.returncode == 1 and "Traceback" in debug.stderr
    assert payer.api_key not in result.stderr + debug.stderr


@pytest.mark.anyio
async def test_a_euro_budget_refuses_a_dollar_offer_and_says_how_to_allow_it(serve) -> None:
    import anyio

    from tests.flow.test_every_currency import EVM_KEY, Merchant

    merchant = Merchant()  # one offer: 0.10 USD in USDC, which an EVM key alone can pay
    url = await serve(merchant) + "/paid"
    env = {"X402_EUR_EVM_PRIVATE_KEY": EVM_KEY}

    def fetch(*budgets: str) -> subprocess.CompletedProcess:
        flags = [arg for budget in budgets for arg in ("--budget", budget)]
        return run("fetch", *flags, url, env=env, timeout=60)

    refused = await anyio.to_thread.run_sync(fetch, "0.15/24h")
    assert refused.returncode == 3, refused.stderr
    assert refused.stderr == (
        "x402-eur: BudgetExceeded: no offer paid: 0.10 USD: no budget covers USD (once a "
        "budget is set, only currencies with a budget are paid): add one, e.g. --budget "
        "2.00USD/24h; 1 offer skipped (1 no budget in USD); --debug for each\n"
    )
    assert merchant.paid == []

    quoted = await anyio.to_thread.run_sync(
        lambda: run("quote", "--budget", "0.15/24h", url, env=env, timeout=60)
    )
    assert quoted.returncode == 0, quoted.stderr
    assert "no budget covers USD" in quoted.stdout and merchant.paid == []

    paid = await anyio.to_thread.run_sync(fetch, "0.15/24h", "2.00USD/24h")
    assert paid.returncode == 0, paid.stderr
    assert len(merchant.paid) == 1


# --- naming a payment by the start of its id ---------------------------------------------------


def journal_of(path: Path, ids: list[str], resource: str = "http://127.0.0.1:9/paid") -> list:
    """A state file holding failed payments with these ids (oldest first); their records."""
    import asyncio
    from decimal import Decimal

    from x402_client._protocol.types import PaymentIntent
    from x402_client._state.sqlite_store import SqliteStore

    async def write() -> list:
        with SqliteStore(path) as store:
            for number, id in enumerate(ids):
                intent = PaymentIntent(
                    rail="euro",
                    scheme="euro",
                    network="n",
                    asset="EURO",
                    asset_symbol="EURO",
                    amount=Decimal("0.10") * (number + 1),
                    currency="EUR",
                    pay_to="ACC_X",
                    resource=f"{resource}/{number}",
                )
                await store.open_payment(
                    intent=intent,
                    request_method="GET",
                    request_url=intent.resource,
                    request_body=None,
                    request_headers=(),
                    reservations=(),
                    id=id,
                )
                await store.finish_payment(id, "failed", delivered=False, error="declined")
            return [await store.get(id) for id in ids]

    return asyncio.run(write())


def created(record) -> str:
    return record.created_at.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def test_resume_lists_the_payments_an_ambiguous_start_of_an_id_names(own_state_file) -> None:
    first, second, _other = journal_of(
        own_state_file, ["754804" + "a" * 26, "754804" + "b" * 26, "c0ffee" + "0" * 26]
    )
    result = run("resume", "754804", timeout=60)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "x402-eur resume: '754804' matches 2 payments:",
        f"  {'ID':32}    AMOUNT  {'RESOURCE':25}  CREATED",
        f"  {second.id}  0.20 EUR  http://127.0.0.1:9/paid/1  {created(second)}",
        f"  {first.id}  0.10 EUR  http://127.0.0.1:9/paid/0  {created(first)}",
        "Give more characters of the id.",
    ]


def test_resume_wants_at_least_six_characters_of_an_id(own_state_file) -> None:
    journal_of(own_state_file, ["c0ffee" + "0" * 26])
    short = run("resume", "c0ffe", timeout=60)
    assert short.returncode == 2
    assert short.stderr.splitlines() == [
        "x402-eur resume: 'c0ffe' is too short: give at least 6 characters of the id",
        "List them with: x402-eur payments --unfinished",
    ]
    unknown = run("resume", "c0ffef", timeout=60)
    assert unknown.returncode == 2
    assert unknown.stderr.splitlines() == [
        f"x402-eur resume: no payment 'c0ffef' in {own_state_file}",
        "List them with: x402-eur payments --unfinished",
    ]


def test_resume_finds_a_payment_by_the_start_of_its_id_however_old(own_state_file) -> None:
    oldest, *_ = journal_of(own_state_file, [f"{n:032x}"[::-1] for n in range(1, 503)])
    env = {
        "X402_EUR_API_KEY": "key",
        "X402_EUR_ACCOUNT": "ACC_PAYER",
        "X402_EUR_API_URL": "http://127.0.0.1:9",
    }
    result = run("resume", oldest.id[:6], env=env, timeout=60)
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "x402-eur: failed: it failed earlier; no money moved "
        "(0.10 EUR, euro, http://127.0.0.1:9/paid/0)"
    ]
    assert result.returncode == 1


# --- global options before or after the command ------------------------------------------------


def test_debug_is_taken_after_the_command_too(own_state_file) -> None:
    listed = run("payments", "--debug", timeout=60)
    assert listed.returncode == 0
    assert listed.stderr.splitlines() == [
        f"x402-eur: no payments yet ({own_state_file} does not exist)"
    ]
    env = {k: "" for k in ("X402_EUR_API_KEY", "X402_EUR_ACCOUNT", "X402_EUR_API_URL")}
    failed = run("fetch", "--debug", "http://127.0.0.1:9/", env=env, timeout=60)
    assert failed.returncode == 1
    assert failed.stderr.startswith("Traceback (most recent call last):\n")
    assert failed.stderr.splitlines()[-1].startswith("httpx.ConnectError: ")


def test_version_is_taken_after_the_command_too() -> None:
    result = run("payments", "--version", timeout=60)
    assert (result.returncode, result.stdout, result.stderr) == (0, f"x402-eur {__version__}\n", "")


@pytest.mark.parametrize("command", ["fetch", "payments", "resume", "mcp"])
def test_an_unknown_option_of_a_command_points_at_the_command_s_help(command) -> None:
    args = {"fetch": ["http://127.0.0.1:9/"], "resume": ["c0ffee"]}.get(command, [])
    result = run(command, "--frobnicate", *args, timeout=60)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"x402-eur {command}: unknown option --frobnicate",
        f"Try 'x402-eur {command} --help'.",
    ]


@pytest.mark.anyio
async def test_a_payment_in_dollars_once_the_euro_budget_is_spent_says_so(serve) -> None:
    import anyio

    from tests.flow.test_every_currency import EVM_KEY, Merchant, eur_entry, usd_entry

    merchant = Merchant(eur_entry(), usd_entry())
    url = await serve(merchant) + "/paid"
    env = {"X402_EUR_EVM_PRIVATE_KEY": EVM_KEY}

    def fetch() -> subprocess.CompletedProcess:
        flags = ["--budget", "0.15/24h", "--budget", "2.00USD/24h"]
        return run("fetch", *flags, url, env=env, timeout=60)

    first = await anyio.to_thread.run_sync(fetch)
    assert first.returncode == 0 and "instead" not in first.stderr, first.stderr
    second = await anyio.to_thread.run_sync(fetch)
    assert second.returncode == 0, second.stderr
    assert second.stderr.splitlines()[:4] == [
        "x402-eur: paying 0.10 USD (USDC) instead: budget 0.15 EUR/24h: 0.10 EUR spent, "
        "this payment 0.10 EUR",
        "",
        "HTTP 200",
        "  rail: eip3009",
    ]
    assert len(merchant.paid) == 2
