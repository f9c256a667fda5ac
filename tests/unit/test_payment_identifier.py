"""The x402 `payment-identifier` extension, as the dialects read and write it: whether a 402
declares it, the identifier of a payment, and the paid retry that carries it (the wire is
the foundation's: `x402/extensions/payment_identifier`)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from x402.extensions.payment_identifier import (
    declare_payment_identifier_extension,
    extract_and_validate_payment_identifier,
    is_valid_payment_id,
    validate_payment_identifier_requirement,
)
from x402.schemas import PaymentPayload

from x402_client._protocol.dialects import (
    PAYMENT_IDENTIFIER,
    PAYMENT_SIGNATURE,
    X_PAYMENT,
    Challenge,
    Dialect,
    encode_payment,
    payment_id_for,
    payment_id_of,
    payment_id_problem,
)
from x402_client._protocol.dialects import is_valid_payment_id as ours_valid

ENTRY = {
    "scheme": "exact",
    "network": "eip155:84532",
    "asset": "0x" + "1a" * 20,
    "amount": "10000",
    "payTo": "0x" + "2b" * 20,
    "maxTimeoutSeconds": 300,
    "extra": {"name": "Sandbox EURC", "version": "2"},
}
PAYLOAD = {"signature": "0x" + "ab" * 65, "authorization": {"from": "0x" + "3c" * 20}}
RESOURCE = {"url": "http://127.0.0.1:9/paid"}
LEDGER_ID = "0123456789abcdef0123456789abcdef"


def v2(extensions: dict[str, Any] | None) -> Challenge:
    return Challenge(Dialect.STANDARD_V2, [ENTRY], None, RESOURCE, extensions)


def decoded(value: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(base64.b64decode(value, validate=True))
    return result


@pytest.mark.parametrize(
    ("extensions", "declared"),
    [
        (None, None),
        ({"bazaar": {"info": {}}}, None),
        ({PAYMENT_IDENTIFIER: declare_payment_identifier_extension()}, False),
        ({PAYMENT_IDENTIFIER: declare_payment_identifier_extension(required=True)}, True),
        # Not in the declaration's shape (the foundation's client ignores these too).
        ({PAYMENT_IDENTIFIER: {"info": {"required": "yes"}}}, None),
        ({PAYMENT_IDENTIFIER: {"info": []}}, None),
        ({PAYMENT_IDENTIFIER: True}, None),
    ],
)
def test_a_402_declares_the_extension_optional_required_or_not_at_all(extensions, declared):
    assert v2(extensions).payment_identifier is declared


def test_a_payments_identifier_follows_the_extensions_rule_and_is_its_ledger_id():
    assert payment_id_for(LEDGER_ID) == f"pay_{LEDGER_ID}"
    assert is_valid_payment_id(payment_id_for(LEDGER_ID))
    # Another shape of id still makes a valid identifier, always the same one.
    odd = "journal id: 42 / é"
    assert is_valid_payment_id(payment_id_for(odd))
    assert payment_id_for(odd) == payment_id_for(odd) != payment_id_for(odd + "!")


@pytest.mark.parametrize(
    "value",
    ["a" * 15, "a" * 129, "pay_with space__", "pay_ünïcødé_____", 42, None, "a" * 16 + "\n"],
)
def test_identifiers_outside_the_rule_are_refused_as_the_foundation_refuses_them(value):
    assert ours_valid(value) is False
    assert ours_valid("a" * 16) and ours_valid("A-z_9" * 25 + "abc")
    if isinstance(value, str) and not value.endswith("\n"):
        # (The foundation's `$` lets a trailing newline through; ours does not.)
        assert is_valid_payment_id(value) is ours_valid(value)


@pytest.mark.parametrize("required", [False, True])
def test_the_paid_retry_echoes_the_declaration_with_the_identifier(required):
    declaration = declare_payment_identifier_extension(required=required)
    extensions = {PAYMENT_IDENTIFIER: declaration, "other": {"info": {"x": 1}}}
    header, value = encode_payment(v2(extensions), ENTRY, PAYLOAD, payment_id="pay_" + "7" * 32)
    assert header == PAYMENT_SIGNATURE
    framed = decoded(value)
    echoed = framed["extensions"][PAYMENT_IDENTIFIER]
    assert echoed["info"] == {"required": required, "id": "pay_" + "7" * 32}
    assert echoed["schema"] == declaration["schema"]
    assert framed["extensions"]["other"] == {"info": {"x": 1}}
    assert extensions[PAYMENT_IDENTIFIER]["info"] == {"required": required}  # not mutated
    assert payment_id_of(framed) == "pay_" + "7" * 32
    # The foundation's server reads, validates and accepts it.
    payload = PaymentPayload.model_validate(framed)
    found, validation = extract_and_validate_payment_identifier(payload)
    assert (found, validation.valid) == ("pay_" + "7" * 32, True)
    assert validate_payment_identifier_requirement(payload, required).valid


@pytest.mark.parametrize(
    "extensions", [None, {"bazaar": {"info": {"input": {}}}}, {PAYMENT_IDENTIFIER: {"info": {}}}]
)
def test_without_a_declaration_the_paid_retry_is_framed_as_before(extensions):
    _, with_id = encode_payment(v2(extensions), ENTRY, PAYLOAD, payment_id="pay_" + "7" * 32)
    _, without = encode_payment(v2(extensions), ENTRY, PAYLOAD)
    assert with_id == without
    framed = decoded(without)
    assert payment_id_of(framed) is None
    if extensions is None:
        assert "extensions" not in framed
    else:
        assert framed["extensions"] == extensions


@pytest.mark.parametrize("dialect", [Dialect.EURO, Dialect.STANDARD_V1])
def test_other_dialects_carry_no_identifier(dialect):
    challenge = Challenge(dialect, [ENTRY])
    header, value = encode_payment(challenge, ENTRY, PAYLOAD, payment_id="pay_" + "7" * 32)
    assert header == X_PAYMENT
    assert "pay_" not in base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).decode()


def test_a_required_identifier_rules_out_the_rails_that_frame_their_own_proof():
    required = v2({PAYMENT_IDENTIFIER: declare_payment_identifier_extension(required=True)})
    optional = v2({PAYMENT_IDENTIFIER: declare_payment_identifier_extension()})
    problem = payment_id_problem(required, "evm-permit", frames_own_proof=True)
    assert problem is not None
    assert "requires a payment identifier" in problem and "evm-permit" in problem
    assert payment_id_problem(required, "eip3009", frames_own_proof=False) is None
    assert payment_id_problem(optional, "evm-permit", frames_own_proof=True) is None
    assert payment_id_problem(v2(None), "evm-permit", frames_own_proof=True) is None


@pytest.mark.parametrize(
    "proof",
    [
        {},
        {"extensions": None},
        {"extensions": {PAYMENT_IDENTIFIER: {"info": {"required": True}}}},
        {"extensions": {PAYMENT_IDENTIFIER: {"info": {"id": "short"}}}},
        {"extensions": {PAYMENT_IDENTIFIER: "pay_" + "7" * 32}},
    ],
)
def test_a_proof_without_a_valid_identifier_names_none(proof):
    assert payment_id_of(proof) is None


# --- the selection: a rail that cannot carry a required identifier pays none of the 402 ----

PERMIT = {
    "scheme": "exact",
    "network": "eip155:137",
    "asset": "0x" + "5e" * 20,
    "amount": "10000",
    "payTo": "0x" + "2b" * 20,
    "maxTimeoutSeconds": 300,
    "facilitator": "https://facilitator.example",
    "extra": {"symbol": "EURQ", "spender": "0x" + "3c" * 20},
}


def _selection(required: bool | None, selector: Any = None) -> Any:
    from x402_client import Asset, EvmOptions, PaymentOptions
    from x402_client._flow.payment import Payer
    from x402_client._protocol.policy import select
    from x402_client._protocol.rail_interface import RequestSettings

    options = PaymentOptions(
        evm=EvmOptions(private_key="0x" + "42" * 32, rpc_urls={137: "http://127.0.0.1:1"}),
        assets=[Asset(chain_id=84532, address=ENTRY["asset"], symbol="EURC", currency="EUR")],
        selector=selector,
    )
    declared = (
        None
        if required is None
        else {PAYMENT_IDENTIFIER: declare_payment_identifier_extension(required=required)}
    )
    challenge = Challenge(Dialect.STANDARD_V2, [PERMIT, ENTRY], None, RESOURCE, declared)
    return select(
        challenge.accepts,
        rails=Payer(options).describers,
        options=options,
        settings=RequestSettings(),
        headroom={},
        now=0.0,
        resource=RESOURCE["url"],
        parse=challenge.parse_entry,
        rail_problem=challenge.rail_problem,
    )


@pytest.mark.parametrize("required", [None, False])
def test_without_a_required_identifier_every_rail_may_pay(required):
    selection = _selection(required)
    assert [(c.index, c.rail.name) for c in selection.candidates] == [
        (0, "evm-permit"),
        (1, "eip3009"),
    ]


def test_a_required_identifier_leaves_only_the_entries_a_framed_proof_pays():
    # Even a selector that would have chosen the permit entry only sees the other one.
    seen: list[list[str]] = []

    def selector(intents: list[Any]) -> Any:
        seen.append([i.rail for i in intents])
        return intents[0]

    selection = _selection(True, selector)
    assert [(c.index, c.rail.name) for c in selection.candidates] == [(1, "eip3009")]
    assert seen == [["eip3009"]]
    (skipped,) = selection.skipped
    assert (skipped.index, skipped.reason.value) == (0, "unpayable")
    assert "requires a payment identifier" in skipped.message
    assert skipped.intent is not None and skipped.intent.rail == "evm-permit"


def test_a_quote_says_which_entries_a_required_identifier_rules_out():
    import httpx

    from x402_client import Asset, EvmOptions, PaymentOptions
    from x402_client._flow.payment import Payer
    from x402_client._flow.quote import quote_of

    options = PaymentOptions(
        evm=EvmOptions(private_key="0x" + "42" * 32, rpc_urls={137: "http://127.0.0.1:1"}),
        assets=[Asset(chain_id=84532, address=ENTRY["asset"], symbol="EURC", currency="EUR")],
    )
    required = {
        "x402Version": 2,
        "resource": RESOURCE,
        "accepts": [PERMIT, ENTRY],
        "extensions": {PAYMENT_IDENTIFIER: declare_payment_identifier_extension(required=True)},
    }
    header = base64.b64encode(json.dumps(required).encode()).decode()
    response = httpx.Response(402, headers={"payment-required": header}, content=b"{}")
    quote = quote_of(response, Payer(options))
    assert [(e.index, e.payable, e.reason) for e in quote.entries] == [
        (0, False, "unpayable"),
        (1, True, None),
    ]
    assert "requires a payment identifier" in (quote.entries[0].message or "")
