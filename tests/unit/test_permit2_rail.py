"""The Permit2 rail's pure parts: what it signs, held to the x402 foundation's own typed data
and digest for the same message, what it sends, and which entries it takes (no I/O)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from eth_account import Account
from eth_account.messages import encode_typed_data
from eth_utils.crypto import keccak

from x402_client import EvmOptions, PaymentOptions, payments
from x402_client._protocol.assets import Asset
from x402_client._protocol.models import ExactAcceptEntry
from x402_client._rails._evm_signing import checksum_address, recover_signer
from x402_client._rails.eip3009 import Eip3009Rail
from x402_client._rails.permit2 import (
    EXACT_PERMIT2_PROXY_ADDRESS,
    PERMIT2_ADDRESS,
    Permit2Authorization,
    Permit2Rail,
    new_permit2_authorization,
    permit2_digest,
    permit2_payload,
    permit2_typed_data,
)

pytestmark = pytest.mark.anyio

KEY = "0x" + "42" * 32
PAYER = Account.from_key(KEY).address
PAY_TO = "0x5272a2998bed49761c98152bc77d276d39c27f6b"
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
        raise AssertionError("the Permit2 rail takes no lock")

    def payment_api(self) -> Any:
        raise AssertionError("the Permit2 rail never uses the payment API")

    async def report(self, event: Any) -> None:
        return None


def _options(
    *, key: str | None = KEY, rpc: bool = True, assets: tuple[Asset, ...] = (TOKEN_ASSET,)
) -> PaymentOptions:
    evm = None
    if key is not None:
        evm = EvmOptions(private_key=key, rpc_urls={CHAIN: "http://127.0.0.1:9"} if rpc else {})
    return PaymentOptions(evm=evm, assets=assets)


def _entry(**changes: Any) -> ExactAcceptEntry:
    raw: dict[str, Any] = {
        "scheme": "exact",
        "network": f"eip155:{CHAIN}",
        "asset": TOKEN,
        "maxAmountRequired": "10000",
        "payTo": PAY_TO,
        "maxTimeoutSeconds": 300,
        "extra": {"assetTransferMethod": "permit2"},
    }
    raw.update(changes)
    return ExactAcceptEntry.model_validate({k: v for k, v in raw.items() if v is not None})


def _authorization(nonce: int = 7) -> Permit2Authorization:
    return new_permit2_authorization(
        payer=PAYER,
        token=TOKEN,
        pay_to=PAY_TO,
        amount=10_000,
        max_timeout_seconds=300,
        now=1_700_000_000,
        nonce=nonce,
    )


# --- what is signed ----------------------------------------------------------------------


def _foundation_authorization(auth: Permit2Authorization) -> Any:
    from x402.mechanisms.evm.types import ExactPermit2Payload

    return ExactPermit2Payload.from_dict(permit2_payload(auth, bytes(65))).permit2_authorization


@pytest.mark.parametrize("chain_id", [1, 8453, CHAIN, 31337])
@pytest.mark.parametrize("nonce", [0, 7, (1 << 256) - 1])
def test_digest_is_the_foundations_for_the_same_message(chain_id: int, nonce: int) -> None:
    from x402.mechanisms.evm.exact.permit2_utils import _build_permit2_typed_data

    auth = _authorization(nonce)
    domain, types, primary, message = _build_permit2_typed_data(
        _foundation_authorization(auth), chain_id
    )
    plain_types = {
        name: [{"name": f.name, "type": f.type} for f in fs] for name, fs in types.items()
    }
    theirs = encode_typed_data(domain_data=domain, message_types=plain_types, message_data=message)
    # eth-account's hash of the foundation's typed data, and of ours: the same digest.
    assert primary == "PermitWitnessTransferFrom"
    expected = b"\x19\x01" + theirs.header + theirs.body

    assert permit2_digest(auth, chain_id=chain_id) == keccak(expected)
    ours = encode_typed_data(full_message=permit2_typed_data(auth, chain_id=chain_id))
    assert keccak(b"\x19\x01" + ours.header + ours.body) == keccak(expected)
    assert domain == {"name": "Permit2", "chainId": chain_id, "verifyingContract": PERMIT2_ADDRESS}


def test_the_signature_verifies_as_the_foundations_facilitator_verifies_it() -> None:
    from x402.mechanisms.evm.exact.permit2_utils import _build_permit2_typed_data
    from x402.mechanisms.evm.signers import EthAccountSigner

    auth = _authorization()
    rail = Permit2Rail(_Context(_options()))
    signature = rail.signer.sign(permit2_digest(auth, chain_id=CHAIN))
    assert recover_signer(permit2_digest(auth, chain_id=CHAIN), signature) == PAYER
    # Byte for byte what the foundation's own client signer produces for the same message.
    domain, types, primary, message = _build_permit2_typed_data(
        _foundation_authorization(auth), CHAIN
    )
    theirs = EthAccountSigner(Account.from_key(KEY)).sign_typed_data(
        domain,  # type: ignore[arg-type]
        types,
        primary,
        message,
    )
    assert signature == bytes(theirs)


def test_the_wire_form_is_the_foundations_payload_shape() -> None:
    from x402.mechanisms.evm.types import ExactPermit2Payload, is_permit2_payload

    auth = _authorization(nonce=12345)
    payload = permit2_payload(auth, b"\x01" * 65)
    assert is_permit2_payload(payload)
    assert ExactPermit2Payload.from_dict(payload).to_dict() == payload
    wire = payload["permit2Authorization"]
    assert wire == {
        "from": PAYER,
        "permitted": {"token": checksum_address(TOKEN), "amount": "10000"},
        "spender": EXACT_PERMIT2_PROXY_ADDRESS,
        "nonce": "12345",
        "deadline": "1700000300",
        "witness": {"to": checksum_address(PAY_TO), "validAfter": "0"},
    }
    with pytest.raises(ValueError, match="65 bytes"):
        permit2_payload(auth, b"\x01" * 64)


def test_checksum_address_is_eip55() -> None:
    from eth_utils.address import to_checksum_address

    for address in (TOKEN, PAY_TO, PERMIT2_ADDRESS.lower(), "0x" + "ab" * 20):
        assert checksum_address(address) == to_checksum_address(address)
    with pytest.raises(ValueError):
        checksum_address("0x1234")


def test_nonces_are_random_uint256() -> None:
    one, two = (
        new_permit2_authorization(
            payer=PAYER, token=TOKEN, pay_to=PAY_TO, amount=1, max_timeout_seconds=60, now=0
        )
        for _ in range(2)
    )
    assert one.nonce != two.nonce
    assert 0 <= one.nonce < 1 << 256


@pytest.mark.parametrize(
    "changes",
    [{"amount": -1}, {"amount": 1 << 256}, {"to": "0x12"}, {"nonce": True}, {"deadline": 1.5}],
)
def test_malformed_authorizations_are_refused(changes: dict[str, Any]) -> None:
    values: dict[str, Any] = {
        "from_address": PAYER,
        "token": TOKEN,
        "amount": 1,
        "spender": EXACT_PERMIT2_PROXY_ADDRESS,
        "nonce": 1,
        "deadline": 1,
        "to": PAY_TO,
    }
    values.update(changes)
    with pytest.raises(ValueError):
        Permit2Authorization(**values)


# --- which entries -----------------------------------------------------------------------


def test_describes_a_permit2_entry_in_the_declared_asset() -> None:
    intent = Permit2Rail(_Context(_options())).describe(_entry(), "https://m.example/paid")
    assert not isinstance(intent, str)
    assert intent.rail == "permit2"
    assert (intent.amount, intent.currency, intent.asset_symbol) == (
        Decimal("0.010000"),
        "EUR",
        "sEURT",
    )
    assert intent.atomic_amount == 10_000


@pytest.mark.parametrize(
    ("changes", "options", "reason"),
    [
        ({"extra": {"name": "EURC", "version": "2"}}, {}, "not a Permit2 entry"),
        ({"extra": {"assetTransferMethod": "eip3009"}}, {}, "not a Permit2 entry"),
        ({"network": "solana:mainnet"}, {}, "not an EVM entry"),
        ({"network": "base-sepolia"}, {}, "x402 v1 network"),
        ({"asset": "USDC"}, {}, "asset is not a token address"),
        ({"asset": "0x" + "11" * 20}, {}, "unknown asset"),
        ({}, {"key": None}, "set X402_EUR_EVM_PRIVATE_KEY"),
        ({}, {"rpc": False}, "no RPC URL configured for chain 84532"),
    ],
)
def test_entries_it_cannot_pay_say_why(
    changes: dict[str, Any], options: dict[str, Any], reason: str
) -> None:
    described = Permit2Rail(_Context(_options(**options))).describe(_entry(**changes), "r")
    assert isinstance(described, str)
    assert reason in described


def test_the_eip3009_rail_leaves_permit2_entries_to_the_permit2_rail() -> None:
    described = Eip3009Rail(_Context(_options())).describe(
        _entry(extra={"name": "EURC", "version": "2", "assetTransferMethod": "permit2"}), "r"
    )
    assert isinstance(described, str) and described.startswith("not a")


# --- approve_permit2: refused before anything is sent --------------------------------------


@pytest.mark.parametrize(
    ("options", "asset", "amount", "message"),
    [
        ({"key": None}, TOKEN, None, "needs an EVM key"),
        ({}, "USDC", None, "is not a 0x token address"),
        ({"rpc": False}, TOKEN, None, "needs an RPC URL for chain 84532"),
        ({}, TOKEN, "-1", "is not a non-negative sEURT amount"),
        ({}, TOKEN, "0.0000001", "at most 6 decimals"),
        ({}, TOKEN, "lots", "is not a non-negative sEURT amount"),
        ({"assets": ()}, TOKEN, "1", "declare"),
    ],
)
async def test_approve_permit2_refuses_what_cannot_work(
    options: dict[str, Any], asset: str, amount: str | None, message: str
) -> None:
    from x402_client import ConfigurationError

    with pytest.raises(ConfigurationError, match=message):
        await payments(_options(**options)).approve_permit2(CHAIN, asset, amount)
