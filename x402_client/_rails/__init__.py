"""Rails: the ways this client can pay an accept entry.

A rail is the only place that knows one payment method. The payer (`_payer`) asks each
rail, in order, whether it can pay an entry; each that can describes a `PaymentIntent`
(a candidate, tried in that order unless `prefer`/`selector` say otherwise); the one
chosen pays inside `async with rail.pay(...)`, which yields the X-PAYMENT
proof and stays open until the merchant has answered the paid retry (the EVM rail holds
its permit-nonce lock that long).

Which entry is paid is decided before any rail does I/O, by the pure policy (`_policy`),
from each rail's `describe`; `prepare` then runs for the chosen candidate only.

To add a rail, write a module here that implements `Rail` and has a `build(context)`
returning the rail (or None when the options do not enable it, and then, optionally, an
`off(context)` describer that says what enabling it takes), and name the module in
`RAILS`: no existing rail and no flow code changes.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from .._options import ENV_VARS
from .._protocol.rail_interface import Describer, Rail, RailContext

if TYPE_CHECKING:
    from .._options import PaymentOptions

__all__ = [
    "EIP712_DOMAIN",
    "RAILS",
    "Rails",
    "build_rails",
    "managed_account_settings",
    "setting",
]


#: The EIP-712 domain type of the tokens the EVM rails sign for (name, version, chain id,
#: verifying contract), in the form `sign_typed_data(full_message=...)` takes.
EIP712_DOMAIN: list[dict[str, str]] = [
    {"name": "name", "type": "string"},
    {"name": "version", "type": "string"},
    {"name": "chainId", "type": "uint256"},
    {"name": "verifyingContract", "type": "address"},
]

#: The rail modules, in the order the payer tries their rails on an entry: every rail that
#: can describe it is a candidate, in this order (a chain-A entry: the user's own wallet,
#: then the bridge). Each has `build(context) -> Rail | None`.
RAILS = ("euro", "evm", "eip3009", "permit2", "upto", "batch", "chain_a", "solana", "bridge")


@dataclasses.dataclass(frozen=True)
class Rails:
    """The rails of one payer."""

    #: The rails the options enable, in `RAILS` order.
    enabled: list[Rail]
    #: What the selection asks about each entry, in `RAILS` order: the enabled rails and,
    #: for a rail the options leave off, its `off(context)` describer, which says what
    #: enabling it takes (and never pays).
    describers: list[Describer]


def build_rails(context: RailContext) -> Rails:
    """The rails `context`'s options enable (each module imported now): a module's
    `build(context)` returns its rail, or None when the options leave it off; then its
    `off(context)`, if it has one, describes the entries it would have paid."""
    import importlib

    enabled: list[Rail] = []
    describers: list[Describer] = []
    for name in RAILS:
        module = importlib.import_module(f"{__name__}.{name}")
        rail: Rail | None = module.build(context)
        if rail is not None:
            enabled.append(rail)
            describers.append(rail)
        elif hasattr(module, "off"):
            describers.append(module.off(context))
    return Rails(enabled, describers)


def setting(option: str) -> str:
    """The environment variable of an option (`PaymentOptions.from_env`)."""
    return ENV_VARS[option][0]


def managed_account_settings(options: PaymentOptions) -> list[str]:
    """The environment variables of the managed account's missing settings."""
    values = {"api_key": options.api_key, "from_account": options.from_account}
    values["api_url"] = options.api_url
    return [setting(name) for name, value in values.items() if not value]
