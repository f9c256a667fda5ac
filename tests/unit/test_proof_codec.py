"""The hot path's hand-built pieces are what the generic path would have built.

The euro proof and the payment-API body are written with f-strings (a paid request spends
no time building models for them); these properties pin them to `encode_proof` and
`_json.dumps`, for any strings and amounts the wire can carry. So are the shared JSON
decoder (`_json.loads`) and the settled receipt (`receipt_of`).
"""

from __future__ import annotations

import dataclasses
import json
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from decimal import Decimal

import anyio
import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.factories import euro_intent
from x402_client._protocol import exact_json as _json
from x402_client._protocol.models import EuroPayload, PaymentProof
from x402_client._protocol.proof import decode_proof, encode_proof
from x402_client._protocol.secret import SecretStr
from x402_client._protocol.settlement import receipt_of
from x402_client._protocol.types import Paid, PaymentReceipt
from x402_client._rails.euro import euro_proof
from x402_client._state.payment_api import PaymentAPI, payment_request_body

texts = st.text(max_size=40)
amounts = st.decimals(min_value=Decimal("0.01"), max_value=Decimal("1000000"), places=2)


@given(texts, texts, texts)
def test_euro_proof_is_the_model_encoding(scheme: str, network: str, code: str) -> None:
    expected = encode_proof(
        PaymentProof(
            scheme=scheme,
            network=network,
            payload=EuroPayload(payment_request_code=code).to_wire(),
        )
    )
    assert euro_proof(scheme, network, code) == expected
    decoded = decode_proof(expected)
    assert (decoded.scheme, decoded.network, decoded.payload) == (
        scheme,
        network,
        {"paymentRequestCode": code},
    )


@given(texts, texts, amounts)
def test_payment_body_is_the_generic_encoding(account: str, code: str, amount: Decimal) -> None:
    body = {
        "paymentFrom": account,
        "toType": "PaymentRequestCode",
        "paymentTo": code,
        "amount": amount,
    }
    framed = payment_request_body(account, code, amount)
    assert framed == _json.dumps(body)
    assert _json.loads(framed) == body


def test_payment_call_is_what_the_client_would_build() -> None:
    """The payment call is built from parts merged once; it must be the request
    `AsyncClient.build_request` makes (URL under any base path, the client's default
    headers). The key is on it only while the transport writes it."""
    on_the_wire: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        on_the_wire.append(request.headers.get("x-api-key"))
        return httpx.Response(200, json={})

    for base in ("http://127.0.0.1:8000", "http://127.0.0.1:8000/api", "https://p.test/v1/"):
        on_the_wire.clear()
        api = PaymentAPI(
            base,
            SecretStr("the-key"),
            timeout=30.0,
            max_body_bytes=64 * 1024,
            max_connections=1,
            transport=httpx.MockTransport(handler),
        )
        expected = api._client.build_request(
            "POST",
            "/transaction/payment",
            content=b"{}",
            headers={"Content-Type": "application/json"},
        )
        call = api._payment_request(b"{}")
        assert str(call.url) == str(expected.url)
        assert list(call.headers.multi_items()) == list(expected.headers.multi_items())
        assert call.extensions["timeout"] == expected.extensions["timeout"]
        assert "x-api-key" not in call.headers
        anyio.run(api._transport.handle_async_request, call)
        assert on_the_wire == ["the-key"]
        assert "x-api-key" not in call.headers


# --- the shared JSON decoder and the settled receipt --------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.decimals(allow_nan=False, allow_infinity=False, places=4)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)


@given(json_values, st.sampled_from(["utf-8", "utf-16", "utf-16-le", "utf-32-be", "str"]))
def test_loads_reads_what_json_loads_reads(value: object, encoding: str) -> None:
    """`_json.loads` keeps one decoder for every call; it must read what `json.loads` with
    the same hooks reads, in every encoding `json.loads` detects."""
    text = _json.dumps(value).decode()
    data: str | bytes = text if encoding == "str" else text.encode(encoding)
    expected = json.loads(data, parse_float=Decimal)
    assert _json.loads(data) == expected
    assert _json.loads(data) == _json.loads(text)


@pytest.mark.parametrize(
    "data",
    [b"", b"{", b"[1,]", b"NaN", b"[Infinity]", b"\xff\xfe\x00", "\ufeff{}", b'{"a":1}x', "1e"],
)
def test_loads_refuses_what_json_loads_refuses(data: str | bytes) -> None:
    with pytest.raises(_json.JSONError):
        _json.loads(data)


def test_loads_is_safe_across_threads() -> None:
    """The decoder is shared, as `json.loads`'s own default decoder is: calls from many
    threads at once each read their own document."""
    docs = [_json.dumps({f"k{i}": [Decimal(f"{i}.5")] * 20, "i": i}) for i in range(8)]

    def read(i: int) -> bool:
        return all(
            _json.loads(docs[i]) == {f"k{i}": [Decimal(f"{i}.5")] * 20, "i": i} for _ in range(300)
        )

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(read, range(8)))


def test_receipt_with_settlement_keeps_every_field() -> None:
    """The receipt `_deliver` makes with the merchant's settlement is what
    `dataclasses.replace` would make of the receipt without it: only the settlement and
    the transaction it names differ."""
    intent = euro_intent("1.25", pay_to="ACC_MERCHANT", resource="https://merchant.test/paid")
    paid = Paid(
        proof="proof-value",
        payment_request_code="pr_1",
        transaction_code="QP1",
        blockchain_tx_id="0xchain",
        payer="0xpayer",
    )
    at = datetime(2026, 11, 22, tzinfo=timezone.utc)
    base = receipt_of(intent, paid, at, 3)
    settlement = {"success": True, "transaction": "0xabc"}
    made = receipt_of(intent, paid, base.paid_at, base.payments, settlement)
    assert made == dataclasses.replace(base, settlement=settlement, tx_hash="0xabc")
    assert made.proof == base.proof  # not compared by ==, checked on its own
    untouched = {f.name for f in dataclasses.fields(PaymentReceipt)} - {"settlement", "tx_hash"}
    assert all(getattr(made, name) == getattr(base, name) for name in untouched)
    assert receipt_of(intent, paid, at, 3, {"success": True}).tx_hash is None
