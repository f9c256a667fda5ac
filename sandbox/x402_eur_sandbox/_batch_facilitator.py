"""`BatchFacilitator`: the sandbox's facilitator of the x402 `batch-settlement` scheme on an
anvil chain, written from the scheme's specification.

Its routes speak the facilitator API of x402 v2 (`{x402Version, paymentPayload,
paymentRequirements}` in, JSON out):

* `GET /supported` lists the kind `batch-settlement` on its network, with
  `extra.receiverAuthorizer`: the address of its authorizer key, the receiver authorizer
  every channel it serves must name;
* `POST /verify` checks a `deposit`, `voucher` or `refund` payload without moving money;
* `POST /settle` carries out a `deposit` (through the ERC-3009 or the Permit2 deposit
  collector), a merchant's `claim` (`claimWithSignature`, signed by its authorizer key),
  a `settle` of a receiver's claimed total, and a merchant's enriched `refund` (the
  outstanding claims and `refundWithSignature` in one `multicall` of the escrow). A
  `voucher` is never settled on chain: the merchant keeps it and claims it later.

Verification follows the scheme's rules: the configuration hashes to the voucher's
channel id; token, receiver, receiver authorizer and withdraw delay are the requirements';
the voucher's signature recovers the payer authorizer (or, for a zero one, the payer's
wallet accepts it through EIP-1271); its ceiling is at most the channel's balance (plus the
deposit) and above what was claimed (a refund's: not below); an enriched refund's nonce is
the escrow's. Every transaction is simulated with `eth_call` before it is sent from the
relayer key, which pays the gas. Every answer carries the channel's snapshot (`extra` of a
verification, `extra.channelState` of a settlement), and every refusal a scheme error
code (`invalid_batch_settlement_evm_...`).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Mapping
from typing import Any

import anyio
import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ._batch_wire import (
    ERC3009_COLLECTOR,
    ESCROW,
    MAX_WITHDRAW_DELAY,
    MIN_WITHDRAW_DELAY,
    PERMIT2_COLLECTOR,
    SCHEME,
    ZERO_ADDRESS,
    ChannelConfig,
    ChannelSnapshot,
    Claim,
    Voucher,
    call_data,
    channel_id,
    code,
    parse_bytes32,
    parse_uint,
    recover_voucher,
    sign_claim_batch,
    sign_refund,
    voucher_digest,
)
from ._eip712 import DigestSigner
from ._server import ServedApp
from ._standard import _JsonRpc, _legacy_transaction, _receipt, _RpcError

__all__ = ["BatchFacilitator", "Refusal"]

_PAID_TYPES = ("deposit", "voucher", "refund")
_BALANCE_OF = bytes.fromhex("70a08231")
_ALLOWANCE = bytes.fromhex("dd62ed3e")
_IS_VALID_SIGNATURE = bytes.fromhex("1626ba7e")
_PERMIT2 = "0x000000000022D473030F116dDEE9F6B43aC78BA3"
# Token revert texts of a deposit's simulation -> the scheme's codes.
_DEPOSIT_REVERTS = (
    ("invalid signature", "receive_authorization_signature"),
    ("0x8baa579f", "receive_authorization_signature"),
    ("authorization is expired", "payload_authorization_valid_before"),
    ("authorization is not yet valid", "payload_authorization_valid_after"),
    ("exceeds balance", "insufficient_balance"),
)


class Refusal(Exception):
    """A refused payload: the scheme's error code, the payer, the channel's snapshot."""

    def __init__(
        self, reason: str, payer: str = "", snapshot: ChannelSnapshot | None = None
    ) -> None:
        super().__init__(reason)
        self.reason = code(reason)
        self.payer = payer
        self.snapshot = snapshot


@dataclasses.dataclass(frozen=True)
class _Checked:
    """A verified `deposit`/`voucher`/`refund` payload and the channel it was checked on."""

    kind: str
    config: ChannelConfig
    voucher: Voucher
    snapshot: ChannelSnapshot
    payload: Mapping[str, Any]


class BatchFacilitator:
    """The scheme's facilitator on the chain at `rpc_url` (`chain_id`), as an ASGI app.

    `relayer_key` sends (and pays the gas of) every transaction; `authorizer_key` is the
    receiver authorizer it signs claims and refunds with. The escrow and its collectors
    must be at their canonical addresses (`_batch_escrow.install_batch_settlement`).
    """

    def __init__(
        self, *, rpc_url: str, chain_id: int, relayer_key: str, authorizer_key: str
    ) -> None:
        from eth_account import Account

        self.rpc_url = rpc_url
        self.chain_id = chain_id
        self.network = f"eip155:{chain_id}"
        self._relayer = DigestSigner(bytes.fromhex(relayer_key.removeprefix("0x")))
        self.relayer_address = self._relayer.address
        self._authorizer_key = authorizer_key
        self.authorizer_address: str = str(Account.from_key(authorizer_key).address)
        self._rpc: _JsonRpc | None = None
        self._send_lock = anyio.Lock()
        self._served: ServedApp | None = None
        self.app = Starlette(
            routes=[
                Route("/supported", self._supported_route, methods=["GET"]),
                Route("/verify", self._verify_route, methods=["POST"]),
                Route("/settle", self._settle_route, methods=["POST"]),
            ]
        )

    def __repr__(self) -> str:
        return (
            f"BatchFacilitator(network={self.network!r}, "
            f"receiver_authorizer={self.authorizer_address!r})"
        )

    @property
    def url(self) -> str:
        if self._served is None:
            raise RuntimeError("the batch-settlement facilitator is not running")
        return self._served.url

    async def start(self) -> BatchFacilitator:
        self._rpc = _JsonRpc(self.rpc_url)
        self._served = ServedApp(self.app, "batch-facilitator")
        try:
            await self._served.start()
        except BaseException:
            await self.stop()
            raise
        return self

    async def stop(self) -> None:
        with anyio.CancelScope(shield=True):
            if self._served is not None:
                await self._served.stop()
                self._served = None
            if self._rpc is not None:
                await self._rpc.aclose()
                self._rpc = None

    async def __aenter__(self) -> BatchFacilitator:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # --- routes ----------------------------------------------------------------------------

    def supported(self) -> dict[str, Any]:
        kind = {
            "x402Version": 2,
            "scheme": SCHEME,
            "network": self.network,
            "extra": {"receiverAuthorizer": self.authorizer_address},
        }
        return {
            "kinds": [kind],
            "extensions": [],
            "signers": {"eip155:*": [self.relayer_address]},
        }

    async def _supported_route(self, request: Request) -> Response:
        return JSONResponse(self.supported())

    async def _verify_route(self, request: Request) -> Response:
        payment, requirements = await _request_body(request)
        return JSONResponse(await self.verify(payment, requirements))

    async def _settle_route(self, request: Request) -> Response:
        payment, requirements = await _request_body(request)
        return JSONResponse(await self.settle(payment, requirements))

    # --- verify ----------------------------------------------------------------------------

    async def verify(
        self, payment: Mapping[str, Any], requirements: Mapping[str, Any]
    ) -> dict[str, Any]:
        """`{isValid, payer, extra: snapshot}` or `{isValid: false, invalidReason, ...}`."""
        try:
            checked = await self._check(payment, requirements)
        except Refusal as refusal:
            return {
                "isValid": False,
                "invalidReason": refusal.reason,
                "payer": refusal.payer,
                "extra": refusal.snapshot.to_wire() if refusal.snapshot else {},
            }
        return {
            "isValid": True,
            "payer": checked.config.payer,
            "extra": checked.snapshot.to_wire(),
        }

    async def _check(self, payment: Mapping[str, Any], requirements: Mapping[str, Any]) -> _Checked:
        if requirements.get("scheme") != SCHEME:
            raise Refusal("scheme")
        if requirements.get("network") != self.network:
            raise Refusal("network_mismatch")
        payload = payment.get("payload")
        kind = payload.get("type") if isinstance(payload, Mapping) else None
        if not isinstance(payload, Mapping) or kind not in _PAID_TYPES:
            raise Refusal("payload_type")
        try:
            config = ChannelConfig.from_wire(payload.get("channelConfig"))
            voucher = Voucher.from_wire(payload.get("voucher"))
        except ValueError:
            raise Refusal(f"{kind}_payload") from None
        if channel_id(config, self.chain_id) != voucher.channel_id:
            raise Refusal("channel_id_mismatch", config.payer)
        self._check_terms(config, requirements)
        snapshot = await self._snapshot(voucher.channel_id, config.payer)
        await self._check_signature(config, voucher, snapshot)
        checked = _Checked(str(kind), config, voucher, snapshot, payload)
        if kind == "deposit":
            await self._check_deposit(checked, requirements)
        elif kind == "voucher":
            _check_ceiling(checked, balance=snapshot.balance, refund=False)
        else:
            _check_refund(checked)
        return checked

    def _check_terms(self, config: ChannelConfig, requirements: Mapping[str, Any]) -> None:
        extra = requirements.get("extra")
        extra = extra if isinstance(extra, Mapping) else {}
        payer = config.payer
        if config.token.lower() != str(requirements.get("asset", "")).lower():
            raise Refusal("token_mismatch", payer)
        if config.receiver.lower() != str(requirements.get("payTo", "")).lower():
            raise Refusal("receiver_mismatch", payer)
        required_authorizer = str(extra.get("receiverAuthorizer", ""))
        if config.receiver_authorizer.lower() != required_authorizer.lower():
            raise Refusal("receiver_authorizer_mismatch", payer)
        if config.receiver_authorizer != self.authorizer_address:
            # Only channels this facilitator can claim from: it signs their claims.
            raise Refusal("authorizer_address_mismatch", payer)
        if config.withdraw_delay != extra.get("withdrawDelay"):
            raise Refusal("withdraw_delay_mismatch", payer)
        if not MIN_WITHDRAW_DELAY <= config.withdraw_delay <= MAX_WITHDRAW_DELAY:
            raise Refusal("withdraw_delay_out_of_range", payer)

    async def _check_signature(
        self, config: ChannelConfig, voucher: Voucher, snapshot: ChannelSnapshot
    ) -> None:
        if config.payer_authorizer != ZERO_ADDRESS:
            if recover_voucher(self.chain_id, voucher) != config.payer_authorizer:
                raise Refusal("voucher_signature", config.payer, snapshot)
            return
        # A smart wallet payer: its EIP-1271 `isValidSignature` decides.
        digest = voucher_digest(self.chain_id, voucher.channel_id, voucher.max_claimable)
        from eth_abi.abi import encode

        data = _IS_VALID_SIGNATURE + encode(["bytes32", "bytes"], [digest, voucher.signature])
        try:
            result = await self._call(config.payer, data)
        except Refusal:
            raise Refusal("voucher_signature", config.payer, snapshot) from None
        if not result.startswith(_IS_VALID_SIGNATURE):
            raise Refusal("voucher_signature", config.payer, snapshot)

    async def _check_deposit(self, checked: _Checked, requirements: Mapping[str, Any]) -> None:
        payer, snapshot = checked.config.payer, checked.snapshot
        deposit = checked.payload.get("deposit")
        try:
            if not isinstance(deposit, Mapping):
                raise ValueError("deposit must be an object")
            amount = parse_uint(deposit.get("amount"))
            if amount == 0:
                raise ValueError("a deposit is above zero")
        except ValueError:
            raise Refusal("deposit_payload", payer, snapshot) from None
        _check_ceiling(checked, balance=snapshot.balance + amount, refund=False)
        collector, data = self._collector(checked, requirements, amount)
        owner = bytes(12) + bytes.fromhex(payer[2:])
        token = checked.config.token
        if collector == PERMIT2_COLLECTOR:
            spender = bytes(12) + bytes.fromhex(_PERMIT2[2:])
            if _word(await self._call(token, _ALLOWANCE + owner + spender)) < amount:
                raise Refusal("permit2_allowance_required", payer, snapshot)
        if _word(await self._call(token, _BALANCE_OF + owner)) < amount:
            raise Refusal("insufficient_balance", payer, snapshot)
        calldata = call_data("deposit", checked.config.abi(), amount, collector, data)
        await self._simulate(calldata, "deposit_simulation_failed", payer, snapshot)

    def _collector(
        self, checked: _Checked, requirements: Mapping[str, Any], amount: int
    ) -> tuple[str, bytes]:
        """The deposit's collector and its `collectorData`, after the collector's checks."""
        from eth_abi.abi import encode

        payer, snapshot = checked.config.payer, checked.snapshot
        authorization = checked.payload["deposit"].get("authorization")
        if not isinstance(authorization, Mapping) or len(authorization) != 1:
            raise Refusal("deposit_payload", payer, snapshot)
        now = int(time.time())
        erc3009 = authorization.get("erc3009Authorization")
        if erc3009 is not None:
            extra = requirements.get("extra") or {}
            if not extra.get("name") or not extra.get("version"):
                raise Refusal("missing_eip712_domain", payer, snapshot)
            try:
                after = parse_uint(erc3009.get("validAfter"), 2**256)
                before = parse_uint(erc3009.get("validBefore"), 2**256)
                salt = int.from_bytes(parse_bytes32(erc3009.get("salt")), "big")
                signature = bytes.fromhex(str(erc3009.get("signature")).removeprefix("0x"))
            except (ValueError, AttributeError):
                raise Refusal("deposit_payload", payer, snapshot) from None
            if before < now + 6:
                raise Refusal("payload_authorization_valid_before", payer, snapshot)
            if after > now:
                raise Refusal("payload_authorization_valid_after", payer, snapshot)
            data = encode(
                ["uint256", "uint256", "uint256", "bytes"], [after, before, salt, signature]
            )
            return ERC3009_COLLECTOR, data
        permit = authorization.get("permit2Authorization")
        if not isinstance(permit, Mapping):
            raise Refusal("deposit_payload", payer, snapshot)
        nonce, deadline, signature = _permit2_checks(checked, permit, amount, now)
        data = encode(["uint256", "uint256", "bytes", "bytes"], [nonce, deadline, signature, b""])
        return PERMIT2_COLLECTOR, data

    # --- settle ----------------------------------------------------------------------------

    async def settle(
        self, payment: Mapping[str, Any], requirements: Mapping[str, Any]
    ) -> dict[str, Any]:
        """`{success, transaction, network, payer, amount, extra: {channelState}}`, or
        `{success: false, errorReason, ...}`."""
        payload = payment.get("payload")
        kind = payload.get("type") if isinstance(payload, Mapping) else None
        try:
            if kind == "claim":
                return await self._settle_claim(payment)
            if kind == "settle":
                return await self._settle_receiver(payment)
            if kind == "voucher":
                raise Refusal("unknown_settle_action")
            checked = await self._check(payment, requirements)
            if kind == "deposit":
                return await self._settle_deposit(checked, requirements)
            return await self._settle_refund(checked)
        except Refusal as refusal:
            answer: dict[str, Any] = {
                "success": False,
                "errorReason": refusal.reason,
                "transaction": "",
                "network": self.network,
                "payer": refusal.payer,
            }
            if refusal.snapshot is not None:
                answer["extra"] = {"channelState": refusal.snapshot.to_wire()}
            return answer

    def _settled(
        self, transaction: str, payer: str, amount: str, snapshot: ChannelSnapshot | None
    ) -> dict[str, Any]:
        answer: dict[str, Any] = {
            "success": True,
            "transaction": transaction,
            "network": self.network,
            "payer": payer,
            "amount": amount,
        }
        if snapshot is not None:
            answer["extra"] = {"channelState": snapshot.to_wire()}
        return answer

    async def _settle_deposit(
        self, checked: _Checked, requirements: Mapping[str, Any]
    ) -> dict[str, Any]:
        amount = int(checked.payload["deposit"]["amount"])
        collector, data = self._collector(checked, requirements, amount)
        calldata = call_data("deposit", checked.config.abi(), amount, collector, data)
        payer = checked.config.payer
        tx = await self._transact(calldata, "deposit_transaction_failed", payer, checked.snapshot)
        after = await self._snapshot(checked.voucher.channel_id, payer)
        return self._settled(tx, payer, str(amount), after)

    async def _settle_claim(self, payment: Mapping[str, Any]) -> dict[str, Any]:
        payload = payment["payload"]
        try:
            rows = payload.get("claims")
            if not isinstance(rows, list) or not rows:
                raise ValueError("claims is a non-empty list")
            claims = [Claim.from_wire(row) for row in rows]
        except ValueError:
            raise Refusal("claim_payload") from None
        calldata = self._claim_call(claims, payload.get("claimAuthorizerSignature"))
        await self._simulate(calldata, "claim_simulation_failed", "", None)
        tx = await self._transact(calldata, "claim_transaction_failed", "", None)
        return self._settled(tx, "", "", None)

    def _claim_call(self, claims: list[Claim], signature: object) -> bytes:
        if isinstance(signature, str) and signature.startswith("0x"):
            try:
                signed = bytes.fromhex(signature[2:])
            except ValueError:
                raise Refusal("claim_payload") from None
        else:
            if any(c.config.receiver_authorizer != self.authorizer_address for c in claims):
                raise Refusal("authorizer_address_mismatch")
            signed = sign_claim_batch(self._authorizer_key, self.chain_id, claims)
        return call_data("claimWithSignature", [claim.abi() for claim in claims], signed)

    async def _settle_receiver(self, payment: Mapping[str, Any]) -> dict[str, Any]:
        from eth_abi.abi import decode
        from eth_utils.address import to_checksum_address

        payload = payment["payload"]
        try:
            receiver = str(to_checksum_address(str(payload.get("receiver"))))
            token = str(to_checksum_address(str(payload.get("token"))))
        except ValueError:
            raise Refusal("settle_payload") from None
        claimed, settled = decode(
            ["uint128", "uint128"],
            await self._call(ESCROW, call_data("receivers", receiver, token)),
        )
        if claimed == settled:
            return self._settled("", receiver, "0", None)
        calldata = call_data("settle", receiver, token)
        await self._simulate(calldata, "settle_simulation_failed", receiver, None)
        tx = await self._transact(calldata, "settle_transaction_failed", receiver, None)
        return self._settled(tx, receiver, str(int(claimed) - int(settled)), None)

    async def _settle_refund(self, checked: _Checked) -> dict[str, Any]:
        payload, snapshot, payer = checked.payload, checked.snapshot, checked.config.payer
        try:
            nonce = parse_uint(payload.get("refundNonce"), 2**256)
            claims = [Claim.from_wire(row) for row in payload.get("claims") or []]
        except (ValueError, TypeError):
            raise Refusal("refund_payload", payer, snapshot) from None
        if nonce != snapshot.refund_nonce:
            raise Refusal("refund_payload", payer, snapshot)
        claimed = max([snapshot.total_claimed, *(c.total_claimed for c in claims)])
        amount = _refund_amount(payload.get("amount"), snapshot.balance - claimed)
        if amount is None:
            raise Refusal("refund_amount_invalid", payer, snapshot)
        if amount == 0:
            raise Refusal("refund_no_balance", payer, snapshot)
        signature = payload.get("refundAuthorizerSignature")
        if isinstance(signature, str) and signature.startswith("0x"):
            signed = bytes.fromhex(signature[2:])
        elif checked.config.receiver_authorizer != self.authorizer_address:
            raise Refusal("authorizer_address_mismatch", payer, snapshot)
        else:
            signed = sign_refund(
                self._authorizer_key, self.chain_id, checked.voucher.channel_id, nonce, amount
            )
        refund = call_data("refundWithSignature", checked.config.abi(), amount, nonce, signed)
        calls = [refund]
        if claims:
            claim_signature = payload.get("claimAuthorizerSignature")
            calls.insert(0, self._claim_call(claims, claim_signature))
        calldata = call_data("multicall", calls) if len(calls) > 1 else refund
        await self._simulate(calldata, "refund_simulation_failed", payer, snapshot)
        tx = await self._transact(calldata, "refund_transaction_failed", payer, snapshot)
        after = await self._snapshot(checked.voucher.channel_id, payer)
        return self._settled(tx, payer, str(snapshot.balance - after.balance), after)

    # --- the chain -------------------------------------------------------------------------

    async def snapshot(self, channel: str) -> ChannelSnapshot:
        """The escrow's view of `channel` (its id, 0x hex)."""
        return await self._snapshot(channel.lower(), "")

    async def _snapshot(self, channel: str, payer: str) -> ChannelSnapshot:
        from eth_abi.abi import decode

        key = bytes.fromhex(channel[2:])
        try:
            balance, claimed = decode(
                ["uint128", "uint128"], await self._call(ESCROW, call_data("channels", key))
            )
            (nonce,) = decode(["uint256"], await self._call(ESCROW, call_data("refundNonce", key)))
            _, initiated = decode(
                ["uint128", "uint40"],
                await self._call(ESCROW, call_data("pendingWithdrawals", key)),
            )
        except (Refusal, ValueError, TypeError):
            raise Refusal("channel_state_read_failed", payer) from None
        except Exception:  # eth_abi decoding errors: no escrow answered
            raise Refusal("channel_state_read_failed", payer) from None
        return ChannelSnapshot(channel, int(balance), int(claimed), int(initiated), int(nonce))

    async def _call(self, to: str, data: bytes) -> bytes:
        assert self._rpc is not None, "the batch-settlement facilitator is not running"
        try:
            result = await self._rpc.call(
                "eth_call", {"to": to, "data": "0x" + data.hex()}, "latest"
            )
        except (_RpcError, httpx.HTTPError):
            raise Refusal("rpc_read_failed") from None
        return bytes.fromhex(str(result).removeprefix("0x"))

    async def _simulate(
        self, data: bytes, reason: str, payer: str, snapshot: ChannelSnapshot | None
    ) -> None:
        assert self._rpc is not None, "the batch-settlement facilitator is not running"
        call = {"from": self.relayer_address, "to": ESCROW, "data": "0x" + data.hex()}
        try:
            await self._rpc.call("eth_call", call, "latest")
        except httpx.HTTPError:
            raise Refusal(reason, payer, snapshot) from None
        except _RpcError as exc:
            text = f"{exc} {json.dumps(exc.error)}".lower()
            known = reason == "deposit_simulation_failed"
            found = next((c for needle, c in _DEPOSIT_REVERTS if known and needle in text), None)
            raise Refusal(found or reason, payer, snapshot) from None

    async def _transact(
        self, data: bytes, reason: str, payer: str, snapshot: ChannelSnapshot | None
    ) -> str:
        """Send `data` to the escrow from the relayer and wait for its successful receipt."""
        rpc = self._rpc
        assert rpc is not None, "the batch-settlement facilitator is not running"
        call = {"from": self.relayer_address, "to": ESCROW, "data": "0x" + data.hex()}
        async with self._send_lock:  # one relayer: one nonce sequence
            try:
                gas = int(await rpc.call("eth_estimateGas", call), 16)
                nonce = int(
                    await rpc.call("eth_getTransactionCount", self.relayer_address, "pending"), 16
                )
                price = 2 * int(await rpc.call("eth_gasPrice"), 16)
                raw = _legacy_transaction(
                    self._relayer,
                    chain_id=self.chain_id,
                    nonce=nonce,
                    gas_price=price,
                    gas=gas + gas // 2,
                    to=ESCROW,
                    data=data,
                )
                tx_hash = str(await rpc.call("eth_sendRawTransaction", "0x" + raw.hex()))
            except (_RpcError, httpx.HTTPError):
                raise Refusal(reason, payer, snapshot) from None
        try:
            receipt = await _receipt(rpc, tx_hash)
        except (_RpcError, httpx.HTTPError):
            raise Refusal("wait_for_receipt_failed", payer, snapshot) from None
        if receipt is None:
            raise Refusal("wait_for_receipt_failed", payer, snapshot)
        if receipt.get("status") != "0x1":
            raise Refusal("transaction_reverted", payer, snapshot)
        return tx_hash


def _word(data: bytes) -> int:
    return int.from_bytes(data[:32], "big") if len(data) >= 32 else 0


def _check_ceiling(checked: _Checked, *, balance: int, refund: bool) -> None:
    """The voucher's ceiling: at most `balance`, above what was claimed (a refund's: not
    below it)."""
    ceiling, snapshot = checked.voucher.max_claimable, checked.snapshot
    payer = checked.config.payer
    if balance == 0:
        raise Refusal("channel_not_found", payer, snapshot)
    if ceiling > balance:
        raise Refusal("cumulative_exceeds_balance", payer, snapshot)
    below = ceiling < snapshot.total_claimed if refund else ceiling <= snapshot.total_claimed
    if below:
        raise Refusal("cumulative_below_claimed", payer, snapshot)


def _check_refund(checked: _Checked) -> None:
    snapshot, payer = checked.snapshot, checked.config.payer
    _check_ceiling(checked, balance=snapshot.balance, refund=True)
    claimed = max(snapshot.total_claimed, checked.voucher.max_claimable)
    amount = _refund_amount(checked.payload.get("amount"), snapshot.balance - claimed)
    if amount is None:
        raise Refusal("refund_amount_invalid", payer, snapshot)
    if amount == 0:
        raise Refusal("refund_no_balance", payer, snapshot)


def _refund_amount(requested: object, available: int) -> int | None:
    """What a refund returns: all that is unclaimed, or the amount asked for when it is
    less; None for an amount that is not a positive uint128."""
    if requested is None:
        return max(available, 0)
    try:
        amount = parse_uint(requested)
    except ValueError:
        return None
    if amount == 0:
        return None
    return min(amount, max(available, 0))


def _permit2_checks(
    checked: _Checked, permit: Mapping[str, Any], amount: int, now: int
) -> tuple[int, int, bytes]:
    """A Permit2 deposit's authorization, checked: its nonce, deadline and signature."""
    payer, snapshot = checked.config.payer, checked.snapshot
    try:
        permitted = permit.get("permitted") or {}
        witness = permit.get("witness") or {}
        nonce = parse_uint(permit.get("nonce"), 2**256)
        deadline = parse_uint(permit.get("deadline"), 2**256)
        permitted_amount = parse_uint(permitted.get("amount"), 2**256)
        signature = bytes.fromhex(str(permit.get("signature")).removeprefix("0x"))
    except (ValueError, AttributeError):
        raise Refusal("deposit_payload", payer, snapshot) from None
    if str(permit.get("from", "")).lower() != payer.lower():
        raise Refusal("deposit_payload", payer, snapshot)
    if str(permit.get("spender", "")).lower() != PERMIT2_COLLECTOR.lower():
        raise Refusal("permit2_invalid_spender", payer, snapshot)
    if str(permitted.get("token", "")).lower() != checked.config.token.lower():
        raise Refusal("token_mismatch", payer, snapshot)
    if permitted_amount != amount:
        raise Refusal("permit2_amount_mismatch", payer, snapshot)
    if str(witness.get("channelId", "")).lower() != checked.voucher.channel_id:
        raise Refusal("channel_id_mismatch", payer, snapshot)
    if deadline < now + 6:
        raise Refusal("permit2_deadline_expired", payer, snapshot)
    return nonce, deadline, signature


async def _request_body(request: Request) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    try:
        body = json.loads(await request.body())
    except ValueError:
        body = None
    if not isinstance(body, dict):
        return {}, {}
    payment = body.get("paymentPayload")
    requirements = body.get("paymentRequirements")
    return (
        payment if isinstance(payment, dict) else {},
        requirements if isinstance(requirements, dict) else {},
    )
