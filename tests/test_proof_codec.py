"""The hot path's hand-framed JSON writes the same bytes as the generic, model-based path.

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
from x402_client._payment_api import payment_request_body
from x402_client._rails.euro import euro_proof

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
