"""Every fault at every step of the chain rails (EVM permit, bridge): the ledger and the
balances must agree.

Invariants checked after each run (issue 5, mirroring `tests/integration/test_faults.py`):
- no money moved twice for one intent: the payer's token balance fell by 0 or exactly
  `maxAmountRequired` (EVM), the EURO account was debited 0 or once net of refunds and
  the merchant's chain-A EURQ rose at most once (bridge); the merchant received exactly
  what the payer lost;
- the client signed / paid at most once per intent (one ledger entry with a proof);
- every movement of money is in the ledger as `paid` or `unknown`; a `failed` entry
  moved no money;
- the EVM payer never holds or spends gas;
- after `PaymentOutcomeUnknown`, recovering (re-sending its `proof`, or resuming its
  `transaction_code`) never moves money a second time.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import httpx
import pytest
from eth_account import Account as EthAccount

from tests.sandboxes import evm_options, payment_options
from tests.waiting import eventually
from x402_client import (
    BridgeTransferFailed,
    NoSatisfiableOption,
    PaymentFailed,
    PaymentOptions,
    PaymentOutcomeUnknown,
    PaymentVerificationFailed,
    X402Error,
    payments,
    with_eur_payment,
)
from x402_client._protocol.ledger import LedgerEntry
from x402_eur_sandbox import Fault, Price, Sandbox, ServedApp
from x402_eur_sandbox._chain_a import EURQ_ASSET_ID

pytestmark = pytest.mark.anyio

PRICE = Decimal("0.10")
ATOMIC = 100_000
MOVED = ("paid", "unknown")
#: How long the client waits for the payment API where a `timeout` fault holds the call:
#: the held call does not answer while the client waits, so the client always gives up;
#: this only has to be long enough for the call to be sent whole on a busy machine.
GIVE_UP = 3.0


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


# --- shared checks ---------------------------------------------------------------------------


async def _fetch(client: httpx.AsyncClient, url: str, **kwargs: Any) -> httpx.Response:
    """GET and read the body (a broken paid body raises here, as the caller would see)."""
    response = await client.get(url, **kwargs)
    await response.aread()
    return response


async def _resend(
    client: httpx.AsyncClient, url: str, proof: str
) -> httpx.Response | PaymentVerificationFailed:
    """Re-send a proof already paid for (the documented recovery); the refusal is returned."""
    try:
        return await _fetch(client, url, extensions={"x402": {"proof": proof}})
    except PaymentVerificationFailed as exc:
        return exc


def _check_ledger(ledger: list[LedgerEntry], moved: bool) -> None:
    signed = [e for e in ledger if e.proof is not None]
    assert len(signed) <= 1, f"the client proved twice for one intent: {ledger}"
    if moved:
        assert any(e.outcome in MOVED for e in ledger), f"money moved, ledger says {ledger}"
    for entry in ledger:
        assert entry.outcome != "pending", entry
        if entry.outcome == "failed":
            assert not moved, f"a failed entry, yet money moved: {entry}"


# --- 1. the EVM permit rail -------------------------------------------------------------------

EVM_PRICES = {
    "/weather": Price(PRICE, "polygon only", rails=("eip155:137",)),
    "/report": Price(PRICE, "mainnet only", rails=("eip155:1",)),
    "/paid/both": Price(PRICE, "polygon, then mainnet", rails=("eip155:137", "eip155:1")),
}


@pytest.fixture(scope="module")
async def evm_sandbox(anyio_backend: str) -> AsyncIterator[Sandbox]:
    async with Sandbox(evm=True, prices=EVM_PRICES) as started:
        yield started


@dataclasses.dataclass
class EvmPayer:
    """A fresh EVM payer funded with 1 EURQ on both chains (and no gas coin)."""

    key: str
    address: str


@pytest.fixture
async def evm_payer(evm_sandbox: Sandbox) -> AsyncIterator[EvmPayer]:
    account = EthAccount.create()
    for chain in (137, 1):
        await evm_sandbox.evm.fund(chain, "EURQ", account.address, "1")
    evm_sandbox.faults.clear()
    yield EvmPayer("0x" + bytes(account.key).hex(), str(account.address))
    evm_sandbox.faults.clear()
    for offer in evm_sandbox.evm.offers:
        offer.spender_override = None


def _evm_options(sandbox: Sandbox, payer: EvmPayer, **evm: Any) -> PaymentOptions:
    return PaymentOptions(
        evm=evm_options(sandbox.evm, private_key=payer.key, **evm),
        confirmation_attempts=3,
        confirmation_wait=0.01,
    )


@dataclasses.dataclass(frozen=True)
class EvmCase:
    id: str
    endpoint: str | None
    fault: Fault | None
    expected: type[X402Error] | None  # None: served (200)
    moved: bool | None  # did money move by the time the client answered (None: either)
    path: str = "/weather"
    chain: int = 137
    #: the read timeout of the caller's paid request alone (the 402 hop and every other
    #: call get all the time a busy machine needs)
    paid_read_timeout: float | None = None
    #: the held settlement goes on after the client gave up: release it, wait until it lands
    lands_later: bool = False


EVM_MATRIX = [
    # /supported is read before signing: any failure makes the entry unpayable.
    EvmCase("supported-500", "supported", Fault("status", status=500), NoSatisfiableOption, False),
    EvmCase("supported-drop", "supported", Fault("drop"), NoSatisfiableOption, False),
    # /settle fails before touching the chain: the merchant answers 5xx, the same
    # proof is re-sent and settles once.
    EvmCase("settle-before-500", "settle", Fault("status", status=500), None, True),
    EvmCase("settle-before-drop", "settle", Fault("drop"), None, True),
    # /settle hangs until released; the caller's paid request times out meanwhile.
    EvmCase(
        "settle-before-timeout",
        "settle",
        Fault("timeout"),
        PaymentOutcomeUnknown,
        False,
        paid_read_timeout=0.5,
        lands_later=True,
    ),
    # /settle executed the permit, then failed: the money moved once, the re-sent proof
    # is "already used", and the client must not sign a second permit.
    EvmCase(
        "settle-after-500",
        "settle",
        Fault("status", "after", status=500),
        PaymentOutcomeUnknown,
        True,
    ),
    EvmCase("settle-after-drop", "settle", Fault("drop", "after"), PaymentOutcomeUnknown, True),
    EvmCase(
        "settle-after-500-chain1",
        "settle",
        Fault("status", "after", status=500),
        PaymentOutcomeUnknown,
        True,
        path="/report",
        chain=1,
    ),
    # the merchant's paid retry
    EvmCase("resource-before-500", "resource", Fault("status", status=502), None, True),
    EvmCase(
        "resource-before-500x5",
        "resource",
        Fault("status", status=502, times=5),
        PaymentOutcomeUnknown,
        False,
    ),
    EvmCase("resource-before-drop", "resource", Fault("drop"), PaymentOutcomeUnknown, False),
    EvmCase(
        "resource-after-500",
        "resource",
        Fault("status", "after", status=500),
        PaymentOutcomeUnknown,
        True,
    ),
    EvmCase("resource-after-drop", "resource", Fault("drop", "after"), PaymentOutcomeUnknown, True),
]


async def _token(sandbox: Sandbox, chain: int, address: str) -> int:
    return await sandbox.evm.token_balance(chain, "EURQ", address)


class _PaidHopTimeout(httpx.AsyncBaseTransport):
    """The caller's own transport, with a short read timeout on the first request that
    carries a payment proof: the client gives up on the paid request that hangs, while the
    402 hop and any later re-send, however slow the machine, keep the client's generous
    timeout."""

    def __init__(self, read: float) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self._read: float | None = read

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        paid = "x-payment" in request.headers or "payment-signature" in request.headers
        if paid and self._read is not None:
            timeout = dict(request.extensions.get("timeout", {}))
            request.extensions["timeout"] = {**timeout, "read": self._read}
            self._read = None
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


def _caller(case_read_timeout: float | None) -> httpx.AsyncClient:
    if case_read_timeout is None:
        return httpx.AsyncClient(timeout=30)
    return httpx.AsyncClient(timeout=30, transport=_PaidHopTimeout(case_read_timeout))


async def _check_evm_money(
    sandbox: Sandbox, payer: EvmPayer, chain: int, merchant_before: int
) -> bool:
    """The EVM balance invariants; returns whether the payment moved money."""
    evm = sandbox.evm
    spent = 1_000_000 - await _token(sandbox, chain, payer.address)
    received = await _token(sandbox, chain, evm.merchant_address) - merchant_before
    assert spent in (0, ATOMIC), f"payer spent {spent} atomic units (price {ATOMIC})"
    assert received == spent, (spent, received)
    other = 1 if chain == 137 else 137
    assert await _token(sandbox, other, payer.address) == 1_000_000
    for each in (137, 1):
        assert await evm.native_balance(each, payer.address) == 0
    return spent == ATOMIC


@pytest.mark.parametrize("case", EVM_MATRIX, ids=[c.id for c in EVM_MATRIX])
async def test_evm_rail_under_fault(evm_sandbox: Sandbox, evm_payer: EvmPayer, case: EvmCase):
    sandbox = evm_sandbox
    if case.endpoint == "supported":
        # The merchant builds its 402 from /supported too: let only the client's call fail.
        sandbox.evm.offer(f"eip155:{case.chain}").spender_override = sandbox.evm.hot_wallet_address
    merchant_before = await _token(sandbox, case.chain, sandbox.evm.merchant_address)
    if case.endpoint is not None and case.fault is not None:
        sandbox.faults.arm(case.endpoint, case.fault)
    url = sandbox.url(case.path)
    async with with_eur_payment(
        _caller(case.paid_read_timeout), _evm_options(sandbox, evm_payer)
    ) as client:
        error: X402Error | None = None
        response: httpx.Response | None = None
        try:
            response = await _fetch(client, url)
        except X402Error as exc:
            error = exc
        if case.expected is None:
            assert error is None, repr(error)
            assert response is not None and response.status_code == 200
        else:
            assert isinstance(error, case.expected), repr(error)
        ledger = payments(client).ledger.entries()
        moved_now = await _check_evm_money(sandbox, evm_payer, case.chain, merchant_before)
        if case.moved is not None:
            assert moved_now is case.moved
        if case.lands_later:
            sandbox.faults.release()

            async def landed() -> bool:
                return await _check_evm_money(sandbox, evm_payer, case.chain, merchant_before)

            await eventually(landed, "the held settlement to land")
        moved = await _check_evm_money(sandbox, evm_payer, case.chain, merchant_before)
        _check_ledger(ledger, moved)
        if error is None:
            assert [e.outcome for e in ledger] == ["paid"]
        elif isinstance(error, NoSatisfiableOption):
            assert ledger == []  # nothing was even about to be signed
            assert await sandbox.evm.permit_nonce(case.chain, "EURQ", evm_payer.address) == 0

        if isinstance(error, PaymentOutcomeUnknown):
            assert error.proof, "an unknown EVM outcome must carry the signed permit"
            assert error.transaction_code is None
            sandbox.faults.clear()
            again = await _resend(client, url, error.proof)
            if isinstance(again, PaymentVerificationFailed):
                # the permit was executed before the fault: served never, paid once
                assert "already used" in again.reason.lower()
                assert moved
            else:
                assert again.status_code == 200
                assert payments(client).ledger.entries()[0].outcome == "paid"
            # re-sending never signs or pays again
            after = await _check_evm_money(sandbox, evm_payer, case.chain, merchant_before)
            assert after  # by now the one permit has settled
            assert await sandbox.evm.permit_nonce(case.chain, "EURQ", evm_payer.address) == 1
            assert len([e for e in payments(client).ledger.entries() if e.proof]) == 1


async def test_evm_dead_rpc_is_unpayable_and_moves_nothing(evm_sandbox, evm_payer):
    sandbox = evm_sandbox
    options = _evm_options(sandbox, evm_payer, rpc_urls={137: "http://127.0.0.1:9"})
    async with with_eur_payment(httpx.AsyncClient(timeout=10), options) as client:
        with pytest.raises(NoSatisfiableOption, match="no RPC endpoint for chain 137"):
            await client.get(sandbox.url("/weather"))
        assert payments(client).ledger.entries() == []
    assert await _token(sandbox, 137, evm_payer.address) == 1_000_000


async def test_evm_dead_rpc_falls_through_to_the_next_chain(evm_sandbox, evm_payer):
    sandbox = evm_sandbox
    merchant_before = await _token(sandbox, 1, sandbox.evm.merchant_address)
    rpc_urls = {137: "http://127.0.0.1:9", 1: sandbox.evm.rpc_url(1)}
    options = _evm_options(sandbox, evm_payer, rpc_urls=rpc_urls)
    async with with_eur_payment(httpx.AsyncClient(timeout=10), options) as client:
        response = await _fetch(client, sandbox.url("/paid/both"))
        ledger = payments(client).ledger.entries()
    assert response.status_code == 200
    assert response.extensions["x402_payment"].network == "eip155:1"
    assert await _check_evm_money(sandbox, evm_payer, 1, merchant_before)
    assert await _token(sandbox, 137, evm_payer.address) == 1_000_000
    assert [e.outcome for e in ledger] == ["paid"]


class _FlakyRpc:
    """A JSON-RPC proxy to anvil that can refuse one kind of `eth_call` (by selector)."""

    NONCES = "0x7ecebe00"  # nonces(address)

    def __init__(self, upstream: str, mode: str = "http-503") -> None:
        self.upstream = upstream
        self.mode = mode
        self.fail_selector: str | None = None
        self.failed = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        status, answer = 200, b""
        text = body.decode()
        if self.fail_selector is not None and f'"data":"{self.fail_selector}' in text.replace(
            " ", ""
        ):
            self.failed += 1
            if self.mode == "http-503":
                status, answer = 503, b"upstream unavailable"
            else:  # a JSON-RPC error object, as a node behind a load balancer may answer
                request_id = json.loads(body).get("id")
                answer = json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": request_id,
                        "error": {"code": -32000, "message": "header not found"},
                    }
                ).encode()
        else:
            async with httpx.AsyncClient(timeout=30) as http:
                upstream = await http.post(
                    self.upstream, content=body, headers={"content-type": "application/json"}
                )
            status, answer = upstream.status_code, upstream.content
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": answer})


@pytest.mark.parametrize(
    "mode",
    [
        "http-503",
        "jsonrpc-error",
    ],
)
async def test_evm_rpc_failing_between_prepare_and_signing_is_a_typed_error(
    evm_sandbox, evm_payer, mode
):
    # prepare() reads chain id, name, symbol, balanceOf; pay() then reads nonces(owner).
    # The RPC dies in between: nothing was signed, so this must be a typed X402Error
    # (no money moved) and the ledger entry `failed`.
    sandbox = evm_sandbox
    proxy = _FlakyRpc(sandbox.evm.rpc_url(137), mode)
    proxy.fail_selector = _FlakyRpc.NONCES
    served = await ServedApp(proxy, "flaky-rpc").start()
    try:
        options = _evm_options(sandbox, evm_payer, rpc_urls={137: served.url})
        async with with_eur_payment(httpx.AsyncClient(timeout=10), options) as client:
            error: BaseException | None = None
            try:
                await client.get(sandbox.url("/weather"))
            except Exception as exc:  # the type is what is under test
                error = exc
            ledger = payments(client).ledger.entries()
    finally:
        await served.stop()
    assert proxy.failed >= 1
    assert await _token(sandbox, 137, evm_payer.address) == 1_000_000
    assert [e.outcome for e in ledger] == ["failed"]
    assert isinstance(error, X402Error), f"untyped error escaped: {error!r}"


async def test_evm_entry_whose_asset_has_no_contract_is_passed_over(evm_sandbox, evm_payer):
    # A misconfigured (or lying) 402: the first entry's asset is an address without code
    # on chain 137, the second is a good mainnet entry. The first must be passed over
    # (nothing can be signed for it) and the second paid.
    sandbox = evm_sandbox
    async with httpx.AsyncClient() as plain:
        polygon = (await plain.get(sandbox.url("/weather"))).json()
        mainnet = (await plain.get(sandbox.url("/report"))).json()
    bogus = {**polygon["accepts"][0], "asset": str(EthAccount.create().address)}
    challenge = {**mainnet, "accepts": [bogus, mainnet["accepts"][0]]}
    merchant = sandbox.gate

    async def lying_gate(scope: Any, receive: Any, send: Any) -> None:
        headers = dict(scope.get("headers") or [])
        if scope["type"] == "http" and b"x-payment" not in headers:
            raw = json.dumps(challenge).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 402,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": raw})
            return
        # the paid retry goes to the real gate, as if it were the 402's own merchant
        scope = {**scope, "path": "/report", "raw_path": b"/report"}
        await merchant(scope, receive, send)

    served = await ServedApp(lying_gate, "lying-merchant").start()
    merchant_before = await _token(sandbox, 1, sandbox.evm.merchant_address)
    try:
        async with with_eur_payment(
            httpx.AsyncClient(timeout=10), _evm_options(sandbox, evm_payer)
        ) as client:
            error: BaseException | None = None
            try:
                response = await _fetch(client, served.url + "/report")
            except Exception as exc:  # the type is what is under test
                error = exc
            ledger = payments(client).ledger.entries()
    finally:
        await served.stop()
    assert await _token(sandbox, 137, evm_payer.address) == 1_000_000
    assert error is None, f"{type(error).__mro__[:3]}: {error}"
    assert response.status_code == 200
    assert response.extensions["x402_payment"].network == "eip155:1"
    assert await _check_evm_money(sandbox, evm_payer, 1, merchant_before)
    assert [e.outcome for e in ledger] == ["paid"]


# --- 2. the bridge rail ------------------------------------------------------------------------

BRIDGE_PRICES = {"/weather": Price(PRICE, "bridged", rails=("ledgera",))}
#: A bridge delay longer than any test: the bridge ends when the test settles it.
HOUR = 3600.0
EURQ = str(EURQ_ASSET_ID)
REFUNDED = ("Cancelled", "Expired", "Failed")


@dataclasses.dataclass(frozen=True)
class BridgeCase:
    id: str
    endpoint: str | None
    fault: Fault | None
    expected: type[X402Error] | None
    #: EURO debited (net of refunds) when the client answered; None: either
    moved: bool | None
    end_as: str | None = None  # chain.end_next_bridge_as(...)
    bridge_delay: float = 0.1
    deadline: float = 60.0


BRIDGE_MATRIX = [
    BridgeCase(
        "payment-before-500", "payment", Fault("status", status=500), PaymentOutcomeUnknown, False
    ),
    BridgeCase(
        "payment-after-500",
        "payment",
        Fault("status", "after", status=500),
        PaymentOutcomeUnknown,
        True,
    ),
    BridgeCase("payment-before-drop", "payment", Fault("drop"), PaymentOutcomeUnknown, False),
    BridgeCase(
        "payment-after-drop", "payment", Fault("drop", "after"), PaymentOutcomeUnknown, True
    ),
    # the payment API hangs before or after it took the money (the fault holds the call
    # while the test runs); a call held before it read the payment has lost its caller, who
    # hung up, and can no longer take the money
    BridgeCase("payment-before-timeout", "payment", Fault("timeout"), PaymentOutcomeUnknown, False),
    BridgeCase(
        "payment-after-timeout", "payment", Fault("timeout", "after"), PaymentOutcomeUnknown, True
    ),
    BridgeCase("payment-after-delay", "payment", Fault("delay", "after", delay=0.1), None, True),
    BridgeCase("payment-refused-409", "payment", Fault("status", status=409), PaymentFailed, False),
    # polling GET /transaction: 5xx and drops are polled through; a 4xx ends the wait
    BridgeCase(
        "transaction-500x3", "transaction", Fault("status", status=500, times=3), None, True
    ),
    BridgeCase("transaction-drop-x2", "transaction", Fault("drop", times=2), None, True),
    BridgeCase(
        "transaction-401", "transaction", Fault("status", status=401), PaymentOutcomeUnknown, True
    ),
    # the merchant's verification through the indexer
    BridgeCase("indexer-500", "indexer", Fault("status", status=500), None, True),
    BridgeCase("indexer-drop", "indexer", Fault("drop"), None, True),
    BridgeCase(
        "indexer-500x5",
        "indexer",
        Fault("status", status=500, times=5),
        PaymentOutcomeUnknown,
        True,
    ),
    # the merchant's paid retry
    BridgeCase("resource-before-500", "resource", Fault("status", status=502), None, True),
    BridgeCase("resource-before-drop", "resource", Fault("drop"), PaymentOutcomeUnknown, True),
    BridgeCase(
        "resource-after-500",
        "resource",
        Fault("status", "after", status=500),
        PaymentOutcomeUnknown,
        True,
    ),
    BridgeCase(
        "resource-after-drop", "resource", Fault("drop", "after"), PaymentOutcomeUnknown, True
    ),
    # how the bridge transaction ends
    BridgeCase("bridge-cancelled", None, None, BridgeTransferFailed, False, end_as="Cancelled"),
    BridgeCase("bridge-failed", None, None, BridgeTransferFailed, False, end_as="Failed"),
    BridgeCase("bridge-expired", None, None, BridgeTransferFailed, False, end_as="Expired"),
    # the bridge takes longer than the client's deadline (it ends when the test settles it)
    BridgeCase(
        "bridge-deadline", None, None, PaymentOutcomeUnknown, True, bridge_delay=HOUR, deadline=0.2
    ),
]


def _bridge_money(sandbox: Sandbox) -> tuple[bool, list[Any]]:
    """The bridge balance invariants; returns (money moved, payments not refunded)."""
    chain = sandbox.chain_a
    made = _payer_payments(sandbox)
    kept = [t for t in made if t.status not in REFUNDED]
    assert len(kept) <= 1, f"EURO moved twice for one intent: {made}"
    assert sandbox.balance(sandbox.payer) == Decimal("100.00") - PRICE * len(kept)
    eurq = chain.asset_balance(chain.merchant_address, EURQ)
    assert eurq in (0, ATOMIC), f"merchant received {eurq} EURQ atomic units"
    if eurq:
        assert kept and kept[0].status == "Paid"
        assert kept[0].blockchain_tx_id is not None
    for transaction in made:
        if transaction.status in REFUNDED:
            assert transaction.blockchain_tx_id is None
    assert sandbox.balance(sandbox.merchant) == 0  # EURO never reaches the merchant here
    return bool(kept), kept


def _payer_payments(sandbox: Sandbox) -> list[Any]:
    return [t for t in sandbox.bank.payments_made if t.from_account == sandbox.payer.code]


def _settle_bridges(sandbox: Sandbox) -> None:
    """Let every bridge transfer of the payer still on its way reach chain A now, as its
    delay would."""
    for transaction in _payer_payments(sandbox):
        if transaction.status == "Processing":
            sandbox.chain_a.settle_bridge(transaction.code)


def _check_bridge_ledger(ledger: list[LedgerEntry], kept: list[Any]) -> None:
    _check_ledger(ledger, bool(kept))
    codes = {t.code for t in kept}
    for entry in ledger:
        if entry.outcome == "failed":
            assert entry.transaction_code not in codes
        if entry.transaction_code in codes:
            assert entry.outcome in MOVED, entry


@pytest.mark.parametrize("case", BRIDGE_MATRIX, ids=[c.id for c in BRIDGE_MATRIX])
async def test_bridge_rail_under_fault(case: BridgeCase):
    async with Sandbox(
        chain_a=True, bridge_delay=case.bridge_delay, prices=BRIDGE_PRICES
    ) as sandbox:
        chain = sandbox.chain_a
        if case.end_as is not None:
            chain.end_next_bridge_as(case.end_as)
        if case.endpoint is not None and case.fault is not None:
            sandbox.faults.arm(case.endpoint, case.fault)
        options = payment_options(
            sandbox,
            payment_api_timeout=GIVE_UP if case.fault and case.fault.kind == "timeout" else 30.0,
            bridge_poll_interval=0.05,
            bridge_poll_max_interval=0.1,
            bridge_deadline=case.deadline,
            confirmation_attempts=3,
            confirmation_wait=0.01,
        )
        url = sandbox.url("/weather")
        async with with_eur_payment(httpx.AsyncClient(timeout=30), options) as client:
            error: X402Error | None = None
            response: httpx.Response | None = None
            try:
                response = await _fetch(client, url)
            except X402Error as exc:
                error = exc
            if case.expected is None:
                assert error is None, repr(error)
                assert response is not None and response.status_code == 200
                assert response.extensions["x402_payment"].rail == "bridge"
            else:
                assert isinstance(error, case.expected), repr(error)
            ledger = payments(client).ledger.entries()
            moved_now, kept = _bridge_money(sandbox)
            if case.moved is not None:
                assert moved_now is case.moved
            _check_bridge_ledger(ledger, kept)
            if error is None:
                assert [e.outcome for e in ledger] == ["paid"]
            if isinstance(error, BridgeTransferFailed):
                assert error.status == case.end_as
                assert [e.outcome for e in ledger] == ["failed"]
            if not isinstance(error, PaymentOutcomeUnknown):
                return

            # --- recovery: never a second payment --------------------------------------
            sandbox.faults.clear()
            _settle_bridges(sandbox)  # a made payment reaches chain A
            before = list(sandbox.bank.payments_made)
            if error.proof:
                resent = await _resend(client, url, error.proof)
                if isinstance(resent, PaymentVerificationFailed):
                    assert "already used" in resent.reason.lower()
                    assert case.endpoint == "resource"
                    assert case.fault is not None and case.fault.when == "after"
                else:
                    assert resent.status_code == 200
                    assert payments(client).ledger.entries()[0].outcome == "paid"
            elif error.transaction_code:
                again = (await payments(client).recover(error)).response
                assert again is not None
                assert again.status_code == 200
                receipt = again.extensions["x402_payment"]
                assert receipt.transaction_code == error.transaction_code
                assert payments(client).ledger.entries()[-1].outcome == "paid"
            else:
                # the payment API never gave a transaction code: nothing to resume with;
                # the entry must stay `unknown` so the user can look for the payment.
                assert [e.outcome for e in ledger] == ["unknown"]
                assert error.payment_request_code is None
            assert sandbox.bank.payments_made == before, "recovering paid again"
            _, kept = _bridge_money(sandbox)
            _check_bridge_ledger(payments(client).ledger.entries(), kept)
