"""Finishing payments a dead process left unfinished, from the journal, never paying twice.

With `PaymentOptions(state_path=...)` every payment is journaled before money moves and
updated the moment each code exists (`_sqlite.SqliteStore`). After a crash:

```python
client = with_eur_payment(httpx.AsyncClient(), options)      # the same state_path
for record in await unfinished_payments(options):
    print(record.id, record.rail, record.amount, record.transaction_code)
for recovery in await recover_payments(client):
    print(recovery.status, recovery.reason, recovery.response)
```

What recovery does, by what the journal holds (docs/failure-semantics.md, the crash table):

- bridge, a transaction code but no proof: resume the bridge wait, prove it, deliver
  (`resume_transaction_code`);
- any rail, a proof not yet delivered and still valid: re-send it (always safe);
- euro, the payment request only (a crash around the payment call): re-send the proof the
  request implies; served if it was paid; "not confirmed" once the request expired means
  it never was: `failed`, budget released;
- permit / EIP-3009, no proof (nothing was signed or handed over): `failed`, budget
  released;
- bridge, no transaction code (a crash during the payment call): `unrecoverable`: the
  call may have gone through; the reason says what to ask the provider;
- a proof the merchant calls used or expired, or an expired authorization:
  `unrecoverable`, with the codes a person needs.

Recovery never makes a new payment: it only re-sends what was paid or resumes what was
started. A record it cannot finish stays journaled, marked with the reason.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Literal

import httpx

from ._challenge import VerifierReason, classify_reason
from ._exceptions import (
    ConfigurationError,
    PaymentNotConfirmed,
    PaymentOutcomeUnknown,
    PaymentVerificationFailed,
    X402Error,
)
from ._models import EuroPayload, PaymentProof
from ._options import PaymentOptions
from ._payer import EXTENSION, Payer
from ._policy import EXPIRY_SKEW
from ._proof import ProofError, b64_json_decode, encode_proof
from ._sqlite import JournalRecord, SqliteStore
from ._state import PaymentState, state_of

__all__ = ["Recovery", "recover_payment", "recover_payments", "unfinished_payments"]

Status = Literal["delivered", "failed", "unrecoverable", "pending"]


@dataclasses.dataclass(frozen=True)
class Recovery:
    """What recovery did with one journaled payment.

    `delivered`: the resource was served (`response`); `failed`: no money moved, the
    budget was given back; `unrecoverable`: it cannot be finished here, `reason` says what
    a person needs (the codes are on `record`); `pending`: not yet decidable (e.g. the
    provider has not confirmed the payment): try again later.
    """

    record: JournalRecord
    status: Status
    reason: str
    response: httpx.Response | None = None
    error: X402Error | None = None


def _state(source: httpx.AsyncClient | PaymentOptions) -> tuple[PaymentState, SqliteStore]:
    if isinstance(source, PaymentOptions):
        options = source
    else:
        payer = getattr(getattr(source, "_transport", None), "payer", None)
        if not isinstance(payer, Payer):
            raise ConfigurationError("this client has no payment handling: call with_eur_payment")
        options = payer.options
    state = state_of(options)
    if state.journal is None:
        raise ConfigurationError(
            "recovery needs the payment journal: set PaymentOptions(state_path=...)"
        )
    return state, state.journal


async def unfinished_payments(source: httpx.AsyncClient | PaymentOptions) -> list[JournalRecord]:
    """Journaled payments whose money moved or may have, and whose resource was not
    delivered (oldest first): what `recover_payments` works on."""
    _, journal = _state(source)
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


def _claim(record: JournalRecord) -> str:
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
    what = f"{record.amount} {record.currency} ({record.rail}) to {record.pay_to}"
    return f"{what} for {record.resource}" + (f"; {', '.join(codes)}" if codes else "")


async def _send(
    client: httpx.AsyncClient, record: JournalRecord, settings: dict[str, Any]
) -> httpx.Response:
    if record.request_body_omitted:
        raise ConfigurationError(
            f"the journal did not keep the {record.request_body_size}-byte request body"
        )
    response = await client.request(
        record.request_method,
        record.request_url,
        headers=list(record.request_headers),
        content=record.request_body,
        extensions={EXTENSION: settings},
    )
    await response.aread()
    return response


async def recover_payment(client: httpx.AsyncClient, journal_id: str) -> Recovery:
    """Finish one journaled payment (see the module docstring); never pays again."""
    state, journal = _state(client)
    record = await journal.get(journal_id)
    if record is None:
        raise ConfigurationError(f"no journaled payment {journal_id!r}")
    if record.outcome == "failed" or (record.delivered and record.outcome == "paid"):
        return Recovery(record, "failed" if record.outcome == "failed" else "delivered", "done")

    async def give_up(reason: str) -> Recovery:
        # Say what is known of the money: on a pay-first rail a proof or a transaction code
        # means it left the account; anything else may have moved.
        moved_first = record.rail in ("euro", "bridge")
        evidence = bool(record.proof or record.transaction_code or record.blockchain_tx_id)
        outcome: Literal["paid", "unknown"] = "paid" if moved_first and evidence else "unknown"
        if record.outcome in ("paid", "unknown"):
            outcome = "paid" if record.outcome == "paid" else outcome
        text = f"{reason}. {_claim(record)}"
        await journal.finish_payment(record.id, outcome, delivered=False, error=text)
        await journal.mark_unrecoverable(record.id, text)
        return Recovery(record, "unrecoverable", text)

    async def nothing_moved(reason: str) -> Recovery:
        await journal.finish_payment(record.id, "failed", delivered=False, error=reason)
        for key, reservation in record.reservations:
            await state.budgets.store.release(key, reservation)
        return Recovery(record, "failed", reason)

    async def delivered(response: httpx.Response) -> Recovery:
        if response.status_code >= 400:
            return await give_up(f"the merchant answered {response.status_code} to the proof")
        await journal.finish_payment(record.id, "paid", delivered=True)
        return Recovery(record, "delivered", "the resource was delivered", response)

    now = time.time()
    if record.rail == "bridge" and not record.proof:
        if record.transaction_code is None:
            return await give_up(
                "the process died during the bridge payment call: the EURO may or may not "
                "have left the account; ask the provider for a BlockchainAddress payment "
                f"made at {record.created_at.isoformat(timespec='seconds')}"
            )
        try:
            response = await _send(
                client,
                record,
                {"resume_transaction_code": record.transaction_code, "journal_id": record.id},
            )
        except X402Error as exc:
            return Recovery(record, "pending", f"resuming failed: {exc}", error=exc)
        return Recovery(record, "delivered", "the bridge payment was resumed", response)

    proof = _euro_proof(record) if record.rail == "euro" else record.proof
    if proof is None:
        # Settle-on-proof rails: nothing was signed or handed over.
        return await nothing_moved("no proof was ever handed over: no money moved")
    valid_until = _valid_until(record)
    expired = valid_until is not None and valid_until + EXPIRY_SKEW < now
    if expired and record.rail != "euro":
        return await give_up(
            "the signed authorization expired before it was delivered; the merchant may "
            "still have settled it (check the chain)"
        )
    try:
        response = await _send(client, record, {"proof": proof})
    except PaymentNotConfirmed as exc:
        if record.rail == "euro" and expired:
            return await nothing_moved(
                "the payment request expired unpaid (the verifier never confirmed it)"
            )
        return Recovery(record, "pending", f"not confirmed yet: {exc.reason}", error=exc)
    except (PaymentVerificationFailed, PaymentOutcomeUnknown) as exc:
        reason = getattr(exc, "reason", None) or str(exc)
        if (
            record.rail == "euro"
            and classify_reason(reason) is VerifierReason.EXPIRED
            and not record.delivered
        ):
            # The spec's verifier says "expired" of a request that timed out: it was never
            # settled (the provider keeps no money for an expired request; the merchant's
            # rule is "request a fresh 402 and pay again").
            return await nothing_moved(f"the payment request expired unsettled ({reason})")
        return await give_up(f"the merchant refused the re-sent proof ({reason})")
    except X402Error as exc:
        return await give_up(f"re-sending the proof failed ({type(exc).__name__}: {exc})")
    except httpx.HTTPError as exc:
        return Recovery(record, "pending", f"the merchant did not answer: {exc}")
    return await delivered(response)


async def recover_payments(client: httpx.AsyncClient) -> list[Recovery]:
    """Recover every unfinished journaled payment, oldest first."""
    results = []
    for record in await unfinished_payments(client):
        results.append(await recover_payment(client, record.id))
    return results
