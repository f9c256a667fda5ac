"""How the command line and the MCP server name a session, what they say it holds, and
which refund amounts they let through (nothing is sent for the others)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from tests.channel_books import channel, channel_id, signature
from x402_client._frontend.sessions import (
    SessionMistake,
    find_session,
    refund_amount,
    session_json,
    short_id,
    unspent,
)
from x402_client._protocol.assets import Asset
from x402_client._state.channels import ChannelRecord


def used(name: str = "a") -> ChannelRecord:
    """5.00 deposited, 1.20 signed, 1.00 acknowledged, 0.50 refunded: 3.50 unspent."""
    return channel(
        name,
        signed=1_200_000,
        signature=signature(1_200_000),
        acknowledged=1_000_000,
        refunded=500_000,
    )


def test_a_session_is_named_by_a_unique_start_of_its_id_as_a_table_shows_it() -> None:
    a, b = used("a"), channel("b")
    records = [a, b]
    full = a.channel_id
    for given in (full, full[:8], full[2:10], full[:12] + "…", full[:10].upper() + " "):
        assert find_session(records, given) is a
    assert short_id(full) == full[:12] + "…"


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("0x12345", "too short"),
        ("", "not a session id"),
        ("0xzz1234567", "not a session id"),
        ("0x" + "f" * 10, "no session"),
    ],
)
def test_a_session_named_wrongly_is_a_mistake(given: str, said: str) -> None:
    with pytest.raises(SessionMistake, match=said):
        find_session([used("a")], given)


def test_a_start_that_names_two_sessions_lists_them() -> None:
    one = channel("a", channel_id="0xabcdef01" + "0" * 56)
    two = channel("b", channel_id="0xabcdef02" + "0" * 56)
    with pytest.raises(SessionMistake, match=r"names 2 sessions \(0xabcdef0100…, 0xabcdef0200…\)"):
        find_session([one, two], "0xabcdef0")
    assert find_session([one, two], "abcdef02") is two


def test_refund_amounts_are_positive_within_the_asset_s_decimals_and_what_is_unspent() -> None:
    record = used()
    assert unspent(record) == 3_500_000
    assert refund_amount(record, "3.5") == Decimal("3.5")
    assert refund_amount(record, "0.000001") == Decimal("0.000001")
    assert refund_amount(record, None) is None  # all of it
    for amount, said in (
        ("3.500001", "holds 3.50 USD unspent"),
        ("0", "not a positive amount"),
        ("-1", "not a positive amount"),
        ("0.0000001", "at most 6 decimals"),
        ("NaN", "not a positive amount"),
        ("Infinity", "not a positive amount"),
        ("five", "not an amount"),
    ):
        with pytest.raises(SessionMistake, match=said):
            refund_amount(record, amount)


def test_nothing_is_unspent_once_the_merchant_s_charges_and_the_refunds_take_it_all() -> None:
    record = channel(
        signed=4_000_000, signature=signature(4_000_000), acknowledged=4_000_000,
        refunded=1_000_000, status="closed",
    )  # fmt: skip
    assert unspent(record) == 0
    for amount in ("0.01", None):
        with pytest.raises(SessionMistake, match="holds nothing unspent: nothing to refund"):
            refund_amount(record, amount)


def test_a_session_as_json_is_in_the_asset_s_units_without_its_signature() -> None:
    record = used()
    data = session_json(record, "USDC")
    assert data["id"] == channel_id("a")
    assert (data["deposited"], data["spent"], data["signed"]) == ("5.00", "1.00", "1.20")
    assert (data["refunded"], data["unspent"], data["symbol"]) == ("0.50", "3.50", "USDC")
    assert "signature" not in data and "config" not in data
    assert signature(1_200_000) not in str(data)


def test_the_symbol_comes_from_the_declared_assets() -> None:
    from x402_client._frontend.sessions import symbol_of

    record = channel()
    declared = [Asset(84532, record.asset, "tUSD", "USD", 6)]
    assert symbol_of(record, declared) == "tUSD"
