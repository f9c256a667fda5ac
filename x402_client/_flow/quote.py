"""Asking what a resource costs without paying.

A quote is the pure selection policy (`_protocol.policy.select`) applied to the
merchant's 402, with the client's own options, caps and budget headroom: for each entry,
whether this client would pay it and, if not, why. Nothing is paid and nothing but the
resource is requested (no RPC read, no facilitator call), so an entry marked payable may
still turn out unpayable when the client prepares it (a balance too low, an RPC down).
`payments(client).quote(url)` is how users ask (`_adapters.paying_client`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import httpx

from .._protocol.amounts import money_of
from .._protocol.budgets import BudgetStatus
from .._protocol.policy import Selection, select
from .._protocol.rail_interface import RequestSettings
from .._protocol.redact import safe_url
from .._protocol.types import PaymentIntent
from .payment import EXTENSION, Payer

if TYPE_CHECKING:
    from .._protocol.dialects import Challenge

__all__ = ["Quote", "QuoteEntry", "Send", "headroom_of", "quote", "quote_challenge", "quote_of"]

#: Sends one request through the paying client the user gave (its auth, default headers
#: and cookies apply) and answers with the response read whole: `(method, url, kwargs)`,
#: the kwargs httpx's `request` takes.
Send = Callable[[str, str, dict[str, Any]], Awaitable[httpx.Response]]


@dataclasses.dataclass(frozen=True)
class QuoteEntry:
    """One `accepts` entry: the intent (when readable), and whether it would be paid.

    `reason` is a `SkipReason` value (`"over_cap"`, `"expired"`, ...) and `message` the
    sentence behind it, when the entry is not payable. `first` marks the entry the client
    would try first.
    """

    index: int
    accept: Mapping[str, Any]
    intent: PaymentIntent | None
    payable: bool
    reason: str | None = None
    message: str | None = None
    first: bool = False

    @property
    def amount(self) -> Decimal | None:
        return self.intent.amount if self.intent is not None else None

    @property
    def currency(self) -> str | None:
        return self.intent.currency if self.intent is not None else None

    @property
    def money(self) -> str | None:
        """The price as the library writes money (`0.10 EUR (EURQ)`), when readable."""
        intent = self.intent
        return (
            None
            if intent is None
            else money_of(intent.amount, intent.currency, intent.asset_symbol)
        )

    def __repr__(self) -> str:
        verdict = ("payable, first" if self.first else "payable") if self.payable else "not payable"
        what = f"{self.money} on {self.intent.rail} {self.intent.network}" if self.intent else None
        why = f"{self.reason}: {self.message}" if self.reason and self.message else self.reason
        details = ", ".join(d for d in (what, why) if d)
        return f"QuoteEntry(#{self.index} {verdict}" + (f": {details})" if details else ")")

    def row(self) -> dict[str, object]:
        """One row of a quote's table."""
        intent = self.intent
        return {
            "#": self.index,
            "payable": ("yes, first" if self.first else "yes") if self.payable else "no",
            "price": self.money or "",
            "rail": intent.rail if intent else "",
            "network": intent.network if intent else str(self.accept.get("network", "")),
            "pay to": intent.pay_to if intent else str(self.accept.get("payTo", "")),
            "why not": self.message or self.reason or "",
        }

    def to_json(self) -> dict[str, Any]:
        intent = self.intent
        return {
            "index": self.index,
            "payable": self.payable,
            "first": self.first,
            "reason": self.reason,
            "message": self.message,
            "scheme": intent.scheme if intent else self.accept.get("scheme"),
            "network": intent.network if intent else self.accept.get("network"),
            "rail": intent.rail if intent else None,
            "asset": intent.asset_symbol if intent else self.accept.get("asset"),
            "amount": str(intent.amount) if intent else None,
            "currency": intent.currency if intent else None,
            "payTo": intent.pay_to if intent else self.accept.get("payTo"),
        }


@dataclasses.dataclass(frozen=True)
class Quote:
    """What a resource costs: `status_code` 402 with `entries`, or another status (free)."""

    url: str
    status_code: int
    entries: list[QuoteEntry]
    error: str | None = None

    @property
    def free(self) -> bool:
        return self.status_code != 402

    @property
    def payable(self) -> list[QuoteEntry]:
        return [e for e in self.entries if e.payable]

    def __repr__(self) -> str:
        head = f"Quote({safe_url(self.url)}: {self.status_code}"
        if self.free:
            return f"{head}, free)"
        if self.error is not None:
            return f"{head}, unreadable: {self.error})"
        first = next((e for e in self.entries if e.first), None)
        shown = f"{len(self.entries)} entries, {len(self.payable)} payable"
        if first is not None and first.intent is not None:
            shown += f"; first #{first.index}: {first.money} on {first.intent.rail}"
        return f"{head}, {shown})"

    def _repr_html_(self) -> str:
        from .._protocol.display import fields_table, rows_table

        title = f"{safe_url(self.url)}: {self.status_code}"
        if self.free or self.error is not None or not self.entries:
            return fields_table(title, [("free", self.free), ("error", self.error)])
        return rows_table(title, [entry.row() for entry in self.entries])

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict; the URL's credentials redacted (`safe_url`)."""
        return {
            "url": safe_url(self.url),
            "status": self.status_code,
            "free": self.free,
            "error": self.error,
            "entries": [e.to_json() for e in self.entries],
        }


def quote_of(
    response: httpx.Response,
    payer: Payer,
    *,
    headroom: Mapping[str, Decimal | BudgetStatus] | None = None,
    now: float | None = None,
) -> Quote:
    """The quote for a 402 `response` already read, with `payer`'s options and rails.

    `headroom` defaults to no budget limit. Every dialect is read: the euro gates' 402
    body, the standard x402 v1 body and the v2 `PAYMENT-REQUIRED` header.
    """
    from .._protocol.dialects import read_challenge
    from .._protocol.errors import InvalidChallenge

    url = str(response.request.url) if response._request is not None else ""
    if response.status_code != 402:
        return Quote(url, response.status_code, [])
    try:
        challenge = read_challenge(
            response.content, response.headers, limit=payer.options.max_body_bytes
        )
    except InvalidChallenge as exc:
        return Quote(url, 402, [], error=str(exc))
    return quote_challenge(url, challenge, payer, headroom=headroom, now=now)


def quote_challenge(
    url: str,
    challenge: Challenge,
    payer: Payer,
    *,
    headroom: Mapping[str, Decimal | BudgetStatus] | None = None,
    now: float | None = None,
) -> Quote:
    """The quote for `challenge`, the 402 of `url` already read (or a catalogue's claim
    of it): the same choice a payment would make now."""
    selection = select(
        challenge.accepts,
        rails=payer.describers,
        options=payer.options,
        settings=RequestSettings(),
        headroom=headroom or {},
        now=time.time() if now is None else now,
        resource=url,
        parse=challenge.parse_entry,
        rail_problem=challenge.rail_problem,
    )
    entries = _entries(challenge.accepts, selection)
    # A payer made here for `options` opened nothing: `describe` does no I/O.
    return Quote(url, 402, [entries[i] for i in sorted(entries)])


def _entries(accepts: Sequence[Any], selection: Selection) -> dict[int, QuoteEntry]:
    """One quote entry per `accepts` entry, by index: the payable ones as the first rail
    that would pay them, the others with their reason."""
    entries: dict[int, QuoteEntry] = {}
    for position, candidate in enumerate(selection.candidates):
        if candidate.index in entries:
            continue  # the entry's next rail (a chain-A entry: the bridge after the wallet)
        entries[candidate.index] = QuoteEntry(
            candidate.index,
            accepts[candidate.index],
            candidate.intent,
            payable=True,
            first=position == 0,
        )
    for skipped in selection.skipped:
        if skipped.index in entries:
            continue  # payable by another rail, or already explained
        raw = accepts[skipped.index]
        entries[skipped.index] = QuoteEntry(
            skipped.index,
            raw if isinstance(raw, Mapping) else {"value": raw},
            skipped.intent,
            payable=False,
            reason=skipped.reason.value,
            message=skipped.message,
        )
    return entries


async def quote(
    payer: Payer, send: Send, method: str, url: str, request_kwargs: dict[str, Any]
) -> Quote:
    """Ask `url` what it costs, through `send`, paying nothing."""
    extensions = dict(request_kwargs.pop("extensions", None) or {})
    extensions[EXTENSION] = {"pay": False}
    response = await send(method, url, {**request_kwargs, "extensions": extensions})
    return quote_of(response, payer, headroom=await headroom_of(payer))


async def headroom_of(payer: Payer) -> Mapping[str, BudgetStatus]:
    """What the payer's budgets have left, by currency (none set: no limit): the budget
    with the least left, whose `spent` a refusal states."""
    budgets = payer.state.budgets
    return await budgets.tightest() if budgets.budgets else {}
