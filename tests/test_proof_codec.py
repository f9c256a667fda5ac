"""The hot path's hand-built pieces are what the generic path would have built.

The euro proof and the payment-API body are written with f-strings (a paid request spends
no time building models for them); these properties pin them to `encode_proof` and
`_json.dumps`, for any strings and amounts the wire can carry.
"""

from __future__ import annotations

from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from x402_client import _json, decode_proof, encode_proof
from x402_client._models import EuroPayload, PaymentProof
from x402_client._payment_api import PaymentAPI, payment_request_body
from x402_client._rails.euro import euro_proof
from x402_client._secret import SecretStr

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
    headers), with the key on the wire copy only."""
    for base in ("http://127.0.0.1:8000", "http://127.0.0.1:8000/api", "https://p.test/v1/"):
        api = PaymentAPI(base, SecretStr("the-key"))
        expected = api._client.build_request(
            "POST",
            "/transaction/payment",
            content=b"{}",
            headers={"Content-Type": "application/json"},
        )
        shown = api._payment_request(b"{}", keyed=False)
        wire = api._payment_request(b"{}", keyed=True)
        assert str(shown.url) == str(wire.url) == str(expected.url)
        assert list(shown.headers.multi_items()) == list(expected.headers.multi_items())
        assert "x-api-key" not in shown.headers
        assert wire.headers["x-api-key"] == "the-key"
        assert wire.extensions["timeout"] == expected.extensions["timeout"]
