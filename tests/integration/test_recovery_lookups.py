"""Recovery voids a payment only on a definite answer.

An indexer, node or payment API that answers an error, a 429, nothing in time, a cut
connection, a page that is not its own or a body it cannot stand behind leaves the
payment `pending`: the reason says who did not answer and how, the budget reservation is
kept, nothing is paid. Once the party answers properly, the next recovery run finishes
the payment by what the chain or the payment API then says.

Over real sockets against the sandbox: its chain-A node and indexer and its payment API,
with faults armed on them (`x402_eur_sandbox.Fault`, including `kind="answer"`: a status
and body that are not the service's own) and an indexer that lags the chain
(`ChainALedger.indexer_lag`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import register_secrets
from x402_client import (
    Budget,
    ChainAOptions,
    PaymentOptions,
    PaymentOutcomeUnknown,
    payments,
    with_eur_payment,
)
from x402_client._flow.recovery import Recovery
from x402_client._state.shared import state_of
from x402_client._state.sqlite_store import JournalRecord
from x402_eur_sandbox import Account, Fault, Price, Sandbox
from x402_eur_sandbox._chain_a import ChainASandbox

pytestmark = pytest.mark.anyio

PRICES = {"/weather": Price(Decimal("0.10"), "Weather on chain A", rails=("ledgera",))}
ATOMIC = 100_000  # the price in atomic units
BUDGET = Budget("5.00")
#: Rounds the chain moves on after the payment: well past a transfer's validity window.
LATER = 500
#: A lag that keeps the indexer below every round of the payment.
LAG = LATER + 100
#: The node or indexer timeout (seconds) while a fault holds the answer back.
SHORT = 1.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with Sandbox.run_in_thread(chain_a=True, bridge_delay=0.2, prices=PRICES) as running:
        yield running


@pytest.fixture
def chain(sandbox: Sandbox) -> Iterator[ChainASandbox]:
    part = sandbox.chain_a
    assert isinstance(part, ChainASandbox)
    yield part
    sandbox.faults.clear()
    part.ledger.indexer_lag = 0


def _garbage(status: int = 200) -> Fault:
    return Fault(kind="answer", status=status, body=b"<html><body>502 Bad Gateway</body></html>")


def _answer(body: bytes) -> Fault:
    return Fault(kind="answer", status=200, body=body)


#: Faults every reader meets alike: (fault, what the reason says), by id. Each test arms
#: a copy (a fault counts down the calls it strikes).
_COMMON = {
    "503": (Fault(kind="status", status=503), "answered 503"),
    "500": (Fault(kind="status", status=500), "answered 500"),
    "429": (Fault(kind="status", status=429), "answered 429"),
    "timeout": (Fault(kind="timeout", delay=60.0), "did not answer"),
    "dropped": (Fault(kind="drop"), "did not answer (RemoteProtocolError)"),
}


def _cases(**more: tuple[Fault | None, str]) -> list[Any]:
    table = {**_COMMON, **more}
    return [pytest.param(fault, said, id=name) for name, (fault, said) in table.items()]


async def _recover(options: PaymentOptions) -> tuple[Recovery, JournalRecord, int]:
    """One recovery run on a fresh start: what it said, the record it left and the budget
    still reserved."""
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


async def _left_unfinished(sandbox: Sandbox, options: PaymentOptions) -> JournalRecord:
    """Pay `/weather` with a fault armed that leaves the outcome unknown; the record."""
    try:
        async with with_eur_payment(httpx.AsyncClient(timeout=30), options) as client:
            with pytest.raises(PaymentOutcomeUnknown):
                await client.get(sandbox.url("/weather"))
        journal = state_of(options).journal
        assert journal is not None
        (record,) = await journal.unfinished()
        assert await journal.spent(BUDGET.key, None) == ATOMIC
    finally:
        state_of(options).close()
    sandbox.faults.clear()
    return record


# --- chain A, paid from the user's own wallet -----------------------------------------------


def _direct_options(chain: ChainASandbox, tmp_path: Path, **chain_a: Any) -> PaymentOptions:
    wallet = chain.direct.new_wallet(eurq=1_000_000, usdq=1_000_000)
    register_secrets(wallet.private_key)
    return PaymentOptions.model_validate(
        {
            "chain_a": chain.chain_a_config(private_key=wallet.private_key, **chain_a),
            "state_path": tmp_path / "state.sqlite3",
            "budgets": [BUDGET],
            "merchant_error_retries": 0,
        }
    )


def _with_timeout(options: PaymentOptions, fault: Fault | None) -> PaymentOptions:
    """The options of a recovery run: a short node and indexer timeout when the fault
    holds the answer back (the same journal and budgets)."""
    if fault is None or fault.kind != "timeout":
        return options.model_copy()
    assert options.chain_a is not None
    chain_a = options.chain_a.model_copy(update={"timeout": SHORT})
    return options.model_copy(update={"chain_a": chain_a})


async def _direct_payment(
    sandbox: Sandbox, chain: ChainASandbox, tmp_path: Path, *, settled: bool
) -> tuple[PaymentOptions, JournalRecord]:
    """A direct chain-A payment left unfinished: the merchant settled the transfer and then
    answered 503 (`settled`), or answered 503 without settling it; then the chain moves
    past the transfer's last valid round."""
    options = _direct_options(chain, tmp_path)
    when = "after" if settled else "before"
    sandbox.faults.arm("resource", Fault(kind="status", status=503, when=when))
    record = await _left_unfinished(sandbox, options)
    assert record.blockchain_tx_id is not None and record.proof is not None
    assert (chain.ledger.transaction(record.blockchain_tx_id) is not None) is settled
    chain.ledger.current_round += LATER
    return options, record


@pytest.mark.parametrize(
    ("fault", "said"),
    _cases(
        not_json=(_garbage(), "answered 200 without a JSON body"),
        no_confirmed_round=(
            _answer(b'{"current-round": 1, "transaction": {"tx-type": "axfer"}}'),
            "without a readable confirmed-round",
        ),
        proxy_404=(_garbage(404), "answered 404 without a JSON body of its own"),
        lagging=(None, "has indexed only up to round"),
    ),
)
async def test_a_settled_transfer_stays_pending_while_the_indexer_gives_no_definite_answer(
    sandbox: Sandbox, chain: ChainASandbox, tmp_path: Path, fault: Fault | None, said: str
) -> None:
    options, record = await _direct_payment(sandbox, chain, tmp_path, settled=True)
    if fault is None:
        chain.ledger.indexer_lag = LAG
    else:
        sandbox.faults.arm("indexer", dataclasses.replace(fault))

    recovery, after, spent = await _recover(_with_timeout(options, fault))

    assert recovery.status == "pending", recovery.reason
    assert said in recovery.reason and "nothing was released" in recovery.reason
    assert "no money moved" not in recovery.reason
    assert (after.outcome, after.delivered, after.unrecoverable) == ("unknown", False, None)
    assert spent == ATOMIC

    # The indexer answers properly again: the transfer is on chain, the money moved.
    sandbox.faults.clear()
    chain.ledger.indexer_lag = 0
    recovery, after, spent = await _recover(options.model_copy())
    assert recovery.status == "unrecoverable", recovery.reason
    assert f"transaction {record.blockchain_tx_id} is on chain" in recovery.reason
    assert (after.outcome, after.delivered) == ("paid", False)
    assert spent == ATOMIC


@pytest.mark.parametrize(
    ("fault", "said"),
    _cases(
        not_json=(_garbage(), "answered 200 without a JSON body"),
        no_round=(_answer(b'{"last-round": "soon"}'), "without a readable last-round"),
        yes_round=(_answer(b'{"last-round": true}'), "without a readable last-round"),
        lagging_indexer=(None, "has indexed only up to round"),
    ),
)
async def test_an_expired_transfer_stays_pending_until_the_node_and_indexer_answer_definitely(
    sandbox: Sandbox, chain: ChainASandbox, tmp_path: Path, fault: Fault | None, said: str
) -> None:
    options, record = await _direct_payment(sandbox, chain, tmp_path, settled=False)
    if fault is None:
        chain.ledger.indexer_lag = LAG
    else:
        sandbox.faults.arm("algod", dataclasses.replace(fault))

    recovery, after, spent = await _recover(_with_timeout(options, fault))

    assert recovery.status == "pending", recovery.reason
    assert said in recovery.reason and "nothing was released" in recovery.reason
    assert (after.outcome, after.unrecoverable) == ("unknown", None)
    assert spent == ATOMIC

    # Both answer properly: the window passed unconfirmed, nothing moved.
    sandbox.faults.clear()
    chain.ledger.indexer_lag = 0
    recovery, after, spent = await _recover(options.model_copy())
    assert recovery.status == "failed", recovery.reason
    assert "last valid round" in recovery.reason and "no money moved" in recovery.reason
    assert after.outcome == "failed"
    assert spent == 0
    assert chain.ledger.transaction(record.blockchain_tx_id or "") is None


NODE_TOKEN = "algod_token_for_the_node_only_5e1f"
register_secrets(NODE_TOKEN)


def _recording(seen: list[tuple[str, dict[str, str]]]) -> Any:
    """A chain-A node and indexer in one ASGI app that records who was asked what, with
    which headers: the node at round 7, the indexer at round 7 and knowing no transaction."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        headers = {name.decode().lower(): value.decode() for name, value in scope["headers"]}
        seen.append((scope["path"], headers))
        status, body = 200, b'{"round": 7, "last-round": 7}'
        if scope["path"].startswith("/v2/transactions/"):
            status, body = 404, b'{"message": "no transaction found"}'
        headers_out = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": status, "headers": headers_out})
        await send({"type": "http.response.body", "body": body})

    return app


async def test_the_indexer_is_asked_without_the_node_token(
    sandbox: Sandbox, chain: ChainASandbox, tmp_path: Path, serve: Any
) -> None:
    """The node's token is for the node: the indexer, another origin, never receives it."""
    from x402_client._rails.chain_a import lookup

    _, record = await _direct_payment(sandbox, chain, tmp_path, settled=False)
    seen: list[tuple[str, dict[str, str]]] = []
    node_url, indexer_url = await serve(_recording(seen)), await serve(_recording(seen))
    wallet = chain.direct.new_wallet(eurq=0, usdq=0)
    options = ChainAOptions(
        private_key=wallet.private_key,
        algod_url=node_url,
        algod_token=NODE_TOKEN,
        indexer_url=indexer_url,
    )
    assert record.proof is not None
    found = await lookup(options, record.proof)
    assert found.status == "pending", found.detail  # the node at round 7: still valid
    for path, headers in seen:
        if path == "/v2/status":
            assert headers["x-algo-api-token"] == NODE_TOKEN
        else:
            assert NODE_TOKEN not in str(headers), path
    paths = {path for path, _ in seen}
    assert paths == {"/health", f"/v2/transactions/{record.blockchain_tx_id}", "/v2/status"}


# --- the bridge: a payment the journal holds no code for ------------------------------------


def _bridge_options(sandbox: Sandbox, account: Account, tmp_path: Path) -> PaymentOptions:
    return PaymentOptions.model_validate(
        {
            "api_key": account.api_key,
            "from_account": account.code,
            "api_url": sandbox.payment_api_url,
            "state_path": tmp_path / "state.sqlite3",
            "budgets": [BUDGET],
            "bridge_poll_interval": 0.05,
            "bridge_poll_max_interval": 0.1,
        }
    )


@pytest.mark.parametrize(
    ("fault", "said"),
    _cases(
        not_json=(_garbage(), "the transaction list has no items"),
        no_counts=(_answer(b'{"value": {"items": []}}'), "does not say it holds them all"),
        bare_list=(_answer(b"[]"), "does not say it holds them all"),
        cut_short=(
            _answer(b'{"value": {"items": [], "total": 3, "totalPages": 1}}'),
            "does not say it holds them all",
        ),
    ),
)
async def test_a_bridge_payment_stays_pending_while_the_payment_api_gives_no_definite_list(
    sandbox: Sandbox, chain: ChainASandbox, tmp_path: Path, fault: Fault, said: str
) -> None:
    """The payment call moved the EURO but its answer was lost (no transaction code in the
    journal); the payment API's list of transactions is what recovery asks."""
    account = sandbox.bank.open_account("10.00")
    options = _bridge_options(sandbox, account, tmp_path)
    sandbox.faults.arm("payment", Fault(kind="drop", when="after"))
    record = await _left_unfinished(sandbox, options)
    assert record.transaction_code is None
    (made,) = [t for t in sandbox.bank.payments_made if t.from_account == account.code]

    sandbox.faults.arm("transaction", dataclasses.replace(fault))
    timeout = SHORT if fault.kind == "timeout" else options.payment_api_timeout
    recovery, after, spent = await _recover(
        options.model_copy(update={"payment_api_timeout": timeout})
    )

    assert recovery.status == "pending", recovery.reason
    assert said in recovery.reason and "may or may not" in recovery.reason
    assert "no money moved" not in recovery.reason
    assert (after.outcome, after.transaction_code, after.unrecoverable) == ("unknown", None, None)
    assert spent == ATOMIC
    assert [t for t in sandbox.bank.payments_made if t.from_account == account.code] == [made]

    # The payment API lists properly again: its one payment is adopted, resumed, delivered.
    sandbox.faults.clear()
    recovery, after, spent = await _recover(options.model_copy())
    assert recovery.status == "delivered", recovery.reason
    assert (after.outcome, after.delivered, after.transaction_code) == ("paid", True, made.code)
    assert spent == ATOMIC
    assert [t for t in sandbox.bank.payments_made if t.from_account == account.code] == [made]
