"""Sign in instead of paying again, against the x402 foundation's own `sign-in-with-x` code:
its merchant (payment middleware, resource-server extension, request and settle hooks) in an
environment of its own (tests/siwx_foundation.py), settling EIP-3009 transfers through the
foundation's facilitator on anvil (tests/x402_foundation.py).

The first request pays (the sign-in it tries first is not let in: nothing was paid yet); the
second, from the same wallet, signs in and pays nothing. The chain's balances, the ledger and
the budget show one payment in all. The messages and headers the client writes are the
foundation's, byte for byte."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.siwx_foundation import (
    foundation_sign_ins,
    siwx_foundation_merchant,
    siwx_foundation_python,
)
from tests.x402_foundation import FoundationStack, foundation_stack
from x402_client import Asset, Budget, EvmOptions, PaymentOptions, payments, with_eur_payment
from x402_client._protocol.sign_in import (
    personal_sign_payload,
    read_sign_in,
    sign_in_header,
    siwe_message,
)
from x402_client._rails._evm_signing import DigestSigner, keccak256

pytestmark = pytest.mark.anyio

PRICE = Decimal("0.01")


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def python() -> Path:
    return siwx_foundation_python()


@pytest.fixture(scope="module")
async def stack(anyio_backend: str) -> AsyncIterator[FoundationStack]:
    async with foundation_stack() as started:
        yield started


def _options(stack: FoundationStack, **more: Any) -> PaymentOptions:
    token = Asset(chain_id=stack.chain_id, address=stack.token, symbol="EURC", currency="EUR")
    return PaymentOptions(
        evm=EvmOptions(private_key=stack.payer_key),
        assets=[token],
        budgets=[Budget("1.00")],
        **more,
    )


async def test_a_wallet_that_paid_signs_in_and_pays_nothing(stack, python) -> None:
    payer_before = await stack.balance(stack.payer_address)
    merchant_before = await stack.balance(stack.merchant_address)
    options = _options(stack)
    async with (
        siwx_foundation_merchant(stack, python) as origin,
        with_eur_payment(httpx.AsyncClient(timeout=60), options) as client,
    ):
        first = await client.get(f"{origin}/paid")
        assert first.status_code == 200, first.text
        assert first.extensions["x402_payment"].amount == PRICE

        second = await client.get(f"{origin}/paid")
        assert second.status_code == 200, second.text
        assert second.json() == {"paid": True}
        assert "x402_payment" not in second.extensions  # signed in: nothing paid
        events = (await client.get(f"{origin}/events")).json()

    # one payment in all: on the chain, in the ledger, against the budget
    assert await stack.balance(stack.payer_address) == payer_before - stack.price_atomic
    assert await stack.balance(stack.merchant_address) == merchant_before + stack.price_atomic
    (entry,) = payments(options).ledger.entries()
    assert entry.amount == PRICE
    (status,) = await payments(options).budgets()
    assert status.spent == PRICE
    # the foundation's hooks: the first sign-in found no payment, the settle recorded it,
    # the second sign-in was let in
    kinds = [event["type"] for event in events]
    assert kinds == ["payment_recorded", "access_granted"], events
    assert events[-1]["address"].lower() == stack.payer_address.lower()


async def test_with_sign_in_off_the_same_wallet_pays_again(stack, python) -> None:
    merchant_before = await stack.balance(stack.merchant_address)
    async with siwx_foundation_merchant(stack, python) as origin:
        signing = _options(stack)
        async with with_eur_payment(httpx.AsyncClient(timeout=60), signing) as client:
            assert (await client.get(f"{origin}/paid")).status_code == 200
        off = _options(stack, sign_in_with_x=False)
        async with with_eur_payment(httpx.AsyncClient(timeout=60), off) as client:
            again = await client.get(f"{origin}/paid")
    assert again.extensions["x402_payment"].amount == PRICE
    assert await stack.balance(stack.merchant_address) == merchant_before + 2 * stack.price_atomic


KEY = "0x" + "42" * 32
CASES: list[tuple[str, dict[str, Any]]] = [
    # the foundation's Python merchant: a domain with its port, microseconds
    (
        "http://127.0.0.1:8000/paid?city=x",
        {
            "domain": "127.0.0.1:8000",
            "uri": "http://127.0.0.1:8000/paid?city=x",
            "issuedAt": "{now}",
            "expirationTime": "{soon}",
            "statement": "Sign in to the paid resource",
            "resources": ["http://127.0.0.1:8000/paid?city=x"],
        },
    ),
    # no statement, no expiry, no resources
    ("https://api.example.com/data", {"domain": "api.example.com", "issuedAt": "{now}"}),
    # every optional field
    (
        "https://api.example.com/data",
        {
            "domain": "api.example.com",
            "issuedAt": "{now}",
            "expirationTime": "{soon}",
            "notBefore": "{now}",
            "requestId": "req-7",
            "statement": "Sign in",
            "resources": ["https://api.example.com/data", "https://api.example.com/more"],
            "signatureScheme": "eip191",
        },
    ),
]


async def test_the_messages_and_headers_are_the_foundations_byte_for_byte(python) -> None:
    now = datetime.now(timezone.utc)
    times = {
        "{now}": now.isoformat().replace("+00:00", "Z"),
        "{soon}": (now + timedelta(minutes=5)).isoformat(timespec="milliseconds"),
    }
    signer = DigestSigner(bytes.fromhex(KEY[2:]))
    ours, cases = [], []
    for url, shape in CASES:
        info = {"uri": url, "version": "1", "nonce": secrets.token_hex(16), **shape}
        info = {k: times.get(v, v) if isinstance(v, str) else v for k, v in info.items()}
        chains = [{"chainId": "eip155:84532", "type": "eip191"}]
        extensions = {"sign-in-with-x": {"info": info, "supportedChains": chains}}
        challenge = read_sign_in(extensions, url=url, chains={84532}, now=now)
        assert challenge is not None
        message = siwe_message(challenge, signer.address)
        signature = "0x" + signer.sign(keccak256(personal_sign_payload(message))).hex()
        ours.append(
            {"message": message, "header": sign_in_header(challenge, signer.address, signature)}
        )
        cases.append({"info": {**info, **chains[0]}, "key": KEY, "url": url})
    assert ours == await foundation_sign_ins(python, cases)
