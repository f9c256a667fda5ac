"""Why an entry is skipped, in the words of the rail it is for: one reason that names the
kind of payment, with every blocker of that entry together (and the settings that would
enable it in one "set ..."), never the other rails' "not a ... entry"."""

from __future__ import annotations

from typing import Any

import pytest

from x402_client import EvmOptions, PaymentOptions
from x402_client._flow.payment import Payer
from x402_client._protocol.policy import select
from x402_client._protocol.rail_interface import RequestSettings
from x402_client._rails import build_rails

KEY = "0x" + "42" * 32
TOKEN = "0x" + "1a" * 20
PAY_TO = "0x" + "2b" * 20
SPENDER = "0x" + "3c" * 20
USDC_BASE = "0x" + "4d" * 20
ACCOUNT = {"api_key": "k", "from_account": "ACC_P", "api_url": "https://api.example"}
ACCOUNT_ONLY = PaymentOptions(**ACCOUNT)
EVM_137 = PaymentOptions(evm=EvmOptions(private_key=KEY, rpc_urls={137: "http://127.0.0.1:1"}))
NOTHING = PaymentOptions()


def permit(**changes: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "scheme": "exact",
        "network": "eip155:137",
        "asset": TOKEN,
        "maxAmountRequired": "100000",
        "payTo": PAY_TO,
        "maxTimeoutSeconds": 300,
        "facilitator": "https://facilitator.example",
        "extra": {"symbol": "EURQ", "spender": SPENDER},
    }
    entry.update(changes)
    return {k: v for k, v in entry.items() if v is not None}


def eip3009(**changes: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "scheme": "exact",
        "network": "eip155:8453",
        "asset": USDC_BASE,
        "maxAmountRequired": "10000",
        "payTo": PAY_TO,
        "maxTimeoutSeconds": 300,
        "extra": {"name": "USD Coin", "version": "2"},
    }
    entry.update(changes)
    return entry


def euro(**changes: Any) -> dict[str, Any]:
    entry = {
        "scheme": "euro",
        "network": "provider:mainnet",
        "asset": "EURO",
        "amount": "0.10",
        "payTo": "ACC_M",
        "paymentRequestCode": "pr_1",
    }
    entry.update(changes)
    return entry


def chain_a(asset: str) -> dict[str, Any]:
    return {
        "scheme": "exact",
        "network": "ledgera:mainnet",
        "asset": asset,
        "maxAmountRequired": "100000",
        "payTo": "LEDGER_M",
        "maxTimeoutSeconds": 300,
    }


# (options, entry) -> the one reason it was skipped
TABLE = [
    (
        ACCOUNT_ONLY,
        permit(),
        "EVM permit for EURQ on eip155:137: set X402_EUR_EVM_PRIVATE_KEY and X402_EUR_RPC_URL_137",
    ),
    (
        EVM_137,
        permit(network="eip155:1"),
        "EVM permit for EURQ on eip155:1: no RPC URL configured for chain 1; "
        "set X402_EUR_RPC_URL_1",
    ),
    (
        ACCOUNT_ONLY,
        permit(extra={"symbol": "DAI", "spender": SPENDER}, facilitator=None),
        "EVM permit for DAI on eip155:137: EVM token 'DAI' is not EURQ or USDQ; it comes "
        "without a facilitator to check the spender with; set X402_EUR_EVM_PRIVATE_KEY and "
        "X402_EUR_RPC_URL_137",
    ),
    (
        EVM_137,
        permit(extra={"symbol": "EURQ", "spender": "0x1"}, payTo="ACC_M"),
        "EVM permit for EURQ on eip155:137: invalid extra.spender: Value error, spender must "
        "be a 0x-prefixed 20-byte address; its payTo is not an address",
    ),
    (
        ACCOUNT_ONLY,
        eip3009(),
        f"EIP-3009 transfer for USD Coin on eip155:8453: unknown asset {USDC_BASE} on "
        "eip155:8453 (declare it in PaymentOptions.assets or X402_EUR_ASSETS to pay it); "
        "set X402_EUR_EVM_PRIVATE_KEY",
    ),
    (
        EVM_137,
        eip3009(extra={"assetTransferMethod": "permit2"}, payTo="merchant"),
        f"Permit2 transfer for a token on eip155:8453: its payTo is not an address; unknown "
        f"asset {USDC_BASE} on eip155:8453 (declare it in PaymentOptions.assets or "
        "X402_EUR_ASSETS to pay it); no RPC URL configured for chain 8453 "
        "(EvmOptions.rpc_urls), so the Permit2 approval cannot be checked",
    ),
    (
        EVM_137,
        euro(),
        "euro payment for EURO on provider:mainnet: it pays from the account of api_key, "
        "from_account and api_url; set X402_EUR_API_KEY, X402_EUR_ACCOUNT and X402_EUR_API_URL",
    ),
    (
        ACCOUNT_ONLY,
        euro(network="provider:testnet"),
        "euro payment for EURO on provider:testnet: only EURO on provider:mainnet is paid",
    ),
    (
        ACCOUNT_ONLY,
        chain_a("2768603795"),
        "bridge payment for USDQ on ledgera:mainnet: the bridge delivers EURQ only (set "
        "PaymentOptions.chain_a to pay it from your own chain-A wallet; without one, a direct "
        "chain-A payment is manual)",
    ),
    (
        PaymentOptions(**{**ACCOUNT, "api_key": None}),
        chain_a("2768422954"),
        "bridge payment for EURQ on ledgera:mainnet: it pays from the account of api_key, "
        "from_account and api_url; set X402_EUR_API_KEY",
    ),
    (
        NOTHING,
        permit(network="solana:mainnet", asset="So1", payTo="So2", extra=None),
        "exact entry on solana:mainnet: no rail of this client pays it",
    ),
]


def skipped(options: PaymentOptions, entry: dict[str, Any], **settings: Any) -> list[str]:
    selection = select(
        [entry],
        rails=build_rails(Payer(options)).describers,
        options=options,
        settings=RequestSettings(**settings),
        headroom={},
        now=1_700_000_000,
        resource="https://merchant.example/paid",
    )
    assert selection.candidates == []
    return [s.message for s in selection.skipped]


@pytest.mark.parametrize(("options", "entry", "reason"), TABLE)
def test_the_reason_names_the_rail_and_every_blocker(
    options: PaymentOptions, entry: dict[str, Any], reason: str
):
    assert skipped(options, entry) == [reason]


def test_resuming_names_only_what_resuming_takes():
    assert skipped(ACCOUNT_ONLY, euro(), resume_transaction_code="QP1") == [
        "not a bridge entry (resuming a bridge payment)"
    ]
    assert skipped(ACCOUNT_ONLY, chain_a("2768603795"), resume_transaction_code="QP1") == [
        "not a bridge entry (resuming a bridge payment): bridge payment for USDQ on "
        "ledgera:mainnet: the bridge delivers EURQ only (set PaymentOptions.chain_a to pay it "
        "from your own chain-A wallet; without one, a direct chain-A payment is manual)"
    ]


def test_a_rail_the_options_leave_off_never_pays():
    payer = Payer(ACCOUNT_ONLY)
    rails = build_rails(payer)
    assert "evm-permit" not in [rail.name for rail in payer.rails]
    assert "evm-permit" in [describer.name for describer in rails.describers]
    assert [rail.name for rail in rails.enabled] == [rail.name for rail in payer.rails]
