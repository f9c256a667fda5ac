"""One request, one payment, within the user's limits (the payment core's promises).

Each test below reproduces a way the client used to break, as a new user or a hostile
merchant would find it: over real sockets against the sandbox where a network is
involved, and as a table of scripted merchants on `httpx.MockTransport` (milliseconds).
Every case asserts the payments made (the sandbox bank's) and every request sent.
"""

from __future__ import annotations

import dataclasses
import json
import traceback
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import httpx
import pytest

from tests.conftest import Recorder, bank_payments, scripted_402
from tests.merchants import Reply, ScriptedMerchant, Seen, now, paid_resource
from x402_client import (
    AmountLimitExceeded,
    Budget,
    BudgetExceeded,
    ConfigurationError,
    EvmOptions,
    InvalidChallenge,
    NoSatisfiableOption,
    PaymentFailed,
    PaymentOptions,
    PaymentOutcomeUnknown,
    PaymentRejectedByHook,
    PaymentTransport,
    PaymentVerificationFailed,
    X402Error,
    payments,
    with_eur_payment,
)

pytestmark = pytest.mark.anyio

KEY = "0x" + "22" * 32


def evm_entry(amount: int, facilitator: str, index: int = 0) -> dict[str, Any]:
    return {
        "scheme": "exact",
        "network": "eip155:137",
        "asset": "0x" + f"{index + 1:040x}",
        "maxAmountRequired": str(amount),
        "payTo": "0x" + "ab" * 20,
        "maxTimeoutSeconds": 300,
        "resource": "/paid",
        "facilitator": facilitator,
        "extra": {"symbol": "EURQ", "spender": "0x" + "cd" * 20},
    }


def redirect(location: str, status: int = 302) -> Reply:
    return Reply(status, b"", {"location": location})


# --- 1. redirects ------------------------------------------------------------------------------


async def test_a_get_redirected_to_a_paid_resource_is_paid_once(sandbox, payer, options_for, serve):
    hop = await serve(scripted_402(b"", status=302, headers={"location": sandbox.url("/weather")}))
    client = httpx.AsyncClient(follow_redirects=True)
    async with with_eur_payment(client, options_for(payer)) as client:
        response = await client.get(hop + "/start")
    assert response.status_code == 200 and response.json()["city"] == "Amsterdam"
    assert len(bank_payments(sandbox, payer)) == 1
    assert response.extensions["x402_payment"].amount == Decimal("0.10")
    assert [r.status_code for r in response.history] == [302]


async def test_a_paid_answer_that_redirects_back_to_its_402_is_paid_once(
    sandbox, payer, options_for, serve
):
    def script(m: ScriptedMerchant, seen: Seen) -> Reply:
        if seen.proof is None:
            return m.challenge(m.entry())
        m.verify(seen.proof)
        return redirect("/paid")

    merchant = ScriptedMerchant(sandbox.bank, sandbox.merchant.code, script)
    url = await serve(merchant)
    async with with_eur_payment(httpx.AsyncClient(follow_redirects=True), options_for(payer)) as c:
        with pytest.raises(PaymentVerificationFailed) as caught:
            await c.get(url + "/paid")
    assert len(bank_payments(sandbox, payer)) == 1
    assert [r.proof is not None for r in merchant.requests] == [False, True, False]
    (receipt,) = caught.value.receipts
    assert receipt.amount == Decimal("0.10") and caught.value.money_moved is True


async def test_recovery_settings_never_ride_to_another_origin(sandbox, payer, options_for, serve):
    other = ScriptedMerchant(sandbox.bank, sandbox.merchant.code)
    other_url = await serve(other)
    first = ScriptedMerchant(
        sandbox.bank, sandbox.merchant.code, lambda m, seen: redirect(other_url + "/paid")
    )
    first_url = await serve(first)
    async with with_eur_payment(httpx.AsyncClient(follow_redirects=True), options_for(payer)) as c:
        for setting in ({"proof": "eyJ4NDAyVmVyc2lvbiI6Mn0"}, {"resume_transaction_code": "QP1"}):
            response = await c.get(first_url + "/", extensions={"x402": setting})
            assert response.status_code == 402  # handed back, nothing paid
            assert response.json()["x402Version"] == 2
    assert all(seen.proof is None for seen in first.requests + other.requests)
    assert bank_payments(sandbox, payer) == []


# --- 2. state belongs to the options -----------------------------------------------------------


async def test_clients_built_from_one_options_share_its_budget(sandbox, payer, options_for):
    options = options_for(payer, budgets=[Budget("0.10")])
    outcomes = []
    for _ in range(3):  # an agent that builds a client per task
        async with with_eur_payment(httpx.AsyncClient(), options) as client:
            try:
                outcomes.append((await client.get(sandbox.url("/weather"))).status_code)
            except BudgetExceeded:
                outcomes.append("budget")
    client = with_eur_payment(httpx.AsyncClient(), options)
    with_eur_payment(client, options)  # re-installing keeps the state
    async with client:
        with pytest.raises(BudgetExceeded):
            await client.get(sandbox.url("/weather"))
    assert outcomes == [200, "budget", "budget"]
    assert len(bank_payments(sandbox, payer)) == 1
    assert payments(options).ledger.total("EUR") == Decimal("0.10")
    assert payments(client).ledger is payments(options).ledger


# --- 3. one unaffordable entry does not abort the 402 ----------------------------------------


@pytest.mark.parametrize("limit", ["cap", "budget"])
async def test_an_unaffordable_first_entry_falls_through_to_an_affordable_one(
    sandbox, payer, options_for, serve, limit
):
    merchant = ScriptedMerchant(sandbox.bank, sandbox.merchant.code)

    def script(m: ScriptedMerchant, seen: Seen) -> Reply:
        if seen.proof is None:
            return m.challenge(m.entry("5.00" if limit == "cap" else "0.60"), m.entry("0.10"))
        valid, reason = m.verify(seen.proof)
        return Reply(200) if valid else m.challenge(m.entry(), error=reason)

    merchant.script = script
    url = await serve(merchant)
    extra: dict[str, Any] = {"budgets": [Budget("0.50")]} if limit == "budget" else {}
    async with with_eur_payment(httpx.AsyncClient(), options_for(payer, **extra)) as client:
        response = await client.get(url + "/paid")
    assert response.status_code == 200
    assert response.extensions["x402_payment"].amount == Decimal("0.10")
    (paid,) = bank_payments(sandbox, payer)
    assert paid.amount == Decimal("0.10")


# --- 4. no I/O before the limits ---------------------------------------------------------------


async def test_over_cap_entries_make_no_request_to_urls_the_merchant_wrote(
    sandbox, payer, options_for, serve
):
    internal = Recorder()
    internal_url = await serve(internal)
    entries = [evm_entry(5_000_000, f"{internal_url}/internal{i}", i) for i in range(40)]
    url = await serve(scripted_402(json.dumps({"x402Version": 2, "accepts": entries})))
    evm = EvmOptions(private_key=KEY, rpc_urls={137: internal_url + "/rpc"})
    async with with_eur_payment(httpx.AsyncClient(), options_for(payer, evm=evm)) as client:
        with pytest.raises(AmountLimitExceeded) as caught:
            await client.get(url)
    assert internal.requests == []
    assert len(caught.value.skipped) == 40
    assert {s.reason.value for s in caught.value.skipped} == {"over_cap"}


async def test_payable_entries_naming_internal_urls_are_prepared_at_most_max_candidates(
    sandbox, payer, options_for, serve
):
    internal = Recorder()  # answers 200 {"recorded": true}: not a `/supported` answer
    internal_url = await serve(internal)
    entries = [evm_entry(100_000, f"{internal_url}/internal{i}", i) for i in range(40)]
    url = await serve(scripted_402(json.dumps({"x402Version": 2, "accepts": entries})))
    evm = EvmOptions(private_key=KEY, rpc_urls={137: internal_url + "/rpc"})
    async with with_eur_payment(httpx.AsyncClient(), options_for(payer, evm=evm)) as client:
        with pytest.raises(NoSatisfiableOption) as caught:
            await client.get(url)
    prepared = [s for s in caught.value.skipped if s.reason.value == "prepare_failed"]
    assert len(prepared) == 3
    assert sum(1 for s in caught.value.skipped if s.reason.value == "not_tried") == 37
    assert len(internal.requests) <= 3 * 2  # per candidate: at most the RPC and /supported
    assert bank_payments(sandbox, payer) == []


# --- 5. stale entries ----------------------------------------------------------------------------


async def test_an_expired_entry_is_skipped_and_a_live_one_is_paid(
    sandbox, payer, options_for, serve
):
    def script(m: ScriptedMerchant, seen: Seen) -> Reply:
        if seen.proof is None:
            return m.challenge(m.entry(expiresAt=now() - 3600), m.entry("0.20"))
        valid, reason = m.verify(seen.proof)
        return Reply(200) if valid else m.challenge(error=reason)

    url = await serve(ScriptedMerchant(sandbox.bank, sandbox.merchant.code, script))
    async with with_eur_payment(httpx.AsyncClient(), options_for(payer)) as client:
        response = await client.get(url + "/paid")
    assert response.extensions["x402_payment"].amount == Decimal("0.20")
    (paid,) = bank_payments(sandbox, payer)
    assert paid.amount == Decimal("0.20")


async def test_only_expired_entries_pay_nothing(sandbox, payer, options_for, serve):
    def script(m: ScriptedMerchant, seen: Seen) -> Reply:
        return m.challenge(m.entry(expiresAt=now() - 3600))

    url = await serve(ScriptedMerchant(sandbox.bank, sandbox.merchant.code, script))
    async with with_eur_payment(httpx.AsyncClient(), options_for(payer)) as client:
        with pytest.raises(NoSatisfiableOption, match="expired") as caught:
            await client.get(url + "/paid")
    assert caught.value.money_moved is False
    assert bank_payments(sandbox, payer) == []


# --- 6. errors tell the truth about money ----------------------------------------------------------


@pytest.mark.parametrize("then", ["malformed", "hook", "budget"])
async def test_a_failure_after_a_payment_is_a_money_moved_error(
    sandbox, payer, options_for, serve, then
):
    def script(m: ScriptedMerchant, seen: Seen) -> Reply:
        if seen.proof is not None:
            m.verify(seen.proof)  # consumed; the merchant still says "expired"
            return m.challenge(m.entry(), error="Payment request expired")
        if m.state.setdefault("asked", 0) and then == "malformed":
            return Reply(402, {"x402Version": 2, "accepts": []})
        m.state["asked"] += 1
        return m.challenge(m.entry())

    url = await serve(ScriptedMerchant(sandbox.bank, sandbox.merchant.code, script))
    approvals = iter([True, False])
    extra: dict[str, Any] = {
        "hook": {"on_before_payment": lambda intent: next(approvals)},
        "budget": {"budgets": [Budget("0.15")]},
        "malformed": {},
    }[then]
    async with with_eur_payment(httpx.AsyncClient(), options_for(payer, **extra)) as client:
        with pytest.raises(X402Error) as caught:
            await client.get(url + "/paid")
    error = caught.value
    assert isinstance(error, (PaymentVerificationFailed, PaymentOutcomeUnknown))
    assert error.money_moved is not False
    (receipt,) = error.receipts
    assert receipt.amount == Decimal("0.10") and receipt.payment_request_code
    assert len(bank_payments(sandbox, payer)) == 1
    assert {"malformed": InvalidChallenge, "hook": PaymentRejectedByHook, "budget": BudgetExceeded}[
        then
    ].__name__ in str(error)


# --- 7. only x402 402s are challenges ----------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        b'{"error": "card declined", "code": "card_declined"}',
        b"Payment Required: your quota is used up",
        b"",
        b"[1, 2]",
    ],
)
async def test_a_non_x402_402_is_handed_back_untouched(sandbox, payer, options_for, serve, body):
    url = await serve(scripted_402(body, headers={"x-quota": "0"}))
    async with with_eur_payment(httpx.AsyncClient(), options_for(payer)) as client:
        response = await client.get(url)
        async with client.stream("GET", url) as streamed:
            streamed_body = await streamed.aread()
    assert response.status_code == 402 and response.content == body
    assert response.headers["x-quota"] == "0"
    assert streamed.status_code == 402 and streamed_body == body
    assert "x402_payment" not in response.extensions
    assert bank_payments(sandbox, payer) == []


async def test_a_large_non_x402_402_streams_through(sandbox, payer, options_for, serve):
    body = b"x" * 300_000
    url = await serve(scripted_402(body))
    async with with_eur_payment(httpx.AsyncClient(), options_for(payer)) as client:
        response = await client.get(url)
    assert response.status_code == 402 and response.content == body


# --- 8. the hook fails closed ------------------------------------------------------------------


@pytest.mark.parametrize("verdict", [None, 0, "", "yes", 1])
async def test_only_true_approves_a_payment(sandbox, payer, options_for, verdict):
    options = options_for(payer, on_before_payment=lambda intent: verdict)
    async with with_eur_payment(httpx.AsyncClient(), options) as client:
        with pytest.raises(PaymentRejectedByHook) as caught:
            await client.get(sandbox.url("/weather"))
    assert repr(verdict) in str(caught.value)
    assert bank_payments(sandbox, payer) == []


# --- 9. secrets ----------------------------------------------------------------------------------


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    while exc is not None and exc not in seen:
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return seen


async def test_the_api_key_never_shows_in_the_exception_chain(sandbox, payer, options_for):
    # The payment API is down: the payment fails before money moves, with httpx's
    # ConnectError (and its request) in the chain.
    options = options_for(payer, api_url="http://127.0.0.1:9")
    async with with_eur_payment(httpx.AsyncClient(), options) as client:
        with pytest.raises(PaymentFailed) as caught:
            await client.get(sandbox.url("/weather"))
    text = "".join(traceback.format_exception(caught.value))
    assert payer.api_key not in text
    for exc in _chain(caught.value):
        assert payer.api_key not in repr(exc)
        try:
            request = exc.request  # type: ignore[attr-defined]
        except (AttributeError, RuntimeError):
            continue
        assert payer.api_key not in str(request.headers.raw)
        assert "x-api-key" not in request.headers


def test_reprs_redact_rpc_urls_and_http_api_urls_are_refused():
    options = PaymentOptions(
        evm=EvmOptions(private_key=KEY, rpc_urls={137: "https://rpc.example/v2/sk_rpc_key_123"})
    )
    assert "sk_rpc_key_123" not in repr(options) and "sk_rpc_key_123" not in str(options)
    assert "rpc.example" in repr(options)
    with pytest.raises(ConfigurationError, match="https"):
        PaymentOptions(api_url="http://api.example")
    for loopback in ("http://127.0.0.1:8080", "http://localhost:1", "http://[::1]:2"):
        assert PaymentOptions(api_url=loopback).api_url == loopback


# --- 10. configuration errors ----------------------------------------------------------------------


def test_bad_options_are_configuration_errors_with_did_you_mean():
    with pytest.raises(ConfigurationError, match="did you mean 'max_amount_per_payment'"):
        PaymentOptions(max_amount="0.5")
    with pytest.raises(ConfigurationError, match="max_amount_per_payment"):
        PaymentOptions(max_amount_per_payment="-1")
    with pytest.raises(ConfigurationError, match="did you mean 'api_key'"):
        with_eur_payment(httpx.AsyncClient(), {"apikey": "sk_do_not_print"})


# --- the hostile merchant table (MockTransport: no sockets for the merchant) -------------------


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    script: Callable[[ScriptedMerchant, Seen], Reply]
    path: str = "/paid"
    options: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: What the merchant saw: (path, carried a proof), in order.
    sent: list[tuple[str, bool]] = dataclasses.field(default_factory=list)
    paid: list[str] = dataclasses.field(default_factory=list)
    #: The status served, or the error raised.
    result: int | type[Exception] = 200


def _loop(m: ScriptedMerchant, seen: Seen) -> Reply:
    if seen.proof is None:
        return m.challenge(m.entry())
    m.verify(seen.proof)
    return redirect("/paid")


def _to_paid(m: ScriptedMerchant, seen: Seen) -> Reply:
    if seen.path == "/start":
        return redirect("/paid", 307)
    return paid_resource()(m, seen)


def _over_cap_first(m: ScriptedMerchant, seen: Seen) -> Reply:
    if seen.proof is None:
        return m.challenge(m.entry("5.00"), m.entry("0.10"))
    return paid_resource()(m, seen)


def _internal_urls(m: ScriptedMerchant, seen: Seen) -> Reply:
    return m.challenge(*[evm_entry(9_000_000, f"http://10.0.0.{i}/f", i) for i in range(40)])


def _paid_then(reply: Callable[[ScriptedMerchant, Seen], Reply]) -> Any:
    def script(m: ScriptedMerchant, seen: Seen) -> Reply:
        if seen.path == "/paid" and seen.proof is None:
            return m.challenge(m.entry())
        if seen.path == "/paid":
            m.verify(seen.proof)
        return reply(m, seen)

    return script


def _nested(m: ScriptedMerchant, seen: Seen) -> Reply:
    junk: Any = 1
    for _ in range(100):
        junk = [junk]
    return m.challenge(m.entry(extra={"junk": junk}))


def _status(status: int) -> Case:
    retried = [("/paid", True)] * (3 if status >= 500 else 1)
    return Case(
        f"paid retry answered {status}",
        _paid_then(lambda m, s: Reply(status, {"error": "no"})),
        sent=[("/paid", False), *retried],
        paid=["0.10"],
        result=PaymentOutcomeUnknown if status >= 500 else PaymentVerificationFailed,
    )


TOKEN_18 = "0x" + "18" * 20
USD_TOKEN = "0x" + "0d" * 20


def _eip3009_offer(asset: str, amount: str) -> Callable[[ScriptedMerchant, Seen], Reply]:
    """A v1 standard merchant: an EIP-3009 offer in `asset`, served once a proof comes."""

    def script(m: ScriptedMerchant, seen: Seen) -> Reply:
        if seen.proof is not None:
            return Reply(200, {"served": True})
        entry = {
            "scheme": "exact",
            "network": "base-sepolia",
            "maxAmountRequired": amount,
            "resource": "http://merchant.test/paid",
            "payTo": "0x" + "ab" * 20,
            "maxTimeoutSeconds": 300,
            "asset": asset,
            "extra": {"name": "Token", "version": "2"},
        }
        return Reply(402, {"x402Version": 1, "error": "pay", "accepts": [entry]})

    return script


def _declared(address: str, currency: str, decimals: int) -> dict[str, Any]:
    return {
        "evm": {"private_key": KEY},
        "assets": [
            {
                "chain_id": 84532,
                "address": address,
                "symbol": "TKN",
                "currency": currency,
                "decimals": decimals,
            }
        ],
    }


CASES = [
    Case(
        "paid answer redirects into a loop",
        _paid_then(lambda m, s: redirect("/b" if s.path != "/b" else "/a")),
        sent=[("/paid", False), ("/paid", True), ("/b", False), ("/a", False)],
        paid=["0.10"],
        result=PaymentVerificationFailed,
    ),
    Case(
        "paid answer with an invalid Location",
        _paid_then(lambda m, s: redirect("http://[::1")),
        sent=[("/paid", False), ("/paid", True)],
        paid=["0.10"],
        result=PaymentVerificationFailed,
    ),
    *[_status(status) for status in (429, 409, 500, 404)],
    Case(
        "body breaks mid-read after payment",
        _paid_then(lambda m, s: Reply(200, {"data": "x" * 100}, broken=True)),
        sent=[("/paid", False), ("/paid", True)],
        paid=["0.10"],
        result=PaymentOutcomeUnknown,
    ),
    Case(
        "18-decimal asset under a budget",
        _eip3009_offer(TOKEN_18, "1000000000000001"),  # 0.001000000000000001
        options={**_declared(TOKEN_18, "EUR", 18), "budgets": [Budget("0.01")]},
        sent=[("/paid", False), ("/paid", True)],
    ),
    Case(
        "USD offer under EUR-only limits",
        _eip3009_offer(USD_TOKEN, "10000"),
        options={**_declared(USD_TOKEN, "USD", 6), "budgets": [Budget("5.00")]},
        sent=[("/paid", False)],
        result=BudgetExceeded,
    ),
    Case(
        "entry with nested junk",
        _nested,
        sent=[("/paid", False)],
        result=InvalidChallenge,
    ),
    Case(
        "redirect loop after payment",
        _loop,
        sent=[("/paid", False), ("/paid", True), ("/paid", False)],
        paid=["0.10"],
        result=PaymentVerificationFailed,
    ),
    Case(
        "redirect to a paid resource",
        _to_paid,
        path="/start",
        sent=[("/start", False), ("/paid", False), ("/paid", True)],
        paid=["0.10"],
    ),
    Case(
        "non-x402 402",
        lambda m, s: Reply(402, {"error": "card declined"}),
        sent=[("/paid", False)],
        result=402,
    ),
    Case(
        "over-cap entry first",
        _over_cap_first,
        sent=[("/paid", False), ("/paid", True)],
        paid=["0.10"],
    ),
    Case(
        "expired entry",
        lambda m, s: m.challenge(m.entry(expiresAt=now() - 3600)),
        sent=[("/paid", False)],
        result=NoSatisfiableOption,
    ),
    Case(
        "many entries naming internal URLs",
        _internal_urls,
        options={"evm": {"private_key": KEY, "rpc_urls": {137: "http://10.0.0.1/rpc"}}},
        sent=[("/paid", False)],
        result=AmountLimitExceeded,
    ),
    Case(
        "hook returning None",
        paid_resource(),
        options={"on_before_payment": lambda intent: None},
        sent=[("/paid", False)],
        result=PaymentRejectedByHook,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_hostile_merchants(sandbox, options_for, case: Case):
    payer = sandbox.bank.open_account("10.00")
    merchant = ScriptedMerchant(sandbox.bank, sandbox.merchant.code, case.script)
    transport = PaymentTransport(merchant.transport(), options_for(payer, **case.options))
    async with httpx.AsyncClient(transport=transport, follow_redirects=True) as client:
        if isinstance(case.result, int):
            response = await client.get("http://merchant.test" + case.path)
            assert response.status_code == case.result
        else:
            with pytest.raises(case.result):
                await client.get("http://merchant.test" + case.path)
    assert [(seen.path, seen.proof is not None) for seen in merchant.requests] == case.sent
    assert [str(t.amount) for t in bank_payments(sandbox, payer)] == case.paid
