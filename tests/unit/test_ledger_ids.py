"""Payment ids: a short start of one names it."""

import re
from decimal import Decimal

from x402_client._protocol.ledger import PaymentLedger
from x402_client._protocol.types import PaymentIntent

INTENT = PaymentIntent(
    rail="euro",
    scheme="euro",
    network="n",
    asset="EURO",
    asset_symbol="EURO",
    amount=Decimal("0.10"),
    currency="EUR",
    pay_to="ACC_X",
    resource="http://127.0.0.1:9/paid",
)


def test_the_payments_of_one_process_differ_in_the_first_characters_of_their_ids() -> None:
    ledger = PaymentLedger()
    ids = [ledger.open(INTENT).id for _ in range(200)]
    assert all(re.fullmatch(r"[0-9a-f]{32}", id) for id in ids), ids[:3]
    # 200 random 32-bit starts all differ but once in about 200,000 runs
    assert len({id[:8] for id in ids}) == len(ids)
