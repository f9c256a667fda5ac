"""The x402 foundation's own facilitator and merchant selling with the EVM `upto` scheme
(authorize at most an amount; the merchant settles what the request used), on a local
anvil chain (test helper; see `tests/x402_foundation_permit2.py` for Permit2 `exact`).

`upto_stack()` starts, all on 127.0.0.1:

* an anvil chain with Permit2 and the `upto` Permit2 proxy at their canonical addresses
  (`x402_eur_sandbox._permit2.install_permit2`) and a plain six-decimal ERC-20;
* a fresh payer key holding tokens and a little ETH, and no Permit2 approval yet; a fresh
  merchant (`payTo`) address;
* the foundation's facilitator with its EVM `upto` scheme (it names its address in
  `/supported`, which the merchant copies into `extra.facilitatorAddress`), and the
  foundation's v2 merchant guarding `GET /metered` with one `upto` entry of at most
  `max_atomic`. The handler charges `stack.charge_atomic` (the foundation's
  `Settlement-Overrides` response header); with `stack.claim_atomic` set, a layer in
  front of the merchant rewrites the `PAYMENT-RESPONSE` it sends to claim that amount
  (a merchant that lies about what it settled).
"""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import anyio
from eth_account import Account
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from x402 import AssetAmount, x402FacilitatorSync, x402ResourceServer
from x402.http import FacilitatorConfig, HTTPFacilitatorClient
from x402.http.types import PaymentOption, RouteConfig
from x402.mechanisms.evm import FacilitatorWeb3Signer
from x402.mechanisms.evm.upto import UptoEvmFacilitatorScheme, UptoEvmServerScheme

from tests.x402_foundation import _FACILITATOR_KEY, FacilitatorService, _v2_merchant_middleware
from tests.x402_foundation_permit2 import TOKEN_NAME, TOKEN_SYMBOL, Permit2Stack
from x402_eur_sandbox import ServedApp
from x402_eur_sandbox._anvil import ANVIL_DEV_KEYS, AnvilNode, deploy_token
from x402_eur_sandbox._permit2 import install_permit2

__all__ = ["METERED_PATH", "UptoStack", "upto_stack"]

METERED_PATH = "/metered"
DEFAULT_CHAIN_ID = 84533
#: At most 0.01 token (six decimals) per request.
DEFAULT_MAX_ATOMIC = 10_000
_DEPLOYER_KEY = ANVIL_DEV_KEYS[0]
_MAX_TIMEOUT_SECONDS = 300


@dataclass
class UptoStack(Permit2Stack):
    """A running chain + Permit2 + token + foundation `upto` facilitator + merchant."""

    #: What the merchant charges for the next request (atomic; at most `price_atomic`).
    charge_atomic: int = 0
    #: When set, the merchant's settlement response claims this amount instead.
    claim_atomic: int | None = None
    #: When set, the handler answers this status (no settlement happens).
    fail_status: int | None = None

    def __repr__(self) -> str:  # never print the payer key
        return f"UptoStack(chain_id={self.chain_id}, token={self.token!r})"

    @property
    def metered_url(self) -> str:
        return f"{self.merchant_url}{METERED_PATH}"


def _routes(*, network: str, asset: str, pay_to: str, max_atomic: int) -> dict[str, RouteConfig]:
    option = PaymentOption(
        scheme="upto",
        pay_to=pay_to,
        price=AssetAmount(amount=str(max_atomic), asset=asset, extra={}),
        network=network,
        max_timeout_seconds=_MAX_TIMEOUT_SECONDS,
    )
    return {
        f"GET {METERED_PATH}": RouteConfig(
            accepts=option,
            description="a metered sandbox resource (x402 v2, upto)",
            mime_type="application/json",
        )
    }


def _handler(stack: UptoStack) -> Callable[[Request], Awaitable[Response]]:
    async def metered(request: Request) -> Response:
        if stack.fail_status is not None:
            return JSONResponse({"error": "unavailable"}, status_code=stack.fail_status)
        response = JSONResponse({"metered": True, "charged": str(stack.charge_atomic)})
        response.headers["Settlement-Overrides"] = json.dumps({"amount": str(stack.charge_atomic)})
        return response

    return metered


def _claiming(stack: UptoStack) -> Callable[..., Awaitable[Response]]:
    """Rewrite the merchant's `PAYMENT-RESPONSE` to claim `stack.claim_atomic`."""

    async def dispatch(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        response = await call_next(request)
        header = response.headers.get("payment-response")
        if stack.claim_atomic is None or not header:
            return response
        settlement = json.loads(base64.b64decode(header))
        settlement["amount"] = str(stack.claim_atomic)
        response.headers["payment-response"] = base64.b64encode(
            json.dumps(settlement).encode()
        ).decode()
        return response

    return dispatch


@contextlib.asynccontextmanager
async def upto_stack(
    *,
    chain_id: int = DEFAULT_CHAIN_ID,
    max_atomic: int = DEFAULT_MAX_ATOMIC,
    payer_funding_atomic: int = 100 * DEFAULT_MAX_ATOMIC,
) -> AsyncIterator[UptoStack]:
    """Start the chain, Permit2, token, facilitator and merchant; stop them all on exit."""
    network = f"eip155:{chain_id}"
    async with contextlib.AsyncExitStack() as stack:
        node = await stack.enter_async_context(AnvilNode(chain_id))
        await install_permit2(node.rpc_url)
        token = await deploy_token(node.rpc_url, _DEPLOYER_KEY, TOKEN_NAME, TOKEN_SYMBOL)
        merchant_address = str(Account.create().address)

        signer = FacilitatorWeb3Signer(private_key=_FACILITATOR_KEY, rpc_url=node.rpc_url)
        facilitator = x402FacilitatorSync()
        facilitator.register([network], UptoEvmFacilitatorScheme(signer))
        service = FacilitatorService(facilitator)
        served_facilitator = await ServedApp(service.app, "x402-foundation-facilitator").start()
        stack.push_async_callback(served_facilitator.stop)

        facilitator_client = HTTPFacilitatorClient(FacilitatorConfig(url=served_facilitator.url))
        stack.push_async_callback(facilitator_client.aclose)
        server = x402ResourceServer(facilitator_client)
        server.register(network, UptoEvmServerScheme())
        routes = _routes(
            network=network, asset=token, pay_to=merchant_address, max_atomic=max_atomic
        )
        middleware = await anyio.to_thread.run_sync(_v2_merchant_middleware, routes, server)
        started = UptoStack(
            node=node,
            chain_id=chain_id,
            network=network,
            token=token,
            payer_key="",
            payer_address="",
            merchant_address=merchant_address,
            price_atomic=max_atomic,
            facilitator=service,
            merchant_url="",
            charge_atomic=max_atomic,
        )
        merchant_app = Starlette(
            routes=[Route(METERED_PATH, _handler(started), methods=["GET"])],
            middleware=[
                Middleware(BaseHTTPMiddleware, dispatch=_claiming(started)),
                Middleware(BaseHTTPMiddleware, dispatch=middleware),
            ],
        )
        served_merchant = await ServedApp(merchant_app, "x402-foundation-merchant").start()
        stack.push_async_callback(served_merchant.stop)
        started.merchant_url = served_merchant.url
        started.payer_key, started.payer_address = await started.new_payer(payer_funding_atomic)
        yield started
