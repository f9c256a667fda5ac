"""Wire models, the proof codec and the pure challenge logic: no I/O."""

import base64
import json
from decimal import Decimal

import pytest

from x402_client import InvalidChallenge
from x402_client._protocol.challenge import (
    VerifierReason,
    classify_reason,
    parse_failure_body,
    parse_payment_required,
)
from x402_client._protocol.exact_json import JSONError, ProofError, dumps, loads
from x402_client._protocol.models import (
    BridgePayload,
    EuroAcceptEntry,
    EvmPermitPayload,
    ExactAcceptEntry,
    InvalidEntry,
    PaymentProof,
    SettlementRequest,
    SettlementResult,
    VerificationResult,
    parse_accept,
)
from x402_client._protocol.proof import decode_proof, encode_proof

EURO = {
    "scheme": "euro",
    "network": "provider:mainnet",
    "asset": "EURO",
    "amount": "0.10",
    "payTo": "ACC_MERCHANT",
    "paymentRequestCode": "pr_abc123",
    "expiresAt": 1767225600,
    "facilitator": "https://mcp.example/x402",
}
EXACT = {
    "scheme": "exact",
    "network": "eip155:137",
    "asset": "0x" + "ab" * 20,
    "maxAmountRequired": "100000",
    "payTo": "0x" + "cd" * 20,
    "maxTimeoutSeconds": 300,
    "resource": "https://m.example/r",
    "description": "d",
    "mimeType": "application/json",
    "facilitator": "https://f.example",
    "extra": {"symbol": "EURQ", "spender": "0x" + "ef" * 20},
}


def body(**changes: object) -> bytes:
    data = {"x402Version": 2, "error": "Payment required", "accepts": [EURO]}
    data.update(changes)
    return json.dumps(data).encode()


def test_parses_a_spec_402() -> None:
    challenge = parse_payment_required(body())
    entry = parse_accept(challenge.accepts[0])
    assert isinstance(entry, EuroAcceptEntry)
    assert entry.amount == Decimal("0.10")
    assert entry.payment_request_code == "pr_abc123"
    assert entry.expires_at == 1767225600


def test_unknown_fields_are_tolerated() -> None:
    entry = parse_accept({**EURO, "somethingNew": {"x": 1}})
    assert isinstance(entry, EuroAcceptEntry)
    challenge = parse_payment_required(body(extraTopLevel=True))
    assert challenge.x402_version == 2


def test_exact_entry_with_extra() -> None:
    entry = parse_accept(EXACT)
    assert isinstance(entry, ExactAcceptEntry)
    assert entry.max_amount_required == 100000
    assert entry.extra == {"symbol": "EURQ", "spender": "0x" + "ef" * 20}


def test_unknown_scheme_is_none_not_error() -> None:
    assert parse_accept({"scheme": "upto", "network": "x"}) is None


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"[]",
        b'"text"',
        b"{}",
        b"null",
        body(x402Version=1),
        body(x402Version="2"),
        body(accepts=[]),
        body(accepts={}),
        body(accepts=None),
        body(error=5),
        b'{"x402Version": 2, "accepts": [NaN]}',
    ],
)
def test_malformed_bodies_are_invalid_challenges(raw: bytes) -> None:
    with pytest.raises(InvalidChallenge):
        parse_payment_required(raw)


@pytest.mark.parametrize(
    "change",
    [
        {"amount": "-0.10"},
        {"amount": 0.1},
        {"amount": "1e-1"},
        {"amount": "0.1234567"},
        {"amount": "NaN"},
        {"amount": "0"},
        {"amount": None},
        {"amount": "ten"},
        {"payTo": 5},
        {"paymentRequestCode": "abc"},
        {"paymentRequestCode": None},
        {"expiresAt": "soon"},
        {"expiresAt": 1.5},
    ],
)
def test_bad_euro_entries(change: dict[str, object]) -> None:
    with pytest.raises(InvalidEntry):
        parse_accept({**EURO, **change})


@pytest.mark.parametrize("missing", ["amount", "payTo", "paymentRequestCode", "asset", "network"])
def test_missing_required_fields(missing: str) -> None:
    with pytest.raises(InvalidEntry):
        parse_accept({k: v for k, v in EURO.items() if k != missing})


@pytest.mark.parametrize(
    "change",
    [
        {"maxAmountRequired": "-1"},
        {"maxAmountRequired": 100000},
        {"maxAmountRequired": "0.1"},
        {"maxAmountRequired": "1e5"},
        {"maxTimeoutSeconds": "300"},
        {"extra": "x"},
    ],
)
def test_bad_exact_entries(change: dict[str, object]) -> None:
    with pytest.raises(InvalidEntry):
        parse_accept({**EXACT, **change})


def test_proof_codec_emits_unpadded_base64url() -> None:
    proof = PaymentProof(
        scheme="euro", network="provider:mainnet", payload={"paymentRequestCode": "pr_abc"}
    )
    header = encode_proof(proof)
    assert "=" not in header and "+" not in header and "/" not in header
    decoded = json.loads(base64.urlsafe_b64decode(header + "=" * (-len(header) % 4)))
    assert decoded == {
        "x402Version": 2,
        "scheme": "euro",
        "network": "provider:mainnet",
        "payload": {"paymentRequestCode": "pr_abc"},
    }
    # compact JSON, no spaces
    assert b" " not in base64.urlsafe_b64decode(header + "=" * (-len(header) % 4))


@pytest.mark.parametrize(
    "encode",
    [
        lambda raw: base64.urlsafe_b64encode(raw).decode().rstrip("="),
        lambda raw: base64.urlsafe_b64encode(raw).decode(),
        lambda raw: base64.b64encode(raw).decode(),
    ],
)
def test_proof_codec_decodes_all_three_forms(encode) -> None:
    # a payload whose base64 contains '+'/'/' in the standard alphabet and needs padding
    raw = json.dumps(
        {
            "x402Version": 2,
            "scheme": "euro",
            "network": "provider:mainnet",
            "payload": {"paymentRequestCode": "pr_???>>>~~~"},
        }
    ).encode()
    proof = decode_proof(encode(raw))
    assert proof.payload == {"paymentRequestCode": "pr_???>>>~~~"}


@pytest.mark.parametrize("bad", ["", "!!!!", "e30", base64.b64encode(b"[1]").decode(), "a" * 20000])
def test_proof_codec_refuses_junk(bad: str) -> None:
    with pytest.raises(ProofError):
        decode_proof(bad)


def test_payload_variants_round_trip() -> None:
    bridge = BridgePayload(
        transaction_code="QP1", blockchain_tx_id="TX", pay_to="ADDR", asset="2768422954"
    )
    assert bridge.to_wire() == {
        "transactionCode": "QP1",
        "blockchainTxId": "TX",
        "payTo": "ADDR",
        "asset": "2768422954",
    }
    permit = EvmPermitPayload.model_validate(
        {
            "owner": "0x1",
            "signature": "0xabcd",
            "permit": {
                "owner": "0x1",
                "spender": "0x2",
                "value": "100000",
                "nonce": 0,
                "deadline": "1767225600",
            },
        }
    )
    assert permit.permit.value == 100000
    assert permit.to_wire()["permit"]["nonce"] == "0"


def test_verification_and_settlement_models() -> None:
    valid = VerificationResult.model_validate(
        loads(b'{"valid": true, "paymentRequestCode": "pr_x", "amount": 0.10}')
    )
    assert valid.amount == Decimal("0.10")
    invalid = VerificationResult.model_validate(
        {"valid": False, "reason": "Payment request expired"}
    )
    assert invalid.reason == "Payment request expired"
    with pytest.raises(ValueError):
        VerificationResult.model_validate({"valid": "yes"})
    settle = SettlementRequest.model_validate(
        {
            "x402Version": 2,
            "paymentPayload": "abc",
            "paymentRequirements": {
                "scheme": "exact",
                "network": "eip155:1",
                "maxAmountRequired": "1",
                "payTo": "0x",
                "asset": "0x",
            },
        }
    )
    assert settle.payment_payload == "abc"
    assert SettlementResult.model_validate({"success": True, "txHash": "0x1"}).tx_hash == "0x1"


@pytest.mark.parametrize(
    ("reason", "kind"),
    [
        ("Payment not confirmed (status: Open)", VerifierReason.NOT_CONFIRMED),
        ("payment NOT CONFIRMED", VerifierReason.NOT_CONFIRMED),
        ("Payment request already used", VerifierReason.USED),
        ("Payment request expired", VerifierReason.EXPIRED),
        ("Signature invalid", VerifierReason.OTHER),
        (None, VerifierReason.OTHER),
        ("invalid_batch_settlement_evm_cumulative_amount_mismatch", VerifierReason.STALE),
        ("invalid_batch_settlement_evm_cumulative_below_claimed", VerifierReason.STALE),
        ("invalid_batch_settlement_evm_cumulative_exceeds_balance", VerifierReason.STALE),
        ("invalid_batch_settlement_evm_channel_not_found", VerifierReason.STALE),
        ("invalid_batch_settlement_evm_channel_busy", VerifierReason.OTHER),
        ("invalid_batch_settlement_evm_voucher_signature", VerifierReason.OTHER),
    ],
)
def test_classify_reason(reason: str | None, kind: VerifierReason) -> None:
    assert classify_reason(reason) is kind


def test_failure_body_is_lenient() -> None:
    assert parse_failure_body(b'{"error": "Payment request expired"}') == (
        "Payment request expired",
        None,
    )
    reason, challenge = parse_failure_body(body(error="Payment request already used"))
    assert reason == "Payment request already used" and challenge is not None
    assert parse_failure_body(b"<html>") == (None, None)


def test_json_keeps_decimals_exact() -> None:
    assert dumps({"amount": Decimal("0.10")}) == b'{"amount":0.10}'
    assert loads(b'{"a": 0.1}')["a"] == Decimal("0.1")
    with pytest.raises(JSONError):
        dumps({"a": 0.1})
    with pytest.raises(JSONError):
        loads(b'{"a": Infinity}')
