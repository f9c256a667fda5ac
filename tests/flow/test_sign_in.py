"""Signing in instead of paying again (the x402 `sign-in-with-x` extension): a scripted v2
merchant on `httpx.MockTransport` that offers a sign-in beside an EIP-3009 `exact` entry,
reads and checks a sign-in with the foundation's own code (`parse_siwx_header`,
`validate_siwx_message`), recovers its signer with eth-account, and lets in the wallets
that paid it. (The foundation's signature check needs an environment of its own:
tests/integration/test_sign_in_foundation.py.)

A wallet that paid signs in and pays nothing (no receipt, no ledger entry, nothing counted
against a budget); one the merchant does not let in pays once, under the usual limits; a
challenge the client must not sign is not signed, and the payment goes ahead as usual."""

from __future__ import annotations

import base64
import json
import logging
import secrets
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import httpx
import pytest
from eth_account import Account
from eth_account.messages import encode_defunct
from x402.extensions.sign_in_with_x import parse_siwx_header, validate_siwx_message

from x402_client import (
    AmountLimitExceeded,
    Asset,
    Budget,
    EvmOptions,
    PaymentOptions,
    PaymentReceipt,
    payments,
    with_eur_payment,
)
from x402_client._protocol.sign_in import read_sign_in, siwe_message

pytestmark = pytest.mark.anyio

EVM_KEY = "0x" + "42" * 32
TOKEN = "0x5FbDB2315678afecb367f032d93F642f64180aa3"
ORIGIN = "http://merchant.test"
PAID = f"{ORIGIN}/paid"


def _b64(value: Any) -> str:
    return base64.b64encode(json.dumps(value).encode()).decode()


def _time(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


class SignInMerchant:
    """A v2 merchant selling `/paid` for 0.01 sEURC that offers a sign-in (its `info`
    changed by `hostile`, its chains by `chains`) and serves a sign-in from a wallet that
    paid. Every request it saw is in `seen` (as headers)."""

    def __init__(self, *, hostile: dict[str, Any] | None = None, chains: Any = None) -> None:
        self.paid: set[str] = set()
        self.seen: list[httpx.Headers] = []
        self.hostile = hostile or {}
        self.chains = chains or [{"chainId": "eip155:84532", "type": "eip191"}]
        self.transport = httpx.MockTransport(self.handle)

    def challenge(self, url: str) -> httpx.Response:
        now = datetime.now(timezone.utc)
        info = {
            "domain": "merchant.test",
            "uri": url,
            "version": "1",
            "nonce": secrets.token_hex(16),
            "issuedAt": _time(now),
            "expirationTime": _time(now + timedelta(minutes=5)),
            "statement": "Sign in to the paid resource",
            "resources": [url],
            **self.hostile,
        }
        required = {
            "x402Version": 2,
            "error": "Payment required",
            "resource": {"url": url},
            "accepts": [
                {
                    "scheme": "exact",
                    "network": "eip155:84532",
                    "amount": "10000",
                    "asset": TOKEN,
                    "payTo": "0x" + "ab" * 20,
                    "maxTimeoutSeconds": 300,
                    "extra": {"name": "Sandbox EURC", "version": "2"},
                }
            ],
            "extensions": {"sign-in-with-x": {"info": info, "supportedChains": self.chains}},
        }
        return httpx.Response(402, headers={"PAYMENT-REQUIRED": _b64(required)}, json={})

    async def handle(self, request: httpx.Request) -> httpx.Response:
        valid = True
        if "sign-in-with-x" in request.headers:
            payload = parse_siwx_header(request.headers["sign-in-with-x"])
            valid = (await validate_siwx_message(payload, ORIGIN)).is_valid
        return self.answer(request, valid)

    def answer(self, request: httpx.Request, valid: bool = True) -> httpx.Response:
        """The answer to `request` (a sign-in that is `valid` for this origin's rules)."""
        self.seen.append(request.headers.copy())
        url = str(request.url)
        if "sign-in-with-x" in request.headers:
            payload = parse_siwx_header(request.headers["sign-in-with-x"])
            if valid and self.signer(payload) in self.paid:
                return httpx.Response(200, json={"signed_in": payload.address})
            return self.challenge(url)
        if "payment-signature" in request.headers:
            proof = json.loads(base64.b64decode(request.headers["payment-signature"]))
            payer = proof["payload"]["authorization"]["from"]
            self.paid.add(payer.lower())
            settled = {"success": True, "transaction": "0x" + "cd" * 32, "payer": payer}
            return httpx.Response(200, headers={"PAYMENT-RESPONSE": _b64(settled)}, json={})
        return self.challenge(url)

    @staticmethod
    def signer(payload: Any) -> str:
        """Who signed the sign-in `payload`: its message rebuilt, the signer recovered."""
        info = payload.model_dump(by_alias=True, exclude_none=True)
        chains = [{"chainId": payload.chain_id, "type": payload.type}]
        now = datetime.now(timezone.utc)
        extensions = {"sign-in-with-x": {"info": info, "supportedChains": chains}}
        challenge = read_sign_in(extensions, url=payload.uri, chains=(84532,), now=now)
        assert challenge is not None
        message = siwe_message(challenge, payload.address)
        signer = Account.recover_message(encode_defunct(text=message), signature=payload.signature)
        assert signer == payload.address
        return str(signer).lower()

    def sign_ins(self) -> list[str]:
        return [h["sign-in-with-x"] for h in self.seen if "sign-in-with-x" in h]

    def payments(self) -> list[str]:
        return [h["payment-signature"] for h in self.seen if "payment-signature" in h]


def _options(**more: Any) -> PaymentOptions:
    return PaymentOptions(
        evm=EvmOptions(private_key=EVM_KEY),
        assets=[Asset(chain_id=84532, address=TOKEN, symbol="sEURC", currency="EUR")],
        budgets=[Budget("1.00")],
        **more,
    )


async def _spent(options: PaymentOptions) -> Decimal:
    (status,) = await payments(options).budgets()
    return status.spent


async def test_a_wallet_that_paid_signs_in_and_pays_nothing(caplog) -> None:
    caplog.set_level(logging.DEBUG)
    merchant = SignInMerchant()
    asked: list[Any] = []
    paid: list[PaymentReceipt] = []
    options = _options(on_before_payment=lambda i: asked.append(i) or True, on_payment=paid.append)
    async with httpx.AsyncClient(transport=merchant.transport) as plain:
        client = with_eur_payment(plain, options)
        first = await client.get(PAID)
        assert first.status_code == 200 and first.extensions["x402_payment"].payments == 1
        # the first sign-in was not let in (nothing paid yet): then one payment
        assert (len(merchant.sign_ins()), len(merchant.payments())) == (1, 1)

        second = await client.get(PAID)
    assert second.status_code == 200, second.text
    assert second.json()["signed_in"].lower() in merchant.paid
    assert "x402_payment" not in second.extensions  # a sign-in is no payment
    assert (len(merchant.sign_ins()), len(merchant.payments())) == (2, 1)
    assert "payment-signature" not in merchant.seen[-1]
    assert len(payments(options).ledger.entries()) == 1
    assert await _spent(options) == Decimal("0.01")
    assert (len(asked), len(paid)) == (1, 1)  # neither hook heard of the sign-in
    # the signed message is a credential: in no log record, not on the request kept
    for header in merchant.sign_ins():
        assert header not in caplog.text
    assert "sign-in-with-x" not in second.request.headers


def test_a_sync_client_signs_in_the_same_way() -> None:
    merchant = SignInMerchant()
    options = _options()
    with with_eur_payment(
        httpx.Client(transport=httpx.MockTransport(merchant.answer)), options
    ) as client:
        assert client.get(PAID).extensions["x402_payment"].payments == 1
        second = client.get(PAID)
    assert second.status_code == 200 and "x402_payment" not in second.extensions
    assert (len(merchant.sign_ins()), len(merchant.payments())) == (2, 1)
    assert len(payments(options).ledger.entries()) == 1


async def test_a_refused_sign_in_pays_exactly_once() -> None:
    merchant = SignInMerchant()
    options = _options()
    async with httpx.AsyncClient(transport=merchant.transport) as plain:
        response = await with_eur_payment(plain, options).get(PAID)
    assert response.status_code == 200
    receipt = response.extensions["x402_payment"]
    assert (receipt.payments, receipt.amount) == (1, Decimal("0.01"))
    # the plain request, the sign-in (402: not paid yet), the payment; nothing more
    kinds = [
        "sign-in" if "sign-in-with-x" in h else "payment" if "payment-signature" in h else "plain"
        for h in merchant.seen
    ]
    assert kinds == ["plain", "sign-in", "payment"]
    assert "sign-in-with-x" not in merchant.seen[-1]  # the paid retry carries no sign-in
    assert len(payments(options).ledger.entries()) == 1
    assert await _spent(options) == Decimal("0.01")


async def test_after_a_refused_sign_in_the_usual_limits_hold() -> None:
    merchant = SignInMerchant()
    options = _options(max_amount_per_payment="0.005")
    async with httpx.AsyncClient(transport=merchant.transport) as plain:
        with pytest.raises(AmountLimitExceeded) as caught:
            await with_eur_payment(plain, options).get(PAID)
    assert caught.value.money_moved is False
    assert (len(merchant.sign_ins()), merchant.payments()) == (1, [])
    assert payments(options).ledger.entries() == []


@pytest.mark.parametrize(
    ("hostile", "chains"),
    [
        ({"domain": "bank.example"}, None),
        ({"uri": "https://bank.example/login", "resources": None}, None),
        ({"resources": ["https://bank.example/login"]}, None),
        (None, [{"chainId": "eip155:999999", "type": "eip191"}]),
        ({"expirationTime": "2020-01-01T00:00:00Z"}, None),
        ({"expirationTime": "2999-01-01T00:00:00Z"}, None),
        ({"statement": "x" * 5000}, None),
    ],
    ids=["domain", "uri", "resources", "chain", "expired", "long-lived", "statement"],
)
async def test_a_hostile_challenge_is_not_signed_and_the_payment_goes_ahead(
    hostile: dict[str, Any] | None, chains: Any
) -> None:
    merchant = SignInMerchant(hostile=hostile, chains=chains)
    options = _options()
    async with httpx.AsyncClient(transport=merchant.transport) as plain:
        response = await with_eur_payment(plain, options).get(PAID)
    assert response.status_code == 200
    assert merchant.sign_ins() == []  # nothing signed
    assert len(merchant.payments()) == 1
    assert response.extensions["x402_payment"].payments == 1


async def test_turned_off_the_client_never_signs_in() -> None:
    merchant = SignInMerchant()
    options = _options(sign_in_with_x=False)
    async with httpx.AsyncClient(transport=merchant.transport) as plain:
        client = with_eur_payment(plain, options)
        for _ in range(2):
            assert (await client.get(PAID)).status_code == 200
    assert merchant.sign_ins() == []
    assert len(merchant.payments()) == 2
    assert await _spent(options) == Decimal("0.02")


async def test_a_sign_in_answered_otherwise_is_the_answer_and_nothing_is_paid() -> None:
    merchant = SignInMerchant()
    handle = merchant.handle

    async def forbidding(request: httpx.Request) -> httpx.Response:
        if "sign-in-with-x" in request.headers:
            merchant.seen.append(request.headers.copy())
            return httpx.Response(403, json={"error": "nonce reused"})
        return await handle(request)

    options = _options()
    async with httpx.AsyncClient(transport=httpx.MockTransport(forbidding)) as plain:
        response = await with_eur_payment(plain, options).get(PAID)
    assert response.status_code == 403
    assert "x402_payment" not in response.extensions
    assert (len(merchant.sign_ins()), merchant.payments()) == (1, [])
    assert await _spent(options) == 0


def test_the_option_reads_the_environment() -> None:
    from x402_client import ConfigurationError

    env = {"X402_EUR_EVM_PRIVATE_KEY": EVM_KEY}
    assert PaymentOptions.from_env(env).sign_in_with_x is True
    for word, expected in (("0", False), ("off", False), ("yes", True), ("TRUE", True)):
        given = {**env, "X402_EUR_SIGN_IN_WITH_X": word}
        assert PaymentOptions.from_env(given).sign_in_with_x is expected
    with pytest.raises(ConfigurationError, match="X402_EUR_SIGN_IN_WITH_X: write 1 or 0"):
        PaymentOptions.from_env({**env, "X402_EUR_SIGN_IN_WITH_X": "maybe"})


async def test_a_sign_in_that_fails_on_its_way_says_nothing_was_paid() -> None:
    from x402_client import X402Error

    merchant = SignInMerchant()

    async def dropping(request: httpx.Request) -> httpx.Response:
        if "sign-in-with-x" in request.headers:
            merchant.seen.append(request.headers.copy())
            raise httpx.ReadError("connection reset", request=request)
        return await merchant.handle(request)

    options = _options()
    async with httpx.AsyncClient(transport=httpx.MockTransport(dropping)) as plain:
        with pytest.raises(X402Error) as caught:
            await with_eur_payment(plain, options).get(PAID)
    error = caught.value
    assert error.money_moved is False
    assert "signing in at http://merchant.test/paid failed (ReadError" in str(error)
    assert "nothing was paid" in str(error)
    assert "sign-in-with-x" not in error.request.headers  # the credential is not kept
    assert merchant.payments() == [] and payments(options).ledger.entries() == []
