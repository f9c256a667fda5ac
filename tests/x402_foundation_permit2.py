"""The x402 foundation's own facilitator and merchant selling for Permit2 `exact` payments, on
a local anvil chain (test helper; see `tests/x402_foundation.py` for the EIP-3009 stack).

`permit2_stack()` starts, all on 127.0.0.1:

* an anvil chain with Permit2 and the exact Permit2 proxy at their canonical addresses
  (`x402_eur_sandbox._permit2.install_permit2`) and a plain six-decimal ERC-20
  (`SandboxToken`: no EIP-3009, the kind of token Permit2 exists for);
* a fresh payer key holding tokens and a little ETH (for its one-time Permit2 approval),
  and no approval yet; a fresh merchant (`payTo`) address;
* the foundation's facilitator (its EVM `exact` scheme, which verifies and settles Permit2
  payloads through the proxy), and the foundation's v2 merchant guarding `GET /paid` with
  one `exact` entry whose `extra.assetTransferMethod` is `"permit2"`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import anyio
from eth_account import Account
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.routing import Route
from x402 import AssetAmount, x402FacilitatorSync, x402ResourceServer
from x402.http import FacilitatorConfig, HTTPFacilitatorClient
from x402.http.types import PaymentOption, RouteConfig
from x402.mechanisms.evm import FacilitatorWeb3Signer
from x402.mechanisms.evm.exact import register_exact_evm_facilitator, register_exact_evm_server

from tests.x402_foundation import (
    _FACILITATOR_KEY,
    PAID_PATH,
    FacilitatorService,
    _free_handler,
    _paid_handler,
    _v2_merchant_middleware,
)
from x402_eur_sandbox import ServedApp
from x402_eur_sandbox._anvil import (
    ANVIL_DEV_KEYS,
    AnvilNode,
    deploy_token,
    mint,
    native_balance,
    send_eth,
    token_balance,
)
from x402_eur_sandbox._permit2 import (
    approve_permit2,
    install_permit2,
    permit2_allowance,
)

__all__ = ["DEFAULT_CHAIN_ID", "DEFAULT_PRICE_ATOMIC", "Permit2Stack", "permit2_stack"]

DEFAULT_CHAIN_ID = 84532
#: 0.01 token (six decimals).
DEFAULT_PRICE_ATOMIC = 10_000
TOKEN_NAME = "Sandbox Euro Token"
TOKEN_SYMBOL = "sEURT"
_DEPLOYER_KEY = ANVIL_DEV_KEYS[0]
_MAX_TIMEOUT_SECONDS = 300


@dataclass
class Permit2Stack:
    """A running chain + Permit2 + token + foundation facilitator + merchant."""

    node: AnvilNode
    chain_id: int
    network: str
    token: str
    payer_key: str
    payer_address: str
    merchant_address: str
    price_atomic: int
    facilitator: FacilitatorService
    merchant_url: str

    def __repr__(self) -> str:  # never print the payer key
        return f"Permit2Stack(chain_id={self.chain_id}, token={self.token!r})"

    @property
    def rpc_url(self) -> str:
        return self.node.rpc_url

    @property
    def paid_url(self) -> str:
        return f"{self.merchant_url}{PAID_PATH}"

    async def balance(self, address: str) -> int:
        return await token_balance(self.rpc_url, self.token, address)

    async def native_balance(self, address: str) -> int:
        return await native_balance(self.rpc_url, address)

    async def allowance(self, owner: str) -> int:
        """The ERC-20 allowance `owner` gave Permit2 on the token."""
        return await permit2_allowance(self.rpc_url, self.token, owner)

    async def new_payer(self, tokens_atomic: int = 0, wei: int = 10**17) -> tuple[str, str]:
        """A fresh key holding `tokens_atomic` tokens and `wei` ETH, no approval: (key, address)."""
        account = Account.create()
        if tokens_atomic:
            await mint(self.rpc_url, self.token, _DEPLOYER_KEY, account.address, tokens_atomic)
        if wei:
            await send_eth(self.rpc_url, _DEPLOYER_KEY, account.address, wei)
        return "0x" + bytes(account.key).hex(), str(account.address)

    async def approve(self, owner_key: str, amount_atomic: int = (1 << 256) - 1) -> None:
        """Approve Permit2 from `owner_key` with the sandbox's own helper (not the client's)."""
        await approve_permit2(self.rpc_url, self.token, owner_key, amount_atomic)


def _routes(*, network: str, asset: str, pay_to: str, price_atomic: int) -> dict[str, RouteConfig]:
    price = AssetAmount(
        amount=str(price_atomic), asset=asset, extra={"assetTransferMethod": "permit2"}
    )
    option = PaymentOption(
        scheme="exact",
        pay_to=pay_to,
        price=price,
        network=network,
        max_timeout_seconds=_MAX_TIMEOUT_SECONDS,
    )
    return {
        f"GET {PAID_PATH}": RouteConfig(
            accepts=option,
            description="a paid sandbox resource (x402 v2, Permit2)",
            mime_type="application/json",
        )
    }


@contextlib.asynccontextmanager
async def permit2_stack(
    *,
    chain_id: int = DEFAULT_CHAIN_ID,
    price_atomic: int = DEFAULT_PRICE_ATOMIC,
    payer_funding_atomic: int = 100 * DEFAULT_PRICE_ATOMIC,
) -> AsyncIterator[Permit2Stack]:
    """Start the chain, Permit2, token, facilitator and merchant; stop them all on exit."""
    network = f"eip155:{chain_id}"
    async with contextlib.AsyncExitStack() as stack:
        node = await stack.enter_async_context(AnvilNode(chain_id))
        await install_permit2(node.rpc_url)
        token = await deploy_token(node.rpc_url, _DEPLOYER_KEY, TOKEN_NAME, TOKEN_SYMBOL)
        merchant_address = str(Account.create().address)

        signer = FacilitatorWeb3Signer(private_key=_FACILITATOR_KEY, rpc_url=node.rpc_url)
        facilitator = x402FacilitatorSync()
        register_exact_evm_facilitator(facilitator, signer, networks=network)
        service = FacilitatorService(facilitator)
        served_facilitator = await ServedApp(service.app, "x402-foundation-facilitator").start()
        stack.push_async_callback(served_facilitator.stop)

        facilitator_client = HTTPFacilitatorClient(FacilitatorConfig(url=served_facilitator.url))
        stack.push_async_callback(facilitator_client.aclose)
        server = x402ResourceServer(facilitator_client)
        register_exact_evm_server(server, networks=network)
        routes = _routes(
            network=network, asset=token, pay_to=merchant_address, price_atomic=price_atomic
        )
        middleware = await anyio.to_thread.run_sync(_v2_merchant_middleware, routes, server)
        merchant_app = Starlette(
            routes=[
                Route(PAID_PATH, _paid_handler, methods=["GET"]),
                Route("/free", _free_handler, methods=["GET"]),
            ],
            middleware=[Middleware(BaseHTTPMiddleware, dispatch=middleware)],
        )
        served_merchant = await ServedApp(merchant_app, "x402-foundation-merchant").start()
        stack.push_async_callback(served_merchant.stop)

        started = Permit2Stack(
            node=node,
            chain_id=chain_id,
            network=network,
            token=token,
            payer_key="",
            payer_address="",
            merchant_address=merchant_address,
            price_atomic=price_atomic,
            facilitator=service,
            merchant_url=served_merchant.url,
        )
        started.payer_key, started.payer_address = await started.new_payer(payer_funding_atomic)
        yield started
