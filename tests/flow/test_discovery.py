"""`payments(client).discover(...)` against scripted facilitators on httpx.MockTransport:
what is asked, what is sent (nothing of the client's), how each listing is quoted, and
the same page read as the x402 foundation's own bazaar client reads it."""

from __future__ import annotations

import asyncio
import json
from decimal import Decimal
from typing import Any

import httpx
import pytest

from x402_client import (
    Budget,
    EvmOptions,
    PaymentOptions,
    X402Error,
    payments,
    with_eur_payment,
)
from x402_client._flow.discovery import MAX_BYTES, DiscoveryError

EVM_KEY = "0x" + "11" * 32
PAY_TO = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"
USDC = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"  # USDC on Base (8453)
FACILITATOR = "https://facilitator.example"


def option(amount: object, **changes: Any) -> dict[str, Any]:
    return {
        "scheme": "exact",
        "network": "eip155:8453",
        "amount": amount,
        "asset": USDC,
        "payTo": PAY_TO,
        "maxTimeoutSeconds": 60,
        "extra": {"name": "USD Coin", "version": "2"},
        **changes,
    }


ROWS = [
    {
        "resource": "https://api.example/weather",
        "type": "http",
        "x402Version": 2,
        "accepts": [option("10000")],  # 0.01 USD
        "lastUpdated": "2026-03-17T11:28:45.667Z",
        "description": "Weather",
        "mimeType": "application/json",
        "serviceName": "Example Weather",
        "tags": ["weather"],
        "extensions": {"bazaar": {"info": {"input": {"type": "http", "method": "GET"}}}},
    },
    {
        "resource": "https://api.example/expensive",
        "type": "http",
        "x402Version": 2,
        "accepts": [option("5000000")],  # 5.00 USD, above the cap
        "lastUpdated": 1703123456,
    },
    {"resource": "https://api.example/broken", "type": "http", "accepts": [option(10000)]},
]
LIST = {
    "x402Version": 2,
    "items": ROWS,
    "pagination": {"limit": 20, "offset": 0, "total": 3},
}


class Facilitator:
    """Answers discovery requests with `answer`, recording every request."""

    def __init__(self, answer: httpx.Response | None = None) -> None:
        self.answer = answer
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.answer is not None:
            return self.answer
        return httpx.Response(200, json=LIST)


def options(**overrides: Any) -> PaymentOptions:
    return PaymentOptions(evm=EvmOptions(private_key=EVM_KEY), **overrides)


async def discover(facilitator: Facilitator, *args: Any, **kwargs: Any) -> Any:
    client = httpx.AsyncClient(
        transport=httpx.MockTransport(facilitator),
        headers={"Authorization": "Bearer merchant-secret", "X-Api-Key": "k-secret"},
        cookies={"session": "cookie-secret"},
    )
    async with with_eur_payment(client, kwargs.pop("options", None) or options()) as paying:
        return await payments(paying).discover(*args, **kwargs)


@pytest.mark.anyio
async def test_each_listing_is_quoted_as_a_402_and_bad_rows_are_skipped():
    found = await discover(Facilitator(), FACILITATOR)
    weather, expensive = found.resources
    assert weather.url == "https://api.example/weather"
    [cheap] = weather.payable
    assert (cheap.amount, cheap.currency, cheap.first) == (Decimal("0.01"), "USD", True)
    assert not expensive.payable
    [refused] = expensive.quote.entries
    assert refused.reason == "over_cap" and refused.amount == Decimal("5")
    [skipped] = found.skipped
    assert (skipped.index, skipped.reason) == (
        3,
        "accepts[0].amount is not a string of atomic units",
    )
    assert found.total == 3 and found.next_offset is None
    assert (
        repr(found) == "Discovery(https://facilitator.example: 2 resources, 1 payable, 1 skipped)"
    )


@pytest.mark.anyio
async def test_the_budget_decides_as_it_decides_a_402():
    budget = Budget("0.005", currency="USD", name="usd")
    found = await discover(Facilitator(), FACILITATOR, options=options(budgets=[budget]))
    [entry] = found.resources[0].quote.entries
    assert not entry.payable and entry.reason == "over_budget"


@pytest.mark.anyio
async def test_a_list_request_carries_its_filters_and_nothing_of_the_client():
    facilitator = Facilitator()
    await discover(
        facilitator,
        FACILITATOR + "/discovery/resources",  # the endpoint itself is read as its base
        type="http",
        network="eip155:8453",
        pay_to=PAY_TO,
        limit=5,
        offset=10,
    )
    [request] = facilitator.requests
    assert str(request.url) == (
        "https://facilitator.example/discovery/resources?type=http"
        f"&payTo={PAY_TO}&network=eip155%3A8453&limit=5&offset=10"
    )
    assert request.method == "GET"
    sent = {name.lower() for name in request.headers}
    assert sent <= {"host", "accept", "accept-encoding", "connection", "user-agent"}
    assert "secret" not in str(request.headers)


@pytest.mark.anyio
async def test_a_search_sends_its_words_and_cursor_and_returns_the_next_cursor():
    answer = {"x402Version": 2, "resources": ROWS[:1], "pagination": {"limit": 1, "cursor": "c2"}}
    facilitator = Facilitator(httpx.Response(200, json=answer))
    found = await discover(facilitator, FACILITATOR, "  weather   apis ", limit=1, cursor="c1")
    [request] = facilitator.requests
    assert str(request.url) == (
        "https://facilitator.example/discovery/search?query=weather+apis&limit=1&cursor=c1"
    )
    assert found.query == "weather apis" and found.next_cursor == "c2"
    assert len(found.resources) == 1


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (httpx.Response(500, text="boom"), "the facilitator answered HTTP 500"),
        (httpx.Response(404), "the facilitator answered HTTP 404"),
        (httpx.Response(200, text="<html>"), "the answer is not JSON"),
        (httpx.Response(200, json={"data": []}), "lists no rows"),
        (httpx.Response(200, content=b"[" + b" " * MAX_BYTES + b"]"), "too large"),
    ],
)
async def test_an_unusable_answer_is_a_discovery_error_that_moved_no_money(answer, message):
    with pytest.raises(DiscoveryError, match=message) as caught:
        await discover(Facilitator(answer), FACILITATOR)
    assert isinstance(caught.value, X402Error) and caught.value.money_moved is False
    assert "nothing was paid" in str(caught.value)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (("ftp://facilitator.example",), {}, "not an http"),
        ((FACILITATOR,), {"limit": 0}, "limit must be"),
        ((FACILITATOR,), {"limit": 101}, "limit must be"),
        ((FACILITATOR, "   "), {}, "query is empty"),
        ((FACILITATOR,), {"cursor": "c"}, "give the query too"),
        ((FACILITATOR, "w"), {"offset": 3}, "continues with cursor"),
    ],
)
async def test_bad_arguments_are_refused_before_anything_is_sent(args, kwargs, message):
    facilitator = Facilitator()
    with pytest.raises(X402Error, match=message):
        await discover(facilitator, *args, **kwargs)
    assert facilitator.requests == []


def test_a_sync_client_discovers_through_its_own_transport():
    facilitator = Facilitator()
    client = httpx.Client(transport=httpx.MockTransport(facilitator), headers={"Cookie": "a=b"})
    with with_eur_payment(client, options()) as paying:
        found = payments(paying).discover(FACILITATOR, limit=3)
    assert [r.url for r in found.resources] == [
        "https://api.example/weather",
        "https://api.example/expensive",
    ]
    [request] = facilitator.requests
    assert "cookie" not in {name.lower() for name in request.headers}


def test_the_page_reads_as_the_foundation_s_bazaar_client_reads_it():
    """The same answer, read by `x402.extensions.bazaar`'s client and by ours."""
    from x402.extensions import bazaar
    from x402.http.facilitator_client import HTTPFacilitatorClientSync
    from x402.http.facilitator_client_base import FacilitatorConfig

    good = {**LIST, "items": ROWS[:2]}  # the foundation's client has no notion of a bad row
    handler = Facilitator(httpx.Response(200, json=good))
    http = httpx.Client(transport=httpx.MockTransport(handler))
    # Its client is typed for the async facilitator client but works with the sync one only.
    facilitator = HTTPFacilitatorClientSync(FacilitatorConfig(url=FACILITATOR, http_client=http))
    extended = bazaar.with_bazaar(facilitator)  # type: ignore[arg-type]
    params = bazaar.ListDiscoveryResourcesParams(limit=20, offset=0)
    theirs = extended.extensions.bazaar.list_resources(params)
    ours = asyncio.run(discover(Facilitator(httpx.Response(200, json=good)), FACILITATOR))
    assert str(handler.requests[0].url) == FACILITATOR + "/discovery/resources?limit=20&offset=0"
    assert theirs.pagination.total == ours.total
    assert len(theirs.items) == len(ours.resources)
    for their, our in zip(theirs.items, ours.resources, strict=True):
        assert their.resource == our.url
        assert their.type == our.listing.type
        assert their.x402_version == our.listing.x402_version
        assert their.description == our.description
        assert their.mime_type == our.listing.mime_type
        assert their.service_name == our.listing.service_name
        assert tuple(their.tags or ()) == our.listing.tags
        assert [json.dumps(a, sort_keys=True) for a in their.accepts or []] == [
            json.dumps(e.accept, sort_keys=True) for e in our.quote.entries
        ]
