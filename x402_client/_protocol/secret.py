"""`SecretStr`: a string that never shows itself in a repr, a log line or a traceback.

Our own, not pydantic's, so that building `PaymentOptions` imports no pydantic. It behaves
like `pydantic.SecretStr` where callers can tell: `get_secret_value()`, `str()` prints
`**********` (an empty secret prints as nothing), equality and hashing by value, `len()`.
"""

from __future__ import annotations

__all__ = ["SecretStr"]

_MASK = "**********"


class SecretStr:
    """A secret string (an API key, a private key): printed as `**********`.

    ```python
    key = SecretStr("sk_live_...")
    print(key)                      # **********
    key.get_secret_value()          # 'sk_live_...'
    ```
    """

    __slots__ = ("_secret_value",)

    def __init__(self, secret_value: str) -> None:
        if not isinstance(secret_value, str):
            raise TypeError(f"SecretStr needs a str, not {type(secret_value).__name__}")
        self._secret_value = secret_value

    def get_secret_value(self) -> str:
        """The secret itself: hand it to what needs it, never to a log."""
        return self._secret_value

    def __str__(self) -> str:
        return _MASK if self._secret_value else ""

    def __repr__(self) -> str:
        return f"SecretStr({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SecretStr):
            return NotImplemented
        return self._secret_value == other._secret_value

    def __hash__(self) -> int:
        return hash(self._secret_value)

    def __len__(self) -> int:
        return len(self._secret_value)

    def __bool__(self) -> bool:
        return bool(self._secret_value)
