"""Client of the managed-account payment API (`{api_url}`).

It owns its own `httpx.AsyncClient`, so the API key (`X-API-KEY`) can only ever reach
`api_url`'s origin: never the merchant, never a redirect target (redirects are not
followed). The key is in plain text only while a request is being written to the wire:
the innermost transport sets the header as it hands the request on and removes it when
that returns or fails. So no request object a caller can reach (an exception's
`.request`, a response's `.request`) and no frame on an error path (what an error tracker
that captures locals records) holds it.

The money-moving call (`POST /transaction/payment`) is never retried. How its failures
are classified:

| what happened                                   | raised                   | money moved? |
|-------------------------------------------------|--------------------------|--------------|
| connection refused / connect or pool timeout    | `PaymentFailed`          | no           |
| 4xx with `errors`                               | `PaymentAPIError`        | no           |
| 4xx saying insufficient funds                   | `InsufficientFunds`      | no           |
| 3xx (a redirect we will not follow)             | `PaymentAPIError`        | no           |
| read/write timeout, dropped connection          | `PaymentOutcomeUnknown`  | maybe        |
| 5xx                                             | `PaymentOutcomeUnknown`  | maybe        |
| 2xx without the `transactionCode` we need       | `PaymentOutcomeUnknown`  | maybe        |
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import httpx
from pydantic import ValidationError

from .._protocol import exact_json as _json
from .._protocol.errors import (
    InsufficientFunds,
    PaymentAPIError,
    PaymentFailed,
    PaymentOutcomeUnknown,
)
from .._protocol.provider import (
    ProviderError,
    TransactionRecord,
    _get,
    find_transaction,
    is_insufficient_funds,
    provider_errors,
    readable_page,
    transaction_code_of,
    unwrap,
)
from .._protocol.secret import SecretStr
from .._protocol.types import PaymentIntent
from .http import BodyTooLarge, default_ssl_context, read_bounded

__all__ = ["PaymentAPI", "TransactionList"]

logger = logging.getLogger("x402_client")

_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.UnsupportedProtocol)


def _decode(raw: bytes) -> Any:
    """A body as JSON, or None when empty or not JSON (the status still tells)."""
    try:
        return _json.loads(raw) if raw else None
    except _json.JSONError:
        return None


def payment_request_body(from_account: str, payment_request_code: str, amount: Decimal) -> bytes:
    """The body of paying a payment request: what `_json.dumps` writes for `{"paymentFrom",
    "toType": "PaymentRequestCode", "paymentTo", "amount"}` (the amount a JSON number)."""
    return (
        f'{{"paymentFrom":{_json.string(from_account)},"toType":"PaymentRequestCode",'
        f'"paymentTo":{_json.string(payment_request_code)},"amount":{amount:f}}}'
    ).encode()


def _first_error(errors: list[ProviderError]) -> tuple[str | None, str | None]:
    """The provider's first error `code` and `message`, if the body carried any."""
    return (errors[0].code, errors[0].message) if errors else (None, None)


@dataclasses.dataclass(frozen=True)
class TransactionList:
    """One page of the account's transactions (`GET /transaction`), and whether it holds
    all of them: `complete` only when the answer says there is no other page."""

    items: tuple[TransactionRecord, ...]
    complete: bool


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _whole(payload: Any, listed: int) -> bool:
    """Whether a page of `listed` items says it holds every transaction: its `total` is
    no more than that, it is the only page (`totalPages` 1), or, with neither, it is short
    of the `pageSize` it names. A page that says none of these (a bare list, a page
    without counts), or gives a count that is not a whole number, may be cut short: a
    "none listed" read from it would be no definite answer (`_lookup`)."""
    if not isinstance(payload, dict):
        return False
    counts = {key: _get(payload, key) for key in ("total", "totalPages", "pageSize")}
    given = {key: value for key, value in counts.items() if value is not None}
    if not all(_is_count(value) for value in given.values()):
        return False
    if given.get("totalPages", 1) > 1:
        return False
    if "total" in given:
        return bool(given["total"] <= listed)
    if "totalPages" in given:
        return True
    return "pageSize" in given and listed < given["pageSize"]


def transaction_list(body: Any) -> TransactionList:
    """A page of `{"items": [...], "page", "pageSize", "total", "totalPages"}` (wrapped or
    not). Items that are no transaction record are skipped, and make the page incomplete;
    so does a page that does not say it is whole (`_whole`)."""
    payload = unwrap(body)
    raw = _get(payload, "items") if isinstance(payload, dict) else payload
    if not isinstance(raw, list):
        raise PaymentAPIError("the transaction list has no items")
    items = []
    for item in raw:
        try:
            items.append(TransactionRecord.model_validate(item))
        except ValidationError:
            continue
    return TransactionList(tuple(items), _whole(payload, len(raw)) and len(items) == len(raw))


class _KeyedTransport(httpx.AsyncBaseTransport):
    """Sets `X-API-KEY` on each request while the inner transport writes it, and removes
    it when that returns or fails. The key goes from this transport straight into the
    headers: no local of this frame, nor of its callers, holds it; the transport's repr
    hides it, like a `SecretStr`'s."""

    __slots__ = ("_inner", "_key")

    def __init__(self, inner: httpx.AsyncBaseTransport, api_key: SecretStr) -> None:
        self._inner = inner
        self._key = api_key.get_secret_value()

    def __repr__(self) -> str:
        return "_KeyedTransport(X-API-KEY=**********)"

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        request.headers["X-API-KEY"] = self._key
        try:
            return await self._inner.handle_async_request(request)
        except httpx.RequestError as exc:
            exc.request = request
            raise
        finally:
            # Sent (the whole request is on the wire once the response head is read) or
            # failed: either way the request keeps no key.
            request.headers.pop("X-API-KEY", None)

    async def aclose(self) -> None:
        await self._inner.aclose()


class PaymentAPI:
    """The payment API calls the client makes, read leniently (`_provider`). Its limits
    are the options' (`payment_api_timeout`, `max_body_bytes`,
    `payment_api_max_connections`)."""

    def __init__(
        self,
        api_url: str,
        api_key: SecretStr,
        *,
        timeout: float,
        max_body_bytes: int,
        max_connections: int,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.api_url = api_url
        self._max_body = max_body_bytes
        if transport is None:
            transport = httpx.AsyncHTTPTransport(
                verify=default_ssl_context(),
                # Keep every connection it opens: httpx's default keeps 20 idle ones, so a
                # burst of more concurrent payments would close and re-open connections.
                limits=httpx.Limits(
                    max_connections=max_connections, max_keepalive_connections=max_connections
                ),
            )
        self._transport = _KeyedTransport(transport, api_key)
        self._parts: tuple[httpx.URL, httpx.Headers, dict[str, Any]] | None = None
        self._client = httpx.AsyncClient(
            base_url=api_url,
            headers={"Accept": "application/json"},
            timeout=timeout,
            follow_redirects=False,
            transport=self._transport,
        )

    def __repr__(self) -> str:
        return f"PaymentAPI(api_url={self.api_url!r})"

    async def aclose(self) -> None:
        await self._client.aclose()

    # --- money-moving -----------------------------------------------------------------

    async def pay_payment_request(
        self,
        *,
        from_account: str,
        payment_request_code: str,
        amount: Decimal,
        intent: PaymentIntent | None = None,
    ) -> str | None:
        """Pay a `pr_` payment request; returns the `transactionCode` when the API gave one."""
        body = payment_request_body(from_account, payment_request_code, amount)
        answer = await self._pay(body, intent=intent, payment_request_code=payment_request_code)
        return transaction_code_of(answer)

    async def pay_blockchain_address(
        self,
        *,
        from_account: str,
        address: str,
        amount: Decimal,
        message: str = "",
        intent: PaymentIntent | None = None,
    ) -> str:
        """Send EURO through the bridge to a chain address; returns the `transactionCode`."""
        body = {
            "paymentFrom": from_account,
            "toType": "BlockchainAddress",
            "paymentTo": address,
            "amount": amount,
            "shareName": False,
            "message": message,
        }
        answer = await self._pay(_json.dumps(body), intent=intent)
        code = transaction_code_of(answer)
        if code is None:
            raise PaymentOutcomeUnknown(
                "the payment API accepted the bridge payment but returned no transactionCode",
                intent=intent,
            )
        return code

    def _payment_request(self, content: bytes) -> httpx.Request:
        """The payment call, without the key (the transport sets it while sending). Built
        from parts merged once: no per-call base-URL merge, and the headers httpx prepares
        for a body (`Host`, `Content-Length`) prepared once, only the length set per call."""
        parts = self._parts
        if parts is None:
            client = self._client
            headers = client.headers.copy()  # the client's defaults, as `send` would add
            headers["Content-Type"] = "application/json"
            base = client.base_url  # normalised with a trailing slash
            url = base.copy_with(raw_path=base.raw_path + b"transaction/payment")
            # What `httpx.Request(content=...)` writes, in its order; the length is a stand-in.
            prepared = httpx.Request("POST", url, headers=headers, content=b"{}").headers
            parts = self._parts = (url, prepared, {"timeout": client.timeout.as_dict()})
        url, prepared, extensions = parts
        headers = prepared.copy()
        headers["Content-Length"] = str(len(content))
        request = httpx.Request(
            "POST", url, headers=headers, stream=httpx.ByteStream(content), extensions=extensions
        )
        request.read()  # as `content=` does: the body stays readable for what reports it
        return request

    async def _pay(
        self,
        body: bytes,
        *,
        intent: PaymentIntent | None,
        payment_request_code: str | None = None,
    ) -> Any:
        # Straight to the transport: this client uses none of `AsyncClient.send`'s auth,
        # redirect, cookie or event-hook machinery (redirects are refused below anyway).
        wire = self._payment_request(body)

        def unknown(message: str, **extra: Any) -> PaymentOutcomeUnknown:
            return PaymentOutcomeUnknown(
                message, payment_request_code=payment_request_code, intent=intent, **extra
            )

        try:
            response = await self._transport.handle_async_request(wire)
        except httpx.TransportError as exc:
            if isinstance(exc, _NOT_SENT):
                raise PaymentFailed(
                    f"payment API unreachable ({type(exc).__name__}); nothing was paid",
                    intent=intent,
                ) from exc
            raise unknown(
                f"payment API call failed in transit ({type(exc).__name__}); "
                "the payment may have been made"
            ) from exc
        status = response.status_code
        try:
            raw = await read_bounded(response, self._max_body)
        except (httpx.TransportError, BodyTooLarge) as exc:
            if isinstance(exc, httpx.TransportError):
                exc.request = wire  # sent: the transport took the key off it
            if 300 <= status < 500:
                raise PaymentAPIError(
                    f"payment API answered {status} with an unreadable body",
                    status_code=status,
                    intent=intent,
                ) from exc
            raise unknown(
                f"payment API answered {status} but its body could not be read",
                status_code=status,
            ) from exc
        answer = _decode(raw)
        if 200 <= status < 300:
            return answer
        raise _refusal(status, answer, unknown, intent)

    # --- safe reads -------------------------------------------------------------------------

    async def _get(self, path: str, params: dict[str, str]) -> Any:
        response = await self._client.send(
            self._client.build_request("GET", path, params=params), stream=True
        )
        status = response.status_code
        try:
            raw = await read_bounded(response, self._max_body)
        except BodyTooLarge as exc:
            raise PaymentAPIError(str(exc), status_code=status) from None
        answer = _decode(raw)
        if not 200 <= status < 300:
            code, provider_message = _first_error(provider_errors(answer))
            raise PaymentAPIError(
                f"payment API answered {status} to GET {path}",
                status_code=status,
                code=code,
                provider_message=provider_message,
            )
        return answer

    async def get_transaction(self, transaction_code: str) -> TransactionRecord | None:
        """Look a transaction up by code (`GET /transaction?txCode=`); None if not listed.
        An answer it cannot read is no "not listed": `PaymentAPIError` (no status)."""
        answer = await self._get("/transaction", {"txCode": transaction_code, "pageSize": "1"})
        found = find_transaction(answer, transaction_code)
        if found is None and not readable_page(answer):
            raise PaymentAPIError(
                "the payment API answered GET /transaction with no readable transaction list"
            )
        return found

    async def list_transactions(self, page_size: int = 200) -> TransactionList:
        """The account's transactions, first page (`GET /transaction?pageSize=`)."""
        answer = await self._get("/transaction", {"pageSize": str(page_size)})
        return transaction_list(answer)

    async def balance(self, account_code: str) -> Decimal:
        """The account's balance (`GET /account/balance?accountCode=`)."""
        answer = unwrap(await self._get("/account/balance", {"accountCode": account_code}))
        if isinstance(answer, dict):
            for key in ("balance", "Balance", "amount", "available"):
                value = answer.get(key)
                if isinstance(value, (int, Decimal, str)) and not isinstance(value, bool):
                    return Decimal(value)
        raise PaymentAPIError("balance answer has no balance field")


def _refusal(
    status: int,
    answer: Any,
    unknown: Callable[..., PaymentOutcomeUnknown],
    intent: PaymentIntent | None,
) -> Exception:
    """The error for a payment call the API answered with `status` (3xx-5xx): after a 5xx
    the payment may have been made; otherwise it was refused."""
    errors = provider_errors(answer)
    code, provider_message = _first_error(errors)
    described = f"{code or 'error'}: {provider_message or 'no message'}"
    if status >= 500:
        return unknown(
            f"payment API answered {status} ({described}); the payment may have been made",
            status_code=status,
            code=code,
            provider_message=provider_message,
        )
    error_type = (
        InsufficientFunds if any(is_insufficient_funds(e) for e in errors) else PaymentAPIError
    )
    if 300 <= status < 400:
        described = "unexpected redirect"
    return error_type(
        f"payment API refused the payment ({status} {described})",
        status_code=status,
        code=code,
        provider_message=provider_message,
        intent=intent,
    )
