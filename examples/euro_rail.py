"""Pay for a resource on the euro rail, against the built-in sandbox.

    python examples/euro_rail.py

Against a real merchant, drop the sandbox and use `PaymentOptions.from_env()`.
"""

import asyncio
from decimal import Decimal

import httpx

from x402_client import PaymentIntent, X402Error, with_eur_payment
from x402_eur_sandbox import Sandbox


def approve(intent: PaymentIntent) -> bool:
    print(
        f"about to pay {intent.amount} {intent.currency} to {intent.pay_to} for {intent.resource}"
    )
    return intent.amount <= Decimal("0.50")


async def main() -> None:
    async with Sandbox() as sandbox:
        options = sandbox.payment_config(on_before_payment=approve)
        async with with_eur_payment(httpx.AsyncClient(), options) as client:
            response = await client.get(sandbox.url("/weather"))
            print(response.status_code, response.json())
            receipt = response.extensions["x402_payment"]
            print(
                f"paid {receipt.amount} {receipt.currency}, request {receipt.payment_request_code}"
            )
            try:
                await client.get(sandbox.url("/premium"))  # 2.00 EUR: above the cap
            except X402Error as exc:
                print(f"refused: {type(exc).__name__}: {exc}")
        print(f"payer balance: {sandbox.balance(sandbox.payer)} EURO")


if __name__ == "__main__":
    asyncio.run(main())
