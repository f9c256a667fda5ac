"""`SolanaNode`: a Solana chain on 127.0.0.1 without a validator to download.

The chain is the Solana VM of the `solders` package (`solders.litesvm.LiteSVM`), which
ships the SPL Token, Token-2022, Memo and Associated Token Account programs, served over
the Solana JSON-RPC API by `_solana_rpc` on a free loopback port.

What LiteSVM leaves out, the node adds so that clients meet the chain they will meet in
production:

* **Slots and blockhashes.** A slot passes every `slot_seconds` (0.4 s, as on the real
  cluster; `None` stops the clock) and on `advance_slots(n)`. Each slot has its own
  blockhash. A transaction is accepted while its blockhash is at most 150 slots old
  (`MAX_PROCESSING_AGE`), that is while the block height has not passed the
  `lastValidBlockHeight` that `getLatestBlockhash` gave with it; `expire_blockhash()`
  moves the chain 151 slots on, so every blockhash handed out before is dead. The block
  height trails the slot by a constant, as skipped slots make it do on the real cluster.
* **A ledger of landed transactions** (`getTransaction`, `getSignatureStatuses`,
  `getSignaturesForAddress`): each with its slot, block time, fee, logs, balances and
  token balances before and after. A transaction whose instruction failed lands (its fee
  is charged) with its error; one that cannot land (bad signature, dead blockhash, already
  processed, fee payer without lamports) is dropped, as a leader drops it.
* **Transaction drops** (`drop_transactions(n)`): the next `n` transactions sent are
  answered with their signature and never land, as when a leader drops them.

LiteSVM is not thread-safe: every access holds the node's lock, so the node may be used
from the event loop that serves it and from any other thread (a test's).
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import re
import secrets
import threading
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

try:
    from solders.clock import Clock
    from solders.hash import Hash
    from solders.instruction import AccountMeta, Instruction
    from solders.keypair import Keypair
    from solders.litesvm import LiteSVM
    from solders.message import MessageV0
    from solders.pubkey import Pubkey
    from solders.system_program import CreateAccountParams, TransferParams, create_account, transfer
    from solders.transaction import VersionedTransaction
    from solders.transaction_metadata import FailedTransactionMetadata, TransactionMetadata
except ImportError as exc:  # pragma: no cover - the message is the point
    raise ImportError(
        "the Solana sandbox needs the `solders` package: pip install 'x402-eur-sandbox[svm]'"
    ) from exc

from ._faults import Faults

if TYPE_CHECKING:
    from ._server import ServedApp

__all__ = [
    "ASSOCIATED_TOKEN_PROGRAM",
    "COMPUTE_BUDGET_PROGRAM",
    "GENESIS_HASHES",
    "LAMPORTS_PER_SIGNATURE",
    "LIGHTHOUSE_PROGRAM",
    "MAX_PROCESSING_AGE",
    "MEMO_PROGRAM",
    "MEMO_PROGRAM_V1",
    "SOLANA_DEVNET",
    "SOLANA_MAINNET",
    "SOLANA_TESTNET",
    "SYSTEM_PROGRAM",
    "TOKEN_2022_PROGRAM",
    "TOKEN_PROGRAM",
    "V1_NETWORKS",
    "LandedTransaction",
    "RpcError",
    "SolanaNode",
    "associated_token_address",
    "keypair_from_secret",
    "secret_key_forms",
]

#: The x402 foundation's CAIP-2 ids of the Solana clusters (`solana:` + the first 32
#: characters of the cluster's genesis hash) and its v1 names for them.
SOLANA_MAINNET = "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp"
SOLANA_DEVNET = "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1"
SOLANA_TESTNET = "solana:4uhcVJyU9pJkvQyS88uRDiswHXSCkY3z"
V1_NETWORKS: dict[str, str] = {
    "solana": SOLANA_MAINNET,
    "solana-devnet": SOLANA_DEVNET,
    "solana-testnet": SOLANA_TESTNET,
}
#: `getGenesisHash` of the clusters the node can stand in for.
GENESIS_HASHES: dict[str, str] = {
    SOLANA_MAINNET: "5eykt4UsFv8P8NJdTREpY1vzqKqZKvdpKuc147dw2N9d",
    SOLANA_DEVNET: "EtWTRABZaYq6iMfeYKouRu166VU2xqa1wcaWoxPkrZBG",
}

# Program ids (ruff S105 mistakes "TOKEN" for a credential).
SYSTEM_PROGRAM = "11111111111111111111111111111111"
TOKEN_PROGRAM = "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA"  # noqa: S105
TOKEN_2022_PROGRAM = "TokenzQdBNbLqP5VEhdkAS6EPFLC1PHnBqCXEpPxuEb"  # noqa: S105
ASSOCIATED_TOKEN_PROGRAM = "ATokenGPvbdGVxr1b2hvZbsiqW5xWH25efTNsLJA8knL"  # noqa: S105
COMPUTE_BUDGET_PROGRAM = "ComputeBudget111111111111111111111111111111"
MEMO_PROGRAM = "MemoSq4gqABAXKb96qnH8TysNcWxMyWCqXgDLGmfcHr"
MEMO_PROGRAM_V1 = "Memo1UhkJRfHyvLMcVucJwxXeuD728EqVDDwQDxFMNo"
#: The wallet-protection program Phantom and Solflare add (not deployed on the node).
LIGHTHOUSE_PROGRAM = "L2TExMFKdjpN9kozasaurPirfHy9P8sbXoAN1qA3S95"

LAMPORTS_PER_SIGNATURE = 5000
#: A blockhash is usable for this many slots after its own (the cluster's rule).
MAX_PROCESSING_AGE = 150
SLOT_SECONDS = 0.4
#: Block height = slot - this (the real clusters' heights trail their slots by millions).
BLOCK_HEIGHT_LAG = 20_000_000
MINT_SIZE = 82
TOKEN_ACCOUNT_SIZE = 165
_FAUCET_LAMPORTS = 10**18
_TOKEN_PROGRAMS = (TOKEN_PROGRAM, TOKEN_2022_PROGRAM)
_MEMO_PROGRAMS = (MEMO_PROGRAM, MEMO_PROGRAM_V1)


class RpcError(Exception):
    """A JSON-RPC error as the Solana RPC answers it: `code`, `message`, `data`."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def to_json(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


# --- keys and addresses (pure) -----------------------------------------------------------


def keypair_from_secret(secret: str | bytes | Sequence[int]) -> Keypair:
    """A keypair from a secret key in the forms Solana users hold it: the base58 string of
    the 64-byte secret (Phantom's export, `solana-keygen`'s `--outfile` printed with
    `solana-keygen pubkey`), the JSON byte array of an `id.json` file (as text or as a
    list), or the 64 raw bytes."""
    if isinstance(secret, str):
        text = secret.strip()
        if text.startswith("["):
            return Keypair.from_bytes(bytes(json.loads(text)))
        return Keypair.from_base58_string(text)
    return Keypair.from_bytes(bytes(secret))


def secret_key_forms(keypair: Keypair) -> dict[str, str]:
    """The keypair's secret as users hold it: `base58` (64 bytes) and `json` (the byte
    array an `id.json` file holds)."""
    raw = bytes(keypair)
    return {"base58": str(keypair), "json": json.dumps(list(raw), separators=(",", ":"))}


def associated_token_address(owner: str, mint: str, token_program: str = TOKEN_PROGRAM) -> str:
    """The associated token account of `owner` for `mint` under `token_program`: the PDA of
    seeds (owner, token program, mint) under the Associated Token Account program."""
    seeds = [
        bytes(Pubkey.from_string(owner)),
        bytes(Pubkey.from_string(token_program)),
        bytes(Pubkey.from_string(mint)),
    ]
    address, _ = Pubkey.find_program_address(seeds, Pubkey.from_string(ASSOCIATED_TOKEN_PROGRAM))
    return str(address)


# --- account layouts (pure) --------------------------------------------------------------


def parse_mint(data: bytes) -> dict[str, Any] | None:
    """An SPL Token / Token-2022 mint's base state, or None when `data` is not one."""
    if len(data) < MINT_SIZE or (len(data) > MINT_SIZE and len(data) <= TOKEN_ACCOUNT_SIZE):
        return None
    if len(data) > TOKEN_ACCOUNT_SIZE and data[TOKEN_ACCOUNT_SIZE] != 1:
        return None
    return {
        "mintAuthority": _coption_key(data[0:36]),
        "supply": int.from_bytes(data[36:44], "little"),
        "decimals": data[44],
        "isInitialized": bool(data[45]),
        "freezeAuthority": _coption_key(data[46:82]),
    }


def parse_token_account(data: bytes) -> dict[str, Any] | None:
    """A token account's base state (mint, owner, amount, ...), or None."""
    if len(data) < TOKEN_ACCOUNT_SIZE:
        return None
    if len(data) > TOKEN_ACCOUNT_SIZE and data[TOKEN_ACCOUNT_SIZE] != 2:
        return None
    state = {0: "uninitialized", 1: "initialized", 2: "frozen"}.get(data[108])
    if state is None or state == "uninitialized":
        return None
    native = int.from_bytes(data[109:113], "little")
    return {
        "mint": str(Pubkey.from_bytes(data[0:32])),
        "owner": str(Pubkey.from_bytes(data[32:64])),
        "amount": int.from_bytes(data[64:72], "little"),
        "delegate": _coption_key(data[72:108]),
        "state": state,
        "isNative": native == 1,
        "delegatedAmount": int.from_bytes(data[121:129], "little"),
        "closeAuthority": _coption_key(data[129:165]),
    }


def _coption_key(data: bytes) -> str | None:
    return str(Pubkey.from_bytes(data[4:36])) if data[0:4] == b"\x01\x00\x00\x00" else None


def ui_token_amount(amount: int, decimals: int) -> dict[str, Any]:
    """The RPC's `uiTokenAmount`: the atomic amount as a string, the decimals, and the
    amount in token units as a float and as an exact string without trailing zeros."""
    units = amount / 10**decimals
    text = str(amount).rjust(decimals + 1, "0")
    exact = f"{text[:-decimals]}.{text[-decimals:]}".rstrip("0").rstrip(".") if decimals else text
    return {
        "amount": str(amount),
        "decimals": decimals,
        "uiAmount": units,
        "uiAmountString": exact,
    }


def describe_error(err: Any) -> str:
    """A transaction error as the RPC words it in "Transaction simulation failed: ..."."""
    fixed = {
        "BlockhashNotFound": "Blockhash not found",
        "AlreadyProcessed": "This transaction has already been processed",
        "AccountNotFound": ("Attempt to debit an account but found no record of a prior credit."),
        "InsufficientFundsForFee": "Insufficient funds for fee",
        "SignatureFailure": "Transaction did not pass signature verification",
    }
    if isinstance(err, str):
        return fixed.get(err, _words(err))
    if isinstance(err, dict) and "InstructionError" in err:
        index, inner = err["InstructionError"]
        if isinstance(inner, dict) and "Custom" in inner:
            detail = f"custom program error: {inner['Custom']:#x}"
        else:
            detail = _words(str(inner) if not isinstance(inner, dict) else next(iter(inner)))
        return f"Error processing Instruction {index}: {detail}"
    return json.dumps(err)


def _words(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", " ", name).lower()


# --- the ledger --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LandedTransaction:
    """A transaction that landed (succeeded, or failed with its fee charged)."""

    signature: str
    slot: int
    block_time: int
    raw: bytes = dataclasses.field(repr=False)
    version: int | str
    err: Any
    fee: int
    logs: tuple[str, ...] = dataclasses.field(repr=False)
    units: int
    account_keys: tuple[str, ...] = dataclasses.field(repr=False)
    pre_balances: tuple[int, ...] = dataclasses.field(repr=False)
    post_balances: tuple[int, ...] = dataclasses.field(repr=False)
    pre_token_balances: tuple[dict[str, Any], ...] = dataclasses.field(repr=False)
    post_token_balances: tuple[dict[str, Any], ...] = dataclasses.field(repr=False)
    inner_instructions: tuple[dict[str, Any], ...] = dataclasses.field(repr=False)
    memo: str | None = None

    @property
    def signatures(self) -> list[str]:
        """Every signature of the transaction (the first is its id, the fee payer's)."""
        return [str(s) for s in VersionedTransaction.from_bytes(self.raw).signatures]


@dataclasses.dataclass
class _Snapshot:
    lamports: list[int]
    tokens: list[dict[str, Any]]


class SolanaNode:
    """A LiteSVM chain with slots, blockhashes and a ledger, and its JSON-RPC server.

    `network` is the CAIP-2 id it stands for (devnet by default: the x402 foundation's
    code knows no other id); `getGenesisHash` answers that cluster's hash. After `start`,
    `rpc_url` serves the JSON-RPC API (`_solana_rpc`). The helpers (`create_mint`,
    `mint_to`, `airdrop`, `token_balance`, ...) are synchronous and thread-safe.
    """

    def __init__(
        self,
        *,
        network: str = SOLANA_DEVNET,
        slot_seconds: float | None = SLOT_SECONDS,
        faults: Faults | None = None,
    ) -> None:
        self.network = network
        self.slot_seconds = slot_seconds
        #: Faults on the RPC methods: endpoint `solana:<method>` (`solana:sendTransaction`).
        self.faults = faults if faults is not None else Faults()
        self._lock = threading.RLock()
        # The node checks blockhashes itself (LiteSVM knows only its latest one).
        self._svm = LiteSVM().with_blockhash_check(False).with_lamports(_FAUCET_LAMPORTS * 2)
        self._seed = secrets.token_bytes(32)
        self._slot: int = self._svm.get_clock().slot
        self._tick_at = time.monotonic()
        self._landed: dict[str, LandedTransaction] = {}
        self._by_address: dict[str, list[str]] = {}
        self._drops = 0
        self._faucet = Keypair()
        #: The mint authority of the mints `create_mint` makes (it pays for them).
        self.mint_authority = Keypair()
        for funded in (self._faucet, self.mint_authority):
            if isinstance(
                self._svm.airdrop(funded.pubkey(), _FAUCET_LAMPORTS // 2), FailedTransactionMetadata
            ):
                raise RuntimeError("the Solana VM could not fund the node's own accounts")
        self._served: ServedApp | None = None
        self._sync_clock()

    def __repr__(self) -> str:
        url = self._served.url if self._served is not None and self._served.port else None
        return f"SolanaNode(network={self.network!r}, rpc_url={url!r})"

    # --- serving ---------------------------------------------------------------------------

    @property
    def rpc_url(self) -> str:
        if self._served is None:
            raise RuntimeError("the Solana node is not running")
        return self._served.url

    async def start(self, sandbox: Any = None) -> SolanaNode:
        """Serve the JSON-RPC API on a free 127.0.0.1 port (a `SandboxPart`: its faults
        become the sandbox's)."""
        from ._server import ServedApp
        from ._solana_rpc import solana_rpc_app

        if sandbox is not None and getattr(sandbox, "faults", None) is not None:
            self.faults = sandbox.faults
        self._served = ServedApp(solana_rpc_app(self), "solana-rpc")
        await self._served.start()
        return self

    async def stop(self) -> None:
        if self._served is not None:
            await self._served.stop()
            self._served = None

    async def __aenter__(self) -> SolanaNode:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # --- slots and blockhashes -------------------------------------------------------------

    def _tick(self) -> None:
        if not self.slot_seconds:
            return
        now = time.monotonic()
        passed = int((now - self._tick_at) / self.slot_seconds)
        if passed > 0:
            self._slot += passed
            self._tick_at += passed * self.slot_seconds
            self._sync_clock()

    def _sync_clock(self) -> None:
        clock = self._svm.get_clock()
        self._svm.set_clock(
            Clock(
                slot=self._slot,
                epoch_start_timestamp=clock.epoch_start_timestamp,
                epoch=clock.epoch,
                leader_schedule_epoch=clock.leader_schedule_epoch,
                unix_timestamp=int(time.time()),
            )
        )

    @property
    def slot(self) -> int:
        with self._lock:
            self._tick()
            return self._slot

    @property
    def block_height(self) -> int:
        return self.slot - BLOCK_HEIGHT_LAG

    def _blockhash_of(self, slot: int) -> Hash:
        return Hash(hashlib.sha256(self._seed + slot.to_bytes(8, "little")).digest())

    def latest_blockhash(self) -> tuple[str, int]:
        """The current slot's blockhash and its `lastValidBlockHeight`."""
        return self.latest()[1:]

    def latest(self) -> tuple[int, str, int]:
        """The current slot, its blockhash and that blockhash's `lastValidBlockHeight`,
        read at one instant."""
        with self._lock:
            self._tick()
            last_valid = self._slot - BLOCK_HEIGHT_LAG + MAX_PROCESSING_AGE
            return self._slot, str(self._blockhash_of(self._slot)), last_valid

    def blockhash_slot(self, blockhash: Hash | str) -> int | None:
        """The slot whose blockhash this is, while a transaction may still use it."""
        wanted = blockhash if isinstance(blockhash, Hash) else Hash.from_string(blockhash)
        with self._lock:
            self._tick()
            for slot in range(self._slot, self._slot - MAX_PROCESSING_AGE - 1, -1):
                if self._blockhash_of(slot) == wanted:
                    return slot
        return None

    def advance_slots(self, slots: int) -> None:
        """Move the chain `slots` slots on (blockhashes older than 150 slots die)."""
        if slots < 0:
            raise ValueError("the chain only moves forward")
        with self._lock:
            self._tick()
            self._slot += slots
            self._sync_clock()

    def expire_blockhash(self) -> None:
        """Make every blockhash handed out so far unusable (151 slots on)."""
        self.advance_slots(MAX_PROCESSING_AGE + 1)

    def drop_transactions(self, count: int = 1) -> None:
        """The next `count` transactions sent are answered with their signature and never
        land (a leader dropped them)."""
        with self._lock:
            self._drops += count

    # --- transactions ----------------------------------------------------------------------

    def send_transaction(self, raw: bytes, *, skip_preflight: bool = False) -> str:
        """Send a signed transaction: its signature. With preflight, a transaction that
        would not land or would fail raises `RpcError` as the RPC does (-32003 for a bad
        signature, -32002 with the simulation for the rest); without, it is dropped or
        lands failed, and the signature is answered all the same."""
        tx = decode_transaction(raw)
        with self._lock:
            self._tick()
            if not skip_preflight:
                if not all(tx.verify_with_results()):
                    raise RpcError(-32003, "Transaction signature verification failure")
                value = self._simulate(tx, replace_blockhash=False)
                if value["err"] is not None:
                    message = f"Transaction simulation failed: {describe_error(value['err'])}"
                    raise RpcError(-32002, message, value)
            if self._drops > 0:
                self._drops -= 1
            else:
                self._land(tx)
        return str(tx.signatures[0])

    def simulate_transaction(
        self, raw: bytes, *, sig_verify: bool = False, replace_recent_blockhash: bool = False
    ) -> dict[str, Any]:
        """`simulateTransaction`'s value (`err`, `logs`, `unitsConsumed`, ...)."""
        if sig_verify and replace_recent_blockhash:
            raise RpcError(-32602, "sigVerify may not be used with replaceRecentBlockhash")
        tx = decode_transaction(raw)
        if sig_verify and not all(tx.verify_with_results()):
            raise RpcError(-32003, "Transaction signature verification failure")
        with self._lock:
            self._tick()
            return self._simulate(tx, replace_blockhash=replace_recent_blockhash)

    def _simulate(self, tx: VersionedTransaction, *, replace_blockhash: bool) -> dict[str, Any]:
        replacement = None
        if replace_blockhash:
            blockhash, last_valid = self.latest_blockhash()
            tx = _with_blockhash(tx, Hash.from_string(blockhash))
            replacement = {"blockhash": blockhash, "lastValidBlockHeight": last_valid}
        elif self.blockhash_slot(tx.message.recent_blockhash) is None:
            return _simulation("BlockhashNotFound")
        if str(tx.signatures[0]) in self._landed:
            return _simulation("AlreadyProcessed")
        self._svm.with_sigverify(False)  # signatures are the caller's `sigVerify` to check
        try:
            result = self._svm.simulate_transaction(tx)
        finally:
            self._svm.with_sigverify(True)
        if isinstance(result, FailedTransactionMetadata):
            meta, err = result.meta(), json.loads(result.to_json())["err"]
        else:
            meta, err = result.meta(), None
        value = _simulation(err, logs=meta.logs(), units=meta.compute_units_consumed())
        value["replacementBlockhash"] = replacement
        return value

    def _land(self, tx: VersionedTransaction) -> None:
        """Process `tx` as a leader would: drop what cannot land, record what does."""
        signature = str(tx.signatures[0])
        if not all(tx.verify_with_results()) or signature in self._landed:
            return
        if self.blockhash_slot(tx.message.recent_blockhash) is None:
            return
        keys = [str(key) for key in tx.message.account_keys]
        before = self._snapshot(keys)
        result = self._svm.send_transaction(tx)
        after = self._snapshot(keys)
        if isinstance(result, FailedTransactionMetadata):
            if before.lamports[0] == after.lamports[0]:
                return  # no fee charged: the transaction never made it into a block
            meta, err = result.meta(), json.loads(result.to_json())["err"]
        else:
            meta, err = result, None
        self._record(tx, keys, meta, err, before, after)

    def _record(
        self,
        tx: VersionedTransaction,
        keys: list[str],
        meta: TransactionMetadata,
        err: Any,
        before: _Snapshot,
        after: _Snapshot,
    ) -> None:
        signature = str(tx.signatures[0])
        self._landed[signature] = LandedTransaction(
            signature=signature,
            slot=self._slot,
            block_time=int(time.time()),
            raw=bytes(tx),
            version="legacy" if _is_legacy(tx) else 0,
            err=err,
            fee=before.lamports[0] - after.lamports[0],
            logs=tuple(meta.logs()),
            units=meta.compute_units_consumed(),
            account_keys=tuple(keys),
            pre_balances=tuple(before.lamports),
            post_balances=tuple(after.lamports),
            pre_token_balances=tuple(before.tokens),
            post_token_balances=tuple(after.tokens),
            inner_instructions=_inner_instructions(meta),
            memo=_memo_of(tx, keys),
        )
        for key in dict.fromkeys(keys):
            self._by_address.setdefault(key, []).append(signature)

    def _snapshot(self, keys: list[str]) -> _Snapshot:
        lamports: list[int] = []
        tokens: list[dict[str, Any]] = []
        for index, key in enumerate(keys):
            account = self._svm.get_account(Pubkey.from_string(key))
            lamports.append(account.lamports if account is not None else 0)
            if account is None or str(account.owner) not in _TOKEN_PROGRAMS:
                continue
            state = parse_token_account(bytes(account.data))
            if state is None:
                continue
            tokens.append(
                {
                    "accountIndex": index,
                    "mint": state["mint"],
                    "owner": state["owner"],
                    "programId": str(account.owner),
                    "uiTokenAmount": ui_token_amount(
                        state["amount"], self._decimals(state["mint"]) or 0
                    ),
                }
            )
        return _Snapshot(lamports, tokens)

    # --- the ledger ------------------------------------------------------------------------

    def landed(self, signature: str) -> LandedTransaction | None:
        """The landed transaction of this signature (its first), or None."""
        with self._lock:
            return self._landed.get(signature)

    def signatures_for(self, address: str) -> list[LandedTransaction]:
        """The landed transactions that name `address`, newest first."""
        with self._lock:
            return [self._landed[s] for s in reversed(self._by_address.get(address, []))]

    @property
    def transactions(self) -> list[LandedTransaction]:
        """Every landed transaction, oldest first."""
        with self._lock:
            return list(self._landed.values())

    # --- accounts --------------------------------------------------------------------------

    def account(self, address: str) -> Any:
        """The `solders` account at `address`, or None."""
        with self._lock:
            self._tick()
            return self._svm.get_account(Pubkey.from_string(address))

    def accounts_of(self, program: str) -> list[tuple[str, Any]]:
        """Every account `program` owns, with its address."""
        with self._lock:
            pairs = self._svm.get_program_accounts(Pubkey.from_string(program))
            return [(str(address), account) for address, account in pairs]

    def balance(self, address: str) -> int:
        """Lamports of `address` (0 for an account that does not exist)."""
        account = self.account(address)
        return int(account.lamports) if account is not None else 0

    def rent_exempt_minimum(self, size: int) -> int:
        with self._lock:
            return int(self._svm.minimum_balance_for_rent_exemption(size))

    def _decimals(self, mint: str) -> int | None:
        account = self._svm.get_account(Pubkey.from_string(mint))
        state = parse_mint(bytes(account.data)) if account is not None else None
        return int(state["decimals"]) if state is not None else None

    def token_program_of(self, mint: str) -> str | None:
        """The token program that owns `mint` (SPL Token or Token-2022), or None."""
        account = self.account(mint)
        owner = str(account.owner) if account is not None else None
        return owner if owner in _TOKEN_PROGRAMS else None

    def decimals_of(self, mint: str) -> int | None:
        with self._lock:
            return self._decimals(mint)

    def token_account(self, address: str) -> dict[str, Any] | None:
        """The token account at `address` (mint, owner, amount, ...), or None."""
        account = self.account(address)
        if account is None or str(account.owner) not in _TOKEN_PROGRAMS:
            return None
        return parse_token_account(bytes(account.data))

    def ata(self, owner: str, mint: str) -> str:
        """The associated token account of `owner` for `mint` (under the mint's program)."""
        program = self.token_program_of(mint)
        if program is None:
            raise ValueError(f"{mint} is not a mint on this chain")
        return associated_token_address(owner, mint, program)

    def token_balance(self, owner: str, mint: str) -> int:
        """Atomic balance of `owner`'s associated token account for `mint` (0 without one)."""
        state = self.token_account(self.ata(owner, mint))
        return int(state["amount"]) if state is not None else 0

    # --- helpers: mints, token accounts, lamports ------------------------------------------

    def airdrop(self, address: str, lamports: int) -> str:
        """Send `lamports` to `address` from the node's faucet: the transaction's signature."""
        ix = transfer(
            TransferParams(
                from_pubkey=self._faucet.pubkey(),
                to_pubkey=Pubkey.from_string(address),
                lamports=lamports,
            )
        )
        return self._submit([ix], [self._faucet])

    def create_mint(
        self,
        decimals: int,
        token_program: str = TOKEN_PROGRAM,
        *,
        mint: Keypair | None = None,
    ) -> str:
        """Create and initialize a mint of `decimals` under SPL Token or Token-2022, its
        authority `mint_authority`, no freeze authority: its address."""
        if token_program not in _TOKEN_PROGRAMS:
            raise ValueError(f"{token_program} is neither SPL Token nor Token-2022")
        mint = mint or Keypair()
        authority = self.mint_authority.pubkey()
        create = create_account(
            CreateAccountParams(
                from_pubkey=authority,
                to_pubkey=mint.pubkey(),
                lamports=self.rent_exempt_minimum(MINT_SIZE),
                space=MINT_SIZE,
                owner=Pubkey.from_string(token_program),
            )
        )
        # InitializeMint2 (20): decimals, mint authority, no freeze authority.
        initialize = Instruction(
            Pubkey.from_string(token_program),
            bytes([20, decimals]) + bytes(authority) + b"\x00",
            [AccountMeta(mint.pubkey(), is_signer=False, is_writable=True)],
        )
        self._submit([create, initialize], [self.mint_authority, mint])
        return str(mint.pubkey())

    def create_ata(self, owner: str, mint: str) -> str:
        """Create `owner`'s associated token account for `mint` unless it exists (the
        node pays the rent): its address."""
        program = self.token_program_of(mint)
        if program is None:
            raise ValueError(f"{mint} is not a mint on this chain")
        address = associated_token_address(owner, mint, program)
        if self.account(address) is not None:
            return address
        # CreateIdempotent (1): funding, account, wallet, mint, system program, token program.
        ix = Instruction(
            Pubkey.from_string(ASSOCIATED_TOKEN_PROGRAM),
            bytes([1]),
            [
                AccountMeta(self.mint_authority.pubkey(), is_signer=True, is_writable=True),
                AccountMeta(Pubkey.from_string(address), is_signer=False, is_writable=True),
                AccountMeta(Pubkey.from_string(owner), is_signer=False, is_writable=False),
                AccountMeta(Pubkey.from_string(mint), is_signer=False, is_writable=False),
                AccountMeta(Pubkey.from_string(SYSTEM_PROGRAM), False, False),
                AccountMeta(Pubkey.from_string(program), False, False),
            ],
        )
        self._submit([ix], [self.mint_authority])
        return address

    def mint_to(self, mint: str, owner: str, amount: int) -> str:
        """Mint `amount` atomic units of a `create_mint` mint to `owner`'s associated token
        account (created first when missing): that account's address."""
        address = self.create_ata(owner, mint)
        program = self.token_program_of(mint)
        assert program is not None
        # MintTo (7): mint, destination, authority.
        ix = Instruction(
            Pubkey.from_string(program),
            bytes([7]) + amount.to_bytes(8, "little"),
            [
                AccountMeta(Pubkey.from_string(mint), is_signer=False, is_writable=True),
                AccountMeta(Pubkey.from_string(address), is_signer=False, is_writable=True),
                AccountMeta(self.mint_authority.pubkey(), is_signer=True, is_writable=False),
            ],
        )
        self._submit([ix], [self.mint_authority])
        return address

    def _submit(self, instructions: list[Instruction], signers: list[Keypair]) -> str:
        """Sign and land a transaction of the node's own (fee payer: the first signer). A
        random memo keeps two equal requests in one slot from being one transaction."""
        blockhash, _ = self.latest_blockhash()
        nonce = Instruction(Pubkey.from_string(MEMO_PROGRAM), secrets.token_hex(8).encode(), [])
        message = MessageV0.try_compile(
            signers[0].pubkey(), [*instructions, nonce], [], Hash.from_string(blockhash)
        )
        tx = VersionedTransaction(message, signers)
        signature = self.send_transaction(bytes(tx))
        landed = self.landed(signature)
        if landed is None or landed.err is not None:
            raise RuntimeError(f"the node's own transaction failed: {landed}")
        return signature


# --- transactions (pure) -----------------------------------------------------------------


def decode_transaction(raw: bytes) -> VersionedTransaction:
    """A wire transaction, or `RpcError(-32602)` as the RPC refuses one it cannot read."""
    try:
        tx = VersionedTransaction.from_bytes(raw)
        tx.sanitize()
    except Exception as exc:  # solders raises its own error types for bad bytes
        raise RpcError(-32602, f"invalid transaction: {exc}") from None
    return tx


def decode_wire(text: str, encoding: str = "base58") -> bytes:
    """The bytes of a transaction as `sendTransaction` takes it (`base58` by default, or
    `base64`)."""
    if encoding == "base64":
        try:
            return base64.b64decode(text, validate=True)
        except ValueError:
            raise RpcError(-32602, "invalid transaction: invalid base64 encoding") from None
    if encoding == "base58":
        try:
            return _b58decode(text)
        except ValueError:
            raise RpcError(-32602, "invalid transaction: invalid base58 encoding") from None
    raise RpcError(-32602, f"Invalid params: unsupported encoding: {encoding}")


_B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"


def _b58decode(text: str) -> bytes:
    number = 0
    for char in text:
        digit = _B58.find(char)
        if digit < 0:
            raise ValueError("not base58")
        number = number * 58 + digit
    body = number.to_bytes((number.bit_length() + 7) // 8, "big") if number else b""
    return b"\x00" * (len(text) - len(text.lstrip("1"))) + body


def b58encode(data: bytes) -> str:
    number = int.from_bytes(data, "big")
    out = ""
    while number:
        number, digit = divmod(number, 58)
        out = _B58[digit] + out
    return "1" * (len(data) - len(data.lstrip(b"\x00"))) + out


def _is_legacy(tx: VersionedTransaction) -> bool:
    return not isinstance(tx.message, MessageV0)


def _with_blockhash(tx: VersionedTransaction, blockhash: Hash) -> VersionedTransaction:
    message = tx.message
    if isinstance(message, MessageV0):
        replaced: Any = MessageV0(
            message.header,
            message.account_keys,
            blockhash,
            message.instructions,
            message.address_table_lookups,
        )
    else:
        from solders.message import Message

        replaced = Message.new_with_compiled_instructions(
            message.header.num_required_signatures,
            message.header.num_readonly_signed_accounts,
            message.header.num_readonly_unsigned_accounts,
            message.account_keys,
            blockhash,
            message.instructions,
        )
    return VersionedTransaction.populate(replaced, tx.signatures)


def _simulation(err: Any, *, logs: Iterable[str] = (), units: int = 0) -> dict[str, Any]:
    return {
        "err": err,
        "logs": list(logs),
        "accounts": None,
        "unitsConsumed": units,
        "returnData": None,
        "innerInstructions": None,
        "replacementBlockhash": None,
        "loadedAccountsDataSize": 0,
    }


def _inner_instructions(meta: TransactionMetadata) -> tuple[dict[str, Any], ...]:
    groups: list[dict[str, Any]] = []
    for index, inner in enumerate(meta.inner_instructions()):
        if not inner:
            continue
        instructions = [
            {
                "programIdIndex": item.instruction().program_id_index,
                "accounts": list(item.instruction().accounts),
                "data": b58encode(bytes(item.instruction().data)),
                "stackHeight": item.stack_height(),
            }
            for item in inner
        ]
        groups.append({"index": index, "instructions": instructions})
    return tuple(groups)


def _memo_of(tx: VersionedTransaction, keys: list[str]) -> str | None:
    """The RPC's `memo` of a transaction: each memo as "[length] text", joined by "; "."""
    memos = []
    for ix in tx.message.instructions:
        if keys[ix.program_id_index] in _MEMO_PROGRAMS:
            data = bytes(ix.data)
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                text = "(unparseable)"
            memos.append(f"[{len(data)}] {text}")
    return "; ".join(memos) or None
