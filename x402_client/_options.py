"""`PaymentOptions` and `EvmOptions`: everything the client is allowed to do, in one object.

Options are immutable. Keys are accepted in snake_case (`api_key`) and in the spec's
camelCase (`apiKey`); unknown keys are an error, so that a typo in a limit cannot
silently leave the default in force. Secrets are `SecretStr`: they print as `**********`.

Each option is declared once, below: its type, default, bounds and the checks of
`_options_checks` that pydantic's types do not express. pydantic validates them (lax mode: a
numeric string for a number, a list for a tuple, a mapping for `evm`) with a model that
`_options_model` builds when options are first constructed, so that `from x402_client
import with_eur_payment, PaymentOptions` loads no pydantic. The classes keep the pydantic
methods callers use: `model_validate`, `model_copy`, `model_dump`, `model_fields`.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from collections.abc import Awaitable, Callable, Iterable, Mapping
from decimal import Decimal
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

from . import _options_checks as checks
from ._protocol.assets import Asset
from ._protocol.budgets import CURRENCIES, Budget, BudgetStore
from ._protocol.errors import ConfigurationError, X402Error
from ._protocol.events import PaymentProgress
from ._protocol.ledger import PaymentLedger
from ._protocol.redact import endpoint_url
from ._protocol.secret import SecretStr
from ._protocol.types import PaymentIntent, PaymentReceipt

if TYPE_CHECKING:
    from typing import Self

    from ._chain_a_options import ChainAOptions
    from ._state.netguard import DestinationGuard
    from ._state.shared import PaymentState

__all__ = [
    "DEFAULT_MAX_AMOUNT_PER_PAYMENT",
    "ENV_VARS",
    "BeforePaymentHook",
    "EvmOptions",
    "PaymentCallback",
    "PaymentErrorCallback",
    "PaymentOptions",
    "ProgressCallback",
    "Selector",
    "coerce_options",
]

HookResult = bool | None
#: `on_before_payment(intent)`: return True to approve; anything else (False, None, a
#: forgotten return, an exception) refuses. Sync or async.
BeforePaymentHook = Callable[[PaymentIntent], HookResult | Awaitable[HookResult]]
#: `selector(candidates)`: choose among the payable intents (merchant order); None: pay none.
Selector = Callable[[list[PaymentIntent]], PaymentIntent | None]
#: `on_progress(event)`: told about long waits (the bridge); sync or async.
ProgressCallback = Callable[[PaymentProgress], Awaitable[None] | None]
#: `on_payment(receipt)`: a payment was made and the paid response arrived; sync or async.
PaymentCallback = Callable[[PaymentReceipt], Awaitable[None] | None]
#: `on_payment_error(error)`: a request failed after money moved or may have; sync or async.
PaymentErrorCallback = Callable[[X402Error], Awaitable[None] | None]

#: Per-payment caps by currency when the user sets none: one euro, one dollar.
DEFAULT_MAX_AMOUNT_PER_PAYMENT: Mapping[str, Decimal] = {
    "EUR": Decimal("1.00"),
    "USD": Decimal("1.00"),
}

#: Environment variables read by `PaymentOptions.from_env()`.
ENV_VARS = {
    "api_key": ("X402_EUR_API_KEY", "QUANTOZ_API_KEY"),
    "from_account": ("X402_EUR_ACCOUNT", "QUANTOZ_ACCOUNT_CODE"),
    "api_url": ("X402_EUR_API_URL", "QUANTOZ_API_URL"),
    "max_amount_per_payment": ("X402_EUR_MAX_AMOUNT_PER_PAYMENT",),
    "evm_private_key": ("X402_EUR_EVM_PRIVATE_KEY",),
    "evm_rpc_url_1": ("X402_EUR_RPC_URL_1",),
    "evm_rpc_url_137": ("X402_EUR_RPC_URL_137",),
    "assets": ("X402_EUR_ASSETS",),
    # Your own chain-A wallet (`ChainAOptions`, read by `_chain_a_options.chain_a_from_env`).
    "chain_a_private_key": ("X402_EUR_CHAIN_A_PRIVATE_KEY",),
    "chain_a_mnemonic": ("X402_EUR_CHAIN_A_MNEMONIC",),
    "chain_a_algod_url": ("X402_EUR_CHAIN_A_ALGOD_URL",),
    "chain_a_algod_token": ("X402_EUR_CHAIN_A_ALGOD_TOKEN",),
    "chain_a_indexer_url": ("X402_EUR_CHAIN_A_INDEXER_URL",),
}

#: `localhost` or a loopback address (the MCP server's Host check uses it too).
_is_loopback = checks.is_loopback


# --- the option classes --------------------------------------------------------------------------

_REQUIRED: Any = object()


class Option:
    """One option, as `model_fields` lists it: `name`, camelCase `alias`, default; and what
    `_options_model` needs to validate it. Declared in the class body with `option()`:
    its annotation is the type of the kept value, which pydantic validates (lax mode)
    unless `validate_as` names another input type. `bounds` (`ge`, `gt`, `le`) bound a
    number; `before` adjusts the value given, `after` checks the validated one, `plain`
    replaces pydantic's validation; `item` validates each item of a tuple (given the item
    and pydantic's validation of it); `hint` ends the message for an item of the wrong kind.
    """

    __slots__ = (
        "after",
        "alias",
        "before",
        "bounds",
        "default",
        "default_factory",
        "hint",
        "item",
        "name",
        "plain",
        "validate_as",
    )

    def __init__(
        self,
        default: Any = _REQUIRED,
        *,
        factory: Callable[[], Any] | None = None,
        ge: float | None = None,
        gt: float | None = None,
        le: float | None = None,
        validate_as: str | None = None,
        before: Callable[[Any], Any] | None = None,
        after: Callable[[Any], Any] | None = None,
        plain: Callable[[Any], Any] | None = None,
        item: Callable[[Any, Callable[[Any], Any]], Any] | None = None,
        hint: str = "",
    ) -> None:
        self.name = self.alias = ""  # set by the class that declares it
        self.default = default
        self.default_factory = factory
        bounds = (("ge", ge), ("gt", gt), ("le", le))
        self.bounds: Mapping[str, float] = {k: v for k, v in bounds if v is not None}
        self.validate_as = validate_as
        self.before, self.after, self.plain, self.item = before, after, plain, item
        self.hint = hint

    def is_required(self) -> bool:
        return self.default is _REQUIRED and self.default_factory is None

    def get_default(self) -> Any:
        return self.default_factory() if self.default_factory is not None else self.default

    def __repr__(self) -> str:
        return f"Option(name={self.name!r}, alias={self.alias!r})"


#: Declare an option in the class body: `name: KeptType = option(default, ...)`.
option: Callable[..., Any] = Option


def _camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(part.title() for part in rest)


class _InitSignature:
    """`inspect.signature(PaymentOptions)`: the options as keyword arguments (for `help()`
    and notebooks), built on first use so that importing stays cheap."""

    def __get__(self, instance: object, owner: type[_Options]) -> Any:
        import inspect

        keyword = inspect.Parameter.KEYWORD_ONLY
        empty = inspect.Parameter.empty
        parameters = [
            inspect.Parameter(
                name, keyword, default=empty if field.is_required() else field.get_default()
            )
            for name, field in owner.model_fields.items()
        ]
        parameters.append(inspect.Parameter("aliases", inspect.Parameter.VAR_KEYWORD))
        return inspect.Signature(parameters)


class _Options:
    """Validated, immutable options. Bad values raise `ConfigurationError` (an `X402Error`),
    which names the option and the problem but never shows the value given (it may be a
    secret); an unknown key gets a "did you mean".

    pydantic validates them (`_options_model`), and they keep the pydantic methods callers
    use: `model_validate(mapping)`, `model_copy(update=...)` (validated), `model_dump()`,
    `model_fields`.
    """

    #: The options, in declaration order: name -> `Option`.
    model_fields: ClassVar[Mapping[str, Option]] = MappingProxyType({})
    #: Name or camelCase alias -> name.
    _NAMES: ClassVar[Mapping[str, str]] = {}
    #: Attributes that may be set after construction (not options; never compared).
    _PRIVATE: ClassVar[tuple[str, ...]] = ()

    __signature__ = _InitSignature()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fields: dict[str, Option] = {}
        for name, value in list(vars(cls).items()):
            if isinstance(value, Option):
                value.name, value.alias = name, _camel(name)
                fields[name] = value
                delattr(cls, name)  # the instance holds the value; the class has no default
        cls.model_fields = MappingProxyType(fields)
        cls._NAMES = {**{f.alias: n for n, f in fields.items()}, **{n: n for n in fields}}

    def __init__(self, /, **values: Any) -> None:
        # Each key in snake_case or camelCase (the camelCase one wins when both are given,
        # and the other is then an unknown key). pydantic validates, with a model built on
        # the first construction.
        from ._options_model import validate

        set_attribute = object.__setattr__
        for name, value in validate(type(self), values).items():
            set_attribute(self, name, value)
        for name in self._PRIVATE:
            set_attribute(self, name, None)

    @classmethod
    def model_validate(cls, obj: Any) -> Self:
        """Options from a mapping of options (snake_case or camelCase keys), or themselves."""
        if isinstance(obj, cls):
            return obj
        if not isinstance(obj, Mapping):
            raise ConfigurationError(
                f"invalid {cls.__name__}: options: Input should be a valid dictionary or "
                f"instance of {cls.__name__}"
            )
        return cls(**{str(key): value for key, value in obj.items()})

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A validated copy, with `update` (snake_case or camelCase keys) applied. The copy
        has state of its own (budgets, ledger), as new options do."""
        values = {name: getattr(self, name) for name in self.model_fields}
        if deep:
            import copy

            values = copy.deepcopy(values)
        for key, value in (update or {}).items():
            values[self._NAMES.get(key, key)] = value
        return type(self)(**values)

    def model_dump(self, *, by_alias: bool = False, exclude_none: bool = False) -> dict[str, Any]:
        """The options as a dict (nested options and dataclasses as dicts too); secrets stay
        `SecretStr`."""

        def dump(value: Any) -> Any:
            if isinstance(value, _Options):
                return value.model_dump(by_alias=by_alias, exclude_none=exclude_none)
            if dataclasses.is_dataclass(value) and not isinstance(value, type):
                return dataclasses.asdict(value)
            if isinstance(value, tuple):
                return tuple(dump(v) for v in value)
            if isinstance(value, dict):
                return {k: dump(v) for k, v in value.items()}
            return value

        dumped: dict[str, Any] = {}
        for name, field in self.model_fields.items():
            value = getattr(self, name)
            if not (exclude_none and value is None):
                dumped[field.alias if by_alias else name] = dump(value)
        return dumped

    def _repr_value(self, name: str, value: Any) -> str:
        return repr(value)

    def _repr_items(self) -> list[str]:
        return [f"{n}={self._repr_value(n, getattr(self, n))}" for n in self.model_fields]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(self._repr_items())})"

    def __str__(self) -> str:
        return " ".join(self._repr_items())

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in self.model_fields)

    __hash__ = None  # type: ignore[assignment]  # options hold dicts: unhashable, as before

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self._PRIVATE:
            object.__setattr__(self, name, value)
            return
        raise dataclasses.FrozenInstanceError(
            f"{type(self).__name__} is immutable: make a changed copy with "
            f"model_copy(update={{{name!r}: ...}})"
        )

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"{type(self).__name__} is immutable")

    def __getstate__(self) -> dict[str, Any]:
        # Copies and pickles carry the options, not the state made from them (locks, files).
        state = dict(self.__dict__)
        state.update(dict.fromkeys(self._PRIVATE))
        return state


class EvmOptions(_Options):
    """The EVM permit rail: a private key holding EURQ/USDQ, and RPC endpoints by chain id.

    `rpc_urls` maps 1 and/or 137 to one URL or a list tried in order. Needs the `evm`
    extra (`pip install 'x402-eur[evm]'`).
    """

    #: The payer's key: 32 bytes of hex, with or without `0x`.
    private_key: SecretStr = option(
        validate_as="str", before=checks.reveal, after=checks.private_key
    )
    #: RPC endpoints by chain id, each one URL or a list (tried in order).
    rpc_urls: dict[int, tuple[str, ...]] = option(
        factory=dict, validate_as="dict[Any, Any]", after=checks.rpc_urls
    )
    #: How long a facilitator's `/supported` answer is reused, in seconds.
    supported_cache_seconds: float = option(60.0, ge=0)

    # The signature type checkers see (the defaults are the declarations' above).
    if TYPE_CHECKING:

        def __init__(
            self,
            *,
            private_key: SecretStr | str,
            rpc_urls: Mapping[int, str | Iterable[str]] = ...,
            supported_cache_seconds: float = ...,
            **aliases: Any,
        ) -> None: ...

    def _repr_value(self, name: str, value: Any) -> str:
        # RPC URLs often carry an API key in their path or query: shown redacted.
        if name == "rpc_urls":
            value = {chain: tuple(endpoint_url(u) for u in urls) for chain, urls in value.items()}
        return repr(value)


class PaymentOptions(_Options):
    """What the client may pay with, and within which limits.

    The managed account (`api_key`, `from_account`, `api_url`) pays `euro` entries and,
    through the bridge, chain-A `exact` entries in EURQ. `evm` signs EIP-2612 permits.
    `chain_a` pays chain-A entries (EURQ, USDQ) from your own chain-A wallet, before the
    bridge.

    Limits: `max_amount_per_payment` caps each payment: one amount caps every currency, a
    mapping (`{"EUR": "0.50", "USD": "0.25"}`) caps the currencies it names and pays no
    other. Once any budget is set, a payment in a currency that no budget covers is
    refused. `on_before_payment(intent)` is asked before every payment
    on every rail (the spec's reference client asks on the euro path only; we ask
    wherever money can move) and refuses with `False` or an exception.

    ```python
    options = PaymentOptions(api_key="...", from_account="ACC_...", api_url="https://...",
                             max_amount_per_payment="0.50")
    ```
    """

    #: The managed account's API key (a secret: printed as `**********`).
    api_key: SecretStr | None = option(
        None, validate_as="str | None", before=checks.reveal, after=checks.secret
    )
    #: The managed account that pays (`ACC_...`).
    from_account: str | None = option(None)
    #: The payment API: https:// (plain http:// only for a loopback address).
    api_url: str | None = option(None, after=checks.api_url)
    #: The EVM permit rail: an `EvmOptions` or a mapping of its keys.
    evm: EvmOptions | None = option(None, plain=checks.options_of(EvmOptions))
    #: The `chain-a` rail: the user's own chain-A wallet pays `ledgera:mainnet` entries
    #: directly (`ChainAOptions`, or a mapping of its keys; its module loads only then).
    chain_a: ChainAOptions | None = option(None, validate_as="Any", plain=checks.chain_a)
    #: Asked before every payment (`BeforePaymentHook`): True approves, anything else refuses.
    on_before_payment: BeforePaymentHook | None = option(None)
    #: Told about long waits (`PaymentProgress`): the bridge.
    on_progress: ProgressCallback | None = option(None)
    #: Told after every paid response (`PaymentReceipt`): logging, metrics, an agent's memory.
    on_payment: PaymentCallback | None = option(None)
    #: Told about every error after which money moved or may have (`money_moved` is not
    #: False). A callback that raises is logged and never breaks the payment.
    on_payment_error: PaymentErrorCallback | None = option(None)
    #: Cap on each payment: one amount for every currency, or a mapping by currency
    #: (`"EUR"`, `"USD"`) that pays only the currencies it names. Default:
    #: `DEFAULT_MAX_AMOUNT_PER_PAYMENT` (one euro, one dollar).
    max_amount_per_payment: dict[str, Decimal] = option(
        factory=lambda: dict(DEFAULT_MAX_AMOUNT_PER_PAYMENT), plain=checks.limits
    )
    #: Cumulative budgets (`Budget("5", window="24h")`, or the command line's form
    #: `"5.00/24h"`, `"2.00USD/7d"`), all enforced; one or a list. Once any is set, only the
    #: currencies they name are paid (add `Budget(..., currency="USD")` or `"2.00USD/24h"`
    #: to pay dollar offers under a euro budget).
    budgets: tuple[Budget, ...] = option(
        (),
        before=checks.one_or_many(Budget, str),
        item=checks.budget_item,
        after=checks.flatten,
        hint=", or a string such as '5.00/24h'",
    )
    #: Where budgets are kept: in memory by default; `RedisBudgetStore` to share them.
    budget_store: BudgetStore | None = option(None)
    #: Where every payment is recorded in memory (a bounded window); one per options object.
    ledger: PaymentLedger | None = option(None)
    #: A SQLite file that keeps the payment journal and the budgets across restarts and
    #: across the processes of this machine (written before any money moves); None: memory
    #: only. `x402_client.default_state_path()` is the CLI's default.
    state_path: pathlib.Path | None = option(None)
    #: Tokens you pay standard x402 `exact` (EIP-3009) entries in, beyond the built-in
    #: table of Circle's EURC and USDC: each with its chain, address, currency and decimals.
    assets: tuple[Asset, ...] = option(
        (), before=checks.one_or_many(Asset), item=checks.dataclass_item(Asset)
    )
    #: Preferred entries, most preferred first: rail names (`"euro"`, `"evm-permit"`,
    #: `"chain-a"`, `"bridge"`), schemes, networks (`"eip155:137"`) or asset symbols (`"EURQ"`).
    prefer: tuple[str, ...] = option((), before=checks.one_or_many(str))
    #: Or choose yourself among the payable intents; overrides `prefer`.
    selector: Selector | None = option(None)
    #: Re-sends of the same proof while the verifier says "not confirmed (status: Open)".
    confirmation_attempts: int = option(8, ge=1, le=100)
    #: First wait before such a re-send, in seconds; doubles up to `confirmation_max_wait`.
    confirmation_wait: float = option(0.1, ge=0)
    confirmation_max_wait: float = option(2.0, ge=0)
    #: Re-sends of the same proof when the merchant answers the paid retry with 5xx.
    merchant_error_retries: int = option(2, ge=0, le=10)
    #: Largest 402 or provider body read, in bytes.
    max_body_bytes: int = option(64 * 1024, ge=1024)
    #: Timeout of each payment-API call, in seconds.
    payment_api_timeout: float = option(30.0, gt=0)
    #: Connections the payment-API client may open (and keeps alive) at once.
    payment_api_max_connections: int = option(100, ge=1)
    #: How many payable entries of one 402 may be prepared (RPC reads, the facilitator's
    #: `/supported`: URLs the merchant writes) before the client gives up on it.
    max_candidates: int = option(3, ge=1, le=20)
    #: Checks the URLs a merchant writes that the client fetches itself (the EVM permit
    #: rail's facilitator `/supported`): a `DestinationGuard` refuses loopback, private
    #: and link-local addresses unless it admits them. None (the default): no check, as
    #: the library's user chooses the URLs. `x402-eur mcp` always sets one.
    destination_guard: DestinationGuard | None = option(
        None, validate_as="Any", plain=checks.destination_guard
    )
    #: How long the bridge may take to expose `blockchainTxId`, in seconds.
    bridge_deadline: float = option(300.0, gt=0)
    #: First and largest interval between bridge polls, in seconds.
    bridge_poll_interval: float = option(0.5, gt=0)
    bridge_poll_max_interval: float = option(3.0, gt=0)

    #: The budgets, ledger and locks shared by every client built from these options
    #: (`_state.state_of`); made on first use, never copied.
    _state: PaymentState | None
    _PRIVATE = ("_state",)

    # The signature type checkers see (the defaults are the declarations' above).
    if TYPE_CHECKING:

        def __init__(
            self,
            *,
            api_key: SecretStr | str | None = ...,
            from_account: str | None = ...,
            api_url: str | None = ...,
            evm: EvmOptions | Mapping[str, Any] | None = ...,
            chain_a: ChainAOptions | Mapping[str, Any] | None = ...,
            on_before_payment: BeforePaymentHook | None = ...,
            on_progress: ProgressCallback | None = ...,
            on_payment: PaymentCallback | None = ...,
            on_payment_error: PaymentErrorCallback | None = ...,
            max_amount_per_payment: Decimal | str | int | Mapping[str, Decimal | str | int] = ...,
            budgets: Budget | str | Iterable[Budget | str | Mapping[str, Any]] = ...,
            budget_store: BudgetStore | None = ...,
            ledger: PaymentLedger | None = ...,
            state_path: str | pathlib.Path | None = ...,
            assets: Asset | Iterable[Asset] = ...,
            prefer: str | Iterable[str] = ...,
            selector: Selector | None = ...,
            confirmation_attempts: int = ...,
            confirmation_wait: float = ...,
            confirmation_max_wait: float = ...,
            merchant_error_retries: int = ...,
            max_body_bytes: int = ...,
            payment_api_timeout: float = ...,
            payment_api_max_connections: int = ...,
            max_candidates: int = ...,
            destination_guard: DestinationGuard | None = ...,
            bridge_deadline: float = ...,
            bridge_poll_interval: float = ...,
            bridge_poll_max_interval: float = ...,
            **aliases: Any,
        ) -> None: ...

    @property
    def has_managed_account(self) -> bool:
        """True when the payment API can be used: key, account and URL are all set."""
        return bool(self.api_key and self.from_account and self.api_url)

    @property
    def currencies(self) -> tuple[str, ...]:
        """The currencies these options can pay in: EUR with the managed account (euro and
        bridge entries), EUR and USD with an EVM key (EURQ/USDQ permits, EURC/USDC and
        declared tokens) or a chain-A wallet (EURQ/USDQ). Each is limited by its cap and,
        once budgets are set, by them."""
        found = set()
        if self.has_managed_account:
            found.add("EUR")
        if self.evm is not None or self.chain_a is not None:
            found.update(CURRENCIES)
        return tuple(c for c in CURRENCIES if c in found)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> PaymentOptions:
        """Options from the environment (names in `ENV_VARS`); keyword arguments win.

        `X402_EUR_API_KEY`, `X402_EUR_ACCOUNT`, `X402_EUR_API_URL`,
        `X402_EUR_MAX_AMOUNT_PER_PAYMENT` (one amount: the cap of every currency), and for
        EVM `X402_EUR_EVM_PRIVATE_KEY`, `X402_EUR_RPC_URL_1`, `X402_EUR_RPC_URL_137`
        (comma-separated lists allowed), and `X402_EUR_ASSETS` (tokens to pay standard x402
        entries in: `CHAIN:ADDRESS:SYMBOL:CURRENCY[:DECIMALS]`, comma-separated). Chain A
        directly: `X402_EUR_CHAIN_A_PRIVATE_KEY` or `X402_EUR_CHAIN_A_MNEMONIC`, with
        `X402_EUR_CHAIN_A_ALGOD_URL` (and `_ALGOD_TOKEN`, `_INDEXER_URL`).
        """
        env = os.environ if environ is None else environ

        def read(name: str) -> str | None:
            for var in ENV_VARS[name]:
                if env.get(var):
                    return env[var]
            return None

        values: dict[str, Any] = {}
        for name in ("api_key", "from_account", "api_url", "max_amount_per_payment"):
            found = read(name)
            if found is not None:
                values[name] = found
        key = read("evm_private_key")
        if key is not None:
            rpc: dict[int, list[str]] = {}
            for chain in (1, 137):
                urls = read(f"evm_rpc_url_{chain}")
                if urls:
                    rpc[chain] = [u.strip() for u in urls.split(",") if u.strip()]
            values["evm"] = {"private_key": key, "rpc_urls": rpc}
        chain_a = checks.chain_a_from_env(env)  # the `X402_EUR_CHAIN_A_*` variables
        if chain_a is not None:
            values["chain_a"] = chain_a
        declared = read("assets")
        if declared:
            variable = ENV_VARS["assets"][0]
            values["assets"] = [
                checks.asset_from_text(t, variable) for t in declared.split(",") if t.strip()
            ]
        values.update(overrides)
        managed = ("api_key", "from_account", "api_url")
        present = [name for name in managed if values.get(name)]
        own_wallet = "evm" in values or "chain_a" in values
        if not own_wallet and len(present) < len(managed):
            missing = [name for name in managed if name not in present]
            variables = ", ".join(ENV_VARS[name][0] for name in missing)
            what = "is" if len(missing) == 1 else "are"
            hint = "" if present else f", or {ENV_VARS['evm_private_key'][0]} for EVM permits"
            raise ConfigurationError(
                f"no usable payment configuration in the environment: {variables} {what} "
                f"not set (set them for the managed account{hint})"
            )
        return coerce_options(values)


def coerce_options(options: PaymentOptions | Mapping[str, Any] | None) -> PaymentOptions:
    """A `PaymentOptions` from itself, a mapping of the same keys, or None (no payment means)."""
    if isinstance(options, PaymentOptions):
        return options
    if options is None:
        return PaymentOptions()
    if not isinstance(options, Mapping):
        raise ConfigurationError(
            f"options must be PaymentOptions or a mapping, not {type(options).__name__}"
        )
    return PaymentOptions.model_validate(options)
