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


def test_the_rails_digest_signer_signs_what_eth_account_signs() -> None:
    from x402_client._rails._evm_signing import DigestSigner

    account = Account.from_key(PAYER_KEY)
    key = DigestSigner(bytes.fromhex(PAYER_KEY[2:]))
    assert bs.sign_voucher(key, CHANNEL_84532, 777, 84532) == (
        bs.sign_voucher(account, CHANNEL_84532, 777, 84532)
    )
    for method in ("eip3009", "permit2"):
        terms = bs.parse_terms(entry(extra={"assetTransferMethod": method}))
        assert bs.deposit_authorization(
            key, terms, 5, CHANNEL_84532, NOW, random=lambda n: FIXED
        ) == bs.deposit_authorization(account, terms, 5, CHANNEL_84532, NOW, random=lambda n: FIXED)


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
    high = bytes(raw[:32]) + (bs._SECP256K1_N - s).to_bytes(32, "big") + bytes((55 - raw[64],))
    bad_v = bytes(raw[:64]) + bytes((29,))
    zero_s = bytes(raw[:32]) + bytes(32) + bytes(raw[64:])
    # eth-keys alone recovers the payer from the mirrored signature: only the rule refuses it.
    assert bs.voucher_signer(CHANNEL_84532, 5000, 84532, signature) == account.address
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


@pytest.mark.parametrize("chain", [0, -1, 1 << 256, True])
def test_no_voucher_or_channel_is_made_for_a_chain_that_cannot_be(chain: Any) -> None:
    with pytest.raises(ValueError, match="chain_id"):
        bs.sign_voucher(Account.from_key(PAYER_KEY), CHANNEL_84532, 1, chain)
    with pytest.raises(ValueError, match="chain_id"):
        VECTOR.channel_id(chain)


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


def test_a_merchant_holding_no_voucher_says_so_with_a_bare_signature() -> None:
    state = {"signedMaxClaimable": "0", "signature": "0x"}
    assert bs.parse_terms(entry(extra={"voucherState": state})).voucher_state is None


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


def test_an_entry_that_is_no_object_is_refused() -> None:
    with pytest.raises(ValueError, match="the accept entry must be an object"):
        bs.parse_terms(["batch-settlement"])  # type: ignore[arg-type]


@pytest.mark.parametrize("hint", ["999", "abc", "-5", 10000, str(1 << 128), "", None])
def test_a_bad_min_deposit_hint_is_ignored(hint: Any) -> None:
    terms = bs.parse_terms(entry(extra={"minDeposit": hint}))
    assert terms.min_deposit is None
    assert bs.parse_terms(entry(extra={"minDeposit": "1000"})).min_deposit == 1000


# --- deposits -------------------------------------------------------------------------------

NOW = 1_770_000_000
FIXED = bytes(range(32))


def test_the_erc3009_deposit_nonce_vector_and_the_foundations() -> None:
    encoding = foundation("x402.mechanisms.evm.batch_settlement.encoding")
    assert bs.erc3009_deposit_nonce(CHANNEL_84532, 1) == DEPOSIT_NONCE
    for salt in (0, 1, 1 << 255, int.from_bytes(FIXED, "big")):
        assert bs.erc3009_deposit_nonce(CHANNEL_31337, salt) == (
            encoding.build_erc3009_deposit_nonce(CHANNEL_31337, hex(salt))
        )
    with pytest.raises(ValueError, match="salt"):
        bs.erc3009_deposit_nonce(CHANNEL_84532, 1 << 256)


@pytest.mark.parametrize("method", ["eip3009", "permit2"])
def test_a_deposit_is_signed_as_eth_account_signs_its_typed_data(method: str) -> None:
    account = Account.from_key(PAYER_KEY)
    terms = bs.parse_terms(entry(extra={"assetTransferMethod": method}))
    authorization = bs.deposit_authorization(
        account, terms, 25_000, CHANNEL_84532, NOW, random=lambda n: FIXED
    )
    number = int.from_bytes(FIXED, "big")
    if method == "eip3009":
        document = bs.erc3009_deposit_typed_data(
            terms, account.address, 25_000, NOW + 300, number, CHANNEL_84532
        )
        signature = authorization["erc3009Authorization"]["signature"]
    else:
        document = bs.permit2_deposit_typed_data(
            terms, account.address, 25_000, number, NOW + 300, CHANNEL_84532
        )
        signature = authorization["permit2Authorization"]["signature"]
    expected = account.sign_message(encode_typed_data(full_message=document)).signature
    assert signature == "0x" + expected.hex()


def _requirements(terms_entry: dict[str, Any]) -> Any:
    schemas = foundation("x402.schemas")
    return schemas.PaymentRequirements.model_validate(terms_entry)


@pytest.mark.parametrize("method", ["eip3009", "permit2"])
def test_a_deposit_payload_is_the_foundations(method: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole deposit payload, byte for byte the foundation client's for the same salt
    or nonce and the same clock."""
    module = foundation(f"x402.mechanisms.evm.batch_settlement.client.{method}")
    signers = foundation("x402.mechanisms.evm.signers")
    types = foundation("x402.mechanisms.evm.batch_settlement.types")
    monkeypatch.setattr(module, "time", type("Clock", (), {"time": staticmethod(lambda: NOW)}))
    monkeypatch.setattr(module, "create_nonce", lambda: "0x" + FIXED.hex(), raising=False)
    monkeypatch.setattr(
        module, "create_permit2_nonce", lambda: str(int.from_bytes(FIXED, "big")), raising=False
    )
    account = Account.from_key(PAYER_KEY)
    raw = entry(extra={"assetTransferMethod": method})
    terms = bs.parse_terms(raw)
    config = bs.channel_config(terms, account.address, "0x" + "07" * 32)
    channel = config.channel_id(terms.chain_id)
    build = getattr(module, f"create_batch_settlement_{method}_deposit_payload")
    theirs = build(
        signers.EthAccountSigner(account),
        _requirements(raw),
        types.ChannelConfig.from_dict(config.to_wire()),
        "25000",
        "1000",
    ).to_dict()
    voucher = bs.voucher_wire(channel, 1000, bs.sign_voucher(account, channel, 1000, 84532))
    authorization = bs.deposit_authorization(
        account, terms, 25_000, channel, NOW, random=lambda n: FIXED
    )
    assert bs.deposit_payload(config, voucher, 25_000, authorization) == theirs


def test_the_voucher_and_refund_payloads_are_the_foundations() -> None:
    types = foundation("x402.mechanisms.evm.batch_settlement.types")
    account = Account.from_key(PAYER_KEY)
    config = bs.channel_config(bs.parse_terms(entry()), account.address, ZERO_SALT)
    channel = config.channel_id(84532)
    voucher = bs.voucher_wire(channel, 3000, bs.sign_voucher(account, channel, 3000, 84532))
    payload = bs.voucher_payload(config, voucher)
    assert types.VoucherPayload.from_dict(payload).to_dict() == payload
    assert payload["type"] == "voucher"
    full = bs.refund_payload(config, voucher)
    assert "amount" not in full
    assert types.RefundPayload.from_dict(full).to_dict() == full
    part = bs.refund_payload(config, voucher, 1500)
    assert part["amount"] == "1500"
    assert types.RefundPayload.from_dict(part).to_dict() == part


def test_a_malformed_payload_part_is_refused() -> None:
    account = Account.from_key(PAYER_KEY)
    terms = bs.parse_terms(entry())
    config = bs.channel_config(terms, account.address, ZERO_SALT)
    voucher = bs.voucher_wire(CHANNEL_84532, 1, bs.sign_voucher(account, CHANNEL_84532, 1, 84532))
    authorization = bs.deposit_authorization(account, terms, 10, CHANNEL_84532, NOW)
    with pytest.raises(ValueError, match="exactly one"):
        bs.deposit_payload(config, voucher, 10, {**authorization, "permit2Authorization": {}})
    with pytest.raises(ValueError, match="exactly one"):
        bs.deposit_payload(config, voucher, 10, {})
    with pytest.raises(ValueError, match="above zero"):
        bs.deposit_payload(config, voucher, 0, authorization)
    with pytest.raises(ValueError, match="channelId, maxClaimableAmount and signature"):
        bs.voucher_payload(config, {**voucher, "extra": 1})
    with pytest.raises(ValueError, match="maxClaimableAmount"):
        bs.voucher_payload(config, {**voucher, "maxClaimableAmount": 1})
    with pytest.raises(ValueError, match="signature"):
        bs.voucher_payload(config, {**voucher, "signature": "0x00"})
    with pytest.raises(ValueError, match="above zero"):
        bs.refund_payload(config, voucher, 0)
    with pytest.raises(ValueError, match="32 bytes"):
        bs.deposit_authorization(account, terms, 10, CHANNEL_84532, NOW, random=lambda n: b"1")


def test_each_deposit_authorization_is_fresh() -> None:
    account = Account.from_key(PAYER_KEY)
    terms = bs.parse_terms(entry())
    first = bs.deposit_authorization(account, terms, 10, CHANNEL_84532, NOW)
    second = bs.deposit_authorization(account, terms, 10, CHANNEL_84532, NOW)
    assert first["erc3009Authorization"]["salt"] != second["erc3009Authorization"]["salt"]
    assert first["erc3009Authorization"]["validBefore"] == str(NOW + 300)


# --- the merchant's acknowledgement ----------------------------------------------------------


def response(**state: Any) -> dict[str, Any]:
    """A voucher's payment response as the foundation's merchant sends it: request 2 of a
    channel charged 1000 before, priced 1000, the voucher signed for 2000."""
    channel_state: dict[str, Any] = {
        "channelId": CHANNEL_84532,
        "balance": "10000",
        "totalClaimed": "0",
        "withdrawRequestedAt": 0,
        "refundNonce": "0",
        "chargedCumulativeAmount": "2000",
    }
    charged = state.pop("chargedAmount", "1000")
    for key, value in state.items():
        if value is None:
            channel_state.pop(key, None)
        else:
            channel_state[key] = value
    extra: dict[str, Any] = {"channelState": channel_state}
    if charged is not None:
        extra["chargedAmount"] = charged
    return {
        "success": True,
        "transaction": "",
        "network": "eip155:84532",
        "payer": PAYER,
        "amount": "",
        "extra": extra,
    }


def acknowledge(settlement: dict[str, Any], **changes: Any) -> bs.Acknowledgement:
    arguments: dict[str, Any] = {
        "channel_id": CHANNEL_84532,
        "amount": 1000,
        "previous_charged": 1000,
        "signed": 2000,
    }
    return bs.check_acknowledgement(settlement, **(arguments | changes))


def test_an_honest_acknowledgement_is_taken() -> None:
    assert acknowledge(response()) == bs.Acknowledgement(1000, 2000, 10000, 0)
    # A dynamic price: the merchant charges less than the ceiling.
    cheaper = acknowledge(response(chargedAmount="400", chargedCumulativeAmount="1400"))
    assert (cheaper.charged, cheaper.charged_cumulative) == (400, 1400)
    # Upper-case hex in the merchant's channel id is the same channel.
    assert acknowledge(response(channelId=CHANNEL_84532.upper().replace("0X", "0x")))
    assert acknowledge(response(), expected_balance=10000).balance == 10000


def test_a_refund_is_acknowledged_with_no_charge() -> None:
    """A cooperative refund's response: no chargedAmount, the charged total unchanged, the
    balance down to what was charged (or, from a merchant that gave up its charges, to
    nothing: it says it cannot claim them)."""
    refunded = response(chargedAmount=None, balance="2000", totalClaimed="2000")
    arguments = {"amount": 0, "previous_charged": 2000, "signed": 2000}
    assert acknowledge(refunded, **arguments) == bs.Acknowledgement(0, 2000, 2000, 2000)
    generous = response(chargedAmount=None, balance="0", totalClaimed="0")
    assert acknowledge(generous, **arguments) == bs.Acknowledgement(0, 2000, 0, 0)
    with pytest.raises(bs.ChannelClaimRefused, match="charged 1"):
        acknowledge(response(chargedAmount="1", chargedCumulativeAmount="2001"), **arguments)


def test_a_silent_acknowledgement_is_read_as_the_whole_increment() -> None:
    silent = {"success": True, "transaction": "", "network": "eip155:84532"}
    assert acknowledge(silent) == bs.Acknowledgement(1000, 2000, None, None)
    partial = response(chargedAmount=None, balance=None, totalClaimed=None, channelId=None)
    assert acknowledge(partial) == bs.Acknowledgement(1000, 2000, None, None)
    implied = response(chargedAmount=None, chargedCumulativeAmount="1700")
    assert acknowledge(implied).charged == 700


#: Each of the scheme's client rules violated, and a claim above what was signed.
VIOLATIONS = [
    # 1. chargedAmount <= amount
    ({"chargedAmount": "1001", "chargedCumulativeAmount": "2001"}, {}, "charged 1001"),
    # 2. chargedCumulativeAmount == previous + chargedAmount
    ({"chargedCumulativeAmount": "1999"}, {}, "charged total 1999 is not the 2000"),
    ({"chargedAmount": "500", "chargedCumulativeAmount": "2000"}, {}, "not the 1500"),
    ({"chargedAmount": None, "chargedCumulativeAmount": "900"}, {}, "charged -100"),
    # 3. balance consistent with what the caller expects
    ({}, {"expected_balance": 12000}, "holds 10000, the chain 12000"),
    ({"balance": "9999"}, {"expected_balance": 10000}, "holds 9999, the chain 10000"),
    # 4. channelId matches
    ({"channelId": CHANNEL_31337}, {}, "answers for channel"),
    ({"channelId": 5}, {}, "answers for channel"),
    # never above what was signed
    ({}, {"signed": 1999, "previous_charged": 1000}, "above the 1999 signed"),
    ({"chargedCumulativeAmount": "3000"}, {}, "charged total of 3000, above the 2000 signed"),
    ({"totalClaimed": "2001"}, {}, "claimed 2001, more than the 2000"),
    # malformed
    ({"balance": "ten"}, {}, "malformed: channelState.balance"),
    ({"chargedAmount": "-1"}, {}, "malformed: chargedAmount"),
]


@pytest.mark.parametrize(("state", "changes", "words"), VIOLATIONS)
def test_an_acknowledgement_that_breaks_a_rule_is_refused(
    state: dict[str, Any], changes: dict[str, Any], words: str
) -> None:
    with pytest.raises(bs.ChannelClaimRefused, match=words):
        acknowledge(response(**state), **changes)


def test_an_acknowledgement_that_is_no_object_is_refused() -> None:
    with pytest.raises(bs.ChannelClaimRefused, match="malformed"):
        acknowledge({"extra": "x"})
    with pytest.raises(bs.ChannelClaimRefused, match="malformed"):
        acknowledge({"extra": {"channelState": []}})
    with pytest.raises(ValueError, match="previous_charged"):
        acknowledge(response(), previous_charged=2001)


# --- the corrective 402 ---------------------------------------------------------------------

AUTHORIZER_ACCOUNT = Account.from_key(PAYER_KEY)
CHANNEL = bs.channel_config(
    bs.parse_terms(entry()), AUTHORIZER_ACCOUNT.address, ZERO_SALT
).channel_id(84532)


def corrective(
    charged: int | None = 2000,
    ceiling: int | None = 2000,
    *,
    key: str = PAYER_KEY,
    channel: str = CHANNEL,
    voucher_channel: str = CHANNEL,
) -> bs.BatchTerms:
    """A corrective 402's entry: the merchant says it charged `charged` and holds the
    payer's voucher for `ceiling` (signed by `key` over `voucher_channel`)."""
    extra: dict[str, Any] = {}
    if charged is not None:
        extra["channelState"] = {
            "channelId": channel,
            "balance": "10000",
            "totalClaimed": "500",
            "withdrawRequestedAt": 0,
            "refundNonce": "0",
            "chargedCumulativeAmount": str(charged),
        }
    if ceiling is not None:
        signature = bs.sign_voucher(Account.from_key(key), voucher_channel, ceiling, 84532)
        extra["voucherState"] = {"signedMaxClaimable": str(ceiling), "signature": signature}
    return bs.parse_terms(entry(extra=extra))


def baseline(terms: bs.BatchTerms, **changes: Any) -> int:
    """The baseline for a payer that signed up to 4000 (its refused request's voucher:
    3000 + 1000), had 2000 acknowledged, and reads 500 claimed of 10000 on chain."""
    arguments: dict[str, Any] = {
        "channel_id": CHANNEL,
        "chain_id": 84532,
        "payer_authorizer": AUTHORIZER_ACCOUNT.address,
        "signed": 4000,
        "acknowledged": 2000,
        "chain_total_claimed": 500,
        "chain_balance": 10000,
    }
    return bs.corrective_baseline(terms, **(arguments | changes))


def test_a_proven_merchant_count_is_adopted() -> None:
    # The request that signed 3000 failed and was not charged: the merchant proves it holds
    # the voucher for 2000 and charged 2000; the next voucher is 3000 again.
    assert baseline(corrective(2000, 2000)) == 2000
    # The payer lost the acknowledgement of the request it signed 3000 for: it was charged.
    assert baseline(corrective(3000, 3000)) == 3000
    # A dynamic price: charged below the ceiling the merchant holds.
    assert baseline(corrective(2500, 3000)) == 2500
    assert baseline(corrective(4000, 4000)) == 4000
    # The chain's claimed total is a floor the merchant's count may sit on.
    assert baseline(corrective(500, 2000)) == 2000  # acknowledged is higher
    assert baseline(corrective(500, 600), acknowledged=0) == 500


def test_a_proven_count_below_what_was_acknowledged_keeps_the_acknowledged_total() -> None:
    assert baseline(corrective(1000, 1000)) == 2000


@pytest.mark.parametrize(
    ("terms", "changes"),
    [
        (corrective(2000, None), {}),  # no voucher state
        (corrective(None, 2000), {}),  # no channel state
        (corrective(2000, 2000, key=OTHER_KEY), {}),  # another key's voucher
        (corrective(2000, 2000, voucher_channel=CHANNEL_31337), {}),  # another channel's
        (corrective(2000, 2000, channel=CHANNEL_31337), {}),  # state of another channel
        (corrective(2500, 2000), {}),  # charged above the voucher it holds
        (corrective(400, 2000), {"acknowledged": 0}),  # below the chain's claimed total
        (corrective(2000, 2000), {"chain_balance": 1999}),  # above what the escrow holds
        (corrective(2000, 2000), {"chain_id": 31337}),  # signed for another chain
        # A smart-wallet channel's vouchers are not ECDSA: nothing to check them by here.
        (corrective(2000, 2000), {"payer_authorizer": "0x" + "00" * 20}),
    ],
)
def test_an_unproven_count_falls_back_to_everything_signed(
    terms: bs.BatchTerms, changes: dict[str, Any]
) -> None:
    assert baseline(terms, **changes) == 4000


def test_the_voucher_state_without_a_charged_total_proves_nothing() -> None:
    terms = corrective(2000, 2000)
    assert terms.channel_state is not None
    state = terms.channel_state.__class__(
        **{**vars(terms.channel_state), "charged_cumulative": None}
    )
    bare = bs.BatchTerms(**{**vars(terms), "channel_state": state})
    assert baseline(bare) == 4000


@pytest.mark.parametrize(
    ("terms", "changes", "words"),
    [
        # The merchant says it charged more than was ever signed (proof or not).
        (corrective(4001, 4001), {}, r"charged 4001 on channel .*above the 4000 signed"),
        (corrective(4001, None), {}, "charged 4001"),
        (corrective(4001, 2000, key=OTHER_KEY), {}, "charged 4001"),
        # It holds a voucher of this payer above anything the journal knows.
        (corrective(3000, 5000), {}, "holds a voucher of this payer for 5000"),
        # The chain shows claims above anything signed.
        (corrective(2000, 2000), {"chain_total_claimed": 4001}, "escrow shows 4001 claimed"),
    ],
)
def test_a_claim_above_what_was_signed_is_refused(
    terms: bs.BatchTerms, changes: dict[str, Any], words: str
) -> None:
    with pytest.raises(bs.ChannelClaimRefused, match=words):
        baseline(terms, **changes)


def test_the_next_voucher_never_reuses_a_charged_amount() -> None:
    """Whatever a corrective 402 says, the next voucher (baseline + amount) is above the
    acknowledged total, above the chain's claimed total, and never above what the merchant
    proves plus the price unless it is above everything signed."""
    for charged in range(0, 4501, 500):
        for ceiling in range(0, 4501, 500):
            for key in (PAYER_KEY, OTHER_KEY):
                try:
                    found = baseline(corrective(charged, ceiling, key=key))
                except bs.ChannelClaimRefused:
                    assert charged > 4000 or ceiling > 4000
                    continue
                assert found >= 2000
                assert found == 4000 or (key == PAYER_KEY and found in (charged, 2000))


def test_bad_counts_are_a_programming_error() -> None:
    with pytest.raises(ValueError, match="acknowledged cannot exceed signed"):
        baseline(corrective(), acknowledged=4001)
    with pytest.raises(ValueError, match="chain_balance"):
        baseline(corrective(), chain_balance=-1)


# --- escrow calls ---------------------------------------------------------------------------

TUPLE = "(address,address,address,address,address,uint40,bytes32)"


def test_the_escrow_selectors() -> None:
    for data, signature in (
        (bs.channels_call(CHANNEL), "channels(bytes32)"),
        (bs.refund_nonce_call(CHANNEL), "refundNonce(bytes32)"),
        (bs.pending_withdrawal_call(CHANNEL), "pendingWithdrawals(bytes32)"),
        (bs.initiate_withdraw_call(VECTOR, 5), f"initiateWithdraw({TUPLE},uint128)"),
        (bs.finalize_withdraw_call(VECTOR), f"finalizeWithdraw({TUPLE})"),
    ):
        assert data[:4] == keccak(text=signature)[:4]


def test_the_escrow_calldata_is_abi_encoded() -> None:
    eth_abi = require("eth_abi", "pip install 'x402-eur[evm]'")
    config = bs.ChannelConfig(
        PAYER, "0x" + "00" * 20, RECEIVER, AUTHORIZER, TOKEN, 86_400, "0x" + "ab" * 32
    )
    values = (
        PAYER,
        "0x" + "00" * 20,
        RECEIVER,
        AUTHORIZER,
        TOKEN,
        86_400,
        bytes.fromhex("ab" * 32),
    )
    assert bs.channels_call(CHANNEL)[4:] == eth_abi.encode(
        ["bytes32"], [bytes.fromhex(CHANNEL[2:])]
    )
    assert bs.initiate_withdraw_call(config, 12345)[4:] == eth_abi.encode(
        [TUPLE, "uint128"], [values, 12345]
    )
    assert bs.finalize_withdraw_call(config)[4:] == eth_abi.encode([TUPLE], [values])
    with pytest.raises(ValueError, match="above zero"):
        bs.initiate_withdraw_call(config, 0)
    with pytest.raises(ValueError, match="channel_id"):
        bs.channels_call("0x12")


def test_the_escrow_answers_are_decoded() -> None:
    eth_abi = require("eth_abi", "pip install 'x402-eur[evm]'")
    assert bs.decode_channels(eth_abi.encode(["uint128", "uint128"], [10_000, 500])) == (
        10_000,
        500,
    )
    assert bs.decode_uint(eth_abi.encode(["uint256"], [7])) == 7
    assert bs.decode_pending_withdrawal(eth_abi.encode(["uint128", "uint40"], [300, NOW])) == (
        300,
        NOW,
    )
    assert bs.decode_pending_withdrawal(bytes(64)) == (0, 0)
    with pytest.raises(ValueError, match=r"answered 0 bytes, not 64 .*deployed"):
        bs.decode_channels(b"")
    with pytest.raises(ValueError, match="beyond uint128"):
        bs.decode_channels(eth_abi.encode(["uint256", "uint256"], [1 << 128, 0]))
    with pytest.raises(ValueError, match="beyond its types"):
        bs.decode_pending_withdrawal(eth_abi.encode(["uint256", "uint256"], [1, 1 << 40]))
    with pytest.raises(ValueError, match="answered 33 bytes"):
        bs.decode_uint(bytes(33))
