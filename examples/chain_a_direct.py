"""Pay a chain-A resource from your own chain-A wallet (path B), on a local sandbox.

Starts the sandbox with chain A: a merchant whose `/weather` costs 0.10 EURQ on
`ledgera:mainnet`, its on-chain facilitator, a chain-A node, and a payer wallet holding
EURQ and USDQ. The client signs one asset transfer; the merchant's facilitator verifies
and submits it; no managed account and no bridge wait. Then the same resource again with
`prefer=["bridge"]`, paid through the managed account instead.

    python examples/chain_a_direct.py

Needs the `chain-a` extra and the sandbox (`pip install ./sandbox`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from decimal import Decimal

import httpx

from x402_client import with_eur_payment
from x402_eur_sandbox import Price, Sandbox

PRICES = {
    "/weather": Price(Decimal("0.10"), "Weather, paid in EURQ on chain A", rails=("ledgera",))
}
EURQ = "2768422954"


def eurq(atomic: int) -> str:
    """An EURQ amount in atomic units (6 decimals), as a person reads it."""
    return f"{Decimal(atomic).scaleb(-6):.2f}"


async def main() -> None:
    async with Sandbox(chain_a=True, bridge_delay=1.0, prices=PRICES) as sandbox:
        chain = sandbox.chain_a
        wallet = chain.payer_wallet.address
        merchant_before = chain.asset_balance(chain.merchant_address, EURQ)
        wallet_before = chain.asset_balance(wallet, EURQ)
        options = sandbox.payment_config(chain_a=chain.chain_a_config())
        print(f"merchant {sandbox.merchant_url}; paying from chain-A wallet {wallet}")
        async with with_eur_payment(httpx.AsyncClient(), options) as client:
            started = time.perf_counter()
            response = await client.get(sandbox.url("/weather"))
            elapsed = time.perf_counter() - started
        receipt = response.extensions["x402_payment"]
        print(f"HTTP {response.status_code} in {elapsed * 1000:.0f} ms: {response.json()}")
        print(
            f"paid {receipt.amount:.2f} {receipt.currency} ({receipt.rail}) on "
            f"{receipt.network} to {receipt.pay_to}; transaction {receipt.blockchain_tx_id}"
        )
        wallet_after = chain.asset_balance(wallet, EURQ)
        merchant_after = chain.asset_balance(chain.merchant_address, EURQ)
        print(f"wallet EURQ:   {eurq(wallet_before)} -> {eurq(wallet_after)}")
        print(f"merchant EURQ: {eurq(merchant_before)} -> {eurq(merchant_after)}")

        bridged = sandbox.payment_config(chain_a=chain.chain_a_config(), prefer=["bridge"])
        async with with_eur_payment(httpx.AsyncClient(), bridged) as client:
            response = await client.get(sandbox.url("/weather"))
        receipt = response.extensions["x402_payment"]
        print(
            f"with prefer=['bridge']: paid by the {receipt.rail} "
            f"(transaction {receipt.transaction_code}); payer EURO balance "
            f"{sandbox.balance(sandbox.payer):.2f}"
        )


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    asyncio.run(main())
