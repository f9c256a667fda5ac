"""The `batch-settlement` protocol, pure: the channel's identity and the escrow's EIP-712
hashes against the scheme's test vectors and the x402 foundation's own code, what a payer
signs, what a 402 may say, and what a merchant's answers must say before the payer signs
again."""

from __future__ import annotations

from typing import Any

import pytest

from tests.needs import require

require("eth_account", "pip install 'x402-eur[evm]'")

from eth_account import Account  # noqa: E402
from eth_account.messages import encode_typed_data  # noqa: E402
from eth_utils.crypto import keccak  # noqa: E402

from x402_client._protocol import batch_settlement as bs  # noqa: E402

PAYER = "0x" + "11" * 20
RECEIVER = "0x" + "22" * 20
AUTHORIZER = "0x" + "33" * 20
TOKEN = "0x036CbD53842c5426634e7929541eC2318f3dCF7e"
ZERO_SALT = "0x" + "00" * 32
VECTOR = bs.ChannelConfig(PAYER, PAYER, RECEIVER, AUTHORIZER, TOKEN, 900, ZERO_SALT)
#: The scheme's test vectors (channel ids and digests as the escrow computes them).
DOMAIN_84532 = "0xfdef80764086b1e0fc6ba99f0cb9aa1d59109fda7c23d60334c89d2de44dffce"
CHANNEL_84532 = "0xc79f4ebce8ab654688879c8bfd3965227d8fc491dd10697b71a457416d65d904"
CHANNEL_31337 = "0x2b63ad3fbe37f1084cfcbadfc454d0d18727a2dd06670a3b6baa0d9b1eb0f4bc"
VOUCHER_DIGEST = "0x383f7c5d92cf9b0f84e9a1a3bb90f7f54d0a722ab74fafba330ff1ddb85617f6"
DEPOSIT_NONCE = "0xe9c1051244f4a5fcecc0e51afb3c1ab5426c5cfbeae7ee91ae6046e646f393a3"

PAYER_KEY = "0x" + "4c" * 32
OTHER_KEY = "0x" + "5d" * 32


def foundation(module: str) -> Any:
    return require(module, "pip install -e '.[dev]' (the x402 foundation's package)")


def entry(**changes: Any) -> dict[str, Any]:
    """A well-formed batch-settlement accept entry, with `changes` (None removes a key;
    `extra` changes are merged into extra)."""
    extra: dict[str, Any] = {
        "receiverAuthorizer": AUTHORIZER,
        "withdrawDelay": 900,
        "name": "USDC",
        "version": "2",
        "assetTransferMethod": "eip3009",
        "minDeposit": "10000",
    }
    accept: dict[str, Any] = {
        "scheme": "batch-settlement",
        "network": "eip155:84532",
        "amount": "1000",
        "asset": TOKEN,
        "payTo": RECEIVER,
        "maxTimeoutSeconds": 300,
    }
    extra_changes = changes.pop("extra", {})
    for key, value in (extra_changes or {}).items():
        if value is None:
            extra.pop(key, None)
        else:
            extra[key] = value
    if extra_changes is not None:
        accept["extra"] = extra
    for key, value in changes.items():
        if value is None:
            accept.pop(key, None)
        else:
            accept[key] = value
    return accept


# --- constants, type hashes, test vectors --------------------------------------------------


def test_the_type_hashes_are_the_escrows() -> None:
    assert keccak(text=bs.CHANNEL_CONFIG_TYPE).hex() == (
        "1c9a06ceab9b0ebbd3301dc56c9111bb6d9af421356dc9ccb3b7084c755db308"
    )
    assert keccak(text=bs.VOUCHER_TYPE).hex() == (
        "1e1bd6ff84c3e0d9029a292b212e039c0ca97ec497c55191a4a5874294609a69"
    )
    assert keccak(text=bs.RECEIVE_WITH_AUTHORIZATION_TYPE).hex() == (
        "d099cc98ef71107a616c4f0f941f04c322d8e254fe26b3c6668db87aae413de8"
    )
    assert keccak(text=bs.PERMIT2_DEPOSIT_TYPE).hex() == (
        "436a25c01a21a6ed025816c4c9ea3d6132aa879dd7ef16f6188dd3b0aebccc52"
    )


def test_the_addresses_and_bounds_are_the_foundations() -> None:
    constants = foundation("x402.mechanisms.evm.batch_settlement.constants")
    errors = foundation("x402.mechanisms.evm.batch_settlement.errors")
    assert bs.SCHEME == constants.SCHEME_BATCH_SETTLEMENT
    assert bs.ESCROW == constants.BATCH_SETTLEMENT_ADDRESS
    assert bs.ERC3009_COLLECTOR == constants.ERC3009_DEPOSIT_COLLECTOR_ADDRESS
    assert bs.PERMIT2_COLLECTOR == constants.PERMIT2_DEPOSIT_COLLECTOR_ADDRESS
    assert (bs.MIN_WITHDRAW_DELAY, bs.MAX_WITHDRAW_DELAY) == (
        constants.MIN_WITHDRAW_DELAY,
        constants.MAX_WITHDRAW_DELAY,
    )
    assert {
        errors.ERR_CUMULATIVE_AMOUNT_MISMATCH,
        errors.ERR_CUMULATIVE_AMOUNT_BELOW_CLAIMED,
    } == bs.CORRECTIVE_ERRORS
    assert {errors.ERR_CUMULATIVE_EXCEEDS_BALANCE, errors.ERR_CHANNEL_NOT_FOUND} == bs.RESYNC_ERRORS
    assert bs.BUSY_ERROR == errors.ERR_CHANNEL_BUSY


def test_the_scheme_test_vectors() -> None:
    assert "0x" + bs.domain_separator(84532).hex() == DOMAIN_84532
    assert VECTOR.channel_id(84532) == CHANNEL_84532
    assert VECTOR.channel_id(31337) == CHANNEL_31337
    assert "0x" + bs.voucher_digest(CHANNEL_84532, 5000, 84532).hex() == VOUCHER_DIGEST


def test_the_channel_id_is_the_foundations_for_any_config() -> None:
    utils = foundation("x402.mechanisms.evm.batch_settlement.utils")
    types = foundation("x402.mechanisms.evm.batch_settlement.types")
    configs = [
        VECTOR,
        bs.ChannelConfig(
            PAYER, "0x" + "00" * 20, RECEIVER, AUTHORIZER, TOKEN, 2_592_000, "0x" + "ab" * 32
        ),
        bs.ChannelConfig(
            Account.from_key(PAYER_KEY).address,
            Account.from_key(OTHER_KEY).address,
            "0x" + "de" * 20,
            "0x" + "ad" * 20,
            "0x" + "be" * 20,
            86_400,
            "0x" + "01" * 32,
        ),
    ]
    for config in configs:
        theirs = types.ChannelConfig.from_dict(config.to_wire())
        for chain in (1, 8453, 84532, 31337):
            assert config.channel_id(chain) == utils.compute_channel_id(theirs, chain)


def test_a_channel_config_goes_to_the_wire_and_back() -> None:
    wire = VECTOR.to_wire()
    assert wire == {
        "payer": PAYER,
        "payerAuthorizer": PAYER,
        "receiver": RECEIVER,
        "receiverAuthorizer": AUTHORIZER,
        "token": TOKEN,
        "withdrawDelay": 900,
        "salt": ZERO_SALT,
    }
    mixed = bs.ChannelConfig(
        PAYER, PAYER, RECEIVER, AUTHORIZER, TOKEN.lower(), 900, "0x" + "AB" * 32
    )
    assert mixed.to_wire()["token"] == TOKEN  # EIP-55
    assert mixed.to_wire()["salt"] == "0x" + "ab" * 32
    assert bs.ChannelConfig.from_wire(mixed.to_wire()).channel_id(1) == mixed.channel_id(1)


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("payer", "0x" + "00" * 20, "channelConfig.payer is the zero address"),
        ("payer", "0x1234", "channelConfig.payer"),
        ("receiver", 7, "channelConfig.receiver must be a 0x address string"),
        ("receiverAuthorizer", "0x" + "00" * 20, "channelConfig.receiverAuthorizer"),
        ("token", None, "channelConfig.token"),
        ("withdrawDelay", 899, "channelConfig.withdrawDelay 899 is out of range"),
        ("withdrawDelay", "900", "channelConfig.withdrawDelay must be an integer"),
        ("withdrawDelay", True, "channelConfig.withdrawDelay must be an integer"),
        ("salt", "0x00", "channelConfig.salt"),
    ],
)
def test_a_bad_channel_config_is_refused_by_name(field: str, value: Any, words: str) -> None:
    wire = VECTOR.to_wire()
    wire[field] = value
    with pytest.raises(ValueError, match=words):
        bs.ChannelConfig.from_wire(wire)


def test_a_zero_payer_authorizer_is_a_smart_wallet_channel() -> None:
    wire = VECTOR.to_wire() | {"payerAuthorizer": "0x" + "00" * 20}
    config = bs.ChannelConfig.from_wire(wire)
    assert config.to_wire()["payerAuthorizer"] == "0x" + "00" * 20
    assert config.channel_id(84532) != CHANNEL_84532


# --- vouchers -------------------------------------------------------------------------------


def test_a_voucher_is_signed_as_eth_account_signs_its_typed_data() -> None:
    account = Account.from_key(PAYER_KEY)
    for amount in (0, 1, 5000, (1 << 128) - 1):
        typed = bs.voucher_typed_data(CHANNEL_84532, amount, 84532)
        expected = account.sign_message(encode_typed_data(full_message=typed)).signature
        assert bs.sign_voucher(account, CHANNEL_84532, amount, 84532) == "0x" + expected.hex()
    signable = encode_typed_data(full_message=bs.voucher_typed_data(CHANNEL_84532, 5000, 84532))
    digest = keccak(b"\x19" + signable.version + signable.header + signable.body)
    assert "0x" + digest.hex() == VOUCHER_DIGEST


def test_a_voucher_is_the_foundations_voucher() -> None:
    voucher = foundation("x402.mechanisms.evm.batch_settlement.client.voucher")
    signers = foundation("x402.mechanisms.evm.signers")
    account = Account.from_key(PAYER_KEY)
    theirs = voucher.sign_voucher(
        signers.EthAccountSigner(account), CHANNEL_31337, "4200", "eip155:31337"
    )
    ours = bs.sign_voucher(account, CHANNEL_31337, 4200, 31337)
    assert theirs.signature == ours
    assert bs.voucher_wire(CHANNEL_31337, 4200, ours) == theirs.to_dict()


def test_the_signer_of_a_voucher_is_recovered() -> None:
    account = Account.from_key(PAYER_KEY)
    signature = bs.sign_voucher(account, CHANNEL_84532, 5000, 84532)
    assert bs.voucher_signer(CHANNEL_84532, 5000, 84532, signature) == account.address
    # Another amount, channel or chain: another digest, another (unrelated) address.
    assert bs.voucher_signer(CHANNEL_84532, 5001, 84532, signature) != account.address
    assert bs.voucher_signer(CHANNEL_31337, 5000, 84532, signature) != account.address
    assert bs.voucher_signer(CHANNEL_84532, 5000, 31337, signature) != account.address
    # v as 0/1 is the same signature.
    raw = bytes.fromhex(signature[2:])
    low_v = "0x" + (raw[:64] + bytes((raw[64] - 27,))).hex()
    assert bs.voucher_signer(CHANNEL_84532, 5000, 84532, low_v) == account.address


def test_a_signature_the_escrow_would_refuse_recovers_no_one() -> None:
    account = Account.from_key(PAYER_KEY)
    signature = bs.sign_voucher(account, CHANNEL_84532, 5000, 84532)
    raw = bytearray(bytes.fromhex(signature[2:]))
    # The same signature with s mirrored to the curve's upper half (and v flipped)
    # recovers the same key, but OpenZeppelin's ECDSA refuses it.
    s = int.from_bytes(raw[32:64], "big")
    high = bytes(raw[:32]) + (bs._SECP256K1_N - s).to_bytes(32, "big") + bytes((raw[64] ^ 1,))
    bad_v = bytes(raw[:64]) + bytes((29,))
    zero_s = bytes(raw[:32]) + bytes(32) + bytes(raw[64:])
    for candidate in ("0x" + high.hex(), "0x" + bad_v.hex(), "0x" + zero_s.hex(), "0x12", 5):
        assert bs.voucher_signer(CHANNEL_84532, 5000, 84532, candidate) is None  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("channel_id", "amount", "words"),
    [
        ("0x1234", 1, "channel_id"),
        (CHANNEL_84532, -1, "uint128"),
        (CHANNEL_84532, 1 << 128, "uint128"),
        (CHANNEL_84532, True, "must be an int"),
    ],
)
def test_a_voucher_outside_its_types_is_not_signed(
    channel_id: str, amount: Any, words: str
) -> None:
    with pytest.raises(ValueError, match=words):
        bs.sign_voucher(Account.from_key(PAYER_KEY), channel_id, amount, 84532)


# --- the 402 --------------------------------------------------------------------------------


def test_a_batch_settlement_entry_is_read() -> None:
    terms = bs.parse_terms(entry(asset=TOKEN.lower()))
    assert terms == bs.BatchTerms(
        network="eip155:84532",
        chain_id=84532,
        asset=TOKEN,
        pay_to=RECEIVER,
        amount=1000,
        max_timeout_seconds=300,
        receiver_authorizer=AUTHORIZER,
        withdraw_delay=900,
        token_name="USDC",
        token_version="2",
        transfer_method="eip3009",
        min_deposit=10000,
        channel_state=None,
        voucher_state=None,
    )
    config = bs.channel_config(terms, PAYER, ZERO_SALT)
    assert config == VECTOR
    assert config.channel_id(terms.chain_id) == CHANNEL_84532
    other = bs.channel_config(terms, PAYER, ZERO_SALT, payer_authorizer="0x" + "44" * 20)
    assert other.payer_authorizer == "0x" + "44" * 20
    assert other.channel_id(84532) != CHANNEL_84532


def test_a_permit2_entry_needs_no_token_domain() -> None:
    terms = bs.parse_terms(
        entry(extra={"assetTransferMethod": "permit2", "name": None, "version": None})
    )
    assert (terms.transfer_method, terms.token_name, terms.token_version) == ("permit2", "", "")
    assert bs.parse_terms(entry(extra={"assetTransferMethod": None})).transfer_method == "eip3009"


#: A hostile 402: each malformed field is refused, and the refusal names it.
HOSTILE = [
    ({"scheme": "exact"}, "scheme"),
    ({"network": "base-sepolia"}, "network"),
    ({"network": "eip155:0"}, "network"),
    ({"network": "eip155:01"}, "network"),
    ({"network": "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp"}, "network"),
    ({"network": 84532}, "network"),
    ({"amount": 1000}, "amount must be a decimal string"),
    ({"amount": "1e3"}, "amount"),
    ({"amount": "-1"}, "amount"),
    ({"amount": "0"}, "amount must be greater than zero"),
    ({"amount": "01"}, "amount"),
    ({"amount": " 1"}, "amount"),
    ({"amount": str(1 << 128)}, "amount is out of range"),
    ({"amount": True}, "amount"),
    ({"amount": None}, "amount"),
    ({"asset": "0x" + "00" * 20}, "asset is the zero address"),
    ({"asset": "0xZZ" + "00" * 19}, "asset"),
    ({"asset": None}, "asset"),
    ({"payTo": "0x" + "00" * 20}, "payTo is the zero address"),
    ({"payTo": "0x" + "22" * 21}, "payTo"),
    ({"maxTimeoutSeconds": 0}, "maxTimeoutSeconds"),
    ({"maxTimeoutSeconds": "300"}, "maxTimeoutSeconds must be an integer"),
    ({"maxTimeoutSeconds": 86_401}, "maxTimeoutSeconds"),
    ({"maxTimeoutSeconds": True}, "maxTimeoutSeconds"),
    ({"extra": None}, "extra must be an object"),
    ({"extra": {"receiverAuthorizer": "0x" + "00" * 20}}, "extra.receiverAuthorizer"),
    ({"extra": {"receiverAuthorizer": None}}, "extra.receiverAuthorizer"),
    ({"extra": {"receiverAuthorizer": "33" * 20}}, "extra.receiverAuthorizer"),
    ({"extra": {"withdrawDelay": 899}}, "extra.withdrawDelay 899 is out of range"),
    ({"extra": {"withdrawDelay": 2_592_001}}, "extra.withdrawDelay"),
    ({"extra": {"withdrawDelay": "900"}}, "extra.withdrawDelay must be an integer"),
    ({"extra": {"withdrawDelay": True}}, "extra.withdrawDelay must be an integer"),
    ({"extra": {"withdrawDelay": 900.0}}, "extra.withdrawDelay must be an integer"),
    ({"extra": {"withdrawDelay": None}}, "extra.withdrawDelay"),
    ({"extra": {"assetTransferMethod": "eip2612"}}, "extra.assetTransferMethod"),
    ({"extra": {"assetTransferMethod": 1}}, "extra.assetTransferMethod"),
    ({"extra": {"name": None}}, "extra.name"),
    ({"extra": {"version": ""}}, "extra.version"),
    ({"extra": {"name": 5}}, "extra.name"),
    ({"extra": {"channelState": "x"}}, "extra.channelState must be an object"),
    ({"extra": {"channelState": {"balance": "1"}}}, "extra.channelState.channelId"),
    ({"extra": {"voucherState": {"signedMaxClaimable": "1"}}}, "extra.voucherState.signature"),
]


@pytest.mark.parametrize(("changes", "words"), HOSTILE)
def test_a_malformed_field_is_refused_by_name(changes: dict[str, Any], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        bs.parse_terms(entry(**changes))


@pytest.mark.parametrize("hint", ["999", "abc", "-5", 10000, str(1 << 128), "", None])
def test_a_bad_min_deposit_hint_is_ignored(hint: Any) -> None:
    terms = bs.parse_terms(entry(extra={"minDeposit": hint}))
    assert terms.min_deposit is None
    assert bs.parse_terms(entry(extra={"minDeposit": "1000"})).min_deposit == 1000
