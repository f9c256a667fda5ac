"""The connections the client opens itself share one SSL context (httpx builds a new one
for each client, which reads the whole CA bundle); a caller's own settings are kept."""

from __future__ import annotations

import ssl
from typing import Any

import httpx

from x402_client import PaymentTransport, SyncPaymentTransport
from x402_client._protocol.secret import SecretStr
from x402_client._state.http import default_ssl_context
from x402_client._state.netguard import DestinationGuard
from x402_client._state.payment_api import PaymentAPI

OPTIONS = {"api_key": "sk_test_ssl", "from_account": "ACC_SSL", "api_url": "http://127.0.0.1:9"}


def _context_of(transport: Any) -> ssl.SSLContext:
    return transport._pool._ssl_context  # type: ignore[no-any-return]


def test_one_context_per_process_and_per_trust_env() -> None:
    shared = default_ssl_context()
    assert default_ssl_context() is shared
    assert shared.verify_mode is ssl.CERT_REQUIRED and shared.check_hostname
    assert default_ssl_context(trust_env=False) is not shared
    assert default_ssl_context(trust_env=False).verify_mode is ssl.CERT_REQUIRED


def test_the_payment_api_and_default_transports_use_it() -> None:
    limits = {"timeout": 30.0, "max_body_bytes": 64 * 1024, "max_connections": 1}
    first = PaymentAPI("http://127.0.0.1:9", SecretStr("sk_test_ssl"), **limits)
    second = PaymentAPI("http://127.0.0.1:9", SecretStr("sk_test_ssl"), **limits)
    assert _context_of(first._transport._inner) is default_ssl_context()
    assert _context_of(second._transport._inner) is default_ssl_context()
    assert _context_of(PaymentTransport(options=OPTIONS)._transport) is default_ssl_context()
    sync = SyncPaymentTransport(options=OPTIONS)
    assert _context_of(sync._transport) is default_ssl_context()


def test_a_guarded_transport_shares_it_unless_told_otherwise() -> None:
    guard = DestinationGuard()
    assert _context_of(guard.transport()) is default_ssl_context()
    assert _context_of(guard.transport(trust_env=False)) is default_ssl_context(False)
    own = ssl.create_default_context()
    assert _context_of(guard.transport(verify=own)) is own
    unverified = _context_of(guard.transport(verify=False))
    assert unverified is not default_ssl_context()
    assert unverified.verify_mode is ssl.CERT_NONE


def test_a_callers_own_transport_is_kept_as_it_is() -> None:
    own = httpx.AsyncHTTPTransport(verify=False)
    assert PaymentTransport(own, OPTIONS)._transport is own
