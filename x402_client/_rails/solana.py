"""The `svm` rail: pay an x402 `exact` entry on Solana (`solana:*`, v2 and v1) from the
user's own wallet (`PaymentOptions.svm`, an `SvmOptions`).

What is signed (the foundation's `scheme_exact_svm.md`): a v0 transaction whose fee payer is
the entry's `extra.feePayer` (the merchant's facilitator, which pays the network fee and
signs last: its signature slot is left empty), with four instructions in this order:
SetComputeUnitLimit, SetComputeUnitPrice (never above the scheme's cap), TransferChecked of
exactly the amount between the payer's and `payTo`'s associated token accounts under the
mint's own program (SPL Token or Token-2022; the decimals read from the mint), and a Memo
(`extra.memo` when the entry has one, else 16 random bytes in hex, so that two payments of
equal terms are different transactions). The payload is `{"transaction": base64}`.

One payment, step by step:

1. `describe` (pure): the mint must be a known asset (built in, or declared with its
   currency and decimals), the fee payer must not be the payer or the mint, the compute
   unit price within the cap.
2. `prepare` (before anything is signed), reads at once: the RPC's genesis hash (once per
   rail: it must serve the entry's network), the mint (once per mint: its program and
   decimals, which must be the asset's), the payer's and `payTo`'s token accounts, the block
   height and the latest blockhash. A missing or frozen token account, a balance that does
   not cover the amount, a fee payer among the instruction's accounts, or a blockhash that
   cannot live as long as the entry's `maxTimeoutSeconds` asks (up to half a blockhash's
   life) is a skip reason, nothing signed.
3. `pay`: the transaction is built and signed once; its proof is journaled before it leaves
   the process. The merchant's facilitator co-signs and submits it. It can land only while
   its blockhash lives: after that, a transaction not on chain never will be.

`lookup(options, proof)` is what recovery asks the chain of a proof it holds (the
transaction id is the facilitator's signature, unknown to the payer): whether the blockhash
still lives (`isBlockhashValid`, asked first), then the payer's token account's signatures
(`getSignaturesForAddress`), each candidate's transaction compared with the journaled one by
the payer's own signature. Found: the money moved. Not found with the blockhash dead, on
definite answers only: void. Anything else (an RPC error, no answer, a list that may be cut
short): unknown, and the payment stays pending.

`solders` (the `svm` extra) is imported when the rail signs or decodes; without it the rail
still exists and skips Solana entries with the install command as the reason.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import importlib.util
import logging
import os
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Literal

import anyio
import httpx

from .._protocol import exact_json as _json
from .._protocol.amounts import format_amount
from .._protocol.assets import Asset, find_svm_asset
from .._protocol.errors import PaymentFailed
from .._protocol.exact_json import ProofError, b64_json_decode
from .._protocol.models import AcceptEntry, ExactAcceptEntry
from .._protocol.rail_interface import (
    Note,
    NotForThisRail,
    RailContext,
    RequestSettings,
    no_note,
    unpayable,
)
from .._protocol.redact import endpoint_url, private_endpoints
from .._protocol.solana_chain import (
    ASSOCIATED_TOKEN_PROGRAM,
    COMPUTE_BUDGET_PROGRAM,
    MAX_COMPUTE_UNIT_PRICE,
    MAX_MEMO_BYTES,
    MAX_PROCESSING_AGE,
    MEMO_PROGRAM,
    SOLANA_NETWORKS,
    TOKEN_2022_PROGRAM,
    TOKEN_PROGRAM,
    b58encode,
    blocks_for,
    is_pubkey,
    mint_decimals,
    secret_key_bytes,
    solana_network,
    token_account,
)
from .._protocol.types import Paid, PaymentIntent
from .._state.http import default_ssl_context
from .._state.rpc_wait import RpcWait, watched
from . import setting
from ._evm_family import token_intent

if TYPE_CHECKING:
    from solders.instruction import Instruction
    from solders.keypair import Keypair
    from solders.transaction import VersionedTransaction

    from .._options import SvmOptions

__all__ = [
    "SVM_EXTRA_MISSING",
    "OnChain",
    "Plan",
    "SvmRail",
    "associated_token_address",
    "blockhash_blockers",
    "build_transaction",
    "lookup",
    "transfer_instructions",
]

logger = logging.getLogger("x402_client")

SVM_EXTRA_MISSING = "Solana payments need the svm extra: pip install 'x402-eur[svm]'"
#: The most blocks a payment asks its blockhash to have left: half a blockhash's life, so
#: that a fresh one always does.
SETTLE_BLOCKS = MAX_PROCESSING_AGE // 2
#: How long what `prepare` read is used by `pay`, in seconds (a slow hook: read again).
_PLAN_TTL = 5.0
#: The signatures of the payer's token account recovery reads (pages of 1000), at most.
_LOOKUP_PAGES = 5
_PAGE = 1000


def _installed() -> bool:
    return importlib.util.find_spec("solders") is not None


# --- pure pieces -----------------------------------------------------------------------------


def associated_token_address(owner: str, mint: str, program: str) -> str:
    """The associated token account of `owner` for `mint` under `program` (needs solders)."""
    from solders.pubkey import Pubkey

    seeds = [bytes(Pubkey.from_string(k)) for k in (owner, program, mint)]
    found, _ = Pubkey.find_program_address(seeds, Pubkey.from_string(ASSOCIATED_TOKEN_PROGRAM))
    return str(found)


@dataclasses.dataclass(frozen=True)
class Plan:
    """Everything a payment's transaction is made of, read and checked by `prepare`."""

    payer: str
    fee_payer: str
    mint: str
    program: str
    decimals: int
    source: str
    destination: str
    amount: int
    memo: bytes
    blockhash: str
    last_valid_block_height: int
    compute_unit_limit: int
    compute_unit_price: int
    read_at: float = 0.0

    @property
    def accounts(self) -> tuple[str, ...]:
        """Every account an instruction names (the compute budget and memo name none)."""
        return (self.source, self.mint, self.destination, self.payer)


def transfer_instructions(plan: Plan) -> list[Instruction]:
    """SetComputeUnitLimit, SetComputeUnitPrice, TransferChecked, Memo: the scheme's order."""
    from solders.instruction import AccountMeta, Instruction
    from solders.pubkey import Pubkey

    budget = Pubkey.from_string(COMPUTE_BUDGET_PROGRAM)
    key = Pubkey.from_string
    transfer = bytes([12]) + plan.amount.to_bytes(8, "little") + bytes([plan.decimals])
    return [
        Instruction(budget, bytes([2]) + plan.compute_unit_limit.to_bytes(4, "little"), []),
        Instruction(budget, bytes([3]) + plan.compute_unit_price.to_bytes(8, "little"), []),
        Instruction(
            key(plan.program),
            transfer,
            [
                AccountMeta(key(plan.source), is_signer=False, is_writable=True),
                AccountMeta(key(plan.mint), is_signer=False, is_writable=False),
                AccountMeta(key(plan.destination), is_signer=False, is_writable=True),
                AccountMeta(key(plan.payer), is_signer=True, is_writable=False),
            ],
        ),
        Instruction(key(MEMO_PROGRAM), plan.memo, []),
    ]


def build_transaction(plan: Plan, keypair: Keypair) -> VersionedTransaction:
    """The v0 transaction of `plan`, signed by the payer alone: the fee payer is account 0
    and its signature slot stays empty for the facilitator."""
    from solders.hash import Hash
    from solders.message import MessageV0, to_bytes_versioned
    from solders.pubkey import Pubkey
    from solders.signature import Signature
    from solders.transaction import VersionedTransaction

    if str(keypair.pubkey()) != plan.payer:
        raise ValueError("the key does not sign for the plan's payer")
    message = MessageV0.try_compile(
        Pubkey.from_string(plan.fee_payer),
        transfer_instructions(plan),
        [],
        Hash.from_string(plan.blockhash),
    )
    signers = message.account_keys[: message.header.num_required_signatures]
    if len(signers) != 2 or str(signers[0]) != plan.fee_payer:
        raise ValueError("the transaction must have the fee payer and the payer as signers")
    signature = keypair.sign_message(to_bytes_versioned(message))
    slots = [signature if str(key) == plan.payer else Signature.default() for key in signers]
    return VersionedTransaction.populate(message, slots)


def blockhash_blockers(
    *, blocks_left: int, max_timeout_seconds: int, slot_seconds: float
) -> str | None:
    """Why a blockhash with `blocks_left` blocks of life cannot carry a payment whose entry
    gives the merchant `maxTimeoutSeconds` to settle it (up to `SETTLE_BLOCKS`), or None."""
    needed = min(blocks_for(max_timeout_seconds, slot_seconds), SETTLE_BLOCKS)
    if blocks_left >= needed:
        return None
    return (
        f"the latest blockhash has {max(blocks_left, 0)} blocks of life left, fewer than the "
        f"{needed} the entry's maxTimeoutSeconds ({max_timeout_seconds}) needs"
    )


def _memo(extra: Mapping[str, Any]) -> bytes | str:
    """The Memo's data: the seller's `extra.memo`, or a random nonce; or why neither."""
    memo = extra.get("memo")
    if memo is None:
        return os.urandom(16).hex().encode()
    if not isinstance(memo, str):
        return "its extra.memo is not text"
    data = memo.encode()
    if len(data) > MAX_MEMO_BYTES:
        return f"its extra.memo is over {MAX_MEMO_BYTES} bytes"
    return data


def _payer_of(options: SvmOptions) -> str:
    """The wallet's address: the public half of its secret key."""
    return b58encode(secret_key_bytes(options.secret_key.get_secret_value())[32:])


# --- the RPC ---------------------------------------------------------------------------------


class RpcUnavailable(Exception):
    """The RPC did not answer usably; the message names it, redacted."""


class _Rpc:
    """JSON-RPC calls to the user's Solana endpoint, over one httpx client."""

    def __init__(self, options: SvmOptions, wait: RpcWait | None = None) -> None:
        self._options = options
        #: A call slower than a second is reported (`on_progress`) when the rail gave one.
        self._wait = wait
        private_endpoints((options.rpc_url,))
        self._http = httpx.AsyncClient(
            timeout=options.timeout, follow_redirects=False, verify=default_ssl_context()
        )
        self.shown = endpoint_url(options.rpc_url)
        self._ids = 0

    async def aclose(self) -> None:
        await self._http.aclose()

    async def call(self, method: str, *params: Any) -> Any:
        """The `result` of one call; `RpcUnavailable` on no answer, an HTTP error status,
        a JSON-RPC error or a body that is not JSON-RPC."""
        self._ids += 1
        body = {"jsonrpc": "2.0", "id": self._ids, "method": method, "params": list(params)}
        # The URL stays out of this frame's locals: it may carry a key.
        try:
            if self._wait is None:
                response = await self._http.post(self._options.rpc_url, json=body)
            else:
                # a closure, not a partial: no local that shows the URL
                response = await watched(
                    self._wait, lambda: self._http.post(self._options.rpc_url, json=body)
                )
        except httpx.HTTPError as exc:
            raise RpcUnavailable(
                f"the Solana RPC {self.shown} did not answer {method} ({type(exc).__name__})"
            ) from None
        if response.status_code != 200:
            raise RpcUnavailable(
                f"the Solana RPC {self.shown} answered {method} with {response.status_code}"
            )
        try:
            answer = _json.loads(response.content)
        except _json.JSONError:
            raise RpcUnavailable(
                f"the Solana RPC {self.shown} answered {method} with no JSON"
            ) from None
        if not isinstance(answer, dict) or "result" not in answer:
            error = answer.get("error") if isinstance(answer, dict) else None
            code = error.get("code") if isinstance(error, dict) else None
            raise RpcUnavailable(f"the Solana RPC {self.shown} answered {method} with error {code}")
        return answer["result"]

    async def accounts(self, addresses: Sequence[str]) -> list[bytes | None]:
        """The data of each account (None where there is none)."""
        result = await self.call("getMultipleAccounts", list(addresses), {"encoding": "base64"})
        values = result.get("value") if isinstance(result, dict) else None
        if not isinstance(values, list) or len(values) != len(addresses):
            raise RpcUnavailable(f"the Solana RPC {self.shown} answered no account list")
        return [_account_data(value, self.shown) for value in values]


def _account_data(value: Any, shown: str) -> bytes | None:
    if value is None:
        return None
    try:
        data = value["data"]
        return base64.b64decode(data[0], validate=True)
    except (KeyError, TypeError, IndexError, binascii.Error):
        raise RpcUnavailable(f"the Solana RPC {shown} answered an unreadable account") from None


@dataclasses.dataclass(frozen=True)
class _Mint:
    program: str
    decimals: int


async def _mint(rpc: _Rpc, mint: str) -> _Mint | str:
    """The mint's program and decimals, or why it cannot be paid."""
    result = await rpc.call("getAccountInfo", mint, {"encoding": "base64"})
    value = result.get("value") if isinstance(result, dict) else None
    if value is None:
        return f"the mint {mint} does not exist on the RPC's chain"
    program = value.get("owner") if isinstance(value, dict) else None
    if program not in (TOKEN_PROGRAM, TOKEN_2022_PROGRAM):
        return f"the mint {mint} is not owned by SPL Token or Token-2022"
    data = _account_data(value, rpc.shown)
    decimals = None if data is None else mint_decimals(data)
    if decimals is None:
        return f"the account {mint} is not a token mint"
    return _Mint(str(program), decimals)


# --- the rail --------------------------------------------------------------------------------


class SvmRail:
    """Signs `exact` Solana payments from the user's wallet (see the module docstring).

    Built once per payer from `context.options.svm` (None: it only says what enabling it
    takes); holds one httpx client for the RPC (closed by `aclose()`, as the payer does).
    """

    name = "svm"
    schemes = frozenset({"exact"})
    #: The proof is a signed transaction: the merchant's facilitator submits it.
    money_moves_before_proof = False
    #: `pay` yields the scheme's payload, framed in the dialect the 402 spoke.
    frames_own_proof = False
    resumes_transactions = False
    #: The payload fields of this rail's proofs.
    proof_fields = frozenset({"transaction"})

    def __init__(self, context: RailContext, options: SvmOptions | None) -> None:
        self._context = context
        self._options = options
        self._installed = _installed()
        self._keypair: Keypair | None = None
        self._rpc: _Rpc | None = None
        self._genesis: str | None = None
        self._mints: dict[str, _Mint] = {}
        self._plans: dict[int, tuple[AcceptEntry, Plan]] = {}
        self._address: str | None = None

    def __repr__(self) -> str:
        shown = "off" if self._options is None else endpoint_url(self._options.rpc_url)
        return f"SvmRail(rpc={shown!r})"

    @property
    def address(self) -> str:
        """The wallet's address (read from the key once)."""
        if self._address is None:
            assert self._options is not None
            self._address = _payer_of(self._options)
        return self._address

    # --- describe (pure) -------------------------------------------------------------------

    def describe(self, entry: AcceptEntry, resource: str) -> PaymentIntent | str:
        if not isinstance(entry, ExactAcceptEntry):
            return NotForThisRail("not an exact entry")
        network = solana_network(entry.network)
        if network is None:
            return NotForThisRail("not a Solana entry")
        extra = entry.extra or {}
        asset = find_svm_asset(network, entry.asset, self._context.options.assets)
        blockers = self._entry_blockers(entry, extra, asset)
        settings: list[str] = []
        if self._options is None:
            settings = [setting("svm_secret_key"), setting("svm_rpc_url")]
        elif self._options.compute_unit_price > MAX_COMPUTE_UNIT_PRICE:
            blockers.append(
                f"the compute unit price {self._options.compute_unit_price} is over the "
                f"scheme's cap of {MAX_COMPUTE_UNIT_PRICE} microlamports"
            )
        if not self._installed:
            blockers.append(SVM_EXTRA_MISSING)
        if asset is None or blockers or settings:
            label = asset.symbol if asset is not None else "a token"
            what = f"Solana payment for {label} on {entry.network[:48]}"
            return unpayable(what, blockers, settings)
        return token_intent(entry, asset, resource, rail="svm")

    def _entry_blockers(
        self, entry: ExactAcceptEntry, extra: Mapping[str, Any], asset: Asset | None
    ) -> list[str]:
        blockers = []
        fee_payer = extra.get("feePayer")
        if not is_pubkey(fee_payer):
            blockers.append("it comes without extra.feePayer (the facilitator that pays the fee)")
        if not is_pubkey(entry.asset):
            blockers.append("its asset is not a Solana mint address")
        elif asset is None:
            blockers.append(
                f"unknown mint {entry.asset[:44]} on {entry.network[:48]} (declare it in "
                f"PaymentOptions.assets or {setting('assets')} with its currency and decimals "
                "to pay it)"
            )
        if not is_pubkey(entry.pay_to):
            blockers.append("its payTo is not a Solana address")
        if entry.max_amount_required <= 0:
            blockers.append("its amount is zero")
        memo = _memo(extra)
        if isinstance(memo, str):
            blockers.append(memo)
        if self._options is not None and fee_payer in (self.address, entry.asset):
            who = "the payer itself" if fee_payer == self.address else "the mint"
            blockers.append(
                f"its fee payer is {who}: the payer never pays fees or signs as fee payer"
            )
        return blockers

    # --- prepare (reads, nothing signed) ---------------------------------------------------

    async def prepare(self, entry: AcceptEntry, intent: PaymentIntent) -> str | None:
        assert isinstance(entry, ExactAcceptEntry)
        assert self._options is not None
        try:
            plan = await self._plan(entry)
        except RpcUnavailable as exc:
            return f"{exc}; nothing was signed"
        if isinstance(plan, str):
            return f"{plan}; nothing was signed"
        self._plans = {id(entry): (entry, plan)}
        return None

    async def _plan(self, entry: ExactAcceptEntry) -> Plan | str:
        """What the transaction is made of, or why it cannot be paid (see the module doc)."""
        assert self._options is not None
        rpc = self._rpc_client()
        problem = await self._check_network(entry.network)
        if problem is not None:
            return problem
        mint = await self._mint_of(entry.asset)
        if isinstance(mint, str):
            return mint
        asset = find_svm_asset(entry.network, entry.asset, self._context.options.assets)
        assert asset is not None
        if mint.decimals != asset.decimals or asset.token_program not in (None, mint.program):
            return (
                f"the mint {entry.asset} has {mint.decimals} decimals under "
                f"{mint.program}, not what {asset.symbol} is declared with"
            )
        extra = entry.extra or {}
        payer, fee_payer = self.address, str(extra["feePayer"])
        source = associated_token_address(payer, entry.asset, mint.program)
        destination = associated_token_address(entry.pay_to, entry.asset, mint.program)
        if fee_payer in (source, destination, entry.asset, payer):
            return "its fee payer appears in the transfer's accounts"
        reads = await _reads(rpc, [source, destination])
        problem = _holding_blockers(reads, entry, asset, source)
        if problem is not None:
            return problem
        why = self._life_blockers(entry, reads)
        if why is not None:
            return why
        memo = _memo(extra)
        assert isinstance(memo, bytes)
        return Plan(
            payer=payer,
            fee_payer=fee_payer,
            mint=entry.asset,
            program=mint.program,
            decimals=mint.decimals,
            source=source,
            destination=destination,
            amount=entry.max_amount_required,
            memo=memo,
            blockhash=reads.blockhash,
            last_valid_block_height=reads.last_valid,
            compute_unit_limit=self._options.compute_unit_limit,
            compute_unit_price=self._options.compute_unit_price,
            read_at=time.monotonic(),
        )

    def _life_blockers(self, entry: ExactAcceptEntry, reads: _Reads) -> str | None:
        assert self._options is not None
        hint = _hint(entry.extra or {})
        if hint is not None and hint[1] - reads.height >= SETTLE_BLOCKS:
            # The merchant's hint, still young enough: the blockhash the foundation's
            # client would use.
            reads.blockhash, reads.last_valid = hint
        return blockhash_blockers(
            blocks_left=reads.last_valid - reads.height,
            max_timeout_seconds=entry.max_timeout_seconds,
            slot_seconds=self._options.slot_seconds,
        )

    async def _check_network(self, network: str) -> str | None:
        """Whether the RPC serves `network` (its genesis hash, read once)."""
        if self._genesis is None:
            genesis = await self._rpc_client().call("getGenesisHash")
            if not isinstance(genesis, str):
                raise RpcUnavailable(f"the Solana RPC {self._rpc_client().shown} has no genesis")
            self._genesis = genesis
        served = f"solana:{self._genesis[:32]}"
        wanted = solana_network(network)
        if served != wanted:
            name = served if served in SOLANA_NETWORKS else "another chain"
            return f"the Solana RPC serves {name}, not {wanted}"
        return None

    async def _mint_of(self, mint: str) -> _Mint | str:
        known = self._mints.get(mint)
        if known is None:
            found = await _mint(self._rpc_client(), mint)
            if isinstance(found, str):
                return found
            known = self._mints[mint] = found
        return known

    # --- pay -------------------------------------------------------------------------------

    @asynccontextmanager
    async def pay(
        self,
        entry: AcceptEntry,
        intent: PaymentIntent,
        settings: RequestSettings,
        note: Note = no_note,
    ) -> AsyncIterator[Paid]:
        assert isinstance(entry, ExactAcceptEntry)
        plan = await self._fresh_plan(entry, intent)
        transaction = build_transaction(plan, self._signer())
        encoded = base64.b64encode(bytes(transaction)).decode()
        logger.debug(
            "x402: signed a Solana transfer on %s (blockhash valid to height %d) for %s",
            entry.network,
            plan.last_valid_block_height,
            plan.payer,
        )
        yield Paid(proof="", payload={"transaction": encoded}, payer=plan.payer)

    async def _fresh_plan(self, entry: ExactAcceptEntry, intent: PaymentIntent) -> Plan:
        """The plan `prepare` made, while fresh; else made again. Anything in the way now
        fails the payment before anything is signed."""
        kept = self._plans.pop(id(entry), None)
        fresh = kept is not None and time.monotonic() - kept[1].read_at <= _PLAN_TTL
        if kept is not None and kept[0] is entry and fresh:
            return kept[1]
        try:
            plan = await self._plan(entry)
        except RpcUnavailable as exc:
            raise PaymentFailed(f"{exc}; nothing was signed", intent=intent) from None
        if isinstance(plan, str):
            raise PaymentFailed(f"{plan}; nothing was signed", intent=intent)
        return plan

    def _signer(self) -> Keypair:
        if self._keypair is None:
            from solders.keypair import Keypair

            assert self._options is not None
            raw = secret_key_bytes(self._options.secret_key.get_secret_value())
            keypair = Keypair.from_bytes(raw)
            if bytes(keypair.pubkey()) != raw[32:]:
                raise ValueError("the Solana secret key's public half does not match its seed")
            self._keypair = keypair
        return self._keypair

    def _rpc_client(self) -> _Rpc:
        if self._rpc is None:
            assert self._options is not None
            report = self._context.report if self._context.options.on_progress else None
            wait = RpcWait(report, rail=self.name, what="Solana RPC") if report else None
            self._rpc = _Rpc(self._options, wait)
        return self._rpc

    async def aclose(self) -> None:
        rpc, self._rpc = self._rpc, None
        if rpc is not None:
            await rpc.aclose()


@dataclasses.dataclass
class _Reads:
    """What one payment reads at once: the two token accounts, the block height and the
    latest blockhash (with its last valid block height)."""

    source: bytes | None
    destination: bytes | None
    height: int
    blockhash: str
    last_valid: int


async def _reads(rpc: _Rpc, addresses: list[str]) -> _Reads:
    results: dict[str, Any] = {}

    async def read(name: str, method: str, *params: Any) -> None:
        try:
            results[name] = await rpc.call(method, *params)
        except RpcUnavailable as exc:
            results[name] = exc

    async def accounts() -> None:
        try:
            results["accounts"] = await rpc.accounts(addresses)
        except RpcUnavailable as exc:
            results["accounts"] = exc

    # One round trip's wait: the three reads at once.
    async with anyio.create_task_group() as group:
        group.start_soon(accounts)
        group.start_soon(read, "height", "getBlockHeight")
        group.start_soon(read, "latest", "getLatestBlockhash")
    for found in results.values():
        if isinstance(found, RpcUnavailable):
            raise found
    latest: Any = results["latest"]
    try:
        value = latest["value"]
        blockhash, last_valid = str(value["blockhash"]), int(value["lastValidBlockHeight"])
        height = int(results["height"])
    except (KeyError, TypeError, ValueError):
        raise RpcUnavailable(f"the Solana RPC {rpc.shown} answered no usable blockhash") from None
    source, destination = results["accounts"]
    return _Reads(source, destination, height, blockhash, last_valid)


def _hint(extra: Mapping[str, Any]) -> tuple[str, int] | None:
    """The entry's blockhash hint with its last valid block height, when both are readable."""
    blockhash, last_valid = extra.get("recentBlockhash"), extra.get("lastValidBlockHeight")
    if not is_pubkey(blockhash) or not isinstance(last_valid, (str, int)):
        return None
    text = str(last_valid)
    return (str(blockhash), int(text)) if text.isascii() and text.isdigit() else None


def _holding_blockers(
    reads: _Reads, entry: ExactAcceptEntry, asset: Asset, source: str
) -> str | None:
    """Why the payer's or the merchant's token account cannot take this transfer."""
    if reads.source is None:
        return (
            f"the wallet has no {asset.symbol} token account (associated token account "
            f"{source} does not exist)"
        )
    held = token_account(reads.source)
    if held is None or held.mint != entry.asset:
        return f"the account {source} is not the wallet's {asset.symbol} token account"
    if held.frozen:
        return f"the wallet's {asset.symbol} token account is frozen"
    if held.amount < entry.max_amount_required:
        return (
            f"{asset.symbol} balance {format_amount(asset.amount(held.amount))} on "
            f"{entry.network} does not cover "
            f"{format_amount(asset.amount(entry.max_amount_required))}"
        )
    if reads.destination is None:
        return f"the merchant's {asset.symbol} token account does not exist"
    return None


def build(context: RailContext) -> SvmRail | None:
    """The Solana rail, when the options have `svm`."""
    svm = context.options.svm
    return None if svm is None else SvmRail(context, svm)


def off(context: RailContext) -> SvmRail:
    """Without `svm` in the options: what paying a Solana entry would take."""
    return SvmRail(context, None)


# --- recovery: what the chain says of a journaled transaction --------------------------------


@dataclasses.dataclass(frozen=True)
class OnChain:
    """What the chain says of a signed transaction: `confirmed` (it landed and moved the
    money, in slot `slot`), `void` (it can never move any: its blockhash is dead and it is
    not on chain, or it landed and failed), `pending` (its blockhash lives: it may still
    land), or `unknown` (no definite answer)."""

    status: Literal["confirmed", "void", "pending", "unknown"]
    detail: str
    slot: int | None = None


@dataclasses.dataclass(frozen=True)
class _Journaled:
    """The parts of a journaled transaction a lookup needs."""

    signature: str
    blockhash: str
    source: str
    #: The Memo's text: the RPC lists it with each signature (`"[<length>] <text>"`).
    memo: str | None = None


def _journaled(proof: str) -> _Journaled | None:
    """The payer's signature, blockhash and source token account of a proof's transaction."""
    from solders.transaction import VersionedTransaction

    try:
        decoded = b64_json_decode(proof)
        raw = base64.b64decode(decoded["payload"]["transaction"], validate=True)
        transaction = VersionedTransaction.from_bytes(raw)
    except (ProofError, KeyError, TypeError, ValueError, binascii.Error):
        return None
    message = transaction.message
    keys = [str(k) for k in message.account_keys]
    source, memo = None, None
    for instruction in message.instructions:
        program = keys[instruction.program_id_index]
        data = bytes(instruction.data)
        if program in (TOKEN_PROGRAM, TOKEN_2022_PROGRAM) and data[:1] == bytes([12]):
            accounts = bytes(instruction.accounts)
            source = keys[accounts[0]] if len(accounts) >= 4 else None
        elif program == MEMO_PROGRAM:
            memo = data.decode("utf-8", "replace")
    if source is None or len(transaction.signatures) < 2:
        return None
    return _Journaled(str(transaction.signatures[1]), str(message.recent_blockhash), source, memo)


async def _landed(rpc: _Rpc, journaled: _Journaled) -> tuple[bool, int | None, bool] | None:
    """Whether the source account's history holds the transaction: (found, slot, failed);
    None when the history may be longer than what was read."""
    before: str | None = None
    for _ in range(_LOOKUP_PAGES):
        params: dict[str, Any] = {"limit": _PAGE}
        if before is not None:
            params["before"] = before
        listed = await rpc.call("getSignaturesForAddress", journaled.source, params)
        if not isinstance(listed, list):
            raise RpcUnavailable(f"the Solana RPC {rpc.shown} answered no signature list")
        for item in listed:
            found = await _is_ours(rpc, item, journaled)
            if found is not None:
                return found
        if len(listed) < _PAGE:
            return (False, None, False)
        last = listed[-1] if listed else None
        before = str(last.get("signature")) if isinstance(last, dict) else None
    return None


async def _is_ours(
    rpc: _Rpc, item: Any, journaled: _Journaled
) -> tuple[bool, int | None, bool] | None:
    from solders.transaction import VersionedTransaction

    signature = item.get("signature") if isinstance(item, dict) else None
    if not isinstance(signature, str):
        raise RpcUnavailable(f"the Solana RPC {rpc.shown} listed an unreadable signature")
    listed_memo = item.get("memo")
    if journaled.memo and isinstance(listed_memo, str) and journaled.memo not in listed_memo:
        return None  # another payment's memo: not worth reading
    found = await rpc.call(
        "getTransaction", signature, {"encoding": "base64", "maxSupportedTransactionVersion": 0}
    )
    if found is None:
        raise RpcUnavailable(f"the Solana RPC {rpc.shown} lists {signature} but cannot show it")
    try:
        raw = base64.b64decode(found["transaction"][0], validate=True)
        signatures = [str(s) for s in VersionedTransaction.from_bytes(raw).signatures]
        failed = found["meta"]["err"] is not None
    except (KeyError, TypeError, IndexError, ValueError, binascii.Error):
        raise RpcUnavailable(
            f"the Solana RPC {rpc.shown} showed an unreadable transaction"
        ) from None
    if journaled.signature in signatures[1:]:
        slot = found.get("slot")
        return (True, slot if isinstance(slot, int) else None, failed)
    return None


async def lookup(options: SvmOptions, proof: str) -> OnChain:
    """Where the transaction of a journaled Solana proof stands (see the module doc): the
    blockhash's life first, then the payer's token account's history. Never raises."""
    if not _installed():
        return OnChain("unknown", SVM_EXTRA_MISSING)
    journaled = _journaled(proof)
    if journaled is None:
        return OnChain("unknown", "the proof holds no Solana transfer")
    rpc = _Rpc(options)
    try:
        # The blockhash first: once it is dead, a history read after it is final.
        valid = await rpc.call("isBlockhashValid", journaled.blockhash, {})
        alive = valid.get("value") if isinstance(valid, dict) else None
        if not isinstance(alive, bool):
            return OnChain("unknown", f"the Solana RPC {rpc.shown} did not say if it is valid")
        landed = await _landed(rpc, journaled)
    except RpcUnavailable as exc:
        return OnChain("unknown", f"{exc}: whether the transaction landed is not known")
    finally:
        await rpc.aclose()
    return _verdict(journaled, alive, landed)


def _verdict(
    journaled: _Journaled, alive: bool, landed: tuple[bool, int | None, bool] | None
) -> OnChain:
    mine = f"the transaction the payer signed ({journaled.signature[:16]}...)"
    if landed is not None and landed[0]:
        if landed[2]:
            return OnChain("void", f"{mine} landed in slot {landed[1]} and failed", landed[1])
        return OnChain("confirmed", f"{mine} is on chain (slot {landed[1]})", landed[1])
    if landed is None:
        return OnChain("unknown", f"the history of {journaled.source} is longer than was read")
    if alive:
        return OnChain("pending", f"{mine} is not on chain yet, and its blockhash still lives")
    return OnChain("void", f"{mine} is not on chain and its blockhash is dead: it never will be")
