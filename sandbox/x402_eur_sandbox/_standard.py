"""`StandardMerchant`: a lean merchant of the standard x402 protocol (v2, `exact` on EVM
with EIP-3009), with its own facilitator inside, on a sandbox anvil chain.

It speaks the wire of the x402 foundation's resource server (`docs/x402-standard.md`):

* a priced route without `PAYMENT-SIGNATURE` answers 402, body `{}`, with
  `PAYMENT-REQUIRED` = standard padded base64 of the compact JSON
  `{x402Version: 2, error, resource: {url, description, mimeType}, accepts: [...]}`;
* a retry's `PAYMENT-SIGNATURE` is decoded strictly (standard alphabet, padded; anything
  else is treated as no payment, as the foundation's server does), its `accepted` is
  compared with the route's requirements field by field (`scheme`, `network`, `amount`,
  `asset`, `payTo`, `maxTimeoutSeconds` equal as values, the route's `extra` a subset);
* the authorization is verified like the foundation's facilitator does (recipient,
  exact value, `validBefore >= now + 6`, `validAfter <= now`), then simulated with
  `eth_call` from the hot wallet: the token recovers the signer and compares it with
  `from`, checks the nonce is unused and the balance covers the value; its FiatToken
  revert strings map to the foundation's error codes;
* the handler runs; if it answered < 400 the merchant settles by sending
  `transferWithAuthorization(..., v, r, s)` from its facilitator hot wallet (an anvil dev
  key, which pays the gas), and serves the answer with `PAYMENT-RESPONSE` =
  base64 of `{success: true, payer, transaction, network}`.

Every refusal after a payment was offered is a 402 with both `PAYMENT-REQUIRED` (its
`error` the reason) and `PAYMENT-RESPONSE` (`{success: false, errorReason, ...}`). The
foundation's server sends only the first after a failed verification and only the second
after a failed settlement; a client should read whichever it gets.

The token is `SandboxEip3009Token` ("Sandbox EURC", sEURC, EIP-712 version "2", six
decimals), deployed by its own owner key. `start(sandbox)` reuses the EVM sandbox's chain
when `sandbox.evm` runs `chain_id` (137 by default) and funds `sandbox.evm`'s payer key;
otherwise it starts an anvil chain of its own and a fresh payer key.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections.abc import Mapping
from decimal import Decimal
from importlib import resources
from typing import TYPE_CHECKING, Any

import anyio
import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ._anvil import ANVIL_DEV_KEYS, AnvilNode, _sign_and_send, _web3, token_balance
from ._eip712 import DigestSigner, TransferAuthorization, keccak256
from ._merchant import Price
from ._server import ServedApp
from ._wire import to_atomic

if TYPE_CHECKING:
    from ._sandbox import Sandbox

__all__ = [
    "DEFAULT_CHAIN_ID",
    "STANDARD_PRICES",
    "TOKEN_NAME",
    "TOKEN_SYMBOL",
    "TOKEN_VERSION",
    "StandardMerchant",
    "decode_payment_signature",
    "deploy_eip3009_token",
    "encode_header",
    "requirements_match",
    "transfer_with_authorization_call",
]

#: The EVM sandbox's Polygon-like chain; any chain id works (v2 parses `eip155:<id>`).
DEFAULT_CHAIN_ID = 137
# The token's EIP-712 domain and symbol (ruff S105 mistakes "TOKEN" for a credential).
TOKEN_NAME = "Sandbox EURC"  # noqa: S105
TOKEN_SYMBOL = "sEURC"  # noqa: S105
TOKEN_VERSION = "2"  # noqa: S105
TOKEN_DECIMALS = 6
MAX_TIMEOUT_SECONDS = 300
_ARTIFACT_FILE = "SandboxEip3009Token.json"
# Dev keys nobody else in the sandbox sends from: EvmSandbox uses 0 (deployer) and 1 (its
# facilitator), so the nonces of these two never race with its transactions.
_OWNER_KEY = ANVIL_DEV_KEYS[3]
_FACILITATOR_KEY = ANVIL_DEV_KEYS[4]
_SETTLE_GAS = 200_000
_RECEIPT_TIMEOUT = 30.0

#: The standard merchant's price list (in sEURC, a euro token).
STANDARD_PRICES: dict[str, Price] = {
    "/weather": Price(Decimal("0.10"), "Today's weather in Amsterdam"),
    "/report": Price(Decimal("0.50"), "A market report"),
    "/premium": Price(Decimal("2.00"), "Above the default per-payment cap"),
    "/paid": Price(Decimal("0.01"), "A paid sandbox resource (x402 v2)"),
}

# The foundation's error codes (`x402/mechanisms/evm/constants.py`), so that a client sees
# the reasons a real merchant would give.
ERR_PAYMENT_REQUIRED = "Payment required"
ERR_NO_MATCH = "No matching payment requirements"
ERR_INVALID_PAYLOAD = "invalid_exact_evm_payload"
ERR_INVALID_SIGNATURE = "invalid_exact_evm_payload_signature"
ERR_RECIPIENT_MISMATCH = "invalid_exact_evm_payload_recipient_mismatch"
ERR_VALUE_MISMATCH = "invalid_exact_evm_payload_authorization_value_mismatch"
ERR_VALID_BEFORE = "invalid_exact_evm_payload_authorization_valid_before"
ERR_VALID_AFTER = "invalid_exact_evm_payload_authorization_valid_after"
ERR_NONCE_USED = "invalid_exact_evm_nonce_already_used"
ERR_INSUFFICIENT_BALANCE = "invalid_exact_evm_insufficient_balance"
ERR_SIMULATION_FAILED = "invalid_exact_evm_transaction_simulation_failed"
ERR_TRANSACTION_FAILED = "transaction_failed"
ERR_UNEXPECTED_SETTLE = "unexpected_settle_error"
# FiatToken revert strings -> codes, matched by substring like the foundation's v2 code.
_REVERTS = (
    ("authorization is used", ERR_NONCE_USED),
    ("authorization is expired", ERR_VALID_BEFORE),
    ("authorization is not yet valid", ERR_VALID_AFTER),
    ("exceeds balance", ERR_INSUFFICIENT_BALANCE),
    ("invalid signature", ERR_INVALID_SIGNATURE),
)
_TRANSFER_SIGNATURE = (
    "transferWithAuthorization(address,address,uint256,uint256,uint256,bytes32,"
    "uint8,bytes32,bytes32)"
)
_TRANSFER_EVENT = "Transfer(address,address,uint256)"


# --- wire helpers (pure) -----------------------------------------------------------------


def encode_header(value: Any, *, compact: bool = True) -> str:
    """Standard padded base64 of JSON: compact like `model_dump_json` (`PAYMENT-REQUIRED`),
    or with Python's default separators like the foundation's `PAYMENT-RESPONSE`."""
    text = (
        json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        if compact
        else json.dumps(value)
    )
    return base64.b64encode(text.encode("utf-8")).decode("ascii")


def decode_payment_signature(value: str) -> dict[str, Any] | None:
    """The `PAYMENT-SIGNATURE` payload, or None when it is not standard padded base64 of a
    v2 `PaymentPayload` (the foundation's server then treats the request as unpaid)."""
    try:
        raw = base64.b64decode(value.encode("ascii"), validate=True)
        data = json.loads(raw)
    except (ValueError, binascii.Error):
        return None
    if not isinstance(data, dict):
        return None
    version = data.get("x402Version")
    if isinstance(version, bool) or version != 2:
        return None
    if not isinstance(data.get("payload"), dict) or not isinstance(data.get("accepted"), dict):
        return None
    return data


def _contains(expected: Any, actual: Any) -> bool:
    if isinstance(expected, Mapping):
        return isinstance(actual, Mapping) and all(
            key in actual and _contains(value, actual[key]) for key, value in expected.items()
        )
    return type(expected) is type(actual) and bool(expected == actual)


def requirements_match(required: Mapping[str, Any], accepted: Mapping[str, Any]) -> bool:
    """The foundation server's rule: the core terms equal as values (strings compared
    exactly, so addresses are case-sensitive), the server's `extra` a subset of the
    client's (extra keys on the client's side are fine)."""
    for key in ("scheme", "network", "amount", "asset", "payTo", "maxTimeoutSeconds"):
        if not _contains(required[key], accepted.get(key)):
            return False
    return _contains(required.get("extra") or {}, accepted.get("extra") or {})


def _parse_signature(text: object) -> bytes | None:
    if not isinstance(text, str) or not text.startswith("0x") or len(text) != 132:
        return None
    try:
        raw = bytes.fromhex(text[2:])
    except ValueError:
        return None
    v = raw[64] + 27 if raw[64] < 27 else raw[64]
    return raw[:64] + bytes((v,)) if v in (27, 28) else None


def transfer_with_authorization_call(
    authorization: TransferAuthorization, signature: bytes
) -> bytes:
    """Calldata of `transferWithAuthorization(from, to, value, validAfter, validBefore,
    nonce, v, r, s)` (selector 0xe3ee160e): every argument is one static word."""
    selector = keccak256(_TRANSFER_SIGNATURE.encode())[:4]
    words = (
        bytes(12) + bytes.fromhex(authorization.from_address[2:]),
        bytes(12) + bytes.fromhex(authorization.to[2:]),
        authorization.value.to_bytes(32, "big"),
        authorization.valid_after.to_bytes(32, "big"),
        authorization.valid_before.to_bytes(32, "big"),
        authorization.nonce,
        signature[64].to_bytes(32, "big"),
        signature[:32],
        signature[32:64],
    )
    return selector + b"".join(words)


def _rlp(item: int | bytes | list[Any]) -> bytes:
    if isinstance(item, list):
        payload = b"".join(_rlp(part) for part in item)
        return _rlp_length(len(payload), 0xC0) + payload
    if isinstance(item, int):
        item = item.to_bytes((item.bit_length() + 7) // 8, "big")
    if len(item) == 1 and item[0] < 0x80:
        return item
    return _rlp_length(len(item), 0x80) + item


def _rlp_length(length: int, offset: int) -> bytes:
    if length < 56:
        return bytes((offset + length,))
    encoded = length.to_bytes((length.bit_length() + 7) // 8, "big")
    return bytes((offset + 55 + len(encoded),)) + encoded


def _legacy_transaction(
    signer: DigestSigner,
    *,
    chain_id: int,
    nonce: int,
    gas_price: int,
    gas: int,
    to: str,
    data: bytes,
) -> bytes:
    """A signed EIP-155 legacy transaction (what the foundation's facilitator sends)."""
    fields: list[Any] = [nonce, gas_price, gas, bytes.fromhex(to[2:]), 0, data]
    signature = signer.sign(keccak256(_rlp([*fields, chain_id, 0, 0])))
    v = signature[64] - 27 + 35 + 2 * chain_id
    r = int.from_bytes(signature[:32], "big")
    s = int.from_bytes(signature[32:64], "big")
    return _rlp([*fields, v, r, s])


# --- chain access ------------------------------------------------------------------------


def load_eip3009_artifact() -> dict[str, Any]:
    """The compiled `SandboxEip3009Token` artifact (abi, bytecode, compiler)."""
    package = resources.files("x402_eur_sandbox.contracts")
    data: dict[str, Any] = json.loads(package.joinpath(_ARTIFACT_FILE).read_text("utf-8"))
    return data


async def deploy_eip3009_token(
    rpc_url: str, owner_key: str, name: str = TOKEN_NAME, symbol: str = TOKEN_SYMBOL
) -> str:
    """Deploy a `SandboxEip3009Token` owned by `owner_key`; return its checksum address."""
    from eth_account import Account
    from web3 import Web3

    artifact = load_eip3009_artifact()
    sender = Account.from_key(owner_key).address
    async with _web3(rpc_url) as w3:
        factory = w3.eth.contract(abi=artifact["abi"], bytecode=artifact["bytecode"])
        tx = await factory.constructor(name, symbol).build_transaction(
            {"from": sender, "nonce": await w3.eth.get_transaction_count(sender, "pending")}
        )
        receipt = await _sign_and_send(w3, owner_key, dict(tx))
    address = receipt.get("contractAddress")
    if not address:
        raise RuntimeError("deployment receipt has no contract address")
    return str(Web3.to_checksum_address(address))


async def _mint(rpc_url: str, token: str, owner_key: str, to: str, amount_atomic: int) -> None:
    from eth_account import Account
    from web3 import Web3

    sender = Account.from_key(owner_key).address
    async with _web3(rpc_url) as w3:
        contract = w3.eth.contract(
            address=Web3.to_checksum_address(token), abi=load_eip3009_artifact()["abi"]
        )
        tx = await contract.functions.mint(
            Web3.to_checksum_address(to), amount_atomic
        ).build_transaction(
            {"from": sender, "nonce": await w3.eth.get_transaction_count(sender, "pending")}
        )
        await _sign_and_send(w3, owner_key, dict(tx))


class _RpcError(Exception):
    def __init__(self, error: Any) -> None:
        self.error = error
        message = error.get("message") if isinstance(error, dict) else None
        super().__init__(str(message or error))


class _JsonRpc:
    """Just the JSON-RPC calls a settlement needs, over one kept-alive httpx client."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._http = httpx.AsyncClient(timeout=_RECEIPT_TIMEOUT, trust_env=False)
        self._id = 0

    async def call(self, method: str, *params: Any) -> Any:
        self._id += 1
        response = await self._http.post(
            self.url, json={"jsonrpc": "2.0", "id": self._id, "method": method, "params": params}
        )
        response.raise_for_status()
        answer = response.json()
        if answer.get("error") is not None:
            raise _RpcError(answer["error"])
        return answer.get("result")

    async def aclose(self) -> None:
        await self._http.aclose()


# --- the merchant ------------------------------------------------------------------------


class _Refusal(Exception):
    def __init__(self, reason: str, payer: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.payer = payer


class StandardMerchant:
    """A standard x402 v2 merchant and its facilitator, as one ASGI app on its own port.

    `prices` maps paths to `Price` (in token units: sEURC has six decimals); add routes
    while it runs. After `start`: `url`, `token`, `pay_to`, `payer_key`/`payer_address`
    (funded with `payer_funding` sEURC, no gas coin), `asset_config()` to declare in the
    client's `assets`, and `settlements` (every successful `PAYMENT-RESPONSE`).
    """

    def __init__(
        self,
        *,
        chain_id: int = DEFAULT_CHAIN_ID,
        prices: Mapping[str, Price] | None = None,
        payer_funding: Decimal | str = "100",
        payer_key: str | None = None,
        max_timeout_seconds: int = MAX_TIMEOUT_SECONDS,
    ) -> None:
        from eth_account import Account

        self.chain_id = chain_id
        self.network = f"eip155:{chain_id}"
        self.prices: dict[str, Price] = dict(STANDARD_PRICES if prices is None else prices)
        self.payer_funding = Decimal(payer_funding)
        self.max_timeout_seconds = max_timeout_seconds
        self.pay_to: str = str(Account.create().address)
        self._facilitator = DigestSigner(bytes.fromhex(_FACILITATOR_KEY[2:]))
        self.facilitator_address: str = self._facilitator.address
        self.owner_address: str = str(Account.from_key(_OWNER_KEY).address)
        self._payer_key: str | None = payer_key
        self.token: str | None = None
        self.rpc_url: str | None = None
        self.settlements: list[dict[str, Any]] = []
        self._node: AnvilNode | None = None
        self._rpc: _JsonRpc | None = None
        self._served: ServedApp | None = None
        self._settle_lock = anyio.Lock()
        self._owner_lock = anyio.Lock()
        self._tx_nonce: int | None = None
        self._gas_price: int | None = None
        self.app = Starlette(
            routes=[
                Route("/", self._index),
                Route("/free", self._free),
                Route("/{path:path}", self._resource, methods=["GET", "POST"]),
            ]
        )

    def __repr__(self) -> str:
        return (
            f"StandardMerchant(network={self.network!r}, token={self.token!r}, "
            f"url={self._served.url if self._served is not None else None!r})"
        )

    # --- what tests and the sandbox use ----------------------------------------------------

    @property
    def url(self) -> str:
        if self._served is None:
            raise RuntimeError("the standard merchant is not running")
        return self._served.url

    def resource_url(self, path: str) -> str:
        """A merchant URL: `merchant.resource_url("/weather")`."""
        return self.url + path

    @property
    def payer_key(self) -> str:
        """The funded payer's private key (sandbox only; never printed by `repr`)."""
        if self._payer_key is None:
            raise RuntimeError("the standard merchant is not running")
        return self._payer_key

    @property
    def payer_address(self) -> str:
        from eth_account import Account

        return str(Account.from_key(self.payer_key).address)

    def asset_config(self) -> dict[str, Any]:
        """The sandbox token as plain data: one entry of the client's `assets` (chain id,
        address, symbol, currency, decimals, its EIP-712 name and version)."""
        if self.token is None:
            raise RuntimeError("the standard merchant is not running")
        return {
            "chain_id": self.chain_id,
            "address": self.token,
            "symbol": TOKEN_SYMBOL,
            "currency": "EUR",
            "decimals": TOKEN_DECIMALS,
            "source": "sandbox: SandboxEip3009Token deployed by StandardMerchant",
            "eip712_name": TOKEN_NAME,
            "eip712_version": TOKEN_VERSION,
        }

    def evm_config(self) -> dict[str, Any]:
        """The payer's EVM settings as plain data: its key (the EIP-3009 rail needs no
        RPC URL)."""
        return {"private_key": self.payer_key}

    def price_atomic(self, path: str) -> int:
        """The route's price in atomic token units."""
        return to_atomic(self.prices[path].amount)

    def requirements(self, path: str) -> dict[str, Any]:
        """The route's one accept entry, as the foundation's server writes it."""
        if self.token is None:
            raise RuntimeError("the standard merchant is not running")
        return {
            "scheme": "exact",
            "network": self.network,
            "asset": self.token,
            "amount": str(self.price_atomic(path)),
            "payTo": self.pay_to,
            "maxTimeoutSeconds": self.max_timeout_seconds,
            "extra": {"name": TOKEN_NAME, "version": TOKEN_VERSION},
        }

    def payment_required(self, path: str, url: str, error: str) -> dict[str, Any]:
        price = self.prices[path]
        return {
            "x402Version": 2,
            "error": error,
            "resource": {
                "url": url,
                "description": price.description,
                "mimeType": price.mime_type,
            },
            "accepts": [self.requirements(path)],
        }

    async def token_balance(self, address: str) -> int:
        """Atomic sEURC balance of `address`."""
        assert self.rpc_url is not None
        assert self.token is not None
        return await token_balance(self.rpc_url, self.token, address)

    async def fund(self, address: str, amount: Decimal | str) -> None:
        """Mint `amount` sEURC (in token units) to `address`."""
        assert self.rpc_url is not None
        assert self.token is not None
        async with self._owner_lock:
            await _mint(self.rpc_url, self.token, _OWNER_KEY, address, to_atomic(Decimal(amount)))

    async def authorization_used(self, authorizer: str, nonce: str) -> bool:
        """EIP-3009 `authorizationState(authorizer, nonce)`: True once the nonce is spent."""
        assert self._rpc is not None
        assert self.token is not None
        data = (
            keccak256(b"authorizationState(address,bytes32)")[:4]
            + bytes(12)
            + bytes.fromhex(authorizer[2:])
            + bytes.fromhex(nonce.removeprefix("0x"))
        )
        result = await self._rpc.call(
            "eth_call", {"to": self.token, "data": "0x" + data.hex()}, "latest"
        )
        return int(result, 16) != 0

    # --- lifecycle -------------------------------------------------------------------------

    async def start(self, sandbox: Sandbox | None = None) -> None:
        """Start (a `SandboxPart`): on `sandbox.evm`'s chain when it runs `chain_id`."""
        try:
            await self._start(sandbox)
        except BaseException:
            await self.stop()
            raise

    async def _start(self, sandbox: Sandbox | None) -> None:
        from eth_account import Account

        evm = getattr(sandbox, "evm", None) if sandbox is not None else None
        if evm is not None and self.chain_id in evm.nodes:
            self.rpc_url = str(evm.rpc_url(self.chain_id))
            if self._payer_key is None:
                self._payer_key = str(evm.payer_key)
        else:
            self._node = AnvilNode(self.chain_id)
            await self._node.start()
            self.rpc_url = self._node.rpc_url
        if self._payer_key is None:
            self._payer_key = "0x" + bytes(Account.create().key).hex()
        self.token = await deploy_eip3009_token(self.rpc_url, _OWNER_KEY)
        if self.payer_funding > 0:
            await self.fund(self.payer_address, self.payer_funding)
        self._rpc = _JsonRpc(self.rpc_url)
        self._served = ServedApp(self, "standard-merchant")
        await self._served.start()

    async def stop(self) -> None:
        with anyio.CancelScope(shield=True):
            if self._served is not None:
                await self._served.stop()
                self._served = None
            if self._rpc is not None:
                await self._rpc.aclose()
                self._rpc = None
            if self._node is not None:
                await self._node.stop()
                self._node = None
            self._tx_nonce = None
            self._gas_price = None

    async def __aenter__(self) -> StandardMerchant:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # --- ASGI: the payment gate ------------------------------------------------------------

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path not in self.prices:
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        url = str(request.url)
        header = request.headers.get("payment-signature")
        payment = decode_payment_signature(header) if header else None
        if payment is None:
            await self._payment_required(send, path, url, ERR_PAYMENT_REQUIRED)
            return
        requirements = self.requirements(path)
        if not requirements_match(requirements, payment["accepted"]):
            await self._payment_required(send, path, url, ERR_NO_MATCH)
            return
        try:
            authorization, signature = await self._verify(payment, requirements)
        except _Refusal as refusal:
            await self._refuse(send, path, url, refusal)
            return

        status, headers, body = await _buffered(self.app, scope, receive)
        if status >= 400:  # the foundation settles only a successful answer
            await _send(send, status, headers, body)
            return
        try:
            settlement = await self._settle(authorization, signature)
        except _Refusal as refusal:
            await self._refuse(send, path, url, refusal)
            return
        self.settlements.append(settlement)
        headers = [
            *headers,
            (b"payment-response", encode_header(settlement, compact=False).encode()),
            (b"access-control-expose-headers", b"PAYMENT-RESPONSE"),
        ]
        await _send(send, status, headers, body)

    async def _payment_required(
        self, send: Any, path: str, url: str, error: str, extra_headers: tuple[Any, ...] = ()
    ) -> None:
        required = encode_header(self.payment_required(path, url, error))
        headers = [
            (b"content-type", b"application/json"),
            (b"cache-control", b"no-store"),
            (b"payment-required", required.encode()),
            *extra_headers,
        ]
        await _send(send, 402, headers, b"{}")

    async def _refuse(self, send: Any, path: str, url: str, refusal: _Refusal) -> None:
        response: dict[str, Any] = {
            "success": False,
            "errorReason": refusal.reason,
            "transaction": "",
            "network": self.network,
        }
        if refusal.payer is not None:
            response["payer"] = refusal.payer
        header = (b"payment-response", encode_header(response, compact=False).encode())
        await self._payment_required(send, path, url, refusal.reason, (header,))

    # --- the facilitator -------------------------------------------------------------------

    async def _verify(
        self, payment: Mapping[str, Any], requirements: Mapping[str, Any]
    ) -> tuple[TransferAuthorization, bytes]:
        """The foundation facilitator's checks, in its order; the signature, the nonce and the
        balance are checked by an `eth_call` simulation of the settlement."""
        payload = payment["payload"]
        try:
            authorization = TransferAuthorization.from_wire(payload.get("authorization"))
        except ValueError:
            raise _Refusal(ERR_INVALID_PAYLOAD) from None
        payer = authorization.from_address
        if authorization.to.lower() != str(requirements["payTo"]).lower():
            raise _Refusal(ERR_RECIPIENT_MISMATCH, payer)
        if authorization.value != int(requirements["amount"]):
            raise _Refusal(ERR_VALUE_MISMATCH, payer)
        now = int(time.time())
        if authorization.valid_before < now + 6:
            raise _Refusal(ERR_VALID_BEFORE, payer)
        if authorization.valid_after > now:
            raise _Refusal(ERR_VALID_AFTER, payer)
        signature = _parse_signature(payload.get("signature"))
        if signature is None:
            raise _Refusal(ERR_INVALID_SIGNATURE, payer)
        # The signer is recovered by the token itself, in the simulation below: ecrecover
        # under the token's own domain against `from` (FiatToken's "invalid signature"),
        # the same code that settles. No pure-Python curve arithmetic on the hot path.
        await self._simulate(authorization, signature)
        return authorization, signature

    async def _simulate(self, authorization: TransferAuthorization, signature: bytes) -> None:
        assert self._rpc is not None
        assert self.token is not None
        call = {
            "from": self.facilitator_address,
            "to": self.token,
            "gas": hex(_SETTLE_GAS),
            "data": "0x" + transfer_with_authorization_call(authorization, signature).hex(),
        }
        try:
            # "pending": the block the settlement will land in, timestamp now.
            await self._rpc.call("eth_call", call, "pending")
        except httpx.HTTPError:
            raise _Refusal(ERR_SIMULATION_FAILED, authorization.from_address) from None
        except _RpcError as exc:
            message = str(exc)
            reason = next((code for text, code in _REVERTS if text in message), None)
            raise _Refusal(reason or ERR_SIMULATION_FAILED, authorization.from_address) from None

    async def _settle(
        self, authorization: TransferAuthorization, signature: bytes
    ) -> dict[str, Any]:
        """Send `transferWithAuthorization` from the hot wallet and wait for its receipt."""
        rpc, token = self._rpc, self.token
        assert rpc is not None
        assert token is not None
        payer = authorization.from_address
        data = transfer_with_authorization_call(authorization, signature)
        async with self._settle_lock:  # one hot wallet: one transaction nonce sequence
            try:
                tx_hash = await self._send_transaction(rpc, token, data)
            except (_RpcError, httpx.HTTPError):
                raise _Refusal(ERR_UNEXPECTED_SETTLE, payer) from None
        try:
            receipt = await _receipt(rpc, tx_hash)
        except (_RpcError, httpx.HTTPError):
            raise _Refusal(ERR_UNEXPECTED_SETTLE, payer) from None
        if receipt is None or receipt.get("status") != "0x1":
            raise _Refusal(ERR_TRANSACTION_FAILED, payer)
        if not _has_transfer_log(receipt, token, authorization):
            raise _Refusal(ERR_TRANSACTION_FAILED, payer)
        return {"success": True, "payer": payer, "transaction": tx_hash, "network": self.network}

    async def _send_transaction(self, rpc: _JsonRpc, token: str, data: bytes) -> str:
        for attempt in range(2):
            if self._tx_nonce is None:
                self._tx_nonce = int(
                    await rpc.call("eth_getTransactionCount", self.facilitator_address, "pending"),
                    16,
                )
            if self._gas_price is None or attempt:
                # Twice the node's price: anvil's base fee only falls under this load.
                self._gas_price = 2 * int(await rpc.call("eth_gasPrice"), 16)
            raw = _legacy_transaction(
                self._facilitator,
                chain_id=self.chain_id,
                nonce=self._tx_nonce,
                gas_price=self._gas_price,
                gas=_SETTLE_GAS,
                to=token,
                data=data,
            )
            try:
                tx_hash = await rpc.call("eth_sendRawTransaction", "0x" + raw.hex())
            except _RpcError:
                self._tx_nonce = None  # ask the node again: the nonce or the price was off
                if attempt:
                    raise
                continue
            self._tx_nonce += 1
            return str(tx_hash)
        raise AssertionError("unreachable")  # pragma: no cover

    # --- the resources ---------------------------------------------------------------------

    async def _index(self, request: Request) -> Response:
        return JSONResponse(
            {
                "network": self.network,
                "asset": self.token,
                "paid": {path: format(price.amount, "f") for path, price in self.prices.items()},
                "free": ["/free"],
            }
        )

    async def _free(self, request: Request) -> Response:
        return JSONResponse({"free": True})

    async def _resource(self, request: Request) -> Response:
        path = request.url.path
        price = self.prices.get(path)
        if price is None:
            return JSONResponse({"error": "not found"}, status_code=404)
        return JSONResponse({"resource": path, "paid": True, "description": price.description})


async def _receipt(rpc: _JsonRpc, tx_hash: str) -> dict[str, Any] | None:
    delay = 0.002
    deadline = time.monotonic() + _RECEIPT_TIMEOUT
    while time.monotonic() < deadline:
        receipt = await rpc.call("eth_getTransactionReceipt", tx_hash)
        if receipt is not None:
            result: dict[str, Any] = receipt
            return result
        await anyio.sleep(delay)
        delay = min(delay * 2, 0.05)
    return None


def _has_transfer_log(
    receipt: Mapping[str, Any], token: str, authorization: TransferAuthorization
) -> bool:
    """The receipt carries the token's `Transfer(from, to, value)` (the foundation checks it)."""
    topic = "0x" + keccak256(_TRANSFER_EVENT.encode()).hex()
    expected = [
        topic,
        "0x" + (bytes(12) + bytes.fromhex(authorization.from_address[2:])).hex(),
        "0x" + (bytes(12) + bytes.fromhex(authorization.to[2:])).hex(),
    ]
    for log in receipt.get("logs") or []:
        if str(log.get("address", "")).lower() != token.lower():
            continue
        topics = [str(t).lower() for t in log.get("topics") or []]
        if topics == expected and int(str(log.get("data", "0x0")), 16) == authorization.value:
            return True
    return False


async def _buffered(app: Any, scope: Any, receive: Any) -> tuple[int, list[Any], bytes]:
    """Run `app` and keep its whole answer: the payment is settled before it is sent."""
    status = 500
    headers: list[Any] = []
    body = bytearray()

    async def capture(message: Any) -> None:
        nonlocal status, headers
        if message["type"] == "http.response.start":
            status = int(message["status"])
            headers = list(message.get("headers", []))
        elif message["type"] == "http.response.body":
            body.extend(message.get("body", b""))

    await app(scope, receive, capture)
    return status, headers, bytes(body)


async def _send(send: Any, status: int, headers: list[Any], body: bytes) -> None:
    headers = [(k, v) for k, v in headers if k.lower() != b"content-length"]
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
