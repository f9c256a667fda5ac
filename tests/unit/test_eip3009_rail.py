"""The EIP-3009 rail without a chain: which entries it pays and why not, the intent, the
authorization it signs (held to eth-account's reference output and to what the x402
foundation's own client sends), and the pure hashing pieces."""

from __future__ import annotations

import re
import time
from decimal import Decimal
from typing import Any

import pytest
from eth_account import Account
from eth_account.messages import encode_typed_data
from eth_utils.address import to_checksum_address

from tests.needs import require
from x402_client import EvmOptions, PaymentOptions
from x402_client._protocol.assets import Asset
from x402_client._protocol.models import EuroAcceptEntry, ExactAcceptEntry
from x402_client._protocol.rail_interface import RequestSettings
from x402_client._protocol.types import Paid
from x402_client._rails.eip3009 import (
    V1_NETWORKS,
    DigestSigner,
    Eip3009Rail,
    TransferAuthorization,
    authorization_digest,
    authorization_payload,
    chain_id_of,
    domain_separator,
    keccak256,
    new_authorization,
    recover_signer,
    transfer_typed_data,
)

pytestmark = pytest.mark.anyio

KEY = "0x" + "42" * 32
PAYER = Account.from_key(KEY).address
BASE_USDC = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"
BASE_EURC = "0x60a3E35Cc302bFA44Cb288Bc5a4F316Fdb1adb42"
PAY_TO = "0x5272a2998bED49761C98152BC77d276d39c27F6B"
TOKEN = "0x5FbDB2315678afecb367f032d93F642f64180aa3"
SANDBOX_EURC = Asset(chain_id=84532, address=TOKEN, symbol="sEURC", currency="EUR")


class _Context:
    def __init__(self, options: PaymentOptions) -> None:
        self._options = options

    @property
    def options(self) -> PaymentOptions:
        return self._options

    @property
    def locks(self) -> Any:
        raise AssertionError("the EIP-3009 rail takes no lock")

    def payment_api(self) -> Any:
        raise AssertionError("the EIP-3009 rail never uses the payment API")

    async def report(self, event: Any) -> None:
        return None


def _rail(*, key: str | None = KEY, assets: tuple[Asset, ...] = (SANDBOX_EURC,)) -> Eip3009Rail:
    options = PaymentOptions(
        evm=EvmOptions(private_key=key) if key is not None else None, assets=assets
    )
    return Eip3009Rail(_Context(options))


def _raw(**changes: Any) -> dict[str, Any]:
    """A v2 accept entry after the dialect layer mapped `amount` onto `maxAmountRequired`."""
    raw: dict[str, Any] = {
        "scheme": "exact",
        "network": "eip155:8453",
        "asset": BASE_EURC,
        "maxAmountRequired": "10000",
        "payTo": PAY_TO,
        "maxTimeoutSeconds": 300,
        "extra": {"name": "EURC", "version": "2"},
    }
    raw.update(changes)
    return {k: v for k, v in raw.items() if v is not None}


def _entry(**changes: Any) -> ExactAcceptEntry:
    return ExactAcceptEntry.model_validate(_raw(**changes))


# --- networks ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("network", "chain_id"),
    [
        ("eip155:1", 1),
        ("eip155:8453", 8453),
        ("eip155:84532", 84532),
        ("eip155:31337", 31337),
        ("base", 8453),
        ("base-sepolia", 84532),
        ("polygon", 137),
        ("avalanche", 43114),
        ("ethereum", 1),
        ("eip155:0", None),
        ("eip155:0137", None),
        ("eip155:", None),
        ("eip155:1a", None),
        ("eip155:-1", None),
        ("EIP155:1", None),
        ("solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp", None),
        ("ledgera:mainnet", None),
        ("base-mainnet", None),
        ("", None),
    ],
)
def test_chain_id_of(network: str, chain_id: int | None) -> None:
    assert chain_id_of(network) == chain_id


def test_v1_networks_are_the_foundations_table() -> None:
    from x402.mechanisms.evm.v1.constants import V1_NETWORK_CHAIN_IDS

    assert dict(V1_NETWORKS) == V1_NETWORK_CHAIN_IDS
    with pytest.raises(TypeError):
        V1_NETWORKS["anvil"] = 31337  # type: ignore[index]


# --- describe ----------------------------------------------------------------------------


def test_describe_a_known_eurc_entry() -> None:
    intent = _rail().describe(_entry(description="weather"), "https://m.example/weather")
    assert not isinstance(intent, str)
    assert intent.rail == "eip3009"
    assert intent.scheme == "exact"
    assert intent.network == "eip155:8453"
    assert intent.asset == BASE_EURC
    assert intent.asset_symbol == "EURC"
    assert intent.currency == "EUR"
    assert intent.amount == Decimal("0.01")
    assert str(intent.amount) == "0.010000"
    assert intent.atomic_amount == 10000
    assert intent.pay_to == PAY_TO
    assert intent.resource == "https://m.example/weather"
    assert intent.description == "weather"
    assert intent.accept["maxAmountRequired"] == "10000"
    assert intent.accept["extra"] == {"name": "EURC", "version": "2"}


def test_describe_usdc_counts_as_usd() -> None:
    entry = _entry(asset=BASE_USDC, extra={"name": "USD Coin", "version": "2"})
    intent = _rail().describe(entry, "r")
    assert not isinstance(intent, str)
    assert (intent.asset_symbol, intent.currency) == ("USDC", "USD")


def test_describe_a_v1_entry_by_network_name() -> None:
    intent = _rail().describe(_entry(network="base"), "r")
    assert not isinstance(intent, str)
    assert intent.network == "base"
    assert intent.currency == "EUR"


def test_describe_a_declared_asset_with_other_decimals() -> None:
    eighteen = Asset(chain_id=31337, address=TOKEN, symbol="EUR18", currency="EUR", decimals=18)
    entry = _entry(network="eip155:31337", asset=TOKEN, maxAmountRequired="1500000000000000000")
    intent = _rail(assets=(eighteen,)).describe(entry, "r")
    assert not isinstance(intent, str)
    assert intent.amount == Decimal("1.5")
    assert intent.amount.as_tuple().exponent == -18


def test_describe_matches_the_asset_address_case_insensitively() -> None:
    intent = _rail().describe(_entry(asset=BASE_EURC.lower()), "r")
    assert not isinstance(intent, str)
    assert intent.asset == BASE_EURC.lower()  # echoed as the merchant wrote it


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"network": "ledgera:mainnet"}, "not an EVM entry"),
        ({"network": "solana:mainnet"}, "not an EVM entry"),
        ({"extra": {"symbol": "EURQ", "spender": PAY_TO}}, "not an EIP-3009 entry"),
        (
            {"extra": {"name": "EURC", "version": "2", "spender": PAY_TO}},
            "not an EIP-3009 entry",
        ),
        (
            {"extra": {"name": "EURC", "version": "2", "assetTransferMethod": "permit2"}},
            "not an EIP-3009 entry (a Permit2 one)",
        ),
        (
            {"extra": {"name": "EURC", "version": "2", "assetTransferMethod": "erc7710"}},
            "asset transfer method 'erc7710' is not supported",
        ),
        ({"extra": None}, "without the token's EIP-712 extra.name and extra.version"),
        ({"extra": {"name": "EURC"}}, "without the token's EIP-712 extra.name and extra.version"),
        ({"extra": {"version": "2"}}, "without the token's EIP-712 extra.name and extra.version"),
        (
            {"extra": {"name": "", "version": "2"}},
            "without the token's EIP-712 extra.name and extra.version",
        ),
        (
            {"extra": {"name": "EURC", "version": 2}},
            "without the token's EIP-712 extra.name and extra.version",
        ),
        ({"asset": "EURC"}, "asset is not a token address"),
        ({"asset": BASE_EURC + "00"}, "asset is not a token address"),
        ({"payTo": "merchant"}, "payTo is not an address"),
        ({"asset": TOKEN}, f"unknown asset {TOKEN} on eip155:8453"),
        ({"network": "eip155:137"}, f"unknown asset {BASE_EURC} on eip155:137"),
    ],
)
def test_describe_reasons(changes: dict[str, Any], reason: str) -> None:
    described = _rail().describe(_entry(**changes), "r")
    assert isinstance(described, str)
    assert reason in described


def test_describe_an_explicit_eip3009_method_is_fine() -> None:
    extra = {"name": "EURC", "version": "2", "assetTransferMethod": "eip3009", "x": 1}
    assert not isinstance(_rail().describe(_entry(extra=extra), "r"), str)


def test_describe_without_an_evm_key() -> None:
    assert _rail(key=None).describe(_entry(), "r") == (
        "EIP-3009 transfer for EURC on eip155:8453: set X402_EUR_EVM_PRIVATE_KEY"
    )


def test_describe_refuses_a_euro_entry() -> None:
    euro = EuroAcceptEntry.model_validate(
        {
            "scheme": "euro",
            "network": "provider:mainnet",
            "asset": "EURO",
            "amount": "0.10",
            "payTo": "ACC_X",
            "paymentRequestCode": "pr_1",
        }
    )
    assert _rail().describe(euro, "r") == "not an exact entry"


def test_describe_never_raises_on_odd_extras() -> None:
    for extra in ({"spender": None}, {"assetTransferMethod": None}, {"name": ["x"], "version": {}}):
        assert isinstance(_rail().describe(_entry(extra=extra), "r"), str)


# --- prepare and pay ---------------------------------------------------------------------


def test_nothing_is_read_before_signing() -> None:
    assert _rail().prepare is None  # no RPC: the nonce is random, the facilitator checks


async def _pay(rail: Eip3009Rail, entry: ExactAcceptEntry) -> Paid:
    intent = rail.describe(entry, "r")
    assert not isinstance(intent, str)
    async with rail.pay(entry, intent, RequestSettings()) as paid:
        return paid


async def test_pay_signs_the_authorization_the_foundation_would() -> None:
    rail = _rail()
    entry = _entry(payTo=PAY_TO.lower())
    before = int(time.time())
    paid = await _pay(rail, entry)
    after = int(time.time())

    assert paid.proof == ""
    assert paid.payer == PAYER
    assert paid.payload is not None
    assert set(paid.payload) == {"authorization", "signature"}
    auth = paid.payload["authorization"]
    assert list(auth) == ["from", "to", "value", "validAfter", "validBefore", "nonce"]
    assert all(isinstance(value, str) for value in auth.values())
    assert auth["from"] == PAYER == to_checksum_address(PAYER.lower())
    assert auth["to"] == PAY_TO.lower()  # payTo exactly as received
    assert auth["value"] == "10000"
    assert auth["validAfter"] == "0"  # v2: like the foundation's v2 client
    assert before + 300 <= int(auth["validBefore"]) <= after + 300
    assert re.fullmatch(r"0x[0-9a-f]{64}", auth["nonce"])
    assert re.fullmatch(r"0x[0-9a-f]{130}", paid.payload["signature"])
    assert int(paid.payload["signature"][-2:], 16) in (27, 28)

    # The signature is eth-account's, byte for byte, and recovers to the payer.
    authorization = TransferAuthorization.from_wire(auth)
    typed = transfer_typed_data(
        authorization, name="EURC", version="2", chain_id=8453, token=BASE_EURC
    )
    reference = Account.sign_typed_data(KEY, full_message=typed)
    assert paid.payload["signature"] == "0x" + bytes(reference.signature).hex()
    signature = bytes.fromhex(paid.payload["signature"][2:])
    assert Account.recover_message(encode_typed_data(full_message=typed), signature=signature) == (
        PAYER
    )


async def test_pay_a_v1_entry_is_valid_from_ten_minutes_ago() -> None:
    now = int(time.time())
    paid = await _pay(_rail(), _entry(network="base-sepolia", asset=SANDBOX_EURC.address))
    assert paid.payload is not None
    auth = paid.payload["authorization"]
    assert now - 600 <= int(auth["validAfter"]) <= now - 600 + 2
    authorization = TransferAuthorization.from_wire(auth)
    digest = authorization_digest(
        authorization, name="EURC", version="2", chain_id=84532, token=TOKEN
    )
    assert recover_signer(digest, bytes.fromhex(paid.payload["signature"][2:])) == PAYER


async def test_pay_signs_the_value_exactly_and_a_fresh_nonce_each_time() -> None:
    big = "123456789012345678901"
    eighteen = Asset(chain_id=8453, address=TOKEN, symbol="X", currency="USD", decimals=18)
    rail = _rail(assets=(eighteen,))
    entry = _entry(asset=TOKEN, maxAmountRequired=big, maxTimeoutSeconds=60)
    before = int(time.time())
    first, second = await _pay(rail, entry), await _pay(rail, entry)
    after = int(time.time())
    assert first.payload is not None
    assert second.payload is not None
    assert first.payload["authorization"]["value"] == big
    assert first.payload["authorization"]["nonce"] != second.payload["authorization"]["nonce"]
    valid_before = int(first.payload["authorization"]["validBefore"])
    assert before + 60 <= valid_before <= after + 60


async def test_pay_matches_the_foundation_clients_payload_shape() -> None:
    """The x402 package's own client, asked for the same entry, writes the same fields."""
    from x402.mechanisms.evm.exact import ExactEvmScheme
    from x402.schemas import PaymentRequirements

    requirements = PaymentRequirements.model_validate(
        {
            "scheme": "exact",
            "network": "eip155:8453",
            "asset": BASE_EURC,
            "amount": "10000",
            "payTo": PAY_TO,
            "maxTimeoutSeconds": 300,
            "extra": {"name": "EURC", "version": "2"},
        }
    )
    theirs = ExactEvmScheme(Account.from_key(KEY)).create_payment_payload(requirements)
    ours = (await _pay(_rail(), _entry())).payload
    assert ours is not None
    assert list(ours) == list(theirs)
    assert list(ours["authorization"]) == list(theirs["authorization"])
    for field in ("from", "to", "value", "validAfter"):
        assert ours["authorization"][field] == theirs["authorization"][field]
    assert (
        abs(int(ours["authorization"]["validBefore"]) - int(theirs["authorization"]["validBefore"]))
        <= 2
    )
    # Their signature over their nonce is what ours would be over the same nonce.
    same = TransferAuthorization.from_wire(theirs["authorization"])
    digest = authorization_digest(same, name="EURC", version="2", chain_id=8453, token=BASE_EURC)
    assert "0x" + DigestSigner(bytes.fromhex(KEY[2:])).sign(digest).hex() == theirs["signature"]


def test_rail_and_signer_reprs_hide_the_key() -> None:
    rail = _rail()
    signer = rail.signer
    assert KEY[2:] not in repr(rail)
    assert KEY[2:] not in repr(signer)
    assert PAYER in repr(signer)
    assert rail.signer is signer  # made once per key


# --- the pure pieces ---------------------------------------------------------------------


def _authorization(**changes: Any) -> TransferAuthorization:
    values: dict[str, Any] = {
        "from_address": PAYER,
        "to": PAY_TO,
        "value": 10_000,
        "valid_after": 0,
        "valid_before": 1_795_270_938,
        "nonce": bytes(range(32)),
    }
    values.update(changes)
    return TransferAuthorization(**values)


def test_digest_and_domain_separator_match_eth_account() -> None:
    authorization = _authorization()
    kwargs: dict[str, Any] = {
        "name": "Sandbox EURC",
        "version": "2",
        "chain_id": 84532,
        "token": TOKEN,
    }
    typed = transfer_typed_data(authorization, **kwargs)
    encoded = encode_typed_data(full_message=typed)
    assert domain_separator("Sandbox EURC", "2", 84532, TOKEN) == bytes(encoded.header)
    expected = keccak256(b"\x19\x01" + bytes(encoded.header) + bytes(encoded.body))
    assert authorization_digest(authorization, **kwargs) == expected
    # Case of the token address does not change the domain (nor the cache entry).
    assert domain_separator("Sandbox EURC", "2", 84532, TOKEN.lower()) == bytes(encoded.header)
    # Every field is in the digest.
    for change in (
        {"to": PAYER},
        {"value": 10_001},
        {"valid_after": 1},
        {"valid_before": 1},
        {"nonce": bytes(32)},
    ):
        assert authorization_digest(_authorization(**change), **kwargs) != expected
    for key, value in (("name", "EURC"), ("version", "1"), ("chain_id", 1), ("token", PAY_TO)):
        assert authorization_digest(authorization, **{**kwargs, key: value}) != expected


def test_keccak256_is_ethereums() -> None:
    assert keccak256(b"").hex() == (
        "c5d2460186f7233c927e7db2dcc703c0e500b653ca82273b7bfad8045d85a470"
    )
    # The TransferWithAuthorization type hash Circle's FiatToken publishes.
    assert (
        keccak256(
            b"TransferWithAuthorization(address from,address to,uint256 value,"
            b"uint256 validAfter,uint256 validBefore,bytes32 nonce)"
        ).hex()
        == "7c7c6cdb67a18743f49ec6fa9b35f50d52ed05cbed4cc592e13b44501c1a2267"
    )


def test_signer_signs_like_eth_account_and_recovers() -> None:
    signer = DigestSigner(bytes.fromhex(KEY[2:]))
    assert signer.address == PAYER
    for index in range(5):
        authorization = _authorization(nonce=bytes([index]) * 32)
        typed = transfer_typed_data(
            authorization, name="USD Coin", version="2", chain_id=1, token=BASE_USDC
        )
        digest = authorization_digest(
            authorization, name="USD Coin", version="2", chain_id=1, token=BASE_USDC
        )
        signature = signer.sign(digest)
        assert signature == bytes(Account.sign_typed_data(KEY, full_message=typed).signature)
        assert recover_signer(digest, signature) == PAYER
        # v as 0/1 recovers too (the facilitator accepts both).
        assert recover_signer(digest, signature[:64] + bytes((signature[64] - 27,))) == PAYER
        # low s, as every EVM token requires
        assert (
            int.from_bytes(signature[32:64], "big")
            <= 0x7FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF5D576E7357A4501DDFE92F46681B20A0
        )
    with pytest.raises(ValueError):
        signer.sign(b"short")


def test_recover_signer_refuses_junk() -> None:
    digest = bytes(32)
    for bad in (b"", bytes(64), bytes(65), bytes(64) + b"\x05"):
        with pytest.raises(ValueError):
            recover_signer(digest, bad)


def test_new_authorization_windows() -> None:
    v2 = new_authorization(
        payer=PAYER, pay_to=PAY_TO, value=5, max_timeout_seconds=300, now=1_000_000.9
    )
    assert (v2.valid_after, v2.valid_before, v2.value) == (0, 1_000_300, 5)
    v1 = new_authorization(
        payer=PAYER, pay_to=PAY_TO, value=5, max_timeout_seconds=60, now=1_000_000, v1=True
    )
    assert (v1.valid_after, v1.valid_before) == (999_400, 1_000_060)
    assert len(v1.nonce) == 32
    assert v1.nonce != v2.nonce
    fixed = new_authorization(
        payer=PAYER, pay_to=PAY_TO, value=5, max_timeout_seconds=1, now=0, nonce=bytes(32)
    )
    assert fixed.nonce == bytes(32)


def test_authorization_wire_round_trip_and_strictness() -> None:
    authorization = _authorization()
    wire = authorization.to_wire()
    assert wire == {
        "from": PAYER,
        "to": PAY_TO,
        "value": "10000",
        "validAfter": "0",
        "validBefore": "1795270938",
        "nonce": "0x" + bytes(range(32)).hex(),
    }
    assert TransferAuthorization.from_wire(wire) == authorization
    payload = authorization_payload(authorization, bytes(64) + b"\x1b")
    assert payload == {"authorization": wire, "signature": "0x" + "00" * 64 + "1b"}
    for field, value in (
        ("value", 10000),
        ("value", "1e4"),
        ("value", "-1"),
        ("value", "010"),
        ("validBefore", " 1"),
        ("nonce", "0x1234"),
        ("nonce", "0x" + "zz" * 32),
        ("from", "0x1234"),
        ("to", None),
    ):
        with pytest.raises(ValueError):
            TransferAuthorization.from_wire({**wire, field: value})
    with pytest.raises(ValueError):
        TransferAuthorization.from_wire([wire])
    with pytest.raises(ValueError):
        _authorization(value=2**256)
    with pytest.raises(ValueError):
        authorization_payload(authorization, bytes(64))


def test_coincurve_signs_like_eth_keys() -> None:
    """With coincurve installed the rail signs through libsecp256k1: same bytes."""
    require("coincurve", "pip install 'x402-eur[evm]'")
    signer = DigestSigner(bytes.fromhex(KEY[2:]))
    assert signer.backend == "coincurve"
    from eth_keys.datatypes import PrivateKey

    key = PrivateKey(bytes.fromhex(KEY[2:]))
    for index in range(5):
        digest = keccak256(bytes([index]))
        raw = key.sign_msg_hash(digest).to_bytes()
        assert signer.sign(digest) == raw[:64] + bytes((raw[64] + 27,))
