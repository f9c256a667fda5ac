"""Every fault at every step of a payment, through every kind of client: the error, the
money and the ledger must agree, and a case must come out the same whichever client made
the call: an `httpx.AsyncClient`, an `httpx.Client`, a `requests.Session`, or an MCP
session calling a paid tool (`with_eur_payment_mcp`).

Two rails, one table each:
- the euro rail (`EURO`): faults at the payment API, the managed-account facilitator and
  the merchant's paid retry. The `euro` scheme is spoken only over HTTP (its own dialect,
  `X-PAYMENT`); an MCP tool call is paid in standard x402, so these cases run through the
  three HTTP kinds;
- standard x402 (`STANDARD`): an EIP-3009 authorization the merchant settles on an anvil
  chain, the sandbox's standard merchant selling `GET /weather` and the `weather` tool for
  the same price, behind a fault point at its paid calls (`tests/merchants.py`
  `FaultGate`). These run through all four kinds.

Invariants checked after each run:
- the error is the case's and says truthfully whether money moved (`money_moved`);
- the case's number of payments moved money, and never two for one intent (but for the
  one fresh payment the spec allows after "already used");
- the ledger holds the case's outcomes; every payment that moved money is in it as `paid`
  or `unknown`; a ledger entry `failed` moved no money;
- after a fault that left the outcome unknown, re-sending the proof is safe: it completes
  the call, or is refused, and never moves money a second time.

Each kind is a small adapter (`KINDS`): it makes the call and hands back the status, the
body and the receipt, or raises the payment error.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from decimal import Decimal
from typing import Any

import anyio.from_thread
import httpx
import pytest
import requests

from tests.conftest import bank_payments
from tests.merchants import FaultGate
from tests.needs import require
from tests.sandboxes import asset_of, payment_options
from tests.waiting import eventually_sync
from x402_client import (
    EvmOptions,
    LedgerEntry,
    PaymentAdapter,
    PaymentFailed,
    PaymentNotConfirmed,
    PaymentOptions,
    PaymentOutcomeUnknown,
    PaymentReceipt,
    PaymentVerificationFailed,
    X402Error,
    payments,
    with_eur_payment,
)
from x402_eur_sandbox import Fault, Price, Sandbox
from x402_eur_sandbox._standard import StandardMerchant

#: How long the client waits for a payment API that does not answer, in the `timeout`
#: cases: the call never answers, so the client always gives up; this only has to be long
#: enough for the call to be sent whole on a busy machine.
GIVE_UP = 3.0
PRICE = Decimal("0.10")


# --- the kinds of client ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Target:
    """What the call buys: the paid resource over HTTP, and the MCP tool (its server's URL
    and name) selling the same for the same price, where there is one."""

    url: str
    tool: tuple[str, str] | None = None


@dataclasses.dataclass(frozen=True)
class Answer:
    """What a call that raised no payment error came back with."""

    status: int
    body: Any
    receipt: PaymentReceipt | None


class Opened:
    """One client of a kind: `fetch` the target (re-sending `proof` when given one), read
    the ledger the client keeps."""

    def __init__(self, fetch: Callable[[str | None], Answer], ledger: Callable[[], Any]) -> None:
        self.fetch = fetch
        self._ledger = ledger

    def ledger(self) -> list[LedgerEntry]:
        return list(self._ledger().entries())

    def books(self) -> list[tuple[str, str | None]]:
        """The ledger as it stands now: each entry's outcome and payment request code."""
        return [(entry.outcome, entry.payment_request_code) for entry in self.ledger()]


def _answer(response: httpx.Response) -> Answer:
    body = response.json() if response.status_code == 200 else response.content
    return Answer(response.status_code, body, response.extensions.get("x402_payment"))


@contextlib.asynccontextmanager
async def _async_client(target: Target, options: PaymentOptions) -> AsyncIterator[Any]:
    async with with_eur_payment(httpx.AsyncClient(timeout=30), options) as client:

        async def fetch(proof: str | None) -> Answer:
            extensions = {"x402": {"proof": proof}} if proof else {}
            return _answer(await client.get(target.url, extensions=extensions))

        yield fetch, lambda: payments(client).ledger


@contextlib.contextmanager
def httpx_async(target: Target, options: PaymentOptions) -> Iterator[Opened]:
    with (
        anyio.from_thread.start_blocking_portal() as portal,
        portal.wrap_async_context_manager(_async_client(target, options)) as (fetch, ledger),
    ):
        yield Opened(lambda proof: portal.call(fetch, proof), ledger)


@contextlib.contextmanager
def httpx_blocking(target: Target, options: PaymentOptions) -> Iterator[Opened]:
    with with_eur_payment(httpx.Client(timeout=30), options) as client:

        def fetch(proof: str | None) -> Answer:
            extensions = {"x402": {"proof": proof}} if proof else {}
            return _answer(client.get(target.url, extensions=extensions))

        yield Opened(fetch, lambda: payments(client).ledger)
    _no_payment_thread_left()


@contextlib.contextmanager
def requests_session(target: Target, options: PaymentOptions) -> Iterator[Opened]:
    session = requests.Session()
    session.trust_env = False  # loopback only, whatever the environment's proxies say
    with with_eur_payment(session, options) as session:

        def fetch(proof: str | None) -> Answer:
            settings = (
                PaymentAdapter.settings({"proof": proof}) if proof else contextlib.nullcontext()
            )
            try:
                with settings:
                    response = session.get(target.url, timeout=30)
            except X402Error as exc:
                # The payment error and a requests error at once.
                assert isinstance(exc, requests.RequestException), type(exc).__mro__
                raise
            body = response.json() if response.status_code == 200 else response.content
            return Answer(response.status_code, body, response.x402_payment)

        yield Opened(fetch, lambda: payments(session).ledger)
    _no_payment_thread_left()


@contextlib.asynccontextmanager
async def _mcp_session(url: str, name: str, options: PaymentOptions) -> AsyncIterator[Any]:
    from mcp import Client

    async with Client(url) as client:
        with_eur_payment(client, options)

        async def fetch(proof: str | None) -> Answer:
            settings = {"proof": proof} if proof else None
            result = await client.call_tool(name, {"city": "Amsterdam"}, x402=settings)
            status = 500 if result.is_error else 200
            receipt = getattr(result, "x402_payment", None)
            return Answer(status, result.structured_content, receipt)

        yield fetch, lambda: payments(options).ledger


@contextlib.contextmanager
def mcp(target: Target, options: PaymentOptions) -> Iterator[Opened]:
    require("mcp", "pip install 'x402-eur[mcp]'")
    assert target.tool is not None, "no tool sells this target"
    session = _mcp_session(*target.tool, options)
    with (
        anyio.from_thread.start_blocking_portal() as portal,
        portal.wrap_async_context_manager(session) as (fetch, ledger),
    ):
        yield Opened(lambda proof: portal.call(fetch, proof), ledger)


def _no_payment_thread_left() -> None:
    """A sync client's payment thread ends with it."""

    def threads() -> list[str]:
        return [t.name for t in threading.enumerate() if t.name.startswith("x402-sync")]

    eventually_sync(lambda: not threads(), "the sync client's payment thread to end with it")


KINDS: dict[str, Callable[[Target, PaymentOptions], contextlib.AbstractContextManager[Opened]]] = {
    "httpx-async": httpx_async,
    "httpx-sync": httpx_blocking,
    "requests": requests_session,
    "mcp": mcp,
}
HTTP = ("httpx-async", "httpx-sync", "requests")


# --- the cases --------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Case:
    """One fault, and what every kind of client must make of it."""

    #: Where the fault strikes (a `Faults` endpoint) and what it is; or `arrange` breaks
    #: the sandbox another way.
    endpoint: str | None
    fault: Fault | None
    #: What the client must say: the error's type, or None (the call is answered `status`).
    error: type[X402Error] | None
    #: How many payments moved money, and the ledger's outcomes once the call ended.
    paid: int
    ledger: tuple[str, ...]
    #: The error's `money_moved`.
    moved: bool | None = None
    status: int = 200
    #: Text the error must say.
    says: str = ""
    #: Options the case changes (e.g. a payment API nobody listens on).
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    arrange: Callable[[Sandbox], None] | None = None
    #: How often the merchant asked the facilitator to verify a proof, where it matters.
    verified: int | None = None
    kinds: tuple[str, ...] = HTTP
    name: str = ""

    @property
    def id(self) -> str:
        if self.name:
            return self.name
        assert self.fault is not None
        return f"{self.endpoint}-{self.fault.kind}-{self.fault.when}-{self.fault.times}"

    def runs(self) -> list[Any]:
        return [pytest.param(self, kind, id=f"{kind}:{self.id}") for kind in self.kinds]


def _unknown(endpoint: str, fault: Fault, paid: int, **more: Any) -> Case:
    return Case(endpoint, fault, PaymentOutcomeUnknown, paid, **more)


def _lying_verifier(sandbox: Sandbox) -> None:
    """The bank consumes each proof but says "already used": the merchant keeps refusing."""
    real_verify = sandbox.bank.verify_payment_request

    def lying_verify(code: str, merchant: str) -> Any:
        real_verify(code, merchant)  # consumes it
        return False, "Payment request already used", None

    sandbox.bank.verify_payment_request = lying_verify  # type: ignore[method-assign]


# The euro rail pays before it sends the proof: from the moment the payment API moved the
# money, the client knows it did (`paid`); the outcome is `unknown` only while the payment
# API's answer is missing.
UNKNOWN, PAID = ("unknown",), ("paid",)
EURO = [
    _unknown("payment", Fault("status", "before", status=503), 0, ledger=UNKNOWN),
    _unknown("payment", Fault("status", "after", status=500), 1, ledger=UNKNOWN),
    _unknown("payment", Fault("drop", "before"), 0, ledger=UNKNOWN),
    _unknown("payment", Fault("drop", "after"), 1, ledger=UNKNOWN),
    # the payment API never answers (the fault holds the call until the sandbox stops)
    _unknown("payment", Fault("timeout", "before"), 0, ledger=UNKNOWN),
    _unknown("payment", Fault("timeout", "after"), 1, ledger=UNKNOWN),
    Case("payment", Fault("delay", "after", delay=0.2), None, 1, PAID),
    # merchant 500 -> the same proof re-sent, then served
    Case("x402_verify", Fault("status", "before", status=500), None, 1, PAID),
    Case("resource", Fault("status", "before", status=502), None, 1, PAID),  # re-sent, served
    _unknown(
        "resource", Fault("status", "before", status=502, times=5), 1, ledger=PAID, moved=True
    ),
    _unknown("resource", Fault("status", "after", status=500), 1, ledger=PAID, moved=True),
    _unknown("resource", Fault("drop", "before"), 1, ledger=PAID, moved=True),
    _unknown("resource", Fault("drop", "after"), 1, ledger=PAID, moved=True),
    # no 402 at all: the merchant's own failure, passed through
    Case("x402_pay", Fault("status", "before", status=500), None, 0, (), status=500),
    Case(
        "payment",
        Fault("status", "before", status=409),
        PaymentFailed,
        0,
        ("failed",),
        moved=False,
        name="payment-refused-before-money-moves",
    ),
    Case(
        None,
        None,
        PaymentFailed,
        0,
        ("failed",),
        moved=False,
        says="unreachable",
        options={"api_url": "http://127.0.0.1:9"},  # nothing listens
        name="payment-api-unreachable",
    ),
    # The proof is consumed but the merchant keeps saying "already used": one fresh
    # payment at most, then an error; the client neither loops nor pays a third time.
    Case(
        None,
        None,
        PaymentVerificationFailed,
        2,
        PAID + PAID,
        moved=True,
        says="already used",
        arrange=_lying_verifier,
        verified=2,
        name="merchant-keeps-answering-already-used",
    ),
]


def euro_options(sandbox: Sandbox, case: Case) -> PaymentOptions:
    """The client's options for one case: it gives up on the payment API only where the
    fault makes the API hang; elsewhere the API gets the default 30 s, so that a slow
    machine never turns a case into a timeout."""
    hangs = case.fault is not None and case.fault.kind == "timeout"
    return payment_options(
        sandbox,
        payment_api_timeout=GIVE_UP if hangs else 30.0,
        confirmation_attempts=3,
        confirmation_wait=0.01,
        **case.options,
    )


def _bank_payments(sandbox: Sandbox) -> list[Any]:
    return [t for t in bank_payments(sandbox, sandbox.payer) if t.status != "Cancelled"]


@pytest.mark.parametrize(("case", "kind"), [run for case in EURO for run in case.runs()])
def test_euro_rail_under_fault(case: Case, kind: str) -> None:
    with Sandbox.run_in_thread() as sandbox:
        if case.fault is not None:
            assert case.endpoint is not None
            # `Faults` counts a fault down as it strikes: arm a copy, keep the table intact.
            sandbox.faults.arm(case.endpoint, dataclasses.replace(case.fault))
        if case.arrange is not None:
            case.arrange(sandbox)
        target = Target(sandbox.url("/weather"))
        with KINDS[kind](target, euro_options(sandbox, case)) as client:
            error, answer = _call(client, None)
            books = client.books()
            _check_said(case, error, answer)
            moved = _bank_payments(sandbox)
            assert len(moved) == case.paid, moved
            assert bank_payments(sandbox, sandbox.payer) == moved  # none made and cancelled
            assert sandbox.balance(sandbox.payer) == Decimal("100.00") - PRICE * len(moved)
            _check_books(case, books, {t.payment_request_code for t in moved})
            if case.verified is not None:
                assert sandbox.faults.calls.get("x402_verify") == case.verified
            if isinstance(error, PaymentOutcomeUnknown):
                assert error.payment_request_code
                assert error.payment_request_code.startswith("pr_")
                sandbox.faults.clear()
                served = _check_resending(case, client, error, paid=len(moved))
                if served and moved:
                    assert client.ledger()[0].outcome == "paid"
                # the euro rail moves money only at the payment API: a proof never pays
                after = _bank_payments(sandbox)
                assert len(after) == len(moved), "re-sending the proof paid again"


# --- standard x402 (EIP-3009) ----------------------------------------------------------------


# An authorization is money only once the merchant settles it, and the client does not see
# that happen: after a fault it cannot tell whether the merchant settled (`unknown`).
#
# A tool call has no HTTP status to re-send on: the MCP session takes a failed exchange as
# an interrupted call (the paid tool may have run), where the HTTP clients re-send the same
# proof after a merchant's 5xx. So the cases whose outcome rests on that re-send (a 502
# before the proof was read) run through the HTTP kinds only; the dropped connections,
# before the merchant read the proof and after it settled, run through all four.
STANDARD = [
    Case("paid_call", Fault("status", "before", status=502), None, 1, PAID),  # re-sent, served
    *(
        _unknown("paid_call", fault, paid, ledger=UNKNOWN, kinds=tuple(KINDS))
        for fault, paid in ((Fault("drop", "before"), 0), (Fault("drop", "after"), 1))
    ),
]


@dataclasses.dataclass
class Standard:
    """The standard merchant and its fault point, running in a sandbox's thread."""

    sandbox: Sandbox
    merchant: StandardMerchant
    gate: FaultGate

    def settled(self) -> int:
        """How many payments the merchant settled, over HTTP and as tool calls."""
        return len(self.merchant.settlements) + len(self.merchant.tools.settlements)

    def payer_balance(self) -> int:
        return asyncio.run(self.merchant.token_balance(self.merchant.payer_address))

    def options(self) -> PaymentOptions:
        evm = EvmOptions(**self.merchant.evm_config())
        return PaymentOptions(evm=evm, assets=[asset_of(self.merchant)])


@pytest.fixture(scope="module")
def standard() -> Iterator[Standard]:
    merchant = StandardMerchant(tool_prices={"weather": Price(PRICE, "the weather, as a tool")})
    gate = FaultGate(merchant)
    with Sandbox.run_in_thread(parts=[merchant, gate]) as sandbox:
        yield Standard(sandbox, merchant, gate)


@pytest.mark.parametrize(("case", "kind"), [run for case in STANDARD for run in case.runs()])
def test_standard_x402_under_fault(standard: Standard, case: Case, kind: str) -> None:
    merchant, faults = standard.merchant, standard.sandbox.faults
    assert case.fault is not None and case.endpoint == FaultGate.endpoint
    balance, settled = standard.payer_balance(), standard.settled()
    target = Target(standard.gate.url + "/weather", (standard.gate.url + "/mcp", "weather"))
    faults.arm(case.endpoint, dataclasses.replace(case.fault))
    try:
        with KINDS[kind](target, standard.options()) as client:
            error, answer = _call(client, None)
            books = client.books()
            _check_said(case, error, answer)
            moved = standard.settled() - settled
            assert moved == case.paid, merchant.settlements
            assert standard.payer_balance() == balance - 100_000 * moved
            if isinstance(error, PaymentOutcomeUnknown):
                faults.clear()
                served = _check_resending(case, client, error, paid=moved)
                # the authorization settles once: on the re-send when it was not before
                after = standard.settled() - settled
                assert after == (1 if served else moved), "re-sending the proof paid again"
                assert standard.payer_balance() == balance - 100_000 * after
            _check_books(case, books, set())
    finally:
        faults.clear()


# --- the checks both rails share ---------------------------------------------------------------


def _call(client: Opened, proof: str | None) -> tuple[X402Error | None, Answer | None]:
    try:
        return None, client.fetch(proof)
    except X402Error as exc:
        return exc, None


def _check_said(case: Case, error: X402Error | None, answer: Answer | None) -> None:
    """The client said what the case says it must: served, or the case's error."""
    if case.error is None:
        assert error is None, error
        assert answer is not None and answer.status == case.status, answer
        if case.status == 200:
            assert answer.receipt is not None and answer.receipt.amount == PRICE
        else:
            assert answer.receipt is None
    else:
        assert isinstance(error, case.error), error
        assert error.money_moved is case.moved, error
        assert case.says in str(error)


def _check_books(
    case: Case, books: list[tuple[str, str | None]], moved_codes: set[str | None]
) -> None:
    """The ledger right after the call: the case's outcomes; every payment that moved money
    in it as `paid` or `unknown`; no `failed` entry that moved money."""
    assert tuple(outcome for outcome, _ in books) == case.ledger, books
    by_code = dict((code, outcome) for outcome, code in books)
    for code in moved_codes:
        assert by_code.get(code) in ("paid", "unknown"), books
    for outcome, code in books:
        if outcome == "failed":
            assert code not in moved_codes


def _check_resending(case: Case, client: Opened, error: PaymentOutcomeUnknown, paid: int) -> bool:
    """Re-send the proof of an unknown outcome: whether that served the call."""
    assert case.fault is not None
    assert error.proof, "an unknown outcome must carry the proof to re-send"
    again, answer = _call(client, error.proof)
    if isinstance(again, PaymentNotConfirmed):
        assert not paid  # re-sending revealed that the payment never happened
        return False
    if isinstance(again, PaymentVerificationFailed):
        # the merchant consumed the proof before the fault: served once, lost
        assert "already used" in again.reason.lower().replace("_", " "), again.reason
        assert case.fault.when == "after" or case.fault.times > 1
        return False
    assert again is None, again
    assert answer is not None and answer.status == 200, answer
    return True
