"""A re-sent proof finishes only the payment it was made for.

A proof re-sent by hand (`extensions={"x402": {"proof": ...}}`, the MCP `fetch` tool's
`proof`) that a merchant serves closes the payment it belongs to, so recovery leaves it
alone. That holds only where the proof was paid: the journaled request's origin (scheme,
host, port), answering a 402 that asks for the same payment (network, asset, payTo,
amount). An agent led to send payment A's proof to another origin that echoes a 402 and
answers 200 makes a new request: it books, frees and closes nothing, and its receipt and
the MCP tool's answer say so. Real sockets, the sandbox bank's payments counted, a real
state file.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import bank_payments
from tests.merchants import Reply, ScriptedMerchant, Seen
from x402_client import (
    PaymentOutcomeUnknown,
    payments,
    with_eur_payment,
)
from x402_client._state.shared import state_of

pytestmark = pytest.mark.anyio


def merchant_a(m: ScriptedMerchant, seen: Seen) -> Reply:
    """Sells /paid for 0.10 and /other for 0.20; answers 503 while `down`."""
    amount = "0.20" if seen.path == "/other" else "0.10"
    if seen.proof is None:
        return m.challenge(m.entry(amount))
    if m.state.get("down"):
        return Reply(503, {"error": "down"})
    if seen.path == "/other":
        return Reply(200, {"other": True})  # serves anything: it is not the proof's 402
    valid, reason = m.verify(seen.proof)
    return Reply(200, {"paid": True}) if valid else m.challenge(m.entry(amount), error=reason)


def echoing(m: ScriptedMerchant, seen: Seen) -> Reply:
    """Another origin: a 402 like A's (same payTo and amount), and 200 to any proof."""
    if seen.proof is None:
        return m.challenge(m.entry("0.10"))
    return Reply(200, {"echoed": True})


async def unfinished_euro_payment(sandbox, payer, options_for, serve, tmp_path) -> tuple[Any, ...]:
    a = ScriptedMerchant(sandbox.bank, sandbox.merchant.code, merchant_a)
    a.state["down"] = True
    a_url = await serve(a)
    options = options_for(payer, state_path=tmp_path / "state.sqlite3", merchant_error_retries=0)
    client = with_eur_payment(httpx.AsyncClient(), options)
    with pytest.raises(PaymentOutcomeUnknown) as caught:
        await client.get(a_url + "/paid")
    assert caught.value.proof
    (record,) = await payments(options).unfinished()
    return a, a_url, options, client, caught.value.proof, record


async def test_a_proof_sent_to_another_origin_closes_nothing(
    sandbox, payer, options_for, serve, tmp_path
):
    a, _a_url, options, client, proof, record = await unfinished_euro_payment(
        sandbox, payer, options_for, serve, tmp_path
    )
    b_url = await serve(ScriptedMerchant(sandbox.bank, sandbox.merchant.code, echoing))
    try:
        response = await client.get(b_url + "/paid", extensions={"x402": {"proof": proof}})
        assert response.json() == {"echoed": True}
        assert [r.id for r in await payments(options).unfinished()] == [record.id]
        (entry,) = payment_ledger_entries(options)
        assert not entry.delivered  # payment A is still to be delivered
        receipt = response.extensions["x402_payment"]
        assert (receipt.reused, receipt.payments, receipt.closed_payment) == (True, 0, None)

        # Payment A is delivered where it was paid, by recovery.
        a.state["down"] = False
        (recovered,) = await payments(client).recover_all()
        assert recovered.status == "delivered", recovered.reason
    finally:
        await client.aclose()
    assert len(bank_payments(sandbox, payer)) == 1
    state_of(options).close()


async def test_a_proof_answering_a_402_for_another_payment_closes_nothing(
    sandbox, payer, options_for, serve, tmp_path
):
    a, a_url, options, client, proof, record = await unfinished_euro_payment(
        sandbox, payer, options_for, serve, tmp_path
    )
    a.state["down"] = False
    try:
        # Same origin, but its 402 asks 0.20, not the 0.10 the proof paid.
        other = await client.get(a_url + "/other", extensions={"x402": {"proof": proof}})
        assert [r.id for r in await payments(options).unfinished()] == [record.id]
        assert other.extensions["x402_payment"].closed_payment is None
        # Where it was paid, for what it paid: it finishes payment A.
        paid = await client.get(a_url + "/paid", extensions={"x402": {"proof": proof}})
        assert paid.json() == {"paid": True}
        assert paid.extensions["x402_payment"].closed_payment == record.id
        assert await payments(options).unfinished() == []
    finally:
        await client.aclose()
    assert len(bank_payments(sandbox, payer)) == 1
    state_of(options).close()


def payment_ledger_entries(options: Any) -> list[Any]:

    return list(payments(options).ledger.entries())
