"""Child process of the memory figure: one paid, streamed download, chunks discarded.

`python benchmarks/_memory_child.py URL OPTIONS_JSON` prints a JSON line with peak RSS
(`ru_maxrss`) after warm-up (imports done, one small paid request made, so that the
client, its pools and the payment path are all loaded) and after the streamed download.
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import time

import httpx

from x402_client import with_eur_payment
from x402_client._flow.payment import RECEIPT_EXTENSION


def _peak_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux


async def main(url: str, options: dict[str, object], size: int) -> dict[str, object]:
    async with with_eur_payment(httpx.AsyncClient(timeout=120), options) as client:
        # Warm-up: a small paid download through the same code path.
        async with client.stream("GET", f"{url}?size=65536") as response:
            response.raise_for_status()
            async for _ in response.aiter_raw():
                pass
        before = _peak_kib()
        received = 0
        started = time.perf_counter()
        async with client.stream("GET", f"{url}?size={size}") as response:
            response.raise_for_status()
            paid = RECEIPT_EXTENSION in response.extensions
            async for chunk in response.aiter_raw():
                received += len(chunk)
        elapsed = time.perf_counter() - started
        after = _peak_kib()
    return {
        "peak_before_kib": before,
        "peak_after_kib": after,
        "received": received,
        "paid": paid,
        "seconds": elapsed,
    }


if __name__ == "__main__":
    result = asyncio.run(main(sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])))
    print(json.dumps(result))
