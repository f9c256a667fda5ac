from decimal import Decimal

import pytest

from x402_client._amounts import (
    AmountError,
    format_amount,
    from_atomic,
    parse_amount,
    parse_atomic,
    to_atomic,
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
