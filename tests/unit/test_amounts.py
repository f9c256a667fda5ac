from decimal import Decimal

import pytest

from x402_client._protocol.amounts import (
    AmountError,
    format_amount,
    format_money,
    from_atomic,
    money_of,
    parse_amount,
    parse_atomic,
    to_atomic,
    trim_amount,
)


@pytest.mark.parametrize(
    ("euros", "atomic"),
    [
        ("0.10", 100000),
        ("0.50", 500000),
        ("1.00", 1000000),
        ("0.001", 1000),
        ("12.345678", 12345678),
    ],
)
def test_spec_examples_round_trip(euros: str, atomic: int) -> None:
    assert to_atomic(Decimal(euros)) == atomic
    assert from_atomic(atomic) == Decimal(euros)


def test_from_atomic_has_six_places() -> None:
    assert str(from_atomic(100000)) == "0.100000"


@pytest.mark.parametrize(
    "bad",
    [
        "-0.10",
        "+0.10",
        "1e-1",
        "1E2",
        "NaN",
        "nan",
        "Infinity",
        "inf",
        " 0.10",
        "0.10 ",
        "0.1234567",
        ".5",
        "5.",
        "",
        "0x10",
        "1,00",
        "1_000",
        "0",
        "0.000000",
        "1" * 16,
        "١٢",
    ],
)
def test_parse_amount_refuses(bad: str) -> None:
    with pytest.raises(AmountError):
        parse_amount(bad)


@pytest.mark.parametrize("bad", [0.1, True, None, [], {}])
def test_parse_amount_refuses_types(bad: object) -> None:
    with pytest.raises(AmountError):
        parse_amount(bad)


def test_parse_amount_accepts_plain_decimals() -> None:
    assert parse_amount("0.10") == Decimal("0.10")
    assert parse_amount("7") == Decimal(7)
    assert parse_amount(Decimal("0.001")) == Decimal("0.001")
    assert parse_amount("0", allow_zero=True) == 0


@pytest.mark.parametrize("bad", ["-1", "0", "1.5", "1e6", " 1", "", "1" * 23, 100000, None])
def test_parse_atomic_refuses(bad: object) -> None:
    with pytest.raises(AmountError):
        parse_atomic(bad)


def test_to_atomic_refuses_over_precision() -> None:
    with pytest.raises(AmountError):
        to_atomic(Decimal("0.0000001"))


def test_format_amount() -> None:
    assert format_amount(Decimal("0.1")) == "0.10"
    assert format_amount(Decimal("0.001")) == "0.001"
    assert format_amount(Decimal("0.100000")) == "0.10"


# --- one way to show money ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("amount", "label", "shown"),
    [
        ("0.100000", "EUR", "0.10 EUR"),
        ("0.1", "EURQ", "0.10 EURQ"),
        ("1", None, "1.00"),
        ("0.000123", "USD", "0.000123 USD"),
        ("12.500", "", "12.50"),
    ],
)
def test_format_money_trims_to_at_least_two_decimals(
    amount: str, label: str | None, shown: str
) -> None:
    assert format_money(Decimal(amount), label) == shown


def test_money_of_names_the_token_but_never_an_address() -> None:
    assert money_of(Decimal("0.100000"), "EUR", "EURQ") == "0.10 EUR (EURQ)"
    assert money_of(Decimal("0.10"), "EUR", "EUR") == "0.10 EUR"
    assert money_of(Decimal("0.10"), "EUR", None) == "0.10 EUR"
    assert money_of(Decimal("0.10"), "EUR", "0x5FbDB2315678afecb367f032d93F642f64180aa3") == (
        "0.10 EUR"
    )
    assert money_of(Decimal("0.10"), "EUR", "2768422954") == "0.10 EUR"


def test_trim_amount_keeps_the_value() -> None:
    trimmed = trim_amount(Decimal("0.100000"))
    assert trimmed == Decimal("0.1") and str(trimmed) == "0.10"
    assert str(trim_amount(Decimal("0.123456"))) == "0.123456"
