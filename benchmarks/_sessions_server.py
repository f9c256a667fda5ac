"""The sandbox's two EVM merchants on one anvil chain, in their own process.

`python benchmarks/_sessions_server.py [--payments N]` starts `Sandbox(batch_settlement=True)`:
the standard x402 merchant (`exact` EIP-3009 payments of `GET /weather`, settled on chain
one by one) and the `batch-settlement` merchant (`GET /stream`, one deposit into the
escrow then a voucher per request, claimed and settled in batches), both on the same
chain and token. It funds the payer for `N` payments of each, prints one JSON line
(`exact_url`, `session_url`, `claim_url`, `rpc_url`, `chain_id`, `token`, `payer_key`,
the prices) and stops when its stdin closes. The key is a throwaway made for this run.
"""

from __future__ import annotations

import argparse
import asyncio
from decimal import Decimal

from _ready import serve_until_stdin_closes

from x402_eur_sandbox import Sandbox


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--payments", type=int, default=1000)
    args = parser.parse_args()
    async with Sandbox(batch_settlement=True) as sandbox:
        standard, batch = sandbox.standard, sandbox.batch.merchant
        exact_price = standard.prices["/weather"].amount
        session_price = batch.prices["/stream"].amount
        # Beyond the standard payer's own funding: every payment of both kinds, and a
        # session's deposit paid ahead of its vouchers.
        await standard.fund(
            standard.payer_address, (args.payments + 50) * (exact_price + session_price)
        )
        info = {
            "exact_url": standard.resource_url("/weather"),
            "session_url": batch.resource_url("/stream"),
            "claim_url": batch.url + "/admin/claim-and-settle",
            "rpc_url": standard.rpc_url,
            "chain_id": standard.chain_id,
            "token": standard.token,
            "payer_key": standard.payer_key,
            "exact_price": str(Decimal(exact_price)),
            "session_price": str(Decimal(session_price)),
        }
        await serve_until_stdin_closes(info)


if __name__ == "__main__":
    asyncio.run(main())
