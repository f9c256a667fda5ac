"""Paying Solana entries for real: the sandbox's standard merchant sells routes on a Solana
VM (LiteSVM behind JSON-RPC on 127.0.0.1), verified and settled by its `exact` SVM
facilitator by the spec's strictest reading. The client pays them through httpx (async and
sync) and `requests`, exactly once, in an SPL Token mint and a Token-2022 mint; balances are
read on the VM.

And every refusal that needs the chain (no token account, too little balance, a fee payer
among the transfer's accounts, a blockhash that cannot live long enough, the wrong network
or decimals, an RPC that does not answer): typed, `money_moved=False`, nothing signed, no
payment sent, no balance changed."""

from __future__ import annotations

import base64
import importlib.util
import json
import sys
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import requests
from solders.keypair import Keypair

from tests.conftest import register_secrets, scripted_402
from x402_client import (
    Asset,
    NoSatisfiableOption,
    PaymentOptions,
    PaymentReceipt,
    SvmOptions,
    X402Error,
    with_eur_payment,
)
from x402_client._protocol.solana_chain import SOLANA_MAINNET
from x402_client._rails.solana import associated_token_address
from x402_eur_sandbox import Sandbox
from x402_eur_sandbox._faults import Fault
from x402_eur_sandbox._standard_svm import SolanaRoutes

pytestmark = pytest.mark.anyio

PRICE = 50_000  # 0.05 in atomic units of either mint
#: What the facilitator pays per payment: two signatures and the priority fee.
FEE = 2 * 5000 + 1
ROOT = Path(__file__).resolve().parents[2]


def _reference_payer() -> Any:
    """The sandbox's own payer, written from the spec without the client's code."""
    spec = importlib.util.spec_from_file_location(
        "svm_payer", ROOT / "sandbox" / "tests" / "svm_payer.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("svm_payer", module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def solana_sandbox() -> Iterator[Sandbox]:
    with Sandbox.run_in_thread(svm=True) as running:
        register_secrets(running.standard.solana.payer_secret_key)
        yield running


def _routes(sandbox: Sandbox) -> SolanaRoutes:
    assert sandbox.standard is not None and sandbox.standard.solana is not None
    return sandbox.standard.solana


def _options(sandbox: Sandbox, secret_key: str | None = None, **more: Any) -> PaymentOptions:
    routes = _routes(sandbox)
    svm = routes.svm_config()
    if secret_key is not None:
        svm["secret_key"] = secret_key
    assets = [Asset(**config) for config in routes.asset_configs()]
    return PaymentOptions(svm=svm, assets=more.pop("assets", assets), **more)


def _settlements(sandbox: Sandbox) -> int:
    facilitator = _routes(sandbox).facilitator
    assert facilitator is not None
    return len(facilitator.settlements)


class _Balances:
    """Every balance a payment may change: the payer's and merchant's of both mints, and
    the facilitator's lamports."""

    def __init__(self, sandbox: Sandbox, payer: str) -> None:
        self.routes, self.payer = _routes(sandbox), payer
        self.before = self.read()

    def read(self) -> dict[str, int]:
        routes = self.routes
        assert routes.facilitator is not None and routes.node is not None
        found = {"fee payer": routes.node.balance(routes.facilitator.fee_payer)}
        for symbol in routes.mints:
            found[f"payer {symbol}"] = routes.token_balance(self.payer, symbol)
            found[f"merchant {symbol}"] = routes.token_balance(routes.pay_to, symbol)
        return found

    def moved(self) -> dict[str, int]:
        after = self.read()
        return {k: after[k] - v for k, v in self.before.items() if after[k] != v}


def _fetch(kind: str, url: str, options: PaymentOptions) -> tuple[int, str, Any]:
    """One paid GET through `kind`: (status, body, receipt). Blocking: run in a thread."""
    if kind == "httpx-sync":
        with with_eur_payment(httpx.Client(timeout=60), options) as client:
            response = client.get(url)
            return response.status_code, response.text, PaymentReceipt.of(response)
    if kind == "requests":
        with with_eur_payment(requests.Session(), options) as session:
            answer = session.get(url, timeout=60)
            return answer.status_code, answer.text, PaymentReceipt.of(answer)

    async def fetch() -> tuple[int, str, Any]:
        async with with_eur_payment(httpx.AsyncClient(timeout=60), options) as client:
            response = await client.get(url)
            return response.status_code, response.text, PaymentReceipt.of(response)

    return anyio.run(fetch)


@pytest.mark.parametrize("kind", ["httpx-async", "httpx-sync", "requests"])
@pytest.mark.parametrize(("path", "symbol"), [("/solana/eurc", "sEURC"), ("/solana/usdc", "sUSDC")])
async def test_a_paid_get_pays_exactly_once(solana_sandbox, kind, path, symbol) -> None:
    routes = _routes(solana_sandbox)
    balances = _Balances(solana_sandbox, routes.payer_address)
    settled = _settlements(solana_sandbox)
    status, body, receipt = await anyio.to_thread.run_sync(
        _fetch, kind, solana_sandbox.standard.url + path, _options(solana_sandbox)
    )
    assert status == 200, body
    assert json.loads(body)["paid"] is True
    assert _settlements(solana_sandbox) == settled + 1
    assert balances.moved() == {
        f"payer {symbol}": -PRICE,
        f"merchant {symbol}": PRICE,
        "fee payer": -FEE,
    }
    assert receipt is not None
    assert (receipt.rail, receipt.amount, receipt.asset_symbol) == ("svm", Decimal("0.05"), symbol)
    assert receipt.currency == ("EUR" if symbol == "sEURC" else "USD")


async def test_the_sellers_memo_is_on_chain_and_the_proof_is_the_reference_payers(
    solana_sandbox,
) -> None:
    """An invoice (the seller's `extra.memo`) is paid with exactly that memo; with the
    merchant's blockhash hint, the transaction is byte for byte the one the sandbox's
    reference payer builds from the spec."""
    routes = _routes(solana_sandbox)
    sent: list[httpx.Request] = []

    class Recording(httpx.AsyncHTTPTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            sent.append(request)
            return await super().handle_async_request(request)

    options = _options(solana_sandbox)
    client = httpx.AsyncClient(transport=Recording(), timeout=60)
    async with with_eur_payment(client, options) as paying:
        response = await paying.get(solana_sandbox.standard.url + "/solana/invoice")
    assert response.status_code == 200, response.text
    (paid,) = [r for r in sent if "payment-signature" in r.headers]
    payment = json.loads(base64.b64decode(paid.headers["payment-signature"]))
    ours = payment["payload"]["transaction"]
    reference = await _reference_payer().pay(
        payment["accepted"],
        Keypair.from_base58_string(routes.payer_secret_key),
        routes.rpc_url,
    )
    assert ours == reference["payload"]["transaction"]
    assert routes.node is not None
    landed = [t for t in routes.node.transactions if t.memo and "invoice" in t.memo]
    assert landed and landed[-1].memo.endswith(routes.memos["/solana/invoice"])


def _fresh_payer(sandbox: Sandbox, funding: str | None) -> Keypair:
    """A wallet of its own: with a token account holding `funding` sEURC, or none."""
    keypair = Keypair()
    if funding is not None:
        _routes(sandbox).fund(str(keypair.pubkey()), "sEURC", funding)
    register_secrets(str(keypair))
    return keypair


async def _refused(sandbox: Sandbox, url: str, options: PaymentOptions) -> X402Error:
    """The GET is refused before anything is signed: nothing sent, nothing moved."""
    routes = _routes(sandbox)
    balances = _Balances(sandbox, routes.payer_address)
    settled = _settlements(sandbox)
    sent: list[httpx.Request] = []

    class Recording(httpx.AsyncHTTPTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            sent.append(request)
            return await super().handle_async_request(request)

    client = httpx.AsyncClient(transport=Recording(), timeout=60)
    async with with_eur_payment(client, options) as paying:
        with pytest.raises(X402Error) as caught:
            await paying.get(url)
    assert caught.value.money_moved is False
    assert not [r for r in sent if "payment-signature" in r.headers]
    assert _settlements(sandbox) == settled
    assert balances.moved() == {}
    return caught.value


async def test_a_wallet_without_a_token_account_is_refused(solana_sandbox) -> None:
    payer = _fresh_payer(solana_sandbox, None)
    error = await _refused(
        solana_sandbox,
        solana_sandbox.standard.url + "/solana/eurc",
        _options(solana_sandbox, str(payer)),
    )
    assert isinstance(error, NoSatisfiableOption)
    assert "the wallet has no sEURC token account" in str(error)
    assert "nothing was signed" in str(error)


async def test_a_balance_that_does_not_cover_the_price_is_refused(solana_sandbox) -> None:
    payer = _fresh_payer(solana_sandbox, "0.049999")
    error = await _refused(
        solana_sandbox,
        solana_sandbox.standard.url + "/solana/eurc",
        _options(solana_sandbox, str(payer)),
    )
    assert "sEURC balance 0.049999" in str(error) and "does not cover 0.05" in str(error)


def _entry_402(entry: dict[str, Any]) -> Any:
    required = {
        "x402Version": 2,
        "error": "payment required",
        "resource": {"url": "http://127.0.0.1/paid", "description": "", "mimeType": ""},
        "accepts": [entry],
    }
    header = base64.b64encode(json.dumps(required).encode()).decode()
    return scripted_402("{}", headers={"PAYMENT-REQUIRED": header})


async def test_a_fee_payer_among_the_transfers_accounts_is_refused(solana_sandbox, serve) -> None:
    routes = _routes(solana_sandbox)
    (entry,) = routes.accepts("/solana/eurc")
    merchant_account = associated_token_address(
        routes.pay_to, routes.mint("sEURC"), "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA"
    )
    entry["extra"]["feePayer"] = merchant_account
    url = await serve(_entry_402(entry))
    error = await _refused(solana_sandbox, url + "/paid", _options(solana_sandbox))
    assert "its fee payer appears in the transfer's accounts" in str(error)


async def test_a_blockhash_that_cannot_live_long_enough_is_refused(solana_sandbox, serve) -> None:
    routes = _routes(solana_sandbox)
    (entry,) = routes.accepts("/solana/eurc")
    for hint in ("recentBlockhash", "lastValidBlockHeight"):
        entry["extra"].pop(hint)
    assert routes.node is not None
    blockhash, _ = routes.node.latest_blockhash()
    # The RPC's latest blockhash has 5 blocks left: not the 75 a 60-second entry needs.
    stale = {
        "jsonrpc": "2.0",
        "id": 0,
        "result": {
            "context": {"slot": routes.node.slot},
            "value": {"blockhash": blockhash, "lastValidBlockHeight": routes.node.block_height + 5},
        },
    }
    url = await serve(_entry_402(entry))
    solana_sandbox.faults.arm(
        "solana:getLatestBlockhash",
        Fault(kind="answer", status=200, body=json.dumps(stale).encode()),
    )
    error = await _refused(solana_sandbox, url + "/paid", _options(solana_sandbox))
    assert "fewer than the 75 the entry's maxTimeoutSeconds (60) needs" in str(error)


async def test_an_rpc_of_another_network_is_refused(solana_sandbox, serve) -> None:
    routes = _routes(solana_sandbox)
    (entry,) = routes.accepts("/solana/eurc")
    entry["network"] = SOLANA_MAINNET
    mint = routes.mint("sEURC")
    assets = [Asset(chain_id="solana", address=mint, symbol="sEURC", currency="EUR")]
    url = await serve(_entry_402(entry))
    error = await _refused(solana_sandbox, url + "/paid", _options(solana_sandbox, assets=assets))
    assert f"the Solana RPC serves {routes.network}, not {SOLANA_MAINNET}" in str(error)


async def test_a_mint_declared_with_other_decimals_is_refused(solana_sandbox) -> None:
    routes = _routes(solana_sandbox)
    declared = [
        Asset(chain_id=routes.network, address=routes.mint("sEURC"), symbol="sEURC",
              currency="EUR", decimals=8)
    ]  # fmt: skip
    error = await _refused(
        solana_sandbox,
        solana_sandbox.standard.url + "/solana/eurc",
        _options(solana_sandbox, assets=declared),
    )
    assert "has 6 decimals" in str(error)


async def test_an_rpc_that_does_not_answer_is_refused(solana_sandbox, serve) -> None:
    routes = _routes(solana_sandbox)
    down = await serve(scripted_402(b"down", status=503))
    options = _options(solana_sandbox).model_copy(
        update={"svm": SvmOptions(secret_key=routes.payer_secret_key, rpc_url=down)}
    )
    error = await _refused(solana_sandbox, solana_sandbox.standard.url + "/solana/eurc", options)
    assert "answered getGenesisHash with 503" in str(error)


@pytest.mark.parametrize(
    ("tool", "symbol"), [("solana_weather", "sEURC"), ("solana_weather_usdc", "sUSDC")]
)
async def test_a_paid_mcp_tool_call_pays_exactly_once(solana_sandbox, tool, symbol) -> None:
    """The sandbox's paid tool server sells tools on Solana (their entries are
    `/solana/eurc`'s and `/solana/usdc`'s): an MCP session pays one once, the tool's result
    carries the receipt."""
    from mcp import Client

    from x402_client import PaidToolResult

    routes = _routes(solana_sandbox)
    balances = _Balances(solana_sandbox, routes.payer_address)
    tools = solana_sandbox.standard.tools
    sold = len(tools.settlements)
    async with Client(solana_sandbox.standard.mcp_url) as client:
        with_eur_payment(client, _options(solana_sandbox))
        result = await client.call_tool(tool, {"city": "Paris"})
    assert isinstance(result, PaidToolResult) and not result.is_error
    assert result.structured_content == {"city": "Paris", "forecast": "sunny", "temperatureC": 21}
    receipt = result.x402_payment
    assert receipt is not None
    assert (receipt.rail, receipt.network, receipt.amount) == (
        "svm",
        routes.network,
        Decimal("0.05"),
    )
    assert len(tools.settlements) == sold + 1
    assert balances.moved() == {
        f"payer {symbol}": -PRICE,
        f"merchant {symbol}": PRICE,
        "fee payer": -FEE,
    }


def _v1_merchant(routes: SolanaRoutes) -> Any:
    """A v1 merchant (JSON body, `X-PAYMENT`) selling `/solana/eurc`'s entry under the v1
    network name, settled by the sandbox's SVM facilitator."""
    (entry,) = routes.accepts("/solana/eurc")
    requirements = {
        **{k: v for k, v in entry.items() if k != "amount"},
        "network": "solana-devnet",
        "maxAmountRequired": entry["amount"],
        "resource": "http://127.0.0.1/paid",
        "description": "paid on Solana (x402 v1)",
        "mimeType": "application/json",
    }

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        headers = dict(scope["headers"])
        status, body, extra = 402, {"x402Version": 1, "error": "X-PAYMENT header is required",
                                    "accepts": [requirements]}, []  # fmt: skip
        if b"x-payment" in headers:
            payment = json.loads(base64.b64decode(headers[b"x-payment"]))
            call = {"x402Version": 1, "paymentPayload": payment,
                    "paymentRequirements": requirements}  # fmt: skip
            async with httpx.AsyncClient(timeout=60) as http:
                settled = (await http.post(routes.facilitator_url + "/settle", json=call)).json()
            if settled["success"]:
                status, body = 200, {"paid": True}
                encoded = base64.b64encode(json.dumps(settled).encode())
                extra = [(b"x-payment-response", encoded)]
            else:
                body["error"] = settled["errorReason"]
        raw = [(b"content-type", b"application/json"), *extra]
        await send({"type": "http.response.start", "status": status, "headers": raw})
        await send({"type": "http.response.body", "body": json.dumps(body).encode()})

    return app


async def test_a_v1_entry_is_paid_under_the_v1_network_name(solana_sandbox, serve) -> None:
    routes = _routes(solana_sandbox)
    balances = _Balances(solana_sandbox, routes.payer_address)
    url = await serve(_v1_merchant(routes))
    async with with_eur_payment(httpx.AsyncClient(timeout=60), _options(solana_sandbox)) as client:
        response = await client.get(url + "/paid")
    assert response.status_code == 200, response.text
    receipt = PaymentReceipt.of(response)
    assert receipt is not None and (receipt.rail, receipt.network) == ("svm", "solana-devnet")
    assert balances.moved() == {"payer sEURC": -PRICE, "merchant sEURC": PRICE, "fee payer": -FEE}
