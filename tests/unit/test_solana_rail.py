"""The Solana rail's pure pieces: keys in the forms users hold them, the options, the
assets, the account layouts, the blockhash rule, and the transaction, byte for byte what
the scheme's spec builds (written here again with `solders` alone)."""

from __future__ import annotations

import base64
import json

import pytest
from solders.hash import Hash
from solders.instruction import AccountMeta, Instruction
from solders.keypair import Keypair
from solders.message import MessageV0, to_bytes_versioned
from solders.pubkey import Pubkey
from solders.signature import Signature
from solders.transaction import VersionedTransaction

from x402_client import Asset, ConfigurationError, PaymentOptions, SvmOptions
from x402_client._options import ENV_VARS
from x402_client._protocol.assets import find_svm_asset
from x402_client._protocol.solana_chain import (
    SOLANA_DEVNET,
    SOLANA_MAINNET,
    TOKEN_2022_PROGRAM,
    TOKEN_PROGRAM,
    b58decode,
    b58encode,
    is_pubkey,
    mint_decimals,
    secret_key_bytes,
    solana_network,
    token_account,
)
from x402_client._rails.solana import (
    Plan,
    associated_token_address,
    blockhash_blockers,
    build_transaction,
)

KEY = Keypair.from_seed(bytes(range(32)))
BASE58 = str(KEY)
ID_JSON = json.dumps(list(bytes(KEY)))


def test_base58_is_the_one_solana_uses() -> None:
    assert b58encode(bytes(range(32))) == str(Pubkey(bytes(range(32))))
    assert b58encode(bytes(KEY)) == str(KEY)
    for raw in (b"", b"\0\0\1", bytes(range(32)), bytes(KEY)):
        assert b58decode(b58encode(raw)) == raw
    assert b58decode(BASE58) == bytes(KEY)
    assert is_pubkey(str(KEY.pubkey()))
    assert not is_pubkey("0x" + "ab" * 20)
    assert not is_pubkey(BASE58)  # 64 bytes: a secret, not an address


def test_a_secret_key_is_read_in_both_forms_users_hold_it() -> None:
    assert secret_key_bytes(BASE58) == bytes(KEY)
    assert secret_key_bytes(ID_JSON) == bytes(KEY)
    assert secret_key_bytes(f"  {ID_JSON}\n") == bytes(KEY)


@pytest.mark.parametrize(
    "bad", [BASE58[:-3], "[1, 2, 3]", "[" + ",".join(["300"] * 64) + "]", "not base58 0OIl", "[x]"]
)
def test_a_bad_secret_key_is_refused_without_being_shown(bad: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        SvmOptions(secret_key=bad, rpc_url="http://127.0.0.1:8899")
    assert bad not in str(caught.value)
    assert "secret_key" in str(caught.value)


def test_the_options_never_show_the_key_nor_the_rpc_urls_path() -> None:
    options = SvmOptions(secret_key=ID_JSON, rpc_url="https://rpc.example/v1/k3y0000000000")
    for text in (repr(options), str(options), repr(PaymentOptions(svm=options))):
        assert BASE58 not in text
        assert ID_JSON not in text
        assert "k3y0000000000" not in text
    assert options.secret_key.get_secret_value() == ID_JSON


def test_the_environment_gives_the_wallet() -> None:
    assert ENV_VARS["svm_secret_key"] == ("X402_EUR_SVM_SECRET_KEY",)
    assert ENV_VARS["svm_rpc_url"] == ("X402_EUR_SVM_RPC_URL",)
    env = {"X402_EUR_SVM_SECRET_KEY": BASE58, "X402_EUR_SVM_RPC_URL": "http://127.0.0.1:8899"}
    options = PaymentOptions.from_env(env)
    assert options.svm is not None
    assert options.svm.rpc_url == "http://127.0.0.1:8899"
    assert options.currencies == ("EUR", "USD")
    assert SvmOptions.from_env({}) is None
    with pytest.raises(ConfigurationError, match="X402_EUR_SVM_RPC_URL must be set"):
        SvmOptions.from_env({"X402_EUR_SVM_SECRET_KEY": BASE58})


def test_networks_are_the_foundations() -> None:
    assert solana_network("solana") == SOLANA_MAINNET
    assert solana_network("solana-devnet") == SOLANA_DEVNET
    assert solana_network(SOLANA_DEVNET) == SOLANA_DEVNET
    assert solana_network("solana:unknown") is None
    assert solana_network("eip155:8453") is None


def test_a_solana_asset_is_declared_by_network_and_mint() -> None:
    mint = str(Keypair.from_seed(b"m" * 32).pubkey())
    asset = Asset(chain_id="solana-devnet", address=mint, symbol="sEURC", currency="eur")
    assert (asset.chain_id, asset.currency, asset.key) == (
        SOLANA_DEVNET,
        "EUR",
        (SOLANA_DEVNET, mint),
    )
    assert find_svm_asset("solana-devnet", mint, [asset]) is asset
    assert find_svm_asset(SOLANA_DEVNET, mint.lower(), [asset]) is None  # base58 is case-sensitive
    assert find_svm_asset(SOLANA_MAINNET, mint, [asset]) is None
    with pytest.raises(ConfigurationError, match="not a Solana mint"):
        Asset(chain_id=SOLANA_DEVNET, address="0x" + "ab" * 20, symbol="X", currency="EUR")
    with pytest.raises(ConfigurationError, match="not a Solana network"):
        Asset(chain_id="solana:nope", address=mint, symbol="X", currency="EUR")
    evm = Asset(chain_id="8453", address="0x" + "ab" * 20, symbol="X", currency="EUR")
    assert evm.key == (8453, "0x" + "ab" * 20)  # an EVM chain id written as text
    options = PaymentOptions.from_env(
        {
            "X402_EUR_SVM_SECRET_KEY": BASE58,
            "X402_EUR_SVM_RPC_URL": "http://127.0.0.1:8899",
            "X402_EUR_ASSETS": f"{SOLANA_DEVNET}:{mint}:sEURC:EUR:6,solana:{mint}:sX:USD",
        }
    )
    assert [(a.chain_id, a.symbol, a.decimals) for a in options.assets] == [
        (SOLANA_DEVNET, "sEURC", 6),
        (SOLANA_MAINNET, "sX", 6),
    ]


def test_circles_mints_are_built_in() -> None:
    usdc = find_svm_asset("solana", "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v")
    devnet_usdc = find_svm_asset("solana-devnet", "4zMMC9srt5Ri5X14GAgXhaHii3GnPAEERYPJgZJDncDU")
    eurc = find_svm_asset(SOLANA_MAINNET, "HzwqbKZw8HxMN6bF2yFZNrht3c2iXXzpKcFu7uBEDKtr")
    assert usdc is not None and devnet_usdc is not None and eurc is not None
    assert [(a.symbol, a.currency, a.decimals) for a in (usdc, devnet_usdc, eurc)] == [
        ("USDC", "USD", 6),
        ("USDC", "USD", 6),
        ("EURC", "EUR", 6),
    ]
    assert all(a.source for a in (usdc, devnet_usdc, eurc))


def _mint_data(decimals: int, *, extension: bool = False) -> bytes:
    data = bytearray(82)
    data[44], data[45] = decimals, 1
    if extension:
        data += bytes(165 - 82) + bytes([1]) + bytes(10)
    return bytes(data)


def _token_account_data(mint: bytes, owner: bytes, amount: int, state: int = 1) -> bytes:
    data = bytearray(165)
    data[0:32], data[32:64] = mint, owner
    data[64:72] = amount.to_bytes(8, "little")
    data[108] = state
    return bytes(data)


def test_the_account_layouts_are_read_as_the_token_programs_write_them() -> None:
    assert mint_decimals(_mint_data(6)) == 6
    assert mint_decimals(_mint_data(2, extension=True)) == 2
    assert mint_decimals(bytes(82)) is None  # not initialized
    assert mint_decimals(bytes(100)) is None
    mint, owner = bytes(KEY.pubkey()), bytes(range(32))
    held = token_account(_token_account_data(mint, owner, 123))
    assert held is not None
    assert (held.mint, held.owner, held.amount, held.frozen) == (
        str(KEY.pubkey()),
        str(Pubkey(owner)),
        123,
        False,
    )
    frozen = token_account(_token_account_data(mint, owner, 1, state=2))
    assert frozen is not None and frozen.frozen
    assert token_account(_token_account_data(mint, owner, 1, state=0)) is None
    assert token_account(_mint_data(6)) is None


def test_a_blockhash_must_live_as_long_as_the_merchant_may_take() -> None:
    assert blockhash_blockers(blocks_left=150, max_timeout_seconds=60, slot_seconds=0.4) is None
    assert blockhash_blockers(blocks_left=75, max_timeout_seconds=300, slot_seconds=0.4) is None
    assert blockhash_blockers(blocks_left=25, max_timeout_seconds=10, slot_seconds=0.4) is None
    refused = blockhash_blockers(blocks_left=24, max_timeout_seconds=10, slot_seconds=0.4)
    assert refused is not None and "24 blocks" in refused and "maxTimeoutSeconds (10)" in refused
    assert blockhash_blockers(blocks_left=-3, max_timeout_seconds=60, slot_seconds=0.4)


def _plan(program: str, memo: bytes) -> Plan:
    mint = str(Keypair.from_seed(b"m" * 32).pubkey())
    pay_to = str(Keypair.from_seed(b"p" * 32).pubkey())
    payer = str(KEY.pubkey())
    return Plan(
        payer=payer,
        fee_payer=str(Keypair.from_seed(b"f" * 32).pubkey()),
        mint=mint,
        program=program,
        decimals=6,
        source=associated_token_address(payer, mint, program),
        destination=associated_token_address(pay_to, mint, program),
        amount=50_000,
        memo=memo,
        blockhash=str(Hash(bytes(range(1, 33)))),
        last_valid_block_height=1_000,
        compute_unit_limit=20_000,
        compute_unit_price=1,
    )


def _spec_transaction(plan: Plan) -> VersionedTransaction:
    """The scheme's transaction, written from `scheme_exact_svm.md` with solders only."""
    key = Pubkey.from_string
    budget = key("ComputeBudget111111111111111111111111111111")
    ata = key("ATokenGPvbdGVxr1b2hvZbsiqW5xWH25efTNsLJA8knL")
    program, mint = key(plan.program), key(plan.mint)
    source = Pubkey.find_program_address([bytes(KEY.pubkey()), bytes(program), bytes(mint)], ata)[0]
    pay_to = Keypair.from_seed(b"p" * 32).pubkey()
    destination = Pubkey.find_program_address([bytes(pay_to), bytes(program), bytes(mint)], ata)[0]
    instructions = [
        Instruction(budget, bytes([2]) + (20_000).to_bytes(4, "little"), []),
        Instruction(budget, bytes([3]) + (1).to_bytes(8, "little"), []),
        Instruction(
            program,
            bytes([12]) + (50_000).to_bytes(8, "little") + bytes([6]),
            [
                AccountMeta(source, is_signer=False, is_writable=True),
                AccountMeta(mint, is_signer=False, is_writable=False),
                AccountMeta(destination, is_signer=False, is_writable=True),
                AccountMeta(KEY.pubkey(), is_signer=True, is_writable=False),
            ],
        ),
        Instruction(key("MemoSq4gqABAXKb96qnH8TysNcWxMyWCqXgDLGmfcHr"), plan.memo, []),
    ]
    message = MessageV0.try_compile(
        key(plan.fee_payer), instructions, [], Hash.from_string(plan.blockhash)
    )
    signature = KEY.sign_message(to_bytes_versioned(message))
    return VersionedTransaction.populate(message, [Signature.default(), signature])


@pytest.mark.parametrize("program", [TOKEN_PROGRAM, TOKEN_2022_PROGRAM])
def test_the_transaction_is_the_specs_byte_for_byte(program: str) -> None:
    plan = _plan(program, b"x402-eur invoice 7")
    built = build_transaction(plan, KEY)
    assert bytes(built) == bytes(_spec_transaction(plan))
    assert built.signatures[0] == Signature.default()  # the facilitator's slot, left empty
    assert built.verify_with_results() == [False, True]
    assert str(built.message.account_keys[0]) == plan.fee_payer
    assert base64.b64decode(base64.b64encode(bytes(built))) == bytes(built)


def test_a_key_that_is_not_the_plans_payer_signs_nothing() -> None:
    with pytest.raises(ValueError, match="the plan's payer"):
        build_transaction(_plan(TOKEN_PROGRAM, b"m"), Keypair.from_seed(b"o" * 32))


def test_only_definite_answers_void_a_journaled_transaction() -> None:
    from x402_client._rails.solana import _Journaled, _verdict

    mine = _Journaled("sig" * 10, "hash", "source", "memo")
    assert _verdict(mine, False, (True, 7, False)).status == "confirmed"
    assert _verdict(mine, True, (True, 7, False)).status == "confirmed"
    assert _verdict(mine, False, (True, 7, True)).status == "void"  # it failed
    assert _verdict(mine, True, (False, None, False)).status == "pending"
    assert _verdict(mine, False, (False, None, False)).status == "void"
    # a history longer than was read says nothing, dead blockhash or not
    assert _verdict(mine, False, None).status == "unknown"
    assert _verdict(mine, True, None).status == "unknown"
