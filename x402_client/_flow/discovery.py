"""Discovery before payment: the paid resources a facilitator lists (the x402 Bazaar
extension's `GET /discovery/resources` and `GET /discovery/search`), each with its
price options and whether this client would pay them.

Each listing is quoted as a 402 is (`quote.quote_challenge`): the same options, caps,
budget headroom and rails decide. A listing is the facilitator's claim: nothing is paid
here, and paying a listed resource means fetching it, when the client pays what the
resource's own 402 asks (the listed price may be stale or forged).

The request is a plain GET to the facilitator: no payment header, none of the paying
client's headers, cookies or auth, sent over the client's own network transport (so its
destination guard, TLS and proxy settings apply) or, for `payments(options)`, a
transport of the options' `destination_guard`. Its answer is read up to `MAX_BYTES`.
`payments(client).discover(...)` is how users ask (`_adapters.paying_client`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import httpx

from .._protocol.discovery import (
    MAX_LIMIT,
    InvalidCatalogue,
    Listing,
    SkippedListing,
    challenge_of_listing,
    parse_page,
)
from .._protocol.errors import ConfigurationError, X402Error
from .._protocol.redact import safe_url
from .payment import Payer
from .quote import Quote, QuoteEntry, headroom_of, quote_challenge

__all__ = [
    "MAX_BYTES",
    "DiscoveredResource",
    "Discovery",
    "DiscoveryError",
    "SyncBorrowed",
    "discover",
]

#: The largest discovery answer read, in bytes (a page of 100 listings with their
#: schemas fits many times over).
MAX_BYTES = 1024 * 1024
_TIMEOUT = 30.0
_PATHS = ("/discovery/resources", "/discovery/search")


class DiscoveryError(X402Error):
    """The facilitator's discovery answer cannot be used: an HTTP error status, a body
    that is no catalogue page, or one too large. Nothing was paid (`money_moved` False)."""


@dataclasses.dataclass(frozen=True)
class DiscoveredResource:
    """One listed resource: what the facilitator claims (`listing`), and its `quote`, the
    price options as this client would decide on them now (`quote.entries`)."""

    listing: Listing
    quote: Quote

    @property
    def url(self) -> str:
        return self.listing.resource

    @property
    def description(self) -> str | None:
        return self.listing.description

    @property
    def last_updated(self) -> datetime | None:
        return self.listing.last_updated

    @property
    def payable(self) -> list[QuoteEntry]:
        """The options this client would pay, the first it would try first."""
        return sorted(self.quote.payable, key=lambda entry: not entry.first)

    def __repr__(self) -> str:
        what = f"{len(self.quote.entries)} options, {len(self.quote.payable)} payable"
        first = self.payable[0] if self.payable else None
        if first is not None and first.money is not None:
            what += f"; first: {first.money}"
        return f"DiscoveredResource({safe_url(self.url)}: {what})"

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: the listing's fields, its options as a quote writes them."""
        listing = self.listing
        when = listing.last_updated
        return {
            "resource": safe_url(listing.resource),
            "type": listing.type,
            "method": listing.method,
            "toolName": listing.tool_name,
            "x402Version": listing.x402_version,
            "description": listing.description,
            "mimeType": listing.mime_type,
            "serviceName": listing.service_name,
            "tags": list(listing.tags),
            "lastUpdated": when.isoformat().replace("+00:00", "Z") if when else None,
            "payable": bool(self.quote.payable),
            "entries": [entry.to_json() for entry in self.quote.entries],
        }


@dataclasses.dataclass(frozen=True)
class Discovery:
    """One page of a facilitator's catalogue (`query` None: the list; else a search).

    `resources` are the listings read, each quoted; `skipped` the rows that could not be
    read, with why (`index`, `reason`). The next page starts at `next_offset` (a list) or
    `next_cursor` (a search); both None: none known. `partial`: the facilitator said its
    matches were cut, or sent more rows than asked. `total` is the facilitator's count,
    a claim like the rest.
    """

    facilitator: str
    query: str | None
    resources: list[DiscoveredResource]
    skipped: list[SkippedListing]
    total: int | None = None
    next_offset: int | None = None
    next_cursor: str | None = None
    partial: bool = False

    def __repr__(self) -> str:
        payable = sum(1 for r in self.resources if r.quote.payable)
        what = f"{len(self.resources)} resources, {payable} payable"
        if self.skipped:
            what += f", {len(self.skipped)} skipped"
        searched = f" {self.query!r}" if self.query is not None else ""
        return f"Discovery({safe_url(self.facilitator)}{searched}: {what})"

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict; URLs' credentials redacted (`safe_url`)."""
        return {
            "facilitator": safe_url(self.facilitator),
            "query": self.query,
            "resources": [resource.to_json() for resource in self.resources],
            "skipped": [{"index": s.index, "reason": s.reason} for s in self.skipped],
            "total": self.total,
            "nextOffset": self.next_offset,
            "nextCursor": self.next_cursor,
            "partial": self.partial,
        }


@dataclasses.dataclass(frozen=True)
class _Ask:
    """One page asked of a catalogue."""

    query: str | None
    filters: Mapping[str, str | None]
    limit: int
    offset: int
    cursor: str | None


def _checked(
    facilitator: str, query: str | None, limit: int, offset: int, cursor: str | None
) -> tuple[httpx.URL, str | None]:
    """The facilitator's base URL and the query, or a `ConfigurationError`."""
    try:
        url = httpx.URL(facilitator)
    except (httpx.InvalidURL, TypeError) as exc:
        raise ConfigurationError(f"the facilitator URL cannot be read: {exc}") from None
    if url.scheme not in ("http", "https") or not url.host:
        raise ConfigurationError(f"the facilitator URL is not an http(s) URL: {safe_url(str(url))}")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise ConfigurationError(f"limit must be a whole number from 1 to {MAX_LIMIT}")
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ConfigurationError("offset must be a whole number >= 0")
    if query is not None and not query.strip():
        raise ConfigurationError("a search needs words: query is empty")
    if query is None and cursor is not None:
        raise ConfigurationError("cursor continues a search: give the query too")
    if query is not None and offset:
        raise ConfigurationError("a search continues with cursor, not offset")
    return url, None if query is None else " ".join(query.split())


def _endpoint(base: httpx.URL, ask: _Ask) -> httpx.URL:
    """`{base}/discovery/resources` or `/discovery/search`, with the page's parameters
    (those of the base URL kept, say a facilitator's key)."""
    path = base.path.rstrip("/")
    for known in _PATHS:
        path = path.removesuffix(known)
    path += _PATHS[0] if ask.query is None else _PATHS[1]
    params: list[tuple[str, str]] = list(base.params.multi_items())
    if ask.query is not None:
        params.append(("query", ask.query))
    params += [(name, value) for name, value in ask.filters.items() if value is not None]
    params.append(("limit", str(ask.limit)))
    if ask.query is None:
        params.append(("offset", str(ask.offset)))
    elif ask.cursor is not None:
        params.append(("cursor", ask.cursor))
    return base.copy_with(path=path, params=params, fragment=None)


class _Borrowed(httpx.AsyncBaseTransport):
    """The paying client's network transport, used without owning it (never closed)."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self._inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        pass


class SyncBorrowed(httpx.AsyncBaseTransport):
    """A sync client's network transport, each request run in a worker thread and its
    answer read there (up to `MAX_BYTES` and one byte more), never closed."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self._inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        import anyio.to_thread

        def send() -> httpx.Response:
            sync = httpx.Request(
                request.method, request.url, headers=request.headers, extensions=request.extensions
            )
            response = self._inner.handle_request(sync)
            try:
                chunks: list[bytes] = []
                size = 0
                for chunk in response.stream:  # type: ignore[union-attr]
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > MAX_BYTES:
                        break
            finally:
                response.close()
            headers = [
                (k, v) for k, v in response.headers.multi_items() if k.lower() != "content-length"
            ]
            return httpx.Response(response.status_code, headers=headers, content=b"".join(chunks))

        return await anyio.to_thread.run_sync(send)


def transport_for(
    payer: Payer, network: httpx.AsyncBaseTransport | None
) -> httpx.AsyncBaseTransport:
    """The transport a request of the payer's own goes through (never paid): the paying
    client's network transport, borrowed, else the options' destination guard or a plain one."""
    if network is not None:
        return _Borrowed(network)
    from .._state.http import default_ssl_context

    guard = payer.options.destination_guard
    if guard is not None:
        return guard.transport()
    return httpx.AsyncHTTPTransport(verify=default_ssl_context())


async def _fetch(transport: httpx.AsyncBaseTransport, url: httpx.URL) -> bytes:
    """The answer's body: a 200's, read up to `MAX_BYTES`; else `DiscoveryError`."""
    from .._state.http import BodyTooLarge, read_bounded

    shown = safe_url(str(url))
    async with httpx.AsyncClient(
        transport=transport, follow_redirects=True, max_redirects=3, timeout=_TIMEOUT
    ) as client:
        request = client.build_request("GET", url, headers={"Accept": "application/json"})
        response = await client.send(request, stream=True)
        if response.status_code != 200:
            await response.aclose()
            raise DiscoveryError(
                f"the facilitator answered HTTP {response.status_code} to {shown}; "
                "nothing was paid",
                request=request,
            )
        try:
            return await read_bounded(response, MAX_BYTES)
        except BodyTooLarge as exc:
            raise DiscoveryError(
                f"the discovery answer of {shown} is too large ({exc}); nothing was paid",
                request=request,
            ) from None


async def discover(
    payer: Payer,
    network: httpx.AsyncBaseTransport | None,
    facilitator: str,
    *,
    query: str | None = None,
    filters: Mapping[str, str | None] | None = None,
    limit: int = 20,
    offset: int = 0,
    cursor: str | None = None,
) -> Discovery:
    """One page of `facilitator`'s catalogue (a search when `query` is given), each
    listing quoted for `payer`. `network`: the transport requests go through (None: one
    of the options' `destination_guard`)."""
    base, words = _checked(facilitator, query, limit, offset, cursor)
    ask = _Ask(words, dict(filters or {}), limit, offset, cursor)
    url = _endpoint(base, ask)
    body = await _fetch(transport_for(payer, network), url)
    try:
        page = parse_page(body, limit=limit, offset=offset)
    except InvalidCatalogue as exc:
        raise DiscoveryError(f"{safe_url(str(url))}: {exc}; nothing was paid") from None
    headroom = await headroom_of(payer)
    resources = [
        DiscoveredResource(
            listing,
            quote_challenge(
                listing.resource, challenge_of_listing(listing), payer, headroom=headroom
            ),
        )
        for listing in page.listings
    ]
    return Discovery(
        facilitator=str(base),
        query=words,
        resources=resources,
        skipped=page.skipped,
        total=page.total,
        next_offset=page.next_offset,
        next_cursor=page.next_cursor,
        partial=page.partial,
    )
