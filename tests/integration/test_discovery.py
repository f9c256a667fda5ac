"""Discovery before payment on 127.0.0.1: the sandbox facilitator's catalogue of what its
merchant declares (x402 Bazaar), read by the x402 foundation's own extractor, by
`payments(client).discover` and by `x402-eur discover` as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from decimal import Decimal

import httpx
import pytest

from tests.sandboxes import payment_options
from x402_client import (
    Budget,
    DestinationGuard,
    DestinationRefused,
    PaymentOptions,
    payments,
    with_eur_payment,
)
from x402_eur_sandbox import Price, Sandbox

CLI = [sys.executable, "-m", "x402_client.cli"]


@pytest.fixture(scope="module")
def catalogued() -> Iterator[Sandbox]:
    """A sandbox of this module's own: its catalogue is what these tests list."""
    with Sandbox.run_in_thread() as running:
        yield running


def cli(
    sandbox: Sandbox, *args: str, columns: int = 120, **env: str
) -> subprocess.CompletedProcess[str]:
    account = sandbox.bank.open_account("10.00")
    environment = {
        **os.environ,
        **sandbox.env(),
        "X402_EUR_API_KEY": account.api_key,
        "X402_EUR_ACCOUNT": account.code,
        "COLUMNS": str(columns),
        **env,
    }
    return subprocess.run(
        [*CLI, "discover", *args], capture_output=True, text=True, timeout=120, env=environment
    )


@pytest.fixture(autouse=True)
def own_state_file(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("X402_EUR_STATE", str(tmp_path / "state" / "state.sqlite3"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))


@pytest.mark.anyio
async def test_the_catalogue_lists_what_the_foundation_extracts_from_the_402s(catalogued):
    """Each row is what the foundation's facilitator extractor makes of the merchant's 402
    (schema-validated); routes that declare nothing are not listed."""
    from x402.extensions.bazaar import extract_discovery_info

    async with httpx.AsyncClient() as http:
        listed = (await http.get(catalogued.discovery_url + "/discovery/resources")).json()
        challenges = {}
        for path in ("/weather", "/report", "/premium", "/download"):
            answer = await http.get(catalogued.url(path))
            assert answer.status_code == 402
            challenges[path] = answer.json()
        challenges["/echo"] = (await http.post(catalogued.url("/echo"))).json()
    rows = {row["resource"]: row for row in listed["items"]}
    assert listed["pagination"] == {"limit": 20, "offset": 0, "total": 4}
    assert "extensions" not in challenges["/download"]
    assert catalogued.url("/download") not in rows
    for path in ("/weather", "/report", "/premium", "/echo"):
        required = challenges[path]
        payload = {
            "x402Version": 2,
            "resource": required["resource"],
            "accepted": required["accepts"][0],
            "payload": {},
            "extensions": required["extensions"],
        }
        found = extract_discovery_info(payload, required["accepts"][0], validate=True)
        assert found is not None, path
        row = rows[found.resource_url]
        declared = row["extensions"]["bazaar"]["info"]["input"]
        assert (row["type"], declared["method"]) == ("http", found.method)
        assert row["description"] == found.description
        assert row["mimeType"] == found.mime_type
        assert row.get("serviceName") == found.service_name
        assert row.get("tags") == found.tags
        assert row["accepts"][0]["amount"] == required["accepts"][0]["amount"]


@pytest.mark.anyio
async def test_the_endpoints_filter_page_and_refuse_what_they_cannot_read(catalogued):
    base = catalogued.discovery_url + "/discovery"
    async with httpx.AsyncClient() as http:
        first = (await http.get(base + "/resources", params={"limit": 3})).json()
        rest = (await http.get(base + "/resources", params={"limit": 3, "offset": 3})).json()
        none = (await http.get(base + "/resources", params={"type": "mcp"})).json()
        other = (
            await http.get(base + "/resources", params={"payTo": "acc_sandbox_merchant"})
        ).json()
        page = (await http.get(base + "/search", params={"query": "e", "limit": 2})).json()
        cursor = page["pagination"]["cursor"]
        after = (await http.get(base + "/search", params={"query": "e", "cursor": cursor})).json()
        bad = await http.get(base + "/resources", params={"limit": "many"})
        no_query = await http.get(base + "/search")
    assert len(first["items"]) == 3 and len(rest["items"]) == 1
    assert none["items"] == [] and none["pagination"]["total"] == 0
    assert len(other["items"]) == 4  # an account matches whatever its case
    assert len(page["resources"]) == 2 and isinstance(cursor, str)
    assert len(after["resources"]) == 2 and after["pagination"]["cursor"] is None
    seen = [r["resource"] for r in page["resources"] + after["resources"]]
    assert len(set(seen)) == 4
    assert (bad.status_code, no_query.status_code) == (400, 400)
    assert bad.json()["error"] and no_query.json()["error"]


@pytest.mark.anyio
async def test_discover_quotes_each_listing_with_the_client_s_limits_and_pays_nothing(catalogued):
    account = catalogued.bank.open_account("10.00")
    options = payment_options(
        catalogued,
        api_key=account.api_key,
        from_account=account.code,
        budgets=[Budget("0.30", currency="EUR", name="day")],
    )
    async with with_eur_payment(httpx.AsyncClient(), options) as client:
        found = await payments(client).discover(catalogued.discovery_url)
        searched = await payments(client).discover(catalogued.discovery_url, "amsterdam weather")
    by_path = {r.url.removeprefix(catalogued.merchant_url): r for r in found.resources}
    assert sorted(by_path) == ["/echo", "/premium", "/report", "/weather"]
    assert [e.amount for e in by_path["/weather"].payable] == [Decimal("0.10")]
    assert [e.amount for e in by_path["/echo"].payable] == [Decimal("0.05")]
    assert by_path["/echo"].listing.method == "POST"
    assert by_path["/report"].quote.entries[0].reason == "over_budget"
    assert by_path["/premium"].quote.entries[0].reason == "over_cap"
    assert [r.url for r in searched.resources] == [catalogued.url("/weather")]
    assert catalogued.balance(account) == Decimal("10.00")


def test_a_requests_session_and_a_sync_client_discover_the_same(catalogued):
    import requests

    account = catalogued.bank.open_account("1.00")
    options = payment_options(catalogued, api_key=account.api_key, from_account=account.code)
    with with_eur_payment(requests.Session(), options) as session:
        by_session = payments(session).discover(catalogued.discovery_url, "report")
    with with_eur_payment(httpx.Client(), options) as client:
        by_client = payments(client).discover(catalogued.discovery_url, "report")
    assert [r.url for r in by_session.resources] == [catalogued.url("/report")]
    assert by_session.to_json()["resources"] == by_client.to_json()["resources"]


@pytest.mark.anyio
async def test_the_options_destination_guard_decides_where_discovery_goes(catalogued):
    host = catalogued.discovery_url.split("/")[2]
    account = catalogued.bank.open_account("1.00")

    def options(guard: DestinationGuard) -> PaymentOptions:
        return payment_options(
            catalogued, api_key=account.api_key, from_account=account.code, destination_guard=guard
        )

    with pytest.raises(DestinationRefused) as refused:
        await payments(options(DestinationGuard())).discover(catalogued.discovery_url)
    assert refused.value.money_moved is False and "loopback" in str(refused.value)
    admitted = await payments(options(DestinationGuard(allow=[host]))).discover(
        catalogued.discovery_url
    )
    assert len(admitted.resources) == 4


@pytest.mark.anyio
async def test_a_stale_listing_is_never_what_is_paid():
    """The catalogue claims 0.01 EUR; the resource asks 0.20 EUR: fetching it pays 0.20,
    the live 402's price, and the listing only ever informed."""
    async with Sandbox() as sandbox:
        sandbox.prices["/paid/stale"] = Price(Decimal("0.20"), "Repriced")
        claim = {
            "scheme": "euro",
            "network": "provider:mainnet",
            "asset": "EURO",
            "amount": "0.01",
            "payTo": sandbox.merchant.code,
            "paymentRequestCode": "pr_catalogued_long_ago",
            "expiresAt": 4102444800,
            "facilitator": sandbox.discovery_url,
        }
        sandbox.catalogue.add(
            {
                "resource": sandbox.url("/paid/stale"),
                "type": "http",
                "x402Version": 2,
                "accepts": [claim],
            }
        )
        account = sandbox.bank.open_account("1.00")
        options = payment_options(sandbox, api_key=account.api_key, from_account=account.code)
        async with with_eur_payment(httpx.AsyncClient(), options) as client:
            found = await payments(client).discover(sandbox.discovery_url, "stale")
            [listed] = found.resources
            assert [e.amount for e in listed.payable] == [Decimal("0.01")]
            response = await client.get(listed.url)
        assert response.status_code == 200
        assert sandbox.balance(account) == Decimal("0.80")


def test_cli_lists_the_catalogue_in_a_table(catalogued):
    done = cli(catalogued, catalogued.discovery_url, "--budget", "0.30", "--no-state")
    m = catalogued.merchant_url
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        f"{catalogued.discovery_url} (list): 4 resource(s), 2 payable\n"
        "#  PRICE     PAYABLE          RESOURCE                          DESCRIPTION\n"
        f"1  0.05 EUR  yes              POST {m}/echo  Echoes the request body\n"
        f"2  2.00 EUR  no: over cap     {m}/premium    Above the default per-payment cap\n"
        f"3  0.50 EUR  no: over budget  {m}/report     A market report\n"
        f"4  0.10 EUR  yes              {m}/weather    Today's weather in Amsterdam\n"
        "#2 not paid: 2.00 EUR is above --max-amount 1.00 EUR\n"
        "#3 not paid: budget 0.30 EUR in total: 0.00 EUR spent, this payment 0.50 EUR\n"
        "Listed prices are the facilitator's claims: fetch pays what the resource's own 402 asks.\n"
    )


def test_cli_fits_the_table_to_the_terminal_cutting_descriptions_first(catalogued):
    done = cli(catalogued, catalogued.discovery_url, "--limit", "2", "--no-state", columns=80)
    m = catalogued.merchant_url
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        f"{catalogued.discovery_url} (list): 2 resource(s), 1 payable\n"
        "#  PRICE     PAYABLE       RESOURCE                          DESCRIPTION\n"
        f"1  0.05 EUR  yes           POST {m}/echo  Echoes the request…\n"
        f"2  2.00 EUR  no: over cap  {m}/premium    Above the default …\n"
        "#2 not paid: 2.00 EUR is above --max-amount 1.00 EUR\n"
        "more: --offset 2\n"
        "Listed prices are the facilitator's claims: fetch pays what the resource's own\n"
        "  402 asks.\n"
    )
    assert max(len(line) for line in done.stdout.splitlines()) <= 80


def test_cli_searches_with_the_words_given(catalogued):
    done = cli(catalogued, catalogued.discovery_url, "amsterdam", "weather", "--no-state")
    m = catalogued.merchant_url
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        f"{catalogued.discovery_url} (search 'amsterdam weather'): 1 resource(s), 1 payable\n"
        "#  PRICE     PAYABLE  RESOURCE                        DESCRIPTION\n"
        f"1  0.10 EUR  yes      {m}/weather  Today's weather in Amsterdam\n"
        "Listed prices are the facilitator's claims: fetch pays what the resource's own 402 asks.\n"
    )


def test_cli_says_in_one_line_when_there_is_no_catalogue(catalogued):
    done = cli(catalogued, catalogued.merchant_url, "--no-state")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == (
        f"x402-eur: the facilitator answered HTTP 404 to {catalogued.merchant_url}"
        "/discovery/resources?limit=20&offset=0; nothing was paid\n"
    )


def test_cli_prints_json(catalogued):
    done = cli(catalogued, catalogued.discovery_url, "--json", "--limit", "2")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["facilitator"] == catalogued.discovery_url and data["query"] is None
    assert len(data["resources"]) == 2 and data["nextOffset"] == 2 and data["total"] == 4
    entry = data["resources"][0]["entries"][0]
    assert entry["currency"] == "EUR" and entry["amount"] in {"0.05", "2.00"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--cursor", "abc"), "x402-eur discover: --cursor continues a search: give its words too"),
        (
            ("weather", "--offset", "2"),
            "x402-eur discover: a search continues with --cursor, not --offset",
        ),
        (("--limit", "0"), "x402-eur discover: argument --limit: '0' is not a count from 1 to 100"),
    ],
)
def test_cli_usage_mistakes_are_said_in_two_lines(catalogued, args, message):
    done = cli(catalogued, catalogued.discovery_url, *args, "--no-state")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"{message}\nTry 'x402-eur discover --help'.\n"
