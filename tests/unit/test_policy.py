"""The pure pieces of the payment core, without I/O: the selection policy and the delivery
state machine."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from tests.factories import delivery
from x402_client import (
    AmountLimitExceeded,
    BudgetExceeded,
    InvalidChallenge,
    NoSatisfiableOption,
    PaymentOptions,
)
from x402_client._flow.payment import Payer
from x402_client._protocol.delivery import Step
from x402_client._protocol.policy import EXPIRY_SKEW, SkipReason, no_candidate_error, select
from x402_client._protocol.rail_interface import RequestSettings

NOW = 1_700_000_000
OPTIONS = PaymentOptions(api_key="k", from_account="ACC_P", api_url="https://api.example")


def euro(amount: str = "0.10", **changes: Any) -> dict[str, Any]:
    entry = {
        "scheme": "euro",
        "network": "provider:mainnet",
        "asset": "EURO",
        "amount": amount,
        "payTo": "ACC_M",
        "paymentRequestCode": f"pr_{amount.replace('.', '')}",
        "expiresAt": NOW + 300,
    }
    entry.update(changes)
    return entry


def choose(accepts: list[Any], options: PaymentOptions = OPTIONS, **kw: Any):
    payer = Payer(options)
    return select(
        accepts,
        rails=payer.rails,
        options=options,
        settings=kw.pop("settings", RequestSettings()),
        headroom=kw.pop("headroom", {}),
        now=kw.pop("now", NOW),
        resource="https://merchant.example/paid",
    )


def reasons(selection) -> list[tuple[int, str]]:
    return [(s.index, s.reason.value) for s in selection.skipped]


def test_limits_skip_entries_and_keep_the_merchants_order_for_the_rest():
    selection = choose([euro("5.00"), euro("0.10"), euro("0.20")])
    assert [c.index for c in selection.candidates] == [1, 2]
    assert reasons(selection) == [(0, "over_cap")]


def test_a_per_request_cap_only_lowers():
    lowered = choose([euro("0.10")], settings=RequestSettings(limits={"EUR": Decimal("0.05")}))
    assert reasons(lowered) == [(0, "over_cap")]
    raised = choose([euro("2.00")], settings=RequestSettings(limits={"EUR": Decimal("5")}))
    assert reasons(raised) == [(0, "over_cap")]


def test_headroom_skips_what_the_budget_cannot_take_but_not_a_resumed_payment():
    assert reasons(choose([euro("0.30")], headroom={"EUR": Decimal("0.20")})) == [
        (0, "over_budget")
    ]
    assert choose([euro("0.30")], headroom={"USD": Decimal("0")}).candidates


def test_expiry_allows_the_documented_clock_skew():
    fresh = choose([euro(expiresAt=NOW - EXPIRY_SKEW + 1)])
    stale = choose([euro(expiresAt=NOW - EXPIRY_SKEW - 1)])
    assert fresh.candidates and reasons(stale) == [(0, "expired")]


def test_unreadable_unknown_and_unconfigured_entries_are_explained():
    evm = {
        "scheme": "exact",
        "network": "eip155:137",
        "asset": "0x" + "11" * 20,
        "maxAmountRequired": "100000",
        "payTo": "0x" + "22" * 20,
        "extra": {"symbol": "EURQ", "spender": "0x" + "33" * 20},
    }
    selection = choose([euro(amount="-1"), {"scheme": "lightning"}, evm, "junk"])
    assert reasons(selection) == [
        (0, "malformed"),
        (1, "unknown_scheme"),
        (2, "unpayable"),
        (3, "malformed"),
    ]
    assert selection.readable == 2


def test_prefer_reorders_and_selector_picks_one():
    options = OPTIONS.model_copy(update={"prefer": ("ACC_X",)})
    assert [c.index for c in choose([euro(), euro("0.20")], options).candidates] == [0, 1]
    picky = OPTIONS.model_copy(update={"selector": lambda intents: intents[-1]})
    selection = choose([euro(), euro("0.20")], picky)
    assert [c.index for c in selection.candidates] == [1]
    assert reasons(selection) == [(0, "not_chosen")]


def test_resuming_only_considers_the_bridge():
    selection = choose([euro()], settings=RequestSettings(resume_transaction_code="QP1"))
    assert reasons(selection) == [(0, "not_resumable")]


@pytest.mark.parametrize(
    ("accepts", "headroom", "error"),
    [
        (["junk"], {}, InvalidChallenge),
        ([{"scheme": "lightning"}], {}, NoSatisfiableOption),
        ([{"scheme": "lightning"}, euro("9.00")], {}, AmountLimitExceeded),
        ([euro("0.50")], {"EUR": Decimal("0.10")}, BudgetExceeded),
        ([euro("0.50"), euro("9")], {"EUR": Decimal("0.10")}, BudgetExceeded),
    ],
)
def test_the_error_for_an_unpaid_402_names_the_deciding_limit(accepts, headroom, error):
    selection = choose(accepts, headroom=headroom)
    assert selection.candidates == []
    raised = no_candidate_error(selection.skipped, selection.readable)
    assert type(raised) is error
    assert raised.money_moved is False and len(raised.skipped) == len(accepts)


# --- the delivery state machine -------------------------------------------------------------


def test_served_at_once():
    assert delivery().answered(200).step is Step.SERVED


def test_not_confirmed_backs_off_then_gives_up():
    machine = delivery(confirmation_attempts=4, confirmation_wait=0.1, confirmation_max_wait=0.3)
    waits = [machine.answered(402, "Payment not confirmed (status: Open)") for _ in range(4)]
    assert [d.step for d in waits] == [Step.RETRY] * 3 + [Step.NOT_CONFIRMED]
    assert [d.wait for d in waits[:3]] == [0.1, 0.2, 0.3]


def test_used_or_expired_pays_fresh_unless_the_merchant_may_have_consumed_the_proof():
    assert delivery().answered(402, "Payment request already used").step is Step.PAY_FRESH
    assert delivery().answered(402, "Payment request expired").step is Step.PAY_FRESH
    machine = delivery(merchant_error_retries=1)
    assert machine.answered(503).step is Step.RETRY
    assert machine.answered(402, "Payment request already used").step is Step.UNKNOWN


def test_server_errors_are_retried_with_the_same_proof_then_unknown():
    machine = delivery(merchant_error_retries=2)
    assert [machine.answered(500).step for _ in range(3)] == [
        Step.RETRY,
        Step.RETRY,
        Step.UNKNOWN,
    ]


def test_transit_failures():
    machine = delivery(merchant_error_retries=1)
    assert machine.failed_in_transit(never_sent=True, error="ConnectError").step is Step.RETRY
    assert machine.failed_in_transit(never_sent=True, error="ConnectError").step is Step.UNKNOWN
    assert delivery().failed_in_transit(never_sent=False, error="ReadError").step is Step.UNKNOWN


def test_any_other_402_is_a_refusal_with_the_reason():
    decision = delivery().answered(402, "Invalid signature")
    assert (decision.step, decision.reason) == (Step.REFUSED, "Invalid signature")
    assert delivery().answered(402, None).reason == "402 without a reason"


def test_skip_reason_values_are_stable():
    assert SkipReason("over_cap") is SkipReason.OVER_CAP
