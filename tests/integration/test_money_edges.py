"""The money path's edges: what a request that paid tells its caller, whatever breaks.

Each test is a way a merchant, the machine or a careless caller can break a paid request:
above the payment transport (httpx's redirect handling, a body read by `send`), beside it
(the journal's disk), or with an answer that is neither the resource nor a 402. The
promise in every case: at most one payment, and every error says truthfully whether money
moved, carries the receipts and its cause, and reaches `on_payment_error`.
Over real sockets against the sandbox; what an EIP-3009 authorization the merchant did not
settle means runs on scripted merchants alone (tests/flow/test_evm_authorizations.py).
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import httpx
import pytest

from tests.conftest import bank_payments
from tests.merchants import Reply, ScriptedMerchant, Seen
from x402_client import (
    Budget,
    InMemoryBudgetStore,
    InvalidChallenge,
    PaymentFailed,
    PaymentOutcomeUnknown,
    PaymentTransport,
    PaymentVerificationFailed,
    X402Error,
    payments,
    with_eur_payment,
)
from x402_client._state.shared import state_of
from x402_client._state.sqlite_store import SqliteStore

pytestmark = pytest.mark.anyio


def redirect(location: str, status: int = 302) -> Reply:
    return Reply(status, b"", {"location": location})


def after_payment(then: Callable[[ScriptedMerchant, Seen], Reply]) -> Any:
    """An honest gate on `/paid` whose paid answer is `then(...)`; other paths also `then`."""

    def script(m: ScriptedMerchant, seen: Seen) -> Reply:
        if seen.path == "/paid":
            if seen.proof is None:
                return m.challenge(m.entry())
            valid, reason = m.verify(seen.proof)
            if not valid:
                return m.challenge(m.entry(), error=reason)
        return then(m, seen)

    return script


class Errors(list[Exception]):
    """What `on_payment_error` heard."""

    def __call__(self, error: Exception) -> None:
        self.append(error)


def assert_paid_once(error: BaseException, sandbox: Any, account: Any, errors: Errors) -> None:
    assert isinstance(error, (PaymentVerificationFailed, PaymentOutcomeUnknown)), repr(error)
    assert error.money_moved is not False
    (receipt,) = error.receipts
    assert receipt.amount == Decimal("0.10") and receipt.payment_request_code
    assert error.__cause__ is not None
    assert errors == [error]
    assert len(bank_payments(sandbox, account)) == 1


# --- 1. truth above the transport ---------------------------------------------------------------


def _loop(m: ScriptedMerchant, seen: Seen) -> Reply:
    return redirect("/b" if seen.path != "/b" else "/a")


def _bad_location(m: ScriptedMerchant, seen: Seen) -> Reply:
    return redirect("http://[::1")


def _long_chain(m: ScriptedMerchant, seen: Seen) -> Reply:
    step = int(seen.path.removeprefix("/step") or 0) if seen.path.startswith("/step") else 0
    return redirect(f"/step{step + 1}")


@pytest.mark.parametrize(
    ("then", "built"),
    [
        (_loop, "with_eur_payment"),
        (_loop, "PaymentTransport"),
        (_bad_location, "with_eur_payment"),
        (_bad_location, "PaymentTransport"),
        (_long_chain, "with_eur_payment"),
    ],
    ids=["loop", "loop-transport", "bad-location", "bad-location-transport", "too-many"],
)
async def test_a_paid_answer_whose_redirects_fail_is_a_money_moved_error(
    sandbox, payer, options_for, serve, then, built
):
    url = await serve(ScriptedMerchant(sandbox.bank, sandbox.merchant.code, after_payment(then)))
    errors = Errors()
    options = options_for(payer, on_payment_error=errors)
    if built == "with_eur_payment":
        client = with_eur_payment(
            httpx.AsyncClient(follow_redirects=True, max_redirects=5), options
        )
    else:
        transport = PaymentTransport(httpx.AsyncHTTPTransport(), options)
        client = httpx.AsyncClient(transport=transport, follow_redirects=True, max_redirects=5)
    async with client:
        with pytest.raises(X402Error) as caught:
            await client.get(url + "/paid")
    assert_paid_once(caught.value, sandbox, payer, errors)
    entry = payments(options).ledger.entries()[-1]
    assert (entry.outcome, entry.delivered) == ("paid", False)


def test_the_sync_client_converts_what_httpx_raises_above_it(sandbox, payer, options_for):
    from tests.integration.test_sync_client import served

    merchant = ScriptedMerchant(sandbox.bank, sandbox.merchant.code, after_payment(_long_chain))
    with served(merchant) as url:
        errors = Errors()
        options = options_for(payer, on_payment_error=errors)
        client = with_eur_payment(httpx.Client(follow_redirects=True, max_redirects=3), options)
        with client, pytest.raises(X402Error) as caught:
            client.get(url + "/paid")
    assert isinstance(caught.value.__cause__, httpx.TooManyRedirects)
    assert_paid_once(caught.value, sandbox, payer, errors)


async def test_a_paid_body_that_breaks_mid_read_is_a_money_moved_error(
    sandbox, payer, options_for, serve
):
    script = after_payment(lambda m, s: Reply(200, {"data": "x" * 5000}, broken=True))
    url = await serve(ScriptedMerchant(sandbox.bank, sandbox.merchant.code, script))
    errors = Errors()
    async with with_eur_payment(
        httpx.AsyncClient(), options_for(payer, on_payment_error=errors)
    ) as client:
        with pytest.raises(PaymentOutcomeUnknown) as caught:
            await client.get(url + "/paid")
    assert caught.value.proof
    assert_paid_once(caught.value, sandbox, payer, errors)


def _used_then(fresh: Reply) -> Any:
    def script(m: ScriptedMerchant, seen: Seen) -> Reply:
        if seen.proof is not None:
            m.verify(seen.proof)  # consumed; the merchant still says "already used"
            return m.challenge(m.entry(), error="Payment request already used")
        if m.state.setdefault("asked", 0):
            return fresh
        m.state["asked"] += 1
        return m.challenge(m.entry())

    return script


async def test_a_fresh_402_that_breaks_mid_read_is_a_money_moved_error(
    sandbox, payer, options_for, serve
):
    broken = Reply(402, {"x402Version": 2, "accepts": [], "pad": "x" * 5000}, broken=True)
    url = await serve(ScriptedMerchant(sandbox.bank, sandbox.merchant.code, _used_then(broken)))
    errors = Errors()
    async with with_eur_payment(
        httpx.AsyncClient(), options_for(payer, on_payment_error=errors)
    ) as client:
        with pytest.raises(X402Error) as caught:
            await client.get(url + "/paid")
    assert isinstance(caught.value.__cause__, httpx.TransportError)
    assert_paid_once(caught.value, sandbox, payer, errors)


async def test_a_fresh_request_that_cannot_connect_is_a_money_moved_error(
    sandbox, payer, options_for, serve, unused_tcp_port
):
    url = await serve(ScriptedMerchant(sandbox.bank, sandbox.merchant.code, _used_then(Reply())))
    sent: list[httpx.Request] = []

    class ThirdRefused(httpx.AsyncHTTPTransport):
        """The merchant's host goes away after the paid answer: the fresh request is sent
        to a loopback port nobody listens on."""

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            sent.append(request)
            if len(sent) == 3:
                request.url = request.url.copy_with(port=unused_tcp_port)
            return await super().handle_async_request(request)

    errors = Errors()
    client = httpx.AsyncClient(transport=ThirdRefused())
    async with with_eur_payment(client, options_for(payer, on_payment_error=errors)) as client:
        with pytest.raises(X402Error) as caught:
            await client.get(url + "/paid")
    assert isinstance(caught.value.__cause__, httpx.ConnectError)
    assert_paid_once(caught.value, sandbox, payer, errors)


@pytest.fixture
def unused_tcp_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _journal_with_short_wait(options: Any, path: Any) -> SqliteStore:
    """The options' journal, waiting at most 0.2 s for another process's lock."""
    state = state_of(options)
    assert state.journal is not None
    state.journal.close()
    state.journal = SqliteStore(path, busy_timeout=0.2)
    return state.journal


def _lock(path: Any) -> sqlite3.Connection:
    """Another process's write transaction on the state file (a second connection)."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("BEGIN IMMEDIATE")
    return conn


async def test_a_journal_that_cannot_be_written_before_paying_pays_nothing(
    sandbox, payer, options_for, tmp_path
):
    path = tmp_path / "state.sqlite3"
    store = InMemoryBudgetStore()
    options = options_for(payer, state_path=path, budgets=[Budget("0.10")], budget_store=store)
    journal = _journal_with_short_wait(options, path)
    locked = _lock(path)
    try:
        async with with_eur_payment(httpx.AsyncClient(), options) as client:
            with pytest.raises(PaymentFailed) as caught:
                await client.get(sandbox.url("/weather"))
            assert caught.value.money_moved is False
            assert "nothing was paid" in str(caught.value)
            assert bank_payments(sandbox, payer) == []
            (status,) = await payments(options).budgets()
            assert status.spent == 0
        locked.rollback()
        # the reservation was given back: the one payment the budget allows still goes
        async with with_eur_payment(httpx.AsyncClient(), options) as client:
            assert (await client.get(sandbox.url("/weather"))).status_code == 200
    finally:
        locked.close()
        journal.close()
    assert len(bank_payments(sandbox, payer)) == 1


async def test_a_journal_locked_during_delivery_still_delivers(
    sandbox, payer, options_for, serve, tmp_path, caplog
):
    path = tmp_path / "state.sqlite3"
    held: list[sqlite3.Connection] = []

    def then(m: ScriptedMerchant, seen: Seen) -> Reply:
        # another process takes the journal's lock while the paid request is answered, and
        # keeps it until the client is done
        held.append(_lock(path))
        return Reply(200, {"served": True})

    url = await serve(ScriptedMerchant(sandbox.bank, sandbox.merchant.code, after_payment(then)))
    options = options_for(payer, state_path=path)
    journal = _journal_with_short_wait(options, path)
    try:
        with caplog.at_level(logging.ERROR, logger="x402_client"):
            async with with_eur_payment(httpx.AsyncClient(), options) as client:
                response = await client.get(url + "/paid")
        assert response.json() == {"served": True}
        assert response.extensions["x402_payment"].amount == Decimal("0.10")
        assert "payment journal could not record" in caplog.text
        (entry,) = payments(options).ledger.entries()
        assert (entry.outcome, entry.delivered) == ("paid", True)
    finally:
        for conn in held:
            conn.rollback()
            conn.close()
        journal.close()
    assert len(held) == 1
    assert len(bank_payments(sandbox, payer)) == 1


# --- 4. paid but not served is not "delivered" --------------------------------------------------


@pytest.mark.parametrize("status", [429, 409, 500, 404])
async def test_a_paid_retry_answered_without_the_resource_is_not_delivered(
    sandbox, payer, options_for, serve, tmp_path, status
):
    url = await serve(
        ScriptedMerchant(
            sandbox.bank,
            sandbox.merchant.code,
            after_payment(lambda m, s: Reply(status, {"error": f"status {status}"})),
        )
    )
    errors = Errors()
    options = options_for(payer, state_path=tmp_path / "state.sqlite3", on_payment_error=errors)
    async with with_eur_payment(httpx.AsyncClient(), options) as client:
        with pytest.raises(X402Error) as caught:
            await client.get(url + "/paid")
    error = caught.value
    assert_money_moved_not_served(error, errors)
    if status != 500:  # a 5xx is re-sent, then "may have been consumed"
        assert isinstance(error, PaymentVerificationFailed) and error.money_moved is True
        assert error.response is not None and error.response.status_code == status
        assert error.response.json() == {"error": f"status {status}"}
    (entry,) = payments(options).ledger.entries()
    assert (entry.outcome, entry.delivered) == ("paid", False)
    # the journal keeps it unfinished, with the proof recovery re-sends
    (record,) = await payments(options).unfinished()
    assert record.proof == error.proof and not record.delivered
    assert len(bank_payments(sandbox, payer)) == 1
    state_of(options).close()


def assert_money_moved_not_served(error: Exception, errors: Errors) -> None:
    assert isinstance(error, (PaymentVerificationFailed, PaymentOutcomeUnknown)), repr(error)
    assert error.proof and error.receipts
    assert errors == [error]


async def test_a_paid_redirect_that_leads_to_an_error_is_not_delivered(
    sandbox, payer, options_for, serve, tmp_path
):
    def then(m: ScriptedMerchant, seen: Seen) -> Reply:
        return redirect("/report") if seen.path == "/paid" else Reply(404, {"error": "gone"})

    url = await serve(ScriptedMerchant(sandbox.bank, sandbox.merchant.code, after_payment(then)))
    errors = Errors()
    options = options_for(payer, state_path=tmp_path / "state.sqlite3", on_payment_error=errors)
    async with with_eur_payment(httpx.AsyncClient(follow_redirects=True), options) as client:
        with pytest.raises(PaymentVerificationFailed) as caught:
            await client.get(url + "/paid")
    assert caught.value.response is not None and caught.value.response.status_code == 404
    assert_paid_once(caught.value, sandbox, payer, errors)
    (entry,) = payments(options).ledger.entries()
    assert (entry.outcome, entry.delivered) == ("paid", False)
    assert [r.proof for r in await payments(options).unfinished()] == [caught.value.proof]
    state_of(options).close()


async def test_a_paid_redirect_the_caller_does_not_follow_is_delivered(
    sandbox, payer, options_for, serve
):
    then = after_payment(lambda m, s: redirect("/report", 303))
    url = await serve(ScriptedMerchant(sandbox.bank, sandbox.merchant.code, then))
    options = options_for(payer)
    async with with_eur_payment(httpx.AsyncClient(), options) as client:
        response = await client.get(url + "/paid")
    assert response.status_code == 303
    assert response.extensions["x402_payment"].amount == Decimal("0.10")
    (entry,) = payments(options).ledger.entries()
    assert (entry.outcome, entry.delivered) == ("paid", True)


# --- 5. budget is spent only on money that can have moved ----------------------------------------


async def test_an_entry_with_deeply_nested_junk_is_refused_and_keeps_no_reservation(
    sandbox, payer, options_for, serve, tmp_path
):
    junk: Any = "x"
    for _ in range(450):
        junk = {"a": junk}

    def script(m: ScriptedMerchant, seen: Seen) -> Reply:
        if seen.path == "/junk":
            return m.challenge(m.entry(extra={"junk": junk}))
        if seen.proof is None:
            return m.challenge(m.entry())
        return Reply(200, {"served": True}) if m.verify(seen.proof)[0] else Reply(402, {})

    url = await serve(ScriptedMerchant(sandbox.bank, sandbox.merchant.code, script))
    options = options_for(payer, state_path=tmp_path / "state.sqlite3", budgets=[Budget("0.10")])
    async with with_eur_payment(httpx.AsyncClient(), options) as client:
        with pytest.raises(InvalidChallenge) as caught:
            await client.get(url + "/junk")
        assert caught.value.money_moved is False
        # the budget of one payment is whole: an honest merchant is paid
        assert (await client.get(url + "/paid")).json() == {"served": True}
    assert len(bank_payments(sandbox, payer)) == 1
    state_of(options).close()


async def test_an_untyped_failure_before_the_rail_gives_the_reservation_back(
    sandbox, payer, options_for, tmp_path, monkeypatch
):
    options = options_for(payer, state_path=tmp_path / "state.sqlite3", budgets=[Budget("0.10")])
    journal = state_of(options).journal
    assert journal is not None
    original = journal.open_payment
    calls: list[int] = []

    async def fails_once(**kwargs: Any) -> str:
        calls.append(1)
        if len(calls) == 1:
            raise RecursionError("maximum recursion depth exceeded")
        return await original(**kwargs)

    monkeypatch.setattr(journal, "open_payment", fails_once)
    async with with_eur_payment(httpx.AsyncClient(), options) as client:
        with pytest.raises(PaymentFailed) as caught:
            await client.get(sandbox.url("/weather"))
        assert caught.value.money_moved is False
        assert isinstance(caught.value.__cause__, RecursionError)
        assert (await client.get(sandbox.url("/weather"))).status_code == 200
    assert len(bank_payments(sandbox, payer)) == 1
    state_of(options).close()


# --- 6. what the command line says ------------------------------------------------------------


def test_the_command_line_says_a_paid_request_was_not_served(sandbox, payer, tmp_path, monkeypatch):
    from tests.integration.test_cli import env_of, run
    from x402_eur_sandbox import Fault

    monkeypatch.setenv("X402_EUR_STATE", str(tmp_path / "state.sqlite3"))
    env = env_of(sandbox, payer)
    sandbox.faults.arm("resource", Fault("status", "before", status=429, times=1))
    try:
        failed = run("fetch", sandbox.url("/weather"), env=env)
    finally:
        sandbox.faults.clear()
    assert failed.returncode == 3, failed.stderr
    first, second = failed.stderr.strip().splitlines()
    assert "PaymentVerificationFailed" in first and "429" in first
    assert second.startswith("x402-eur: money moved;") and "x402-eur resume" in second
    assert failed.stdout == ""
    # the proof is still good: resuming delivers, paying nothing again
    journal_id = second.split("x402-eur resume ")[1].split()[0]
    resumed = run("resume", journal_id, env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert "Amsterdam" in resumed.stdout
    assert len(bank_payments(sandbox, payer)) == 1


# --- 8. a proof re-sent by hand closes its record ------------------------------------------------


async def test_a_proof_re_sent_by_hand_closes_its_record_and_counts_no_payment(
    sandbox, payer, options_for, serve, tmp_path
):

    def script(m: ScriptedMerchant, seen: Seen) -> Reply:
        if seen.proof is None:
            return m.challenge(m.entry())
        if not m.state.get("up"):
            return Reply(503, {"error": "try later"})
        valid, reason = m.verify(seen.proof)
        return Reply(200, {"served": True}) if valid else m.challenge(error=reason)

    merchant = ScriptedMerchant(sandbox.bank, sandbox.merchant.code, script)
    url = await serve(merchant)
    options = options_for(payer, state_path=tmp_path / "state.sqlite3", merchant_error_retries=0)
    async with with_eur_payment(httpx.AsyncClient(), options) as client:
        with pytest.raises(PaymentOutcomeUnknown) as caught:
            await client.get(url + "/paid")
        (record,) = await payments(options).unfinished()
        merchant.state["up"] = True
        response = await client.get(
            url + "/paid", extensions={"x402": {"proof": caught.value.proof}}
        )
        assert response.json() == {"served": True}
        receipt = response.extensions["x402_payment"]
        assert (receipt.reused, receipt.payments) == (True, 0)
        assert receipt.to_json()["reused"] is True
        assert await payments(options).unfinished() == []
        # recovery leaves a delivered payment alone: nothing is re-sent
        sent = len(merchant.paid_requests)
        recovery = await payments(client).recover(record.id)
        assert recovery.status == "delivered"
        assert len(merchant.paid_requests) == sent
    assert len(bank_payments(sandbox, payer)) == 1
    (entry,) = payments(options).ledger.entries()
    assert (entry.outcome, entry.delivered) == ("paid", True)
    state_of(options).close()
