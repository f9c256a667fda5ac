"""Chain A on loopback: a ledger, its indexer, the provider's bridge and the merchant's offers.

- `ChainALedger`: addresses with KYC whitelisting, balances per asset id (EURQ
  `2768422954`, USDQ `2768603795`) in atomic units, asset transfers with 52-character
  transaction ids, one round per transfer. Thread-safe.
- `indexer_app`: `GET /v2/transactions/<id>` in the field notes' shape, 404 for unknown
  ids (faults endpoint `indexer`), and `GET /health` with the round it has indexed up to.
  `ledger.indexer_lag` rounds make it lag the chain, as a real indexer does: it knows only
  the transfers of the rounds it has indexed.
- `ChainASandbox` (a `SandboxPart`): serves the indexer, the node (`_algod`) and the
  on-chain facilitator for direct payments (`_chain_a_direct`), installs the bridge into
  the bank and adds the merchant's chain-A offers (`ledgera` in EURQ, `ledgera:USDQ`).
  `payer_wallet` is a whitelisted chain-A wallet holding EURQ and USDQ;
  `chain_a_config()` gives the client settings that pay from it directly (plain data).

The bridge: a `BlockchainAddress` payment is debited by the bank at once and stays
`Processing`; `bridge_delay` seconds later a timer owned by `ChainASandbox` sends EURQ
from the provider's hot address and the transaction becomes `Paid` with its
`blockchainTxId`. A receiver that is not whitelisted makes the transfer fail: the
transaction ends `Failed` and the EURO is refunded. `stop()` cancels pending timers, so
nothing outlives the sandbox.

A direct proof (`transaction`, `paymentIndex`) goes to the facilitator's `/settle`, which
verifies the signed transfer and applies it to the same ledger (`_chain_a_direct`).
The merchant verifies a bridge proof as the spec's step 5 says: through the indexer,
asset id equals `payload.asset`, receiver equals `payload.payTo` (which must be its own
address), amount at least the price; each `blockchainTxId` and `transactionCode` is
accepted once.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hashlib
import re
import secrets
import threading
from collections.abc import Callable
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from . import _wire as _json
from ._algod import algod_app
from ._bank import Bank, BankError, Transaction
from ._chain_a_direct import DirectChain, asset_of, facilitator_app
from ._faults import FaultMiddleware, Faults
from ._http_util import json_response
from ._merchant import Price, Verdict
from ._server import ServedApp, stop_all
from ._wire import CHAIN_A_NETWORK, AmountError, BridgePayload, Proof, to_atomic

__all__ = [
    "EURQ_ASSET_ID",
    "USDQ_ASSET_ID",
    "AssetTransfer",
    "ChainABridgeOffer",
    "ChainALedger",
    "ChainASandbox",
    "LedgerError",
    "indexer_app",
    "new_address",
]

EURQ_ASSET_ID = 2768422954
USDQ_ASSET_ID = 2768603795
#: The on-chain facilitator named in chain-A accept entries of an offer made without one
#: (bridge proofs are verified through the indexer).
SANDBOX_FACILITATOR_URL = "https://facilitator.sandbox.invalid"

_ADDRESS_RE = re.compile(r"\A[A-Z2-7]{58}\Z")
_TXID_RE = re.compile(r"\A[A-Z2-7]{52}\Z")


def new_address() -> str:
    """A fresh chain-A address: base32 of a 32-byte key and its 4-byte checksum (the last
    bytes of its SHA-512/256), as the chain's wallets check it."""
    key = secrets.token_bytes(32)
    checksum = hashlib.new("sha512_256", key).digest()[-4:]
    return base64.b32encode(key + checksum).decode().rstrip("=")


def _new_txid() -> str:
    return base64.b32encode(secrets.token_bytes(32)).decode().rstrip("=")


def is_address(value: str) -> bool:
    return bool(_ADDRESS_RE.match(value))


class LedgerError(Exception):
    """A transfer the chain refuses (not whitelisted, not enough of the asset)."""


@dataclasses.dataclass(frozen=True)
class AssetTransfer:
    """One confirmed asset transfer (`axfer`)."""

    id: str
    sender: str
    receiver: str
    asset_id: int
    amount: int
    confirmed_round: int

    def indexer_record(self, current_round: int) -> dict[str, Any]:
        """`GET /v2/transactions/<id>` as the field notes show it."""
        return {
            "current-round": current_round,
            "transaction": {
                "id": self.id,
                "tx-type": "axfer",
                "sender": self.sender,
                "confirmed-round": self.confirmed_round,
                "asset-transfer-transaction": {
                    "asset-id": self.asset_id,
                    "amount": self.amount,
                    "receiver": self.receiver,
                },
            },
        }


class ChainALedger:
    """Balances per (address, asset id) in atomic units; both ends of a transfer must be
    KYC-whitelisted. Thread-safe."""

    def __init__(self, *, first_round: int = 40_000_000) -> None:
        self._lock = threading.RLock()
        self._whitelist: set[str] = set()
        self._balances: dict[tuple[str, int], int] = {}
        self._transfers: dict[str, AssetTransfer] = {}
        self.current_round = first_round
        #: How many rounds the indexer is behind the chain.
        self.indexer_lag = 0

    @property
    def indexed_round(self) -> int:
        """The round the indexer has indexed up to."""
        return self.current_round - self.indexer_lag

    def new_address(self, *, whitelisted: bool = True) -> str:
        address = new_address()
        if whitelisted:
            self.whitelist(address)
        return address

    def whitelist(self, address: str) -> None:
        with self._lock:
            self._whitelist.add(address)

    def unwhitelist(self, address: str) -> None:
        with self._lock:
            self._whitelist.discard(address)

    def is_whitelisted(self, address: str) -> bool:
        with self._lock:
            return address in self._whitelist

    def mint(self, address: str, asset_id: int, amount: int) -> None:
        """Credit `amount` atomic units out of thin air (sandbox set-up only)."""
        with self._lock:
            key = (address, asset_id)
            self._balances[key] = self._balances.get(key, 0) + amount

    def balance(self, address: str, asset_id: int) -> int:
        with self._lock:
            return self._balances.get((address, asset_id), 0)

    def transfer(
        self, sender: str, receiver: str, asset_id: int, amount: int, *, txid: str | None = None
    ) -> AssetTransfer:
        """Move `amount` of `asset_id`; confirmed at once in a new round (under `txid`, a
        signed transaction's own id, or a fresh one)."""
        with self._lock:
            if amount <= 0:
                raise LedgerError("amount must be positive")
            for role, address in (("sender", sender), ("receiver", receiver)):
                if address not in self._whitelist:
                    raise LedgerError(f"{role} {address} is not KYC-whitelisted")
            if self.balance(sender, asset_id) < amount:
                raise LedgerError(f"sender {sender} holds too little of asset {asset_id}")
            self._balances[(sender, asset_id)] -= amount
            key = (receiver, asset_id)
            self._balances[key] = self._balances.get(key, 0) + amount
            self.current_round += 1
            if txid is not None and txid in self._transfers:
                raise LedgerError(f"transaction {txid} is already in the ledger")
            transfer = AssetTransfer(
                id=txid or _new_txid(),
                sender=sender,
                receiver=receiver,
                asset_id=asset_id,
                amount=amount,
                confirmed_round=self.current_round,
            )
            self._transfers[transfer.id] = transfer
            return transfer

    def transaction(self, txid: str) -> AssetTransfer | None:
        with self._lock:
            return self._transfers.get(txid)

    def indexer_record(self, txid: str) -> dict[str, Any] | None:
        """What the indexer knows of `txid`: nothing until it has indexed its round."""
        with self._lock:
            found = self._transfers.get(txid)
            if found is None or found.confirmed_round > self.indexed_round:
                return None
            return found.indexer_record(self.indexed_round)


def indexer_app(ledger: ChainALedger, faults: Faults | None = None) -> Starlette:
    """The chain-A indexer: `GET /v2/transactions/{txid}`."""
    faults = faults or Faults()

    async def transaction(request: Request) -> Response:
        await faults.before("indexer", request)
        txid = request.path_params["txid"]
        record = ledger.indexer_record(txid)
        if record is None:
            return json_response(
                {"message": f"no transaction found for transaction id: {txid}"}, 404
            )
        return json_response(record)

    async def health(request: Request) -> Response:
        return json_response({"round": ledger.indexed_round})

    async def bank_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, BankError)
        return json_response({"message": exc.message}, exc.status)

    return Starlette(
        routes=[
            Route("/v2/transactions/{txid}", transaction, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
        ],
        exception_handlers={BankError: bank_error},
        middleware=[Middleware(FaultMiddleware)],
    )


class ChainABridgeOffer:
    """The merchant's chain-A `exact` entry, paid by the bridge (or, in real life, directly).

    `name` is `ledgera` for EURQ; other assets get `ledgera:<SYMBOL>`.
    """

    def __init__(
        self,
        *,
        name: str,
        asset_id: int,
        pay_to: str,
        indexer_url: Callable[[], str],
        facilitator_url: str | Callable[[], str] = SANDBOX_FACILITATOR_URL,
    ) -> None:
        self.name = name
        self.asset_id = asset_id
        self.pay_to = pay_to
        self._indexer_url = indexer_url
        self._facilitator_url = facilitator_url
        self._lock = threading.Lock()
        self._used: set[str] = set()
        self._pending: set[str] = set()

    def __repr__(self) -> str:
        return f"ChainABridgeOffer(name={self.name!r}, asset_id={self.asset_id})"

    def handles(self, proof: Proof) -> bool:
        if proof.scheme != "exact" or proof.network != CHAIN_A_NETWORK:
            return False
        # A direct proof for another asset belongs to that asset's offer.
        if "transaction" in proof.payload:
            moved = asset_of(proof.payload["transaction"])
            return moved is None or moved == self.asset_id
        # A bridge proof for another asset belongs to that asset's offer.
        asset = proof.payload.get("asset")
        return asset is None or asset == str(self.asset_id)

    async def accept_entry(
        self, price: Price, resource: str, http: httpx.AsyncClient
    ) -> dict[str, Any] | None:
        return {
            "scheme": "exact",
            "network": CHAIN_A_NETWORK,
            "asset": str(self.asset_id),
            "maxAmountRequired": str(to_atomic(price.amount)),
            "payTo": self.pay_to,
            "maxTimeoutSeconds": 300,
            "resource": resource,
            "description": price.description or resource,
            "mimeType": price.mime_type,
            "facilitator": self.facilitator_url,
        }

    @property
    def facilitator_url(self) -> str:
        url = self._facilitator_url
        return url if isinstance(url, str) else url()

    def _reserve(self, keys: tuple[str, ...]) -> bool:
        with self._lock:
            if any(k in self._used or k in self._pending for k in keys):
                return False
            self._pending.update(keys)
            return True

    def _release(self, keys: tuple[str, ...], *, used: bool) -> None:
        with self._lock:
            self._pending.difference_update(keys)
            if used:
                self._used.update(keys)

    async def verify(
        self,
        proof: Proof,
        header: str,
        price: Price,
        resource: str,
        http: httpx.AsyncClient,
    ) -> Verdict:
        payload = proof.payload
        if "transactionCode" not in payload and (
            "transaction" in payload or "paymentIndex" in payload
        ):
            return await self._settle_direct(header, price, resource, http)
        try:
            bridge = BridgePayload.from_wire(payload)
        except ValueError:
            return Verdict(False, "Invalid bridge payload")
        if bridge.asset != str(self.asset_id):
            return Verdict(False, f"Wrong asset: {bridge.asset} is not {self.asset_id}")
        if bridge.pay_to != self.pay_to:
            return Verdict(False, "Wrong receiver: payTo is not this merchant's address")
        if not _TXID_RE.match(bridge.blockchain_tx_id):
            return Verdict(False, "Invalid blockchainTxId")
        keys = (f"tx:{bridge.blockchain_tx_id}", f"code:{bridge.transaction_code}")
        if not self._reserve(keys):
            return Verdict(False, "Transaction already used")
        verdict = Verdict(False, "Payment not valid")
        try:
            verdict = await self._check_on_chain(bridge, price, http)
        finally:
            self._release(keys, used=verdict.valid)
        return verdict

    async def _settle_direct(
        self, header: str, price: Price, resource: str, http: httpx.AsyncClient
    ) -> Verdict:
        """A direct payment: the on-chain facilitator verifies and submits the signed
        transfer (`POST {facilitator}/settle`, the protocol's body)."""
        entry = await self.accept_entry(price, resource, http)
        assert entry is not None
        requirements = {key: entry[key] for key in entry if key != "facilitator"}
        try:
            response = await http.post(
                f"{self.facilitator_url}/settle",
                content=_json.dumps(
                    {
                        "x402Version": 2,
                        "paymentPayload": header,
                        "paymentRequirements": requirements,
                    }
                ),
                headers={"Content-Type": "application/json"},
            )
        except httpx.HTTPError as exc:
            raise BankError(503, "FacilitatorUnavailable", f"facilitator: {exc}") from None
        if response.status_code == 400:
            return Verdict(False, f"Invalid payment: {response.text[:200]}")
        if response.status_code != 200:
            raise BankError(503, "FacilitatorUnavailable", f"facilitator {response.status_code}")
        result = _json.loads(response.content)
        if not result.get("success"):
            return Verdict(False, str(result.get("errorReason") or "Settlement failed"))
        return Verdict(
            True,
            settlement={
                "success": True,
                "network": CHAIN_A_NETWORK,
                "transaction": result.get("txHash"),
                "payer": result.get("payer"),
            },
        )

    async def _check_on_chain(
        self, bridge: BridgePayload, price: Price, http: httpx.AsyncClient
    ) -> Verdict:
        try:
            response = await http.get(
                f"{self._indexer_url()}/v2/transactions/{bridge.blockchain_tx_id}"
            )
        except httpx.HTTPError as exc:
            raise BankError(503, "IndexerUnavailable", f"indexer unreachable: {exc}") from None
        if response.status_code == 404:
            # An indexer lags the chain by a few seconds: let the client re-send the proof.
            return Verdict(False, "Payment not confirmed (transaction not found on chain A)")
        if response.status_code != 200:
            raise BankError(503, "IndexerUnavailable", f"indexer answered {response.status_code}")
        try:
            body = _json.loads(response.content)
            transfer = body["transaction"]["asset-transfer-transaction"]
            asset_id, amount, receiver = (
                transfer["asset-id"],
                transfer["amount"],
                transfer["receiver"],
            )
        except (_json.JSONError, KeyError, TypeError):
            return Verdict(False, "Not an asset transfer")
        try:
            required = to_atomic(price.amount)
        except AmountError:
            return Verdict(False, "Price cannot be paid in atomic units")
        if str(asset_id) != bridge.asset:
            return Verdict(False, f"Wrong asset: the transfer moved asset {asset_id}")
        if receiver != bridge.pay_to:
            return Verdict(False, "Wrong receiver: the transfer paid another address")
        if not isinstance(amount, int) or amount < required:
            return Verdict(False, f"Amount too low: {amount} < {required}")
        return Verdict(
            True,
            settlement={
                "success": True,
                "network": CHAIN_A_NETWORK,
                "transaction": bridge.blockchain_tx_id,
                "transactionCode": bridge.transaction_code,
            },
        )


class ChainASandbox:
    """The chain-A part of `Sandbox(chain_a=True, bridge_delay=...)`.

    After `start`: `ledger`, `indexer_url`, `merchant_address` (whitelisted),
    `provider_address` (the bridge's hot address, rich in EURQ and USDQ). Tests may
    change `bridge_delay`, `whitelist`/`unwhitelist` addresses, force a bridge
    transaction to end otherwise (`end_next_bridge_as`, `cancel_bridge`), or end it
    now rather than after its delay (`settle_bridge`).
    """

    def __init__(
        self,
        *,
        bridge_delay: float = 0.5,
        provider_float: int = 10**15,
        payer_funding: int = 100_000_000,
    ) -> None:
        self.bridge_delay = bridge_delay
        self.ledger = ChainALedger()
        self.provider_address = self.ledger.new_address()
        self.merchant_address = self.ledger.new_address()
        self.ledger.mint(self.provider_address, EURQ_ASSET_ID, provider_float)
        self.ledger.mint(self.provider_address, USDQ_ASSET_ID, provider_float)
        #: Wallets, coins and the rules of direct payments, around the same ledger.
        self.direct = DirectChain(self.ledger)
        #: The payer's own chain-A wallet: whitelisted, opted in, `payer_funding` atomic
        #: units of EURQ and of USDQ (100 each by default), coin for the fees.
        self.payer_wallet = self.direct.new_wallet(eurq=payer_funding, usdq=payer_funding)
        self.offers = [
            ChainABridgeOffer(
                name="ledgera",
                asset_id=EURQ_ASSET_ID,
                pay_to=self.merchant_address,
                indexer_url=lambda: self.indexer_url,
                facilitator_url=lambda: self.facilitator_url,
            ),
            ChainABridgeOffer(
                name="ledgera:USDQ",
                asset_id=USDQ_ASSET_ID,
                pay_to=self.merchant_address,
                indexer_url=lambda: self.indexer_url,
                facilitator_url=lambda: self.facilitator_url,
            ),
        ]
        self._bank: Bank | None = None
        self._indexer: ServedApp | None = None
        self._algod: ServedApp | None = None
        self._facilitator: ServedApp | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timers: dict[str, asyncio.TimerHandle] = {}
        #: How each processing bridge transaction ends: None settles it, a status
        #: refunds it (`end_next_bridge_as`).
        self._endings: dict[str, str | None] = {}
        self._next_status: list[str] = []
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ChainASandbox(merchant_address={self.merchant_address!r})"

    @property
    def indexer_url(self) -> str:
        if self._indexer is None:
            raise RuntimeError("the chain-A indexer is not running")
        return self._indexer.url

    @property
    def algod_url(self) -> str:
        """The chain-A node (suggested parameters, holdings, submission)."""
        if self._algod is None:
            raise RuntimeError("the chain-A node is not running")
        return self._algod.url

    @property
    def facilitator_url(self) -> str:
        """The on-chain facilitator for direct chain-A payments (`/settle`)."""
        if self._facilitator is None:
            raise RuntimeError("the chain-A facilitator is not running")
        return self._facilitator.url

    def chain_a_config(self, **overrides: Any) -> dict[str, Any]:
        """The client's chain-A wallet settings for paying from `payer_wallet` directly, as
        plain data (`PaymentOptions(chain_a=...)` takes it as it is): the key, the node and
        the indexer (keyword arguments override)."""
        return {
            "private_key": self.payer_wallet.private_key,
            "algod_url": self.algod_url,
            "indexer_url": self.indexer_url,
            **overrides,
        }

    def env(self) -> dict[str, str]:
        """The environment variables `PaymentOptions.from_env()` reads to pay from
        `payer_wallet` directly (`X402_EUR_CHAIN_A_*`)."""
        return {
            "X402_EUR_CHAIN_A_PRIVATE_KEY": self.payer_wallet.private_key,
            "X402_EUR_CHAIN_A_ALGOD_URL": self.algod_url,
            "X402_EUR_CHAIN_A_INDEXER_URL": self.indexer_url,
        }

    # --- what tests use ------------------------------------------------------------------------

    def asset_balance(self, address: str, asset_id: int | str) -> int:
        """The atomic balance of `asset_id` (a number or its decimal string) at `address`."""
        return self.ledger.balance(address, int(asset_id))

    def whitelist(self, address: str) -> None:
        self.ledger.whitelist(address)

    def unwhitelist(self, address: str) -> None:
        self.ledger.unwhitelist(address)

    def end_next_bridge_as(self, status: str = "Cancelled") -> None:
        """Make the next bridge transaction end as `status` (refunded) instead of settling."""
        with self._lock:
            self._next_status.append(status)

    def cancel_bridge(self, transaction_code: str, status: str = "Cancelled") -> bool:
        """End a still-processing bridge transaction as `status`, refunded. True if it was."""
        bank = self._bank
        if bank is None:
            return False
        with bank.lock:
            transaction = bank.transactions.get(transaction_code)
            if transaction is None or transaction.status != "Processing":
                return False
            bank.finish(transaction, status, refund=True)
        self._drop_timer(transaction_code)
        return True

    def settle_bridge(self, transaction_code: str) -> bool:
        """End a still-processing bridge transaction now, as its delay would have ended
        it (EURQ reaches the receiver, or the status `end_next_bridge_as` chose). With a
        `bridge_delay` longer than any test, a test decides when the bridge is done.
        True if it was still processing."""
        with self._lock:
            forced = self._endings.get(transaction_code)
        self._drop_timer(transaction_code)
        return self._settle(transaction_code, forced)

    def _drop_timer(self, transaction_code: str) -> None:
        with self._lock:
            timer = self._timers.pop(transaction_code, None)
            self._endings.pop(transaction_code, None)
        if timer is not None and self._loop is not None:
            self._loop.call_soon_threadsafe(timer.cancel)

    # --- SandboxPart -----------------------------------------------------------------------

    async def start(self, sandbox: Any) -> None:
        self._loop = asyncio.get_running_loop()
        self._bank = sandbox.bank
        self._indexer = ServedApp(indexer_app(self.ledger, sandbox.faults), "chain-a-indexer")
        await self._indexer.start()
        self._algod = ServedApp(algod_app(self.direct, sandbox.faults), "chain-a-algod")
        await self._algod.start()
        self._facilitator = ServedApp(
            facilitator_app(self.direct, sandbox.faults), "chain-a-facilitator"
        )
        await self._facilitator.start()
        sandbox.bank.bridge = self._bridge
        sandbox.offers.extend(self.offers)

    async def stop(self) -> None:
        if self._bank is not None:
            with self._bank.lock:
                if self._bank.bridge == self._bridge:
                    self._bank.bridge = None
        with self._lock:
            timers, self._timers = list(self._timers.values()), {}
            self._endings.clear()
        for timer in timers:
            timer.cancel()
        await stop_all((self._facilitator, self._algod, self._indexer))
        self._facilitator = self._algod = self._indexer = None
        self._loop = None

    # --- the bridge ----------------------------------------------------------------------------

    def _bridge(self, bank: Bank, transaction: Transaction) -> None:
        """Called by the bank, under its lock, with the debited `Processing` transaction."""
        loop = self._loop
        if loop is None or loop.is_closed():
            raise BankError(503, "BridgeUnavailable", "the bridge is not running")
        if not is_address(transaction.to):
            raise BankError(400, "InvalidAddress", f"{transaction.to[:80]!r} is not an address")
        try:
            to_atomic(transaction.amount)
        except AmountError as exc:
            raise BankError(400, "InvalidAmount", str(exc)) from None
        code = transaction.code
        delay = self.bridge_delay
        with self._lock:
            forced = self._next_status.pop(0) if self._next_status else None
            self._endings[code] = forced

        def schedule() -> None:
            with self._lock:
                if self._loop is None:
                    return
                self._timers[code] = loop.call_later(delay, self._settle, code, forced)

        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            schedule()
        else:
            loop.call_soon_threadsafe(schedule)

    def _settle(self, code: str, forced: str | None) -> bool:
        with self._lock:
            self._timers.pop(code, None)
            self._endings.pop(code, None)
        bank = self._bank
        if bank is None:
            return False
        with bank.lock:
            transaction = bank.transactions.get(code)
            if transaction is None or transaction.status != "Processing":
                return False
            if forced is not None:
                bank.finish(transaction, forced, refund=True)
                return True
            try:
                transfer = self.ledger.transfer(
                    self.provider_address,
                    transaction.to,
                    EURQ_ASSET_ID,
                    to_atomic(transaction.amount),
                )
            except LedgerError as exc:
                transaction.message = f"{transaction.message} [on-chain leg failed: {exc}]".strip()
                bank.finish(transaction, "Failed", refund=True)
                return True
            transaction.blockchain_tx_id = transfer.id
            bank.finish(transaction, "Paid")
        return True
