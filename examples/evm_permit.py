"""Pay an EVM-priced resource with an EIP-2612 permit, on a local sandbox.

Starts anvil chains 1 and 137 with EURQ/USDQ, the on-chain facilitator and a merchant
whose `/weather` costs 0.10 EURQ on eip155:137; the payer holds tokens and no gas coin.

    python examples/evm_permit.py

Needs the `sandbox` extra and anvil (`npm ci` in the project root).
"""

from __future__ import annotations

import asyncio
from decimal import Decimal

import httpx

from x402_client import with_eur_payment
from x402_eur_sandbox import Price, Sandbox

PRICES = {"/weather": Price(Decimal("0.10"), "Weather, paid on Polygon", rails=("eip155:137",))}


def eurq(atomic: int) -> str:
    """An EURQ amount in atomic units (6 decimals), as a person reads it."""
    return f"{Decimal(atomic).scaleb(-6):.2f}"


async def main() -> None:
    async with Sandbox(evm=True, prices=PRICES) as sandbox:
        evm = sandbox.evm
        before = await evm.token_balance(137, "EURQ", evm.payer_address)
        async with with_eur_payment(httpx.AsyncClient(), sandbox.payment_config()) as client:
            response = await client.get(sandbox.url("/weather"))
        receipt = response.extensions["x402_payment"]
        after = await evm.token_balance(137, "EURQ", evm.payer_address)
        print(f"HTTP {response.status_code}: {response.json()}")
        print(
            f"paid {receipt.amount:.2f} {receipt.currency} ({receipt.rail}) "
            f"on {receipt.network} to {receipt.pay_to}"
        )
        print(f"payer {receipt.payer}: {eurq(before)} -> {eurq(after)} EURQ")
        print(f"settlement tx {receipt.tx_hash}")
        print(f"payer gas coin: {await evm.native_balance(137, evm.payer_address)} wei")


if __name__ == "__main__":
    asyncio.run(main())
