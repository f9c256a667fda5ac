"""The sandbox's standard merchant offers an `upto` route (`/metered`: at most 0.05, charged by
use), verified and settled by the sandbox's own code (`x402_eur_sandbox._standard`,
`_permit2`) through Permit2 and the `upto` proxy at their canonical addresses; our client
pays it and books what was settled, the foundation's own client pays it too, and the
sandbox refuses an authorization bound to another facilitator, moving nothing."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import httpx
import pytest
from web3 import Web3

from tests.sandboxes import asset_of
from x402_client import (
    EvmOptions,
    PaymentOptions,
    payments,
    with_eur_payment,
)
from x402_client._rails._evm_signing import DigestSigner
from x402_client._rails.upto import new_upto_authorization, upto_digest, upto_payload
from x402_eur_sandbox._permit2 import (
    UPTO_PERMIT2_PROXY_ADDRESS,
    Permit2Transfer,
    UptoTransfer,
    load_upto_proxy_artifact,
    upto_settle_call,
)
from x402_eur_sandbox._standard import StandardMerchant, encode_header

pytestmark = pytest.mark.anyio

CHAIN_ID = 84532
PATH = "/metered"


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def merchant(anyio_backend: str) -> AsyncIterator[StandardMerchant]:
    async with StandardMerchant(chain_id=CHAIN_ID) as started:
        yield started


@pytest.fixture(autouse=True)
def _default_charge(merchant: StandardMerchant) -> None:
    merchant.upto_charge = Decimal("0.4")


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


def _options(merchant: StandardMerchant) -> PaymentOptions:
    return PaymentOptions(evm=EvmOptions(**merchant.evm_config()), assets=[asset_of(merchant)])


async def test_the_client_pays_what_was_charged_and_books_it(merchant):
    required = _b64_json((await _get(merchant.resource_url(PATH))).headers["payment-required"])
    [accept] = required["accepts"]
    assert accept["scheme"] == "upto" and accept["amount"] == "50000"
    assert accept["extra"]["facilitatorAddress"] == merchant.facilitator_address
    payer, pay_to = merchant.payer_address, merchant.pay_to
    before = (await merchant.token_balance(payer), await merchant.token_balance(pay_to))
    options = _options(merchant)
    async with with_eur_payment(httpx.AsyncClient(timeout=30), options) as client:
        response = await client.get(merchant.resource_url(PATH))
    assert response.status_code == 200, response.text
    receipt = response.extensions["x402_payment"]
    assert (receipt.rail, receipt.authorized_amount) == ("upto", Decimal("0.05"))
    assert receipt.settled_amount == receipt.amount == Decimal("0.02")
    after = (await merchant.token_balance(payer), await merchant.token_balance(pay_to))
    assert after == (before[0] - 20_000, before[1] + 20_000)
    assert merchant.settlements[-1]["amount"] == "20000"
    tx = await _rpc(merchant, "eth_getTransactionByHash", merchant.settlements[-1]["transaction"])
    assert tx["to"].lower() == UPTO_PERMIT2_PROXY_ADDRESS.lower()
    (entry,) = payments(options).ledger.entries(outcome="paid")
    assert entry.amount == Decimal("0.02")


async def test_a_zero_charge_moves_nothing_and_the_maximum_stays_held(merchant):
    # With no settlement transaction, the authorization stays valid until its deadline: the
    # merchant could still settle it, so the client keeps the maximum booked meanwhile.
    merchant.upto_charge = Decimal(0)
    before = await merchant.token_balance(merchant.payer_address)
    async with with_eur_payment(httpx.AsyncClient(timeout=30), _options(merchant)) as client:
        response = await client.get(merchant.resource_url(PATH))
    assert response.status_code == 200, response.text
    receipt = response.extensions["x402_payment"]
    assert (receipt.claimed_amount, receipt.settled_amount) == (Decimal(0), None)
    assert (receipt.amount, receipt.settlement_verified) == (Decimal("0.05"), False)
    assert receipt.tx_hash is None
    assert await merchant.token_balance(merchant.payer_address) == before


async def test_the_foundations_client_pays_it_too(merchant):
    from eth_account import Account
    from x402 import x402Client
    from x402.http.clients import x402_httpx_transport
    from x402.mechanisms.evm.upto import UptoEvmClientScheme

    client = x402Client()
    client.register(merchant.network, UptoEvmClientScheme(Account.from_key(merchant.payer_key)))
    controls: Any = {"allowed_assets": [{"network": merchant.network, "asset": merchant.token}]}
    client.set_spend_controls(controls)
    before = await merchant.token_balance(merchant.pay_to)
    transport = x402_httpx_transport(client)
    async with httpx.AsyncClient(transport=transport, timeout=30, trust_env=False) as http:
        response = await http.get(merchant.resource_url(PATH))
    assert response.status_code == 200, response.text
    assert await merchant.token_balance(merchant.pay_to) == before + 20_000


async def test_an_authorization_for_another_facilitator_is_refused(merchant):
    accept = merchant.requirements(PATH)
    signer = DigestSigner(bytes.fromhex(merchant.payer_key.removeprefix("0x")))
    authorization = new_upto_authorization(
        payer=signer.address,
        token=accept["asset"],
        pay_to=accept["payTo"],
        facilitator="0x" + "55" * 20,
        amount=int(accept["amount"]),
        max_timeout_seconds=accept["maxTimeoutSeconds"],
        now=time.time(),
    )
    signature = signer.sign(upto_digest(authorization, chain_id=CHAIN_ID))
    header = encode_header(
        {
            "x402Version": 2,
            "payload": upto_payload(authorization, signature),
            "accepted": accept,
            "resource": {"url": merchant.resource_url(PATH)},
        }
    )
    before = await merchant.token_balance(merchant.pay_to)
    response = await _get(merchant.resource_url(PATH), {"PAYMENT-SIGNATURE": header})
    assert response.status_code == 402, response.text
    assert _b64_json(response.headers["payment-required"])["error"] == "upto_facilitator_mismatch"
    assert await merchant.token_balance(merchant.pay_to) == before


def test_upto_settle_calldata_is_the_abi_encoding() -> None:
    transfer = Permit2Transfer(
        from_address="0x" + "11" * 20,
        token="0x" + "22" * 20,
        amount=10_000,
        spender=UPTO_PERMIT2_PROXY_ADDRESS,
        nonce=(1 << 255) + 3,
        deadline=1_700_000_300,
        to="0x" + "44" * 20,
        valid_after=0,
    )
    upto = UptoTransfer(transfer, "0x" + "55" * 20)
    signature = bytes(range(65))
    proxy = Web3().eth.contract(abi=load_upto_proxy_artifact()["abi"])
    checksum = Web3.to_checksum_address
    expected = proxy.encode_abi(
        "settle",
        [
            ((checksum(transfer.token), 10_000), transfer.nonce, 1_700_000_300),
            4_000,
            checksum(transfer.from_address),
            (checksum(transfer.to), checksum(upto.facilitator), 0),
            signature,
        ],
    )
    assert "0x" + upto_settle_call(upto, 4_000, signature).hex() == expected


async def test_an_authorization_never_settled_is_given_back_once_its_deadline_passed(tmp_path):
    # A chain of its own: the test moves its clock past the authorization's deadline.
    from x402_client import Budget
    from x402_client._state.shared import state_of

    async with StandardMerchant(chain_id=CHAIN_ID + 1) as merchant:
        merchant.upto_charge = Decimal(0)  # the merchant serves and settles nothing
        options = PaymentOptions(
            evm=EvmOptions(**merchant.evm_config()),
            assets=[asset_of(merchant)],
            state_path=tmp_path / "state.sqlite3",
            budgets=[Budget("1")],
        )
        async with with_eur_payment(httpx.AsyncClient(timeout=30), options) as client:
            receipt = (await client.get(merchant.resource_url(PATH))).extensions["x402_payment"]
            assert (receipt.amount, receipt.settlement_verified) == (Decimal("0.05"), False)
            (early,) = await payments(client).recover_all()
            assert early.status == "pending" and "until its deadline" in early.reason
            (status,) = await state_of(options).budgets.status()
            assert status.spent == Decimal("0.05")

            # The chain's clock, not ours, says when the deadline passed.
            await _rpc(merchant, "evm_increaseTime", hex(accept_timeout(merchant) + 60))
            await _rpc(merchant, "evm_mine")
            (late,) = await payments(client).recover_all()
            assert late.status == "delivered", late.reason
            assert "nothing moved" in late.reason
            assert await payments(client).recover_all() == []
        (status,) = await state_of(options).budgets.status()
        assert status.spent == Decimal(0)
        (entry,) = await state_of(options).journal.payments()  # type: ignore[union-attr]
        assert [s.step for s in entry.steps if s.step in ("held", "settled")] == ["held", "settled"]
        state_of(options).close()


def accept_timeout(merchant: StandardMerchant) -> int:
    return int(merchant.requirements(PATH)["maxTimeoutSeconds"])
