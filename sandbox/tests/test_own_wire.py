"""The sandbox reads and writes the wire with its own code, and agrees with the client.

Two independent sides: the sandbox never imports the client (only its demo, a paying
client, does), and where both encode the same thing they must agree byte for byte.
"""

from __future__ import annotations

import ast
import secrets
import time
from decimal import Decimal
from pathlib import Path

import pytest

from x402_eur_sandbox import _wire
from x402_eur_sandbox._eip712 import (
    TransferAuthorization,
    permit_typed_data,
    recover_typed_data,
    split_signature,
    transfer_authorization_typed_data,
)

PACKAGE = Path(__file__).resolve().parents[1] / "x402_eur_sandbox"


def _imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_no_module_but_the_demo_imports_the_client() -> None:
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 10
    offenders = {
        str(path.relative_to(PACKAGE)): sorted(
            name for name in _imported_modules(path) if name.split(".")[0] == "x402_client"
        )
        for path in modules
        if path.name != "demo.py"
    }
    assert {path: names for path, names in offenders.items() if names} == {}
    assert "x402_client" in _imported_modules(PACKAGE / "demo.py")  # the walk sees imports


def test_json_keeps_money_exact_and_refuses_floats_and_nan() -> None:
    assert _wire.loads(b'{"amount": 0.10}') == {"amount": Decimal("0.10")}
    assert _wire.dumps({"amount": Decimal("0.10"), "n": 1}) == b'{"amount":0.10,"n":1}'
    with pytest.raises(_wire.JSONError):
        _wire.dumps({"amount": 0.1})
    with pytest.raises(_wire.JSONError):
        _wire.loads('{"amount": NaN}')
    with pytest.raises(_wire.JSONError):
        _wire.loads(b"{not json")


@pytest.mark.parametrize(
    ("text", "atomic"),
    [("0.10", 100_000), ("0.50", 500_000), ("1.00", 1_000_000), ("3", 3_000_000)],
)
def test_amounts_convert_as_the_spec_examples(text: str, atomic: int) -> None:
    assert _wire.to_atomic(_wire.parse_amount(text)) == atomic


@pytest.mark.parametrize("bad", ["-1", "1e3", "0.1234567", " 1", "NaN", "", "0", 0.5, True])
def test_amounts_that_are_not_plain_decimals_are_refused(bad: object) -> None:
    with pytest.raises(_wire.AmountError):
        _wire.parse_amount(bad)


def test_a_client_proof_decodes_here_and_a_proof_from_here_decodes_in_the_client() -> None:
    from x402_client._protocol.models import PaymentProof
    from x402_client._protocol.proof import decode_proof, encode_proof

    payload = {"paymentRequestCode": "pr_abc-123"}
    theirs = encode_proof(PaymentProof(scheme="euro", network="provider:mainnet", payload=payload))
    ours = _wire.encode_proof(_wire.Proof("euro", "provider:mainnet", payload))
    assert ours == theirs  # base64url of the same compact JSON, unpadded
    assert _wire.decode_proof(theirs) == _wire.Proof("euro", "provider:mainnet", payload)
    assert decode_proof(ours).payload == payload
    padded = theirs + "=" * (-len(theirs) % 4)
    standard = padded.replace("-", "+").replace("_", "/")
    assert _wire.decode_proof(standard) == _wire.decode_proof(padded) == _wire.decode_proof(ours)


@pytest.mark.parametrize("bad", ["", "!!!", "e30", "W10", "eyJ4NDAyVmVyc2lvbiI6MX0"])
def test_what_is_not_a_proof_is_refused(bad: str) -> None:
    with pytest.raises(_wire.ProofError):
        _wire.decode_proof(bad)


def test_a_permit_the_client_signs_recovers_to_its_owner_here() -> None:
    from eth_account import Account

    from x402_client._rails.evm import permit_typed_data as client_permit

    key = Account.create()
    values = {
        "token_name": "Sandbox EURQ",
        "chain_id": 137,
        "token": "0x5FbDB2315678afecb367f032d93F642f64180aa3",
        "owner": key.address,
        "spender": "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
        "value": 100_000,
        "nonce": 0,
        "deadline": int(time.time()) + 300,
    }
    signed = Account.sign_typed_data(key.key, full_message=client_permit(**values))
    signature = "0x" + bytes(signed.signature).hex()
    assert recover_typed_data(permit_typed_data(**values), signature) == key.address
    other = {**values, "value": 100_001}
    assert recover_typed_data(permit_typed_data(**other), signature) != key.address
    v, r, s = split_signature(signature)
    assert v in (27, 28) and len(r) == len(s) == 32


def test_an_eip3009_authorization_the_client_signs_recovers_to_its_signer_here() -> None:
    from eth_account import Account

    from x402_client._rails.eip3009 import DigestSigner, authorization_digest
    from x402_client._rails.eip3009 import TransferAuthorization as ClientAuthorization

    key = Account.create()
    token = "0x5FbDB2315678afecb367f032d93F642f64180aa3"
    wire = {
        "from": key.address,
        "to": "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
        "value": "10000",
        "validAfter": "0",
        "validBefore": str(int(time.time()) + 300),
        "nonce": "0x" + secrets.token_bytes(32).hex(),
    }
    theirs = ClientAuthorization.from_wire(wire)
    signer = DigestSigner(bytes(key.key))
    digest = authorization_digest(
        theirs, name="Sandbox EURC", version="2", chain_id=137, token=token
    )
    signature = signer.sign(digest)
    ours = TransferAuthorization.from_wire(wire)
    typed = transfer_authorization_typed_data(
        ours, name="Sandbox EURC", version="2", chain_id=137, token=token
    )
    assert recover_typed_data(typed, "0x" + signature.hex()) == key.address


@pytest.mark.parametrize(
    "change",
    [{"value": 5}, {"nonce": "0x1234"}, {"from": "0xnot"}, {"validBefore": "-1"}, {"to": None}],
)
def test_a_malformed_authorization_is_refused(change: dict) -> None:
    wire = {
        "from": "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
        "to": "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
        "value": "1",
        "validAfter": "0",
        "validBefore": "10",
        "nonce": "0x" + "00" * 32,
    }
    with pytest.raises(ValueError):
        TransferAuthorization.from_wire({**wire, **change})
