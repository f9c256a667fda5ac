"""`payments(client)`: what a paying client knows and can finish besides its requests.

```python
pay = payments(client)                      # the client with_eur_payment returned
quote = await pay.quote(url)                # what url costs; pays nothing
found = await pay.discover(facilitator_url, "weather")  # what a facilitator lists; pays nothing
report = await pay.budgets()                # each budget: spent, remaining
for entry in pay.ledger.entries(outcome="unknown"):
    print(entry.intent.amount, entry.proof)
for recovery in await pay.recover_all():    # after a crash: finish, never pay again
    print(recovery)
```

One object per paying client, one method per thing to do: for an `httpx.AsyncClient`,
a `PaymentTransport` or a `PaymentOptions`, a `Payments` (its methods are coroutines);
for an `httpx.Client`, a `SyncPaymentTransport`, a paying `requests.Session` or a
`PaymentAdapter`, a `SyncPayments`, the same methods run to completion on the client's
own payment loop (generated from `Payments`, never written twice).

What needs requests (a quote of a URL, recovery) goes through the client itself, with its
auth, default headers and cookies; `payments(options)` can read the ledger and budgets,
list unfinished payments, quote a 402 already received, discover what a facilitator
lists and send a Permit2 approval, and says which client it needs for the rest.
Discovery sends none of the client's headers, cookies or auth: it goes to a
facilitator, over the client's network transport (`_flow.discovery`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine, Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar, overload

import httpx

from .._options import PaymentOptions
from .._protocol.errors import ConfigurationError, X402Error
from .._protocol.ledger import PaymentLedger
from .httpx_async import PaymentTransport

if TYPE_CHECKING:
    import requests

    from .._flow.discovery import Discovery
    from .._flow.payment import Payer
    from .._flow.quote import Quote, Send
    from .._flow.recovery import Content, Headers, Recovery
    from .._flow.refunds import SessionRefund, SessionWithdrawal
    from .._protocol.budgets import BudgetReport
    from .._rails.approval import Permit2Approval
    from .._state.channels import ChannelRecord
    from .._state.sqlite_store import JournalRecord
    from .httpx_blocking import SyncPaymentTransport, _Driver
    from .requests_session import PaymentAdapter

__all__ = ["Payments", "SyncPayments", "payments"]

_P = ParamSpec("_P")
_T = TypeVar("_T")

_NO_PAYMENT = "this client has no payment handling: call with_eur_payment first"

#: The per-request settings that finish a payment: one of them is set anew on a re-send.
_FINISHING = frozenset({"proof", "resume_transaction_code", "journal_id"})

# Recomputed by httpx for the re-sent request, or specific to the failed attempt.
_DROPPED_HEADERS = frozenset(
    {"x-payment", "payment-signature", "content-length", "transfer-encoding"}
)


class Payments:
    """The payments of one paying async client (or of a `PaymentOptions`): quotes, budgets,
    the ledger, the journal's unfinished payments and their recovery. Get one with
    `payments(client)`."""

    def __init__(
        self,
        payer: Payer,
        send: Send | None,
        owner: str,
        network: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._payer = payer
        self._send = send
        self._owner = owner
        #: The client's own network transport (below its payment handling), if any.
        self._network = network

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._owner})"

    @property
    def options(self) -> PaymentOptions:
        """The options the client pays with."""
        return self._payer.options

    @property
    def ledger(self) -> PaymentLedger:
        """Every payment made with these options, in this process (`PaymentLedger`)."""
        ledger: PaymentLedger = self._payer.state.ledger
        return ledger

    def _sender(self, what: str) -> Send:
        if self._send is None:
            raise ConfigurationError(
                f"{what} sends requests: call payments() with the paying client itself, not "
                f"its {self._owner}"
            )
        return self._send

    async def quote(
        self,
        /,
        target: str | httpx.URL | httpx.Response,
        method: str = "GET",
        **request_kwargs: Any,
    ) -> Quote:
        """What `target` costs and whether this client would pay it, paying nothing.

        `target` is a URL, asked with `method` and the client's own `request_kwargs`
        (`headers=`, `json=`, ...), its 402 answered by nothing; or a 402 response already
        received (read). Each entry says its amount, its rail and why it would not be paid
        (over a cap or budget, a rail not configured, ...), as the payment would decide now.
        """
        from .._flow.quote import headroom_of, quote, quote_of

        if isinstance(target, httpx.Response):
            return quote_of(target, self._payer, headroom=await headroom_of(self._payer))
        send = self._sender("quote(url)")
        return await quote(self._payer, send, method, str(target), request_kwargs)

    async def discover(
        self,
        /,
        facilitator: str,
        query: str | None = None,
        *,
        type: str | None = None,
        network: str | None = None,
        scheme: str | None = None,
        pay_to: str | None = None,
        extension: str | None = None,
        limit: int = 20,
        offset: int = 0,
        cursor: str | None = None,
    ) -> Discovery:
        """The paid resources `facilitator` lists (x402 Bazaar discovery), each with its
        price options and whether this client would pay them; nothing is paid.

        Without `query`, a page of the list (`GET {facilitator}/discovery/resources`,
        `offset` on); with it, a search (`/discovery/search`, `cursor` on). `type`
        (`http`, `mcp`), `network`, `scheme`, `pay_to` and `extension` are the
        facilitator's filters; `limit` (1 to 100) is the page's size. Each resource's
        `quote` is decided as `quote` decides a 402 (caps, budgets, rails); rows that
        cannot be read are in `skipped` with why.

        A listing is the facilitator's claim: fetching the resource pays what its own 402
        asks, never the listed price. The request is a GET with no payment header and
        none of the client's headers, cookies or auth, over the client's network
        transport (its destination guard, if any); `DiscoveryError` (an `X402Error`,
        no money moved) when the answer is an HTTP error or no catalogue page.
        """
        from .._flow.discovery import discover

        filters = {
            "type": type,
            "payTo": pay_to,
            "scheme": scheme,
            "network": network,
            "extensions": extension,
        }
        return await discover(
            self._payer,
            self._network,
            facilitator,
            query=query,
            filters=filters,
            limit=limit,
            offset=offset,
            cursor=cursor,
        )

    async def budgets(self, /) -> BudgetReport:
        """Each budget of the options: what it spent, what remains, when its window resets,
        and `.currencies`: every currency the options can pay."""
        report: BudgetReport = await self._payer.state.budgets.status()
        return report

    async def unfinished(self, /) -> list[JournalRecord]:
        """The journaled payments whose money moved or may have and whose resource was not
        delivered, oldest first (`PaymentOptions(state_path=...)`); those a live process
        is still working on are listed `in_progress`."""
        from .._flow.recovery import unfinished

        return await unfinished(self._payer)

    async def recover(
        self,
        /,
        payment: str | X402Error,
        *,
        headers: Headers | None = None,
        content: Content | None = None,
    ) -> Recovery:
        """Finish one payment without paying again: a journal id, or the error a request
        ended with (`PaymentOutcomeUnknown`, a refusal after payment).

        A journaled payment (an id, or an error that names one: `payment_id`) is finished
        as the journal says (docs/failure-semantics.md): its proof re-sent, a bridge wait
        resumed, or its budget given back when nothing moved; a payment a live process
        is working on is left alone (`in_progress`). The request goes through the client
        with `headers` (replacing journaled ones of the same name) and `content` as its
        body when the journal did not keep it.

        An error without a journal record is finished from what it carries: its request
        is re-sent with its `transaction_code` (the bridge wait resumed) or its `proof`;
        the answer comes back as a recovery with `record` None (`delivered`, or `pending`
        when the merchant answered an error status), and a payment error raises as the
        request would.
        """
        from .._flow.recovery import recover_one

        send = self._sender("recover")
        if isinstance(payment, str):
            return await recover_one(self._payer, payment, headers, send, content)
        if payment.payment_id is not None and self._payer.state.journal is not None:
            return await recover_one(self._payer, payment.payment_id, headers, send, content)
        return await _resend_behind(payment, send, headers, content)

    async def recover_all(self, /, *, headers: Headers | None = None) -> list[Recovery]:
        """Finish every unfinished journaled payment, oldest first (`recover`), then ask the
        chain again about every `upto` settlement still held at its maximum. Payments a
        live process is working on are reported `in_progress` and left alone."""
        from .._flow.recovery import recover_all

        return await recover_all(self._payer, headers, self._sender("recover_all"))

    async def approve_permit2(
        self, /, chain_id: int, asset: str, amount: Decimal | str | None = None
    ) -> Permit2Approval:
        """Send the one-time ERC-20 approval Permit2 payments need (`amount` in the asset's
        units; None: unlimited), from the options' EVM key; nothing when the allowance
        already covers it. Paying never sends it."""
        from .._rails.approval import approve_permit2

        return await approve_permit2(self._payer.options, chain_id, asset, amount)

    async def sessions(self, /, *, status: str | None = None) -> list[ChannelRecord]:
        """The sessions (`batch-settlement` channels) the options' store keeps, oldest first:
        each says its merchant's resource, what was deposited, signed, acknowledged and
        refunded (atomic units of its asset), and its `status` (`open`, `withdrawing`,
        `disputed`, `closed`). `status` lists only those."""
        from .._flow.refunds import sessions

        return await sessions(self._payer, status=status)

    async def refund_session(
        self, /, channel_id: str, amount: Decimal | str | None = None
    ) -> SessionRefund:
        """Ask the merchant of a session to refund what its vouchers did not spend (all of
        it, or `amount` in the asset's units); `channel_id` may be a unique prefix. The
        refund is read from the chain, never taken from the merchant's answer."""
        from .._flow.refunds import refund

        value = None if amount is None else Decimal(amount)
        return await refund(self._payer, self._network, channel_id, value)

    async def withdraw_session(self, /, channel_id: str) -> SessionWithdrawal:
        """Take back a session's unspent deposit without its merchant: the first call
        starts the escrow's timed withdrawal (a transaction from the EVM key, which pays the
        gas), a call after the channel's withdraw delay finishes it."""
        from .._flow.refunds import withdraw

        return await withdraw(self._payer, channel_id)


async def _resend_behind(
    error: X402Error, send: Send, headers: Headers | None, content: Content | None
) -> Recovery:
    """Re-send the request behind a journal-less `error` with what it carries."""
    from .._flow.payment import EXTENSION
    from .._flow.recovery import Recovery

    code = getattr(error, "transaction_code", None)
    proof = getattr(error, "proof", None)
    if code:
        settings: dict[str, Any] = {"resume_transaction_code": code}
        what = "the bridge payment was resumed"
    elif proof:
        settings = {"proof": proof}
        what = "the resource was delivered"
    else:
        moved = "no money moved" if error.money_moved is False else "it names no payment"
        raise ConfigurationError(
            f"nothing to recover from this {type(error).__name__}: it carries no proof and no "
            f"transaction code ({moved})"
        )
    method, url, kwargs = _request_behind(error, headers, content)
    previous = kwargs.pop("extensions", {}).get(EXTENSION) or {}
    # what finished the first attempt is replaced by what finishes this one
    kept = {k: v for k, v in previous.items() if k not in _FINISHING}
    merged = {**kept, **settings}
    response = await send(method, url, {**kwargs, "extensions": {EXTENSION: merged}})
    if response.status_code >= 400:
        # paid, not served yet: nothing new was paid; the same call finishes it later
        later = f"the merchant answered {response.status_code}; try again later"
        return Recovery(None, "pending", later, response)
    return Recovery(None, "delivered", what, response)


def _request_behind(
    error: X402Error, headers: Headers | None, content: Content | None
) -> tuple[str, str, dict[str, Any]]:
    """The request `error` ended: as it was sent (less its proof and framing headers), or,
    when the error carries none, a GET of the paid resource."""
    from .._flow.payment import EXTENSION

    try:
        original: httpx.Request | None = error.request
    except RuntimeError:  # httpx raises when an error was made without a request
        original = None
    extra = httpx.Headers(headers) if headers else httpx.Headers()
    if original is None:
        if error.intent is None:
            raise ConfigurationError(
                "the error carries neither the request nor the paid resource: recover it by "
                "sending the request again with extensions={'x402': {'proof': ...}}"
            )
        return "GET", error.intent.resource, {"headers": list(extra.multi_items())}
    replaced = {name.lower() for name in extra} | _DROPPED_HEADERS
    kept = [(k, v) for k, v in original.headers.multi_items() if k.lower() not in replaced]
    if content is None:
        try:
            content = original.content or None
        except httpx.RequestNotRead:
            content = None
    # Only the caller's x402 settings travel: the rest of the extensions belonged to the
    # request that ended (its logical request, its timeouts).
    settings = original.extensions.get(EXTENSION)
    return (
        original.method,
        str(original.url),
        {
            "headers": [*kept, *extra.multi_items()],
            "content": content,
            "extensions": {EXTENSION: settings} if isinstance(settings, Mapping) else {},
        },
    )


# --- senders: a recovery's or a quote's request, through the paying client -----------------


def _async_sender(client: httpx.AsyncClient) -> Send:
    async def send(method: str, url: str, request_kwargs: dict[str, Any]) -> httpx.Response:
        response = await client.request(method, url, **request_kwargs)
        await response.aread()
        return response

    return send


def _threaded(request: Callable[[str, str, dict[str, Any]], httpx.Response]) -> Send:
    """A `Send` that runs a sync client's `request` in a worker thread of the payment loop."""

    async def send(method: str, url: str, request_kwargs: dict[str, Any]) -> httpx.Response:
        import anyio

        return await anyio.to_thread.run_sync(request, method, url, request_kwargs)

    return send


def _client_sender(client: httpx.Client) -> Send:
    def request(method: str, url: str, request_kwargs: dict[str, Any]) -> httpx.Response:
        response = client.request(method, url, **request_kwargs)
        try:
            response.read()
        except BaseException:
            response.close()
            raise
        return response

    return _threaded(request)


def _session_sender(session: requests.Session) -> Send:
    """Through a paying `requests.Session`: the x402 extension as `payment_settings`, the
    answer as httpx hands one back (its body already decoded by requests)."""
    import requests

    from .._flow.payment import EXTENSION
    from .httpx_blocking import ADAPTER_SETTINGS
    from .requests_session import _httpx_error

    framing = ("content-encoding", "content-length", "transfer-encoding")

    def request(method: str, url: str, request_kwargs: dict[str, Any]) -> httpx.Response:
        extensions = request_kwargs.get("extensions") or {}
        given = httpx.Headers(request_kwargs.get("headers") or [])
        token = ADAPTER_SETTINGS.set(extensions.get(EXTENSION))
        try:
            with session.request(
                method,
                url,
                headers={name: given[name] for name in given},
                data=request_kwargs.get("content"),
            ) as answer:
                body = answer.content
        except requests.RequestException as exc:
            if isinstance(exc, X402Error):
                raise
            # requests' message carries the whole URL, query credentials included
            raise _httpx_error(exc, httpx.Request(method, url)) from exc
        finally:
            ADAPTER_SETTINGS.reset(token)
        return httpx.Response(
            answer.status_code,
            headers=[(k, v) for k, v in answer.headers.items() if k.lower() not in framing],
            content=body,
            request=httpx.Request(method, answer.url),
        )

    return _threaded(request)


# --- the sync form ---------------------------------------------------------------------------


def _synced(
    method: Callable[Concatenate[Payments, _P], Coroutine[Any, Any, _T]],
) -> Callable[Concatenate[SyncPayments, _P], _T]:
    """`Payments.method`, run to completion on the sync client's payment loop."""

    @functools.wraps(method)
    def run(self: SyncPayments, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        done: _T = self._run(method(self._payments, *args, **kwargs))
        return done

    return run


class SyncPayments:
    """`Payments` for a sync client (`httpx.Client`, `requests.Session`): the same methods,
    each run to completion on the client's own payment loop. Get one with
    `payments(client)`."""

    def __init__(self, payments: Payments, run: Callable[[Coroutine[Any, Any, Any]], Any]) -> None:
        self._payments = payments
        self._run = run

    def __repr__(self) -> str:
        return f"SyncPayments({self._payments._owner})"

    @property
    def options(self) -> PaymentOptions:
        """The options the client pays with."""
        return self._payments.options

    @property
    def ledger(self) -> PaymentLedger:
        """Every payment made with these options, in this process (`PaymentLedger`)."""
        return self._payments.ledger

    quote = _synced(Payments.quote)
    discover = _synced(Payments.discover)
    budgets = _synced(Payments.budgets)
    unfinished = _synced(Payments.unfinished)
    recover = _synced(Payments.recover)
    recover_all = _synced(Payments.recover_all)
    approve_permit2 = _synced(Payments.approve_permit2)
    sessions = _synced(Payments.sessions)
    refund_session = _synced(Payments.refund_session)
    withdraw_session = _synced(Payments.withdraw_session)


# --- payments(source) ------------------------------------------------------------------------


@overload
def payments(source: httpx.AsyncClient | PaymentTransport | PaymentOptions) -> Payments: ...
@overload
def payments(
    source: httpx.Client | SyncPaymentTransport | requests.Session | PaymentAdapter,
) -> SyncPayments: ...
def payments(source: Any) -> Payments | SyncPayments:
    """The payments of a paying client: `Payments` for an `httpx.AsyncClient` (or its
    `PaymentTransport`, or the `PaymentOptions` alone), `SyncPayments` for an
    `httpx.Client`, a `requests.Session` (or their transport or adapter). The client must
    be paying (`with_eur_payment`): anything else is a `ConfigurationError`."""
    if isinstance(source, PaymentOptions):
        from .._flow.payment import Payer

        return Payments(Payer(source), None, "options")
    transport = source if isinstance(source, PaymentTransport) else None
    if transport is None and isinstance(source, httpx.AsyncClient):
        found = getattr(source, "_transport", None)
        transport = found if isinstance(found, PaymentTransport) else None
    if transport is not None:
        send = _async_sender(source) if isinstance(source, httpx.AsyncClient) else None
        return Payments(transport.payer, send, type(source).__name__, transport.wrapped)
    if isinstance(source, httpx.AsyncClient):
        raise ConfigurationError(_NO_PAYMENT)
    driver, send, network = _sync_parts(source)
    return SyncPayments(Payments(driver.payer, send, type(source).__name__, network), driver.run)


def _sync_parts(
    source: Any,
) -> tuple[_Driver, Send | None, httpx.AsyncBaseTransport | None]:
    """The driver of a sync paying client, how its requests are sent, and its network
    transport as discovery uses it (a `requests.Session` has none httpx can use)."""
    from .._flow.discovery import SyncBorrowed
    from .httpx_blocking import SyncPaymentTransport, session_transport

    found = source if isinstance(source, SyncPaymentTransport) else None
    # an httpx.Client's transport, or a PaymentAdapter's
    found = found or getattr(source, "_transport", None)
    if isinstance(found, SyncPaymentTransport):
        send = _client_sender(source) if isinstance(source, httpx.Client) else None
        return found._driver, send, SyncBorrowed(found.wrapped)
    session = session_transport(source)
    if session is not None:
        return session._driver, _session_sender(source), None
    raise ConfigurationError(_NO_PAYMENT)
