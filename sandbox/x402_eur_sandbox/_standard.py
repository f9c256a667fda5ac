"""`StandardMerchant`: a lean merchant of the standard x402 protocol (v2, `exact` on EVM
with EIP-3009, and with Permit2 on its Permit2 routes), with its own facilitator inside, on
a sandbox anvil chain.

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

A Permit2 route (`permit2_prices`, `/permit2` by default) offers the same token with
`extra.assetTransferMethod: "permit2"`. Its payload's `permit2Authorization` is checked like
the foundation's facilitator does (spender is the exact Permit2 proxy, `witness.to` is
`payTo`, `deadline >= now + 6`, `validAfter <= now`, exact amount and token), then the
payer's ERC-20 allowance to Permit2 (`permit2_allowance_required`) and balance are read, and
the proxy's `settle` is simulated with `eth_call` (Permit2 recovers the signer); settling
sends that `settle` from the hot wallet. Permit2 and the proxy are set at their canonical
addresses on the chain (`_permit2.install_permit2`); the sandbox payer's one-time approval
is made at start (`approve_permit2=False` leaves it to the client's `approve_permit2`).

An `upto` route (`upto_prices`, `/metered` by default) offers the same token with the
foundation's `upto` scheme: its price is the most a request may cost, its entry names the
merchant's facilitator (`extra.facilitatorAddress`, the hot wallet), and the payload is
checked as on a Permit2 route plus `witness.facilitator` (`upto_facilitator_mismatch`),
with the spender the `upto` Permit2 proxy. After the handler answered, the merchant charges
`upto_charge` of the maximum (0.4 by default: 0.02 of 0.05) by sending the proxy's
`settle(..., amount, ...)`, or no transaction for 0, and reports it in the
`PAYMENT-RESPONSE`'s `amount` (atomic units), as the foundation's facilitator does.

The routes of `payment_identifier_paths` (`/report`, optional, and `/order`, required, by
default) declare the `payment-identifier` extension in their 402 (`_payment_identifier`)
and deduplicate by it: a proof whose identifier was served before with the same payload is
answered with the first answer again, status, `PAYMENT-RESPONSE` and body, and nothing is
verified or settled; with another payload it is 409 Conflict; on a route that requires one,
a proof without a valid identifier is 400 Bad Request. Proofs of one identifier are handled
one at a time, so a duplicate sent while the first settles waits for its answer.

The merchant also sells MCP tool calls (`tools`, a `PaidToolServer` at `mcp_url` =
`{url}/mcp`, `tool_prices`): the `weather` tool for an EIP-3009 price in its token, over the
x402 foundation's MCP transport, verified and settled by the same facilitator
(`_paid_mcp`).

Every refusal after a payment was offered is a 402 with both `PAYMENT-REQUIRED` (its
`error` the reason) and `PAYMENT-RESPONSE` (`{success: false, errorReason, ...}`). The
foundation's server sends only the first after a failed verification and only the second
after a failed settlement; a client should read whichever it gets.

With `svm=True` (the `svm` extra: `solders`) the merchant also sells Solana routes
(`_standard_svm.SVM_PRICES`: `/solana`, `/solana/eurc`, `/solana/usdc`, `/solana/invoice`):
`exact` entries in two mints, sEURC on SPL Token and sUSDC on Token-2022, on a
`SolanaNode` (the sandbox's `solana`, or one of its own), each with `extra.feePayer`. The
payment is verified and settled by `SvmFacilitator` by the rules of the foundation's
`scheme_exact_svm.md`; a refusal carries the Solana network in its `PAYMENT-RESPONSE`.
`svm_config()` and `svm_asset_configs()` give the Solana payer's settings and the mints.

The token is `SandboxEip3009Token` ("Sandbox EURC", sEURC, EIP-712 version "2", six
decimals), deployed by its own owner key. `start(sandbox)` reuses the EVM sandbox's chain
when `sandbox.evm` runs `chain_id` (137 by default) and funds `sandbox.evm`'s payer key;
otherwise it starts an anvil chain of its own and a fresh payer key.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import functools
import json
import time
from collections.abc import Awaitable, Callable, Mapping
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
from ._payment_identifier import (
    PAYMENT_IDENTIFIER,
    Answer,
    PaymentIdentifiers,
    declaration,
    payload_digest,
    payment_id_of,
    requirement_problem,
)
from ._permit2 import (
    ALLOWANCE_SELECTOR,
    BALANCE_OF_SELECTOR,
    EXACT_PERMIT2_PROXY_ADDRESS,
    PERMIT2_ADDRESS,
    UPTO_PERMIT2_PROXY_ADDRESS,
    Permit2Transfer,
    UptoTransfer,
    install_permit2,
    settle_call,
    upto_settle_call,
)
from ._server import ServedApp, loopback_client
from ._wire import to_atomic

if TYPE_CHECKING:
    from ._sandbox import Sandbox
    from ._standard_svm import SolanaRoutes

__all__ = [
    "DEFAULT_CHAIN_ID",
    "PAYMENT_IDENTIFIER_PATHS",
    "PERMIT2_PRICES",
    "STANDARD_PRICES",
    "TOKEN_NAME",
    "TOKEN_SYMBOL",
    "TOKEN_VERSION",
    "UPTO_PRICES",
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
    "/order": Price(Decimal("0.20"), "An order, placed once per payment identifier"),
}

#: The routes that declare the `payment-identifier` extension: path -> `required`.
PAYMENT_IDENTIFIER_PATHS: dict[str, bool] = {"/report": False, "/order": True}

#: The standard merchant's Permit2 routes (the same token, paid through Permit2).
PERMIT2_PRICES: dict[str, Price] = {
    "/permit2": Price(Decimal("0.05"), "Paid through Permit2 (x402 v2, any ERC-20)"),
}

#: The standard merchant's `upto` routes: the most a request may cost (charged by use).
UPTO_PRICES: dict[str, Price] = {
    "/metered": Price(Decimal("0.05"), "Metered: at most 0.05, charged by use (x402 v2, upto)"),
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
ERR_PERMIT2_INVALID_SPENDER = "invalid_permit2_spender"
ERR_PERMIT2_RECIPIENT_MISMATCH = "invalid_permit2_recipient_mismatch"
ERR_PERMIT2_DEADLINE_EXPIRED = "permit2_deadline_expired"
ERR_PERMIT2_NOT_YET_VALID = "permit2_not_yet_valid"
ERR_PERMIT2_AMOUNT_MISMATCH = "permit2_amount_mismatch"
ERR_PERMIT2_TOKEN_MISMATCH = "permit2_token_mismatch"  # noqa: S105
ERR_PERMIT2_INVALID_SIGNATURE = "invalid_permit2_signature"
ERR_PERMIT2_ALLOWANCE_REQUIRED = "permit2_allowance_required"
ERR_PERMIT2_INVALID_PAYLOAD = "invalid_permit2_payload_format"
ERR_UPTO_FACILITATOR_MISMATCH = "upto_facilitator_mismatch"
# Permit2's custom errors (selectors) -> codes, for a failed `settle` simulation.
_PERMIT2_REVERTS = (
    ("0x815e1d64", ERR_PERMIT2_INVALID_SIGNATURE),  # InvalidSigner()
    ("0x8baa579f", ERR_PERMIT2_INVALID_SIGNATURE),  # InvalidSignature()
    ("0x4be6321b", ERR_PERMIT2_INVALID_SIGNATURE),  # InvalidSignatureLength()
    ("0xcd21db4f", ERR_PERMIT2_DEADLINE_EXPIRED),  # SignatureExpired(uint256)
    ("0x756688fe", "permit2_invalid_nonce"),  # InvalidNonce()
)
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


#: `extra` fields a scheme fills anew for each 402 (the SVM blockhash hints): the
#: foundation's server leaves them out when it matches a payment's `accepted`.
DYNAMIC_EXTRA_FIELDS = ("recentBlockhash", "lastValidBlockHeight")


def requirements_match(required: Mapping[str, Any], accepted: Mapping[str, Any]) -> bool:
    """The foundation server's rule: the core terms equal as values (strings compared
    exactly, so addresses are case-sensitive), the server's `extra` a subset of the
    client's (extra keys on the client's side are fine), its dynamic fields left out."""
    for key in ("scheme", "network", "amount", "asset", "payTo", "maxTimeoutSeconds"):
        if not _contains(required[key], accepted.get(key)):
            return False
    extra = {
        key: value
        for key, value in (required.get("extra") or {}).items()
        if key not in DYNAMIC_EXTRA_FIELDS
    }
    return _contains(extra, accepted.get("extra") or {})


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
        self._http = loopback_client(timeout=_RECEIPT_TIMEOUT)
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
    def __init__(self, reason: str, payer: str | None = None, network: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.payer = payer
        #: The network of a refused payment when it is not the merchant's EVM chain.
        self.network = network


@dataclasses.dataclass(frozen=True)
class _Settlement:
    """A verified payment: the call that settles it (to `contract`), and the transfer its
    receipt must show."""

    payer: str
    contract: str
    data: bytes = dataclasses.field(repr=False)
    pay_to: str
    value: int
    #: An `upto` payment: its authorization and signature, to settle what is charged.
    metered: tuple[UptoTransfer, bytes] | None = dataclasses.field(default=None, repr=False)


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
        permit2_prices: Mapping[str, Price] | None = None,
        approve_permit2: bool = True,
        upto_prices: Mapping[str, Price] | None = None,
        upto_charge: Decimal | str = "0.4",
        payment_identifier_paths: Mapping[str, bool] | None = None,
        tool_prices: Mapping[str, Price] | None = None,
        svm: bool = False,
        svm_prices: Mapping[str, Price] | None = None,
    ) -> None:
        from eth_account import Account

        from ._paid_mcp import PaidToolServer

        self.chain_id = chain_id
        self.network = f"eip155:{chain_id}"
        self._routes(prices, permit2_prices, upto_prices)
        self._solana_routes(svm, svm_prices, payer_funding)
        #: The share of the maximum an `upto` route charges (0 to 1).
        self.upto_charge = Decimal(upto_charge)
        if not 0 <= self.upto_charge <= 1:
            raise ValueError("upto_charge is a share of the maximum, from 0 to 1")
        #: The routes declaring the `payment-identifier` extension: path -> `required`.
        self.payment_identifier_paths: dict[str, bool] = dict(
            PAYMENT_IDENTIFIER_PATHS
            if payment_identifier_paths is None
            else payment_identifier_paths
        )
        #: The identifiers served, each with its answer (a re-sent proof gets it again).
        self.payment_identifiers = PaymentIdentifiers()
        self.approve_permit2 = approve_permit2
        #: The paid MCP tool server at `mcp_url` (`tool_prices`: tool name -> `Price`).
        self.tools = PaidToolServer(self, tool_prices)
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
        self.app = Starlette(routes=self._app_routes())

    def _routes(
        self,
        prices: Mapping[str, Price] | None,
        permit2_prices: Mapping[str, Price] | None,
        upto_prices: Mapping[str, Price] | None,
    ) -> None:
        self.prices: dict[str, Price] = dict(STANDARD_PRICES if prices is None else prices)
        permit2 = PERMIT2_PRICES if permit2_prices is None else permit2_prices
        #: The paths paid through Permit2 (each also in `prices`).
        self.permit2_paths: set[str] = set(permit2)
        self.prices.update(permit2)
        upto = UPTO_PRICES if upto_prices is None else upto_prices
        #: The paths paid with `upto` (each also in `prices`, at its maximum).
        self.upto_paths: set[str] = set(upto)
        self.prices.update(upto)

    def _app_routes(self) -> list[Route]:
        return [
            Route("/", self._index),
            Route("/free", self._free),
            Route("/{path:path}", self._resource, methods=["GET", "POST"]),
        ]

    def _solana_routes(
        self, svm: bool, svm_prices: Mapping[str, Price] | None, payer_funding: Decimal | str
    ) -> None:
        #: The Solana routes (`svm=True`; needs `solders`): node, mints, facilitator, payer.
        self.solana: SolanaRoutes | None = None
        if svm:
            from ._standard_svm import SolanaRoutes

            self.solana = SolanaRoutes(prices=svm_prices, payer_funding=payer_funding)
            self.prices.update(self.solana.prices)
        #: The paths paid on Solana (each also in `prices`).
        self.svm_paths: set[str] = set(self.solana.prices) if self.solana is not None else set()

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

    @property
    def mcp_url(self) -> str:
        """`{url}/mcp`: the paid MCP tool server (streamable HTTP; needs `mcp`)."""
        return self.url + "/mcp"

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

    def svm_config(self) -> dict[str, Any]:
        """The Solana payer's settings as plain data (`svm=True`): its `secret_key`
        (base58 of the 64-byte secret) and the chain's `rpc_url`."""
        if self.solana is None:
            raise RuntimeError("the standard merchant serves Solana with svm=True")
        return self.solana.svm_config()

    def svm_asset_configs(self) -> list[dict[str, Any]]:
        """The Solana mints as plain data (`svm=True`): network, address, symbol,
        currency, decimals and token program of each."""
        if self.solana is None:
            raise RuntimeError("the standard merchant serves Solana with svm=True")
        return self.solana.asset_configs()

    def evm_config(self) -> dict[str, Any]:
        """The payer's EVM settings as plain data: its key, and the chain's RPC URL (the
        EIP-3009 rail needs none; the Permit2 rail reads the payer's approval with it)."""
        return {
            "private_key": self.payer_key,
            "rpc_urls": {self.chain_id: self.rpc_url} if self.rpc_url else {},
        }

    def price_atomic(self, path: str) -> int:
        """The route's price in atomic token units."""
        return to_atomic(self.prices[path].amount)

    def upto_charge_atomic(self, path: str) -> int:
        """What an `upto` route charges a request (atomic): `upto_charge` of its maximum."""
        return int(self.price_atomic(path) * self.upto_charge)

    def accepts(self, path: str) -> list[dict[str, Any]]:
        """The route's accept entries: one on the EVM chain, or one per mint on Solana."""
        if path in self.svm_paths:
            assert self.solana is not None
            return self.solana.accepts(path)
        return [self.requirements(path)]

    def requirements(self, path: str) -> dict[str, Any]:
        """The route's (first) accept entry, as the foundation's server writes it."""
        if path in self.svm_paths:
            return self.accepts(path)[0]
        if self.token is None:
            raise RuntimeError("the standard merchant is not running")
        if path in self.upto_paths:
            return {
                "scheme": "upto",
                "network": self.network,
                "asset": self.token,
                "amount": str(self.price_atomic(path)),
                "payTo": self.pay_to,
                "maxTimeoutSeconds": self.max_timeout_seconds,
                "extra": {
                    "assetTransferMethod": "permit2",
                    "facilitatorAddress": self.facilitator_address,
                },
            }
        return {
            "scheme": "exact",
            "network": self.network,
            "asset": self.token,
            "amount": str(self.price_atomic(path)),
            "payTo": self.pay_to,
            "maxTimeoutSeconds": self.max_timeout_seconds,
            "extra": (
                {"assetTransferMethod": "permit2"}
                if path in self.permit2_paths
                else {"name": TOKEN_NAME, "version": TOKEN_VERSION}
            ),
        }

    def payment_required(self, path: str, url: str, error: str) -> dict[str, Any]:
        price = self.prices[path]
        required: dict[str, Any] = {
            "x402Version": 2,
            "error": error,
            "resource": {
                "url": url,
                "description": price.description,
                "mimeType": price.mime_type,
            },
            "accepts": self.accepts(path),
        }
        declared = self.payment_identifier_paths.get(path)
        if declared is not None:
            required["extensions"] = {PAYMENT_IDENTIFIER: declaration(declared)}
        return required

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
        if self.permit2_paths or self.upto_paths:
            await install_permit2(self.rpc_url)
            if self.approve_permit2:
                await _approve_without_gas(self.rpc_url, self.token, self.payer_key)
        self._rpc = _JsonRpc(self.rpc_url)
        if self.solana is not None:
            await self.solana.start(sandbox)
        self._served = ServedApp(self, "standard-merchant")
        await self.tools.start()
        await self._served.start()

    async def stop(self) -> None:
        with anyio.CancelScope(shield=True):
            if self._served is not None:
                await self._served.stop()
                self._served = None
            await self.tools.stop()
            if self.solana is not None:
                await self.solana.stop()
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
        if path in ("/mcp", "/mcp/"):
            await self.tools(scope, receive, send)
            return
        if path not in self.prices:
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        url = str(request.url)
        header = request.headers.get("payment-signature")
        payment = decode_payment_signature(header) if header else None
        if payment is None:
            answer = self._payment_required(path, url, ERR_PAYMENT_REQUIRED)
        else:
            answer = await self._identified(scope, receive, path, url, payment)
        await _send(send, answer.status, list(answer.headers), answer.body)

    async def _identified(
        self, scope: Any, receive: Any, path: str, url: str, payment: Mapping[str, Any]
    ) -> Answer:
        """A paid request, under the `payment-identifier` rules where the route declares
        the extension: 400 without a valid identifier where it is required, the first
        answer again for an identifier served before with the same proof (nothing is
        verified or settled), 409 for one served with another proof."""
        required = self.payment_identifier_paths.get(path)
        if required is None:
            return await self._paid(scope, receive, path, url, payment)
        problem = requirement_problem(payment, required)
        if problem is not None:
            return _json_answer(400, {"error": [problem]})
        payment_id = payment_id_of(payment)
        if payment_id is None:
            return await self._paid(scope, receive, path, url, payment)
        digest = payload_digest(payment)
        async with self.payment_identifiers.lock(payment_id):
            kept = self.payment_identifiers.lookup(payment_id, digest)
            if isinstance(kept, Answer):
                return kept
            if kept is False:
                message = f"payment identifier {payment_id} was used with another payment"
                return _json_answer(409, {"error": [message]})
            answer = await self._paid(scope, receive, path, url, payment)
            if answer.status < 400 and any(k == b"payment-response" for k, _ in answer.headers):
                self.payment_identifiers.keep(payment_id, digest, answer)
            return answer

    async def _paid(
        self, scope: Any, receive: Any, path: str, url: str, payment: Mapping[str, Any]
    ) -> Answer:
        """Verify the payment, run the handler, settle: the answer to send."""
        accepted = payment["accepted"]
        requirements = next(
            (entry for entry in self.accepts(path) if requirements_match(entry, accepted)), None
        )
        if requirements is None:
            return self._payment_required(path, url, ERR_NO_MATCH)
        try:
            settle = await self._verified(path, payment, requirements)
        except _Refusal as refusal:
            return self._refuse(path, url, refusal)

        status, headers, body = await _buffered(self.app, scope, receive)
        if status >= 400:  # the foundation settles only a successful answer
            return Answer(status, tuple(headers), body)
        try:
            settled = await settle()
        except _Refusal as refusal:
            return self._refuse(path, url, refusal)
        self.settlements.append(settled)
        headers = [
            *headers,
            (b"payment-response", encode_header(settled, compact=False).encode()),
            (b"access-control-expose-headers", b"PAYMENT-RESPONSE"),
        ]
        return Answer(status, tuple(headers), body)

    def _payment_required(
        self, path: str, url: str, error: str, extra_headers: tuple[Any, ...] = ()
    ) -> Answer:
        required = encode_header(self.payment_required(path, url, error))
        headers = (
            (b"content-type", b"application/json"),
            (b"cache-control", b"no-store"),
            (b"payment-required", required.encode()),
            *extra_headers,
        )
        return Answer(402, headers, b"{}")

    def _refuse(self, path: str, url: str, refusal: _Refusal) -> Answer:
        response: dict[str, Any] = {
            "success": False,
            "errorReason": refusal.reason,
            "transaction": "",
            "network": refusal.network or self.network,
        }
        if refusal.payer is not None:
            response["payer"] = refusal.payer
        header = (b"payment-response", encode_header(response, compact=False).encode())
        return self._payment_required(path, url, refusal.reason, (header,))

    # --- the facilitator -------------------------------------------------------------------

    async def _verified(
        self, path: str, payment: Mapping[str, Any], requirements: Mapping[str, Any]
    ) -> Callable[[], Awaitable[dict[str, Any]]]:
        """Verify a payment for `path` by its route's kind: what settles it (the
        `PAYMENT-RESPONSE` object, or `_Refusal`)."""
        if path in self.svm_paths:
            return await self._verify_svm(payment, requirements)
        if path in self.upto_paths:
            settlement = await self._verify_upto(payment, requirements)
        elif path in self.permit2_paths:
            settlement = await self._verify_permit2(payment, requirements)
        else:
            settlement = await self.verify_eip3009(payment, requirements)
        return functools.partial(self._settle_charged, path, settlement)

    async def _verify_svm(
        self, payment: Mapping[str, Any], requirements: Mapping[str, Any]
    ) -> Callable[[], Awaitable[dict[str, Any]]]:
        """Verify a Solana payment with the SVM facilitator (which verifies again when it
        settles, as the foundation's does)."""
        assert self.solana is not None
        facilitator = self.solana.facilitator
        assert facilitator is not None
        network = str(requirements["network"])
        verdict = await facilitator.verify(payment, requirements)
        if not verdict["isValid"]:
            raise _Refusal(verdict["invalidReason"], verdict.get("payer") or None, network)

        async def settle() -> dict[str, Any]:
            settled = await facilitator.settle(payment, requirements)
            if not settled["success"]:
                raise _Refusal(settled["errorReason"], settled.get("payer") or None, network)
            return settled

        return settle

    async def verify_eip3009(
        self, payment: Mapping[str, Any], requirements: Mapping[str, Any]
    ) -> _Settlement:
        """Verify an `exact` EIP-3009 payment against `requirements` (the facilitator's
        checks and simulation): the settlement it allows; raises `_Refusal`."""
        authorization, signature = await self._verify(payment, requirements)
        return _Settlement(
            payer=authorization.from_address,
            contract=str(self.token),
            data=transfer_with_authorization_call(authorization, signature),
            pay_to=authorization.to,
            value=authorization.value,
        )

    async def settle(self, settlement: _Settlement) -> dict[str, Any]:
        """Settle a verified payment from the hot wallet: the `PAYMENT-RESPONSE` object;
        raises `_Refusal`."""
        return await self._settle_transfer(settlement)

    async def _settle_charged(self, path: str, settlement: _Settlement) -> dict[str, Any]:
        """Settle a verified payment; an `upto` one for what the route charges (no
        transaction for 0), reported in the response's `amount`."""
        if settlement.metered is None:
            return await self._settle_transfer(settlement)
        upto, signature = settlement.metered
        charged = self.upto_charge_atomic(path)
        if charged == 0:
            settled = {"success": True, "payer": settlement.payer, "transaction": ""}
            return {**settled, "network": self.network, "amount": "0"}
        metered = dataclasses.replace(
            settlement, data=upto_settle_call(upto, charged, signature), value=charged
        )
        return {**await self._settle_transfer(metered), "amount": str(charged)}

    async def _verify_upto(
        self, payment: Mapping[str, Any], requirements: Mapping[str, Any]
    ) -> _Settlement:
        """The foundation facilitator's `upto` checks: those of Permit2 (with the `upto`
        proxy as spender), and the witness's facilitator is this merchant's; the proxy's
        `settle` of the maximum is simulated."""
        payload = payment["payload"]
        try:
            upto = UptoTransfer.from_wire(payload.get("permit2Authorization"))
        except ValueError:
            raise _Refusal(ERR_PERMIT2_INVALID_PAYLOAD) from None
        transfer = upto.transfer
        if transfer.spender.lower() != UPTO_PERMIT2_PROXY_ADDRESS.lower():
            raise _Refusal(ERR_PERMIT2_INVALID_SPENDER, transfer.from_address)
        if upto.facilitator.lower() != self.facilitator_address.lower():
            raise _Refusal(ERR_UPTO_FACILITATOR_MISMATCH, transfer.from_address)
        signature = await self._permit2_checks(transfer, payload, requirements)
        settlement = _Settlement(
            payer=transfer.from_address,
            contract=UPTO_PERMIT2_PROXY_ADDRESS,
            data=upto_settle_call(upto, transfer.amount, signature),
            pay_to=transfer.to,
            value=transfer.amount,
            metered=(upto, signature),
        )
        await self._simulate_call(settlement, _PERMIT2_REVERTS)
        return settlement

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

    async def _verify_permit2(
        self, payment: Mapping[str, Any], requirements: Mapping[str, Any]
    ) -> _Settlement:
        """The foundation facilitator's Permit2 checks, in its order; the signature (and the
        nonce) are checked by Permit2 itself in an `eth_call` simulation of `settle`."""
        payload = payment["payload"]
        try:
            transfer = Permit2Transfer.from_wire(payload.get("permit2Authorization"))
        except ValueError:
            raise _Refusal(ERR_PERMIT2_INVALID_PAYLOAD) from None
        if transfer.spender.lower() != EXACT_PERMIT2_PROXY_ADDRESS.lower():
            raise _Refusal(ERR_PERMIT2_INVALID_SPENDER, transfer.from_address)
        signature = await self._permit2_checks(transfer, payload, requirements)
        settlement = _Settlement(
            payer=transfer.from_address,
            contract=EXACT_PERMIT2_PROXY_ADDRESS,
            data=settle_call(transfer, signature),
            pay_to=transfer.to,
            value=transfer.amount,
        )
        await self._simulate_call(settlement, _PERMIT2_REVERTS)
        return settlement

    async def _permit2_checks(
        self,
        transfer: Permit2Transfer,
        payload: Mapping[str, Any],
        requirements: Mapping[str, Any],
    ) -> bytes:
        """The checks after the spender's, in the facilitator's order: recipient, time
        window, amount, token, signature shape, allowance, balance. The signature."""
        payer = transfer.from_address
        if transfer.to.lower() != str(requirements["payTo"]).lower():
            raise _Refusal(ERR_PERMIT2_RECIPIENT_MISMATCH, payer)
        now = int(time.time())
        if transfer.deadline < now + 6:
            raise _Refusal(ERR_PERMIT2_DEADLINE_EXPIRED, payer)
        if transfer.valid_after > now:
            raise _Refusal(ERR_PERMIT2_NOT_YET_VALID, payer)
        if transfer.amount != int(requirements["amount"]):
            raise _Refusal(ERR_PERMIT2_AMOUNT_MISMATCH, payer)
        if transfer.token.lower() != str(requirements["asset"]).lower():
            raise _Refusal(ERR_PERMIT2_TOKEN_MISMATCH, payer)
        signature = _parse_signature(payload.get("signature"))
        if signature is None:
            raise _Refusal(ERR_PERMIT2_INVALID_SIGNATURE, payer)
        owner = bytes(12) + bytes.fromhex(payer[2:])
        allowance = await self._read_uint(
            ALLOWANCE_SELECTOR + owner + bytes(12) + bytes.fromhex(PERMIT2_ADDRESS[2:]), payer
        )
        if allowance < transfer.amount:
            raise _Refusal(ERR_PERMIT2_ALLOWANCE_REQUIRED, payer)
        if await self._read_uint(BALANCE_OF_SELECTOR + owner, payer) < transfer.amount:
            raise _Refusal(ERR_INSUFFICIENT_BALANCE, payer)
        return signature

    async def _read_uint(self, data: bytes, payer: str) -> int:
        """A uint256 view of the token (`eth_call` at `latest`)."""
        assert self._rpc is not None
        try:
            result = await self._rpc.call(
                "eth_call", {"to": self.token, "data": "0x" + data.hex()}, "latest"
            )
            return int(str(result), 16)
        except (_RpcError, httpx.HTTPError, ValueError):
            raise _Refusal(ERR_SIMULATION_FAILED, payer) from None

    async def _simulate_call(
        self, settlement: _Settlement, reverts: tuple[tuple[str, str], ...]
    ) -> None:
        assert self._rpc is not None
        call = {
            "from": self.facilitator_address,
            "to": settlement.contract,
            "gas": hex(_SETTLE_GAS),
            "data": "0x" + settlement.data.hex(),
        }
        try:
            await self._rpc.call("eth_call", call, "pending")
        except httpx.HTTPError:
            raise _Refusal(ERR_SIMULATION_FAILED, settlement.payer) from None
        except _RpcError as exc:
            text = f"{exc} {json.dumps(exc.error)}".lower()
            reason = next((code for needle, code in reverts if needle in text), None)
            raise _Refusal(reason or ERR_SIMULATION_FAILED, settlement.payer) from None

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
        assert self.token is not None
        return await self._settle_transfer(
            _Settlement(
                payer=authorization.from_address,
                contract=self.token,
                data=transfer_with_authorization_call(authorization, signature),
                pay_to=authorization.to,
                value=authorization.value,
            )
        )

    async def _settle_transfer(self, settlement: _Settlement) -> dict[str, Any]:
        """Send the settlement's call from the hot wallet and wait for its receipt, which
        must carry the token's `Transfer(payer, payTo, value)`."""
        rpc, token = self._rpc, self.token
        assert rpc is not None
        assert token is not None
        payer = settlement.payer
        async with self._settle_lock:  # one hot wallet: one transaction nonce sequence
            try:
                tx_hash = await self._send_transaction(rpc, settlement.contract, settlement.data)
            except (_RpcError, httpx.HTTPError):
                raise _Refusal(ERR_UNEXPECTED_SETTLE, payer) from None
        try:
            receipt = await _receipt(rpc, tx_hash)
        except (_RpcError, httpx.HTTPError):
            raise _Refusal(ERR_UNEXPECTED_SETTLE, payer) from None
        if receipt is None or receipt.get("status") != "0x1":
            raise _Refusal(ERR_TRANSACTION_FAILED, payer)
        if not _has_transfer_log(receipt, token, payer, settlement.pay_to, settlement.value):
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
    receipt: Mapping[str, Any], token: str, payer: str, pay_to: str, value: int
) -> bool:
    """The receipt carries the token's `Transfer(from, to, value)` (the foundation checks it)."""
    topic = "0x" + keccak256(_TRANSFER_EVENT.encode()).hex()
    expected = [
        topic,
        "0x" + (bytes(12) + bytes.fromhex(payer[2:])).hex(),
        "0x" + (bytes(12) + bytes.fromhex(pay_to[2:])).hex(),
    ]
    for log in receipt.get("logs") or []:
        if str(log.get("address", "")).lower() != token.lower():
            continue
        topics = [str(t).lower() for t in log.get("topics") or []]
        if topics == expected and int(str(log.get("data", "0x0")), 16) == value:
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


def _json_answer(status: int, body: Any) -> Answer:
    raw = json.dumps(body).encode()
    return Answer(status, ((b"content-type", b"application/json"),), raw)


async def _send(send: Any, status: int, headers: list[Any], body: bytes) -> None:
    headers = [(k, v) for k, v in headers if k.lower() != b"content-length"]
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _approve_without_gas(rpc_url: str, token: str, owner_key: str) -> None:
    """The sandbox payer's one-time Permit2 approval, leaving its native balance as it was
    (anvil only: the gas is lent with `anvil_setBalance` and the balance set back)."""
    from eth_account import Account

    from ._permit2 import approve_permit2, permit2_allowance

    owner = str(Account.from_key(owner_key).address)
    if await permit2_allowance(rpc_url, token, owner) > 0:
        return
    rpc = _JsonRpc(rpc_url)
    try:
        before = await rpc.call("eth_getBalance", owner, "latest")
        await rpc.call("anvil_setBalance", owner, hex(int(before, 16) + 10**18))
        try:
            await approve_permit2(rpc_url, token, owner_key)
        finally:
            await rpc.call("anvil_setBalance", owner, before)
    finally:
        await rpc.aclose()
