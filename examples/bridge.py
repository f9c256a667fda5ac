"""Pay a chain-A resource through the bridge (path C), on a local sandbox.

Starts the sandbox with chain A: a merchant whose `/weather` costs 0.10 EURQ on
`ledgera:mainnet`, and a payer with only a managed EURO account. The bridge converts the
EURO to EURQ and sends it on chain A; the client polls until the chain transaction id
appears, showing a live progress display, then proves the payment.

    python examples/bridge.py               # the bridge settles after 3 s
    python examples/bridge.py --realistic   # ... after 60 s, as in real life (1 to 3 min)
    python examples/bridge.py --delay 10

Needs the `sandbox` extra; `rich` (the `cli` extra) for the live display.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from decimal import Decimal

import httpx

from x402_client import PaymentOutcomeUnknown, payments, with_eur_payment
from x402_client.progress import bridge_progress_display
from x402_eur_sandbox import Price, Sandbox

PRICES = {
    "/weather": Price(Decimal("0.10"), "Weather, paid in EURQ on chain A", rails=("ledgera",))
}
EURQ = "2768422954"


def eurq(atomic: int) -> str:
    """An EURQ amount in atomic units (6 decimals), as a person reads it."""
    return f"{Decimal(atomic).scaleb(-6):.2f}"


async def main(delay: float) -> None:
    on_progress, display = bridge_progress_display()
    async with Sandbox(chain_a=True, bridge_delay=delay, prices=PRICES) as sandbox:
        chain = sandbox.chain_a
        before = chain.asset_balance(chain.merchant_address, EURQ)
        options = sandbox.payment_config(on_progress=on_progress)
        print(f"merchant {sandbox.merchant_url}, bridge settles after {delay:g} s")
        async with with_eur_payment(httpx.AsyncClient(), options) as client:
            try:
                with display:
                    response = await client.get(sandbox.url("/weather"))
            except PaymentOutcomeUnknown as exc:
                # The deadline passed: the EURO was paid. Prove that payment; never pay twice.
                print(f"still no chain transaction for {exc.transaction_code}; resuming")
                with display:
                    recovery = await payments(client).recover(exc)
                    assert recovery.response is not None
                    response = recovery.response
        receipt = response.extensions["x402_payment"]
        print(f"HTTP {response.status_code}: {response.json()}")
        print(
            f"paid {receipt.amount:.2f} {receipt.currency} ({receipt.rail}) "
            f"on {receipt.network} to {receipt.pay_to}"
        )
        print(f"transaction {receipt.transaction_code}, on chain {receipt.blockchain_tx_id}")
        print(f"payer EURO balance: {sandbox.balance(sandbox.payer):.2f}")
        after = chain.asset_balance(chain.merchant_address, EURQ)
        print(f"merchant EURQ on chain A: {eurq(before)} -> {eurq(after)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--realistic", action="store_true", help="a 60 s bridge, as in real life")
    parser.add_argument("--delay", type=float, default=None, help="bridge delay in seconds")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    seconds = args.delay if args.delay is not None else 60.0 if args.realistic else 3.0
    asyncio.run(main(seconds))
