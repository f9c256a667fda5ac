"""The suite's one-certificate CA bundle is in use, and the system's is kept for pip."""

from __future__ import annotations

import os
import ssl

import httpx

from tests import tls_bundle


def test_clients_read_the_one_certificate_bundle() -> None:
    assert os.environ["SSL_CERT_FILE"] == str(tls_bundle.BUNDLE)
    context = httpx.create_ssl_context()
    assert context.verify_mode is ssl.CERT_REQUIRED
    assert len(context.get_ca_certs()) == 1


def test_the_system_bundle_is_what_the_session_started_with() -> None:
    saved = os.environ["X402_EUR_TESTS_SYSTEM_SSL_CERT_FILE"]
    system = tls_bundle.system_environment()
    assert system.get("SSL_CERT_FILE", "") == saved
    assert "X402_EUR_TESTS_SYSTEM_SSL_CERT_FILE" not in system
