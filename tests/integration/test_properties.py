"""Property-based tests: for any input the client either pays correctly or raises an
`X402Error`, and never pays for input it could not fully validate."""

from __future__ import annotations

import base64
import contextlib
import json
import re
from decimal import Decimal
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import bank_payments
from tests.sandboxes import payment_options
from x402_client import (
    InvalidChallenge,
    PaymentAPIError,
    PaymentFailed,
    PaymentNotConfirmed,
    PaymentOutcomeUnknown,
    X402Error,
    with_eur_payment,
)
from x402_client._protocol.amounts import AmountError, parse_amount, parse_atomic, to_atomic
from x402_client._protocol.challenge import parse_payment_required
from x402_client._protocol.exact_json import ProofError
from x402_client._protocol.models import (
    EuroAcceptEntry,
    ExactAcceptEntry,
    InvalidEntry,
    PaymentProof,
    parse_accept,
)
from x402_client._protocol.proof import decode_proof, encode_proof
from x402_client._protocol.provider import (
    find_transaction,
    provider_errors,
    transaction_code_of,
    unwrap,
)
from x402_eur_sandbox import ServedApp

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.text(max_size=20)
    | st.floats(allow_nan=False, allow_infinity=False)
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=20,
)
amount_texts = st.one_of(
    st.text(max_size=25),
    st.from_regex(r"-?[0-9]{0,17}(\.[0-9]{0,9})?([eE][+-]?[0-9]{1,3})?", fullmatch=True),
    st.decimals(allow_nan=True, allow_infinity=True).map(str),
)

euro_entries = st.fixed_dictionaries(
    {
        "scheme": st.just("euro"),
        "network": st.sampled_from(["provider:mainnet", "other"]),
        "asset": st.sampled_from(["EURO", "EURQ", 5]),
        "amount": amount_texts | json_scalars,
        "payTo": st.text(max_size=10) | json_scalars,
        "paymentRequestCode": st.from_regex(r"pr_[a-z0-9]{1,12}", fullmatch=True) | json_scalars,
    },
    optional={"expiresAt": st.integers() | json_scalars, "extra": json_values},
)
exact_entries = st.fixed_dictionaries(
    {
        "scheme": st.just("exact"),
        "network": st.sampled_from(["eip155:1", "eip155:137", "ledgera:mainnet", "eip155:8453"]),
        "asset": st.text(max_size=12),
        "maxAmountRequired": amount_texts | json_scalars,
        "payTo": st.text(max_size=10),
    },
    optional={"maxTimeoutSeconds": json_scalars, "extra": json_values},
)
bodies = st.fixed_dictionaries(
    {"x402Version": st.sampled_from([2, 2, 1, "2", None])},
    optional={
        "error": json_scalars,
        "accepts": st.lists(euro_entries | exact_entries | json_values, max_size=4) | json_values,
    },
)


@given(amount_texts | json_scalars)
def test_amounts_parse_exactly_or_raise(value: Any) -> None:
    try:
        amount = parse_amount(value)
    except AmountError:
        return
    assert isinstance(amount, Decimal) and amount > 0
    assert re.fullmatch(r"[0-9]{1,15}(\.[0-9]{1,6})?", format(amount, "f"))
    assert Decimal(to_atomic(amount)) / 10**6 == amount


@given(amount_texts | json_scalars)
def test_atomic_amounts_parse_exactly_or_raise(value: Any) -> None:
    try:
        atomic = parse_atomic(value)
    except AmountError:
        return
    assert isinstance(atomic, int) and atomic > 0 and str(atomic) == value.lstrip("0")


@given(bodies | json_values)
def test_any_402_body_parses_or_is_invalid(body: Any) -> None:
    raw = json.dumps(body).encode()
    try:
        challenge = parse_payment_required(raw)
    except InvalidChallenge:
        return
    assert challenge.x402_version == 2 and challenge.accepts
    for entry in challenge.accepts:
        try:
            parsed = parse_accept(entry)
        except InvalidEntry:
            continue
        if isinstance(parsed, EuroAcceptEntry):
            assert parsed.amount > 0 and isinstance(entry["amount"], str)
            assert parsed.payment_request_code.startswith("pr_")
        elif isinstance(parsed, ExactAcceptEntry):
            assert parsed.max_amount_required > 0 and isinstance(entry["maxAmountRequired"], str)


@given(st.binary(max_size=200) | st.text(max_size=200))
def test_any_header_decodes_to_a_proof_or_raises(value: bytes | str) -> None:
    try:
        proof = decode_proof(value)
    except ProofError:
        return
    assert isinstance(proof, PaymentProof)


@given(
    st.sampled_from(["euro", "exact"]),
    st.text(min_size=1, max_size=20),
    st.dictionaries(st.text(max_size=10), st.text(max_size=30), max_size=4),
)
def test_proofs_round_trip_in_every_base64_form(scheme: str, network: str, payload: dict) -> None:
    proof = PaymentProof(scheme=scheme, network=network, payload=payload)
    header = encode_proof(proof)
    raw = base64.urlsafe_b64decode(header + "=" * (-len(header) % 4))
    for form in (header, base64.urlsafe_b64encode(raw).decode(), base64.b64encode(raw).decode()):
        assert decode_proof(form) == proof


@given(json_values)
def test_payment_api_answers_never_crash_the_parsers(body: Any) -> None:
    unwrap(body)
    for error in provider_errors(body):
        assert error.code is None or isinstance(error.code, str)
    code = transaction_code_of(body)
    assert code is None or isinstance(code, str)
    find_transaction(body, "QP1")


# --- the same properties through the whole client, over real sockets ----------------------


class Scripted:
    """An ASGI app whose answer is set per example."""

    def __init__(self) -> None:
        self.status = 402
        self.body = b"{}"

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await send(
            {
                "type": "http.response.start",
                "status": self.status,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": self.body})


@pytest.fixture(scope="module")
def scripted_server():
    import asyncio
    import threading

    app = Scripted()
    served = ServedApp(app, "scripted")
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(served.start(), loop).result(10)
    yield app, served.url
    asyncio.run_coroutine_threadsafe(served.stop(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(bodies | json_values)
def test_client_never_pays_a_hostile_402(sandbox, scripted_server, body: Any) -> None:
    import anyio

    app, url = scripted_server
    app.status, app.body = 402, json.dumps(body).encode()
    payer = sandbox.bank.open_account("10.00")

    async def run() -> None:
        options = payment_options(sandbox, api_key=payer.api_key, from_account=payer.code)
        async with with_eur_payment(httpx.AsyncClient(), options) as client:
            with contextlib.suppress(X402Error):
                await client.get(url)

    anyio.run(run)
    # The scripted merchant's payment request codes do not exist at the provider, so any
    # payment attempt is refused there: nothing may have moved.
    assert bank_payments(sandbox, payer) == []
    assert sandbox.balance(payer) == Decimal("10.00")


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.sampled_from([200, 201, 301, 400, 402, 404, 409, 422, 500, 502, 503]),
    json_values | st.binary(max_size=50),
)
def test_payment_api_answers_are_classified(
    sandbox, scripted_server, status: int, body: Any
) -> None:
    import anyio

    app, api_url = scripted_server
    app.status = status
    app.body = body if isinstance(body, bytes) else json.dumps(body).encode()
    caught: list[BaseException] = []

    async def run() -> None:
        options = payment_options(sandbox, api_url=api_url, confirmation_attempts=1)
        async with with_eur_payment(httpx.AsyncClient(), options) as client:
            try:
                await client.get(sandbox.url("/weather"))
            except X402Error as exc:
                caught.append(exc)

    anyio.run(run)
    (error,) = caught
    if 200 <= status < 300:
        # the fake API said "paid", the real merchant disagrees: not confirmed
        assert isinstance(error, PaymentNotConfirmed)
    elif status >= 500:
        assert isinstance(error, PaymentOutcomeUnknown)
    else:
        assert isinstance(error, PaymentAPIError) and isinstance(error, PaymentFailed)
        assert error.status_code == status
