"""The guards in front of `x402-eur mcp --http`: the listener must be named in `Host`,
pages of other origins are refused (DNS rebinding), and a bearer token when one is set."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

__all__ = ["require_bearer", "require_own_host"]

logger = logging.getLogger("x402_client.mcp")

#: An ASGI application: `(scope, receive, send)`.
_Asgi = Callable[[Any, Any, Any], Awaitable[None]]
#: What a browser may send to the endpoint across origins, and read of its answers.
_CORS_METHODS = b"GET, POST, DELETE"
_CORS_HEADERS = (
    b"authorization, content-type, accept, mcp-session-id, mcp-protocol-version, last-event-id"
)
_CORS_EXPOSED = b"mcp-session-id, mcp-protocol-version, www-authenticate"
_MISDIRECTED = b'{"error":"misdirected request: the Host header does not name this server"}'
_FORBIDDEN = b'{"error":"forbidden: pages from this Origin may not use this server"}'


async def _refuse(
    scope: Any, send: Any, status: int, body: bytes, *extra: tuple[bytes, bytes]
) -> None:
    """Answer `status` with the JSON `body`; a WebSocket is closed (1008, policy
    violation) instead."""
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008})
        return
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": [*headers, *extra]})
    await send({"type": "http.response.body", "body": body})


def _names_of(address: str, port: int, given: str | None) -> frozenset[str]:
    """The `Host` values that name a listener reached at `address`:`port` (its own end
    of the connection): that address, the HOST given to `--http`, and `localhost` when the
    address is loopback, each with `:port` (and without it on port 80)."""
    import ipaddress

    names = {address.lower()}
    if given:
        names.add(given)
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        ip = None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        names.add(str(ip.ipv4_mapped))
        ip = ip.ipv4_mapped
    if ip is not None and ip.is_loopback:
        names.add("localhost")
    hosts = set()
    for name in names:
        bracketed = f"[{name}]" if ":" in name else name
        hosts.add(f"{bracketed}:{port}")
        if port == 80:
            hosts.add(bracketed)
    return frozenset(hosts)


def _one_header(scope: Any, name: bytes) -> tuple[bool, str | None]:
    """Whether the request sent header `name`, and its value when it sent exactly one."""
    sent = [v for k, v in scope["headers"] if k.lower() == name]
    return bool(sent), sent[0].decode("latin-1").lower() if len(sent) == 1 else None


def _given_host(host: str) -> str | None:
    """The HOST given to `--http` as a name requests may use; None for 0.0.0.0 or ::."""
    import ipaddress

    try:
        return None if ipaddress.ip_address(host).is_unspecified else host.lower()
    except ValueError:
        return host.lower()


async def _preflight(send: Any, cors: list[tuple[bytes, bytes]]) -> None:
    """Answer a CORS preflight from an admitted origin (204)."""
    cors = [
        *cors,
        (b"access-control-allow-methods", _CORS_METHODS),
        (b"access-control-allow-headers", _CORS_HEADERS),
        (b"access-control-max-age", b"600"),
    ]
    await send({"type": "http.response.start", "status": 204, "headers": cors})
    await send({"type": "http.response.body", "body": b""})


class _OwnHostGuard:
    """The ASGI application `require_own_host` returns."""

    def __init__(self, app: _Asgi, host: str, origins: Sequence[str]) -> None:
        self.app = app
        self.given = _given_host(host)
        self.origins = frozenset(origins)

    def _admits(self, origin: str | None, names: frozenset[str]) -> bool:
        return origin in self.origins or (
            origin is not None and origin.startswith("http://") and origin[7:] in names
        )

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        address, port = scope.get("server") or (None, None)
        names = frozenset() if port is None else _names_of(str(address), port, self.given)
        _, host_header = _one_header(scope, b"host")
        if host_header not in names:
            logger.warning("refused a request for Host %.100r: not this server", host_header)
            await _refuse(scope, send, 421, _MISDIRECTED)
            return
        sent, origin = _one_header(scope, b"origin")
        if sent and not self._admits(origin, names):
            logger.warning(
                "refused a request from Origin %.100r (--allow-origin admits one)", origin
            )
            await _refuse(scope, send, 403, _FORBIDDEN)
            return
        if origin is None or scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self._with_cors(scope, receive, send, origin)

    async def _with_cors(self, scope: Any, receive: Any, send: Any, origin: str) -> None:
        cors = [(b"access-control-allow-origin", origin.encode()), (b"vary", b"origin")]
        preflight, _ = _one_header(scope, b"access-control-request-method")
        if scope["method"] == "OPTIONS" and preflight:
            await _preflight(send, cors)
            return
        cors.append((b"access-control-expose-headers", _CORS_EXPOSED))

        async def send_with_cors(message: Any) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), *cors]}
            await send(message)

        await self.app(scope, receive, send_with_cors)


def require_own_host(app: _Asgi, host: str, origins: Sequence[str] = ()) -> _Asgi:
    """`app` behind a DNS-rebinding check, for a listener given `--http host:...`.

    `Host` must name the listener (`_names_of` the local address and port the request
    arrived at), else 421. An `Origin`, when sent, must be the listener's own
    (`http://` + such a `Host`) or one of `origins` (as `check_origin` writes them), else
    403. Refused requests never reach `app`; WebSockets are closed (1008); lifespan events
    pass. A CORS preflight from an admitted origin is answered here (204, without a
    token: a browser never sends one on a preflight), and answers to an admitted origin
    carry `Access-Control-Allow-Origin`."""
    return _OwnHostGuard(app, host, origins)


def require_bearer(app: _Asgi, token: str) -> _Asgi:
    """`app` behind a bearer token: an HTTP request whose `Authorization` is not
    `Bearer <token>` (the scheme in any case, RFC 7235) gets 401
    (`WWW-Authenticate: Bearer`) and never reaches `app`.

    Compared in constant time; the token appears in no answer. A WebSocket without it is
    closed (1008, policy violation); lifespan events pass."""
    import hmac

    expected = token.encode()
    body = b'{"error":"unauthorized: send Authorization: Bearer <token>"}'

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            given = [v for k, v in scope["headers"] if k.lower() == b"authorization"]
            scheme, _, credentials = (
                given[0].partition(b" ") if len(given) == 1 else (b"", b"", b"")
            )
            if not (
                scheme.lower() == b"bearer"
                and hmac.compare_digest(credentials.lstrip(b" "), expected)
            ):
                challenge = (b"www-authenticate", b'Bearer realm="x402-eur mcp"')
                await _refuse(scope, send, 401, body, challenge)
                return
        await app(scope, receive, send)

    return guarded
