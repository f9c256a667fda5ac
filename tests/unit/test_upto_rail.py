"""The `upto` rail's pure parts: what it signs, held to the x402 foundation's own typed data
and signer for the same message, which entries it takes, how a settlement response's
amount is read, and how a budget keeps what was settled and gives back the rest (no I/O)."""

from __future__ import annotations

import base64
import dataclasses
import json
from decimal import Decimal
from typing import Any

import pytest
from eth_account import Account
from eth_account.messages import encode_typed_data
from eth_utils.crypto import keccak

from x402_client import Budget, EvmOptions, PaymentOptions
from x402_client._protocol.assets import Asset
from x402_client._protocol.dialects import challenge_of
from x402_client._protocol.models import ExactAcceptEntry, UptoAcceptEntry
from x402_client._protocol.settlement import receipt_of, settled_amount_of, settled_atomic
from x402_client._protocol.types import Paid, PaymentIntent
from x402_client._rails._evm_signing import checksum_address
from x402_client._rails.permit2 import Permit2Rail
from x402_client._rails.upto import (
    UPTO_PERMIT2_PROXY_ADDRESS,
    UptoAuthorization,
    UptoRail,
    new_upto_authorization,
    upto_digest,
    upto_payload,
    upto_typed_data,
)
from x402_client._state.budget_stores import Budgets, InMemoryBudgetStore

pytestmark = pytest.mark.anyio

KEY = "0x" + "42" * 32
PAYER = Account.from_key(KEY).address
PAY_TO = "0x5272a2998bed49761c98152bc77d276d39c27f6b"
FACILITATOR = "0x3c44cdddb6a900fa2b585dd299e03d12fa4293bc"
TOKEN = "0x5fbdb2315678afecb367f032d93f642f64180aa3"
CHAIN = 84532
TOKEN_ASSET = Asset(chain_id=CHAIN, address=TOKEN, symbol="sEURT", currency="EUR")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class _Context:
    def __init__(self, options: PaymentOptions) -> None:
        self._options = options

    @property
    def options(self) -> PaymentOptions:
        return self._options

    @property
    def locks(self) -> Any:
        raise AssertionError("the upto rail takes no lock")

    def payment_api(self) -> Any:
        raise AssertionError("the upto rail never uses the payment API")

    async def report(self, event: Any) -> None:
        return None


def _options() -> PaymentOptions:
    evm = EvmOptions(private_key=KEY, rpc_urls={CHAIN: "http://127.0.0.1:9"})
    return PaymentOptions(evm=evm, assets=(TOKEN_ASSET,))


def _raw(**changes: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "scheme": "upto",
        "network": f"eip155:{CHAIN}",
        "asset": TOKEN,
        "amount": "10000",
        "payTo": PAY_TO,
        "maxTimeoutSeconds": 300,
        "extra": {"assetTransferMethod": "permit2", "facilitatorAddress": FACILITATOR},
    }
    raw.update(changes)
    return {k: v for k, v in raw.items() if v is not None}


def _entry(**changes: Any) -> Any:
    """The entry as a v2 402 (`PAYMENT-REQUIRED`) carries it, read by the client."""
    challenge = challenge_of(b"{}", _headers(_raw(**changes)), limit=65_536)
    assert challenge is not None
    return challenge.parse_entry(challenge.accepts[0])


def _headers(raw: dict[str, Any]) -> dict[str, str]:
    body = {"x402Version": 2, "resource": {"url": "http://127.0.0.1/m"}, "accepts": [raw]}
    return {"payment-required": base64.b64encode(json.dumps(body).encode()).decode()}


def _authorization(nonce: int = 7) -> UptoAuthorization:
    return new_upto_authorization(
        payer=PAYER,
        token=TOKEN,
        pay_to=PAY_TO,
        facilitator=FACILITATOR,
        amount=10_000,
        max_timeout_seconds=300,
        now=1_700_000_000,
        nonce=nonce,
    )


def _foundation_typed_data(auth: UptoAuthorization, chain_id: int) -> Any:
    from x402.mechanisms.evm.types import UptoPermit2Payload
    from x402.mechanisms.evm.upto.client import _build_upto_permit2_typed_data

    theirs = UptoPermit2Payload.from_dict(upto_payload(auth, bytes(65))).permit2_authorization
    return _build_upto_permit2_typed_data(theirs, chain_id)


@pytest.mark.parametrize("chain_id", [1, 8453, CHAIN])
@pytest.mark.parametrize("nonce", [0, 7, (1 << 256) - 1])
def test_digest_is_the_foundations_for_the_same_message(chain_id: int, nonce: int) -> None:
    auth = _authorization(nonce)
    domain, types, primary, message = _foundation_typed_data(auth, chain_id)
    plain_types = {
        name: [{"name": f.name, "type": f.type} for f in fs] for name, fs in types.items()
    }
    theirs = encode_typed_data(domain_data=domain, message_types=plain_types, message_data=message)
    expected = keccak(b"\x19\x01" + theirs.header + theirs.body)
    assert primary == "PermitWitnessTransferFrom"
    assert upto_digest(auth, chain_id=chain_id) == expected
    ours = encode_typed_data(full_message=upto_typed_data(auth, chain_id=chain_id))
    assert keccak(b"\x19\x01" + ours.header + ours.body) == expected


def test_the_signature_is_the_foundations_signers_and_the_wire_its_payload() -> None:
    from x402.mechanisms.evm.signers import EthAccountSigner
    from x402.mechanisms.evm.types import UptoPermit2Payload, is_upto_permit2_payload

    auth = _authorization()
    signature = UptoRail(_Context(_options())).signer.sign(upto_digest(auth, chain_id=CHAIN))
    domain, types, primary, message = _foundation_typed_data(auth, CHAIN)
    theirs = EthAccountSigner(Account.from_key(KEY)).sign_typed_data(
        domain, types, primary, message
    )
    assert signature == bytes(theirs)
    payload = upto_payload(auth, signature)
    assert is_upto_permit2_payload(payload)
    assert UptoPermit2Payload.from_dict(payload).to_dict() == payload
    assert payload["permit2Authorization"]["witness"] == {
        "to": checksum_address(PAY_TO),
        "facilitator": checksum_address(FACILITATOR),
        "validAfter": "0",
    }
    assert payload["permit2Authorization"]["spender"] == UPTO_PERMIT2_PROXY_ADDRESS
    with pytest.raises(ValueError, match="facilitator"):
        UptoAuthorization(**{**auth.__dict__, "facilitator": "nope"})


def test_a_v2_upto_entry_is_read_and_described_as_its_maximum() -> None:
    entry = _entry()
    assert isinstance(entry, UptoAcceptEntry) and entry.max_amount_required == 10_000
    rail = UptoRail(_Context(_options()))
    intent = rail.describe(entry, "http://127.0.0.1/m")
    assert isinstance(intent, PaymentIntent)
    assert (intent.rail, intent.scheme, intent.amount) == ("upto", "upto", Decimal("0.01"))
    assert intent.atomic_amount == 10_000 and intent.asset_symbol == "sEURT"
    assert intent.accept["scheme"] == "upto"
    # The exact rails leave it alone, and the upto rail leaves exact entries alone.
    assert isinstance(Permit2Rail(_Context(_options())).describe(entry, "x"), str)
    exact = ExactAcceptEntry.model_validate({**_raw(scheme="exact"), "maxAmountRequired": "10000"})
    assert rail.describe(exact, "x") == "not an upto entry"


def test_an_entry_without_a_facilitator_address_says_so() -> None:
    entry = _entry(extra={"assetTransferMethod": "permit2"})
    why = UptoRail(_Context(_options())).describe(entry, "x")
    assert isinstance(why, str) and "facilitatorAddress" in why
    assert why.startswith("upto authorization for sEURT")
    # Every blocker together: no RPC URL for the chain, and no facilitator.
    no_rpc = PaymentOptions(evm=EvmOptions(private_key=KEY), assets=(TOKEN_ASSET,))
    both = UptoRail(_Context(no_rpc)).describe(entry, "x")
    assert isinstance(both, str) and "no RPC URL" in both and "facilitatorAddress" in both
    assert both.startswith("upto authorization for")


def test_v1_has_no_upto_entries() -> None:
    body = {"x402Version": 1, "accepts": [{**_raw(), "maxAmountRequired": "10000"}]}
    from x402_client._protocol import exact_json as _json

    challenge = challenge_of(_json.dumps(body), {}, limit=65_536)
    assert challenge is not None and challenge.parse_entry(challenge.accepts[0]) is None


@pytest.mark.parametrize(
    ("settlement", "atomic"),
    [
        ({"amount": "4000"}, 4000),
        ({"amount": 4000}, 4000),
        ({"amount": "0"}, 0),
        ({"amount": "-1"}, None),
        ({"amount": "4e3"}, None),
        ({"amount": True}, None),
        ({"amount": None}, None),
        ({}, None),
        (None, None),
    ],
)
def test_the_settled_amount_is_read_strictly(settlement: Any, atomic: int | None) -> None:
    assert settled_atomic(settlement) == atomic


def _intent(amount: str = "0.01", atomic: int = 10_000) -> PaymentIntent:
    return PaymentIntent(
        rail="upto",
        scheme="upto",
        network=f"eip155:{CHAIN}",
        asset=TOKEN,
        asset_symbol="sEURT",
        amount=Decimal(amount),
        currency="EUR",
        pay_to=PAY_TO,
        resource="http://127.0.0.1/m",
        atomic_amount=atomic,
    )


def test_a_receipt_shows_the_merchants_claim_and_books_the_maximum_until_verified() -> None:
    from datetime import datetime, timezone

    intent = _intent()
    assert settled_amount_of(intent, {"amount": "2500"}) == Decimal("0.0025")
    paid = Paid(proof="p")
    now = datetime.now(timezone.utc)
    claimed = receipt_of(intent, paid, now, 1, {"amount": "2500", "success": True})
    assert (claimed.amount, claimed.authorized_amount, claimed.claimed_amount) == (
        Decimal("0.01"),  # the merchant's word is shown, never booked
        Decimal("0.01"),
        Decimal("0.0025"),
    )
    assert (claimed.settled_amount, claimed.settlement_verified) == (None, False)
    assert "authorized=0.01" in repr(claimed) and "held at the maximum" in repr(claimed)
    unsaid = receipt_of(intent, paid, now, 1)
    assert (unsaid.amount, unsaid.claimed_amount) == (Decimal("0.01"), None)
    verified = dataclasses.replace(
        claimed,
        amount=Decimal("0.0025"),
        settled_amount=Decimal("0.0025"),
        settlement_verified=True,
    )
    assert "verified" in repr(verified) and verified.to_json()["settlementVerified"] is True
    exact_intent = dataclasses.replace(intent, rail="permit2", scheme="exact")
    exact = receipt_of(exact_intent, paid, now, 1, {"amount": "1"})
    assert (exact.amount, exact.authorized_amount, exact.claimed_amount) == (
        Decimal("0.01"),
        None,
        None,
    )
    assert exact.settlement_verified is None


@pytest.mark.parametrize("window", [None, "24h"])
@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_a_budget_keeps_what_was_settled_and_gives_back_the_rest(
    window: Any, store: str, tmp_path: Any
) -> None:
    from x402_client._state.sqlite_store import SqliteStore

    budget = Budget("0.015", window=window)
    if store == "memory":
        budgets = Budgets([budget], InMemoryBudgetStore())
    else:
        budgets = Budgets([budget], SqliteStore(tmp_path / "state.sqlite3"))
    held = await budgets.reserve(_intent())
    kept = await budgets.settle(held, Decimal("0.01"), Decimal("0.004"))
    (status,) = await budgets.status()
    assert status.spent == Decimal("0.004")
    assert [r.budget for r in kept] == [budget] and kept != held
    # The rest is free again: another maximum fits (0.004 + 0.01 <= 0.015).
    again = await budgets.reserve(_intent())
    nothing = await budgets.settle(again, Decimal("0.01"), Decimal(0))
    assert nothing == []
    (status,) = await budgets.status()
    assert status.spent == Decimal("0.004")
    whole = await budgets.reserve(_intent())
    assert await budgets.settle(whole, Decimal("0.01"), Decimal("0.01")) == whole
    (status,) = await budgets.status()
    assert status.spent == Decimal("0.014")
    if isinstance(budgets.store, SqliteStore):
        budgets.store.close()
