"""A worker of a fleet: the child of `tests/integration/test_fleet.py`, one per "machine".

```
python tests/integration/fleet_worker.py '{"state": "postgresql://...", "urls": [...], ...}'
```

It builds `PaymentOptions(state_path=<DSN>)` with the fleet's budgets, says it is ready
(creates `config["ready"]`), waits until `config["go"]` exists (so that every worker asks
at the same moment), fetches every URL of `config["urls"]` at once, and prints one JSON
object: how many were paid and refused per currency, its ledger's totals, and the permit
nonces it signed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
from collections import Counter
from typing import Any

import httpx
from start_gate import wait_for_go

from x402_client import Budget, BudgetExceeded, PaymentOptions, payments, with_eur_payment


class _Signed(logging.Handler):
    """The permit nonces this worker signed (the rail logs each at DEBUG)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.nonces: list[int] = []

    def emit(self, record: logging.LogRecord) -> None:
        found = re.match(r"x402: signed permit nonce (\d+)", record.getMessage())
        if found:
            self.nonces.append(int(found.group(1)))


async def main(config: dict[str, Any]) -> None:
    signed = _Signed()
    logging.getLogger("x402_client").addHandler(signed)
    logging.getLogger("x402_client").setLevel(logging.DEBUG)
    options = PaymentOptions.model_validate(
        {
            "api_key": config["api_key"],
            "from_account": config["from_account"],
            "api_url": config["api_url"],
            "evm": config["evm"],
            "state_path": config["state"],
            "budgets": [Budget(b["limit"], currency=b["currency"]) for b in config["budgets"]],
        }
    )
    outcomes: Counter[str] = Counter()
    other: list[str] = []
    async with with_eur_payment(httpx.AsyncClient(timeout=120), options) as client:
        await wait_for_go(config["ready"], config["go"])

        async def fetch(url: str, currency: str) -> None:
            try:
                response = await client.get(url)
                outcomes[f"{currency} {response.status_code}"] += 1
            except BudgetExceeded:
                outcomes[f"{currency} refused"] += 1
            except Exception as exc:
                other.append(f"{type(exc).__name__}: {exc}")

        await asyncio.gather(*(fetch(url, currency) for url, currency in config["urls"]))
        ledger = payments(client).ledger
        totals = {c: str(ledger.total(c)) for c in ("EUR", "USD")}
        paid = len(ledger.entries("paid"))
    report = {"outcomes": outcomes, "other": other, "totals": totals, "paid": paid}
    print(json.dumps({**report, "nonces": signed.nonces}))


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
