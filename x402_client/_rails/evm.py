"""The `evm-permit` rail: pay an `exact` entry on `eip155:1` / `eip155:137` with an
EIP-2612 permit for the facilitator's spender.

What paying one entry costs, after warm-up: one JSON-RPC round trip, a batch of two
`eth_call`s (`balanceOf(owner)` at `latest`, `nonces(owner)` at `pending`) sent by
`prepare`. The RPC endpoint's chain id is checked once per URL, the token's `name()` and
`symbol()` are read once per chain and token, and the facilitator's `GET /supported` is
cached for `EvmOptions.supported_cache_seconds`. An endpoint that refuses batches gets the
two calls one by one (`balanceOf` in `prepare`, `nonces` in `pay`), as before.

Permit nonces are sequential per owner and token, so two permits signed with the same
nonce cannot both settle. This rail therefore serializes payments per (chain, token,
owner): the lock is taken before `nonces(owner)` is read and released only when the
merchant has answered the paid retry (the payer keeps `pay()` open that long). The locks
are the options' (`_state.KeyedLocks`), shared by every client built from them; with a
PostgreSQL state they are the fleet's (`_state.FleetLocks`: the same advisory lock on
every machine), and the nonce is always read under the lock.

The nonce read in `prepare`, before the lock, is used by `pay` only when it is exactly
what a read under the lock would give: no payment for that key was in progress when it
was read, none has started since (`_NonceActivity`, shared through the same locks by
every client of the options), and it is under `_PREPARED_NONCE_TTL` seconds old (a slow
`on_before_payment` hook). Otherwise `pay` reads `nonces` again under the lock.

web3 and eth-account (the `evm` extra) are imported inside the methods that use them;
`import x402_client` stays free of them. Without the extra the rail is still built (the
other rails of the same options pay as usual); it skips the entries it would pay, with the
install command as the reason. The pure pieces (typed data, deadline, proof)
are module functions, tested without a chain.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import re
import threading
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import httpx
from pydantic import ValidationError

from .._options import EvmOptions
from .._protocol import exact_json as _json
from .._protocol.amounts import format_amount, from_atomic
from .._protocol.challenge import EVM_NETWORKS, exact_intent
from .._protocol.errors import PaymentFailed, SpenderMismatch
from .._protocol.models import (
    AcceptEntry,
    EvmPermitExtra,
    EvmPermitPayload,
    ExactAcceptEntry,
    PaymentProof,
    PermitValues,
    SupportedKinds,
)
from .._protocol.proof import encode_proof
from .._protocol.rail_interface import (
    Note,
    NotForThisRail,
    RailContext,
    RequestSettings,
    no_note,
)
from .._protocol.redact import endpoint_url, guard_library_logs
from .._protocol.types import Paid, PaymentIntent
from .._state.http import BodyTooLarge, default_ssl_context, read_bounded
from .._state.rpc_wait import RpcWait, watched
from . import EIP712_DOMAIN, setting
from ._evm_family import EvmRail, Reading
from ._evm_signing import check_chain_id

if TYPE_CHECKING:
    from web3 import AsyncHTTPProvider, AsyncWeb3

__all__ = [
    "EVM_EXTRA_MISSING",
    "PERMIT_SYMBOLS",
    "EvmPermitRail",
    "PermitDescriber",
    "PermitsOff",
    "classify_evm_extra",
    "permit_deadline",
    "permit_proof",
    "permit_typed_data",
    "spenders_by_asset",
    "split_signature",
]

logger = logging.getLogger("x402_client")

EVM_EXTRA_MISSING = "EVM permits need the evm extra: pip install 'x402-eur[evm]'"
#: Tokens this rail signs permits for; anything else is not satisfiable.
PERMIT_SYMBOLS = frozenset({"EURQ", "USDQ"})
#: EIP-712 domain version of the tokens (spec: "version `1`").
PERMIT_VERSION = "1"

_ADDRESS_RE = re.compile(r"\A0x[0-9a-fA-F]{40}\Z")
_NO_FACILITATOR = "it comes without a facilitator to check the spender with"
_RPC_TIMEOUT = 15.0
_SUPPORTED_TIMEOUT = 10.0
#: How old a nonce read by `prepare` may be for `pay` to sign with it (see the module doc).
_PREPARED_NONCE_TTL = 2.0
#: 4-byte selectors of the two views read per payment: keccak("balanceOf(address)"),
#: keccak("nonces(address)").
_BALANCE_OF = "0x70a08231"
_NONCES = "0x7ecebe00"

# Just the views this rail reads; the token is an OpenZeppelin ERC20Permit.
_TOKEN_ABI: list[dict[str, Any]] = [
    {
        "type": "function",
        "name": name,
        "stateMutability": "view",
        "inputs": [{"name": "owner", "type": "address"}] if takes_owner else [],
        "outputs": [{"name": "", "type": out}],
    }
    for name, takes_owner, out in (
        ("name", False, "string"),
        ("symbol", False, "string"),
        ("nonces", True, "uint256"),
        ("balanceOf", True, "uint256"),
    )
]

T = TypeVar("T")


def _extra_installed() -> bool:
    return all(importlib.util.find_spec(name) is not None for name in ("eth_account", "web3"))


# --- pure protocol pieces ----------------------------------------------------------------


def classify_evm_extra(extra: Mapping[str, Any] | None) -> EvmPermitExtra | str:
    """The permit `extra` of an EVM `exact` entry, or why the entry is not a permit entry.

    The standard x402 `exact` scheme on EVM (EIP-3009 `transferWithAuthorization`) carries
    `extra.name`/`extra.version` and no `spender`: a different scheme, never signed here.
    """
    if not extra:
        return NotForThisRail("EVM exact entry without extra: not a permit entry")
    if "spender" not in extra:
        if "name" in extra or "version" in extra:
            return NotForThisRail("EIP-3009 exact entry: not a permit entry")
        return NotForThisRail("EVM exact entry without extra.spender: not a permit entry")
    try:
        return EvmPermitExtra.model_validate(dict(extra))
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        return f"invalid extra.{where}: {err['msg']}"


class PermitDescriber(EvmRail[ExactAcceptEntry, EvmPermitExtra]):
    """What the permit rail says of an entry, whether the options enable it or not
    (`rpc_urls` None: there is no EVM key, and the reasons say what enabling it takes)."""

    name = "evm-permit"
    scheme = "exact"
    entry_type = ExactAcceptEntry
    paying = "EVM permit"
    extra_missing = EVM_EXTRA_MISSING

    def __init__(self, rpc_urls: Mapping[int, Any] | None) -> None:
        super().__init__(installed=_extra_installed())
        self._rpc_urls = rpc_urls

    def chain_of(self, network: str) -> int | None:
        return EVM_NETWORKS.get(network)

    def read(
        self, entry: ExactAcceptEntry, chain_id: int
    ) -> Reading[EvmPermitExtra] | NotForThisRail:
        extra = classify_evm_extra(entry.extra)
        if isinstance(extra, NotForThisRail):
            return extra
        after = [] if entry.facilitator else [_NO_FACILITATOR]
        if isinstance(extra, str):
            raw = (entry.extra or {}).get("symbol")
            symbol = raw[:20] if isinstance(raw, str) and raw else "a token"
            return Reading(symbol, [extra], after)
        symbol = extra.symbol[:20]
        if extra.symbol not in PERMIT_SYMBOLS:
            return Reading(symbol, [f"EVM token {symbol!r} is not EURQ or USDQ"], after)
        return Reading(symbol, [], after, extra)

    def needs(self, chain_id: int) -> tuple[list[str], list[str]]:
        rpc_urls = self._rpc_urls
        if rpc_urls is None:
            return [], [setting("evm_private_key"), setting(f"evm_rpc_urls_{chain_id}")]
        if chain_id not in rpc_urls:
            return [f"no RPC URL configured for chain {chain_id}"], [
                setting(f"evm_rpc_urls_{chain_id}")
            ]
        return [], []

    def intent(
        self, entry: ExactAcceptEntry, token: EvmPermitExtra, resource: str
    ) -> PaymentIntent:
        return exact_intent(entry, rail="evm-permit", symbol=token.symbol, resource=resource)


class PermitsOff(PermitDescriber):
    """The permit rail when the options have no `evm`: it says what paying a permit entry
    would take, and pays nothing."""

    def __init__(self) -> None:
        super().__init__(None)


def permit_deadline(now: float, max_timeout_seconds: int) -> int:
    """The permit's `deadline`: `now + maxTimeoutSeconds`, in whole Unix seconds."""
    return int(now) + max_timeout_seconds


def permit_typed_data(
    *,
    token_name: str,
    chain_id: int,
    token: str,
    owner: str,
    spender: str,
    value: int,
    nonce: int,
    deadline: int,
) -> dict[str, Any]:
    """The full EIP-712 message of an EIP-2612 permit, as `sign_typed_data` takes it.

    Domain: the token's own `name()`, version `"1"`, the chain id, verifyingContract =
    the token (spec, "X-PAYMENT proof").
    """
    return {
        "types": {
            "EIP712Domain": list(EIP712_DOMAIN),
            "Permit": [
                {"name": "owner", "type": "address"},
                {"name": "spender", "type": "address"},
                {"name": "value", "type": "uint256"},
                {"name": "nonce", "type": "uint256"},
                {"name": "deadline", "type": "uint256"},
            ],
        },
        "primaryType": "Permit",
        "domain": {
            "name": token_name,
            "version": PERMIT_VERSION,
            "chainId": chain_id,
            "verifyingContract": token,
        },
        "message": {
            "owner": owner,
            "spender": spender,
            "value": value,
            "nonce": nonce,
            "deadline": deadline,
        },
    }


def permit_proof(network: str, message: Mapping[str, Any], signature: bytes) -> str:
    """The X-PAYMENT value for a signed permit: `owner`, `permit` values, `0x` signature."""
    owner = str(message["owner"])
    payload = EvmPermitPayload(
        owner=owner,
        permit=PermitValues(
            owner=owner,
            spender=str(message["spender"]),
            value=int(message["value"]),
            nonce=int(message["nonce"]),
            deadline=int(message["deadline"]),
        ),
        signature="0x" + bytes(signature).hex(),
    )
    return encode_proof(PaymentProof(scheme="exact", network=network, payload=payload.to_wire()))


def split_signature(signature: str) -> tuple[int, bytes, bytes]:
    """`(v, r, s)` of a 65-byte `r || s || v` signature in 0x hex (what `permit()` takes)."""
    raw = bytes.fromhex(signature.removeprefix("0x"))
    if len(raw) != 65:
        raise ValueError("a permit signature is 65 bytes")
    v = raw[64]
    if v < 27:
        v += 27
    return v, raw[:32], raw[32:64]


def spenders_by_asset(kinds: SupportedKinds) -> dict[tuple[str, str | None], str]:
    """`{(network, asset or None): spender}` from a facilitator's `/supported` answer.

    Assets are lower-cased; a kind without an asset applies to the whole network.
    """
    found: dict[tuple[str, str | None], str] = {}
    for kind in kinds.kinds:
        spender = (kind.extra or {}).get("spender")
        if kind.scheme != "exact" or kind.network not in EVM_NETWORKS:
            continue
        if not isinstance(spender, str) or not _ADDRESS_RE.match(spender):
            continue
        asset = kind.asset.lower() if kind.asset else None
        found[(kind.network, asset)] = spender
    return found


# --- the rail ----------------------------------------------------------------------------


class _RpcUnavailable(Exception):
    """No RPC endpoint of a chain answered."""


@dataclasses.dataclass
class _Endpoint:
    url: str
    provider: AsyncHTTPProvider
    w3: AsyncWeb3[AsyncHTTPProvider]
    verified: bool = False
    #: False once the endpoint answered a batch with something other than a JSON list.
    batches: bool = True

    def __repr__(self) -> str:
        # The URL may carry the endpoint's API key: shown as scheme, host and port.
        return f"_Endpoint({endpoint_url(self.url)!r}, verified={self.verified})"


_NonceKey = tuple[int, str, str]


class _NonceActivity:
    """How many `pay()` calls per (chain, token, owner) have started and finished.

    Shared by every rail whose payer has the same `KeyedLocks` (every client built from
    one `PaymentOptions`), in any thread, so a nonce read outside the lock can be checked:
    it is current if no payment was in progress when it was read and none started since.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[_NonceKey, tuple[int, int]] = {}

    def counts(self, key: _NonceKey) -> tuple[int, int]:
        with self._lock:
            return self._counts.get(key, (0, 0))

    def start(self, key: _NonceKey) -> tuple[int, int]:
        """Count a `pay()` starting; returns the counts before it."""
        with self._lock:
            before = self._counts.get(key, (0, 0))
            self._counts[key] = (before[0] + 1, before[1])
            return before

    def finish(self, key: _NonceKey) -> None:
        with self._lock:
            started, finished = self._counts.get(key, (0, 0))
            self._counts[key] = (started, finished + 1)


_ACTIVITY: weakref.WeakKeyDictionary[object, _NonceActivity] = weakref.WeakKeyDictionary()
_ACTIVITY_GUARD = threading.Lock()


def _activity_of(locks: object) -> _NonceActivity:
    with _ACTIVITY_GUARD:
        found = _ACTIVITY.get(locks)
        if found is None:
            found = _ACTIVITY[locks] = _NonceActivity()
        return found


@dataclasses.dataclass(frozen=True)
class _PreparedNonce:
    nonce: int
    #: `_NonceActivity.counts` when it was read (started == finished: none in progress).
    counts: tuple[int, int]
    read_at: float


class _BatchRefused(Exception):
    """The endpoint answered the batch, but not with a usable `balanceOf` result."""


def _call_params(token: str, selector: str, owner: str, block: str) -> list[Any]:
    data = selector + owner.lower().removeprefix("0x").rjust(64, "0")
    return [{"to": token, "data": data}, block]


def _uint256(result: Any) -> int | None:
    """An `eth_call` result that is one ABI-encoded uint256, or None."""
    if not isinstance(result, str) or not re.fullmatch(r"0x[0-9a-fA-F]{64}", result):
        return None
    return int(result, 16)


@dataclasses.dataclass(frozen=True)
class _TokenInfo:
    name: str
    symbol: str


class EvmPermitRail(PermitDescriber):
    """Signs EIP-2612 permits for `exact` entries on `eip155:1` and `eip155:137`.

    Holds one `AsyncWeb3` per RPC URL and one httpx client for `/supported`; close them
    with `aclose()` (the payer does).
    """

    #: The proof is a signed permit: no money moves until the merchant settles it.
    money_moves_before_proof = False
    frames_own_proof = True

    def __init__(self, context: RailContext, options: EvmOptions) -> None:
        #: Without the evm extra, permit entries are skipped (`describe` says how to install it).
        super().__init__(options.rpc_urls)
        self._context = context
        self._options = options
        self._owner: str | None = None
        self._endpoints: dict[str, _Endpoint] = {}
        self._preferred: dict[int, int] = {}
        self._tokens: dict[tuple[int, str], _TokenInfo] = {}
        self._supported: dict[str, tuple[float, dict[tuple[str, str | None], str]]] = {}
        self._http: httpx.AsyncClient | None = None
        self._prepared: dict[_NonceKey, _PreparedNonce] = {}

    def __repr__(self) -> str:
        return f"EvmPermitRail(chains={sorted(self._options.rpc_urls)})"

    @property
    def owner(self) -> str:
        """The payer's address (checksummed), derived from the private key."""
        if self._owner is None:
            from eth_account import Account

            self._owner = str(
                Account.from_key(self._options.private_key.get_secret_value()).address
            )
        return self._owner

    # --- Rail ------------------------------------------------------------------------------

    def _chosen_permit(self, entry: AcceptEntry) -> tuple[ExactAcceptEntry, int, EvmPermitExtra]:
        """An entry `describe` made an intent of, its chain id and its permit `extra`."""
        chosen, chain_id = self.chosen(entry)
        extra = classify_evm_extra(chosen.extra)
        assert isinstance(extra, EvmPermitExtra)
        return chosen, chain_id, extra

    async def prepare(self, entry: AcceptEntry, intent: PaymentIntent) -> str | None:
        entry, chain_id, extra = self._chosen_permit(entry)
        try:
            token = await self._token_info(chain_id, entry.asset)
        except _RpcUnavailable as exc:
            return str(exc)
        if token.symbol != extra.symbol:
            return (
                f"token {entry.asset} on {entry.network} is {token.symbol[:20]!r}, "
                f"not {extra.symbol!r} as the entry says"
            )
        problem = await self._check_spender(entry, extra)
        if problem is not None:
            return problem
        owner = self.owner
        key = (chain_id, entry.asset.lower(), owner.lower())
        counts = self._activity().counts(key)
        # A nonce read while a payment for this key is in progress could be stale by the
        # time the lock is ours: then read only the balance here, the nonce in `pay`.
        want_nonce = counts[0] == counts[1]
        try:
            balance, nonce = await self._balance_and_nonce(
                chain_id, entry.asset, owner, want_nonce=want_nonce
            )
        except _RpcUnavailable as exc:
            return str(exc)
        if nonce is not None:
            self._prepared[key] = _PreparedNonce(nonce, counts, time.monotonic())
        if balance < entry.max_amount_required:
            return (
                f"{extra.symbol} balance {format_amount(from_atomic(balance))} on "
                f"{entry.network} does not cover {format_amount(intent.amount)}"
            )
        return None

    @asynccontextmanager
    async def pay(
        self,
        entry: AcceptEntry,
        intent: PaymentIntent,
        settings: RequestSettings,
        note: Note = no_note,
    ) -> AsyncIterator[Paid]:
        entry, chain_id, extra = self._chosen_permit(entry)
        owner = self.owner
        key = (chain_id, entry.asset.lower(), owner.lower())
        activity = self._activity()
        before = activity.start(key)
        try:
            # Held until the merchant has answered: the next permit must see the next nonce.
            # The locks belong to the options, so every client built from them waits on the
            # same one.
            async with self._context.locks.hold(key):
                nonce = self._prepared_nonce(key, before, activity.counts(key))
                try:
                    token = await self._token_info(chain_id, entry.asset)
                    if nonce is None:
                        nonce = await self._read(
                            chain_id, entry.asset, "nonces", owner, block="pending"
                        )
                except _RpcUnavailable as exc:
                    # Nothing was signed: a typed failure, no money moved.
                    raise PaymentFailed(f"{exc}; nothing was signed", intent=intent) from None
                typed = permit_typed_data(
                    token_name=token.name,
                    chain_id=chain_id,
                    token=entry.asset,
                    owner=owner,
                    spender=extra.spender,
                    value=entry.max_amount_required,
                    nonce=nonce,
                    deadline=permit_deadline(time.time(), entry.max_timeout_seconds),
                )
                proof = permit_proof(entry.network, typed["message"], self._sign(typed))
                logger.debug(
                    "x402: signed permit nonce %d on %s for %s", nonce, entry.network, owner
                )
                yield Paid(proof=proof, payer=owner)
        finally:
            activity.finish(key)

    def _activity(self) -> _NonceActivity:
        return _activity_of(self._context.locks)

    def _prepared_nonce(
        self, key: _NonceKey, before: tuple[int, int], now: tuple[int, int]
    ) -> int | None:
        """The nonce `prepare` read, if it is still the one to sign with (see module doc):
        read with no payment in progress, no other payment started since (`before` is the
        count just before this `pay` started, `now` the count with the lock held), fresh."""
        prepared = self._prepared.pop(key, None)
        if prepared is None or getattr(self._context.locks, "shared", False):
            # Another machine of the fleet may have signed with it since: read it again,
            # with the fleet's lock held.
            return None
        idle = prepared.counts[0] == prepared.counts[1]
        unchanged = before == prepared.counts and now == (before[0] + 1, before[1])
        fresh = time.monotonic() - prepared.read_at <= _PREPARED_NONCE_TTL
        return prepared.nonce if idle and unchanged and fresh else None

    async def aclose(self) -> None:
        endpoints, self._endpoints = self._endpoints, {}
        for endpoint in endpoints.values():
            await endpoint.provider.disconnect()
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    # --- signing ---------------------------------------------------------------------------

    def _sign(self, typed: dict[str, Any]) -> bytes:
        from eth_account import Account

        signed = Account.sign_typed_data(
            self._options.private_key.get_secret_value(), full_message=typed
        )
        return bytes(signed.signature)

    # --- the facilitator's spender -----------------------------------------------------------

    async def _check_spender(self, entry: ExactAcceptEntry, extra: EvmPermitExtra) -> str | None:
        assert entry.facilitator is not None
        base = entry.facilitator.rstrip("/")
        refresh = False
        while True:
            try:
                spenders, fetched = await self._spenders(base, refresh=refresh)
            except (httpx.HTTPError, BodyTooLarge, ValueError) as exc:
                return f"could not read {base}/supported: {type(exc).__name__}: {str(exc)[:200]}"
            actual = spenders.get((entry.network, entry.asset.lower())) or spenders.get(
                (entry.network, None)
            )
            if actual is not None and actual.lower() == extra.spender.lower():
                return None
            if not fetched:
                # A cached answer may predate a rotation of the hot wallet: ask once more.
                refresh = True
                continue
            if actual is None:
                return f"the facilitator does not support {entry.asset} on {entry.network}"
            raise SpenderMismatch(
                f"the 402 names spender {extra.spender}, but the facilitator {base} "
                f"announces {actual} for {entry.network}; nothing was signed"
            )

    async def _spenders(
        self, base: str, *, refresh: bool
    ) -> tuple[dict[tuple[str, str | None], str], bool]:
        """The facilitator's spenders, and whether they were fetched just now."""
        cached = self._supported.get(base)
        if cached is not None and not refresh and time.monotonic() < cached[0]:
            return cached[1], False
        if self._http is None:
            # The merchant writes this URL: the options' destination guard, if any, checks
            # it (a refusal is an `httpx.HTTPError`: the entry is skipped, nothing sent).
            guard = self._context.options.destination_guard
            self._http = httpx.AsyncClient(
                follow_redirects=False,
                timeout=_SUPPORTED_TIMEOUT,
                transport=(
                    httpx.AsyncHTTPTransport(verify=default_ssl_context())
                    if guard is None
                    else guard.transport()
                ),
            )
        request = self._http.build_request("GET", f"{base}/supported")
        response = await self._http.send(request, stream=True)
        raw = await read_bounded(response, self._context.options.max_body_bytes)
        if response.status_code != 200:
            raise ValueError(f"status {response.status_code}")
        spenders = spenders_by_asset(SupportedKinds.model_validate(_json.loads(raw)))
        ttl = self._options.supported_cache_seconds
        self._supported[base] = (time.monotonic() + ttl, spenders)
        return spenders, True

    # --- chain reads -----------------------------------------------------------------------

    async def _token_info(self, chain_id: int, token: str) -> _TokenInfo:
        key = (chain_id, token.lower())
        info = self._tokens.get(key)
        if info is None:
            name = await self._read(chain_id, token, "name")
            symbol = await self._read(chain_id, token, "symbol")
            info = self._tokens[key] = _TokenInfo(name=str(name), symbol=str(symbol))
        return info

    async def _read(
        self,
        chain_id: int,
        token: str,
        function: str,
        *args: Any,
        block: Literal["latest", "pending"] = "latest",
    ) -> Any:
        async def call(w3: AsyncWeb3[AsyncHTTPProvider]) -> Any:
            contract = w3.eth.contract(address=w3.to_checksum_address(token), abi=_TOKEN_ABI)
            return await contract.functions[function](*args).call(block_identifier=block)

        return await self._with_rpc(chain_id, call)

    async def _balance_and_nonce(
        self, chain_id: int, token: str, owner: str, *, want_nonce: bool
    ) -> tuple[int, int | None]:
        """`balanceOf(owner)` at `latest` and, if wanted, `nonces(owner)` at `pending`, in
        one round trip (a JSON-RPC batch) on the first endpoint that answers.

        An endpoint that answers the batch with anything but a usable `balanceOf` result
        (an HTTP error, no batch support, an error entry) is asked for the balance alone,
        and the nonce is left to `pay`: the behaviour of the rail without batching.
        """

        async def call(w3: AsyncWeb3[AsyncHTTPProvider]) -> tuple[int, int | None]:
            endpoint = next(e for e in self._endpoints.values() if e.w3 is w3)
            if want_nonce and endpoint.batches:
                try:
                    return await self._batch(endpoint, token, owner)
                except _BatchRefused:
                    pass
            contract = w3.eth.contract(address=w3.to_checksum_address(token), abi=_TOKEN_ABI)
            balance = await contract.functions.balanceOf(owner).call(block_identifier="latest")
            return int(balance), None

        return await self._with_rpc(chain_id, call)

    @staticmethod
    async def _batch(endpoint: _Endpoint, token: str, owner: str) -> tuple[int, int | None]:
        """Post the two `eth_call`s as one JSON-RPC batch through the provider's own
        request path (its session, timeout and headers: one HTTP round trip, seen by
        anything that watches the provider's requests as one `eth_call` request)."""
        import aiohttp
        from web3.types import RPCEndpoint

        provider = endpoint.provider
        method = RPCEndpoint("eth_call")
        data = provider.encode_batch_rpc_request(
            [
                (method, _call_params(token, _BALANCE_OF, owner, "latest")),
                (method, _call_params(token, _NONCES, owner, "pending")),
            ]
        )
        try:
            raw = await provider._make_request(method, data)
            answer = provider.decode_rpc_response(raw)
        except aiohttp.ClientResponseError as exc:  # an HTTP error status: answered
            raise _BatchRefused(str(exc)) from None
        except ValueError as exc:  # not JSON
            raise _BatchRefused(str(exc)) from None
        if not isinstance(answer, list):
            # One error object for the whole batch: this endpoint does not batch.
            endpoint.batches = False
            raise _BatchRefused("no batch answer")
        # Answers may come in any order: the balance was asked first (the lower id).
        entries = [e for e in answer if isinstance(e, dict) and isinstance(e.get("id"), int)]
        if len(entries) != 2:
            raise _BatchRefused("batch answer without two identified entries")
        balance_entry, nonce_entry = sorted(entries, key=lambda e: int(e["id"]))
        balance = _uint256(balance_entry.get("result"))
        if balance is None:
            # An error entry, or no contract: the one-by-one read says which, as before.
            raise _BatchRefused(str(balance_entry.get("error") or "no uint256 result"))
        # Without a usable nonce, `pay` reads it under the lock, where a failure is typed.
        return balance, _uint256(nonce_entry.get("result"))

    async def _with_rpc(
        self, chain_id: int, call: Callable[[AsyncWeb3[AsyncHTTPProvider]], Awaitable[T]]
    ) -> T:
        """Run `call` on the chain's RPC endpoints in order until one answers.

        An endpoint is used only after its `eth_chainId` matched `chain_id` (checked once
        per URL); a mismatch is a `ConfigurationError`, never a fall-back.
        """
        import aiohttp
        from web3.exceptions import Web3Exception

        # The URLs themselves stay out of this frame's locals: they may carry a key.
        count = len(self._options.rpc_urls.get(chain_id, ()))
        start = self._preferred.get(chain_id, 0)
        failures: list[str] = []
        for offset in range(count):
            index = (start + offset) % count
            endpoint = self._endpoint(self._options.rpc_urls[chain_id][index])
            wait = self._rpc_wait(chain_id, index + 1, count, offset + 1)
            try:
                result = await watched(wait, partial(self._ask, endpoint, chain_id, call))
            except (OSError, TimeoutError, aiohttp.ClientError, Web3Exception, ValueError) as exc:
                # Web3Exception: a JSON-RPC error object, or a call with no contract behind
                # it (BadFunctionCallOutput); ValueError: an answer that is not JSON-RPC at
                # all (a proxy's error page). Fail over; never let it escape untyped.
                failures.append(f"{endpoint_url(endpoint.url)}: {type(exc).__name__}")
                continue
            self._preferred[chain_id] = index
            return result
        raise _RpcUnavailable(
            f"no RPC endpoint for chain {chain_id} answered ({'; '.join(failures)})"
        )

    @staticmethod
    async def _ask(
        endpoint: _Endpoint,
        chain_id: int,
        call: Callable[[AsyncWeb3[AsyncHTTPProvider]], Awaitable[T]],
    ) -> T:
        if not endpoint.verified:
            reported = int(await endpoint.w3.eth.chain_id)
            check_chain_id(endpoint_url(endpoint.url), reported, chain_id)
            endpoint.verified = True
        return await call(endpoint.w3)

    def _rpc_wait(self, chain_id: int, endpoint: int, endpoints: int, attempt: int) -> RpcWait:
        """A call that keeps the user waiting is reported (`on_progress`), without its URL."""
        context = self._context
        return RpcWait(
            context.report if context.options.on_progress is not None else None,
            rail=self.name,
            what=f"chain {chain_id} RPC",
            endpoint=endpoint,
            endpoints=endpoints,
            attempt=attempt,
        )

    def _endpoint(self, url: str) -> _Endpoint:
        endpoint = self._endpoints.get(url)
        if endpoint is None:
            import aiohttp
            from web3 import AsyncHTTPProvider, AsyncWeb3

            # web3 logs the provider's URI (its key, if the path holds one): redacted.
            guard_library_logs()
            provider = AsyncHTTPProvider(
                url,
                request_kwargs={"timeout": aiohttp.ClientTimeout(total=_RPC_TIMEOUT)},
                # Fail over to the next URL at once instead of retrying with backoff.
                exception_retry_configuration=None,
            )
            # No middleware: no hidden extra RPC calls (chain id validation, ENS).
            endpoint = _Endpoint(url, provider, AsyncWeb3(provider, middleware=[]))
            self._endpoints[url] = endpoint
        return endpoint


def build(context: RailContext) -> EvmPermitRail | None:
    """The EIP-2612 permit rail, when the options have `evm`."""
    evm = context.options.evm
    return None if evm is None else EvmPermitRail(context, evm)


def off(context: RailContext) -> PermitsOff:
    """Without `evm` in the options: what paying a permit entry would take."""
    return PermitsOff()
