"""A process that pays on a channel it shares: the child of
`tests/integration/test_channel_state.py`.

```
python tests/integration/channel_worker.py '{"state": "<file or DSN>", "channel": "0x...", ...}'
```

`"mode": "sign"`: opens the state, says it is ready (creates `config["ready"]`), waits until
`config["go"]` exists (so that the workers start together), then `config["times"]` times
takes the channel's hold, reads it and signs the next cumulative amount (`+ config["amount"]`)
by compare-and-set; prints one JSON object: the amounts it signed, and how many of its
compare-and-sets lost (none should: it holds the channel).

`"mode": "crash"`: signs `config["amount"]` once, takes the channel's hold, says `held` and
waits there until it is killed (SIGKILL: no `finally`, no close) with the hold taken.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
from start_gate import wait_for_go

from x402_client._state.stores import open_store


def _signature(amount: int) -> str:
    return "0x" + amount.to_bytes(65, "big").hex()


async def sign(config: dict[str, Any]) -> None:
    store = open_store(config["state"])
    channel, amount = config["channel"], int(config["amount"])
    signed: list[int] = []
    lost = 0
    try:
        await wait_for_go(config["ready"], config["go"])
        for _ in range(int(config["times"])):
            async with store.hold(channel):
                record = await store.channel(channel)
                assert record is not None
                new = record.signed + amount
                if await store.advance(
                    channel, expected=record.signed, signed=new, signature=_signature(new)
                ):
                    signed.append(new)
                else:
                    lost += 1
    finally:
        await store.aclose()
    print(json.dumps({"signed": signed, "lost": lost}))


async def crash(config: dict[str, Any]) -> None:
    store = open_store(config["state"])
    channel, amount = config["channel"], int(config["amount"])
    record = await store.channel(channel)
    assert record is not None
    assert await store.advance(
        channel, expected=record.signed, signed=amount, signature=_signature(amount)
    )
    hold = store.hold(channel)
    await hold.__aenter__()
    print("held", flush=True)
    sys.stdin.read()  # until the test kills this process


if __name__ == "__main__":
    given = json.loads(sys.argv[1])
    anyio.run(sign if given["mode"] == "sign" else crash, given)
