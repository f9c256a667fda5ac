"""Solana entries the client refuses before anything is signed: scripted merchants on
`httpx.MockTransport`, and a wallet whose RPC is never reached (every refusal here is
decided from the entry, the options, the caps and the budgets alone).

Each refusal is typed, says `money_moved=False`, and no request to the merchant carries a
payment."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import httpx
import pytest
from solders.keypair import Keypair

from x402_client import (
    Asset,
    Budget,
    PaymentOptions,
    PaymentTransport,
    SvmOptions,
    X402Error,
)
from x402_client._protocol.solana_chain import SOLANA_DEVNET

pytestmark = pytest.mark.anyio

PAYER = Keypair.from_seed(bytes(range(32)))
MINT = str(Keypair.from_seed(b"m" * 32).pubkey())
PAY_TO = str(Keypair.from_seed(b"p" * 32).pubkey())
FEE_PAYER = str(Keypair.from_seed(b"f" * 32).pubkey())
#: Never reached: every entry below is refused before the rail reads the chain.
RPC_URL = "http://127.0.0.1:9/never"


def _entry(**changes: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "scheme": "exact",
        "network": SOLANA_DEVNET,
        "asset": MINT,
        "amount": "50000",
        "payTo": PAY_TO,
        "maxTimeoutSeconds": 60,
        "extra": {"feePayer": FEE_PAYER},
    }
    extra = changes.pop("extra", None)
    entry.update(changes)
    if extra is not None:
        entry["extra"] = {**entry["extra"], **extra}
    return entry


def _merchant(entry: dict[str, Any], seen: list[httpx.Request]) -> httpx.MockTransport:
    import base64
    import json

    required = {
        "x402Version": 2,
        "error": "payment required",
        "resource": {"url": "http://merchant.test/paid", "description": "", "mimeType": ""},
        "accepts": [entry],
    }
    header = base64.b64encode(json.dumps(required).encode()).decode()

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if "payment-signature" in request.headers:
            return httpx.Response(200, json={"served": True})
        return httpx.Response(402, headers={"PAYMENT-REQUIRED": header}, json={})

    return httpx.MockTransport(handler)


def _options(**more: Any) -> PaymentOptions:
    svm = more.pop("svm", {})
    return PaymentOptions(
        svm=SvmOptions(secret_key=str(PAYER), rpc_url=RPC_URL, **svm),
        assets=[Asset(chain_id=SOLANA_DEVNET, address=MINT, symbol="sEURC", currency="EUR")],
        **more,
    )


async def _refused(entry: dict[str, Any], options: PaymentOptions) -> X402Error:
    seen: list[httpx.Request] = []
    transport = PaymentTransport(_merchant(entry, seen), options)
    async with httpx.AsyncClient(transport=transport) as client:
        with pytest.raises(X402Error) as caught:
            await client.get("http://merchant.test/paid")
    assert caught.value.money_moved is False
    assert len(seen) == 1  # the 402 only: no payment was ever sent
    assert "payment-signature" not in seen[0].headers
    return caught.value


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        (_entry(extra={"feePayer": str(PAYER.pubkey())}), "its fee payer is the payer itself"),
        (_entry(extra={"feePayer": MINT}), "its fee payer is the mint"),
        (_entry(extra={"feePayer": None}), "without extra.feePayer"),
        (_entry(asset=str(Keypair.from_seed(b"u" * 32).pubkey())), "unknown mint"),
        (_entry(extra={"memo": "x" * 257}), "its extra.memo is over 256 bytes"),
        (_entry(payTo="0x" + "ab" * 20), "its payTo is not a Solana address"),
    ],
    ids=["fee payer is the payer", "fee payer is the mint", "no fee payer", "unknown mint",
         "memo too long", "payTo not Solana"],
)  # fmt: skip
async def test_an_entry_the_rail_refuses_is_never_signed(entry, reason) -> None:
    error = await _refused(entry, _options())
    assert reason in str(error), str(error)


async def test_a_compute_price_over_the_schemes_cap_is_refused() -> None:
    error = await _refused(_entry(), _options(svm={"compute_unit_price": 5_000_001}))
    assert "over the scheme's cap of 5000000 microlamports" in str(error), str(error)


async def test_an_amount_over_the_cap_is_refused() -> None:
    error = await _refused(_entry(amount="2000000"), _options())  # 2.00 sEURC, cap 1.00 EUR
    assert "2.00" in str(error), str(error)


async def test_an_amount_over_the_budget_is_refused() -> None:
    error = await _refused(_entry(), _options(budgets=[Budget("0.01")]))
    assert "budget" in str(error).lower(), str(error)


async def test_a_dollar_mint_counts_against_the_dollar_cap() -> None:
    options = PaymentOptions(
        svm=SvmOptions(secret_key=str(PAYER), rpc_url=RPC_URL),
        assets=[Asset(chain_id="solana-devnet", address=MINT, symbol="sUSDC", currency="USD")],
        max_amount_per_payment={"EUR": "1.00", "USD": Decimal("0.01")},
    )
    error = await _refused(_entry(), options)
    assert "USD" in str(error), str(error)
