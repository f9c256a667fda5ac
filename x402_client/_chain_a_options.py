"""`ChainAOptions`: the user's own chain-A wallet, for paying `ledgera:mainnet` entries directly.

```python
options = PaymentOptions(
    chain_a=ChainAOptions(mnemonic="abandon ... (25 words)", algod_url="https://node.example"),
)
```

The wallet is a key (`private_key`: base64 of the 64-byte ed25519 key, as the chain's SDK
writes it) or its 25-word `mnemonic`; exactly one of the two. `algod_url` is the node the
client reads suggested parameters and the wallet's holdings from (with `algod_token` when
the node wants one); `indexer_url` lets recovery look a payment up on chain. Secrets are
`SecretStr`: a repr, a log line or an error never shows them; URLs are shown as scheme and
host only (their path or query often carries a key).

Environment (`ChainAOptions.from_env`): `X402_EUR_CHAIN_A_PRIVATE_KEY` or
`X402_EUR_CHAIN_A_MNEMONIC`, `X402_EUR_CHAIN_A_ALGOD_URL`, `X402_EUR_CHAIN_A_ALGOD_TOKEN`,
`X402_EUR_CHAIN_A_INDEXER_URL`.

Validated by pydantic, imported only when chain-A options are given: building other
options never loads this module. Paying needs the `chain-a` extra
(`pip install 'x402-eur[chain-a]'`, py-algorand-sdk), imported by the rail when it signs.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from ._protocol.errors import ConfigurationError
from ._protocol.redact import endpoint_url
from ._protocol.secret import SecretStr

__all__ = ["CHAIN_A_ENV_VARS", "ChainAOptions", "chain_a_from_env", "coerce_chain_a"]

#: Environment variables read by `ChainAOptions.from_env` (field -> variable).
CHAIN_A_ENV_VARS: Mapping[str, str] = {
    "private_key": "X402_EUR_CHAIN_A_PRIVATE_KEY",
    "mnemonic": "X402_EUR_CHAIN_A_MNEMONIC",
    "algod_url": "X402_EUR_CHAIN_A_ALGOD_URL",
    "algod_token": "X402_EUR_CHAIN_A_ALGOD_TOKEN",
    "indexer_url": "X402_EUR_CHAIN_A_INDEXER_URL",
}

_URL_RE = re.compile(r"\Ahttps?://[^/\s]+")


def _secret(value: Any) -> SecretStr:
    if isinstance(value, SecretStr):
        return value
    reveal = getattr(type(value), "get_secret_value", None)
    if callable(reveal):  # pydantic's SecretStr, from a settings object
        value = reveal(value)
    if not isinstance(value, str):
        raise ValueError("must be a string")
    return SecretStr(value)


def _private_key(value: Any) -> SecretStr:
    """Base64 of 64 bytes (the ed25519 seed and public key, the SDK's form)."""
    secret = _secret(value)
    try:
        raw = base64.b64decode(secret.get_secret_value().strip(), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("private_key must be base64 of the 64-byte ed25519 key") from None
    if len(raw) != 64:
        raise ValueError("private_key must be base64 of the 64-byte ed25519 key")
    return secret


def _mnemonic(value: Any) -> SecretStr:
    secret = _secret(value)
    words = secret.get_secret_value().split()
    if len(words) != 25:
        raise ValueError("mnemonic must be 25 words")
    return SecretStr(" ".join(words))


def _url(value: Any) -> str:
    if not isinstance(value, str) or not _URL_RE.match(value):
        raise ValueError("must be an http(s) URL")
    return value.rstrip("/")


_Secret = Annotated[SecretStr, BeforeValidator(_secret)]
_PrivateKey = Annotated[SecretStr, BeforeValidator(_private_key)]
_Mnemonic = Annotated[SecretStr, BeforeValidator(_mnemonic)]
_Url = Annotated[str, BeforeValidator(_url)]


class ChainAOptions(BaseModel):
    """The payer's chain-A wallet and the node it reads from (see the module docstring)."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        arbitrary_types_allowed=True,
        hide_input_in_errors=True,
    )

    #: Base64 of the 64-byte ed25519 key (the SDK's `account.generate_account()` form).
    private_key: _PrivateKey | None = None
    #: Or the wallet's 25-word mnemonic.
    mnemonic: _Mnemonic | None = None
    #: The node (algod REST API) for suggested parameters and the wallet's holdings.
    algod_url: _Url
    #: The node's API token (`X-Algo-API-Token`), when it wants one.
    algod_token: _Secret | None = None
    #: An indexer (`GET /v2/transactions/<id>`): recovery looks payments up there.
    indexer_url: _Url | None = None
    #: The chain's typical round time, in seconds: turns an entry's `maxTimeoutSeconds`
    #: into a validity window in rounds (never more than the chain's 1000).
    round_seconds: float = 2.8
    #: Timeout of each node or indexer call, in seconds.
    timeout: float = 10.0

    @model_validator(mode="after")
    def _one_key(self) -> ChainAOptions:
        if (self.private_key is None) == (self.mnemonic is None):
            raise ValueError("give exactly one of private_key and mnemonic")
        if not self.round_seconds > 0 or not self.timeout > 0:
            raise ValueError("round_seconds and timeout must be above zero")
        return self

    def __repr_args__(self) -> Any:
        for name, value in super().__repr_args__():
            if name in ("algod_url", "indexer_url") and isinstance(value, str):
                value = endpoint_url(value)
            yield name, value

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> ChainAOptions | None:
        """The options the `X402_EUR_CHAIN_A_*` variables give, or None when no key is set."""
        return chain_a_from_env(environ)


def _configuration_error(exc: ValidationError) -> ConfigurationError:
    """pydantic's errors without the values given (they may be secrets)."""
    problems = []
    for error in exc.errors(include_input=False, include_url=False):
        where = ".".join(str(part) for part in error["loc"]) or "chain_a"
        problems.append(f"{where}: {error['msg']}")
    return ConfigurationError("invalid ChainAOptions: " + "; ".join(problems))


def coerce_chain_a(value: Any) -> ChainAOptions:
    """`ChainAOptions` from itself or a mapping of its keys (snake_case or camelCase);
    `ConfigurationError` (naming no secret) otherwise."""
    if isinstance(value, ChainAOptions):
        return value
    if not isinstance(value, Mapping):
        raise ConfigurationError(
            "invalid ChainAOptions: Input should be a valid dictionary or instance of ChainAOptions"
        )
    try:
        return ChainAOptions.model_validate(dict(value))
    except ValidationError as exc:
        raise _configuration_error(exc) from None


def chain_a_from_env(environ: Mapping[str, str]) -> ChainAOptions | None:
    """`ChainAOptions` from `X402_EUR_CHAIN_A_*` (`CHAIN_A_ENV_VARS`); None without a key."""
    values = {
        name: environ[variable]
        for name, variable in CHAIN_A_ENV_VARS.items()
        if environ.get(variable)
    }
    if "private_key" not in values and "mnemonic" not in values:
        return None
    if "algod_url" not in values:
        raise ConfigurationError(
            f"{CHAIN_A_ENV_VARS['algod_url']} must be set with the chain-A key (the node the "
            "client reads suggested parameters from)"
        )
    return coerce_chain_a(values)
