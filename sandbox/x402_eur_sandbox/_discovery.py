"""The facilitator's discovery catalogue (the x402 Bazaar extension): what merchants
declare in their 402s, listed at `GET /discovery/resources` and searched at
`GET /discovery/search`.

A merchant declares a route discoverable with `extensions.bazaar` in its 402
(`bazaar_extension`: `info.input` and `info.output`, and the JSON Schema of `info`, as
the foundation's `declare_discovery_extension` writes them) and service metadata on its
`resource` (`description`, `mimeType`, `serviceName`, `tags`). `listing_of` turns such a
402 into a catalogue row as the extension's facilitator does: the URL without its query
or fragment, `type` `mcp` for a tool (`info.input.type`), else `http` with the declared
method; no declaration (or neither a method nor a tool name) gives no row. Rows are keyed
by URL and method (by URL and tool name for a tool).

The sandbox fills its catalogue from its own merchants' routes (`Catalogue.refresh`
asks each declared route for its 402), when a discovery endpoint is read and the rows
are older than `max_age` seconds; `add` seeds rows directly (any shape, for clients'
tests).

Endpoints, as the extension defines them: the list takes `type`, `payTo` (any case),
`scheme`, `network`, `extensions` (a key of the row's `extensions`), `limit` (1 to 100,
default 20) and `offset`, and answers `{x402Version, items, pagination: {limit, offset,
total}}`; the search takes `query` (required: words matched, case-insensitively, in the
URL, description, service name, tags and declared input), the same filters, `limit` and an
opaque `cursor`, and answers `{x402Version, resources, partialResults, pagination: {limit,
cursor}}` (`cursor` null on the last page). A row matches the payment filters when any of
its `accepts` does. Order: newest first, then by URL. A malformed parameter is 400
`{"error": ...}`. `last_updated="epoch"` writes `lastUpdated` as a Unix time (the core
spec's form) instead of ISO 8601 (the SDKs').
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ._http_util import json_response

__all__ = ["Catalogue", "bazaar_extension", "discovery_routes", "listing_of"]

_SCHEMA = "https://json-schema.org/draft/2020-12/schema"
_QUERY_METHODS = ("GET", "HEAD", "DELETE")
_BODY_METHODS = ("POST", "PUT", "PATCH")
_FILTERS = {"payTo": "payTo", "scheme": "scheme", "network": "network"}


def bazaar_extension(
    method: str = "GET",
    *,
    query: Mapping[str, Any] | None = None,
    body: Mapping[str, Any] | None = None,
    output_example: Any = None,
) -> dict[str, Any]:
    """The `bazaar` extension of an HTTP route's 402: `info` (input, and output when an
    example is given) and `schema`, the JSON Schema `info` satisfies."""
    method = method.upper()
    given: dict[str, Any] = {"type": "http", "method": method}
    properties: dict[str, Any] = {
        "type": {"type": "string", "const": "http"},
        "method": {"type": "string", "enum": list(_BODY_METHODS if body else _QUERY_METHODS)},
    }
    required = ["type", "method"]
    if query:
        given["queryParams"] = dict(query)
        properties["queryParams"] = {"type": "object"}
    if body is not None:
        given.update(bodyType="json", body=dict(body))
        properties["bodyType"] = {"type": "string", "enum": ["json", "form-data", "text"]}
        properties["body"] = {"type": "object"}
        required += ["bodyType", "body"]
    info: dict[str, Any] = {"input": given}
    schema_properties: dict[str, Any] = {
        "input": {
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        }
    }
    if output_example is not None:
        info["output"] = {"type": "json", "example": output_example}
        schema_properties["output"] = {
            "type": "object",
            "properties": {"type": {"type": "string"}, "example": {}},
            "required": ["type"],
        }
    schema = {
        "$schema": _SCHEMA,
        "type": "object",
        "properties": schema_properties,
        "required": ["input"],
    }
    return {"info": info, "schema": schema}


def listing_of(payment_required: Mapping[str, Any], *, now: float) -> dict[str, Any] | None:
    """The catalogue row of a 402 (`PaymentRequired`) that declares `bazaar`; else None."""
    extensions = payment_required.get("extensions")
    bazaar = extensions.get("bazaar") if isinstance(extensions, dict) else None
    info = bazaar.get("info") if isinstance(bazaar, dict) else None
    given = info.get("input") if isinstance(info, dict) else None
    resource = payment_required.get("resource")
    accepts = payment_required.get("accepts")
    if not isinstance(given, dict) or not isinstance(resource, dict) or not accepts:
        return None
    url = resource.get("url")
    tool = given.get("toolName") if given.get("type") == "mcp" else None
    method = given.get("method") if given.get("type") == "http" else None
    if not isinstance(url, str) or not (isinstance(tool, str) or isinstance(method, str)):
        return None
    parts = urlsplit(url)
    row: dict[str, Any] = {
        "resource": urlunsplit((parts.scheme, parts.netloc, parts.path, "", "")),
        "type": "mcp" if tool else "http",
        "x402Version": payment_required.get("x402Version", 2),
        "accepts": list(accepts),
        "lastUpdated": now,
        "extensions": dict(extensions) if isinstance(extensions, dict) else {},
    }
    for key in ("description", "mimeType", "serviceName", "tags", "iconUrl"):
        if resource.get(key):
            row[key] = resource[key]
    return row


def _key(row: Mapping[str, Any]) -> tuple[str, str]:
    given = row.get("extensions", {}).get("bazaar", {}).get("info", {}).get("input", {})
    return str(row.get("resource")), str(given.get("toolName") or given.get("method") or "")


class _BadParameter(ValueError):
    pass


class Catalogue:
    """The rows a facilitator lists. `refresh`, when set, is awaited before a read whose
    rows are older than `max_age` seconds (or that has none): it returns the 402 bodies
    to catalogue anew."""

    def __init__(
        self,
        refresh: Callable[[], Awaitable[Sequence[Mapping[str, Any]]]] | None = None,
        *,
        max_age: float = 60.0,
        last_updated: str = "iso",
    ) -> None:
        self._refresh = refresh
        self.max_age = max_age
        self.last_updated = last_updated
        self._rows: dict[tuple[str, str], dict[str, Any]] = {}
        self._refreshed: float | None = None

    def __len__(self) -> int:
        return len(self._rows)

    def add(self, row: Mapping[str, Any]) -> None:
        """Seed one row as it is (`lastUpdated` set to now when missing)."""
        stored = dict(row)
        stored.setdefault("lastUpdated", time.time())
        self._rows[_key(stored)] = stored

    def ingest(self, payment_required: Mapping[str, Any], *, now: float | None = None) -> bool:
        """Catalogue one 402 (`listing_of`); False when it declares nothing to list."""
        row = listing_of(payment_required, now=time.time() if now is None else now)
        if row is None:
            return False
        self._rows[_key(row)] = row
        return True

    def clear(self) -> None:
        self._rows.clear()
        self._refreshed = None

    async def fresh_rows(self) -> list[dict[str, Any]]:
        """Every row, newest first then by URL, after a refresh when one is due."""
        due = self._refreshed is None or time.monotonic() - self._refreshed > self.max_age
        if self._refresh is not None and due:
            now = time.time()  # one refresh, one time: its rows list by URL
            for payment_required in await self._refresh():
                self.ingest(payment_required, now=now)
            self._refreshed = time.monotonic()
        rows = sorted(self._rows.values(), key=lambda r: str(r.get("resource")))
        return sorted(rows, key=lambda r: -_seconds(r.get("lastUpdated")))

    def written(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """A row as the endpoints write it: `lastUpdated` in the configured form."""
        out = dict(row)
        when = row.get("lastUpdated")
        if isinstance(when, (int, float)) and not isinstance(when, bool):
            if self.last_updated == "epoch":
                out["lastUpdated"] = int(when)
            else:
                stamp = datetime.fromtimestamp(when, tz=timezone.utc).isoformat()
                out["lastUpdated"] = stamp.replace("+00:00", "Z")
        return out


def _seconds(value: Any) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return 0.0


def _matches(row: Mapping[str, Any], params: Mapping[str, str]) -> bool:
    kind = params.get("type")
    if kind is not None and row.get("type") != kind:
        return False
    wanted = params.get("extensions")
    if wanted is not None and wanted not in (row.get("extensions") or {}):
        return False
    filters = {key: params[key] for key in _FILTERS if key in params}
    if not filters:
        return True
    for entry in row.get("accepts") or []:
        if not isinstance(entry, dict):
            continue
        if all(_same(key, entry.get(key), value) for key, value in filters.items()):
            return True
    return False


def _same(key: str, actual: Any, wanted: str) -> bool:
    if not isinstance(actual, str):
        return False
    return actual.lower() == wanted.lower() if key == "payTo" else actual == wanted


def _words(row: Mapping[str, Any]) -> str:
    given = row.get("extensions", {}).get("bazaar", {}).get("info", {}).get("input", {})
    parts = [row.get("resource"), row.get("description"), row.get("serviceName")]
    parts += list(row.get("tags") or [])
    parts.append(json.dumps(given, sort_keys=True))
    return " ".join(str(p) for p in parts if p).lower()


def _number(params: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    text = params.get(name)
    if text is None:
        return default
    if not text.isdigit():
        raise _BadParameter(f"{name} must be a whole number")
    return max(low, min(high, int(text)))


def _cursor_offset(cursor: str | None) -> int:
    if cursor is None:
        return 0
    try:
        offset = json.loads(base64.urlsafe_b64decode(cursor.encode()))["offset"]
    except (binascii.Error, ValueError, KeyError, TypeError):
        raise _BadParameter("cursor is not one this facilitator gave") from None
    if not isinstance(offset, int) or offset < 0:
        raise _BadParameter("cursor is not one this facilitator gave")
    return offset


def discovery_routes(catalogue: Catalogue) -> list[Route]:
    """`/discovery/resources` and `/discovery/search` over `catalogue`."""

    async def resources(request: Request) -> Response:
        params = dict(request.query_params)
        try:
            limit = _number(params, "limit", 20, 1, 100)
            offset = _number(params, "offset", 0, 0, 10**9)
        except _BadParameter as exc:
            return json_response({"error": str(exc)}, 400)
        rows = [r for r in await catalogue.fresh_rows() if _matches(r, params)]
        page = [catalogue.written(r) for r in rows[offset : offset + limit]]
        pagination = {"limit": limit, "offset": offset, "total": len(rows)}
        return json_response({"x402Version": 2, "items": page, "pagination": pagination})

    async def search(request: Request) -> Response:
        params = dict(request.query_params)
        words = params.get("query", "").lower().split()
        if not words:
            return json_response({"error": "query is required"}, 400)
        try:
            limit = _number(params, "limit", 20, 1, 100)
            offset = _cursor_offset(params.get("cursor"))
        except _BadParameter as exc:
            return json_response({"error": str(exc)}, 400)
        rows = [
            r
            for r in await catalogue.fresh_rows()
            if _matches(r, params) and all(word in _words(r) for word in words)
        ]
        page = [catalogue.written(r) for r in rows[offset : offset + limit]]
        after = offset + len(page)
        cursor = None
        if after < len(rows):
            cursor = base64.urlsafe_b64encode(json.dumps({"offset": after}).encode()).decode()
        return json_response(
            {
                "x402Version": 2,
                "resources": page,
                "partialResults": False,
                "pagination": {"limit": limit, "cursor": cursor},
            }
        )

    return [
        Route("/discovery/resources", resources, methods=["GET"]),
        Route("/discovery/search", search, methods=["GET"]),
    ]
