"""The sandbox's standard merchant and the x402 `payment-identifier` extension: `/report`
declares it optional, `/order` required. Our client pays them with one identifier per
payment; a proof re-sent with the same identifier is answered with the first answer and
settled once, on a real anvil chain (the token balances are the proof)."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest

from tests.sandboxes import asset_of
from x402_client import EvmOptions, PaymentOptions, PaymentOutcomeUnknown, with_eur_payment
from x402_eur_sandbox._standard import StandardMerchant

pytestmark = pytest.mark.anyio

ORDER, REPORT = "/order", "/report"


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def merchant(anyio_backend: str) -> AsyncIterator[StandardMerchant]:
    async with StandardMerchant(chain_id=84532) as started:
        yield started


def options(merchant: StandardMerchant) -> PaymentOptions:
    return PaymentOptions(evm=EvmOptions(**merchant.evm_config()), assets=[asset_of(merchant)])


def b64_json(value: str) -> Any:
    return json.loads(base64.b64decode(value, validate=True))


def b64(value: Any) -> str:
    return base64.b64encode(json.dumps(value).encode()).decode()


class Losing(httpx.AsyncBaseTransport):
    """Forwards every request; the answer to the next `lose` paid requests is lost after
    the merchant served it (the connection breaks)."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.lose = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if self.lose and "payment-signature" in request.headers:
            self.lose -= 1
            await response.aread()
            await response.aclose()
            raise httpx.ReadError("connection lost", request=request)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


async def balances(merchant: StandardMerchant) -> tuple[int, int]:
    return (
        await merchant.token_balance(merchant.payer_address),
        await merchant.token_balance(merchant.pay_to),
    )


async def get(url: str, headers: dict[str, str] | None = None) -> httpx.Response:
    async with httpx.AsyncClient(timeout=30, trust_env=False) as http:
        return await http.get(url, headers=headers)


async def test_the_402_declares_the_extension_on_its_routes(merchant):
    declared = {}
    for path in (ORDER, REPORT, "/weather"):
        response = await get(merchant.resource_url(path))
        assert response.status_code == 402
        declared[path] = b64_json(response.headers["payment-required"]).get("extensions")
    assert declared["/weather"] is None
    assert declared[ORDER]["payment-identifier"]["info"] == {"required": True}
    assert declared[REPORT]["payment-identifier"]["info"] == {"required": False}
    schema = declared[ORDER]["payment-identifier"]["schema"]
    assert schema["required"] == ["required"] and schema["properties"]["id"]["minLength"] == 16


@pytest.mark.parametrize("path", [ORDER, REPORT])
async def test_our_client_pays_with_an_identifier_the_receipt_names(merchant, path):
    before = await balances(merchant)
    async with with_eur_payment(httpx.AsyncClient(timeout=30), options(merchant)) as client:
        response = await client.get(merchant.resource_url(path))
    assert response.status_code == 200, response.text
    receipt = response.extensions["x402_payment"]
    assert receipt.payment_identifier is not None
    assert receipt.payment_identifier.startswith("pay_")
    assert receipt.payment_identifier in merchant.payment_identifiers
    price = merchant.price_atomic(path)
    assert await balances(merchant) == (before[0] - price, before[1] + price)


async def test_a_proof_re_sent_after_a_lost_answer_is_served_once_and_settled_once(merchant):
    before, settled = await balances(merchant), len(merchant.settlements)
    replayed = merchant.payment_identifiers.replayed
    transport = Losing()
    transport.lose = 1
    paying = options(merchant)
    async with with_eur_payment(httpx.AsyncClient(transport=transport, timeout=30), paying) as c:
        with pytest.raises(PaymentOutcomeUnknown) as caught:
            await c.get(merchant.resource_url(ORDER))
        proof = caught.value.proof
        assert proof is not None
        again = await c.get(merchant.resource_url(ORDER), extensions={"x402": {"proof": proof}})
    assert again.status_code == 200, again.text
    assert again.json()["resource"] == ORDER
    assert merchant.payment_identifiers.replayed == replayed + 1
    assert len(merchant.settlements) == settled + 1
    settlement = b64_json(again.headers["payment-response"])
    assert settlement["transaction"] == merchant.settlements[-1]["transaction"]
    assert (
        again.extensions["x402_payment"].payment_identifier
        == b64_json(proof)["extensions"]["payment-identifier"]["info"]["id"]
    )
    price = merchant.price_atomic(ORDER)
    assert await balances(merchant) == (before[0] - price, before[1] + price)


async def lost_proof(merchant: StandardMerchant, path: str) -> str:
    """A signed proof for `path` that the merchant never saw (the request never left)."""

    class Dropping(httpx.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            if "payment-signature" in request.headers:
                raise httpx.ConnectError("refused", request=request)
            async with httpx.AsyncClient(trust_env=False) as http:
                return await http.send(request)

    client = httpx.AsyncClient(transport=Dropping(), timeout=30)
    async with with_eur_payment(client, options(merchant)) as paying:
        with pytest.raises(Exception) as caught:
            await paying.get(merchant.resource_url(path))
    proof = getattr(caught.value, "proof", None)
    assert isinstance(proof, str), caught.value
    return proof


async def test_duplicates_sent_at_once_are_settled_once(merchant):
    proof = await lost_proof(merchant, REPORT)
    before, settled = await balances(merchant), len(merchant.settlements)
    headers = {"PAYMENT-SIGNATURE": proof}
    answers: list[httpx.Response] = []

    async def send() -> None:
        answers.append(await get(merchant.resource_url(REPORT), headers))

    async with anyio.create_task_group() as group:
        for _ in range(3):
            group.start_soon(send)
    assert [a.status_code for a in answers] == [200, 200, 200]
    assert len({a.headers["payment-response"] for a in answers}) == 1
    assert len(merchant.settlements) == settled + 1
    price = merchant.price_atomic(REPORT)
    assert await balances(merchant) == (before[0] - price, before[1] + price)


async def test_a_required_identifier_missing_is_400_and_nothing_moves(merchant):
    proof = b64_json(await lost_proof(merchant, ORDER))
    del proof["extensions"]
    before, settled = await balances(merchant), len(merchant.settlements)
    response = await get(merchant.resource_url(ORDER), {"PAYMENT-SIGNATURE": b64(proof)})
    assert response.status_code == 400
    assert "requires a payment identifier" in response.json()["error"][0]
    assert len(merchant.settlements) == settled
    assert await balances(merchant) == before


async def test_an_identifier_used_with_another_payment_is_409_and_nothing_moves(merchant):
    first = b64_json(await lost_proof(merchant, ORDER))
    assert (await get(merchant.resource_url(ORDER), {"PAYMENT-SIGNATURE": b64(first)})).is_success
    second = b64_json(await lost_proof(merchant, ORDER))
    second["extensions"] = first["extensions"]  # another payment under the first's identifier
    before, settled = await balances(merchant), len(merchant.settlements)
    response = await get(merchant.resource_url(ORDER), {"PAYMENT-SIGNATURE": b64(second)})
    assert response.status_code == 409
    assert "used with another payment" in response.json()["error"][0]
    assert len(merchant.settlements) == settled
    assert await balances(merchant) == before
