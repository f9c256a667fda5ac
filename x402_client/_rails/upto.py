"""The `upto` rail: pay the x402 foundation's EVM `upto` scheme (authorize at most an
amount; the merchant settles what the request used) through Uniswap's Permit2.

The payer signs a Permit2 `PermitWitnessTransferFrom` of the entry's `amount` (the most the
merchant may take) whose spender is the foundation's `upto` Permit2 proxy, and whose
witness binds the recipient and the facilitator the merchant named
(`extra.facilitatorAddress`): only that facilitator may settle it, and the proxy moves no
more than the signed amount. What is signed (as the foundation's clients sign it, and its
facilitator verifies):

    domain  {name: "Permit2", chainId, verifyingContract: PERMIT2_ADDRESS}   (no version)
    message PermitWitnessTransferFrom(
                permitted: TokenPermissions(token=asset, amount=the maximum),
                spender: UPTO_PERMIT2_PROXY_ADDRESS,
                nonce: a random uint256,
                deadline: now + maxTimeoutSeconds,
                witness: Witness(to=payTo, facilitator=extra.facilitatorAddress, validAfter=0))

The caps and budgets hold the maximum (it is the intent's amount); once the merchant
served, what the chain says moved (`check_settlement`: the settlement transaction's block,
the authorization's Permit2 nonce, the token's transfers) is what the ledger and the budgets
keep, and the rest is given back (`_record.PaymentRecord.settle`). The merchant's own
report (its settlement response's `amount`) is shown, never booked; where the chain cannot
tell, the maximum stays booked until recovery can.

Like Permit2 `exact`, the one-time ERC-20 approval to Permit2 is never sent by paying:
`prepare` reads the allowance, and an entry it does not cover is skipped with a reason
naming `approve_permit2(...)`. Only x402 v2 entries (`eip155:<id>`) exist for `upto`.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from collections.abc import Mapping
from typing import Any

import httpx

from .._protocol.models import UptoAcceptEntry
from .._protocol.rail_interface import NotForThisRail, RailContext, SettlementCheck
from .._protocol.types import PaymentIntent
from ._evm_family import chain_id_of
from ._evm_signing import (
    ADDRESS_RE,
    DigestSigner,
    address_word,
    check_fields,
    checksum_address,
    keccak256,
)
from ._evm_signing import uint_word as _uint
from .permit2 import (
    PERMIT2_ADDRESS,
    PERMIT2_EVM_EXTRA_MISSING,
    ChainReader,
    Permit2Family,
    RpcUnavailable,
    permit2_payload,
    witness_transfer_digest,
    witness_transfer_document,
)

__all__ = [
    "UPTO_PERMIT2_PROXY_ADDRESS",
    "UPTO_PERMIT_WITNESS_TRANSFER_FROM_TYPE",
    "UptoAuthorization",
    "UptoRail",
    "check_settlement",
    "new_upto_authorization",
    "upto_digest",
    "upto_payload",
    "upto_typed_data",
]

#: The x402 foundation's `x402UptoPermit2Proxy`, the spender of every `upto` payment (the
#: foundation's facilitator refuses any other).
UPTO_PERMIT2_PROXY_ADDRESS = "0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002"

_PERMISSIONS_TYPE = "TokenPermissions(address token,uint256 amount)"
_WITNESS_TYPE = "Witness(address to,address facilitator,uint256 validAfter)"
#: The full EIP-712 type of the signed message (referenced types in alphabetical order).
UPTO_PERMIT_WITNESS_TRANSFER_FROM_TYPE = (
    "PermitWitnessTransferFrom(TokenPermissions permitted,address spender,uint256 nonce,"
    "uint256 deadline,Witness witness)" + _PERMISSIONS_TYPE + _WITNESS_TYPE
)


@functools.cache
def _type_hashes() -> tuple[bytes, bytes, bytes]:
    return (
        keccak256(UPTO_PERMIT_WITNESS_TRANSFER_FROM_TYPE.encode()),
        keccak256(_PERMISSIONS_TYPE.encode()),
        keccak256(_WITNESS_TYPE.encode()),
    )


@dataclasses.dataclass(frozen=True)
class UptoAuthorization:
    """The fields of an `upto` Permit2 `PermitWitnessTransferFrom`, typed. `amount` is the
    most the facilitator may move. `to_wire()` gives them as the foundation's clients send
    them (`permit2Authorization`): every number a decimal string, addresses checksummed."""

    from_address: str
    token: str
    amount: int
    spender: str
    nonce: int = dataclasses.field(repr=False)
    deadline: int
    to: str
    facilitator: str
    valid_after: int = 0

    def __post_init__(self) -> None:
        check_fields(
            self,
            ("from_address", "token", "spender", "to", "facilitator"),
            ("amount", "nonce", "deadline", "valid_after"),
        )

    def to_wire(self) -> dict[str, Any]:
        return {
            "from": checksum_address(self.from_address),
            "permitted": {"token": checksum_address(self.token), "amount": str(self.amount)},
            "spender": checksum_address(self.spender),
            "nonce": str(self.nonce),
            "deadline": str(self.deadline),
            "witness": {
                "to": checksum_address(self.to),
                "facilitator": checksum_address(self.facilitator),
                "validAfter": str(self.valid_after),
            },
        }


def new_upto_authorization(
    *,
    payer: str,
    token: str,
    pay_to: str,
    facilitator: str,
    amount: int,
    max_timeout_seconds: int,
    now: float,
    nonce: int | None = None,
) -> UptoAuthorization:
    """A fresh authorization of at most `amount` of `token` to `pay_to`, settled only by
    `facilitator`: a random uint256 nonce, `deadline = now + maxTimeoutSeconds`,
    `validAfter = 0` (what the foundation's client sends)."""
    return UptoAuthorization(
        from_address=payer,
        token=token,
        amount=amount,
        spender=UPTO_PERMIT2_PROXY_ADDRESS,
        nonce=int.from_bytes(os.urandom(32), "big") if nonce is None else nonce,
        deadline=int(now) + max_timeout_seconds,
        to=pay_to,
        facilitator=facilitator,
        valid_after=0,
    )


def upto_digest(authorization: UptoAuthorization, *, chain_id: int) -> bytes:
    """The EIP-712 digest that is signed: `keccak256(0x1901 ‖ domainSeparator ‖ structHash)`."""
    primary_hash, permissions_hash, witness_hash = _type_hashes()
    witness = keccak256(
        witness_hash
        + address_word(authorization.to)
        + address_word(authorization.facilitator)
        + _uint(authorization.valid_after)
    )
    return witness_transfer_digest(
        authorization, (primary_hash, permissions_hash), witness, chain_id=chain_id
    )


def upto_typed_data(authorization: UptoAuthorization, *, chain_id: int) -> dict[str, Any]:
    """The same message as a full EIP-712 document (eth-account's `full_message` form), for
    reference and independent checks."""
    witness = [
        ("to", "address", authorization.to),
        ("facilitator", "address", authorization.facilitator),
        ("validAfter", "uint256", authorization.valid_after),
    ]
    return witness_transfer_document(authorization, witness, chain_id=chain_id)


def upto_payload(authorization: UptoAuthorization, signature: bytes) -> dict[str, Any]:
    """The scheme payload: `{"permit2Authorization": {...}, "signature": "0x..."}`."""
    return permit2_payload(authorization, signature)


def _facilitator_of(entry: UptoAcceptEntry) -> str | None:
    found = (entry.extra or {}).get("facilitatorAddress")
    return found if isinstance(found, str) and ADDRESS_RE.match(found) else None


# --- what the chain says of a settlement ---------------------------------------------------
#
# The merchant's settlement response says what it took; the chain says what moved. The
# authorization's Permit2 nonce is consumed exactly once, in the block whose transactions
# settle it, and that settlement emits one `Transfer(payer -> payTo)` of the token. So
# when the nonce is unused at the block before the one the merchant names and used at that
# block, the sum of the token's transfers from the payer to `payTo` in that block is at
# least what this authorization moved (other payments in the same block only add to it),
# and what is booked is that sum, capped by the authorized maximum: never less than what
# moved. Anything else is unverified, and the maximum stays booked.

#: Permit2 `nonceBitmap(address,uint256)` and ERC-20 `Transfer(address,address,uint256)`.
_NONCE_BITMAP = bytes.fromhex("4fe02b44")
_TX_HASH_RE = re.compile(r"0x[0-9a-fA-F]{64}")
_TRANSFER_TOPIC = "0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef"


@dataclasses.dataclass(frozen=True)
class _Signed:
    """The fields of a signed `upto` authorization that tell its settlement on chain."""

    payer: str
    token: str
    pay_to: str
    amount: int
    nonce: int
    deadline: int

    @classmethod
    def of(cls, payload: Mapping[str, Any]) -> _Signed | None:
        try:
            signed = payload["permit2Authorization"]
            made = cls(
                payer=signed["from"],
                token=signed["permitted"]["token"],
                pay_to=signed["witness"]["to"],
                amount=int(signed["permitted"]["amount"]),
                nonce=int(signed["nonce"]),
                deadline=int(signed["deadline"]),
            )
        except (KeyError, TypeError, ValueError):
            return None
        if not all(ADDRESS_RE.match(a) for a in (made.payer, made.token, made.pay_to)):
            return None
        return made


def _hex_int(value: Any) -> int:
    if not isinstance(value, str) or not value.startswith("0x"):
        raise RpcUnavailable("the chain answered a number that is not hex")
    return int(value, 16)


async def _nonce_used(reader: ChainReader, chain_id: int, signed: _Signed, block: str) -> bool:
    data = _NONCE_BITMAP + address_word(signed.payer) + _uint(signed.nonce >> 8)
    word = await reader.call(chain_id, PERMIT2_ADDRESS, data, block)
    if len(word) != 32:
        raise RpcUnavailable("Permit2 answered nonceBitmap() with no uint256")
    return bool(int.from_bytes(word, "big") >> (signed.nonce & 0xFF) & 1)


async def _moved_in(reader: ChainReader, chain_id: int, signed: _Signed, block: int) -> int:
    """The token's transfers from the payer to `payTo` in `block`, summed."""
    number = hex(block)
    logs = await reader.request(
        chain_id,
        "eth_getLogs",
        [
            {
                "fromBlock": number,
                "toBlock": number,
                "address": signed.token,
                "topics": [
                    _TRANSFER_TOPIC,
                    "0x" + address_word(signed.payer).hex(),
                    "0x" + address_word(signed.pay_to).hex(),
                ],
            }
        ],
    )
    if not isinstance(logs, list):
        raise RpcUnavailable("the chain answered eth_getLogs with no list")
    return sum(_hex_int(log.get("data")) for log in logs if isinstance(log, dict))


async def _settled_by(
    reader: ChainReader, chain_id: int, signed: _Signed, transaction: str
) -> SettlementCheck | None:
    """The settlement in the block of `transaction`, if the authorization was consumed
    there; None when it was not (or the transaction is not on chain)."""
    receipt = await reader.request(chain_id, "eth_getTransactionReceipt", [transaction])
    if receipt is None:
        return None
    if not isinstance(receipt, dict):
        raise RpcUnavailable("the chain answered eth_getTransactionReceipt with no object")
    block = _hex_int(receipt.get("blockNumber"))
    if await _nonce_used(reader, chain_id, signed, hex(block - 1)) or not await _nonce_used(
        reader, chain_id, signed, hex(block)
    ):
        return None
    moved = min(await _moved_in(reader, chain_id, signed, block), signed.amount)
    return SettlementCheck("settled", f"verified on chain in block {block}", moved, block)


async def _after_deadline(
    reader: ChainReader, chain_id: int, signed: _Signed, named: str
) -> SettlementCheck:
    """Once no named transaction tells: void if the deadline passed (by the chain's own
    clock) with the nonce unused; else unverified."""
    latest = await reader.request(chain_id, "eth_getBlockByNumber", ["latest", False])
    if not isinstance(latest, dict):
        raise RpcUnavailable("the chain answered eth_getBlockByNumber with no block")
    if _hex_int(latest.get("timestamp")) <= signed.deadline:
        return SettlementCheck(
            "unverified", f"{named}; the authorization can be settled until its deadline"
        )
    if await _nonce_used(reader, chain_id, signed, "latest"):
        return SettlementCheck(
            "unverified", f"{named}, and the authorization was consumed: how much moved is "
            "not known, so the maximum stays booked", final=True,
        )  # fmt: skip
    return SettlementCheck(
        "void", "its deadline passed and its nonce was never used: nothing moved", 0
    )


async def check_settlement(
    reader: ChainReader,
    chain_id: int,
    payload: Mapping[str, Any],
    transaction: str | None,
) -> SettlementCheck:
    """What the chain says an `upto` authorization (`payload`, as signed) moved, given the
    settlement transaction the merchant named (if any). Never raises: an endpoint that
    errs, is rate limited or answers garbage leaves it `unverified`, with the reason."""
    signed = _Signed.of(payload)
    if signed is None:
        return SettlementCheck("unverified", "the authorization cannot be read back")
    try:
        if isinstance(transaction, str) and _TX_HASH_RE.fullmatch(transaction):
            found = await _settled_by(reader, chain_id, signed, transaction)
            if found is not None:
                return found
            named = f"transaction {transaction[:66]} did not settle this authorization"
        else:
            named = "the merchant named no settlement transaction"
        return await _after_deadline(reader, chain_id, signed, named)
    except (RpcUnavailable, ValueError, httpx.HTTPError) as exc:
        # (A configuration error, an httpx.HTTPError, included: the money moved already.)
        return SettlementCheck("unverified", f"the chain could not be read ({exc})")


class UptoRail(Permit2Family[UptoAcceptEntry]):
    """Signs `upto` Permit2 authorizations (at most the entry's amount) on any EVM chain.

    Shares the Permit2 rail's key, RPC endpoints and approval check (`prepare`); built once
    per payer: `UptoRail(context)`.
    """

    name = "upto"
    scheme = "upto"
    entry_type = UptoAcceptEntry
    paying = "upto authorization"
    signed = "an upto authorization"
    extra_missing = PERMIT2_EVM_EXTRA_MISSING

    def claim(self, extra: Mapping[str, Any]) -> NotForThisRail | None:
        # Every upto entry is paid through Permit2, whatever its `assetTransferMethod`.
        return NotForThisRail("not a Permit2 entry") if "spender" in extra else None

    def witness_blockers(self, entry: UptoAcceptEntry) -> list[str]:
        if _facilitator_of(entry) is None:
            return ["it names no facilitatorAddress (extra) to bind the authorization to"]
        return []

    def authorize(
        self, entry: UptoAcceptEntry, chain_id: int, signer: DigestSigner, now: float
    ) -> dict[str, Any]:
        facilitator = _facilitator_of(entry)
        assert facilitator is not None
        authorization = new_upto_authorization(
            payer=signer.address,
            token=entry.asset,
            pay_to=entry.pay_to,
            facilitator=facilitator,
            amount=entry.max_amount_required,
            max_timeout_seconds=entry.max_timeout_seconds,
            now=now,
        )
        digest = upto_digest(authorization, chain_id=chain_id)
        return upto_payload(authorization, signer.sign(digest))

    async def check_settlement(
        self, intent: PaymentIntent, payload: Mapping[str, Any] | None, transaction: str | None
    ) -> SettlementCheck:
        """What the chain says the authorization `payload` of `intent` moved
        (`check_settlement`), through this rail's RPC endpoints."""
        chain_id = chain_id_of(intent.network)
        evm = self._context.options.evm
        if chain_id is None or payload is None or evm is None or chain_id not in evm.rpc_urls:
            return SettlementCheck("unverified", f"no RPC URL to read {intent.network} with")
        return await check_settlement(self._chain(), chain_id, payload, transaction)


def build(context: RailContext) -> UptoRail | None:
    """The `upto` rail: needs an EVM key and the chain's RPC URL (it says so per entry)."""
    return UptoRail(context)
