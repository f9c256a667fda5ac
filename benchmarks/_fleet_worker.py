"""One worker of the fleet figures (`_figures_fleet.py`), in a process of its own.

```
python benchmarks/_fleet_worker.py '{"state": "...", "options": {...}, "url": "...", ...}'
```

It builds `PaymentOptions(state_path=<state>)` with one euro budget of `config["limit"]`
and, first, pays `config["warmup"]` requests (0 in a fleet run, whose budget is exact). It
then says it is ready (creates `config["ready"]`), waits until `config["go"]` exists, so
that every worker starts together, and pays the merchant's URL one request after another:
`config["n"]` requests, or until the shared budget refuses one when `n` is 0. It prints
one JSON object: how many it paid, whether a refusal stopped it, anything else that went
wrong, and when it finished (`time.time()`, for the fleet's wall time). Given
`config["done"]`, it creates that file after its last payment and waits for
`config["close"]` before it closes the state, so that closing is not counted as a
payment's round trips.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

import anyio
import httpx

from x402_client import Budget, BudgetExceeded, PaymentOptions, with_eur_payment


async def main(config: dict[str, Any]) -> dict[str, Any]:
    options = PaymentOptions.model_validate(
        {
            **config["options"],
            "state_path": config["state"],
            "budgets": [Budget(config["limit"], currency="EUR")],
        }
    )
    paid, refused, other = 0, False, []
    async with with_eur_payment(httpx.AsyncClient(timeout=120), options) as client:
        for _ in range(config["warmup"]):
            (await client.get(config["url"])).raise_for_status()
        await anyio.Path(config["ready"]).touch()
        while not await anyio.Path(config["go"]).exists():  # noqa: ASYNC110 - another process
            await asyncio.sleep(0.002)
        while config["n"] == 0 or paid < config["n"]:
            try:
                response = await client.get(config["url"])
            except BudgetExceeded:
                refused = True
                break
            except Exception as exc:
                other.append(f"{type(exc).__name__}: {exc}"[:300])
                break
            if response.status_code != 200:
                other.append(f"answered {response.status_code}")
                break
            paid += 1
        finished = time.time()
        if "done" in config:  # the round-trip count ends here, before the store closes
            await anyio.Path(config["done"]).touch()
            while not await anyio.Path(config["close"]).exists():  # noqa: ASYNC110
                await asyncio.sleep(0.002)
    return {"paid": paid, "refused": refused, "other": other, "finished": finished}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(json.loads(sys.argv[1])))))
