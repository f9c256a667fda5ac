"""The x402 foundation's own facilitator and merchant, on a local anvil chain (test helper):
one harness for the three schemes our client is measured against.

Each stack starts, all on 127.0.0.1, an anvil chain (the project's `AnvilNode`), a token, a
fresh payer key and a fresh merchant (`payTo`) address; the foundation's facilitator
(`x402FacilitatorSync` + its EVM scheme with `FacilitatorWeb3Signer`, an anvil-funded dev key
paying the gas) behind a small Starlette app with the standard `/supported`, `/verify` and
`/settle` endpoints; and the foundation's v2 merchant (`x402ResourceServer` + its
FastAPI/Starlette payment middleware, talking to that facilitator through its own
`HTTPFacilitatorClient`). What differs is the scheme (`_Scheme`), the route and the chain:

* `foundation_stack()`: EIP-3009 `exact`. `SandboxEip3009Token`, a six-decimal EIP-3009 token
  shaped like Circle's EURC (EIP-712 domain `{name, version "2"}`); a payer holding tokens and
  no ETH; `GET /paid`. When the chain id has an x402 v1 network name in the package's table
  (84532 is `base-sepolia`, the default here), also a v1 merchant written from the v1 HTTP
  transport spec, because the package's resource server no longer serves v1
  (`register_exact_evm_server` registers v2 only); it settles through the same facilitator.
* `permit2_stack()`: Permit2 `exact`. Permit2 and its proxies at their canonical addresses
  (`x402_eur_sandbox._permit2.install_permit2`) and a plain six-decimal ERC-20; a payer
  holding tokens and a little ETH (for its one-time approval), no approval yet; `GET /paid`
  with `extra.assetTransferMethod` `"permit2"`.
* `upto_stack()`: `upto` through Permit2 (authorize at most an amount; the merchant settles
  what the request used) on the same kind of chain; `GET /metered`, whose handler and
  settlement the test steers (`UptoStack`).
* `batch_stack()`: `batch-settlement` (payment channels): the sandbox's escrow, deposit
  collectors and Multicall3 at the scheme's canonical addresses
  (`x402_eur_sandbox._batch_escrow.install_batch_settlement`; the package hard-codes them),
  `SandboxEip3009Token`, a facilitator holding the receiver-authorizer key, `GET /session`
  whose charge the test steers, and the merchant's channel manager (claim, settle, refund)
  (`BatchStack`). `foundation_batch_client()` is the foundation's own payer for it.

Nothing here is our client: it is the yardstick our client is measured against. The package
calls web3 synchronously, so the facilitator runs its calls in worker threads and the
merchant's start-up `/supported` fetch (a blocking httpx call) runs off the event loop.

Needs the `x402` package with its `evm` and `httpx` extras plus `fastapi`.
"""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import anyio
import httpx
from eth_account import Account
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from web3 import Web3
from x402 import AssetAmount, x402Client, x402FacilitatorSync, x402ResourceServer
from x402.http import FacilitatorConfig, HTTPFacilitatorClient, x402HTTPResourceServer
from x402.http.clients import x402_httpx_transport
from x402.http.middleware.fastapi import payment_middleware, set_settlement_overrides
from x402.http.types import PaymentOption, RouteConfig
from x402.mechanisms.evm import EthAccountSignerWithRPC, FacilitatorWeb3Signer
from x402.mechanisms.evm.batch_settlement.authorizer_signer import LocalAuthorizerSigner
from x402.mechanisms.evm.batch_settlement.client import (
    BatchSettlementClientContext as BatchClientContext,
)
from x402.mechanisms.evm.batch_settlement.client import (
    BatchSettlementEvmScheme as BatchClientScheme,
)
from x402.mechanisms.evm.batch_settlement.client import (
    BatchSettlementEvmSchemeOptions,
    InMemoryClientChannelStorage,
    RefundOptions,
)
from x402.mechanisms.evm.batch_settlement.client.refund import _RefundResponse
from x402.mechanisms.evm.batch_settlement.constants import MIN_WITHDRAW_DELAY
from x402.mechanisms.evm.batch_settlement.facilitator import BatchSettlementEvmFacilitator
from x402.mechanisms.evm.batch_settlement.server import (
    BatchSettlementChannelManager,
    BatchSettlementEvmSchemeServerConfig,
    ChannelManagerConfig,
    ChannelStorage,
    ClaimOptions,
    RefundResult,
)
from x402.mechanisms.evm.batch_settlement.server import (
    BatchSettlementEvmScheme as BatchServerScheme,
)
from x402.mechanisms.evm.batch_settlement.server import Channel as MerchantChannel
from x402.mechanisms.evm.exact import (
    register_exact_evm_client,
    register_exact_evm_facilitator,
    register_exact_evm_server,
)
from x402.mechanisms.evm.upto import UptoEvmFacilitatorScheme, UptoEvmServerScheme
from x402.mechanisms.evm.v1.constants import V1_NETWORK_CHAIN_IDS
from x402.schemas import (
    SchemeNotFoundError,
    SettleResponse,
    parse_payment_payload,
    parse_payment_requirements,
)

from x402_eur_sandbox import ServedApp
from x402_eur_sandbox._anvil import (
    ANVIL_DEV_KEYS,
    AnvilNode,
    _sign_and_send,
    _web3,
    deploy_token,
    mint,
    native_balance,
    send_eth,
    token_balance,
)
from x402_eur_sandbox._batch_escrow import ChannelConfig as EscrowChannelConfig
from x402_eur_sandbox._batch_escrow import channel_id as escrow_channel_id
from x402_eur_sandbox._batch_escrow import (
    channel_state,
    install_batch_settlement,
    receiver_state,
)
from x402_eur_sandbox._permit2 import approve_permit2, install_permit2, permit2_allowance

__all__ = [
    "BATCH_CHAIN_ID",
    "DEFAULT_CHAIN_ID",
    "DEFAULT_PRICE_ATOMIC",
    "ERC20_NAME",
    "ERC20_SYMBOL",
    "METERED_PATH",
    "PAID_PATH",
    "SESSION_PATH",
    "TOKEN_NAME",
    "TOKEN_SYMBOL",
    "TOKEN_VERSION",
    "UPTO_CHAIN_ID",
    "BatchStack",
    "FacilitatorService",
    "FoundationBatchClient",
    "FoundationStack",
    "Permit2Stack",
    "UptoStack",
    "V1Merchant",
    "authorization_state",
    "b64_json",
    "batch_stack",
    "deploy_eip3009_token",
    "eip3009_call",
    "eip3009_transact",
    "foundation_batch_client",
    "foundation_client",
    "foundation_stack",
    "load_eip3009_artifact",
    "permit2_stack",
    "upto_stack",
    "v1_network_for",
]

#: Base Sepolia's chain id: the only kind of id for which the package can also speak v1,
#: since its v1 network names map to chain ids through a fixed table.
DEFAULT_CHAIN_ID = 84532
#: The `upto` stack's chain (no v1 name needed: `upto` is v2 only).
UPTO_CHAIN_ID = 84533
#: The `batch-settlement` stack's chain (v2 only too).
BATCH_CHAIN_ID = 84535
#: EIP-712 domain of the sandbox token (the name is the constructor's `name`).
TOKEN_NAME = "Sandbox EURC"
TOKEN_SYMBOL = "sEURC"
TOKEN_VERSION = "2"
#: The plain ERC-20 of the Permit2 and `upto` stacks.
ERC20_NAME = "Sandbox Euro Token"
ERC20_SYMBOL = "sEURT"
#: 0.01 token (six decimals); the `upto` stack's maximum per request.
DEFAULT_PRICE_ATOMIC = 10_000
PAID_PATH = "/paid"
METERED_PATH = "/metered"
SESSION_PATH = "/session"
_ARTIFACT_FILE = "SandboxEip3009Token.json"
_DEPLOYER_KEY = ANVIL_DEV_KEYS[0]
#: Pays the facilitator's gas. A different dev key from the project's own hot wallet.
_FACILITATOR_KEY = ANVIL_DEV_KEYS[2]
_MAX_TIMEOUT_SECONDS = 300


def load_eip3009_artifact() -> dict[str, Any]:
    """The compiled `SandboxEip3009Token` artifact (abi, bytecode, compiler)."""
    package = resources.files("x402_eur_sandbox.contracts")
    data: dict[str, Any] = json.loads(package.joinpath(_ARTIFACT_FILE).read_text("utf-8"))
    return data


async def deploy_eip3009_token(
    rpc_url: str, deployer_key: str, name: str = TOKEN_NAME, symbol: str = TOKEN_SYMBOL
) -> str:
    """Deploy a `SandboxEip3009Token` (owner: `deployer_key`) and return its checksum address."""
    artifact = load_eip3009_artifact()
    sender = Account.from_key(deployer_key).address
    async with _web3(rpc_url) as w3:
        factory = w3.eth.contract(abi=artifact["abi"], bytecode=artifact["bytecode"])
        tx = await factory.constructor(name, symbol).build_transaction(
            {"from": sender, "nonce": await w3.eth.get_transaction_count(sender, "pending")}
        )
        receipt = await _sign_and_send(w3, deployer_key, dict(tx))
    address = receipt.get("contractAddress")
    if not address:
        raise RuntimeError("deployment receipt has no contract address")
    return str(Web3.to_checksum_address(address))


async def eip3009_call(rpc_url: str, token: str, signature: str, *args: Any) -> Any:
    """`eth_call` a token function by its full signature, e.g. `"version()"` (the token has
    overloads, so functions are named by signature)."""
    artifact = load_eip3009_artifact()
    async with _web3(rpc_url) as w3:
        contract = w3.eth.contract(address=Web3.to_checksum_address(token), abi=artifact["abi"])
        return await contract.get_function_by_signature(signature)(*args).call()


async def eip3009_transact(
    rpc_url: str, token: str, sender_key: str, signature: str, *args: Any
) -> dict[str, Any]:
    """Send a token transaction as `sender_key` (who pays the gas); return the receipt.

    Raises `web3.exceptions.ContractLogicError` (with the revert string) if it would revert.
    """
    artifact = load_eip3009_artifact()
    sender = Account.from_key(sender_key).address
    async with _web3(rpc_url) as w3:
        contract = w3.eth.contract(address=Web3.to_checksum_address(token), abi=artifact["abi"])
        tx = await contract.get_function_by_signature(signature)(*args).build_transaction(
            {"from": sender, "nonce": await w3.eth.get_transaction_count(sender, "pending")}
        )
        return await _sign_and_send(w3, sender_key, dict(tx))


async def authorization_state(rpc_url: str, token: str, authorizer: str, nonce: str) -> bool:
    """EIP-3009 `authorizationState(authorizer, nonce)`: True once the nonce is used."""
    return bool(
        await eip3009_call(
            rpc_url,
            token,
            "authorizationState(address,bytes32)",
            Web3.to_checksum_address(authorizer),
            bytes.fromhex(nonce.removeprefix("0x")),
        )
    )


def v1_network_for(chain_id: int) -> str | None:
    """The package's v1 network name for `chain_id`, or None (then no v1 on that chain)."""
    return next((name for name, cid in V1_NETWORK_CHAIN_IDS.items() if cid == chain_id), None)


def b64_json(value: str) -> Any:
    """Decode a standard-base64 JSON header value (as every x402 header is)."""
    return json.loads(base64.b64decode(value, validate=True))


def _b64_json_encode(value: Any) -> str:
    return base64.b64encode(json.dumps(value, separators=(",", ":")).encode()).decode()


# --- the facilitator -------------------------------------------------------------------------


class FacilitatorService:
    """The foundation's `x402FacilitatorSync` behind `/supported`, `/verify`, `/settle`.

    Request and response bodies are those of the package's own `HTTPFacilitatorClient`:
    `{"x402Version", "paymentPayload", "paymentRequirements"}` in, the camelCase
    `VerifyResponse` / `SettleResponse` out (200 even when invalid). Every verify/settle
    request body is kept in `requests` as `(path, body)` for tests to inspect.
    """

    def __init__(self, facilitator: x402FacilitatorSync) -> None:
        self.facilitator = facilitator
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.app = Starlette(
            routes=[
                Route("/supported", self._supported, methods=["GET"]),
                Route("/verify", self._verify, methods=["POST"]),
                Route("/settle", self._settle, methods=["POST"]),
            ]
        )

    async def _supported(self, request: Request) -> Response:
        supported = self.facilitator.get_supported()
        return JSONResponse(supported.model_dump(by_alias=True, exclude_none=True))

    async def _verify(self, request: Request) -> Response:
        return await self._handle(request, "/verify", self.facilitator.verify)

    async def _settle(self, request: Request) -> Response:
        return await self._handle(request, "/settle", self.facilitator.settle)

    async def _handle(self, request: Request, path: str, operation: Callable[..., Any]) -> Response:
        try:
            body = json.loads(await request.body())
            self.requests.append((path, body))
            payload = parse_payment_payload(body["paymentPayload"])
            requirements = parse_payment_requirements(
                payload.x402_version, body["paymentRequirements"]
            )
        except (ValueError, KeyError, TypeError, ValidationError) as exc:
            return JSONResponse({"error": f"invalid request: {exc}"}, status_code=400)
        try:
            # The package's EVM scheme calls web3 synchronously: keep it off the event loop.
            result = await anyio.to_thread.run_sync(operation, payload, requirements)
        except SchemeNotFoundError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        return JSONResponse(result.model_dump(by_alias=True, exclude_none=True))


# --- our v1 merchant (the package no longer serves v1) ---------------------------------------


class V1Merchant:
    """A v1 merchant from `specs/transports-v1/http.md`, paid through the foundation facilitator.

    `GET /paid` without `X-PAYMENT` answers 402 with the JSON body
    `{"x402Version": 1, "error", "accepts": [PaymentRequirementsV1]}`. With one it decodes the
    standard-base64 JSON `PaymentPayloadV1`, matches scheme + network, calls the facilitator's
    `/verify`, runs the handler, then `/settle`, and returns the handler's 200 with
    `X-PAYMENT-RESPONSE` (standard base64 of the settle response), like the package's legacy
    v1 FastAPI middleware did. Failures answer 402 with the same body shape and an `error`.
    """

    def __init__(
        self,
        *,
        network: str,
        asset: str,
        pay_to: str,
        price_atomic: int,
        facilitator_url: str,
        extra: dict[str, Any],
    ) -> None:
        self.network = network
        self.asset = asset
        self.pay_to = pay_to
        self.price_atomic = price_atomic
        self.facilitator_url = facilitator_url
        self.extra = dict(extra)
        self.settlements: list[dict[str, Any]] = []
        self._http = httpx.AsyncClient(timeout=60, trust_env=False)
        self.app = Starlette(routes=[Route(PAID_PATH, self._paid, methods=["GET"])])

    async def aclose(self) -> None:
        await self._http.aclose()

    def requirements(self, resource: str) -> dict[str, Any]:
        return {
            "scheme": "exact",
            "network": self.network,
            "maxAmountRequired": str(self.price_atomic),
            "resource": resource,
            "description": "a paid sandbox resource (x402 v1)",
            "mimeType": "application/json",
            "outputSchema": None,
            "payTo": self.pay_to,
            "maxTimeoutSeconds": _MAX_TIMEOUT_SECONDS,
            "asset": self.asset,
            "extra": dict(self.extra),
        }

    def _payment_required(self, requirements: dict[str, Any], error: str) -> Response:
        body = {"x402Version": 1, "error": error, "accepts": [requirements]}
        return JSONResponse(body, status_code=402)

    async def _facilitator(
        self, path: str, payment: dict[str, Any], requirements: dict[str, Any]
    ) -> dict[str, Any]:
        response = await self._http.post(
            f"{self.facilitator_url}{path}",
            json={"x402Version": 1, "paymentPayload": payment, "paymentRequirements": requirements},
        )
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result

    async def _paid(self, request: Request) -> Response:
        requirements = self.requirements(str(request.url))
        header = request.headers.get("x-payment")
        if not header:
            return self._payment_required(requirements, "X-PAYMENT header is required")
        try:
            payment = b64_json(header)
            if not isinstance(payment, dict) or payment.get("x402Version") != 1:
                raise ValueError("not an x402 v1 payment payload")
        except ValueError:
            return self._payment_required(requirements, "Invalid payment header format")
        if payment.get("scheme") != "exact" or payment.get("network") != self.network:
            return self._payment_required(requirements, "No matching payment requirements found")
        verified = await self._facilitator("/verify", payment, requirements)
        if not verified.get("isValid"):
            reason = verified.get("invalidReason") or "Unknown error"
            return self._payment_required(requirements, f"Invalid payment: {reason}")
        settled = await self._facilitator("/settle", payment, requirements)
        self.settlements.append(settled)
        if not settled.get("success"):
            reason = settled.get("errorReason") or "Unknown error"
            return self._payment_required(requirements, f"Settle failed: {reason}")
        return JSONResponse(
            {"paid": True, "version": 1},
            headers={"X-PAYMENT-RESPONSE": _b64_json_encode(settled)},
        )


# --- the v2 merchant (the package's own middleware) ------------------------------------------


async def _paid_handler(request: Request) -> Response:
    return JSONResponse({"paid": True, "version": 2})


async def _free_handler(request: Request) -> Response:
    return JSONResponse({"free": True})


def _route(
    path: str, *, scheme: str, network: str, pay_to: str, price: AssetAmount, description: str
) -> dict[str, RouteConfig]:
    """The v2 merchant's one priced route: `GET path` for `price` in one `scheme` entry.

    A price in a token the package has no default-asset entry for must be an AssetAmount
    in atomic units (carrying what the scheme needs in `extra`, e.g. the EIP-712 domain),
    or come from a money parser registered on the server scheme: see docs/x402-standard.md.
    """
    option = PaymentOption(
        scheme=scheme,
        pay_to=pay_to,
        price=price,
        network=network,
        max_timeout_seconds=_MAX_TIMEOUT_SECONDS,
    )
    return {
        f"GET {path}": RouteConfig(
            accepts=option, description=description, mime_type="application/json"
        )
    }


def _v2_merchant_middleware(
    routes: dict[str, RouteConfig], server: x402ResourceServer
) -> Callable[[Request, Callable[[Request], Awaitable[Response]]], Awaitable[Response]]:
    """Initialize the resource server, validate the routes, return the package's middleware.

    Blocking (the package fetches `/supported` with a sync httpx client): run it in a worker
    thread while the facilitator is served by the event loop. The middleware is created with
    `sync_facilitator_on_start=False` because its own start-up path calls `os._exit(1)` on a
    route or capability error; here those raise instead.
    """
    x402HTTPResourceServer(server, routes).initialize()
    return payment_middleware(routes, server, sync_facilitator_on_start=False)


# --- one scheme's facilitator and merchant, served ---------------------------------------------


@dataclass(frozen=True)
class _Scheme:
    """How a scheme registers on the foundation's facilitator and on its resource server."""

    facilitator: Callable[[x402FacilitatorSync, FacilitatorWeb3Signer, str], object]
    server: Callable[[x402ResourceServer, str], object]


#: `exact` (EIP-3009 and Permit2 alike: the package's EVM `exact` scheme takes both).
EXACT = _Scheme(
    facilitator=lambda f, signer, network: register_exact_evm_facilitator(
        f, signer, networks=network
    ),
    server=lambda server, network: register_exact_evm_server(server, networks=network),
)
#: `upto`: authorize at most an amount, settle what the request used.
UPTO = _Scheme(
    facilitator=lambda f, signer, network: f.register([network], UptoEvmFacilitatorScheme(signer)),
    server=lambda server, network: server.register(network, UptoEvmServerScheme()),
)


@dataclass(frozen=True)
class _Facilitator:
    service: FacilitatorService
    url: str
    address: str
    server: x402ResourceServer
    client: HTTPFacilitatorClient


async def _serve_facilitator(
    exits: contextlib.AsyncExitStack, rpc_url: str, network: str, scheme: _Scheme
) -> _Facilitator:
    """The foundation's facilitator for `scheme` (an anvil-funded dev key pays its gas),
    served, and the resource server a merchant talks to it through."""
    signer = FacilitatorWeb3Signer(private_key=_FACILITATOR_KEY, rpc_url=rpc_url)
    facilitator = x402FacilitatorSync()
    scheme.facilitator(facilitator, signer, network)
    service = FacilitatorService(facilitator)
    served = await ServedApp(service.app, "x402-foundation-facilitator").start()
    exits.push_async_callback(served.stop)
    client = HTTPFacilitatorClient(FacilitatorConfig(url=served.url))
    exits.push_async_callback(client.aclose)
    server = x402ResourceServer(client)
    scheme.server(server, network)
    return _Facilitator(service, served.url, signer.address, server, client)


async def _serve_merchant(
    exits: contextlib.AsyncExitStack,
    facilitator: _Facilitator,
    routes: dict[str, RouteConfig],
    handlers: list[Route],
    outer: tuple[Middleware, ...] = (),
) -> str:
    """The foundation's v2 merchant (its payment middleware over `handlers`, behind the
    `outer` middleware) guarding `routes`, served: its URL."""
    payment = await anyio.to_thread.run_sync(_v2_merchant_middleware, routes, facilitator.server)
    app = Starlette(
        routes=handlers,
        middleware=[*outer, Middleware(BaseHTTPMiddleware, dispatch=payment)],
    )
    served = await ServedApp(app, "x402-foundation-merchant").start()
    exits.push_async_callback(served.stop)
    return served.url


@dataclass(frozen=True)
class _Chain:
    """A stack's chain, token, merchant address and facilitator: what every stack holds."""

    node: AnvilNode
    chain_id: int
    network: str
    token: str
    merchant_address: str
    facilitator: _Facilitator

    def fields(self, price_atomic: int, merchant_url: str) -> dict[str, Any]:
        """A stack's fields (its payer still to come)."""
        return {
            "node": self.node,
            "chain_id": self.chain_id,
            "network": self.network,
            "token": self.token,
            "payer_key": "",
            "payer_address": "",
            "merchant_address": self.merchant_address,
            "price_atomic": price_atomic,
            "facilitator": self.facilitator.service,
            "facilitator_url": self.facilitator.url,
            "facilitator_address": self.facilitator.address,
            "merchant_url": merchant_url,
        }


async def _chain(
    exits: contextlib.AsyncExitStack,
    chain_id: int,
    scheme: _Scheme,
    *,
    permit2: bool,
    merchant_address: str | None = None,
) -> _Chain:
    """Anvil with `SandboxEip3009Token`, or (`permit2`) with Permit2 and its proxies at their
    canonical addresses and a plain six-decimal ERC-20 (no EIP-3009: the kind of token
    Permit2 exists for); `merchant_address` (default: a fresh one); the facilitator for
    `scheme`, served."""
    network = f"eip155:{chain_id}"
    node = await exits.enter_async_context(AnvilNode(chain_id))
    if permit2:
        await install_permit2(node.rpc_url)
        token = await deploy_token(node.rpc_url, _DEPLOYER_KEY, ERC20_NAME, ERC20_SYMBOL)
    else:
        token = await deploy_eip3009_token(node.rpc_url, _DEPLOYER_KEY)
    facilitator = await _serve_facilitator(exits, node.rpc_url, network, scheme)
    merchant = merchant_address or str(Account.create().address)
    return _Chain(node, chain_id, network, token, merchant, facilitator)


# --- the stacks ------------------------------------------------------------------------------


@dataclass(repr=False)  # the payer key never shows
class _Stack:
    """A running chain + token + the foundation's facilitator + its v2 merchant."""

    node: AnvilNode
    chain_id: int
    network: str
    token: str
    payer_key: str
    payer_address: str
    merchant_address: str
    price_atomic: int
    facilitator: FacilitatorService
    facilitator_url: str
    facilitator_address: str
    merchant_url: str

    def __repr__(self) -> str:  # never print the payer key
        return f"{type(self).__name__}(chain_id={self.chain_id}, token={self.token!r})"

    @property
    def rpc_url(self) -> str:
        return self.node.rpc_url

    @property
    def paid_url(self) -> str:
        """The v2 merchant's paid resource."""
        return f"{self.merchant_url}{PAID_PATH}"

    async def balance(self, address: str) -> int:
        """Atomic token balance of `address`."""
        return await token_balance(self.rpc_url, self.token, address)

    async def native_balance(self, address: str) -> int:
        """ETH balance of `address`, in wei."""
        return await native_balance(self.rpc_url, address)


async def _new_payer(rpc_url: str, token: str, tokens_atomic: int, wei: int) -> tuple[str, str]:
    account = Account.create()
    if tokens_atomic:
        await mint(rpc_url, token, _DEPLOYER_KEY, account.address, tokens_atomic)
    if wei:
        await send_eth(rpc_url, _DEPLOYER_KEY, account.address, wei)
    return "0x" + bytes(account.key).hex(), str(account.address)


@dataclass(repr=False)  # the payer key never shows
class FoundationStack(_Stack):
    """EIP-3009 `exact` (see `foundation_stack`), and a v1 merchant where the chain has a v1
    network name."""

    v1_network: str | None = None
    v1_merchant: V1Merchant | None = None
    v1_merchant_url: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:  # never print the payer key
        return (
            f"FoundationStack(chain_id={self.chain_id}, token={self.token!r}, "
            f"facilitator_url={self.facilitator_url!r}, merchant_url={self.merchant_url!r})"
        )

    @property
    def v1_paid_url(self) -> str:
        """The v1 merchant's paid resource (only on a chain with a v1 network name)."""
        if self.v1_merchant_url is None:
            raise RuntimeError(f"chain {self.chain_id} has no x402 v1 network name")
        return f"{self.v1_merchant_url}{PAID_PATH}"

    async def fund(self, address: str, amount_atomic: int) -> None:
        """Mint `amount_atomic` sandbox tokens to `address`."""
        await mint(self.rpc_url, self.token, _DEPLOYER_KEY, address, amount_atomic)

    async def authorization_used(self, authorizer: str, nonce: str) -> bool:
        return await authorization_state(self.rpc_url, self.token, authorizer, nonce)

    async def transaction(self, tx_hash: str) -> dict[str, Any]:
        """The transaction `tx_hash` as the node returns it (`from`, `to`, `input`, ...)."""
        async with _web3(self.rpc_url) as w3:
            return dict(await w3.eth.get_transaction(tx_hash))  # type: ignore[arg-type]


@dataclass(repr=False)  # the payer key never shows
class Permit2Stack(_Stack):
    """Permit2 `exact` on a plain ERC-20 (see `permit2_stack`)."""

    async def allowance(self, owner: str) -> int:
        """The ERC-20 allowance `owner` gave Permit2 on the token."""
        return await permit2_allowance(self.rpc_url, self.token, owner)

    async def new_payer(self, tokens_atomic: int = 0, wei: int = 10**17) -> tuple[str, str]:
        """A fresh key holding `tokens_atomic` tokens and `wei` ETH, no approval: (key, address)."""
        return await _new_payer(self.rpc_url, self.token, tokens_atomic, wei)

    async def approve(self, owner_key: str, amount_atomic: int = (1 << 256) - 1) -> None:
        """Approve Permit2 from `owner_key` with the sandbox's own helper (not the client's)."""
        await approve_permit2(self.rpc_url, self.token, owner_key, amount_atomic)


@dataclass(repr=False)  # the payer key never shows
class UptoStack(Permit2Stack):
    """`upto` through Permit2 (see `upto_stack`): the merchant charges by use."""

    #: What the merchant charges for the next request (atomic; at most `price_atomic`).
    charge_atomic: int = 0
    #: When set, the merchant's settlement response claims this amount instead.
    claim_atomic: int | None = None
    #: When set, the handler answers this status (no settlement happens).
    fail_status: int | None = None

    @property
    def metered_url(self) -> str:
        return f"{self.merchant_url}{METERED_PATH}"


def foundation_client(stack: FoundationStack, private_key: str | None = None) -> x402Client:
    """The foundation's own async `x402Client`, with its EVM `exact` scheme (v2 on every
    `eip155:*` network, v1 on its named networks) signing with `private_key` (default: the
    stack's payer), and the sandbox token opted in to its spend controls.

    Out of the box the package's client only pays assets in its default-asset table (capped at
    $1); any other token must be listed in `allowed_assets`.
    """
    account = Account.from_key(private_key or stack.payer_key)
    client = x402Client()
    register_exact_evm_client(client, account)
    allowed: list[Any] = [{"network": stack.network, "asset": stack.token}]
    if stack.v1_network is not None:
        allowed.append({"network": stack.v1_network, "asset": stack.token})
    client.set_spend_controls({"allowed_assets": allowed})
    return client


_HANDLERS = [
    Route(PAID_PATH, _paid_handler, methods=["GET"]),
    Route("/free", _free_handler, methods=["GET"]),
]


@contextlib.asynccontextmanager
async def foundation_stack(
    *,
    chain_id: int = DEFAULT_CHAIN_ID,
    price_atomic: int = DEFAULT_PRICE_ATOMIC,
    payer_funding_atomic: int = 100 * DEFAULT_PRICE_ATOMIC,
) -> AsyncIterator[FoundationStack]:
    """EIP-3009 `exact`: an anvil chain with `SandboxEip3009Token` deployed, a payer holding
    tokens and no ETH, the facilitator, the v2 merchant guarding `GET /paid`, and a v1
    merchant where the chain has a v1 network name. All stop on exit."""
    v1_network = v1_network_for(chain_id)
    extra = {"name": TOKEN_NAME, "version": TOKEN_VERSION}
    async with contextlib.AsyncExitStack() as exits:
        chain = await _chain(exits, chain_id, EXACT, permit2=False)
        payer = Account.create()
        if payer_funding_atomic > 0:
            await mint(
                chain.node.rpc_url, chain.token, _DEPLOYER_KEY, payer.address, payer_funding_atomic
            )
        routes = _route(
            PAID_PATH,
            scheme="exact",
            network=chain.network,
            pay_to=chain.merchant_address,
            price=AssetAmount(amount=str(price_atomic), asset=chain.token, extra=extra),
            description="a paid sandbox resource (x402 v2)",
        )
        merchant_url = await _serve_merchant(exits, chain.facilitator, routes, _HANDLERS)
        v1_merchant, v1_url = await _serve_v1_merchant(
            exits, chain, v1_network, price_atomic, extra
        )
        started = FoundationStack(
            **chain.fields(price_atomic, merchant_url),
            v1_network=v1_network,
            v1_merchant=v1_merchant,
            v1_merchant_url=v1_url,
            extra=extra,
        )
        started.payer_key, started.payer_address = "0x" + bytes(payer.key).hex(), payer.address
        yield started


async def _serve_v1_merchant(
    exits: contextlib.AsyncExitStack,
    chain: _Chain,
    network: str | None,
    price_atomic: int,
    extra: dict[str, Any],
) -> tuple[V1Merchant | None, str | None]:
    """Our v1 merchant, served, when the chain has a v1 network name."""
    if network is None:
        return None, None
    merchant = V1Merchant(
        network=network,
        asset=chain.token,
        pay_to=chain.merchant_address,
        price_atomic=price_atomic,
        facilitator_url=chain.facilitator.url,
        extra=extra,
    )
    exits.push_async_callback(merchant.aclose)
    served = await ServedApp(merchant.app, "x402-v1-merchant").start()
    exits.push_async_callback(served.stop)
    return merchant, served.url


@contextlib.asynccontextmanager
async def permit2_stack(
    *,
    chain_id: int = DEFAULT_CHAIN_ID,
    price_atomic: int = DEFAULT_PRICE_ATOMIC,
    payer_funding_atomic: int = 100 * DEFAULT_PRICE_ATOMIC,
) -> AsyncIterator[Permit2Stack]:
    """Permit2 `exact`: an anvil chain with Permit2 and a plain ERC-20, a payer holding
    tokens and a little ETH (for its one-time Permit2 approval) and no approval yet, the
    facilitator (its EVM `exact` scheme verifies and settles Permit2 payloads through the
    proxy), and the v2 merchant guarding `GET /paid` with one `exact` entry whose
    `extra.assetTransferMethod` is `"permit2"`. All stop on exit."""
    async with contextlib.AsyncExitStack() as exits:
        chain = await _chain(exits, chain_id, EXACT, permit2=True)
        price = AssetAmount(
            amount=str(price_atomic), asset=chain.token, extra={"assetTransferMethod": "permit2"}
        )
        routes = _route(
            PAID_PATH,
            scheme="exact",
            network=chain.network,
            pay_to=chain.merchant_address,
            price=price,
            description="a paid sandbox resource (x402 v2, Permit2)",
        )
        merchant_url = await _serve_merchant(exits, chain.facilitator, routes, _HANDLERS)
        started = Permit2Stack(**chain.fields(price_atomic, merchant_url))
        started.payer_key, started.payer_address = await started.new_payer(payer_funding_atomic)
        yield started


def _metered(stack: UptoStack) -> Callable[[Request], Awaitable[Response]]:
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
    chain_id: int = UPTO_CHAIN_ID,
    max_atomic: int = DEFAULT_PRICE_ATOMIC,
    payer_funding_atomic: int = 100 * DEFAULT_PRICE_ATOMIC,
) -> AsyncIterator[UptoStack]:
    """`upto`: the Permit2 chain, a payer as `permit2_stack`'s, the facilitator with its EVM
    `upto` scheme (it names its address in `/supported`, which the merchant copies into
    `extra.facilitatorAddress`), and the v2 merchant guarding `GET /metered` with one `upto`
    entry of at most `max_atomic`. The handler charges `stack.charge_atomic` (the
    foundation's `Settlement-Overrides` response header); with `stack.claim_atomic` set, a
    layer in front of the merchant rewrites the `PAYMENT-RESPONSE` it sends to claim that
    amount (a merchant that lies about what it settled). All stop on exit."""
    async with contextlib.AsyncExitStack() as exits:
        chain = await _chain(exits, chain_id, UPTO, permit2=True)
        routes = _route(
            METERED_PATH,
            scheme="upto",
            network=chain.network,
            pay_to=chain.merchant_address,
            price=AssetAmount(amount=str(max_atomic), asset=chain.token, extra={}),
            description="a metered sandbox resource (x402 v2, upto)",
        )
        started = UptoStack(**chain.fields(max_atomic, ""), charge_atomic=max_atomic)
        started.merchant_url = await _serve_merchant(
            exits,
            chain.facilitator,
            routes,
            [Route(METERED_PATH, _metered(started), methods=["GET"])],
            outer=(Middleware(BaseHTTPMiddleware, dispatch=_claiming(started)),),
        )
        started.payer_key, started.payer_address = await started.new_payer(payer_funding_atomic)
        yield started


# --- batch-settlement: payment channels on the sandbox's escrow ------------------------------


def _session(stack: BatchStack) -> Callable[[Request], Awaitable[Response]]:
    async def session(request: Request) -> Response:
        charge = stack.merchant_charge
        response = JSONResponse(
            {"session": True, "charged": None if charge is None else str(charge)}
        )
        if charge is not None:
            # The package's settlement override: charge less than the voucher's increment.
            set_settlement_overrides(response, {"amount": str(charge)})
        return response

    return session


def _rewriting(stack: BatchStack) -> Callable[..., Awaitable[Response]]:
    """Pass the merchant's `PAYMENT-RESPONSE` and `PAYMENT-REQUIRED` through the stack's
    rewrites (a layer in front of the merchant that lies to the payer)."""

    async def dispatch(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        response = await call_next(request)
        for header, rewrite in (
            ("payment-response", stack.settlement_rewrite),
            ("payment-required", stack.payment_required_rewrite),
        ):
            value = response.headers.get(header)
            if rewrite is not None and value:
                response.headers[header] = _b64_json_encode(rewrite(b64_json(value)))
        return response

    return dispatch


def _batch_scheme(server_scheme: BatchServerScheme, authorizer_key: str) -> _Scheme:
    """`batch-settlement`: the facilitator holds the receiver-authorizer key (it signs claims
    and refunds and names its address in `/supported`); the merchant's scheme is the given
    instance, so the stack can read its channel storage."""
    return _Scheme(
        facilitator=lambda f, signer, network: f.register(
            [network],
            BatchSettlementEvmFacilitator(signer, LocalAuthorizerSigner(authorizer_key)),
        ),
        # The package's own scheme; its `payment_flows` is typed looser than the protocol.
        server=lambda server, network: server.register(network, server_scheme),  # type: ignore[arg-type]
    )


@dataclass(repr=False)  # the payer key never shows
class BatchStack(_Stack):
    """`batch-settlement` on the sandbox's escrow (see `batch_stack`): one deposit per
    channel, a cumulative voucher per request, claims and settlements in batches."""

    #: The merchant's resource-server scheme; its storage holds the merchant's channels.
    server_scheme: BatchServerScheme
    #: The merchant's channel manager (claim, settle, refund), built for this token.
    manager: BatchSettlementChannelManager
    #: What the route announces in `extra` besides what the scheme adds: the token's EIP-712
    #: domain and its transfer method.
    extra: dict[str, Any] = field(default_factory=dict)
    #: The facilitator's receiver-authorizer address (`extra.receiverAuthorizer` of the 402).
    receiver_authorizer: str = ""
    withdraw_delay: int = MIN_WITHDRAW_DELAY
    #: What the merchant charges per request (atomic); None charges the full price. Above
    #: `price_atomic` the merchant refuses its own charge (a 402 whose `PAYMENT-RESPONSE`
    #: fails with `charge_exceeds_signed_cumulative`).
    merchant_charge: int | None = None
    #: When set, what the payer receives instead of the merchant's `PAYMENT-RESPONSE` (the
    #: decoded settle response in, the one to send out): the merchant's own records stay true.
    settlement_rewrite: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    #: The same for the `PAYMENT-REQUIRED` of every 402 (corrective ones included).
    payment_required_rewrite: Callable[[dict[str, Any]], dict[str, Any]] | None = None

    def __repr__(self) -> str:  # never print the payer key
        return (
            f"BatchStack(chain_id={self.chain_id}, token={self.token!r}, "
            f"merchant_url={self.merchant_url!r})"
        )

    @property
    def session_url(self) -> str:
        return f"{self.merchant_url}{SESSION_PATH}"

    @property
    def storage(self) -> ChannelStorage:
        return self.server_scheme.get_storage()

    def merchant_channel(self, channel_id: str) -> MerchantChannel | None:
        """The merchant's record of a channel (charged total, last voucher, mirrored state)."""
        return self.storage.get(channel_id)

    def channel_config(
        self, payer: str, *, payer_authorizer: str | None = None, salt: bytes = bytes(32)
    ) -> EscrowChannelConfig:
        """`payer`'s channel to this merchant and token, as the escrow takes it (the payer
        signs its own vouchers unless `payer_authorizer`)."""
        return EscrowChannelConfig(
            payer=payer,
            payer_authorizer=payer_authorizer or payer,
            receiver=self.merchant_address,
            receiver_authorizer=self.receiver_authorizer,
            token=self.token,
            withdraw_delay=self.withdraw_delay,
            salt=salt,
        )

    def channel_id(
        self, payer: str, *, payer_authorizer: str | None = None, salt: bytes = bytes(32)
    ) -> str:
        """The id (0x + 64 lower-case hex) of `payer`'s channel to this merchant and token."""
        config = self.channel_config(payer, payer_authorizer=payer_authorizer, salt=salt)
        return "0x" + escrow_channel_id(config, self.chain_id).hex()

    async def channel(self, channel_id: str) -> tuple[int, int]:
        """The escrow's `(balance, totalClaimed)` of a channel."""
        return await channel_state(self.rpc_url, bytes.fromhex(channel_id.removeprefix("0x")))

    async def receiver(self) -> tuple[int, int]:
        """The escrow's `(totalClaimed, totalSettled)` of the merchant in this token."""
        return await receiver_state(self.rpc_url, self.merchant_address, self.token)

    async def fund(self, address: str, amount_atomic: int) -> None:
        """Mint `amount_atomic` sandbox tokens to `address`."""
        await mint(self.rpc_url, self.token, _DEPLOYER_KEY, address, amount_atomic)

    async def new_payer(self, tokens_atomic: int = 0, wei: int = 10**17) -> tuple[str, str]:
        """A fresh key holding `tokens_atomic` tokens and `wei` ETH: (key, address)."""
        return await _new_payer(self.rpc_url, self.token, tokens_atomic, wei)

    async def approve(self, owner_key: str, amount_atomic: int = (1 << 256) - 1) -> None:
        """Approve Permit2 from `owner_key` (a Permit2 deposit needs it; the sandbox's helper,
        not a client's)."""
        await approve_permit2(self.rpc_url, self.token, owner_key, amount_atomic)

    async def advance_time(self, seconds: int) -> None:
        """Move the chain's clock forward and mine a block (a timed withdrawal's delay)."""
        async with _web3(self.rpc_url) as w3:
            for method, params in (("evm_increaseTime", [seconds]), ("evm_mine", [])):
                answer = await w3.provider.make_request(method, params)
                if answer.get("error"):
                    raise RuntimeError(f"{method} failed: {answer['error']}")

    async def claim_and_settle(self, channel_ids: list[str] | None = None) -> dict[str, Any]:
        """The merchant claims its channels' charged totals (only `channel_ids` when given)
        in one batch, then settles: the escrow pays the merchant what was claimed and not yet
        settled. `{"claims": [ClaimResult], "settle": SettleResult | None}`."""
        options = ClaimOptions()
        if channel_ids is not None:
            wanted = {c.lower() for c in channel_ids}
            options.select_claim_channels = lambda channels, _context: [
                c for c in channels if c.channel_id.lower() in wanted
            ]
        return await self.manager.claim_and_settle(options)

    async def refund(self, channel_ids: list[str] | None = None) -> list[RefundResult]:
        """The merchant refunds channels on its own initiative (claiming what is charged in
        the same transaction) and forgets them; all of them when `channel_ids` is None."""
        return await self.manager.refund(channel_ids)


@contextlib.asynccontextmanager
async def batch_stack(
    *,
    chain_id: int = BATCH_CHAIN_ID,
    price_atomic: int = DEFAULT_PRICE_ATOMIC,
    payer_funding_atomic: int = 100 * DEFAULT_PRICE_ATOMIC,
    withdraw_delay: int = MIN_WITHDRAW_DELAY,
    asset_transfer_method: str = "eip3009",
) -> AsyncIterator[BatchStack]:
    """`batch-settlement`: an anvil chain with `SandboxEip3009Token` and the sandbox's escrow,
    collectors, Permit2 and Multicall3 at their canonical addresses; the facilitator with its
    batch-settlement scheme and a receiver-authorizer key; the v2 merchant guarding
    `GET /session` with one `batch-settlement` entry of `price_atomic` (explicit asset and
    EIP-712 domain: anvil's chains have no default asset) whose handler charges
    `stack.merchant_charge`, behind a layer that rewrites what the payer is told when the
    test asks (`stack.settlement_rewrite`, `stack.payment_required_rewrite`); the merchant's
    channel manager; a payer holding tokens and a
    little ETH (for a timed withdrawal of its own). Deposits are ERC-3009 authorizations,
    or with `asset_transfer_method="permit2"` Permit2 transfers (the payer then approves
    Permit2 first: `stack.approve`). All stop on exit."""
    merchant_address = str(Account.create().address)
    authorizer_key = "0x" + bytes(Account.create().key).hex()
    server_scheme = BatchServerScheme(
        merchant_address, BatchSettlementEvmSchemeServerConfig(withdraw_delay=withdraw_delay)
    )
    extra = {
        "name": TOKEN_NAME,
        "version": TOKEN_VERSION,
        "assetTransferMethod": asset_transfer_method,
    }
    async with contextlib.AsyncExitStack() as exits:
        chain = await _chain(
            exits,
            chain_id,
            _batch_scheme(server_scheme, authorizer_key),
            permit2=False,
            merchant_address=merchant_address,
        )
        await install_batch_settlement(chain.node.rpc_url, _DEPLOYER_KEY)
        manager = BatchSettlementChannelManager(
            ChannelManagerConfig(
                scheme=server_scheme,
                facilitator=chain.facilitator.client,
                receiver=merchant_address,
                token=chain.token,
                network=chain.network,
            )
        )
        routes = _route(
            SESSION_PATH,
            scheme="batch-settlement",
            network=chain.network,
            pay_to=merchant_address,
            price=AssetAmount(amount=str(price_atomic), asset=chain.token, extra=extra),
            description="a sandbox session resource (x402 v2, batch-settlement)",
        )
        started = BatchStack(
            **chain.fields(price_atomic, ""),
            server_scheme=server_scheme,
            manager=manager,
            extra=extra,
            receiver_authorizer=str(Account.from_key(authorizer_key).address),
            withdraw_delay=withdraw_delay,
        )
        started.merchant_url = await _serve_merchant(
            exits,
            chain.facilitator,
            routes,
            [Route(SESSION_PATH, _session(started), methods=["GET"])],
            outer=(Middleware(BaseHTTPMiddleware, dispatch=_rewriting(started)),),
        )
        started.payer_key, started.payer_address = await started.new_payer(payer_funding_atomic)
        yield started


class _Recording(httpx.AsyncBaseTransport):
    """Forwards to a loopback transport and keeps every payment sent and answer received."""

    def __init__(self, owner: FoundationBatchClient) -> None:
        self._owner = owner
        self._inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self._owner._record(request.headers.get("payment-signature"), None)
        response = await self._inner.handle_async_request(request)
        self._owner._record(None, response.headers.get("payment-response"))
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


@dataclass
class FoundationBatchClient:
    """The foundation's own batch-settlement payer: its client scheme in an `x402Client`,
    paying through its httpx transport. `payments` holds every payment payload it sent
    (decoded `PAYMENT-SIGNATURE`, refunds included) and `settlements` every
    `PAYMENT-RESPONSE` it received, in order."""

    client: x402Client
    scheme: BatchClientScheme
    storage: InMemoryClientChannelStorage
    payments: list[dict[str, Any]] = field(default_factory=list)
    settlements: list[dict[str, Any]] = field(default_factory=list)

    def _record(self, payment: str | None, settlement: str | None) -> None:
        if payment:
            self.payments.append(b64_json(payment))
        if settlement:
            self.settlements.append(b64_json(settlement))

    def http(self) -> httpx.AsyncClient:
        """An httpx client that pays 402s with the foundation's transport (close it)."""
        transport = x402_httpx_transport(self.client, _Recording(self))
        return httpx.AsyncClient(transport=transport, timeout=60, trust_env=False)

    def local_channel(self, channel_id: str) -> BatchClientContext | None:
        """The client's own record of a channel (charged total, balance)."""
        return self.storage.get(channel_id.lower())

    async def refund(self, url: str, amount_atomic: int | None = None) -> SettleResponse:
        """The foundation client's cooperative refund of the channel behind `url` (all of
        the unspent deposit unless `amount_atomic`). Its refund flow is blocking (probe,
        then the refund request): it runs in a worker thread while the merchant serves."""

        def fetch(target: str, headers: dict[str, str]) -> Any:
            self._record(headers.get("PAYMENT-SIGNATURE"), None)
            with httpx.Client(timeout=60, trust_env=False) as http:
                response = http.get(target, headers=headers)
            self._record(None, response.headers.get("payment-response"))
            return _RefundResponse(status=response.status_code, headers=dict(response.headers))

        amount = None if amount_atomic is None else str(amount_atomic)
        options = RefundOptions(amount=amount, fetch=fetch)
        return await anyio.to_thread.run_sync(self.scheme.refund, url, options)


def foundation_batch_client(
    stack: BatchStack, private_key: str | None = None, *, salt: bytes = bytes(32)
) -> FoundationBatchClient:
    """The foundation's batch-settlement client for `stack`'s payer (or `private_key`): its
    EVM signer with an RPC (it reads the escrow to recover a channel it has no record of),
    channel state in memory, the sandbox token opted in to its spend controls (no per-payment
    cap: the deposit is then the merchant's `extra.minDeposit`)."""
    account = Account.from_key(private_key or stack.payer_key)
    storage = InMemoryClientChannelStorage()
    scheme = BatchClientScheme(
        EthAccountSignerWithRPC(account, rpc_url=stack.rpc_url),
        BatchSettlementEvmSchemeOptions(storage=storage, salt="0x" + salt.hex()),
    )
    client = x402Client().register(stack.network, scheme)
    client.set_spend_controls(
        {"allowed_assets": [{"network": stack.network, "asset": stack.token}]}
    )
    return FoundationBatchClient(client=client, scheme=scheme, storage=storage)
