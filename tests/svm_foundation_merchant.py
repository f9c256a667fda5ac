"""The x402 foundation's own Solana merchant, run in the foundation's SVM environment
(`sandbox/tests/svm_foundation.py`), never in the project's: its resource server
(`x402ResourceServerSync`, `x402HTTPResourceServerSync`, `ExactSvmServerScheme` on the
given RPC URL) with its facilitator in process (`x402FacilitatorSync`,
`ExactSvmFacilitatorScheme`, a `FacilitatorKeypairSigner` on the same RPC URL), served on
127.0.0.1 by the standard library's HTTP server.

```
python tests/svm_foundation_merchant.py '{"rpc_url": ..., "fee_payer": "<base58>",
    "pay_to": ..., "routes": {"/paid/eurc": {"asset": ..., "amount": "50000"}}}'
```

It prints `listening <port>` once it serves, then serves until stdin closes. A paid route
answers `{"paid": true}`; the settlement travels in `PAYMENT-RESPONSE`, as the foundation's
middleware sends it.
"""

from __future__ import annotations

import json
import sys
import threading
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

warnings.simplefilter("ignore")  # their `solana` client warns that it is deprecated


class _Adapter:
    """The foundation's `HTTPAdapter` over one stdlib request."""

    def __init__(self, handler: BaseHTTPRequestHandler) -> None:
        self._handler = handler

    def get_header(self, name: str) -> str | None:
        return self._handler.headers.get(name)

    def get_method(self) -> str:
        return self._handler.command

    def get_path(self) -> str:
        return self._handler.path.split("?", 1)[0]

    def get_url(self) -> str:
        host = self._handler.headers.get("host", "127.0.0.1")
        return f"http://{host}{self._handler.path}"

    def get_accept_header(self) -> str:
        return self._handler.headers.get("accept", "")

    def get_user_agent(self) -> str:
        return self._handler.headers.get("user-agent", "")

    def get_query_params(self) -> dict[str, str | list[str]] | None:
        return None

    def get_query_param(self, name: str) -> str | list[str] | None:
        return None

    def get_body(self) -> Any:
        return None


def _server(config: dict[str, Any]) -> Any:
    from solders.keypair import Keypair
    from x402 import x402FacilitatorSync, x402ResourceServerSync
    from x402.http import x402HTTPResourceServerSync
    from x402.http.types import PaymentOption, RouteConfig
    from x402.mechanisms.svm import FacilitatorKeypairSigner
    from x402.mechanisms.svm.exact import ExactSvmFacilitatorScheme, ExactSvmServerScheme

    network = config["network"]
    facilitator = x402FacilitatorSync()
    signer = FacilitatorKeypairSigner(
        Keypair.from_base58_string(config["fee_payer"]), rpc_url=config["rpc_url"]
    )
    facilitator.register([network], ExactSvmFacilitatorScheme(signer))
    server = x402ResourceServerSync(facilitator)
    server.register(network, ExactSvmServerScheme(rpc_url=config["rpc_url"]))
    routes = {
        f"GET {path}": RouteConfig(
            accepts=PaymentOption(
                scheme="exact",
                pay_to=config["pay_to"],
                price={"amount": route["amount"], "asset": route["asset"]},
                network=network,
                max_timeout_seconds=60,
            ),
            description=f"paid on Solana by the foundation's merchant ({path})",
            mime_type="application/json",
        )
        for path, route in config["routes"].items()
    }
    http_server = x402HTTPResourceServerSync(server, routes)
    http_server.initialize()
    return http_server


def _handler(http_server: Any) -> type[BaseHTTPRequestHandler]:
    from x402.http.types import HTTPRequestContext

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def _answer(self, status: int, headers: dict[str, str], body: Any) -> None:
            raw = body if isinstance(body, bytes) else json.dumps(body or {}).encode()
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def do_GET(self) -> None:
            adapter = _Adapter(self)
            context = HTTPRequestContext(
                adapter=adapter,
                path=adapter.get_path(),
                method="GET",
                payment_header=adapter.get_header("payment-signature")
                or adapter.get_header("x-payment"),
            )
            result = http_server.process_http_request(context)
            if result.type == "no-payment-required":
                self._answer(200, {}, {"free": True})
            elif result.type == "payment-error":
                response = result.response
                self._answer(response.status, dict(response.headers), response.body)
            else:
                settled = http_server.process_settlement(
                    result.payment_payload, result.payment_requirements, context=context
                )
                if settled.success:
                    self._answer(200, dict(settled.headers), {"paid": True})
                else:
                    response = settled.response
                    self._answer(response.status, dict(response.headers), response.body)

    return Handler


def main() -> None:
    config = json.loads(sys.argv[1])
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(_server(config)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    print(f"listening {httpd.server_address[1]}", flush=True)
    sys.stdin.read()  # until the test closes it
    httpd.shutdown()


if __name__ == "__main__":
    main()
