"""The foundation-stack harness works on its own: the x402 foundation's Python client pays the
foundation's v2 merchant (and our v1 merchant) through the foundation's facilitator, settling
EIP-3009 transfers of `SandboxEip3009Token` on a local anvil chain. Our client is not used."""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from eth_account import Account
from eth_account.messages import encode_typed_data
from eth_utils.crypto import keccak
from web3.exceptions import ContractLogicError
from x402.http.clients.httpx import x402HttpxClient
from x402.http.utils import encode_payment_signature_header
from x402.schemas import PaymentPayload

from tests.x402_foundation import (
    DEFAULT_CHAIN_ID,
    PAID_PATH,
    TOKEN_NAME,
    TOKEN_VERSION,
    FoundationStack,
    b64_json,
    eip3009_call,
    eip3009_transact,
    foundation_client,
    foundation_stack,
)
from x402_eur_sandbox._anvil import ANVIL_DEV_KEYS

#: A funded dev key that relays the token tests' transactions (the facilitator uses another).
RELAYER_KEY = ANVIL_DEV_KEYS[3]
_AUTH_FIELDS = [
    {"name": "from", "type": "address"},
    {"name": "to", "type": "address"},
    {"name": "value", "type": "uint256"},
    {"name": "validAfter", "type": "uint256"},
    {"name": "validBefore", "type": "uint256"},
    {"name": "nonce", "type": "bytes32"},
]
TYPES: dict[str, list[dict[str, str]]] = {
    "TransferWithAuthorization": _AUTH_FIELDS,
    "ReceiveWithAuthorization": _AUTH_FIELDS,
    "CancelAuthorization": [
        {"name": "authorizer", "type": "address"},
        {"name": "nonce", "type": "bytes32"},
    ],
    "Permit": [
        {"name": "owner", "type": "address"},
        {"name": "spender", "type": "address"},
        {"name": "value", "type": "uint256"},
        {"name": "nonce", "type": "uint256"},
        {"name": "deadline", "type": "uint256"},
    ],
}
TRANSFER_BYTES = "transferWithAuthorization(address,address,uint256,uint256,uint256,bytes32,bytes)"
TRANSFER_VRS = "transferWithAuthorization(address,address,uint256,uint256,uint256,bytes32,uint8,bytes32,bytes32)"
RECEIVE_VRS = "receiveWithAuthorization(address,address,uint256,uint256,uint256,bytes32,uint8,bytes32,bytes32)"
CANCEL_VRS = "cancelAuthorization(address,bytes32,uint8,bytes32,bytes32)"
PERMIT = "permit(address,address,uint256,uint256,uint8,bytes32,bytes32)"

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    # Module scope so the module-scoped stack below shares one event loop.
    return "asyncio"


@pytest.fixture(scope="module")
async def stack(anyio_backend: str) -> AsyncIterator[FoundationStack]:
    async with foundation_stack() as started:
        yield started


async def _get(url: str, headers: dict[str, str] | None = None) -> httpx.Response:
    async with httpx.AsyncClient(timeout=30, trust_env=False) as http:
        return await http.get(url, headers=headers)


def _domain(stack: FoundationStack) -> dict[str, Any]:
    return {
        "name": TOKEN_NAME,
        "version": TOKEN_VERSION,
        "chainId": stack.chain_id,
        "verifyingContract": stack.token,
    }


def _sign(stack: FoundationStack, key: str, primary: str, message: dict[str, Any]) -> Any:
    return Account.sign_typed_data(key, _domain(stack), {primary: TYPES[primary]}, message)


def _vrs(signed: Any) -> tuple[int, bytes, bytes]:
    return signed.v, signed.r.to_bytes(32, "big"), signed.s.to_bytes(32, "big")


def _authorization(
    frm: str, to: str, value: int, valid_before: int | None = None
) -> dict[str, Any]:
    return {
        "from": frm,
        "to": to,
        "value": value,
        "validAfter": 0,
        "validBefore": valid_before if valid_before is not None else int(time.time()) + 3600,
        "nonce": os.urandom(32),
    }


def _args(auth: dict[str, Any]) -> list[Any]:
    return [auth[f["name"]] for f in _AUTH_FIELDS]


async def test_token_is_eurc_shaped(stack: FoundationStack) -> None:
    rpc, token = stack.rpc_url, stack.token
    assert await eip3009_call(rpc, token, "decimals()") == 6
    assert await eip3009_call(rpc, token, "name()") == TOKEN_NAME
    assert await eip3009_call(rpc, token, "version()") == TOKEN_VERSION
    _fields, name, version, chain_id, verifying, _salt, _ext = await eip3009_call(
        rpc, token, "eip712Domain()"
    )
    assert (name, version, chain_id, verifying) == (
        TOKEN_NAME,
        TOKEN_VERSION,
        DEFAULT_CHAIN_ID,
        token,
    )
    cancel = {"authorizer": stack.payer_address, "nonce": bytes(32)}
    separator = encode_typed_data(
        _domain(stack), {"CancelAuthorization": TYPES["CancelAuthorization"]}, cancel
    ).header
    assert await eip3009_call(rpc, token, "DOMAIN_SEPARATOR()") == separator
    assert await stack.native_balance(stack.payer_address) == 0
    assert await stack.balance(stack.payer_address) > 0


async def test_token_eip3009_and_permit(stack: FoundationStack) -> None:
    """The token's own EIP-3009 surface, beyond the (v, r, s) transfer the facilitator uses."""
    rpc, token = stack.rpc_url, stack.token
    owner = Account.create()
    owner_key = "0x" + bytes(owner.key).hex()
    relayer = Account.from_key(RELAYER_KEY).address
    recipient = Account.create().address
    await stack.fund(owner.address, 1_000_000)

    # transferWithAuthorization, bytes-signature overload, relayed by a third party.
    auth = _authorization(owner.address, recipient, 100)
    signed = _sign(stack, owner_key, "TransferWithAuthorization", auth)
    await eip3009_transact(rpc, token, RELAYER_KEY, TRANSFER_BYTES, *_args(auth), signed.signature)
    assert await stack.balance(recipient) == 100
    assert await stack.authorization_used(owner.address, "0x" + auth["nonce"].hex())
    with pytest.raises(ContractLogicError, match="authorization is used or canceled"):
        await eip3009_transact(rpc, token, RELAYER_KEY, TRANSFER_VRS, *_args(auth), *_vrs(signed))

    # Expired, not yet valid, wrong signer, more than the balance: Circle's revert strings.
    expired = _authorization(owner.address, recipient, 1, valid_before=int(time.time()) - 1)
    signed = _sign(stack, owner_key, "TransferWithAuthorization", expired)
    with pytest.raises(ContractLogicError, match="authorization is expired"):
        await eip3009_transact(
            rpc, token, RELAYER_KEY, TRANSFER_VRS, *_args(expired), *_vrs(signed)
        )
    future = {**_authorization(owner.address, recipient, 1), "validAfter": int(time.time()) + 600}
    signed = _sign(stack, owner_key, "TransferWithAuthorization", future)
    with pytest.raises(ContractLogicError, match="authorization is not yet valid"):
        await eip3009_transact(rpc, token, RELAYER_KEY, TRANSFER_VRS, *_args(future), *_vrs(signed))
    forged = _authorization(owner.address, recipient, 1)
    signed = _sign(stack, "0x" + os.urandom(32).hex(), "TransferWithAuthorization", forged)
    with pytest.raises(ContractLogicError, match="invalid signature"):
        await eip3009_transact(rpc, token, RELAYER_KEY, TRANSFER_VRS, *_args(forged), *_vrs(signed))
    too_much = _authorization(owner.address, recipient, 10**12)
    signed = _sign(stack, owner_key, "TransferWithAuthorization", too_much)
    with pytest.raises(ContractLogicError, match="transfer amount exceeds balance"):
        await eip3009_transact(
            rpc, token, RELAYER_KEY, TRANSFER_VRS, *_args(too_much), *_vrs(signed)
        )

    # cancelAuthorization burns a nonce.
    cancelled = _authorization(owner.address, recipient, 5)
    cancel = {"authorizer": owner.address, "nonce": cancelled["nonce"]}
    signed_cancel = _sign(stack, owner_key, "CancelAuthorization", cancel)
    await eip3009_transact(
        rpc, token, RELAYER_KEY, CANCEL_VRS, *cancel.values(), *_vrs(signed_cancel)
    )
    signed = _sign(stack, owner_key, "TransferWithAuthorization", cancelled)
    with pytest.raises(ContractLogicError, match="authorization is used or canceled"):
        await eip3009_transact(
            rpc, token, RELAYER_KEY, TRANSFER_VRS, *_args(cancelled), *_vrs(signed)
        )

    # receiveWithAuthorization: only the payee may submit it.
    receive = _authorization(owner.address, relayer, 7)
    signed = _sign(stack, owner_key, "ReceiveWithAuthorization", receive)
    with pytest.raises(ContractLogicError, match="caller must be the payee"):
        await eip3009_transact(
            rpc, token, ANVIL_DEV_KEYS[4], RECEIVE_VRS, *_args(receive), *_vrs(signed)
        )
    before = await stack.balance(relayer)
    await eip3009_transact(rpc, token, RELAYER_KEY, RECEIVE_VRS, *_args(receive), *_vrs(signed))
    assert await stack.balance(relayer) == before + 7

    # EIP-2612 permit under the same version-"2" domain.
    deadline = int(time.time()) + 3600
    permit = {
        "owner": owner.address,
        "spender": relayer,
        "value": 55,
        "nonce": 0,
        "deadline": deadline,
    }
    signed = _sign(stack, owner_key, "Permit", permit)
    await eip3009_transact(
        rpc, token, RELAYER_KEY, PERMIT, owner.address, relayer, 55, deadline, *_vrs(signed)
    )
    assert (
        await eip3009_call(rpc, token, "allowance(address,address)", owner.address, relayer) == 55
    )
    assert await eip3009_call(rpc, token, "nonces(address)", owner.address) == 1


async def test_facilitator_supported(stack: FoundationStack) -> None:
    response = await _get(f"{stack.facilitator_url}/supported")
    assert response.status_code == 200
    supported = response.json()
    kinds = {(k["x402Version"], k["scheme"], k["network"]) for k in supported["kinds"]}
    assert (2, "exact", stack.network) in kinds
    assert (1, "exact", "base-sepolia") in kinds
    assert supported["signers"]["eip155:*"] == [stack.facilitator_address]


async def test_v2_unpaid_request_gets_payment_required(stack: FoundationStack) -> None:
    assert (await _get(f"{stack.merchant_url}/free")).status_code == 200
    response = await _get(stack.paid_url)
    assert response.status_code == 402
    assert response.json() == {}
    required = b64_json(response.headers["payment-required"])
    assert required["x402Version"] == 2
    assert required["resource"]["url"] == stack.paid_url
    [accept] = required["accepts"]
    assert accept == {
        "scheme": "exact",
        "network": stack.network,
        "asset": stack.token,
        "amount": str(stack.price_atomic),
        "payTo": stack.merchant_address,
        "maxTimeoutSeconds": 300,
        "extra": {"name": TOKEN_NAME, "version": TOKEN_VERSION},
    }


async def test_v2_foundation_client_pays_foundation_merchant(stack: FoundationStack) -> None:
    payer, merchant, facilitator = (
        stack.payer_address,
        stack.merchant_address,
        stack.facilitator_address,
    )
    before = (await stack.balance(payer), await stack.balance(merchant))
    gas_before = await stack.native_balance(facilitator)
    seen = len(stack.facilitator.requests)

    async with x402HttpxClient(foundation_client(stack), timeout=60) as http:
        response = await http.get(stack.paid_url)

    assert response.status_code == 200, response.text
    assert response.json() == {"paid": True, "version": 2}
    settlement = b64_json(response.headers["payment-response"])
    assert settlement["success"] is True
    assert settlement["network"] == stack.network
    assert settlement["payer"] == payer
    assert settlement["transaction"].startswith("0x")
    assert len(settlement["transaction"]) == 66

    after = (await stack.balance(payer), await stack.balance(merchant))
    assert after == (before[0] - stack.price_atomic, before[1] + stack.price_atomic)
    assert await stack.native_balance(payer) == 0  # the payer never pays gas
    # The facilitator sent the (v, r, s) overload of transferWithAuthorization to the token.
    tx = await stack.transaction(settlement["transaction"])
    assert (tx["from"], tx["to"]) == (facilitator, stack.token)
    assert bytes(tx["input"][:4]) == keccak(text=TRANSFER_VRS)[:4]
    assert await stack.native_balance(facilitator) < gas_before

    # The merchant verified, then settled, with the payload the client signed.
    calls = stack.facilitator.requests[seen:]
    assert [path for path, _ in calls] == ["/verify", "/settle"]
    body = calls[-1][1]
    assert body["x402Version"] == 2
    payload = body["paymentPayload"]
    assert payload["accepted"] == body["paymentRequirements"]
    authorization = payload["payload"]["authorization"]
    assert authorization["from"] == payer
    assert authorization["value"] == str(stack.price_atomic)
    assert authorization["validAfter"] == "0"
    assert await stack.authorization_used(payer, authorization["nonce"])


async def test_v1_foundation_client_pays_v1_merchant(stack: FoundationStack) -> None:
    assert stack.v1_network == "base-sepolia"
    unpaid = await _get(stack.v1_paid_url)
    assert unpaid.status_code == 402
    body = unpaid.json()
    assert body["x402Version"] == 1
    assert body["accepts"][0]["maxAmountRequired"] == str(stack.price_atomic)
    assert body["accepts"][0]["network"] == "base-sepolia"

    payer, merchant = stack.payer_address, stack.merchant_address
    before = (await stack.balance(payer), await stack.balance(merchant))
    async with x402HttpxClient(foundation_client(stack), timeout=60) as http:
        response = await http.get(stack.v1_paid_url)

    assert response.status_code == 200, response.text
    assert response.json() == {"paid": True, "version": 1}
    settlement = b64_json(response.headers["x-payment-response"])
    assert settlement["success"] is True
    assert settlement["network"] == "base-sepolia"
    assert settlement["payer"] == payer
    after = (await stack.balance(payer), await stack.balance(merchant))
    assert after == (before[0] - stack.price_atomic, before[1] + stack.price_atomic)


async def test_v1_replayed_payment_is_refused(stack: FoundationStack) -> None:
    """Our v1 merchant refuses a replayed X-PAYMENT with a v1 402 body; nothing moves twice.

    The foundation's v1 facilitator names the reason only through its Multicall3 diagnosis,
    and anvil has no Multicall3, so the reason is the generic simulation failure here.
    """
    async with x402HttpxClient(foundation_client(stack), timeout=60) as http:
        first = await http.get(stack.v1_paid_url)
    assert first.status_code == 200
    settled = [body for path, body in stack.facilitator.requests if path == "/settle"][-1]
    assert settled["x402Version"] == 1
    header = base64.b64encode(json.dumps(settled["paymentPayload"]).encode()).decode()
    before = await stack.balance(stack.payer_address)
    replay = await _get(stack.v1_paid_url, headers={"X-PAYMENT": header})
    assert replay.status_code == 402
    body = replay.json()
    assert body["x402Version"] == 1
    assert body["error"] == "Invalid payment: invalid_exact_evm_transaction_simulation_failed"
    assert await stack.balance(stack.payer_address) == before


async def test_replayed_payment_is_refused(stack: FoundationStack) -> None:
    """A PAYMENT-SIGNATURE used once is refused the second time; nothing moves twice."""
    async with x402HttpxClient(foundation_client(stack), timeout=60) as http:
        first = await http.get(stack.paid_url)
    assert first.status_code == 200
    settled = [body for path, body in stack.facilitator.requests if path == "/settle"][-1]
    header = encode_payment_signature_header(
        PaymentPayload.model_validate(settled["paymentPayload"])
    )
    before = await stack.balance(stack.payer_address)
    replay = await _get(stack.paid_url, headers={"PAYMENT-SIGNATURE": header})
    assert replay.status_code == 402
    required = b64_json(replay.headers["payment-required"])
    assert required["error"] == "invalid_exact_evm_nonce_already_used"
    assert await stack.balance(stack.payer_address) == before


async def test_custom_chain_id(anyio_backend: str) -> None:
    """v2 needs no table entry: any eip155:<id> works end to end (here anvil's 31337)."""
    async with foundation_stack(chain_id=31337, price_atomic=2_500) as custom:
        assert custom.network == "eip155:31337"
        assert custom.v1_network is None
        assert custom.v1_merchant_url is None
        before = await custom.balance(custom.merchant_address)
        async with x402HttpxClient(foundation_client(custom), timeout=60) as http:
            response = await http.get(f"{custom.merchant_url}{PAID_PATH}")
        assert response.status_code == 200, response.text
        assert b64_json(response.headers["payment-response"])["network"] == "eip155:31337"
        assert await custom.balance(custom.merchant_address) == before + 2_500
