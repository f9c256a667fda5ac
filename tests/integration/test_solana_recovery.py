"""What recovery makes of a Solana payment that was signed and handed over but never
served: the chain decides, by the payer's own signature in its token account's history,
and by whether the transaction's blockhash still lives. Never signed again.

- on chain: the money moved (`unrecoverable`, with what a person needs);
- not on chain and its blockhash alive: it may still land (`pending`, budget kept);
- not on chain and its blockhash dead, on definite answers: it never will (`failed`,
  budget released);
- an RPC that errs or does not answer: nothing decided (`pending`), never "void".
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import register_secrets
from x402_client import Asset, Budget, PaymentOptions, X402Error, payments, with_eur_payment
from x402_client._rails.solana import lookup
from x402_client._state.shared import state_of
from x402_eur_sandbox import Sandbox
from x402_eur_sandbox._faults import Fault
from x402_eur_sandbox._standard_svm import SolanaRoutes

pytestmark = pytest.mark.anyio


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


@pytest.fixture
def made() -> Iterator[list[PaymentOptions]]:
    """Options a test makes with a state file: their journal is closed after it."""
    options: list[PaymentOptions] = []
    yield options
    for each in options:
        state_of(each).close()


def _options(sandbox: Sandbox, state_path: Path) -> PaymentOptions:
    routes = _routes(sandbox)
    return PaymentOptions(
        svm=routes.svm_config(),
        assets=[Asset(**config) for config in routes.asset_configs()],
        state_path=state_path,
        budgets=[Budget("5.00")],
    )


def _refusing_merchant(routes: SolanaRoutes, *, settles: bool = False) -> Any:
    """A merchant that sells `/solana/eurc`'s entry and never serves: it refuses every
    payment (after settling it through the sandbox facilitator, with `settles`)."""

    def required(error: str) -> dict[str, str]:
        body = {
            "x402Version": 2,
            "error": error,
            "resource": {"url": "http://127.0.0.1/paid", "description": "", "mimeType": ""},
            "accepts": routes.accepts("/solana/eurc"),
        }
        return {"PAYMENT-REQUIRED": base64.b64encode(json.dumps(body).encode()).decode()}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        headers = dict(scope["headers"])
        error = "payment required"
        if b"payment-signature" in headers:
            payment = json.loads(base64.b64decode(headers[b"payment-signature"]))
            if settles:
                body = {"x402Version": 2, "paymentPayload": payment}
                body["paymentRequirements"] = payment["accepted"]
                # a re-sent proof is a duplicate: the facilitator refuses it
                async with httpx.AsyncClient(timeout=60) as http:
                    await http.post(routes.facilitator_url + "/settle", json=body)
            error = "invalid_exact_svm_payload_transaction_simulation_failed"
        raw = [(k.encode(), v.encode()) for k, v in required(error).items()]
        await send({"type": "http.response.start", "status": 402, "headers": raw})
        await send({"type": "http.response.body", "body": b"{}"})

    return app


async def _handed_over(sandbox: Sandbox, url: str, options: PaymentOptions) -> X402Error:
    async with with_eur_payment(httpx.AsyncClient(timeout=60), options) as client:
        with pytest.raises(X402Error) as caught:
            await client.get(url)
    # signed and handed over, not served: the merchant may still submit it
    assert caught.value.money_moved is None
    return caught.value


async def _recover(options: PaymentOptions) -> Any:
    async with with_eur_payment(httpx.AsyncClient(timeout=60), options) as client:
        (result,) = await payments(client).recover_all()
    return result


async def _spent(options: PaymentOptions) -> Decimal:
    (status,) = await payments(options).budgets()
    return status.spent


async def test_a_transaction_never_submitted_is_pending_then_void_once_its_blockhash_dies(
    solana_sandbox, serve, tmp_path, made
) -> None:
    routes = _routes(solana_sandbox)
    before = routes.token_balance(routes.payer_address, "sEURC")
    url = await serve(_refusing_merchant(routes))
    options = _options(solana_sandbox, tmp_path / "state.sqlite3")
    made.append(options)
    await _handed_over(solana_sandbox, url + "/paid", options)
    (record,) = await payments(options).unfinished()
    assert record.proof is not None  # the signed transaction was journaled
    assert (await lookup(options.svm, record.proof)).status == "pending"

    pending = await _recover(options)
    assert pending.status == "pending", pending.reason
    assert "its blockhash still lives" in pending.reason
    assert await _spent(options) == Decimal("0.05")  # kept: it may still land

    assert routes.node is not None
    routes.node.expire_blockhash()
    failed = await _recover(options)
    assert failed.status == "failed", failed.reason
    assert "its blockhash is dead: it never will be" in failed.reason
    assert await _spent(options) == Decimal("0")  # released: nothing can move
    assert routes.token_balance(routes.payer_address, "sEURC") == before


async def test_a_transaction_that_landed_is_reported_as_moved(
    solana_sandbox, serve, tmp_path, made
) -> None:
    routes = _routes(solana_sandbox)
    before = routes.token_balance(routes.payer_address, "sEURC")
    url = await serve(_refusing_merchant(routes, settles=True))
    options = _options(solana_sandbox, tmp_path / "state.sqlite3")
    made.append(options)
    await _handed_over(solana_sandbox, url + "/paid", options)
    assert routes.token_balance(routes.payer_address, "sEURC") == before - 50_000
    (record,) = await payments(options).unfinished()
    assert record.proof is not None
    found = await lookup(options.svm, record.proof)
    assert found.status == "confirmed", found.detail

    result = await _recover(options)
    assert result.status == "unrecoverable", result.reason
    assert "is on chain" in result.reason and "the money moved" in result.reason
    assert await _spent(options) == Decimal("0.05")
    assert routes.token_balance(routes.payer_address, "sEURC") == before - 50_000  # once


@pytest.mark.parametrize("method", ["isBlockhashValid", "getSignaturesForAddress"])
async def test_an_rpc_that_errs_decides_nothing(
    solana_sandbox, serve, tmp_path, made, method
) -> None:
    routes = _routes(solana_sandbox)
    url = await serve(_refusing_merchant(routes))
    options = _options(solana_sandbox, tmp_path / "state.sqlite3")
    made.append(options)
    await _handed_over(solana_sandbox, url + "/paid", options)
    assert routes.node is not None
    routes.node.expire_blockhash()  # were the RPC to answer, it would be void
    solana_sandbox.faults.arm(f"solana:{method}", Fault(kind="status", status=503, times=1))
    result = await _recover(options)
    assert result.status == "pending", result.reason
    assert f"answered {method} with 503" in result.reason
    assert await _spent(options) == Decimal("0.05")
    (still,) = await payments(options).unfinished()
    assert still.id == result.record.id
