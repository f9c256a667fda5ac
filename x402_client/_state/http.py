"""Small I/O helpers shared by the transports and the service clients."""

from __future__ import annotations

import functools
import ssl
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import httpx

from .._protocol.errors import ConfigurationError

__all__ = [
    "BodyTooLarge",
    "default_ssl_context",
    "known_small",
    "read_bounded",
    "read_upto",
    "wrap_transports",
]

_ClientT = TypeVar("_ClientT", httpx.AsyncClient, httpx.Client)


def default_ssl_context(trust_env: bool = True) -> ssl.SSLContext:
    """httpx's default SSL context (certificate checks on; with `trust_env`, the CA bundle
    `SSL_CERT_FILE` / `SSL_CERT_DIR` name), made once per process and shared by every
    connection the client opens itself: the payment API, facilitators, RPC and chain-A
    nodes, and the default transports of `PaymentTransport` and the command line.

    httpx builds a new context for each client it makes, which reads the whole CA bundle:
    about 20 ms of CPU per client. A change to those variables after the first call is
    not seen; a caller's own `httpx.AsyncClient(verify=...)` is never touched.
    """
    return _ssl_context(bool(trust_env))


@functools.cache
def _ssl_context(trust_env: bool) -> ssl.SSLContext:
    # Keyed by a value that is always given: `functools.cache` keys `f()` and `f(True)`
    # apart.
    return httpx.create_ssl_context(verify=True, trust_env=trust_env)


class BodyTooLarge(ValueError):
    """A response body larger than the caller allowed."""


def known_small(response: httpx.Response, limit: int) -> bool:
    """True when the whole body can be read at once (`aread()`) without risk: its
    `Content-Length` is declared and within `limit`, and it is not compressed (a compressed
    body's decoded size is not bounded by its length)."""
    # One pass over the raw headers (two `Headers.get` would decode and scan them twice);
    # a repeated header is not one declared length or encoding.
    declared = encoding = None
    for key, value in response.headers.raw:
        name = key.lower()
        if name == b"content-length":
            if declared is not None:
                return False
            declared = value
        elif name == b"content-encoding":
            if encoding is not None:
                return False
            encoding = value
    return (
        declared is not None
        and declared.isdigit()
        and int(declared) <= limit
        and encoding in (None, b"identity", b"")
    )


async def read_bounded(response: httpx.Response, limit: int) -> bytes:
    """Read at most `limit` bytes of a response body (decoded), then close it.

    Refuses early on a `Content-Length` above the limit, and stops reading as soon as the
    limit is passed, so a hostile server cannot make the client buffer without bound.
    """
    try:
        if known_small(response, limit):
            return await response.aread()
        declared = response.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise BodyTooLarge(f"body of {declared} bytes exceeds the {limit}-byte limit")
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > limit:
                raise BodyTooLarge(f"body exceeds the {limit}-byte limit")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        await response.aclose()


async def read_upto(
    response: httpx.Response, limit: int
) -> tuple[bytes, AsyncIterator[bytes] | None]:
    """Read a response body (decoded) up to `limit` bytes.

    Returns the bytes read and None when that was the whole body; when the body is larger,
    the bytes read so far and an iterator over the rest (the caller must close `response`).
    Nothing past the first chunk beyond `limit` is read.
    """
    chunks: list[bytes] = []
    size = 0
    iterator = response.aiter_bytes()
    async for chunk in iterator:
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            return b"".join(chunks), iterator
    return b"".join(chunks), None


def wrap_transports(client: _ClientT, wrap: Callable[[Any], Any], transport_name: str) -> _ClientT:
    """Replace `client`'s transport and each of its mounts by `wrap(it)` (sync or async).

    httpx keeps them in `_transport` / `_mounts` (private, stable since 0.23); should that
    move, the error says to build the client with the payment transport instead.
    """
    try:
        transport = client._transport
        mounts: dict[Any, Any] = client._mounts
    except AttributeError as exc:  # pragma: no cover - guards against httpx internals moving
        raise ConfigurationError(
            "this httpx version keeps its transport elsewhere; build the client with "
            f"transport={transport_name}(...) instead"
        ) from exc
    client._transport = wrap(transport)
    for pattern, mounted in list(mounts.items()):
        if mounted is not None:
            mounts[pattern] = wrap(mounted)
    return client
