"""Recovery for `httpx.Client`: the journal's unfinished payments listed and finished from
sync code, through the sync client itself (its default headers apply), never paying twice.
Over real sockets against the sandbox on 127.0.0.1."""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import bank_payments
from tests.integration.test_sync_client import served
from tests.merchants import Reply, ScriptedMerchant, Seen
from tests.needs import require
from tests.sandboxes import payment_options
from tests.waiting import eventually_sync
from x402_client import (
    ConfigurationError,
    PaymentOptions,
    PaymentOutcomeUnknown,
    PaymentProgress,
    Payments,
    SyncPayments,
    payments,
    with_eur_payment,
)
from x402_client._state.shared import state_of
from x402_eur_sandbox import Account, Price, Sandbox

#: What the merchant wants on every request; the journal does not keep it (a secret).
MERCHANT_KEY = "merchant-key-1"


@pytest.fixture(autouse=True)
def _no_loop_threads_left() -> Iterator[None]:
    yield
    eventually_sync(
        lambda: not any(t.name.startswith("x402-sync") for t in threading.enumerate()),
        "every sync client's payment thread to end with it",
    )


def _merchant(sandbox: Sandbox) -> ScriptedMerchant:
    """Wants `X-Api-Key`; fails paid retries with 503 while `state["down"]`."""

    def script(m: ScriptedMerchant, seen: Seen) -> Reply:
        if seen.headers.get("x-api-key") != MERCHANT_KEY:
            return Reply(401, {"error": "who are you"})
        if seen.proof is None:
            return m.challenge(m.entry())
        if m.state.get("down", True):
            return Reply(503, {"error": "try later"})
        valid, reason = m.verify(seen.proof)
        return Reply(200, {"served": True}) if valid else m.challenge(error=reason)

    return ScriptedMerchant(sandbox.bank, sandbox.merchant.code, script)


def _client(options: PaymentOptions, **kwargs: Any) -> httpx.Client:
    return with_eur_payment(httpx.Client(**kwargs), options)


def _left_unfinished(
    sandbox: Sandbox, payer: Account, url: str, path: Path, *, trace: str
) -> PaymentOptions:
    """A paid request the merchant (down) did not serve, journaled in `path` by a process
    that has ended: the options a restarted process opens the same journal with."""
    options = payment_options(
        sandbox,
        api_key=payer.api_key,
        from_account=payer.code,
        state_path=path,
        merchant_error_retries=0,
    )
    keyed = {"X-Api-Key": MERCHANT_KEY}
    with _client(options, headers=keyed) as client, pytest.raises(PaymentOutcomeUnknown):
        client.get(url + "/paid", headers={"X-Trace": trace})
    state_of(options).close()
    return payment_options(sandbox, api_key=payer.api_key, from_account=payer.code, state_path=path)


def test_a_sync_client_recovers_an_undelivered_payment_without_paying_again(
    sandbox: Sandbox, payer: Account, tmp_path: Path
) -> None:
    merchant = _merchant(sandbox)
    path = tmp_path / "state.sqlite3"
    keyed = {"X-Api-Key": MERCHANT_KEY}
    with served(merchant) as url:
        restarted = _left_unfinished(sandbox, payer, url, path, trace="t-1")
        merchant.state["down"] = False
        with _client(restarted) as listing:
            (record,) = payments(listing).unfinished()
        assert record.payment_request_code and record.proof
        assert record.outcome == "paid" and not record.delivered

        # Without the merchant's key the payment stays unfinished: the journal has no key.
        with _client(restarted) as bare:
            assert [r.id for r in payments(bare).unfinished()] == [record.id]
            pending = payments(bare).recover(record.id)
        assert pending.status == "pending" and "401" in pending.reason

        with _client(restarted, headers=keyed) as client:
            (recovery,) = payments(client).recover_all()
            assert payments(client).unfinished() == []
        assert recovery.status == "delivered"
        assert recovery.response is not None and recovery.response.json() == {"served": True}
        last = merchant.requests[-1].headers
        assert last["x-trace"] == "t-1" and last["x-api-key"] == MERCHANT_KEY
        assert len(bank_payments(sandbox, payer)) == 1
        assert sandbox.balance(payer) == Decimal("9.90")
        state_of(restarted).close()


def test_a_requests_session_recovers_an_undelivered_payment_without_paying_again(
    sandbox: Sandbox, payer: Account, tmp_path: Path
) -> None:
    requests = require("requests", "pip install 'x402-eur[requests]'")
    merchant = _merchant(sandbox)
    path = tmp_path / "state.sqlite3"
    keyed = {"X-Api-Key": MERCHANT_KEY}
    with served(merchant) as url:
        restarted = _left_unfinished(sandbox, payer, url, path, trace="t-2")
        merchant.state["down"] = False
        plain = requests.Session()
        plain.headers.update(keyed)  # the session's own headers go with recovery's request
        with with_eur_payment(plain, restarted) as session:
            (record,) = payments(session).unfinished()
            recovery = payments(session).recover(record.id)
            assert payments(session).unfinished() == []
        assert recovery.status == "delivered"
        assert recovery.response is not None and recovery.response.json() == {"served": True}
        last = merchant.requests[-1]
        assert last.headers["x-api-key"] == MERCHANT_KEY and last.headers["x-trace"] == "t-2"
        assert len(bank_payments(sandbox, payer)) == 1
        state_of(restarted).close()


def test_payments_of_a_client_take_the_clients_form(
    sandbox: Sandbox, payer: Account, tmp_path: Path
) -> None:
    options = payment_options(
        sandbox, api_key=payer.api_key, from_account=payer.code, state_path=tmp_path / "s.sqlite3"
    )
    asynchronous = payments(with_eur_payment(httpx.AsyncClient(), options))
    assert isinstance(asynchronous, Payments) and inspect.iscoroutinefunction(
        asynchronous.unfinished
    )
    with _client(options) as client:
        synchronous = payments(client)
        assert isinstance(synchronous, SyncPayments) and synchronous.unfinished() == []
        assert synchronous.options is options and synchronous.ledger is asynchronous.ledger
    with httpx.Client() as plain, pytest.raises(ConfigurationError, match="with_eur_payment"):
        payments(plain)
    with pytest.raises(
        ConfigurationError, match=r"sends requests: call payments\(\) with the paying client itself"
    ):
        asyncio.run(payments(options).recover("p_1"))
    state_of(options).close()


@pytest.fixture(scope="module")
def bridged() -> Iterator[Sandbox]:
    prices = {"/echo": Price(Decimal("0.10"), "bridged EURQ only", rails=("ledgera",))}
    with Sandbox.run_in_thread(chain_a=True, prices=prices) as running:
        yield running


def test_a_sync_client_resumes_a_bridge_payment_without_paying_again(bridged: Sandbox) -> None:
    account = bridged.bank.open_account("10.00")
    chain = bridged.chain_a
    chain.bridge_delay = 3600  # longer than the first client's deadline on any machine

    def options(**overrides: Any) -> PaymentOptions:
        return payment_options(
            bridged,
            api_key=account.api_key,
            from_account=account.code,
            bridge_poll_interval=0.05,
            bridge_poll_max_interval=0.1,
            **overrides,
        )

    with (
        _client(options(bridge_deadline=0.1)) as client,
        pytest.raises(PaymentOutcomeUnknown) as caught,
    ):
        client.post(bridged.url("/echo"), content=b"bridged")
    (made,) = bank_payments(bridged, account)
    assert caught.value.transaction_code == made.code

    def settle_once_waiting(event: PaymentProgress) -> None:
        if event.stage == "waiting" and event.transaction_code is not None:
            chain.settle_bridge(event.transaction_code)

    with _client(options(on_progress=settle_once_waiting)) as client:
        response = payments(client).recover(caught.value).response
    assert response is not None
    assert response.status_code == 200 and response.content == b"bridged"
    assert response.extensions["x402_payment"].transaction_code == made.code
    assert bank_payments(bridged, account) == [made]  # no second payment
    assert bridged.balance(account) == Decimal("9.90")
