"""A new user's mistakes get a message that names the mistake and the fix."""

from __future__ import annotations

import argparse
from datetime import timedelta
from decimal import Decimal

import pytest

from x402_client import Budget, ConfigurationError, PaymentOptions
from x402_client._protocol.amounts import AmountError, parse_amount
from x402_client.cli import _environment_help, _url


def _error(**values: object) -> str:
    with pytest.raises(ConfigurationError) as caught:
        PaymentOptions(**values)  # type: ignore[arg-type]
    return str(caught.value)


# --- amounts -------------------------------------------------------------------------------------


def test_a_float_amount_is_refused_with_the_decimal_string_to_write() -> None:
    assert _error(max_amount_per_payment=0.5) == (
        "invalid PaymentOptions: max_amount_per_payment: Value error, limit: amount must be a "
        'decimal string (or Decimal), e.g. "0.50", not a float: a float cannot hold money exactly'
    )
    with pytest.raises(ConfigurationError) as caught:
        Budget(0.5)  # type: ignore[arg-type]
    assert str(caught.value) == (
        'budget limit: amount must be a decimal string (or Decimal), e.g. "0.50", not a float: '
        "a float cannot hold money exactly"
    )


@pytest.mark.parametrize(
    ("allow_zero", "message"),
    [
        (True, "amount '-1' is negative: it must be positive (or zero)"),
        (False, "amount '-0.50' is negative: it must be positive"),
    ],
)
def test_a_negative_amount_is_called_negative(allow_zero: bool, message: str) -> None:
    text = "-1" if allow_zero else "-0.50"
    with pytest.raises(AmountError) as caught:
        parse_amount(text, allow_zero=allow_zero)
    assert str(caught.value) == message


# --- budgets -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("window", "seconds"),
    [("24h", 86400.0), ("30m", 1800.0), ("7d", 604800.0), ("h", 3600.0), (" 90 s ", 90.0)],
)
def test_a_budget_window_may_be_written_as_on_the_command_line(window: str, seconds: float) -> None:
    assert Budget("5.00", window=window).window == seconds


def test_a_window_string_keys_the_budget_as_its_seconds_do() -> None:
    assert Budget("5.00", window="24h") == Budget("5.00", window=timedelta(hours=24))
    assert Budget("5.00", window="24h").key == Budget("5.00", window=86400).key


@pytest.mark.parametrize(
    ("window", "message"),
    [
        ("24x", "budget window unit 'x': use s, m, h or d"),
        ("0h", "budget window must be positive"),
        (
            "a day",
            "budget window 'a day': write a count and a unit (s, m, h or d), e.g. \"24h\", "
            '"30m" or "7d"',
        ),
        (
            [24],
            "budget window must be seconds (window=86400), a timedelta (window=timedelta(hours=24)) "
            'or a string such as "24h", "30m" or "7d"',
        ),
    ],
)
def test_a_wrong_budget_window_says_what_to_write(window: object, message: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        Budget("5.00", window=window)  # type: ignore[arg-type]
    assert str(caught.value) == message


def test_budgets_accept_the_command_line_grammar() -> None:
    assert PaymentOptions(budgets=["5.00/24h"]).budgets == (
        Budget("5.00", window=86400, name="5.00 EUR/24h"),
    )
    assert PaymentOptions(budgets="1/1h, 10USD/7d").budgets == (
        Budget("1", window=3600, name="1 EUR/1h"),
        Budget("10", currency="USD", window=604800, name="10 USD/7d"),
    )
    mixed = PaymentOptions(budgets=[Budget("2"), "0.25USD", {"limit": "3", "window": "30m"}])
    assert mixed.budgets == (
        Budget("2"),
        Budget("0.25", currency="USD", name="0.25 USD"),
        Budget("3", window=1800),
    )
    assert mixed.budgets[2].limit == Decimal("3")


def test_a_wrong_budget_string_names_its_place_and_mistake() -> None:
    assert _error(budgets=["1/1h", "5/2y"]) == (
        "invalid PaymentOptions: budgets.1: budget window unit 'y': use s, m, h or d"
    )


# --- option names --------------------------------------------------------------------------------


def test_an_unknown_option_suggests_the_nearest_name() -> None:
    assert _error(budget="5.00/24h") == (
        "invalid PaymentOptions: budget: unknown option; did you mean 'budgets'?"
    )


# --- the command line ----------------------------------------------------------------------------


def test_a_url_of_another_scheme_is_said_to_be_unsupported() -> None:
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        _url("ftp://host/x")
    assert str(caught.value) == (
        "'ftp://host/x': the ftp:// scheme is not supported (http:// and https:// only)"
    )
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        _url("host/x")
    assert str(caught.value) == "'host/x' is not an http(s) URL (did you mean https://host/x?)"


def test_help_describes_the_assets_variable_and_its_format() -> None:
    assert (
        "  X402_EUR_ASSETS\n"
        "      tokens to pay standard x402 exact entries in, comma-separated, each\n"
        "      CHAIN:ADDRESS:SYMBOL:CURRENCY[:DECIMALS] (CURRENCY EUR or USD, DECIMALS\n"
        "      default 6), e.g. 8453:0x...:EURC:EUR:6; on Solana, CHAIN is the network\n"
        "      and ADDRESS the mint, e.g. solana-devnet:<mint>:EURC:EUR:6\n"
    ) in _environment_help()
