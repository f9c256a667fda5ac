"""The EVM permit rail against the sandbox: real anvil chains 1 and 137, real tokens,
the real on-chain facilitator and the merchant gate."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import anyio
import httpx
import pytest
from eth_account import Account

from tests.conftest import scripted_402
from tests.sandboxes import evm_options, payment_options
from x402_client import (
    AmountLimitExceeded,
    ConfigurationError,
    EvmOptions,
    NoSatisfiableOption,
    PaymentOptions,
    PaymentProgress,
    PaymentRejectedByHook,
    with_eur_payment,
)
from x402_client._protocol.errors import SpenderMismatch
from x402_client._protocol.exact_json import b64_json_decode
from x402_client._rails.evm import permit_proof, permit_typed_data
from x402_eur_sandbox import Price, Sandbox

PRICES = {
    "/weather": Price(Decimal("0.10"), "weather on polygon", rails=("eip155:137",)),
    "/report": Price(Decimal("0.50"), "report on mainnet", rails=("eip155:1",)),
    "/premium": Price(Decimal("0.10"), "USDQ only", rails=("eip155:137:USDQ",)),
    "/echo": Price(Decimal("0.05"), "either chain", rails=("eip155:137", "eip155:1")),
}


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def sandbox(anyio_backend: str) -> AsyncIterator[Sandbox]:
    async with Sandbox(evm=True, prices=PRICES) as started:
        yield started


def _client(sandbox: Sandbox, **overrides: Any) -> httpx.AsyncClient:
    return with_eur_payment(httpx.AsyncClient(timeout=60), payment_options(sandbox, **overrides))


def _evm_only(sandbox: Sandbox, key: str | None = None, **overrides: Any) -> PaymentOptions:
    evm = evm_options(sandbox.evm) if key is None else evm_options(sandbox.evm, private_key=key)
    return PaymentOptions(evm=evm, **overrides)


async def _balances(sandbox: Sandbox, chain: int, symbol: str = "EURQ") -> tuple[int, int, int]:
    evm = sandbox.evm
    return (
        await evm.token_balance(chain, symbol, evm.payer_address),
        await evm.token_balance(chain, symbol, evm.merchant_address),
        await evm.permit_nonce(chain, symbol, evm.payer_address),
    )


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("path", "chain", "atomic"), [("/weather", 137, 100_000), ("/report", 1, 500_000)]
)
async def test_paid_fetch_moves_exactly_the_price(
    sandbox: Sandbox, path: str, chain: int, atomic: int
) -> None:
    evm = sandbox.evm
    payer_before, merchant_before, nonce_before = await _balances(sandbox, chain)
    async with _client(sandbox) as client:
        response = await client.get(sandbox.url(path))
    assert response.status_code == 200
    payer_after, merchant_after, nonce_after = await _balances(sandbox, chain)
    assert payer_before - payer_after == atomic
    assert merchant_after - merchant_before == atomic
    assert nonce_after == nonce_before + 1
    assert await evm.native_balance(chain, evm.payer_address) == 0

    receipt = response.extensions["x402_payment"]
    settlement = b64_json_decode(response.headers["x-payment-response"])
    assert receipt.rail == "evm-permit"
    assert receipt.network == f"eip155:{chain}"
    assert receipt.asset == evm.token(chain, "EURQ")
    assert receipt.asset_symbol == "EURQ" and receipt.asset not in repr(receipt)
    assert receipt.currency == "EUR"
    assert receipt.amount == Decimal(atomic) / 10**6
    assert receipt.pay_to == evm.merchant_address
    assert receipt.payer == evm.payer_address
    assert settlement["success"] is True
    assert receipt.tx_hash == settlement["transaction"]
    assert receipt.tx_hash.startswith("0x")
    assert len(receipt.tx_hash) == 66


@pytest.mark.anyio
async def test_usdq_is_paid_and_counted_in_dollars(sandbox: Sandbox) -> None:
    payer_before, merchant_before, _ = await _balances(sandbox, 137, "USDQ")
    async with _client(sandbox) as client:
        response = await client.get(sandbox.url("/premium"))
    assert response.status_code == 200
    receipt = response.extensions["x402_payment"]
    assert receipt.currency == "USD"
    assert receipt.asset == sandbox.evm.token(137, "USDQ")
    payer_after, merchant_after, _ = await _balances(sandbox, 137, "USDQ")
    assert payer_before - payer_after == 100_000
    assert merchant_after - merchant_before == 100_000


@pytest.mark.anyio
async def test_twenty_concurrent_payments_from_one_owner(sandbox: Sandbox) -> None:
    payer_before, merchant_before, nonce_before = await _balances(sandbox, 137)
    results: list[httpx.Response] = []
    # A deadline against a hang (a lost nonce, a lock never given back), not a speed test.
    with anyio.fail_after(300):
        async with _client(sandbox) as client:

            async def fetch() -> None:
                results.append(await client.get(sandbox.url("/weather")))

            async with anyio.create_task_group() as group:
                for _ in range(20):
                    group.start_soon(fetch)
    assert [r.status_code for r in results] == [200] * 20
    payer_after, merchant_after, nonce_after = await _balances(sandbox, 137)
    assert nonce_after == nonce_before + 20
    assert payer_before - payer_after == 20 * 100_000
    assert merchant_after - merchant_before == 20 * 100_000
    assert len({r.extensions["x402_payment"].tx_hash for r in results}) == 20


@pytest.mark.anyio
async def test_spender_mismatch_is_refused_before_signing(sandbox: Sandbox) -> None:
    offer = sandbox.evm.offer("eip155:137")
    liar = Account.create().address
    asked: list[Any] = []
    _, _, nonce_before = await _balances(sandbox, 137)
    offer.spender_override = liar
    try:
        async with _client(sandbox, on_before_payment=asked.append) as client:
            with pytest.raises(SpenderMismatch) as caught:
                await client.get(sandbox.url("/weather"))
    finally:
        offer.spender_override = None
    assert liar in str(caught.value)
    assert sandbox.evm.hot_wallet_address in str(caught.value)
    assert asked == []  # the hook never saw it: nothing was about to be signed
    assert (await _balances(sandbox, 137))[2] == nonce_before


@pytest.mark.anyio
async def test_insufficient_balance_falls_through_to_the_next_entry(sandbox: Sandbox) -> None:
    evm = sandbox.evm
    poor = Account.create()
    await evm.fund(1, "EURQ", poor.address, "1.00")  # nothing on chain 137
    key = "0x" + bytes(poor.key).hex()
    async with with_eur_payment(httpx.AsyncClient(), _evm_only(sandbox, key)) as client:
        response = await client.post(sandbox.url("/echo"), content=b"hi")
    assert response.status_code == 200
    assert response.content == b"hi"
    receipt = response.extensions["x402_payment"]
    assert receipt.network == "eip155:1"
    assert await evm.token_balance(1, "EURQ", poor.address) == 950_000
    assert await evm.permit_nonce(137, "EURQ", poor.address) == 0
    assert await evm.permit_nonce(1, "EURQ", poor.address) == 1


@pytest.mark.anyio
async def test_no_balance_anywhere_is_not_satisfiable(sandbox: Sandbox) -> None:
    key = "0x" + bytes(Account.create().key).hex()
    async with with_eur_payment(httpx.AsyncClient(), _evm_only(sandbox, key)) as client:
        with pytest.raises(NoSatisfiableOption, match="does not cover"):
            await client.get(sandbox.url("/weather"))


@pytest.mark.anyio
async def test_replayed_proof_is_rejected_by_the_merchant(sandbox: Sandbox) -> None:
    async with _client(sandbox) as client:
        response = await client.get(sandbox.url("/weather"))
    proof = response.extensions["x402_payment"].proof
    _, merchant_before, _ = await _balances(sandbox, 137)
    async with httpx.AsyncClient() as plain:
        replay = await plain.get(sandbox.url("/weather"), headers={"X-PAYMENT": proof})
    assert replay.status_code == 402
    assert "already used" in replay.json()["error"]
    assert (await _balances(sandbox, 137))[1] == merchant_before


@pytest.mark.anyio
async def test_rpc_on_the_wrong_chain_is_a_typed_error(sandbox: Sandbox) -> None:
    evm = evm_options(sandbox.evm, rpc_urls={137: sandbox.evm.rpc_url(1)})
    async with with_eur_payment(httpx.AsyncClient(), PaymentOptions(evm=evm)) as client:
        with pytest.raises(ConfigurationError, match=r"reports chain id 1\b.*chain id 137"):
            await client.get(sandbox.url("/weather"))


@pytest.mark.anyio
async def test_rpc_urls_are_tried_in_order(sandbox: Sandbox) -> None:
    evm = evm_options(sandbox.evm, rpc_urls={137: ["http://127.0.0.1:9", sandbox.evm.rpc_url(137)]})
    async with with_eur_payment(httpx.AsyncClient(), PaymentOptions(evm=evm)) as client:
        response = await client.get(sandbox.url("/weather"))
    assert response.status_code == 200


@pytest.mark.anyio
async def test_an_rpc_endpoint_that_answers_garbage_is_passed_over(
    sandbox: Sandbox, serve: Any
) -> None:
    garbage = await serve(scripted_402(b"<html>not JSON-RPC</html>", status=200))
    evm = evm_options(sandbox.evm, rpc_urls={137: [garbage, sandbox.evm.rpc_url(137)]})
    async with with_eur_payment(httpx.AsyncClient(), PaymentOptions(evm=evm)) as client:
        response = await client.get(sandbox.url("/weather"))
    assert response.status_code == 200


@pytest.mark.anyio
async def test_hook_and_limits_apply_to_evm(sandbox: Sandbox) -> None:
    _, _, nonce_before = await _balances(sandbox, 137)
    seen: list[Any] = []

    def refuse(intent: Any) -> bool:
        seen.append(intent)
        return False

    async with with_eur_payment(
        httpx.AsyncClient(), _evm_only(sandbox, on_before_payment=refuse)
    ) as client:
        with pytest.raises(PaymentRejectedByHook):
            await client.get(sandbox.url("/weather"))
    assert seen[0].rail == "evm-permit"
    assert seen[0].amount == Decimal("0.10")

    tight = _evm_only(sandbox, max_amount_per_payment={"EUR": "0.05"})
    async with with_eur_payment(httpx.AsyncClient(), tight) as client:
        with pytest.raises(AmountLimitExceeded):
            await client.get(sandbox.url("/weather"))

    # USDQ counts against the dollar cap, never against euros.
    dollars = _evm_only(sandbox, max_amount_per_payment={"EUR": "10", "USD": "0.05"})
    async with with_eur_payment(httpx.AsyncClient(), dollars) as client:
        with pytest.raises(AmountLimitExceeded) as caught:
            await client.get(sandbox.url("/premium"))
    assert caught.value.intent is not None
    assert caught.value.intent.currency == "USD"
    assert (await _balances(sandbox, 137))[2] == nonce_before


@pytest.mark.anyio
async def test_at_most_two_rpc_calls_per_payment_after_warm_up(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    from web3 import AsyncHTTPProvider

    calls: list[str] = []
    real = AsyncHTTPProvider._make_request

    async def counting(self: Any, method: Any, request_data: bytes) -> Any:
        calls.append(str(method))
        return await real(self, method, request_data)

    async with _client(sandbox) as client:
        assert (await client.get(sandbox.url("/weather"))).status_code == 200
        monkeypatch.setattr(AsyncHTTPProvider, "_make_request", counting)
        # The facilitator runs in this process too: leave its calls out.
        facilitator = sandbox.evm.facilitator
        assert facilitator is not None
        monkeypatch.setattr(facilitator, "settle", _uncounted(facilitator.settle, calls))
        for _ in range(3):
            assert (await client.get(sandbox.url("/weather"))).status_code == 200
    # nonces + balanceOf per payment; chain id, name() and symbol() are cached.
    assert 0 < len(calls) <= 2 * 3, calls
    assert set(calls) == {"eth_call"}


def _uncounted(settle: Any, calls: list[str]) -> Any:
    async def wrapper(request: Any) -> Any:
        mark = len(calls)
        try:
            return await settle(request)
        finally:
            del calls[mark:]

    return wrapper


@pytest.mark.anyio
async def test_facilitator_endpoints(sandbox: Sandbox) -> None:
    evm = sandbox.evm
    base = evm.facilitator_url
    async with httpx.AsyncClient() as http:
        assert (await http.get(base + "/health")).status_code == 200
        kinds = (await http.get(base + "/supported")).json()["kinds"]
        evm_kinds = [k for k in kinds if k["network"].startswith("eip155:")]
        assert len(evm_kinds) == 4
        assert {k["extra"]["spender"] for k in evm_kinds} == {evm.hot_wallet_address}
        assert {(k["network"], k["asset"]) for k in kinds if "extra" not in k} == {
            ("ledgera:mainnet", "2768422954"),
            ("ledgera:mainnet", "2768603795"),
        }

        owner = Account.create()
        await evm.fund(137, "EURQ", owner.address, "1")
        token = evm.token(137, "EURQ")
        typed = permit_typed_data(
            token_name="Sandbox EURQ",
            chain_id=137,
            token=token,
            owner=owner.address,
            spender=evm.hot_wallet_address,
            value=250_000,
            nonce=0,
            deadline=int(time.time()) + 300,
        )
        signature = bytes(Account.sign_typed_data(owner.key, full_message=typed).signature)
        proof = permit_proof("eip155:137", typed["message"], signature)
        body: dict[str, Any] = {
            "x402Version": 2,
            "paymentPayload": proof,
            "paymentRequirements": {
                "scheme": "exact",
                "network": "eip155:137",
                "maxAmountRequired": "250000",
                "payTo": evm.merchant_address,
                "asset": token,
                "maxTimeoutSeconds": 300,
            },
        }
        verified = (await http.post(base + "/verify", json=body)).json()
        assert verified == {"isValid": True, "payer": owner.address}
        assert await evm.permit_nonce(137, "EURQ", owner.address) == 0

        requirements = {**body["paymentRequirements"], "maxAmountRequired": "250001"}
        too_much = {**body, "paymentRequirements": requirements}
        assert (await http.post(base + "/verify", json=too_much)).json()["isValid"] is False

        settled = (await http.post(base + "/settle", json=body)).json()
        assert settled["success"] is True
        assert settled["txHash"].startswith("0x")
        assert await evm.token_balance(137, "EURQ", owner.address) == 750_000
        again = (await http.post(base + "/settle", json=body)).json()
        assert again["success"] is False
        assert "already used" in again["errorReason"]


@pytest.mark.anyio
async def test_env_and_options(sandbox: Sandbox) -> None:
    env = sandbox.env()
    options = PaymentOptions.from_env(env)
    assert options.evm is not None
    assert options.evm.rpc_urls == {1: (sandbox.evm.rpc_url(1),), 137: (sandbox.evm.rpc_url(137),)}
    assert Account.from_key(env["X402_EUR_EVM_PRIVATE_KEY"]).address == sandbox.evm.payer_address
    assert sandbox.evm.payer_key[2:] not in repr(sandbox.evm)
    assert isinstance(evm_options(sandbox.evm), EvmOptions)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.anyio
async def test_stop_leaves_no_anvil_process() -> None:
    async with Sandbox(evm=True) as other:
        pids = [node.pid for node in other.evm.nodes.values()]
        assert len(pids) == 2
        assert all(pid is not None and _alive(pid) for pid in pids)
    assert not any(_alive(pid) for pid in pids if pid is not None)


def _held_rpc(upstream: str, gate: anyio.Event) -> Any:
    """A JSON-RPC proxy in front of `upstream` (anvil) that holds its first answer until
    `gate` is set, then answers everything at once."""
    first = [True]

    async def app(scope: Any, receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if first[0]:
            first[0] = False
            await gate.wait()
        async with httpx.AsyncClient() as http:
            answer = await http.post(
                upstream, content=body, headers={"content-type": "application/json"}
            )
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": answer.content})

    return app


@pytest.mark.anyio
async def test_an_rpc_call_slower_than_a_second_is_reported_and_a_fast_one_is_not(
    sandbox: Sandbox, serve: Any
) -> None:
    gate = anyio.Event()
    slow = await serve(_held_rpc(sandbox.evm.rpc_url(137), gate))
    events: list[PaymentProgress] = []

    def on_progress(event: PaymentProgress) -> None:
        events.append(event)
        if event.stage == "rpc_waiting":
            gate.set()  # the held answer goes only once the wait was reported

    evm = evm_options(sandbox.evm, rpc_urls={137: [slow, sandbox.evm.rpc_url(137)]})
    options = PaymentOptions(evm=evm, on_progress=on_progress)
    for _ in range(2):  # the first payment meets the held answer, the second does not
        async with with_eur_payment(httpx.AsyncClient(timeout=60), options) as client:
            response = await client.get(sandbox.url("/weather"))
        assert response.status_code == 200
    waits = [e for e in events if e.stage == "rpc_waiting"]
    shown = [(e.rail, e.waiting_on, e.endpoint, e.endpoints, e.attempt, e.polls) for e in waits]
    assert shown == [("evm-permit", "chain 137 RPC", 1, 2, 1, 1)] * 2
    assert [e.status for e in waits] == [None, "answered"]
    assert 1.0 <= waits[0].elapsed <= waits[1].elapsed
    port = slow.rsplit(":", 1)[1]
    assert port not in repr(events)  # what is waited on, never its URL
