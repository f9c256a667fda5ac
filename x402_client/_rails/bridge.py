"""The `bridge` rail (path C): pay a chain-A `exact` entry in EURQ from the managed account.

The payment API converts EURO to EURQ and sends it to the entry's `payTo`; the merchant
cannot tell a bridged payment from a direct one. One payment, step by step:

1. `POST {api_url}/transaction/payment` with `toType: BlockchainAddress`, `paymentTo` =
   `payTo` and `amount` = `maxAmountRequired` / 10^6 euros; the answer's
   `transactionCode` (`QP...`) names the payment from then on;
2. poll `GET {api_url}/transaction?txCode=<code>` until `blockchainTxId` appears
   (`wait_for_blockchain_tx_id`: first interval `bridge_poll_interval`, doubling up to
   `bridge_poll_max_interval`, never past `bridge_deadline`);
3. prove it with the bridge payload (`transactionCode`, `blockchainTxId`, `payTo`,
   `asset`); the payer retries the request with it.

How a wait ends: the id appears (proved); a `Cancelled`/`Expired`/failed status
(`BridgeTransferFailed`: the provider refunds, no money moved); the deadline passes
(`PaymentOutcomeUnknown` with `transaction_code`: resume later with
`request.extensions["x402"]["resume_transaction_code"]`, which proves that payment
instead of paying again); the caller's task is cancelled (the code is logged at WARNING,
then the cancellation goes on). The wait runs in the caller's task: nothing is spawned,
so nothing outlives it.

Only EURQ entries are bridged: the bridge delivers EURQ, so a USDQ entry (or any other
asset) is not satisfiable here. A direct chain-A payment (`transaction` + `paymentIndex`
payload, signed by the user's own chain wallet) is the `chain-a` rail's, which comes first
when `PaymentOptions.chain_a` is set.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from decimal import Decimal
from typing import TYPE_CHECKING

import anyio
import httpx

from .._options import PaymentOptions
from .._protocol.amounts import format_amount
from .._protocol.challenge import CHAIN_A_ASSETS, CHAIN_A_NETWORK, exact_amount, exact_intent
from .._protocol.errors import (
    BridgeResumeRefused,
    BridgeTransferFailed,
    PaymentAPIError,
    PaymentOutcomeUnknown,
)
from .._protocol.events import PaymentProgress, Stage
from .._protocol.models import AcceptEntry, BridgePayload, ExactAcceptEntry, PaymentProof
from .._protocol.proof import encode_proof
from .._protocol.provider import FAILED_STATUSES, TransactionRecord
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
    from tenacity import RetryCallState

__all__ = [
    "BRIDGE_ASSET",
    "BridgeRail",
    "BridgeResumeRefused",
    "PollPolicy",
    "PollUpdate",
    "bridge_proof",
    "wait_for_blockchain_tx_id",
]

logger = logging.getLogger("x402_client")

#: The chain-A asset id the bridge delivers: EURQ.
BRIDGE_ASSET = next(asset for asset, symbol in CHAIN_A_ASSETS.items() if symbol == "EURQ")

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]


# --- the poller (pure-ish: lookup, clock and sleep are injected) -------------------------------


@dataclasses.dataclass(frozen=True)
class PollPolicy:
    """How the bridge is polled.

    The first lookup is immediate; then waits of `first_interval`, doubling up to
    `max_interval`, clipped so that the last lookup happens at `deadline` (seconds after
    the wait began), each from the options (`from_options`). `log_every` spaces the INFO
    lines of a long wait.
    """

    first_interval: float
    max_interval: float
    deadline: float
    log_every: float = 10.0

    @classmethod
    def from_options(cls, options: PaymentOptions) -> PollPolicy:
        return cls(
            first_interval=options.bridge_poll_interval,
            max_interval=max(options.bridge_poll_interval, options.bridge_poll_max_interval),
            deadline=options.bridge_deadline,
        )


@dataclasses.dataclass(frozen=True)
class PollUpdate:
    """One lookup that found no `blockchainTxId` yet (`record` is None if not listed)."""

    polls: int
    elapsed: float
    record: TransactionRecord | None
    error: str | None = None


def _transient(exc: Exception) -> bool:
    """A lookup failure worth polling through: the network, a 5xx, a 429."""
    if isinstance(exc, httpx.TransportError):
        return True
    if isinstance(exc, PaymentAPIError):
        return exc.status_code is None or exc.status_code >= 500 or exc.status_code == 429
    return False


@dataclasses.dataclass
class _Poll:
    """The state of one wait for a `blockchainTxId`: each lookup (`attempt`), what it
    logs and reports, and the error that says where the payment stands."""

    lookup: Callable[[], Awaitable[TransactionRecord | None]]
    transaction_code: str
    policy: PollPolicy
    on_poll: Callable[[PollUpdate], Awaitable[None]] | None
    clock: Clock
    intent: PaymentIntent | None
    started: float
    polls: int = 0
    last_log: float = 0.0
    last_status: str | None = None

    def outcome_unknown(self, why: str) -> PaymentOutcomeUnknown:
        code = self.transaction_code
        return PaymentOutcomeUnknown(
            f"bridge transaction {code}: {why}; the EURO payment was made. Resume "
            f"with extensions={{'x402': {{'resume_transaction_code': '{code}'}}}} "
            "(or payments(client).recover(error)); do not pay again",
            transaction_code=code,
            intent=self.intent,
        )

    async def attempt(self) -> TransactionRecord | None:
        """One lookup: the record once it carries `blockchainTxId`, else None (poll on)."""
        self.polls += 1
        error: str | None = None
        record: TransactionRecord | None = None
        try:
            record = await self.lookup()
        except Exception as exc:
            if not _transient(exc):
                raise self.outcome_unknown(f"the lookup failed ({exc})") from exc
            error = f"{type(exc).__name__}: {exc}"
            logger.debug("x402: bridge lookup of %s failed: %s", self.transaction_code, error)
        if record is not None:
            self.last_status = record.status
            if record.blockchain_tx_id:
                return record
            if record.status is not None and record.status.lower() in FAILED_STATUSES:
                raise BridgeTransferFailed(
                    f"bridge transaction {self.transaction_code} ended as {record.status}; "
                    "no blockchainTxId will appear (the provider refunds the EURO)",
                    transaction_code=self.transaction_code,
                    status=record.status,
                    intent=self.intent,
                )
        now = self.clock()
        self._log(now)
        if self.on_poll is not None:
            await self.on_poll(PollUpdate(self.polls, now - self.started, record, error))
        return None

    def _log(self, now: float) -> None:
        status = self.last_status or "not listed"
        logger.debug(
            "x402: bridge transaction %s: %s after %d polls",
            self.transaction_code,
            status,
            self.polls,
        )
        if now - self.last_log >= self.policy.log_every:
            self.last_log = now
            logger.info(
                "x402: still waiting for bridge transaction %s (status %s, %.0f s of %.0f s)",
                self.transaction_code,
                status,
                now - self.started,
                self.policy.deadline,
            )


async def wait_for_blockchain_tx_id(
    lookup: Callable[[], Awaitable[TransactionRecord | None]],
    *,
    transaction_code: str,
    policy: PollPolicy,
    on_poll: Callable[[PollUpdate], Awaitable[None]] | None = None,
    clock: Clock = time.monotonic,
    sleep: Sleep = anyio.sleep,
    intent: PaymentIntent | None = None,
) -> TransactionRecord:
    """Poll `lookup()` until the record carries `blockchainTxId`; return that record.

    Raises `BridgeTransferFailed` when the status says the transaction ended without
    one, and `PaymentOutcomeUnknown` (with `transaction_code`) when `policy.deadline`
    passes or the lookup fails in a way that will not heal (a 4xx). Network errors and
    5xx answers are polled through. Besides the injected `clock`, a real-time guard of
    the same deadline (plus one interval of grace) bounds a lookup that hangs.
    """
    # Here, not at the top: tenacity imports tornado's IOLoop support when tornado is
    # installed, thousands of objects every garbage collection would scan for a rail
    # most processes never use.
    from tenacity import AsyncRetrying, RetryError, retry_if_result, wait_exponential

    started = clock()
    poll = _Poll(
        lookup, transaction_code, policy, on_poll, clock, intent, started, last_log=started
    )
    deadline_at = started + policy.deadline
    backoff = wait_exponential(
        multiplier=policy.first_interval, min=policy.first_interval, max=policy.max_interval
    )

    def stop(state: RetryCallState) -> bool:
        return clock() >= deadline_at

    def wait(state: RetryCallState) -> float:
        return max(0.0, min(backoff(state), deadline_at - clock()))

    retrying = AsyncRetrying(
        retry=retry_if_result(lambda found: found is None), stop=stop, wait=wait, sleep=sleep
    )
    logger.info(
        "x402: waiting up to %.0f s for bridge transaction %s to reach the chain",
        policy.deadline,
        transaction_code,
    )
    with anyio.move_on_after(policy.deadline + policy.max_interval):
        try:
            found: TransactionRecord | None = await retrying(poll.attempt)
        except RetryError:
            raise poll.outcome_unknown(
                f"no blockchainTxId after {policy.deadline:g} s ({poll.polls} polls, "
                f"last status {poll.last_status or 'not listed'})"
            ) from None
        assert found is not None
        return found
    raise poll.outcome_unknown(
        f"the lookup did not answer within the {policy.deadline:g} s deadline"
    )


def bridge_proof(entry: ExactAcceptEntry, transaction_code: str, blockchain_tx_id: str) -> str:
    """The X-PAYMENT value proving a bridge payment for `entry` (spec, "X-PAYMENT proof")."""
    payload = BridgePayload(
        transaction_code=transaction_code,
        blockchain_tx_id=blockchain_tx_id,
        pay_to=entry.pay_to,
        asset=entry.asset,
    )
    return encode_proof(
        PaymentProof(scheme=entry.scheme, network=entry.network, payload=payload.to_wire())
    )


# --- the rail ------------------------------------------------------------------------------


class _Reporter:
    """Reports the progress of one bridge payment (`on_progress`), timed from its start."""

    def __init__(
        self, context: RailContext, rail: str, resource: str, clock: Clock, policy: PollPolicy
    ) -> None:
        self._context = context
        self._rail = rail
        self._resource = resource
        self._clock = clock
        self._deadline = policy.deadline
        self._started = clock()

    async def __call__(
        self,
        stage: Stage,
        *,
        transaction_code: str | None = None,
        status: str | None = None,
        blockchain_tx_id: str | None = None,
        polls: int = 0,
    ) -> None:
        event = PaymentProgress(
            stage=stage,
            rail=self._rail,
            resource=self._resource,
            transaction_code=transaction_code,
            status=status,
            blockchain_tx_id=blockchain_tx_id,
            elapsed=self._clock() - self._started,
            polls=polls,
            deadline=self._deadline,
        )
        await self._context.report(event)


class BridgeRail:
    name = "bridge"
    #: The schemes of the entries it describes (the selection asks no other rail).
    schemes = frozenset({"exact"})
    #: The EURO leaves the account before the proof exists.
    money_moves_before_proof = True
    frames_own_proof = True
    resumes_transactions = True
    #: Nothing to check before paying: the payment API says what it refuses.
    prepare = None
    #: The payload fields of this rail's proofs (a re-sent proof is this rail's if it has one).
    proof_fields = frozenset({"transactionCode"})

    def __init__(
        self, context: RailContext, *, clock: Clock = time.monotonic, sleep: Sleep = anyio.sleep
    ) -> None:
        self._context = context
        self._clock = clock
        self._sleep = sleep

    def __repr__(self) -> str:
        return "BridgeRail()"

    def describe(self, entry: AcceptEntry, resource: str) -> PaymentIntent | str:
        if not isinstance(entry, ExactAcceptEntry) or entry.network != CHAIN_A_NETWORK:
            return NotForThisRail("not a chain-A entry")
        blockers = []
        if entry.asset != BRIDGE_ASSET:
            blockers.append("the bridge delivers EURQ only" + _direct_hint(self._context.options))
        settings = managed_account_settings(self._context.options)
        if settings:
            blockers.append("it pays from the account of api_key, from_account and api_url")
        if blockers:
            symbol = CHAIN_A_ASSETS.get(entry.asset, f"asset {entry.asset[:24]!r}")
            return unpayable(
                f"bridge payment for {symbol} on {CHAIN_A_NETWORK}", blockers, settings
            )
        return exact_intent(entry, rail="bridge", symbol="EURQ", resource=resource)

    @asynccontextmanager
    async def pay(
        self,
        entry: AcceptEntry,
        intent: PaymentIntent,
        settings: RequestSettings,
        note: Note = no_note,
    ) -> AsyncIterator[Paid]:
        """Send the EURO to the bridge (or resume a transfer sent earlier), wait until it
        reaches chain A, and yield the proof of that transaction."""
        assert isinstance(entry, ExactAcceptEntry)
        options = self._context.options
        assert options.from_account is not None
        policy = PollPolicy.from_options(options)
        report = _Reporter(self._context, self.name, intent.resource, self._clock, policy)
        code = settings.resume_transaction_code
        if code is not None:
            await self._check_resumable(entry, intent, code, options.from_account)
            logger.info("x402: resuming bridge transaction %s; not paying again", code)
        else:
            code = await self._transfer(entry, intent, options.from_account, note, report)
        record, polls = await self._wait(code, policy, intent, report)
        tx_id = record.blockchain_tx_id
        assert tx_id is not None
        for stage in ("settled", "proving"):
            await report(
                stage,
                transaction_code=code,
                status=record.status,
                blockchain_tx_id=tx_id,
                polls=polls + 1,
            )
        yield Paid(
            proof=bridge_proof(entry, code, tx_id),
            transaction_code=code,
            blockchain_tx_id=tx_id,
            payer=options.from_account,
        )

    async def _transfer(
        self,
        entry: ExactAcceptEntry,
        intent: PaymentIntent,
        from_account: str,
        note: Note,
        report: _Reporter,
    ) -> str:
        """Pay the EURO to the entry's chain-A address: the bridge's transaction code."""
        await report("paying")
        # Shielded: once the POST is on its way, its answer (the code) must not be lost
        # to a cancellation; it is bounded by `payment_api_timeout`.
        with anyio.CancelScope(shield=True):
            code = await self._context.payment_api().pay_blockchain_address(
                from_account=from_account,
                address=entry.pay_to,
                # "0.10", not "0.100000": the amount as a person would write it.
                amount=Decimal(format_amount(intent.amount)),
                message=entry.description or intent.resource,
                intent=intent,
            )
            # The EURO left the account: the code goes to the journal before the wait.
            await note(transaction_code=code)
        logger.info(
            "x402: bridge payment %s of %s EUR to %s made",
            code,
            format_amount(intent.amount),
            entry.pay_to,
        )
        return code

    async def _wait(
        self, code: str, policy: PollPolicy, intent: PaymentIntent, report: _Reporter
    ) -> tuple[TransactionRecord, int]:
        """Wait for the transfer `code` to reach chain A: its record, and the polls made."""
        api = self._context.payment_api()
        polls = 0

        async def on_poll(update: PollUpdate) -> None:
            nonlocal polls
            polls = update.polls
            record = update.record
            await report(
                "waiting",
                transaction_code=code,
                status=record.status if record is not None else None,
                polls=update.polls,
            )

        try:
            record = await wait_for_blockchain_tx_id(
                lambda: api.get_transaction(code),
                transaction_code=code,
                policy=policy,
                on_poll=on_poll,
                clock=self._clock,
                sleep=self._sleep,
                intent=intent,
            )
        except anyio.get_cancelled_exc_class():
            logger.warning(
                "x402: cancelled while waiting for bridge transaction %s; the EURO payment "
                "was made. Resume with extensions={'x402': {'resume_transaction_code': '%s'}}",
                code,
                code,
            )
            raise
        except (BridgeTransferFailed, PaymentOutcomeUnknown) as exc:
            status = getattr(exc, "status", None)
            with anyio.CancelScope(shield=True):
                await report("failed", transaction_code=code, status=status)
            raise
        return record, polls

    async def _check_resumable(
        self, entry: ExactAcceptEntry, intent: PaymentIntent, code: str, from_account: str
    ) -> None:
        """Refuse to prove a transaction that is not a payment of this entry."""
        record = await self._context.payment_api().get_transaction(code)

        def refuse(reason: str) -> BridgeResumeRefused:
            return BridgeResumeRefused(
                f"cannot resume with bridge transaction {code}: {reason}; nothing was paid",
                transaction_code=code,
                reason=reason,
                intent=intent,
            )

        if record is None:
            raise refuse("the payment API does not list it")
        if record.type is not None and record.type != "BlockchainAddress":
            raise refuse(f"it is a {record.type} payment, not a blockchain-address payment")
        if record.to_account_code is not None and record.to_account_code != entry.pay_to:
            raise refuse(f"it paid {record.to_account_code}, not {entry.pay_to}")
        if record.from_account_code is not None and record.from_account_code != from_account:
            raise refuse(f"it was paid from {record.from_account_code}, not {from_account}")
        required = exact_amount(entry)
        if record.amount is not None and Decimal(record.amount) < required:
            raise refuse(
                f"it paid {format_amount(record.amount)} EUR, less than "
                f"{format_amount(required)} EUR"
            )


def _direct_hint(options: PaymentOptions) -> str:
    """Where a chain-A entry the bridge cannot pay may be paid instead: with a chain-A
    wallet, its rail says for itself why it cannot."""
    if options.chain_a is not None:
        return ""
    return (
        " (set PaymentOptions.chain_a to pay it from your own chain-A wallet; without one, "
        "a direct chain-A payment is manual)"
    )


def build(context: RailContext) -> BridgeRail | None:
    """The bridge rail (chain A through the managed account)."""
    return BridgeRail(context)
