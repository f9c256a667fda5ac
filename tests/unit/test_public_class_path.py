"""An error names itself as users import and catch it: `x402_client.AmountLimitExceeded`
in a traceback, never the private module that defines it; and it still pickles."""

from __future__ import annotations

import pickle
import traceback

import pytest

import x402_client
from x402_client._protocol import errors

EXPORTED = [name for name in x402_client.__all__ if name in errors.__all__]


def test_every_exported_error_is_named_by_its_public_path() -> None:
    assert len(EXPORTED) == 18
    for name in EXPORTED:
        cls = getattr(x402_client, name)
        assert f"{cls.__module__}.{cls.__qualname__}" == f"x402_client.{name}"


def test_a_traceback_header_names_the_public_class() -> None:
    exc = x402_client.AmountLimitExceeded("refusing to pay: 0.10 EUR is above 0.05 EUR")
    assert traceback.format_exception_only(exc) == [
        "x402_client.AmountLimitExceeded: refusing to pay: 0.10 EUR is above 0.05 EUR\n"
    ]
    assert repr(exc) == "AmountLimitExceeded('refusing to pay: 0.10 EUR is above 0.05 EUR')"
    assert repr(type(exc)) == "<class 'x402_client.AmountLimitExceeded'>"


@pytest.mark.parametrize("name", ["AmountLimitExceeded", "ConfigurationError", "X402Error"])
def test_a_public_error_still_pickles(name: str) -> None:
    exc = getattr(x402_client, name)("no money moved")
    again = pickle.loads(pickle.dumps(exc))  # noqa: S301 (bytes this test made)
    assert type(again) is type(exc) and str(again) == "no money moved"
    assert b"x402_client._protocol" not in pickle.dumps(exc)
