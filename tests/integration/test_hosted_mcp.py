"""The hosted tool server (`{mcp_url}/mcp`), driven by the `mcp` SDK's streamable HTTP client.

One sandbox with chain A for the module (in its own thread), fresh payer accounts per
test. Every tool result goes through `Tools.call`, which checks that no API key shows up.
The bridge settles 0.2 s after a payment.
"""

# The imports of mcp follow the check that it is installed.
# ruff: noqa: E402

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from decimal import Decimal
from typing import Any

import anyio
import httpx
import pytest

from tests.needs import require

require("mcp", "pip install 'x402-eur[mcp]'")

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult

from tests.conftest import scan_for_secrets
from tests.waiting import PATIENCE
from x402_client._protocol.amounts import from_atomic
from x402_client._protocol.models import ExactAcceptEntry
from x402_client._protocol.provider import TransactionRecord
from x402_client._rails.bridge import bridge_proof
from x402_eur_sandbox import Account, Bank, Price, Sandbox
from x402_eur_sandbox._chain_a import EURQ_ASSET_ID, ChainASandbox
from x402_eur_sandbox._hosted_mcp import ERROR_CODES, HostedToolServer, _amount

pytestmark = pytest.mark.anyio

PRICES = {
    # The euro entry comes after the chain-A one: the tool must find it anyway.
    "/weather": Price(Decimal("0.10"), "Weather", rails=("ledgera", "euro")),
    "/report": Price(Decimal("0.25"), "Chain A only", rails=("ledgera",)),
}
BRIDGE_DELAY = 0.2
TOOL_NAMES = {"pay_x402_challenge", "create_payment", "get_transactions"}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with Sandbox.run_in_thread(chain_a=True, bridge_delay=BRIDGE_DELAY, prices=PRICES) as running:
        yield running


@pytest.fixture
def chain(sandbox: Sandbox) -> ChainASandbox:
    part = sandbox.chain_a
    assert isinstance(part, ChainASandbox)
    return part


@pytest.fixture
def account(sandbox: Sandbox) -> Account:
    return sandbox.bank.open_account("10.00")


class Tools:
    """An MCP client session with the tool server, as one API key's holder."""

    def __init__(self, client: Client, bank: Bank) -> None:
        self.client = client
        self.bank = bank

    async def call(self, name: str, **arguments: Any) -> CallToolResult:
        result = await self.client.call_tool(name, arguments)
        dumped = scan_for_secrets(result.model_dump_json(by_alias=True))
        keys = [a.api_key for a in list(self.bank.accounts.values())]
        assert not [k for k in keys if k in dumped], "an API key leaked into a tool result"
        assert "sk_sandbox_" not in dumped
        return result

    async def ok(self, name: str, **arguments: Any) -> dict[str, Any]:
        result = await self.call(name, **arguments)
        assert not result.is_error, result.content
        assert isinstance(result.structured_content, dict)
        [text] = result.content
        assert json.loads(text.text) == result.structured_content  # type: ignore[union-attr]
        return result.structured_content

    async def error(self, name: str, **arguments: Any) -> dict[str, str]:
        """The `{"code", "message"}` of a tool error (text and structuredContent agree)."""
        result = await self.call(name, **arguments)
        assert result.is_error, result.structured_content
        [text] = result.content
        body = json.loads(text.text)  # type: ignore[union-attr]
        assert body == result.structured_content
        assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
        assert body["error"]["code"] in ERROR_CODES
        return body["error"]


@contextlib.asynccontextmanager
async def tools(sandbox: Sandbox, api_key: str | None, **client: Any) -> AsyncIterator[Tools]:
    headers = {} if api_key is None else {"X-API-KEY": api_key}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        transport = streamable_http_client(sandbox.tool_server_url, http_client=http)
        async with Client(transport, **client) as session:
            yield Tools(session, sandbox.bank)


async def challenge(sandbox: Sandbox, path: str) -> httpx.Response:
    async with httpx.AsyncClient() as http:
        response = await http.get(sandbox.url(path))
    assert response.status_code == 402
    return response


async def fetch(sandbox: Sandbox, path: str, proof: str) -> httpx.Response:
    async with httpx.AsyncClient() as http:
        return await http.get(sandbox.url(path), headers={"X-PAYMENT": proof})


def payments(sandbox: Sandbox, account: Account) -> list[Any]:
    return [t for t in sandbox.bank.payments_made if t.from_account == account.code]


# --- the catalogue -------------------------------------------------------------------------------


async def test_lists_the_three_tools_with_typed_schemas(sandbox, account):
    async with tools(sandbox, account.api_key) as session:
        listed = {tool.name: tool for tool in (await session.client.list_tools()).tools}
    assert set(listed) == TOOL_NAMES
    required = {name: tool.input_schema["required"] for name, tool in listed.items()}
    assert required == {
        "pay_x402_challenge": ["challenge", "paymentFrom"],
        "create_payment": ["paymentFrom", "paymentTo", "toType", "amount"],
        "get_transactions": ["txCode"],
    }
    for tool in listed.values():
        assert tool.input_schema["type"] == "object"
        assert tool.output_schema is not None and tool.output_schema["type"] == "object"
        assert tool.description
    assert listed["get_transactions"].annotations.read_only_hint is True
    assert listed["pay_x402_challenge"].annotations.read_only_hint is False


async def test_the_catalogue_needs_no_key_but_every_tool_does(sandbox, account):
    async with tools(sandbox, None) as session:
        assert {t.name for t in (await session.client.list_tools()).tools} == TOOL_NAMES
        refused = await session.error("get_transactions", txCode="QP0000000000000000")
    assert refused["code"] == "UNAUTHORIZED"


# --- pay_x402_challenge ---------------------------------------------------------------------------


async def test_pay_x402_challenge_gives_a_proof_the_merchant_accepts(sandbox, account):
    merchant_before = sandbox.balance(sandbox.merchant)
    response = await challenge(sandbox, "/weather")
    async with tools(sandbox, account.api_key) as session:
        paid = await session.ok(
            "pay_x402_challenge", challenge=response.json(), paymentFrom=account.code
        )
    assert paid["amount"] == "0.10"
    assert f"X-PAYMENT: {paid['xPaymentHeader']}" in paid["instruction"]
    assert sandbox.balance(account) == Decimal("9.90")  # moved by exactly the price

    served = await fetch(sandbox, "/weather", paid["xPaymentHeader"])
    assert served.status_code == 200
    assert served.json()["city"] == "Amsterdam"
    assert sandbox.balance(sandbox.merchant) - merchant_before == Decimal("0.10")
    [made] = payments(sandbox, account)
    assert (made.to_type, made.code, made.amount) == (
        "PaymentRequestCode",
        paid["transactionCode"],
        Decimal("0.10"),
    )
    assert made.payment_request_code == paid["paymentRequestCode"]

    again = await fetch(sandbox, "/weather", paid["xPaymentHeader"])
    assert again.status_code == 402  # single use, as the facilitator rules


async def test_the_challenge_may_be_its_json_text(sandbox, account):
    response = await challenge(sandbox, "/weather")
    async with tools(sandbox, account.api_key) as session:
        paid = await session.ok(
            "pay_x402_challenge", challenge=response.text, paymentFrom=account.code
        )
    assert (await fetch(sandbox, "/weather", paid["xPaymentHeader"])).status_code == 200


async def test_a_challenge_paid_once_is_not_payable_again(sandbox, account):
    body = (await challenge(sandbox, "/weather")).json()
    async with tools(sandbox, account.api_key) as session:
        await session.ok("pay_x402_challenge", challenge=body, paymentFrom=account.code)
        again = await session.error("pay_x402_challenge", challenge=body, paymentFrom=account.code)
    assert again["code"] == "PAYMENT_REQUEST_NOT_PAYABLE"
    assert sandbox.balance(account) == Decimal("9.90")


async def test_a_challenge_without_a_euro_entry_is_refused(sandbox, account):
    response = await challenge(sandbox, "/report")
    async with tools(sandbox, account.api_key) as session:
        refused = await session.error(
            "pay_x402_challenge", challenge=response.json(), paymentFrom=account.code
        )
    assert refused["code"] == "NO_EURO_ENTRY"
    assert "create_payment" in refused["message"]
    assert payments(sandbox, account) == []


@pytest.mark.parametrize(
    ("mangle", "code"),
    [
        (lambda body, acc: {"challenge": "not json", "paymentFrom": acc.code}, "INVALID_CHALLENGE"),
        (lambda body, acc: {"challenge": [body], "paymentFrom": acc.code}, "INVALID_CHALLENGE"),
        (
            lambda body, acc: {"challenge": {**body, "x402Version": 1}, "paymentFrom": acc.code},
            "INVALID_CHALLENGE",
        ),
        (
            lambda body, acc: {
                "challenge": {**body, "accepts": [{**body["accepts"][1], "amount": 0.1}]},
                "paymentFrom": acc.code,
            },
            "INVALID_CHALLENGE",
        ),
        (
            lambda body, acc: {
                "challenge": {**body, "accepts": [{**body["accepts"][1], "amount": "0.01"}]},
                "paymentFrom": acc.code,
            },
            "PAYMENT_REQUEST_NOT_PAYABLE",
        ),
        (
            lambda body, acc: {
                "challenge": {**body, "accepts": [{**body["accepts"][1], "payTo": acc.code}]},
                "paymentFrom": acc.code,
            },
            "PAYMENT_REQUEST_NOT_PAYABLE",
        ),
        (
            lambda body, acc: {"challenge": body, "paymentFrom": "ACC_SANDBOX_MERCHANT"},
            "FORBIDDEN_ACCOUNT",
        ),
        (lambda body, acc: {"challenge": body}, "INVALID_ARGUMENTS"),
        (
            lambda body, acc: {"challenge": body, "paymentFrom": acc.code, "extra": 1},
            "INVALID_ARGUMENTS",
        ),
    ],
    ids=[
        "not-json",
        "not-an-object",
        "version-1",
        "float-amount",
        "lower-amount",
        "other-payee",
        "someone-elses-account",
        "missing-argument",
        "unknown-argument",
    ],
)
async def test_bad_challenges_and_arguments_are_refused_without_paying(
    sandbox, account, mangle, code
):
    body = (await challenge(sandbox, "/weather")).json()
    assert body["accepts"][1]["scheme"] == "euro"
    async with tools(sandbox, account.api_key) as session:
        refused = await session.error("pay_x402_challenge", **mangle(body, account))
    assert refused["code"] == code
    assert payments(sandbox, account) == []
    assert sandbox.balance(account) == Decimal("10.00")


async def test_insufficient_funds_is_its_own_code(sandbox):
    poor = sandbox.bank.open_account("0.05")
    body = (await challenge(sandbox, "/weather")).json()
    async with tools(sandbox, poor.api_key) as session:
        refused = await session.error("pay_x402_challenge", challenge=body, paymentFrom=poor.code)
    assert refused["code"] == "INSUFFICIENT_FUNDS"
    assert sandbox.balance(poor) == Decimal("0.05")


# --- create_payment and get_transactions: the bridge ----------------------------------------------


async def poll_for_blockchain_tx_id(session: Tools, code: str) -> dict[str, Any]:
    with anyio.fail_after(PATIENCE):
        while True:
            record = await session.ok("get_transactions", txCode=code)
            if "blockchainTxId" in record:
                return record
            assert record["status"] == "Processing"
            await anyio.sleep(0.05)


async def test_bridge_payment_by_tools_gives_a_proof_the_merchant_accepts(sandbox, chain, account):
    merchant_eurq = chain.asset_balance(chain.merchant_address, EURQ_ASSET_ID)
    [raw] = (await challenge(sandbox, "/report")).json()["accepts"]
    entry = ExactAcceptEntry.model_validate(raw)
    async with tools(sandbox, account.api_key) as session:
        created = await session.ok(
            "create_payment",
            paymentFrom=account.code,
            paymentTo=entry.pay_to,
            toType="BlockchainAddress",
            amount=str(from_atomic(entry.max_amount_required)),
        )
        code = created["transactionCode"]
        assert code.startswith("QP")
        assert created["status"] == "Processing"
        record = await poll_for_blockchain_tx_id(session, code)

    assert sandbox.balance(account) == Decimal("9.75")
    parsed = TransactionRecord.model_validate(record)  # the payment API item's shape
    assert (parsed.transaction_code, parsed.status, parsed.type) == (
        code,
        "Paid",
        "BlockchainAddress",
    )
    assert (parsed.from_account_code, parsed.to_account_code) == (account.code, entry.pay_to)
    assert (record["amount"], record["tokenCode"]) == ("0.250000", "EURO")
    assert record["created"] and record["finished"]

    proof = bridge_proof(entry, code, record["blockchainTxId"])
    served = await fetch(sandbox, "/report", proof)
    assert served.status_code == 200
    assert chain.asset_balance(chain.merchant_address, EURQ_ASSET_ID) - merchant_eurq == 250_000


@pytest.mark.parametrize(
    ("amount", "moved"), [(0.1, "0.1"), (1, "1"), ("0.000001", "0.000001"), (1e-06, "0.000001")]
)
async def test_create_payment_reads_numbers_exactly(sandbox, chain, account, amount, moved):
    async with tools(sandbox, account.api_key) as session:
        created = await session.ok(
            "create_payment",
            paymentFrom=account.code,
            paymentTo=chain.merchant_address,
            toType="BlockchainAddress",
            amount=amount,
        )
    assert Decimal(created["amount"]) == Decimal(moved)
    assert sandbox.balance(account) == Decimal("10.00") - Decimal(moved)


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"amount": "0.1234567"}, "INVALID_AMOUNT"),
        ({"amount": "1e-1"}, "INVALID_AMOUNT"),
        ({"amount": "-0.10"}, "INVALID_AMOUNT"),
        ({"amount": "0"}, "INVALID_AMOUNT"),
        ({"amount": True}, "INVALID_AMOUNT"),
        ({"amount": 0.1234567}, "INVALID_AMOUNT"),
        ({"amount": "20.00"}, "INSUFFICIENT_FUNDS"),
        ({"toType": "PaymentRequestCode"}, "UNSUPPORTED_TO_TYPE"),
        ({"paymentTo": "not-an-address"}, "INVALID_ADDRESS"),
        ({"paymentFrom": "ACC_SANDBOX_MERCHANT"}, "FORBIDDEN_ACCOUNT"),
        ({"paymentTo": 42}, "INVALID_ARGUMENTS"),
    ],
)
async def test_create_payment_refusals(sandbox, chain, account, change, code):
    arguments = {
        "paymentFrom": account.code,
        "paymentTo": chain.merchant_address,
        "toType": "BlockchainAddress",
        "amount": "0.10",
        **change,
    }
    async with tools(sandbox, account.api_key) as session:
        refused = await session.error("create_payment", **arguments)
    assert refused["code"] == code
    assert payments(sandbox, account) == []
    assert sandbox.balance(account) == Decimal("10.00")


async def test_unknown_and_foreign_transactions_are_not_found(sandbox, chain, account):
    other = sandbox.bank.open_account("1.00")
    theirs = sandbox.bank.pay(
        other,
        payment_from=other.code,
        to_type="BlockchainAddress",
        payment_to=chain.merchant_address,
        amount=Decimal("0.10"),
    )
    async with tools(sandbox, account.api_key) as session:
        for code in ("QP0000000000000000", theirs.code):
            missing = await session.error("get_transactions", txCode=code)
            assert missing["code"] == "TRANSACTION_NOT_FOUND"
    async with tools(sandbox, other.api_key) as session:
        assert (await session.ok("get_transactions", txCode=theirs.code))["amount"] == "0.10"


# --- authentication and secrets -----------------------------------------------------------------


@pytest.mark.parametrize("api_key", [None, "", "sk_sandbox_not_a_key_of_this_bank"])
async def test_a_missing_or_unknown_key_is_unauthorized_for_every_tool(sandbox, account, api_key):
    body = (await challenge(sandbox, "/weather")).json()
    calls = {
        "pay_x402_challenge": {"challenge": body, "paymentFrom": account.code},
        "create_payment": {
            "paymentFrom": account.code,
            "paymentTo": "X",
            "toType": "BlockchainAddress",
            "amount": "0.10",
        },
        "get_transactions": {"txCode": "QP0000000000000000"},
        "no_such_tool": {},
    }
    async with tools(sandbox, api_key) as session:
        for name, arguments in calls.items():
            refused = await session.error(name, **arguments)
            assert refused["code"] == ("UNKNOWN_TOOL" if name == "no_such_tool" else "UNAUTHORIZED")
    assert payments(sandbox, account) == []


async def test_a_key_passed_as_an_argument_is_never_echoed(sandbox, account):
    key = account.api_key
    bridge = {"paymentFrom": account.code, "toType": "BlockchainAddress", "amount": "0.10"}
    # Each of these messages would echo the argument; `Tools.call` fails on a key in a result.
    calls = [
        ("get_transactions", {"txCode": key}),
        ("create_payment", {**bridge, "paymentTo": key}),
        ("create_payment", {**bridge, "paymentTo": "X", "toType": key}),
        ("create_payment", {**bridge, "paymentTo": "X", "amount": key}),
        ("pay_x402_challenge", {"challenge": key, "paymentFrom": key}),
        (key, {}),
    ]
    async with tools(sandbox, key) as session:
        for name, arguments in calls:
            refused = await session.error(name, **arguments)
            assert "[redacted]" in refused["message"] or key not in refused["message"]
    assert payments(sandbox, account) == []


async def test_the_legacy_handshake_era_works_too(sandbox, account):
    body = (await challenge(sandbox, "/weather")).json()
    async with tools(sandbox, account.api_key, mode="legacy") as session:
        assert session.client.protocol_version < "2026"
        paid = await session.ok("pay_x402_challenge", challenge=body, paymentFrom=account.code)
        record = await session.ok("get_transactions", txCode=paid["transactionCode"])
    assert record["status"] == "Paid"
    assert (await fetch(sandbox, "/weather", paid["xPaymentHeader"])).status_code == 200


# --- the lifecycle, and a sandbox without mcp ------------------------------------------------------


async def test_the_session_manager_runs_from_first_use_until_stop(serve, account):
    bank = Bank()
    holder = bank.open_account("1.00")
    server = HostedToolServer(bank)
    url = await serve(server) + "/"
    await server.start()
    assert server._task is None  # nothing runs until asked
    async with (
        httpx2.AsyncClient(headers={"X-API-KEY": holder.api_key}) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        assert {t.name for t in (await client.list_tools()).tools} == TOOL_NAMES
    task = server._task
    assert task is not None and not task.done()
    await server.stop()
    assert task.done() and server._task is None
    async with httpx.AsyncClient() as http:
        answer = await http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert answer.status_code == 503
    assert answer.json()["error"]["code"] == "UNAVAILABLE"


async def test_without_mcp_the_endpoint_says_so(monkeypatch, serve):
    monkeypatch.setitem(sys.modules, "mcp.server.streamable_http_manager", None)
    server = HostedToolServer(Bank())
    url = await serve(server)
    await server.start()
    async with httpx.AsyncClient() as http:
        answer = await http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert answer.status_code == 404
    error = answer.json()["error"]
    assert error["code"] == "NOT_AVAILABLE" and "`mcp` package" in error["message"]
    await server.stop()


async def test_without_mcp_the_sandbox_starts_and_names_what_is_missing(monkeypatch):
    monkeypatch.setattr("x402_eur_sandbox._sandbox.mcp_available", lambda: False)
    async with Sandbox() as bare:
        async with httpx.AsyncClient() as http:
            assert (await http.get(bare.url("/weather"))).status_code == 402
        with pytest.raises(RuntimeError, match="`mcp` package"):
            bare.tool_server_url  # noqa: B018


def test_importing_the_sandbox_does_not_import_mcp():
    code = (
        "import sys, x402_eur_sandbox; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('mcp', 'mcp_types')]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


# --- amounts, without the network ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "parsed"),
    [("0.10", "0.10"), (0.1, "0.1"), (2, "2"), (1e-06, "0.000001"), (123.456789, "123.456789")],
)
def test_amounts_are_read_exactly(raw, parsed):
    assert _amount(raw) == Decimal(parsed)


@pytest.mark.parametrize(
    "raw", ["1e-1", " 0.10", "0.1234567", -0.1, float("nan"), float("inf"), True, None, 1e16]
)
def test_amounts_that_are_not_plain_decimals_are_refused(raw):
    from x402_eur_sandbox._hosted_mcp import ToolError

    with pytest.raises(ToolError) as caught:
        _amount(raw)
    assert caught.value.code == "INVALID_AMOUNT"
