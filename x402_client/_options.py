"""`PaymentOptions` and `EvmOptions`: everything the client is allowed to do, in one object.

Options are immutable. Keys are accepted in snake_case (`api_key`) and in the spec's
camelCase (`apiKey`); unknown keys are an error, so that a typo in a limit cannot
silently leave the default in force. Secrets are `SecretStr`: they print as `**********`.

These are plain classes, not pydantic models, so that `from x402_client import
with_eur_payment, PaymentOptions` stays cheap; they validate as pydantic's lax mode did
(a numeric string for a number, a list for a tuple, a mapping for `evm`), with the same
error messages, and keep the pydantic methods callers use: `model_validate`,
`model_copy`, `model_dump`, `model_fields`.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import math
import os
import pathlib
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from decimal import Decimal
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

from ._amounts import AmountError, parse_amount
from ._assets import Asset
from ._budget import CURRENCIES, Budget, BudgetStore
from ._exceptions import ConfigurationError, X402Error
from ._ledger import PaymentLedger
from ._progress import PaymentProgress
from ._redact import endpoint_url
from ._secret import SecretStr
from ._types import PaymentIntent, PaymentReceipt

if TYPE_CHECKING:
    from typing import Self

    from ._netguard import DestinationGuard
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
#: The order of secp256k1's group: a private key is an integer from 1 to this minus one.
_SECP256K1_ORDER = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141


# --- validation: pydantic's lax mode, by hand ----------------------------------------------------
#
# A validator takes the value given and returns the value kept. It raises `_Invalid` for a
# value of the wrong kind (in pydantic's words, so that messages stay what they were) and
# `ValueError` for a value of the right kind that breaks a rule ("Value error, ..."). Neither
# message ever contains the value: it may be a secret.

Validator = Callable[[Any], Any]


class _Invalid(Exception):
    """Problems with one value: (where inside the value, message) pairs."""

    def __init__(self, message: str = "", *where: str | int) -> None:
        super().__init__(message)
        self.problems: list[tuple[tuple[str | int, ...], str]] = (
            [(where, message)] if message else []
        )


def _str(value: Any) -> str:
    if isinstance(value, str):
        return value if type(value) is str else str.__str__(value)
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode()
        except UnicodeDecodeError:
            raise _Invalid(
                "Input should be a valid string, unable to parse raw data as a unicode string"
            ) from None
    raise _Invalid("Input should be a valid string")


def _secret(value: Any) -> SecretStr:
    if isinstance(value, SecretStr):
        return value
    reveal = getattr(type(value), "get_secret_value", None)
    if callable(reveal):  # another library's SecretStr (pydantic's, from a settings object)
        value = reveal(value)
    try:
        return SecretStr(_str(value))
    except _Invalid:
        raise _Invalid("Input should be a valid string") from None


def _finite(value: float | Decimal) -> bool:
    return value.is_finite() if isinstance(value, Decimal) else math.isfinite(value)


_INT_RE = re.compile(r"[+-]?[0-9](?:_?[0-9])*(?:\.0*)?", re.ASCII)


def _int(value: Any) -> int:
    if isinstance(value, int):  # bool too, as pydantic's lax mode: True is 1
        return int(value)
    if isinstance(value, (float, Decimal)):
        if not _finite(value):
            raise _Invalid("Input should be a finite number")
        if value != int(value):
            raise _Invalid("Input should be a valid integer, got a number with a fractional part")
        return int(value)
    if isinstance(value, (str, bytes)):
        text = (value.decode("latin-1") if isinstance(value, bytes) else value).strip()
        if not _INT_RE.fullmatch(text):
            raise _Invalid("Input should be a valid integer, unable to parse string as an integer")
        return int(text.partition(".")[0])
    raise _Invalid("Input should be a valid integer")


def _float(value: Any) -> float:
    if isinstance(value, (float, int, Decimal)):  # bool too: True is 1.0
        try:
            return float(value)
        except OverflowError:
            raise _Invalid("Input should be a valid number") from None
    if isinstance(value, (str, bytes)):
        text = (value.decode("latin-1") if isinstance(value, bytes) else value).strip()
        if text.isascii():
            try:
                return float(text)
            except ValueError:
                pass
        raise _Invalid("Input should be a valid number, unable to parse string as a number")
    raise _Invalid("Input should be a valid number")


def _number(
    convert: Callable[[Any], float],
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
) -> Validator:
    """`convert`, then the bounds (written as `not x >= ge` so that NaN fails them)."""

    def validate(value: Any) -> float:
        number = convert(value)
        if ge is not None and not number >= ge:
            raise _Invalid(f"Input should be greater than or equal to {ge}")
        if gt is not None and not number > gt:
            raise _Invalid(f"Input should be greater than {gt}")
        if le is not None and not number <= le:
            raise _Invalid(f"Input should be less than or equal to {le}")
        return number

    return validate


def _optional(validate: Validator) -> Validator:
    return lambda value: None if value is None else validate(value)


def _callable(value: Any) -> Any:
    if not callable(value):
        raise _Invalid("Input should be callable")
    return value


def _instance(cls: type) -> Validator:
    def validate(value: Any) -> Any:
        if not isinstance(value, cls):
            raise _Invalid(f"Input should be an instance of {cls.__name__}")
        return value

    return validate


def _path(value: Any) -> pathlib.Path:
    if isinstance(value, pathlib.Path):
        return value
    if isinstance(value, str):
        return pathlib.Path(value)
    raise _Invalid("Input is not a valid path for <class 'pathlib.Path'>")


def _dataclass(cls: type) -> Validator:
    """An instance of the dataclass `cls` as it is, or one built from a mapping of its fields."""

    def validate(value: Any) -> Any:
        if isinstance(value, cls):
            return value
        if not isinstance(value, Mapping):
            raise _Invalid(f"Input should be a dictionary or an instance of {cls.__name__}")
        fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
        problem = _Invalid()
        for key in value:
            if key not in fields:
                problem.problems.append(((str(key),), "Unexpected keyword argument"))
        for name, field in fields.items():
            required = (
                field.default is dataclasses.MISSING
                and field.default_factory is dataclasses.MISSING
            )
            if required and name not in value:
                problem.problems.append(((name,), "Field required"))
        if problem.problems:
            raise problem
        try:
            return cls(**value)  # its own checks raise ConfigurationError, which goes through
        except (TypeError, ValueError, AttributeError):
            raise _Invalid(
                f"Input should be a dictionary or an instance of {cls.__name__}"
            ) from None

    return validate


def _tuple(item: Validator, single: type) -> Validator:
    """A tuple of `item`s from any iterable (not a string or a mapping); a lone `single`
    is a tuple of one."""

    def validate(value: Any) -> tuple[Any, ...]:
        if isinstance(value, single):
            value = (value,)
        if isinstance(value, (str, bytes, bytearray, Mapping)) or not isinstance(value, Iterable):
            raise _Invalid("Input should be a valid tuple")
        items: list[Any] = []
        problem = _Invalid()
        for index, element in enumerate(value):
            try:
                items.append(item(element))
            except _Invalid as exc:
                problem.problems += [((index, *where), msg) for where, msg in exc.problems]
        if problem.problems:
            raise problem
        return tuple(items)

    return validate


def _check_url(value: Any) -> str:
    if not isinstance(value, str) or not re.match(r"\Ahttps?://[^/\s]+", value):
        raise ValueError("must be an http(s) URL")
    return value.rstrip("/")


def _is_loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _api_url(value: Any) -> str:
    url = _check_url(_str(value))
    # The API key travels to this URL: plain http only where it cannot leave the machine.
    if not url.startswith("https://") and not _is_loopback(
        re.sub(r"\Ahttps?://(\[[^\]]+\]|[^/:]+).*", r"\1", url)
    ):
        raise ValueError("must be https:// (plain http:// only for a loopback address)")
    return url


def _limits(value: Any) -> dict[str, Decimal]:
    """One amount: the cap of every currency. A mapping: the caps of the currencies it
    names, and no cap (nothing paid) for the others."""
    if isinstance(value, (str, int, float, Decimal)) and not isinstance(value, bool):
        try:
            cap = parse_amount(value, allow_zero=True)
        except AmountError as exc:
            raise ValueError(f"limit: {exc}") from None
        return dict.fromkeys(CURRENCIES, cap)
    if not isinstance(value, Mapping):
        raise ValueError(
            "must be an amount (for every currency) or a mapping of currency to amount"
        )
    limits: dict[str, Decimal] = {}
    for currency, amount in value.items():
        name = str(currency).upper()
        if name not in CURRENCIES:
            raise ValueError(f"limit for {str(currency)[:20]!r}: the currency must be EUR or USD")
        try:
            limits[name] = parse_amount(amount, allow_zero=True)
        except AmountError as exc:
            raise ValueError(f"limit for {currency}: {exc}") from None
    return limits


def _budgets(value: Any) -> tuple[Budget, ...]:
    """Budgets from a `Budget`, a mapping of its fields, or `AMOUNT[CURRENCY][/WINDOW]`
    text (`"5.00/24h"`, several separated by commas), or an iterable of those."""
    if isinstance(value, (Budget, str)):
        value = (value,)
    if isinstance(value, (bytes, bytearray, Mapping)) or not isinstance(value, Iterable):
        raise _Invalid("Input should be a valid tuple")
    one = _dataclass(Budget)
    kept: list[Budget] = []
    problem = _Invalid()
    for index, element in enumerate(value):
        if isinstance(element, str):
            from ._budget_spec import parse_budgets

            try:
                kept += parse_budgets([element])
            except ValueError as exc:
                problem.problems.append(((index,), str(exc)))
            continue
        try:
            kept.append(one(element))
        except _Invalid as exc:
            problem.problems += [
                ((index, *where), f"{msg}, or a string such as '5.00/24h'")
                if not where
                else ((index, *where), msg)
                for where, msg in exc.problems
            ]
    if problem.problems:
        raise problem
    return tuple(kept)


def _private_key(value: Any) -> SecretStr:
    """32 bytes of hex that are a secp256k1 private key: from 1 to the group order minus
    one. Checked as an integer, without the EVM extra; the key is never in a message."""
    secret = _secret(value)
    text = secret.get_secret_value()
    if not _KEY_RE.match(text):
        raise ValueError("private_key must be 32 bytes of hex")
    if not 0 < int(text.removeprefix("0x"), 16) < _SECP256K1_ORDER:
        raise ValueError(
            "private_key is not a valid secp256k1 key (it must be above zero and below the "
            "curve order)"
        )
    return secret


def _rpc_urls(value: Any) -> dict[int, tuple[str, ...]]:
    if not isinstance(value, Mapping):
        raise _Invalid("Input should be a valid dictionary")
    result: dict[int, tuple[str, ...]] = {}
    for chain, urls in value.items():
        try:
            listed = (urls,) if isinstance(urls, str) else tuple(urls)
        except TypeError:
            raise ValueError("must be an http(s) URL") from None
        if not listed:
            raise ValueError(f"no RPC URL for chain {chain}")
        try:
            result[int(chain)] = tuple(_check_url(u) for u in listed)
        except TypeError:
            raise ValueError("chain ids must be integers") from None
    return result


def _unknown(key: str, names: Iterable[str]) -> str:
    """The message for an unknown key: "unknown option", and the nearest known name."""
    import difflib  # only on this error path: not worth its import time otherwise

    # In the spelling the key is written in: snake_case unless it has a capital.
    known = sorted(names)
    styled = [n for n in known if n.islower() or not key.islower()] or known
    close = [n for n in styled if n.startswith(key) or key.startswith(n)]
    # the most similar of them: "budget" is nearer "budgets" than "budget_store"
    close.sort(key=lambda n: -difflib.SequenceMatcher(None, key, n).ratio())
    close = close or difflib.get_close_matches(key, styled, n=1, cutoff=0.5)
    return "unknown option" + (f"; did you mean {close[0]!r}?" if close else "")


# --- the option classes --------------------------------------------------------------------------

_REQUIRED: Any = object()


class OptionField:
    """One option, as `model_fields` lists it: `name`, camelCase `alias`, default."""

    __slots__ = ("alias", "default", "default_factory", "name", "validate")

    def __init__(
        self, validate: Validator, default: Any, default_factory: Callable[[], Any] | None
    ) -> None:
        self.validate = validate
        self.default = default
        self.default_factory = default_factory
        self.name = self.alias = ""

    def is_required(self) -> bool:
        return self.default is _REQUIRED and self.default_factory is None

    def get_default(self) -> Any:
        return self.default_factory() if self.default_factory is not None else self.default

    def __repr__(self) -> str:
        return f"OptionField(name={self.name!r}, alias={self.alias!r})"


def _field(
    validate: Validator, default: Any = _REQUIRED, *, factory: Callable[[], Any] | None = None
) -> Any:
    """Declare an option in the class body (its annotation is the type of the kept value)."""
    return OptionField(validate, default, factory)


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

    Compatible with the pydantic models these once were: `model_validate(mapping)`,
    `model_copy(update=...)` (validated), `model_dump()`, `model_fields`.
    """

    #: The options, in declaration order: name -> `OptionField`.
    model_fields: ClassVar[Mapping[str, OptionField]] = MappingProxyType({})
    #: Name or camelCase alias -> name.
    _NAMES: ClassVar[Mapping[str, str]] = {}
    #: Attributes that may be set after construction (not options; never compared).
    _PRIVATE: ClassVar[tuple[str, ...]] = ()

    __signature__ = _InitSignature()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fields: dict[str, OptionField] = {}
        for name, value in list(vars(cls).items()):
            if isinstance(value, OptionField):
                value.name, value.alias = name, _camel(name)
                fields[name] = value
                delattr(cls, name)  # the instance holds the value; the class has no default
        cls.model_fields = MappingProxyType(fields)
        cls._NAMES = {**{f.alias: n for n, f in fields.items()}, **{n: n for n in fields}}

    def __init__(self, /, **values: Any) -> None:
        # Each key in snake_case or camelCase (the camelCase one wins when both are given,
        # and the other is then an unknown key, as pydantic had it). Errors are listed in
        # the order of the fields, then the unknown keys in the order given.
        problems: list[tuple[str, str]] = []
        kept: dict[str, Any] = {}
        used: set[str] = set()
        for name, field in self.model_fields.items():
            if field.alias in values:
                key = field.alias
            elif name in values:
                key = name
            elif field.is_required():
                problems.append((field.alias, "Field required"))
                continue
            else:
                kept[name] = field.get_default()
                continue
            used.add(key)
            try:
                kept[name] = field.validate(values[key])
            except _Invalid as exc:
                problems += [(".".join(map(str, (key, *w))), msg) for w, msg in exc.problems]
            except ValueError as exc:
                problems.append((key, f"Value error, {exc}"))
        for key in values:
            if key not in used:
                problems.append((key, _unknown(key, self._NAMES)))
        if problems:
            raise ConfigurationError(
                f"invalid {type(self).__name__}: "
                + "; ".join(f"{where}: {message}" for where, message in problems)
            )
        set_attribute = object.__setattr__
        for name, value in kept.items():
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
    private_key: SecretStr = _field(_private_key)
    #: RPC endpoints by chain id, each one URL or a list (tried in order).
    rpc_urls: dict[int, tuple[str, ...]] = _field(_rpc_urls, factory=dict)
    #: How long a facilitator's `/supported` answer is reused, in seconds.
    supported_cache_seconds: float = _field(_number(_float, ge=0), 60.0)

    if TYPE_CHECKING:

        def __init__(
            self,
            *,
            private_key: SecretStr | str,
            rpc_urls: Mapping[int, str | Iterable[str]] = ...,
            supported_cache_seconds: float = 60.0,
            **aliases: Any,
        ) -> None: ...

    def _repr_value(self, name: str, value: Any) -> str:
        # RPC URLs often carry an API key in their path or query: shown redacted.
        if name == "rpc_urls":
            value = {chain: tuple(endpoint_url(u) for u in urls) for chain, urls in value.items()}
        return repr(value)


def _evm(value: Any) -> EvmOptions:
    if isinstance(value, EvmOptions):
        return value
    if isinstance(value, Mapping):
        return EvmOptions.model_validate(value)  # its errors are its own ("invalid EvmOptions")
    raise _Invalid("Input should be a valid dictionary or instance of EvmOptions")


def _default_limits() -> dict[str, Decimal]:
    return dict(DEFAULT_MAX_AMOUNT_PER_PAYMENT)


_optional_callable = _optional(_callable)


def _destination_guard(value: Any) -> Any:
    from ._netguard import DestinationGuard

    return _instance(DestinationGuard)(value)


class PaymentOptions(_Options):
    """What the client may pay with, and within which limits.

    The managed account (`api_key`, `from_account`, `api_url`) pays `euro` entries and,
    through the bridge, chain-A `exact` entries in EURQ. `evm` signs EIP-2612 permits.

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
    api_key: SecretStr | None = _field(_optional(_secret), None)
    #: The managed account that pays (`ACC_...`).
    from_account: str | None = _field(_optional(_str), None)
    #: The payment API: https:// (plain http:// only for a loopback address).
    api_url: str | None = _field(_optional(_api_url), None)
    #: The EVM permit rail: an `EvmOptions` or a mapping of its keys.
    evm: EvmOptions | None = _field(_optional(_evm), None)
    #: Asked before every payment (`BeforePaymentHook`): True approves, anything else refuses.
    on_before_payment: BeforePaymentHook | None = _field(_optional_callable, None)
    #: Told about long waits (`PaymentProgress`): the bridge.
    on_progress: ProgressCallback | None = _field(_optional_callable, None)
    #: Told after every paid response (`PaymentReceipt`): logging, metrics, an agent's memory.
    on_payment: PaymentCallback | None = _field(_optional_callable, None)
    #: Told about every error after which money moved or may have (`money_moved` is not
    #: False). A callback that raises is logged and never breaks the payment.
    on_payment_error: PaymentErrorCallback | None = _field(_optional_callable, None)
    #: Cap on each payment: one amount for every currency, or a mapping by currency
    #: (`"EUR"`, `"USD"`) that pays only the currencies it names. Default:
    #: `DEFAULT_MAX_AMOUNT_PER_PAYMENT` (one euro, one dollar).
    max_amount_per_payment: dict[str, Decimal] = _field(_limits, factory=_default_limits)
    #: Cumulative budgets (`Budget("5", window="24h")`, or the command line's form
    #: `"5.00/24h"`, `"2.00USD/7d"`), all enforced; one or a list. Once any is set, only the
    #: currencies they name are paid (add `Budget(..., currency="USD")` or `"2.00USD/24h"`
    #: to pay dollar offers under a euro budget).
    budgets: tuple[Budget, ...] = _field(_budgets, ())
    #: Where budgets are kept: in memory by default; `RedisBudgetStore` to share them.
    budget_store: BudgetStore | None = _field(_optional(_instance(BudgetStore)), None)
    #: Where every payment is recorded in memory (a bounded window); one per options object.
    ledger: PaymentLedger | None = _field(_optional(_instance(PaymentLedger)), None)
    #: A SQLite file that keeps the payment journal and the budgets across restarts and
    #: across the processes of this machine (written before any money moves); None: memory
    #: only. `x402_client.default_state_path()` is the CLI's default.
    state_path: pathlib.Path | None = _field(_optional(_path), None)
    #: Tokens you pay standard x402 `exact` (EIP-3009) entries in, beyond the built-in
    #: table of Circle's EURC and USDC: each with its chain, address, currency and decimals.
    assets: tuple[Asset, ...] = _field(_tuple(_dataclass(Asset), Asset), ())
    #: Preferred entries, most preferred first: rail names (`"euro"`, `"evm-permit"`,
    #: `"bridge"`), schemes, networks (`"eip155:137"`) or asset symbols (`"EURQ"`).
    prefer: tuple[str, ...] = _field(_tuple(_str, str), ())
    #: Or choose yourself among the payable intents; overrides `prefer`.
    selector: Selector | None = _field(_optional_callable, None)
    #: Re-sends of the same proof while the verifier says "not confirmed (status: Open)".
    confirmation_attempts: int = _field(_number(_int, ge=1, le=100), 8)
    #: First wait before such a re-send, in seconds; doubles up to `confirmation_max_wait`.
    confirmation_wait: float = _field(_number(_float, ge=0), 0.1)
    confirmation_max_wait: float = _field(_number(_float, ge=0), 2.0)
    #: Re-sends of the same proof when the merchant answers the paid retry with 5xx.
    merchant_error_retries: int = _field(_number(_int, ge=0, le=10), 2)
    #: Largest 402 or provider body read, in bytes.
    max_body_bytes: int = _field(_number(_int, ge=1024), 64 * 1024)
    #: Timeout of each payment-API call, in seconds.
    payment_api_timeout: float = _field(_number(_float, gt=0), 30.0)
    #: Connections the payment-API client may open (and keeps alive) at once.
    payment_api_max_connections: int = _field(_number(_int, ge=1), 100)
    #: How many payable entries of one 402 may be prepared (RPC reads, the facilitator's
    #: `/supported`: URLs the merchant writes) before the client gives up on it.
    max_candidates: int = _field(_number(_int, ge=1, le=20), 3)
    #: Checks the URLs a merchant writes that the client fetches itself (the EVM permit
    #: rail's facilitator `/supported`): a `DestinationGuard` refuses loopback, private
    #: and link-local addresses unless it admits them. None (the default): no check, as
    #: the library's user chooses the URLs. `x402-eur mcp` always sets one.
    destination_guard: DestinationGuard | None = _field(_optional(_destination_guard), None)
    #: How long the bridge may take to expose `blockchainTxId`, in seconds.
    bridge_deadline: float = _field(_number(_float, gt=0), 300.0)
    #: First and largest interval between bridge polls, in seconds.
    bridge_poll_interval: float = _field(_number(_float, gt=0), 0.5)
    bridge_poll_max_interval: float = _field(_number(_float, gt=0), 3.0)

    #: The budgets, ledger and locks shared by every client built from these options
    #: (`_state.state_of`); made on first use, never copied.
    _state: PaymentState | None
    _PRIVATE = ("_state",)

    if TYPE_CHECKING:

        def __init__(
            self,
            *,
            api_key: SecretStr | str | None = None,
            from_account: str | None = None,
            api_url: str | None = None,
            evm: EvmOptions | Mapping[str, Any] | None = None,
            on_before_payment: BeforePaymentHook | None = None,
            on_progress: ProgressCallback | None = None,
            on_payment: PaymentCallback | None = None,
            on_payment_error: PaymentErrorCallback | None = None,
            max_amount_per_payment: (
                Decimal | str | int | Mapping[str, Decimal | str | int]
            ) = DEFAULT_MAX_AMOUNT_PER_PAYMENT,
            budgets: Budget | str | Iterable[Budget | str | Mapping[str, Any]] = (),
            budget_store: BudgetStore | None = None,
            ledger: PaymentLedger | None = None,
            state_path: str | pathlib.Path | None = None,
            assets: Asset | Iterable[Asset] = (),
            prefer: str | Iterable[str] = (),
            selector: Selector | None = None,
            confirmation_attempts: int = 8,
            confirmation_wait: float = 0.1,
            confirmation_max_wait: float = 2.0,
            merchant_error_retries: int = 2,
            max_body_bytes: int = 64 * 1024,
            payment_api_timeout: float = 30.0,
            payment_api_max_connections: int = 100,
            max_candidates: int = 3,
            destination_guard: DestinationGuard | None = None,
            bridge_deadline: float = 300.0,
            bridge_poll_interval: float = 0.5,
            bridge_poll_max_interval: float = 3.0,
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
        declared tokens). Each is limited by its cap and, once budgets are set, by them."""
        found = set()
        if self.has_managed_account:
            found.add("EUR")
        if self.evm is not None:
            found.update(CURRENCIES)
        return tuple(c for c in CURRENCIES if c in found)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> PaymentOptions:
        """Options from the environment (names in `ENV_VARS`); keyword arguments win.

        `X402_EUR_API_KEY`, `X402_EUR_ACCOUNT`, `X402_EUR_API_URL`,
        `X402_EUR_MAX_AMOUNT_PER_PAYMENT` (one amount: the cap of every currency), and for
        EVM `X402_EUR_EVM_PRIVATE_KEY`, `X402_EUR_RPC_URL_1`, `X402_EUR_RPC_URL_137`
        (comma-separated lists allowed), and `X402_EUR_ASSETS` (tokens to pay standard x402
        entries in: `CHAIN:ADDRESS:SYMBOL:CURRENCY[:DECIMALS]`, comma-separated).
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
    return PaymentOptions.model_validate(options)
