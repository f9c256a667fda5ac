"""`BatchMerchant`: the sandbox's merchant of the x402 `batch-settlement` scheme, and
`BatchSettlement`, the part that runs it with its facilitator on a sandbox chain.

The merchant's priced routes answer an unpaid request with 402 (x402 v2, the
`PAYMENT-REQUIRED` header) offering `batch-settlement` with `extra` {receiverAuthorizer,
withdrawDelay, name, version, assetTransferMethod, minDeposit}. A paid request's
`PAYMENT-SIGNATURE` carries a `deposit`, a `voucher` or a `refund`:

* one request per channel at a time: another request on a channel already being served
  is refused with `invalid_batch_settlement_evm_channel_busy` (402);
* the voucher's ceiling must be the channel's charged total plus the route's price (a
  refund's: the charged total itself); any other ceiling gets the corrective 402
  (`invalid_batch_settlement_evm_cumulative_amount_mismatch`, its entry's `extra` carrying
  `channelState` and, when the merchant holds one, `voucherState`: the last voucher
  signed). A merchant without a record of the channel (after `forget`, as after a crash)
  takes the voucher's own base (its ceiling less the price), unless the escrow has claimed
  beyond it;
* the payload is verified by the facilitator, the handler runs, a deposit is settled by
  the facilitator, and the charge (`charge` of the price: a dynamic price charges less
  than the ceiling allows) is added to the channel; `PAYMENT-RESPONSE` reports it
  (`transaction` "" for a voucher, the deposit's transaction for a deposit,
  `extra.chargedAmount` and `extra.channelState`);
* a refund claims the outstanding charges and refunds the rest of the deposit in one
  transaction, and answers 200 `{"message": "Refund acknowledged", "channelId": ...}`.

`claim_and_settle()` (also `POST /admin/claim-and-settle`) claims every channel's charged
total in one `claimWithSignature` and settles the receiver's claimed total.

Fault switches for tests: `overclaim` makes the merchant report a charged total above
what the payer signed (in `PAYMENT-RESPONSE` and in its corrective 402); `forget()` drops
every channel's record.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from decimal import ROUND_FLOOR, Decimal
from typing import TYPE_CHECKING, Any

import anyio
import httpx
from starlette.requests import Request

from ._anvil import ANVIL_DEV_KEYS
from ._batch_facilitator import BatchFacilitator
from ._batch_wire import (
    MAX_WITHDRAW_DELAY,
    MIN_WITHDRAW_DELAY,
    SCHEME,
    ChannelConfig,
    ChannelSnapshot,
    Claim,
    Voucher,
    channel_id,
    code,
)
from ._merchant import Price
from ._payment_identifier import Answer
from ._server import ServedApp, loopback_client
from ._standard import (
    TOKEN_NAME,
    TOKEN_VERSION,
    _buffered,
    _json_answer,
    _send,
    decode_payment_signature,
    encode_header,
    requirements_match,
)
from ._wire import to_atomic

if TYPE_CHECKING:
    from ._sandbox import Sandbox

__all__ = ["BATCH_PRICES", "BatchMerchant", "BatchSettlement", "ChannelRecord"]

#: The batch-settlement merchant's routes (in the sandbox's sEURC).
BATCH_PRICES: dict[str, Price] = {
    "/stream": Price(Decimal("0.01"), "One request of a stream, paid by voucher"),
}
_CLAIM_PATH = "/admin/claim-and-settle"
_MISMATCH = code("cumulative_amount_mismatch")
# The relayer of the sandbox's facilitator: a dev key no other sandbox service sends from.
_RELAYER_KEY = ANVIL_DEV_KEYS[2]


@dataclasses.dataclass
class ChannelRecord:
    """What the merchant knows of a channel: the total it charged, the last voucher (its
    ceiling and signature), and the escrow's view as the facilitator last reported it."""

    config: ChannelConfig
    charged: int
    signed_max: int
    signature: bytes = dataclasses.field(repr=False)
    balance: int
    total_claimed: int
    refund_nonce: int
    withdraw_requested_at: int = 0

    def mirror(self, snapshot: ChannelSnapshot) -> None:
        self.balance = snapshot.balance
        self.total_claimed = snapshot.total_claimed
        self.refund_nonce = snapshot.refund_nonce
        self.withdraw_requested_at = snapshot.withdraw_requested_at


class _Refused(Exception):
    def __init__(self, reason: str, payer: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.payer = payer


class BatchMerchant:
    """A `batch-settlement` merchant (an ASGI app) whose facilitator is at
    `facilitator_url`; it sells `prices` (token units, six decimals) in `token` on
    `chain_id`, paid to `pay_to`. `receiver_authorizer` defaults to the facilitator's
    (`/supported`). `charge` is the share of a route's price a request is charged;
    `resource`, an ASGI app, serves the paid routes."""

    def __init__(
        self,
        *,
        facilitator_url: str,
        token: str,
        pay_to: str,
        chain_id: int,
        prices: Mapping[str, Price] | None = None,
        receiver_authorizer: str | None = None,
        withdraw_delay: int = MIN_WITHDRAW_DELAY,
        token_name: str = TOKEN_NAME,
        token_version: str = TOKEN_VERSION,
        asset_transfer_method: str = "eip3009",
        min_deposit: int | None = None,
        max_timeout_seconds: int = 300,
        charge: Decimal | str = "1",
        resource: Any = None,
    ) -> None:
        if not MIN_WITHDRAW_DELAY <= withdraw_delay <= MAX_WITHDRAW_DELAY:
            raise ValueError("withdraw_delay is between 900 s and 30 days")
        self.facilitator_url = facilitator_url
        self.token = token
        self.pay_to = pay_to
        self.chain_id = chain_id
        self.network = f"eip155:{chain_id}"
        self.prices: dict[str, Price] = dict(BATCH_PRICES if prices is None else prices)
        self.receiver_authorizer = receiver_authorizer
        self.withdraw_delay = withdraw_delay
        self.token_name = token_name
        self.token_version = token_version
        self.asset_transfer_method = asset_transfer_method
        self.min_deposit = min_deposit
        self.max_timeout_seconds = max_timeout_seconds
        self.charge = Decimal(charge)
        #: The paid resources' ASGI app (by default a small JSON answer naming the route).
        self.resource = resource
        #: Fault switch: report charged totals above what the payer signed.
        self.overclaim = False
        #: Every channel the merchant serves, by id (0x, lower-case hex).
        self.channels: dict[str, ChannelRecord] = {}
        self._locks: dict[str, anyio.Lock] = {}
        self._http: httpx.AsyncClient | None = None
        self._served: ServedApp | None = None

    def __repr__(self) -> str:
        running = self._served is not None
        return f"BatchMerchant(network={self.network!r}, url={self.url if running else None!r})"

    @property
    def url(self) -> str:
        if self._served is None:
            raise RuntimeError("the batch-settlement merchant is not running")
        return self._served.url

    def resource_url(self, path: str) -> str:
        return self.url + path

    def price_atomic(self, path: str) -> int:
        return to_atomic(self.prices[path].amount)

    def charge_atomic(self, path: str) -> int:
        """What a request of `path` is charged (atomic): `charge` of its price."""
        share = self.price_atomic(path) * self.charge
        return int(share.to_integral_value(rounding=ROUND_FLOOR))

    def forget(self) -> None:
        """Fault switch: lose every channel's record, as a crash would."""
        self.channels.clear()

    def requirements(self, path: str) -> dict[str, Any]:
        """The route's `batch-settlement` entry."""
        if self.receiver_authorizer is None:
            raise RuntimeError("the batch-settlement merchant is not running")
        price = self.price_atomic(path)
        return {
            "scheme": SCHEME,
            "network": self.network,
            "asset": self.token,
            "amount": str(price),
            "payTo": self.pay_to,
            "maxTimeoutSeconds": self.max_timeout_seconds,
            "extra": {
                "receiverAuthorizer": self.receiver_authorizer,
                "withdrawDelay": self.withdraw_delay,
                "name": self.token_name,
                "version": self.token_version,
                "assetTransferMethod": self.asset_transfer_method,
                "minDeposit": str(self.min_deposit if self.min_deposit else 10 * price),
            },
        }

    # --- lifecycle -------------------------------------------------------------------------

    async def start(self) -> BatchMerchant:
        self._http = loopback_client(timeout=60)
        try:
            if self.receiver_authorizer is None:
                self.receiver_authorizer = await self._facilitator_authorizer()
            self._served = ServedApp(self, "batch-merchant")
            await self._served.start()
        except BaseException:
            await self.stop()
            raise
        return self

    async def _facilitator_authorizer(self) -> str:
        assert self._http is not None
        response = await self._http.get(self.facilitator_url + "/supported")
        response.raise_for_status()
        for kind in response.json().get("kinds", []):
            if kind.get("scheme") == SCHEME and kind.get("network") == self.network:
                return str(kind["extra"]["receiverAuthorizer"])
        raise RuntimeError(f"the facilitator does not support {SCHEME} on {self.network}")

    async def stop(self) -> None:
        with anyio.CancelScope(shield=True):
            if self._served is not None:
                await self._served.stop()
                self._served = None
            if self._http is not None:
                await self._http.aclose()
                self._http = None

    async def __aenter__(self) -> BatchMerchant:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # --- ASGI ------------------------------------------------------------------------------

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        path = scope.get("path", "")
        if path == _CLAIM_PATH and scope.get("method") == "POST":
            answer = _json_answer(200, await self.claim_and_settle())
        elif path in self.prices:
            answer = await self._gate(scope, receive, path)
        else:
            answer = _json_answer(404, {"error": "not found"})
        await _send(send, answer.status, list(answer.headers), answer.body)

    async def _gate(self, scope: Any, receive: Any, path: str) -> Answer:
        request = Request(scope)
        url = str(request.url)
        header = request.headers.get("payment-signature")
        payment = decode_payment_signature(header) if header else None
        if payment is None:
            return self._payment_required(path, url, "Payment required")
        requirements = self.requirements(path)
        if not requirements_match(requirements, payment["accepted"]):
            return self._payment_required(path, url, "No matching payment requirements")
        try:
            return await self._paid(scope, receive, path, url, payment)
        except _Refused as refused:
            return self._refuse(path, url, refused)

    async def _paid(
        self, scope: Any, receive: Any, path: str, url: str, payment: Mapping[str, Any]
    ) -> Answer:
        payload = payment["payload"]
        kind = payload.get("type")
        if kind not in ("deposit", "voucher", "refund"):
            raise _Refused(code("payload_type"))
        try:
            config = ChannelConfig.from_wire(payload.get("channelConfig"))
            voucher = Voucher.from_wire(payload.get("voucher"))
        except ValueError:
            raise _Refused(code(f"{kind}_payload")) from None
        channel = channel_id(config, self.chain_id)
        if channel != voucher.channel_id:
            raise _Refused(code("channel_id_mismatch"), config.payer)
        lock = self._locks.setdefault(channel, anyio.Lock())
        try:
            lock.acquire_nowait()
        except anyio.WouldBlock:
            raise _Refused(code("channel_busy"), config.payer) from None
        try:
            return await self._serve(scope, receive, path, url, payment, config, voucher)
        finally:
            lock.release()

    async def _serve(
        self,
        scope: Any,
        receive: Any,
        path: str,
        url: str,
        payment: Mapping[str, Any],
        config: ChannelConfig,
        voucher: Voucher,
    ) -> Answer:
        """One request on a channel it holds the lock of."""
        refund = payment["payload"]["type"] == "refund"
        price = 0 if refund else self.price_atomic(path)
        record = self.channels.get(voucher.channel_id)
        if record is not None and voucher.max_claimable != record.charged + price:
            return self._corrective(path, url, record)
        snapshot = await self._verify(payment, self.requirements(path), config.payer)
        if record is None:
            # No record (a new channel, or one forgotten, as after a crash): as the scheme
            # says, the voucher's own base is taken (its ceiling less the price) unless the
            # escrow has claimed beyond it; charges the merchant lost track of are its loss.
            base = max(voucher.max_claimable - price, 0)
            claimed = snapshot.total_claimed
            record = ChannelRecord(config, max(base, claimed), base, b"", 0, 0, 0)
            record.mirror(snapshot)
            if base < claimed:
                return self._corrective(path, url, record)
        record.mirror(snapshot)
        if refund:
            return await self._refund(payment, record, voucher)
        status, headers, body = await _buffered(
            self.resource or _resource_app(self, path), scope, receive
        )
        if status >= 400:
            return Answer(status, tuple(headers), body)
        settled = await self._settle_deposit(payment, path, record)
        charge = self.charge_atomic(path)
        if record.charged + charge > voucher.max_claimable:
            raise _Refused(code("charge_exceeds_signed_cumulative"), config.payer)
        record.charged += charge
        record.signed_max, record.signature = voucher.max_claimable, voucher.signature
        self.channels[voucher.channel_id] = record
        state = self._channel_state(record)
        if self.overclaim:
            state["chargedCumulativeAmount"] = str(voucher.max_claimable + price)
        response = {**settled, "extra": {"chargedAmount": str(charge), "channelState": state}}
        return Answer(status, (*headers, *_response_headers(response)), body)

    async def _settle_deposit(
        self, payment: Mapping[str, Any], path: str, record: ChannelRecord
    ) -> dict[str, Any]:
        """A deposit settled by the facilitator (the record takes the new balance), or,
        for a voucher, the settlement without a transaction."""
        payer = record.config.payer
        if payment["payload"]["type"] != "deposit":
            return {
                "success": True,
                "transaction": "",
                "network": self.network,
                "payer": payer,
                "amount": "",
            }
        settled = await self._facilitate("/settle", payment, self.requirements(path))
        if not settled.get("success"):
            raise _Refused(str(settled.get("errorReason")), payer)
        record.mirror(_snapshot(settled["extra"]["channelState"]))
        return {
            key: settled[key] for key in ("success", "transaction", "network", "payer", "amount")
        }

    async def _refund(
        self, payment: Mapping[str, Any], record: ChannelRecord, voucher: Voucher
    ) -> Answer:
        """Claim what is charged and not claimed, and refund the rest, in one transaction."""
        payload = dict(payment["payload"])
        remainder = record.balance - max(record.charged, record.total_claimed)
        if remainder <= 0:
            raise _Refused(code("refund_no_balance"), record.config.payer)
        # A full refund names its amount for the facilitator: all that is not charged.
        payload.setdefault("amount", str(remainder))
        payload["refundNonce"] = str(record.refund_nonce)
        if record.charged > record.total_claimed:
            claim = Claim(record.config, voucher.max_claimable, voucher.signature, record.charged)
            payload["claims"] = [claim.to_wire()]
        enriched = {**payment, "payload": payload}
        settled = await self._facilitate("/settle", enriched, payment["accepted"])
        if not settled.get("success"):
            raise _Refused(str(settled.get("errorReason")), record.config.payer)
        record.mirror(_snapshot(settled["extra"]["channelState"]))
        record.signed_max, record.signature = voucher.max_claimable, voucher.signature
        self.channels[voucher.channel_id] = record
        response = {
            **{key: settled[key] for key in ("success", "transaction", "network", "payer")},
            "amount": settled["amount"],
            "extra": {"channelState": self._channel_state(record)},
        }
        body = {"message": "Refund acknowledged", "channelId": voucher.channel_id}
        answer = _json_answer(200, body)
        return Answer(200, (*answer.headers, *_response_headers(response)), answer.body)

    # --- claim and settle ------------------------------------------------------------------

    async def claim_and_settle(self) -> dict[str, Any]:
        """Claim every channel's charged total in one `claimWithSignature`, then settle the
        receiver's claimed total: `{channels, claimTransaction, settleTransaction, amount}`
        (`amount`: what the escrow paid the receiver, atomic)."""
        records = [
            (channel, record)
            for channel, record in self.channels.items()
            if record.charged > record.total_claimed and record.signature
        ]
        claim_tx = ""
        if records:
            claims = [
                Claim(r.config, r.signed_max, r.signature, r.charged).to_wire() for _, r in records
            ]
            claimed = await self._facilitate(
                "/settle", self._admin_payload({"type": "claim", "claims": claims}), None
            )
            if not claimed.get("success"):
                raise RuntimeError(f"the claim failed: {claimed.get('errorReason')}")
            claim_tx = str(claimed["transaction"])
            for _, record in records:
                record.total_claimed = max(record.total_claimed, record.charged)
        payload = {"type": "settle", "receiver": self.pay_to, "token": self.token}
        settled = await self._facilitate("/settle", self._admin_payload(payload), None)
        if not settled.get("success"):
            raise RuntimeError(f"the settlement failed: {settled.get('errorReason')}")
        return {
            "channels": [channel for channel, _ in records],
            "claimTransaction": claim_tx,
            "settleTransaction": settled["transaction"],
            "amount": settled["amount"],
        }

    def _admin_payload(self, payload: dict[str, Any]) -> dict[str, Any]:
        return {"x402Version": 2, "accepted": self._admin_requirements(), "payload": payload}

    def _admin_requirements(self) -> dict[str, Any]:
        return {
            "scheme": SCHEME,
            "network": self.network,
            "asset": self.token,
            "amount": "0",
            "payTo": self.pay_to,
            "maxTimeoutSeconds": 0,
            "extra": {},
        }

    # --- the facilitator -------------------------------------------------------------------

    async def _verify(
        self, payment: Mapping[str, Any], requirements: Mapping[str, Any], payer: str
    ) -> ChannelSnapshot:
        verdict = await self._facilitate("/verify", payment, requirements)
        if not verdict.get("isValid"):
            raise _Refused(str(verdict.get("invalidReason")), payer)
        return _snapshot(verdict["extra"])

    async def _facilitate(
        self,
        route: str,
        payment: Mapping[str, Any],
        requirements: Mapping[str, Any] | None,
    ) -> dict[str, Any]:
        assert self._http is not None, "the batch-settlement merchant is not running"
        body = {
            "x402Version": 2,
            "paymentPayload": payment,
            "paymentRequirements": requirements or self._admin_requirements(),
        }
        response = await self._http.post(self.facilitator_url + route, json=body)
        response.raise_for_status()
        answer: dict[str, Any] = response.json()
        return answer

    # --- answers ---------------------------------------------------------------------------

    def _channel_state(self, record: ChannelRecord) -> dict[str, Any]:
        state = ChannelSnapshot(
            channel_id(record.config, self.chain_id),
            record.balance,
            record.total_claimed,
            record.withdraw_requested_at,
            record.refund_nonce,
        ).to_wire()
        state["chargedCumulativeAmount"] = str(record.charged)
        return state

    def _payment_required(
        self,
        path: str,
        url: str,
        error: str,
        *,
        extra: Mapping[str, Any] | None = None,
        headers: tuple[tuple[bytes, bytes], ...] = (),
    ) -> Answer:
        price = self.prices[path]
        entry = self.requirements(path)
        entry["extra"].update(extra or {})
        required = {
            "x402Version": 2,
            "error": error,
            "resource": {"url": url, "description": price.description, "mimeType": price.mime_type},
            "accepts": [entry],
        }
        answer = (
            (b"content-type", b"application/json"),
            (b"cache-control", b"no-store"),
            (b"payment-required", encode_header(required).encode()),
            *headers,
        )
        return Answer(402, answer, b"{}")

    def _corrective(self, path: str, url: str, record: ChannelRecord) -> Answer:
        """The corrective 402: the merchant's view of the channel, and the last voucher it
        holds, for the payer to check against its own."""
        state = self._channel_state(record)
        extra: dict[str, Any] = {"channelState": state}
        if record.signature:
            extra["voucherState"] = {
                "signedMaxClaimable": str(record.signed_max),
                "signature": "0x" + record.signature.hex(),
            }
        if self.overclaim:
            state["chargedCumulativeAmount"] = str(record.signed_max + self.price_atomic(path))
        return self._payment_required(path, url, _MISMATCH, extra=extra)

    def _refuse(self, path: str, url: str, refused: _Refused) -> Answer:
        response = {
            "success": False,
            "errorReason": refused.reason,
            "transaction": "",
            "network": self.network,
            "payer": refused.payer,
        }
        return self._payment_required(
            path, url, refused.reason, headers=tuple(_response_headers(response))
        )


def _snapshot(data: Mapping[str, Any]) -> ChannelSnapshot:
    return ChannelSnapshot(
        str(data["channelId"]),
        int(data["balance"]),
        int(data["totalClaimed"]),
        int(data["withdrawRequestedAt"]),
        int(data["refundNonce"]),
    )


def _response_headers(response: Mapping[str, Any]) -> list[tuple[bytes, bytes]]:
    return [
        (b"payment-response", encode_header(response, compact=False).encode()),
        (b"access-control-expose-headers", b"PAYMENT-RESPONSE"),
    ]


def _resource_app(merchant: BatchMerchant, path: str) -> Any:
    """The paid resource itself: a small JSON answer naming the route."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        answer = _json_answer(
            200, {"resource": path, "paid": True, "description": merchant.prices[path].description}
        )
        await _send(send, answer.status, list(answer.headers), answer.body)

    return app


class BatchSettlement:
    """The sandbox's `batch-settlement` rail: its facilitator and merchant on one chain
    (a `SandboxPart`). Given no `rpc_url`, `start(sandbox)` takes the standard merchant's
    chain and token (`sandbox.standard`, started before it). The escrow and collectors are
    installed at their canonical addresses first."""

    def __init__(
        self,
        *,
        rpc_url: str | None = None,
        chain_id: int | None = None,
        token: str | None = None,
        relayer_key: str = _RELAYER_KEY,
        authorizer_key: str | None = None,
        pay_to: str | None = None,
        **merchant_options: Any,
    ) -> None:
        from eth_account import Account

        self.rpc_url, self.chain_id, self.token = rpc_url, chain_id, token
        self._relayer_key = relayer_key
        self._authorizer_key = authorizer_key or "0x" + bytes(Account.create().key).hex()
        self.pay_to: str = pay_to or str(Account.create().address)
        self._options = merchant_options
        self.facilitator: BatchFacilitator | None = None
        self.merchant: BatchMerchant | None = None

    def __repr__(self) -> str:
        return f"BatchSettlement(chain_id={self.chain_id!r}, token={self.token!r})"

    @property
    def url(self) -> str:
        if self.merchant is None:
            raise RuntimeError("the batch-settlement merchant is not running")
        return self.merchant.url

    @property
    def facilitator_url(self) -> str:
        if self.facilitator is None:
            raise RuntimeError("the batch-settlement facilitator is not running")
        return self.facilitator.url

    async def start(self, sandbox: Sandbox | None = None) -> None:
        from ._batch_escrow import install_batch_settlement

        standard = getattr(sandbox, "standard", None)
        if self.rpc_url is None and standard is not None:
            self.rpc_url, self.chain_id = standard.rpc_url, standard.chain_id
            self.token = standard.token
        if self.rpc_url is None or self.chain_id is None or self.token is None:
            raise RuntimeError("the batch-settlement rail needs a chain and a token")
        try:
            await install_batch_settlement(self.rpc_url, self._relayer_key)
            self.facilitator = BatchFacilitator(
                rpc_url=self.rpc_url,
                chain_id=self.chain_id,
                relayer_key=self._relayer_key,
                authorizer_key=self._authorizer_key,
            )
            await self.facilitator.start()
            self.merchant = BatchMerchant(
                facilitator_url=self.facilitator.url,
                token=self.token,
                pay_to=self.pay_to,
                chain_id=self.chain_id,
                **self._options,
            )
            await self.merchant.start()
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        with anyio.CancelScope(shield=True):
            if self.merchant is not None:
                await self.merchant.stop()
                self.merchant = None
            if self.facilitator is not None:
                await self.facilitator.stop()
                self.facilitator = None

    async def __aenter__(self) -> BatchSettlement:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()
