"""The sandbox's standard merchant offers a Permit2 route (`/permit2`), verified and settled by
the sandbox's own code (`x402_eur_sandbox._standard`, `_permit2`) through Permit2 and the exact
proxy at their canonical addresses; our client pays it, and the sandbox refuses what the
foundation's facilitator refuses, with the same reasons, moving nothing."""

from __future__ import annotations

import base64
import dataclasses
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from eth_account import Account
from web3 import Web3

from tests.sandboxes import asset_of
from x402_client import (
    EvmOptions,
    NoSatisfiableOption,
    PaymentOptions,
    payments,
    with_eur_payment,
)
from x402_client._rails._evm_signing import DigestSigner
from x402_client._rails.permit2 import (
    new_permit2_authorization,
    permit2_digest,
    permit2_payload,
)
from x402_eur_sandbox._permit2 import (
    EXACT_PERMIT2_PROXY_ADDRESS,
    PERMIT2_ADDRESS,
    Permit2Transfer,
    load_proxy_artifact,
    settle_call,
)
from x402_eur_sandbox._standard import StandardMerchant, encode_header

pytestmark = pytest.mark.anyio

CHAIN_ID = 84532
PATH = "/permit2"


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def merchant(anyio_backend: str) -> AsyncIterator[StandardMerchant]:
    async with StandardMerchant(chain_id=CHAIN_ID) as started:
        yield started


def _b64_json(value: str) -> Any:
    return json.loads(base64.b64decode(value, validate=True))


async def _get(url: str, headers: dict[str, str] | None = None) -> httpx.Response:
    async with httpx.AsyncClient(timeout=30, trust_env=False) as http:
        return await http.get(url, headers=headers)


async def _rpc(merchant: StandardMerchant, method: str, *params: Any) -> Any:
    assert merchant.rpc_url is not None
    async with httpx.AsyncClient(trust_env=False) as http:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": list(params)}
        return (await http.post(merchant.rpc_url, json=body)).json()["result"]


def _options(merchant: StandardMerchant, key: str | None = None) -> PaymentOptions:
    return PaymentOptions(
        evm=EvmOptions(
            private_key=key or merchant.payer_key,
            rpc_urls={CHAIN_ID: str(merchant.rpc_url)},
        ),
        assets=[asset_of(merchant)],
    )


# --- paid by the client --------------------------------------------------------------------


async def test_the_402_offers_permit2_and_the_client_pays_it(merchant):
    required = _b64_json((await _get(merchant.resource_url(PATH))).headers["payment-required"])
    [accept] = required["accepts"]
    assert accept["extra"] == {"assetTransferMethod": "permit2"}
    payer, pay_to = merchant.payer_address, merchant.pay_to
    before = (await merchant.token_balance(payer), await merchant.token_balance(pay_to))
    config = merchant.evm_config()
    assert config["rpc_urls"] == {CHAIN_ID: merchant.rpc_url}
    options = PaymentOptions(evm=EvmOptions(**config), assets=[asset_of(merchant)])
    async with with_eur_payment(httpx.AsyncClient(timeout=30), options) as client:
        response = await client.get(merchant.resource_url(PATH))
    assert response.status_code == 200, response.text
    receipt = response.extensions["x402_payment"]
    assert receipt.rail == "permit2"
    price = merchant.price_atomic(PATH)
    after = (await merchant.token_balance(payer), await merchant.token_balance(pay_to))
    assert after == (before[0] - price, before[1] + price)
    # The payer's approval was made at start with lent gas: it still holds no gas coin.
    assert int(await _rpc(merchant, "eth_getBalance", payer, "latest"), 16) == 0
    tx = await _rpc(merchant, "eth_getTransactionByHash", merchant.settlements[-1]["transaction"])
    assert tx["to"].lower() == EXACT_PERMIT2_PROXY_ADDRESS.lower()


async def test_without_the_approval_the_client_skips_then_approves_explicitly(merchant):
    account = Account.create()
    key = "0x" + bytes(account.key).hex()
    await merchant.fund(account.address, "1")
    options = _options(merchant, key)
    async with with_eur_payment(httpx.AsyncClient(timeout=30), options) as client:
        with pytest.raises(NoSatisfiableOption, match="approve_permit2"):
            await client.get(merchant.resource_url(PATH))
        await _rpc(merchant, "anvil_setBalance", account.address, hex(10**17))
        approval = await payments(options).approve_permit2(CHAIN_ID, str(merchant.token))
        assert approval.tx_hash is not None
        response = await client.get(merchant.resource_url(PATH))
    assert response.status_code == 200, response.text
    assert await merchant.token_balance(account.address) == 1_000_000 - merchant.price_atomic(PATH)


# --- the sandbox's own verification ----------------------------------------------------------


def _header(merchant: StandardMerchant, key: str, **changes: Any) -> str:
    required_accept = merchant.requirements(PATH)
    signer = DigestSigner(bytes.fromhex(key.removeprefix("0x")))
    authorization = new_permit2_authorization(
        payer=signer.address,
        token=required_accept["asset"],
        pay_to=required_accept["payTo"],
        amount=int(required_accept["amount"]),
        max_timeout_seconds=required_accept["maxTimeoutSeconds"],
        now=time.time(),
    )
    authorization = dataclasses.replace(authorization, **changes)
    signature = signer.sign(permit2_digest(authorization, chain_id=CHAIN_ID))
    payload = {
        "x402Version": 2,
        "payload": permit2_payload(authorization, signature),
        "accepted": required_accept,
        "resource": {"url": merchant.resource_url(PATH)},
    }
    return encode_header(payload)


async def _refused(merchant: StandardMerchant, header: str) -> str:
    before = await merchant.token_balance(merchant.pay_to)
    response = await _get(merchant.resource_url(PATH), {"PAYMENT-SIGNATURE": header})
    assert response.status_code == 402, response.text
    reason: str = _b64_json(response.headers["payment-required"])["error"]
    assert _b64_json(response.headers["payment-response"])["errorReason"] == reason
    assert await merchant.token_balance(merchant.pay_to) == before
    return reason


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"spender": PERMIT2_ADDRESS}, "invalid_permit2_spender"),
        ({"to": "0x" + "22" * 20}, "invalid_permit2_recipient_mismatch"),
        ({"deadline": 1}, "permit2_deadline_expired"),
        ({"valid_after": 4_000_000_000}, "permit2_not_yet_valid"),
        ({"amount": 1}, "permit2_amount_mismatch"),
        ({"token": "0x" + "33" * 20}, "permit2_token_mismatch"),
    ],
)
async def test_refuses_what_the_foundation_refuses(merchant, changes, reason):
    assert await _refused(merchant, _header(merchant, merchant.payer_key, **changes)) == reason


async def test_a_signature_by_another_key_is_refused_by_permit2(merchant):
    header = _header(merchant, merchant.payer_key)
    payload = _b64_json(header)
    other = _b64_json(_header(merchant, "0x" + "77" * 32))
    payload["payload"]["signature"] = other["payload"]["signature"]
    assert await _refused(merchant, encode_header(payload)) == "invalid_permit2_signature"


async def test_a_payer_without_approval_is_refused(merchant):
    account = Account.create()
    await merchant.fund(account.address, "1")
    key = "0x" + bytes(account.key).hex()
    assert await _refused(merchant, _header(merchant, key)) == "permit2_allowance_required"


async def test_a_replayed_permit_is_refused_and_moves_nothing_twice(merchant):
    header = _header(merchant, merchant.payer_key)
    first = await _get(merchant.resource_url(PATH), {"PAYMENT-SIGNATURE": header})
    assert first.status_code == 200, first.text
    assert await _refused(merchant, header) == "permit2_invalid_nonce"


def test_settle_calldata_is_the_abi_encoding() -> None:
    transfer = Permit2Transfer(
        from_address="0x" + "11" * 20,
        token="0x" + "22" * 20,
        amount=10_000,
        spender=EXACT_PERMIT2_PROXY_ADDRESS,
        nonce=(1 << 255) + 3,
        deadline=1_700_000_300,
        to="0x" + "44" * 20,
        valid_after=0,
    )
    signature = bytes(range(65))
    proxy = Web3().eth.contract(abi=load_proxy_artifact()["abi"])
    expected = proxy.encode_abi(
        "settle",
        [
            ((Web3.to_checksum_address(transfer.token), 10_000), transfer.nonce, 1_700_000_300),
            Web3.to_checksum_address(transfer.from_address),
            (Web3.to_checksum_address(transfer.to), 0),
            signature,
        ],
    )
    assert "0x" + settle_call(transfer, signature).hex() == expected
