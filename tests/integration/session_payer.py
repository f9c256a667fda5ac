"""A payer of a session (`batch-settlement`) in a process of its own: the child of
`tests/integration/test_session_safety.py`.

```
python tests/integration/session_payer.py '{"state": ..., "url": ..., "requests": 3, ...}'
```

It builds `PaymentOptions(state_path=config["state"])` (a SQLite file or a PostgreSQL DSN)
with the payer's EVM key, and fetches `url` `requests` times, one after the other. Every
payment payload it sends is appended to `config["sent"]` (one JSON line, flushed) before it
leaves, so the parent knows what was signed and sent even of a process that was killed.

`kill` (optional) kills the process with SIGKILL, with no chance to clean up, at the
`kill_at`-th payment payload it sends (counting from 1):

- `before-send`: the voucher was signed and journaled, and is about to go out (the line in
  `sent` says `"sent": false`);
- `after-answer`: the merchant took the voucher, served and charged it, and answered; the
  answer dies with the process before the client reads it.

With `ready` and `go` (paths), it creates `ready` once its client is built and waits until
`go` exists, so that two payers start together.

Output (stdout, one JSON object): every request's status code or error, in order.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import httpx
from start_gate import wait_for_go

from x402_client import Asset, PaymentOptions, with_eur_payment


class _Network(httpx.AsyncBaseTransport):
    """The network: writes every payment payload down before it leaves; dies where told."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.sent = Path(config["sent"])
        self.kill: str | None = config.get("kill")
        self.kill_at = int(config.get("kill_at", 0))
        self.count = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        header = request.headers.get("payment-signature")
        if header is None:
            return await self.inner.handle_async_request(request)
        self.count += 1
        dying = self.kill if self.count == self.kill_at else None
        payload = json.loads(base64.b64decode(header))["payload"]
        line = {"pid": os.getpid(), "payload": payload, "sent": dying != "before-send"}
        with self.sent.open("a") as file:
            file.write(json.dumps(line) + "\n")
            file.flush()
            os.fsync(file.fileno())
        if dying == "before-send":
            _die()
        response = await self.inner.handle_async_request(request)
        if dying == "after-answer":
            await response.aread()
            _die()
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


def _die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def _options(config: dict[str, Any]) -> PaymentOptions:
    return PaymentOptions.model_validate(
        {
            "evm": {
                "private_key": config["key"],
                "rpc_urls": {int(config["chain_id"]): config["rpc_url"]},
            },
            "assets": [Asset(**config["asset"])],
            "max_amount_per_payment": {"EUR": "0.05"},
            "state_path": config["state"],
        }
    )


async def main(config: dict[str, Any]) -> None:
    outcomes: list[str] = []
    client = httpx.AsyncClient(transport=_Network(config), timeout=120)
    async with with_eur_payment(client, _options(config)) as paying:
        if config.get("ready"):
            await wait_for_go(config["ready"], config["go"])
        for _ in range(int(config["requests"])):
            try:
                response = await paying.get(config["url"])
                outcomes.append(str(response.status_code))
            except Exception as exc:
                outcomes.append(f"{type(exc).__name__}: {exc}")
    print(json.dumps({"outcomes": outcomes}), flush=True)


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
