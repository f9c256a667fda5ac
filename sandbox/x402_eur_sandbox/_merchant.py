"""The merchant side: `MerchantGate`, an ASGI middleware that puts priced routes behind
an x402 payment gate exactly as the spec's merchant does, and the demo merchant app.

For a priced route, a request without `X-PAYMENT` gets 402 with one accept entry per
offer (the euro offer calls the facilitator's `/x402/pay` for a fresh payment request).
A request with `X-PAYMENT` is verified by the offer matching the proof's scheme and
network (the euro offer calls `/x402/verify`); an invalid proof gets 402 with the
verifier's reason in `error`; a valid one is served, with an `X-PAYMENT-RESPONSE` header.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any, Protocol

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Match, Route

from . import _wire as _json
from ._bank import BankError
from ._discovery import bazaar_extension
from ._faults import DroppedConnection, Faults
from ._server import loopback_client
from ._wire import Proof, ProofError, decode_proof, parse_amount

__all__ = [
    "DEFAULT_PRICES",
    "EuroOffer",
    "MerchantGate",
    "Offer",
    "Price",
    "Verdict",
    "merchant_app",
]


@dataclasses.dataclass(frozen=True)
class Price:
    """A route's price in euros; `rails` limits and orders the offers listed (by name).
    `discovery`, the route's `bazaar` extension (`_discovery.bazaar_extension`), makes
    its 402 declare it to the facilitator's catalogue, with `resource` metadata."""

    amount: Decimal
    description: str = ""
    mime_type: str = "application/json"
    rails: tuple[str, ...] | None = None
    discovery: Mapping[str, Any] | None = None
    service_name: str | None = None
    tags: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Verdict:
    valid: bool
    reason: str = ""
    settlement: Mapping[str, Any] | None = None


class Offer(Protocol):
    """One way the merchant accepts payment: builds its accept entry, verifies its proofs."""

    name: str

    def handles(self, proof: Proof) -> bool: ...

    async def accept_entry(
        self, price: Price, resource: str, http: httpx.AsyncClient
    ) -> dict[str, Any] | None: ...

    async def verify(
        self,
        proof: Proof,
        header: str,
        price: Price,
        resource: str,
        http: httpx.AsyncClient,
    ) -> Verdict: ...


class EuroOffer:
    """The `euro` scheme through the managed-account facilitator."""

    name = "euro"

    def __init__(self, facilitator_url: Callable[[], str], api_key: str, account_code: str) -> None:
        self._facilitator_url = facilitator_url
        self._api_key = api_key
        self.account_code = account_code

    def __repr__(self) -> str:
        return f"EuroOffer(account_code={self.account_code!r})"

    def handles(self, proof: Proof) -> bool:
        return proof.scheme == "euro"

    async def accept_entry(
        self, price: Price, resource: str, http: httpx.AsyncClient
    ) -> dict[str, Any] | None:
        response = await http.post(
            f"{self._facilitator_url()}/x402/pay",
            content=_json.dumps(
                {
                    "accountCode": self.account_code,
                    "amount": price.amount,
                    "message": price.description or resource,
                }
            ),
            headers={"X-API-KEY": self._api_key, "Content-Type": "application/json"},
        )
        response.raise_for_status()
        accepts = _json.loads(response.content).get("accepts") or []
        return accepts[0] if accepts else None

    async def verify(
        self,
        proof: Proof,
        header: str,
        price: Price,
        resource: str,
        http: httpx.AsyncClient,
    ) -> Verdict:
        response = await http.post(
            f"{self._facilitator_url()}/x402/verify",
            content=_json.dumps({"proof": header}),
            headers={"X-API-KEY": self._api_key, "Content-Type": "application/json"},
        )
        response.raise_for_status()
        result = _json.loads(response.content)
        if not isinstance(result, dict) or result.get("valid") is not True:
            reason = result.get("reason") if isinstance(result, dict) else None
            return Verdict(False, reason if isinstance(reason, str) else "Payment not valid")
        try:
            paid = parse_amount(result.get("amount"))
        except _json.AmountError:
            return Verdict(False, "Payment amount unreadable")
        if paid < price.amount:
            return Verdict(False, "Payment amount below the price")
        return Verdict(
            True,
            settlement={
                "success": True,
                "network": proof.network,
                "paymentRequestCode": result.get("paymentRequestCode"),
            },
        )


def _resource_metadata(price: Price, url: str) -> dict[str, Any]:
    """The 402's `resource`: the URL and the service metadata a catalogue lists."""
    metadata: dict[str, Any] = {"url": url, "mimeType": price.mime_type}
    if price.description:
        metadata["description"] = price.description
    if price.service_name:
        metadata["serviceName"] = price.service_name
    if price.tags:
        metadata["tags"] = list(price.tags)
    return metadata


def _b64(data: Mapping[str, Any]) -> str:
    return base64.urlsafe_b64encode(_json.dumps(dict(data))).rstrip(b"=").decode()


class MerchantGate:
    """ASGI middleware: the routes in `prices` cost money; everything else passes through.

    `offers` may be a list that grows after construction (the sandbox adds EVM and chain-A
    offers once their services are up). `faults` lets tests break the paid retry
    (endpoint `resource`: `before` the proof is checked, `after` it was consumed).
    """

    def __init__(
        self,
        app: Any,
        *,
        prices: Mapping[str, Price],
        offers: Sequence[Offer],
        faults: Faults | None = None,
    ) -> None:
        self.app = app
        self.prices = prices
        self.offers = offers
        self.faults = faults or Faults()
        self._http: httpx.AsyncClient | None = None

    @property
    def http(self) -> httpx.AsyncClient:
        if self._http is None:
            self._http = loopback_client(timeout=30.0)
        return self._http

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    def _offers_for(self, price: Price) -> list[Offer]:
        if price.rails is None:
            return list(self.offers)
        by_name = {offer.name: offer for offer in self.offers}
        return [by_name[name] for name in price.rails if name in by_name]

    def _serves(self, scope: Any) -> bool:
        """Whether the app behind the gate serves this request (path and method): what it
        would refuse (405, 404) it refuses before anything is charged."""
        routes = getattr(getattr(self.app, "router", None), "routes", None)
        if routes is None:
            return True  # not a Starlette app: every priced request is served
        return any(route.matches(scope)[0] == Match.FULL for route in routes)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        price = self.prices.get(scope.get("path", "")) if scope["type"] == "http" else None
        if price is None or not self._serves(scope):
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        resource = str(request.url.replace(query=""))
        header = request.headers.get("x-payment")
        try:
            if header is None:
                await self._challenge(price, resource, send)
                return
            await self.faults.before("resource", request)
            verdict = await self._verify(header, price, resource)
            if not verdict.valid:
                await self._respond(send, 402, {"x402Version": 2, "error": verdict.reason})
                return
            await self.faults.after("resource", request)
        except BankError as exc:
            await self._respond(send, exc.status, exc.body())
            return
        except DroppedConnection:
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-length", b"1000")],
                }
            )
            await send({"type": "http.response.body", "body": b"{", "more_body": True})
            return
        settlement = verdict.settlement or {"success": True}

        async def send_with_receipt(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers.append((b"x-payment-response", _b64(settlement).encode()))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_receipt)

    async def _challenge(self, price: Price, resource: str, send: Any) -> None:
        accepts = []
        for offer in self._offers_for(price):
            entry = await offer.accept_entry(price, resource, self.http)
            if entry is not None:
                accepts.append(entry)
        body: dict[str, Any] = {
            "x402Version": 2,
            "error": "X-PAYMENT header is required",
            "accepts": accepts,
        }
        if price.discovery is not None:
            body["resource"] = _resource_metadata(price, resource)
            body["extensions"] = {"bazaar": dict(price.discovery)}
        await self._respond(send, 402, body)

    async def challenges(self, base_url: str) -> list[dict[str, Any]]:
        """The 402 of each route that declares itself discoverable, asked over HTTP as a
        client would (each one a fresh payment request on the euro rail)."""
        found: list[dict[str, Any]] = []
        for path, price in self.prices.items():
            if price.discovery is None:
                continue
            method = price.discovery.get("info", {}).get("input", {}).get("method", "GET")
            response = await self.http.request(method, base_url + path)
            data = _json.loads(response.content) if response.status_code == 402 else None
            if isinstance(data, dict):
                found.append(data)
        return found

    async def _verify(self, header: str, price: Price, resource: str) -> Verdict:
        try:
            proof = decode_proof(header)
        except ProofError:
            return Verdict(False, "Invalid payment proof")
        # Several offers may take the same scheme (two euro receiving accounts): the first
        # valid verdict wins, else the first refusal is the answer.
        first: Verdict | None = None
        for offer in self._offers_for(price):
            if offer.handles(proof):
                verdict = await offer.verify(proof, header, price, resource, self.http)
                if verdict.valid:
                    return verdict
                first = first or verdict
        return first or Verdict(False, f"Unsupported payment: {proof.scheme} on {proof.network}")

    @staticmethod
    async def _respond(send: Any, status: int, body: Any) -> None:
        payload = _json.dumps(body)
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(payload)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": payload})


#: The demo merchant's price list (euros).
#: `/weather`, `/report`, `/premium` and `/echo` declare themselves to the facilitator's
#: discovery catalogue; `/download` does not.
DEFAULT_PRICES: dict[str, Price] = {
    "/weather": Price(
        Decimal("0.10"),
        "Today's weather in Amsterdam",
        discovery=bazaar_extension(
            "GET", output_example={"city": "Amsterdam", "forecast": "light rain"}
        ),
        service_name="Sandbox Weather",
        tags=("weather", "amsterdam"),
    ),
    "/report": Price(
        Decimal("0.50"),
        "A market report",
        discovery=bazaar_extension("GET"),
        service_name="Sandbox Markets",
        tags=("markets", "report"),
    ),
    "/premium": Price(
        Decimal("2.00"),
        "Above the default per-payment cap",
        discovery=bazaar_extension("GET"),
    ),
    "/echo": Price(
        Decimal("0.05"),
        "Echoes the request body",
        discovery=bazaar_extension("POST", body={"text": "hello"}),
    ),
    "/download": Price(Decimal("0.01"), "A large download", "application/octet-stream"),
}


async def _zeros(size: int, chunk: int = 64 * 1024) -> AsyncIterator[bytes]:
    block = b"\0" * chunk
    remaining = size
    while remaining > 0:
        piece = block[: min(chunk, remaining)]
        remaining -= len(piece)
        yield piece


def merchant_app(
    *, prices: Mapping[str, Price], offers: Sequence[Offer], faults: Faults | None = None
) -> MerchantGate:
    """The demo merchant: a few priced JSON resources, free ones, a stream and a redirect.

    Any path `/paid/<name>` serves a small JSON resource; give it a price in `prices`
    (with `Price.rails` to choose which offers its 402 lists).
    """

    async def index(request: Request) -> Response:
        return JSONResponse(
            {
                "paid": {path: format(p.amount, "f") for path, p in prices.items()},
                "free": ["/free", "/stream?size=N", "/redirect?to=URL"],
            }
        )

    async def weather(request: Request) -> Response:
        return JSONResponse({"city": "Amsterdam", "forecast": "light rain", "celsius": 11})

    async def report(request: Request) -> Response:
        return JSONResponse({"market": "EUR stablecoins", "trend": "steady"})

    async def premium(request: Request) -> Response:
        return JSONResponse({"premium": True})

    async def echo(request: Request) -> Response:
        return Response(await request.body(), media_type="application/octet-stream")

    async def paid_item(request: Request) -> Response:
        # Generic resource for any price registered under /paid/<name> (demos, tests).
        return JSONResponse({"resource": request.path_params["name"], "paid": True})

    async def free(request: Request) -> Response:
        return JSONResponse({"free": True})

    def _size(request: Request) -> int:
        return max(0, min(int(request.query_params.get("size", "1048576")), 1 << 31))

    async def stream(request: Request) -> Response:
        size = _size(request)
        return StreamingResponse(
            _zeros(size),
            media_type="application/octet-stream",
            headers={"content-length": str(size)},
        )

    async def redirect(request: Request) -> Response:
        return RedirectResponse(request.query_params.get("to", "/free"), status_code=302)

    app = Starlette(
        routes=[
            Route("/", index),
            Route("/weather", weather),
            Route("/report", report),
            Route("/premium", premium),
            Route("/echo", echo, methods=["POST", "PUT"]),
            Route("/download", stream),
            Route("/paid/{name}", paid_item),
            Route("/free", free),
            Route("/stream", stream),
            Route("/redirect", redirect),
        ]
    )
    return MerchantGate(app, prices=prices, offers=offers, faults=faults)
