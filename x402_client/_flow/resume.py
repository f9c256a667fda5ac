"""Resuming a bridge payment whose wait ended without an answer.

When the bridge's deadline passes (or the wait is cancelled), the EURO payment was made
but its `blockchainTxId` was not seen yet. `PaymentOutcomeUnknown.transaction_code` names
it. Paying again would pay twice; resuming proves that payment instead. Two ways:

```python
try:
    response = await client.get(url)
except PaymentOutcomeUnknown as exc:
    if exc.transaction_code is None:
        raise
    # 1. by hand: the same request, with the code in the x402 extension
    response = await client.get(
        url, extensions={"x402": {"resume_transaction_code": exc.transaction_code}}
    )
    # 2. or let this module rebuild the request from the error
    response = await resume_bridge_payment(client, exc)
    # (with an httpx.Client: resume_bridge_payment_sync(client, exc))
```

On the merchant's 402 the bridge rail then looks the transaction up, checks it pays
that entry (receiver, amount, paying account; else `BridgeResumeRefused`, nothing
paid), waits for `blockchainTxId` as usual and sends the proof.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from .._protocol.errors import ConfigurationError, PaymentOutcomeUnknown
from .payment import EXTENSION

__all__ = ["resume_bridge_payment"]

# Recomputed by httpx for the new request, or specific to the failed attempt.
_DROPPED_HEADERS = frozenset({"x-payment", "content-length", "transfer-encoding"})


async def resume_bridge_payment(
    client: httpx.AsyncClient,
    error: PaymentOutcomeUnknown,
    method: str = "GET",
    url: str | None = None,
    **request_kwargs: Any,
) -> httpx.Response:
    """Re-send the request behind `error` so that it proves `error.transaction_code`.

    Without `url`, the request is `error.request` as it was sent (method, URL, headers
    without `X-PAYMENT`, body); if the error carries no request, `method` and the paid
    resource (`error.intent.resource`) are used. With `url`, a new request is built from
    `method`, `url` and `request_kwargs` (`headers=`, `content=`, `json=`, ...). Either
    way `extensions["x402"]["resume_transaction_code"]` is set, keeping any other
    per-request x402 settings. `client` must be a paying client (`with_eur_payment`).
    """
    method, target, request_kwargs = resumed_request(error, method, url, request_kwargs)
    return await client.request(method, target, **request_kwargs)


def resumed_request(
    error: PaymentOutcomeUnknown,
    method: str,
    url: str | None,
    request_kwargs: dict[str, Any],
) -> tuple[str, httpx.URL | str, dict[str, Any]]:
    """What `resume_bridge_payment` sends: `(method, url, request_kwargs)` for `request`."""
    code = error.transaction_code
    if not code:
        raise ConfigurationError(
            "this PaymentOutcomeUnknown carries no transaction_code: there is no bridge "
            "payment to resume (re-send its proof instead, if it has one)"
        )
    original: httpx.Request | None
    try:
        original = error.request
    except RuntimeError:  # httpx raises when an error was made without a request
        original = None

    extensions: dict[str, Any] = dict(request_kwargs.pop("extensions", None) or {})
    settings: dict[str, Any] = {}
    if original is not None and url is None:
        previous = original.extensions.get(EXTENSION)
        if isinstance(previous, Mapping):
            settings.update(previous)
    given = extensions.get(EXTENSION)
    if isinstance(given, Mapping):
        settings.update(given)
    settings["resume_transaction_code"] = code
    extensions[EXTENSION] = settings

    if url is not None or original is None:
        if url is None:
            if error.intent is None:
                raise ConfigurationError(
                    "the error carries neither the request nor the paid resource; pass url="
                )
            url = error.intent.resource
        return method, url, {"extensions": extensions, **request_kwargs}

    headers = [
        (name, value)
        for name, value in original.headers.multi_items()
        if name.lower() not in _DROPPED_HEADERS
    ]
    try:
        content: bytes | None = original.content
    except httpx.RequestNotRead:
        content = None
    return (
        original.method,
        original.url,
        {
            "headers": headers,
            "content": content or None,
            "extensions": extensions,
            **request_kwargs,
        },
    )
