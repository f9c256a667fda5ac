"""The bridge rail without a network: the poller on a fake clock, and which entries it takes."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from decimal import Decimal
from typing import Any

import httpx
import pytest

from x402_client import (
    BridgeTransferFailed,
    ConfigurationError,
    PaymentOptions,
    PaymentOutcomeUnknown,
    payments,
    with_eur_payment,
)
from x402_client._flow.payment import Payer
from x402_client._protocol.errors import PaymentAPIError
from x402_client._protocol.models import ExactAcceptEntry, parse_accept
from x402_client._protocol.proof import decode_proof
from x402_client._protocol.provider import TransactionRecord
from x402_client._protocol.secret import SecretStr
from x402_client._protocol.types import PaymentIntent
from x402_client._rails.bridge import (
    BRIDGE_ASSET,
    BridgeRail,
    PollPolicy,
    PollUpdate,
    bridge_proof,
    wait_for_blockchain_tx_id,
)
from x402_client._state.payment_api import PaymentAPI

pytestmark = pytest.mark.anyio

EURQ, USDQ = "2768422954", "2768603795"
ADDRESS = "M" * 58
CODE = "QP0123456789ABCDEF"
TXID = "T" * 52


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class FakeTime:
    """A clock that only moves when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def record(status: str = "Processing", tx_id: str | None = None) -> TransactionRecord:
    data: dict[str, Any] = {"transactionCode": CODE, "status": status}
    if tx_id is not None:
        data["blockchainTxId"] = tx_id
    return TransactionRecord.model_validate(data)


def scripted(
    answers: list[TransactionRecord | Exception | None],
) -> tuple[Callable[[], Awaitable[TransactionRecord | None]], list[int]]:
    """A lookup answering from `answers` in order (the last one repeats)."""
    calls = [0]

    async def lookup() -> TransactionRecord | None:
        answer = answers[min(calls[0], len(answers) - 1)]
        calls[0] += 1
        if isinstance(answer, Exception):
            raise answer
        return answer

    return lookup, calls


async def wait(lookup, fake: FakeTime, policy: PollPolicy | None = None, **kwargs: Any):
    return await wait_for_blockchain_tx_id(
        lookup,
        transaction_code=CODE,
        policy=policy or PollPolicy(first_interval=0.5, max_interval=3.0, deadline=300.0),
        clock=fake.clock,
        sleep=fake.sleep,
        **kwargs,
    )


# --- the poller ---------------------------------------------------------------------------------


async def test_first_lookup_is_immediate_and_stops_at_the_id():
    fake = FakeTime()
    lookup, calls = scripted([record("Paid", TXID)])
    found = await wait(lookup, fake)
    assert found.blockchain_tx_id == TXID
    assert calls[0] == 1
    assert fake.sleeps == []


async def test_backoff_doubles_from_the_first_interval_up_to_the_cap():
    fake = FakeTime()
    lookup, calls = scripted([record()] * 8 + [record("Paid", TXID)])
    found = await wait(lookup, fake)
    assert found.blockchain_tx_id == TXID
    assert calls[0] == 9  # stopped at the first answer with the id, not one poll later
    assert fake.sleeps == [0.5, 1.0, 2.0, 3.0, 3.0, 3.0, 3.0, 3.0]


async def test_a_typical_two_minute_wait_costs_about_forty_lookups():
    fake = FakeTime()
    settles_at = fake.now + 120

    async def lookup() -> TransactionRecord:
        return record("Paid", TXID) if fake.now >= settles_at else record()

    await wait(lookup, fake)
    assert 40 <= len(fake.sleeps) <= 45
    assert fake.now - settles_at <= 3.0  # seen within one capped interval


async def test_deadline_gives_outcome_unknown_with_the_code():
    fake = FakeTime()
    lookup, calls = scripted([record()])
    with pytest.raises(PaymentOutcomeUnknown) as caught:
        await wait(lookup, fake, PollPolicy(first_interval=0.5, max_interval=3.0, deadline=10.0))
    error = caught.value
    assert error.transaction_code == CODE
    assert "resume_transaction_code" in str(error)
    assert fake.now == pytest.approx(1010.0)  # never sleeps past the deadline
    assert sum(fake.sleeps) == pytest.approx(10.0)
    assert fake.sleeps[-1] <= 3.0
    assert calls[0] == len(fake.sleeps) + 1  # one last lookup at the deadline itself


@pytest.mark.parametrize("status", ["Cancelled", "Expired", "Failed", "cancelled"])
async def test_a_failed_status_ends_the_wait_with_a_typed_error(status):
    fake = FakeTime()
    lookup, calls = scripted([record(), record(status)])
    with pytest.raises(BridgeTransferFailed) as caught:
        await wait(lookup, fake)
    assert caught.value.transaction_code == CODE
    assert caught.value.status == status
    assert calls[0] == 2


async def test_paid_without_an_id_keeps_polling():
    fake = FakeTime()
    lookup, calls = scripted([record("Paid"), record("Paid"), record("Paid", TXID)])
    assert (await wait(lookup, fake)).blockchain_tx_id == TXID
    assert calls[0] == 3


async def test_transient_lookup_failures_and_unlisted_codes_are_polled_through():
    fake = FakeTime()
    lookup, calls = scripted(
        [
            httpx.ConnectError("refused"),
            PaymentAPIError("bad gateway", status_code=502),
            None,
            record("Paid", TXID),
        ]
    )
    updates: list[PollUpdate] = []

    async def on_poll(update: PollUpdate) -> None:
        updates.append(update)

    assert (await wait(lookup, fake, on_poll=on_poll)).blockchain_tx_id == TXID
    assert [u.polls for u in updates] == [1, 2, 3]
    assert calls[0] == 4
    assert updates[0].error is not None and "ConnectError" in updates[0].error
    assert updates[2].record is None and updates[2].error is None


async def test_a_lookup_refused_for_good_is_outcome_unknown_at_once():
    fake = FakeTime()
    lookup, calls = scripted([PaymentAPIError("forbidden", status_code=403)])
    with pytest.raises(PaymentOutcomeUnknown) as caught:
        await wait(lookup, fake)
    assert caught.value.transaction_code == CODE
    assert calls[0] == 1


async def test_long_waits_log_at_info_about_every_ten_seconds(caplog):
    fake = FakeTime()
    settles_at = fake.now + 65

    async def lookup() -> TransactionRecord:
        return record("Paid", TXID) if fake.now >= settles_at else record()

    with caplog.at_level(logging.INFO, logger="x402_client"):
        await wait(lookup, fake)
    waiting = [r for r in caplog.records if "still waiting" in r.getMessage()]
    assert 5 <= len(waiting) <= 6
    assert all(CODE in r.getMessage() for r in waiting)


def test_policy_from_options():
    options = PaymentOptions(
        bridge_deadline=42, bridge_poll_interval=0.25, bridge_poll_max_interval=2
    )
    policy = PollPolicy.from_options(options)
    assert (policy.first_interval, policy.max_interval, policy.deadline) == (0.25, 2.0, 42.0)


def test_bridge_proof_carries_the_four_fields():
    entry = exact_entry()
    proof = decode_proof(bridge_proof(entry, CODE, TXID))
    assert (proof.x402_version, proof.scheme, proof.network) == (2, "exact", "ledgera:mainnet")
    assert proof.payload == {
        "transactionCode": CODE,
        "blockchainTxId": TXID,
        "payTo": ADDRESS,
        "asset": EURQ,
    }


# --- which entries the rail takes ---------------------------------------------------------------


def exact_entry(**overrides: Any) -> ExactAcceptEntry:
    raw = {
        "scheme": "exact",
        "network": "ledgera:mainnet",
        "asset": EURQ,
        "maxAmountRequired": "100000",
        "payTo": ADDRESS,
        "maxTimeoutSeconds": 300,
        "resource": "https://merchant.example/weather",
        "description": "weather",
        "mimeType": "application/json",
        "facilitator": "https://facilitator.example",
    }
    raw.update(overrides)
    entry = parse_accept(raw)
    assert isinstance(entry, ExactAcceptEntry)
    return entry


def managed(**overrides: Any) -> PaymentOptions:
    values: dict[str, Any] = {
        "api_key": "sk_test",
        "from_account": "ACC_PAYER",
        "api_url": "https://api.example",
    }
    values.update(overrides)
    return PaymentOptions(**values)


def rail(options: PaymentOptions | None = None) -> BridgeRail:
    return BridgeRail(Payer(options or managed()))


def test_a_eurq_chain_a_entry_is_bridged():
    intent = rail().describe(exact_entry(), "https://merchant.example/weather")
    assert isinstance(intent, PaymentIntent)
    assert intent.rail == "bridge"
    assert (intent.asset, intent.asset_symbol, intent.currency) == (EURQ, "EURQ", "EUR")
    assert intent.amount == Decimal("0.10") and intent.atomic_amount == 100000
    assert intent.pay_to == ADDRESS
    assert BRIDGE_ASSET == EURQ


def test_a_usdq_chain_a_entry_is_not_bridged():
    reason = rail().describe(exact_entry(asset=USDQ), "r")
    assert isinstance(reason, str)
    assert "USDQ" in reason and "EURQ only" in reason


def test_an_unknown_chain_a_asset_is_not_bridged():
    reason = rail().describe(exact_entry(asset="31566704"), "r")
    assert isinstance(reason, str) and "31566704" in reason


def test_entries_of_other_networks_and_schemes_are_not_chain_a():
    evm = exact_entry(
        network="eip155:137",
        asset="0x" + "1" * 40,
        payTo="0x" + "2" * 40,
        extra={"symbol": "EURQ", "spender": "0x" + "3" * 40},
    )
    assert rail().describe(evm, "r") == "not a chain-A entry"
    euro = parse_accept(
        {
            "scheme": "euro",
            "network": "provider:mainnet",
            "asset": "EURO",
            "amount": "0.10",
            "payTo": "ACC_M",
            "paymentRequestCode": "pr_1",
        }
    )
    assert euro is not None
    assert rail().describe(euro, "r") == "not a chain-A entry"


def test_the_bridge_needs_a_managed_account():
    for missing in ("api_key", "from_account", "api_url"):
        reason = rail(managed(**{missing: None})).describe(exact_entry(), "r")
        assert isinstance(reason, str) and "api_key, from_account and api_url" in reason


def test_a_payto_that_is_not_address_shaped_is_left_to_the_payment_api():
    assert isinstance(rail().describe(exact_entry(payTo="not-an-address"), "r"), PaymentIntent)


def test_the_payer_lists_the_bridge_rail_last():
    payer = Payer(managed())
    assert [r.name for r in payer.rails][-1] == "bridge"


async def test_chain_a_entries_the_client_cannot_bridge_are_explained():
    """A USDQ entry is a direct chain-A payment (manual): the client says so, pays nothing."""
    from x402_client import NoSatisfiableOption
    from x402_client._protocol.policy import no_candidate_error, select
    from x402_client._protocol.rail_interface import RequestSettings

    options = managed()
    payer = Payer(options)
    selection = select(
        [exact_entry(asset=USDQ).to_wire()],
        rails=payer.rails,
        options=options,
        settings=RequestSettings(),
        headroom={},
        now=0,
        resource="https://merchant.example/weather",
    )
    assert selection.candidates == []
    error = no_candidate_error(selection.skipped, selection.readable)
    assert isinstance(error, NoSatisfiableOption)
    assert "USDQ" in str(error) and "manual" in str(error)
    await payer.aclose()


# --- payments(client).recover(error): the bridge wait resumed --------------------------------


def outcome_unknown(request: httpx.Request | None = None) -> PaymentOutcomeUnknown:
    intent = rail().describe(exact_entry(), "https://merchant.example/weather")
    assert isinstance(intent, PaymentIntent)
    return PaymentOutcomeUnknown("deadline", transaction_code=CODE, request=request, intent=intent)


async def sent_by(call) -> httpx.Request:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200)

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    async with with_eur_payment(client, {}) as client:
        await call(payments(client))
    [request] = seen
    return request


async def test_resume_re_sends_the_original_request_with_the_code():
    original = httpx.Request(
        "POST",
        "https://merchant.example/echo?q=1",
        headers={"X-Trace": "t-1", "X-PAYMENT": "old-proof"},
        content=b"body",
        extensions={"x402": {"max_amount_per_payment": "0.50"}},
    )
    error = outcome_unknown(original)
    request = await sent_by(lambda pay: pay.recover(error))
    assert (request.method, str(request.url)) == ("POST", "https://merchant.example/echo?q=1")
    assert request.headers["X-Trace"] == "t-1"
    assert "X-PAYMENT" not in request.headers
    assert request.content == b"body"
    assert request.extensions["x402"] == {
        "max_amount_per_payment": "0.50",
        "resume_transaction_code": CODE,
    }


async def test_resume_without_the_request_uses_the_paid_resource():
    error = outcome_unknown()
    request = await sent_by(lambda pay: pay.recover(error))
    assert (request.method, str(request.url)) == ("GET", "https://merchant.example/weather")
    assert request.extensions["x402"] == {"resume_transaction_code": CODE}


async def test_resume_with_other_headers_and_body():
    original = httpx.Request(
        "POST", "https://merchant.example/echo", headers={"Authorization": "old"}, content=b"x"
    )
    error = outcome_unknown(original)
    request = await sent_by(
        lambda pay: pay.recover(error, headers={"Authorization": "new"}, content=b"body")
    )
    assert request.headers.get_list("Authorization") == ["new"]
    assert request.content == b"body"
    assert request.extensions["x402"]["resume_transaction_code"] == CODE


async def test_resume_needs_a_transaction_code_or_a_proof():
    async with with_eur_payment(httpx.AsyncClient(), {}) as client:
        with pytest.raises(ConfigurationError, match="no proof and no transaction code"):
            await payments(client).recover(PaymentOutcomeUnknown("no code"))


# --- the payment API's transaction lookup ------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "listed"),
    [
        (b'{"value": {"items": [{"transactionCode": "QP1", "status": "Paid"}]}}', True),
        (b'{"value": {"items": [], "total": 0}}', False),
        (b'{"value": {"items": [{"transactionCode": "QP2"}]}}', False),
        (b'{"transactionCode": "QP1"}', True),
    ],
)
async def test_a_readable_lookup_answer_lists_a_code_or_not(body: bytes, listed: bool) -> None:
    found = await _get_transaction(200, body)
    assert (found is not None) is listed


@pytest.mark.parametrize(
    "body",
    [b"<html>bad gateway</html>", b"", b'{"value": {}}', b'{"value": {"items": [{"x": 1}]}}'],
)
async def test_an_unreadable_lookup_answer_is_an_error_not_a_code_not_listed(body: bytes) -> None:
    with pytest.raises(PaymentAPIError, match="no readable transaction list"):
        await _get_transaction(200, body)


async def _get_transaction(status: int, body: bytes) -> Any:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=body)

    api = PaymentAPI(
        "http://127.0.0.1:9",
        SecretStr("key"),
        timeout=30.0,
        max_body_bytes=64 * 1024,
        max_connections=1,
        transport=httpx.MockTransport(handler),
    )
    try:
        return await api.get_transaction("QP1")
    finally:
        await api.aclose()


async def test_recover_an_error_with_only_a_proof_re_sends_the_proof():
    original = httpx.Request("GET", "https://merchant.example/weather", headers={"X-A": "1"})
    error = PaymentOutcomeUnknown("lost", proof="PROOF", request=original)
    request = await sent_by(lambda pay: pay.recover(error))
    assert (request.method, str(request.url)) == ("GET", "https://merchant.example/weather")
    assert request.headers["X-A"] == "1"
    # on the merchant's 402, the client answers with this proof and pays nothing
    assert request.extensions["x402"] == {"proof": "PROOF"}


async def test_recover_an_error_the_merchant_still_cannot_serve_is_pending():
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503)

    error = PaymentOutcomeUnknown(
        "lost", proof="PROOF", request=httpx.Request("GET", "https://merchant.example/weather")
    )
    async with with_eur_payment(
        httpx.AsyncClient(transport=httpx.MockTransport(handler)), {}
    ) as client:
        recovery = await payments(client).recover(error)
    assert (recovery.status, recovery.record) == ("pending", None)
    assert recovery.response is not None and "503" in recovery.reason
    assert "pending" in repr(recovery) and "503" in repr(recovery)
