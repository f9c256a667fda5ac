"""Finishing payments a dead process left unfinished, from the journal, never paying twice.

With `PaymentOptions(state_path=...)` every payment is journaled before money moves and
updated the moment each code exists (`_state.sqlite_store.SqliteStore`). After a crash:

```python
pay = payments(with_eur_payment(httpx.AsyncClient(), options))   # the same state_path
for record in await pay.unfinished():
    print(record.id, record.rail, record.amount, record.transaction_code)
for recovery in await pay.recover_all():
    print(recovery.status, recovery.reason, recovery.response)
```

What recovery does, by what the journal holds (docs/failure-semantics.md, the crash table):

- bridge, a transaction code but no proof: resume the bridge wait, prove it, deliver
  (`resume_transaction_code`);
- any rail, a proof not yet delivered and still valid: re-send it (always safe);
- euro, the payment request only (a crash around the payment call): re-send the proof the
  request implies; served if it was paid; "not confirmed" once the request expired means
  it never was: `failed`, budget released;
- permit / EIP-3009 / chain-A direct, no proof (nothing was signed, or nothing signed
  was handed over): `failed`, budget released;
- chain-A direct, a re-sent proof the merchant refuses: the chain decides (the indexer and
  the node, `_rails.chain_a.lookup`): the transaction is on chain: `unrecoverable`, the
  money moved; its validity window passed unconfirmed, by definite answers: `failed`,
  budget released; still valid, or no definite answer: `pending`;
- bridge, no transaction code (a crash before or during the payment call): the payment
  API's list of the account's transactions decides: no BlockchainAddress payment of the
  amount to the entry's `payTo` since the record was opened, in a list that says it is
  whole: `failed`, budget released; exactly one: its transaction code is adopted and the
  bridge wait resumed (never paying again); the API unreachable, an error, a list that
  is unreadable or may be cut short, or an ambiguous one: `pending`;
- a proof the merchant calls used or expired, or an expired authorization:
  `unrecoverable`, with the codes a person needs (unless the journal shows the payment
  was delivered meanwhile, by its proof re-sent by hand: `delivered`);
- the merchant answers 401/403 (it wants credentials), 408/425/429 or 5xx, or nothing,
  or the client's destination guard refuses to send to it: `pending`, left for a later
  run.

Recovery never makes a new payment: it only re-sends what was paid or resumes what was
started. A record it cannot finish stays journaled, marked with the reason.

It gives a payment up as `failed` and releases its reservation only on the journal's own
word (nothing was handed over) or on a definite answer (`_lookup`): a lookup that errs,
is throttled (429), times out, or answers something it cannot read decides nothing, and
the payment stays `pending` with that reason.

Recovery never touches a payment a live process is working on: the journal knows which
process owns each payment in flight (`SqliteStore.claim`: a lock the operating system
releases when that process dies). Such a payment is `in_progress`: nothing is re-sent,
no budget is released. Recovery takes a payment over only once its process is gone, and
lets go of it whatever comes of it.

It sends through the client it is given, with that client's auth, default headers and
cookies: the journal keeps no credentials (`headers=` adds some per call), not even those
of a request body (`_redact_body`): a payment whose body held some is left `pending`, never
re-sent with a redacted body, until `recover(..., content=)` gives the body. The same
recovery runs for sync clients (`httpx.Client`, `requests.Session`): there, its requests
go through the client's own `request`, in a worker thread. A merchant
that answers 401 or 403 has not said the payment cannot be finished: the record stays
unfinished (`pending`), and the reason says to pass the credentials.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal, cast

import anyio
import httpx

from .._options import PaymentOptions
from .._protocol.amounts import format_money, money_of
from .._protocol.challenge import VerifierReason, classify_reason
from .._protocol.errors import (
    ConfigurationError,
    DestinationRefused,
    PaymentAPIError,
    PaymentNotConfirmed,
    PaymentOutcomeUnknown,
    PaymentVerificationFailed,
    X402Error,
)
from .._protocol.exact_json import ProofError, b64_json_decode
from .._protocol.models import EuroPayload, PaymentProof
from .._protocol.policy import EXPIRY_SKEW
from .._protocol.proof import encode_proof
from .._protocol.redact import redact_urls, strip_redacted
from .._state.payment_api import PaymentAPI
from .._state.rpc_wait import Report, RpcWait, watched
from .._state.shared import PaymentState
from .._state.sqlite_store import JournalRecord
from .._state.stores import JournalStore
from .payment import EXTENSION, Payer
from .quote import Send

if TYPE_CHECKING:
    from .._options import ChainAOptions
    from .._protocol.provider import TransactionRecord
    from .._protocol.rail_interface import MeteredRail

__all__ = ["Recovery", "journal_of", "recover_all", "recover_one", "unfinished"]

logger = logging.getLogger("x402_client")

Status = Literal["delivered", "failed", "unrecoverable", "pending", "in_progress"]
#: Extra headers for a recovery: `{"Authorization": "Bearer ..."}` or `[(name, value)]`.
Headers = Mapping[str, str] | Sequence[tuple[str, str]]
#: The body of a recovery's request, given by the caller when the journal did not keep it.
Content = bytes | str

#: Settle-on-proof rails: the merchant moves the money with the signed proof, so without a
#: proof handed over nothing can have moved.
_SETTLE_ON_PROOF = ("evm-permit", "eip3009", "permit2", "upto", "session", "chain-a", "svm")
#: Answers that ask for the caller's credentials, which the journal does not keep.
_CREDENTIALS = (401, 403, 407)
#: Answers that say "later", not "never".
_LATER = (408, 425, 429)

#: How much earlier than the journal record the provider may stamp the bridge payment made
#: for it (the two clocks differ): a payment listed from then on may be the record's.
BRIDGE_CLOCK_SKEW = timedelta(seconds=EXPIRY_SKEW)

IN_PROGRESS = (
    "a process that is still running is working on this payment (paying it, waiting for "
    "it or delivering it): nothing was re-sent and no budget was released; look again once "
    "it has ended"
)


@dataclasses.dataclass(frozen=True)
class Recovery:
    """What recovery did with one journaled payment.

    `delivered`: the resource was served (`response`; None when it had been delivered
    before, or was meanwhile by a proof re-sent by hand); `failed`: no money moved, the
    budget was given back; `unrecoverable`: it cannot be finished here, `reason` says what
    a person needs (the codes are on `record`); `pending`: not yet decidable (the provider
    has not confirmed the payment, the merchant did not answer or wants credentials, the
    indexer, node or payment API gave no definite answer, the journal did not keep the
    request's body): try again later, or with what `reason` asks for; `in_progress`: a
    live process is working on it; nothing was done. `record` is the journaled payment,
    None for a payment recovered from an error alone (no journal).
    """

    record: JournalRecord | None
    status: Status
    reason: str
    response: httpx.Response | None = None
    error: X402Error | None = None

    def __repr__(self) -> str:
        # One truth: the status, with the record as recovery left it (the same state).
        record = self.record
        answered = "" if self.response is None else f", answered {self.response.status_code}"
        if record is None:
            return f"Recovery({self.status}{answered}: {redact_urls(self.reason)})"
        money = money_of(record.amount, record.currency, record.asset_symbol)
        return (
            f"Recovery({self.status}: {record.id[:12]}, {money} on {record.rail}"
            f"{answered}: {redact_urls(self.reason)})"
        )

    def _repr_html_(self) -> str:
        from .._protocol.display import fields_table

        facts: list[tuple[str, object]] = [
            ("recovery", self.status),
            ("reason", redact_urls(self.reason)),
        ]
        if self.response is not None:
            facts.append(("answer", f"HTTP {self.response.status_code}"))
        if self.record is None:
            return fields_table("payment", facts)
        facts += [(label, value) for label, value in self.record.facts() if label != "state"]
        return fields_table(f"payment {self.record.id}", facts)


def journal_of(payer: Payer) -> tuple[PaymentState, JournalStore]:
    """The payer's state and its journal (`ConfigurationError` without a state file)."""
    state = payer.state
    if state.journal is None:
        raise ConfigurationError(
            "recovery needs the payment journal: set PaymentOptions(state_path=...)"
        )
    return state, state.journal


async def unfinished(payer: Payer) -> list[JournalRecord]:
    """Journaled payments whose money moved or may have, and whose resource was not
    delivered (oldest first): what recovery works on. Those a live process is still
    working on are included, `in_progress`."""
    _, journal = journal_of(payer)
    return await journal.unfinished()


def _euro_proof(record: JournalRecord) -> str | None:
    if record.proof:
        return record.proof
    if record.payment_request_code is None:
        return None
    payload = EuroPayload(payment_request_code=record.payment_request_code).to_wire()
    return encode_proof(PaymentProof(scheme=record.scheme, network=record.network, payload=payload))


def _valid_until(record: JournalRecord) -> int | None:
    """When the proof stops being valid: the entry's expiry, a permit's deadline, an
    authorization's `validBefore`."""
    expires = record.accept.get("expiresAt")
    if record.rail == "euro":
        return expires if isinstance(expires, int) else None
    if not record.proof:
        return None
    try:
        data = b64_json_decode(record.proof)
    except ProofError:
        return None
    payload = data.get("payload") if isinstance(data, dict) else None
    if not isinstance(payload, dict):
        return None
    permit = payload.get("permit")
    if isinstance(permit, dict) and str(permit.get("deadline", "")).isdigit():
        return int(permit["deadline"])
    authorization = payload.get("authorization")
    if isinstance(authorization, dict) and str(authorization.get("validBefore", "")).isdigit():
        return int(authorization["validBefore"])
    return None


def _codes(record: JournalRecord) -> str:
    """The codes a person needs to claim a payment from the provider or the merchant."""
    codes = [
        f"{label} {value}"
        for label, value in (
            ("payment request", record.payment_request_code),
            ("transaction", record.transaction_code),
            ("chain tx", record.blockchain_tx_id),
        )
        if value
    ]
    what = f"{format_money(record.amount, record.currency)} ({record.rail}) to {record.pay_to}"
    return f"{what} for {record.resource}" + (f"; {', '.join(codes)}" if codes else "")


def _body_not_kept(record: JournalRecord) -> str | None:
    """Why the journaled request cannot be re-sent as it was, when the journal did not keep
    its body as sent (it held credentials, or it was over 1 MiB)."""
    tool = record.request_url.startswith("mcp://")
    body = "tool call's arguments" if tool else "request body"
    if record.request_body_omitted:
        why = f"the journal did not keep the {body} ({record.request_body_size} bytes)"
    elif not record.request_body_redacted:
        return None
    elif record.request_body is not None:
        why = f"the {body} held credentials, which the journal does not keep"
    else:
        why = f"the {body} may have held credentials, so the journal did not keep it"
    if tool:
        return (
            f"{why}: nothing was re-sent; call the tool again with the arguments it was "
            "made with and this payment's proof (x402={'proof': record.proof})"
        )
    return (
        f"{why}: nothing was re-sent; pass the body the request was made with to finish "
        f"the payment: content= (x402-eur resume {record.id} -d BODY)"
    )


async def _send(
    send: Send,
    record: JournalRecord,
    settings: dict[str, Any],
    headers: Headers | None,
    content: Content | None = None,
) -> httpx.Response:
    """The journaled request again, sent by `send` through the paying client (its auth,
    default headers and cookies apply): the journaled headers, less those `headers`
    replaces, plus `headers`; the journaled body, or `content` in its place."""
    extra = httpx.Headers(headers) if headers else httpx.Headers()
    replaced = {name.lower() for name in extra}
    if content is not None:
        replaced |= {"content-length", "transfer-encoding"}  # the given body's own
    sent = [
        (name, value)
        for name, value in record.request_headers
        if name.lower() not in replaced and value != "REDACTED"
    ]
    return await send(
        record.request_method,
        strip_redacted(record.request_url),
        {
            "headers": [*sent, *extra.multi_items()],
            "content": record.request_body if content is None else content,
            "extensions": {EXTENSION: settings},
        },
    )


def _settled(record: JournalRecord) -> Recovery | None:
    """The recovery of a payment that needs none: it failed, or it was delivered."""
    if record.outcome == "failed":
        return Recovery(record, "failed", "done")
    if record.outcome == "paid" and record.delivered:
        return Recovery(record, "delivered", "done")
    return None


def _answer_status(exc: X402Error) -> int | None:
    """The status of the merchant's answer an error carries (not a 402's)."""
    response = exc.response
    return None if response is None or response.status_code == 402 else response.status_code


def _not_now(status: int) -> str | None:
    """Why an answer `status` leaves the payment to a later recovery, if it does."""
    if status in _CREDENTIALS:
        return (
            f"the merchant answered {status}: it wants the credentials the request was made "
            "with, and the journal does not keep them; recover with a client that sends "
            "them (auth, default headers, cookies) or pass headers= (x402-eur resume -H)"
        )
    if status in _LATER or status >= 500:
        return f"the merchant answered {status}; try again later"
    return None


def _not_sent(record: JournalRecord, exc: DestinationRefused) -> Recovery:
    """A payment whose request the client's destination guard refused to send: the
    merchant never saw it, so it said nothing of the payment; it stays as it was."""
    return Recovery(
        record,
        "pending",
        f"the request was not sent: the client refuses its destination ({exc}); nothing "
        "was re-sent and nothing released: recover it with a client that may reach the "
        "merchant",
        error=exc,
    )


async def recover_one(
    payer: Payer,
    journal_id: str,
    headers: Headers | None,
    send: Send,
    content: Content | None = None,
) -> Recovery:
    """Finish one journaled payment (see the module docstring), its request re-sent by
    `send` through the paying client with `headers` (they replace journaled headers of
    the same name) and `content` as its body when given; never pays again. A payment a
    live process is working on is left alone: `in_progress`."""
    state, journal = journal_of(payer)
    record = await journal.get(journal_id)
    if record is None:
        raise ConfigurationError(f"no journaled payment {journal_id!r}")
    settled = _settled(record)
    if settled is not None:
        return settled
    if not await journal.claim(record.id):
        latest = await journal.get(record.id) or record
        return _settled(latest) or Recovery(latest, "in_progress", IN_PROGRESS)
    try:
        # What the process that owned it left, now that none does.
        record = await journal.get(record.id) or record
        options = payer.options
        result = _settled(record) or await _recover(
            _Recovering(
                state,
                journal,
                record,
                headers,
                send,
                options.chain_a,
                options,
                content,
                payer.report if options.on_progress is not None else None,
            )
        )
    finally:
        with anyio.CancelScope(shield=True):
            try:
                await journal.release_claim(record.id)
            except Exception as exc:
                logger.error(
                    "x402: the payment journal could not let go of payment %s (%s); it "
                    "counts as in progress until this process ends",
                    record.id,
                    type(exc).__name__,
                )
    # The record as recovery left it (delivered, failed, marked unrecoverable or as it
    # was), so that it tells what `status` tells; less its own claim: it let go of it.
    try:
        final = await journal.get(record.id) or result.record or record
    except Exception:  # the journal cannot be read back: the record as recovery found it
        final = result.record or record
    return dataclasses.replace(result, record=dataclasses.replace(final, in_progress=False))


async def _recover(recovering: _Recovering) -> Recovery:
    """Recover a payment this process owns now (no live process did): a bridge payment
    without a proof is resumed from its transaction code; every other payment's proof is
    re-sent."""
    record = recovering.record
    if record.rail == "bridge" and not record.proof:
        return await recovering.resume_bridge()
    return await recovering.resend_proof()


@dataclasses.dataclass
class _Recovering:
    """The recovery of one journaled payment this process owns, and the ways it ends."""

    state: PaymentState
    journal: JournalStore
    record: JournalRecord
    headers: Headers | None
    send: Send
    #: The chain-A wallet's settings (its node and indexer), to ask the chain about a
    #: direct chain-A proof the merchant refuses.
    chain_a: ChainAOptions | None = None
    #: The payer's options: the payment API to ask about a bridge payment with no code.
    options: PaymentOptions | None = None
    #: The request's body, given in place of one the journal did not keep.
    content: Content | None = None
    #: Told (`on_progress`) of a chain lookup that keeps the user waiting over a second.
    report: Report | None = None

    def _lookup_wait(self, what: str) -> RpcWait:
        return RpcWait(self.report, rail=self.record.rail, what=what, resource=self.record.resource)

    async def give_up(self, reason: str, *, on_chain: bool = False) -> Recovery:
        # Say what is known of the money: on a pay-first rail a proof or a transaction code
        # means it left the account; a transaction the chain confirmed means it moved;
        # anything else may have moved.
        record = self.record
        moved_first = record.rail in ("euro", "bridge")
        evidence = bool(record.proof or record.transaction_code or record.blockchain_tx_id)
        moved = on_chain or (moved_first and evidence)
        outcome: Literal["paid", "unknown"] = "paid" if moved else "unknown"
        if record.outcome in ("paid", "unknown"):
            outcome = "paid" if record.outcome == "paid" else outcome
        text = f"{reason}. {_codes(record)}"
        await self.journal.finish_payment(record.id, outcome, delivered=False, error=text)
        await self.journal.mark_unrecoverable(record.id, text)
        return Recovery(record, "unrecoverable", text)

    async def nothing_moved(self, reason: str) -> Recovery:
        # Only ever reached with proof that no money can have moved, and with no live
        # process owning the payment (it was claimed): its reservation comes back.
        record = self.record
        await self.journal.finish_payment(record.id, "failed", delivered=False, error=reason)
        for key, reservation in record.reservations:
            await self.state.budgets.store.release(key, reservation)
        return Recovery(record, "failed", reason)

    async def delivered_meanwhile(self) -> Recovery | None:
        # A proof re-sent by hand (in this process or another) may have been served while
        # recovery was at it: the journal says so, and "already used" means that delivery.
        latest = await self.journal.get(self.record.id)
        if latest is not None and latest.outcome == "paid" and latest.delivered:
            return Recovery(latest, "delivered", "it was delivered meanwhile (a re-sent proof)")
        return None

    async def answered(self, response: httpx.Response, what: str) -> Recovery:
        record = self.record
        status = response.status_code
        if status >= 400:
            later = _not_now(status)
            if later is not None:
                return Recovery(record, "pending", later)
            return await self.give_up(f"the merchant answered {status} to the proof")
        latest = await self.journal.get(record.id)
        if latest is None or not (latest.outcome == "paid" and latest.delivered):
            await self.journal.finish_payment(record.id, "paid", delivered=True)
        return Recovery(record, "delivered", what, response)

    def without_body(self) -> Recovery | None:
        """`pending` when the request would be re-sent without the body it was made with
        (the journal did not keep it as sent, and none was given): never re-sent so."""
        reason = None if self.content is not None else _body_not_kept(self.record)
        return None if reason is None else Recovery(self.record, "pending", reason)

    def refused_for_now(self, exc: X402Error) -> Recovery | None:
        """A pending recovery when the merchant's answer is no refusal: it wants
        credentials, says "later", or said nothing clear (no answer, a 5xx to every
        re-send) without calling the proof used or expired."""
        status = _answer_status(exc)
        later = None if status is None else _not_now(status)
        unclear = isinstance(exc, PaymentOutcomeUnknown) and status is None
        if later is None and unclear and classify_reason(str(exc)) is VerifierReason.OTHER:
            later = f"the merchant gave no clear answer ({exc}); try again later"
        return None if later is None else Recovery(self.record, "pending", later, error=exc)

    async def resume_bridge(self) -> Recovery:
        """A bridge payment that has no proof yet: resume it from its transaction code."""
        if self.record.transaction_code is None:
            found = await self.find_bridge_payment()
            if isinstance(found, Recovery):
                return found
            # The EURO left the account in that payment: its code is this record's now.
            await self.journal.update_payment(
                self.record.id, transaction_code=found, detail="transaction_code (listed)"
            )
            self.record = dataclasses.replace(self.record, transaction_code=found)
        record = self.record
        settings = {"resume_transaction_code": record.transaction_code, "journal_id": record.id}
        unsent = self.without_body()
        if unsent is not None:
            return unsent
        try:
            response = await _send(self.send, record, settings, self.headers, self.content)
        except DestinationRefused as exc:
            return _not_sent(record, exc)
        except X402Error as exc:
            later = self.refused_for_now(exc)
            if later is not None:
                return later
            return Recovery(record, "pending", f"resuming failed: {exc}", error=exc)
        except httpx.HTTPError as exc:
            return Recovery(record, "pending", f"the merchant did not answer: {exc}")
        return await self.answered(response, "the bridge payment was resumed")

    def undecided(self, reason: str) -> Recovery:
        """A bridge payment with no code that recovery cannot tell paid or not: pending."""
        record = self.record
        return Recovery(
            record,
            "pending",
            f"the process died before or during the bridge payment call and {reason}: the "
            "EURO may or may not have left the account; nothing was released and nothing "
            "paid; try again later, or ask the provider for a BlockchainAddress payment of "
            f"{_codes(record)} made from {record.created_at.isoformat(timespec='seconds')}",
        )

    async def find_bridge_payment(self) -> Recovery | str:
        """Whether the EURO of a bridge payment with no transaction code left the account:
        the payment API's list of the account's transactions decides. Its one payment to
        the entry's `payTo` since the record was opened (the code to resume), no payment
        in a list that says it is whole (`failed`, the reservation released), or, when the
        API errs, is throttled, times out, answers what cannot be read or a list that may
        be cut short, or lists more than one candidate, `pending` (`_lookup`'s rule)."""
        record, options = self.record, self.options
        if options is None or not (options.api_url and options.api_key and options.from_account):
            return self.undecided("recovery has no payment API (api_url, api_key, from_account)")
        api = PaymentAPI(
            options.api_url,
            options.api_key,
            timeout=options.payment_api_timeout,
            max_body_bytes=options.max_body_bytes,
            max_connections=options.payment_api_max_connections,
        )
        try:
            listing = await api.list_transactions()
        except PaymentAPIError as exc:
            return self.undecided(f"the payment API did not list the transactions ({exc})")
        except httpx.HTTPError as exc:
            return self.undecided(
                f"the payment API did not list the transactions: it did not answer "
                f"({type(exc).__name__})"
            )
        finally:
            await api.aclose()
        found = []
        for item in _bridge_payments(record, options.from_account, listing.items):
            other = await self.journal.with_transaction_code(item.transaction_code)
            if other is None or other.id == record.id:
                found.append(item)  # no other journaled payment made this one
        if not listing.complete:
            # Only a whole list can say "none": one that may be cut short is no answer.
            return self.undecided(
                "the payment API's list of transactions does not say it holds them all"
            )
        if not found:
            return await self.nothing_moved(
                "no bridge payment was made before the process died: the payment API lists "
                f"no BlockchainAddress payment to {record.pay_to} since the payment was "
                "journaled; no money moved"
            )
        if len(found) > 1 or not _pays(found[0], record):
            codes = ", ".join(item.transaction_code for item in found)
            which = "more than one payment" if len(found) > 1 else "a payment whose fields"
            which += "" if len(found) > 1 else " it does not all give,"
            return self.undecided(f"the payment API lists {which} that may be it ({codes})")
        return found[0].transaction_code

    async def resend_proof(self) -> Recovery:
        """Re-send the payment's proof (a euro payment's, rebuilt from its request code)."""
        record = self.record
        proof = _euro_proof(record) if record.rail == "euro" else record.proof
        if proof is None:
            if record.rail in _SETTLE_ON_PROOF:
                # Settle-on-proof rails: nothing was signed and handed over.
                return await self.nothing_moved("no proof was ever handed over: no money moved")
            return await self.give_up("the journal holds no proof and no code to finish it with")
        valid_until = _valid_until(record)
        expired = valid_until is not None and valid_until + EXPIRY_SKEW < time.time()
        if expired and record.rail != "euro":
            return await self.give_up(
                "the signed authorization expired before it was delivered; the merchant may "
                "still have settled it (check the chain)"
            )
        unsent = self.without_body()
        if unsent is not None:
            return unsent
        try:
            response = await _send(self.send, record, {"proof": proof}, self.headers, self.content)
        except DestinationRefused as exc:
            return _not_sent(record, exc)
        except PaymentNotConfirmed as exc:
            if record.rail == "euro" and expired:
                return await self.nothing_moved(
                    "the payment request expired unpaid (the verifier never confirmed it)"
                )
            return Recovery(record, "pending", f"not confirmed yet: {exc.reason}", error=exc)
        except (PaymentVerificationFailed, PaymentOutcomeUnknown) as exc:
            return await self.refused(exc)
        except X402Error as exc:
            return await self.give_up(f"re-sending the proof failed ({type(exc).__name__}: {exc})")
        except httpx.HTTPError as exc:
            return Recovery(record, "pending", f"the merchant did not answer: {exc}")
        return await self.answered(response, "the resource was delivered")

    async def refused(self, exc: PaymentVerificationFailed | PaymentOutcomeUnknown) -> Recovery:
        """The merchant did not serve the re-sent proof."""
        later = self.refused_for_now(exc)
        if later is not None:
            return later
        reason = getattr(exc, "reason", None) or str(exc)
        if self.record.rail == "chain-a" and self.chain_a is not None:
            return await self.delivered_meanwhile() or await self.on_chain(reason)
        if self.record.rail == "svm" and self.options is not None and self.options.svm:
            return await self.delivered_meanwhile() or await self.on_solana(reason)
        if (
            self.record.rail == "euro"
            and classify_reason(reason) is VerifierReason.EXPIRED
            and not self.record.delivered
        ):
            # The euro verifier says "expired" of a request that timed out: it was never
            # settled (the provider keeps no money for an expired request; the merchant's
            # rule is "request a fresh 402 and pay again").
            return await self.nothing_moved(f"the payment request expired unsettled ({reason})")
        return await self.delivered_meanwhile() or await self.give_up(
            f"the merchant refused the re-sent proof ({reason})"
        )

    async def on_chain(self, reason: str) -> Recovery:
        """A refused direct chain-A proof: what the chain says of its transaction."""
        from .._rails.chain_a import lookup

        assert self.chain_a is not None
        assert self.record.proof is not None
        chain_a, proof = self.chain_a, self.record.proof
        found = await watched(self._lookup_wait("chain A node"), lambda: lookup(chain_a, proof))
        refused = f"the merchant refused the re-sent proof ({reason})"
        if found.status == "confirmed":
            return await self.give_up(f"{refused}; {found.detail}: the money moved", on_chain=True)
        if found.status == "void":
            return await self.nothing_moved(f"{refused}; {found.detail}: no money moved")
        if found.status == "unknown":
            return Recovery(
                self.record,
                "pending",
                f"{refused}; {found.detail}; nothing was released: the payment stays pending "
                "until the chain answers definitely",
            )
        return Recovery(self.record, "pending", f"{refused}; {found.detail}")

    async def on_solana(self, reason: str) -> Recovery:
        """A refused Solana proof: what the chain says of its transaction (found by the
        payer's own signature in its token account's history; void only once its blockhash
        is dead and it is not there). Never signed again."""
        from .._rails.solana import lookup

        assert self.options is not None
        assert self.options.svm is not None
        assert self.record.proof is not None
        svm, proof = self.options.svm, self.record.proof
        found = await watched(self._lookup_wait("Solana RPC"), lambda: lookup(svm, proof))
        refused = f"the merchant refused the re-sent proof ({reason})"
        if found.status == "confirmed":
            return await self.give_up(f"{refused}; {found.detail}: the money moved", on_chain=True)
        if found.status == "void":
            return await self.nothing_moved(f"{refused}; {found.detail}: no money moved")
        return Recovery(
            self.record,
            "pending",
            f"{refused}; {found.detail}; nothing was released: the payment stays pending "
            "until the chain answers definitely",
        )


def _listed_at(created: str | None) -> datetime | None:
    """When the provider stamped a transaction (UTC unless it says otherwise)."""
    if created is None:
        return None
    try:
        stamped = datetime.fromisoformat(created.replace("Z", "+00:00"))
    except ValueError:
        return None
    return stamped if stamped.tzinfo is not None else stamped.replace(tzinfo=timezone.utc)


def _pays(item: TransactionRecord, record: JournalRecord) -> bool:
    """Whether a listed transaction says it is a bridge payment of `record`'s amount to its
    `payTo` (not merely that it may be one)."""
    return (
        item.type == "BlockchainAddress"
        and item.to_account_code == record.pay_to
        and item.amount is not None
        and Decimal(item.amount) == record.amount
    )


def _bridge_payments(
    record: JournalRecord, from_account: str, items: Sequence[TransactionRecord]
) -> list[TransactionRecord]:
    """The listed transactions that may be `record`'s bridge payment: none of their fields
    says otherwise (type, payer, payee, amount), and they were not made before the record
    was opened (less the clocks' skew)."""
    since = record.created_at - BRIDGE_CLOCK_SKEW
    found = []
    for item in items:
        stamped = _listed_at(item.created)
        if (
            item.type not in (None, "BlockchainAddress")
            or item.from_account_code not in (None, from_account)
            or item.to_account_code not in (None, record.pay_to)
            or (item.amount is not None and Decimal(item.amount) != record.amount)
            or (stamped is not None and stamped < since)
        ):
            continue
        found.append(item)
    return found


async def recover_all(payer: Payer, headers: Headers | None, send: Send) -> list[Recovery]:
    """Recover every unfinished journaled payment, oldest first (`recover_one`, with
    `headers` for each), then every `upto` settlement still held at its maximum. Those a
    live process is working on are reported `in_progress` and left alone."""
    _, journal = journal_of(payer)
    results = []
    for record in await journal.unfinished():
        results.append(await recover_one(payer, record.id, headers, send))
    for record in await journal.held_settlements():
        results.append(await reconcile_settlement(payer, record))
    return results


async def reconcile_settlement(payer: Payer, record: JournalRecord) -> Recovery:
    """An `upto` payment served while what it moved could not be read from the chain (the
    RPC endpoint failed, the merchant named no transaction that settled it): ask the chain
    again. What moved is booked and the rest of the maximum given back (`delivered`); an
    authorization whose deadline passed unused moved nothing (`delivered`, 0 booked);
    anything else keeps the maximum (`pending`, with the reason), unless the chain can
    never tell (the nonce was consumed where no named transaction says how much): then
    the maximum stays booked for good."""
    state, journal = journal_of(payer)
    rail = next((cast("MeteredRail", r) for r in payer.rails if r.name == "upto"), None)
    if rail is None:
        return Recovery(record, "pending", "no upto rail (EVM key and RPC URL) to read the chain")
    if not await journal.claim(record.id):
        return Recovery(record, "in_progress", IN_PROGRESS)
    try:
        latest = await journal.get(record.id) or record
        if any(step.step == "settled" for step in latest.steps):
            return Recovery(latest, "delivered", "settled meanwhile")
        return await _reconciled(state, rail, latest)
    finally:
        with anyio.CancelScope(shield=True):
            await journal.release_claim(record.id)


async def _reconciled(state: PaymentState, rail: MeteredRail, record: JournalRecord) -> Recovery:
    from .._protocol.settlement import settlement_step

    try:
        decoded = b64_json_decode(record.proof or "")
    except ProofError:
        decoded = None
    payload = decoded.get("payload") if isinstance(decoded, dict) else None
    check = await rail.check_settlement(
        record.intent, payload if isinstance(payload, dict) else None, record.tx_hash
    )
    if check.status == "unverified" and not check.final:
        return Recovery(record, "pending", f"still held at the maximum: {check.detail}")
    _, detail, settled = settlement_step(record.intent, check)
    await state.book_settlement(record, "settled", detail, settled)
    entry = state.ledger.find(record.proof) if record.proof else None
    if entry is not None and settled is not None:
        entry.settled_amount = settled  # this process's ledger too, when it made the payment
        entry.step("settled", detail)
    return Recovery(record, "delivered", f"settled: {detail}")
