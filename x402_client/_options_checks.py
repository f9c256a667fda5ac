"""The rules of option values that pydantic's types do not express.

Pure functions, no pydantic: `_options_model` attaches them to the fields `_options`
declares. A check takes the value pydantic validated (or, for a `before` check, the value
given) and returns the value kept. It raises `ValueError` for a value of the right kind
that breaks a rule (shown as "Value error, ...") and `WrongKind` for a value of the wrong
kind (its message shown as it is). No message ever contains the value: it may be a secret.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal
from typing import Any

from ._protocol.amounts import AmountError, parse_amount
from ._protocol.budgets import CURRENCIES, Budget
from ._protocol.errors import ConfigurationError
from ._protocol.secret import SecretStr

__all__ = [
    "WrongKind",
    "api_url",
    "asset_from_text",
    "budget_item",
    "chain_a",
    "chain_a_from_env",
    "dataclass_item",
    "destination_guard",
    "flatten",
    "http_url",
    "is_loopback",
    "limits",
    "one_or_many",
    "options_of",
    "private_key",
    "reveal",
    "rpc_urls",
    "secret",
    "unknown_option",
]

_KEY_RE = re.compile(r"\A(0x)?[0-9a-fA-F]{64}\Z")
#: The order of secp256k1's group: a private key is an integer from 1 to this minus one.
_SECP256K1_ORDER = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141


class WrongKind(Exception):  # named for what it reports
    """A value of the wrong kind; the message is shown as it is."""


# --- kinds of value ------------------------------------------------------------------------------


def reveal(value: Any) -> Any:
    """A secret given as a `SecretStr` (this library's or another's, such as a settings
    object's) as its text, for pydantic to validate as a string."""
    get = getattr(type(value), "get_secret_value", None)
    return get(value) if callable(get) else value


def secret(text: str) -> SecretStr:
    """The text of a secret, kept as a `SecretStr` (printed as `**********`)."""
    return SecretStr(text)


def one_or_many(*single: type) -> Callable[[Any], Any]:
    """A lone value of the types `single` as a tuple of one; anything else as given."""

    def check(value: Any) -> Any:
        return (value,) if isinstance(value, single) else value

    return check


def flatten(items: tuple[Any, ...]) -> tuple[Any, ...]:
    """Items that are tuples (a string that named several budgets) spread in place."""
    return tuple(x for item in items for x in (item if isinstance(item, tuple) else (item,)))


def dataclass_item(cls: type) -> Callable[[Any, Callable[[Any], Any]], Any]:
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


def budget_item(value: Any, validate: Callable[[Any], Any]) -> Any:
    """One budget: a `Budget`, a mapping of its fields, or the command line's text
    (`"5.00/24h"`; several separated by commas, returned as a tuple)."""
    if isinstance(value, str):
        from ._protocol.budget_spec import parse_budgets  # it builds on _budget

        try:
            return tuple(parse_budgets([value]))
        except ValueError as exc:
            raise WrongKind(str(exc)) from None
    return dataclass_item(Budget)(value, validate)


def options_of(cls: Any) -> Callable[[Any], Any]:
    """Nested options (`evm`): an instance of `cls`, or a mapping validated by `cls`, whose
    errors are its own ("invalid EvmOptions: ...")."""

    def check(value: Any) -> Any:
        if value is None or isinstance(value, cls):
            return value
        if isinstance(value, Mapping):
            return cls.model_validate(value)
        raise WrongKind(f"Input should be a valid dictionary or instance of {cls.__name__}")

    return check


def chain_a(value: Any) -> Any:
    """None, or `ChainAOptions` from itself or a mapping of its keys (its module, and its
    pydantic model, load only when chain-A options are given); its errors are its own
    ("invalid ChainAOptions: ...")."""
    if value is None:
        return None
    from ._chain_a_options import coerce_chain_a

    return coerce_chain_a(value)


def chain_a_from_env(env: Mapping[str, str]) -> Any:
    """`ChainAOptions` from the `X402_EUR_CHAIN_A_*` variables, or None when none is set."""
    if not any(name.startswith("X402_EUR_CHAIN_A_") for name in env):
        return None
    from ._chain_a_options import chain_a_from_env as from_env

    return from_env(env)


def destination_guard(value: Any) -> Any:
    """None, or a `DestinationGuard` (whose module loads only when one is given)."""
    if value is None:
        return None
    from ._state.netguard import DestinationGuard  # it loads the HTTP transport's modules

    if not isinstance(value, DestinationGuard):
        raise WrongKind("Input should be an instance of DestinationGuard")
    return value


# --- rules ---------------------------------------------------------------------------------------


def http_url(value: str) -> str:
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


def api_url(value: str) -> str:
    """The payment API's URL: the API key travels there, so plain http only where it
    cannot leave the machine."""
    url = http_url(value)
    host = re.sub(r"\Ahttps?://(\[[^\]]+\]|[^/:]+).*", r"\1", url)
    if not url.startswith("https://") and not is_loopback(host):
        raise ValueError("must be https:// (plain http:// only for a loopback address)")
    return url


def limits(value: Any) -> dict[str, Decimal]:
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


def private_key(text: str) -> SecretStr:
    """32 bytes of hex that are a secp256k1 private key: from 1 to the group order minus
    one. Checked as an integer, without the EVM extra; the key is never in a message."""
    if not _KEY_RE.match(text):
        raise ValueError("private_key must be 32 bytes of hex")
    if not 0 < int(text.removeprefix("0x"), 16) < _SECP256K1_ORDER:
        raise ValueError(
            "private_key is not a valid secp256k1 key (it must be above zero and below the "
            "curve order)"
        )
    return SecretStr(text)


def rpc_urls(value: Mapping[Any, Any]) -> dict[int, tuple[str, ...]]:
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
            result[int(chain)] = tuple(http_url(u) for u in listed)
        except TypeError:
            raise ValueError("chain ids must be integers") from None
    return result


# --- names ---------------------------------------------------------------------------------------


def unknown_option(key: str, names: Iterable[str]) -> str:
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


def asset_from_text(text: str, variable: str) -> Any:
    """`CHAIN:ADDRESS:SYMBOL:CURRENCY[:DECIMALS]` (the form of `X402_EUR_ASSETS`)."""
    from ._protocol.assets import Asset

    parts = [p.strip() for p in text.strip().split(":")]
    if len(parts) not in (4, 5) or not parts[0].isdigit():
        raise ConfigurationError(
            f"{variable}: write CHAIN:ADDRESS:SYMBOL:CURRENCY[:DECIMALS], e.g. "
            "8453:0x...:EURC:EUR:6"
        )
    decimals = 6
    if len(parts) == 5:
        if not (parts[4].isascii() and parts[4].isdigit()):
            raise ConfigurationError(
                f"{variable}: DECIMALS must be a whole number (e.g. 6), not {parts[4]!r}"
            )
        decimals = int(parts[4])
    return Asset(int(parts[0]), parts[1], parts[2], parts[3], decimals)
