"""A chain-A node (algod-like REST API) on loopback, over a `DirectChain`.

What a wallet needs to pay directly, in the node's own shapes:

- `GET /v2/transactions/params`: suggested parameters (`last-round`, `genesis-id`,
  `genesis-hash`, `min-fee`, `fee`, `consensus-version`);
- `GET /v2/status`: `last-round`;
- `GET /v2/accounts/{address}` (`?exclude=all` leaves out the holdings): `amount` (the
  chain's coin), `min-balance`, `assets`;
- `GET /v2/accounts/{address}/assets/{asset_id}`: `asset-holding`, 404 when the wallet has
  not opted into the asset;
- `POST /v2/transactions`: a signed transaction (msgpack bytes) submitted; `{"txId"}`, or
  400 with the chain's reason.

`chain.offline = True` makes every call answer 503 (a node that is down); the fault
endpoint `algod` strikes every call too. Sandbox code only: imports nothing of the client.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ._bank import BankError
from ._chain_a_direct import DirectChain, RefusedTransaction, json_answer
from ._faults import FaultMiddleware, Faults

__all__ = ["algod_app"]

#: The largest transaction body the node reads, in bytes.
_MAX_BODY = 64 * 1024


def algod_app(chain: DirectChain, faults: Faults | None = None) -> Starlette:
    """The node's REST API over `chain` (see the module docstring)."""
    faults = faults or Faults()

    async def up(request: Request) -> None:
        await faults.before("algod", request)
        if chain.offline:
            raise BankError(503, "NodeOffline", "the node is offline")

    async def params(request: Request) -> Response:
        await up(request)
        return json_answer(chain.suggested_params())

    async def status(request: Request) -> Response:
        await up(request)
        return json_answer({"last-round": chain.ledger.current_round, "catchup-time": 0})

    async def account(request: Request) -> Response:
        await up(request)
        address = request.path_params["address"]
        with_assets = request.query_params.get("exclude") != "all"
        return json_answer(chain.account(address, with_assets=with_assets))

    async def asset_holding(request: Request) -> Response:
        await up(request)
        address = request.path_params["address"]
        holding = chain.holding(address, int(request.path_params["asset_id"]))
        if holding is None:
            return json_answer({"message": "account asset info not found"}, 404)
        return json_answer({"round": chain.ledger.current_round, "asset-holding": holding})

    async def submit(request: Request) -> Response:
        await up(request)
        raw = await request.body()
        if len(raw) > _MAX_BODY:
            return json_answer({"message": "transaction too large"}, 413)
        try:
            transfer = chain.submit(raw)
        except RefusedTransaction as exc:
            return json_answer({"message": f"transaction rejected: {exc}"}, 400)
        return json_answer({"txId": transfer.txid})

    async def health(request: Request) -> Response:
        return json_answer({"round": chain.ledger.current_round})

    async def bank_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, BankError)
        return json_answer({"message": exc.message}, exc.status)

    return Starlette(
        routes=[
            Route("/v2/transactions/params", params, methods=["GET"]),
            Route("/v2/status", status, methods=["GET"]),
            Route("/v2/accounts/{address}", account, methods=["GET"]),
            Route("/v2/accounts/{address}/assets/{asset_id:int}", asset_holding, methods=["GET"]),
            Route("/v2/transactions", submit, methods=["POST"]),
            Route("/health", health, methods=["GET"]),
        ],
        exception_handlers={BankError: bank_error},
        middleware=[Middleware(FaultMiddleware)],
    )
