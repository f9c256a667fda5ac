"""The outcome rules of one payment attempt (`_record.outcome_of`), as a table: what the
ledger says of the money, by how far the payment got and how it ended."""

from __future__ import annotations

import pytest

from x402_client import (
    BudgetExceeded,
    InsufficientFunds,
    PaymentOutcomeUnknown,
    PaymentVerificationFailed,
)
from x402_client._protocol.delivery import outcome_of, refused_money_moved

CANCELLED = BaseException("cancelled")  # an interruption: not an error of ours
UNTYPED = RuntimeError("disk full")

# (what ended it, the rail was called, a proof exists, money moves before the proof) -> outcome
TABLE = [
    # before the rail is called nothing can have moved, whatever ended it
    (BudgetExceeded("over"), False, False, True, "failed"),
    (UNTYPED, False, False, True, "failed"),
    (CANCELLED, False, False, True, "failed"),
    # the rail was called, no proof: its typed refusals moved nothing
    (InsufficientFunds("no"), True, False, True, "failed"),
    (InsufficientFunds("no"), True, False, False, "failed"),
    # ... a lost answer may have paid
    (PaymentOutcomeUnknown("lost"), True, False, True, "unknown"),
    (PaymentOutcomeUnknown("lost"), True, False, False, "unknown"),
    # ... an interruption may have paid on a pay-first rail, not on a signing one
    (UNTYPED, True, False, True, "unknown"),
    (CANCELLED, True, False, True, "unknown"),
    (UNTYPED, True, False, False, "failed"),
    # a proof exists: paid on a pay-first rail, may still be settled on a signing one
    (PaymentVerificationFailed("refused", reason="r"), True, True, True, "paid"),
    (PaymentVerificationFailed("refused", reason="r"), True, True, False, "unknown"),
    (None, True, True, True, "paid"),
    (None, True, True, False, "unknown"),
    (CANCELLED, True, True, False, "unknown"),
]


@pytest.mark.parametrize(("exc", "called", "proved", "first", "outcome"), TABLE)
def test_the_outcome_of_an_attempt(exc, called, proved, first, outcome):
    assert outcome_of(exc, rail_called=called, proved=proved, moves_first=first) == outcome


def test_a_refused_proof_moved_money_only_on_a_pay_first_rail():
    assert refused_money_moved(True) is True
    assert refused_money_moved(False) is None
