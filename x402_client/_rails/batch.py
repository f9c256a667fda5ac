"""The session rail: pay the x402 foundation's EVM `batch-settlement` scheme (a payment
channel: one deposit into an escrow, then a cumulative voucher per request).

The first request on a channel deposits into the escrow (the payer signs an ERC-3009
`ReceiveWithAuthorization` for the deposit collector, or a Permit2 transfer; the merchant's
facilitator submits it and pays the gas) and signs a voucher; every later request signs
only a voucher: `Voucher(channelId, maxClaimableAmount)` where the amount is cumulative, the
total the merchant may claim from the channel so far. The merchant claims and settles many
vouchers in one transaction; what the vouchers did not spend comes back to the payer
(a cooperative refund, or the payer's own timed withdrawal: `_flow.refunds`).

The rules this rail keeps (`docs/sessions.md` says them in users' words):

- **The unit of money is the increment.** A request's intent is the entry's `amount`: the
  most this request adds to the cumulative total. Caps and budgets hold it like any
  payment; it is booked when the voucher is signed (the merchant may claim it from then on).
- **Channel state lives where payments do** (`_state.channels`): the highest cumulative
  amount signed and the last one the merchant acknowledged (and the client verified),
  written before a voucher leaves, under a hold on the channel that every request of every
  process (and, on PostgreSQL, every machine) sharing the store takes. Two requests never
  build on the same state; a crashed process's successor starts from the record.
- **The next voucher is the acknowledged total plus the amount**, as the scheme asks. A
  voucher never exceeds the channel's balance: when it would, this request tops up first.
- **The merchant's word is checked, never taken.** A settlement response is held against
  the voucher just signed (`check_acknowledgement`): a merchant that claims to have charged
  more than was signed, more than the request's amount, or another channel is refused and
  no further voucher is signed on that channel. A corrective 402 (the merchant's view of the
  channel differs) is adopted only where its last voucher carries the payer's own signature
  and stays within what the payer signed (`corrective_baseline`). Balances come from the
  chain (the escrow's `channels(channelId)`), never from the merchant.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import httpx

from .._protocol import batch_settlement as bs
from .._protocol.amounts import format_amount
from .._protocol.assets import Asset
from .._protocol.errors import (
    PaymentFailed,
    PaymentRefused,
    PaymentVerificationFailed,
)
from .._protocol.models import AcceptEntry, BatchAcceptEntry
from .._protocol.policy import approve, effective_cap
from .._protocol.rail_interface import Note, NotForThisRail, RailContext, RequestSettings, no_note
from .._protocol.types import Paid, PaymentIntent, PaymentReceipt
from ._evm_family import token_intent
from ._evm_signing import DigestSigner
from .permit2 import PERMIT2_EVM_EXTRA_MISSING, ChainReadingRail, RpcUnavailable

if TYPE_CHECKING:
    from .._state.channels import ChannelBook, ChannelRecord

__all__ = ["SessionRail", "build"]

logger = logging.getLogger("x402_client")

#: The channel salt: every payer uses the zero salt (as the foundation's clients do), so the
#: channel id of a payer, merchant and token can be computed again after its record is lost.
CHANNEL_SALT = "0x" + "00" * 32

#: The description an `on_before_payment` hook sees on a deposit's intent.
DEPOSIT_DESCRIPTION = (
    "deposit into a payment channel's escrow: the vouchers of later requests spend from it, "
    "and what they do not spend is refundable"
)


#: The channel states in which no voucher is signed, and why.
_NO_VOUCHERS = {
    "disputed": "its merchant's answer did not match what was signed; refund it "
    "(x402-eur sessions refund)",
    "withdrawing": "the payer is withdrawing it (x402-eur sessions withdraw)",
}


@dataclasses.dataclass(frozen=True)
class _Voucher:
    """What this request signed on its channel, for the acknowledgement."""

    channel_id: str
    chain_id: int
    baseline: int
    cumulative: int
    amount: int
    deposit: int
    #: What it adds to the highest cumulative amount signed before it: what may move.
    adds: int


class SessionRail(ChainReadingRail[BatchAcceptEntry]):
    """Pays `batch-settlement` entries on any EVM chain from the payer's EVM key, keeping
    each channel's state in the options' store. Built once per payer."""

    name = "session"
    scheme = "batch-settlement"
    entry_type = BatchAcceptEntry
    paying = "session voucher"
    signed = "a session voucher"
    extra_missing = PERMIT2_EVM_EXTRA_MISSING
    unreadable = "the channel's balance cannot be read"

    def __init__(self, context: RailContext) -> None:
        super().__init__(context)
        #: The voucher each payment in flight signed, by its payload's id (`acknowledge`).
        self._signed: dict[int, _Voucher] = {}
        #: Channels whose last voucher was not acknowledged: the merchant may see them
        #: otherwise (a refund of its own), so the next request reads the chain first.
        self._unsure: set[str] = set()

    def claim(self, extra: Mapping[str, Any]) -> NotForThisRail | None:
        return None

    def entry_blockers(
        self, entry: BatchAcceptEntry, extra: Mapping[str, Any], asset: Asset | None
    ) -> tuple[list[str], str]:
        blockers = []
        try:
            bs.parse_terms(_wire_of(entry))
        except ValueError as exc:
            blockers.append(f"its channel terms cannot be read ({exc})")
        return blockers, asset.symbol if asset is not None else "a token"

    def intent(self, entry: BatchAcceptEntry, token: Asset, resource: str) -> PaymentIntent:
        return token_intent(entry, token, resource, rail="session")

    prepare = None

    # --- paying ----------------------------------------------------------------------------

    @asynccontextmanager
    async def pay(
        self,
        entry: AcceptEntry,
        intent: PaymentIntent,
        settings: RequestSettings,
        note: Note = no_note,
    ) -> AsyncIterator[Paid]:
        chosen, chain_id = self.chosen(entry)
        terms = bs.parse_terms(_wire_of(chosen))
        signer = self.signer
        config = bs.channel_config(terms, signer.address, CHANNEL_SALT)
        channel_id = config.channel_id(chain_id)
        book = self._book()
        async with book.hold(channel_id):
            try:
                payload, signed = await self._next_voucher(
                    book, terms, config, channel_id, chain_id, intent
                )
            except RpcUnavailable as exc:
                raise PaymentFailed(
                    f"the session's channel cannot be read on {intent.network} ({exc}); "
                    "nothing was paid",
                    intent=intent,
                ) from None
            self._signed[id(payload)] = signed
            adds = signed.adds if signed.adds < signed.amount else None
            try:
                yield Paid(proof="", payload=payload, payer=signer.address, adds=adds)
            finally:
                if self._signed.pop(id(payload), None) is not None:
                    self._unsure.add(channel_id)

    async def _next_voucher(
        self,
        book: ChannelBook,
        terms: bs.BatchTerms,
        config: bs.ChannelConfig,
        channel_id: str,
        chain_id: int,
        intent: PaymentIntent,
    ) -> tuple[dict[str, Any], _Voucher]:
        """This request's payload on a channel the caller holds: the voucher (and the
        deposit, when the voucher would pass the balance), journaled and signed."""
        record = await self._record(book, terms, config, channel_id, intent)
        if record.status in _NO_VOUCHERS:
            raise PaymentRefused(
                f"session {channel_id[:18]}… with {terms.pay_to} takes no new vouchers: "
                f"{_NO_VOUCHERS[record.status]}; nothing was paid",
                intent=intent,
            )
        baseline = await self._baseline(terms, record, channel_id, chain_id, self.signer)
        cumulative = baseline + terms.amount
        balance = record.deposited - record.refunded
        if cumulative > balance or channel_id in self._unsure:
            self._unsure.discard(channel_id)
            balance = await self._reconcile(book, record, chain_id, channel_id)
        deposit = 0
        if cumulative > balance:
            deposit = await self._deposit_amount(terms, intent, cumulative - balance)
            if record.status == "closed":
                # a refunded channel is funded again: the same channel, open once more
                await book.set_status(channel_id, "open")
        payload = await self._signed_payload(
            book, record, terms, config, intent, chain_id, cumulative, deposit
        )
        logger.debug(
            "x402: signed voucher %s on channel %s (deposit %s)",
            cumulative,
            channel_id[:18],
            deposit,
        )
        adds = max(cumulative - record.signed, 0)
        signed = _Voucher(channel_id, chain_id, baseline, cumulative, terms.amount, deposit, adds)
        return payload, signed

    async def _signed_payload(
        self,
        book: ChannelBook,
        record: ChannelRecord,
        terms: bs.BatchTerms,
        config: bs.ChannelConfig,
        intent: PaymentIntent,
        chain_id: int,
        cumulative: int,
        deposit: int,
    ) -> dict[str, Any]:
        """Sign the voucher (and the deposit, if any) and journal the highest cumulative
        amount signed before either leaves: the scheme's payload. A cumulative amount at or
        below one signed before adds nothing the merchant could claim, and the record keeps
        the highest."""
        signer, channel_id = self.signer, record.channel_id
        signature = _sign_voucher(signer, channel_id, cumulative, chain_id)
        if cumulative > record.signed:
            advanced = await book.advance(
                channel_id, expected=record.signed, signed=cumulative, signature=signature
            )
            if not advanced:
                raise PaymentFailed(
                    "another payer signed on this channel meanwhile; nothing was paid",
                    intent=intent,
                )
        voucher = bs.voucher_wire(channel_id, cumulative, signature)
        if not deposit:
            return bs.voucher_payload(config, voucher)
        authorization = bs.deposit_authorization(
            signer, terms, deposit, channel_id, int(time.time())
        )
        return bs.deposit_payload(config, voucher, deposit, authorization)

    async def _baseline(
        self,
        terms: bs.BatchTerms,
        record: ChannelRecord,
        channel_id: str,
        chain_id: int,
        signer: DigestSigner,
    ) -> int:
        """What the next voucher builds on: the acknowledged total, or what a corrective 402
        proves the merchant holds (checked against the payer's own signatures)."""
        if terms.channel_state is None:
            return record.acknowledged
        balance, claimed = await self.channel_on_chain(chain_id, channel_id)
        try:
            return bs.corrective_baseline(
                terms,
                channel_id=channel_id,
                chain_id=chain_id,
                payer_authorizer=signer.address,
                signed=record.signed,
                acknowledged=record.acknowledged,
                chain_total_claimed=claimed,
                chain_balance=balance,
            )
        except bs.ChannelClaimRefused as exc:
            raise PaymentRefused(
                f"the merchant's view of session {channel_id[:18]}… does not hold against what "
                f"this payer signed ({exc}); nothing was paid. The deposit's unspent rest can be "
                "taken back without the merchant: x402-eur sessions withdraw "
                f"{channel_id[:12]} (payments(client).withdraw_session)"
            ) from None

    async def _record(
        self,
        book: ChannelBook,
        terms: bs.BatchTerms,
        config: bs.ChannelConfig,
        channel_id: str,
        intent: PaymentIntent,
    ) -> ChannelRecord:
        """The channel's record; a channel this store has not seen starts from the chain
        (after a lost record, the merchant has claimed at least `totalClaimed`)."""
        found = await book.channel(channel_id)
        if found is not None:
            return found
        from .._state.channels import ChannelRecord

        balance, claimed = await self.channel_on_chain(terms.chain_id, channel_id)
        asset = self._asset(terms)
        fresh = ChannelRecord(
            channel_id=channel_id,
            network=terms.network,
            origin=_resource_of(intent.resource),
            config=config.to_wire(),
            currency=intent.currency,
            asset=terms.asset,
            decimals=asset.decimals if asset is not None else 0,
            deposited=balance,
            signed=claimed,
            signature=None,
            acknowledged=claimed,
            refunded=0,
            status="open",
        )
        return await book.open_channel(fresh)

    async def _reconcile(
        self, book: ChannelBook, record: ChannelRecord, chain_id: int, channel_id: str
    ) -> int:
        """The channel's balance as the chain says it: a deposit the record does not know of
        yet (made by a process that stopped before it could verify it) is added, a refund
        or withdrawal it does not know of (the merchant's own refund) is taken off."""
        balance, _claimed = await self.channel_on_chain(chain_id, channel_id)
        known = record.deposited - record.refunded
        if balance > known:
            await book.deposited(channel_id, balance - known)
        elif balance < known:
            await book.refunded(channel_id, known - balance, record.status)
        return balance

    async def _deposit_amount(
        self, terms: bs.BatchTerms, intent: PaymentIntent, needed: int
    ) -> int:
        """How much to deposit: enough for `session_requests` requests at this price, or the
        merchant's `minDeposit` if larger, and at least what this voucher needs; never more
        than `session_requests` payments at the currency's cap. The user's hook approves it."""
        evm = self._context.options.evm
        assert evm is not None
        requests = evm.session_requests
        target = max(needed, terms.amount * requests, terms.min_deposit or 0)
        cap = effective_cap(intent.currency, self._context.options.max_amount_per_payment, None)
        if cap is not None and intent.atomic_amount and intent.amount:
            ceiling = int(cap * requests * intent.atomic_amount / intent.amount)
            if needed > ceiling:
                raise PaymentRefused(
                    f"the channel needs a deposit of {_shown(intent, needed)}, more than "
                    f"{requests} payments at max_amount_per_payment ({_shown(intent, ceiling)}; "
                    "EvmOptions.session_requests); nothing was paid",
                    intent=intent,
                )
            target = min(target, ceiling)
        await self._approve_deposit(intent, target)
        return target

    async def _approve_deposit(self, intent: PaymentIntent, atomic: int) -> None:
        deposit = dataclasses.replace(
            intent,
            amount=intent.amount_of(atomic) or Decimal(0),
            atomic_amount=atomic,
            description=DEPOSIT_DESCRIPTION,
        )
        hook = self._context.options.on_before_payment
        await approve(hook, deposit, of=" for the channel's deposit")

    # --- after the merchant answered ---------------------------------------------------------

    async def acknowledge(
        self, intent: PaymentIntent, payload: Mapping[str, Any] | None, receipt: PaymentReceipt
    ) -> PaymentReceipt:
        """The merchant served: hold its settlement response against the voucher signed
        (`check_acknowledgement`), record the acknowledged total, and verify a deposit on
        chain. A claim of more than was signed closes the channel to new vouchers and raises
        `PaymentVerificationFailed` (the voucher was handed over: the money moved)."""
        signed = None if payload is None else self._signed.pop(id(payload), None)
        if signed is None:
            return receipt
        book = self._book()
        try:
            ack = bs.check_acknowledgement(
                receipt.settlement or {},
                channel_id=signed.channel_id,
                amount=signed.amount,
                previous_charged=signed.baseline,
                signed=signed.cumulative,
            )
        except bs.ChannelClaimRefused as exc:
            await book.set_status(signed.channel_id, "disputed")
            raise PaymentVerificationFailed(
                f"the merchant's settlement response does not match the voucher signed: {exc}; "
                "the voucher was handed over (the merchant can claim at most what it says), "
                "and no further voucher is signed on this channel: refund it "
                "(x402-eur sessions refund)",
                reason="settlement does not match the voucher",
                receipt=receipt,
                proof=receipt.proof,
                intent=intent,
                money_moved=True,
            ) from None
        await book.acknowledge(signed.channel_id, ack.charged_cumulative)
        if signed.deposit:
            await self._verify_deposit(book, signed)
        return dataclasses.replace(
            receipt,
            channel_id=signed.channel_id,
            cumulative_amount=intent.amount_of(signed.cumulative),
            claimed_amount=intent.amount_of(ack.charged),
        )

    async def _verify_deposit(self, book: ChannelBook, signed: _Voucher) -> None:
        """A deposit counts once the chain shows it; until then the next request reads the
        chain again before it tops up."""
        record = await book.channel(signed.channel_id)
        if record is None:
            return
        try:
            await self._reconcile(book, record, signed.chain_id, signed.channel_id)
        except RpcUnavailable as exc:
            logger.warning(
                "x402: the deposit on channel %s could not be verified on chain (%s)",
                signed.channel_id[:18],
                exc,
            )

    # --- the chain and the store ---------------------------------------------------------------

    async def channel_on_chain(self, chain_id: int, channel_id: str) -> tuple[int, int]:
        """The escrow's `channels(channelId)`: (balance, total claimed), atomic units."""
        data = await self._chain().call(chain_id, bs.ESCROW, bs.channels_call(channel_id))
        try:
            return bs.decode_channels(data)
        except ValueError:
            raise RpcUnavailable(
                f"the escrow on eip155:{chain_id} answered channels() with no channel"
            ) from None

    async def pending_withdrawal(self, chain_id: int, channel_id: str) -> tuple[int, int]:
        """The escrow's `pendingWithdrawals(channelId)`: (amount, initiated at)."""
        call = bs.pending_withdrawal_call(channel_id)
        data = await self._chain().call(chain_id, bs.ESCROW, call)
        try:
            return bs.decode_pending_withdrawal(data)
        except ValueError:
            raise RpcUnavailable(
                f"the escrow on eip155:{chain_id} answered pendingWithdrawals() with nothing"
            ) from None

    async def chain_time(self, chain_id: int) -> int:
        """The latest block's timestamp: the clock the escrow's withdrawal delay runs on."""
        block = await self._chain().request(chain_id, "eth_getBlockByNumber", ["latest", False])
        stamp = block.get("timestamp") if isinstance(block, dict) else None
        if not isinstance(stamp, str) or not stamp.startswith("0x"):
            raise RpcUnavailable(f"eip155:{chain_id} answered no latest block")
        return int(stamp, 16)

    def sign_voucher(self, channel_id: str, cumulative: int, chain_id: int) -> str:
        """A voucher of `cumulative` on `channel_id`, signed by the payer's key."""
        return _sign_voucher(self.signer, channel_id, cumulative, chain_id)

    async def corrective_charged(
        self, terms: bs.BatchTerms, record: ChannelRecord, chain_id: int
    ) -> int:
        """The charged total a corrective 402 proves (`corrective_baseline`)."""
        return await self._baseline(terms, record, record.channel_id, chain_id, self.signer)

    def _book(self) -> ChannelBook:
        from .._state.shared import state_of

        return state_of(self._context.options).channels

    def _asset(self, terms: bs.BatchTerms) -> Asset | None:
        from .._protocol.assets import find_asset

        return find_asset(terms.chain_id, terms.asset, self._context.options.assets)


def _wire_of(entry: BatchAcceptEntry) -> dict[str, Any]:
    """The entry as a v2 `PaymentRequirements` (its `amount` under that name)."""
    wire = entry.to_wire()
    wire["amount"] = wire.pop("maxAmountRequired")
    return wire


def _resource_of(resource: str) -> str:
    """The resource a channel was opened for, without its query or fragment (they may carry
    credentials): a cooperative refund is asked of it."""
    url = httpx.URL(resource)
    return str(url.copy_with(query=None, fragment=None, username=None, password=None))


def _sign_voucher(signer: DigestSigner, channel_id: str, cumulative: int, chain_id: int) -> str:
    return "0x" + signer.sign(bs.voucher_digest(channel_id, cumulative, chain_id)).hex()


def _shown(intent: PaymentIntent, atomic: int) -> str:
    amount = intent.amount_of(atomic)
    return f"{format_amount(amount)} {intent.currency}" if amount is not None else str(atomic)


def build(context: RailContext) -> SessionRail | None:
    """The session rail: needs an EVM key and the chain's RPC URL (it says so per entry)."""
    return SessionRail(context)
