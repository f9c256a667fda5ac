"""The sandbox's plain-data settings as the client's option objects, for the tests.

The sandbox (`x402_eur_sandbox`) never imports the client: it hands its settings over as
plain mappings (`Sandbox.payment_config()`, `EvmSandbox.evm_config()`,
`StandardMerchant.asset_config()`), which the client validates like any user's.
"""

from __future__ import annotations

from typing import Any

from x402_client import PaymentOptions
from x402_client._options import EvmOptions
from x402_client._protocol.assets import Asset


def payment_options(sandbox: Any, **overrides: Any) -> PaymentOptions:
    """`PaymentOptions` that pay as the sandbox payer (keyword arguments override)."""
    return PaymentOptions.model_validate(sandbox.payment_config(**overrides))


def evm_options(evm: Any, **overrides: Any) -> EvmOptions:
    """`EvmOptions` of the EVM sandbox's payer (keyword arguments override)."""
    return EvmOptions.model_validate(evm.evm_config(**overrides))


def asset_of(standard: Any) -> Asset:
    """The standard merchant's token as the client's `Asset`."""
    return Asset(**standard.asset_config())
