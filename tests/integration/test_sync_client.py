"""Payment for `httpx.Client`: the same payments, limits, errors and receipts as the async
client, over real sockets against the sandbox (which runs in threads of its own). The fault
table runs through the sync client with every other kind in `test_faults.py`.

The sync client answers 402s on a private event loop (one thread per installed client);
every test closes its clients, and `_no_loop_threads_left` checks after each test that no
payment thread outlived its client.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from tests.conftest import bank_payments, scripted_402
from tests.merchants import Reply, ScriptedMerchant, Seen
from tests.sandboxes import evm_options, payment_options
from tests.waiting import eventually_sync
from x402_client import (
    Budget,
    BudgetExceeded,
    ConfigurationError,
    PaymentOptions,
    PaymentOutcomeUnknown,
    PaymentReceipt,
    PaymentRejectedByHook,
    PaymentTransport,
    PaymentVerificationFailed,
    SyncPaymentTransport,
    UnreplayableRequest,
    payments,
    with_eur_payment,
)
from x402_eur_sandbox import Account, Price, Sandbox, ServedApp
from x402_eur_sandbox._chain_a import EURQ_ASSET_ID


def _payment_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("x402-sync")]


@pytest.fixture(autouse=True)
def _no_loop_threads_left() -> Iterator[None]:
    yield
    # A worker finishing the last chunk may take a moment to exit after the join.
    eventually_sync(
        lambda: not _payment_threads(), "every sync client's payment thread to end with it"
    )


@contextlib.contextmanager
def served(app: Any) -> Iterator[str]:
    """Serve an ASGI app on a free port from a thread of its own (sync tests block theirs)."""
    ready = threading.Event()
    control: dict[str, Any] = {}

    async def main() -> None:
        server = await ServedApp(app, "sync-test-app").start()
        control.update(loop=asyncio.get_running_loop(), stop=asyncio.Event(), url=server.url)
        ready.set()
        try:
            await control["stop"].wait()
        finally:
            await server.stop()

    thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    thread.start()
    assert ready.wait(30), "the test app did not start"
    try:
        yield control["url"]
    finally:
        control["loop"].call_soon_threadsafe(control["stop"].set)
        thread.join(30)


def _client(options: PaymentOptions | dict[str, Any], **kwargs: Any) -> httpx.Client:
    return with_eur_payment(httpx.Client(**kwargs), options)


# --- each rail ---------------------------------------------------------------------------------

RAIL_PRICES = {
    "/weather": Price(Decimal("0.10"), "euro only", rails=("euro",)),
    "/report": Price(Decimal("0.10"), "EVM permit on polygon only", rails=("eip155:137",)),
    "/echo": Price(Decimal("0.10"), "bridged EURQ only", rails=("ledgera",)),
}


@pytest.fixture(scope="module")
def rails() -> Iterator[Sandbox]:
    with Sandbox.run_in_thread(
        evm=True, chain_a=True, bridge_delay=0.2, prices=RAIL_PRICES
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


def test_sync_client_pays_a_euro_entry(rails: Sandbox) -> None:
    account = rails.bank.open_account("10.00")
    merchant_before = rails.balance(rails.merchant)
    with _client(_rail_options(rails, account)) as client:
        response = client.get(rails.url("/weather"))
    assert response.status_code == 200 and response.json()["city"] == "Amsterdam"
    assert rails.balance(account) == Decimal("9.90")
    assert rails.balance(rails.merchant) - merchant_before == Decimal("0.10")
    receipt = response.extensions["x402_payment"]
    assert isinstance(receipt, PaymentReceipt)
    assert (receipt.rail, receipt.amount, receipt.currency) == ("euro", Decimal("0.10"), "EUR")
    assert (receipt.payment_request_code or "").startswith("pr_")
    (made,) = bank_payments(rails, account)
    assert made.code == receipt.transaction_code


def test_sync_client_pays_an_evm_permit_entry(rails: Sandbox) -> None:
    evm = rails.evm

    def balances() -> tuple[int, int]:
        async def read() -> tuple[int, int]:
            return (
                await evm.token_balance(137, "EURQ", evm.payer_address),
                await evm.token_balance(137, "EURQ", evm.merchant_address),
            )

        return asyncio.run(read())

    payer_before, merchant_before = balances()
    with _client(PaymentOptions(evm=evm_options(evm))) as client:
        response = client.get(rails.url("/report"))
    assert response.status_code == 200
    payer_after, merchant_after = balances()
    assert payer_before - payer_after == 100_000
    assert merchant_after - merchant_before == 100_000
    receipt = response.extensions["x402_payment"]
    assert (receipt.rail, receipt.network) == ("evm-permit", "eip155:137")
    assert receipt.payer == evm.payer_address
    assert receipt.tx_hash is not None and receipt.tx_hash.startswith("0x")


def test_sync_client_pays_a_bridge_entry(rails: Sandbox) -> None:
    chain = rails.chain_a
    account = rails.bank.open_account("10.00")
    merchant_before = chain.asset_balance(chain.merchant_address, EURQ_ASSET_ID)
    with _client(_rail_options(rails, account)) as client:
        response = client.post(rails.url("/echo"), content=b"bridged")
    assert response.status_code == 200 and response.content == b"bridged"
    assert rails.balance(account) == Decimal("9.90")
    assert chain.asset_balance(chain.merchant_address, EURQ_ASSET_ID) - merchant_before == 100_000
    receipt = response.extensions["x402_payment"]
    assert (receipt.rail, receipt.network) == ("bridge", "ledgera:mainnet")
    (made,) = bank_payments(rails, account)
    assert receipt.transaction_code == made.code
    assert receipt.blockchain_tx_id == made.blockchain_tx_id


# --- state belongs to the options: one budget for sync and async clients -----------------------


def test_a_sync_and_an_async_client_of_one_options_respect_one_budget_exactly(
    sandbox: Sandbox, payer: Account, options_for: Callable[..., PaymentOptions]
) -> None:
    options = options_for(payer, budgets=[Budget("0.50")])  # five payments of 0.10
    per_side = 12
    start = threading.Barrier(2)
    outcomes: dict[str, list[object]] = {"sync": [], "async": []}

    def sync_side() -> None:
        with _client(options) as client:

            def fetch(_: int) -> object:
                try:
                    return client.get(sandbox.url("/weather")).status_code
                except BudgetExceeded as exc:
                    return exc

            start.wait()
            with ThreadPoolExecutor(per_side) as pool:
                outcomes["sync"] = list(pool.map(fetch, range(per_side)))

    def async_side() -> None:
        async def main() -> None:
            async with with_eur_payment(httpx.AsyncClient(), options) as client:

                async def fetch() -> object:
                    try:
                        return (await client.get(sandbox.url("/weather"))).status_code
                    except BudgetExceeded as exc:
                        return exc

                start.wait()
                outcomes["async"] = list(await asyncio.gather(*(fetch() for _ in range(per_side))))

        asyncio.run(main())

    threads = [threading.Thread(target=sync_side), threading.Thread(target=async_side)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    results = outcomes["sync"] + outcomes["async"]
    assert len(results) == 2 * per_side
    assert results.count(200) == 5
    assert all(isinstance(r, BudgetExceeded) for r in results if r != 200), results
    assert len(bank_payments(sandbox, payer)) == 5
    assert sandbox.balance(payer) == Decimal("9.50")
    assert [e.outcome for e in payments(options).ledger.entries()].count("paid") == 5
    (status,) = asyncio.run(payments(options).budgets())
    assert (status.spent, status.remaining) == (Decimal("0.50"), Decimal("0"))


def test_concurrent_threads_on_one_sync_client_each_pay_once(
    sandbox: Sandbox, payer: Account, options_for: Callable[..., PaymentOptions]
) -> None:
    with _client(options_for(payer)) as client, ThreadPoolExecutor(10) as pool:
        responses = list(pool.map(lambda _: client.get(sandbox.url("/weather")), range(20)))
        assert len({id(r.extensions["x402_payment"]) for r in responses}) == 20
    assert [r.status_code for r in responses] == [200] * 20
    assert len(bank_payments(sandbox, payer)) == 20
    assert sandbox.balance(payer) == Decimal("8.00")


# --- redirects and 402s that are not ours ----------------------------------------------------


def test_a_redirect_to_a_paid_resource_is_paid_once(
    sandbox: Sandbox, payer: Account, options_for: Callable[..., PaymentOptions]
) -> None:
    start = sandbox.url("/redirect?to=" + quote(sandbox.url("/weather"), safe=""))
    with _client(options_for(payer), follow_redirects=True) as client:
        response = client.get(start)
    assert response.status_code == 200 and response.json()["city"] == "Amsterdam"
    assert [r.status_code for r in response.history] == [302]
    assert response.extensions["x402_payment"].amount == Decimal("0.10")
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
        _client(options_for(payer), follow_redirects=True) as client,
        pytest.raises(PaymentVerificationFailed) as caught,
    ):
        client.get(url + "/paid")
    assert len(bank_payments(sandbox, payer)) == 1
    assert [r.proof is not None for r in merchant.requests] == [False, True, False]
    assert caught.value.money_moved is True and len(caught.value.receipts) == 1


@pytest.mark.parametrize("size", [60, 200_000], ids=["small", "larger-than-any-challenge"])
def test_a_402_that_is_not_x402_comes_back_untouched(
    sandbox: Sandbox, payer: Account, options_for: Callable[..., PaymentOptions], size: int
) -> None:
    body = b'{"error": "card declined", "pad": "' + b"x" * size + b'"}'
    with served(scripted_402(body)) as url, _client(options_for(payer)) as client:
        response = client.get(url + "/card")
        assert response.status_code == 402
        assert response.content == body
        assert response.json()["error"] == "card declined"
        assert "x402_payment" not in response.extensions
        assert payments(client).ledger.entries() == []
    assert bank_payments(sandbox, payer) == []


def test_per_request_never_pay_hands_the_402_back_unread(
    sandbox: Sandbox, payer: Account, options_for: Callable[..., PaymentOptions]
) -> None:
    never = {"x402": {"pay": False}}
    with (
        _client(options_for(payer)) as client,
        client.stream("GET", sandbox.url("/weather"), extensions=never) as response,
    ):
        assert response.status_code == 402
        assert not response.is_stream_consumed
        assert response.read() and response.json()["accepts"][0]["scheme"] == "euro"
    assert bank_payments(sandbox, payer) == []


# --- streams -------------------------------------------------------------------------------------


def test_a_paid_response_can_be_streamed(
    sandbox: Sandbox, payer: Account, options_for: Callable[..., PaymentOptions]
) -> None:
    size = 4 * 1024 * 1024
    with _client(options_for(payer)) as client:
        with client.stream("GET", sandbox.url(f"/download?size={size}")) as response:
            assert response.extensions["x402_payment"].amount == Decimal("0.01")
            assert len(response.read()) == size
        with client.stream("GET", sandbox.url(f"/download?size={size}")) as response:
            total = sum(len(chunk) for chunk in response.iter_raw())
        assert total == size
        # Stopping early closes the paid body (through the payment loop) without a warning.
        with client.stream("GET", sandbox.url(f"/download?size={size}")) as response:
            assert len(next(response.iter_raw())) > 0
    assert len(bank_payments(sandbox, payer)) == 3


def test_a_free_stream_passes_through_unread_in_the_callers_thread(
    sandbox: Sandbox, payer: Account, options_for: Callable[..., PaymentOptions]
) -> None:
    size = 8 * 1024 * 1024
    with _client(options_for(payer)) as client:
        with client.stream("GET", sandbox.url(f"/stream?size={size}")) as response:
            assert response.status_code == 200 and not response.is_stream_consumed
            assert sum(len(chunk) for chunk in response.iter_raw()) == size
        # No 402 was seen: the payment loop never started.
        assert _payment_threads() == []
    assert bank_payments(sandbox, payer) == []


class _BreaksOff(httpx.SyncByteStream):
    def __iter__(self) -> Iterator[bytes]:
        yield b'{"partial": '
        raise httpx.ReadError("connection reset by peer")


def test_a_paid_body_that_breaks_off_raises_outcome_unknown_in_the_callers_thread(
    sandbox: Sandbox, payer: Account, options_for: Callable[..., PaymentOptions]
) -> None:
    def script(m: ScriptedMerchant, seen: Seen) -> Reply:
        if seen.proof is None:
            return m.challenge(m.entry())
        m.verify(seen.proof)
        return Reply(200, {"paid": True})

    merchant = ScriptedMerchant(sandbox.bank, sandbox.merchant.code, script)
    served_by_mock = merchant.transport()

    def handler(request: httpx.Request) -> httpx.Response:
        answer = served_by_mock.handle_request(request)
        if answer.status_code == 200:
            return httpx.Response(200, stream=_BreaksOff())
        return answer

    client = _client(options_for(payer), transport=httpx.MockTransport(handler))
    with client, client.stream("GET", "http://merchant.test/paid") as response:
        assert response.status_code == 200
        with pytest.raises(PaymentOutcomeUnknown, match="broke off") as caught:
            response.read()
    assert caught.value.proof and caught.value.money_moved is True
    assert isinstance(caught.value.__cause__, httpx.ReadError)
    assert len(bank_payments(sandbox, payer)) == 1


def test_a_one_shot_body_is_refused_before_paying(
    sandbox: Sandbox, payer: Account, options_for: Callable[..., PaymentOptions]
) -> None:
    def upload() -> Iterator[bytes]:
        yield b"hello "
        yield b"world"

    with _client(options_for(payer)) as client:
        with pytest.raises(UnreplayableRequest):
            client.post(sandbox.url("/echo"), content=upload())
        assert client.post(sandbox.url("/echo"), content=b"hello world").content == b"hello world"
    assert len(bank_payments(sandbox, payer)) == 1


# --- quotes, budgets, ledger -----------------------------------------------------------------


def test_quote_budget_status_and_ledger_of_a_sync_client(
    sandbox: Sandbox, payer: Account, options_for: Callable[..., PaymentOptions]
) -> None:
    options = options_for(payer, budgets=[Budget("0.15")])
    with _client(options) as client:
        quote = payments(client).quote(sandbox.url("/weather"))
        assert quote.status_code == 402
        (entry,) = quote.payable
        assert (entry.amount, entry.currency, entry.first) == (Decimal("0.10"), "EUR", True)
        assert payments(client).quote(sandbox.url("/free")).free
        client.get(sandbox.url("/weather"))
        (status,) = payments(client).budgets()
        assert (status.spent, status.remaining) == (Decimal("0.10"), Decimal("0.05"))
        after = payments(client).quote(sandbox.url("/weather"))
        assert after.payable == [] and after.entries[0].reason == "over_budget"
        (paid,) = payments(client).ledger.entries()
        assert paid.outcome == "paid" and paid.delivered
        transport = client._transport
        assert isinstance(transport, SyncPaymentTransport)
        assert payments(transport).ledger is payments(options).ledger
    assert len(bank_payments(sandbox, payer)) == 1


# --- wrong kinds, and the loop thread's life ----------------------------------------------------


def test_an_async_transport_in_a_sync_client_says_what_to_use() -> None:
    transport = PaymentTransport(httpx.AsyncHTTPTransport(), {})
    client = httpx.Client(transport=transport)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"use SyncPaymentTransport \(or with_eur"):
        client.get("http://127.0.0.1:9/")
    with pytest.raises(ConfigurationError, match="SyncPaymentTransport"):
        httpx.Client(transport=transport).__enter__()  # type: ignore[arg-type]


def test_a_sync_transport_in_an_async_client_says_what_to_use() -> None:
    async def main() -> None:
        transport = SyncPaymentTransport(httpx.HTTPTransport(), {})
        client = httpx.AsyncClient(transport=transport)  # type: ignore[arg-type]
        with pytest.raises(ConfigurationError, match=r"use PaymentTransport \(or with_eur"):
            await client.get("http://127.0.0.1:9/")
        with pytest.raises(ConfigurationError, match="PaymentTransport"):
            await httpx.AsyncClient(transport=transport).__aenter__()  # type: ignore[arg-type]
        transport.close()
        with pytest.raises(ConfigurationError, match=r"call with_eur_payment first"):
            payments(client)

    asyncio.run(main())
    with pytest.raises(ConfigurationError, match="sync transport"):
        SyncPaymentTransport(httpx.AsyncHTTPTransport(), {})  # type: ignore[arg-type]


def test_with_eur_payment_on_something_else_names_both_clients() -> None:
    with pytest.raises(ConfigurationError, match=r"httpx\.AsyncClient or an httpx\.Client"):
        with_eur_payment(object(), {})  # type: ignore[call-overload]
    with httpx.Client() as plain, pytest.raises(ConfigurationError, match="with_eur_payment"):
        payments(plain)


def test_closing_the_client_stops_its_payment_loop(
    sandbox: Sandbox, payer: Account, options_for: Callable[..., PaymentOptions]
) -> None:
    options = options_for(payer)
    mounted = httpx.HTTPTransport()
    client = _client(options, mounts={"http://127.0.0.1": mounted})
    assert isinstance(client._transport, SyncPaymentTransport)
    for transport in client._mounts.values():
        assert isinstance(transport, SyncPaymentTransport) and transport.wrapped is mounted
    assert client.get(sandbox.url("/free")).status_code == 200
    assert _payment_threads() == []  # started lazily, on the first 402
    assert client.get(sandbox.url("/weather")).status_code == 200
    assert client.get(sandbox.url("/weather")).status_code == 200
    assert _payment_threads().count("x402-sync-payer") == 1  # one loop for transport and mounts
    assert with_eur_payment(client, options) is client  # re-installing does not wrap twice
    assert client.get(sandbox.url("/weather")).status_code == 200
    assert isinstance(client._mounts[next(iter(client._mounts))], SyncPaymentTransport)
    assert not isinstance(next(iter(client._mounts.values())).wrapped, SyncPaymentTransport)  # type: ignore[union-attr]
    client.close()
    assert _payment_threads() == []
    assert len(bank_payments(sandbox, payer)) == 3

    transport = SyncPaymentTransport(httpx.HTTPTransport(), options)
    with httpx.Client(transport=transport) as built:
        assert built.get(sandbox.url("/weather")).status_code == 200
        assert "x402-sync-payer" in _payment_threads()
    assert _payment_threads() == []


def test_a_callback_that_pays_through_its_own_client_is_refused_not_deadlocked(
    sandbox: Sandbox, payer: Account, options_for: Callable[..., PaymentOptions]
) -> None:
    holder: dict[str, httpx.Client] = {}

    def hook(intent: Any) -> bool:
        return holder["client"].get(sandbox.url("/weather")).status_code == 200

    with _client(options_for(payer, on_before_payment=hook)) as client:
        holder["client"] = client
        with pytest.raises(PaymentRejectedByHook) as caught:
            client.get(sandbox.url("/weather"))
    assert isinstance(caught.value.__cause__, ConfigurationError)
    assert bank_payments(sandbox, payer) == []
