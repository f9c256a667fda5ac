"""A retrying layer below the payment never makes one request pay twice.

A `requests.Session` whose adapter retries (`HTTPAdapter(max_retries=3)`, a
`urllib3.Retry(status_forcelist=[500])`), or an httpx client whose inner transport retries
on 5xx and dropped connections (the pattern of the httpx-retries library), re-sends the
paid request after the merchant consumed the proof and failed; the merchant then says
"already used". Paying a fresh 402 then would be a second payment for one request. The
client sends a proof through `requests` with urllib3's retries off, and counts the sends
that really went out below an httpx transport it does not control; after a re-send it did
not make, "already used" ends the request with `PaymentOutcomeUnknown` and the proof.

The spec's own rule still holds through the same layers: a proof that reached the merchant
once and is answered "already used" is followed by one fresh payment.

Real sockets throughout (`served_raw`: a merchant that can drop a connection unanswered),
the sandbox bank's payments counted.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

import anyio
import httpx
import pytest
import requests
import requests.adapters
from urllib3.util.retry import Retry

from tests.conftest import bank_payments
from tests.merchants import Reply, ScriptedMerchant, Seen, served_raw
from x402_client import PaymentOptions, PaymentOutcomeUnknown, with_eur_payment

pytestmark = pytest.mark.anyio


class RetryingTransport(httpx.AsyncBaseTransport):
    """Retries a request on 5xx answers and transport errors, as httpx-retries does."""

    def __init__(self, inner: httpx.AsyncBaseTransport, attempts: int = 3) -> None:
        self.inner = inner
        self.attempts = attempts

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        for attempt in range(1, self.attempts + 1):
            try:
                response = await self.inner.handle_async_request(request)
            except httpx.TransportError:
                if attempt == self.attempts:
                    raise
                continue
            if response.status_code < 500 or attempt == self.attempts:
                return response
            await response.aclose()
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        await self.inner.aclose()


class SyncRetryingTransport(httpx.BaseTransport):
    def __init__(self, inner: httpx.BaseTransport, attempts: int = 3) -> None:
        self.inner = inner
        self.attempts = attempts

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        for attempt in range(1, self.attempts + 1):
            try:
                response = self.inner.handle_request(request)
            except httpx.TransportError:
                if attempt == self.attempts:
                    raise
                continue
            if response.status_code < 500 or attempt == self.attempts:
                return response
            response.close()
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.inner.close()


def consumes_then(failure: Reply) -> Callable[[ScriptedMerchant, Seen], Reply]:
    """A merchant that consumes each proof the first time it sees it, then answers
    `failure` (a 500, or no answer at all); a proof seen again is "already used"."""

    def script(m: ScriptedMerchant, seen: Seen) -> Reply:
        if seen.proof is None:
            return m.challenge(m.entry())
        valid, reason = m.verify(seen.proof)
        return failure if valid else m.challenge(m.entry(), error=reason)

    return script


def used_once_then_serves(m: ScriptedMerchant, seen: Seen) -> Reply:
    """The spec's case: the first proof is answered "already used" (it reached the merchant
    once and was not served); a fresh payment's proof is served."""
    if seen.proof is None:
        return m.challenge(m.entry())
    m.state["proofs"] = m.state.get("proofs", 0) + 1
    if m.state["proofs"] == 1:
        return m.challenge(m.entry(), error="Payment request already used")
    valid, reason = m.verify(seen.proof)
    return Reply(200, {"paid": True}) if valid else m.challenge(m.entry(), error=reason)


# --- the client kinds: each gets the resource, or raises what the payment layer raised --------


def _session(options: PaymentOptions, adapter: requests.adapters.HTTPAdapter) -> Any:
    session = requests.Session()
    session.trust_env = False
    session.mount("http://", adapter)
    return with_eur_payment(session, options)


async def via_requests_adapter_retries(url: str, options: PaymentOptions) -> int:
    def call() -> int:
        with _session(options, requests.adapters.HTTPAdapter(max_retries=3)) as session:
            return int(session.get(url, timeout=60).status_code)

    return await anyio.to_thread.run_sync(call)


async def via_requests_status_retries(url: str, options: PaymentOptions) -> int:
    def call() -> int:
        retry = Retry(total=3, status_forcelist=[500], allowed_methods=None, backoff_factor=0)
        with _session(options, requests.adapters.HTTPAdapter(max_retries=retry)) as session:
            return int(session.get(url, timeout=60).status_code)

    return await anyio.to_thread.run_sync(call)


async def via_httpx_async(url: str, options: PaymentOptions) -> int:
    transport = RetryingTransport(httpx.AsyncHTTPTransport())
    async with with_eur_payment(httpx.AsyncClient(transport=transport), options) as client:
        return (await client.get(url)).status_code


async def via_httpx_blocking(url: str, options: PaymentOptions) -> int:
    def call() -> int:
        transport = SyncRetryingTransport(httpx.HTTPTransport())
        with with_eur_payment(httpx.Client(transport=transport), options) as client:
            return client.get(url).status_code

    return await anyio.to_thread.run_sync(call)


CLIENTS = {
    "requests HTTPAdapter(max_retries=3)": via_requests_adapter_retries,
    "requests Retry(status_forcelist=[500])": via_requests_status_retries,
    "httpx async, retrying transport": via_httpx_async,
    "httpx sync, retrying transport": via_httpx_blocking,
}
#: What each layer retries: a dropped connection, a 500, or both.
FAILURES = {
    "requests HTTPAdapter(max_retries=3)": ["dropped"],
    "requests Retry(status_forcelist=[500])": ["500"],
    "httpx async, retrying transport": ["dropped", "500"],
    "httpx sync, retrying transport": ["dropped", "500"],
}
CASES = [(kind, failure) for kind, failures in FAILURES.items() for failure in failures]


@pytest.mark.parametrize(("kind", "failure"), CASES)
async def test_a_re_send_below_the_payment_never_pays_a_second_time(
    sandbox, payer, options_for, kind: str, failure: str
):
    failed = Reply(dropped=True) if failure == "dropped" else Reply(500, {"error": "boom"})
    merchant = ScriptedMerchant(sandbox.bank, sandbox.merchant.code, consumes_then(failed))
    with served_raw(merchant) as url, pytest.raises(PaymentOutcomeUnknown) as caught:
        await CLIENTS[kind](url + "/paid", options_for(payer))
    assert len(bank_payments(sandbox, payer)) == 1  # one payment, one request
    error = caught.value
    proofs = {seen.proof for seen in merchant.paid_requests}
    assert proofs == {error.proof}  # only ever the one proof, never a second payment's
    # the euro payment went through the payment API before the proof left: it moved
    assert error.money_moved is True and error.recovery() is not None
    assert "Not paying again" in str(error) or "failed in transit" in str(error)


@pytest.mark.parametrize("kind", list(CLIENTS))
async def test_already_used_once_still_pays_one_fresh_payment(
    sandbox, payer, options_for, kind: str
):
    merchant = ScriptedMerchant(sandbox.bank, sandbox.merchant.code, used_once_then_serves)
    with served_raw(merchant) as url:
        assert await CLIENTS[kind](url + "/paid", options_for(payer)) == 200
    assert [p.amount for p in bank_payments(sandbox, payer)] == [Decimal("0.10")] * 2
    assert len(merchant.paid_requests) == 2  # each proof went out once


async def test_a_retrying_transport_that_re_sent_the_proof_is_named(sandbox, payer, options_for):
    merchant = ScriptedMerchant(
        sandbox.bank, sandbox.merchant.code, consumes_then(Reply(500, {"error": "boom"}))
    )
    with served_raw(merchant) as url, pytest.raises(PaymentOutcomeUnknown) as caught:
        await via_httpx_async(url + "/paid", options_for(payer))
    message = str(caught.value)
    assert "went out 2 times while the client sent it once" in message
    assert "a layer below the payment" in message and "Not paying again" in message
