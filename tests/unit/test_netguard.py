"""`DestinationGuard` without a network: the decision for every kind of address, the
allow list, and the transports with a resolver that says where a name points and an inner
transport that fails the test if a refused request reaches it.

No test here opens a connection: the transports connect through an in-memory network
backend that fails the test when asked for an address it does not know."""

from __future__ import annotations

import socket
from collections.abc import Iterable
from typing import Any

import httpcore
import httpx
import pytest

from x402_client import DestinationGuard, DestinationRefused, X402Error
from x402_client._state.netguard import (
    AllowedHost,
    forbidden_range,
    parse_allowed_host,
    parse_allowed_hosts,
)

#: Every kind of address that is not public, with the word the refusal uses for it.
NOT_PUBLIC = [
    ("127.0.0.1", "loopback"),
    ("127.0.0.2", "loopback"),
    ("127.255.255.254", "loopback"),
    ("::1", "loopback"),
    ("10.0.0.1", "private"),
    ("10.255.255.255", "private"),
    ("172.16.0.1", "private"),
    ("172.31.255.254", "private"),
    ("192.168.1.1", "private"),
    ("169.254.169.254", "link-local"),  # cloud metadata
    ("169.254.0.1", "link-local"),
    ("fe80::1", "link-local"),
    ("fe80::1%2", "link-local"),
    ("fc00::1", "unique-local"),
    ("fd00:ec2::254", "unique-local"),  # cloud metadata over IPv6
    ("fec0::1", "site-local"),
    ("224.0.0.1", "multicast"),
    ("239.255.255.250", "multicast"),
    ("ff02::1", "multicast"),
    ("0.0.0.0", "unspecified"),  # noqa: S104 (an address to refuse, not to bind)
    ("::", "unspecified"),
    ("100.64.0.1", "shared"),
    ("100.127.255.254", "shared"),
    # Special-purpose ranges (benchmarking, documentation, "this network", reserved): the
    # word for them depends on the Python version's tables; refused all the same.
    ("198.18.0.1", ""),
    ("192.0.2.1", ""),
    ("240.0.0.1", "reserved"),
    ("255.255.255.255", ""),
    ("0.1.2.3", ""),
    ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped
    ("::ffff:10.0.0.1", "private"),
    ("::ffff:169.254.169.254", "link-local"),
    ("64:ff9b::a9fe:a9fe", "link-local"),  # NAT64 of 169.254.169.254
    ("2002:a9fe:a9fe::1", "link-local"),  # 6to4 of 169.254.169.254
    ("2002:7f00:1::1", "loopback"),
    ("::7f00:1", "reserved"),  # IPv4-compatible 127.0.0.1
    ("2001:db8::1", ""),  # documentation
]

#: Public addresses (handed to the decision only: nothing connects to them).
PUBLIC = ["8.8.8.8", "1.1.1.1", "100.128.0.1", "172.32.0.1", "11.0.0.1", "2606:4700::1111"]


@pytest.mark.parametrize(("address", "kind"), NOT_PUBLIC)
def test_every_address_that_is_not_public_is_refused_and_the_reason_says_why(address, kind):
    guard = DestinationGuard()
    by_ip = guard.refusal(address, 443)
    assert by_ip is not None and kind in by_ip, by_ip
    by_name = guard.refusal(address, 443, "service.example")
    assert by_name is not None and by_name.startswith("service.example resolves to ")
    assert kind in by_name


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_pass(address):
    import ipaddress

    assert forbidden_range(ipaddress.ip_address(address)) is None
    assert DestinationGuard().refusal(address, 443, "service.example") is None


def test_an_embedded_ipv4_address_is_named_in_the_reason():
    why = DestinationGuard().refusal("64:ff9b::a9fe:a9fe", 80)
    assert why is not None and "169.254.169.254" in why


def test_allow_admits_a_name_wherever_it_points_and_only_on_its_port():
    guard = DestinationGuard(["internal.example:8443", "Build.Example"])
    assert guard.refusal("10.0.0.7", 8443, "internal.example") is None
    assert guard.refusal("10.0.0.7", 8443, "INTERNAL.example.") is None
    assert guard.refusal("10.0.0.7", 8444, "internal.example") is not None
    assert guard.refusal("10.0.0.7", 443, "other.example") is not None
    assert guard.refusal("127.0.0.1", 1, "build.example") is None  # no port: any port
    assert guard.refusal("127.0.0.1", 65535, "build.example") is None
    assert guard.refusal("127.0.0.1", 80, "sub.build.example") is not None


def test_allow_admits_an_address_by_ip_literal_or_by_a_name_that_resolves_to_it():
    guard = DestinationGuard(["127.0.0.1:8402", "[::1]", "10.1.2.3"])
    assert guard.refusal("127.0.0.1", 8402) is None
    assert guard.refusal("127.0.0.1", 8402, "sandbox.test") is None
    assert guard.refusal("::ffff:127.0.0.1", 8402) is None  # the same address, mapped
    assert guard.refusal("127.0.0.1", 8403) is not None
    assert guard.refusal("127.0.0.2", 8402) is not None
    assert guard.refusal("::1", 1) is None and guard.refusal("::1", 2, "localhost") is None
    assert guard.refusal("10.1.2.3", 22) is None
    assert guard.refusal("10.1.2.4", 22) is not None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("example.com", AllowedHost("example.com", None)),
        ("Example.COM.:8080", AllowedHost("example.com", 8080)),
        ("127.0.0.1", AllowedHost("127.0.0.1", None)),
        ("127.0.0.1:8402", AllowedHost("127.0.0.1", 8402)),
        ("[::1]:8402", AllowedHost("::1", 8402)),
        ("[::1]", AllowedHost("::1", None)),
        ("::1", AllowedHost("::1", None)),
        ("fd00::1", AllowedHost("fd00::1", None)),
        (" localhost:1 ", AllowedHost("localhost", 1)),
        ("my_host.internal", AllowedHost("my_host.internal", None)),
    ],
)
def test_allowed_hosts_are_read_from_host_and_port(text, expected):
    assert parse_allowed_host(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", ":80", "host:", "host:0", "host:65536", "host:http", "[::1", "[::1]x", "[::1]:",
     "a b", "a..b", "http://host", "host/path", "*.example.com"],
)  # fmt: skip
def test_malformed_allowed_hosts_are_refused(text):
    with pytest.raises(ValueError):
        parse_allowed_host(text)


def test_a_comma_separated_list_is_read_once_per_host():
    assert parse_allowed_hosts(["a.example, 127.0.0.1:1", "a.example,,", ""]) == (
        AllowedHost("a.example"),
        AllowedHost("127.0.0.1", 1),
    )
    guard = DestinationGuard(["a.example", AllowedHost("a.example")])
    assert guard.allow == (AllowedHost("a.example"),)
    assert repr(guard) == "DestinationGuard(allow=('a.example',))"


# --- the transports: resolve, check, pin ---------------------------------------------------------

OK = [b"HTTP/1.1 200 OK\r\n", b"Content-Length: 2\r\n", b"\r\n", b"ok"]


class Resolver:
    """Says where names point; records what it was asked."""

    def __init__(self, answers: dict[str, list[str]]) -> None:
        self.answers = answers
        self.asked: list[tuple[str, int]] = []

    def __call__(self, host: str, port: int) -> Iterable[str]:
        self.asked.append((host, port))
        if host not in self.answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return self.answers[host]


def never_resolve(host: str, port: int) -> list[str]:
    raise AssertionError(f"an IP literal was resolved: {host}")


class _Stream(httpcore.AsyncMockStream):
    def __init__(self, buffer: list[bytes], tls: list[str | None]) -> None:
        super().__init__(buffer)
        self._tls = tls

    async def start_tls(self, ssl_context: Any, server_hostname: Any = None, timeout: Any = None):
        self._tls.append(server_hostname)
        return self


class Connector(httpcore.AsyncNetworkBackend):
    """Opens in-memory connections that answer `answers[address]` (200 "ok" by default),
    or fails the test for an address it is not told of; records each connection and TLS
    name. Nothing here touches a network."""

    def __init__(self, answers: dict[str, list[bytes] | Exception]) -> None:
        self.answers = answers
        self.connects: list[tuple[str, int]] = []
        self.tls: list[str | None] = []

    async def connect_tcp(self, host: str, port: int, **_: Any) -> httpcore.AsyncNetworkStream:
        if host not in self.answers:
            raise AssertionError(f"a connection to {host}:{port} was opened")
        self.connects.append((host, port))
        answer = self.answers[host]
        if isinstance(answer, Exception):
            raise answer
        return _Stream(list(answer), self.tls)

    async def sleep(self, seconds: float) -> None:
        return None


class SyncConnector(httpcore.NetworkBackend):
    def __init__(self, answers: dict[str, list[bytes]]) -> None:
        self.answers = answers
        self.connects: list[tuple[str, int]] = []

    def connect_tcp(self, host: str, port: int, **_: Any) -> httpcore.NetworkStream:
        if host not in self.answers:
            raise AssertionError(f"a connection to {host}:{port} was opened")
        self.connects.append((host, port))
        return httpcore.MockStream(list(self.answers[host]))


def client_for(guard: DestinationGuard, connector: Connector, **kwargs: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=guard.transport(network_backend=connector), **kwargs)


@pytest.mark.anyio
@pytest.mark.parametrize(("address", "kind"), NOT_PUBLIC)
async def test_a_name_resolving_to_an_address_that_is_not_public_is_refused_unsent(address, kind):
    resolver = Resolver({"service.example": [address]})
    connector = Connector({})
    async with client_for(DestinationGuard(resolver=resolver), connector) as client:
        with pytest.raises(DestinationRefused) as caught:
            await client.get("https://service.example/data?token=q-secret-1")
    error = caught.value
    assert isinstance(error, X402Error) and error.money_moved is False
    assert (error.host, error.port) == ("service.example", 443)
    assert error.address is not None and error.reason is not None and kind in error.reason
    assert kind in str(error) and "service.example:443" in str(error)
    assert "q-secret-1" not in str(error) and "/data" not in str(error)
    assert error.request.url.host == "service.example"
    assert resolver.asked == [("service.example", 443)]
    assert connector.connects == []


@pytest.mark.anyio
@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.1/",
        "http://[fd00::1]:8080/",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::ffff:a9fe:a9fe]/",
        "https://127.0.0.1:8443/",
    ],
)
async def test_an_ip_literal_is_checked_without_resolving_it(url):
    connector = Connector({})
    async with client_for(DestinationGuard(resolver=never_resolve), connector) as client:
        with pytest.raises(DestinationRefused):
            await client.get(url)
    assert connector.connects == []


@pytest.mark.anyio
async def test_one_address_that_is_not_public_refuses_the_name():
    resolver = Resolver({"mixed.example": ["8.8.8.8", "10.0.0.1"]})
    connector = Connector({"8.8.8.8": OK})
    async with client_for(DestinationGuard(resolver=resolver), connector) as client:
        with pytest.raises(DestinationRefused, match=r"10\.0\.0\.1, a private address"):
            await client.get("http://mixed.example/")
    assert connector.connects == []


@pytest.mark.anyio
async def test_the_connection_goes_to_the_checked_address_and_tls_keeps_the_name():
    resolver = Resolver({"public.example": ["8.8.8.8"], "v6.example": ["2606:4700::1111"]})
    connector = Connector({"8.8.8.8": OK, "2606:4700::1111": OK})
    async with client_for(DestinationGuard(resolver=resolver), connector) as client:
        secure = await client.post("https://public.example/a?b=1", content=b"body")
        plain = await client.get("http://v6.example:8080/x")
    assert (secure.text, plain.text) == ("ok", "ok")
    assert connector.connects == [("8.8.8.8", 443), ("2606:4700::1111", 8080)]
    assert connector.tls == ["public.example"]  # SNI and the certificate check: the name
    assert str(secure.request.url) == "https://public.example/a?b=1"
    assert secure.request.headers["host"] == "public.example"
    assert resolver.asked == [("public.example", 443), ("v6.example", 8080)]


@pytest.mark.anyio
async def test_connections_are_kept_per_name_never_shared_by_names_on_one_address():
    resolver = Resolver({"a.example": ["8.8.8.8"], "b.example": ["8.8.8.8"]})
    connector = Connector({"8.8.8.8": OK + OK})  # each connection can answer twice
    async with client_for(DestinationGuard(resolver=resolver), connector) as client:
        for url in ("https://a.example/", "https://a.example/", "https://b.example/"):
            assert (await client.get(url)).text == "ok"
    # a.example's second request reused its connection (checked once); b.example got its
    # own, with its own name for TLS.
    assert connector.tls == ["a.example", "b.example"]
    assert resolver.asked == [("a.example", 443), ("b.example", 443)]


@pytest.mark.anyio
async def test_every_redirect_hop_is_checked():
    redirect = [
        b"HTTP/1.1 302 Found\r\n",
        b"Location: http://metadata.example/latest?k=v\r\n",
        b"Content-Length: 0\r\n",
        b"\r\n",
    ]
    resolver = Resolver({"public.example": ["8.8.8.8"], "metadata.example": ["169.254.169.254"]})
    connector = Connector({"8.8.8.8": redirect})
    guard = DestinationGuard(resolver=resolver)
    async with client_for(guard, connector, follow_redirects=True) as client:
        with pytest.raises(DestinationRefused, match=r"metadata\.example:80: .*link-local"):
            await client.get("https://public.example/start")
    assert connector.connects == [("8.8.8.8", 443)]


@pytest.mark.anyio
async def test_a_failed_connection_tries_the_next_checked_address():
    resolver = Resolver({"dual.example": ["2606:4700::1111", "8.8.8.8"]})
    connector = Connector({"2606:4700::1111": httpcore.ConnectError("unreachable"), "8.8.8.8": OK})
    async with client_for(DestinationGuard(resolver=resolver), connector) as client:
        assert (await client.get("http://dual.example/")).text == "ok"
    assert connector.connects == [("2606:4700::1111", 80), ("8.8.8.8", 80)]


@pytest.mark.anyio
async def test_a_name_that_does_not_resolve_is_a_connect_error():
    async with client_for(DestinationGuard(resolver=Resolver({})), Connector({})) as client:
        with pytest.raises(httpx.ConnectError, match=r"cannot resolve nowhere\.example"):
            await client.get("http://nowhere.example/")


@pytest.mark.anyio
async def test_an_admitted_name_is_pinned_too():
    guard = DestinationGuard(
        ["build.internal:8080"], resolver=Resolver({"build.internal": ["10.0.0.9"]})
    )
    connector = Connector({"10.0.0.9": OK})
    async with client_for(guard, connector) as client:
        assert (await client.get("http://build.internal:8080/")).text == "ok"
        with pytest.raises(DestinationRefused):
            await client.get("http://build.internal:8081/")
    assert connector.connects == [("10.0.0.9", 8080)]


def test_the_sync_transport_refuses_and_pins_the_same_way():
    resolver = Resolver({"public.example": ["8.8.8.8"], "local.example": ["127.0.0.1"]})
    connector = SyncConnector({"8.8.8.8": OK})
    transport = DestinationGuard(resolver=resolver).sync_transport(network_backend=connector)
    with httpx.Client(transport=transport) as client:
        assert client.get("https://public.example/").text == "ok"
        for url in ("http://local.example/", "http://[::1]/", "http://192.168.0.1/"):
            with pytest.raises(DestinationRefused) as caught:
                client.get(url)
            assert caught.value.request.url == httpx.URL(url)
    assert connector.connects == [("8.8.8.8", 443)]


def test_options_carry_a_guard_and_show_it():
    from x402_client import ConfigurationError, PaymentOptions

    guard = DestinationGuard(["127.0.0.1:8402"])
    options = PaymentOptions(destination_guard=guard)
    assert options.destination_guard is guard
    assert PaymentOptions().destination_guard is None
    assert "DestinationGuard(allow=('127.0.0.1:8402',))" in repr(options)
    with pytest.raises(ConfigurationError, match="destination_guard"):
        PaymentOptions(destination_guard=["127.0.0.1"])  # type: ignore[arg-type]
    copied: Any = options.model_copy(update={"max_candidates": 2})
    assert copied.destination_guard is guard
