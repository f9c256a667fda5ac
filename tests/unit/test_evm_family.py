"""The pipeline the EVM rails share: each rail's reasons are written in its own words, in one
order (the rail's, the addresses', the options', the extra's), and a repeated entry object
is described once while the options stay the same (no I/O)."""

from __future__ import annotations

from typing import Any

import pytest

from x402_client import EvmOptions, PaymentOptions
from x402_client._protocol.assets import Asset
from x402_client._protocol.models import ExactAcceptEntry, UptoAcceptEntry
from x402_client._protocol.types import PaymentIntent
from x402_client._rails.eip3009 import Eip3009Rail
from x402_client._rails.evm import PermitsOff
from x402_client._rails.permit2 import Permit2Rail
from x402_client._rails.upto import UptoRail

KEY = "0x" + "42" * 32
TOKEN = "0x5fbdb2315678afecb367f032d93f642f64180aa3"
PAY_TO = "0x5272a2998bed49761c98152bc77d276d39c27f6b"
FACILITATOR = "0x3c44cdddb6a900fa2b585dd299e03d12fa4293bc"
CHAIN = 84532
ASSET = Asset(chain_id=CHAIN, address=TOKEN, symbol="sEURT", currency="EUR")


class _Context:
    """What a rail may use of its payer: here only the options, which a test may swap."""

    def __init__(self, options: PaymentOptions) -> None:
        self.options = options

    @property
    def locks(self) -> Any:
        raise AssertionError("describing takes no lock")

    def payment_api(self) -> Any:
        raise AssertionError("describing never uses the payment API")

    async def report(self, event: Any) -> None:
        return None


def _options(*, rpc: bool = True, key: bool = True) -> PaymentOptions:
    if not key:
        return PaymentOptions(assets=(ASSET,))
    rpc_urls = {CHAIN: "http://127.0.0.1:9"} if rpc else {}
    return PaymentOptions(evm=EvmOptions(private_key=KEY, rpc_urls=rpc_urls), assets=(ASSET,))


def _exact(**extra: Any) -> ExactAcceptEntry:
    return ExactAcceptEntry.model_validate(
        {
            "scheme": "exact",
            "network": f"eip155:{CHAIN}",
            "asset": TOKEN,
            "maxAmountRequired": "10000",
            "payTo": PAY_TO,
            "extra": extra,
        }
    )


def _upto(**extra: Any) -> UptoAcceptEntry:
    return UptoAcceptEntry.model_validate(
        {
            "scheme": "upto",
            "network": f"eip155:{CHAIN}",
            "asset": TOKEN,
            "maxAmountRequired": "10000",
            "payTo": PAY_TO,
            "extra": extra,
        }
    )


def test_an_upto_reason_names_the_upto_authorization_not_a_permit2_transfer() -> None:
    rail = UptoRail(_Context(_options(rpc=False)))  # type: ignore[arg-type]
    why = rail.describe(_upto(facilitatorAddress=FACILITATOR), "r")
    assert why == (
        f"upto authorization for sEURT on eip155:{CHAIN}: no RPC URL configured for chain "
        f"{CHAIN} (EvmOptions.rpc_urls), so the Permit2 approval cannot be checked"
    )
    permit2 = Permit2Rail(_Context(_options(rpc=False)))  # type: ignore[arg-type]
    why = permit2.describe(_exact(assetTransferMethod="permit2"), "r")
    assert isinstance(why, str) and why.startswith(
        f"Permit2 transfer for sEURT on eip155:{CHAIN}: "
    )


def test_every_reason_of_an_entry_comes_in_one_order() -> None:
    rail = UptoRail(_Context(_options(key=False)))  # type: ignore[arg-type]
    entry = _upto().model_copy(update={"pay_to": "nobody"})
    assert rail.describe(entry, "r") == (
        f"upto authorization for sEURT on eip155:{CHAIN}: its payTo is not an address; it "
        "names no facilitatorAddress (extra) to bind the authorization to; no RPC URL "
        f"configured for chain {CHAIN} (EvmOptions.rpc_urls), so the Permit2 approval cannot "
        "be checked; set X402_EUR_EVM_PRIVATE_KEY"
    )


def test_an_entry_of_another_kind_is_not_the_rails() -> None:
    assert UptoRail(_Context(_options())).describe(_exact(), "r") == "not an upto entry"  # type: ignore[arg-type]
    eip3009 = Eip3009Rail(_Context(_options()))  # type: ignore[arg-type]
    assert eip3009.describe(_upto(), "r") == "not an exact entry"
    assert eip3009.describe(_exact(spender=PAY_TO), "r") == "not an EIP-3009 entry"
    on_polygon = _exact(name="EURC", version="2").model_copy(update={"network": "eip155:137"})
    assert PermitsOff().describe(on_polygon, "r") == "EIP-3009 exact entry: not a permit entry"
    assert PermitsOff().describe(_exact(name="EURC", version="2"), "r") == "not an EVM entry"


def test_a_repeated_entry_is_described_once_while_the_options_stay() -> None:
    context = _Context(_options())
    rail = Eip3009Rail(context)  # type: ignore[arg-type]
    entry = _exact(name="Sandbox EURC", version="2")
    first = rail.describe(entry, "r")
    assert isinstance(first, PaymentIntent) and first.amount == ASSET.amount(10_000)
    assert rail.describe(entry, "r") is first
    # The same words in another object, or for another resource: described on their own.
    again = rail.describe(_exact(name="Sandbox EURC", version="2"), "r")
    assert again == first and again is not first
    other = rail.describe(entry, "s")
    assert isinstance(other, PaymentIntent) and other.resource == "s"
    # Other options: described anew, by what they say.
    context.options = _options(key=False)
    assert rail.describe(entry, "r") == (
        f"EIP-3009 transfer for sEURT on eip155:{CHAIN}: set X402_EUR_EVM_PRIVATE_KEY"
    )


@pytest.mark.parametrize("rail_type", [Eip3009Rail, Permit2Rail, UptoRail])
def test_each_signing_rail_pays_one_scheme(rail_type: Any) -> None:
    rail = rail_type(_Context(_options()))
    assert rail.schemes == frozenset({rail.scheme})
    assert rail.money_moves_before_proof is False and rail.frames_own_proof is False
    assert repr(rail) == f"{rail_type.__name__}()"
