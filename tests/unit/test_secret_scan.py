"""The session-wide secret scan (tests/conftest.py) must be able to fail."""

import logging

from tests.conftest import _leaks


def test_scan_finds_sandbox_keys_and_registered_secrets() -> None:
    assert _leaks("paid with key sk_sandbox_abcdefghijklmnop") == ["sk_sandbox_abcdefghijklmnop"]
    assert _leaks("sk_live_super_secret_value in a message") == ["sk_live_super_secret_value"]
    assert _leaks("nothing to see") == []


def test_scan_sees_what_the_client_logs(caplog) -> None:
    caplog.set_level(logging.DEBUG, logger="x402_client")
    logging.getLogger("x402_client").debug("a line the session capture also receives")
    assert "a line the session capture" in caplog.text
