"""The in-memory channel book (options without a state file): the compare-and-set of the
highest cumulative amount signed, and a hold that threads and event loops take turns on;
and the records a book refuses to keep."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Coroutine
from typing import Any

import anyio
import pytest

from tests.channel_books import CHECKS, channel, channel_id, signature
from x402_client import PaymentOptions
from x402_client._state.channels import ChannelBook, MemoryChannelBook
from x402_client._state.shared import state_of

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
async def test_the_memory_book_keeps_channels_as_every_book_must(
    check: Callable[[ChannelBook], Coroutine[Any, Any, None]],
) -> None:
    await check(MemoryChannelBook())


async def _sign(book: ChannelBook, cid: str, amount: int, times: int) -> list[int]:
    """Take the hold, read, sign the next cumulative amount: `times` times."""
    signed = []
    for _ in range(times):
        async with book.hold(cid):
            record = await book.channel(cid)
            assert record is not None
            new = record.signed + amount
            await anyio.lowlevel.checkpoint()  # signing: other tasks run meanwhile
            assert await book.advance(
                cid, expected=record.signed, signed=new, signature=signature(new)
            )
            signed.append(new)
        await anyio.lowlevel.checkpoint()
    return signed


async def test_threads_and_tasks_that_share_a_channel_sign_each_amount_once() -> None:
    """Two threads, each with its own event loop and four tasks, sign 25 vouchers a task on
    one channel: every cumulative amount from 7 to 7 x 200 is signed exactly once."""
    book = MemoryChannelBook()
    cid = channel_id("shared")
    await book.open_channel(channel("shared"))
    results: list[list[int]] = []
    guard = threading.Lock()

    async def tasks() -> None:
        async def one() -> None:
            signed = await _sign(book, cid, 7, 25)
            with guard:
                results.append(signed)

        async with anyio.create_task_group() as group:
            for _ in range(4):
                group.start_soon(one)

    threads = [threading.Thread(target=anyio.run, args=(tasks,)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        await anyio.to_thread.run_sync(thread.join)
    assert len(results) == 8
    every = sorted(amount for signed in results for amount in signed)
    assert every == [7 * n for n in range(1, 201)]
    assert all(signed == sorted(signed) for signed in results)


async def test_the_hold_excludes_a_second_holder_until_the_first_lets_go() -> None:
    book = MemoryChannelBook()
    cid = channel_id("held")
    order: list[str] = []
    first_in = anyio.Event()
    let_go = anyio.Event()

    async def first() -> None:
        async with book.hold(cid):
            order.append("first in")
            first_in.set()
            await let_go.wait()
            order.append("first out")

    async def second() -> None:
        await first_in.wait()
        async with book.hold(cid):
            order.append("second in")

    async with anyio.create_task_group() as group:
        group.start_soon(first)
        group.start_soon(second)
        await first_in.wait()
        # Another channel is not held by it.
        async with book.hold(channel_id("other")):
            order.append("other")
        let_go.set()
    assert order == ["first in", "other", "first out", "second in"]


def test_options_without_a_state_keep_channels_in_memory_per_options() -> None:
    options = PaymentOptions(api_key="k", from_account="ACC_P", api_url="https://api.example")
    state = state_of(options)
    assert isinstance(state.channels, MemoryChannelBook)
    assert state_of(options).channels is state.channels
    other = options.model_copy()
    assert state_of(other).channels is not state.channels


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"channel_id": "0x" + "AB" * 32}, "channel id"),
        ({"channel_id": "../../etc/passwd"}, "channel id"),
        ({"network": "base"}, "CAIP-2"),
        ({"origin": "https://user:pw@api.example"}, "without credentials"),
        ({"origin": "https://api.example/paid?token=t"}, "scheme://host"),
        ({"origin": "ftp://api.example"}, "scheme://host"),
        ({"decimals": -1}, "decimals"),
        ({"decimals": True}, "decimals"),
        ({"deposited": -5}, "deposited"),
        ({"signed": 1 << 128}, "signed"),
        ({"signed": 1.5}, "signed"),
        ({"signed": 5, "acknowledged": 6}, "never above"),
        ({"signature": "not hex"}, "signature"),
        ({"status": "spent"}, "status"),
        ({"currency": ""}, "currency"),
    ],
)
def test_a_record_a_book_cannot_keep_is_refused(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        channel(**changes)


def test_a_record_in_json_keeps_its_amounts_exact() -> None:
    big = (1 << 128) - 1
    data = channel(signed=big, signature=signature(3), acknowledged=big - 1).to_json()
    assert json.loads(json.dumps(data)) == data
    assert (data["signed"], data["acknowledged"], data["deposited"]) == (
        str(big),
        str(big - 1),
        "5000000",
    )
    assert data["config"]["withdrawDelay"] == 900 and data["signature"] == signature(3)
    assert hash(channel()) == hash(channel())  # the config (a dict) does not stop hashing
