"""A payer process that dies at a chosen step: the child of `tests/test_crash_matrix.py`.

```
python tests/crash_payer.py '{"rail": "euro", "step": "after-call", "url": ..., ...}'
```

It builds `PaymentOptions(state_path=...)` from the JSON it is given, fetches `url` once,
and kills itself with SIGKILL at `step`, with no chance to clean up, as a process killed
by the OOM killer or a power cut would. The kill point is set by wrapping, in this
process only, the function that runs at that step:

| step          | euro                      | bridge                        | evm            |
|---------------|---------------------------|-------------------------------|----------------|
| `before-call` | before `pay_payment_request` | before `pay_blockchain_address` | before `_sign` |
| `after-call`  | after it returned         | after it returned             | after `_sign`  |
| `wait`        | -                         | after the first `get_transaction` | -         |
| `proof`       | at `Payer._deliver`       | at `Payer._deliver`           | at `Payer._deliver` |
| `delivery...` | nothing here: the parent kills this process while the merchant holds the paid request |

Exit status: -9 (killed, as meant); 0 with `served <status>` on stdout when no kill point
was reached (the test then fails).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

import httpx

from x402_client import Budget, PaymentOptions, with_eur_payment
from x402_client._payer import Payer
from x402_client._payment_api import PaymentAPI


def _die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def _kill_around(owner: Any, name: str, *, before: bool, on_call: int = 1) -> None:
    """Wrap `owner.name` (sync or async) to die before or after its `on_call`-th call."""
    original: Callable[..., Any] = getattr(owner, name)
    calls = 0

    if inspect.iscoroutinefunction(original):

        @functools.wraps(original)
        async def wrapped_async(*args: Any, **kwargs: Any) -> Any:
            nonlocal calls
            calls += 1
            if before and calls == on_call:
                _die()
            result = await original(*args, **kwargs)
            if not before and calls == on_call:
                _die()
            return result

        setattr(owner, name, wrapped_async)
        return

    @functools.wraps(original)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if before and calls == on_call:
            _die()
        result = original(*args, **kwargs)
        if not before and calls == on_call:
            _die()
        return result

    setattr(owner, name, wrapped)


def _arm(rail: str, step: str) -> None:
    owner: Any
    if step in ("before-call", "after-call"):
        if rail == "evm":
            from x402_client._rails.evm import EvmPermitRail

            owner, name = EvmPermitRail, "_sign"
        else:
            owner = PaymentAPI
            name = "pay_payment_request" if rail == "euro" else "pay_blockchain_address"
        _kill_around(owner, name, before=step == "before-call")
    elif step == "wait":
        # The first lookup answered (the transfer is still on its way): die mid-wait.
        _kill_around(PaymentAPI, "get_transaction", before=False)
    elif step == "proof":
        _kill_around(Payer, "_deliver", before=True)
    elif not step.startswith("delivery"):
        raise SystemExit(f"unknown step {step!r}")


def _options(config: dict[str, Any]) -> PaymentOptions:
    values: dict[str, Any] = {
        "api_key": config["api_key"],
        "from_account": config["from_account"],
        "api_url": config["api_url"],
        "state_path": config["state_path"],
        "budgets": [Budget(config["budget"])],
        "bridge_poll_interval": 0.05,
        "bridge_poll_max_interval": 0.1,
        "bridge_deadline": 30,
    }
    if config.get("evm_key"):
        values["evm"] = {
            "private_key": config["evm_key"],
            "rpc_urls": {int(chain): url for chain, url in config["rpc_urls"].items()},
        }
    return PaymentOptions.model_validate(values)


async def main(config: dict[str, Any]) -> None:
    _arm(config["rail"], config["step"])
    options = _options(config)
    async with with_eur_payment(httpx.AsyncClient(timeout=60), options) as client:
        response = await client.get(config["url"])
        await response.aread()
    print("served", response.status_code, flush=True)


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
