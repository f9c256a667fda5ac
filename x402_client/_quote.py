"""Asking what a resource costs without paying, and what the budgets have left.

```python
quote = await quote_payment(client, "https://merchant.example/paid")
for entry in quote.entries:
    print(entry.index, entry.amount, entry.currency, entry.payable, entry.reason)

report = await budget_status(client)
for status in report:
    print(status.budget.key, status.spent, status.remaining)
for currency in report.currencies:      # every currency the client can pay
    print(currency.currency, currency.max_amount_per_payment, currency.budgeted, currency.note)
```

A quote is the pure selection policy (`_policy.select`) applied to the merchant's 402,
with the client's own options, caps and budget headroom: for each entry, whether this
client would pay it and, if not, why. Nothing is paid and nothing but the resource is
requested (no RPC read, no facilitator call), so an entry marked payable may still turn
out unpayable when the client prepares it (a balance too low, an RPC down).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import httpx

from ._budget import BudgetReport
from ._exceptions import ConfigurationError
from ._options import PaymentOptions
from ._payer import Payer
from ._policy import select
from ._rails import RequestSettings
from ._redact import safe_url
from ._request import EXTENSION
from ._state import state_of
from ._types import PaymentIntent

__all__ = ["Quote", "QuoteEntry", "budget_status", "quote_payment", "quote_response"]


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

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict; the URL's credentials redacted (`safe_url`)."""
        return {
            "url": safe_url(self.url),
            "status": self.status_code,
            "free": self.free,
            "error": self.error,
            "entries": [e.to_json() for e in self.entries],
        }


def _payer_of(source: httpx.AsyncClient | PaymentOptions) -> tuple[Payer, bool]:
    """The payer to describe entries with, and whether we made it (and must close it)."""
    if isinstance(source, PaymentOptions):
        return Payer(source), True
    transport = getattr(source, "_transport", None)
    payer = getattr(transport, "payer", None)
    if not isinstance(payer, Payer):
        raise ConfigurationError("this client has no payment handling: call with_eur_payment first")
    return payer, False


def quote_response(
    response: httpx.Response,
    options: PaymentOptions | httpx.AsyncClient,
    *,
    headroom: Mapping[str, Decimal] | None = None,
    now: float | None = None,
) -> Quote:
    """The quote for a 402 `response` you already have (read it first: `response.read()`).

    `headroom` defaults to no budget limit: use `quote_payment` to count the budgets.
    Every dialect is read: the euro gates' 402 body, the standard x402 v1 body and the v2
    `PAYMENT-REQUIRED` header.
    """
    from ._dialects import read_challenge
    from ._exceptions import InvalidChallenge

    url = str(response.request.url) if response._request is not None else ""
    if response.status_code != 402:
        return Quote(url, response.status_code, [])
    payer, _ = _payer_of(options)
    try:
        challenge = read_challenge(
            response.content, response.headers, limit=payer.options.max_body_bytes
        )
    except InvalidChallenge as exc:
        return Quote(url, 402, [], error=str(exc))
    selection = select(
        challenge.accepts,
        rails=payer.describers,
        options=payer.options,
        settings=RequestSettings(),
        headroom=headroom or {},
        now=time.time() if now is None else now,
        resource=url,
        parse=challenge.parse_entry,
    )
    entries: dict[int, QuoteEntry] = {}
    for position, candidate in enumerate(selection.candidates):
        entries[candidate.index] = QuoteEntry(
            candidate.index,
            challenge.accepts[candidate.index],
            candidate.intent,
            payable=True,
            first=position == 0,
        )
    for skipped in selection.skipped:
        raw = challenge.accepts[skipped.index]
        entries[skipped.index] = QuoteEntry(
            skipped.index,
            raw if isinstance(raw, Mapping) else {"value": raw},
            skipped.intent,
            payable=False,
            reason=skipped.reason.value,
            message=skipped.message,
        )
    # A payer made here for `options` opened nothing: `describe` does no I/O.
    return Quote(url, 402, [entries[i] for i in sorted(entries)])


async def quote_payment(
    client: httpx.AsyncClient,
    url: str,
    method: str = "GET",
    **request_kwargs: Any,
) -> Quote:
    """Ask `url` what it costs with `client` (a paying client), paying nothing."""
    payer, _ = _payer_of(client)
    extensions = dict(request_kwargs.pop("extensions", None) or {})
    extensions[EXTENSION] = {"pay": False}
    response = await client.request(method, url, extensions=extensions, **request_kwargs)
    await response.aread()
    budgets = payer.state.budgets
    headroom = await budgets.headroom() if budgets.budgets else {}
    return quote_response(response, client, headroom=headroom)


async def budget_status(source: httpx.AsyncClient | PaymentOptions) -> BudgetReport:
    """Each budget of the options behind `source` with what it spent and what remains (a
    list of `BudgetStatus`) and, in `.currencies`, every currency the options can pay with
    its per-payment cap and whether a budget covers it: once a budget is set, a currency
    that none covers is not paid."""
    options = source if isinstance(source, PaymentOptions) else _payer_of(source)[0].options
    return await state_of(options).budgets.status()
