"""What the client never prints, wherever it prints: one policy for the journal, the logs,
receipts and the ledger's JSON, the CLI and the MCP tools.

- A URL's credentials: the value of every query parameter whose name says credential
  (`api_key`, `token`, `sig`, `code`, `password`, ...) becomes `REDACTED`, and the password
  of its user info goes (`safe_url`). The journal stores URLs so; everything else prints
  them so. What the client works with keeps the real URL (a `PaymentIntent`'s and a
  receipt's `resource`): a re-sent request needs it. Only their `repr` and JSON redact.
- Headers that carry a credential are never journaled (`safe_headers`), nor are the
  values of a request body's fields that do (`_redact_body`, by the same names).
- An endpoint the user configured, whose path or query may be its key (an RPC URL,
  `https://host/v3/<key>`), is printed as scheme, host and port (`endpoint_url`), also by
  the libraries that log it (web3): `guard_library_logs` installs the filter that rewrites
  their log records, and makes httpx's request lines print `safe_url`s.
- The configured secrets themselves (the API key, the EVM key) are blanked out of text
  that leaves the process (`redact_secrets`).
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

if TYPE_CHECKING:
    from .._options import PaymentOptions

__all__ = [
    "MASK",
    "REDACTED",
    "endpoint_url",
    "guard_library_logs",
    "private_endpoints",
    "redact_secrets",
    "redact_urls",
    "resource_repr",
    "safe_headers",
    "safe_url",
    "secrets_of",
    "sensitive",
    "strip_redacted",
]

#: What a credential's value becomes in a URL.
REDACTED = "REDACTED"
#: What a configured secret becomes in text.
MASK = "[redacted]"

_SENSITIVE_HEADERS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "cookie",
        "x-api-key",
        "x-payment",
        "payment-signature",
    }
)
#: A name that contains one of these carries a credential (`api_key`, `access_token`).
_SENSITIVE_PARTS = (
    "token",
    "secret",
    "key",
    "auth",
    "cookie",
    "password",
    "passwd",
    "session",
    "signature",
    "credential",
)
#: Names that carry a credential as a whole word only: as parts of a longer name they are
#: too common (`postcode`, `design`). `code` is the OAuth authorization code.
_SENSITIVE_NAMES = frozenset({"code", "sig", "pwd", "pass", "otp", "jwt"})

#: A URL in running text, up to the first space or quote.
_URL_IN_TEXT = re.compile(r"\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>`]+")
#: Characters that end a sentence or a bracket after a URL, not part of it.
_TRAILING = ".,;:!?)]}"


def sensitive(name: str) -> bool:
    """True when a header, query parameter or body field named `name` carries a
    credential."""
    lowered = name.strip().lower()
    return (
        lowered in _SENSITIVE_HEADERS
        or lowered in _SENSITIVE_NAMES
        or any(part in lowered for part in _SENSITIVE_PARTS)
    )


def safe_headers(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The headers that carry no credential."""
    return [(name, value) for name, value in headers if not sensitive(name)]


def safe_url(url: str) -> str:
    """`url` without a password and with the values of credential query parameters
    replaced by `REDACTED`; any other URL as it is."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, host = netloc.rpartition("@")
        user = userinfo.partition(":")[0]
        netloc = f"{user}@{host}" if user and not sensitive(user) else host
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(sensitive(name) for name, _ in pairs):
            query = urlencode([(n, REDACTED if sensitive(n) else v) for n, v in pairs])
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def strip_redacted(url: str) -> str:
    """`url` without the query parameters `safe_url` redacted: a re-sent request lets the
    client's own `params` supply them, never the word `REDACTED`."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if REDACTED not in parts.query:
        return url
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    kept = [(n, v) for n, v in pairs if not (v == REDACTED and sensitive(n))]
    return urlunsplit(parts._replace(query=urlencode(kept)))


def endpoint_url(url: str) -> str:
    """A configured endpoint (an RPC URL) as scheme, host and port: its path, query and
    user info often carry an API key. `/...` says something was left out."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except (ValueError, TypeError, AttributeError):
        return "<invalid URL>"
    host = parts.hostname or ""
    if not parts.scheme or not host:
        return "<invalid URL>"
    if ":" in host:
        host = f"[{host}]"
    shown = f":{port}" if port else ""
    hidden = "/..." if parts.path not in ("", "/") or parts.query else ""
    return f"{parts.scheme}://{host}{shown}{hidden}"


def redact_urls(text: str, *, endpoints: bool = False) -> str:
    """`text` with every URL in it printed as `safe_url` prints it (`endpoints`: as
    `endpoint_url` does, for text that names configured endpoints)."""
    if "://" not in text:
        return text
    shown = endpoint_url if endpoints else safe_url

    def one(match: re.Match[str]) -> str:
        found = match.group()
        url = found.rstrip(_TRAILING)
        return shown(url) + found[len(url) :]

    return _URL_IN_TEXT.sub(one, text)


def resource_repr(value: Any) -> str:
    """The repr a dataclass would have, with its `resource` URL as `safe_url` prints it:
    the object itself keeps the real URL."""
    shown = []
    for field in dataclasses.fields(value):
        if field.repr:
            item = getattr(value, field.name)
            if field.name == "resource" and isinstance(item, str):
                item = safe_url(item)
            shown.append(f"{field.name}={item!r}")
    return f"{type(value).__name__}({', '.join(shown)})"


def secrets_of(options: PaymentOptions) -> list[str]:
    """The secrets `options` hold, as they could show up in text: the API key, the EVM
    private key (with and without `0x`), the Solana secret key, the RPC URLs with a path or
    query (where their key would be). Short ones are left out: they would blank out
    ordinary words."""
    found: list[str] = []
    if options.api_key is not None:
        found.append(options.api_key.get_secret_value())
    if options.evm is not None:
        key = options.evm.private_key.get_secret_value()
        found += [key, key.removeprefix("0x")]
        for urls in options.evm.rpc_urls.values():
            found += [url for url in urls if endpoint_url(url).endswith("/...")]
    if options.svm is not None:
        found.append(options.svm.secret_key.get_secret_value())
        if endpoint_url(options.svm.rpc_url).endswith("/..."):
            found.append(options.svm.rpc_url)
    return [s for s in found if len(s) >= 8]


def redact_secrets(text: str, secrets: Sequence[str]) -> str:
    """`text` with every one of `secrets` replaced by `[redacted]`."""
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    return text


class _RedactingFilter(logging.Filter):
    """Rewrites a log record's message (and its traceback text) with its URLs redacted."""

    def __init__(self, *, endpoints: bool) -> None:
        super().__init__()
        self.endpoints = endpoints

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken log call: the handler reports it as it would
            return True
        shown = redact_urls(message, endpoints=self.endpoints)
        for url in sorted(_private_endpoints, key=len, reverse=True):  # a copy: may grow
            if url in shown:
                shown = shown.replace(url, endpoint_url(url))
        if shown != message:
            record.msg, record.args = shown, None
        if record.exc_info and not record.exc_text:
            # Formatters use `exc_text` when it is set: the traceback, redacted the same way.
            text = logging.Formatter().formatException(record.exc_info)
            record.exc_text = redact_urls(text, endpoints=self.endpoints)
        return True


#: Loggers that print the endpoint URIs of the providers web3 makes (the RPC URLs).
_ENDPOINT_LOGGERS = (
    "web3.providers.AsyncHTTPProvider",
    "web3.providers.HTTPProvider",
    "web3.providers.async_base.AsyncBaseProvider",
    "web3.providers.base.BaseProvider",
    "web3.providers.base.JSONBaseProvider",
    "web3._utils.http_session_manager.HTTPSessionManager",
    "web3.manager.RequestManager",
)
#: Loggers that print request URLs (httpx's `HTTP Request: GET <url> ...` line).
_REQUEST_LOGGERS = ("httpx",)

_guard_lock = threading.Lock()
_guarded = False
#: Endpoints whose whole URL is a secret (an RPC or node URL may carry its key in the
#: path), wherever a library logs it: shown as scheme, host and port only.
_private_endpoints: set[str] = set()


def private_endpoints(urls: Iterable[str]) -> None:
    """Have the library log filters (`guard_library_logs`) show these URLs as
    `endpoint_url` does, path and all hidden, in any library's records (httpx's request
    lines included), then install the filters."""
    with _guard_lock:
        _private_endpoints.update(url for url in urls if url)
    guard_library_logs()


def guard_library_logs() -> None:
    """Install the filters that redact the URLs the libraries the client calls log: RPC
    URLs in web3's records (as `endpoint_url`), credentials in httpx's request lines (as
    `safe_url`). Once per process; a filter on a logger applies to the records logged on
    it, whatever handlers they reach."""
    global _guarded
    if _guarded:
        return
    with _guard_lock:
        if _guarded:
            return
        for name in _ENDPOINT_LOGGERS:
            logging.getLogger(name).addFilter(_RedactingFilter(endpoints=True))
        for name in _REQUEST_LOGGERS:
            logging.getLogger(name).addFilter(_RedactingFilter(endpoints=False))
        _guarded = True
