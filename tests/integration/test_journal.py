"""The durable journal in the payment flow, and recovery from it (in one process; the
crash matrix in `test_crash_matrix.py` kills real payer processes)."""

from __future__ import annotations

import json
from decimal import Decimal
from urllib.parse import urlencode

import httpx
import pytest

from tests.conftest import bank_payments, register_secrets
from tests.merchants import Reply, ScriptedMerchant, Seen
from x402_client import (
    Budget,
    BudgetExceeded,
    PaymentOutcomeUnknown,
    payments,
    with_eur_payment,
)
from x402_client._state.shared import state_of
from x402_eur_sandbox import Fault

pytestmark = pytest.mark.anyio


async def test_a_paid_request_is_journaled_with_its_codes(sandbox, payer, options_for, tmp_path):
    options = options_for(payer, state_path=tmp_path / "state.sqlite3")
    async with with_eur_payment(httpx.AsyncClient(), options) as client:
        response = await client.get(sandbox.url("/weather"))
    receipt = response.extensions["x402_payment"]
    journal = state_of(options).journal
    assert journal is not None
    (record,) = await journal.payments()
    assert (record.outcome, record.delivered) == ("paid", True)
    assert record.payment_request_code == receipt.payment_request_code
    assert record.proof == receipt.proof and record.amount == Decimal("0.10")
    assert receipt.asset_symbol == record.asset_symbol == "EURO"
    assert [s.step for s in record.steps][:3] == ["intent", "noted", "proof"]
    assert await payments(options).unfinished() == []
    assert payer.api_key not in str(record.to_json())
    state_of(options).close()


async def test_budgets_hold_across_restarts(sandbox, payer, options_for, tmp_path):
    path = tmp_path / "state.sqlite3"
    first = options_for(payer, state_path=path, budgets=[Budget("0.10", window=86400)])
    async with with_eur_payment(httpx.AsyncClient(), first) as client:
        assert (await client.get(sandbox.url("/weather"))).status_code == 200
    state_of(first).close()
    # a new process would build new options on the same file
    second = options_for(payer, state_path=path, budgets=[Budget("0.10", window=86400)])
    async with with_eur_payment(httpx.AsyncClient(), second) as client:
        with pytest.raises(BudgetExceeded):
            await client.get(sandbox.url("/weather"))
    state_of(second).close()
    assert len(bank_payments(sandbox, payer)) == 1


async def test_an_undelivered_payment_is_recovered_without_paying_again(
    sandbox, payer, options_for, serve, tmp_path
):
    def script(m: ScriptedMerchant, seen: Seen) -> Reply:
        if seen.proof is None:
            return m.challenge(m.entry())
        if m.state.get("down", True):
            return Reply(503, {"error": "try later"})
        valid, reason = m.verify(seen.proof)
        return Reply(200, {"served": True}) if valid else m.challenge(error=reason)

    merchant = ScriptedMerchant(sandbox.bank, sandbox.merchant.code, script)
    url = await serve(merchant)
    path = tmp_path / "state.sqlite3"
    options = options_for(payer, state_path=path, merchant_error_retries=0)
    async with with_eur_payment(httpx.AsyncClient(), options) as client:
        with pytest.raises(PaymentOutcomeUnknown):
            await client.get(url + "/paid", headers={"X-Trace": "t-1"})
    state_of(options).close()

    merchant.state["down"] = False
    restarted = options_for(payer, state_path=path)
    (record,) = await payments(restarted).unfinished()
    assert record.payment_request_code and record.proof
    async with with_eur_payment(httpx.AsyncClient(), restarted) as client:
        (recovery,) = await payments(client).recover_all()
    assert recovery.status == "delivered" and recovery.response.json() == {"served": True}
    # One truth: the record it carries is the payment as recovery left it.
    assert (recovery.record.outcome, recovery.record.delivered) == ("paid", True)
    assert recovery.record.state == "delivered" and "pending" not in repr(recovery)
    assert merchant.requests[-1].headers["x-trace"] == "t-1"
    assert await payments(restarted).unfinished() == []
    assert len(bank_payments(sandbox, payer)) == 1
    state_of(restarted).close()


async def test_a_paid_body_that_breaks_off_stays_unfinished_and_is_recovered(
    sandbox, payer, options_for, serve, tmp_path
):
    verified: list[str] = []

    async def app(scope, receive, send) -> None:
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        merchant = ScriptedMerchant(sandbox.bank, sandbox.merchant.code)
        proof = headers.get("x-payment")
        if proof is None:
            reply = merchant.challenge(merchant.entry())
            await send({"type": "http.response.start", "status": 402, "headers": []})
            await send({"type": "http.response.body", "body": reply.encoded()})
            return
        if not verified:  # first delivery: verify, then break off mid-body
            verified.append(proof)
            merchant.verify(proof)
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-length", b"1000")],
                }
            )
            await send({"type": "http.response.body", "body": b"partial", "more_body": True})
            raise RuntimeError("the merchant's connection dies")
        # the re-sent proof: the merchant recognises what it already verified
        body = b'{"served": "again"}' if proof in verified else b'{"error": "unknown proof"}'
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})

    url = await serve(app)
    options = options_for(payer, state_path=tmp_path / "state.sqlite3")
    async with with_eur_payment(httpx.AsyncClient(), options) as client:
        with pytest.raises(PaymentOutcomeUnknown, match="broke off"):
            await client.get(url + "/paid")
        (record,) = await payments(options).unfinished()
        assert (record.outcome, record.delivered) == ("paid", False)
        (recovery,) = await payments(client).recover_all()
    assert recovery.status == "delivered" and recovery.response.json() == {"served": "again"}
    assert len(bank_payments(sandbox, payer)) == 1
    state_of(options).close()


def _state_bytes(path) -> bytes:
    """Every byte of the state file and its -wal, as the disk holds them."""
    files = [path, path.with_name(path.name + "-wal")]
    return b"".join(file.read_bytes() for file in files if file.exists())


async def test_a_paid_body_s_credentials_stay_out_of_the_journal_and_recovery_asks_for_it(
    sandbox, payer, options_for, tmp_path
):
    """A paid login form and a paid JSON body, left undelivered (the merchant answers 502
    to the paid request): the state file never holds the password; recovery re-sends
    neither with a redacted body, says so, and delivers each once it is given its body."""
    register_secrets("s3cret")
    form = {"username": "alice", "password": "s3cret"}
    document = {"user": {"password": "s3cret"}, "q": 1}
    path = tmp_path / "state.sqlite3"
    options = options_for(payer, state_path=path, merchant_error_retries=0)
    sandbox.faults.arm("resource", Fault("status", "before", status=502, times=2))
    try:
        async with with_eur_payment(httpx.AsyncClient(), options) as client:
            for sent in ({"data": form}, {"json": document}):
                with pytest.raises(PaymentOutcomeUnknown, match="502"):
                    await client.post(sandbox.url("/echo"), **sent)
    finally:
        sandbox.faults.clear()
        state_of(options).close()
    assert b"s3cret" not in _state_bytes(path)
    assert len(bank_payments(sandbox, payer)) == 2
    restarted = options_for(payer, state_path=path)
    try:
        posted, as_json = await payments(restarted).unfinished()
        assert posted.request_body == b"username=alice&password=REDACTED"
        assert json.loads(as_json.request_body) == {"user": {"password": "REDACTED"}, "q": 1}
        assert posted.request_body_redacted and as_json.request_body_redacted
        resource_calls = sandbox.faults.calls.get("resource", 0)
        async with with_eur_payment(httpx.AsyncClient(), restarted) as client:
            recoveries = await payments(client).recover_all()
            assert [r.status for r in recoveries] == ["pending", "pending"]
            for recovery in recoveries:
                assert "held credentials" in recovery.reason and "content=" in recovery.reason
                assert f"x402-eur resume {recovery.record.id} -d" in recovery.reason
                assert recovery.response is None
            assert sandbox.faults.calls.get("resource", 0) == resource_calls  # nothing sent
            done = [
                await payments(client).recover(posted.id, content=urlencode(form)),
                await payments(client).recover(as_json.id, content=json.dumps(document).encode()),
            ]
        assert [r.status for r in done] == ["delivered", "delivered"], [r.reason for r in done]
        assert done[0].response.content == b"username=alice&password=s3cret"
        assert json.loads(done[1].response.content) == document
        assert await payments(restarted).unfinished() == []
    finally:
        state_of(restarted).close()
    assert b"s3cret" not in _state_bytes(path)
    assert len(bank_payments(sandbox, payer)) == 2  # paid once each, delivered once each
