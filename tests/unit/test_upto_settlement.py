"""What the chain says an `upto` authorization moved (`check_settlement`), branch by branch,
against a scripted chain: only a definite answer settles or voids; anything the chain does
not say for sure leaves the maximum booked."""

from __future__ import annotations

from typing import Any

import pytest

from x402_client._rails.permit2 import RpcUnavailable
from x402_client._rails.upto import check_settlement

pytestmark = pytest.mark.anyio

PAYER, TOKEN, PAY_TO = "0x" + "11" * 20, "0x" + "22" * 20, "0x" + "33" * 20
TX = "0x" + "ab" * 32
NONCE, DEADLINE = 5, 1_000
PAYLOAD = {
    "permit2Authorization": {
        "from": PAYER,
        "permitted": {"token": TOKEN, "amount": "10000"},
        "nonce": str(NONCE),
        "deadline": str(DEADLINE),
        "witness": {"to": PAY_TO},
    }
}


class Chain:
    """Answers as a node would: the nonce is consumed at `consumed_at` (a block), the
    named transaction sits in `tx_block`, and `moved` is the block's transfers."""

    def __init__(self, *, consumed_at: int | None, tx_block: int | None, moved: int = 0,
                 now: int = 0, failing: str | None = None) -> None:  # fmt: skip
        self.consumed_at, self.tx_block, self.moved = consumed_at, tx_block, moved
        self.now, self.failing = now, failing

    async def request(self, chain_id: int, method: str, params: list[Any]) -> Any:
        if method == self.failing:
            raise RpcUnavailable("no RPC endpoint answered")
        if method == "eth_getTransactionReceipt":
            return None if self.tx_block is None else {"blockNumber": hex(self.tx_block)}
        if method == "eth_getLogs":
            return [{"data": hex(self.moved)}] if self.moved else []
        if method == "eth_getBlockByNumber":
            return {"timestamp": hex(self.now), "number": "0x64"}
        raise AssertionError(method)

    async def call(self, chain_id: int, to: str, data: bytes, block: str = "latest") -> bytes:
        if self.failing == "eth_call":
            raise RpcUnavailable("no RPC endpoint answered")
        at = 10**9 if block == "latest" else int(block, 16)
        used = self.consumed_at is not None and at >= self.consumed_at
        return (int(used) << NONCE).to_bytes(32, "big")


CASES = [
    # the named transaction's block consumed the nonce: what moved there, at most the maximum
    (Chain(consumed_at=7, tx_block=7, moved=2_500), TX, ("settled", 2_500, False)),
    (Chain(consumed_at=7, tx_block=7, moved=50_000), TX, ("settled", 10_000, False)),
    # a transaction of another block (an earlier payment, a made-up hash), deadline ahead
    (Chain(consumed_at=9, tx_block=7, moved=100), TX, ("unverified", None, False)),
    (Chain(consumed_at=None, tx_block=None, now=DEADLINE), TX, ("unverified", None, False)),
    (Chain(consumed_at=None, tx_block=None, now=DEADLINE), None, ("unverified", None, False)),
    # past the deadline (the chain's clock): unused is void, consumed elsewhere is final
    (Chain(consumed_at=None, tx_block=None, now=DEADLINE + 1), None, ("void", 0, False)),
    (Chain(consumed_at=9, tx_block=None, now=DEADLINE + 1), "nonsense", ("unverified", None, True)),
    # the chain does not answer: never void, never settled
    (
        Chain(consumed_at=7, tx_block=7, moved=1, failing="eth_call"),
        TX,
        ("unverified", None, False),
    ),
    (
        Chain(consumed_at=None, tx_block=None, now=DEADLINE + 1, failing="eth_call"),
        None,
        ("unverified", None, False),
    ),
    (Chain(consumed_at=7, tx_block=7, failing="eth_getLogs"), TX, ("unverified", None, False)),
    (
        Chain(consumed_at=None, tx_block=None, failing="eth_getBlockByNumber"),
        None,
        ("unverified", None, False),
    ),
]


@pytest.mark.parametrize(("chain", "transaction", "expected"), CASES)
async def test_only_a_definite_answer_settles_or_voids(chain: Chain, transaction: Any, expected):
    check = await check_settlement(chain, 1, PAYLOAD, transaction)  # type: ignore[arg-type]
    assert (check.status, check.atomic, check.final) == expected, check.detail


async def test_an_unreadable_authorization_is_unverified():
    chain = Chain(consumed_at=None, tx_block=None, now=DEADLINE + 1)
    check = await check_settlement(chain, 1, {"permit2Authorization": {}}, TX)  # type: ignore[arg-type]
    assert check.status == "unverified" and "cannot be read back" in check.detail
