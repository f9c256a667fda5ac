"""The rules of delivering a proof, as tables: what each answer to the paid retry decides
(`_delivery.Delivery`), what a delivery that ends unserved tells the caller about the money
(`_deliver`), what a refusal's reason is read from, and what each rail says of itself."""

from __future__ import annotations

import base64
import json
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

import httpx
import pytest

from tests.factories import delivery
from x402_client import (
    PaymentNotConfirmed,
    PaymentOptions,
    PaymentOutcomeUnknown,
    PaymentVerificationFailed,
)
from x402_client._flow.payment import Delivering, LogicalRequest, Payer, PayFresh, delivering
from x402_client._protocol.delivery import Decision, Step
from x402_client._protocol.settlement import failure_reason, receipt_of, settlement_of
from x402_client._protocol.types import Paid, PaymentIntent

# (status, the 402's reason) -> the step a fresh delivery takes
ANSWERS = [
    (200, None, Step.SERVED),
    (204, None, Step.SERVED),
    (302, None, Step.SERVED),
    (402, "Payment not confirmed (status: Open)", Step.RETRY),
    (402, "Payment request already used", Step.PAY_FRESH),
    (402, "Payment request expired", Step.PAY_FRESH),
    (402, "Invalid signature", Step.REFUSED),
    # a session's merchant sees its channel otherwise: its corrective 402 is paid
    (402, "invalid_batch_settlement_evm_cumulative_amount_mismatch", Step.PAY_FRESH),
    (402, "invalid_batch_settlement_evm_channel_busy", Step.REFUSED),
    (402, None, Step.REFUSED),
    (404, None, Step.NOT_DELIVERED),
    (409, None, Step.NOT_DELIVERED),
    (429, None, Step.NOT_DELIVERED),
    (500, None, Step.RETRY),
    (503, None, Step.RETRY),
]


@pytest.mark.parametrize(("status", "reason", "step"), ANSWERS)
def test_each_answer_decides_one_step(status: int, reason: str | None, step: Step):
    assert delivery().answered(status, reason).step is step


# (answers in order) -> the last step: the rules remember what came before
SEQUENCES = [
    ([(500, None), (402, "Payment request already used")], Step.UNKNOWN),
    # after a 5xx the merchant may have charged this very voucher: no second payment
    ([(500, None), (402, "invalid_batch_settlement_evm_cumulative_amount_mismatch")], Step.UNKNOWN),
    ([(500, None), (500, None), (500, None)], Step.UNKNOWN),
    ([(402, "Payment not confirmed (status: Open)")] * 2, Step.NOT_CONFIRMED),
    ([(402, "Payment not confirmed (status: Open)"), (200, None)], Step.SERVED),
]


@pytest.mark.parametrize(("answers", "step"), SEQUENCES)
def test_sequences_of_answers(answers: list[tuple[int, str | None]], step: Step):
    machine = delivery(confirmation_attempts=2, merchant_error_retries=2)
    decision = None
    for status, reason in answers:
        decision = machine.answered(status, reason)
    assert decision is not None and decision.step is step


# (sends on the wire counted below the client, per send of its own) -> what "already used" decides
RE_SENDS = [
    ([1], Step.PAY_FRESH),  # the proof went out once: the spec's fresh payment
    ([0], Step.PAY_FRESH),  # a transport that never writes the body (MockTransport)
    ([2], Step.UNKNOWN),  # a layer below re-sent it: an unseen answer may have consumed it
]


@pytest.mark.parametrize(("reads", "step"), RE_SENDS)
def test_already_used_after_a_re_send_below_is_never_a_licence_to_pay(reads: list[int], step: Step):
    machine = delivery(merchant_error_retries=2)
    (count,) = reads
    assert machine.answered(402, "Payment request already used", sent=count).step is step


def test_a_connect_error_after_a_re_send_below_is_not_never_sent():
    machine = delivery(merchant_error_retries=2)
    decision = machine.failed_in_transit(never_sent=True, error="ConnectError", sent=2)
    assert decision.step is Step.UNKNOWN


INTENT = PaymentIntent(
    rail="euro",
    scheme="euro",
    network="provider:mainnet",
    asset="EURO",
    asset_symbol="EURO",
    amount=Decimal("0.10"),
    currency="EUR",
    pay_to="ACC_M",
    resource="https://merchant.example/paid",
)


def _delivering(*, moves_first: bool, resend: bool) -> Delivering:
    request = httpx.Request("GET", "https://merchant.example/paid")
    paid = Paid(proof="the-proof", payment_request_code="pr_1")
    made = receipt_of(INTENT, paid, datetime(2026, 1, 1, tzinfo=timezone.utc), 1)
    options = PaymentOptions(
        api_key="k",
        from_account="ACC_P",
        api_url="https://api.example",
        confirmation_attempts=3,
    )

    async def send(request: httpx.Request) -> httpx.Response:
        raise AssertionError("nothing is sent")

    guard = LogicalRequest(request)
    return delivering(
        guard, request, b"", send, INTENT, paid,
        options=options, moves_first=moves_first, made=made, resend=resend,
    )  # fmt: skip


# (step, money moves before the proof, a re-sent proof) -> (what the caller gets, money_moved,
# the words of its message)
ENDINGS: list[tuple[Step, bool, bool, type, Any, str]] = [
    (Step.PAY_FRESH, True, False, PayFresh, None, ""),
    (Step.PAY_FRESH, False, False, PayFresh, None, ""),
    (Step.UNKNOWN, True, False, PaymentOutcomeUnknown, True, "why; the payment was made"),
    (Step.UNKNOWN, True, True, PaymentOutcomeUnknown, True, "why"),
    (Step.UNKNOWN, False, False, PaymentOutcomeUnknown, None, "why"),
    (
        Step.NOT_CONFIRMED,
        True,
        False,
        PaymentNotConfirmed,
        True,
        "the merchant still says 'why' after 3 attempts; the payment was made; re-send "
        "the proof later",
    ),
    (
        Step.NOT_CONFIRMED,
        True,
        True,
        PaymentNotConfirmed,
        True,
        "the merchant still says 'why' after 3 attempts; the payment behind this proof has "
        "not been confirmed (or never made)",
    ),
    (
        Step.REFUSED,
        True,
        False,
        PaymentVerificationFailed,
        True,
        "the merchant refused the payment proof: why",
    ),
    (
        Step.REFUSED,
        False,
        False,
        PaymentVerificationFailed,
        None,
        "the merchant refused the payment proof: why",
    ),
]


@pytest.mark.parametrize(
    ("reason", "first", "kind"),
    [
        ("Payment request already used", True, PayFresh),  # the spec's one fresh payment
        ("expired", False, PayFresh),
        ("authorization already used", False, PaymentOutcomeUnknown),
        ("invalid_exact_evm_nonce_already_used", False, PaymentOutcomeUnknown),
    ],
)
def test_a_used_signed_authorization_is_no_licence_to_pay_again(
    reason: str, first: bool, kind: type
):
    # A signed authorization "already used" was settled, by this merchant or whoever used
    # it: the money may have moved, and paying fresh could pay twice for one request.
    delivering = _delivering(moves_first=first, resend=False)
    decision = delivering.machine.answered(402, reason, sent=1)
    ended = delivering.ended(decision)
    assert type(ended) is kind
    if isinstance(ended, PaymentOutcomeUnknown):
        assert ended.money_moved is None and "not paying again" in str(ended)


@pytest.mark.parametrize(("step", "first", "resend", "kind", "moved", "message"), ENDINGS)
def test_what_an_unserved_delivery_tells_the_caller(
    step: Step, first: bool, resend: bool, kind: type, moved: Any, message: str
):
    ended = _delivering(moves_first=first, resend=resend).ended(Decision(step, reason="why"))
    assert type(ended) is kind
    if isinstance(ended, PayFresh):
        assert (ended.reason, ended.proof) == ("why", "the-proof")
        return
    assert ended.money_moved is moved
    assert str(ended).startswith(message)
    assert ended.proof == "the-proof"


def _b64(data: Any) -> str:
    return base64.b64encode(json.dumps(data).encode()).decode()


# (body, headers) -> the reason a refusal gives
REASONS = [
    (b'{"error": "Invalid signature"}', {}, "Invalid signature"),
    (
        b"",
        {"X-PAYMENT-RESPONSE": _b64({"errorReason": "insufficient_funds"})},
        "insufficient_funds",
    ),
    (b"", {"PAYMENT-RESPONSE": _b64({"errorMessage": "nonce used"})}, "nonce used"),
    (b"{}", {"PAYMENT-REQUIRED": _b64({"x402Version": 2, "error": "expired"})}, "expired"),
    (b"{}", {"PAYMENT-REQUIRED": "%%%"}, None),
    (b"not json", {}, None),
]


@pytest.mark.parametrize(("body", "headers", "reason"), REASONS)
def test_the_reason_of_a_refusal(body: bytes, headers: dict[str, str], reason: str | None):
    assert failure_reason(body, httpx.Headers(headers)) == reason


# headers -> the settlement a receipt carries
SETTLEMENTS = [
    ({}, None),
    ({"X-PAYMENT-RESPONSE": _b64({"success": True})}, {"success": True}),
    ({"PAYMENT-RESPONSE": _b64({"transaction": "0xab"})}, {"transaction": "0xab"}),
    ({"X-PAYMENT-RESPONSE": _b64([1])}, {"value": [1]}),
    ({"X-PAYMENT-RESPONSE": "%%%"}, {"raw": "%%%"}),
]


@pytest.mark.parametrize(("headers", "settlement"), SETTLEMENTS)
def test_the_settlement_of_an_answer(headers: dict[str, str], settlement: Any):
    assert settlement_of(httpx.Headers(headers)) == settlement


# rail -> (money moves before the proof, frames its own proof, resumes transactions)
RAILS = {
    "euro": (True, True, False),
    "evm-permit": (False, True, False),
    "eip3009": (False, False, False),
    "permit2": (False, False, False),
    "upto": (False, False, False),
    "session": (False, False, False),
    "bridge": (True, True, True),
}


def test_each_rail_says_how_it_pays():
    options = PaymentOptions(
        api_key="k",
        from_account="ACC_P",
        api_url="https://api.example",
        evm={"private_key": "0x" + "11" * 32, "rpc_urls": {137: "http://127.0.0.1:1"}},
    )
    rails = Payer(options).rails
    said = {
        rail.name: (
            rail.money_moves_before_proof,
            rail.frames_own_proof,
            rail.resumes_transactions,
        )
        for rail in rails
    }
    assert said == RAILS
