"""`SvmFacilitator`: verifies and settles `exact` payments on Solana by the x402
foundation's scheme `scheme_exact_svm.md`, against any Solana JSON-RPC URL (the sandbox's
`SolanaNode` in practice).

A payment is a partially-signed transaction, base64 in `payload.transaction`, whose fee
payer (account 0, signature slot 0, left empty by the client) is this facilitator.
`verify` checks, in the foundation facilitator's order and with its error codes:

1. `scheme` is `exact` on both sides, the networks are equal and this facilitator's,
   `extra.feePayer` is given and is this facilitator's key (`fee_payer_not_managed_...`);
2. the transaction decodes, names no address lookup table, and its fee payer is
   `extra.feePayer`;
3. 3 to 6 instructions: SetComputeUnitLimit, SetComputeUnitPrice (at most 5 lamports a
   unit, `MAX_COMPUTE_UNIT_PRICE_MICROLAMPORTS`), TransferChecked of SPL Token or
   Token-2022, then only Lighthouse or Memo instructions;
4. the fee payer is not the transfer's authority (`..._fee_payer_transferring_funds`) and
   appears in no instruction's accounts (`..._fee_payer_included_in_instruction_accounts`,
   the spec's rule, checked by the foundation's earlier facilitator);
5. the mint is `asset`, the destination is the associated token account of `payTo` for
   it under the transfer's program, the amount is exactly `amount` (v1:
   `maxAmountRequired`); with `extra.memo`, exactly one Memo carries it;
6. the mint is owned by the transfer's program, the source and destination accounts exist;
7. the facilitator co-signs as fee payer; a transaction already settled (by this
   facilitator, or found on chain under its signature) is `duplicate_settlement`;
8. the co-signed transaction is simulated with `sigVerify` (a missing or wrong payer
   signature, a dead blockhash, too small a balance: `transaction_simulation_failed`).

`settle` verifies again, refuses a transaction it has settled or is settling
(`duplicate_settlement`: the spec's settlement cache, keyed by the message, kept for good),
sends the co-signed transaction with preflight and waits until the chain shows it. It is
`transaction_failed` only when the transaction went nowhere (preflight refused it), failed
on chain, or can no longer land (its blockhash died before it showed); sent and not seen in
`confirm_timeout` it is `settlement_pending` with its signature, and settling the same
payment again waits for that transaction, never sends another (the foundation's
facilitator since its pending-settlement store). Answers are the
foundation's `VerifyResponse` (`isValid`, `invalidReason`, `invalidMessage`, `payer`) and
`SettleResponse` (`success`, `errorReason`, `errorMessage`, `transaction` (the signature),
`network`, `payer`) as JSON objects. `app` serves them over HTTP like a facilitator:
`POST /verify`, `POST /settle`, `GET /supported` (with `extra.feePayer`), `GET /health`.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import time
from collections.abc import Collection, Mapping
from typing import Any

import anyio
import httpx
from solders.keypair import Keypair
from solders.message import MessageV0
from solders.transaction import VersionedTransaction
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ._server import loopback_client
from ._solana import (
    COMPUTE_BUDGET_PROGRAM,
    LIGHTHOUSE_PROGRAM,
    MEMO_PROGRAM,
    SOLANA_DEVNET,
    TOKEN_2022_PROGRAM,
    TOKEN_PROGRAM,
    V1_NETWORKS,
    RpcError,
    associated_token_address,
)

__all__ = [
    "MAX_COMPUTE_UNIT_PRICE_MICROLAMPORTS",
    "PaymentTerms",
    "Refused",
    "SvmFacilitator",
    "TransferCheck",
    "inspect_transaction",
    "payment_terms",
]

#: The spec's cap on SetComputeUnitPrice: 5 lamports a compute unit, in microlamports.
MAX_COMPUTE_UNIT_PRICE_MICROLAMPORTS = 5_000_000
MAX_MEMO_BYTES = 256

# The foundation's error codes (x402/mechanisms/svm/constants.py and its TypeScript
# facilitator), so a client meets the reasons a real facilitator gives.
ERR_UNSUPPORTED_SCHEME = "unsupported_scheme"
ERR_NETWORK_MISMATCH = "network_mismatch"
ERR_INVALID_PAYLOAD = "invalid_exact_svm_payload"
ERR_DECODE = "invalid_exact_svm_payload_transaction_could_not_be_decoded"
ERR_INSTRUCTION_COUNT = "invalid_exact_svm_payload_transaction_instructions_length"
ERR_UNKNOWN_OPTIONAL = (
    "invalid_exact_svm_payload_unknown_fourth_instruction",
    "invalid_exact_svm_payload_unknown_fifth_instruction",
    "invalid_exact_svm_payload_unknown_sixth_instruction",
)
ERR_COMPUTE_LIMIT = "invalid_exact_svm_payload_transaction_instructions_compute_limit_instruction"
ERR_COMPUTE_PRICE = "invalid_exact_svm_payload_transaction_instructions_compute_price_instruction"
ERR_COMPUTE_PRICE_TOO_HIGH = ERR_COMPUTE_PRICE + "_too_high"
ERR_NO_TRANSFER = "invalid_exact_svm_payload_no_transfer_instruction"
ERR_MINT_MISMATCH = "invalid_exact_svm_payload_mint_mismatch"
ERR_RECIPIENT_MISMATCH = "invalid_exact_svm_payload_recipient_mismatch"
ERR_AMOUNT_MISMATCH = "invalid_exact_svm_payload_amount_mismatch"
ERR_FEE_PAYER_MISSING = "invalid_exact_svm_payload_missing_fee_payer"
ERR_FEE_PAYER_NOT_MANAGED = "fee_payer_not_managed_by_facilitator"
ERR_FEE_PAYER_TRANSFERRING = "invalid_exact_svm_payload_transaction_fee_payer_transferring_funds"
ERR_FEE_PAYER_IN_ACCOUNTS = (
    "invalid_exact_svm_payload_transaction_fee_payer_included_in_instruction_accounts"
)
ERR_SENDER_ATA_NOT_FOUND = "invalid_exact_svm_payload_transaction_sender_ata_not_found"
ERR_RECEIVER_ATA_NOT_FOUND = "invalid_exact_svm_payload_transaction_receiver_ata_not_found"
ERR_MEMO_COUNT = "invalid_exact_svm_payload_memo_count"
ERR_MEMO_MISMATCH = "invalid_exact_svm_payload_memo_mismatch"
ERR_SIMULATION_FAILED = "transaction_simulation_failed"
ERR_TRANSACTION_FAILED = "transaction_failed"
ERR_DUPLICATE_SETTLEMENT = "duplicate_settlement"
ERR_SETTLEMENT_PENDING = "settlement_pending"

_TOKEN_PROGRAMS = (TOKEN_PROGRAM, TOKEN_2022_PROGRAM)
_CONFIRM_TIMEOUT = 30.0


class Refused(Exception):
    """A payment the facilitator refuses: the foundation's `reason`, the payer when known,
    and a human-readable `message`."""

    def __init__(
        self, reason: str, payer: str = "", message: str | None = None, transaction: str = ""
    ) -> None:
        super().__init__(reason if message is None else f"{reason}: {message}")
        self.reason = reason
        self.payer = payer
        self.message = message
        #: The signature of a transaction that was sent and then failed or did not land.
        self.transaction = transaction


@dataclasses.dataclass(frozen=True)
class PaymentTerms:
    """What a payment must be, from v2 (`accepted`, `amount`) or v1 (top-level `scheme`
    and `network`, `maxAmountRequired`) payloads and requirements alike."""

    version: int
    paid_scheme: str
    paid_network: str
    scheme: str
    network: str
    amount: int
    asset: str
    pay_to: str
    extra: Mapping[str, Any]
    transaction: str


def payment_terms(payment: Mapping[str, Any], requirements: Mapping[str, Any]) -> PaymentTerms:
    """Read a payment and its requirements (v1 or v2); `Refused(invalid_exact_svm_payload)`
    when either is malformed."""
    version = payment.get("x402Version")
    paid = payment.get("accepted") if version == 2 else payment
    inner = payment.get("payload")
    amount = requirements.get("amount" if version == 2 else "maxAmountRequired")
    extra = requirements.get("extra") or {}
    try:
        if version not in (1, 2) or not isinstance(paid, Mapping) or not isinstance(inner, Mapping):
            raise ValueError("not an x402 v1 or v2 payment payload")
        if not isinstance(extra, Mapping) or not isinstance(inner.get("transaction"), str):
            raise ValueError("no payload.transaction")
        return PaymentTerms(
            version=int(version),
            paid_scheme=str(paid.get("scheme")),
            paid_network=str(paid.get("network")),
            scheme=str(requirements.get("scheme")),
            network=str(requirements.get("network")),
            amount=int(str(amount)),
            asset=str(requirements["asset"]),
            pay_to=str(requirements["payTo"]),
            extra=extra,
            transaction=str(inner["transaction"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise Refused(ERR_INVALID_PAYLOAD, message=str(exc)) from None


@dataclasses.dataclass(frozen=True)
class TransferCheck:
    """A payment transaction that passed the static checks: the transfer it makes."""

    transaction: VersionedTransaction = dataclasses.field(repr=False)
    payer: str
    source: str
    mint: str
    destination: str
    token_program: str
    amount: int


def inspect_transaction(
    terms: PaymentTerms,
    managed: Collection[str],
    max_compute_unit_price: int = MAX_COMPUTE_UNIT_PRICE_MICROLAMPORTS,
) -> TransferCheck:
    """The spec's static checks of a payment transaction (no I/O), in the foundation
    facilitator's order: the transfer it makes, or `Refused`."""
    fee_payer = terms.extra.get("feePayer")
    if not isinstance(fee_payer, str) or not fee_payer:
        raise Refused(ERR_FEE_PAYER_MISSING)
    if fee_payer not in managed:
        raise Refused(ERR_FEE_PAYER_NOT_MANAGED)
    tx, keys = _decode(terms.transaction, fee_payer)
    instructions = list(tx.message.instructions)
    if not 3 <= len(instructions) <= 6:
        raise Refused(ERR_INSTRUCTION_COUNT)
    _check_compute_budget(keys, instructions, max_compute_unit_price)
    payer = _token_payer(keys, instructions)
    transfer = instructions[2]
    program = keys[transfer.program_id_index]
    data, accounts = bytes(transfer.data), list(transfer.accounts)
    if program not in _TOKEN_PROGRAMS or len(data) != 10 or data[0] != 12 or len(accounts) < 4:
        raise Refused(ERR_NO_TRANSFER, payer)
    source, mint, destination, authority = (keys[i] for i in accounts[:4])
    if authority in managed:
        raise Refused(ERR_FEE_PAYER_TRANSFERRING, payer)
    for ix in instructions:
        if any(keys[i] in managed for i in ix.accounts):
            raise Refused(ERR_FEE_PAYER_IN_ACCOUNTS, payer)
    if mint != terms.asset:
        raise Refused(ERR_MINT_MISMATCH, payer)
    if destination != _ata_or_none(terms.pay_to, terms.asset, program):
        raise Refused(ERR_RECIPIENT_MISMATCH, payer)
    amount = int.from_bytes(data[1:9], "little")
    if amount != terms.amount:
        raise Refused(ERR_AMOUNT_MISMATCH, payer, f"transfers {amount}, not {terms.amount}")
    _check_optional(keys, instructions[3:], terms.extra.get("memo"), payer)
    return TransferCheck(tx, payer, source, mint, destination, program, amount)


def _decode(text: str, fee_payer: str) -> tuple[VersionedTransaction, list[str]]:
    try:
        tx = VersionedTransaction.from_bytes(base64.b64decode(text, validate=True))
        tx.sanitize()
    except Exception:  # solders raises its own types for bad bytes
        raise Refused(ERR_DECODE) from None
    message = tx.message
    if isinstance(message, MessageV0) and message.address_table_lookups:
        # Accounts behind a lookup table would escape the fee payer's checks.
        raise Refused(ERR_INVALID_PAYLOAD, message="address lookup tables are not accepted")
    keys = [str(key) for key in message.account_keys]
    if keys[0] != fee_payer:
        raise Refused(
            ERR_FEE_PAYER_MISSING, message="the transaction's fee payer is not extra.feePayer"
        )
    return tx, keys


def _check_compute_budget(keys: list[str], instructions: list[Any], max_price: int) -> None:
    limit, price = instructions[0], instructions[1]
    limit_data, price_data = bytes(limit.data), bytes(price.data)
    if keys[limit.program_id_index] != COMPUTE_BUDGET_PROGRAM or limit_data[:1] != b"\x02":
        raise Refused(ERR_COMPUTE_LIMIT)
    if len(limit_data) != 5:
        raise Refused(ERR_COMPUTE_LIMIT)
    if keys[price.program_id_index] != COMPUTE_BUDGET_PROGRAM or price_data[:1] != b"\x03":
        raise Refused(ERR_COMPUTE_PRICE)
    if len(price_data) != 9:
        raise Refused(ERR_COMPUTE_PRICE)
    micro_lamports = int.from_bytes(price_data[1:9], "little")
    if micro_lamports > max_price:
        raise Refused(
            ERR_COMPUTE_PRICE_TOO_HIGH, message=f"{micro_lamports} microlamports > {max_price}"
        )


def _token_payer(keys: list[str], instructions: list[Any]) -> str:
    """The foundation's payer: the authority (4th account) of the first token-program
    instruction."""
    for ix in instructions:
        if keys[ix.program_id_index] in _TOKEN_PROGRAMS and len(ix.accounts) >= 4:
            return keys[int(ix.accounts[3])]
    raise Refused(ERR_NO_TRANSFER)


def _ata_or_none(owner: str, mint: str, program: str) -> str | None:
    try:
        return associated_token_address(owner, mint, program)
    except ValueError:
        return None


def _check_optional(keys: list[str], optional: list[Any], memo: Any, payer: str) -> None:
    for index, ix in enumerate(optional):
        if keys[ix.program_id_index] not in (LIGHTHOUSE_PROGRAM, MEMO_PROGRAM):
            raise Refused(ERR_UNKNOWN_OPTIONAL[index], payer)
    if not isinstance(memo, str) or not memo:
        return
    memos = [ix for ix in optional if keys[ix.program_id_index] == MEMO_PROGRAM]
    if len(memos) != 1:
        raise Refused(ERR_MEMO_COUNT, payer)
    if bytes(memos[0].data) != memo.encode("utf-8"):
        raise Refused(ERR_MEMO_MISMATCH, payer)


class _Rpc:
    """The JSON-RPC calls the facilitator makes, over one kept-alive client."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._http = loopback_client(timeout=_CONFIRM_TIMEOUT)
        self._id = 0

    async def call(self, method: str, *params: Any) -> Any:
        self._id += 1
        body = {"jsonrpc": "2.0", "id": self._id, "method": method, "params": list(params)}
        response = await self._http.post(self.url, json=body)
        response.raise_for_status()
        answer = response.json()
        error = answer.get("error")
        if error is not None:
            raise RpcError(int(error.get("code", 0)), str(error.get("message")), error.get("data"))
        return answer.get("result")

    async def aclose(self) -> None:
        await self._http.aclose()


@dataclasses.dataclass(frozen=True)
class _Verified:
    check: TransferCheck
    signed: VersionedTransaction = dataclasses.field(repr=False)
    key: str


class SvmFacilitator:
    """The sandbox's `exact` SVM facilitator: its fee payer key, the chain's RPC URL.

    `network` is the CAIP-2 id it settles on (its v1 name too, when the foundation has
    one). The fee payer needs lamports on the chain for the fees. `settlements` keeps
    every successful `SettleResponse`.
    """

    def __init__(
        self,
        rpc_url: str,
        *,
        fee_payer: Keypair | None = None,
        network: str = SOLANA_DEVNET,
        max_compute_unit_price: int = MAX_COMPUTE_UNIT_PRICE_MICROLAMPORTS,
        confirm_timeout: float = _CONFIRM_TIMEOUT,
    ) -> None:
        self.rpc_url = rpc_url
        self._keypair = fee_payer or Keypair()
        #: The fee payer's address (`extra.feePayer`).
        self.fee_payer: str = str(self._keypair.pubkey())
        self.network = network
        self.v1_network = next((n for n, caip in V1_NETWORKS.items() if caip == network), None)
        self.max_compute_unit_price = max_compute_unit_price
        self.confirm_timeout = confirm_timeout
        self.settlements: list[dict[str, Any]] = []
        self._settled: dict[str, float] = {}
        #: Sent and not yet seen on chain: message key -> (signature, blockhash, payer).
        self._pending: dict[str, tuple[str, str, str]] = {}
        self._rpc = _Rpc(rpc_url)
        self.app = self._build_app()

    def __repr__(self) -> str:
        return f"SvmFacilitator(network={self.network!r}, fee_payer={self.fee_payer!r})"

    async def aclose(self) -> None:
        await self._rpc.aclose()

    def supported(self) -> dict[str, Any]:
        """`GET /supported`: `exact` on this network (v2, and v1 under its v1 name), each
        with `extra.feePayer`, and the signers by CAIP family."""
        extra = {"feePayer": self.fee_payer}
        kinds = [{"x402Version": 2, "scheme": "exact", "network": self.network, "extra": extra}]
        if self.v1_network is not None:
            kinds.append(
                {"x402Version": 1, "scheme": "exact", "network": self.v1_network, "extra": extra}
            )
        return {"kinds": kinds, "extensions": [], "signers": {"solana:*": [self.fee_payer]}}

    # --- verify and settle -----------------------------------------------------------------

    async def verify(
        self, payment: Mapping[str, Any], requirements: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The foundation's `VerifyResponse` for `payment` against `requirements`."""
        try:
            verified = await self._verify(payment, requirements)
        except Refused as refused:
            answer: dict[str, Any] = {
                "isValid": False,
                "invalidReason": refused.reason,
                "payer": refused.payer,
            }
            if refused.message is not None:
                answer["invalidMessage"] = refused.message
            return answer
        return {"isValid": True, "payer": verified.check.payer}

    async def settle(
        self, payment: Mapping[str, Any], requirements: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Verify, co-sign and submit `payment`, and wait for the chain to show it: the
        foundation's `SettleResponse`. `transaction` is the transaction's signature once it
        may have been sent, else empty. `errorReason` `settlement_pending` (sent, not seen
        on chain in `confirm_timeout`, blockhash still alive) is not final: settling the
        same payment again waits for that same transaction, never sends another."""
        network = str(requirements.get("network", self.network))
        key = _message_key(payment)
        pending = self._pending.pop(key, None) if key is not None else None
        if pending is not None and key is not None:
            return await self._outcome(key, *pending, network)
        try:
            verified = await self._verify(payment, requirements)
        except Refused as refused:
            return _settle_failure(refused, network)
        payer = verified.check.payer
        if verified.key in self._settled:  # checked and taken with no await between
            return _settle_failure(Refused(ERR_DUPLICATE_SETTLEMENT, payer), network)
        self._settled[verified.key] = time.time()
        signed = verified.signed
        signature, blockhash = str(signed.signatures[0]), str(signed.message.recent_blockhash)
        config = {"encoding": "base64", "preflightCommitment": "confirmed"}
        try:
            await self._rpc.call("sendTransaction", _b64(signed), config)
        except RpcError as exc:  # refused by preflight: it went nowhere, the payer may retry
            del self._settled[verified.key]
            return _settle_failure(Refused(ERR_TRANSACTION_FAILED, payer, exc.message), network)
        except httpx.HTTPError:
            pass  # it may have reached the node: find out below, as for any sent transaction
        return await self._outcome(verified.key, signature, blockhash, payer, network)

    async def _outcome(
        self, key: str, signature: str, blockhash: str, payer: str, network: str
    ) -> dict[str, Any]:
        """Wait for a sent transaction: success, failed for good (it failed on chain, or its
        blockhash died before it landed), or `settlement_pending` (kept for a retry)."""
        state, status = await self._confirmed(signature, blockhash)
        if state == "landed" and status is not None and status.get("err") is None:
            answer = {"success": True, "transaction": signature, "network": network, "payer": payer}
            self.settlements.append(answer)
            return answer
        if state == "landed":
            assert status is not None
            message = f"the transaction failed on chain: {status.get('err')}"
            reason = ERR_TRANSACTION_FAILED
        elif state == "dead":
            message, reason = "its blockhash expired before it landed", ERR_TRANSACTION_FAILED
        else:
            self._pending[key] = (signature, blockhash, payer)
            message = "sent, not yet seen on chain: settle the same payment again to wait for it"
            reason = ERR_SETTLEMENT_PENDING
        return _settle_failure(Refused(reason, payer, message, signature), network)

    async def _verify(
        self, payment: Mapping[str, Any], requirements: Mapping[str, Any]
    ) -> _Verified:
        terms = payment_terms(payment, requirements)
        if terms.paid_scheme != "exact" or terms.scheme != "exact":
            raise Refused(ERR_UNSUPPORTED_SCHEME)
        if terms.paid_network != terms.network or terms.network not in (
            self.network,
            self.v1_network,
        ):
            raise Refused(ERR_NETWORK_MISMATCH)
        check = inspect_transaction(terms, {self.fee_payer}, self.max_compute_unit_price)
        await self._check_accounts(check)
        message = check.transaction.message
        own = self._keypair.sign_message(_signed_bytes(message))
        signed = VersionedTransaction.populate(message, [own, *check.transaction.signatures[1:]])
        key = hashlib.sha256(bytes(message)).hexdigest()
        if key in self._settled or await self._on_chain(str(signed.signatures[0])):
            raise Refused(ERR_DUPLICATE_SETTLEMENT, check.payer)
        await self._simulate(signed, check.payer)
        return _Verified(check, signed, key)

    async def _check_accounts(self, check: TransferCheck) -> None:
        """The mint is the transfer program's, the source and destination accounts exist."""
        try:
            found = await self._rpc.call(
                "getMultipleAccounts",
                [check.mint, check.source, check.destination],
                {"encoding": "base64", "commitment": "confirmed"},
            )
        except (RpcError, httpx.HTTPError) as exc:
            raise Refused(ERR_SIMULATION_FAILED, check.payer, f"the RPC failed: {exc}") from None
        mint, source, destination = found["value"]
        if mint is None or mint.get("owner") != check.token_program:
            message = f"the mint is not a mint of {check.token_program}"
            raise Refused(ERR_MINT_MISMATCH, check.payer, message)
        if source is None:
            raise Refused(ERR_SENDER_ATA_NOT_FOUND, check.payer)
        if destination is None:
            raise Refused(ERR_RECEIVER_ATA_NOT_FOUND, check.payer)

    async def _on_chain(self, signature: str) -> bool:
        try:
            statuses = await self._rpc.call(
                "getSignatureStatuses", [signature], {"searchTransactionHistory": True}
            )
        except (RpcError, httpx.HTTPError):
            return False  # the simulation below meets an RPC that fails
        return statuses["value"][0] is not None

    async def _simulate(self, signed: VersionedTransaction, payer: str) -> None:
        config = {"encoding": "base64", "sigVerify": True, "commitment": "confirmed"}
        try:
            result = await self._rpc.call("simulateTransaction", _b64(signed), config)
        except (RpcError, httpx.HTTPError) as exc:
            raise Refused(ERR_SIMULATION_FAILED, payer, str(exc)) from None
        err = result["value"]["err"]
        if err == "AlreadyProcessed":  # it landed while this payment was being verified
            raise Refused(ERR_DUPLICATE_SETTLEMENT, payer)
        if err is not None:
            raise Refused(ERR_SIMULATION_FAILED, payer, f"simulation failed: {err}")

    async def _confirmed(self, signature: str, blockhash: str) -> tuple[str, dict[str, Any] | None]:
        """`landed` with its status, `dead` (not on chain and its blockhash expired: it
        never will be), or `unknown` once `confirm_timeout` passed."""
        deadline = time.monotonic() + self.confirm_timeout
        delay = 0.002
        while time.monotonic() < deadline:
            try:
                statuses = await self._rpc.call("getSignatureStatuses", [signature])
                status = statuses["value"][0]
                if status is not None and status.get("confirmationStatus") in (
                    "confirmed",
                    "finalized",
                ):
                    return "landed", dict(status)
                if status is None:
                    # Asked after the status: a blockhash that died before this answer
                    # means the transaction was not on chain while it could still land.
                    valid = await self._rpc.call("isBlockhashValid", blockhash)
                    if not valid["value"]:
                        return await self._last_look(signature)
            except (RpcError, httpx.HTTPError):
                pass  # ask again until the deadline
            await anyio.sleep(delay)
            delay = min(delay * 2, 0.2)
        return "unknown", None

    async def _last_look(self, signature: str) -> tuple[str, dict[str, Any] | None]:
        """Its blockhash is dead: one more look, for a transaction that landed between the
        status and the blockhash answers."""
        statuses = await self._rpc.call("getSignatureStatuses", [signature])
        status = statuses["value"][0]
        return ("landed", dict(status)) if status is not None else ("dead", None)

    # --- HTTP ------------------------------------------------------------------------------

    def _build_app(self) -> Starlette:
        async def supported(request: Request) -> Response:
            return JSONResponse(self.supported())

        async def health(request: Request) -> Response:
            return JSONResponse({"status": "ok"})

        async def verify(request: Request) -> Response:
            body = await _request_body(request)
            if body is None:
                return JSONResponse({"error": "a VerifyRequest is required"}, status_code=400)
            return JSONResponse(await self.verify(*body))

        async def settle(request: Request) -> Response:
            body = await _request_body(request)
            if body is None:
                return JSONResponse({"error": "a SettleRequest is required"}, status_code=400)
            return JSONResponse(await self.settle(*body))

        return Starlette(
            routes=[
                Route("/supported", supported),
                Route("/health", health),
                Route("/verify", verify, methods=["POST"]),
                Route("/settle", settle, methods=["POST"]),
            ]
        )


async def _request_body(request: Request) -> tuple[dict[str, Any], dict[str, Any]] | None:
    try:
        body = await request.json()
    except ValueError:
        return None
    payment = body.get("paymentPayload") if isinstance(body, dict) else None
    requirements = body.get("paymentRequirements") if isinstance(body, dict) else None
    if not isinstance(payment, dict) or not isinstance(requirements, dict):
        return None
    return payment, requirements


def _settle_failure(refused: Refused, network: str) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "success": False,
        "errorReason": refused.reason,
        "transaction": refused.transaction,
        "network": network,
        "payer": refused.payer,
    }
    if refused.message is not None:
        answer["errorMessage"] = refused.message
    return answer


def _message_key(payment: Mapping[str, Any]) -> str | None:
    """The settlement key of a payment: the hash of its transaction's message (the fee
    payer's signature slot does not change it), or None when it does not decode."""
    inner = payment.get("payload")
    text = inner.get("transaction") if isinstance(inner, Mapping) else None
    try:
        tx = VersionedTransaction.from_bytes(base64.b64decode(str(text), validate=True))
    except Exception:  # solders raises its own types for bad bytes
        return None
    return hashlib.sha256(bytes(tx.message)).hexdigest()


def _signed_bytes(message: Any) -> bytes:
    """What a signature of the transaction signs: a v0 message with its version prefix."""
    return (b"\x80" if isinstance(message, MessageV0) else b"") + bytes(message)


def _b64(tx: VersionedTransaction) -> str:
    return base64.b64encode(bytes(tx)).decode("ascii")
