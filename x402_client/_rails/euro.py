"""The `euro` rail: pay a single-use payment request through the payment API."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from .._protocol import exact_json as _json
from .._protocol.challenge import CURRENCY_OF, EURO_ASSET, PROVIDER_NETWORK
from .._protocol.errors import PaymentOutcomeUnknown
from .._protocol.exact_json import b64url
from .._protocol.models import X402_VERSION, AcceptEntry, EuroAcceptEntry
from .._protocol.rail_interface import (
    Note,
    NotForThisRail,
    RailContext,
    RequestSettings,
    no_note,
    unpayable,
)
from .._protocol.types import Paid, PaymentIntent
from . import managed_account_settings

if TYPE_CHECKING:
    from .._state.payment_api import PaymentAPI

__all__ = ["EuroRail", "euro_proof"]

logger = logging.getLogger("x402_client")


def euro_proof(scheme: str, network: str, payment_request_code: str) -> str:
    """The `X-PAYMENT` value of a euro payment: the bytes `encode_proof` would write for
    `PaymentProof(scheme, network, payload=EuroPayload(...))`, without building models."""
    string = _json.string
    raw = (
        f'{{"x402Version":{X402_VERSION},"scheme":{string(scheme)},"network":{string(network)},'
        f'"payload":{{"paymentRequestCode":{string(payment_request_code)}}}}}'
    )
    return b64url(raw.encode())


class EuroRail:
    name = "euro"
    #: The schemes of the entries it describes (the selection asks no other rail).
    schemes = frozenset({"euro"})
    money_moves_before_proof = True
    frames_own_proof = True
    resumes_transactions = False
    #: Nothing to check before paying: the payment API says what it refuses.
    prepare = None

    def __init__(self, context: RailContext) -> None:
        self._context = context
        #: What the options leave unset of the managed account (options never change).
        self._missing = managed_account_settings(context.options)
        self._api: PaymentAPI | None = None

    def describe(self, entry: AcceptEntry, resource: str) -> PaymentIntent | str:
        if not isinstance(entry, EuroAcceptEntry):
            return NotForThisRail("not a euro entry")
        blockers = []
        if entry.network != PROVIDER_NETWORK or entry.asset != EURO_ASSET:
            blockers.append(f"only {EURO_ASSET} on {PROVIDER_NETWORK} is paid")
        settings = self._missing
        if settings:
            blockers.append("it pays from the account of api_key, from_account and api_url")
        if blockers or settings:
            what = f"euro payment for {entry.asset[:24]} on {entry.network[:40]}"
            return unpayable(what, blockers, settings)
        return PaymentIntent(
            rail="euro",
            scheme=entry.scheme,
            network=entry.network,
            asset=entry.asset,
            asset_symbol=EURO_ASSET,
            amount=entry.amount,
            currency=CURRENCY_OF[EURO_ASSET],
            pay_to=entry.pay_to,
            resource=resource,
            accept=entry.to_wire(),
        )

    @asynccontextmanager
    async def pay(
        self,
        entry: AcceptEntry,
        intent: PaymentIntent,
        settings: RequestSettings,
        note: Note = no_note,
    ) -> AsyncIterator[Paid]:
        assert isinstance(entry, EuroAcceptEntry)
        options = self._context.options
        assert options.from_account is not None
        proof = euro_proof(entry.scheme, entry.network, entry.payment_request_code)
        try:
            if self._api is None:
                self._api = self._context.payment_api()
            transaction_code = await self._api.pay_payment_request(
                from_account=options.from_account,
                payment_request_code=entry.payment_request_code,
                amount=entry.amount,
                intent=intent,
            )
        except PaymentOutcomeUnknown as exc:
            # Sending this proof is the safe way to find out: served if the payment went
            # through, "not confirmed" if it did not.
            exc.proof = proof
            raise
        paid = Paid(
            proof=proof,
            payment_request_code=entry.payment_request_code,
            transaction_code=transaction_code,
        )
        if transaction_code:
            # Journaled now: a process that dies before the proof step keeps the code.
            await note(transaction_code=transaction_code)
        yield paid


def build(context: RailContext) -> EuroRail | None:
    """The euro rail: always (the payment API is checked when it pays)."""
    return EuroRail(context)
