"""The EVM permit rail without a chain: typed data, proof, entry choice, the extra."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from decimal import Decimal
from typing import Any

import pytest
from eth_account import Account
from eth_account.messages import encode_typed_data

from x402_client import EvmOptions, PaymentOptions
from x402_client._flow.payment import Payer
from x402_client._protocol.models import EvmPermitExtra, SupportedKinds, parse_accept
from x402_client._protocol.proof import decode_proof
from x402_client._rails.evm import (
    EvmPermitRail,
    classify_evm_extra,
    permit_deadline,
    permit_proof,
    permit_typed_data,
    spenders_by_asset,
    split_signature,
)

KEY = "0x" + "11" * 32
OWNER = Account.from_key(KEY).address
SPENDER = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
TOKEN = "0x5FbDB2315678afecb367f032d93F642f64180aa3"
PAY_TO = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"


class _Context:
    def __init__(self, options: PaymentOptions) -> None:
        self._options = options

    @property
    def options(self) -> PaymentOptions:
        return self._options

    def payment_api(self) -> Any:
        raise AssertionError("the EVM rail never uses the payment API")

    async def report(self, event: Any) -> None:
        return None


def _rail(rpc_urls: dict[int, Any] | None = None) -> EvmPermitRail:
    evm_options = EvmOptions(
        private_key=KEY, rpc_urls=rpc_urls if rpc_urls is not None else {137: "http://x:1"}
    )
    return EvmPermitRail(_Context(PaymentOptions(evm=evm_options)), evm_options)


def _entry(**changes: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "scheme": "exact",
        "network": "eip155:137",
        "asset": TOKEN,
        "maxAmountRequired": "100000",
        "payTo": PAY_TO,
        "maxTimeoutSeconds": 300,
        "resource": "https://merchant.example/weather",
        "description": "weather",
        "mimeType": "application/json",
        "facilitator": "https://facilitator.example",
        "extra": {"symbol": "EURQ", "spender": SPENDER},
    }
    entry.update(changes)
    return entry


def _describe(raw: dict[str, Any], rail: EvmPermitRail | None = None) -> Any:
    entry = parse_accept(raw)
    assert entry is not None
    return (rail or _rail()).describe(entry, "https://merchant.example/weather")


# --- pure pieces ----------------------------------------------------------------------------


def _typed(**changes: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "token_name": "Sandbox EURQ",
        "chain_id": 137,
        "token": TOKEN,
        "owner": OWNER,
        "spender": SPENDER,
        "value": 100_000,
        "nonce": 3,
        "deadline": 1_700_000_300,
    }
    values.update(changes)
    return permit_typed_data(**values)


def test_typed_data_follows_the_spec() -> None:
    typed = _typed()
    assert typed["primaryType"] == "Permit"
    assert typed["domain"] == {
        "name": "Sandbox EURQ",
        "version": "1",
        "chainId": 137,
        "verifyingContract": TOKEN,
    }
    assert typed["message"] == {
        "owner": OWNER,
        "spender": SPENDER,
        "value": 100_000,
        "nonce": 3,
        "deadline": 1_700_000_300,
    }
    assert [f["name"] for f in typed["types"]["Permit"]] == [
        "owner",
        "spender",
        "value",
        "nonce",
        "deadline",
    ]


def test_typed_data_signature_matches_the_split_form_and_recovers() -> None:
    typed = _typed()
    full = Account.sign_typed_data(KEY, full_message=typed)
    split = Account.sign_typed_data(
        KEY,
        domain_data=typed["domain"],
        message_types={"Permit": typed["types"]["Permit"]},
        message_data=typed["message"],
    )
    assert full.signature == split.signature
    assert (
        Account.recover_message(encode_typed_data(full_message=typed), signature=full.signature)
        == OWNER
    )
    # Another chain id is another domain: the same values sign differently.
    other = Account.sign_typed_data(KEY, full_message=_typed(chain_id=1))
    assert other.signature != full.signature


def test_deadline_is_now_plus_timeout() -> None:
    assert permit_deadline(1_700_000_000.9, 300) == 1_700_000_300


def test_permit_proof_shape() -> None:
    typed = _typed()
    signature = bytes(Account.sign_typed_data(KEY, full_message=typed).signature)
    proof = decode_proof(permit_proof("eip155:137", typed["message"], signature))
    assert proof.x402_version == 2
    assert proof.scheme == "exact"
    assert proof.network == "eip155:137"
    assert proof.payload == {
        "owner": OWNER,
        "permit": {
            "owner": OWNER,
            "spender": SPENDER,
            "value": "100000",
            "nonce": "3",
            "deadline": "1700000300",
        },
        "signature": "0x" + signature.hex(),
    }
    v, r, s = split_signature(proof.payload["signature"])
    assert v in (27, 28)
    assert r == signature[:32]
    assert s == signature[32:64]


def test_split_signature_refuses_wrong_length() -> None:
    with pytest.raises(ValueError, match="65 bytes"):
        split_signature("0x" + "00" * 64)


def test_classify_extra() -> None:
    assert isinstance(classify_evm_extra({"symbol": "EURQ", "spender": SPENDER}), EvmPermitExtra)
    assert classify_evm_extra({"name": "USD Coin", "version": "2"}) == (
        "EIP-3009 exact entry: not a permit entry"
    )
    assert "without extra" in str(classify_evm_extra(None))
    assert "spender" in str(classify_evm_extra({"symbol": "EURQ"}))
    assert "invalid extra.spender" in str(classify_evm_extra({"symbol": "EURQ", "spender": "0x1"}))


def test_spenders_by_asset() -> None:
    kinds = SupportedKinds.model_validate(
        {
            "kinds": [
                {
                    "x402Version": 2,
                    "scheme": "exact",
                    "network": "eip155:137",
                    "asset": TOKEN,
                    "extra": {"spender": SPENDER},
                },
                {"x402Version": 2, "scheme": "exact", "network": "eip155:1", "extra": {}},
                {"x402Version": 2, "scheme": "exact", "network": "ledgera:mainnet", "asset": "1"},
                {
                    "x402Version": 2,
                    "scheme": "exact",
                    "network": "eip155:1",
                    "extra": {"spender": PAY_TO},
                },
            ]
        }
    )
    assert spenders_by_asset(kinds) == {
        ("eip155:137", TOKEN.lower()): SPENDER,
        ("eip155:1", None): PAY_TO,
    }


# --- describe(): which entries this rail takes --------------------------------------------


def test_describe_eurq_entry() -> None:
    intent = _describe(_entry())
    assert not isinstance(intent, str)
    assert intent.rail == "evm-permit"
    assert intent.network == "eip155:137"
    assert intent.asset == TOKEN
    assert intent.asset_symbol == "EURQ"
    assert intent.currency == "EUR"
    assert intent.amount == Decimal("0.10")
    assert intent.atomic_amount == 100_000
    assert intent.pay_to == PAY_TO


def test_usdq_counts_as_dollars() -> None:
    intent = _describe(_entry(extra={"symbol": "USDQ", "spender": SPENDER}))
    assert not isinstance(intent, str)
    assert intent.currency == "USD"
    assert intent.asset_symbol == "USDQ"


def test_eip3009_entry_is_not_a_permit_entry() -> None:
    raw = _entry(extra={"name": "USD Coin", "version": "2"})
    assert _describe(raw) == "EIP-3009 exact entry: not a permit entry"


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"network": "ledgera:mainnet", "asset": "2768422954", "extra": None}, "not an EVM"),
        ({"network": "eip155:8453"}, "not an EVM"),
        ({"network": "eip155:1"}, "no RPC URL configured for chain 1"),
        ({"extra": {"symbol": "DAI", "spender": SPENDER}}, "not EURQ or USDQ"),
        ({"asset": "EURQ"}, "not a token address"),
        ({"payTo": "ACC_MERCHANT"}, "payTo is not an address"),
        ({"facilitator": None}, "without a facilitator"),
        ({"extra": {"symbol": "EURQ", "spender": "nope"}}, "invalid extra.spender"),
    ],
)
def test_describe_refusals(changes: dict[str, Any], reason: str) -> None:
    raw = {k: v for k, v in _entry(**changes).items() if v is not None}
    described = _describe(raw)
    assert isinstance(described, str)
    assert reason in described


def test_euro_entry_is_not_for_this_rail() -> None:
    entry = parse_accept(
        {
            "scheme": "euro",
            "network": "provider:mainnet",
            "asset": "EURO",
            "amount": "0.10",
            "payTo": "ACC_X",
            "paymentRequestCode": "pr_1",
        }
    )
    assert entry is not None
    assert _rail().describe(entry, "r") == "not an exact entry"


# --- secrets and the extra ------------------------------------------------------------------


def test_key_never_printed() -> None:
    rail = _rail()
    secret = KEY[2:]
    assert secret not in repr(rail)
    assert secret not in repr(EvmOptions(private_key=KEY))
    assert rail.owner == OWNER
    assert secret not in repr(rail)


def test_without_the_extra_permit_entries_are_skipped_with_the_install_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        return None if name == "web3" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    assert _describe(_entry()) == (
        "EVM permit for EURQ on eip155:137: EVM permits need the evm extra: "
        "pip install 'x402-eur[evm]'"
    )
    # The options still make a payer: its other rails pay as usual.
    assert "evm-permit" in repr(Payer(PaymentOptions(evm=EvmOptions(private_key=KEY))))


def test_import_stays_free_of_web3() -> None:
    code = (
        "import sys, httpx\n"
        "import x402_client\n"
        "from x402_client import EvmOptions, PaymentOptions, with_eur_payment\n"
        f"options = PaymentOptions(evm=EvmOptions(private_key={KEY!r},"
        " rpc_urls={137: 'http://127.0.0.1:1'}))\n"
        "client = with_eur_payment(httpx.AsyncClient(), options)\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules}"
        " & {'web3', 'eth_account', 'aiohttp', 'eth_abi'})\n"
        "print(','.join(heavy))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""
