"""Payment for `requests.Session`: the sync client's payments, limits, errors and receipts,
over real sockets against the sandbox (in threads of its own).

`with_eur_payment(requests.Session(), options)` drives the sync httpx client's core, so the
rail table here is the sync client's own (`test_sync_client.py`), run through a session;
where a behaviour is compared, the same case runs through both clients. The fault table runs
through every kind of client in `test_faults.py`.
"""

from __future__ import annotations

import asyncio
import io
import pickle
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import requests
import requests.adapters

from tests.conftest import Recorder, bank_payments, scripted_402
from tests.integration.test_sync_client import (
    RAIL_PRICES,
    _no_loop_threads_left,
    _payment_threads,
    served,
)
from tests.merchants import Reply, ScriptedMerchant, Seen
from tests.sandboxes import payment_options
from tests.waiting import PATIENCE
from x402_client import (
    AmountLimitExceeded,
    Budget,
    BudgetExceeded,
    ConfigurationError,
    PaymentAdapter,
    PaymentOptions,
    PaymentOutcomeUnknown,
    PaymentReceipt,
    PaymentVerificationFailed,
    UnreplayableRequest,
    X402Error,
    payments,
    with_eur_payment,
)
from x402_eur_sandbox import Account, Sandbox
from x402_eur_sandbox._chain_a import EURQ_ASSET_ID

__all__ = ["_no_loop_threads_left"]  # autouse: no payment thread outlives its session


def _session(options: PaymentOptions | dict[str, Any]) -> requests.Session:
    session = requests.Session()
    session.trust_env = False  # loopback only, whatever the environment's proxies say
    return with_eur_payment(session, options)


def _both(error: BaseException, kind: type[X402Error]) -> None:
    """`error` is the payment error `kind` and a requests error at once."""
    assert isinstance(error, kind), error
    assert isinstance(error, requests.RequestException), type(error).__mro__


# --- every rail the sync client pays ------------------------------------------------------------


@pytest.fixture(scope="module")
def rails() -> Iterator[Sandbox]:
    """The sync client's rail prices, and the standard x402 merchant (EIP-3009) beside them."""
    with Sandbox.run_in_thread(
        evm=True, chain_a=True, standard=True, bridge_delay=0.2, prices=RAIL_PRICES
    ) as running:
        yield running


def _rail_options(sandbox: Sandbox, account: Account) -> PaymentOptions:
    return payment_options(
        sandbox,
        api_key=account.api_key,
        from_account=account.code,
        bridge_poll_interval=0.05,
        bridge_poll_max_interval=0.1,
    )


def _fetch(kind: str, options: PaymentOptions, method: str, url: str, body: bytes | None):
    """(status, body, receipt) of one paid request through `kind` of sync client."""
    if kind == "httpx":
        with with_eur_payment(httpx.Client(timeout=30), options) as client:
            response = client.request(method, url, content=body)
            return response.status_code, response.content, response.extensions["x402_payment"]
    with _session(options) as session:
        answer = session.request(method, url, data=body, timeout=30)
        return answer.status_code, answer.content, answer.x402_payment


def _token_balances(sandbox: Sandbox) -> dict[str, int]:
    evm, standard = sandbox.evm, sandbox.standard

    async def read() -> dict[str, int]:
        return {
            "permit": await evm.token_balance(137, "EURQ", evm.payer_address),
            "eip3009": await standard.token_balance(standard.payer_address),
        }

    return asyncio.run(read())


RAILS = [
    # (name, method, path, body, where: the demo merchant or the standard one)
    ("euro", "GET", "/weather", None, "merchant"),
    ("evm-permit", "GET", "/report", None, "merchant"),
    ("bridge", "POST", "/echo", b"bridged", "merchant"),
    ("eip3009", "GET", "/weather", None, "standard"),
]


@pytest.mark.parametrize("kind", ["httpx", "requests"])
@pytest.mark.parametrize("rail", RAILS, ids=[r[0] for r in RAILS])
def test_a_session_pays_every_rail_the_sync_client_pays(
    rails: Sandbox, rail: tuple[str, str, str, bytes | None, str], kind: str
) -> None:
    name, method, path, body, where = rail
    account = rails.bank.open_account("10.00")
    url = rails.url(path) if where == "merchant" else rails.standard.resource_url(path)
    chain = rails.chain_a
    tokens_before = _token_balances(rails)
    eurq_before = chain.asset_balance(chain.merchant_address, EURQ_ASSET_ID)

    status, content, receipt = _fetch(kind, _rail_options(rails, account), method, url, body)

    assert status == 200, content
    assert isinstance(receipt, PaymentReceipt)
    assert receipt.rail == name
    tokens_after = _token_balances(rails)
    if name in ("euro", "bridge"):
        assert rails.balance(account) == Decimal("10.00") - receipt.amount
        (made,) = bank_payments(rails, account)
        assert made.code == receipt.transaction_code
    else:
        assert bank_payments(rails, account) == []
    if name == "bridge":
        assert content == b"bridged"
        assert chain.asset_balance(chain.merchant_address, EURQ_ASSET_ID) - eurq_before == 100_000
    moved = {k: tokens_before[k] - tokens_after[k] for k in tokens_before}
    expected = {"permit": 0, "eip3009": 0}
    if name == "evm-permit":
        expected["permit"] = 100_000
    if name == "eip3009":
        expected["eip3009"] = 100_000
    assert moved == expected
    if name in ("evm-permit", "eip3009"):
        assert receipt.tx_hash is not None and receipt.tx_hash.startswith("0x")


# --- free, refused, errors ------------------------------------------------------------------------


def test_a_free_resource_is_the_adapters_own_answer_unread_and_no_loop_starts(
    sandbox: Sandbox, payer: Account, options_for: Callable[..., PaymentOptions]
) -> None:
    size = 2 * 1024 * 1024
    with _session(options_for(payer)) as session:
        response = session.get(sandbox.url("/free"))
        assert response.status_code == 200 and response.x402_payment is None
        with session.get(sandbox.url(f"/stream?size={size}"), stream=True) as streamed:
            assert streamed.status_code == 200 and not streamed._content_consumed
            # The wrapped adapter's urllib3 body, read in this thread.
            assert type(streamed.raw).__module__.startswith("urllib3")
            assert sum(len(chunk) for chunk in streamed.iter_content(65536)) == size
        assert _payment_threads() == []  # no 402: the payment loop never started
    assert bank_payments(sandbox, payer) == []


def test_over_the_cap_is_refused_with_nothing_paid_and_the_402_readable(
    sandbox: Sandbox, payer: Account, options_for: Callable[..., PaymentOptions]
) -> None:
    options = options_for(payer, max_amount_per_payment="0.05")
    with _session(options) as session:
        with pytest.raises(AmountLimitExceeded) as caught:
            session.get(sandbox.url("/weather"))
        # The same error through requests' own hierarchy.
        with pytest.raises(requests.RequestException):
            session.get(sandbox.url("/weather"))
    error = caught.value
    _both(error, AmountLimitExceeded)
    assert error.money_moved is False
    assert isinstance(error.request, requests.PreparedRequest)
    assert error.request.url == sandbox.url("/weather")
    assert isinstance(error.response, requests.Response)
    assert error.response.status_code == 402
    assert error.response.json()["accepts"][0]["scheme"] == "euro"
    assert "0.05" in str(error) and type(error).__name__ == "AmountLimitExceeded"
    assert bank_payments(sandbox, payer) == []
    assert payments(options).ledger.entries() == []
    again = pickle.loads(pickle.dumps(error))  # noqa: S301 - our own bytes
    _both(again, AmountLimitExceeded)
    assert again.money_moved is False and again.response.status_code == 402
    assert again.request.url == sandbox.url("/weather")


def test_beyond_the_budget_is_refused_with_nothing_paid(
    sandbox: Sandbox, payer: Account, options_for: Callable[..., PaymentOptions]
) -> None:
    options = options_for(payer, budgets=[Budget("0.15")])
    with _session(options) as session:
        assert session.get(sandbox.url("/weather")).x402_payment.amount == Decimal("0.10")
        with pytest.raises(requests.RequestException) as caught:
            session.get(sandbox.url("/weather"))
    _both(caught.value, BudgetExceeded)
    assert caught.value.money_moved is False  # type: ignore[attr-defined]
    assert len(bank_payments(sandbox, payer)) == 1
    (status,) = asyncio.run(payments(options).budgets())
    assert (status.spent, status.remaining) == (Decimal("0.10"), Decimal("0.05"))


def test_quotes_the_ledger_and_the_budgets_are_read_from_the_session(
    sandbox: Sandbox, payer: Account, options_for: Callable[..., PaymentOptions]
) -> None:
    with _session(options_for(payer, budgets=[Budget("0.15")])) as session:
        quote = payments(session).quote(sandbox.url("/weather"), headers={"X-Trace": "q1"})
        assert quote.status_code == 402 and quote.url == sandbox.url("/weather")
        (offer,) = quote.payable
        assert (offer.amount, offer.currency, offer.first) == (Decimal("0.10"), "EUR", True)
        assert payments(session).quote(sandbox.url("/free")).free
        assert bank_payments(sandbox, payer) == [] and payments(session).ledger.entries() == []
        answer = session.get(sandbox.url("/weather"))
        paid = answer.x402_payment
        assert PaymentReceipt.of(answer) is paid is not None
        [entry] = payments(session).ledger.entries()
        assert (entry.outcome, entry.proof) == ("paid", paid.proof)
        (status,) = payments(session).budgets()
        assert (status.spent, status.remaining) == (Decimal("0.10"), Decimal("0.05"))
        after = payments(session).quote(sandbox.url("/weather"))
        assert after.payable == [] and after.entries[0].reason == "over_budget"
        # A PaymentAdapter the session holds answers the same.
        adapter = session.get_adapter(sandbox.url("/weather"))
        assert payments(adapter).ledger.entries() == [entry]  # type: ignore[arg-type]
    assert len(bank_payments(sandbox, payer)) == 1
    with requests.Session() as plain:
        with pytest.raises(ConfigurationError, match="call with_eur_payment first"):
            payments(plain)
        with pytest.raises(ConfigurationError, match="call with_eur_payment first"):
            payments(plain).quote(sandbox.url("/weather"))


@pytest.mark.parametrize(
    ("limit", "refusal"),
    [
        ({"max_amount_per_payment": "0.05"}, AmountLimitExceeded),
        ({"budgets": [Budget("0.05")]}, BudgetExceeded),
    ],
    ids=["cap", "budget"],
)
def test_a_refused_payment_sends_no_proof(
    sandbox: Sandbox,
    payer: Account,
    options_for: Callable[..., PaymentOptions],
    limit: dict[str, Any],
    refusal: type[X402Error],
) -> None:
    merchant = ScriptedMerchant(
        sandbox.bank, sandbox.merchant.code, lambda m, seen: m.challenge(m.entry("0.10"))
    )
    with (
        served(merchant) as url,
        _session(options_for(payer, **limit)) as session,
        pytest.raises(refusal) as caught,
    ):
        session.get(url + "/paid")
    _both(caught.value, refusal)
    assert [seen.proof for seen in merchant.requests] == [None]  # one request, no proof
    assert bank_payments(sandbox, payer) == []


def test_a_402_that_is_not_x402_comes_back_untouched(
    sandbox: Sandbox, payer: Account, options_for: Callable[..., PaymentOptions]
) -> None:
    body = b'{"error": "card declined", "pad": "' + b"x" * 200_000 + b'"}'
    with served(scripted_402(body)) as url, _session(options_for(payer)) as session:
        response = session.get(url + "/card")
        assert response.status_code == 402 and response.content == body
        assert response.json()["error"] == "card declined"
        assert response.x402_payment is None
    assert bank_payments(sandbox, payer) == []


def test_errors_before_any_402_stay_requests_own(
    payer: Account, options_for: Callable[..., PaymentOptions]
) -> None:
    with (
        _session(options_for(payer)) as session,
        pytest.raises(requests.ConnectionError) as caught,
    ):
        session.get("http://127.0.0.1:9/nothing-listens", timeout=5)
    assert not isinstance(caught.value, X402Error)


# --- one budget across an httpx client and a requests session -----------------------------------


def test_one_budget_holds_across_an_httpx_client_and_a_session_exactly(
    sandbox: Sandbox, payer: Account, options_for: Callable[..., PaymentOptions]
) -> None:
    options = options_for(payer, budgets=[Budget("0.40")])  # four payments of 0.10
    per_side = 8
    start = threading.Barrier(2)
    outcomes: dict[str, list[object]] = {}

    def side(name: str, fetch: Callable[[], int]) -> None:
        def one(_: int) -> object:
            try:
                return fetch()
            except BudgetExceeded as exc:
                return exc

        start.wait()
        with ThreadPoolExecutor(per_side) as pool:
            outcomes[name] = list(pool.map(one, range(per_side)))

    with (
        with_eur_payment(httpx.Client(timeout=30), options) as client,
        _session(options) as session,
    ):
        threads = [
            threading.Thread(
                target=side, args=("httpx", lambda: client.get(sandbox.url("/weather")).status_code)
            ),
            threading.Thread(
                target=side,
                args=("requests", lambda: session.get(sandbox.url("/weather")).status_code),
            ),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    results = outcomes["httpx"] + outcomes["requests"]
    assert len(results) == 2 * per_side
    assert results.count(200) == 4
    refused = [r for r in results if r != 200]
    assert all(isinstance(r, BudgetExceeded) for r in refused), results
    assert all(isinstance(r, requests.RequestException) for r in outcomes["requests"] if r != 200)
    assert len(bank_payments(sandbox, payer)) == 4
    assert sandbox.balance(payer) == Decimal("9.60")
    assert [e.outcome for e in payments(options).ledger.entries()].count("paid") == 4
    (status,) = asyncio.run(payments(options).budgets())
    assert (status.spent, status.remaining) == (Decimal("0.40"), Decimal("0"))


# --- redirects -----------------------------------------------------------------------------------


def test_a_redirect_to_a_paid_resource_is_paid_once(
    sandbox: Sandbox, payer: Account, options_for: Callable[..., PaymentOptions]
) -> None:
    start = sandbox.url("/redirect?to=" + quote(sandbox.url("/weather"), safe=""))
    with _session(options_for(payer)) as session:
        response = session.get(start)
    assert response.status_code == 200 and response.json()["city"] == "Amsterdam"
    assert [r.status_code for r in response.history] == [302]
    assert response.x402_payment.amount == Decimal("0.10")
    assert len(bank_payments(sandbox, payer)) == 1


def test_the_proof_never_follows_a_redirect(
    sandbox: Sandbox, payer: Account, options_for: Callable[..., PaymentOptions]
) -> None:
    elsewhere = Recorder()
    with served(elsewhere) as other:

        def script(m: ScriptedMerchant, seen: Seen) -> Reply:
            if seen.proof is None:
                return m.challenge(m.entry())
            m.verify(seen.proof)
            return Reply(307, b"", {"location": other + "/delivered"})

        merchant = ScriptedMerchant(sandbox.bank, sandbox.merchant.code, script)
        with served(merchant) as url, _session(options_for(payer)) as session:
            response = session.post(url + "/paid", data=b"order=1")
    assert response.status_code == 200 and response.json() == {"recorded": True}
    assert [r.status_code for r in response.history] == [307]
    receipt = response.x402_payment
    assert isinstance(receipt, PaymentReceipt) and receipt.amount == Decimal("0.10")
    assert [r.proof is not None for r in merchant.requests] == [False, True]
    ((method, path, headers),) = elsewhere.requests
    assert (method, path) == ("POST", "/delivered")
    assert "x-payment" not in headers and "payment-signature" not in headers
    assert "x-payment" not in {k.lower() for k in response.request.headers}
    assert len(bank_payments(sandbox, payer)) == 1


def test_a_paid_answer_that_redirects_back_to_its_402_is_paid_once(
    sandbox: Sandbox, payer: Account, options_for: Callable[..., PaymentOptions]
) -> None:
    def script(m: ScriptedMerchant, seen: Seen) -> Reply:
        if seen.proof is None:
            return m.challenge(m.entry())
        m.verify(seen.proof)
        return Reply(302, b"", {"location": "/paid"})

    merchant = ScriptedMerchant(sandbox.bank, sandbox.merchant.code, script)
    with (
        served(merchant) as url,
        _session(options_for(payer)) as session,
        pytest.raises(PaymentVerificationFailed) as caught,
    ):
        session.get(url + "/paid")
    _both(caught.value, PaymentVerificationFailed)
    assert len(bank_payments(sandbox, payer)) == 1
    assert [r.proof is not None for r in merchant.requests] == [False, True, False]
    assert caught.value.money_moved is True and len(caught.value.receipts) == 1


def test_a_redirect_hop_that_fails_after_the_payment_says_money_moved(
    sandbox: Sandbox, payer: Account, options_for: Callable[..., PaymentOptions]
) -> None:
    def script(m: ScriptedMerchant, seen: Seen) -> Reply:
        if seen.proof is None:
            return m.challenge(m.entry())
        m.verify(seen.proof)
        return Reply(302, b"", {"location": "http://127.0.0.1:9/gone"})  # nothing listens

    merchant = ScriptedMerchant(sandbox.bank, sandbox.merchant.code, script)
    with (
        served(merchant) as url,
        _session(options_for(payer)) as session,
        pytest.raises(PaymentVerificationFailed) as caught,
    ):
        session.get(url + "/paid", timeout=5)
    _both(caught.value, PaymentVerificationFailed)
    assert caught.value.money_moved is True and len(caught.value.receipts) == 1
    assert isinstance(caught.value.__cause__, requests.ConnectionError)
    assert len(bank_payments(sandbox, payer)) == 1
    # Sent to another process (a pool, a task queue), it is still the same error.
    again = pickle.loads(pickle.dumps(caught.value))  # noqa: S301 - our own bytes
    _both(again, PaymentVerificationFailed)
    assert type(again) is type(caught.value) and str(again) == str(caught.value)
    assert again.money_moved is True and again.receipts == caught.value.receipts


def test_a_response_hook_that_raises_after_the_payment_says_money_moved(
    sandbox: Sandbox, payer: Account, options_for: Callable[..., PaymentOptions]
) -> None:
    def hook(response: requests.Response, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the caller's hook broke")

    options = options_for(payer)
    with _session(options) as session, pytest.raises(PaymentVerificationFailed) as caught:
        session.get(sandbox.url("/weather"), hooks={"response": hook})
    _both(caught.value, PaymentVerificationFailed)
    assert caught.value.money_moved is True and len(caught.value.receipts) == 1
    assert isinstance(caught.value.__cause__, RuntimeError)
    (entry,) = payments(options).ledger.entries()
    assert entry.outcome == "paid" and not entry.delivered
    assert len(bank_payments(sandbox, payer)) == 1


# --- bodies and streams --------------------------------------------------------------------------


@pytest.mark.parametrize("body", ["generator", "file"])
def test_a_one_shot_body_is_refused_before_paying(
    sandbox: Sandbox, payer: Account, options_for: Callable[..., PaymentOptions], body: str
) -> None:
    def upload() -> Iterator[bytes]:
        yield b"hello "
        yield b"world"

    one_shot: Any = upload() if body == "generator" else io.BytesIO(b"hello world")
    with _session(options_for(payer)) as session:
        with pytest.raises(UnreplayableRequest) as caught:
            session.post(sandbox.url("/echo"), data=one_shot)
        _both(caught.value, UnreplayableRequest)
        assert caught.value.money_moved is False
        assert bank_payments(sandbox, payer) == []
        for replayable in (b"hello world", "hello world"):
            answer = session.post(sandbox.url("/echo"), data=replayable)
            assert answer.content == b"hello world" and answer.x402_payment is not None
        assert session.post(sandbox.url("/echo"), json={"a": 1}).json() == {"a": 1}
    assert len(bank_payments(sandbox, payer)) == 3


def test_a_paid_response_can_be_streamed(
    sandbox: Sandbox, payer: Account, options_for: Callable[..., PaymentOptions]
) -> None:
    size = 4 * 1024 * 1024
    with _session(options_for(payer)) as session:
        with session.get(sandbox.url(f"/download?size={size}"), stream=True) as response:
            assert response.x402_payment.amount == Decimal("0.01")
            assert not response._content_consumed
            assert sum(len(c) for c in response.iter_content(256 * 1024)) == size
        # Stopping early closes the paid body (through the payment loop) without a warning.
        with session.get(sandbox.url(f"/download?size={size}"), stream=True) as response:
            assert len(next(response.iter_content(1024))) > 0
        assert len(session.get(sandbox.url(f"/download?size={size}")).content) == size
        outliving = session.get(sandbox.url(f"/download?size={size}"), stream=True)
    # A paid body outlives its session only while the session is open.
    with pytest.raises(requests.ConnectionError, match="cannot be read"):
        outliving.content  # noqa: B018
    assert len(bank_payments(sandbox, payer)) == 4


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "read-by-requests"])
def test_a_paid_body_that_breaks_off_raises_outcome_unknown(
    sandbox: Sandbox, payer: Account, options_for: Callable[..., PaymentOptions], stream: bool
) -> None:
    def script(m: ScriptedMerchant, seen: Seen) -> Reply:
        if seen.proof is None:
            return m.challenge(m.entry())
        m.verify(seen.proof)
        return Reply(200, {"paid": True, "pad": "x" * 1000}, broken=True)

    merchant = ScriptedMerchant(sandbox.bank, sandbox.merchant.code, script)
    with (
        served(merchant) as url,
        _session(options_for(payer)) as session,
        pytest.raises(PaymentOutcomeUnknown, match="broke off") as caught,
    ):
        # requests reads the body itself (stream=False), or the caller does.
        session.get(url + "/paid", stream=stream).content  # noqa: B018
    _both(caught.value, PaymentOutcomeUnknown)
    assert caught.value.proof and caught.value.money_moved is True
    assert len(bank_payments(sandbox, payer)) == 1


def test_timeouts_apply_to_every_hop_and_a_paid_hop_that_times_out_is_unknown(
    sandbox: Sandbox, payer: Account, options_for: Callable[..., PaymentOptions]
) -> None:
    gave_up = threading.Event()

    def script(m: ScriptedMerchant, seen: Seen) -> Reply:
        if seen.proof is None:
            return m.challenge(m.entry())
        m.verify(seen.proof)
        gave_up.wait(PATIENCE)  # the paid hop answers only once the caller gave up on it
        return Reply(200, {"paid": True})

    merchant = ScriptedMerchant(sandbox.bank, sandbox.merchant.code, script)
    with served(merchant) as url, _session(options_for(payer, merchant_error_retries=0)) as session:
        try:
            # a read timeout the 402 hop meets on a busy machine; the paid hop cannot
            with pytest.raises(PaymentOutcomeUnknown) as caught:
                session.get(url + "/paid", timeout=(30, 3))
        finally:
            gave_up.set()
    _both(caught.value, PaymentOutcomeUnknown)
    assert isinstance(caught.value.__cause__, httpx.ReadTimeout)
    assert isinstance(caught.value.__cause__.__cause__, requests.ReadTimeout)
    assert caught.value.proof
    assert len(bank_payments(sandbox, payer)) == 1


# --- per-request settings -------------------------------------------------------------------------


def test_per_request_settings_never_pay_and_lower_the_cap(
    sandbox: Sandbox, payer: Account, options_for: Callable[..., PaymentOptions]
) -> None:
    with _session(options_for(payer)) as session:
        with PaymentAdapter.settings({"pay": False}):
            response = session.get(sandbox.url("/weather"))
        assert response.status_code == 402 and response.x402_payment is None
        assert response.json()["accepts"][0]["scheme"] == "euro"
        with (
            PaymentAdapter.settings({"max_amount_per_payment": "0.05"}),
            pytest.raises(AmountLimitExceeded),
        ):
            session.get(sandbox.url("/weather"))
        assert session.get(sandbox.url("/weather")).status_code == 200
    with pytest.raises(ConfigurationError, match="unknown per-request"):
        PaymentAdapter.settings({"pya": False}).__enter__()
    assert len(bank_payments(sandbox, payer)) == 1


# --- installing, mounting, closing ------------------------------------------------------------


class _CountingAdapter(requests.adapters.HTTPAdapter):
    """A user's own adapter (retries, certificates, ...): the payment goes through it."""

    def __init__(self) -> None:
        super().__init__(max_retries=0)
        self.sent: list[str] = []

    def send(self, request: requests.PreparedRequest, *args: Any, **kwargs: Any) -> Any:
        self.sent.append((request.headers.get("X-PAYMENT") is None and "plain") or "paid")
        return super().send(request, *args, **kwargs)


def test_installing_wraps_every_mounted_adapter_and_keeps_installed_ones(
    sandbox: Sandbox, payer: Account, options_for: Callable[..., PaymentOptions]
) -> None:
    options = options_for(payer)
    session = requests.Session()
    session.trust_env = False
    own = _CountingAdapter()
    session.mount("http://127.0.0.1", own)
    assert with_eur_payment(session, options) is session
    mounted = session.adapters["http://127.0.0.1"]
    assert isinstance(mounted, PaymentAdapter) and mounted.wrapped is own
    assert all(isinstance(a, PaymentAdapter) for a in session.adapters.values())
    assert list(session.adapters) == ["http://127.0.0.1", "https://", "http://"]  # order kept
    assert session.get(sandbox.url("/weather")).status_code == 200
    assert own.sent == ["plain", "paid"]  # the 402 and the paid re-send, through the user's
    assert session.get(sandbox.url("/weather?again")).status_code == 200
    assert _payment_threads().count("x402-sync-payer") == 1  # one loop for every mount
    assert with_eur_payment(session, options) is session  # again: nothing wrapped twice
    assert session.adapters["http://127.0.0.1"] is mounted and mounted.wrapped is own
    assert session.get(sandbox.url("/weather")).status_code == 200
    session.close()
    assert _payment_threads() == []
    assert len(bank_payments(sandbox, payer)) == 3


def test_a_payment_adapter_mounted_by_hand_refuses_before_sending(
    sandbox: Sandbox, payer: Account, options_for: Callable[..., PaymentOptions]
) -> None:
    own = _CountingAdapter()
    with requests.Session() as session:
        session.mount("http://", PaymentAdapter(own, options_for(payer)))
        with pytest.raises(ConfigurationError, match=r"with_eur_payment\(session") as caught:
            session.get(sandbox.url("/weather"))
        _both(caught.value, ConfigurationError)
        assert own.sent == []
        # Installing keeps the adapter and makes it pay.
        with_eur_payment(session, options_for(payer))
        assert session.get(sandbox.url("/weather")).status_code == 200
        assert session.adapters["http://"].wrapped is own  # type: ignore[attr-defined]
    assert len(bank_payments(sandbox, payer)) == 1


def test_secrets_stay_out_of_reprs_and_errors(
    sandbox: Sandbox, payer: Account, options_for: Callable[..., PaymentOptions]
) -> None:
    secret_query = "sk_do_not_print"
    with _session(options_for(payer, max_amount_per_payment="0.05")) as session:
        shown = [repr(session.adapters), repr(session.adapters["http://"])]
        try:
            session.get(sandbox.url(f"/weather?api_key={secret_query}"))
        except AmountLimitExceeded as exc:
            shown += [str(exc), repr(exc), repr(exc.response)]
        try:
            session.get(f"http://127.0.0.1:9/x?api_key={secret_query}", timeout=5)
        except requests.ConnectionError as exc:
            assert not isinstance(exc, X402Error)  # requests' own message: not ours to redact
    text = "\n".join(shown)
    assert len(shown) == 5
    assert payer.api_key not in text and secret_query not in text
    assert "AmountLimitExceeded" in text


def test_requests_is_optional_and_its_absence_says_which_extra(tmp_path: Any) -> None:
    code = (
        "import sys; sys.modules['requests'] = None\n"
        "import httpx, x402_client\n"
        "client = x402_client.with_eur_payment(httpx.Client(), {})\n"  # httpx users unaffected
        "client.close()\n"
        "try:\n"
        "    from x402_client import PaymentAdapter\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "pip install 'x402-eur[requests]'" in result.stdout


def test_importing_the_package_or_paying_with_httpx_loads_no_requests() -> None:
    code = (
        "import sys, httpx, x402_client\n"
        "x402_client.with_eur_payment(httpx.Client(), {}).close()\n"
        "print('requests' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
