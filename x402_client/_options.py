"""`PaymentOptions` and `EvmOptions`: everything the client is allowed to do, in one object.

Options are immutable. Keys are accepted in snake_case (`api_key`) and in the spec's
camelCase (`apiKey`); unknown keys are an error, so that a typo in a limit cannot
silently leave the default in force. Secrets are `SecretStr`: they print as `**********`.
"""

from __future__ import annotations

import difflib
import ipaddress
import os
import pathlib
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    field_validator,
)
from pydantic.alias_generators import to_camel

from ._amounts import AmountError, parse_amount
from ._assets import Asset
from ._budget import Budget, BudgetStore
from ._exceptions import ConfigurationError, X402Error
from ._http import redact_url
from ._ledger import PaymentLedger
from ._progress import PaymentProgress
from ._types import PaymentIntent, PaymentReceipt

if TYPE_CHECKING:
    from ._state import PaymentState

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
}

_KEY_RE = re.compile(r"\A(0x)?[0-9a-fA-F]{64}\Z")


def _config_error(exc: ValidationError, cls: type[BaseModel]) -> ConfigurationError:
    """A `ConfigurationError` from pydantic's: locations and messages only (input values may
    be secrets), with "did you mean" for unknown keys."""
    names = set(cls.model_fields)
    names |= {f.alias for f in cls.model_fields.values() if f.alias}
    problems = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "options"
        message = err["msg"]
        if err["type"] == "extra_forbidden" and len(err["loc"]) == 1:
            key = str(err["loc"][0])
            close = sorted(n for n in names if n.startswith(key) or key.startswith(n))
            close = close or difflib.get_close_matches(key, sorted(names), n=1, cutoff=0.5)
            message = "unknown option" + (f"; did you mean {close[0]!r}?" if close else "")
        problems.append(f"{where}: {message}")
    return ConfigurationError(f"invalid {cls.__name__}: " + "; ".join(problems))


class _Options(BaseModel):
    """Options raise `ConfigurationError` (an `X402Error`) for bad values, never pydantic's
    `ValidationError`, and never show the values given (they may be secrets)."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        populate_by_name=True,
        alias_generator=to_camel,
        arbitrary_types_allowed=True,
        hide_input_in_errors=True,
        defer_build=True,
    )

    def __init__(self, /, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise _config_error(exc, type(self)) from None


def _check_url(value: str) -> str:
    if not re.match(r"\Ahttps?://[^/\s]+", value):
        raise ValueError("must be an http(s) URL")
    return value.rstrip("/")


def _is_loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class EvmOptions(_Options):
    """The EVM permit rail: a private key holding EURQ/USDQ, and RPC endpoints by chain id.

    `rpc_urls` maps 1 and/or 137 to one URL or a list tried in order. Needs the `evm`
    extra (`pip install 'x402-eur[evm]'`).
    """

    private_key: SecretStr
    rpc_urls: dict[int, tuple[str, ...]] = Field(default_factory=dict)
    supported_cache_seconds: float = Field(default=60.0, ge=0)

    def __repr_args__(self) -> Iterable[tuple[str | None, Any]]:
        # RPC URLs often carry an API key in their path or query: shown redacted.
        for name, value in super().__repr_args__():
            if name == "rpc_urls":
                value = {chain: tuple(redact_url(u) for u in urls) for chain, urls in value.items()}
            yield name, value

    @field_validator("private_key")
    @classmethod
    def _key(cls, value: SecretStr) -> SecretStr:
        if not _KEY_RE.match(value.get_secret_value()):
            raise ValueError("private_key must be 32 bytes of hex")
        return value

    @field_validator("rpc_urls", mode="before")
    @classmethod
    def _urls(cls, value: Any) -> Any:
        if not isinstance(value, Mapping):
            return value
        result: dict[int, tuple[str, ...]] = {}
        for chain, urls in value.items():
            listed = (urls,) if isinstance(urls, str) else tuple(urls)
            if not listed:
                raise ValueError(f"no RPC URL for chain {chain}")
            result[int(chain)] = tuple(_check_url(u) for u in listed)
        return result


class PaymentOptions(_Options):
    """What the client may pay with, and within which limits.

    The managed account (`api_key`, `from_account`, `api_url`) pays `euro` entries and,
    through the bridge, chain-A `exact` entries in EURQ. `evm` signs EIP-2612 permits.

    Limits: `max_amount_per_payment` caps each payment per currency (`"EUR"`, `"USD"`); a
    plain number means euros. `on_before_payment(intent)` is asked before every payment
    on every rail (the spec's reference client asks on the euro path only; we ask
    wherever money can move) and refuses with `False` or an exception.

    ```python
    options = PaymentOptions(api_key="...", from_account="ACC_...", api_url="https://...",
                             max_amount_per_payment="0.50")
    ```
    """

    api_key: SecretStr | None = None
    from_account: str | None = None
    api_url: str | None = None
    evm: EvmOptions | None = None
    on_before_payment: BeforePaymentHook | None = None
    on_progress: ProgressCallback | None = None
    #: Told after every paid response (`PaymentReceipt`): logging, metrics, an agent's memory.
    on_payment: PaymentCallback | None = None
    #: Told about every error after which money moved or may have (`money_moved` is not
    #: False). A callback that raises is logged and never breaks the payment.
    on_payment_error: PaymentErrorCallback | None = None
    max_amount_per_payment: dict[str, Decimal] = Field(
        default_factory=lambda: dict(DEFAULT_MAX_AMOUNT_PER_PAYMENT)
    )
    #: Cumulative budgets (`Budget("5", window=86400)`), all enforced; one or a list.
    budgets: tuple[Budget, ...] = ()
    #: Where budgets are kept: in memory by default; `RedisBudgetStore` to share them.
    budget_store: BudgetStore | None = None
    #: Where every payment is recorded in memory (a bounded window); one per options object.
    ledger: PaymentLedger | None = None
    #: A SQLite file that keeps the payment journal and the budgets across restarts and
    #: across the processes of this machine (written before any money moves); None: memory
    #: only. `x402_client.default_state_path()` is the CLI's default.
    state_path: pathlib.Path | None = None
    #: Tokens you pay standard x402 `exact` (EIP-3009) entries in, beyond the built-in
    #: table of Circle's EURC and USDC: each with its chain, address, currency and decimals.
    assets: tuple[Asset, ...] = ()
    #: Preferred entries, most preferred first: rail names (`"euro"`, `"evm-permit"`,
    #: `"bridge"`), schemes, networks (`"eip155:137"`) or asset symbols (`"EURQ"`).
    prefer: tuple[str, ...] = ()
    #: Or choose yourself among the payable intents; overrides `prefer`.
    selector: Selector | None = None
    #: Re-sends of the same proof while the verifier says "not confirmed (status: Open)".
    confirmation_attempts: int = Field(default=8, ge=1, le=100)
    #: First wait before such a re-send, in seconds; doubles up to `confirmation_max_wait`.
    confirmation_wait: float = Field(default=0.1, ge=0)
    confirmation_max_wait: float = Field(default=2.0, ge=0)
    #: Re-sends of the same proof when the merchant answers the paid retry with 5xx.
    merchant_error_retries: int = Field(default=2, ge=0, le=10)
    #: Largest 402 or provider body read, in bytes.
    max_body_bytes: int = Field(default=64 * 1024, ge=1024)
    #: Timeout of each payment-API call, in seconds.
    payment_api_timeout: float = Field(default=30.0, gt=0)
    #: Connections the payment-API client may open (and keeps alive) at once.
    payment_api_max_connections: int = Field(default=100, ge=1)
    #: How many payable entries of one 402 may be prepared (RPC reads, the facilitator's
    #: `/supported`: URLs the merchant writes) before the client gives up on it.
    max_candidates: int = Field(default=3, ge=1, le=20)
    #: How long the bridge may take to expose `blockchainTxId`, in seconds.
    bridge_deadline: float = Field(default=300.0, gt=0)
    #: First and largest interval between bridge polls, in seconds.
    bridge_poll_interval: float = Field(default=0.5, gt=0)
    bridge_poll_max_interval: float = Field(default=3.0, gt=0)

    @field_validator("budgets", mode="before")
    @classmethod
    def _budgets(cls, value: Any) -> Any:
        return (value,) if isinstance(value, Budget) else value

    @field_validator("assets", mode="before")
    @classmethod
    def _assets(cls, value: Any) -> Any:
        return (value,) if isinstance(value, Asset) else value

    @field_validator("prefer", mode="before")
    @classmethod
    def _prefer(cls, value: Any) -> Any:
        return (value,) if isinstance(value, str) else value

    _state: PaymentState | None = PrivateAttr(default=None)

    @field_validator("api_url")
    @classmethod
    def _api_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = _check_url(value)
        # The API key travels to this URL: plain http only where it cannot leave the machine.
        if not value.startswith("https://") and not _is_loopback(
            re.sub(r"\Ahttps?://(\[[^\]]+\]|[^/:]+).*", r"\1", value)
        ):
            raise ValueError("must be https:// (plain http:// only for a loopback address)")
        return value

    @field_validator("max_amount_per_payment", mode="before")
    @classmethod
    def _limits(cls, value: Any) -> Any:
        if isinstance(value, (str, int, Decimal)) and not isinstance(value, bool):
            value = {"EUR": value}
        if not isinstance(value, Mapping):
            raise ValueError("must be an amount (euros) or a mapping of currency to amount")
        limits = dict(DEFAULT_MAX_AMOUNT_PER_PAYMENT)
        for currency, amount in value.items():
            try:
                limits[str(currency).upper()] = parse_amount(amount, allow_zero=True)
            except AmountError as exc:
                raise ValueError(f"limit for {currency}: {exc}") from None
        return limits

    @property
    def has_managed_account(self) -> bool:
        """True when the payment API can be used: key, account and URL are all set."""
        return bool(self.api_key and self.from_account and self.api_url)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> PaymentOptions:
        """Options from the environment (names in `ENV_VARS`); keyword arguments win.

        `X402_EUR_API_KEY`, `X402_EUR_ACCOUNT`, `X402_EUR_API_URL`,
        `X402_EUR_MAX_AMOUNT_PER_PAYMENT`, and for EVM `X402_EUR_EVM_PRIVATE_KEY`,
        `X402_EUR_RPC_URL_1`, `X402_EUR_RPC_URL_137` (comma-separated lists allowed), and
        `X402_EUR_ASSETS` (tokens to pay standard x402 entries in:
        `CHAIN:ADDRESS:SYMBOL:CURRENCY[:DECIMALS]`, comma-separated).
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
        declared = read("assets")
        if declared:
            values["assets"] = [_asset_from_text(t) for t in declared.split(",") if t.strip()]
        values.update(overrides)
        managed = ("api_key", "from_account", "api_url")
        present = [name for name in managed if values.get(name)]
        if "evm" not in values and len(present) < len(managed):
            missing = [name for name in managed if name not in present]
            variables = ", ".join(ENV_VARS[name][0] for name in missing)
            what = "is" if len(missing) == 1 else "are"
            hint = "" if present else f", or {ENV_VARS['evm_private_key'][0]} for EVM permits"
            raise ConfigurationError(
                f"no usable payment configuration in the environment: {variables} {what} "
                f"not set (set them for the managed account{hint})"
            )
        return coerce_options(values)


def _asset_from_text(text: str) -> Asset:
    """`CHAIN:ADDRESS:SYMBOL:CURRENCY[:DECIMALS]` (the form of `X402_EUR_ASSETS`)."""
    parts = [p.strip() for p in text.strip().split(":")]
    if len(parts) not in (4, 5) or not parts[0].isdigit():
        raise ConfigurationError(
            f"{ENV_VARS['assets'][0]}: write CHAIN:ADDRESS:SYMBOL:CURRENCY[:DECIMALS], e.g. "
            "8453:0x...:EURC:EUR:6"
        )
    decimals = int(parts[4]) if len(parts) == 5 and parts[4].isdigit() else 6
    return Asset(int(parts[0]), parts[1], parts[2], parts[3], decimals)


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
    try:
        return PaymentOptions.model_validate(dict(options))
    except ValidationError as exc:
        raise _config_error(exc, PaymentOptions) from None
