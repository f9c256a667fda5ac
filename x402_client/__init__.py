"""x402-eur: a payer-side x402 client for euro pay-per-request APIs, built on httpx.

```python
import httpx
from x402_client import PaymentOptions, with_eur_payment

client = with_eur_payment(httpx.AsyncClient(), PaymentOptions.from_env())
response = await client.get("https://merchant.example/paid")
print(response.extensions["x402_payment"])
```

The public names are declared once, in `__init__.pyi` (what type checkers read); each
loads on first use (PEP 562), so `import x402_client` stays cheap for command-line
start-up, and web3 is only ever imported by the EVM rails.
"""

import os as _os
from typing import Any as _Any

from .__version__ import __version__ as __version__


def _declared() -> dict[str, str]:
    """Each public name and its module, read from the `from .mod import Name as Name`
    lines of `__init__.pyi`."""
    stub = _os.path.join(_os.path.dirname(__file__), "__init__.pyi")
    with open(stub, encoding="utf-8") as lines:
        found = {}
        for line in lines:
            words = line.split()
            if len(words) == 6 and words[0] == "from" and words[2] == "import":
                found[words[5]] = words[1]
    return found


_EXPORTS = _declared()
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> _Any:
    module = _EXPORTS.get(name)
    if module is None or module == ".__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
