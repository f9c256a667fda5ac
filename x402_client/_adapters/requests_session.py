"""Payment for `requests.Session`: the sync client's payment core behind a requests adapter.

```python
session = with_eur_payment(requests.Session(), options)
response = session.get("https://merchant.example/paid")
receipt = response.x402_payment          # a PaymentReceipt, or None when nothing was paid
```

There is no second copy of the payment rules. `with_eur_payment(session, options)` mounts a
`PaymentAdapter` over each adapter the session has (`session.adapters`); each one holds a
`SyncPaymentTransport` (the sync httpx client's transport, `_sync.py`) whose wrapped
transport is the session's own adapter seen as an httpx transport (`_AdapterTransport`).
So a 402 is paid exactly as `httpx.Client` pays it: on the same private loop, under the
same caps, budgets, hook, ledger and journal, with the same errors and receipts. What this
module adds is the translation at both edges (`docs/requests.md`):

- **Requests go out through the session's own adapter**, untouched: the first hop is the
  caller's `PreparedRequest` itself (so its `timeout=`, `verify=`, `cert=`, proxies,
  retries and pool apply), and the paid re-send is a copy of it with the proof header,
  sent with urllib3's retries off (`_sending_once`).
  A free answer comes back as the adapter's own `requests.Response`, unread.
- **Bodies.** `bytes` and `str` bodies (and so `json=`, `data=` dicts and `files=`, which
  requests encodes to bytes) can be sent twice and are paid for. A file object or an
  iterator is a one-shot stream: it goes out once as it is, and a 402 to it is refused
  with `UnreplayableRequest` before anything is paid.
- **Redirects** are followed by requests itself, hop by hop. `with_eur_payment` also owns
  `session.send` and `session.resolve_redirects`, so every hop of one logical request
  shares one `LogicalRequest`: it pays at most once across its hops. The proof header is
  added to the paid re-send only, a copy the redirect logic never sees: requests builds
  each next hop from the caller's request, so the proof never follows a redirect.
- **Errors.** Every `X402Error` reaching the caller is also a `requests.RequestException`
  (a subclass of both, made on first use), whose `request` is the caller's
  `PreparedRequest` and whose `response` (when there is one) a readable `requests.Response`.
  Errors that are not about payment (a refused connection before any 402) stay the
  requests errors they were.
- **Streaming** (`stream=True`): a free body is the adapter's own, unread. A paid body is
  read through the payment's guard (`_BodyRaw`, one trip to the payment loop per chunk),
  so a body that breaks off after the payment raises `PaymentOutcomeUnknown` from
  `iter_content()` / `.content`, in the caller's thread.
- **Timeouts** are requests' own, per hop: each send (the first, the paid re-send) gets the
  call's `timeout=`; the payment itself runs under the options' timeouts.
- **Receipts** ride on the response: `response.x402_payment` (`PaymentReceipt` or None).
- **Per-request settings** (httpx's `extensions={"x402": ...}`): `PaymentAdapter.settings(...)`,
  a context manager, since requests has no per-request extensions.
- **Adapters.** Each adapter mounted when `with_eur_payment` runs is wrapped under its own
  prefix and keeps sending; a `PaymentAdapter` already mounted is kept and given the new
  options; adapters mounted later are not wrapped (install again). A `PaymentAdapter`
  pays only inside a session prepared by `with_eur_payment` (it needs the session-wide
  view of redirects above); mounted by hand without it, it refuses to send.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import httpx

try:
    import requests
    import requests.adapters
    from requests.structures import CaseInsensitiveDict
    from requests.utils import get_encoding_from_headers
except ImportError as _missing:  # pragma: no cover - exercised in a subprocess
    raise ImportError(
        "x402_client's requests support needs the `requests` extra: "
        "pip install 'x402-eur[requests]'"
    ) from _missing

from .._flow.payment import (
    EXTENSION,
    GUARD,
    RECEIPT_EXTENSION,
    Boundary,
    LogicalRequest,
    Payer,
    parse_settings,
)
from .._options import PaymentOptions, coerce_options
from .._protocol.errors import ConfigurationError, X402Error
from .httpx_blocking import ADAPTER_SETTINGS, SyncPaymentTransport, _Driver

__all__ = [
    "RECEIPT_ATTRIBUTE",
    "PaymentAdapter",
    "install",
    "requests_error",
]

#: `response.x402_payment`: the `PaymentReceipt` of a paid response (None otherwise).
RECEIPT_ATTRIBUTE = "x402_payment"

#: Where a hop's requests side rides in the httpx request's extensions (copied to the paid
#: re-send by the core), and the adapter's answer in the httpx response's.
_HOP = "x402_requests_hop"
_ANSWER = "x402_requests_answer"
_PROOF_HEADERS = ("X-PAYMENT", "PAYMENT-SIGNATURE")
_CHUNK = 64 * 1024

_NOT_INSTALLED = (
    "this PaymentAdapter is not installed on its session: pay through "
    "with_eur_payment(session, options), which mounts payment adapters over the session's "
    "own and keeps any PaymentAdapter already mounted"
)


# --- errors: X402Error that is also a requests.RequestException --------------------------------

_FLAVOURS: dict[type[X402Error], type[X402Error]] = {}
_FLAVOURS_LOCK = threading.Lock()


def _reduce_flavoured(self: X402Error) -> tuple[Any, ...]:
    return (_unpickle_flavoured, (type(self).__mro__[1], self.args, dict(self.__dict__)))


def _unpickle_flavoured(
    cls: type[X402Error], args: tuple[Any, ...], state: dict[str, Any]
) -> X402Error:
    flavoured = _flavour(cls)
    made = flavoured.__new__(flavoured, *args)
    made.args = args
    made.__dict__.update(state)
    return made


def _flavour(cls: type[X402Error]) -> type[X402Error]:
    """`cls` and `requests.RequestException` in one class (made once per error class, so
    `type(a) is type(b)` holds for two errors of one kind)."""
    made = _FLAVOURS.get(cls)
    if made is not None:
        return made
    with _FLAVOURS_LOCK:
        made = _FLAVOURS.get(cls)
        if made is not None:
            return made

        def request(self: Any) -> requests.PreparedRequest | None:
            return self.__dict__.get("_requests_request")  # type: ignore[no-any-return]

        made = type(
            cls.__name__,
            (cls, requests.RequestException),
            {
                "__module__": cls.__module__,
                "__qualname__": cls.__qualname__,
                "__doc__": cls.__doc__,
                # What a requests user reads on a RequestException: the PreparedRequest.
                "request": property(request),
                # Pickled (a process pool, a task queue) by the error class it flavours.
                "__reduce__": _reduce_flavoured,
            },
        )
        _FLAVOURS[cls] = made
        return made


def requests_error(
    exc: BaseException, request: requests.PreparedRequest | None = None
) -> BaseException:
    """`exc`, when it is an `X402Error`, as the same error that is also a
    `requests.RequestException`: same class name, fields, message and cause; `request` the
    caller's `PreparedRequest`, `response` a `requests.Response` (body readable)."""
    if not isinstance(exc, X402Error) or isinstance(exc, requests.RequestException):
        return exc
    cls = _flavour(type(exc))
    made = cls.__new__(cls, *exc.args)
    made.args = exc.args  # OSError.__new__ leaves them to an __init__ not called here
    made.__dict__.update(exc.__dict__)
    made.__dict__["_requests_request"] = request
    answer = exc.response
    # What a requests user reads on a RequestException: a requests.Response.
    made.__dict__["response"] = (
        _requests_response(answer, request) if isinstance(answer, httpx.Response) else answer
    )
    made.__cause__ = exc.__cause__
    made.__suppress_context__ = True
    made.__traceback__ = exc.__traceback__
    return made


# --- the session's adapter seen as an httpx transport -----------------------------------------


@dataclasses.dataclass(eq=False)
class _Hop:
    """One call of `PaymentAdapter.send`: the caller's request and its send arguments."""

    prepared: requests.PreparedRequest
    kwargs: dict[str, Any]
    first: httpx.Request | None = None


class _OneShot(httpx.SyncByteStream):
    """Stands for a body the caller gave as a file or an iterator: the adapter sends the
    caller's own request once; the payment core sees a body it cannot send again."""

    def __iter__(self) -> Iterator[bytes]:
        raise httpx.StreamConsumed()


def _httpx_request(prepared: requests.PreparedRequest) -> httpx.Request:
    body = prepared.body
    headers = [
        (k, v if isinstance(v, str) else v.decode("latin-1")) for k, v in prepared.headers.items()
    ]
    if body is None:
        return httpx.Request(prepared.method or "GET", prepared.url or "", headers=headers)
    if isinstance(body, str):
        # What http.client puts on the wire for a str body.
        body = body.encode("iso-8859-1")
    if isinstance(body, (bytes, bytearray)):
        return httpx.Request(
            prepared.method or "GET", prepared.url or "", headers=headers, content=bytes(body)
        )
    return httpx.Request(
        prepared.method or "GET", prepared.url or "", headers=headers, stream=_OneShot()
    )


def _resent(hop: _Hop, request: httpx.Request) -> requests.PreparedRequest:
    """The caller's request again, carrying the proof header the core put on `request`
    (or none: a fresh re-send). The body is the caller's, which was bytes."""
    prepared = hop.prepared.copy()
    for name in _PROOF_HEADERS:
        prepared.headers.pop(name, None)
        value = request.headers.get(name)
        if value is not None:
            prepared.headers[name] = value
    return prepared


def _went_out(request: httpx.Request) -> None:
    """Count one send of the core's request on the wire: its body is read once per send
    (`_streams.SentBody`), as httpcore reads it, so the core knows how many times a paid
    request went out whatever the adapter did."""
    for _ in request.stream:  # type: ignore[union-attr]
        pass


def _sending_once(
    adapter: requests.adapters.BaseAdapter, request: httpx.Request
) -> requests.adapters.BaseAdapter:
    """The adapter for a send that carries a proof. An `HTTPAdapter`'s retries would send
    the proof again after the merchant consumed it (and answered 500, or dropped the
    connection), and an "already used" to the re-send would look like a licence to pay
    again: this send goes through a view of the same adapter (its pool, TLS and proxy
    settings) with urllib3's retries off, and counts each connection it asks for as one
    send. The core retries the same proof itself where that is safe. Other adapters are
    used as they are; what they re-send is counted where urllib3 says it retried."""
    if not isinstance(adapter, requests.adapters.HTTPAdapter):
        return adapter
    from urllib3.util.retry import Retry

    view = object.__new__(type(adapter))
    view.__dict__.update(adapter.__dict__)
    view.max_retries = Retry(0, read=False)  # requests' own "no retries"
    for name in ("get_connection_with_tls_context", "get_connection"):
        connection = getattr(adapter, name, None)
        if connection is not None:
            setattr(view, name, _counting(connection, request))
    return view


def _counting(connection: Any, request: httpx.Request) -> Any:
    def counted(*args: Any, **kwargs: Any) -> Any:
        _went_out(request)
        return connection(*args, **kwargs)

    return counted


def _never_connected(exc: requests.RequestException) -> bool:
    """Whether requests failed before a connection existed (so nothing was sent)."""
    import urllib3.exceptions as u3

    seen: BaseException | None = exc
    for _ in range(4):
        if seen is None:
            return False
        if isinstance(seen, u3.ConnectTimeoutError):  # NewConnectionError included
            return True
        if isinstance(seen, u3.MaxRetryError):
            seen = seen.reason
            continue
        seen = seen.args[0] if seen.args and isinstance(seen.args[0], BaseException) else None
    return False


def _httpx_error(exc: requests.RequestException, request: httpx.Request) -> httpx.TransportError:
    """A requests failure as the httpx error the core reasons about (sent or not)."""
    kind: type[httpx.TransportError]
    if isinstance(exc, requests.ConnectTimeout):
        kind = httpx.ConnectTimeout
    elif isinstance(exc, requests.ReadTimeout):
        kind = httpx.ReadTimeout
    elif isinstance(exc, requests.ConnectionError) and _never_connected(exc):
        kind = httpx.ConnectError
    else:
        kind = httpx.ReadError  # may have been sent
    # The name only: requests' messages carry the full URL (query tokens included).
    error = kind(f"{type(exc).__name__} from requests", request=request)
    error.__cause__ = exc
    error.__dict__["_x402_requests"] = True
    return error


class _RawStream(httpx.SyncByteStream):
    """A requests answer's body, undecoded, as httpx reads it (from the adapter's own
    `raw`, kept here: the answer's `raw` may later be the payment's view of this body)."""

    def __init__(self, answer: requests.Response, request: httpx.Request) -> None:
        self.answer = answer
        self._raw = answer.raw
        self._request = request

    def __iter__(self) -> Iterator[bytes]:
        raw = self._raw
        try:
            if hasattr(raw, "stream"):
                yield from raw.stream(_CHUNK, decode_content=False)
            elif raw is not None:
                yield from iter(lambda: raw.read(_CHUNK), b"")
            elif self.answer._content:  # an adapter that filled the content itself
                yield self.answer._content
        except httpx.HTTPError:
            raise
        except Exception as exc:
            error = httpx.ReadError(f"{type(exc).__name__} from requests", request=self._request)
            raise error from exc

    def close(self) -> None:
        _close_raw(self._raw)


def _close_raw(raw: Any) -> None:
    """Close a urllib3 response and give its connection back to the pool."""
    if raw is None:
        return
    raw.close()
    release = getattr(raw, "release_conn", None)
    if release is not None:
        release()


class _AdapterTransport(httpx.BaseTransport):
    """The session's adapter as the httpx transport `SyncPaymentTransport` wraps."""

    def __init__(self, adapter: requests.adapters.BaseAdapter) -> None:
        self.adapter = adapter

    def __repr__(self) -> str:
        return f"_AdapterTransport({type(self.adapter).__name__})"

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        hop: _Hop = request.extensions[_HOP]
        if request is hop.first:
            prepared, adapter = hop.prepared, self.adapter
        else:
            prepared, adapter = _resent(hop, request), _sending_once(self.adapter, request)
        try:
            answer = adapter.send(prepared, **hop.kwargs)
        except requests.RequestException as exc:
            raise _httpx_error(exc, request) from exc
        if request is not hop.first:
            # Retries urllib3 made inside an adapter the client could not turn them off in.
            for _ in getattr(getattr(answer.raw, "retries", None), "history", None) or ():
                _went_out(request)
        return httpx.Response(
            answer.status_code,
            headers=list(answer.headers.items()),
            stream=_RawStream(answer, request),
            extensions={_ANSWER: answer},
            request=request,
        )

    def close(self) -> None:
        self.adapter.close()


# --- httpx answers back as requests answers ------------------------------------------------------


class _BodyRaw:
    """`response.raw` of an answer whose body the payment core holds (a paid body, read
    through its guard; a 402 it read): decoded bytes, read in the caller's thread.
    Anything else (`_original_response` for cookies, `version`, ...) is the adapter's own."""

    def __init__(
        self, answer: httpx.Response, original: Any, request: requests.PreparedRequest | None
    ) -> None:
        self._answer = answer
        self._original = original
        self._request = request
        self._chunks: Iterator[bytes] | None = None
        self._buffer = b""
        self._done = False

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or self.__dict__.get("_original") is None:
            raise AttributeError(name)
        return getattr(self._original, name)

    def _next(self) -> bytes | None:
        if self._chunks is None:
            self._chunks = self._answer.iter_bytes()
        try:
            return next(self._chunks, None)
        except X402Error as exc:
            self._close_broken()
            raise requests_error(exc, self._request) from exc.__cause__
        except (httpx.HTTPError, httpx.StreamError) as exc:
            # E.g. a paid body read after its session closed (its payment loop is gone).
            self._close_broken()
            raise requests.ConnectionError(
                f"the paid body cannot be read: {type(exc).__name__}"
            ) from exc

    def _close_broken(self) -> None:
        """A body that broke off gives its connection back at once, closed, rather than
        when the caller's response is collected; the error being raised is what counts."""
        with contextlib.suppress(Exception):
            self.close()

    def _close_original(self) -> None:
        # The adapter's own answer, closed here too: once the session is closed, the
        # payment loop that would have closed it through the paid body is gone.
        _close_raw(self._original)

    def stream(self, amt: int | None = None, decode_content: bool | None = None) -> Iterator[bytes]:
        if self._buffer:
            head, self._buffer = self._buffer, b""
            yield head
        while not self._done:
            chunk = self._next()
            if chunk is None:
                self._done = True
                return
            if chunk:
                yield chunk

    def read(self, amt: int | None = None, decode_content: bool | None = None, **_: Any) -> bytes:
        while not self._done and (amt is None or len(self._buffer) < amt):
            chunk = self._next()
            if chunk is None:
                self._done = True
            else:
                self._buffer += chunk
        if amt is None:
            out, self._buffer = self._buffer, b""
        else:
            out, self._buffer = self._buffer[:amt], self._buffer[amt:]
        return out

    def close(self) -> None:
        try:
            self._answer.close()
        finally:
            self._close_original()

    def release_conn(self) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._answer.is_closed


def _requests_response(
    answer: httpx.Response, prepared: requests.PreparedRequest | None
) -> requests.Response:
    """The requests answer for an httpx answer of the payment core."""
    own: requests.Response | None = answer.extensions.get(_ANSWER)
    stream = answer.stream
    if own is not None and isinstance(stream, _RawStream) and stream.answer is own:
        made = own  # handed back untouched and unread
    elif own is not None:
        own.raw = _BodyRaw(answer, own.raw, prepared)
        made = own
    else:
        made = requests.Response()
        made.status_code = answer.status_code
        made.headers = CaseInsensitiveDict(answer.headers.items())
        made.raw = _BodyRaw(answer, None, prepared)
        made.url = str(answer.request.url) if prepared is None else (prepared.url or "")
        made.reason = answer.reason_phrase
        made.encoding = get_encoding_from_headers(made.headers)
        made.request = prepared  # type: ignore[assignment]
    setattr(made, RECEIPT_ATTRIBUTE, answer.extensions.get(RECEIPT_EXTENSION))
    return made


# --- the adapter -------------------------------------------------------------------------------


@dataclasses.dataclass(eq=False)
class _Send:
    """One `session.send` of the caller's and, through `hop`, the redirect hops requests
    sends for it: the logical request they share."""

    session: requests.Session
    guard: LogicalRequest | None = None
    driver: _Driver | None = None
    #: Its truth boundary, which learns the guard when the first hop makes it.
    boundary: Boundary = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.boundary = Boundary(None, conclude=self._conclude)

    def _conclude(self, guard: LogicalRequest, exc: Exception) -> BaseException:
        return exc if self.driver is None else self.driver.conclude(guard, exc)

    #: The adapter of this send (or of its current hop) has not run yet.
    open: bool = True
    #: `resolve_redirects` is about to send this request's next hop.
    hop: bool = False
    #: The answers the adapters handed to requests for it (closed if an error ends it).
    answers: list[requests.Response] = dataclasses.field(default_factory=list)


_CURRENT: contextvars.ContextVar[_Send | None] = contextvars.ContextVar(
    "x402_requests_send", default=None
)


class PaymentAdapter(requests.adapters.BaseAdapter):
    """A requests adapter that answers x402 challenges, over the session's own adapter.

    `with_eur_payment(session, options)` mounts one over each adapter of the session,
    sharing one payer (one private payment loop). Built yourself, it takes `options` as
    every entry does: a `PaymentOptions`, a mapping of its keys, or None for
    `PaymentOptions.from_env()`. Everything that is not a 402 is the wrapped adapter's
    answer, untouched and unread, in the caller's thread. Closing it (or the session)
    stops the payment loop and closes the wrapped adapter.
    """

    def __init__(
        self,
        adapter: requests.adapters.BaseAdapter | None = None,
        options: PaymentOptions | Mapping[str, Any] | None = None,
        *,
        payer: Payer | None = None,
    ) -> None:
        super().__init__()
        wrapped = adapter if adapter is not None else requests.adapters.HTTPAdapter()
        if isinstance(wrapped, PaymentAdapter):
            raise ConfigurationError("a PaymentAdapter cannot wrap another PaymentAdapter")
        self._adapter = wrapped
        self._transport = SyncPaymentTransport(
            _AdapterTransport(wrapped),
            payer=payer if payer is not None else Payer(coerce_options(options)),
        )

    @staticmethod
    @contextlib.contextmanager
    def settings(settings: Mapping[str, Any]) -> Iterator[None]:
        """Per-request x402 settings for the requests a paying `requests.Session` sends in
        this block, in this thread, and for the tool calls a paying MCP session makes in it
        (in this task): what `extensions={"x402": settings}` is to httpx.

        ```python
        with PaymentAdapter.settings({"proof": error.proof}):  # re-send it, pay nothing new
            response = session.get(url)
        with PaymentAdapter.settings({"max_amount_per_payment": "0.05"}):
            response = session.get(url)
        ```

        The keys are checked on entry (`ConfigurationError` for an unknown one). Each
        logical request started in the block takes them at its first hop; its redirect hops
        keep them.
        """
        parse_settings(settings)
        token = ADAPTER_SETTINGS.set(dict(settings))
        try:
            yield
        finally:
            ADAPTER_SETTINGS.reset(token)

    @classmethod
    def _sharing(cls, adapter: requests.adapters.BaseAdapter, driver: _Driver) -> PaymentAdapter:
        made = cls.__new__(cls)
        requests.adapters.BaseAdapter.__init__(made)
        made._adapter = adapter
        made._transport = SyncPaymentTransport._sharing(_AdapterTransport(adapter), driver)
        return made

    def __repr__(self) -> str:
        return f"PaymentAdapter({type(self._adapter).__name__}, {self.payer!r})"

    @property
    def payer(self) -> Payer:
        return self._transport.payer

    @property
    def options(self) -> PaymentOptions:
        return self._transport.options

    @property
    def wrapped(self) -> requests.adapters.BaseAdapter:
        """The adapter this one sends through."""
        return self._adapter

    def send(
        self,
        request: requests.PreparedRequest,
        stream: bool = False,
        timeout: Any = None,
        verify: Any = True,
        cert: Any = None,
        proxies: Any = None,
    ) -> requests.Response:
        kwargs = {
            "stream": stream,
            "timeout": timeout,
            "verify": verify,
            "cert": cert,
            "proxies": proxies,
        }
        current = _CURRENT.get()
        if current is None or not current.open:
            raise requests_error(ConfigurationError(_NOT_INSTALLED), request)
        current.open = False
        try:
            outgoing = _httpx_request(request)
        except (httpx.InvalidURL, ValueError, TypeError):
            # Nothing httpx can represent, so nothing the payment core could pay: the
            # session's adapter answers alone (a 402 comes back unpaid).
            alone = self._adapter.send(request, **kwargs)
            alone.connection = self  # type: ignore[assignment]
            setattr(alone, RECEIPT_ATTRIBUTE, None)
            return alone
        hop = _Hop(request, kwargs, outgoing)
        outgoing.extensions[_HOP] = hop
        if current.guard is None:
            settings = ADAPTER_SETTINGS.get()
            if settings is not None:
                outgoing.extensions[EXTENSION] = settings
            current.guard = current.boundary.guard = LogicalRequest.begin(outgoing)
            current.driver = self._transport._driver
        else:
            outgoing.extensions[GUARD] = current.guard
        try:
            answer = self._transport.handle_request(outgoing)
        except httpx.TransportError as exc:
            # A requests failure of a hop: the caller gets requests' own error (made
            # truthful by the session's boundary if this request already paid).
            if getattr(exc, "_x402_requests", False) and isinstance(
                exc.__cause__, requests.RequestException
            ):
                raise exc.__cause__ from None
            raise
        made = _requests_response(answer, request)
        made.connection = self  # type: ignore[assignment]
        current.answers.append(made)
        return made

    def close(self) -> None:
        self._transport.close()


# --- installing on a session ---------------------------------------------------------------------


def install(session: requests.Session, options: PaymentOptions) -> requests.Session:
    """`with_eur_payment` for a `requests.Session`: a `PaymentAdapter` over each mounted
    adapter (one payer, one payment loop for all), and the session's `send` and
    `resolve_redirects` owned, so that the hops of one request share one logical request
    and errors above the adapters after a payment are truthful."""
    driver = _Driver(Payer(options))
    for prefix, mounted in list(session.adapters.items()):
        if isinstance(mounted, PaymentAdapter):
            mounted._transport._replace_driver(driver)
        else:
            session.adapters[prefix] = PaymentAdapter._sharing(mounted, driver)
    _install_boundary(session)
    return session


def _install_boundary(session: requests.Session) -> None:
    send = session.send
    if getattr(send, "_x402_boundary", False):
        return
    resolve = session.resolve_redirects

    def bounded_send(request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        outer = _CURRENT.get()
        if outer is not None and outer.session is session and outer.hop:
            # A redirect hop `resolve_redirects` sends for the caller's request: its own.
            outer.hop = False
            outer.open = True
            return send(request, **kwargs)
        current = _Send(session)
        token = _CURRENT.set(current)
        try:
            with current.boundary:
                return send(request, **kwargs)
        except Exception as exc:
            # The caller gets the error instead of these answers: let go of their bodies.
            for answer in current.answers:
                with contextlib.suppress(Exception):
                    answer.close()
            out = requests_error(exc, request)
            if out is exc:
                raise
            raise out from out.__cause__
        finally:
            _CURRENT.reset(token)

    def bounded_redirects(*args: Any, **kwargs: Any) -> Iterator[Any]:
        current = _CURRENT.get()
        hops = resolve(*args, **kwargs)
        while True:
            if current is not None:
                current.hop = True
            try:
                item = next(hops)
            except StopIteration:
                return
            finally:
                if current is not None:
                    current.hop = False
            yield item

    bounded_send._x402_boundary = True  # type: ignore[attr-defined]
    session.send = bounded_send  # type: ignore[method-assign]
    session.resolve_redirects = bounded_redirects  # type: ignore[method-assign,assignment]
