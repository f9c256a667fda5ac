"""The managed-account payment API (`{api_url}`), in the field notes' shapes.

`POST /transaction/payment`, `GET /transaction?txCode=` (or, without `txCode`, the
account's transactions, oldest first: the first page, its `total` counting them all),
`GET /account/balance`,
`GET /account/list`. Success bodies are wrapped in `{"value": ...}`; errors are
`{"errors": [{"code", "message"}]}`.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ._bank import Bank, BankError
from ._faults import FaultMiddleware, Faults
from ._http_util import json_body, json_response

__all__ = ["payment_api_app"]


def _amount(value: Any) -> Decimal:
    if isinstance(value, (int, Decimal)) and not isinstance(value, bool):
        return Decimal(value)
    raise BankError(400, "InvalidAmount", "amount must be a JSON number")


def payment_api_app(bank: Bank, faults: Faults | None = None) -> Starlette:
    faults = faults or Faults()

    async def pay(request: Request) -> Response:
        await faults.before("payment", request)
        payer = bank.account_for_key(request.headers.get("x-api-key"))
        body = await json_body(request)
        fields = {k: body.get(k) for k in ("paymentFrom", "toType", "paymentTo")}
        for name, value in fields.items():
            if not isinstance(value, str) or not value:
                raise BankError(400, "InvalidRequest", f"{name} is required")
        message = body.get("message", "")
        transaction = bank.pay(
            payer,
            payment_from=str(fields["paymentFrom"]),
            to_type=str(fields["toType"]),
            payment_to=str(fields["paymentTo"]),
            amount=_amount(body.get("amount")),
            message=message if isinstance(message, str) else "",
        )
        await faults.after("payment", request)
        return json_response(
            {
                "value": {
                    "transactionCode": transaction.code,
                    "status": transaction.status,
                    "amount": transaction.amount,
                }
            }
        )

    async def transactions(request: Request) -> Response:
        await faults.before("transaction", request)
        holder = bank.account_for_key(request.headers.get("x-api-key"))
        code = request.query_params.get("txCode")
        with bank.lock:
            found = [bank.transaction(code)] if code else list(bank.transactions.values())
            items = [
                t.record() for t in found if t is not None and holder.code in (t.from_account, t.to)
            ]
        page_size = max(1, int(request.query_params.get("pageSize", "50") or 50))
        total = len(items)
        return json_response(
            {
                "value": {
                    "items": items[:page_size],
                    "page": 1,
                    "pageSize": page_size,
                    "total": total,
                    "totalPages": max(1, -(-total // page_size)),
                }
            }
        )

    async def balance(request: Request) -> Response:
        holder = bank.account_for_key(request.headers.get("x-api-key"))
        code = request.query_params.get("accountCode") or holder.code
        if code != holder.code:
            raise BankError(403, "Forbidden", "account does not belong to this API key")
        return json_response(
            {
                "value": {
                    "accountCode": code,
                    "balance": bank.balance(code),
                    "tokenCode": "EURO",
                }
            }
        )

    async def account_list(request: Request) -> Response:
        holder = bank.account_for_key(request.headers.get("x-api-key"))
        return json_response(
            {
                "value": {
                    "items": [
                        {
                            "accountCode": holder.code,
                            "balance": bank.balance(holder.code),
                            "tokenCode": "EURO",
                        },
                    ]
                }
            }
        )

    async def bank_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, BankError)
        return json_response(exc.body(), exc.status)

    return Starlette(
        routes=[
            Route("/transaction/payment", pay, methods=["POST"]),
            Route("/transaction", transactions, methods=["GET"]),
            Route("/account/balance", balance, methods=["GET"]),
            Route("/account/list", account_list, methods=["GET"]),
        ],
        exception_handlers={BankError: bank_error},
        middleware=[Middleware(FaultMiddleware)],
    )
