"""`X402Error.recovery()`: None when no money moved; else what finishes the payment
without paying again, with the Python hint a library user reads."""

from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal

import pytest

from x402_client import (
    AmountLimitExceeded,
    BridgeTransferFailed,
    BudgetExceeded,
    ConfigurationError,
    DestinationRefused,
    InsufficientFunds,
    InvalidChallenge,
    NoSatisfiableOption,
    PaymentAPIError,
    PaymentNotConfirmed,
    PaymentOutcomeUnknown,
    PaymentReceipt,
    PaymentRejectedByHook,
    PaymentVerificationFailed,
    UnreplayableRequest,
    X402Error,
)
from x402_client._protocol.errors import BridgeResumeRefused, RecoveryAdvice, SpenderMismatch


def _receipt() -> PaymentReceipt:
    return PaymentReceipt(
        rail="euro",
        scheme="exact",
        network="euro",
        asset="EURO",
        amount=Decimal("0.10"),
        currency="EUR",
        pay_to="ACC_MERCHANT",
        resource="http://merchant.test/paid",
        paid_at=datetime(2026, 1, 1, tzinfo=timezone.utc),
        proof="PROOF",
        payment_request_code="PR1",
    )


NO_MONEY_MOVED = [
    X402Error("x"),
    ConfigurationError("x"),
    DestinationRefused("x", host="h", port=1),
    InvalidChallenge("x"),
    NoSatisfiableOption("x"),
    AmountLimitExceeded("x"),
    BudgetExceeded("x"),
    PaymentRejectedByHook("x"),
    UnreplayableRequest("x"),
    SpenderMismatch("x"),
    BridgeResumeRefused("x", transaction_code="T1", reason="not found"),
    PaymentAPIError("x", code="C"),
    InsufficientFunds("x"),
    BridgeTransferFailed("x", transaction_code="T1", status="Cancelled"),
]


@pytest.mark.parametrize("error", NO_MONEY_MOVED, ids=lambda e: type(e).__name__)
def test_an_error_that_moved_no_money_has_no_recovery(error: X402Error) -> None:
    assert error.money_moved is False
    assert error.recovery() is None


def test_an_unknown_bridge_outcome_is_resumed_from_its_transaction_code() -> None:
    error = PaymentOutcomeUnknown("lost", transaction_code="T42")
    advice = error.recovery()
    assert advice == RecoveryAdvice(money_moved=None, outcome="unknown", transaction_code="T42")
    assert advice.hint == (
        "do not pay again; payments(client).recover(error), or the same request with "
        "extensions={'x402': {'resume_transaction_code': 'T42'}} (pays nothing)"
    )
    assert str(advice) == advice.hint


def test_an_unknown_outcome_with_a_proof_and_a_journal_id_names_both() -> None:
    error = PaymentOutcomeUnknown("lost", proof="PROOF", payment_request_code="PR1")
    error.payment_id = "3f9c2a77"
    advice = error.recovery()
    assert advice is not None
    assert (advice.payment_id, advice.proof, advice.payment_request_code) == (
        "3f9c2a77",
        "PROOF",
        "PR1",
    )
    assert advice.hint == (
        "do not pay again; payments(client).recover('3f9c2a77') finishes it; or the same "
        "request with extensions={'x402': {'proof': error.proof}} (pays nothing)"
    )


def test_an_unknown_outcome_with_nothing_to_resend_says_what_identifies_it() -> None:
    advice = PaymentOutcomeUnknown("lost", payment_request_code="PR1").recovery()
    assert advice is not None and advice.money_moved is None
    assert advice.hint == (
        "do not pay again: payment request PR1 identifies the payment for the provider"
    )


@pytest.mark.parametrize("kind", [PaymentVerificationFailed, PaymentNotConfirmed])
def test_a_refused_proof_is_paid_and_resending_it_is_safe(kind: type) -> None:
    receipt = _receipt()
    error = kind("refused", reason="expired", receipt=receipt, proof="PROOF")
    advice = error.recovery()
    assert advice == RecoveryAdvice(
        money_moved=True,
        outcome="paid",
        proof="PROOF",
        payment_request_code="PR1",
        receipts=(receipt,),
    )
    assert advice.hint == (
        "do not pay again; the same request with extensions={'x402': {'proof': error.proof}} "
        "(pays nothing)"
    )


def test_a_refused_signed_authorization_may_have_moved_money() -> None:
    error = PaymentVerificationFailed("refused", reason="r", money_moved=None)
    advice = error.recovery()
    assert advice is not None and advice.money_moved is None and advice.outcome == "paid"
    assert advice.hint == "do not pay again: payments(client).ledger lists the payment"
    receipt = _receipt()
    paid = PaymentVerificationFailed("refused", reason="r", receipt=receipt).recovery()
    assert paid is not None
    assert paid.hint == "do not pay again: the receipts identify the payment for the merchant"


def test_the_mcp_server_gives_the_advice_as_fields_an_agent_can_use() -> None:
    from x402_client.mcp._results import _error_json

    error = PaymentOutcomeUnknown("lost", proof="PROOF", transaction_code="T42")
    error.payment_id = "3f9c2a77"
    body = _error_json(error)
    assert body["paymentId"] == "3f9c2a77"
    assert body["recoverWith"] == [{"proof": "PROOF"}, {"resume_transaction_code": "T42"}]
    assert body["moneyMoved"] is None and body["recovery"].startswith("Do not pay again.")
    assert "recoverWith" not in _error_json(BudgetExceeded("over"))


def test_the_command_line_gives_the_advice_as_the_command_to_run() -> None:
    from x402_client.cli._render import _next_step

    error = PaymentOutcomeUnknown("lost", transaction_code="T42")
    assert _next_step(error, journaled=False) == (
        "no state file (--no-state): keep the codes above to claim it"
    )
    error.payment_id = "3f9c2a77"
    assert _next_step(error, journaled=True) == (
        "finish it without paying again: x402-eur resume 3f9c2a77"
    )
    assert _next_step(BudgetExceeded("over"), journaled=True) is None


def test_the_command_line_leaves_out_the_python_instruction_of_a_message() -> None:
    from argparse import Namespace

    from x402_client.cli._render import _failure_text

    error = PaymentOutcomeUnknown(
        "bridge transaction T42: the wait timed out; the EURO payment was made. Resume "
        "with extensions={'x402': {'resume_transaction_code': 'T42'}} (or "
        "payments(client).recover(error)); do not pay again",
        transaction_code="T42",
    )
    assert _failure_text(Namespace(), error) == (
        "PaymentOutcomeUnknown: bridge transaction T42: the wait timed out; the EURO payment "
        "was made"
    )
    assert "extensions={'x402'" in str(error)  # Python callers keep their hint
