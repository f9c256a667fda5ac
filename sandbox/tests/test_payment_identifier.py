"""The sandbox's own reading of the `payment-identifier` extension (pure)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from x402_eur_sandbox._payment_identifier import (
    PAYMENT_IDENTIFIER,
    Answer,
    PaymentIdentifiers,
    declaration,
    is_valid_payment_id,
    payload_digest,
    payment_id_of,
    requirement_problem,
)

VALID = "pay_7d5d747be160e280504c099d984bcfe0"


def proof(identifier: Any = None, *, declared: bool = True) -> dict[str, Any]:
    payment: dict[str, Any] = {"x402Version": 2, "accepted": {}, "payload": {"n": 1}}
    if declared:
        info: dict[str, Any] = {"required": False}
        if identifier is not None:
            info["id"] = identifier
        payment["extensions"] = {PAYMENT_IDENTIFIER: {"info": info, "schema": {}}}
    return payment


def test_the_declaration_is_the_foundations_shape() -> None:
    declared = declaration(True)
    assert declared["info"] == {"required": True}
    assert declaration(False)["info"] == {"required": False}
    schema = declared["schema"]
    assert schema["required"] == ["required"]
    assert schema["properties"]["id"] == {
        "type": "string",
        "minLength": 16,
        "maxLength": 128,
        "pattern": "^[a-zA-Z0-9_-]+$",
    }


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        (VALID, True),
        ("a" * 16, True),
        ("a" * 128, True),
        ("a" * 15, False),
        ("a" * 129, False),
        ("pay_abc!@#defghijklmn", False),
        ("pay_" + "x" * 12 + "\n", False),
        (12345678901234567, False),
        (None, False),
    ],
)
def test_an_identifier_is_16_to_128_safe_characters(value: Any, valid: bool) -> None:
    assert is_valid_payment_id(value) is valid


def test_the_identifier_is_read_from_the_echoed_declaration() -> None:
    assert payment_id_of(proof(VALID)) == VALID
    assert payment_id_of(proof()) is None
    assert payment_id_of(proof(declared=False)) is None
    assert payment_id_of(proof("short")) is None
    assert payment_id_of({"extensions": {PAYMENT_IDENTIFIER: {"info": "x"}}}) is None
    assert payment_id_of({"extensions": []}) is None


def test_a_required_identifier_must_be_there_and_any_identifier_must_be_valid() -> None:
    assert requirement_problem(proof(VALID), True) is None
    assert requirement_problem(proof(VALID), False) is None
    assert requirement_problem(proof(), False) is None
    assert requirement_problem(proof(declared=False), False) is None
    missing = requirement_problem(proof(declared=False), True)
    assert missing is not None and "requires a payment identifier" in missing
    assert requirement_problem(proof(), True) == missing
    for required in (True, False):
        bad = requirement_problem(proof("short"), required)
        assert bad is not None and "16-128 characters" in bad


def test_the_digest_is_of_the_whole_proof_whatever_the_key_order() -> None:
    first = proof(VALID)
    reordered = dict(reversed(list(first.items())))
    assert payload_digest(first) == payload_digest(reordered)
    other = proof(VALID)
    other["payload"] = {"n": 2}
    assert payload_digest(first) != payload_digest(other)


def test_the_record_replays_the_same_proof_and_flags_another() -> None:
    record = PaymentIdentifiers()
    answer = Answer(200, ((b"payment-response", b"x"),), b"{}")
    assert record.lookup(VALID, "d1") is None and VALID not in record
    record.keep(VALID, "d1", answer)
    assert VALID in record
    assert record.lookup(VALID, "d1") is answer
    assert record.lookup(VALID, "d2") is False
    assert record.replayed == 1


def test_one_identifier_is_handled_at_a_time() -> None:
    record = PaymentIdentifiers()
    assert record.lock(VALID) is record.lock(VALID)
    assert record.lock(VALID) is not record.lock("another_identifier")

    async def main() -> list[str]:
        order: list[str] = []

        async def hold(name: str) -> None:
            async with record.lock(VALID):
                order.append(f"{name} in")
                await anyio.sleep(0.01)
                order.append(f"{name} out")

        async with anyio.create_task_group() as group:
            group.start_soon(hold, "a")
            group.start_soon(hold, "b")
        return order

    order = anyio.run(main)
    assert order in (["a in", "a out", "b in", "b out"], ["b in", "b out", "a in", "a out"])
