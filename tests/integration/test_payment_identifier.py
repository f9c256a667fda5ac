"""The x402 `payment-identifier` extension against the foundation's own merchant: one
identifier per payment, the same in every send of its proof (a re-send after an unknown
outcome, recovery from the journal), so a deduplicating merchant serves it once and
settles it once; a merchant that requires one is never paid without it; a merchant that
does not declare it sees the wire as it always was.

The merchant is the foundation's resource server and payment middleware (its extension
registered, the declaration made by `declare_payment_identifier_extension`) behind a
deduplicating layer built on the foundation's server-side helpers
(`extract_payment_identifier`, `validate_payment_identifier_requirement`): the answer to
an identifier it has served is the same answer again, with no second settlement.
"""

from __future__ import annotations

import base64
import json
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from x402 import AssetAmount, x402ResourceServer
from x402.extensions.payment_identifier import (
    PAYMENT_IDENTIFIER,
    declare_payment_identifier_extension,
    extract_payment_identifier,
    payment_identifier_resource_server_extension,
    validate_payment_identifier_requirement,
)
from x402.http import FacilitatorConfig, HTTPFacilitatorClient
from x402.http.types import PaymentOption, RouteConfig
from x402.mechanisms.evm.exact import register_exact_evm_server
from x402.schemas import PaymentPayload, parse_payment_payload

from tests.conftest import Recorder, scripted_402
from tests.merchants import answer_json
from tests.x402_foundation import (
    TOKEN_NAME,
    TOKEN_VERSION,
    FoundationStack,
    _v2_merchant_middleware,
    b64_json,
    foundation_stack,
)
from x402_client import (
    Asset,
    EvmOptions,
    NoSatisfiableOption,
    PaymentOptions,
    PaymentOutcomeUnknown,
    payments,
    with_eur_payment,
)
from x402_eur_sandbox import ServedApp

pytestmark = pytest.mark.anyio

PLAIN, OPTIONAL, REQUIRED = "/plain", "/optional", "/required"
Message = dict[str, Any]


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


class Deduplicating:
    """ASGI layer in front of the foundation's merchant: keeps every paid retry
    (`sends`: path and payload), refuses a paid retry without an identifier on a route
    that requires one (400, the foundation's `validate_payment_identifier_requirement`),
    answers an identifier it served before with the kept answer (`replayed`), and, when
    told, loses the answer of a paid retry the merchant served (`lose`: the body breaks
    off) or answers 500 in its place (`fail`), or holds it (`hold`: `arrived` is set once
    the merchant served a paid retry, the answer waits for `hold`)."""

    def __init__(self, app: Any, required: set[str]) -> None:
        self.app = app
        self.required = required
        self.sends: list[tuple[str, PaymentPayload]] = []
        self.served: dict[str, list[Message]] = {}
        self.replayed = 0
        self.refused = 0
        self.lose = 0
        self.fail = 0
        self.hold: anyio.Event | None = None
        self.arrived = anyio.Event()
        #: An entry put first in the `accepts` of every 402 (one the merchant cannot take).
        self.prepend: dict[str, Any] | None = None

    def ids(self, path: str) -> list[str | None]:
        return [extract_payment_identifier(p) for where, p in self.sends if where == path]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        headers = {k.decode().lower(): v.decode() for k, v in scope.get("headers", [])}
        header = headers.get("payment-signature")
        if scope["type"] != "http" or header is None:
            await self.app(scope, receive, send if self.prepend is None else self._prepending(send))
            return
        payload = parse_payment_payload(b64_json(header))
        assert isinstance(payload, PaymentPayload)
        self.sends.append((scope["path"], payload))
        if scope["path"] in self.required:
            check = validate_payment_identifier_requirement(payload, server_required=True)
            if not check.valid:
                self.refused += 1
                await answer_json(send, 400, json.dumps({"error": check.errors}).encode())
                return
        payment_id = extract_payment_identifier(payload)
        if payment_id is not None and payment_id in self.served:
            self.replayed += 1
            for message in self.served[payment_id]:
                await send(message)
            return
        messages: list[Message] = []

        async def keep(message: Message) -> None:
            messages.append(message)

        await self.app(scope, receive, keep)
        if payment_id is not None and messages[0]["status"] == 200:
            self.served[payment_id] = messages
        await self._forward(messages, send)

    def _prepending(self, send: Any) -> Any:
        async def rewritten(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 402:
                headers = []
                for name, value in message["headers"]:
                    if name.lower() == b"payment-required":
                        required = b64_json(value.decode())
                        required["accepts"].insert(0, self.prepend)
                        value = _b64(required).encode()
                    headers.append((name, value))
                message = {**message, "headers": headers}
            await send(message)

        return rewritten

    async def _forward(self, messages: list[Message], send: Any) -> None:
        if self.hold is not None:
            self.arrived.set()
            await self.hold.wait()
        if self.lose and messages[0]["status"] == 200:
            self.lose -= 1
            start = {**messages[0], "headers": [(b"content-length", b"1000")]}
            await send(start)
            await send({"type": "http.response.body", "body": b"{", "more_body": True})
            return  # the body breaks off: the server closes the connection
        if self.fail and messages[0]["status"] == 200:
            self.fail -= 1
            await answer_json(send, 500, b'{"error": "internal"}')
            return
        for message in messages:
            await send(message)


def _routes(stack: FoundationStack) -> dict[str, RouteConfig]:
    price = AssetAmount(
        amount=str(stack.price_atomic),
        asset=stack.token,
        extra={"name": TOKEN_NAME, "version": TOKEN_VERSION},
    )
    option = PaymentOption(
        scheme="exact",
        pay_to=stack.merchant_address,
        price=price,
        network=stack.network,
        max_timeout_seconds=300,
    )
    declared = {
        PLAIN: None,
        OPTIONAL: {PAYMENT_IDENTIFIER: declare_payment_identifier_extension()},
        REQUIRED: {PAYMENT_IDENTIFIER: declare_payment_identifier_extension(required=True)},
    }
    return {
        f"GET {path}": RouteConfig(accepts=option, description="paid", extensions=extensions)
        for path, extensions in declared.items()
    }


async def _paid(request: Request) -> Response:
    return JSONResponse({"paid": True, "path": request.url.path})


@pytest.fixture(scope="module")
async def stack(anyio_backend: str) -> AsyncIterator[FoundationStack]:
    async with foundation_stack() as started:
        yield started


@pytest.fixture(scope="module")
async def merchant(stack: FoundationStack) -> AsyncIterator[tuple[str, Deduplicating]]:
    """The foundation's v2 merchant declaring the extension on two routes."""
    facilitator = HTTPFacilitatorClient(FacilitatorConfig(url=stack.facilitator_url))
    server = x402ResourceServer(facilitator)
    register_exact_evm_server(server, networks=stack.network)
    # (2.25's extension object lacks the protocol's optional hooks mypy asks for.)
    server.register_extension(payment_identifier_resource_server_extension)  # type: ignore[arg-type]
    middleware = await anyio.to_thread.run_sync(_v2_merchant_middleware, _routes(stack), server)
    app = Starlette(
        routes=[Route(path, _paid, methods=["GET"]) for path in (PLAIN, OPTIONAL, REQUIRED)],
        middleware=[Middleware(BaseHTTPMiddleware, dispatch=middleware)],
    )
    layer = Deduplicating(app, required={REQUIRED})
    served = await ServedApp(layer, "x402-foundation-deduplicating-merchant").start()
    yield served.url, layer
    await served.stop()
    await facilitator.aclose()


def options(stack: FoundationStack, **overrides: Any) -> PaymentOptions:
    values: dict[str, Any] = {
        "evm": EvmOptions(private_key=stack.payer_key, rpc_urls={}),
        "assets": [
            Asset(chain_id=stack.chain_id, address=stack.token, symbol="EURC", currency="EUR")
        ],
    }
    values.update(overrides)
    return PaymentOptions(**values)


def settlements(stack: FoundationStack) -> int:
    return sum(1 for path, _ in stack.facilitator.requests if path == "/settle")


async def test_each_payment_carries_its_own_identifier_the_merchant_checks(stack, merchant):
    url, layer = merchant
    before, settled = await stack.balance(stack.payer_address), settlements(stack)
    receipts = []
    async with with_eur_payment(httpx.AsyncClient(timeout=30), options(stack)) as client:
        for path in (OPTIONAL, OPTIONAL, REQUIRED):
            response = await client.get(url + path)
            assert response.status_code == 200, response.text
            receipts.append(response.extensions["x402_payment"])
        entries = payments(client).ledger.entries()
    ids = layer.ids(OPTIONAL)[-2:] + layer.ids(REQUIRED)[-1:]
    # One identifier per payment: its own ledger id, so the journal knows it too.
    assert ids == [f"pay_{entry.id}" for entry in entries]
    assert [r.payment_identifier for r in receipts] == ids
    assert receipts[0].to_json()["paymentIdentifier"] == ids[0]
    assert len(set(ids)) == 3
    echoed = layer.sends[-1][1].extensions or {}
    assert echoed[PAYMENT_IDENTIFIER]["info"] == {"required": True, "id": ids[-1]}
    assert echoed[PAYMENT_IDENTIFIER]["schema"] == declare_payment_identifier_extension()["schema"]
    assert (layer.replayed, layer.refused) == (0, 0)
    assert settlements(stack) == settled + 3
    assert await stack.balance(stack.payer_address) == before - 3 * stack.price_atomic


async def test_an_undeclared_extension_leaves_the_wire_as_it_was(stack, merchant):
    url, layer = merchant
    async with with_eur_payment(httpx.AsyncClient(timeout=30), options(stack)) as client:
        response = await client.get(url + PLAIN)
    assert response.status_code == 200
    header = dict(layer.sends[-1][1].model_dump(by_alias=True, exclude_none=True))
    assert set(header) == {"x402Version", "payload", "accepted", "resource"}
    assert layer.ids(PLAIN)[-1] is None
    assert response.extensions["x402_payment"].payment_identifier is None


async def test_a_proof_re_sent_after_a_500_carries_the_same_identifier(stack, merchant):
    url, layer = merchant
    before, settled = await stack.balance(stack.payer_address), settlements(stack)
    layer.fail = 1
    async with with_eur_payment(httpx.AsyncClient(timeout=30), options(stack)) as client:
        response = await client.get(url + OPTIONAL)
    assert response.status_code == 200, response.text
    first, again = layer.ids(OPTIONAL)[-2:]
    assert first is not None and first == again
    assert layer.replayed == 1
    assert settlements(stack) == settled + 1
    assert await stack.balance(stack.payer_address) == before - stack.price_atomic


async def test_a_proof_re_sent_after_an_unknown_outcome_is_served_once(stack, merchant):
    url, layer = merchant
    before, settled = await stack.balance(stack.payer_address), settlements(stack)
    replayed = layer.replayed
    layer.lose = 1
    async with with_eur_payment(httpx.AsyncClient(timeout=30), options(stack)) as client:
        with pytest.raises(PaymentOutcomeUnknown) as caught:
            await client.get(url + REQUIRED)
        proof = caught.value.proof
        assert proof is not None
        again = await client.get(url + REQUIRED, extensions={"x402": {"proof": proof}})
    assert again.status_code == 200, again.text
    assert again.json() == {"paid": True, "path": REQUIRED}
    first, resent = layer.ids(REQUIRED)[-2:]
    assert first is not None and first == resent
    assert again.extensions["x402_payment"].payment_identifier == first
    assert layer.replayed == replayed + 1
    assert settlements(stack) == settled + 1
    assert await stack.balance(stack.payer_address) == before - stack.price_atomic


async def test_recovery_from_the_journal_re_sends_the_same_identifier(stack, merchant, tmp_path):
    url, layer = merchant
    state = Path(tmp_path) / "state.sqlite3"
    before, settled = await stack.balance(stack.payer_address), settlements(stack)
    replayed = layer.replayed
    layer.lose = 1
    async with with_eur_payment(
        httpx.AsyncClient(timeout=30), options(stack, state_path=state)
    ) as client:
        with pytest.raises(PaymentOutcomeUnknown):
            await client.get(url + OPTIONAL)
        (entry,) = payments(client).ledger.entries()
    # A new process on the same state file finishes it from the journal.
    async with with_eur_payment(
        httpx.AsyncClient(timeout=30), options(stack, state_path=state)
    ) as client:
        (recovery,) = await payments(client).recover_all()
    assert recovery.status == "delivered", recovery.reason
    assert recovery.record.id == entry.id
    # The journal keeps it with the payment: its proof carries it.
    assert recovery.record.payment_identifier == f"pay_{entry.id}"
    assert ("payment identifier", f"pay_{entry.id}") in recovery.record.facts()
    assert recovery.record.to_json()["payment_identifier"] == f"pay_{entry.id}"
    first, resent = layer.ids(OPTIONAL)[-2:]
    assert first == resent == f"pay_{entry.id}"
    assert layer.replayed == replayed + 1
    assert settlements(stack) == settled + 1
    assert await stack.balance(stack.payer_address) == before - stack.price_atomic


CRASH_PAYER = Path(__file__).with_name("crash_payer.py")


async def test_after_a_crash_recovery_re_sends_the_identifier_the_merchant_saw(
    stack, merchant, tmp_path
):
    # A payer process dies (SIGKILL) while the merchant, having settled, holds its answer.
    url, layer = merchant
    state = Path(tmp_path) / "state.sqlite3"
    before, settled = await stack.balance(stack.payer_address), settlements(stack)
    replayed = layer.replayed
    asset = {"chain_id": stack.chain_id, "address": stack.token, "symbol": "EURC"}
    config = {
        "rail": "eip3009",
        "step": "delivery",
        "url": url + OPTIONAL,
        "api_key": "sk_unused",
        "from_account": "ACC_UNUSED",
        "api_url": "http://127.0.0.1:9",
        "state_path": str(state),
        "budget": "1.00",
        "evm_key": stack.payer_key,
        "asset": {**asset, "currency": "EUR"},
    }
    layer.hold, layer.arrived = anyio.Event(), anyio.Event()
    log = Path(tmp_path) / "payer.log"
    try:
        with log.open("wb") as out:
            process = await anyio.open_process(
                [sys.executable, str(CRASH_PAYER), json.dumps(config)], stdout=out, stderr=out
            )
            with anyio.fail_after(60):
                while not layer.arrived.is_set() and process.returncode is None:  # noqa: ASYNC110
                    await anyio.sleep(0.01)
                process.kill()
                await process.wait()
            await process.aclose()
        assert process.returncode == -signal.SIGKILL, log.read_text()
    finally:
        layer.hold.set()
        layer.hold = None
    first = layer.ids(OPTIONAL)[-1]
    async with with_eur_payment(
        httpx.AsyncClient(timeout=30), options(stack, state_path=state)
    ) as client:
        (recovery,) = await payments(client).recover_all()
    assert recovery.status == "delivered", recovery.reason
    assert first == layer.ids(OPTIONAL)[-1] == f"pay_{recovery.record.id}"
    assert layer.replayed == replayed + 1
    assert settlements(stack) == settled + 1
    assert await stack.balance(stack.payer_address) == before - stack.price_atomic


def _b64(value: Any) -> str:
    return base64.b64encode(json.dumps(value).encode()).decode()


def _permit_entry(facilitator: str) -> dict[str, Any]:
    """An entry for the evm-permit rail, whose proof is not a v2 frame."""
    return {
        "scheme": "exact",
        "network": "eip155:137",
        "asset": "0x" + "1a" * 20,
        "amount": "10000",
        "payTo": "0x" + "2b" * 20,
        "maxTimeoutSeconds": 300,
        "facilitator": facilitator,
        "extra": {"symbol": "EURQ", "spender": "0x" + "3c" * 20},
    }


async def test_a_required_identifier_passes_over_a_rail_that_cannot_carry_it(
    stack, merchant, serve
):
    # The 402 offers first an evm-permit entry, then the merchant's EIP-3009 one.
    url, layer = merchant
    recorder = Recorder()
    recorded = await serve(recorder)
    before = await stack.balance(stack.payer_address)
    evm = EvmOptions(private_key=stack.payer_key, rpc_urls={137: recorded})
    layer.prepend = _permit_entry(recorded)
    try:
        async with with_eur_payment(httpx.AsyncClient(timeout=30), options(stack, evm=evm)) as c:
            required = await c.get(url + REQUIRED)
            assert recorder.requests == []  # the permit entry was not even prepared
            optional = await c.get(url + OPTIONAL)
            assert recorder.requests != []  # declared optional, it was tried first
    finally:
        layer.prepend = None
    assert (required.status_code, optional.status_code) == (200, 200), required.text
    assert required.extensions["x402_payment"].rail == "eip3009"
    assert layer.ids(REQUIRED)[-1] == required.extensions["x402_payment"].payment_identifier
    assert await stack.balance(stack.payer_address) == before - 2 * stack.price_atomic


async def test_a_required_identifier_no_rail_can_carry_pays_nothing(stack, serve):
    # The only entry is for the evm-permit rail, whose proof is not a v2 frame: it cannot
    # carry the identifier the merchant requires. No signature, no RPC, no facilitator.
    recorder = Recorder()
    recorded = await serve(recorder)
    permit = _permit_entry(recorded)
    challenge = {
        "x402Version": 2,
        "error": "Payment required",
        "resource": {"url": "http://127.0.0.1/paid"},
        "accepts": [permit],
        "extensions": {PAYMENT_IDENTIFIER: declare_payment_identifier_extension(required=True)},
    }
    url = await serve(scripted_402(b"{}", headers={"payment-required": _b64(challenge)}))
    evm = EvmOptions(private_key=stack.payer_key, rpc_urls={137: recorded})
    async with with_eur_payment(httpx.AsyncClient(), PaymentOptions(evm=evm)) as client:
        with pytest.raises(NoSatisfiableOption, match="requires a payment identifier") as caught:
            await client.get(url)
        assert payments(client).ledger.entries() == []
    assert caught.value.money_moved is False
    (skipped,) = caught.value.skipped
    assert skipped.reason.value == "unpayable" and "evm-permit" in skipped.message
    assert recorder.requests == []
    # Declared optional, the same entry is tried (its facilitator is asked about the spender).
    challenge["extensions"] = {PAYMENT_IDENTIFIER: declare_payment_identifier_extension()}
    url = await serve(scripted_402(b"{}", headers={"payment-required": _b64(challenge)}))
    async with with_eur_payment(httpx.AsyncClient(), PaymentOptions(evm=evm)) as client:
        with pytest.raises(NoSatisfiableOption) as caught:
            await client.get(url)
    assert "payment identifier" not in str(caught.value)
    assert recorder.requests != []
