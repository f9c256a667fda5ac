"""Every fault at every step of the euro rail: the ledger and the balances must agree.

Invariants checked after each run:
- no money moved twice for one intent (at most one payment that was not refunded);
- every payment that moved money is in the ledger as `paid` or `unknown`;
- a ledger entry `failed` moved no money;
- after a fault that left the outcome unknown, re-sending the proof is safe and completes
  the fetch without a second payment.
"""

from __future__ import annotations

from decimal import Decimal

import httpx
import pytest

from tests.conftest import payments
from tests.sandboxes import payment_options
from x402_client import (
    PaymentFailed,
    PaymentNotConfirmed,
    PaymentOptions,
    PaymentOutcomeUnknown,
    PaymentVerificationFailed,
    X402Error,
    payment_ledger,
    with_eur_payment,
)
from x402_eur_sandbox import Fault, Sandbox

pytestmark = pytest.mark.anyio

# (endpoint, fault, what the client must say)
MATRIX = [
    ("payment", Fault("status", "before", status=503), PaymentOutcomeUnknown),
    ("payment", Fault("status", "after", status=500), PaymentOutcomeUnknown),
    ("payment", Fault("drop", "before"), PaymentOutcomeUnknown),
    ("payment", Fault("drop", "after"), PaymentOutcomeUnknown),
    # the payment API never answers (the fault holds the call until the sandbox stops)
    ("payment", Fault("timeout", "before"), PaymentOutcomeUnknown),
    ("payment", Fault("timeout", "after"), PaymentOutcomeUnknown),
    ("payment", Fault("delay", "after", delay=0.2), None),
    ("x402_verify", Fault("status", "before", status=500), None),  # merchant 500 -> re-send
    ("resource", Fault("status", "before", status=502), None),  # re-sent, then served
    ("resource", Fault("status", "before", status=502, times=5), PaymentOutcomeUnknown),
    ("resource", Fault("status", "after", status=500), PaymentOutcomeUnknown),
    ("resource", Fault("drop", "before"), PaymentOutcomeUnknown),
    ("resource", Fault("drop", "after"), PaymentOutcomeUnknown),
    ("x402_pay", Fault("status", "before", status=500), None),  # no 402 at all: passed through
]


#: How long the client waits for a payment API that does not answer, in the `timeout`
#: cases: the call never answers, so the client always gives up; this only has to be long
#: enough for the call to be sent whole on a busy machine.
GIVE_UP = 3.0


def _ids(case: tuple[str, Fault, object]) -> str:
    endpoint, fault, _ = case
    return f"{endpoint}-{fault.kind}-{fault.when}-{fault.times}"


def fault_options(sandbox: Sandbox, fault: Fault) -> PaymentOptions:
    """The client's options for one case: it gives up on the payment API only where the
    fault makes the API hang; elsewhere the API gets the default 30 s, so that a slow
    machine never turns a case into a timeout."""
    return payment_options(
        sandbox,
        payment_api_timeout=GIVE_UP if fault.kind == "timeout" else 30.0,
        confirmation_attempts=3,
        confirmation_wait=0.01,
    )


@pytest.mark.parametrize("case", MATRIX, ids=[_ids(c) for c in MATRIX])
async def test_euro_rail_under_fault(case):
    endpoint, fault, expected = case
    async with Sandbox() as sandbox:
        sandbox.faults.arm(endpoint, fault)
        options = fault_options(sandbox, fault)
        async with with_eur_payment(httpx.AsyncClient(timeout=30), options) as client:
            error: X402Error | None = None
            response: httpx.Response | None = None
            try:
                response = await client.get(sandbox.url("/weather"))
            except X402Error as exc:
                error = exc
            ledger = payment_ledger(client).entries()

            if expected is None:
                assert error is None, error
                assert response is not None
                if endpoint == "x402_pay":
                    assert response.status_code == 500  # the merchant's own failure
                else:
                    assert response.status_code == 200
            else:
                assert isinstance(error, expected), error

            moved = [t for t in payments(sandbox, sandbox.payer) if t.status != "Cancelled"]
            assert len(moved) <= 1, "money moved twice for one intent"
            by_code = {e.payment_request_code: e for e in ledger}
            for transaction in moved:
                entry = by_code.get(transaction.payment_request_code)
                assert entry is not None and entry.outcome in ("paid", "unknown"), ledger
            for entry in ledger:
                if entry.outcome == "failed":
                    assert entry.payment_request_code not in {t.payment_request_code for t in moved}
            balance = sandbox.balance(sandbox.payer)
            assert balance == Decimal("100.00") - Decimal("0.10") * len(moved)

            if isinstance(error, PaymentOutcomeUnknown):
                assert error.proof, "an unknown outcome must carry the proof to re-send"
                assert error.payment_request_code and error.payment_request_code.startswith("pr_")
                sandbox.faults.clear()
                try:
                    again = await client.get(
                        sandbox.url("/weather"), extensions={"x402": {"proof": error.proof}}
                    )
                except PaymentNotConfirmed:
                    # re-sending revealed that the payment never happened
                    assert not moved
                except PaymentVerificationFailed as exc:
                    # the merchant consumed the proof before the fault: served once, lost
                    assert "already used" in exc.reason.lower()
                    assert fault.when == "after" or fault.times > 1
                else:
                    assert again.status_code == 200
                    if moved:
                        assert payment_ledger(client).entries()[0].outcome == "paid"
                # re-sending never pays again
                after = [t for t in payments(sandbox, sandbox.payer) if t.status != "Cancelled"]
                assert len(after) == len(moved)


async def test_payment_api_refusal_before_money_moves_is_failed_not_unknown():
    async with Sandbox() as sandbox:
        sandbox.faults.arm("payment", Fault("status", "before", status=409))
        async with with_eur_payment(httpx.AsyncClient(), payment_options(sandbox)) as client:
            with pytest.raises(PaymentFailed):
                await client.get(sandbox.url("/weather"))
            (entry,) = payment_ledger(client).entries()
        assert entry.outcome == "failed"
        assert payments(sandbox, sandbox.payer) == []


async def test_unreachable_payment_api_is_failed():
    async with Sandbox() as sandbox:
        options = payment_options(sandbox, api_url="http://127.0.0.1:9")  # nothing listens
        async with with_eur_payment(httpx.AsyncClient(), options) as client:
            with pytest.raises(PaymentFailed, match="unreachable"):
                await client.get(sandbox.url("/weather"))
            assert payment_ledger(client).entries()[0].outcome == "failed"


async def test_merchant_that_keeps_answering_402_cannot_make_the_client_loop_or_repay():
    # The proof is consumed but the merchant keeps saying "already used": one fresh
    # payment at most, then an error.
    async with Sandbox() as sandbox:
        calls = {"n": 0}
        real_verify = sandbox.bank.verify_payment_request

        def lying_verify(code: str, merchant: str):
            calls["n"] += 1
            real_verify(code, merchant)  # consumes it
            return False, "Payment request already used", None

        sandbox.bank.verify_payment_request = lying_verify  # type: ignore[method-assign]
        async with with_eur_payment(httpx.AsyncClient(), payment_options(sandbox)) as client:
            with pytest.raises(PaymentVerificationFailed, match="already used"):
                await client.get(sandbox.url("/weather"))
        assert len(payments(sandbox, sandbox.payer)) == 2
        assert calls["n"] == 2
