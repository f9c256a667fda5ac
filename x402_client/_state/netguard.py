"""`DestinationGuard`: which hosts a client may connect to, checked after DNS resolution.

A client that fetches URLs someone else writes (an agent's tool, a merchant's facilitator
URL) must not become a way into this machine or its networks. The guard refuses every
address that is not public: loopback, private (RFC 1918), shared (100.64.0.0/10),
link-local (169.254.0.0/16 with the cloud metadata address, fe80::/10), unique-local
(fc00::/7), site-local, multicast, unspecified, reserved and documentation ranges, and
IPv6 forms that carry one of those IPv4 addresses (IPv4-mapped, 6to4, NAT64). Hosts named
in `allow` (`"HOST"` or `"HOST:PORT"`, a name or an IP literal) are admitted anyway.

```python
guard = DestinationGuard(allow=["127.0.0.1:8402"])
client = httpx.AsyncClient(transport=guard.transport(), follow_redirects=True)
```

The transport is httpx's own over a connection pool whose network backend resolves the
host itself, checks every address the name resolves to (one refused address refuses the
name), and opens the TCP connection to a checked address: DNS is asked once per
connection, so a second answer cannot move it elsewhere after the check. The URL, the
`Host` header, SNI and the certificate check keep the name, and connections are pooled
per name (one made for a name is never reused for another name on the same address).
Being a transport, it sits below httpx's redirect handling: every hop that opens a
connection is checked. A refusal raises `DestinationRefused` before anything is sent.

Requests through the guard connect directly: proxy settings (`HTTPS_PROXY`, ...) are not
used, since a proxy would resolve the name itself.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpcore
import httpx

from .._protocol.errors import DestinationRefused
from .http import default_ssl_context

if TYPE_CHECKING:
    from typing import TypeAlias

__all__ = [
    "AllowedHost",
    "DestinationGuard",
    "GuardedTransport",
    "SyncGuardedTransport",
    "forbidden_range",
    "parse_allowed_host",
    "parse_allowed_hosts",
]

if TYPE_CHECKING:
    Address: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address
#: `resolver(host, port)`: the IP addresses `host` resolves to (as text). Blocking; the
#: async transport runs it in a worker thread.
Resolver = Callable[[str, int], Iterable[str]]

_SHARED = ipaddress.ip_network("100.64.0.0/10")
_UNIQUE_LOCAL = ipaddress.ip_network("fc00::/7")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
#: httpx's default limits (100 connections, 20 kept alive, 5 s keep-alive).
_LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=20)


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one stands for: IPv4-mapped, 6to4 or NAT64 (64:ff9b::/96)."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def forbidden_range(address: Address) -> str | None:
    """Why `address` is not a public one (`"loopback"`, `"private"`, ...), or None."""
    if isinstance(address, ipaddress.IPv6Address):
        inner = _embedded_ipv4(address)
        if inner is not None:
            return forbidden_range(inner)
        if address in _UNIQUE_LOCAL:
            return "unique-local"
        if address.is_site_local:
            return "site-local"
    if address.is_unspecified:
        return "unspecified"
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local"
    if address.is_multicast:
        return "multicast"
    if isinstance(address, ipaddress.IPv4Address) and address in _SHARED:
        return "shared (carrier-grade NAT)"
    if address.is_reserved:
        return "reserved"
    if address.is_private:
        return "private"
    if not address.is_global:
        return "non-public"
    return None


def _ip(text: str) -> Address | None:
    """`text` as an IP address (brackets and an IPv6 zone allowed), else None."""
    text = text.strip().removeprefix("[").removesuffix("]")
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _plain(address: Address) -> Address:
    """An IPv4-mapped IPv6 address as the IPv4 address it is; others as they are."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _name(host: str) -> str:
    return host.strip().lower().rstrip(".")


@dataclass(frozen=True)
class AllowedHost:
    """One admitted destination: a host name or an IP address, on `port` or any port."""

    host: str
    port: int | None = None

    def __str__(self) -> str:
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return shown if self.port is None else f"{shown}:{self.port}"

    def admits(self, host: str, port: int) -> bool:
        return (self.port is None or self.port == port) and self.host == host


def parse_allowed_host(text: str) -> AllowedHost:
    """`HOST`, `HOST:PORT`, `[IPV6]` or `[IPV6]:PORT` (a bare IPv6 address has no port).
    Raises `ValueError` with a message that quotes `text`."""
    given = text.strip()
    if "/" in given or "@" in given:
        raise ValueError(f"{text!r} is not a host name or an IP address, with an optional port")
    host, port_text = given, ""
    if given.startswith("["):
        host, bracket, rest = given[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise ValueError(f"{text!r} is not HOST[:PORT]")
        port_text = rest[1:] if rest else ""
        if rest and not port_text:
            raise ValueError(f"{text!r} is not HOST[:PORT]")
    elif given.count(":") == 1:
        host, _, port_text = given.partition(":")
        if not port_text:
            raise ValueError(f"{text!r} is not HOST[:PORT]")
    port: int | None = None
    if port_text:
        if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
            raise ValueError(f"{text!r}: the port must be a number from 1 to 65535")
        port = int(port_text)
    address = _ip(host)
    if address is not None:
        return AllowedHost(str(_plain(address)), port)
    name = _name(host)
    labels = name.split(".")
    if not name or not all(
        label and len(label) <= 63 and all(c.isalnum() or c in "-_" for c in label)
        for label in labels
    ):
        raise ValueError(f"{text!r} is not a host name or an IP address")
    if not name.isascii():
        name = name.encode("idna").decode("ascii")
    return AllowedHost(name, port)


def parse_allowed_hosts(texts: Iterable[str]) -> tuple[AllowedHost, ...]:
    """Every `HOST[:PORT]` of `texts`, each of which may hold several separated by commas."""
    found: list[AllowedHost] = []
    for text in texts:
        for part in text.split(","):
            if part.strip():
                allowed = parse_allowed_host(part)
                if allowed not in found:
                    found.append(allowed)
    return tuple(found)


def _system_resolver(host: str, port: int) -> list[str]:
    answers = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in answers]


class DestinationGuard:
    """Refuses connections to addresses that are not public, unless `allow` names them.

    `allow`: `"HOST"` or `"HOST:PORT"` strings (or `AllowedHost`), a host name (admitted
    wherever it resolves) or an IP address (admitted when a name resolves to it); with a
    port, that port only. `resolver(host, port)` returns the addresses to check and connect
    to (default: the system's `getaddrinfo`).

    `refusal(ip, port, host)` is the decision alone; `transport()` and `sync_transport()`
    build httpx transports whose every connection (every redirect hop's too) goes
    through it.
    """

    def __init__(
        self, allow: Iterable[str | AllowedHost] = (), *, resolver: Resolver | None = None
    ) -> None:
        allowed: list[AllowedHost] = []
        for each in allow:
            parsed = each if isinstance(each, AllowedHost) else parse_allowed_host(each)
            if parsed not in allowed:
                allowed.append(parsed)
        self.allow: tuple[AllowedHost, ...] = tuple(allowed)
        self._resolver: Resolver = resolver if resolver is not None else _system_resolver

    def __repr__(self) -> str:
        return f"DestinationGuard(allow={tuple(str(a) for a in self.allow)!r})"

    def admits_host(self, host: str, port: int) -> bool:
        """True when `allow` names `host` (a name or an IP literal) on `port`."""
        address = _ip(host)
        key = str(_plain(address)) if address is not None else _name(host)
        return any(a.admits(key, port) for a in self.allow)

    def refusal(self, ip: str | Address, port: int, host: str | None = None) -> str | None:
        """Why a connection to `ip` on `port`, for the URL host `host`, is refused; None
        when it may go ahead (a public address, or one `allow` admits by name or IP)."""
        address = _plain(ip if not isinstance(ip, str) else _required_ip(ip))
        if host is not None and self.admits_host(host, port):
            return None
        if any(a.admits(str(address), port) for a in self.allow):
            return None
        why = forbidden_range(address)
        if why is None:
            return None
        what = f"{'an' if why[0] in 'aeiou' else 'a'} {why} address"
        if isinstance(address, ipaddress.IPv6Address):
            inner = _embedded_ipv4(address)
            if inner is not None:
                what += f" (it stands for {inner})"
        if host is None or _ip(host) is not None:
            return f"{address} is {what}"
        return f"{_name(host)} resolves to {address}, {what}"

    def _checked(self, host: str, port: int, addresses: Iterable[str]) -> list[Address]:
        """`addresses` as IPs, every one of them checked: one refusal refuses the host."""
        found: list[Address] = []
        for text in addresses:
            address = _required_ip(text)
            if address not in found:
                found.append(address)
        if not found:
            raise DestinationRefused(
                f"refused {_shown(host, port)}: it resolves to no address; nothing was sent",
                host=host,
                port=port,
            )
        for address in found:
            why = self.refusal(address, port, host)
            if why is not None:
                raise DestinationRefused(
                    f"refused {_shown(host, port)}: {why}, which this client does not reach "
                    "unless the host is admitted; nothing was sent",
                    host=host,
                    port=port,
                    address=str(address),
                    reason=why,
                )
        return found

    def resolve_sync(self, host: str, port: int) -> list[Address]:
        """The checked addresses of `host` (an IP literal is its own); raises
        `DestinationRefused` when any is refused, `OSError` when the name does not resolve."""
        literal = _ip(host)
        answers = [str(literal)] if literal is not None else list(self._resolver(host, port))
        return self._checked(host, port, answers)

    async def resolve(self, host: str, port: int, *, timeout: float | None = None) -> list[Address]:
        """`resolve_sync` in a worker thread, within `timeout` seconds (`TimeoutError`)."""
        literal = _ip(host)
        if literal is not None:
            return self._checked(host, port, [str(literal)])
        import anyio
        import anyio.to_thread

        with anyio.fail_after(timeout):
            answers = await anyio.to_thread.run_sync(
                lambda: list(self._resolver(host, port)), abandon_on_cancel=True
            )
        return self._checked(host, port, answers)

    def transport(self, **options: Any) -> GuardedTransport:
        """An `httpx.AsyncHTTPTransport` whose connections go to checked addresses only
        (`GuardedTransport`; `options` as its keyword arguments)."""
        return GuardedTransport(self, **options)

    def sync_transport(self, **options: Any) -> SyncGuardedTransport:
        """The same for an `httpx.Client` (`SyncGuardedTransport`)."""
        return SyncGuardedTransport(self, **options)


def _required_ip(text: str) -> Address:
    address = _ip(text)
    if address is None:
        raise ValueError(f"{text!r} is not an IP address")
    return address


def _shown(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _unresolved(host: str, exc: OSError) -> str:
    reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return f"cannot resolve {host}: {reason}"


class _GuardedBackend(httpcore.AsyncNetworkBackend):
    """Opens each TCP connection to a checked address of the host it is asked for."""

    def __init__(self, guard: DestinationGuard, inner: httpcore.AsyncNetworkBackend) -> None:
        self._guard = guard
        self._inner = inner

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            addresses = await self._guard.resolve(host, port, timeout=timeout)
        except TimeoutError:
            raise httpcore.ConnectTimeout(f"resolving {host} timed out") from None
        except OSError as exc:
            raise httpcore.ConnectError(_unresolved(host, exc)) from None
        failure: httpcore.ConnectError | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(
                    str(address),
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except httpcore.ConnectError as exc:
                failure = exc  # nothing was sent: the next address may answer
        assert failure is not None
        raise failure

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("a destination guard connects to TCP addresses only")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class _SyncGuardedBackend(httpcore.NetworkBackend):
    def __init__(self, guard: DestinationGuard, inner: httpcore.NetworkBackend) -> None:
        self._guard = guard
        self._inner = inner

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        try:
            addresses = self._guard.resolve_sync(host, port)
        except OSError as exc:
            raise httpcore.ConnectError(_unresolved(host, exc)) from None
        failure: httpcore.ConnectError | None = None
        for address in addresses:
            try:
                return self._inner.connect_tcp(
                    str(address),
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except httpcore.ConnectError as exc:
                failure = exc
        assert failure is not None
        raise failure

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> httpcore.NetworkStream:
        raise httpcore.ConnectError("a destination guard connects to TCP addresses only")

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def _pool_arguments(
    context: ssl.SSLContext, limits: httpx.Limits, http1: bool, http2: bool, retries: int
) -> dict[str, Any]:
    """The arguments of httpcore's pool (async or sync) that httpx would give it."""
    return {
        "ssl_context": context,
        "max_connections": limits.max_connections,
        "max_keepalive_connections": limits.max_keepalive_connections,
        "keepalive_expiry": limits.keepalive_expiry,
        "http1": http1,
        "http2": http2,
        "retries": retries,
    }


class GuardedTransport(httpx.AsyncHTTPTransport):
    """`httpx.AsyncHTTPTransport` whose every connection goes to a checked address.

    The URL, `Host`, SNI and the certificate check keep the host's name; connections are
    pooled per name, so one made for a name is never used for another name that
    resolves to the same address. A refused host raises `DestinationRefused`.
    `network_backend` opens the TCP connections (default: httpcore's `AnyIOBackend`);
    the other arguments are `httpx.AsyncHTTPTransport`'s. No proxy: it would resolve the
    name itself."""

    def __init__(
        self,
        guard: DestinationGuard,
        *,
        network_backend: httpcore.AsyncNetworkBackend | None = None,
        verify: ssl.SSLContext | str | bool = True,
        cert: Any = None,
        trust_env: bool = True,
        http1: bool = True,
        http2: bool = False,
        limits: httpx.Limits = _LIMITS,
        retries: int = 0,
    ) -> None:
        if verify is True and cert is None:
            context = default_ssl_context(trust_env)
        else:
            context = httpx.create_ssl_context(verify=verify, cert=cert, trust_env=trust_env)
        super().__init__(verify=context, http1=http1, http2=http2, limits=limits)
        self.guard = guard
        # httpx's own transport over a pool that connects through the guard.
        self._pool = httpcore.AsyncConnectionPool(
            **_pool_arguments(context, limits, http1, http2, retries),
            network_backend=_GuardedBackend(guard, network_backend or httpcore.AnyIOBackend()),
        )

    def __repr__(self) -> str:
        return f"GuardedTransport({self.guard!r})"

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            return await super().handle_async_request(request)
        except DestinationRefused as exc:
            exc.request = request
            raise


class SyncGuardedTransport(httpx.HTTPTransport):
    """`GuardedTransport` for an `httpx.Client` (resolution in the calling thread)."""

    def __init__(
        self,
        guard: DestinationGuard,
        *,
        network_backend: httpcore.NetworkBackend | None = None,
        verify: ssl.SSLContext | str | bool = True,
        cert: Any = None,
        trust_env: bool = True,
        http1: bool = True,
        http2: bool = False,
        limits: httpx.Limits = _LIMITS,
        retries: int = 0,
    ) -> None:
        context = httpx.create_ssl_context(verify=verify, cert=cert, trust_env=trust_env)
        super().__init__(verify=context, http1=http1, http2=http2, limits=limits)
        self.guard = guard
        self._pool = httpcore.ConnectionPool(
            **_pool_arguments(context, limits, http1, http2, retries),
            network_backend=_SyncGuardedBackend(guard, network_backend or httpcore.SyncBackend()),
        )

    def __repr__(self) -> str:
        return f"SyncGuardedTransport({self.guard!r})"

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        try:
            return super().handle_request(request)
        except DestinationRefused as exc:
            exc.request = request
            raise
