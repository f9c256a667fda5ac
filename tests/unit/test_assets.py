"""The built-in asset table: every address checksummed and cited, lookups by (chain, address)
case-insensitive, a declared asset winning over the table, and exact amounts."""

from __future__ import annotations

from decimal import Decimal

import pytest
from eth_utils.address import to_checksum_address

from x402_client import ConfigurationError, PaymentOptions
from x402_client._protocol.assets import KNOWN_ASSETS, Asset, find_asset

BASE_EURC = "0x60a3E35Cc302bFA44Cb288Bc5a4F316Fdb1adb42"
BASE_USDC = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"


def test_every_entry_is_checksummed_cited_and_keyed_by_itself() -> None:
    assert KNOWN_ASSETS
    for key, asset in KNOWN_ASSETS.items():
        assert asset.address == to_checksum_address(asset.address), asset
        assert key == (asset.chain_id, asset.address.lower())
        assert asset.source.strip(), asset
        assert asset.decimals == 6
        assert (asset.symbol, asset.currency) in (("EURC", "EUR"), ("USDC", "USD"))
        # A domain is recorded whole or not at all.
        assert (asset.eip712_name is None) == (asset.eip712_version is None)


def test_the_table_covers_the_main_chains() -> None:
    symbols = {(a.chain_id, a.symbol) for a in KNOWN_ASSETS.values()}
    for chain_id in (1, 8453, 84532):
        assert (chain_id, "EURC") in symbols
        assert (chain_id, "USDC") in symbols
    for chain_id in (43114, 137, 42161):
        assert (chain_id, "USDC") in symbols


def test_usdc_matches_the_foundations_default_assets() -> None:
    """Every USDC entry the foundation's package also lists has its address and domain."""
    from x402.mechanisms.evm.default_assets import DEFAULT_ASSETS

    checked = 0
    for asset in KNOWN_ASSETS.values():
        listed = [
            entry
            for entry in DEFAULT_ASSETS.get(f"eip155:{asset.chain_id}", [])
            if entry["asset"].lower() == asset.address.lower()
        ]
        if asset.symbol != "USDC" or not listed:
            continue
        [entry] = listed
        assert entry["asset"] == asset.address
        assert (entry["name"], entry["version"]) == (asset.eip712_name, asset.eip712_version)
        assert entry["decimals"] == asset.decimals
        checked += 1
    assert checked == 7


def test_known_addresses() -> None:
    assert KNOWN_ASSETS[(8453, BASE_EURC.lower())].symbol == "EURC"
    assert KNOWN_ASSETS[(8453, BASE_USDC.lower())].symbol == "USDC"
    assert KNOWN_ASSETS[(84532, "0x036cbd53842c5426634e7929541ec2318f3dcf7e")].eip712_name == (
        "USDC"
    )
    # No address is listed twice on one chain, and one address is one token.
    assert len(KNOWN_ASSETS) == len(
        {(a.chain_id, a.address.lower()) for a in KNOWN_ASSETS.values()}
    )


def test_lookup_is_case_insensitive() -> None:
    for address in (BASE_EURC, BASE_EURC.lower(), "0x" + BASE_EURC[2:].upper()):
        found = find_asset(8453, address)
        assert found is not None
        assert found.symbol == "EURC"
    assert find_asset(1, BASE_EURC) is None  # the right address on the wrong chain
    assert find_asset(8453, "0x" + "00" * 20) is None


def test_a_declared_asset_wins() -> None:
    mine = Asset(chain_id=8453, address=BASE_EURC.lower(), symbol="MYEUR", currency="eur")
    other = Asset(chain_id=1, address=BASE_EURC, symbol="OTHER", currency="USD")
    assert find_asset(8453, BASE_EURC, [other, mine]) is mine
    assert find_asset(8453, BASE_USDC, [mine]) is KNOWN_ASSETS[(8453, BASE_USDC.lower())]
    new = Asset(chain_id=31337, address="0x" + "ab" * 20, symbol="T", currency="USD")
    assert find_asset(31337, "0x" + "AB" * 20, (new,)) is new


def test_declared_assets_in_options() -> None:
    mine = Asset(chain_id=31337, address="0x" + "ab" * 20, symbol="T", currency="EUR")
    assert PaymentOptions(assets=mine).assets == (mine,)
    assert PaymentOptions(assets=[mine]).assets == (mine,)


def test_asset_validation() -> None:
    assert Asset(chain_id=1, address="0x" + "ab" * 20, symbol="T", currency="eur").currency == (
        "EUR"
    )
    with pytest.raises(ConfigurationError):
        Asset(chain_id=1, address="0xabc", symbol="T", currency="EUR")
    with pytest.raises(ConfigurationError):
        Asset(chain_id=1, address="0x" + "ab" * 20, symbol="T", currency="GBP")
    with pytest.raises(ConfigurationError):
        Asset(chain_id=1, address="0x" + "ab" * 20, symbol="T", currency="EUR", decimals=37)


def test_assets_from_the_environment_say_what_is_wrong_with_their_decimals() -> None:
    address = "0x" + "ab" * 20
    account = {
        "X402_EUR_API_KEY": "sk_test_assets",
        "X402_EUR_ACCOUNT": "ACC_ASSETS",
        "X402_EUR_API_URL": "http://127.0.0.1:9",
    }

    def assets(text: str) -> tuple[Asset, ...]:
        return PaymentOptions.from_env({**account, "X402_EUR_ASSETS": text}).assets

    assert assets(f"31337:{address}:T:EUR:18")[0].decimals == 18
    assert assets(f"31337:{address}:T:EUR")[0].decimals == 6
    for wrong in ("six", "-1", "6.0", "", "\u0663"):
        with pytest.raises(ConfigurationError, match="X402_EUR_ASSETS: DECIMALS must be"):
            assets(f"31337:{address}:T:EUR:{wrong}")
    with pytest.raises(ConfigurationError, match="between 0 and 36"):
        assets(f"31337:{address}:T:EUR:40")


@pytest.mark.parametrize(
    ("decimals", "atomic", "expected"),
    [
        (6, 10_000, "0.010000"),
        (6, 1, "0.000001"),
        (6, 100_000, "0.100000"),
        (6, 1_000_000, "1.000000"),
        (6, 0, "0.000000"),
        (2, 12345, "123.45"),
        (0, 7, "7"),
        (18, 1, "0.000000000000000001"),
        (18, 10**18 + 5, "1.000000000000000005"),
        (
            36,
            2**256 - 1,
            "115792089237316195423570985008687907853269.984665640564039457584007913129639935",
        ),
    ],
)
def test_amount_is_exact(decimals: int, atomic: int, expected: str) -> None:
    asset = Asset(
        chain_id=1, address="0x" + "ab" * 20, symbol="T", currency="EUR", decimals=decimals
    )
    amount = asset.amount(atomic)
    assert isinstance(amount, Decimal)
    assert format(amount, "f") == expected
    assert amount.as_tuple().exponent == -decimals


def test_amount_refuses_what_is_not_an_atomic_int() -> None:
    asset = Asset(chain_id=1, address="0x" + "ab" * 20, symbol="T", currency="EUR")
    for bad in (-1, 1.5, True, "10"):
        with pytest.raises(ValueError):
            asset.amount(bad)  # type: ignore[arg-type]


def test_the_table_is_read_only() -> None:
    with pytest.raises(TypeError):
        KNOWN_ASSETS[(1, "0x" + "00" * 20)] = KNOWN_ASSETS[(8453, BASE_EURC.lower())]  # type: ignore[index]
