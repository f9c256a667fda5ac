"""The sandbox's standard x402 merchant (`StandardMerchant`), paid without our payer: the
`PAYMENT-SIGNATURE` is built by hand from the EIP-3009 rail's pure functions, and once by
the x402 foundation's own client, which proves the merchant speaks the standard wire.

Money moves on a real anvil chain: balances change by exactly the price, or not at all."""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import time
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import anyio
import httpx
import pytest
from eth_account import Account
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.sandboxes import asset_of, payment_options
from x402_client._protocol.models import ExactAcceptEntry
from x402_client._protocol.rail_interface import RequestSettings
from x402_client._rails.eip3009 import (
    DigestSigner,
    Eip3009Rail,
    TransferAuthorization,
    authorization_digest,
    authorization_payload,
    keccak256,
    new_authorization,
)
from x402_eur_sandbox import Price, Sandbox
from x402_eur_sandbox._standard import (
    STANDARD_PRICES,
    TOKEN_NAME,
    TOKEN_VERSION,
    StandardMerchant,
    _legacy_transaction,
    _rlp,
    decode_payment_signature,
    encode_header,
    requirements_match,
    transfer_with_authorization_call,
)

pytestmark = pytest.mark.anyio

CHAIN_ID = 84532
TRANSFER_VRS = (
    "transferWithAuthorization(address,address,uint256,uint256,uint256,bytes32,"
    "uint8,bytes32,bytes32)"
)


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def merchant(anyio_backend: str) -> AsyncIterator[StandardMerchant]:
    """A merchant on an anvil chain of its own (no EVM sandbox), Base Sepolia's chain id."""
    async with StandardMerchant(chain_id=CHAIN_ID) as started:
        yield started


async def _get(url: str, headers: dict[str, str] | None = None) -> httpx.Response:
    async with httpx.AsyncClient(timeout=30, trust_env=False) as http:
        return await http.get(url, headers=headers)


def _b64_json(value: str) -> Any:
    return json.loads(base64.b64decode(value, validate=True))


async def _challenge(merchant: StandardMerchant, path: str = "/weather") -> dict[str, Any]:
    response = await _get(merchant.resource_url(path))
    assert response.status_code == 402
    required: dict[str, Any] = _b64_json(response.headers["payment-required"])
    return required


def _signature_header(
    required: dict[str, Any],
    key: str,
    *,
    accepted: dict[str, Any] | None = None,
    **changes: Any,
) -> str:
    """A `PAYMENT-SIGNATURE` for the first accept, signed with `key`; `changes` alter the
    authorization after the fact (it is signed as altered)."""
    accept = required["accepts"][0]
    signer = DigestSigner(bytes.fromhex(key.removeprefix("0x")))
    authorization = new_authorization(
        payer=signer.address,
        pay_to=accept["payTo"],
        value=int(accept["amount"]),
        max_timeout_seconds=accept["maxTimeoutSeconds"],
        now=time.time(),
    )
    authorization = dataclasses.replace(authorization, **changes)
    digest = authorization_digest(
        authorization,
        name=accept["extra"]["name"],
        version=accept["extra"]["version"],
        chain_id=int(accept["network"].split(":")[1]),
        token=accept["asset"],
    )
    payload = {
        "x402Version": 2,
        "payload": authorization_payload(authorization, signer.sign(digest)),
        "accepted": accept if accepted is None else accepted,
        "resource": required["resource"],
    }
    return encode_header(payload)


async def _refused(merchant: StandardMerchant, header: str, path: str = "/weather") -> str:
    """Send a paid retry that must be refused; nothing may move. Returns the reason."""
    before = await merchant.token_balance(merchant.pay_to)
    response = await _get(merchant.resource_url(path), {"PAYMENT-SIGNATURE": header})
    assert response.status_code == 402, response.text
    assert response.json() == {}
    required = _b64_json(response.headers["payment-required"])
    assert required["accepts"] == [merchant.requirements(path)]
    reason: str = required["error"]
    if "payment-response" in response.headers:
        settlement = _b64_json(response.headers["payment-response"])
        assert settlement["success"] is False
        assert settlement["errorReason"] == reason
        assert settlement["network"] == merchant.network
    assert await merchant.token_balance(merchant.pay_to) == before
    return reason


async def _rpc(merchant: StandardMerchant, method: str, *params: Any) -> Any:
    assert merchant.rpc_url is not None
    async with httpx.AsyncClient(trust_env=False) as http:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": list(params)}
        return (await http.post(merchant.rpc_url, json=body)).json()["result"]


# --- the 402 -----------------------------------------------------------------------------


async def test_unpaid_request_gets_payment_required(merchant: StandardMerchant) -> None:
    assert (await _get(merchant.resource_url("/free"))).json() == {"free": True}
    assert (await _get(merchant.resource_url("/nowhere"))).status_code == 404
    url = merchant.resource_url("/weather")
    response = await _get(url)
    assert response.status_code == 402
    assert response.json() == {}
    assert response.headers["cache-control"] == "no-store"
    header = response.headers["payment-required"]
    raw = base64.b64decode(header, validate=True)  # standard alphabet, padded
    assert base64.b64encode(raw).decode() == header
    assert b", " not in raw  # compact JSON, like the foundation's model_dump_json
    assert json.loads(raw) == {
        "x402Version": 2,
        "error": "Payment required",
        "resource": {
            "url": url,
            "description": "Today's weather in Amsterdam",
            "mimeType": "application/json",
        },
        "accepts": [
            {
                "scheme": "exact",
                "network": f"eip155:{CHAIN_ID}",
                "asset": merchant.token,
                "amount": "100000",
                "payTo": merchant.pay_to,
                "maxTimeoutSeconds": 300,
                "extra": {"name": "Sandbox EURC", "version": "2"},
            }
        ],
    }


async def test_the_token_is_the_eurc_shaped_sandbox_token(merchant: StandardMerchant) -> None:
    asset = asset_of(merchant)
    assert (asset.chain_id, asset.address, asset.currency, asset.decimals) == (
        CHAIN_ID,
        merchant.token,
        "EUR",
        6,
    )
    assert (asset.eip712_name, asset.eip712_version) == (TOKEN_NAME, TOKEN_VERSION)
    separator = await _rpc(
        merchant, "eth_call", {"to": merchant.token, "data": "0x3644e515"}, "latest"
    )  # DOMAIN_SEPARATOR()
    from x402_client._rails.eip3009 import domain_separator

    assert (
        separator == "0x" + domain_separator(TOKEN_NAME, "2", CHAIN_ID, str(merchant.token)).hex()
    )
    assert await merchant.token_balance(merchant.payer_address) >= 100 * 10**6 - 10**7
    assert int(await _rpc(merchant, "eth_getBalance", merchant.payer_address, "latest"), 16) == 0


# --- paying by hand ----------------------------------------------------------------------


async def test_hand_signed_payment_moves_exactly_the_price(merchant: StandardMerchant) -> None:
    required = await _challenge(merchant)
    price = merchant.price_atomic("/weather")
    assert price == 100_000
    payer, pay_to = merchant.payer_address, merchant.pay_to
    before = (await merchant.token_balance(payer), await merchant.token_balance(pay_to))
    gas_before = int(
        await _rpc(merchant, "eth_getBalance", merchant.facilitator_address, "latest"), 16
    )
    header = _signature_header(required, merchant.payer_key)

    response = await _get(merchant.resource_url("/weather"), {"PAYMENT-SIGNATURE": header})

    assert response.status_code == 200, response.text
    assert response.json()["paid"] is True
    settlement = _b64_json(response.headers["payment-response"])
    assert list(settlement) == ["success", "payer", "transaction", "network"]
    assert settlement["success"] is True
    assert settlement["payer"] == payer
    assert settlement["network"] == merchant.network
    assert len(settlement["transaction"]) == 66
    assert merchant.settlements[-1] == settlement
    after = (await merchant.token_balance(payer), await merchant.token_balance(pay_to))
    assert after == (before[0] - price, before[1] + price)
    # The hot wallet paid the gas with the (v, r, s) transferWithAuthorization; the payer none.
    tx = await _rpc(merchant, "eth_getTransactionByHash", settlement["transaction"])
    assert tx["from"].lower() == merchant.facilitator_address.lower()
    assert tx["to"].lower() == str(merchant.token).lower()
    assert tx["input"][:10] == "0x" + keccak256(TRANSFER_VRS.encode())[:4].hex() == "0xe3ee160e"
    assert int(tx["type"], 16) == 0  # legacy, as the foundation's facilitator sends it
    assert int(await _rpc(merchant, "eth_getBalance", payer, "latest"), 16) == 0
    gas_after = int(
        await _rpc(merchant, "eth_getBalance", merchant.facilitator_address, "latest"), 16
    )
    assert gas_after < gas_before
    nonce = json.loads(base64.b64decode(header))["payload"]["authorization"]["nonce"]
    assert await merchant.authorization_used(payer, nonce)


async def test_replay_is_refused(merchant: StandardMerchant) -> None:
    required = await _challenge(merchant, "/paid")
    header = _signature_header(required, merchant.payer_key)
    first = await _get(merchant.resource_url("/paid"), {"PAYMENT-SIGNATURE": header})
    assert first.status_code == 200
    balance = await merchant.token_balance(merchant.payer_address)
    assert await _refused(merchant, header, "/paid") == "invalid_exact_evm_nonce_already_used"
    assert await merchant.token_balance(merchant.payer_address) == balance


@pytest.mark.parametrize("delta", [-1, 1])
async def test_a_wrong_value_is_refused(merchant: StandardMerchant, delta: int) -> None:
    required = await _challenge(merchant)
    value = int(required["accepts"][0]["amount"]) + delta
    header = _signature_header(required, merchant.payer_key, value=value)
    reason = await _refused(merchant, header)
    assert reason == "invalid_exact_evm_payload_authorization_value_mismatch"


async def test_a_wrong_pay_to_is_refused(merchant: StandardMerchant) -> None:
    required = await _challenge(merchant)
    header = _signature_header(required, merchant.payer_key, to=merchant.payer_address)
    assert await _refused(merchant, header) == "invalid_exact_evm_payload_recipient_mismatch"


async def test_an_expired_authorization_is_refused(merchant: StandardMerchant) -> None:
    required = await _challenge(merchant)
    now = int(time.time())
    for valid_before in (now - 1, now + 3):  # the facilitator wants 6 s of headroom
        header = _signature_header(required, merchant.payer_key, valid_before=valid_before)
        assert await _refused(merchant, header) == (
            "invalid_exact_evm_payload_authorization_valid_before"
        )


async def test_a_not_yet_valid_authorization_is_refused(merchant: StandardMerchant) -> None:
    required = await _challenge(merchant)
    header = _signature_header(required, merchant.payer_key, valid_after=int(time.time()) + 120)
    assert await _refused(merchant, header) == "invalid_exact_evm_payload_authorization_valid_after"


async def test_a_forged_signature_is_refused(merchant: StandardMerchant) -> None:
    required = await _challenge(merchant)
    # Signed by another key, in the name of the funded payer.
    header = _signature_header(
        required, "0x" + os.urandom(32).hex(), from_address=merchant.payer_address
    )
    assert await _refused(merchant, header) == "invalid_exact_evm_payload_signature"
    # A signature under another EIP-712 domain (a wrong token name) is no better.
    accept = {**required["accepts"][0], "extra": {"name": "EURC", "version": "2"}}
    wrong = _signature_header({**required, "accepts": [accept]}, merchant.payer_key)
    payload = json.loads(base64.b64decode(wrong))
    payload["accepted"] = required["accepts"][0]
    assert await _refused(merchant, encode_header(payload)) == (
        "invalid_exact_evm_payload_signature"
    )


async def test_an_unfunded_payer_is_refused(merchant: StandardMerchant) -> None:
    required = await _challenge(merchant)
    header = _signature_header(required, "0x" + os.urandom(32).hex())
    assert await _refused(merchant, header) == "invalid_exact_evm_insufficient_balance"


async def test_accepted_must_match_the_requirements(merchant: StandardMerchant) -> None:
    required = await _challenge(merchant)
    accept = required["accepts"][0]
    for changed in (
        {**accept, "amount": "100001"},
        {**accept, "amount": 100000},
        {**accept, "payTo": accept["payTo"].lower()},  # case-sensitive, like the foundation
        {**accept, "asset": accept["asset"].lower()},
        {**accept, "network": "eip155:1"},
        {**accept, "scheme": "upto"},
        {**accept, "maxTimeoutSeconds": "300"},
        {**accept, "maxTimeoutSeconds": 301},
        {**accept, "extra": {"name": "Sandbox EURC"}},
        {**accept, "extra": {"name": "Sandbox EURC", "version": 2}},
        {k: v for k, v in accept.items() if k != "extra"},
    ):
        header = _signature_header(required, merchant.payer_key, accepted=changed)
        assert await _refused(merchant, header) == "No matching payment requirements"
    # Extra keys in the client's `extra` are fine.
    superset = {**accept, "extra": {**accept["extra"], "assetTransferMethod": "eip3009"}}
    header = _signature_header(required, merchant.payer_key, accepted=superset)
    response = await _get(merchant.resource_url("/weather"), {"PAYMENT-SIGNATURE": header})
    assert response.status_code == 200


async def test_the_header_must_be_standard_padded_base64(merchant: StandardMerchant) -> None:
    required = await _challenge(merchant)
    # ASCII JSON yields '+' or '/' in base64 only from '>', '?' or '~': put some in `resource`
    # (which the merchant does not compare) so that the url-safe form differs.
    required = {**required, "resource": {**required["resource"], "description": "?>~>" * 6}}
    header = _signature_header(required, merchant.payer_key)
    assert "+" in header
    assert "/" in header
    payload = json.loads(base64.b64decode(header))
    v1 = {"x402Version": 1, "scheme": "exact", "network": "base-sepolia", "payload": {}}
    for bad in (
        header.replace("+", "-").replace("/", "_"),
        header.rstrip("=") + ("" if header.endswith("=") else "A"),
        header[:-4],
        "not base64!",
        base64.b64encode(b"[1, 2]").decode(),
        encode_header(v1),
        encode_header({**payload, "x402Version": True}),
        encode_header({k: v for k, v in payload.items() if k != "accepted"}),
    ):
        response = await _get(merchant.resource_url("/weather"), {"PAYMENT-SIGNATURE": bad})
        assert response.status_code == 402
        assert _b64_json(response.headers["payment-required"])["error"] == "Payment required"
        assert "payment-response" not in response.headers  # treated as no payment at all
    # X-PAYMENT means nothing to a v2 merchant.
    response = await _get(merchant.resource_url("/weather"), {"X-PAYMENT": header})
    assert response.status_code == 402


async def test_a_malformed_authorization_is_refused(merchant: StandardMerchant) -> None:
    required = await _challenge(merchant)
    payload = json.loads(base64.b64decode(_signature_header(required, merchant.payer_key)))
    payload["payload"]["authorization"]["value"] = 100000  # a number, not a string
    assert await _refused(merchant, encode_header(payload)) == "invalid_exact_evm_payload"
    payload = json.loads(base64.b64decode(_signature_header(required, merchant.payer_key)))
    payload["payload"]["signature"] = "0x1234"
    assert await _refused(merchant, encode_header(payload)) == (
        "invalid_exact_evm_payload_signature"
    )


async def test_a_failed_handler_is_not_settled(merchant: StandardMerchant) -> None:
    async def broken(request: Request) -> Response:
        return JSONResponse({"error": "down"}, status_code=503)

    app = merchant.app
    merchant.prices["/broken"] = Price(Decimal("0.05"), "A resource that fails")
    merchant.app = Starlette(routes=[Route("/broken", broken)])
    try:
        required = await _challenge(merchant, "/broken")
        header = _signature_header(required, merchant.payer_key)
        before = await merchant.token_balance(merchant.payer_address)
        response = await _get(merchant.resource_url("/broken"), {"PAYMENT-SIGNATURE": header})
        assert response.status_code == 503
        assert "payment-response" not in response.headers
        assert await merchant.token_balance(merchant.payer_address) == before
    finally:
        merchant.app = app
        del merchant.prices["/broken"]


async def test_concurrent_payments_all_settle(merchant: StandardMerchant) -> None:
    required = await _challenge(merchant, "/paid")
    price = merchant.price_atomic("/paid")
    before = await merchant.token_balance(merchant.pay_to)
    statuses: list[int] = []

    async def pay() -> None:
        header = _signature_header(required, merchant.payer_key)
        response = await _get(merchant.resource_url("/paid"), {"PAYMENT-SIGNATURE": header})
        statuses.append(response.status_code)

    async with anyio.create_task_group() as group:
        for _ in range(6):
            group.start_soon(pay)
    assert statuses == [200] * 6
    assert await merchant.token_balance(merchant.pay_to) == before + 6 * price


# --- the foundation's client -------------------------------------------------------------


async def test_the_foundation_client_pays_the_standard_merchant(merchant: StandardMerchant) -> None:
    from x402 import x402Client
    from x402.http.clients.httpx import x402HttpxClient
    from x402.mechanisms.evm.exact import register_exact_evm_client

    client = x402Client()
    register_exact_evm_client(client, Account.from_key(merchant.payer_key))
    controls: Any = {"allowed_assets": [{"network": merchant.network, "asset": merchant.token}]}
    client.set_spend_controls(controls)
    payer, pay_to = merchant.payer_address, merchant.pay_to
    before = (await merchant.token_balance(payer), await merchant.token_balance(pay_to))

    async with x402HttpxClient(client, timeout=60) as http:
        response = await http.get(merchant.resource_url("/report"))

    assert response.status_code == 200, response.text
    assert response.json()["resource"] == "/report"
    settlement = _b64_json(response.headers["payment-response"])
    assert settlement["success"] is True
    assert settlement["payer"] == payer
    price = merchant.price_atomic("/report")
    after = (await merchant.token_balance(payer), await merchant.token_balance(pay_to))
    assert after == (before[0] - price, before[1] + price)


# --- mounted on the EVM sandbox ----------------------------------------------------------


class _Context:
    def __init__(self, options: Any) -> None:
        self.options = options


@pytest.mark.slow
async def test_mounted_on_the_evm_sandbox_and_paid_by_the_rail(anyio_backend: str) -> None:
    """Started after `EvmSandbox`, it deploys on its chain 137 and funds its payer key; the
    rail, given the sandbox's options and the token as a declared asset, pays it."""
    sandbox = Sandbox(evm=True)
    standard = StandardMerchant()
    sandbox.parts.append(standard)
    async with sandbox:
        assert standard.rpc_url == sandbox.evm.rpc_url(137)
        assert standard.payer_key == sandbox.evm.payer_key
        options = payment_options(sandbox, assets=(asset_of(standard),))
        rail = Eip3009Rail(_Context(options))  # type: ignore[arg-type]

        url = standard.resource_url("/weather")
        required = _b64_json((await _get(url)).headers["payment-required"])
        [accept] = required["accepts"]
        # What the dialect layer does: the v2 `amount` becomes `maxAmountRequired`.
        raw = {k: v for k, v in accept.items() if k != "amount"}
        entry = ExactAcceptEntry.model_validate({**raw, "maxAmountRequired": accept["amount"]})
        intent = rail.describe(entry, url)
        assert not isinstance(intent, str), intent
        assert (intent.amount, intent.currency, intent.asset_symbol) == (
            Decimal("0.1"),
            "EUR",
            "sEURC",
        )
        assert rail.prepare is None  # nothing to read before signing
        before = await standard.token_balance(sandbox.evm.payer_address)
        async with rail.pay(entry, intent, RequestSettings()) as paid:
            header = encode_header(
                {
                    "x402Version": 2,
                    "payload": paid.payload,
                    "accepted": accept,
                    "resource": required["resource"],
                }
            )
            response = await _get(url, {"PAYMENT-SIGNATURE": header})
        assert response.status_code == 200, response.text
        assert _b64_json(response.headers["payment-response"])["payer"] == paid.payer
        after = await standard.token_balance(sandbox.evm.payer_address)
        assert before - after == 100_000
        # The permit facilitator of the EVM sandbox kept working beside it.
        assert await sandbox.evm.token_balance(137, "EURQ", sandbox.evm.payer_address) > 0


# --- pure pieces -------------------------------------------------------------------------


def test_requirements_match() -> None:
    required: dict[str, Any] = {
        "scheme": "exact",
        "network": "eip155:1",
        "asset": "0xAb",
        "amount": "5",
        "payTo": "0xCd",
        "maxTimeoutSeconds": 300,
        "extra": {"name": "N", "version": "2", "nested": {"a": 1}},
    }
    assert requirements_match(required, dict(required))
    assert requirements_match(
        required, {**required, "extra": {**required["extra"], "more": True}, "x": 1}
    )
    assert not requirements_match(required, {**required, "extra": {"name": "N", "version": "2"}})
    assert not requirements_match(
        required, {**required, "extra": {**required["extra"], "nested": {"a": True}}}
    )
    assert not requirements_match(required, {**required, "maxTimeoutSeconds": 300.0})
    assert not requirements_match(required, {k: v for k, v in required.items() if k != "payTo"})
    assert requirements_match({**required, "extra": {}}, {**required, "extra": None})


def test_decode_payment_signature_is_strict() -> None:
    good = {"x402Version": 2, "payload": {}, "accepted": {}}
    assert decode_payment_signature(encode_header(good)) == good
    assert decode_payment_signature(base64.b64encode(json.dumps(good).encode()).decode()) == good
    for bad in (
        "",
        "====",
        "e30",
        "éé",
        encode_header([good]),
        encode_header({**good, "x402Version": "2"}),
    ):
        assert decode_payment_signature(bad) is None


def test_transfer_calldata_layout() -> None:
    authorization = TransferAuthorization(
        from_address="0x" + "11" * 20,
        to="0x" + "22" * 20,
        value=3,
        valid_after=4,
        valid_before=5,
        nonce=b"\x06" * 32,
    )
    signature = b"\x07" * 32 + b"\x08" * 32 + b"\x1c"
    data = transfer_with_authorization_call(authorization, signature)
    assert data[:4].hex() == "e3ee160e"
    words = [data[4 + 32 * i : 36 + 32 * i] for i in range(9)]
    assert len(data) == 4 + 9 * 32
    assert words[0] == bytes(12) + b"\x11" * 20
    assert words[1] == bytes(12) + b"\x22" * 20
    assert [int.from_bytes(w, "big") for w in words[2:5]] == [3, 4, 5]
    assert words[5] == b"\x06" * 32
    assert int.from_bytes(words[6], "big") == 28
    assert (words[7], words[8]) == (b"\x07" * 32, b"\x08" * 32)


def test_rlp_and_the_legacy_transaction() -> None:
    import rlp  # type: ignore[import-untyped]

    for item in (
        [],
        [0, 1, 127, 128, 255, 256, 2**64],
        [b"", b"\x00", b"x" * 55, b"y" * 56, [b"z" * 1000]],
    ):
        assert _rlp(item) == rlp.encode(item)
    key = "0x" + "5a" * 32
    raw = _legacy_transaction(
        DigestSigner(bytes.fromhex(key[2:])),
        chain_id=137,
        nonce=7,
        gas_price=3_000_000_000,
        gas=200_000,
        to="0x" + "33" * 20,
        data=b"\x01\x02",
    )
    assert Account.recover_transaction(raw) == Account.from_key(key).address
    decoded = rlp.decode(raw)
    assert [int.from_bytes(x, "big") for x in decoded[:3]] == [7, 3_000_000_000, 200_000]
    assert int.from_bytes(decoded[6], "big") in (137 * 2 + 35, 137 * 2 + 36)


def test_default_prices_are_euro_amounts() -> None:
    assert all(isinstance(price.amount, Decimal) for price in STANDARD_PRICES.values())
    assert STANDARD_PRICES["/premium"].amount > 1
