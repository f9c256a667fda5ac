"""Direct chain-A payments in the sandbox: signed asset transfers, checked and applied.

- `decode_signed(raw)`: a signed transaction as the chain encodes it (canonical msgpack
  `{"sig": 64 bytes, "txn": {...}}`), read into a `SignedTransfer`: its id (base32 of
  SHA-512/256 over `"TX" + msgpack(txn)`), sender and receiver addresses (base32 of the
  32-byte key and a 4-byte checksum), asset, amount, fee, validity window, genesis, lease;
  the ed25519 signature verified (PyNaCl) against the sender's key. Only a plain asset
  transfer is read: no close-to, clawback, rekey, group, multisig or logic signature.
- `DirectChain`: the wallets' side of the chain-A ledger (`ChainALedger`, which the indexer
  serves): opt-ins, the chain's coin (fees, minimum balances), the genesis, the suggested
  parameters, and `submit(raw)`, which checks a signed transfer against the chain's rules
  (signature, genesis, validity window, lease, replay, funds) and applies it to the ledger
  under the transaction's own id. A transaction the ledger already holds is refused.
- `facilitator_app(chain)`: the on-chain facilitator for `ledgera:mainnet`:
  `GET /health`, `GET /supported`, `POST /verify` (checks, no state change),
  `POST /settle` (checks against the merchant's requirements, then submits). Its body and
  result are the protocol's: `x402Version`, `paymentPayload` (the X-PAYMENT value),
  `paymentRequirements`; `success`, `txHash`, `network`, `payer`, or `errorReason`.

This module is sandbox code only: it imports nothing of the client (`x402_client`), so it
moves with the sandbox as it is. `ledger` is anything with the `ChainALedger` methods it
calls (`transfer(..., txid=)`, `balance`, `transaction`, `is_whitelisted`, `mint`,
`whitelist`, `current_round`).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import json
import threading
from collections.abc import Mapping
from typing import Any, Protocol

import msgpack
from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey, VerifyKey
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ._bank import BankError
from ._faults import FaultMiddleware, Faults

__all__ = [
    "GENESIS_HASH",
    "GENESIS_ID",
    "MAX_VALIDITY_ROUNDS",
    "MIN_BALANCE",
    "MIN_FEE",
    "NETWORK",
    "DirectChain",
    "RefusedTransaction",
    "SignedTransfer",
    "Wallet",
    "address_of",
    "asset_of",
    "decode_signed",
    "facilitator_app",
    "json_answer",
]

NETWORK = "ledgera:mainnet"
#: The sandbox chain's genesis: what every signed transaction must name.
GENESIS_ID = "sandbox-ledgera-v1"
GENESIS_HASH = base64.b64encode(hashlib.sha256(b"x402-eur sandbox chain A").digest()).decode()
#: The chain's rules the sandbox keeps: a flat minimum fee, a minimum balance per holding.
MIN_FEE = 1000
MIN_BALANCE = 100_000
MAX_VALIDITY_ROUNDS = 1000
#: The chain-A assets the facilitator settles (asset id -> symbol).
ASSETS = {2768422954: "EURQ", 2768603795: "USDQ"}

_TX_PREFIX = b"TX"
#: Transaction fields a plain asset transfer may carry; anything else is refused.
_PLAIN_FIELDS = frozenset(
    {"type", "snd", "arcv", "aamt", "xaid", "fee", "fv", "lv", "gen", "gh", "note", "lx"}
)


class RefusedTransaction(Exception):
    """A signed transaction the chain (or the facilitator) refuses; `str()` says why."""


def _sha512_256(data: bytes) -> bytes:
    return hashlib.new("sha512_256", data).digest()


def address_of(public_key: bytes) -> str:
    """The chain-A address of a 32-byte ed25519 public key."""
    checksum = _sha512_256(public_key)[-4:]
    return base64.b32encode(public_key + checksum).decode().rstrip("=")


def _key_of(address: str) -> bytes | None:
    try:
        raw = base64.b32decode(address + "=" * (-len(address) % 8))
    except (binascii.Error, ValueError):
        return None
    if len(raw) != 36 or _sha512_256(raw[:32])[-4:] != raw[32:]:
        return None
    return raw[:32]


@dataclasses.dataclass(frozen=True)
class SignedTransfer:
    """One signed asset transfer, decoded and its signature verified."""

    txid: str
    sender: str
    receiver: str
    asset_id: int
    amount: int
    fee: int
    first_valid: int
    last_valid: int
    genesis_id: str
    genesis_hash: str
    lease: bytes | None


def _canonical(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _canonical(value[key]) for key in sorted(value)}
    return value


def _uint(txn: Mapping[str, Any], name: str) -> int:
    value = txn.get(name, 0)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise RefusedTransaction(f"transaction field {name} is not an unsigned integer")
    return value


def _bytes(txn: Mapping[str, Any], name: str, size: int) -> bytes:
    value = txn.get(name)
    if not isinstance(value, bytes) or len(value) != size:
        raise RefusedTransaction(f"transaction field {name} is not {size} bytes")
    return value


def decode_signed(raw: bytes) -> SignedTransfer:
    """The signed asset transfer in `raw`, its signature checked; `RefusedTransaction`
    when it is not one (see the module docstring)."""
    try:
        signed = msgpack.unpackb(raw, raw=False, strict_map_key=True)
    except Exception:
        raise RefusedTransaction("the transaction is not msgpack") from None
    if not isinstance(signed, dict) or not isinstance(signed.get("txn"), dict):
        raise RefusedTransaction("not a signed transaction")
    if any(name in signed for name in ("msig", "lsig", "sgnr")):
        raise RefusedTransaction("only a transaction signed by its sender's own key is accepted")
    txn: dict[str, Any] = signed["txn"]
    signature = signed.get("sig")
    if not isinstance(signature, bytes) or len(signature) != 64:
        raise RefusedTransaction("the transaction is not signed")
    if txn.get("type") != "axfer":
        raise RefusedTransaction("not an asset transfer")
    unexpected = sorted(set(txn) - _PLAIN_FIELDS)
    if unexpected:
        # close-to, clawback, rekey, a group: never part of a payment the sandbox settles.
        raise RefusedTransaction(f"the transfer carries {', '.join(unexpected)}")
    sender_key = _bytes(txn, "snd", 32)
    receiver_key = _bytes(txn, "arcv", 32)
    genesis_hash = _bytes(txn, "gh", 32)
    genesis_id = txn.get("gen", "")
    if not isinstance(genesis_id, str):
        raise RefusedTransaction("transaction field gen is not a string")
    lease = txn.get("lx")
    if lease is not None and (not isinstance(lease, bytes) or len(lease) != 32):
        raise RefusedTransaction("transaction field lx is not 32 bytes")
    message = _TX_PREFIX + msgpack.packb(_canonical(txn), use_bin_type=True)
    try:
        VerifyKey(sender_key).verify(message, signature)
    except (BadSignatureError, ValueError):
        raise RefusedTransaction("Invalid signature") from None
    return SignedTransfer(
        txid=base64.b32encode(_sha512_256(message)).decode().rstrip("="),
        sender=address_of(sender_key),
        receiver=address_of(receiver_key),
        asset_id=_uint(txn, "xaid"),
        amount=_uint(txn, "aamt"),
        fee=_uint(txn, "fee"),
        first_valid=_uint(txn, "fv"),
        last_valid=_uint(txn, "lv"),
        genesis_id=genesis_id,
        genesis_hash=base64.b64encode(genesis_hash).decode(),
        lease=lease,
    )


def asset_of(transaction: Any) -> int | None:
    """The asset id a direct proof's `transaction` (base64) transfers, read without any
    check (to route the proof to its offer); None when it cannot be read."""
    try:
        signed = msgpack.unpackb(base64.b64decode(transaction, validate=True), raw=False)
        asset = signed["txn"]["xaid"]
    except Exception:
        return None
    return asset if isinstance(asset, int) else None


@dataclasses.dataclass(frozen=True)
class Wallet:
    """A chain-A wallet made by the sandbox: `private_key` in the chain SDK's form (base64
    of the 32-byte seed and the 32-byte public key), and its `address`."""

    address: str
    private_key: str = dataclasses.field(repr=False)

    @classmethod
    def generate(cls) -> Wallet:
        key = SigningKey.generate()
        public = bytes(key.verify_key)
        return cls(address_of(public), base64.b64encode(bytes(key) + public).decode())


class Ledger(Protocol):
    """What `DirectChain` uses of the chain-A ledger (`_chain_a.ChainALedger`)."""

    current_round: int

    def transfer(
        self, sender: str, receiver: str, asset_id: int, amount: int, *, txid: str | None = None
    ) -> Any: ...

    def balance(self, address: str, asset_id: int) -> int: ...

    def transaction(self, txid: str) -> Any: ...

    def mint(self, address: str, asset_id: int, amount: int) -> None: ...

    def whitelist(self, address: str) -> None: ...


class DirectChain:
    """The chain state a wallet sees (coins, opt-ins) around the shared ledger. Thread-safe.

    `new_wallet(eurq=, usdq=, coins=)` makes a whitelisted wallet opted into both assets;
    `opt_in` / `opt_out` and `set_coins` shape a wallet for a test; `offline = True` makes
    the node answer 503 (a node that is down).
    """

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self._lock = threading.RLock()
        self._coins: dict[str, int] = {}
        self._opted: set[tuple[str, int]] = set()
        self._leases: dict[tuple[str, bytes], int] = {}
        self.offline = False
        #: Signed transactions the chain refused, by reason (for tests).
        self.refused: list[str] = []

    def __repr__(self) -> str:
        return f"DirectChain(round={self.ledger.current_round})"

    # --- wallets -------------------------------------------------------------------------------

    def new_wallet(
        self, *, eurq: int = 0, usdq: int = 0, coins: int = 10_000_000, opt_in: bool = True
    ) -> Wallet:
        wallet = Wallet.generate()
        self.ledger.whitelist(wallet.address)
        with self._lock:
            self._coins[wallet.address] = coins
            if opt_in:
                for asset_id in ASSETS:
                    self._opted.add((wallet.address, asset_id))
        for asset_id, amount in ((2768422954, eurq), (2768603795, usdq)):
            if amount:
                self.ledger.mint(wallet.address, asset_id, amount)
        return wallet

    def opt_in(self, address: str, asset_id: int) -> None:
        with self._lock:
            self._opted.add((address, asset_id))

    def opt_out(self, address: str, asset_id: int) -> None:
        with self._lock:
            self._opted.discard((address, asset_id))

    def set_coins(self, address: str, coins: int) -> None:
        with self._lock:
            self._coins[address] = coins

    def coins(self, address: str) -> int:
        with self._lock:
            return self._coins.get(address, 0)

    def opted_in(self, address: str, asset_id: int) -> bool:
        with self._lock:
            return (address, asset_id) in self._opted or self.ledger.balance(address, asset_id) > 0

    def min_balance(self, address: str) -> int:
        with self._lock:
            holdings = sum(1 for owner, _ in self._opted if owner == address)
        return MIN_BALANCE * (1 + holdings)

    # --- the node's answers ----------------------------------------------------------------

    def suggested_params(self) -> dict[str, Any]:
        return {
            "consensus-version": "sandbox",
            "fee": 0,
            "genesis-hash": GENESIS_HASH,
            "genesis-id": GENESIS_ID,
            "last-round": self.ledger.current_round,
            "min-fee": MIN_FEE,
        }

    def account(self, address: str, *, with_assets: bool = True) -> dict[str, Any]:
        answer: dict[str, Any] = {
            "address": address,
            "amount": self.coins(address),
            "min-balance": self.min_balance(address),
            "round": self.ledger.current_round,
        }
        if with_assets:
            answer["assets"] = [
                holding
                for asset_id in ASSETS
                if (holding := self.holding(address, asset_id)) is not None
            ]
        return answer

    def holding(self, address: str, asset_id: int) -> dict[str, Any] | None:
        if not self.opted_in(address, asset_id):
            return None
        return {
            "amount": self.ledger.balance(address, asset_id),
            "asset-id": asset_id,
            "is-frozen": False,
        }

    # --- transactions --------------------------------------------------------------------------

    def check(self, transfer: SignedTransfer) -> None:
        """The chain's rules for `transfer` now; `RefusedTransaction` with the reason."""
        if transfer.genesis_id != GENESIS_ID or transfer.genesis_hash != GENESIS_HASH:
            raise RefusedTransaction("the transaction is for another network (genesis)")
        current = self.ledger.current_round
        if transfer.last_valid - transfer.first_valid > MAX_VALIDITY_ROUNDS:
            raise RefusedTransaction("the validity window is longer than 1000 rounds")
        if transfer.first_valid > current + 1:
            raise RefusedTransaction(
                f"the transaction is not valid before round {transfer.first_valid}"
            )
        if transfer.last_valid < current + 1:
            raise RefusedTransaction(f"Payment expired (last valid round {transfer.last_valid})")
        if self.ledger.transaction(transfer.txid) is not None:
            raise RefusedTransaction("Transaction already used (it is in the ledger)")
        if transfer.lease is not None:
            held = self._leases.get((transfer.sender, transfer.lease))
            if held is not None and held >= current + 1:
                raise RefusedTransaction("the transaction's lease is in use")
        if transfer.fee < MIN_FEE:
            raise RefusedTransaction(f"the fee is below the minimum {MIN_FEE}")
        if self.coins(transfer.sender) - transfer.fee < self.min_balance(transfer.sender):
            raise RefusedTransaction("the sender holds too little coin for the fee")
        if not self.opted_in(transfer.sender, transfer.asset_id):
            raise RefusedTransaction(f"the sender has not opted into asset {transfer.asset_id}")
        if self.ledger.balance(transfer.sender, transfer.asset_id) < transfer.amount:
            raise RefusedTransaction("Insufficient asset balance")

    def submit(self, raw: bytes) -> SignedTransfer:
        """Check `raw` (a signed transaction) and apply it to the ledger; the transfer."""
        with self._lock:
            try:
                transfer = decode_signed(raw)
                self.check(transfer)
                try:
                    self.ledger.transfer(
                        transfer.sender,
                        transfer.receiver,
                        transfer.asset_id,
                        transfer.amount,
                        txid=transfer.txid,
                    )
                except Exception as exc:  # the ledger's refusal: not whitelisted, funds
                    raise RefusedTransaction(str(exc)) from None
            except RefusedTransaction as exc:
                self.refused.append(str(exc))
                raise
            self._coins[transfer.sender] = self.coins(transfer.sender) - transfer.fee
            if transfer.lease is not None:
                self._leases[(transfer.sender, transfer.lease)] = transfer.last_valid
            return transfer


# --- the facilitator ---------------------------------------------------------------------------


def json_answer(body: Any, status: int = 200) -> Response:
    return Response(
        json.dumps(body, separators=(",", ":")), status_code=status, media_type="application/json"
    )


def _decode_header(value: Any) -> dict[str, Any]:
    """The X-PAYMENT value (base64url JSON, padded or not; standard base64 too)."""
    if isinstance(value, dict):
        return value
    if not isinstance(value, str) or len(value) > 65_536:
        raise RefusedTransaction("paymentPayload is not an X-PAYMENT value")
    text = value.strip()
    padded = text + "=" * (-len(text) % 4)
    try:
        decoded = base64.b64decode(padded.replace("-", "+").replace("_", "/"), validate=True)
        data = json.loads(decoded)
    except (binascii.Error, ValueError):
        raise RefusedTransaction("paymentPayload cannot be decoded") from None
    if not isinstance(data, dict):
        raise RefusedTransaction("paymentPayload is not a JSON object")
    return data


def _signed_bytes(proof: Mapping[str, Any]) -> bytes:
    if proof.get("scheme") != "exact" or proof.get("network") != NETWORK:
        raise RefusedTransaction(f"Unsupported scheme or network (not exact on {NETWORK})")
    payload = proof.get("payload")
    if not isinstance(payload, dict) or not isinstance(payload.get("transaction"), str):
        raise RefusedTransaction("Invalid payload: no transaction")
    if payload.get("paymentIndex", 0) != 0:
        raise RefusedTransaction("paymentIndex must be 0 (one transaction, no group)")
    try:
        return base64.b64decode(payload["transaction"], validate=True)
    except (binascii.Error, ValueError):
        raise RefusedTransaction("Invalid payload: transaction is not base64") from None


def _against(transfer: SignedTransfer, requirements: Mapping[str, Any]) -> None:
    """The merchant's requirements: asset, receiver, amount."""
    if str(transfer.asset_id) != str(requirements.get("asset")):
        raise RefusedTransaction(f"Wrong asset: the transfer moves asset {transfer.asset_id}")
    if transfer.receiver != requirements.get("payTo"):
        raise RefusedTransaction("Wrong receiver: the transfer pays another address")
    try:
        required = int(str(requirements.get("maxAmountRequired")))
    except ValueError:
        raise RefusedTransaction("the requirements have no atomic amount") from None
    if transfer.amount < required:
        raise RefusedTransaction(f"Amount too low: {transfer.amount} < {required}")


def facilitator_app(chain: DirectChain, faults: Faults | None = None) -> Starlette:
    """The on-chain facilitator for direct chain-A payments (see the module docstring).
    Fault endpoints: `chain_a_settle` (before: nothing applied; after: applied, then the
    fault)."""
    faults = faults or Faults()

    async def request_parts(request: Request) -> tuple[dict[str, Any], dict[str, Any]]:
        try:
            body = json.loads(await request.body())
        except ValueError:
            raise BankError(400, "InvalidJson", "body is not valid JSON") from None
        requirements = body.get("paymentRequirements") if isinstance(body, dict) else None
        if not isinstance(requirements, dict):
            raise BankError(400, "InvalidRequest", "paymentRequirements: Field required")
        try:
            proof = _decode_header(body.get("paymentPayload"))
        except RefusedTransaction as exc:
            raise BankError(400, "InvalidRequest", str(exc)) from None
        return proof, requirements

    def failure(reason: str, payer: str | None = None) -> Response:
        return json_answer(
            {"success": False, "network": NETWORK, "payer": payer, "errorReason": reason}
        )

    async def health(request: Request) -> Response:
        return json_answer({"status": "ok", "round": chain.ledger.current_round})

    async def supported(request: Request) -> Response:
        kinds = [
            {"x402Version": 2, "scheme": "exact", "network": NETWORK, "asset": str(asset)}
            for asset in ASSETS
        ]
        return json_answer({"kinds": kinds})

    async def verify(request: Request) -> Response:
        proof, requirements = await request_parts(request)
        payer = None
        try:
            transfer = decode_signed(_signed_bytes(proof))
            payer = transfer.sender
            _against(transfer, requirements)
            chain.check(transfer)
        except RefusedTransaction as exc:
            return json_answer({"isValid": False, "payer": payer, "invalidReason": str(exc)})
        return json_answer({"isValid": True, "payer": payer})

    async def settle(request: Request) -> Response:
        await faults.before("chain_a_settle", request)
        proof, requirements = await request_parts(request)
        payer = None
        try:
            raw = _signed_bytes(proof)
            transfer = decode_signed(raw)
            payer = transfer.sender
            _against(transfer, requirements)
            applied = chain.submit(raw)
        except RefusedTransaction as exc:
            return failure(str(exc), payer)
        await faults.after("chain_a_settle", request)
        return json_answer(
            {"success": True, "txHash": applied.txid, "network": NETWORK, "payer": payer}
        )

    async def bank_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, BankError)
        return json_answer(exc.body(), exc.status)

    return Starlette(
        routes=[
            Route("/health", health, methods=["GET"]),
            Route("/supported", supported, methods=["GET"]),
            Route("/verify", verify, methods=["POST"]),
            Route("/settle", settle, methods=["POST"]),
        ],
        exception_handlers={BankError: bank_error},
        middleware=[Middleware(FaultMiddleware)],
    )
