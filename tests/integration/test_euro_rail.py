"""The euro rail end to end: real client, real sandbox services on 127.0.0.1."""

from __future__ import annotations

import json
import logging
import tracemalloc
from decimal import Decimal
from typing import Any

import httpx
import pytest

from tests.conftest import Recorder, bank_payments, scripted_402
from tests.sandboxes import payment_options
from x402_client import (
    AmountLimitExceeded,
    InsufficientFunds,
    InvalidChallenge,
    NoSatisfiableOption,
    PaymentReceipt,
    PaymentRejectedByHook,
    PaymentTransport,
    PaymentVerificationFailed,
    UnreplayableRequest,
    X402Error,
    with_eur_payment,
)
from x402_eur_sandbox import Price, Sandbox

pytestmark = pytest.mark.anyio


async def test_paid_fetch_moves_exactly_the_price(sandbox, payer, options_for):
    merchant_before = sandbox.balance(sandbox.merchant)
    async with with_eur_payment(httpx.AsyncClient(), options_for(payer)) as client:
        response = await client.get(sandbox.url("/weather"))
    assert response.status_code == 200
    assert response.json()["city"] == "Amsterdam"
    assert sandbox.balance(payer) == Decimal("9.90")
    assert sandbox.balance(sandbox.merchant) - merchant_before == Decimal("0.10")
    assert len(bank_payments(sandbox, payer)) == 1

    receipt = response.extensions["x402_payment"]
    assert isinstance(receipt, PaymentReceipt)
    assert (receipt.scheme, receipt.network, receipt.rail) == ("euro", "provider:mainnet", "euro")
    assert receipt.amount == Decimal("0.10") and receipt.currency == "EUR"
    assert receipt.pay_to == sandbox.merchant.code
    assert receipt.payment_request_code.startswith("pr_")
    assert receipt.transaction_code.startswith("QP")
    assert receipt.settlement["paymentRequestCode"] == receipt.payment_request_code
    assert receipt.payments == 1


async def test_free_resources_pass_through_without_payment(sandbox, payer, options_for):
    async with with_eur_payment(httpx.AsyncClient(), options_for(payer)) as client:
        response = await client.get(sandbox.url("/free"))
    assert response.json() == {"free": True}
    assert "x402_payment" not in response.extensions
    assert bank_payments(sandbox, payer) == []


async def test_open_then_confirmed_pays_once():
    async with Sandbox(confirmation_delay=0.4) as sandbox:
        verifies_before = sandbox.faults.calls.get("x402_verify", 0)
        async with with_eur_payment(httpx.AsyncClient(), payment_options(sandbox)) as client:
            response = await client.get(sandbox.url("/weather"))
        assert response.status_code == 200
        assert len(bank_payments(sandbox, sandbox.payer)) == 1
        assert sandbox.faults.calls["x402_verify"] - verifies_before >= 2  # Open, then valid
        assert sandbox.balance(sandbox.payer) == Decimal("99.90")
        assert sandbox.balance(sandbox.merchant) == Decimal("0.10")


async def test_not_confirmed_forever_is_a_typed_error_after_one_payment():
    async with Sandbox(confirmation_delay=60) as sandbox:
        options = payment_options(sandbox, confirmation_attempts=3, confirmation_wait=0.01)
        async with with_eur_payment(httpx.AsyncClient(), options) as client:
            with pytest.raises(PaymentVerificationFailed) as caught:
                await client.get(sandbox.url("/weather"))
        assert "not confirmed" in caught.value.reason.lower()
        assert caught.value.proof and caught.value.receipt.amount == Decimal("0.10")
        assert len(bank_payments(sandbox, sandbox.payer)) == 1


class StealFirstProof(httpx.AsyncBaseTransport):
    """Copies the first proof it sees and spends it in a request of its own before the
    client's goes out: the merchant then tells the client its proof was already used, while
    the client's own request went out once (the spec's case for one fresh payment). A layer
    that sent the client's own request twice would be another case: see
    test_retrying_layers.py."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.stolen = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if "x-payment" in request.headers and self.stolen == 0:
            self.stolen += 1
            copy = httpx.Request(request.method, request.url, headers=request.headers)
            thief = await self.inner.handle_async_request(copy)
            await thief.aread()
            await thief.aclose()
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_used_proof_gets_exactly_one_fresh_payment(sandbox, payer, options_for):
    thief = StealFirstProof()
    transport = PaymentTransport(thief, options_for(payer))
    async with httpx.AsyncClient(transport=transport) as client:
        response = await client.get(sandbox.url("/weather"))
    assert thief.stolen == 1
    assert response.status_code == 200
    assert len(bank_payments(sandbox, payer)) == 2
    assert response.extensions["x402_payment"].payments == 2
    assert sandbox.balance(payer) == Decimal("9.80")  # the thief got the first one


async def test_expired_proof_gets_exactly_one_fresh_payment():
    # Confirmation takes longer than the request lives: the first payment expires (and is
    # refunded); the hook speeds confirmation up before the second payment.
    async with Sandbox(confirmation_delay=0.6, request_lifetime=0.3) as sandbox:
        seen: list[Any] = []

        def hook(intent: Any) -> bool:
            seen.append(intent)
            if len(seen) == 2:
                sandbox.bank.confirmation_delay = 0
            return True

        options = payment_options(sandbox, on_before_payment=hook, confirmation_wait=0.05)
        async with with_eur_payment(httpx.AsyncClient(), options) as client:
            response = await client.get(sandbox.url("/weather"))
        assert response.status_code == 200
        made = bank_payments(sandbox, sandbox.payer)
        assert len(made) == 2 and len(seen) == 2
        assert made[0].status == "Cancelled" and made[1].status == "Paid"
        assert sandbox.balance(sandbox.payer) == Decimal("99.90")
        assert sandbox.balance(sandbox.merchant) == Decimal("0.10")
        assert response.extensions["x402_payment"].payments == 2


async def test_expired_twice_is_an_error_not_a_third_payment():
    # Each payment request lives 1 s (long enough to be paid on a busy machine) and is
    # confirmed only after 3 s, so each proof is refused as expired.
    async with Sandbox(confirmation_delay=3.0, request_lifetime=1.0) as sandbox:
        options = payment_options(sandbox, confirmation_wait=0.05)
        async with with_eur_payment(httpx.AsyncClient(), options) as client:
            with pytest.raises(PaymentVerificationFailed, match="expired"):
                await client.get(sandbox.url("/weather"))
        assert len(bank_payments(sandbox, sandbox.payer)) == 2


@pytest.mark.parametrize("verdict", [False, "raise", "async-false"])
async def test_hook_rejection_pays_nothing(sandbox, payer, options_for, verdict):
    intents: list[Any] = []

    async def async_hook(intent: Any) -> bool:
        intents.append(intent)
        return False

    def hook(intent: Any) -> bool:
        intents.append(intent)
        if verdict == "raise":
            raise RuntimeError("no")
        return False

    options = options_for(payer, on_before_payment=async_hook if verdict == "async-false" else hook)
    async with with_eur_payment(httpx.AsyncClient(), options) as client:
        with pytest.raises(PaymentRejectedByHook) as caught:
            await client.get(sandbox.url("/weather"))
    assert bank_payments(sandbox, payer) == []
    assert sandbox.balance(payer) == Decimal("10.00")
    (intent,) = intents
    assert intent.amount == Decimal("0.10") and intent.scheme == "euro"
    assert intent.pay_to == sandbox.merchant.code
    assert intent.resource == sandbox.url("/weather")
    assert caught.value.intent == intent
    if verdict == "raise":
        assert isinstance(caught.value.__cause__, RuntimeError)


async def test_hook_approval_sync_and_async(sandbox, payer, options_for):
    async def approve(intent: Any) -> bool:
        return True

    async with with_eur_payment(
        httpx.AsyncClient(), options_for(payer, on_before_payment=approve)
    ) as client:
        assert (await client.get(sandbox.url("/weather"))).status_code == 200
    assert len(bank_payments(sandbox, payer)) == 1


async def test_insufficient_funds_is_typed_and_moves_nothing(sandbox, options_for):
    poor = sandbox.bank.open_account("0.05")
    merchant_before = sandbox.balance(sandbox.merchant)
    async with with_eur_payment(httpx.AsyncClient(), options_for(poor)) as client:
        with pytest.raises(InsufficientFunds) as caught:
            await client.get(sandbox.url("/weather"))
    assert caught.value.code == "InsufficientFunds"
    assert caught.value.status_code == 400
    assert "Insufficient funds" in caught.value.provider_message
    assert sandbox.balance(poor) == Decimal("0.05")
    assert sandbox.balance(sandbox.merchant) == merchant_before


async def test_price_above_the_cap_is_refused(sandbox, payer, options_for):
    async with with_eur_payment(httpx.AsyncClient(), options_for(payer)) as client:
        with pytest.raises(AmountLimitExceeded, match=r"2\.00 EUR"):
            await client.get(sandbox.url("/premium"))  # 2.00 > the default 1.00
    assert bank_payments(sandbox, payer) == []
    options = options_for(payer, max_amount_per_payment="5")
    async with with_eur_payment(httpx.AsyncClient(), options) as client:
        assert (await client.get(sandbox.url("/premium"))).status_code == 200
        # a per-request cap can only lower the client's
        with pytest.raises(AmountLimitExceeded):
            await client.get(
                sandbox.url("/report"), extensions={"x402": {"max_amount_per_payment": "0.20"}}
            )
    assert len(bank_payments(sandbox, payer)) == 1


async def test_per_request_never_pay_passes_the_402_through(sandbox, payer, options_for):
    async with with_eur_payment(httpx.AsyncClient(), options_for(payer)) as client:
        response = await client.get(sandbox.url("/weather"), extensions={"x402": {"pay": False}})
    assert response.status_code == 402
    assert response.json()["accepts"][0]["scheme"] == "euro"
    assert bank_payments(sandbox, payer) == []


async def test_unsatisfiable_402_is_typed_and_pays_nothing(sandbox, payer, serve):
    # No managed account configured: the euro entry cannot be paid.
    async with with_eur_payment(httpx.AsyncClient(), {}) as client:
        with pytest.raises(NoSatisfiableOption) as caught:
            await client.get(sandbox.url("/weather"))
    assert "api_key" in str(caught.value)
    # Only a scheme we don't know.
    url = await serve(
        scripted_402(
            json.dumps(
                {
                    "x402Version": 2,
                    "error": "pay",
                    "accepts": [
                        {"scheme": "upto", "network": "eip155:8453", "maxAmountRequired": "1"}
                    ],
                }
            )
        )
    )
    async with with_eur_payment(
        httpx.AsyncClient(),
        payment_options(sandbox, api_key=payer.api_key, from_account=payer.code),
    ) as client:
        with pytest.raises(NoSatisfiableOption, match="unknown scheme"):
            await client.get(url)
    assert bank_payments(sandbox, payer) == []


def _euro_entry(**changes: Any) -> dict[str, Any]:
    entry = {
        "scheme": "euro",
        "network": "provider:mainnet",
        "asset": "EURO",
        "amount": "0.10",
        "payTo": "ACC_X",
        "paymentRequestCode": "pr_0123456789",
        "expiresAt": 2000000000,
        "facilitator": "http://127.0.0.1:9/x402",
    }
    entry.update(changes)
    return entry


MALFORMED = [
    b'{"x402Version": 2',
    b'{"x402Version": "2", "accepts": []}',
    b'{"x402Version": 2}',
    b'{"x402Version": 2, "accepts": []}',
    b'{"x402Version": 3, "accepts": [{"scheme": "euro"}]}',
    json.dumps({"x402Version": 2, "accepts": [_euro_entry(amount="-0.10")]}).encode(),
    json.dumps({"x402Version": 2, "accepts": [_euro_entry(amount="1e-1")]}).encode(),
    json.dumps({"x402Version": 2, "accepts": [_euro_entry(amount="0.0000001")]}).encode(),
    json.dumps({"x402Version": 2, "accepts": [_euro_entry(amount=0.1)]}).encode(),
    json.dumps({"x402Version": 2, "accepts": [_euro_entry(amount="NaN")]}).encode(),
    json.dumps({"x402Version": 2, "accepts": [_euro_entry(paymentRequestCode=None)]}).encode(),
    json.dumps({"x402Version": 2, "accepts": ["euro"]}).encode(),
    b'{"x402Version": 2, "accepts": [' + b" " * 70_000 + b"]}",
]


@pytest.mark.parametrize("raw", MALFORMED, ids=range(len(MALFORMED)))
async def test_malformed_402_is_typed_and_pays_nothing(sandbox, payer, options_for, serve, raw):
    url = await serve(scripted_402(raw))
    async with with_eur_payment(httpx.AsyncClient(), options_for(payer)) as client:
        with pytest.raises(InvalidChallenge) as caught:
            await client.get(url)
    assert isinstance(caught.value, X402Error) and isinstance(caught.value, httpx.HTTPError)
    assert caught.value.request.url == httpx.URL(url)
    assert bank_payments(sandbox, payer) == []
    if len(raw) < 10_000:  # the 402 rides on the error, its body readable
        assert caught.value.response.status_code == 402
        assert caught.value.response.read() == raw


async def test_one_bad_entry_does_not_spoil_a_good_one(sandbox, payer, options_for, serve):
    # The merchant's real entry comes second; the first is unreadable and skipped.
    async with httpx.AsyncClient() as plain:
        real = (await plain.get(sandbox.url("/weather"))).json()["accepts"][0]
    gate_url = sandbox.url("/weather")

    async def app(scope: Any, receive: Any, send: Any) -> None:
        # first call: a 402 listing a broken entry then the real one; paid retry: proxy
        if any(k == b"x-payment" for k, _ in scope["headers"]):
            headers = {k.decode(): v.decode() for k, v in scope["headers"] if k != b"host"}
            async with httpx.AsyncClient() as plain:
                upstream = await plain.get(gate_url, headers=headers)
            await send(
                {
                    "type": "http.response.start",
                    "status": upstream.status_code,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": upstream.content})
            return
        raw = json.dumps({"x402Version": 2, "accepts": [_euro_entry(amount="-1"), real]})
        await scripted_402(raw)(scope, receive, send)

    url = await serve(app)
    async with with_eur_payment(httpx.AsyncClient(), options_for(payer)) as client:
        response = await client.get(url)
    assert response.status_code == 200
    assert len(bank_payments(sandbox, payer)) == 1


async def test_large_non_402_stream_is_not_buffered(sandbox, payer, options_for):
    size = 32 * 1024 * 1024
    async with with_eur_payment(httpx.AsyncClient(), options_for(payer)) as client:
        tracemalloc.start()
        try:
            received = 0
            async with client.stream("GET", sandbox.url(f"/stream?size={size}")) as response:
                assert response.status_code == 200
                assert not response.is_stream_consumed
                async for chunk in response.aiter_raw():
                    received += len(chunk)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert received == size
    assert peak < 4 * 1024 * 1024, f"peak {peak} bytes: the stream was buffered"


async def test_paid_response_can_be_streamed(sandbox, payer, options_for):
    size = 8 * 1024 * 1024
    client = with_eur_payment(httpx.AsyncClient(), options_for(payer))
    async with client, client.stream("GET", sandbox.url(f"/download?size={size}")) as response:
        assert response.extensions["x402_payment"].amount == Decimal("0.01")
        total = sum([len(c) async for c in response.aiter_raw()])
    assert total == size
    assert len(bank_payments(sandbox, payer)) == 1


async def test_payment_header_never_follows_a_redirect(serve):
    other = Recorder()
    other_url = await serve(other)
    prices = {"/redirect": Price(Decimal("0.10"), "pays, then redirects")}
    async with Sandbox(prices=prices) as sandbox:
        async with with_eur_payment(
            httpx.AsyncClient(follow_redirects=True), payment_options(sandbox)
        ) as client:
            response = await client.get(sandbox.url(f"/redirect?to={other_url}/landing"))
        assert response.status_code == 200 and response.json() == {"recorded": True}
        assert len(bank_payments(sandbox, sandbox.payer)) == 1
    ((_, path, headers),) = other.requests
    assert path == "/landing"
    assert "x-payment" not in headers
    assert "x-api-key" not in headers


async def test_api_key_never_reaches_the_merchant(serve):
    async with Sandbox() as sandbox:
        recorder = Recorder(sandbox.gate)  # the sandbox's merchant gate, behind a recorder
        url = await serve(recorder)
        async with with_eur_payment(httpx.AsyncClient(), payment_options(sandbox)) as client:
            assert (await client.get(url + "/weather")).status_code == 200
    assert [r[0] for r in recorder.requests] == ["GET", "GET"]
    assert "x-payment" not in recorder.requests[0][2]
    assert "x-payment" in recorder.requests[1][2]
    for _, _, headers in recorder.requests:
        assert "x-api-key" not in headers
        assert all(sandbox.payer.api_key not in value for value in headers.values())


async def test_user_auth_and_event_hooks_keep_working(serve):
    async with Sandbox() as sandbox:
        await _auth_and_hooks(sandbox, serve)


async def _auth_and_hooks(sandbox: Sandbox, serve: Any) -> None:
    recorder = Recorder(sandbox.gate)
    url = await serve(recorder)
    seen_requests: list[str] = []
    seen_statuses: list[int] = []

    async def on_request(request: httpx.Request) -> None:
        seen_requests.append(request.url.path)

    async def on_response(response: httpx.Response) -> None:
        seen_statuses.append(response.status_code)

    client = httpx.AsyncClient(
        auth=("user", "pass"),
        event_hooks={"request": [on_request], "response": [on_response]},
    )
    async with with_eur_payment(client, payment_options(sandbox)) as client:
        response = await client.get(url + "/weather")
    assert response.status_code == 200
    assert seen_requests == ["/weather"] and seen_statuses == [200]
    assert all(h["authorization"].startswith("Basic ") for _, _, h in recorder.requests)


async def test_installing_twice_does_not_wrap_twice(sandbox, payer, options_for):
    client = httpx.AsyncClient(mounts={"http://127.0.0.1": httpx.AsyncHTTPTransport()})
    assert with_eur_payment(client, options_for(payer)) is client
    assert with_eur_payment(client, options_for(payer, max_amount_per_payment="0.50")) is client
    for transport in [client._transport, *client._mounts.values()]:
        assert isinstance(transport, PaymentTransport)
        assert not isinstance(transport.wrapped, PaymentTransport)
        assert transport.options.max_amount_per_payment["EUR"] == Decimal("0.50")
    async with client:
        assert (await client.get(sandbox.url("/weather"))).status_code == 200
    assert len(bank_payments(sandbox, payer)) == 1


async def test_mapping_options_with_camel_case_keys(sandbox, payer):
    options = {
        "apiKey": payer.api_key,
        "fromAccount": payer.code,
        "apiUrl": sandbox.payment_api_url,
        "maxAmountPerPayment": "0.20",
    }
    async with with_eur_payment(httpx.AsyncClient(), options) as client:
        assert (await client.get(sandbox.url("/weather"))).status_code == 200
        with pytest.raises(AmountLimitExceeded):
            await client.get(sandbox.url("/report"))


async def test_one_shot_body_is_refused_before_paying(sandbox, payer, options_for):
    async def upload():
        yield b"hello "
        yield b"world"

    async with with_eur_payment(httpx.AsyncClient(), options_for(payer)) as client:
        with pytest.raises(UnreplayableRequest):
            await client.post(sandbox.url("/echo"), content=upload())
        response = await client.post(sandbox.url("/echo"), content=b"hello world")
    assert response.content == b"hello world"
    assert len(bank_payments(sandbox, payer)) == 1  # only the replayable one paid


async def test_concurrent_paid_requests_each_pay_once(sandbox, payer, options_for):
    import anyio

    results: list[int] = []
    async with with_eur_payment(httpx.AsyncClient(), options_for(payer)) as client:

        async def fetch() -> None:
            results.append((await client.get(sandbox.url("/weather"))).status_code)

        async with anyio.create_task_group() as group:
            for _ in range(20):
                group.start_soon(fetch)
    assert results == [200] * 20
    assert len(bank_payments(sandbox, payer)) == 20
    assert sandbox.balance(payer) == Decimal("8.00")


async def test_payments_are_logged_without_secrets(sandbox, payer, options_for, caplog):
    caplog.set_level(logging.DEBUG)
    async with with_eur_payment(httpx.AsyncClient(), options_for(payer)) as client:
        await client.get(sandbox.url("/weather"))
    paid = [r for r in caplog.records if r.name == "x402_client" and "paid" in r.getMessage()]
    assert paid and "0.10 EUR" in paid[0].getMessage()
    assert payer.api_key not in caplog.text
    options = options_for(payer)
    assert payer.api_key not in repr(options) and payer.api_key not in str(options)
