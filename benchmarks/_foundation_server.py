"""The x402 foundation's merchant and facilitator on anvil, in their own process.

`python benchmarks/_foundation_server.py [--payments N]` starts `foundation_stack()`
(`tests/x402_foundation.py`: an anvil chain with an EIP-3009 token shaped like EURC, the
foundation's facilitator and its v2 merchant middleware guarding `GET /paid`), funds the
payer for `N` payments, prints one JSON line (`paid_url`, `chain_id`, `network`, `token`,
`payer_key`) and stops when its stdin closes. The key is a throwaway made for this run.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _ready import serve_until_stdin_closes  # noqa: E402

from tests.x402_foundation import DEFAULT_PRICE_ATOMIC, foundation_stack  # noqa: E402


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--payments", type=int, default=1000)
    args = parser.parse_args()
    async with foundation_stack(
        payer_funding_atomic=(args.payments + 10) * DEFAULT_PRICE_ATOMIC
    ) as stack:
        info = {
            "paid_url": stack.paid_url,
            "chain_id": stack.chain_id,
            "network": stack.network,
            "token": stack.token,
            "payer_key": stack.payer_key,
            "price_atomic": stack.price_atomic,
        }
        await serve_until_stdin_closes(info)


if __name__ == "__main__":
    asyncio.run(main())
