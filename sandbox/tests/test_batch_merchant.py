"""The sandbox's `batch-settlement` merchant and facilitator, paid by the x402 foundation's
own Python client (`x402.mechanisms.evm.batch_settlement.client`) on a real anvil chain:
one deposit then vouchers with exact cumulative amounts, a claim and settlement of exactly
what was charged, a cooperative refund of exactly the rest, the corrective 402 of a
merchant that lost its records, a busy channel, a lying merchant, the facilitator's
refusals; and the merchant with the foundation's own facilitator, and the foundation's
own merchant with the facilitator."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import anyio
import httpx
import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from x402 import x402Client
from x402.http.clients import x402_httpx_transport
from x402.mechanisms.evm.batch_settlement.client import (
    BatchSettlementEvmScheme,
    BatchSettlementEvmSchemeOptions,
)
from x402.mechanisms.evm.batch_settlement.client.voucher import sign_voucher
from x402.mechanisms.evm.signers import EthAccountSigner, EthAccountSignerWithRPC
from x402.schemas import PaymentRequirements

from x402_eur_sandbox._anvil import ANVIL_DEV_KEYS, AnvilNode, token_balance
from x402_eur_sandbox._batch_escrow import channel_state, install_batch_settlement, refund_nonce
from x402_eur_sandbox._batch_merchant import BatchMerchant, BatchSettlement
from x402_eur_sandbox._merchant import Price
from x402_eur_sandbox._server import ServedApp
from x402_eur_sandbox._standard import (
    _OWNER_KEY,
    _approve_without_gas,
    _mint,
    deploy_eip3009_token,
)

pytestmark = pytest.mark.anyio

CHAIN_ID = 137  # as the sandbox's: its Permit2 has the wrong domain on anvil's default 31337
NETWORK = f"eip155:{CHAIN_ID}"
PRICE = 10_000  # 0.01 sEURC
DEPOSIT = 10 * PRICE  # the merchant's minDeposit, which the foundation's client deposits
FUNDING = 5_000_000
PRICES = {"/stream": Price(Decimal("0.01"), "One request of a stream")}
MISMATCH = "invalid_batch_settlement_evm_cumulative_amount_mismatch"


class Recorder(httpx.AsyncBaseTransport):
    """Every request the foundation's client sends, and the answer it got."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.exchanges: list[tuple[httpx.Request, httpx.Response]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        self.exchanges.append((request, response))
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()

    def payloads(self) -> list[dict[str, Any]]:
        """The inner payload of every paid request, in order."""
        return [
            _decode(request.headers["payment-signature"])["payload"]
            for request, _ in self.exchanges
            if "payment-signature" in request.headers
        ]

    def errors(self) -> list[str]:
        """The `error` of every 402 answered."""
        return [
            _decode(response.headers["payment-required"])["error"]
            for _, response in self.exchanges
            if response.status_code == 402
        ]


def _decode(header: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(base64.b64decode(header))
    return data


def _encode(value: Any) -> str:
    return base64.b64encode(json.dumps(value).encode()).decode()


class Rail:
    """The chain, the batch-settlement facilitator and merchant, a funded payer, and the
    foundation's client paying through a recording transport."""

    def __init__(
        self, node: AnvilNode, token: str, merchant: BatchMerchant, facilitator_url: str
    ) -> None:
        self.node, self.token, self.merchant = node, token, merchant
        self.facilitator_url = facilitator_url
        self.payer: LocalAccount = Account.create()
        self.recorder = Recorder()
        signer = EthAccountSignerWithRPC(self.payer, rpc_url=node.rpc_url)
        self.scheme = BatchSettlementEvmScheme(
            signer, BatchSettlementEvmSchemeOptions(rpc_url=node.rpc_url)
        )
        # The sandbox token is no default asset of the foundation's client: allow it.
        client = x402Client().register(NETWORK, self.scheme)
        client.set_spend_controls({"allowed_assets": True})
        self.http = httpx.AsyncClient(
            transport=x402_httpx_transport(client, self.recorder), timeout=60
        )

    @property
    def url(self) -> str:
        return self.merchant.resource_url("/stream")

    async def balance(self, address: str) -> int:
        return await token_balance(self.node.rpc_url, self.token, address)

    def channel(self) -> str:
        (channel,) = self.merchant.channels
        return channel

    async def escrow(self) -> tuple[int, int, int]:
        """The channel's balance, claimed total and refund nonce, read from the escrow."""
        channel = bytes.fromhex(self.channel()[2:])
        balance, claimed = await channel_state(self.node.rpc_url, channel)
        return balance, claimed, await refund_nonce(self.node.rpc_url, channel)


@pytest.fixture
async def rail(request: pytest.FixtureRequest) -> AsyncIterator[Rail]:
    options: dict[str, Any] = getattr(request, "param", {})
    async with AnvilNode(CHAIN_ID) as node:
        token = await deploy_eip3009_token(node.rpc_url, _OWNER_KEY)
        async with BatchSettlement(
            rpc_url=node.rpc_url, chain_id=CHAIN_ID, token=token, prices=PRICES, **options
        ) as part:
            assert part.merchant is not None
            rail = Rail(node, token, part.merchant, part.facilitator_url)
            await _mint(node.rpc_url, token, _OWNER_KEY, rail.payer.address, FUNDING)
            try:
                yield rail
            finally:
                await rail.http.aclose()


@pytest.mark.parametrize("rail", [{"charge": "0.6"}], indirect=True)
async def test_a_stream_is_one_deposit_then_vouchers_and_settles_exactly_what_was_charged(
    rail: Rail,
) -> None:
    charged = PRICE * 6 // 10  # a dynamic price: 60 % of the ceiling the payer grants
    for _ in range(4):
        response = await rail.http.get(rail.url)
        assert response.status_code == 200, response.headers
    payloads = rail.recorder.payloads()
    assert [p["type"] for p in payloads] == ["deposit", "voucher", "voucher", "voucher"]
    ceilings = [int(p["voucher"]["maxClaimableAmount"]) for p in payloads]
    assert ceilings == [n * charged + PRICE for n in range(4)]
    assert payloads[0]["deposit"]["amount"] == str(DEPOSIT)
    receipts = [_decode(r.headers["payment-response"]) for _, r in rail.recorder.exchanges[1::2]]
    assert receipts[0]["transaction"].startswith("0x")
    assert [r["transaction"] for r in receipts[1:]] == ["", "", ""]
    assert [r["extra"]["channelState"]["chargedCumulativeAmount"] for r in receipts] == [
        str(n * charged) for n in range(1, 5)
    ]
    assert await rail.balance(rail.payer.address) == FUNDING - DEPOSIT

    settled = await rail.merchant.claim_and_settle()
    assert settled["channels"] == [rail.channel()]
    assert settled["amount"] == str(4 * charged)
    assert await rail.balance(rail.merchant.pay_to) == 4 * charged
    assert await rail.escrow() == (DEPOSIT, 4 * charged, 0)
    # Nothing new to claim: the admin route settles nothing more.
    async with httpx.AsyncClient() as plain:
        again = await plain.post(rail.merchant.url + "/admin/claim-and-settle")
    assert again.json()["channels"] == [] and again.json()["amount"] == "0"
    assert await rail.balance(rail.merchant.pay_to) == 4 * charged


@pytest.mark.parametrize("rail", [{"min_deposit": 2 * PRICE}], indirect=True)
async def test_a_voucher_above_the_deposit_comes_with_a_top_up(rail: Rail) -> None:
    for _ in range(3):
        assert (await rail.http.get(rail.url)).status_code == 200
    payloads = rail.recorder.payloads()
    assert [p["type"] for p in payloads] == ["deposit", "voucher", "deposit"]
    assert [p["deposit"]["amount"] for p in (payloads[0], payloads[2])] == [str(2 * PRICE)] * 2
    receipt = _decode(rail.recorder.exchanges[-1][1].headers["payment-response"])
    assert receipt["amount"] == str(2 * PRICE) and receipt["transaction"].startswith("0x")
    assert receipt["extra"]["channelState"]["balance"] == str(4 * PRICE)
    assert await rail.balance(rail.payer.address) == FUNDING - 4 * PRICE
    assert (await rail.merchant.claim_and_settle())["amount"] == str(3 * PRICE)
    assert await rail.balance(rail.merchant.pay_to) == 3 * PRICE


@pytest.mark.parametrize("rail", [{"asset_transfer_method": "permit2"}], indirect=True)
async def test_a_deposit_through_permit2_then_vouchers(rail: Rail) -> None:
    payer_key = "0x" + bytes(rail.payer.key).hex()
    await _approve_without_gas(rail.node.rpc_url, rail.token, payer_key)
    for _ in range(2):
        assert (await rail.http.get(rail.url)).status_code == 200
    payloads = rail.recorder.payloads()
    assert [p["type"] for p in payloads] == ["deposit", "voucher"]
    assert "permit2Authorization" in payloads[0]["deposit"]["authorization"]
    assert await rail.balance(rail.payer.address) == FUNDING - DEPOSIT
    assert (await rail.merchant.claim_and_settle())["amount"] == str(2 * PRICE)
    assert await rail.balance(rail.merchant.pay_to) == 2 * PRICE


async def test_a_cooperative_refund_returns_exactly_the_unspent_deposit(rail: Rail) -> None:
    for _ in range(3):
        assert (await rail.http.get(rail.url)).status_code == 200
    settle = await anyio.to_thread.run_sync(rail.scheme.refund, rail.url)
    assert settle.success
    assert settle.amount == str(DEPOSIT - 3 * PRICE)
    assert await rail.balance(rail.payer.address) == FUNDING - 3 * PRICE
    # The refund claimed the outstanding vouchers in the same transaction.
    assert await rail.escrow() == (3 * PRICE, 3 * PRICE, 1)
    settled = await rail.merchant.claim_and_settle()
    assert settled["amount"] == str(3 * PRICE)
    assert await rail.balance(rail.merchant.pay_to) == 3 * PRICE


async def test_a_merchant_that_lost_its_records_takes_the_next_voucher_as_its_base(
    rail: Rail,
) -> None:
    for _ in range(2):
        assert (await rail.http.get(rail.url)).status_code == 200
    rail.merchant.forget()
    response = await rail.http.get(rail.url)
    assert response.status_code == 200
    assert MISMATCH not in rail.recorder.errors()
    ceilings = [int(p["voucher"]["maxClaimableAmount"]) for p in rail.recorder.payloads()]
    assert ceilings == [PRICE, 2 * PRICE, 3 * PRICE]
    # The voucher's own base (its ceiling less the price) plus this request's charge.
    assert rail.merchant.channels[rail.channel()].charged == 3 * PRICE


async def test_a_merchant_claiming_more_than_was_signed_is_refused(rail: Rail) -> None:
    rail.merchant.overclaim = True
    assert (await rail.http.get(rail.url)).status_code == 200
    receipt = _decode(rail.recorder.exchanges[-1][1].headers["payment-response"])
    assert receipt["extra"]["channelState"]["chargedCumulativeAmount"] == str(2 * PRICE)
    before = len(rail.recorder.payloads())
    response = await rail.http.get(rail.url)
    # The foundation's client did not adopt the lie: it signed from the escrow's view,
    # then refused the corrective 402 that claims more than its own voucher allowed.
    assert response.status_code == 402
    assert _decode(response.headers["payment-required"])["error"] == MISMATCH
    extra = _decode(response.headers["payment-required"])["accepts"][0]["extra"]
    assert int(extra["channelState"]["chargedCumulativeAmount"]) > int(
        extra["voucherState"]["signedMaxClaimable"]
    )
    assert len(rail.recorder.payloads()) == before + 1
    assert rail.merchant.channels[rail.channel()].charged == PRICE


async def test_a_second_request_on_a_channel_in_use_is_refused_as_busy(rail: Rail) -> None:
    entered, release = anyio.Event(), anyio.Event()
    hold = {"on": False}

    async def resource(scope: Any, receive: Any, send: Any) -> None:
        if hold["on"]:
            entered.set()
            await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    rail.merchant.resource = resource
    assert (await rail.http.get(rail.url)).status_code == 200
    hold["on"] = True
    statuses: list[int] = []

    async def first() -> None:
        statuses.append((await rail.http.get(rail.url)).status_code)

    async with anyio.create_task_group() as group:
        group.start_soon(first)
        with anyio.fail_after(60):
            await entered.wait()
        hold["on"] = False
        busy = await rail.http.get(rail.url)
        release.set()
    assert busy.status_code == 402
    assert _decode(busy.headers["payment-required"])["error"] == (
        "invalid_batch_settlement_evm_channel_busy"
    )
    assert statuses == [200]
    assert rail.merchant.channels[rail.channel()].charged == 2 * PRICE


async def test_the_facilitator_refuses_bad_vouchers_with_the_scheme_codes(rail: Rail) -> None:
    assert (await rail.http.get(rail.url)).status_code == 200
    requirements = rail.merchant.requirements("/stream")
    accepted = PaymentRequirements.model_validate(requirements)
    valid = rail.scheme.create_payment_payload(accepted)
    assert valid["type"] == "voucher"
    channel = valid["voucher"]["channelId"]

    forged = json.loads(json.dumps(valid))
    stranger = EthAccountSigner(Account.create())
    forged["voucher"] = sign_voucher(stranger, channel, 2 * PRICE, NETWORK).to_dict()
    async with httpx.AsyncClient(timeout=60) as plain:
        answer = await plain.get(
            rail.url,
            headers={"PAYMENT-SIGNATURE": _encode(_payment(requirements, forged))},
        )
        assert answer.status_code == 402
        reason = _decode(answer.headers["payment-required"])["error"]
        assert reason == "invalid_batch_settlement_evm_voucher_signature"

        above = json.loads(json.dumps(valid))
        signer = EthAccountSigner(rail.payer)
        above["voucher"] = sign_voucher(signer, channel, DEPOSIT + 1, NETWORK).to_dict()
        verdict = await _verify(plain, rail, requirements, above)
        assert verdict["invalidReason"] == "invalid_batch_settlement_evm_cumulative_exceeds_balance"
        assert verdict["extra"]["balance"] == str(DEPOSIT)

        other = dict(requirements, extra={**requirements["extra"]})
        other["extra"]["receiverAuthorizer"] = Account.create().address
        elsewhere = rail.scheme.create_payment_payload(PaymentRequirements.model_validate(other))
        verdict = await _verify(plain, rail, requirements, elsewhere)
        assert verdict["invalidReason"] == (
            "invalid_batch_settlement_evm_receiver_authorizer_mismatch"
        )
    assert rail.merchant.channels[channel.lower()].charged == PRICE


def foundation_facilitator(rpc_url: str, relayer_key: str, authorizer_key: str) -> Starlette:
    """The x402 foundation's own batch-settlement facilitator behind `/supported`,
    `/verify` and `/settle`, as its example serves it."""
    from x402 import x402Facilitator
    from x402.mechanisms.evm.batch_settlement.authorizer_signer import LocalAuthorizerSigner
    from x402.mechanisms.evm.batch_settlement.facilitator import BatchSettlementEvmFacilitator
    from x402.mechanisms.evm.signers import FacilitatorWeb3Signer
    from x402.schemas import PaymentPayload

    scheme = BatchSettlementEvmFacilitator(
        FacilitatorWeb3Signer(private_key=relayer_key, rpc_url=rpc_url),
        LocalAuthorizerSigner(authorizer_key),
    )
    facilitator = x402Facilitator()
    facilitator.register([NETWORK], scheme)

    def parsed(body: dict[str, Any]) -> tuple[PaymentPayload, PaymentRequirements]:
        return (
            PaymentPayload.model_validate(body["paymentPayload"]),
            PaymentRequirements.model_validate(body["paymentRequirements"]),
        )

    async def supported(request: Request) -> Response:
        return JSONResponse(facilitator.get_supported().model_dump(by_alias=True))

    async def verify(request: Request) -> Response:
        answer = await facilitator.verify(*parsed(await request.json()))
        return JSONResponse(answer.model_dump(by_alias=True, exclude_none=True))

    async def settle(request: Request) -> Response:
        answer = await facilitator.settle(*parsed(await request.json()))
        return JSONResponse(answer.model_dump(by_alias=True, exclude_none=True))

    return Starlette(
        routes=[
            Route("/supported", supported),
            Route("/verify", verify, methods=["POST"]),
            Route("/settle", settle, methods=["POST"]),
        ]
    )


@pytest.fixture
async def foundation_rail() -> AsyncIterator[Rail]:
    """The sandbox's merchant with the x402 foundation's own facilitator."""
    async with AnvilNode(CHAIN_ID) as node:
        token = await deploy_eip3009_token(node.rpc_url, _OWNER_KEY)
        await install_batch_settlement(node.rpc_url, ANVIL_DEV_KEYS[2])
        authorizer = "0x" + bytes(Account.create().key).hex()
        app = foundation_facilitator(node.rpc_url, ANVIL_DEV_KEYS[2], authorizer)
        served = await ServedApp(app, "foundation-facilitator").start()
        merchant = BatchMerchant(
            facilitator_url=served.url,
            token=token,
            pay_to=Account.create().address,
            chain_id=CHAIN_ID,
            prices=PRICES,
        )
        try:
            async with merchant:
                rail = Rail(node, token, merchant, served.url)
                await _mint(node.rpc_url, token, _OWNER_KEY, rail.payer.address, FUNDING)
                try:
                    yield rail
                finally:
                    await rail.http.aclose()
        finally:
            await served.stop()


async def test_the_merchant_works_with_the_foundations_own_facilitator(
    foundation_rail: Rail,
) -> None:
    rail = foundation_rail
    async with httpx.AsyncClient() as plain:
        supported = (await plain.get(rail.facilitator_url + "/supported")).json()
    (kind,) = supported["kinds"]
    assert rail.merchant.receiver_authorizer == kind["extra"]["receiverAuthorizer"]
    for _ in range(3):
        assert (await rail.http.get(rail.url)).status_code == 200
    assert [p["type"] for p in rail.recorder.payloads()] == ["deposit", "voucher", "voucher"]
    # Its settlement's `amount` is best effort: the receiver's balance is the truth.
    assert (await rail.merchant.claim_and_settle())["channels"] == [rail.channel()]
    assert await rail.balance(rail.merchant.pay_to) == 3 * PRICE
    assert (await rail.http.get(rail.url)).status_code == 200
    settle = await anyio.to_thread.run_sync(rail.scheme.refund, rail.url)
    assert settle.success and settle.amount == str(DEPOSIT - 4 * PRICE)
    assert await rail.escrow() == (4 * PRICE, 4 * PRICE, 1)
    assert await rail.balance(rail.payer.address) == FUNDING - 4 * PRICE


def _payment(requirements: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    return {"x402Version": 2, "accepted": requirements, "payload": payload}


async def _verify(
    http: httpx.AsyncClient, rail: Rail, requirements: dict[str, Any], payload: dict[str, Any]
) -> dict[str, Any]:
    body = {
        "x402Version": 2,
        "paymentPayload": _payment(requirements, payload),
        "paymentRequirements": requirements,
    }
    response = await http.post(rail.facilitator_url + "/verify", json=body)
    verdict: dict[str, Any] = response.json()
    assert verdict["isValid"] is False
    return verdict


async def test_the_sandbox_runs_a_batch_settlement_merchant_its_payer_can_pay() -> None:
    from x402_eur_sandbox import Sandbox
    from x402_eur_sandbox.cli import service_rows

    async with Sandbox(batch_settlement=True) as sandbox:
        batch, standard = sandbox.batch, sandbox.standard
        rows = dict(service_rows(sandbox))
        assert rows["batch-settlement merchant"] == batch.url
        assert rows["batch-settlement facilitator"] == batch.facilitator_url
        assert {batch.url.removeprefix("http://"), batch.facilitator_url[7:]} <= set(sandbox.hosts)
        payer = Account.from_key(standard.payer_key)
        scheme = BatchSettlementEvmScheme(
            EthAccountSignerWithRPC(payer, rpc_url=standard.rpc_url),
            BatchSettlementEvmSchemeOptions(rpc_url=standard.rpc_url),
        )
        client = x402Client().register(standard.network, scheme)
        client.set_spend_controls({"allowed_assets": True})
        async with httpx.AsyncClient(transport=x402_httpx_transport(client), timeout=60) as http:
            response = await http.get(batch.merchant.resource_url("/stream"))
        assert response.status_code == 200
        required = batch.merchant.requirements("/stream")
        assert required["asset"] == standard.token
        assert required["extra"]["receiverAuthorizer"] == batch.facilitator.authorizer_address
        before = await standard.token_balance(batch.pay_to)
        assert (await batch.merchant.claim_and_settle())["amount"] == required["amount"]
        assert await standard.token_balance(batch.pay_to) == before + int(required["amount"])


async def test_the_foundations_own_merchant_is_served_by_the_facilitator() -> None:
    from starlette.middleware import Middleware
    from starlette.middleware.base import BaseHTTPMiddleware
    from x402 import AssetAmount, x402ResourceServer
    from x402.http import FacilitatorConfig, HTTPFacilitatorClient, x402HTTPResourceServer
    from x402.http.middleware.fastapi import payment_middleware
    from x402.http.types import PaymentOption, RouteConfig
    from x402.mechanisms.evm.batch_settlement import server as foundation

    from x402_eur_sandbox._batch_facilitator import BatchFacilitator
    from x402_eur_sandbox._standard import TOKEN_NAME, TOKEN_VERSION

    async with AnvilNode(CHAIN_ID) as node:
        token = await deploy_eip3009_token(node.rpc_url, _OWNER_KEY)
        await install_batch_settlement(node.rpc_url, ANVIL_DEV_KEYS[2])
        ours = BatchFacilitator(
            rpc_url=node.rpc_url,
            chain_id=CHAIN_ID,
            relayer_key=ANVIL_DEV_KEYS[2],
            authorizer_key="0x" + bytes(Account.create().key).hex(),
        )
        pay_to = Account.create().address
        async with ours, HTTPFacilitatorClient(FacilitatorConfig(url=ours.url)) as client:
            scheme = foundation.BatchSettlementEvmScheme(
                pay_to, foundation.BatchSettlementEvmSchemeServerConfig()
            )
            server = x402ResourceServer(client)
            # The package's own scheme mistypes `payment_flows` for its protocol.
            server.register(NETWORK, scheme)  # type: ignore[arg-type]
            price = AssetAmount(
                amount=str(PRICE), asset=token, extra={"name": TOKEN_NAME, "version": TOKEN_VERSION}
            )
            option = PaymentOption(
                scheme="batch-settlement", pay_to=pay_to, price=price, network=NETWORK
            )
            routes = {"GET /stream": RouteConfig(accepts=option, mime_type="application/json")}

            def middleware() -> Any:
                # Blocking (it reads /supported with a sync client): run in a thread.
                x402HTTPResourceServer(server, routes).initialize()
                return payment_middleware(routes, server, sync_facilitator_on_start=False)

            async def stream(request: Request) -> Response:
                return JSONResponse({"paid": True})

            app = Starlette(
                routes=[Route("/stream", stream)],
                middleware=[
                    Middleware(
                        BaseHTTPMiddleware, dispatch=await anyio.to_thread.run_sync(middleware)
                    )
                ],
            )
            served = await ServedApp(app, "foundation-merchant").start()
            manager = foundation.BatchSettlementChannelManager(
                foundation.ChannelManagerConfig(
                    scheme=scheme,
                    facilitator=client,
                    receiver=pay_to,
                    token=token,
                    network=NETWORK,
                )
            )
            try:
                await _foundation_merchant_flow(node, token, served.url, manager)
            finally:
                await served.stop()
        assert await token_balance(node.rpc_url, token, pay_to) == 3 * PRICE


async def _foundation_merchant_flow(node: AnvilNode, token: str, url: str, manager: Any) -> None:
    """Three paid requests, the merchant's claim and settlement, then a cooperative refund,
    at the foundation's merchant."""
    payer: LocalAccount = Account.create()
    await _mint(node.rpc_url, token, _OWNER_KEY, payer.address, FUNDING)
    scheme = BatchSettlementEvmScheme(
        EthAccountSignerWithRPC(payer, rpc_url=node.rpc_url),
        BatchSettlementEvmSchemeOptions(rpc_url=node.rpc_url),
    )
    client = x402Client().register(NETWORK, scheme)
    client.set_spend_controls({"allowed_assets": True})
    async with httpx.AsyncClient(transport=x402_httpx_transport(client), timeout=60) as http:
        for _ in range(3):
            assert (await http.get(url + "/stream")).status_code == 200
    await manager.claim_and_settle()
    settle = await anyio.to_thread.run_sync(scheme.refund, url + "/stream")
    assert settle.success
    assert await token_balance(node.rpc_url, token, payer.address) == FUNDING - 3 * PRICE
