"""The pipeline the EVM-family rails share (`evm-permit`, `eip3009`, `permit2`, `upto`):
each rail states only what differs, as a few class attributes and small hooks.

`describe(entry)`, pure, in the same order on every rail:

1. is the entry of the rail's kind: its scheme's model (`entry_type`), an EVM chain
   (`chain_of`), the rail's own reading of it (`read`)? If not, a `NotForThisRail`;
2. every reason it cannot be paid, together: the rail's reasons about the entry
   (`Reading.before`), its asset and payTo addresses, the rail's reasons that follow them
   (`Reading.after`: an unknown token, no facilitator), what the options lack (`needs`), and
   the `evm` extra;
3. the intent (`intent`), or `unpayable("<paying> for <token> on <network>", ...)`.

What it says of an entry is remembered for the same entry object, resource and options: a
merchant's repeated challenge is read once, so a paying client describes its entries once.

`prepare` is the rail's own chain reads (`None` on a rail that needs none). The rails that
sign an EIP-712 digest with the payer's key (`SigningRail`) share `pay`: the rail builds and
signs its authorization (`authorize`), the pipeline yields the payload.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import re
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from types import MappingProxyType
from typing import Any, ClassVar, Generic, TypeVar, cast

from .._protocol.assets import Asset, find_asset
from .._protocol.models import AcceptEntry, BatchAcceptEntry, ExactAcceptEntry, UptoAcceptEntry
from .._protocol.rail_interface import (
    Note,
    NotForThisRail,
    RailContext,
    RequestSettings,
    no_note,
    unpayable,
)
from .._protocol.types import Paid, PaymentIntent
from .._protocol.types import Rail as RailName
from . import setting
from ._evm_signing import ADDRESS_RE, DigestSigner, SignerCache, evm_extra_installed

__all__ = [
    "V1_NETWORKS",
    "EvmRail",
    "Reading",
    "SigningRail",
    "chain_id_of",
    "token_intent",
    "unknown_asset",
]

logger = logging.getLogger("x402_client")

#: x402 v1 network names and their chain ids: the foundation's table,
#: `x402/mechanisms/evm/v1/constants.py::V1_NETWORK_CHAIN_IDS` (x402 2.25.0).
V1_NETWORKS: Mapping[str, int] = MappingProxyType(
    {
        "base": 8453,
        "base-sepolia": 84532,
        "ethereum": 1,
        "polygon": 137,
        "polygon-amoy": 80002,
        "avalanche": 43114,
        "avalanche-fuji": 43113,
        "abstract": 2741,
        "abstract-testnet": 11124,
        "iotex": 4689,
        "sei": 1329,
        "sei-testnet": 1328,
        "peaq": 3338,
        "story": 1513,
        "educhain": 656476,
        "skale-base-sepolia": 1444673419,
        "megaeth": 4326,
        "monad": 143,
        "monad-testnet": 10143,
        "stable": 988,
        "stable-testnet": 2201,
        "celo": 42220,
        "flare": 14,
    }
)

# CAIP-2 for EVM: a decimal chain id without leading zeros (a uint64 in practice).
_CAIP2_RE = re.compile(r"\Aeip155:([1-9][0-9]{0,19})\Z")

#: How many entries' descriptions a rail keeps (a few merchants' worth).
_DESCRIBED_KEPT = 64

#: The standard entries the EVM-family rails pay.
StandardEntry = ExactAcceptEntry | UptoAcceptEntry | BatchAcceptEntry
EntryT = TypeVar("EntryT", bound=StandardEntry)
TokenT = TypeVar("TokenT")


@functools.lru_cache(maxsize=256)
def chain_id_of(network: str) -> int | None:
    """The chain id of an EVM network: `eip155:8453` (v2) or a v1 name (`base`); else None."""
    match = _CAIP2_RE.match(network)
    if match is not None:
        return int(match.group(1))
    return V1_NETWORKS.get(network)


@dataclasses.dataclass(frozen=True)
class Reading(Generic[TokenT]):
    """What a rail read from an entry of its kind: how its reasons name the token, its
    reasons found before and after the address checks, and the token to pay (None when the
    entry names none the rail can pay)."""

    label: str
    before: Sequence[str] = ()
    after: Sequence[str] = ()
    token: TokenT | None = None


def _address_blockers(entry: StandardEntry) -> list[str]:
    blockers = []
    if not ADDRESS_RE.match(entry.asset):
        blockers.append("its asset is not a token address")
    if not ADDRESS_RE.match(entry.pay_to):
        blockers.append("its payTo is not an address")
    return blockers


class EvmRail(Generic[EntryT, TokenT]):
    """The describe pipeline (see the module doc); a rail sets the class attributes and
    writes `read`, `needs` and `intent`."""

    name: ClassVar[str]
    #: The scheme it pays and the accept-entry model of that scheme.
    scheme: ClassVar[str]
    entry_type: ClassVar[type[ExactAcceptEntry] | type[UptoAcceptEntry] | type[BatchAcceptEntry]]
    #: How its reasons name what it pays (`"EIP-3009 transfer"`).
    paying: ClassVar[str]
    #: Its reason when the `evm` extra is not installed.
    extra_missing: ClassVar[str]
    #: The schemes of the entries it describes (the selection asks no other rail): its one.
    schemes: frozenset[str]
    resumes_transactions = False

    def __init__(self, *, installed: bool) -> None:
        #: Whether the `evm` extra is installed (read once per rail).
        self._installed = installed
        #: What `describe` said of the entries seen last: (entry, options, description)
        #: by the entry's id and the resource.
        self._described: dict[tuple[int, str], tuple[AcceptEntry, object, PaymentIntent | str]]
        self._described = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "scheme" in cls.__dict__:
            cls.schemes = frozenset({cls.scheme})

    def describe(self, entry: AcceptEntry, resource: str) -> PaymentIntent | str:
        # A merchant's repeated challenge is read once (`_protocol.dialects`): the same
        # entry object comes back request after request, and what a rail says of it does
        # not change while the options do not. Held here, its id stays its own.
        key = (id(entry), resource)
        options = self.options_read()
        known = self._described.get(key)
        if known is not None and known[0] is entry and known[1] is options:
            return known[2]
        described = self._describe(entry, resource)
        if len(self._described) >= _DESCRIBED_KEPT:
            self._described.clear()
        self._described[key] = (entry, options, described)
        return described

    def options_read(self) -> object:
        """The options `describe` reads beyond the rail's own (None: none)."""
        return None

    def _describe(self, entry: AcceptEntry, resource: str) -> PaymentIntent | str:
        if not isinstance(entry, self.entry_type):
            return NotForThisRail(f"not an {self.scheme} entry")
        ours = cast(EntryT, entry)
        chain_id = self.chain_of(ours.network)
        if chain_id is None:
            return NotForThisRail("not an EVM entry")
        reading = self.read(ours, chain_id)
        if isinstance(reading, NotForThisRail):
            return reading
        blockers = [*reading.before, *_address_blockers(ours), *reading.after]
        more, settings = self.needs(chain_id)
        blockers += more
        if not self._installed:
            blockers.append(self.extra_missing)
        if reading.token is None or blockers or settings:
            what = f"{self.paying} for {reading.label} on {ours.network[:40]}"
            return unpayable(what, blockers, settings)
        return self.intent(ours, reading.token, resource)

    def chain_of(self, network: str) -> int | None:
        """The chain id of a network this rail pays on, else None."""
        return chain_id_of(network)

    def read(self, entry: EntryT, chain_id: int) -> Reading[TokenT] | NotForThisRail:
        """The rail's reading of an entry of its scheme on an EVM chain."""
        raise NotImplementedError

    def needs(self, chain_id: int) -> tuple[list[str], list[str]]:
        """What the options lack to pay on `chain_id`: (reasons, settings to set)."""
        raise NotImplementedError

    def intent(self, entry: EntryT, token: TokenT, resource: str) -> PaymentIntent:
        raise NotImplementedError

    def chosen(self, entry: AcceptEntry) -> tuple[EntryT, int]:
        """An entry `describe` made an intent of, and its chain id (`prepare` and `pay` are
        given no other)."""
        assert isinstance(entry, self.entry_type)
        ours = cast(EntryT, entry)
        chain_id = self.chain_of(ours.network)
        assert chain_id is not None
        return ours, chain_id


class SigningRail(EvmRail[EntryT, Asset]):
    """A rail of the standard x402 world that pays a token the asset table knows by
    signing an EIP-712 digest with the payer's key; the merchant's facilitator moves the
    money. A rail writes `claim`, `authorize` and, if it has any, `witness_blockers`."""

    #: How the debug log names what it signed (`"an EIP-3009 authorization"`).
    signed: ClassVar[str]
    #: The proof is a signed authorization: the merchant's facilitator moves the money.
    money_moves_before_proof = False
    #: The payload is framed by the flow, in the dialect the 402 spoke.
    frames_own_proof = False

    def __init__(self, context: RailContext) -> None:
        super().__init__(installed=evm_extra_installed())
        self._context = context
        self._signers = SignerCache()

    def options_read(self) -> object:
        return self._context.options

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    @property
    def signer(self) -> DigestSigner:
        """The payer's signer, made once per key (deriving the address is not free)."""
        return self._signers.signer(self._context.options)

    def read(self, entry: EntryT, chain_id: int) -> Reading[Asset] | NotForThisRail:
        extra = entry.extra or {}
        not_ours = self.claim(extra)
        if not_ours is not None:
            return not_ours
        asset = find_asset(chain_id, entry.asset, self._context.options.assets)
        before, label = self.entry_blockers(entry, extra, asset)
        after = unknown_asset(entry, asset) + self.witness_blockers(entry)
        return Reading(label, before, after, asset)

    def claim(self, extra: Mapping[str, Any]) -> NotForThisRail | None:
        """Why an entry of its scheme is not the rail's (its `extra` says so), else None."""
        raise NotImplementedError

    def entry_blockers(
        self, entry: EntryT, extra: Mapping[str, Any], asset: Asset | None
    ) -> tuple[list[str], str]:
        """The rail's reasons about the entry before its addresses are checked, and how the
        reasons name its token."""
        return [], asset.symbol if asset is not None else "a token"

    def witness_blockers(self, entry: EntryT) -> list[str]:
        """Reasons about what the signed witness binds (after the token's)."""
        return []

    def needs(self, chain_id: int) -> tuple[list[str], list[str]]:
        return [], [] if self._context.options.evm is not None else [setting("evm_private_key")]

    def intent(self, entry: EntryT, token: Asset, resource: str) -> PaymentIntent:
        return token_intent(entry, token, resource, rail=cast(RailName, self.name))

    @asynccontextmanager
    async def pay(
        self,
        entry: AcceptEntry,
        intent: PaymentIntent,
        settings: RequestSettings,
        note: Note = no_note,
    ) -> AsyncIterator[Paid]:
        chosen, chain_id = self.chosen(entry)
        signer = self.signer
        payload = self.authorize(chosen, chain_id, signer, time.time())
        logger.debug("x402: signed %s on %s for %s", self.signed, chosen.network, signer.address)
        yield Paid(proof="", payload=payload, payer=signer.address)

    def authorize(
        self, entry: EntryT, chain_id: int, signer: DigestSigner, now: float
    ) -> dict[str, Any]:
        """The scheme payload of a fresh authorization of `entry`, signed by `signer`."""
        raise NotImplementedError

    async def aclose(self) -> None:
        """Nothing to close unless the rail holds a connection."""


def unknown_asset(entry: StandardEntry, asset: Asset | None) -> list[str]:
    """The skip reason of a token address the client does not know (`asset` None), if any
    (a malformed address has a reason of its own)."""
    if asset is not None or not ADDRESS_RE.match(entry.asset):
        return []
    return [
        f"unknown asset {entry.asset[:42]} on {entry.network} (declare it in "
        f"PaymentOptions.assets or {setting('assets')} to pay it)"
    ]


def token_intent(
    entry: StandardEntry,
    asset: Asset,
    resource: str,
    *,
    rail: RailName = "eip3009",
) -> PaymentIntent:
    """The intent of paying a standard entry in a known token (`asset`), on `rail` (the
    EIP-3009, Permit2 and `upto` rails pay such entries, authorized differently; an `upto`
    entry's amount is the most the merchant may settle)."""
    return PaymentIntent(
        rail=rail,
        scheme=entry.scheme,
        network=entry.network,
        asset=entry.asset,
        asset_symbol=asset.symbol,
        amount=asset.amount(entry.max_amount_required),
        currency=asset.currency,
        pay_to=entry.pay_to,
        resource=resource,
        atomic_amount=entry.max_amount_required,
        description=entry.description,
        accept=entry.to_wire(),
    )
