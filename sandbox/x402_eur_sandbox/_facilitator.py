"""The managed-account facilitator (`{mcp_url}/x402`): `POST /x402/pay`, `POST /x402/verify`,
and its discovery catalogue: `GET /x402/discovery/resources`, `GET /x402/discovery/search`.

Both calls carry the merchant's `X-API-KEY`. A payment request can be verified valid
once; the reasons are the spec's. The same origin serves the hosted tool server at
`{mcp_url}/mcp` when one is given (`_hosted_mcp`).
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import ASGIApp

from ._bank import Bank, BankError
from ._discovery import Catalogue, discovery_routes
from ._faults import FaultMiddleware, Faults
from ._http_util import json_body, json_response
from ._wire import AmountError, ProofError, decode_proof, parse_amount

__all__ = ["facilitator_app"]


def facilitator_app(
    bank: Bank,
    base_url: Callable[[], str],
    faults: Faults | None = None,
    *,
    tool_server: ASGIApp | None = None,
    catalogue: Catalogue | None = None,
) -> Starlette:
    """`base_url()` is this service's own URL, known once it is served; `tool_server`, an
    ASGI app, is mounted at `/mcp`; `catalogue` is listed at `/x402/discovery/resources`
    and searched at `/x402/discovery/search` (`_discovery`)."""
    faults = faults or Faults()

    async def pay(request: Request) -> Response:
        await faults.before("x402_pay", request)
        merchant = bank.account_for_key(request.headers.get("x-api-key"))
        body = await json_body(request)
        account_code = body.get("accountCode")
        if account_code != merchant.code:
            raise BankError(403, "Forbidden", "accountCode is not an account of this API key")
        raw_amount = body.get("amount")
        try:
            if isinstance(raw_amount, bool) or not isinstance(raw_amount, (int, Decimal)):
                raise AmountError("amount must be a JSON number")
            amount = parse_amount(raw_amount)
        except AmountError as exc:
            raise BankError(400, "InvalidAmount", str(exc)) from None
        message = body.get("message") if isinstance(body.get("message"), str) else ""
        created = bank.create_payment_request(merchant.code, amount, str(message))
        entry = {
            "scheme": "euro",
            "network": "provider:mainnet",
            "asset": "EURO",
            "amount": format(created.amount, "f"),
            "payTo": merchant.code,
            "paymentRequestCode": created.code,
            "expiresAt": int(created.expires_at),
            "facilitator": f"{base_url()}/x402",
        }
        return json_response({"paymentRequestCode": created.code, "accepts": [entry]})

    async def verify(request: Request) -> Response:
        await faults.before("x402_verify", request)
        merchant = bank.account_for_key(request.headers.get("x-api-key"))
        body = await json_body(request)
        proof = body.get("proof")
        if not isinstance(proof, str):
            return json_response({"valid": False, "reason": "Missing proof"})
        try:
            decoded = decode_proof(proof)
        except ProofError:
            return json_response({"valid": False, "reason": "Invalid proof encoding"})
        code = decoded.payload.get("paymentRequestCode")
        if decoded.scheme != "euro" or not isinstance(code, str):
            return json_response({"valid": False, "reason": "Unsupported scheme"})
        valid, reason, found = bank.verify_payment_request(code, merchant.code)
        if not valid or found is None:
            return json_response({"valid": False, "reason": reason})
        return json_response({"valid": True, "paymentRequestCode": code, "amount": found.amount})

    async def bank_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, BankError)
        return json_response(exc.body(), exc.status)

    routes: list[BaseRoute] = [
        Route("/x402/pay", pay, methods=["POST"]),
        Route("/x402/verify", verify, methods=["POST"]),
        Route("/health", lambda request: json_response({"ok": True}), methods=["GET"]),
    ]
    if catalogue is not None:
        routes.append(Mount("/x402", routes=discovery_routes(catalogue)))
    if tool_server is not None:
        routes.append(Route("/mcp", tool_server))
    return Starlette(
        routes=routes,
        exception_handlers={BankError: bank_error},
        middleware=[Middleware(FaultMiddleware)],
    )
