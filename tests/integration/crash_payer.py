"""A payer process that dies at a chosen step: the child of `tests/integration/test_crash_matrix.py`.

```
python tests/integration/crash_payer.py '{"rail": "euro", "step": "after-call", "url": ..., ...}'
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
| `proof`       | at the deliver state      | at the deliver state          | at the deliver state |
| `delivery...` | nothing here: the parent kills this process while the merchant holds the paid request |

(`chain-a`, paying from the payer's own chain-A wallet: around `_Wallet.sign`, the signing
of the transfer; `svm`, paying on Solana from the payer's own wallet: around
`build_transaction`, which signs it; `proof` and `delivery...` as for the others.)

Steps that do not kill, for recovery while this payer is alive (the parent runs recovery
on the same state file while the payer waits, then lets it go on):

- `live`: nothing here; the parent's merchant holds the paid request;
- `live-wait` (bridge): after the first `get_transaction` (the transfer is on its way),
  the payer creates the file `config["ready"]` and waits until `config["release"]` exists.

Rails: `euro`, `bridge`, `evm` (the polygon permit), `eip3009` (the standard merchant's
EIP-3009 token: `config["asset"]` is its `Asset`), `chain-a` (`config["chain_a"]` is the
wallet's settings, a mapping of `ChainAOptions` keys), `svm` (`config["svm"]`, a mapping of
`SvmOptions` keys, and `config["svm_assets"]`, the mints as `Asset` keys).

Exit status: -9 (killed, as meant); 0 with `served <status>` on stdout when no kill point
was reached (a killing step then fails its test; a live one expects it).
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
from pathlib import Path
from typing import Any

import anyio
import httpx

from x402_client import Asset, Budget, PaymentOptions, with_eur_payment
from x402_client._flow import payment as payment_flow
from x402_client._state.payment_api import PaymentAPI


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


def _hold_in_wait(ready: Path, release: Path) -> None:
    """After the first bridge lookup answered: say so (`ready`), wait for `release`."""
    original = PaymentAPI.get_transaction
    calls = 0

    @functools.wraps(original)
    async def holding(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        result = await original(*args, **kwargs)
        calls += 1
        if calls == 1:
            await anyio.Path(ready).touch()
            while not await anyio.Path(release).exists():  # noqa: ASYNC110 - another process
                await asyncio.sleep(0.01)
        return result

    PaymentAPI.get_transaction = holding  # type: ignore[method-assign]


def _arm(rail: str, step: str, config: dict[str, Any]) -> None:
    owner: Any
    if step == "live":
        return
    if step == "live-wait":
        _hold_in_wait(Path(config["ready"]), Path(config["release"]))
        return
    if step in ("before-call", "after-call"):
        if rail == "evm":
            from x402_client._rails.evm import EvmPermitRail

            owner, name = EvmPermitRail, "_sign"
        elif rail == "chain-a":
            from x402_client._rails.chain_a import _Wallet

            owner, name = _Wallet, "sign"
        elif rail == "svm":
            from x402_client._rails import solana

            owner, name = solana, "build_transaction"
        else:
            owner = PaymentAPI
            name = "pay_payment_request" if rail == "euro" else "pay_blockchain_address"
        _kill_around(owner, name, before=step == "before-call")
    elif step == "wait":
        # The first lookup answered (the transfer is still on its way): die mid-wait.
        _kill_around(PaymentAPI, "get_transaction", before=False)
    elif step == "proof":
        # The payment's deliver state: the proof exists and is about to be sent.
        _kill_around(payment_flow, "_deliver", before=True)
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
    if config.get("evm_key") and config["rail"] == "eip3009":
        # The standard merchant's token; the EIP-3009 rail signs without an RPC.
        values["evm"] = {"private_key": config["evm_key"]}
        values["assets"] = [Asset(**config["asset"])]
    elif config.get("evm_key"):
        values["evm"] = {
            "private_key": config["evm_key"],
            "rpc_urls": {int(chain): url for chain, url in config["rpc_urls"].items()},
        }
    if config.get("chain_a"):
        values["chain_a"] = config["chain_a"]
    if config.get("svm"):
        values["svm"] = config["svm"]
        values["assets"] = [Asset(**asset) for asset in config["svm_assets"]]
    return PaymentOptions.model_validate(values)


async def main(config: dict[str, Any]) -> None:
    _arm(config["rail"], config["step"], config)
    options = _options(config)
    async with with_eur_payment(httpx.AsyncClient(timeout=60), options) as client:
        response = await client.get(config["url"])
        await response.aread()
    print("served", response.status_code, flush=True)


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
