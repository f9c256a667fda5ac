"""Sessions (`batch-settlement` channels) after their requests: list them, have the merchant
refund what the vouchers did not spend, or take it back without the merchant (the escrow's
timed withdrawal).

Every amount booked here is read from the chain: the escrow's `channels(channelId)` before
and after. A refund the merchant says it made and the chain does not show is not booked;
the record keeps the channel open and says so.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import httpx

from .._protocol import batch_settlement as bs
from .._protocol.errors import ConfigurationError, PaymentVerificationFailed, X402Error
from .._protocol.redact import safe_url

if TYPE_CHECKING:
    from .._rails.batch import SessionRail
    from .._state.channels import ChannelBook, ChannelRecord
    from .payment import Payer

__all__ = ["SessionRefund", "SessionWithdrawal", "refund", "sessions", "withdraw"]

logger = logging.getLogger("x402_client")

_TIMEOUT = httpx.Timeout(30.0)
_MAX_BYTES = 256 * 1024


@dataclasses.dataclass(frozen=True)
class SessionRefund:
    """What a cooperative refund gave back, as the chain shows it: `refunded` (in the
    channel's currency) left the escrow for the payer; `charged` is what the merchant kept
    (its claims on the channel); `tx_hash` the refund transaction the merchant named."""

    channel_id: str
    refunded: Decimal
    charged: Decimal
    currency: str
    tx_hash: str | None
    closed: bool


@dataclasses.dataclass(frozen=True)
class SessionWithdrawal:
    """Where the payer's own withdrawal of a channel stands: `step` is `initiated` (the
    escrow holds it until `finalize_after`, a Unix time by the chain's clock; call again
    then), `finalized` (`withdrawn` left the escrow for the payer) or `waiting` (initiated
    earlier; not due before `finalize_after`)."""

    channel_id: str
    step: str
    withdrawn: Decimal
    currency: str
    finalize_after: int | None
    tx_hash: str | None


async def sessions(payer: Payer, *, status: str | None = None) -> list[ChannelRecord]:
    """The channels the options' store keeps, oldest first."""
    return await _book(payer).channels(status=status)


async def _channel(payer: Payer, channel_id: str) -> ChannelRecord:
    """The channel whose id is (or starts with) `channel_id`."""
    wanted = channel_id.lower()
    found = [r for r in await _book(payer).channels() if r.channel_id.startswith(wanted)]
    if len(found) != 1:
        what = "no session" if not found else f"{len(found)} sessions"
        raise ConfigurationError(f"{what} with id {channel_id[:70]!r} in the options' store")
    return found[0]


def _amount(record: ChannelRecord, atomic: int) -> Decimal:
    return Decimal(atomic).scaleb(-record.decimals)


def _rail(payer: Payer) -> SessionRail:
    from .._rails.batch import SessionRail

    for rail in payer.rails:
        if isinstance(rail, SessionRail):
            return rail
    raise ConfigurationError("sessions need an EVM key (PaymentOptions.evm)")


def _book(payer: Payer) -> ChannelBook:
    return payer.state.channels


# --- the cooperative refund ---------------------------------------------------------------------


async def refund(
    payer: Payer,
    network: httpx.AsyncBaseTransport | None,
    channel_id: str,
    amount: Decimal | None = None,
) -> SessionRefund:
    """Ask the channel's merchant to refund what the vouchers did not spend (all of it, or
    `amount`): the refund request is a voucher of the acknowledged total (it charges
    nothing) sent to the resource the channel paid. What the chain shows left the escrow
    is booked; `PaymentVerificationFailed` when the merchant refused or the chain shows
    nothing refunded (no money moved). A channel the merchant already refunded on its own
    is not asked again: what the chain shows came back is booked, with no transaction."""
    record = await _channel(payer, channel_id)
    rail = _rail(payer)
    config = bs.ChannelConfig.from_wire(record.config)
    chain_id = int(record.network.removeprefix("eip155:"))
    atomic = None if amount is None else _atomic(record, amount)
    book = _book(payer)
    async with book.hold(record.channel_id):
        before, claimed = await rail.channel_on_chain(chain_id, record.channel_id)
        learnt = await _learn_refunds(book, record, before, claimed)
        if learnt > 0 and before == claimed:
            return SessionRefund(
                record.channel_id,
                _amount(record, learnt),
                _amount(record, claimed),
                record.currency,
                None,
                True,
            )
        answer = await _ask_refund(payer, network, rail, record, config, chain_id, atomic)
        after, claimed = await rail.channel_on_chain(chain_id, record.channel_id)
        refunded = before - after
        if refunded <= 0:
            raise PaymentVerificationFailed(
                f"the merchant acknowledged the refund of session {record.channel_id[:18]}…, "
                "but the escrow shows nothing refunded; no money moved",
                reason="refund not on chain",
                money_moved=False,
            )
        closed = after - claimed == 0
        await book.refunded(record.channel_id, refunded, "closed" if closed else record.status)
        await book.acknowledge(record.channel_id, min(claimed, record.signed))
    return SessionRefund(
        record.channel_id,
        _amount(record, refunded),
        _amount(record, claimed),
        record.currency,
        _tx_hash(answer),
        closed,
    )


async def _learn_refunds(
    book: ChannelBook, record: ChannelRecord, balance: int, claimed: int
) -> int:
    """Book what the chain shows came back that the record does not know of (the
    merchant's refund of its own): only a refund or a withdrawal, both to the payer, lowers
    the escrow's balance. What was learnt, atomic."""
    learnt = record.deposited - record.refunded - balance
    if learnt <= 0:
        return 0
    status = "closed" if balance == claimed else record.status
    await book.refunded(record.channel_id, learnt, status)
    return learnt


async def _ask_refund(
    payer: Payer,
    network: httpx.AsyncBaseTransport | None,
    rail: SessionRail,
    record: ChannelRecord,
    config: bs.ChannelConfig,
    chain_id: int,
    atomic: int | None,
) -> Mapping[str, Any]:
    """Probe the channel's resource for its 402, then send the refund request with the
    channel's entry; a corrective 402 is checked (`corrective_baseline`) and answered once.
    The merchant's settlement response, decoded."""
    from .._protocol.dialects import encode_payment
    from .._protocol.settlement import failure_reason, settlement_of
    from .discovery import transport_for

    async with httpx.AsyncClient(
        transport=transport_for(payer, network), follow_redirects=False, timeout=_TIMEOUT
    ) as client:
        challenge, raw = await _probe(client, record, config, chain_id)
        charged = record.acknowledged
        for _attempt in range(2):
            signature = rail.sign_voucher(record.channel_id, charged, chain_id)
            voucher = bs.voucher_wire(record.channel_id, charged, signature)
            payload = bs.refund_payload(config, voucher, atomic)
            header, value = encode_payment(challenge, raw, payload)
            response = await client.get(record.origin, headers={header: value})
            body = response.content[:_MAX_BYTES]
            if 200 <= response.status_code < 300:
                return settlement_of(response.headers) or {}
            reason = failure_reason(body, response.headers) or f"HTTP {response.status_code}"
            corrective = _corrective_terms(response, body, record, config, chain_id)
            if corrective is None:
                break
            charged = await rail.corrective_charged(corrective, record, chain_id)
        raise PaymentVerificationFailed(
            f"the merchant refused the refund of session {record.channel_id[:18]}…: {reason}; "
            "no money moved (the timed withdrawal needs no merchant: withdraw_session)",
            reason=reason,
            money_moved=False,
        )


async def _probe(
    client: httpx.AsyncClient, record: ChannelRecord, config: bs.ChannelConfig, chain_id: int
) -> tuple[Any, Mapping[str, Any]]:
    """The resource's 402 and its `batch-settlement` entry for this channel."""
    from .._protocol.dialects import challenge_of

    response = await client.get(record.origin)
    shown = safe_url(record.origin)
    if response.status_code != 402:
        raise X402Error(
            f"{shown} answered {response.status_code}, not a 402 offering the session's "
            "channel; no money moved"
        )
    challenge = challenge_of(response.content[:_MAX_BYTES], response.headers, limit=_MAX_BYTES)
    for raw in [] if challenge is None else challenge.accepts:
        if _same_channel(raw, record, config, chain_id):
            return challenge, raw
    raise X402Error(
        f"{shown} no longer offers the session's channel; no money moved (the timed "
        "withdrawal needs no merchant: withdraw_session)"
    )


def _same_channel(raw: Any, record: ChannelRecord, config: bs.ChannelConfig, chain_id: int) -> bool:
    if not isinstance(raw, Mapping) or raw.get("scheme") != bs.SCHEME:
        return False
    try:
        terms = bs.parse_terms(raw)
    except ValueError:
        return False
    same = bs.channel_config(terms, config.payer, config.salt, config.payer_authorizer)
    return same.channel_id(chain_id) == record.channel_id


def _corrective_terms(
    response: httpx.Response,
    body: bytes,
    record: ChannelRecord,
    config: bs.ChannelConfig,
    chain_id: int,
) -> bs.BatchTerms | None:
    from .._protocol.dialects import challenge_of

    if response.status_code != 402:
        return None
    try:
        challenge = challenge_of(body, response.headers, limit=_MAX_BYTES)
    except X402Error:
        return None
    for raw in [] if challenge is None else challenge.accepts:
        if _same_channel(raw, record, config, chain_id):
            terms = bs.parse_terms(raw)
            return terms if terms.channel_state is not None else None
    return None


def _tx_hash(settlement: Mapping[str, Any]) -> str | None:
    found = settlement.get("transaction")
    return found if isinstance(found, str) and found else None


def _atomic(record: ChannelRecord, amount: Decimal) -> int:
    scaled = Decimal(amount).scaleb(record.decimals)
    if not scaled.is_finite() or scaled <= 0 or scaled != scaled.to_integral_value():
        raise ConfigurationError(
            f"a refund of {amount} is not a positive amount with at most {record.decimals} decimals"
        )
    return int(scaled)


# --- the timed withdrawal ---------------------------------------------------------------------


async def withdraw(payer: Payer, channel_id: str) -> SessionWithdrawal:
    """Take back what the vouchers did not spend without the merchant: the first call
    initiates the escrow's withdrawal (a transaction from the payer's key, which pays the
    gas), a call once its delay has passed finalizes it. What left the escrow is read from
    the chain and booked. No further voucher is signed on a channel being withdrawn."""
    record = await _channel(payer, channel_id)
    rail = _rail(payer)
    config = bs.ChannelConfig.from_wire(record.config)
    chain_id = int(record.network.removeprefix("eip155:"))
    book = _book(payer)
    async with book.hold(record.channel_id):
        pending, initiated_at = await rail.pending_withdrawal(chain_id, record.channel_id)
        if pending == 0:
            return await _initiate(payer, rail, book, record, config, chain_id)
        due = initiated_at + config.withdraw_delay
        now = await rail.chain_time(chain_id)
        if now < due:
            return SessionWithdrawal(
                record.channel_id, "waiting", Decimal(0), record.currency, due, None
            )
        return await _finalize(payer, rail, book, record, config, chain_id)


async def _initiate(
    payer: Payer,
    rail: SessionRail,
    book: ChannelBook,
    record: ChannelRecord,
    config: bs.ChannelConfig,
    chain_id: int,
) -> SessionWithdrawal:
    from .._rails.approval import send_transaction

    balance, claimed = await rail.channel_on_chain(chain_id, record.channel_id)
    learnt = await _learn_refunds(book, record, balance, claimed)
    available = balance - claimed
    if available <= 0:
        from .._protocol.amounts import format_amount

        shown = format_amount(_amount(record, learnt))
        returned = f" (the merchant returned {shown} {record.currency} on its own)"
        raise X402Error(
            f"session {record.channel_id[:18]}… has nothing left to withdraw"
            f"{returned if learnt else ''}; no money moved"
        )
    await book.set_status(record.channel_id, "withdrawing")
    data = bs.initiate_withdraw_call(config, available)
    try:
        tx = await send_transaction(
            payer.options, chain_id, "the withdrawal", _raw_call(bs.ESCROW, data)
        )
    except X402Error:
        # Open again only when the chain shows no withdrawal pending: a transaction that
        # may have gone through keeps the channel closed to vouchers.
        with contextlib.suppress(Exception):
            if (await rail.pending_withdrawal(chain_id, record.channel_id))[0] == 0:
                await book.set_status(record.channel_id, record.status)
        raise
    _, initiated_at = await rail.pending_withdrawal(chain_id, record.channel_id)
    due = initiated_at + config.withdraw_delay
    return SessionWithdrawal(
        record.channel_id, "initiated", _amount(record, available), record.currency, due, tx
    )


async def _finalize(
    payer: Payer,
    rail: SessionRail,
    book: ChannelBook,
    record: ChannelRecord,
    config: bs.ChannelConfig,
    chain_id: int,
) -> SessionWithdrawal:
    from .._rails.approval import send_transaction

    before, _ = await rail.channel_on_chain(chain_id, record.channel_id)
    data = bs.finalize_withdraw_call(config)
    tx = await send_transaction(
        payer.options, chain_id, "the withdrawal", _raw_call(bs.ESCROW, data)
    )
    after, claimed = await rail.channel_on_chain(chain_id, record.channel_id)
    withdrawn = max(before - after, 0)
    closed = after - claimed == 0
    await book.refunded(record.channel_id, withdrawn, "closed" if closed else "open")
    return SessionWithdrawal(
        record.channel_id, "finalized", _amount(record, withdrawn), record.currency, None, tx
    )


class _RawCall:
    """A contract call given as calldata, in the shape `send_transaction` builds from."""

    def __init__(self, w3: Any, to: str, data: bytes) -> None:
        self._w3, self._to, self._data = w3, to, data

    async def build_transaction(self, fields: dict[str, Any]) -> dict[str, Any]:
        w3 = self._w3
        tx: dict[str, Any] = {
            **fields,
            "to": w3.to_checksum_address(self._to),
            "data": "0x" + self._data.hex(),
        }
        tx["gas"] = await w3.eth.estimate_gas(tx)
        block = await w3.eth.get_block("latest")
        base = int(block.get("baseFeePerGas", 0))
        tip = await w3.eth.max_priority_fee
        tx["maxPriorityFeePerGas"] = tip
        tx["maxFeePerGas"] = 2 * base + tip
        return tx


def _raw_call(to: str, data: bytes) -> Any:
    return lambda w3: _RawCall(w3, to, data)
