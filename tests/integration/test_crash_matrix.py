"""Nothing lost when the process dies: a payer process is SIGKILLed at every money-moving
step of every rail, then a fresh start on the same state file finds and finishes it.

Each case runs `tests/integration/crash_payer.py` as its own Python process against the sandbox
(real sockets), paying one resource with `PaymentOptions(state_path=...)` and a budget
of 5 EUR, and kills it at one step (see that script for how). Then this process, with
new options on the same file (what a restarted agent does):

- `unfinished_payments` lists the payment, with the codes that existed when it died;
- `recover_payments` finishes it: delivers the resource where the protocol allows,
  otherwise says why (and what to ask), never paying again;
- the sandbox's money proves it: the EURO account, the chain balances and the merchant
  moved at most once, and the budget reservation was released only when no money moved.

The table these cases prove is in docs/failure-semantics.md ("When the process dies"). A
Solana payer killed after signing, before delivery, is recovered the same way (its own
cases, on a sandbox with a Solana chain).

The matrix and the live cases run on both stores (`store`): a SQLite state file, and a
PostgreSQL database (one per case), where the payer and the recovering process stand for
two machines of a fleet: separate working directories, one database, the dead payer's
lease ended by the database when its connection did.

And the other way round: recovery that runs while the payer is alive, in another process
(a payer waiting on the merchant, or on the chain), leaves its payment alone: the journal
says it is in progress, nothing is re-sent, no reservation is released, and the payer,
let go on, pays exactly once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import socket
import sys
import threading
import time
import types
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from eth_account import Account as EthAccount

from tests.conftest import open_store, register_secrets, state_kinds
from tests.sandboxes import asset_of, evm_options
from tests.waiting import eventually
from x402_client import (
    Budget,
    PaymentOptions,
    payments,
    with_eur_payment,
)
from x402_client._flow import recovery as _recovery
from x402_client._flow.recovery import Recovery
from x402_client._state.shared import state_of
from x402_client._state.sqlite_store import JournalRecord
from x402_eur_sandbox import Account, Price, Sandbox, StandardMerchant
from x402_eur_sandbox._chain_a import EURQ_ASSET_ID

pytestmark = pytest.mark.anyio

CHILD = Path(__file__).with_name("crash_payer.py")
PRICE = Decimal("0.10")
ATOMIC = 100_000  # PRICE in atomic units (10^-6)
BUDGET = Budget("5.00")
REFUNDED = ("Cancelled", "Expired", "Failed")

PRICES = {
    "/paid/euro": Price(PRICE, "euro only", rails=("euro",)),
    "/paid/evm": Price(PRICE, "polygon permit only", rails=("eip155:137",)),
    "/paid/bridge": Price(PRICE, "bridged to chain A only", rails=("ledgera",)),
    "/paid/chain-a": Price(PRICE, "chain A, from the payer's own wallet", rails=("ledgera",)),
}


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


class _Watch:
    """Test-side instruments on the sandbox merchant: it can hold the next paid request
    (where its `resource` fault strikes, before it looks at the proof) until released,
    and it counts the proofs it has judged and the paid resources it served (whether or
    not anyone was still there to read them)."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.armed = False
        self.arrived = threading.Event()
        self.release = threading.Event()
        self.judged = 0
        self.verdicts: list[tuple[bool, str]] = []
        self.served = 0
        faults, gate = sandbox.faults, sandbox.gate
        before, verify, app = faults.before, gate._verify, gate.app

        async def holding_before(endpoint: str, request: Any = None) -> None:
            await before(endpoint, request)
            if endpoint == "resource" and self.armed:
                self.armed = False
                self.arrived.set()
                # released from the test's thread: a thread event, polled
                while not self.release.is_set():  # noqa: ASYNC110
                    await asyncio.sleep(0.002)

        async def counting_verify(*args: Any) -> Any:
            try:
                verdict = await verify(*args)
            finally:
                self.judged += 1
            self.verdicts.append((verdict.valid, verdict.reason))
            return verdict

        async def counting_app(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http" and any(k == b"x-payment" for k, _ in scope["headers"]):
                self.served += 1
            await app(scope, receive, send)

        faults.before = holding_before  # type: ignore[method-assign]
        gate._verify = counting_verify  # type: ignore[method-assign,assignment]
        gate.app = counting_app

    def hold_next(self) -> None:
        self.arrived.clear()
        self.release.clear()
        self.armed = True


class _StandardWatch:
    """The same for the standard (EIP-3009) merchant: it can hold the next paid request
    before verifying it, and counts the payments it verified."""

    def __init__(self, standard: StandardMerchant) -> None:
        self.armed = False
        self.arrived = threading.Event()
        self.release = threading.Event()
        self.verified = 0
        verify = standard._verify

        async def holding_verify(*args: Any) -> Any:
            if self.armed:
                self.armed = False
                self.arrived.set()
                while not self.release.is_set():  # noqa: ASYNC110
                    await asyncio.sleep(0.002)
            self.verified += 1
            return await verify(*args)

        standard._verify = holding_verify  # type: ignore[method-assign]

    def hold_next(self) -> None:
        self.arrived.clear()
        self.release.clear()
        self.armed = True


_WATCHES: dict[int, _Watch] = {}
_STANDARD_WATCHES: dict[int, _StandardWatch] = {}


@pytest.fixture(scope="module")
def crash_sandbox() -> Iterator[Sandbox]:
    with Sandbox.run_in_thread(
        evm=True, chain_a=True, standard=True, bridge_delay=0.5, prices=PRICES
    ) as running:
        _WATCHES[id(running)] = _Watch(running)
        _STANDARD_WATCHES[id(running)] = _StandardWatch(running.standard)
        try:
            yield running
        finally:
            for watch in (_WATCHES.pop(id(running)), _STANDARD_WATCHES.pop(id(running))):
                watch.armed = False
                watch.release.set()


def _watch(sandbox: Sandbox) -> _Watch:
    return _WATCHES[id(sandbox)]


def _served(sandbox: Sandbox, rail: str = "euro") -> int:
    """Paid requests the merchant of `rail` served (the standard merchant's: verified)."""
    if rail == "eip3009":
        return _STANDARD_WATCHES[id(sandbox)].verified
    return _watch(sandbox).served


def _url(sandbox: Sandbox, rail: str) -> str:
    """The resource a payer on `rail` pays for."""
    if rail == "eip3009":
        return sandbox.standard.resource_url("/weather")
    return sandbox.url(f"/paid/{rail}")


# --- the matrix -----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Case:
    rail: str
    step: str
    #: did money move, in the end (after recovery)
    moved: bool
    #: journal fields that must be set when the process died
    codes: tuple[str, ...]
    #: what `recover_payment` says
    recovery: str
    #: words the recovery's reason must contain
    reason: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        return f"{self.rail}-{self.step}"

    @property
    def released(self) -> bool:
        return self.recovery == "failed"


# Steps: `before-call` / `after-call`: around the call that moves money (the payment API;
# on EVM, signing the permit); `wait`: the bridge wait; `proof`: the proof exists and was
# not sent yet; `delivery`: the merchant has the paid request and answers it after the
# payer died; `delivery-held`: the merchant still holds it when the restarted process
# re-sends the proof (and judges the dead payer's request last). On chain A directly,
# `before-call` / `after-call` are around signing the transfer: killed after signing, before
# the proof was journaled or delivered, nothing signed ever left the process.
USED = ("refused the re-sent proof", "already used")

MATRIX = [
    # euro: money moves in the payment call; the payment request code is journaled before
    # it (it is the 402's), so recovery can always ask the merchant with the implied proof.
    Case("euro", "before-call", False, ("payment_request_code",), "pending", ("not confirmed",)),
    Case("euro", "after-call", True, ("payment_request_code",), "delivered"),
    Case(
        "euro",
        "proof",
        True,
        ("payment_request_code", "transaction_code", "proof"),
        "delivered",
    ),
    Case(
        "euro",
        "delivery",
        True,
        ("payment_request_code", "transaction_code", "proof"),
        "unrecoverable",
        USED,
    ),
    Case(
        "euro",
        "delivery-held",
        True,
        ("payment_request_code", "transaction_code", "proof"),
        "delivered",
    ),
    # EVM permit: money moves when the merchant settles the permit; until it was handed
    # over, nothing can move.
    Case("evm", "before-call", False, (), "failed", ("no money moved",)),
    Case("evm", "after-call", False, (), "failed", ("no money moved",)),
    Case("evm", "proof", True, ("proof",), "delivered"),
    Case("evm", "delivery", True, ("proof",), "unrecoverable", USED),
    Case("evm", "delivery-held", True, ("proof",), "delivered"),
    # bridge: money moves in the payment call; its code is noted right after it. Without
    # it, the payment API's list of the account's transactions says whether the EURO left:
    # no payment to the entry's payTo since the record was opened, or exactly one (whose
    # code recovery adopts, to resume the bridge wait).
    Case("bridge", "before-call", False, (), "failed", ("no money moved",)),
    Case("bridge", "after-call", True, (), "delivered"),
    Case("bridge", "wait", True, ("transaction_code",), "delivered"),
    Case(
        "bridge",
        "proof",
        True,
        ("transaction_code", "blockchain_tx_id", "proof"),
        "delivered",
    ),
    Case(
        "bridge",
        "delivery",
        True,
        ("transaction_code", "blockchain_tx_id", "proof"),
        "unrecoverable",
        USED,
    ),
    Case(
        "bridge",
        "delivery-held",
        True,
        ("transaction_code", "blockchain_tx_id", "proof"),
        "delivered",
    ),
    # chain A directly: money moves when the merchant's facilitator submits the signed
    # transfer; the transaction id is journaled with the proof, before it is sent.
    Case("chain-a", "before-call", False, (), "failed", ("no money moved",)),
    Case("chain-a", "after-call", False, (), "failed", ("no money moved",)),
    Case("chain-a", "proof", True, ("blockchain_tx_id", "proof"), "delivered"),
    Case(
        "chain-a",
        "delivery",
        True,
        ("blockchain_tx_id", "proof"),
        "unrecoverable",
        (*USED, "is on chain", "the money moved"),
    ),
    Case("chain-a", "delivery-held", True, ("blockchain_tx_id", "proof"), "delivered"),
    # EIP-3009 (the standard merchant's token): money moves when the merchant settles the
    # signed authorization; killed with the proof made and not sent, recovery sends it.
    Case("eip3009", "proof", True, ("proof",), "delivered"),
]
CODES = ("payment_request_code", "transaction_code", "blockchain_tx_id", "proof")


@dataclasses.dataclass
class Crashed:
    """One payer process killed at one step, and what recovery made of it."""

    case: Case
    account: Account
    #: the state: a SQLite file's path, or a PostgreSQL DSN
    state_path: str
    evm_key: str | None = None
    evm_address: str | None = None
    #: chain A directly: the payer's own wallet (its key, in the chain SDK's form)
    chain_a_key: str | None = None
    chain_a_address: str | None = None
    served_before: int = 0
    merchant_eurq_before: int = 0
    merchant_token_before: int = 0
    journaled: JournalRecord | None = None
    recovery: Recovery | None = None
    after: JournalRecord | None = None
    spent_at_death: int = 0
    spent_after: int = 0
    moved: bool | None = None
    #: `delivery-held`: how the merchant judged the dead payer's request, released last
    held_verdict: tuple[bool, str] | None = None


_RESULTS: dict[str, Crashed] = {}


def _options(sandbox: Sandbox, crashed: Crashed) -> PaymentOptions:
    """What a restarted process builds: the same account and state file."""
    values: dict[str, Any] = {
        "api_key": crashed.account.api_key,
        "from_account": crashed.account.code,
        "api_url": sandbox.payment_api_url,
        "state_path": crashed.state_path,
        "budgets": [BUDGET],
        "confirmation_attempts": 2,
        "confirmation_wait": 0.01,
        "bridge_poll_interval": 0.05,
        "bridge_poll_max_interval": 0.1,
    }
    if crashed.evm_key is not None and crashed.case.rail == "eip3009":
        values["evm"] = {"private_key": crashed.evm_key}
        values["assets"] = [asset_of(sandbox.standard)]
    elif crashed.evm_key is not None:
        values["evm"] = evm_options(sandbox.evm, private_key=crashed.evm_key)
    if crashed.chain_a_key is not None:
        values["chain_a"] = sandbox.chain_a.chain_a_config(private_key=crashed.chain_a_key)
    return PaymentOptions.model_validate(values)


async def _kill_child(sandbox: Sandbox, crashed: Crashed, tmp_path: Path) -> None:
    """Run the payer process until it dies at `crashed.case.step`."""
    case = crashed.case
    config = {
        "rail": case.rail,
        "step": case.step,
        "url": _url(sandbox, case.rail),
        "api_key": crashed.account.api_key,
        "from_account": crashed.account.code,
        "api_url": sandbox.payment_api_url,
        "state_path": crashed.state_path,
        "budget": str(BUDGET.limit),
        "evm_key": crashed.evm_key,
        "asset": dataclasses.asdict(asset_of(sandbox.standard)),
        "rpc_urls": {str(c): sandbox.evm.rpc_url(c) for c in (1, 137)},
    }
    if crashed.chain_a_key is not None:
        config["chain_a"] = sandbox.chain_a.chain_a_config(private_key=crashed.chain_a_key)
    log = tmp_path / "child.log"
    watch = _watch(sandbox)
    in_delivery = case.step.startswith("delivery")
    if in_delivery:
        watch.hold_next()
    with log.open("wb") as out:
        process = await anyio.open_process(
            [sys.executable, str(CHILD), json.dumps(config)],
            stdout=out,
            stderr=out,
            cwd=_machine(tmp_path),
        )
        try:
            with anyio.fail_after(60):
                if in_delivery:
                    # The merchant has the paid request (and holds it): die now.
                    while not watch.arrived.is_set() and process.returncode is None:  # noqa: ASYNC110
                        await anyio.sleep(0.002)
                    if process.returncode is None:
                        process.kill()
                await process.wait()
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
            await process.aclose()
            if process.returncode != -signal.SIGKILL:
                watch.armed = False
                watch.release.set()
    assert process.returncode == -signal.SIGKILL, log.read_text()
    if case.step == "delivery":
        # The merchant goes on without its client: it verifies (consuming the proof, and
        # settling the permit) and serves into a closed connection.
        watch.release.set()
        await eventually(lambda: watch.served > crashed.served_before, "the merchant")


async def _settle_bridge(sandbox: Sandbox, account: Account) -> None:
    """Wait until every bridge transfer of `account` ended (reached chain A or refunded)."""

    def done() -> bool:
        made = [t for t in sandbox.bank.payments_made if t.from_account == account.code]
        return all(t.status != "Processing" for t in made)

    await eventually(done, "the bridge transfers")


async def _money_moved(sandbox: Sandbox, crashed: Crashed) -> bool:
    """The sandbox's balances: at most one payment, and the merchant got exactly it."""
    account = crashed.account
    made = [t for t in sandbox.bank.payments_made if t.from_account == account.code]
    if crashed.case.rail == "evm":
        assert made == []
        assert crashed.evm_address is not None
        evm = sandbox.evm
        spent = 1_000_000 - await evm.token_balance(137, "EURQ", crashed.evm_address)
        received = (
            await evm.token_balance(137, "EURQ", evm.merchant_address)
            - crashed.merchant_token_before
        )
        assert spent in (0, ATOMIC), f"the payer spent {spent} atomic units"
        assert received == spent
        assert await evm.native_balance(137, crashed.evm_address) == 0  # never paid gas
        assert await evm.permit_nonce(137, "EURQ", crashed.evm_address) == (1 if spent else 0)
        return bool(spent == ATOMIC)
    if crashed.case.rail == "eip3009":
        assert made == []
        assert crashed.evm_address is not None
        standard = sandbox.standard
        spent = 1_000_000 - await standard.token_balance(crashed.evm_address)
        received = await standard.token_balance(standard.pay_to) - crashed.merchant_token_before
        assert spent in (0, ATOMIC), f"the payer spent {spent} atomic units"
        assert received == spent
        return bool(spent == ATOMIC)
    if crashed.case.rail == "chain-a":
        assert made == []  # the managed account paid nothing: the wallet did
        chain = sandbox.chain_a
        assert crashed.chain_a_address is not None
        spent = 1_000_000 - chain.asset_balance(crashed.chain_a_address, str(EURQ_ASSET_ID))
        received = (
            chain.asset_balance(chain.merchant_address, str(EURQ_ASSET_ID))
            - crashed.merchant_eurq_before
        )
        assert spent in (0, ATOMIC), f"the wallet spent {spent} atomic units"
        assert received == spent
        return bool(spent == ATOMIC)
    kept = [t for t in made if t.status not in REFUNDED]
    assert len(kept) <= 1, f"EURO moved twice for one intent: {made}"
    assert sandbox.balance(account) == Decimal("10.00") - PRICE * len(kept)
    if crashed.case.rail == "bridge":
        chain = sandbox.chain_a
        eurq = chain.asset_balance(chain.merchant_address, str(EURQ_ASSET_ID))
        assert eurq - crashed.merchant_eurq_before == ATOMIC * len(kept)
    else:
        assert all(t.to_type == "PaymentRequestCode" for t in made)
    return bool(kept)


def _machine(tmp_path: Path) -> Path:
    """The payer's own working directory: it stands for a machine of its own."""
    directory = tmp_path / "payer-machine"
    directory.mkdir(exist_ok=True)
    return directory


def _state(request: pytest.FixtureRequest, store: str, tmp_path: Path) -> str:
    """A new state on `store`: a file in `tmp_path`, or a new database of this worker's
    PostgreSQL cluster."""
    if store == "sqlite":
        return str(tmp_path / "state.sqlite3")
    return str(request.getfixturevalue("postgres_cluster").database())


async def _owners_gone(state: str) -> None:
    """Wait until no payment of `state` is owned by a live process: the database ends a
    killed payer's lease when it sees its connection gone, a moment after the kill."""
    with open_store(state) as store:

        async def gone() -> bool:
            return not any(r.in_progress for r in await store.unfinished())

        await eventually(gone, "the killed payer's lease to end")


async def _crash_and_recover(
    sandbox: Sandbox,
    case: Case,
    tmp_path: Path,
    store: str = "sqlite",
    request: pytest.FixtureRequest | None = None,
) -> Crashed:
    """Kill a payer at `case`, then recover as a restarted process would (cached)."""
    if (store, case.id) in _RESULTS:
        return _RESULTS[store, case.id]
    assert request is not None or store == "sqlite"
    state = str(tmp_path / "state.sqlite3") if request is None else _state(request, store, tmp_path)
    crashed = Crashed(case, sandbox.bank.open_account("10.00"), state)
    crashed.served_before = _served(sandbox, case.rail)
    if case.rail == "eip3009":
        wallet = EthAccount.create()
        crashed.evm_key = "0x" + bytes(wallet.key).hex()
        crashed.evm_address = str(wallet.address)
        standard = sandbox.standard
        await standard.fund(crashed.evm_address, "1")
        crashed.merchant_token_before = await standard.token_balance(standard.pay_to)
    if case.rail == "evm":
        wallet = EthAccount.create()
        crashed.evm_key = "0x" + bytes(wallet.key).hex()
        crashed.evm_address = str(wallet.address)
        await sandbox.evm.fund(137, "EURQ", crashed.evm_address, "1")
        crashed.merchant_token_before = await sandbox.evm.token_balance(
            137, "EURQ", sandbox.evm.merchant_address
        )
    if case.rail in ("bridge", "chain-a"):
        chain = sandbox.chain_a
        crashed.merchant_eurq_before = chain.asset_balance(
            chain.merchant_address, str(EURQ_ASSET_ID)
        )
    if case.rail == "chain-a":
        wallet = sandbox.chain_a.direct.new_wallet(eurq=1_000_000)
        crashed.chain_a_key, crashed.chain_a_address = wallet.private_key, wallet.address
        register_secrets(wallet.private_key)

    await _kill_child(sandbox, crashed, tmp_path)
    if case.rail == "bridge":
        await _settle_bridge(sandbox, crashed.account)
    await _owners_gone(crashed.state_path)

    options = _options(sandbox, crashed)
    journal = state_of(options).journal
    assert journal is not None
    try:
        unfinished = await payments(options).unfinished()
        assert len(unfinished) == 1, unfinished
        crashed.journaled = unfinished[0]
        crashed.spent_at_death = await journal.spent(BUDGET.key, None)
        async with with_eur_payment(httpx.AsyncClient(timeout=30), options) as client:
            recoveries = await payments(client).recover_all()
        assert len(recoveries) == 1, recoveries
        crashed.recovery = recoveries[0]
        if case.step == "delivery-held":
            # Recovery re-sent the proof while the merchant still held the dead payer's
            # request: now the merchant judges that one too (and must refuse it).
            watch = _watch(sandbox)
            judged = watch.judged
            watch.release.set()
            await eventually(lambda: watch.judged > judged, "the held request")
            crashed.held_verdict = watch.verdicts[-1]
        if case.rail == "bridge":
            await _settle_bridge(sandbox, crashed.account)
        crashed.after = await journal.get(crashed.journaled.id)
        crashed.spent_after = await journal.spent(BUDGET.key, None)
    finally:
        state_of(options).close()
    crashed.moved = await _money_moved(sandbox, crashed)
    _RESULTS[store, case.id] = crashed
    return crashed


@pytest.mark.parametrize("store", state_kinds())
@pytest.mark.parametrize("case", MATRIX, ids=[c.id for c in MATRIX])
async def test_a_payer_killed_at_each_step_is_recovered_without_paying_twice(
    crash_sandbox: Sandbox, case: Case, store: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    sandbox = crash_sandbox
    crashed = await _crash_and_recover(sandbox, case, tmp_path, store, request)
    record, recovery, after = crashed.journaled, crashed.recovery, crashed.after
    assert record is not None and recovery is not None and after is not None

    # What the dead process left: one pending record with exactly the codes that existed.
    assert record.outcome == "pending" and not record.delivered
    assert (record.rail, record.amount) == (
        {"evm": "evm-permit"}.get(case.rail, case.rail),
        PRICE,
    )
    for name in CODES:
        value = getattr(record, name)
        assert (value is not None) is (name in case.codes), (name, value)
    assert record.request_url == _url(sandbox, case.rail)
    # the reservation the dead process held is still held
    assert crashed.spent_at_death == ATOMIC

    # The codes are the provider's: the journal names the payment that was made.
    made = [t for t in sandbox.bank.payments_made if t.from_account == crashed.account.code]
    if record.transaction_code is not None:
        assert [t.code for t in made] == [record.transaction_code]
    if record.payment_request_code is not None and made:
        assert made[0].payment_request_code == record.payment_request_code

    # What recovery did.
    assert recovery.status == case.recovery, recovery.reason
    for words in case.reason:
        assert words in recovery.reason, recovery.reason
    if recovery.status == "delivered":
        assert recovery.response is not None and recovery.response.status_code == 200
        served_json = recovery.response.json()
        assert served_json["paid"] is True
        assert served_json["resource"] == ("/weather" if case.rail == "eip3009" else case.rail)
        assert (after.outcome, after.delivered) == ("paid", True)
        assert after.unrecoverable is None
    elif recovery.status == "failed":
        assert (after.outcome, after.delivered) == ("failed", False)
    elif recovery.status == "unrecoverable":
        assert after.unrecoverable is not None and not after.delivered
        # the reason carries the codes a person needs to claim the payment
        for code in (record.payment_request_code, record.transaction_code):
            if code is not None:
                assert code in after.unrecoverable
    else:  # pending: not decidable yet, left for a later run
        assert after.unrecoverable is None and after.outcome == "pending"

    # The money: moved at most once (checked by `_money_moved`), exactly when the case
    # says; the merchant served at most once.
    assert crashed.moved is case.moved
    served = _served(sandbox, case.rail) - crashed.served_before
    assert served == (1 if recovery.status == "delivered" or case.step == "delivery" else 0)
    if case.step == "delivery-held":
        # the dead payer's own request, judged after the re-sent proof, was refused
        assert crashed.held_verdict is not None
        valid, reason = crashed.held_verdict
        assert not valid and "already used" in reason
    # The reservation was given back only when recovery knew that no money moved.
    assert crashed.spent_after == (0 if case.released else ATOMIC)

    # A second recovery run (another restart) moves nothing and changes nothing.
    options = _options(sandbox, crashed)
    try:
        async with with_eur_payment(httpx.AsyncClient(timeout=30), options) as client:
            again = await payments(client).recover_all()
        assert [(r.record.id, r.status) for r in again] == (
            [(record.id, "pending")] if recovery.status == "pending" else []
        )
    finally:
        state_of(options).close()
    assert await _money_moved(sandbox, crashed) is case.moved
    assert _served(sandbox, case.rail) - crashed.served_before == served


# --- the outcome a recovered record is left with ---------------------------------------------

#: The outcomes a record may have once recovery has looked at it. `pending` means "a live
#: process is paying": after the payer died, only an undecidable record may keep it.
SETTLED_OUTCOMES = {
    "euro-before-call": {"pending", "unknown"},  # recovery: not decidable yet
    "euro-after-call": {"paid"},
    "euro-proof": {"paid"},
    "euro-delivery": {"paid"},  # the proof was consumed: the money moved
    "euro-delivery-held": {"paid"},
    "evm-before-call": {"failed"},
    "evm-after-call": {"failed"},
    "evm-proof": {"paid"},
    "evm-delivery": {"paid", "unknown"},  # the merchant settled the permit
    "evm-delivery-held": {"paid"},
    "bridge-before-call": {"failed"},  # the payment API lists no payment
    "bridge-after-call": {"paid"},  # it lists the one payment: resumed and delivered
    "bridge-wait": {"paid"},
    "bridge-proof": {"paid"},
    "bridge-delivery": {"paid"},  # the proof exists only once the EURO left
    "bridge-delivery-held": {"paid"},
    "chain-a-before-call": {"failed"},
    "chain-a-after-call": {"failed"},  # signed, never handed over
    "chain-a-proof": {"paid"},
    "chain-a-delivery": {"paid"},  # the chain shows the transfer
    "chain-a-delivery-held": {"paid"},
    "eip3009-proof": {"paid"},
}


def _outcome_cases() -> list[Any]:
    cases = []
    for case in MATRIX:
        cases.append(pytest.param(case, id=case.id))
    return cases


@pytest.mark.parametrize("store", state_kinds())
@pytest.mark.parametrize("case", _outcome_cases())
async def test_a_recovered_record_says_whether_money_moved(
    crash_sandbox: Sandbox, case: Case, store: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    crashed = await _crash_and_recover(crash_sandbox, case, tmp_path, store, request)
    assert crashed.after is not None
    assert crashed.after.outcome in SETTLED_OUTCOMES[case.id], crashed.after.outcome


# --- the reservation, exactly when no money moved ---------------------------------------------


def _reservation_cases() -> list[Any]:
    cases = []
    for case in MATRIX:
        if case.recovery == "pending":
            continue  # not decidable yet: see the expired-request test below
        cases.append(pytest.param(case, id=case.id))
    return cases


@pytest.mark.parametrize("store", state_kinds())
@pytest.mark.parametrize("case", _reservation_cases())
async def test_the_reservation_is_released_exactly_when_no_money_moved(
    crash_sandbox: Sandbox, case: Case, store: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    crashed = await _crash_and_recover(crash_sandbox, case, tmp_path, store, request)
    assert (crashed.spent_after == 0) is (not crashed.moved)


# --- the euro transaction code ----------------------------------------------------------------


async def test_the_euro_transaction_code_is_journaled_before_the_proof_is_sent(
    crash_sandbox: Sandbox, tmp_path: Path
) -> None:
    # Killed the instant the call returns, a process can journal nothing more (the
    # payment request code suffices to recover); from then on the code is journaled.
    case = next(c for c in MATRIX if c.id == "euro-proof")
    crashed = await _crash_and_recover(crash_sandbox, case, tmp_path)
    (made,) = payments_of(crash_sandbox, crashed.account)
    assert crashed.journaled is not None and crashed.after is not None
    assert crashed.journaled.transaction_code == made.code
    assert crashed.after.transaction_code == made.code


# --- a euro payment request that expired unpaid ----------------------------------------------


async def test_euro_killed_before_paying_is_failed_once_the_request_expired(
    crash_sandbox: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sandbox = crash_sandbox
    case = MATRIX[0]
    assert case.id == "euro-before-call"
    crashed = Crashed(case, sandbox.bank.open_account("10.00"), str(tmp_path / "state.sqlite3"))
    crashed.served_before = _served(sandbox)
    await _kill_child(sandbox, crashed, tmp_path)
    options = _options(sandbox, crashed)
    try:
        (record,) = await payments(options).unfinished()
        assert record.payment_request_code is not None
        # Later: the request expired unpaid, and recovery's clock is past its expiry.
        request = sandbox.bank.payment_requests[record.payment_request_code]
        request.expires_at = time.time() - 1
        later = time.time() + 3600
        monkeypatch.setattr(_recovery, "time", types.SimpleNamespace(time=lambda: later))
        async with with_eur_payment(httpx.AsyncClient(timeout=30), options) as client:
            (recovery,) = await payments(client).recover_all()
        journal = state_of(options).journal
        assert journal is not None
        after = await journal.get(record.id)
        spent = await journal.spent(BUDGET.key, None)
    finally:
        state_of(options).close()
    assert payments_of(sandbox, crashed.account) == []
    assert after is not None
    assert recovery.status == "failed", recovery.reason
    assert (after.outcome, after.unrecoverable) == ("failed", None)
    assert spent == 0


def payments_of(sandbox: Sandbox, account: Account) -> list[Any]:
    return [t for t in sandbox.bank.payments_made if t.from_account == account.code]


# --- a bridge payment with no transaction code that the payment API cannot settle ------------


async def _bridge_killed(sandbox: Sandbox, step: str, tmp_path: Path) -> Crashed:
    """A bridge payer killed at `step` (before or after its payment call), its transfer
    (if any) settled."""
    case = next(c for c in MATRIX if c.id == f"bridge-{step}")
    crashed = Crashed(case, sandbox.bank.open_account("10.00"), str(tmp_path / "state.sqlite3"))
    crashed.served_before = _served(sandbox)
    await _kill_child(sandbox, crashed, tmp_path)
    await _settle_bridge(sandbox, crashed.account)
    return crashed


async def _recover_once(options: PaymentOptions) -> tuple[Recovery, JournalRecord, int]:
    """One recovery run: what it said, the record it left and the budget still reserved."""
    try:
        async with with_eur_payment(httpx.AsyncClient(timeout=30), options) as client:
            (recovery,) = await payments(client).recover_all()
        journal = state_of(options).journal
        assert journal is not None
        after = await journal.get(recovery.record.id)
        spent = await journal.spent(BUDGET.key, None)
    finally:
        state_of(options).close()
    assert after is not None
    return recovery, after, spent


async def test_bridge_killed_in_the_call_stays_pending_when_the_listed_payments_are_ambiguous(
    crash_sandbox: Sandbox, tmp_path: Path
) -> None:
    sandbox = crash_sandbox
    crashed = await _bridge_killed(sandbox, "after-call", tmp_path)
    (made,) = payments_of(sandbox, crashed.account)
    # Another payment of the same amount to the same address from the account, made since
    # (by hand, say): the list cannot tell which one is the journaled payment's.
    other = sandbox.bank.pay(
        crashed.account,
        payment_from=crashed.account.code,
        to_type="BlockchainAddress",
        payment_to=made.to,
        amount=PRICE,
    )
    await _settle_bridge(sandbox, crashed.account)

    recovery, after, spent = await _recover_once(_options(sandbox, crashed))

    assert recovery.status == "pending", recovery.reason
    assert "more than one payment" in recovery.reason
    assert made.code in recovery.reason and other.code in recovery.reason
    assert (after.outcome, after.transaction_code, after.unrecoverable) == ("pending", None, None)
    assert spent == ATOMIC  # nothing released
    assert payments_of(sandbox, crashed.account) == [made, other]  # nothing paid
    assert _served(sandbox) == crashed.served_before


async def test_bridge_killed_before_the_call_stays_pending_while_the_payment_api_is_unreachable(
    crash_sandbox: Sandbox, tmp_path: Path
) -> None:
    sandbox = crash_sandbox
    crashed = await _bridge_killed(sandbox, "before-call", tmp_path)
    with socket.socket() as unused:  # a loopback port nothing listens on
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    unreachable = _options(sandbox, crashed).model_copy(
        update={"api_url": f"http://127.0.0.1:{port}"}
    )

    recovery, after, spent = await _recover_once(unreachable)

    assert recovery.status == "pending", recovery.reason
    assert "did not list" in recovery.reason and "may or may not" in recovery.reason
    assert (after.outcome, after.unrecoverable) == ("pending", None)
    assert spent == ATOMIC  # nothing released
    assert payments_of(sandbox, crashed.account) == []  # nothing paid

    # Once the payment API answers, a later run finds that no money moved.
    recovery, after, spent = await _recover_once(_options(sandbox, crashed))
    assert recovery.status == "failed", recovery.reason
    assert "no money moved" in recovery.reason
    assert (after.outcome, after.delivered) == ("failed", False)
    assert spent == 0
    assert payments_of(sandbox, crashed.account) == []
    assert _served(sandbox) == crashed.served_before


# --- recovery while the payer is alive, in another process ------------------------------------


def _live_cases() -> list[Any]:
    # euro and EIP-3009: the merchant holds the paid request (the payer waits for its
    # answer); bridge: the payer waits for the transfer to reach the chain.
    return [
        pytest.param("euro", "live", id="euro-merchant-holds"),
        pytest.param("eip3009", "live", id="eip3009-merchant-holds"),
        pytest.param("bridge", "live-wait", id="bridge-chain-wait"),
    ]


async def _merchant_side(sandbox: Sandbox, rail: str, crashed: Crashed) -> tuple[int, int]:
    """(paid requests the merchant went on with past a hold, the merchant's tokens)."""
    if rail == "eip3009":
        standard = sandbox.standard
        return _STANDARD_WATCHES[id(sandbox)].verified, await standard.token_balance(
            standard.pay_to
        )
    if rail == "bridge":
        chain = sandbox.chain_a
        return _served(sandbox), chain.asset_balance(chain.merchant_address, str(EURQ_ASSET_ID))
    return _served(sandbox), 0


@pytest.mark.parametrize("store", state_kinds())
@pytest.mark.parametrize(("rail", "step"), _live_cases())
async def test_recovery_leaves_a_payment_a_live_payer_is_making_alone(
    crash_sandbox: Sandbox,
    rail: str,
    step: str,
    store: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    sandbox = crash_sandbox
    case = Case(rail, step, True, (), "in_progress")
    state = _state(request, store, tmp_path)
    crashed = Crashed(case, sandbox.bank.open_account("10.00"), state)
    ready, release = tmp_path / "waiting", tmp_path / "go-on"
    config: dict[str, Any] = {
        "rail": rail,
        "step": step,
        "url": sandbox.url(f"/paid/{rail}"),
        "api_key": crashed.account.api_key,
        "from_account": crashed.account.code,
        "api_url": sandbox.payment_api_url,
        "state_path": crashed.state_path,
        "budget": str(BUDGET.limit),
        "ready": str(ready),
        "release": str(release),
    }
    standard = sandbox.standard
    if rail == "eip3009":
        wallet = EthAccount.create()
        crashed.evm_key = config["evm_key"] = "0x" + bytes(wallet.key).hex()
        crashed.evm_address = str(wallet.address)
        await standard.fund(crashed.evm_address, "1")
        config["asset"] = dataclasses.asdict(asset_of(standard))
        config["url"] = standard.resource_url("/weather")
        assert standard.price_atomic("/weather") == ATOMIC
    watch, standard_watch = _watch(sandbox), _STANDARD_WATCHES[id(sandbox)]
    held = {"euro": watch, "eip3009": standard_watch}.get(rail)
    seen_before, merchant_before = await _merchant_side(sandbox, rail, crashed)
    settlements_before = len(standard.settlements)

    def holding() -> bool:
        return ready.exists() if held is None else held.arrived.is_set()

    log = tmp_path / "payer.log"
    if held is not None:
        held.hold_next()
    with log.open("wb") as out:
        process = await anyio.open_process(
            [sys.executable, str(CHILD), json.dumps(config)],
            stdout=out,
            stderr=out,
            cwd=_machine(tmp_path),
        )
        try:
            with anyio.fail_after(60):
                while not holding():
                    assert process.returncode is None, log.read_text()
                    await anyio.sleep(0.005)

            # The payer is alive and waiting. Recovery runs here, on the same state file.
            options = _options(sandbox, crashed)
            journal = state_of(options).journal
            assert journal is not None
            try:
                (record,) = await payments(options).unfinished()
                assert (record.outcome, record.in_progress) == ("pending", True)
                assert record.transaction_code if rail == "bridge" else record.proof
                async with with_eur_payment(httpx.AsyncClient(timeout=30), options) as client:
                    recoveries = await payments(client).recover_all()
                assert [(r.record.id, r.status) for r in recoveries] == [
                    (record.id, "in_progress")
                ], [r.reason for r in recoveries]
                if rail == "euro":
                    # The command line says so too, and pays nothing.
                    resumed = await anyio.run_process(
                        [
                            sys.executable,
                            "-m",
                            "x402_client.cli",
                            "resume",
                            record.id,
                            "--state",
                            crashed.state_path,
                        ],
                        check=False,
                        env={
                            **os.environ,
                            "X402_EUR_API_KEY": crashed.account.api_key,
                            "X402_EUR_ACCOUNT": crashed.account.code,
                            "X402_EUR_API_URL": sandbox.payment_api_url,
                        },
                    )
                    stderr = resumed.stderr.decode()
                    assert resumed.returncode == 1, stderr
                    assert "in_progress" in stderr and "running process" in stderr
                    assert resumed.stdout == b""
                # Nothing re-sent, nothing resumed, no reservation released.
                seen, _ = await _merchant_side(sandbox, rail, crashed)
                assert seen == seen_before
                assert await journal.spent(BUDGET.key, None) == ATOMIC
                after = await journal.get(record.id)
                assert after is not None
                assert (after.outcome, after.unrecoverable, after.in_progress) == (
                    "pending",
                    None,
                    True,
                )
            finally:
                state_of(options).close()

            # Let the payer go on: it finishes its one payment.
            if held is not None:
                held.release.set()
            release.touch()
            with anyio.fail_after(60):
                await process.wait()
        finally:
            if held is not None:
                held.release.set()
            release.touch()
            if process.returncode is None:
                process.kill()
                await process.wait()
            await process.aclose()
    output = log.read_text()
    assert process.returncode == 0 and "served 200" in output, output

    if rail == "bridge":
        await _settle_bridge(sandbox, crashed.account)

    # Exactly one payment, delivered once; the journal says so.
    with open_store(crashed.state_path) as store:
        (done,) = await store.payments()
        assert (done.outcome, done.delivered, done.in_progress) == ("paid", True, False)
        assert await store.unfinished() == []
        assert await store.spent(BUDGET.key, None) == ATOMIC
    seen, merchant_after = await _merchant_side(sandbox, rail, crashed)
    assert seen == seen_before + 1
    made = payments_of(sandbox, crashed.account)
    if rail == "eip3009":
        assert made == []
        assert crashed.evm_address is not None
        assert await standard.token_balance(crashed.evm_address) == 1_000_000 - ATOMIC
        assert merchant_after - merchant_before == ATOMIC
        assert len(standard.settlements) == settlements_before + 1
        return
    if rail == "bridge":
        assert merchant_after - merchant_before == ATOMIC
    assert [t.status for t in made if t.status in REFUNDED] == []
    assert len(made) == 1
    assert sandbox.balance(crashed.account) == Decimal("10.00") - PRICE


# --- Solana: killed after signing, before delivery ------------------------------------------


@pytest.fixture(scope="module")
def solana_crash_sandbox() -> Iterator[Sandbox]:
    with Sandbox.run_in_thread(svm=True) as running:
        assert running.standard is not None and running.standard.solana is not None
        register_secrets(running.standard.solana.payer_secret_key)
        yield running


@pytest.mark.parametrize(
    ("step", "expire", "recovered", "words"),
    [
        ("after-call", False, "failed", "no proof was ever handed over"),
        ("proof", False, "delivered", "the resource was delivered"),
        ("proof", True, "failed", "its blockhash is dead: it never will be"),
    ],
    ids=["signed-not-journaled", "signed-journaled-not-delivered", "blockhash-died-meanwhile"],
)
async def test_solana_killed_after_signing_before_delivery_never_pays_twice(
    solana_crash_sandbox: Sandbox, tmp_path: Path, step: str, expire: bool, recovered: str,
    words: str,
) -> None:  # fmt: skip
    sandbox = solana_crash_sandbox
    assert sandbox.standard is not None
    routes = sandbox.standard.solana
    assert routes is not None and routes.node is not None and routes.facilitator is not None
    account = sandbox.bank.open_account("1.00")
    state_path = tmp_path / "state.sqlite3"
    before = routes.token_balance(routes.payer_address, "sEURC")
    settled = len(routes.facilitator.settlements)
    config = {
        "rail": "svm",
        "step": step,
        "url": sandbox.standard.url + "/solana/eurc",
        "api_key": account.api_key,
        "from_account": account.code,
        "api_url": sandbox.payment_api_url,
        "state_path": str(state_path),
        "budget": str(BUDGET.limit),
        "svm": routes.svm_config(),
        "svm_assets": routes.asset_configs(),
    }
    log = tmp_path / "child.log"
    with log.open("wb") as out:
        process = await anyio.open_process(
            [sys.executable, str(CHILD), json.dumps(config)], stdout=out, stderr=out
        )
        try:
            with anyio.fail_after(60):
                await process.wait()
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
            await process.aclose()
    assert process.returncode == -signal.SIGKILL, log.read_text()
    assert routes.token_balance(routes.payer_address, "sEURC") == before  # nothing moved yet

    options = PaymentOptions(
        svm=routes.svm_config(),
        assets=routes.asset_configs(),
        state_path=state_path,
        budgets=[BUDGET],
    )
    try:
        (journaled,) = await payments(options).unfinished()
        assert (journaled.rail, journaled.proof is not None) == ("svm", step == "proof")
        if expire:
            routes.node.expire_blockhash()
        recovery, after, spent = await _recover_once(options)
    finally:
        state_of(options).close()
    assert recovery.status == recovered, recovery.reason
    assert words in recovery.reason
    moved = recovered == "delivered"
    assert len(routes.facilitator.settlements) == settled + int(moved)
    assert routes.token_balance(routes.payer_address, "sEURC") == before - 50_000 * int(moved)
    assert spent == (50_000 if moved else 0)  # the reservation released exactly when nothing moved
    assert (after.outcome, after.delivered) == (("paid", True) if moved else ("failed", False))
