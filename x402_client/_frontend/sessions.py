"""What the command line and the MCP server say of sessions (`batch-settlement` channels):
how a person names one (a start of its id), what it holds in the asset's units, and which
refund amounts it can be asked for.

Every check raises `ValueError` with a message for the person (or agent) who gave the
value; nothing here prints or moves money.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .._protocol.assets import Asset
    from .._state.channels import ChannelRecord

__all__ = [
    "MIN_SESSION_PREFIX",
    "SessionMistake",
    "find_session",
    "refund_amount",
    "session_json",
    "short_id",
    "symbol_of",
    "unspent",
]

#: The fewest hex digits (after `0x`) that name a session: `sessions refund 0x3f9c2a`.
MIN_SESSION_PREFIX = 6
_PREFIX = re.compile(r"(0x)?([0-9a-f]+)")


class SessionMistake(ValueError):
    """A session named wrongly (unknown, ambiguous, too short), or an amount it cannot
    refund: nothing was sent."""


def short_id(channel_id: str) -> str:
    """The start of a session's id a table shows (`0x3f9c2a1b4d…`), which names it."""
    return channel_id[:12] + "…"


def _atomic(record: ChannelRecord, atomic: int) -> Decimal:
    return Decimal(atomic).scaleb(-record.decimals)


def unspent(record: ChannelRecord) -> int:
    """What the session's deposit still holds beyond what the merchant acknowledged
    charging, in atomic units: the most a refund can return (the merchant may have
    charged a voucher whose answer never came, so it can be less)."""
    return max(record.deposited - record.refunded - record.acknowledged, 0)


def find_session(records: Sequence[ChannelRecord], given: str) -> ChannelRecord:
    """The session `given` names: its id, or a unique start of it (with or without `0x`,
    as a table shows it, `…` included)."""
    text = given.strip().rstrip("…").lower()
    found = _PREFIX.fullmatch(text)
    if found is None:
        raise SessionMistake(f"{given[:70]!r} is not a session id: 0x and hex digits")
    digits = found[2]
    if len(digits) < MIN_SESSION_PREFIX:
        raise SessionMistake(
            f"{given[:70]!r} is too short: give at least {MIN_SESSION_PREFIX} hex digits "
            "of the session's id"
        )
    matches = [r for r in records if r.channel_id.startswith("0x" + digits)]
    if not matches:
        raise SessionMistake(f"no session {given[:70]!r}")
    if len(matches) > 1:
        listed = ", ".join(short_id(r.channel_id) for r in matches[:5])
        raise SessionMistake(
            f"{given[:70]!r} names {len(matches)} sessions ({listed}): give more of the id"
        )
    return matches[0]


def refund_amount(record: ChannelRecord, amount: object | None) -> Decimal | None:
    """`amount` (a decimal string or number; None: all of it) as a refund of `record` may
    ask it: positive, with no more decimals than the asset has, and at most what the
    session holds unspent. A session that holds nothing unspent has nothing to refund."""
    from .._protocol.amounts import format_money

    left = unspent(record)
    if left == 0:
        raise SessionMistake(
            f"session {short_id(record.channel_id)} holds nothing unspent: nothing to refund"
        )
    if amount is None:
        return None
    try:
        value = Decimal(str(amount).strip())
    except (InvalidOperation, ValueError):
        raise SessionMistake(f"{str(amount)[:40]!r} is not an amount: write e.g. 0.05") from None
    scaled = value.scaleb(record.decimals)
    if not value.is_finite() or value <= 0 or scaled != scaled.to_integral_value():
        raise SessionMistake(
            f"a refund of {str(amount)[:40]} is not a positive amount with at most "
            f"{record.decimals} decimals"
        )
    if scaled > left:
        held = format_money(_atomic(record, left), record.currency)
        raise SessionMistake(
            f"session {short_id(record.channel_id)} holds {held} unspent: a refund of "
            f"{str(amount)[:40]} cannot be asked"
        )
    return value


def symbol_of(record: ChannelRecord, declared: Iterable[Asset] = ()) -> str | None:
    """The symbol of the session's asset, when it is declared or known."""
    from .._protocol.assets import find_asset

    chain = record.network.removeprefix("eip155:")
    if not chain.isdigit():
        return None
    asset = find_asset(int(chain), record.asset, declared)
    return None if asset is None else asset.symbol


def session_json(record: ChannelRecord, symbol: str | None = None) -> dict[str, Any]:
    """One session as both front ends give it: amounts as decimal strings in the asset's
    units (`spent` is what the merchant acknowledged charging, `signed` the vouchers'
    total, `unspent` the most a refund can return), never its vouchers' signatures."""
    from .._protocol.amounts import format_amount

    def units(atomic: int) -> str:
        return format_amount(_atomic(record, atomic))

    return {
        "id": record.channel_id,
        "resource": record.origin,
        "network": record.network,
        "asset": record.asset,
        "symbol": symbol,
        "currency": record.currency,
        "deposited": units(record.deposited),
        "spent": units(record.acknowledged),
        "signed": units(record.signed),
        "refunded": units(record.refunded),
        "unspent": units(unspent(record)),
        "status": record.status,
        "openedAt": record.opened_at,
        "updatedAt": record.updated_at,
    }
