"""Small I/O helpers shared by the transport and the service clients."""

from __future__ import annotations

import httpx

__all__ = ["BodyTooLarge", "read_bounded"]


class BodyTooLarge(ValueError):
    """A response body larger than the caller allowed."""


async def read_bounded(response: httpx.Response, limit: int) -> bytes:
    """Read at most `limit` bytes of a response body (decoded), then close it.

    Refuses early on a `Content-Length` above the limit, and stops reading as soon as the
    limit is passed, so a hostile server cannot make the client buffer without bound.
    """
    try:
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
