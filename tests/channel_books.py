"""What every channel book must do, as checks a test runs on one: the in-memory book
(tests/unit), a SQLite file and a PostgreSQL database (tests/integration). Each takes a
fresh, empty book."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from x402_client._state.channels import MAX_CHANNEL_AMOUNT, ChannelBook, ChannelRecord

CONFIG = {
    "payer": "0x1111111111111111111111111111111111111111",
    "payerAuthorizer": "0x1111111111111111111111111111111111111111",
    "receiver": "0x2222222222222222222222222222222222222222",
    "receiverAuthorizer": "0x3333333333333333333333333333333333333333",
    "token": "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
    "withdrawDelay": 900,
    "salt": "0x" + "00" * 32,
}


def channel_id(name: str) -> str:
    return "0x" + hashlib.sha256(name.encode()).hexdigest()


def signature(amount: int) -> str:
    return "0x" + amount.to_bytes(65, "big").hex()


def channel(name: str = "a", **changes: Any) -> ChannelRecord:
    fields: dict[str, Any] = {
        "channel_id": channel_id(name),
        "network": "eip155:84532",
        "origin": "http://127.0.0.1:8402",
        "config": CONFIG,
        "currency": "USD",
        "asset": CONFIG["token"],
        "decimals": 6,
        "deposited": 5_000_000,
        **changes,
    }
    return ChannelRecord(**fields)


async def check_open_and_read(book: ChannelBook) -> None:
    assert await book.channel(channel_id("a")) is None
    opened = await book.open_channel(channel("a"))
    assert opened.opened_at and opened.updated_at == opened.opened_at
    assert (opened.signed, opened.signature, opened.acknowledged, opened.status) == (
        0,
        None,
        0,
        "open",
    )
    assert dict(opened.config) == CONFIG
    assert await book.channel(channel_id("a")) == opened
    # Opened again (another process, a restart): the stored record wins.
    assert await book.open_channel(channel("a", deposited=1)) == opened
    assert (await book.channel(channel_id("a"))).deposited == 5_000_000  # type: ignore[union-attr]


async def check_compare_and_set(book: ChannelBook) -> None:
    cid = channel_id("cas")
    await book.open_channel(channel("cas"))
    assert await book.advance(cid, expected=0, signed=10, signature=signature(10))
    # Stale `expected` (another process signed 10 first): refused, nothing changes.
    assert not await book.advance(cid, expected=0, signed=20, signature=signature(20))
    # Equal and lower amounts: refused even with the right `expected`.
    assert not await book.advance(cid, expected=10, signed=10, signature=signature(10))
    assert not await book.advance(cid, expected=10, signed=5, signature=signature(5))
    record = await book.channel(cid)
    assert record is not None and (record.signed, record.signature) == (10, signature(10))
    assert await book.advance(cid, expected=10, signed=25, signature=signature(25))
    # Amounts beyond 64 bits are kept exactly (a uint128 of an 18-decimal token).
    big = MAX_CHANNEL_AMOUNT - 1
    assert await book.advance(cid, expected=25, signed=big, signature=signature(big))
    record = await book.channel(cid)
    assert record is not None and (record.signed, record.signature) == (big, signature(big))
    with pytest.raises(KeyError):
        await book.advance(channel_id("nowhere"), expected=0, signed=1, signature=signature(1))
    with pytest.raises(ValueError, match="channel id"):
        await book.advance("0xABC", expected=0, signed=1, signature=signature(1))


async def check_acknowledge_deposit_refund(book: ChannelBook) -> None:
    cid = channel_id("ack")
    await book.open_channel(channel("ack"))
    assert await book.advance(cid, expected=0, signed=300, signature=signature(300))
    await book.acknowledge(cid, 200)
    await book.acknowledge(cid, 100)  # an older acknowledgement never lowers it
    with pytest.raises(ValueError, match="above the 300 signed"):
        await book.acknowledge(cid, 301)
    await book.deposited(cid, 2_000_000)
    with pytest.raises(ValueError):
        await book.deposited(cid, -1)
    await book.set_status(cid, "refunding")
    with pytest.raises(ValueError, match="status"):
        await book.set_status(cid, "gone")
    await book.refunded(cid, 6_999_700, "closed")
    record = await book.channel(cid)
    assert record is not None
    assert (record.acknowledged, record.deposited, record.refunded, record.status) == (
        200,
        7_000_000,
        6_999_700,
        "closed",
    )
    assert record.updated_at >= record.opened_at
    for call in (
        book.acknowledge(channel_id("x"), 0),
        book.deposited(channel_id("x"), 1),
        book.refunded(channel_id("x"), 1, "closed"),
        book.set_status(channel_id("x"), "closed"),
    ):
        with pytest.raises(KeyError):
            await call


async def check_listing(book: ChannelBook) -> None:
    for name in ("one", "two", "three"):
        await book.open_channel(channel(name))
    await book.set_status(channel_id("two"), "withdrawing")
    assert [r.channel_id for r in await book.channels()] == [
        channel_id(n) for n in ("one", "two", "three")
    ]
    assert [r.channel_id for r in await book.channels(status="open")] == [
        channel_id("one"),
        channel_id("three"),
    ]
    assert [r.channel_id for r in await book.channels(status="withdrawing")] == [channel_id("two")]


#: Every check, each for a fresh book.
CHECKS = [
    check_open_and_read,
    check_compare_and_set,
    check_acknowledge_deposit_refund,
    check_listing,
]
