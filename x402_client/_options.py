"""The options: everything the client is allowed to do, each option declared once.

`PaymentOptions`, and the `EvmOptions` and `ChainAOptions` it may hold, are immutable. Each
option is one line of its class body: its type (the value kept, and what a caller may
give), default, bounds, environment variable and the checks below that pydantic's types do
not express; its camelCase alias (`apiKey`) is made from its name. Everything else comes
from those lines:

- the signature type checkers see: the base class is a PEP 681 `dataclass_transform`, so
  mypy and pyright make `__init__` from the declarations (keyword-only; an unknown keyword
  is a type error);
- `model_fields`, `model_validate`, `model_copy`, `model_dump`, the pydantic methods
  callers use;
- `from_env()` and `ENV_VARS`, the variables it reads;
- the pydantic model that validates them (lax mode: a numeric string for a number, a list
  for a tuple, a mapping for nested options), built when options of a class are first
  constructed, so that `from x402_client import with_eur_payment, PaymentOptions` loads no
  pydantic.

Unknown keys are an error with a "did you mean", so that a typo in a limit cannot silently
leave the default in force. Secrets are `SecretStr`: they print as `**********`, and no
error message shows a value given (it may be a secret).

Every entry that takes options (`with_eur_payment`, `PaymentTransport`,
`SyncPaymentTransport`, `PaymentAdapter`) reads them with
`coerce_options`: a `PaymentOptions`, a mapping of its keys, or None, which means
`PaymentOptions.from_env()` everywhere.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import ipaddress
import os
import pathlib
import re
import sys
import typing
from collections.abc import Awaitable, Callable, Iterable, Mapping
from decimal import Decimal
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from ._protocol.amounts import AmountError, parse_amount
from ._protocol.assets import Asset
from ._protocol.budgets import CURRENCIES, Budget, BudgetStore
from ._protocol.dsn import PostgresDsn, state_location
from ._protocol.errors import ConfigurationError, X402Error
from ._protocol.events import PaymentProgress
from ._protocol.ledger import PaymentLedger
from ._protocol.redact import endpoint_url
from ._protocol.secret import SecretStr
from ._protocol.types import PaymentIntent, PaymentReceipt

if sys.version_info >= (3, 11):
    from typing import dataclass_transform
else:  # pragma: no cover - Python 3.10
    from typing_extensions import dataclass_transform

if TYPE_CHECKING:
    from typing import Self

    from pydantic import BaseModel

    from ._state.netguard import DestinationGuard
    from ._state.shared import PaymentState

__all__ = [
    "DEFAULT_MAX_AMOUNT_PER_PAYMENT",
    "ENV_VARS",
    "BeforePaymentHook",
    "ChainAOptions",
    "EvmOptions",
    "Option",
    "PaymentCallback",
    "PaymentErrorCallback",
    "PaymentOptions",
    "ProgressCallback",
    "Selector",
    "SvmOptions",
    "coerce_options",
    "is_loopback",
    "option",
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


# --- declaring an option -------------------------------------------------------------------------

_REQUIRED: Any = object()
_Kept = TypeVar("_Kept")
_Given = TypeVar("_Given")


class Option(Generic[_Kept, _Given]):
    """One option, as `model_fields` lists it: `name`, camelCase `alias`, default; and what
    validating and reading the environment need. Declared in a class body with `option()`:

    ```python
    from_account: str | None = option(default=None)  # takes and keeps a str or None
    api_key: Option[SecretStr | None, SecretStr | str | None] = option(default=None, ...)
    ```

    The annotation is the type of the value kept, which pydantic validates (lax mode)
    unless `validate_as` names another input type; `Option[Kept, Given]` keeps a `Kept` and
    takes any `Given` (type checkers read the parameter's type from `__set__`, PEP 681).
    `ge`, `gt`, `le` bound a number; `before` adjusts the value given, `after` checks the
    validated one, `plain` replaces pydantic's validation; `item` validates each item of a
    tuple (given the item and pydantic's validation of it); `hint` ends the message for an
    item of the wrong kind. `nested` names the options class a value is (or is a mapping
    of). `env` names the variables `from_env` reads (the first one set wins), or maps keys
    to variables for a mapping (`{137: "X402_EUR_RPC_URL_137"}`); `from_text(text,
    variable)` reads one. `init=False` declares state kept beside the options: never given,
    compared, copied or shown.
    """

    __slots__ = (
        "after",
        "alias",
        "before",
        "bounds",
        "default",
        "default_factory",
        "env",
        "from_text",
        "hint",
        "init",
        "item",
        "name",
        "nested",
        "plain",
        "validate_as",
    )

    def __init__(
        self,
        *,
        default: Any = _REQUIRED,
        factory: Callable[[], Any] | None = None,
        ge: float | None = None,
        gt: float | None = None,
        le: float | None = None,
        env: str | tuple[str, ...] | Mapping[int, str] = (),
        from_text: Callable[[str, str], Any] | None = None,
        nested: type[_Options] | None = None,
        validate_as: str | None = None,
        before: Callable[[Any], Any] | None = None,
        after: Callable[[Any], Any] | None = None,
        plain: Callable[[Any], Any] | None = None,
        item: Callable[[Any, Callable[[Any], Any]], Any] | None = None,
        hint: str = "",
        init: bool = True,
    ) -> None:
        self.name = self.alias = ""  # set by the class that declares it
        self.default = default
        self.default_factory = factory
        bounds = (("ge", ge), ("gt", gt), ("le", le))
        self.bounds: Mapping[str, float] = {k: v for k, v in bounds if v is not None}
        self.env = (env,) if isinstance(env, str) else env
        self.from_text, self.nested = from_text, nested
        if nested is not None:
            validate_as, plain = "Any", _options_of(nested)
        self.validate_as = validate_as
        self.before, self.after, self.plain, self.item = before, after, plain, item
        self.hint, self.init = hint, init

    def is_required(self) -> bool:
        return self.default is _REQUIRED and self.default_factory is None

    def get_default(self) -> Any:
        return self.default_factory() if self.default_factory is not None else self.default

    def read_env(self, env: Mapping[str, str]) -> Any:
        """The value `env` gives this option (None: none)."""
        if self.nested is not None:
            return self.nested.from_env(env)
        if isinstance(self.env, Mapping):  # one variable per key
            found = {key: self._text(env.get(var), var) for key, var in self.env.items()}
            return {key: value for key, value in found.items() if value is not None} or None
        return next((self._text(env[var], var) for var in self.env if env.get(var)), None)

    def _text(self, text: str | None, variable: str) -> Any:
        if not text or self.from_text is None:
            return text or None
        return self.from_text(text, variable)

    def __repr__(self) -> str:
        return f"Option(name={self.name!r}, alias={self.alias!r})"

    if TYPE_CHECKING:
        # What type checkers see: an option reads as the value kept, and `__init__`
        # takes any value `__set__` accepts (PEP 681's rule for descriptor-typed fields).
        def __get__(self, instance: object, owner: Any = None) -> _Kept: ...

        def __set__(self, instance: object, value: _Given) -> None: ...


def option(**declared: Any) -> Any:
    """Declare an option in a class body (the keywords are `Option`'s). Keywords only, as
    PEP 681 reads them: `default=` or `factory=` makes it optional, `init=False` leaves it
    out of `__init__`."""
    return Option(**declared)


def _camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(part.title() for part in rest)


# --- checks: the rules of option values that pydantic's types do not express ---------------------
#
# A check takes the value pydantic validated (or, for a `before` check, the value given)
# and returns the value kept. It raises `ValueError` for a value of the right kind that
# breaks a rule (shown as "Value error, ...") and `WrongKind` for a value of the wrong kind
# (its message shown as it is). No message ever contains the value: it may be a secret.

_EVM_KEY_RE = re.compile(r"\A(0x)?[0-9a-fA-F]{64}\Z")
#: The order of secp256k1's group: a private key is an integer from 1 to this minus one.
_SECP256K1_ORDER = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141


class WrongKind(Exception):  # named for what it reports
    """A value of the wrong kind; the message is shown as it is."""


def _reveal(value: Any) -> Any:
    """A secret given as a `SecretStr` (this library's or another's, such as a settings
    object's) as its text, for pydantic to validate as a string."""
    get = getattr(type(value), "get_secret_value", None)
    return get(value) if callable(get) else value


def _secret(text: str) -> SecretStr:
    """The text of a secret, kept as a `SecretStr` (printed as `**********`)."""
    return SecretStr(text)


def _one_or_many(*single: type) -> Callable[[Any], Any]:
    """A lone value of the types `single` as a tuple of one; anything else as given."""

    def check(value: Any) -> Any:
        return (value,) if isinstance(value, single) else value

    return check


def _flatten(items: tuple[Any, ...]) -> tuple[Any, ...]:
    """Items that are tuples (a string that named several budgets) spread in place."""
    return tuple(x for item in items for x in (item if isinstance(item, tuple) else (item,)))


def _dataclass_item(cls: type) -> Callable[[Any, Callable[[Any], Any]], Any]:
    """A mapping of `cls`'s fields is given to `cls` itself, whose checks refuse what they
    refuse (a float amount) with their own `ConfigurationError`; other values, and a
    mapping with wrong keys, are left to `validate` (pydantic's dataclass validation)."""

    def check(value: Any, validate: Callable[[Any], Any]) -> Any:
        if isinstance(value, Mapping) and all(isinstance(k, str) for k in value):
            try:
                return cls(**value)
            except (TypeError, ValueError, AttributeError):  # a wrong key or kind: pydantic
                pass  # names it
        return validate(value)

    return check


def _budget_item(value: Any, validate: Callable[[Any], Any]) -> Any:
    """One budget: a `Budget`, a mapping of its fields, or the command line's text
    (`"5.00/24h"`; several separated by commas, returned as a tuple)."""
    if isinstance(value, str):
        from ._protocol.budget_spec import parse_budgets  # only for budgets written as text

        try:
            return tuple(parse_budgets([value]))
        except ValueError as exc:
            raise WrongKind(str(exc)) from None
    return _dataclass_item(Budget)(value, validate)


def _options_of(cls: type[_Options]) -> Callable[[Any], Any]:
    """Nested options (`evm`, `chain_a`): an instance of `cls`, or a mapping validated by
    `cls`, whose errors are its own ("invalid EvmOptions: ...")."""

    def check(value: Any) -> Any:
        if value is None or isinstance(value, cls):
            return value
        if isinstance(value, Mapping):
            return cls.model_validate(value)
        raise WrongKind(f"Input should be a valid dictionary or instance of {cls.__name__}")

    return check


def _state_path(value: Any) -> Any:
    """None, a state file's path, or a `PostgresDsn` for a `postgresql://` URL."""
    if value is None:
        return None
    try:
        return state_location(value)
    except TypeError:
        raise WrongKind(
            "Input should be a path or a postgresql:// URL (or a PostgresDsn)"
        ) from None


def _destination_guard(value: Any) -> Any:
    """None, or a `DestinationGuard` (whose module loads only when one is given)."""
    if value is None:
        return None
    from ._state.netguard import DestinationGuard  # it loads the HTTP transport's modules

    if not isinstance(value, DestinationGuard):
        raise WrongKind("Input should be an instance of DestinationGuard")
    return value


def _http_url(value: str) -> str:
    """An http(s) URL, without trailing slashes."""
    if not isinstance(value, str) or not re.match(r"\Ahttps?://[^/\s]+", value):
        raise ValueError("must be an http(s) URL")
    return value.rstrip("/")


def is_loopback(host: str) -> bool:
    """`localhost`, a `*.localhost` name or a loopback address (`[::1]` too)."""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _api_url(value: str) -> str:
    """The payment API's URL: the API key travels there, so plain http only where it
    cannot leave the machine."""
    url = _http_url(value)
    host = re.sub(r"\Ahttps?://(\[[^\]]+\]|[^/:]+).*", r"\1", url)
    if not url.startswith("https://") and not is_loopback(host):
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
    caps: dict[str, Decimal] = {}
    for currency, amount in value.items():
        name = str(currency).upper()
        if name not in CURRENCIES:
            raise ValueError(f"limit for {str(currency)[:20]!r}: the currency must be EUR or USD")
        try:
            caps[name] = parse_amount(amount, allow_zero=True)
        except AmountError as exc:
            raise ValueError(f"limit for {currency}: {exc}") from None
    return caps


def _evm_key(text: str) -> SecretStr:
    """32 bytes of hex that are a secp256k1 private key: from 1 to the group order minus
    one. Checked as an integer, without the EVM extra; the key is never in a message."""
    if not _EVM_KEY_RE.match(text):
        raise ValueError("private_key must be 32 bytes of hex")
    if not 0 < int(text.removeprefix("0x"), 16) < _SECP256K1_ORDER:
        raise ValueError(
            "private_key is not a valid secp256k1 key (it must be above zero and below the "
            "curve order)"
        )
    return SecretStr(text)


def _rpc_urls(value: Mapping[Any, Any]) -> dict[int, tuple[str, ...]]:
    """Chain id -> one URL or a list of them (tried in order)."""
    result: dict[int, tuple[str, ...]] = {}
    for chain, urls in value.items():
        try:
            listed = (urls,) if isinstance(urls, str) else tuple(urls)
        except TypeError:
            raise ValueError("must be an http(s) URL") from None
        if not listed:
            raise ValueError(f"no RPC URL for chain {chain}")
        try:
            result[int(chain)] = tuple(_http_url(u) for u in listed)
        except TypeError:
            raise ValueError("chain ids must be integers") from None
    return result


def _chain_a_key(text: str) -> SecretStr:
    """Base64 of 64 bytes (the ed25519 seed and public key, the chain SDK's form)."""
    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 64:
        raise ValueError("private_key must be base64 of the 64-byte ed25519 key")
    return SecretStr(text)


def _svm_key(text: str) -> SecretStr:
    """A Solana secret key: base58 of its 64 bytes, or the JSON byte array of `id.json`.
    Kept as given; the message of a bad one never holds it."""
    from ._protocol.solana_chain import secret_key_bytes

    secret_key_bytes(text)
    return SecretStr(text.strip())


def _mnemonic(text: str) -> SecretStr:
    """25 words, kept one space apart."""
    words = text.split()
    if len(words) != 25:
        raise ValueError("mnemonic must be 25 words")
    return SecretStr(" ".join(words))


def _comma_separated(text: str, variable: str) -> list[str]:
    """An environment variable's comma-separated list."""
    return [part.strip() for part in text.split(",") if part.strip()]


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _flag(text: str, variable: str) -> bool:
    """A yes/no environment variable: 1, true, yes, on or 0, false, no, off."""
    word = text.strip().lower()
    if word not in _TRUE + _FALSE:
        raise ConfigurationError(f"{variable}: write 1 or 0 (true/false, yes/no, on/off)")
    return word in _TRUE


def _assets_from_text(text: str, variable: str) -> list[Asset]:
    """`X402_EUR_ASSETS`: comma-separated `CHAIN:ADDRESS:SYMBOL:CURRENCY[:DECIMALS]`."""
    return [_asset_from_text(part, variable) for part in _comma_separated(text, variable)]


def _asset_from_text(text: str, variable: str) -> Asset:
    """`CHAIN:ADDRESS:SYMBOL:CURRENCY[:DECIMALS]` (the form of `X402_EUR_ASSETS`); on Solana,
    CHAIN is the network (`solana:EtWT...` or `solana-devnet`) and ADDRESS the mint."""
    parts = [p.strip() for p in text.strip().split(":")]
    chain: int | str
    if parts[0] == "solana" and len(parts) in (5, 6):
        chain, parts = f"solana:{parts[1]}", parts[1:]
    elif parts[0].startswith("solana") and len(parts) in (4, 5):
        chain = parts[0]
    elif len(parts) in (4, 5) and parts[0].isdigit():
        chain = int(parts[0])
    else:
        raise ConfigurationError(
            f"{variable}: write CHAIN:ADDRESS:SYMBOL:CURRENCY[:DECIMALS], e.g. "
            "8453:0x...:EURC:EUR:6 or solana-devnet:<mint>:EURC:EUR:6"
        )
    decimals = 6
    if len(parts) == 5:
        if not (parts[4].isascii() and parts[4].isdigit()):
            raise ConfigurationError(
                f"{variable}: DECIMALS must be a whole number (e.g. 6), not {parts[4]!r}"
            )
        decimals = int(parts[4])
    return Asset(chain, parts[1], parts[2], parts[3], decimals)


def _unknown_option(key: str, names: Iterable[str]) -> str:
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


# --- the options base ----------------------------------------------------------------------------


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


@dataclass_transform(kw_only_default=True, frozen_default=True, field_specifiers=(option,))
class _Options:
    """Validated, immutable options. Bad values raise `ConfigurationError` (an `X402Error`),
    which names the option and the problem but never shows the value given (it may be a
    secret); an unknown key gets a "did you mean".

    pydantic validates them, and they keep the pydantic methods callers use:
    `model_validate(mapping)`, `model_copy(update=...)` (validated), `model_dump()`,
    `model_fields`. Keys are snake_case (`api_key`) or the spec's camelCase (`apiKey`).
    """

    #: The options, in declaration order: name -> `Option`.
    model_fields: ClassVar[Mapping[str, Option[Any, Any]]] = MappingProxyType({})
    #: Name or camelCase alias -> name.
    _NAMES: ClassVar[Mapping[str, str]] = {}
    #: State kept beside the options (`option(init=False)`): name -> its default.
    _PRIVATE: ClassVar[Mapping[str, Any]] = {}

    __signature__ = _InitSignature()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fields, private = dict(cls.model_fields), dict(cls._PRIVATE)
        for name, value in list(vars(cls).items()):
            if isinstance(value, Option):
                value.name, value.alias = name, _camel(name)
                if value.init:
                    fields[name] = value
                else:
                    private[name] = value.get_default()
                delattr(cls, name)  # the instance holds the value; the class has no default
        cls.model_fields, cls._PRIVATE = MappingProxyType(fields), MappingProxyType(private)
        cls._NAMES = {**{f.alias: n for n, f in fields.items()}, **{n: n for n in fields}}

    def __init__(self, /, **values: Any) -> None:
        # Each key in snake_case or camelCase (the camelCase one wins when both are given,
        # and the other is then an unknown key). pydantic validates, with a model built on
        # the first construction.
        set_attribute = object.__setattr__
        for name, value in _validate(type(self), values).items():
            set_attribute(self, name, value)
        for name, value in self._PRIVATE.items():
            set_attribute(self, name, value)
        self._check()

    def _check(self) -> None:
        """The rules between options, once each is valid (`ConfigurationError`)."""

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

    @classmethod
    def _env_values(cls, env: Mapping[str, str]) -> dict[str, Any]:
        """The values the environment gives these options (their `env` variables)."""
        found = {name: field.read_env(env) for name, field in cls.model_fields.items()}
        return {name: value for name, value in found.items() if value is not None}

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Self | None:
        """Options from the environment, or None when it holds none of their variables."""
        values = cls._env_values(os.environ if environ is None else environ)
        return cls(**values) if values else None

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

    __hash__ = None  # type: ignore[assignment]  # options hold dicts: unhashable

    def __setattr__(self, name: str, value: Any) -> None:
        raise dataclasses.FrozenInstanceError(
            f"{type(self).__name__} is immutable: make a changed copy with "
            f"model_copy(update={{{name!r}: ...}})"
        )

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"{type(self).__name__} is immutable")

    def __getstate__(self) -> dict[str, Any]:
        # Copies and pickles carry the options, not the state made from them (locks, files).
        return {**self.__dict__, **self._PRIVATE}


# --- the options ---------------------------------------------------------------------------------

#: What a secret option takes: its text or a `SecretStr` (at run time, another library's too).
_SecretIn = SecretStr | str


class EvmOptions(_Options):
    """The EVM permit rail: a private key holding EURQ/USDQ, and RPC endpoints by chain id.

    `rpc_urls` maps 1 and/or 137 to one URL or a list tried in order. Needs the `evm`
    extra (`pip install 'x402-eur[evm]'`).
    """

    #: The payer's key: 32 bytes of hex, with or without `0x`.
    private_key: Option[SecretStr, _SecretIn] = option(
        env="X402_EUR_EVM_PRIVATE_KEY", validate_as="str", before=_reveal, after=_evm_key
    )
    #: RPC endpoints by chain id, each one URL or a list (tried in order; comma-separated in
    #: the environment).
    rpc_urls: Option[dict[int, tuple[str, ...]], Mapping[int, str | Iterable[str]]] = option(
        factory=dict,
        env={1: "X402_EUR_RPC_URL_1", 137: "X402_EUR_RPC_URL_137"},
        from_text=_comma_separated,
        validate_as="dict[Any, Any]",
        after=_rpc_urls,
    )
    #: How long a facilitator's `/supported` answer is reused, in seconds.
    supported_cache_seconds: float = option(default=60.0, ge=0)
    #: A session (`batch-settlement`) deposits enough for this many requests at the offered
    #: price (or the merchant's `minDeposit`, if larger), and never more than this many
    #: payments at `max_amount_per_payment`.
    session_requests: int = option(default=10, ge=1, le=10_000)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Self | None:
        """The EVM options `X402_EUR_EVM_PRIVATE_KEY` and `X402_EUR_RPC_URL_1` / `_137`
        give (comma-separated lists allowed), or None when no key is set."""
        values = cls._env_values(os.environ if environ is None else environ)
        return cls(**values) if "private_key" in values else None

    def _repr_value(self, name: str, value: Any) -> str:
        # RPC URLs often carry an API key in their path or query: shown redacted.
        if name == "rpc_urls":
            value = {chain: tuple(endpoint_url(u) for u in urls) for chain, urls in value.items()}
        return repr(value)


class ChainAOptions(_Options):
    """The user's own chain-A wallet, for paying `ledgera:mainnet` entries directly.

    ```python
    options = PaymentOptions(
        chain_a=ChainAOptions(mnemonic="abandon ... (25 words)", algod_url="https://node.example"),
    )
    ```

    The wallet is a key (`private_key`: base64 of the 64-byte ed25519 key, as the chain's
    SDK writes it) or its 25-word `mnemonic`; exactly one of the two. `algod_url` is the
    node the client reads suggested parameters and the wallet's holdings from (with
    `algod_token` when the node wants one); `indexer_url` lets recovery look a payment up
    on chain. Secrets are `SecretStr`; URLs are shown as scheme and host only (their path
    or query often carries a key). Paying needs the `chain-a` extra
    (`pip install 'x402-eur[chain-a]'`, py-algorand-sdk), imported by the rail when it signs.
    """

    #: Base64 of the 64-byte ed25519 key (the SDK's `account.generate_account()` form).
    private_key: Option[SecretStr | None, _SecretIn | None] = option(
        default=None,
        env="X402_EUR_CHAIN_A_PRIVATE_KEY",
        validate_as="str | None",
        before=_reveal,
        after=_chain_a_key,
    )
    #: Or the wallet's 25-word mnemonic.
    mnemonic: Option[SecretStr | None, _SecretIn | None] = option(
        default=None,
        env="X402_EUR_CHAIN_A_MNEMONIC",
        validate_as="str | None",
        before=_reveal,
        after=_mnemonic,
    )
    #: The node (algod REST API) for suggested parameters and the wallet's holdings.
    algod_url: str = option(env="X402_EUR_CHAIN_A_ALGOD_URL", after=_http_url)
    #: The node's API token (`X-Algo-API-Token`), when it wants one.
    algod_token: Option[SecretStr | None, _SecretIn | None] = option(
        default=None,
        env="X402_EUR_CHAIN_A_ALGOD_TOKEN",
        validate_as="str | None",
        before=_reveal,
        after=_secret,
    )
    #: An indexer (`GET /v2/transactions/<id>`): recovery looks payments up there.
    indexer_url: str | None = option(
        default=None, env="X402_EUR_CHAIN_A_INDEXER_URL", after=_http_url
    )
    #: The chain's typical round time, in seconds: turns an entry's `maxTimeoutSeconds`
    #: into a validity window in rounds (never more than the chain's 1000).
    round_seconds: float = option(default=2.8, gt=0)
    #: Timeout of each node or indexer call, in seconds.
    timeout: float = option(default=10.0, gt=0)

    def _check(self) -> None:
        if (self.private_key is None) == (self.mnemonic is None):
            raise ConfigurationError(
                "invalid ChainAOptions: give exactly one of private_key and mnemonic"
            )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Self | None:
        """The wallet `X402_EUR_CHAIN_A_PRIVATE_KEY` or `X402_EUR_CHAIN_A_MNEMONIC` names,
        with `X402_EUR_CHAIN_A_ALGOD_URL` (and `_ALGOD_TOKEN`, `_INDEXER_URL`); None when
        neither key is set."""
        values = cls._env_values(os.environ if environ is None else environ)
        if "private_key" not in values and "mnemonic" not in values:
            return None
        if "algod_url" not in values:
            raise ConfigurationError(
                f"{cls.model_fields['algod_url'].env[0]} must be set with the chain-A key "
                "(the node the client reads suggested parameters from)"
            )
        return cls(**values)

    def _repr_value(self, name: str, value: Any) -> str:
        if name in ("algod_url", "indexer_url") and isinstance(value, str):
            value = endpoint_url(value)
        return repr(value)


class SvmOptions(_Options):
    """The user's own Solana wallet, for paying x402 `exact` entries on `solana:*` networks.

    ```python
    options = PaymentOptions(
        svm=SvmOptions(secret_key="<base58>", rpc_url="https://api.devnet.solana.com"),
    )
    ```

    `secret_key` is the wallet's 64-byte secret as Phantom or `solana-keygen` export it
    (base58), or the JSON byte array of an `id.json` file; a `SecretStr`, never shown.
    `rpc_url` is the Solana JSON-RPC endpoint the client reads the mint, the wallet's token
    account and a recent blockhash from (shown as scheme and host only: its path or query
    often carries a key). The merchant's facilitator pays the network fee: the wallet needs
    no SOL. Paying needs the `svm` extra (`pip install 'x402-eur[svm]'`, `solders`).
    """

    #: The wallet's secret key: base58 of its 64 bytes, or an `id.json` byte array.
    secret_key: Option[SecretStr, _SecretIn] = option(
        env="X402_EUR_SVM_SECRET_KEY", validate_as="str", before=_reveal, after=_svm_key
    )
    #: The Solana JSON-RPC endpoint.
    rpc_url: str = option(env="X402_EUR_SVM_RPC_URL", after=_http_url)
    #: The compute unit price asked for, in microlamports (the facilitator pays it; the
    #: scheme caps it at 5,000,000).
    compute_unit_price: int = option(default=1, ge=0)
    #: The compute unit limit asked for.
    compute_unit_limit: int = option(default=20_000, ge=1, le=1_400_000)
    #: The chain's typical slot time, in seconds: turns an entry's `maxTimeoutSeconds` into
    #: the blocks its transaction's blockhash must still have.
    slot_seconds: float = option(default=0.4, gt=0)
    #: Timeout of each RPC call, in seconds.
    timeout: float = option(default=10.0, gt=0)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Self | None:
        """The wallet `X402_EUR_SVM_SECRET_KEY` names, with `X402_EUR_SVM_RPC_URL`; None
        when no key is set."""
        values = cls._env_values(os.environ if environ is None else environ)
        if "secret_key" not in values:
            return None
        if "rpc_url" not in values:
            raise ConfigurationError(
                f"{cls.model_fields['rpc_url'].env[0]} must be set with the Solana key "
                "(the RPC the client reads the mint, balance and blockhash from)"
            )
        return cls(**values)

    def _repr_value(self, name: str, value: Any) -> str:
        if name == "rpc_url" and isinstance(value, str):
            value = endpoint_url(value)
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

    Every entry that takes options (`with_eur_payment`, `PaymentTransport`,
    `SyncPaymentTransport`, `PaymentAdapter`) takes these, a
    mapping of their keys, or None for `PaymentOptions.from_env()`.
    """

    #: The managed account's API key (a secret: printed as `**********`).
    api_key: Option[SecretStr | None, _SecretIn | None] = option(
        default=None,
        env=("X402_EUR_API_KEY", "QUANTOZ_API_KEY"),
        validate_as="str | None",
        before=_reveal,
        after=_secret,
    )
    #: The managed account that pays (`ACC_...`).
    from_account: str | None = option(
        default=None, env=("X402_EUR_ACCOUNT", "QUANTOZ_ACCOUNT_CODE")
    )
    #: The payment API: https:// (plain http:// only for a loopback address).
    api_url: str | None = option(
        default=None, env=("X402_EUR_API_URL", "QUANTOZ_API_URL"), after=_api_url
    )
    #: The EVM permit rail: an `EvmOptions` or a mapping of its keys.
    evm: Option[EvmOptions | None, EvmOptions | Mapping[str, Any] | None] = option(
        default=None, nested=EvmOptions
    )
    #: The `chain-a` rail: the user's own chain-A wallet pays `ledgera:mainnet` entries
    #: directly (`ChainAOptions`, or a mapping of its keys).
    chain_a: Option[ChainAOptions | None, ChainAOptions | Mapping[str, Any] | None] = option(
        default=None, nested=ChainAOptions
    )
    #: The `svm` rail: the user's own Solana wallet pays `exact` entries on `solana:*`
    #: networks (`SvmOptions`, or a mapping of its keys).
    svm: Option[SvmOptions | None, SvmOptions | Mapping[str, Any] | None] = option(
        default=None, nested=SvmOptions
    )
    #: Asked before every payment (`BeforePaymentHook`): True approves, anything else refuses.
    on_before_payment: BeforePaymentHook | None = option(default=None)
    #: Told about long waits (`PaymentProgress`): the bridge.
    on_progress: ProgressCallback | None = option(default=None)
    #: Told after every paid response (`PaymentReceipt`): logging, metrics, an agent's memory.
    on_payment: PaymentCallback | None = option(default=None)
    #: Told about every error after which money moved or may have (`money_moved` is not
    #: False). A callback that raises is logged and never breaks the payment.
    on_payment_error: PaymentErrorCallback | None = option(default=None)
    #: Cap on each payment: one amount for every currency, or a mapping by currency
    #: (`"EUR"`, `"USD"`) that pays only the currencies it names. Default:
    #: `DEFAULT_MAX_AMOUNT_PER_PAYMENT` (one euro, one dollar). In the environment: one
    #: amount, the cap of every currency.
    max_amount_per_payment: Option[
        dict[str, Decimal], Decimal | str | int | Mapping[str, Decimal | str | int]
    ] = option(
        factory=lambda: dict(DEFAULT_MAX_AMOUNT_PER_PAYMENT),
        env="X402_EUR_MAX_AMOUNT_PER_PAYMENT",
        plain=_limits,
    )
    #: Cumulative budgets (`Budget("5", window="24h")`, or the command line's form
    #: `"5.00/24h"`, `"2.00USD/7d"`), all enforced; one or a list. Once any is set, only the
    #: currencies they name are paid (add `Budget(..., currency="USD")` or `"2.00USD/24h"`
    #: to pay dollar offers under a euro budget).
    budgets: Option[
        tuple[Budget, ...], Budget | str | Iterable[Budget | str | Mapping[str, Any]]
    ] = option(
        default=(),
        before=_one_or_many(Budget, str),
        item=_budget_item,
        after=_flatten,
        hint=", or a string such as '5.00/24h'",
    )
    #: Where budgets are kept: in memory by default; `RedisBudgetStore` to share them.
    budget_store: BudgetStore | None = option(default=None)
    #: Where every payment is recorded in memory (a bounded window); one per options object.
    ledger: PaymentLedger | None = option(default=None)
    #: A SQLite file that keeps the payment journal and the budgets across restarts and
    #: across the processes of this machine (written before any money moves), or a
    #: `postgresql://` URL whose database keeps them for a fleet of machines (extra
    #: `postgres`; kept as a `PostgresDsn`, shown without its password); None: memory only.
    #: `SqliteStore.default_path()` is the CLI's default.
    state_path: Option[
        pathlib.Path | PostgresDsn | None, str | os.PathLike[str] | PostgresDsn | None
    ] = option(default=None, validate_as="Any", plain=_state_path)
    #: Tokens you pay standard x402 `exact` (EIP-3009) entries in, beyond the built-in
    #: table of Circle's EURC and USDC: each with its chain, address, currency and decimals
    #: (in the environment: comma-separated `CHAIN:ADDRESS:SYMBOL:CURRENCY[:DECIMALS]`).
    assets: Option[tuple[Asset, ...], Asset | Iterable[Asset]] = option(
        default=(),
        env="X402_EUR_ASSETS",
        from_text=_assets_from_text,
        before=_one_or_many(Asset),
        item=_dataclass_item(Asset),
    )
    #: Preferred entries, most preferred first: rail names (`"euro"`, `"evm-permit"`,
    #: `"chain-a"`, `"bridge"`), schemes, networks (`"eip155:137"`) or asset symbols (`"EURQ"`).
    prefer: Option[tuple[str, ...], str | Iterable[str]] = option(
        default=(), before=_one_or_many(str)
    )
    #: Or choose yourself among the payable intents; overrides `prefer`.
    selector: Selector | None = option(default=None)
    #: Sign in instead of paying again: where a merchant's 402 offers the x402
    #: `sign-in-with-x` extension, the EVM key (`evm`) signs its Sign-In with Ethereum
    #: (EIP-4361) message and the request is sent again with it, paying nothing; the
    #: merchant serves it if that wallet already paid for the resource, else answers 402
    #: and the client pays once, as usual. Only a challenge of the requested origin, on a
    #: chain the client pays on, short-lived, is signed (docs/sign-in-with-x.md). On by
    #: default: signing moves no money and tells the merchant only the wallet's address.
    #: False: never sign in (`X402_EUR_SIGN_IN_WITH_X=0`, the CLI's `--no-sign-in`).
    sign_in_with_x: bool = option(default=True, env="X402_EUR_SIGN_IN_WITH_X", from_text=_flag)
    #: Re-sends of the same proof while the verifier says "not confirmed (status: Open)".
    confirmation_attempts: int = option(default=8, ge=1, le=100)
    #: First wait before such a re-send, in seconds; doubles up to `confirmation_max_wait`.
    confirmation_wait: float = option(default=0.1, ge=0)
    confirmation_max_wait: float = option(default=2.0, ge=0)
    #: Re-sends of the same proof when the merchant answers the paid retry with 5xx.
    merchant_error_retries: int = option(default=2, ge=0, le=10)
    #: Largest 402 or provider body read, in bytes.
    max_body_bytes: int = option(default=64 * 1024, ge=1024)
    #: Timeout of each payment-API call, in seconds.
    payment_api_timeout: float = option(default=30.0, gt=0)
    #: Connections the payment-API client may open (and keeps alive) at once.
    payment_api_max_connections: int = option(default=100, ge=1)
    #: How many payable entries of one 402 may be prepared (RPC reads, the facilitator's
    #: `/supported`: URLs the merchant writes) before the client gives up on it.
    max_candidates: int = option(default=3, ge=1, le=20)
    #: Checks the URLs a merchant writes that the client fetches itself (the EVM permit
    #: rail's facilitator `/supported`): a `DestinationGuard` refuses loopback, private
    #: and link-local addresses unless it admits them. None (the default): no check, as
    #: the library's user chooses the URLs. `x402-eur mcp` always sets one.
    destination_guard: DestinationGuard | None = option(
        default=None, validate_as="Any", plain=_destination_guard
    )
    #: How long the bridge may take to expose `blockchainTxId`, in seconds.
    bridge_deadline: float = option(default=300.0, gt=0)
    #: First and largest interval between bridge polls, in seconds.
    bridge_poll_interval: float = option(default=0.5, gt=0)
    bridge_poll_max_interval: float = option(default=3.0, gt=0)

    #: The budgets, ledger and locks shared by every client built from these options
    #: (`_state.state_of`, which sets it): made on first use, never copied.
    _state: PaymentState | None = option(default=None, init=False)

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
        if self.evm is not None or self.chain_a is not None or self.svm is not None:
            found.update(CURRENCIES)
        return tuple(c for c in CURRENCIES if c in found)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Self:
        """Options from the environment (`ENV_VARS`; `environ` instead of `os.environ`);
        keyword arguments win. What every entry that takes options does with None.

        `X402_EUR_API_KEY`, `X402_EUR_ACCOUNT`, `X402_EUR_API_URL`,
        `X402_EUR_MAX_AMOUNT_PER_PAYMENT` (one amount: the cap of every currency), and for
        EVM `X402_EUR_EVM_PRIVATE_KEY`, `X402_EUR_RPC_URL_1`, `X402_EUR_RPC_URL_137`
        (comma-separated lists allowed), and `X402_EUR_ASSETS` (tokens to pay standard x402
        entries in: `CHAIN:ADDRESS:SYMBOL:CURRENCY[:DECIMALS]`, comma-separated). Chain A
        directly: `X402_EUR_CHAIN_A_PRIVATE_KEY` or `X402_EUR_CHAIN_A_MNEMONIC`, with
        `X402_EUR_CHAIN_A_ALGOD_URL` (and `_ALGOD_TOKEN`, `_INDEXER_URL`). Solana:
        `X402_EUR_SVM_SECRET_KEY` with `X402_EUR_SVM_RPC_URL`.

        Raises `ConfigurationError` when they give no way to pay: neither the whole managed
        account nor a wallet of your own.
        """
        values = {**cls._env_values(os.environ if environ is None else environ), **overrides}
        managed = ("api_key", "from_account", "api_url")
        present = [name for name in managed if values.get(name)]
        own_wallet = "evm" in values or "chain_a" in values or "svm" in values
        if not own_wallet and len(present) < len(managed):
            missing = [name for name in managed if name not in present]
            variables = ", ".join(ENV_VARS[name][0] for name in missing)
            what = "is" if len(missing) == 1 else "are"
            hint = "" if present else f", or {ENV_VARS['evm_private_key'][0]} for EVM permits"
            raise ConfigurationError(
                f"no usable payment configuration in the environment: {variables} {what} "
                f"not set (set them for the managed account{hint})"
            )
        return cls(**values)


def _variables(cls: type[_Options], prefix: str = "") -> dict[str, tuple[str, ...]]:
    """The environment variables `cls.from_env` reads, by option (`evm_private_key` for a
    nested option, `evm_rpc_urls_137` for one variable of a mapping)."""
    found: dict[str, tuple[str, ...]] = {}
    for name, field in cls.model_fields.items():
        if field.nested is not None:
            found.update(_variables(field.nested, f"{prefix}{name}_"))
        elif isinstance(field.env, Mapping):
            found.update({f"{prefix}{name}_{key}": (var,) for key, var in field.env.items()})
        elif field.env:
            found[prefix + name] = field.env
    return found


#: The environment variables `PaymentOptions.from_env()` reads, by option (the first of
#: each wins).
ENV_VARS: Mapping[str, tuple[str, ...]] = MappingProxyType(_variables(PaymentOptions))


def coerce_options(options: PaymentOptions | Mapping[str, Any] | None) -> PaymentOptions:
    """The options an entry pays with: `options` itself, a mapping of its keys (snake_case
    or camelCase), or None: `PaymentOptions.from_env()`. Every entry that takes options
    reads them here, so None means the environment everywhere."""
    if isinstance(options, PaymentOptions):
        return options
    if options is None:
        return PaymentOptions.from_env()
    if not isinstance(options, Mapping):
        raise ConfigurationError(
            f"options must be PaymentOptions or a mapping, not {type(options).__name__}"
        )
    return PaymentOptions.model_validate(options)


# --- validation: pydantic models, built on first use ---------------------------------------------
#
# The first construction of an options class builds its model here with
# `pydantic.create_model` (pydantic is imported then, never by importing the package). The
# options objects stay what is declared above: the model only validates, and its errors
# become one `ConfigurationError` that lists every problem (in pydantic's words), names each
# place and never shows a value.

_MODELS: dict[type[_Options], type[BaseModel]] = {}


def _validate(cls: type[_Options], values: Mapping[str, Any]) -> dict[str, Any]:
    """The options kept from `values` (snake_case or camelCase keys), by name.

    Raises `ConfigurationError`: "invalid <class>: <where>: <problem>; ..." (the options'
    errors first, in declaration order, then the unknown keys in the order given).
    """
    from pydantic import ValidationError

    model = _MODELS.get(cls) or _model_of(cls)
    try:
        validated = model.model_validate(values)
    except ValidationError as exc:
        raise ConfigurationError(f"invalid {cls.__name__}: {_problems(cls, exc)}") from None
    return {name: getattr(validated, name) for name in cls.model_fields}


def _model_of(cls: type[_Options]) -> type[BaseModel]:
    """The pydantic model that validates `cls`'s options."""
    from pydantic import ConfigDict, create_model

    config = ConfigDict(
        extra="forbid",
        validate_by_name=True,
        validate_by_alias=True,
        arbitrary_types_allowed=True,
        frozen=True,
    )
    fields = {name: _field(cls, spec) for name, spec in cls.model_fields.items()}
    model: type[BaseModel] = create_model(  # type: ignore[call-overload]
        f"{cls.__name__}Values", __config__=config, **fields
    )
    _MODELS[cls] = model
    return model


def _problems(cls: type[_Options], error: Any) -> str:
    names = [n for spec in cls.model_fields.values() for n in (spec.name, spec.alias)]
    problems = []
    for detail in error.errors(include_url=False, include_input=False):
        where = ".".join(map(str, detail["loc"]))
        message = detail["msg"]
        if detail["type"] == "extra_forbidden":
            message = _unknown_option(where, names)
        elif detail["type"] == "dataclass_type" and len(detail["loc"]) == 2:
            key = detail["loc"][0]
            message += next(s.hint for s in cls.model_fields.values() if key in (s.name, s.alias))
        problems.append(f"{where}: {message}")
    return "; ".join(problems)


def _field(cls: type[_Options], spec: Option[Any, Any]) -> tuple[Any, Any]:
    """One option as a pydantic field: its type, with the checks attached, and its
    default, bounds and alias."""
    from typing import Annotated

    from pydantic import AfterValidator, BeforeValidator, Field, PlainValidator, WrapValidator

    annotation = _resolve(cls, spec.validate_as or _declared(cls, spec.name))
    if typing.get_origin(annotation) is Option:  # Option[Kept, Given]: validated as kept
        annotation = typing.get_args(annotation)[0]
    if spec.item is not None:  # a tuple whose items pass through the item check
        (item, _) = typing.get_args(annotation)
        annotation = tuple[Annotated[item, WrapValidator(_item_kind(spec.item))], ...]  # type: ignore[valid-type]
    metadata: list[Any] = []
    if spec.plain is not None:
        metadata.append(PlainValidator(_kind(spec.plain)))
    if spec.before is not None:
        metadata.append(BeforeValidator(_kind(spec.before)))
    if spec.after is not None:
        after = spec.after
        if spec.default is None and not spec.is_required():  # None stays None
            metadata.append(AfterValidator(lambda v: None if v is None else after(v)))
        else:
            metadata.append(AfterValidator(after))
    if metadata:
        annotation = Annotated[(annotation, *metadata)]
    info: dict[str, Any] = {"alias": spec.alias, **spec.bounds}
    if spec.default_factory is not None:
        info["default_factory"] = spec.default_factory
    elif not spec.is_required():
        info["default"] = spec.default
    return annotation, Field(**info)


def _declared(cls: type[_Options], name: str) -> str:
    """The annotation `name` has in the class body that declares it (a string)."""
    for klass in cls.__mro__:
        annotations = vars(klass).get("__annotations__", {})
        if name in annotations:
            return typing.cast(str, annotations[name])
    raise TypeError(f"{cls.__name__}.{name} has no annotation")


def _resolve(cls: type[_Options], annotation: str) -> Any:
    """`annotation`, evaluated in the namespace of `cls`'s module."""
    namespace = vars(sys.modules[cls.__module__])

    def holder() -> None: ...

    holder.__annotations__ = {"value": annotation}
    return typing.get_type_hints(holder, globalns=namespace)["value"]


def _kind(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """`check`, its `WrongKind` raised as pydantic's error with that very message."""

    def run(value: Any) -> Any:
        try:
            return check(value)
        except WrongKind as exc:
            raise _error(exc) from None

    return run


def _item_kind(
    check: Callable[[Any, Callable[[Any], Any]], Any],
) -> Callable[[Any, Callable[[Any], Any]], Any]:
    """`_kind` for an item check, which is also given pydantic's validation of the item."""

    def run(value: Any, validate: Callable[[Any], Any]) -> Any:
        try:
            return check(value, validate)
        except WrongKind as exc:
            raise _error(exc) from None

    return run


def _error(exc: Exception) -> Exception:
    from pydantic_core import PydanticCustomError

    return PydanticCustomError("option", "{message}", {"message": str(exc)})
