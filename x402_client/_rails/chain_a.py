"""The `chain-a` rail (path B): pay a chain-A `exact` entry from the user's own wallet.

The wallet (`PaymentOptions.chain_a`, a `ChainAOptions`) signs one asset transfer of the
entry's asset (EURQ or USDQ), to its `payTo`, of exactly `maxAmountRequired` atomic units
(6 decimals); the proof carries it: `{"transaction": base64 of the signed transaction,
"paymentIndex": 0}`. The merchant's on-chain facilitator verifies and submits it; no money
moves until it does, and the transaction is void once its validity window has passed, so
this rail is settle-on-proof, like the EVM permit.

One payment, step by step:

1. `prepare` (before anything is signed): the node's suggested parameters
   (`GET {algod_url}/v2/transactions/params`), the wallet's coin balance and minimum
   balance (`GET /v2/accounts/<address>?exclude=all`) and its holding of the asset
   (`GET /v2/accounts/<address>/assets/<id>`), read at once. A node that does not answer,
   an asset the wallet has not opted into, a frozen holding, a balance that does not cover
   the amount or too little coin for the network fee: a skip reason, so the next
   candidate (the bridge, when the managed account is configured) can pay.
2. `pay`: the transaction, with first valid round = the node's last round and a window of
   `maxTimeoutSeconds / round_seconds` rounds (at least 1, at most the chain's 1000), a
   flat fee of the node's minimum, and a random 32-byte lease (the chain confirms at most
   one transaction of this sender and lease while the window lasts: even a transaction
   signed twice could move the money once). Signed once; its id is the payment's
   `blockchain_tx_id`, journaled with the proof before the proof leaves the process.
   Every re-send (a "not confirmed" answer, recovery) sends the same signed bytes.

`lookup(options, proof)` is what recovery asks of the chain about a proof it holds: is the
transaction confirmed (the indexer knows it), void (it can never be), still pending, or
unknown. Only definite answers count (`_lookup`): it is void only when the indexer answers
404 for it, had indexed up to its last valid round before that, and the node is past that
round; an indexer or node that answers an error, a 429, nothing in time, or nothing
readable leaves it unknown, and recovery leaves the payment pending.

py-algorand-sdk (the `chain-a` extra) is imported when the rail signs or decodes, never
on `import x402_client`; without it the rail still exists and skips chain-A entries with
the install command as the reason (the bridge pays them as before).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import importlib.util
import logging
import math
import os
import re
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import anyio
import httpx

from .._protocol import exact_json as _json
from .._protocol.amounts import format_amount, from_atomic
from .._protocol.challenge import CHAIN_A_ASSETS, CHAIN_A_NETWORK, exact_intent
from .._protocol.errors import PaymentFailed
from .._protocol.exact_json import ProofError, b64_json_decode
from .._protocol.lookup import Answer, http_answer, unanswered
from .._protocol.models import AcceptEntry, ChainADirectPayload, ExactAcceptEntry, PaymentProof
from .._protocol.proof import encode_proof
from .._protocol.rail_interface import (
    Note,
    NotForThisRail,
    RailContext,
    RequestSettings,
    no_note,
    unpayable,
)
from .._protocol.redact import endpoint_url, private_endpoints
from .._protocol.types import Paid, PaymentIntent
from .._state.http import default_ssl_context
from .._state.rpc_wait import RpcWait, watched

if TYPE_CHECKING:
    from .._options import ChainAOptions

__all__ = [
    "CHAIN_A_EXTRA_MISSING",
    "MAX_VALIDITY_ROUNDS",
    "ChainARail",
    "OnChain",
    "SuggestedParams",
    "decode_direct_proof",
    "direct_proof",
    "lookup",
    "validity_rounds",
    "verdict",
]

logger = logging.getLogger("x402_client")

CHAIN_A_EXTRA_MISSING = (
    "direct chain-A payments need the chain-a extra: pip install 'x402-eur[chain-a]'"
)
#: The longest validity window the chain accepts, in rounds.
MAX_VALIDITY_ROUNDS = 1000
#: How long suggested parameters read by `prepare` are used by `pay`, in seconds.
_PARAMS_TTL = 2.0
_ADDRESS_RE = re.compile(r"\A[A-Z2-7]{58}\Z")
T = TypeVar("T")


def _installed() -> bool:
    return importlib.util.find_spec("algosdk") is not None


def is_address(value: str) -> bool:
    """A chain-A address: base32 (58 characters) of a 32-byte key and the last 4 bytes of
    the key's SHA-512/256."""
    if not _ADDRESS_RE.match(value):
        return False
    raw = base64.b32decode(value + "======")
    return hashlib.new("sha512_256", raw[:32]).digest()[-4:] == raw[32:]


def _sdk(module: str) -> Any:
    """A py-algorand-sdk module (`algosdk.<module>`), imported now (the SDK is untyped)."""
    return importlib.import_module(f"algosdk.{module}")


# --- pure pieces ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SuggestedParams:
    """What the node suggests for a new transaction (`GET /v2/transactions/params`)."""

    last_round: int
    genesis_id: str
    genesis_hash: str
    min_fee: int

    @classmethod
    def from_wire(cls, data: Any) -> SuggestedParams:
        if not isinstance(data, Mapping):
            raise ValueError("suggested parameters are not an object")
        last_round, genesis_id = data.get("last-round"), data.get("genesis-id")
        genesis_hash, min_fee = data.get("genesis-hash"), data.get("min-fee", 1000)
        if not isinstance(last_round, int) or isinstance(last_round, bool) or last_round < 0:
            raise ValueError("suggested parameters without last-round")
        if not isinstance(genesis_id, str) or not isinstance(genesis_hash, str):
            raise ValueError("suggested parameters without the genesis id and hash")
        if not isinstance(min_fee, int) or isinstance(min_fee, bool) or min_fee < 0:
            raise ValueError("suggested parameters with an invalid min-fee")
        return cls(last_round, genesis_id, genesis_hash, min_fee)


def validity_rounds(max_timeout_seconds: int, round_seconds: float) -> int:
    """The validity window for an entry: `maxTimeoutSeconds` in rounds, rounded down (the
    signed transaction never outlives what the merchant asked for by a round), at least 1,
    at most `MAX_VALIDITY_ROUNDS`."""
    return max(1, min(MAX_VALIDITY_ROUNDS, math.floor(max_timeout_seconds / round_seconds)))


def direct_proof(network: str, signed_transaction: bytes) -> str:
    """The X-PAYMENT value for a signed transaction (the direct chain-A proof):
    `transaction` = standard base64 of its msgpack bytes, `paymentIndex` 0."""
    payload = ChainADirectPayload(
        transaction=base64.b64encode(signed_transaction).decode(), payment_index=0
    )
    return encode_proof(PaymentProof(scheme="exact", network=network, payload=payload.to_wire()))


@dataclasses.dataclass(frozen=True)
class DirectTransaction:
    """What a direct proof's signed transaction says (decoded with the SDK)."""

    txid: str
    sender: str
    receiver: str | None
    asset_id: int | None
    amount: int
    first_valid: int
    last_valid: int


def decode_direct_proof(proof: str) -> DirectTransaction | None:
    """The transaction of a direct chain-A proof; None for any other proof (a bridge
    proof, an EVM permit) or one that cannot be decoded. Needs the `chain-a` extra."""
    try:
        data = b64_json_decode(proof)
    except ProofError:
        return None
    payload = data.get("payload") if isinstance(data, dict) else None
    if not isinstance(payload, dict) or not isinstance(payload.get("transaction"), str):
        return None
    encoding = _sdk("encoding")
    try:
        raw = base64.b64decode(payload["transaction"], validate=True)
        signed = encoding.msgpack_decode(base64.b64encode(raw).decode())
        txn = signed.transaction
        return DirectTransaction(
            txid=str(signed.get_txid()),
            sender=str(txn.sender),
            receiver=getattr(txn, "receiver", None),
            asset_id=getattr(txn, "index", None),
            amount=int(getattr(txn, "amount", 0) or 0),
            first_valid=int(txn.first_valid_round),
            last_valid=int(txn.last_valid_round),
        )
    except (binascii.Error, ValueError, KeyError, AttributeError, TypeError):
        return None
    except Exception:  # the SDK's own errors (msgpack's, its `error` module's)
        return None


# --- the node --------------------------------------------------------------------------------


class NodeUnavailable(Exception):
    """The node (or the indexer) did not answer usably; the message names it, redacted."""


class _Node:
    """The algod REST endpoints this rail reads, over one httpx client."""

    def __init__(self, options: ChainAOptions, wait: RpcWait | None = None) -> None:
        self._options = options
        #: A read slower than a second is reported (`on_progress`) when the rail gave one.
        self.wait = wait
        private_endpoints((options.algod_url, options.indexer_url or ""))
        headers = {}
        if options.algod_token is not None:
            headers["X-Algo-API-Token"] = options.algod_token.get_secret_value()
        self._http = httpx.AsyncClient(
            headers=headers,
            timeout=options.timeout,
            follow_redirects=False,
            verify=default_ssl_context(),
        )
        self._shown = endpoint_url(options.algod_url)
        self._shown_indexer = endpoint_url(options.indexer_url or "")
        # The indexer is another origin: it gets its own client, without the node's token.
        self._indexer_http: httpx.AsyncClient | None = None

    async def aclose(self) -> None:
        await self._http.aclose()
        if self._indexer_http is not None:
            await self._indexer_http.aclose()

    def _indexer(self) -> httpx.AsyncClient:
        if self._indexer_http is None:
            self._indexer_http = httpx.AsyncClient(
                timeout=self._options.timeout,
                follow_redirects=False,
                verify=default_ssl_context(),
            )
        return self._indexer_http

    async def answer(
        self,
        path: str,
        read: Callable[[Any], T],
        *,
        indexer: bool = False,
        absent_status: int | None = None,
    ) -> Answer[T]:
        """A read of the node (or the indexer) as an `Answer` (see `_lookup`)."""
        # Neither URL is held in this frame's locals: they may carry a key.
        who = f"the indexer {self._shown_indexer}" if indexer else f"the chain-A node {self._shown}"
        try:
            if not indexer:
                response = await self._http.get(self._options.algod_url + path)
            elif self._options.indexer_url is not None:
                response = await self._indexer().get(self._options.indexer_url + path)
            else:
                return Answer("unknown", "no indexer_url is configured")
        except httpx.HTTPError as exc:
            return unanswered(who, exc)
        return http_answer(
            who, response.status_code, response.content, read, absent_status=absent_status
        )

    async def get(self, path: str, *, missing_ok: bool = False, reported: bool = True) -> Any:
        # The node's URL stays out of this frame's locals: it may carry a key.
        try:
            if self.wait is None or not reported:
                response = await self._http.get(self._options.algod_url + path)
            else:
                # a closure, not a partial: no local that shows the URL
                response = await watched(
                    self.wait, lambda: self._http.get(self._options.algod_url + path)
                )
        except httpx.HTTPError as exc:
            raise NodeUnavailable(
                f"the chain-A node {self._shown} did not answer ({type(exc).__name__})"
            ) from None
        if missing_ok and response.status_code == 404:
            return None
        if response.status_code != 200:
            raise NodeUnavailable(f"the chain-A node {self._shown} answered {response.status_code}")
        try:
            return _json.loads(response.content)
        except _json.JSONError:
            raise NodeUnavailable(f"the chain-A node {self._shown} answered no JSON") from None


@dataclasses.dataclass(frozen=True)
class OnChain:
    """What the chain says of a signed transaction: `confirmed` (in round `round`),
    `void` (it can never be confirmed: see `verdict`), `pending` (it is still valid and
    may be), or `unknown` (no definite answer: a party did not answer, or not readably)."""

    status: Literal["confirmed", "void", "pending", "unknown"]
    txid: str | None
    detail: str
    round: int | None = None


def _round_in(key: str) -> Callable[[Any], int]:
    """A reader of the round a status answer gives under `key` (a whole number)."""

    def read(data: Any) -> int:
        value = data[key]
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"a readable {key}")
        return value

    return read


def _confirmed_in(txid: str) -> Callable[[Any], int]:
    """A reader of the round the indexer's record of `txid` says it was confirmed in."""

    def read(data: Any) -> int:
        record = data["transaction"]
        if record.get("id", txid) != txid:
            raise ValueError(f"a record of transaction {txid}")
        confirmed = record.get("confirmed-round")
        if not isinstance(confirmed, int) or isinstance(confirmed, bool) or confirmed <= 0:
            raise ValueError("a readable confirmed-round")
        return confirmed

    return read


def verdict(
    txid: str,
    last_valid: int,
    transaction: Answer[int],
    indexed: Answer[int],
    node: Answer[int],
) -> OnChain:
    """Where a transaction stands, by the rule of `_lookup`: `transaction` is the indexer's
    answer for its id (`found`: the confirmed round), `indexed` the round the indexer had
    indexed up to, read before that, and `node` the node's last round.

    Confirmed when the indexer has it. Void only on three definite answers: the indexer
    has no such transaction (its 404), had indexed every round it could have been
    confirmed in (up to its last valid round), and the node is past that round. Pending
    while the node is within its window; unknown on anything less."""
    if transaction.verdict == "found" and transaction.value is not None:
        confirmed = transaction.value
        return OnChain(
            "confirmed", txid, f"transaction {txid} is on chain (round {confirmed})", confirmed
        )
    if transaction.verdict != "absent":
        return OnChain(
            "unknown",
            txid,
            f"{transaction.detail}: whether transaction {txid} is on chain is not known",
        )
    absent = f"the indexer does not list transaction {txid}"
    if node.value is None:
        return OnChain("unknown", txid, f"{absent}, but {node.detail}: its round is not known")
    if node.value <= last_valid:
        return OnChain(
            "pending",
            txid,
            f"transaction {txid} is not known on chain yet; it stays valid until round "
            f"{last_valid} (the node is at {node.value})",
        )
    if indexed.value is None:
        return OnChain(
            "unknown",
            txid,
            f"{absent}, but {indexed.detail}: whether it has indexed up to the last valid "
            f"round {last_valid} is not known",
        )
    if indexed.value < last_valid:
        return OnChain(
            "unknown",
            txid,
            f"{absent}, but it has indexed only up to round {indexed.value}: the "
            f"transaction may be in a later round up to its last valid round {last_valid}",
        )
    return OnChain(
        "void",
        txid,
        f"transaction {txid} is not on chain and its last valid round {last_valid} has "
        f"passed (the node is at {node.value}, the indexer at {indexed.value})",
    )


async def lookup(options: ChainAOptions, proof: str) -> OnChain:
    """Where the transaction of a direct proof stands on chain (for recovery): the
    indexer's round (`GET {indexer_url}/health`), then the indexer's record of the id
    (`GET /v2/transactions/<id>`), then the node's round (`GET {algod_url}/v2/status`),
    read as `verdict` says. The indexer is asked without the node's token."""
    if not _installed():
        return OnChain("unknown", None, CHAIN_A_EXTRA_MISSING)
    found = decode_direct_proof(proof)
    if found is None:
        return OnChain("unknown", None, "the proof holds no chain-A transaction")
    if options.indexer_url is None:
        return OnChain(
            "unknown",
            found.txid,
            f"without an indexer_url the chain cannot be asked whether transaction "
            f"{found.txid} was confirmed",
        )
    node = _Node(options)
    try:
        # The indexer's round first: a 404 read after it holds for every round up to it.
        indexed = await node.answer("/health", _round_in("round"), indexer=True)
        transaction = await node.answer(
            f"/v2/transactions/{found.txid}",
            _confirmed_in(found.txid),
            indexer=True,
            absent_status=404,
        )
        status: Answer[int] = Answer("unknown", "the node was not asked")
        if transaction.verdict == "absent":
            status = await node.answer("/v2/status", _round_in("last-round"))
    finally:
        await node.aclose()
    return verdict(found.txid, found.last_valid, transaction, indexed, status)


# --- the rail --------------------------------------------------------------------------------


class _Wallet:
    """The signing key and its address, made once from the options."""

    def __init__(self, options: ChainAOptions) -> None:
        account, mnemonic = _sdk("account"), _sdk("mnemonic")
        if options.private_key is not None:
            secret = options.private_key.get_secret_value().strip()
        else:
            assert options.mnemonic is not None
            secret = mnemonic.to_private_key(options.mnemonic.get_secret_value())
        raw = base64.b64decode(secret)
        signing_key: Any = importlib.import_module("nacl.signing").SigningKey(raw[:32])
        if bytes(signing_key.verify_key) != raw[32:]:
            # The SDK takes the address from the second half: a mismatch would sign
            # transfers that no node accepts.
            raise ValueError("the chain-A private_key's public half does not match its seed")
        self._secret = secret
        self.address: str = str(account.address_from_private_key(secret))

    def __repr__(self) -> str:
        return f"_Wallet(address={self.address!r})"

    def sign(self, transaction: Any) -> Any:
        signer = _sdk("atomic_transaction_composer").AccountTransactionSigner
        return signer(self._secret).sign_transactions([transaction], [0])[0]


async def _first_reads(node: _Node, address: str, asset: str) -> dict[str, Any]:
    """The node's suggested parameters, the account and its holding of `asset`, read at
    once (one round trip's wait on a remote node); a read that failed is its
    `NodeUnavailable`."""
    results: dict[str, Any] = {}

    async def read(name: str, path: str, missing_ok: bool = False) -> None:
        try:
            results[name] = await node.get(path, missing_ok=missing_ok, reported=False)
        except NodeUnavailable as exc:
            results[name] = exc

    async def reads() -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(read, "params", "/v2/transactions/params")
            group.start_soon(read, "account", f"/v2/accounts/{address}?exclude=all")
            group.start_soon(read, "holding", f"/v2/accounts/{address}/assets/{asset}", True)

    # one wait reported for the three (one status line, not three)
    await (reads() if node.wait is None else watched(node.wait, reads))
    return results


class ChainARail:
    """Signs asset transfers from the user's chain-A wallet (see the module docstring).

    Built once per payer from `context.options.chain_a`; holds one httpx client for the
    node (closed by `aclose()`, as the payer does).
    """

    name = "chain-a"
    #: The schemes of the entries it describes (the selection asks no other rail).
    schemes = frozenset({"exact"})
    #: The proof is a signed transaction: the merchant's facilitator submits it.
    money_moves_before_proof = False
    #: `pay` yields the finished X-PAYMENT value (`Paid.proof`).
    frames_own_proof = True
    #: A chain-A payment is never resumed from a transaction code (that is the bridge's).
    resumes_transactions = False
    #: The payload fields of this rail's proofs (a re-sent proof is this rail's if it has one).
    proof_fields = frozenset({"transaction", "paymentIndex"})

    def __init__(self, context: RailContext, options: ChainAOptions) -> None:
        self._context = context
        self._options = options
        self._installed = _installed()
        self._wallet: _Wallet | None = None
        self._node: _Node | None = None
        self._params: tuple[float, SuggestedParams] | None = None

    def __repr__(self) -> str:
        return f"ChainARail(algod={endpoint_url(self._options.algod_url)!r})"

    @property
    def address(self) -> str:
        """The wallet's address (derived from the key once)."""
        return self.wallet.address

    @property
    def wallet(self) -> _Wallet:
        if self._wallet is None:
            self._wallet = _Wallet(self._options)
        return self._wallet

    # --- Rail ------------------------------------------------------------------------------

    def describe(self, entry: AcceptEntry, resource: str) -> PaymentIntent | str:
        if not isinstance(entry, ExactAcceptEntry) or entry.network != CHAIN_A_NETWORK:
            return NotForThisRail("not a chain-A entry")
        symbol = CHAIN_A_ASSETS.get(entry.asset)
        blockers = []
        if symbol is None:
            blockers.append(f"chain-A asset {entry.asset[:24]!r} is not EURQ or USDQ")
        if not is_address(entry.pay_to):
            blockers.append("its payTo is not a chain-A address (or fails its checksum)")
        if entry.max_amount_required <= 0:
            blockers.append("its amount is zero")
        if not self._installed:
            blockers.append(CHAIN_A_EXTRA_MISSING)
        if symbol is None or blockers:
            what = f"direct chain-A payment for {symbol or 'an unknown asset'} on {CHAIN_A_NETWORK}"
            return unpayable(what, blockers)
        return exact_intent(entry, rail="chain-a", symbol=symbol, resource=resource)

    async def prepare(self, entry: AcceptEntry, intent: PaymentIntent) -> str | None:
        assert isinstance(entry, ExactAcceptEntry)
        symbol = intent.asset_symbol
        try:
            address = self.address
        except Exception as exc:  # a key the SDK refuses (a mnemonic with a bad checksum)
            return f"the chain-A key cannot be used ({type(exc).__name__})"
        results = await _first_reads(self._node_client(), address, entry.asset)
        for found in results.values():
            if isinstance(found, NodeUnavailable):
                return f"{found}; nothing was signed"
        try:
            params = SuggestedParams.from_wire(results["params"])
        except ValueError as exc:
            return f"the chain-A node's {exc}; nothing was signed"
        self._params = (time.monotonic(), params)
        holding = results["holding"]
        asset_holding = holding.get("asset-holding") if isinstance(holding, dict) else None
        if not isinstance(asset_holding, dict):
            return (
                f"the chain-A wallet {address} has not opted into {symbol} "
                f"(asset {entry.asset}); nothing was signed"
            )
        if asset_holding.get("is-frozen") is True:
            return f"the chain-A wallet's {symbol} holding is frozen; nothing was signed"
        balance = asset_holding.get("amount", 0)
        if not isinstance(balance, int) or balance < entry.max_amount_required:
            shown = format_amount(from_atomic(balance if isinstance(balance, int) else 0))
            return (
                f"{symbol} balance {shown} in the chain-A wallet does not cover "
                f"{format_amount(intent.amount)}; nothing was signed"
            )
        account = results["account"]
        coins = account.get("amount", 0) if isinstance(account, dict) else 0
        minimum = account.get("min-balance", 0) if isinstance(account, dict) else 0
        if not isinstance(coins, int) or not isinstance(minimum, int):
            return "the chain-A node's account answer is unreadable; nothing was signed"
        if coins - minimum < params.min_fee:
            return (
                "the chain-A wallet holds too little of the chain's coin for the network fee "
                f"({coins} atomic units, minimum balance {minimum}, fee {params.min_fee}); "
                "nothing was signed"
            )
        return None

    @asynccontextmanager
    async def pay(
        self,
        entry: AcceptEntry,
        intent: PaymentIntent,
        settings: RequestSettings,
        note: Note = no_note,
    ) -> AsyncIterator[Paid]:
        assert isinstance(entry, ExactAcceptEntry)
        params = await self._suggested(intent)
        transaction = _sdk("transaction")
        wallet = self.wallet
        first = params.last_round
        window = validity_rounds(entry.max_timeout_seconds, self._options.round_seconds)
        suggested = transaction.SuggestedParams(
            fee=params.min_fee,
            first=first,
            last=first + window,
            gh=params.genesis_hash,
            gen=params.genesis_id,
            flat_fee=True,
            min_fee=params.min_fee,
        )
        unsigned = transaction.AssetTransferTxn(
            sender=wallet.address,
            sp=suggested,
            receiver=entry.pay_to,
            amt=entry.max_amount_required,
            index=int(entry.asset),
            lease=os.urandom(32),
        )
        signed = wallet.sign(unsigned)
        txid = str(signed.get_txid())
        raw = base64.b64decode(_sdk("encoding").msgpack_encode(signed))
        logger.debug(
            "x402: signed chain-A transaction %s (rounds %d-%d) for %s",
            txid,
            first,
            first + window,
            wallet.address,
        )
        # The id is journaled with the proof (`prove`) before the proof is handed over.
        yield Paid(
            proof=direct_proof(entry.network, raw),
            blockchain_tx_id=txid,
            payer=wallet.address,
        )

    async def aclose(self) -> None:
        node, self._node = self._node, None
        if node is not None:
            await node.aclose()

    # --- helpers ---------------------------------------------------------------------------

    def _node_client(self) -> _Node:
        if self._node is None:
            report = self._context.report if self._context.options.on_progress else None
            wait = RpcWait(report, rail=self.name, what="chain A node") if report else None
            self._node = _Node(self._options, wait)
        return self._node

    async def _suggested(self, intent: PaymentIntent) -> SuggestedParams:
        """The parameters `prepare` read, while fresh; else read again. A node that does not
        answer now fails the payment before anything is signed."""
        cached = self._params
        if cached is not None and time.monotonic() - cached[0] <= _PARAMS_TTL:
            return cached[1]
        try:
            params = SuggestedParams.from_wire(
                await self._node_client().get("/v2/transactions/params")
            )
        except (NodeUnavailable, ValueError) as exc:
            raise PaymentFailed(f"{exc}; nothing was signed", intent=intent) from None
        self._params = (time.monotonic(), params)
        return params


def build(context: RailContext) -> ChainARail | None:
    """The direct chain-A rail, when the options have `chain_a`."""
    chain_a = context.options.chain_a
    return None if chain_a is None else ChainARail(context, chain_a)
