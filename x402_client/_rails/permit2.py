"""The `permit2` rail: pay the standard x402 `exact` scheme on EVM chains through Uniswap's
Permit2 contract (`extra.assetTransferMethod: "permit2"`), for any ERC-20 the asset table
knows or the user declared, on any `eip155` chain.

The payer signs a Permit2 `PermitWitnessTransferFrom` whose spender is the x402 foundation's
exact Permit2 proxy and whose witness binds the recipient: the merchant's facilitator calls
the proxy's `settle`, which has Permit2 move exactly the signed amount to `payTo`, and pays
the gas. What is signed (as the foundation's clients sign it, and its facilitator verifies):

    domain  {name: "Permit2", chainId, verifyingContract: PERMIT2_ADDRESS}   (no version)
    message PermitWitnessTransferFrom(
                permitted: TokenPermissions(token=asset, amount),
                spender: EXACT_PERMIT2_PROXY_ADDRESS,
                nonce: a random uint256,
                deadline: now + maxTimeoutSeconds,
                witness: Witness(to=payTo, validAfter=0))

Permit2 can move a token only once the payer has approved it on the token (one ERC-20
`approve(PERMIT2_ADDRESS, ...)`, a transaction that costs gas). This rail never sends that
transaction by itself: `prepare` reads the allowance through the chain's configured RPC
URL, and an entry the allowance does not cover is skipped with a reason that names the
approval and `approve_permit2(...)`, the explicit call that makes it. Without an RPC URL
for the chain the entry is skipped too (the allowance cannot be known).

x402 v1 has no Permit2 payloads: only v2 entries (`eip155:<id>`) are paid.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

import httpx

from .._protocol.amounts import format_amount
from .._protocol.assets import Asset, find_asset
from .._protocol.errors import ConfigurationError
from .._protocol.models import AcceptEntry, ExactAcceptEntry
from .._protocol.rail_interface import NotForThisRail, RailContext
from .._protocol.redact import endpoint_url, private_endpoints
from .._protocol.types import PaymentIntent
from .._state.http import default_ssl_context
from .._state.rpc_wait import Report, RpcWait, watched
from ._evm_family import SigningRail, StandardEntry
from ._evm_signing import (
    UINT256_LIMIT,
    DigestSigner,
    address_word,
    check_chain_id,
    check_fields,
    checksum_address,
    keccak256,
    uint_word,
)

__all__ = [
    "EXACT_PERMIT2_PROXY_ADDRESS",
    "MAX_UINT256",
    "PERMIT2_ADDRESS",
    "PERMIT2_DOMAIN_TYPE",
    "PERMIT2_EVM_EXTRA_MISSING",
    "PERMIT_WITNESS_TRANSFER_FROM_TYPE",
    "ChainReader",
    "ChainReadingRail",
    "Permit2Authorization",
    "Permit2Family",
    "Permit2Rail",
    "RpcUnavailable",
    "new_permit2_authorization",
    "permit2_digest",
    "permit2_domain_separator",
    "permit2_payload",
    "permit2_typed_data",
    "witness_transfer_digest",
    "witness_transfer_document",
]

#: Uniswap's Permit2, at the same address on every EVM chain.
PERMIT2_ADDRESS = "0x000000000022D473030F116dDEE9F6B43aC78BA3"
#: The x402 foundation's `x402ExactPermit2Proxy`, the spender of every exact Permit2
#: payment (the foundation's facilitator refuses any other).
EXACT_PERMIT2_PROXY_ADDRESS = "0x402085c248EeA27D92E8b30b2C58ed07f9E20001"

PERMIT2_EVM_EXTRA_MISSING = "Permit2 entries need the evm extra: pip install 'x402-eur[evm]'"

PERMIT2_DOMAIN_TYPE = "EIP712Domain(string name,uint256 chainId,address verifyingContract)"
_PERMISSIONS_TYPE = "TokenPermissions(address token,uint256 amount)"
_WITNESS_TYPE = "Witness(address to,uint256 validAfter)"
#: The full EIP-712 type of the signed message (referenced types in alphabetical order).
PERMIT_WITNESS_TRANSFER_FROM_TYPE = (
    "PermitWitnessTransferFrom(TokenPermissions permitted,address spender,uint256 nonce,"
    "uint256 deadline,Witness witness)" + _PERMISSIONS_TYPE + _WITNESS_TYPE
)
#: The largest allowance (what `approve_permit2` approves unless told an amount).
MAX_UINT256 = UINT256_LIMIT - 1
#: ERC-20 `allowance(address,address)` and `approve(address,uint256)` selectors.
_ALLOWANCE = bytes.fromhex("dd62ed3e")
_RPC_TIMEOUT = 10.0


@functools.cache
def _type_hashes() -> tuple[bytes, bytes, bytes, bytes]:
    return (
        keccak256(PERMIT2_DOMAIN_TYPE.encode()),
        keccak256(PERMIT_WITNESS_TRANSFER_FROM_TYPE.encode()),
        keccak256(_PERMISSIONS_TYPE.encode()),
        keccak256(_WITNESS_TYPE.encode()),
    )


@functools.lru_cache(maxsize=64)
def permit2_domain_separator(chain_id: int) -> bytes:
    """Permit2's EIP-712 domain separator on `chain_id` (cached per chain)."""
    domain_type_hash = _type_hashes()[0]
    return keccak256(
        domain_type_hash
        + keccak256(b"Permit2")
        + uint_word(chain_id)
        + address_word(PERMIT2_ADDRESS)
    )


# --- the authorization -------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Permit2Authorization:
    """The fields of a Permit2 `PermitWitnessTransferFrom` for the exact proxy, typed.

    `to_wire()` gives them as the foundation's clients send them (`permit2Authorization`):
    every number a decimal string, addresses checksummed.
    """

    from_address: str
    token: str
    amount: int
    spender: str
    nonce: int = dataclasses.field(repr=False)
    deadline: int
    to: str
    valid_after: int = 0

    def __post_init__(self) -> None:
        check_fields(
            self,
            ("from_address", "token", "spender", "to"),
            ("amount", "nonce", "deadline", "valid_after"),
        )

    def to_wire(self) -> dict[str, Any]:
        return {
            "from": checksum_address(self.from_address),
            "permitted": {"token": checksum_address(self.token), "amount": str(self.amount)},
            "spender": checksum_address(self.spender),
            "nonce": str(self.nonce),
            "deadline": str(self.deadline),
            "witness": {"to": checksum_address(self.to), "validAfter": str(self.valid_after)},
        }


def new_permit2_authorization(
    *,
    payer: str,
    token: str,
    pay_to: str,
    amount: int,
    max_timeout_seconds: int,
    now: float,
    nonce: int | None = None,
) -> Permit2Authorization:
    """A fresh authorization of exactly `amount` of `token` to `pay_to` through the exact
    proxy: a random uint256 nonce, `deadline = now + maxTimeoutSeconds`, `validAfter = 0`
    (what the foundation's client sends)."""
    return Permit2Authorization(
        from_address=payer,
        token=token,
        amount=amount,
        spender=EXACT_PERMIT2_PROXY_ADDRESS,
        nonce=int.from_bytes(os.urandom(32), "big") if nonce is None else nonce,
        deadline=int(now) + max_timeout_seconds,
        to=pay_to,
        valid_after=0,
    )


def witness_transfer_digest(
    authorization: Any,
    type_hashes: tuple[bytes, bytes],
    witness: bytes,
    *,
    chain_id: int,
) -> bytes:
    """The EIP-712 digest of a Permit2 `PermitWitnessTransferFrom` that is signed:
    `keccak256(0x1901 ‖ domainSeparator ‖ structHash)`. `authorization` has `token`,
    `amount`, `spender`, `nonce` and `deadline`; `type_hashes` are the hashes of the
    scheme's full message type and of `TokenPermissions`; `witness` is the hash of the
    scheme's witness struct."""
    primary_hash, permissions_hash = type_hashes
    permitted = keccak256(
        permissions_hash + address_word(authorization.token) + uint_word(authorization.amount)
    )
    struct_hash = keccak256(
        primary_hash
        + permitted
        + address_word(authorization.spender)
        + uint_word(authorization.nonce)
        + uint_word(authorization.deadline)
        + witness
    )
    return keccak256(b"\x19\x01" + permit2_domain_separator(chain_id) + struct_hash)


def permit2_digest(authorization: Permit2Authorization, *, chain_id: int) -> bytes:
    """The EIP-712 digest that is signed: `keccak256(0x1901 ‖ domainSeparator ‖ structHash)`."""
    _, primary_hash, permissions_hash, witness_hash = _type_hashes()
    witness = keccak256(
        witness_hash + address_word(authorization.to) + uint_word(authorization.valid_after)
    )
    return witness_transfer_digest(
        authorization, (primary_hash, permissions_hash), witness, chain_id=chain_id
    )


def witness_transfer_document(
    authorization: Any, witness: list[tuple[str, str, Any]], *, chain_id: int
) -> dict[str, Any]:
    """A Permit2 `PermitWitnessTransferFrom` as a full EIP-712 document, as eth-account's
    `sign_typed_data` and `encode_typed_data(full_message=...)` take it. `authorization`
    has `token`, `amount`, `spender`, `nonce` and `deadline`; `witness` is the scheme's
    witness as (name, type, value), in its type's order."""
    return {
        "types": {
            "EIP712Domain": [
                {"name": "name", "type": "string"},
                {"name": "chainId", "type": "uint256"},
                {"name": "verifyingContract", "type": "address"},
            ],
            "PermitWitnessTransferFrom": [
                {"name": "permitted", "type": "TokenPermissions"},
                {"name": "spender", "type": "address"},
                {"name": "nonce", "type": "uint256"},
                {"name": "deadline", "type": "uint256"},
                {"name": "witness", "type": "Witness"},
            ],
            "TokenPermissions": [
                {"name": "token", "type": "address"},
                {"name": "amount", "type": "uint256"},
            ],
            "Witness": [{"name": name, "type": kind} for name, kind, _ in witness],
        },
        "primaryType": "PermitWitnessTransferFrom",
        "domain": {"name": "Permit2", "chainId": chain_id, "verifyingContract": PERMIT2_ADDRESS},
        "message": {
            "permitted": {"token": authorization.token, "amount": authorization.amount},
            "spender": authorization.spender,
            "nonce": authorization.nonce,
            "deadline": authorization.deadline,
            "witness": {name: value for name, _, value in witness},
        },
    }


def permit2_typed_data(authorization: Permit2Authorization, *, chain_id: int) -> dict[str, Any]:
    """The same message as a full EIP-712 document (for reference and independent checks)."""
    witness = [
        ("to", "address", authorization.to),
        ("validAfter", "uint256", authorization.valid_after),
    ]
    return witness_transfer_document(authorization, witness, chain_id=chain_id)


def permit2_payload(authorization: Any, signature: bytes) -> dict[str, Any]:
    """The scheme payload of a Permit2 authorization (`exact` or `upto`: anything with
    `to_wire()`): `{"permit2Authorization": {...}, "signature": "0x..."}`."""
    if len(signature) != 65:
        raise ValueError("a Permit2 ECDSA signature is 65 bytes")
    return {
        "permit2Authorization": authorization.to_wire(),
        "signature": "0x" + signature.hex(),
    }


# --- reading the chain -------------------------------------------------------------------


class RpcUnavailable(Exception):
    """No RPC endpoint of a chain answered."""


class ChainReader:
    """`eth_call`s on the configured RPC endpoints of each chain, tried in order. Each URL is
    used only after its `eth_chainId` matched (checked once): a mismatch is a
    `ConfigurationError`, never a fall-back. Errors name endpoints by scheme, host and port."""

    def __init__(
        self, rpc_urls: Mapping[int, tuple[str, ...]], report: Report | None = None, rail: str = ""
    ) -> None:
        self._rpc_urls = rpc_urls
        #: A call slower than a second is reported (`on_progress`) when the rail gave one.
        self._report, self._rail = report, rail
        private_endpoints(url for urls in rpc_urls.values() for url in urls)
        #: (chain id, index into its URLs) of the endpoints whose chain id matched.
        self._verified: set[tuple[int, int]] = set()
        self._http: httpx.AsyncClient | None = None

    def __repr__(self) -> str:
        return f"ChainReader(chains={sorted(self._rpc_urls)})"

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def _rpc(self, chain_id: int, index: int, method: str, params: list[Any]) -> Any:
        if self._http is None:
            self._http = httpx.AsyncClient(
                timeout=_RPC_TIMEOUT, trust_env=False, verify=default_ssl_context(trust_env=False)
            )
        response = await self._http.post(
            self._rpc_urls[chain_id][index],
            json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
        )
        response.raise_for_status()
        answer = response.json()
        if not isinstance(answer, dict) or "result" not in answer:
            raise ValueError("not a JSON-RPC result")
        return answer["result"]

    async def _ask(self, chain_id: int, index: int, method: str, params: list[Any]) -> Any:
        if (chain_id, index) not in self._verified:
            reported = await self._rpc(chain_id, index, "eth_chainId", [])
            shown = endpoint_url(self._rpc_urls[chain_id][index])
            check_chain_id(shown, int(str(reported), 16), chain_id)
            self._verified.add((chain_id, index))
        return await self._rpc(chain_id, index, method, params)

    async def request(self, chain_id: int, method: str, params: list[Any]) -> Any:
        """One JSON-RPC call on the chain's endpoints, tried in order: its result (which may
        be null). `RpcUnavailable` when none answered with a result (an error answer, a
        transport failure or something unreadable is never read as an answer).

        The URLs stay out of this frame's locals (they may carry a key): each is read from
        `self._rpc_urls` where it is used, by its index.
        """
        failures: list[str] = []
        count = len(self._rpc_urls.get(chain_id, ()))
        for index in range(count):
            wait = RpcWait(
                self._report,
                rail=self._rail,
                what=f"chain {chain_id} RPC",
                endpoint=index + 1,
                endpoints=count,
                attempt=index + 1,
            )
            try:
                return await watched(
                    wait, functools.partial(self._ask, chain_id, index, method, params)
                )
            except ConfigurationError:
                raise  # an X402Error is an httpx.HTTPError: never a fall-back to the next URL
            except (httpx.HTTPError, ValueError) as exc:
                shown = endpoint_url(self._rpc_urls[chain_id][index])
                failures.append(f"{shown}: {type(exc).__name__}")
        raise RpcUnavailable(
            f"no RPC endpoint for chain {chain_id} answered ({'; '.join(failures)})"
        )

    async def call(self, chain_id: int, to: str, data: bytes, block: str = "latest") -> bytes:
        """`eth_call` at `block` (a tag or a hex number); the raw return data."""
        result = await self.request(
            chain_id, "eth_call", [{"to": to, "data": "0x" + data.hex()}, block]
        )
        if not isinstance(result, str) or not result.startswith("0x"):
            raise RpcUnavailable(f"chain {chain_id} answered eth_call with no hex data")
        try:
            return bytes.fromhex(result[2:])
        except ValueError:
            raise RpcUnavailable(f"chain {chain_id} answered eth_call with no hex data") from None

    async def allowance(self, chain_id: int, token: str, owner: str, spender: str) -> int:
        data = _ALLOWANCE + address_word(owner) + address_word(spender)
        result = await self.call(chain_id, token, data)
        if len(result) != 32:
            raise RpcUnavailable(
                f"{token} on eip155:{chain_id} answered allowance() with no uint256 "
                "(is it an ERC-20 token?)"
            )
        return int.from_bytes(result, "big")


# --- the rail ----------------------------------------------------------------------------


def _approval_call(chain_id: int, asset: str) -> str:
    return f"payments(client).approve_permit2(chain_id={chain_id}, asset={asset!r})"


EntryT = TypeVar("EntryT", bound=StandardEntry)


class ChainReadingRail(SigningRail[EntryT]):
    """A signing rail that reads the chain before it signs (an allowance, a channel's
    balance): it needs the chain's RPC URL (`unreadable` says what cannot be read without
    it) and keeps one `ChainReader` on the options' endpoints. Built once per payer."""

    #: What cannot be checked without an RPC URL (`"the Permit2 approval cannot be checked"`).
    unreadable: ClassVar[str]

    def __init__(self, context: RailContext) -> None:
        super().__init__(context)
        self._reader: ChainReader | None = None

    def needs(self, chain_id: int) -> tuple[list[str], list[str]]:
        evm = self._context.options.evm
        blockers, settings = super().needs(chain_id)
        if evm is None or chain_id not in evm.rpc_urls:
            blockers.append(
                f"no RPC URL configured for chain {chain_id} (EvmOptions.rpc_urls), so "
                f"{self.unreadable}"
            )
        return blockers, settings

    async def aclose(self) -> None:
        if self._reader is not None:
            await self._reader.aclose()

    def _chain(self) -> ChainReader:
        evm = self._context.options.evm
        assert evm is not None
        if self._reader is None or self._reader._rpc_urls is not evm.rpc_urls:
            context = self._context
            report = context.report if context.options.on_progress is not None else None
            self._reader = ChainReader(evm.rpc_urls, report, self.name)
        return self._reader


class Permit2Family(ChainReadingRail[EntryT]):
    """What the rails that pay through Permit2 (`exact` and `upto`) share: the RPC URL the
    approval is read with, and `prepare`, which reads it. Built once per payer."""

    unreadable = "the Permit2 approval cannot be checked"

    def entry_blockers(
        self, entry: EntryT, extra: Mapping[str, Any], asset: Asset | None
    ) -> tuple[list[str], str]:
        blockers = []
        if not entry.network.startswith("eip155:"):
            blockers.append("it is on an x402 v1 network (Permit2 is paid on v2 eip155 networks)")
        return blockers, asset.symbol if asset is not None else "a token"

    async def prepare(self, entry: AcceptEntry, intent: PaymentIntent) -> str | None:
        chosen, chain_id = self.chosen(entry)
        owner = self.signer.address
        try:
            allowance = await self._chain().allowance(
                chain_id, chosen.asset, owner, PERMIT2_ADDRESS
            )
        except RpcUnavailable as exc:
            return f"the Permit2 approval cannot be checked: {exc}"
        if allowance >= chosen.max_amount_required:
            return None
        asset = find_asset(chain_id, chosen.asset, self._context.options.assets)
        assert asset is not None
        return (
            f"Permit2 is not approved to move {asset.symbol} for {owner} on {chosen.network} "
            f"(allowance {format_amount(asset.amount(allowance))}, the payment "
            f"needs {format_amount(intent.amount)}): approve it once with "
            f"{_approval_call(chain_id, chosen.asset)} (one ERC-20 approve transaction; "
            "it costs gas, nothing is paid)"
        )


class Permit2Rail(Permit2Family[ExactAcceptEntry]):
    """Signs Permit2 witness transfers for standard x402 `exact` entries on any EVM chain.

    Built once per payer: `Permit2Rail(context)`. It reads the key from
    `context.options.evm.private_key`, the RPC endpoints (for the allowance) from
    `context.options.evm.rpc_urls`, and the assets it may pay from `_assets.KNOWN_ASSETS`
    plus `context.options.assets`.
    """

    name = "permit2"
    scheme = "exact"
    entry_type = ExactAcceptEntry
    paying = "Permit2 transfer"
    signed = "a Permit2 transfer"
    extra_missing = PERMIT2_EVM_EXTRA_MISSING

    def claim(self, extra: Mapping[str, Any]) -> NotForThisRail | None:
        if extra.get("assetTransferMethod") != "permit2" or "spender" in extra:
            return NotForThisRail("not a Permit2 entry")
        return None

    def authorize(
        self, entry: ExactAcceptEntry, chain_id: int, signer: DigestSigner, now: float
    ) -> dict[str, Any]:
        authorization = new_permit2_authorization(
            payer=signer.address,
            token=entry.asset,
            pay_to=entry.pay_to,
            amount=entry.max_amount_required,
            max_timeout_seconds=entry.max_timeout_seconds,
            now=now,
        )
        digest = permit2_digest(authorization, chain_id=chain_id)
        return permit2_payload(authorization, signer.sign(digest))


def build(context: RailContext) -> Permit2Rail | None:
    """The standard `exact` Permit2 rail: needs an EVM key and the chain's RPC URL (it says
    so per entry)."""
    return Permit2Rail(context)
