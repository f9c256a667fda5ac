"""The direct chain-A rail's pure pieces: its options, the validity window, the proof, and
how the selection policy offers a chain-A entry to the wallet first and to the bridge next."""

from __future__ import annotations

import base64
import hashlib
import os
from decimal import Decimal
from typing import Any

import pytest

from x402_client import ChainAOptions, ConfigurationError, PaymentOptions
from x402_client._flow.payment import Payer
from x402_client._protocol.policy import SkipReason, select
from x402_client._protocol.rail_interface import RequestSettings, proves
from x402_client._rails.chain_a import (
    MAX_VALIDITY_ROUNDS,
    decode_direct_proof,
    direct_proof,
    is_address,
    validity_rounds,
)

KEY = base64.b64encode(bytes(range(64))).decode()
MNEMONIC = " ".join(["abandon"] * 24 + ["about"])
NODE = "https://node.example/v2key/abc"


def address(seed: bytes = b"merchant") -> str:
    key = hashlib.sha256(seed).digest()
    checksum = hashlib.new("sha512_256", key).digest()[-4:]
    return base64.b32encode(key + checksum).decode().rstrip("=")


def chain_a_entry(asset: str = "2768422954", amount: int = 100_000, **changes: Any) -> dict:
    entry = {
        "scheme": "exact",
        "network": "ledgera:mainnet",
        "asset": asset,
        "maxAmountRequired": str(amount),
        "payTo": address(),
        "maxTimeoutSeconds": 300,
        "resource": "https://merchant.example/weather",
        "description": "weather",
        "mimeType": "application/json",
        "facilitator": "https://facilitator.example",
    }
    entry.update(changes)
    return entry


# --- options ---------------------------------------------------------------------------------


def test_options_take_a_key_or_a_mnemonic_never_both_and_never_show_them():
    by_key = ChainAOptions(private_key=KEY, algod_url=NODE)
    by_words = ChainAOptions.model_validate({"mnemonic": MNEMONIC, "algodUrl": NODE})
    assert by_key.private_key is not None and by_key.private_key.get_secret_value() == KEY
    assert by_words.mnemonic is not None
    for shown in (repr(by_key), str(by_key), repr(by_words)):
        assert KEY not in shown and "abandon" not in shown
        assert "v2key" not in shown  # the node URL's path may carry a key
    with pytest.raises(ConfigurationError, match="exactly one of private_key and mnemonic"):
        PaymentOptions(chain_a={"private_key": KEY, "mnemonic": MNEMONIC, "algod_url": NODE})
    with pytest.raises(ConfigurationError, match="exactly one"):
        PaymentOptions(chain_a={"algod_url": NODE})


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"private_key": "not base64!", "algod_url": NODE}, "base64 of the 64-byte"),
        ({"private_key": base64.b64encode(b"x" * 32).decode(), "algod_url": NODE}, "64-byte"),
        ({"mnemonic": "one two three", "algod_url": NODE}, "25 words"),
        ({"private_key": KEY, "algod_url": "node.example"}, "http(s) URL"),
        ({"private_key": KEY}, "algodUrl: Field required"),
        ({"private_key": KEY, "algod_url": NODE, "rpc": "x"}, "rpc"),
    ],
)
def test_bad_options_name_the_problem_not_the_value(values, message):
    with pytest.raises(ConfigurationError) as caught:
        PaymentOptions(chain_a=values)
    assert message in str(caught.value)
    assert "invalid ChainAOptions" in str(caught.value)
    secret = values.get("private_key") or values.get("mnemonic")
    if secret:
        assert secret not in str(caught.value)


def test_options_from_the_environment():
    env = {
        "X402_EUR_CHAIN_A_MNEMONIC": MNEMONIC,
        "X402_EUR_CHAIN_A_ALGOD_URL": NODE,
        "X402_EUR_CHAIN_A_ALGOD_TOKEN": "tok",
        "X402_EUR_CHAIN_A_INDEXER_URL": "https://indexer.example",
    }
    options = PaymentOptions.from_env(env)  # a wallet alone is a usable configuration
    assert options.chain_a is not None
    assert options.chain_a.algod_token is not None
    assert options.chain_a.algod_token.get_secret_value() == "tok"
    assert options.chain_a.indexer_url == "https://indexer.example"
    assert options.currencies == ("EUR", "USD")
    with pytest.raises(ConfigurationError, match="X402_EUR_CHAIN_A_ALGOD_URL"):
        PaymentOptions.from_env({"X402_EUR_CHAIN_A_PRIVATE_KEY": KEY})
    assert (
        PaymentOptions.from_env(
            {
                "X402_EUR_API_KEY": "k",
                "X402_EUR_ACCOUNT": "ACC_1",
                "X402_EUR_API_URL": "https://a.example",
            }
        ).chain_a
        is None
    )


# --- pure pieces -----------------------------------------------------------------------------


def test_the_validity_window_never_outlives_the_merchants_timeout():
    assert validity_rounds(300, 2.8) == 107
    assert validity_rounds(3, 2.8) == 1
    assert validity_rounds(1, 2.8) == 1  # at least one round
    assert validity_rounds(10**6, 2.8) == MAX_VALIDITY_ROUNDS


def test_addresses_are_checked_with_their_checksum():
    good = address()
    assert is_address(good)
    flipped = ("B" if good[0] == "A" else "A") + good[1:]
    assert not is_address(flipped)
    assert not is_address("ACC_MERCHANT")


def test_a_direct_proof_carries_the_signed_transaction_and_index_zero():
    from algosdk import account, transaction
    from algosdk.atomic_transaction_composer import AccountTransactionSigner

    secret, sender = account.generate_account()
    params = transaction.SuggestedParams(
        fee=1000,
        first=10,
        last=117,
        gh=base64.b64encode(bytes(32)).decode(),
        gen="x",
        flat_fee=True,
    )
    unsigned = transaction.AssetTransferTxn(
        sender, params, address(), 100_000, 2768422954, lease=os.urandom(32)
    )
    signed = AccountTransactionSigner(secret).sign_transactions([unsigned], [0])[0]
    raw = base64.b64decode(__import__("algosdk").encoding.msgpack_encode(signed))
    proof = direct_proof("ledgera:mainnet", raw)
    found = decode_direct_proof(proof)
    assert found is not None
    assert found.txid == signed.get_txid()
    assert (found.sender, found.receiver, found.asset_id, found.amount) == (
        sender,
        address(),
        2768422954,
        100_000,
    )
    assert (found.first_valid, found.last_valid) == (10, 117)
    assert decode_direct_proof("not a proof") is None


def test_a_re_sent_proof_goes_to_the_rail_whose_payload_it_carries():
    direct = {"payload": {"transaction": "AAAA", "paymentIndex": 0}}
    bridged = {"payload": {"transactionCode": "QP1", "blockchainTxId": "X"}}
    payer = Payer(
        PaymentOptions(
            api_key="k",
            from_account="ACC_P",
            api_url="https://api.example",
            chain_a={"private_key": KEY, "algod_url": NODE},
        )
    )
    rails = {rail.name: rail for rail in payer.rails}
    assert proves(rails["chain-a"], direct) and not proves(rails["chain-a"], bridged)
    assert proves(rails["bridge"], bridged) and not proves(rails["bridge"], direct)
    assert proves(rails["euro"], direct)  # a rail that names no fields: any of its entries


# --- the policy: the wallet first, the bridge next ---------------------------------------------


def choose(accepts: list[Any], options: PaymentOptions):
    return select(
        accepts,
        rails=Payer(options).rails,
        options=options,
        settings=RequestSettings(),
        headroom={},
        now=1_700_000_000,
        resource="https://merchant.example/weather",
    )


MANAGED = {"api_key": "k", "from_account": "ACC_P", "api_url": "https://api.example"}
WALLET = {"chain_a": {"private_key": KEY, "algod_url": NODE}}


def test_a_chain_a_entry_is_offered_to_the_wallet_then_to_the_bridge():
    both = choose([chain_a_entry()], PaymentOptions(**MANAGED, **WALLET))
    assert [(c.index, c.intent.rail) for c in both.candidates] == [(0, "chain-a"), (0, "bridge")]
    preferred = choose([chain_a_entry()], PaymentOptions(**MANAGED, **WALLET, prefer="bridge"))
    assert [c.intent.rail for c in preferred.candidates] == ["bridge", "chain-a"]
    picked = choose(
        [chain_a_entry()],
        PaymentOptions(**MANAGED, **WALLET, selector=lambda intents: intents[-1]),
    )
    assert [c.intent.rail for c in picked.candidates] == ["bridge"]
    assert [s.reason for s in picked.skipped] == [SkipReason.NOT_CHOSEN]
    # Without a wallet: the bridge, as before; without a managed account: the wallet.
    assert [
        c.intent.rail for c in choose([chain_a_entry()], PaymentOptions(**MANAGED)).candidates
    ] == ["bridge"]
    assert [
        c.intent.rail for c in choose([chain_a_entry()], PaymentOptions(**WALLET)).candidates
    ] == ["chain-a"]


def test_usdq_is_the_wallets_alone_and_counts_as_dollars():
    selection = choose([chain_a_entry(asset="2768603795")], PaymentOptions(**MANAGED, **WALLET))
    [candidate] = selection.candidates
    assert (candidate.intent.rail, candidate.intent.currency) == ("chain-a", "USD")
    assert candidate.intent.amount == Decimal("0.1")


def test_one_limit_met_by_both_rails_of_an_entry_is_reported_once():
    options = PaymentOptions(**MANAGED, **WALLET, max_amount_per_payment="0.05")
    selection = choose([chain_a_entry()], options)
    assert selection.candidates == []
    assert [s.reason for s in selection.skipped] == [SkipReason.OVER_CAP]


def test_entries_the_wallet_cannot_pay_say_why():
    options = PaymentOptions(**WALLET)
    cases = {
        "is not EURQ or USDQ": chain_a_entry(asset="31566704"),
        "not a chain-A address": chain_a_entry(payTo="ACC_MERCHANT"),
    }
    for expected, entry in cases.items():
        selection = choose([entry], options)
        assert selection.candidates == []
        assert expected in selection.skipped[0].message


# --- the sandbox's chain-A node and facilitator are the sandbox's own code -------------------


@pytest.mark.parametrize("name", ["_algod.py", "_chain_a_direct.py"])
def test_the_sandbox_chain_a_modules_import_nothing_of_the_client(name):
    import ast
    import pathlib

    import x402_eur_sandbox

    path = pathlib.Path(x402_eur_sandbox.__file__).with_name(name)
    imported = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add("." * node.level + (node.module or ""))
    assert not [m for m in imported if m.startswith("x402_client") or m.startswith("..")]
    # Relative imports stay inside the sandbox, among modules that import no client code.
    assert {m for m in imported if m.startswith(".")} <= {"._bank", "._faults", "._chain_a_direct"}


def test_a_key_whose_halves_do_not_match_is_refused_before_signing():
    from x402_client._rails.chain_a import _Wallet

    with pytest.raises(ValueError, match="public half does not match"):
        _Wallet(ChainAOptions(private_key=KEY, algod_url=NODE))
    seed = bytes(32)
    from nacl.signing import SigningKey

    good = base64.b64encode(seed + bytes(SigningKey(seed).verify_key)).decode()
    assert is_address(_Wallet(ChainAOptions(private_key=good, algod_url=NODE)).address)


def test_the_chain_a_variables_are_listed_with_the_others():
    from x402_client._options import ENV_VARS

    assert {name: variables for name, variables in ENV_VARS.items() if "chain_a" in name} == {
        "chain_a_private_key": ("X402_EUR_CHAIN_A_PRIVATE_KEY",),
        "chain_a_mnemonic": ("X402_EUR_CHAIN_A_MNEMONIC",),
        "chain_a_algod_url": ("X402_EUR_CHAIN_A_ALGOD_URL",),
        "chain_a_algod_token": ("X402_EUR_CHAIN_A_ALGOD_TOKEN",),
        "chain_a_indexer_url": ("X402_EUR_CHAIN_A_INDEXER_URL",),
    }


def test_chain_a_options_are_options_like_the_others():
    # Declared like PaymentOptions' own: camelCase keys, bounds, "did you mean", copies
    # that are validated, immutable, and no secret or node URL path in any repr.
    options = ChainAOptions.model_validate(
        {
            "privateKey": KEY,
            "algodUrl": NODE + "/",
            "algodToken": "tok_secret_9",
            "roundSeconds": "3",
        }
    )
    assert options.algod_url == NODE and options.round_seconds == 3.0
    assert (
        options.algod_token is not None and options.algod_token.get_secret_value() == "tok_secret_9"
    )
    assert options.model_copy(update={"timeout": 5}).timeout == 5.0
    assert options.model_dump(by_alias=True)["algodUrl"] == NODE
    for text in (repr(options), str(options), repr(PaymentOptions(chain_a=options))):
        assert KEY not in text and "tok_secret_9" not in text and "v2key" not in text
    with pytest.raises(AttributeError):
        options.timeout = 1.0  # type: ignore[misc]
    for values, message in (
        ({"round_seconds": 0}, "round_seconds: Input should be greater than 0"),
        ({"timeout": "soon"}, "timeout: Input should be a valid number"),
        ({"algod_urll": NODE}, "algod_urll: unknown option; did you mean 'algod_url'?"),
    ):
        with pytest.raises(ConfigurationError) as caught:
            ChainAOptions(**{"private_key": KEY, "algod_url": NODE, **values})
        assert str(caught.value).startswith(f"invalid ChainAOptions: {message}")
    with pytest.raises(ConfigurationError, match="chain_a: Input should be a valid dictionary"):
        PaymentOptions(chain_a="wallet")  # type: ignore[arg-type]
