"""Bodies around a payment: the paid response's guarded stream, a 402 handed back with
the part already read put in front, and the request rebuilt for the paid retry."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import anyio
import httpx

from .._protocol.errors import X402Error

__all__ = ["GuardedStream", "SentBody", "hand_back", "rebuild", "replayable_body"]

_PROOF_HEADERS = ("X-PAYMENT", "PAYMENT-SIGNATURE")


class GuardedStream(httpx.AsyncByteStream):
    """The body of a paid response: a transit failure while reading it becomes
    `PaymentOutcomeUnknown` carrying the proof, so the caller learns the payment was made
    and the resource was lost, and can re-send the proof.

    Closing it lets go of the callbacks (and the paid request, intent and receipt they
    hold): httpx's response and its stream refer to each other, so whatever hangs off the
    stream would otherwise wait for the garbage collector, and make it run more often.
    """

    def __init__(self, stream: httpx.AsyncByteStream, unknown: Callable[[str], X402Error]) -> None:
        self._stream = stream
        self._unknown: Callable[[str], X402Error] | None = unknown
        #: Told when the body breaks off: the record learns it was not delivered, and the
        #: user's `on_payment_error` hears of it.
        self.on_broken: Callable[[X402Error], Awaitable[None]] | None = None

    async def __aiter__(self) -> AsyncIterator[bytes]:
        unknown, broken = self._unknown, self.on_broken
        try:
            async for chunk in self._stream:
                yield chunk
        except httpx.TransportError as exc:
            if unknown is None:  # read after close: httpx refuses that before we get here
                raise
            error = unknown(
                f"the paid response broke off in transit ({type(exc).__name__}); the payment "
                "was made; re-sending the proof is safe"
            )
            if broken is not None:
                with anyio.CancelScope(shield=True):
                    await broken(error)
            raise error from exc

    async def aclose(self) -> None:
        self._unknown = self.on_broken = None
        await self._stream.aclose()


class _Replay(httpx.AsyncByteStream):
    """A body we read part of (`head`), then the rest of the original stream, if any."""

    def __init__(self, head: bytes, rest: AsyncIterator[bytes] | None, close: Any) -> None:
        self._head = head
        self._rest = rest
        self._close = close

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._head:
            yield self._head
        if self._rest is not None:
            async for chunk in self._rest:
                yield chunk

    async def aclose(self) -> None:
        await self._close()


class SentBody(httpx.ByteStream):
    """The body of a request the client rebuilt (the paid retry): counts how many times
    the layers below read it. Every send that reaches the wire reads the body once (httpcore
    writes it from the stream on each send, and the `requests` adapter reads it once per
    send it makes), so `reads` is how many times the request really went out, whatever a
    retrying transport or adapter below the payment did on its own. A transport that
    answers without writing the body (`httpx.MockTransport` reads the request's cached
    content instead) leaves it at 0."""

    def __init__(self, body: bytes) -> None:
        super().__init__(body)
        self._body = body
        self.reads = 0

    def __iter__(self) -> Iterator[bytes]:
        self.reads += 1
        yield self._body

    async def __aiter__(self) -> AsyncIterator[bytes]:
        self.reads += 1
        yield self._body


def replayable_body(request: httpx.Request) -> bytes | None:
    """The request body as bytes, when it can be sent again; None for a one-shot stream.

    A redirect hop carries the original request's stream unread: a `ByteStream` (bytes,
    or no body at all) can be replayed as it is.
    """
    try:
        return request.content
    except httpx.RequestNotRead:
        stream = request.stream
        if isinstance(stream, httpx.ByteStream):
            return b"".join(stream)
        return None


def rebuild(
    request: httpx.Request, body: bytes, proof: str | None = None, header: str = "X-PAYMENT"
) -> httpx.Request:
    headers = request.headers.copy()
    for name in _PROOF_HEADERS:
        headers.pop(name, None)
    if proof is not None:
        headers[header] = proof
    method = request.method
    if "Host" not in headers or (
        "Content-Length" not in headers
        and (body or (method in ("POST", "PUT", "PATCH") and "Transfer-Encoding" not in headers))
    ):
        # httpx adds a header to these: let it, as for any request made with `content=`.
        rebuilt = httpx.Request(
            method, request.url, headers=headers, content=body, extensions=dict(request.extensions)
        )
    else:
        # The headers are those httpx would write for `content=body` already: the same
        # request, without preparing them again.
        rebuilt = httpx.Request(
            method,
            request.url,
            headers=headers,
            stream=httpx.ByteStream(body),
            extensions=dict(request.extensions),
        )
        rebuilt.read()
    # Read (cached) above; from here on, each read of the stream is one send on the wire.
    rebuilt.stream = SentBody(body)
    return rebuilt


def hand_back(
    response: httpx.Response, head: bytes, rest: AsyncIterator[bytes] | None
) -> httpx.Response:
    """The 402 as the caller would have had it, with the body we read put back in front
    (decoded: `Content-Encoding` no longer applies)."""
    headers = [
        (k, v)
        for k, v in response.headers.multi_items()
        if k.lower() not in ("content-encoding", "content-length")
    ]
    if rest is None:
        # The whole body is known: readable sync and async (`read()`, `aread()`).
        return httpx.Response(
            response.status_code, headers=headers, content=head, extensions=response.extensions
        )
    return httpx.Response(
        response.status_code,
        headers=headers,
        stream=_Replay(head, rest, response.aclose),
        extensions=response.extensions,
    )
