"""The paid GET without sockets: SDK vs hand-written floor over in-memory transports.

`python benchmarks/inprocess.py [--pairs N] [--blocks B] [--suspend]`

A diagnostic, not a figure of the table. Both flows run in this one process against the
lean merchant's and payment API's own handlers (`_lean.merchant`, `_lean.payment_api`),
called through an in-memory `httpx` transport instead of over loopback: the same bytes,
the same three round trips, no kernel. What is left is each flow's own Python work
(httpx's included), so the difference is what the SDK adds to a paid GET when no
syscall sits between its steps. Compare it with figure 1b/1d (over loopback) to see how
much of the SDK's overhead there comes from its own code and how much only appears with
sockets.

Requests alternate SDK / floor (the order flipping every pair), after a warm-up. Each
block prints the medians and the difference of the 10th percentiles, which a busy
machine moves least. `--suspend` makes each transport call and each body read yield to
the event loop once, as a socket read does, so that every `await` chain is resumed as it
is over the network. The last line is a JSON summary.

The SDK's payment-API client is given the in-memory transport by replacing the payer's
`PaymentAPI` (a private attribute: there is no option for it, and this is not a user's
code path).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _lean
import httpx
from _flows import HandWritten

MERCHANT = "http://127.0.0.1:8/weather"  # never connected to: the transport is in memory
API_URL = "http://127.0.0.1:9/"


class _Body(httpx.AsyncByteStream):
    def __init__(self, body: bytes) -> None:
        self._body = body

    async def __aiter__(self) -> AsyncIterator[bytes]:
        await asyncio.sleep(0)
        yield self._body

    async def aclose(self) -> None:
        pass


class InMemory(httpx.AsyncBaseTransport):
    """Calls a `_lean` handler with what a server would have parsed off the wire."""

    def __init__(self, handler: _lean.Handler, *, suspend: bool) -> None:
        self._handler = handler
        self._suspend = suspend

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        headers = {k.lower(): v for k, v in request.headers.raw}
        answer = self._handler(request.method.encode(), request.url.raw_path, headers, body)
        raw = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(answer.body)).encode()),
            *answer.headers,
        ]
        if self._suspend:
            await asyncio.sleep(0)
            return httpx.Response(answer.status, headers=raw, stream=_Body(answer.body))
        return httpx.Response(answer.status, headers=raw, content=answer.body)


def flows(*, suspend: bool) -> tuple[Any, HandWritten, _lean.Stats, _lean.Stats]:
    from x402_client import with_eur_payment
    from x402_client._state.payment_api import PaymentAPI

    served, paid = _lean.Stats(), _lean.Stats()
    merchant = InMemory(_lean.merchant(served), suspend=suspend)
    api = InMemory(_lean.payment_api(paid), suspend=suspend)
    options = {
        "api_key": _lean.API_KEY,
        "from_account": _lean.PAYER_ACCOUNT,
        "api_url": API_URL,
    }
    floor = HandWritten(
        options, httpx.AsyncClient(transport=merchant), httpx.AsyncClient(transport=api)
    )
    sdk = with_eur_payment(httpx.AsyncClient(transport=merchant), options)
    transport: Any = sdk._transport  # the payment transport `with_eur_payment` mounted
    payer = transport.payer
    # Set before the first payment, so the payer never builds its own (socket) client.
    paying = payer.options
    payer._api = PaymentAPI(
        API_URL,
        paying.api_key,
        timeout=paying.payment_api_timeout,
        max_body_bytes=paying.max_body_bytes,
        max_connections=paying.payment_api_max_connections,
        transport=api,
    )
    return sdk, floor, served, paid


def _p10(values: list[float]) -> float:
    return sorted(values)[len(values) // 10]


async def measure(pairs: int, blocks: int, *, suspend: bool, warmup: int = 200) -> dict[str, Any]:
    sdk, floor, served, paid = flows(suspend=suspend)
    clock = time.perf_counter
    rows: list[dict[str, float]] = []
    try:
        for flow in (sdk, floor):
            for _ in range(warmup):
                (await flow.get(MERCHANT)).raise_for_status()
        for _ in range(blocks):
            times: dict[str, list[float]] = {"sdk": [], "floor": []}
            for i in range(pairs):
                for name in ("sdk", "floor") if i % 2 == 0 else ("floor", "sdk"):
                    flow = sdk if name == "sdk" else floor
                    started = clock()
                    response = await flow.get(MERCHANT)
                    times[name].append(clock() - started)
                    response.raise_for_status()
            row = {
                "sdk_median_us": statistics.median(times["sdk"]) * 1e6,
                "floor_median_us": statistics.median(times["floor"]) * 1e6,
                "over_p10_us": (_p10(times["sdk"]) - _p10(times["floor"])) * 1e6,
            }
            row["over_median_us"] = row["sdk_median_us"] - row["floor_median_us"]
            rows.append(row)
            print(
                f"sdk {row['sdk_median_us']:.1f} us, floor {row['floor_median_us']:.1f} us: "
                f"SDK over the floor {row['over_median_us']:+.1f} us (median), "
                f"{row['over_p10_us']:+.1f} us (10th percentile)",
                flush=True,
            )
    finally:
        await sdk.aclose()
        await floor.aclose()
    # Every paid request paid once: the merchant served exactly the codes the API was paid.
    paid_once = sorted(served.codes) == sorted(paid.codes)
    return {
        "pairs": pairs,
        "blocks": rows,
        "suspend": suspend,
        "over_p10_us": statistics.median(r["over_p10_us"] for r in rows),
        "over_median_us": statistics.median(r["over_median_us"] for r in rows),
        "served_codes_paid_once": paid_once,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=3000, help="SDK/floor pairs per block")
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--suspend", action="store_true", help="yield once per call and read")
    args = parser.parse_args(argv)
    result = asyncio.run(measure(args.pairs, args.blocks, suspend=args.suspend))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
