"""No secret is printed anywhere: not the API key, not the key in an RPC URL's path, not a
merchant's credentials in a resource URL's query string.

Not in a log record (the client's, or those of the libraries it calls, at DEBUG), not in
receipts', quotes' or the ledger's JSON, not in the journal, not by the CLI or the MCP
tools, and not in the locals of any frame on an error path: what an error tracker that
captures locals (Sentry's default) records. The objects the client works with keep the
real URL, which a re-sent request needs.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import socket
import subprocess
import sys
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable
from decimal import Decimal
from typing import Any

import anyio
import httpx
import pytest
from solders.keypair import Keypair

from tests.conftest import _leaks, register_secrets, scan_for_secrets, scripted_402
from tests.sandboxes import evm_options
from x402_client import (
    ChainAOptions,
    ConfigurationError,
    EvmOptions,
    NoSatisfiableOption,
    PaymentOptions,
    PaymentProgress,
    SqliteStore,
    X402Error,
    payments,
    with_eur_payment,
)
from x402_client._protocol.redact import safe_url
from x402_client._protocol.secret import SecretStr
from x402_client._state.payment_api import PaymentAPI
from x402_client._state.shared import state_of
from x402_eur_sandbox import Price, Sandbox

#: Known to the session-wide scan already.
API_KEY = "sk_live_super_secret_value"
EVM_KEY = "0x" + "3c" * 32
#: The key an RPC provider puts in the URL's path (`https://host/v3/<key>`).
RPC_KEY = "rpc0key0do0not0print0a1b2c3d4"
#: A merchant's credentials in the resource URL's query string.
QUERY = {
    "api_key": "mk_do_not_print_9f8e7d6c",
    "token": "tok_do_not_print_6c5b4a39",
    "code": "oauth_do_not_print_3f2e1d0c",
    "sig": "sig_do_not_print_0a9b8c7d",
}
CREDENTIALS = "&".join(f"{name}={value}" for name, value in QUERY.items())
REDACTED_CREDENTIALS = "&".join(f"{name}=REDACTED" for name in QUERY)
register_secrets(EVM_KEY, RPC_KEY, *QUERY.values())


def leaked_from_frames(exc: BaseException, *secrets: str) -> list[str]:
    """Which of `secrets` the traceback of `exc` shows when rendered with every frame's
    locals, chained causes and contexts included."""
    text = "".join(traceback.TracebackException.from_exception(exc, capture_locals=True).format())
    assert " = " in text  # the locals are there to be read
    return [secret for secret in secrets if secret in text]


def closed_port() -> str:
    """A loopback URL nobody listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


async def _body(receive: Any) -> bytes:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


async def _answer(send: Any, status: int, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": body})


def stub(status: int, body: bytes, *, stall: anyio.Event | None = None) -> Any:
    """An ASGI app that answers every request with `status` and `body` (after `stall` is
    set, when given: a server that stalls)."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await _body(receive)
        if stall is not None:
            await stall.wait()
        await _answer(send, status, body)

    return app


def rpc_stub(answer: dict[str, Any]) -> Any:
    """A JSON-RPC endpoint that answers every call with `answer` (`result` or `error`)."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        call = json.loads(await _body(receive))
        await _answer(
            send, 200, json.dumps({"jsonrpc": "2.0", "id": call["id"], **answer}).encode()
        )

    return app


def evm_402() -> Any:
    """A merchant asking for an EVM permit on chain 137."""
    entry = {
        "scheme": "exact",
        "network": "eip155:137",
        "asset": "0x" + "01" * 20,
        "maxAmountRequired": "100000",
        "payTo": "0x" + "ab" * 20,
        "maxTimeoutSeconds": 300,
        "resource": "/paid",
        "facilitator": closed_port(),
        "extra": {"symbol": "EURQ", "spender": "0x" + "cd" * 20},
    }
    return scripted_402(json.dumps({"x402Version": 2, "accepts": [entry]}))


# --- one policy ---------------------------------------------------------------------------


def test_every_credential_name_is_redacted_and_ordinary_parameters_are_kept() -> None:
    names = (
        "api_key", "apikey", "token", "access_token", "sig", "signature", "key", "pwd",
        "password", "code", "secret", "auth", "session", "credential", "X-Amz-Signature",
    )  # fmt: skip
    for name in names:
        assert safe_url(f"https://m.test/r?{name}=s3cr3t&city=Paris") == (
            f"https://m.test/r?{name}=REDACTED&city=Paris"
        ), name
    ordinary = "https://m.test/r?city=Paris&postcode=1011&page=2&design=flat"
    assert safe_url(ordinary) == ordinary
    assert safe_url("https://user:hunter2@m.test/r") == "https://user@m.test/r"
    # What reprs show: an event given to `on_progress` keeps the URL, prints it redacted.
    event = PaymentProgress(
        stage="paying", rail="bridge", resource=f"https://m.test/r?{CREDENTIALS}"
    )
    assert event.resource.endswith(CREDENTIALS)
    assert _leaks(repr(event)) == [] and REDACTED_CREDENTIALS in repr(event)


# --- frames on error paths ------------------------------------------------------------------


@pytest.mark.anyio
async def test_no_frame_on_a_payment_api_error_path_holds_the_api_key(serve) -> None:
    stall = anyio.Event()
    apis = {
        "connection refused": closed_port(),
        "500": await serve(stub(500, b'{"errors": [{"code": "E1", "message": "down"}]}')),
        "4xx": await serve(stub(400, b'{"errors": [{"code": "E2", "message": "no"}]}')),
        "timeout": await serve(stub(200, b"{}", stall=stall)),
        "malformed body": await serve(stub(200, b"{not json")),
    }
    calls: dict[str, Callable[[PaymentAPI], Awaitable[Any]]] = {
        "pay a payment request": lambda api: api.pay_payment_request(
            from_account="ACC_1", payment_request_code="pr_1", amount=Decimal("0.10")
        ),
        "pay through the bridge": lambda api: api.pay_blockchain_address(
            from_account="ACC_1", address="0x" + "ab" * 20, amount=Decimal("0.10")
        ),
        "look a transaction up": lambda api: api.get_transaction("T1"),
        "read the balance": lambda api: api.balance("ACC_1"),
    }
    failed: list[str] = []
    try:
        for case, url in apis.items():
            # Only the stalled API is meant to time out: every other one gets all the time a
            # busy machine needs, so that its own error path is the one taken.
            timeout = 0.5 if case == "timeout" else 30.0
            for name, call in calls.items():
                api = PaymentAPI(
                    url,
                    SecretStr(API_KEY),
                    timeout=timeout,
                    max_body_bytes=64 * 1024,
                    max_connections=1,
                )
                try:
                    await call(api)
                except Exception as exc:
                    assert leaked_from_frames(exc, API_KEY) == [], f"{name}, {case}"
                    failed.append(f"{name}, {case}")
                finally:
                    await api.aclose()
    finally:
        stall.set()
    # Every call fails on every path but one that a malformed body does not fail: a
    # payment without a transaction code (a look-up cannot read it: an error, too).
    assert len(failed) == len(apis) * len(calls) - 1, failed


@pytest.mark.anyio
async def test_no_frame_on_an_rpc_error_path_holds_the_rpc_key(serve, monkeypatch) -> None:
    from x402_client._rails import evm

    monkeypatch.setattr(evm, "_RPC_TIMEOUT", 0.5)
    stall = anyio.Event()
    rpcs = {
        "connection refused": closed_port(),
        "500": await serve(stub(500, b"down")),
        "malformed body": await serve(stub(200, b"{not json")),
        "wrong chain": await serve(rpc_stub({"result": "0x1"})),
        "JSON-RPC error": await serve(rpc_stub({"error": {"code": -32000, "message": "no"}})),
        "timeout": await serve(stub(200, b"{}", stall=stall)),
    }
    merchant = await serve(evm_402())
    failed: list[str] = []
    try:
        for case, rpc in rpcs.items():
            keyed = EvmOptions(private_key=EVM_KEY, rpc_urls={137: f"{rpc}/v3/{RPC_KEY}"})
            async with with_eur_payment(httpx.AsyncClient(), PaymentOptions(evm=keyed)) as client:
                try:
                    await client.get(merchant + "/paid")
                except Exception as exc:
                    assert leaked_from_frames(exc, RPC_KEY, EVM_KEY) == [], case
                    failed.append(case)
    finally:
        stall.set()
    assert failed == list(rpcs)


def permit2_402() -> Any:
    """A merchant asking for a Permit2 transfer of USDC on Base."""
    entry = {
        "scheme": "exact",
        "network": "eip155:8453",
        "asset": "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
        "amount": "10000",
        "payTo": "0x" + "ab" * 20,
        "maxTimeoutSeconds": 300,
        "extra": {"name": "USD Coin", "version": "2", "assetTransferMethod": "permit2"},
    }
    resource = {"url": "http://127.0.0.1/paid"}
    required = {"x402Version": 2, "resource": resource, "accepts": [entry]}
    header = base64.b64encode(json.dumps(required).encode()).decode()
    return scripted_402("{}", headers={"PAYMENT-REQUIRED": header})


@pytest.mark.anyio
async def test_no_frame_on_a_permit2_rpc_error_path_holds_the_rpc_key(serve) -> None:
    merchant = await serve(permit2_402())
    rpcs = {
        "wrong chain": (await serve(rpc_stub({"result": "0x1"})), ConfigurationError),
        "connection refused": (closed_port(), NoSatisfiableOption),
        "500": (await serve(stub(500, b"down")), NoSatisfiableOption),
        "malformed body": (await serve(stub(200, b"{not json")), NoSatisfiableOption),
    }
    for case, (rpc, expected) in rpcs.items():
        keyed = EvmOptions(private_key=EVM_KEY, rpc_urls={8453: f"{rpc}/v3/{RPC_KEY}"})
        async with with_eur_payment(httpx.AsyncClient(), PaymentOptions(evm=keyed)) as client:
            with pytest.raises(expected) as caught:
                await client.get(merchant + "/paid")
        assert "Permit2" in str(caught.value) or "chain id 1" in str(caught.value), case
        assert leaked_from_frames(caught.value, RPC_KEY, EVM_KEY) == [], case
        assert RPC_KEY not in str(caught.value), case


def rpc_by_method(answers: dict[str, Any]) -> Any:
    """A JSON-RPC endpoint answering each method from `answers` (`result` values), and
    any other method with a JSON-RPC error."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        call = json.loads(await _body(receive))
        if call["method"] in answers:
            answer: dict[str, Any] = {"result": answers[call["method"]]}
        else:
            answer = {"error": {"code": -32000, "message": "refused"}}
        body = json.dumps({"jsonrpc": "2.0", "id": call["id"], **answer}).encode()
        await _answer(send, 200, body)

    return app


@pytest.mark.anyio
async def test_no_frame_of_a_failed_permit2_approval_holds_the_rpc_key(serve) -> None:
    usdc = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"
    not_approved = {"eth_chainId": hex(8453), "eth_call": "0x" + "00" * 32}
    rpcs = {
        "wrong chain": (await serve(rpc_stub({"result": "0x1"})), ConfigurationError),
        "the chain refuses the transaction": (await serve(rpc_by_method(not_approved)), X402Error),
    }
    for case, (rpc, expected) in rpcs.items():
        keyed = EvmOptions(private_key=EVM_KEY, rpc_urls={8453: f"{rpc}/v3/{RPC_KEY}"})
        with pytest.raises(expected) as caught:
            await payments(PaymentOptions(evm=keyed)).approve_permit2(8453, usdc)
        assert "chain id 1" in str(caught.value) or "was not sent" in str(caught.value), case
        assert leaked_from_frames(caught.value, RPC_KEY, EVM_KEY) == [], case
        assert RPC_KEY not in str(caught.value), case


CHAIN_A_KEY = base64.b64encode(bytes(range(64))).decode()


@pytest.mark.anyio
async def test_no_frame_of_a_chain_a_node_error_holds_the_node_url(serve) -> None:
    from x402_client._rails.chain_a import NodeUnavailable, _Node

    nodes = {
        "connection refused": closed_port(),
        "500": await serve(stub(500, b"down")),
        "malformed body": await serve(stub(200, b"{not json")),
    }
    for case, node_url in nodes.items():
        options = ChainAOptions(private_key=CHAIN_A_KEY, algod_url=f"{node_url}/v2key/{RPC_KEY}")
        node = _Node(options)
        try:
            with pytest.raises(NodeUnavailable) as caught:
                await node.get("/v2/status")
        finally:
            await node.aclose()
        assert leaked_from_frames(caught.value, RPC_KEY, CHAIN_A_KEY) == [], case
        assert RPC_KEY not in str(caught.value), case


#: A Solana wallet's secret key in both forms users hold it: base58 of its 64 bytes, and the
#: JSON byte array of an `id.json` file.
#: Module constants, so that no frame of the test holds them as a local.
SVM_KEYS = {
    "base58": str(Keypair.from_seed(bytes([7]) * 32)),
    "id.json": json.dumps(list(bytes(Keypair.from_seed(bytes([7]) * 32)))),
}
register_secrets(*SVM_KEYS.values())


def svm_402(fee_payer: str, mint: str) -> Any:
    """A merchant asking for a Solana `exact` payment in a declared mint."""
    entry = {
        "scheme": "exact",
        "network": "solana-devnet",
        "asset": mint,
        "maxAmountRequired": "50000",
        "payTo": fee_payer,
        "maxTimeoutSeconds": 60,
        "resource": "/paid",
        "extra": {"feePayer": fee_payer},
    }
    return scripted_402(json.dumps({"x402Version": 1, "accepts": [entry]}))


@pytest.mark.anyio
@pytest.mark.parametrize("form", ["base58", "id.json"])
async def test_no_frame_of_a_solana_rpc_error_holds_the_rpc_key_or_the_wallets_key(
    serve, form
) -> None:
    from x402_client import Asset, SvmOptions

    other = str(Keypair.from_seed(bytes([8]) * 32).pubkey())
    mint = str(Keypair.from_seed(bytes([9]) * 32).pubkey())
    rpcs = {
        "connection refused": closed_port(),
        "500": await serve(stub(500, b"down")),
        "malformed body": await serve(stub(200, b"{not json")),
        "JSON-RPC error": await serve(rpc_stub({"error": {"code": -32000, "message": "no"}})),
        "wrong network": await serve(rpc_stub({"result": "5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp"})),
    }
    merchant = await serve(svm_402(other, mint))
    failed: list[str] = []
    for case, rpc in rpcs.items():
        wallet = SvmOptions(secret_key=SVM_KEYS[form], rpc_url=f"{rpc}/v1/{RPC_KEY}")
        asset = Asset(chain_id="solana-devnet", address=mint, symbol="sEURC", currency="EUR")
        options = PaymentOptions(svm=wallet, assets=[asset])
        for shown in (repr(options), str(options), repr(wallet)):
            assert _leaks(scan_for_secrets(shown)) == [], case
        async with with_eur_payment(httpx.AsyncClient(), options) as client:
            try:
                await client.get(merchant + "/paid")
            except Exception as exc:
                # Not inside the assert: pytest would keep its arguments as frame locals.
                leaked = leaked_from_frames(exc, RPC_KEY, *SVM_KEYS.values())
                assert leaked == [], case
                assert RPC_KEY not in str(exc), case
                failed.append(case)
    assert failed == list(rpcs)


@pytest.mark.anyio
async def test_no_frame_on_an_mcp_tool_error_path_nor_its_result_holds_a_secret(
    sandbox, payer, serve
) -> None:
    from x402_client.mcp import PaymentTools

    wrong_chain = await serve(rpc_stub({"result": "0x1"}))
    options = PaymentOptions(
        api_key=API_KEY,
        from_account=payer.code,
        api_url=await serve(stub(500, b'{"errors": []}')),
        evm=EvmOptions(private_key=EVM_KEY, rpc_urls={137: f"{wrong_chain}/v3/{RPC_KEY}"}),
    )
    urls = {
        "euro, the payment API fails": sandbox.url("/weather") + "?" + CREDENTIALS,
        "EVM, the RPC is on another chain": await serve(evm_402()) + "/paid?" + CREDENTIALS,
    }
    client = httpx.AsyncClient(follow_redirects=True)
    async with with_eur_payment(client, options) as client:
        tools = PaymentTools(client, options)
        for case, url in urls.items():
            with pytest.raises(Exception) as caught:
                await tools.fetch(url)
            assert leaked_from_frames(caught.value, API_KEY, RPC_KEY, EVM_KEY) == [], case
            body, is_error = await tools.call("fetch", {"url": url})
            assert is_error, body
            assert _leaks(scan_for_secrets(json.dumps(body))) == [], case
        listed, _ = await tools.call("payments", {})
        assert listed["payments"], listed
        assert _leaks(scan_for_secrets(json.dumps(listed))) == []


# --- what the client prints -----------------------------------------------------------------


@pytest.mark.anyio
async def test_receipts_ledger_journal_quotes_and_mcp_results_show_no_query_credential(
    sandbox, payer, options_for, tmp_path
) -> None:
    from x402_client.mcp import PaymentTools

    url = sandbox.url("/weather") + "?city=Paris&" + CREDENTIALS
    shown = sandbox.url("/weather") + "?city=Paris&" + REDACTED_CREDENTIALS
    options = options_for(payer, state_path=tmp_path / "state.sqlite3")
    async with with_eur_payment(httpx.AsyncClient(follow_redirects=True), options) as client:
        response = await client.get(url)
        quote = await payments(client).quote(url)
        tools = PaymentTools(client, options)
        results = [
            (await tools.call("fetch", {"url": url}))[0],
            (await tools.call("quote", {"url": url}))[0],
            (await tools.call("payments", {}))[0],
        ]
    assert response.status_code == 200
    receipt = response.extensions["x402_payment"]
    assert receipt.resource == url  # what the client works with: the URL it requested
    assert receipt.to_json()["resource"] == shown
    assert results[0]["url"] == shown and results[0]["receipt"]["resource"] == shown
    ledger = payments(options).ledger
    assert ledger.entries()[0].intent.resource == url
    with SqliteStore(options.state_path) as store:
        journal = await store.payments()
    assert len(journal) == 2 and {record.resource for record in journal} == {shown}
    printed = {
        "receipt JSON": json.dumps(receipt.to_json()),
        "receipt repr": repr(receipt),
        "ledger entry repr": repr(ledger.entries()[0]),
        "ledger export": ledger.to_jsonl(),
        "quote JSON": json.dumps(quote.to_json()),
        "journal": json.dumps([record.to_json() for record in journal], default=str),
        "MCP results": json.dumps(results),
    }
    for where, text in printed.items():
        assert _leaks(scan_for_secrets(text)) == [], where


def test_the_cli_prints_no_query_credential(sandbox, payer, tmp_path) -> None:
    env = {
        **os.environ,
        "X402_EUR_API_KEY": payer.api_key,
        "X402_EUR_ACCOUNT": payer.code,
        "X402_EUR_API_URL": sandbox.payment_api_url,
        "X402_EUR_STATE": str(tmp_path / "state.sqlite3"),
        "COLUMNS": "200",
    }
    url = sandbox.url("/weather") + "?" + CREDENTIALS
    shown = sandbox.url("/weather") + "?" + REDACTED_CREDENTIALS

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [sys.executable, "-m", "x402_client.cli", *args],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        assert result.returncode == 0, result.stderr
        scan_for_secrets(result.stdout + result.stderr)
        return result

    fetched = run("fetch", "--json", "-o", str(tmp_path / "body.json"), url)
    report = json.loads(fetched.stdout)
    assert report["url"] == shown and report["receipt"]["resource"] == shown
    outputs = [fetched, run("quote", "--json", url), run("quote", url), run("payments", "--json")]
    for result in outputs:
        assert _leaks(result.stdout + result.stderr) == [], result.args


# --- log records, the libraries' included -----------------------------------------------------


@pytest.fixture(scope="module")
async def evm_sandbox() -> AsyncIterator[Sandbox]:
    prices = {"/weather": Price(Decimal("0.10"), "weather on polygon", rails=("eip155:137",))}
    async with Sandbox(evm=True, prices=prices) as started:
        yield started


def rpc_proxy(target: str) -> Any:
    """An RPC endpoint with its key in the path, as hosted providers have: `/v3/<key>`,
    forwarded to `target`."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = await _body(receive)
        if scope["path"] != f"/v3/{RPC_KEY}":
            await _answer(send, 404, b"{}")
            return
        async with httpx.AsyncClient() as client:
            answer = await client.post(
                target, content=body, headers={"content-type": "application/json"}
            )
        await _answer(send, answer.status_code, answer.content)

    return app


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def text(self) -> str:
        return "\n".join(self.format(record) for record in self.records)


@pytest.mark.anyio
async def test_paying_with_a_keyed_rpc_url_logs_no_secret_even_at_debug(
    evm_sandbox: Sandbox, serve
) -> None:
    rpc = await serve(rpc_proxy(evm_sandbox.evm.rpc_url(137))) + f"/v3/{RPC_KEY}"
    options = PaymentOptions(evm=evm_options(evm_sandbox.evm, rpc_urls={137: rpc}))
    url = evm_sandbox.url("/weather") + "?" + CREDENTIALS
    capture = _Records()
    root = logging.getLogger()
    level = root.level
    root.addHandler(capture)
    root.setLevel(logging.DEBUG)
    try:
        async with with_eur_payment(httpx.AsyncClient(), options) as client:
            response = await client.get(url)
            exported = payments(client).ledger.to_jsonl()
    finally:
        root.removeHandler(capture)
        root.setLevel(level)
    assert response.status_code == 200
    receipt = response.extensions["x402_payment"]
    assert (receipt.rail, receipt.resource) == ("evm-permit", url)
    # The libraries did log what they talk to: web3 its endpoint, httpx each request.
    names = {record.name for record in capture.records}
    assert {"web3.providers.AsyncHTTPProvider", "httpx", "x402_client"} <= names, names
    logged = capture.text()
    assert "Successfully disconnected from: http://127.0.0.1:" in logged
    assert f"for {evm_sandbox.url('/weather')}?{REDACTED_CREDENTIALS}" in logged
    assert _leaks(logged) == []
    assert _leaks(json.dumps(receipt.to_json()) + repr(receipt) + exported) == []


# --- a PostgreSQL state's password ------------------------------------------------------------

WRONG_PASSWORD = "pg-wrong-password-never-shown"
register_secrets(WRONG_PASSWORD)


def _failure(call: Callable[..., Any], *args: Any) -> BaseException:
    """What `call(*args)` raised (caught here: this frame holds only what it was given)."""
    try:
        call(*args)
    except BaseException as exc:
        return exc
    raise AssertionError("no error")


async def _async_failure(call: Callable[..., Awaitable[Any]], *args: Any) -> BaseException:
    try:
        await call(*args)
    except BaseException as exc:
        return exc
    raise AssertionError("no error")


def _with_password(dsn: str, password: str) -> str:
    user, rest = dsn.removeprefix("postgresql://").split("@", 1)
    return f"postgresql://{user.split(':', 1)[0]}:{password}@{rest}"


@pytest.mark.anyio
async def test_a_postgres_state_shows_its_password_nowhere(postgres_cluster, tmp_path) -> None:
    from x402_client.postgres import PostgresDsn, PostgresStore, StateUnavailable

    dsn = postgres_cluster.database()
    password = postgres_cluster.password
    options = PaymentOptions(state_path=dsn)
    assert isinstance(options.state_path, PostgresDsn)
    shown = [repr(options), str(options), repr(options.state_path), str(options.state_path)]
    store = PostgresStore(dsn)
    try:
        shown.append(repr(store))
        journal = state_of(options).journal
        assert journal is not None
        shown.append(repr(journal))
    finally:
        store.close()
        state_of(options).close()
    for text in shown:
        assert password not in text and "***" in text, text

    # A wrong password: the error names the state without it, and no frame holds it (the
    # error is caught in frames that hold the DSN as a `PostgresDsn` only).
    wrong = PostgresDsn(_with_password(dsn, WRONG_PASSWORD))
    failure = _failure(PostgresStore, wrong)
    assert isinstance(failure, StateUnavailable)
    message = str(failure)
    assert "password authentication failed" in message and WRONG_PASSWORD not in message
    assert leaked_from_frames(failure, WRONG_PASSWORD, password) == []

    async def pay_with(state: PostgresDsn) -> None:
        async with with_eur_payment(httpx.AsyncClient(), PaymentOptions(state_path=state)) as c:
            await c.get("http://127.0.0.1:9/")

    through_options = await _async_failure(pay_with, wrong)
    assert isinstance(through_options, ConfigurationError)
    assert leaked_from_frames(through_options, WRONG_PASSWORD, password) == []
    wrong_text = wrong.reveal()

    # The command line and the MCP server say what is wrong, without it.
    env = {**os.environ, "X402_EUR_STATE": wrong_text}
    for command in (["payments"], ["resume", "abcdef"], ["state", "migrate"]):
        done = await anyio.run_process(
            [sys.executable, "-m", "x402_client.cli", *command], env=env, check=False
        )
        output = scan_for_secrets((done.stdout + done.stderr).decode())
        assert done.returncode in (1, 2), output
        assert "password authentication failed" in output, output
        assert WRONG_PASSWORD not in output and password not in output, output
