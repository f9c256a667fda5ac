"""An RPC or node URL may carry its key in the path: once a rail names it private, no
library's log line shows more of it than scheme, host and port."""

from __future__ import annotations

import logging

import pytest

from x402_client._protocol.redact import endpoint_url, private_endpoints
from x402_client._rails.permit2 import ChainReader

KEYED = "https://rpc.node.test/v2/sk_live_rpc_key_0123456789"


def test_an_rpc_url_in_an_httpx_request_line_shows_only_its_endpoint(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ChainReader({137: (KEYED,)})  # a rail that reads this chain names its URLs private
    with caplog.at_level(logging.INFO, logger="httpx"):
        logging.getLogger("httpx").info('HTTP Request: %s %s "%s"', "POST", KEYED, "HTTP/1.1 200")
    (record,) = caplog.records
    assert "sk_live_rpc_key" not in record.getMessage()
    assert endpoint_url(KEYED) in record.getMessage()


def test_a_path_below_a_private_node_url_keeps_only_its_own_part(
    caplog: pytest.LogCaptureFixture,
) -> None:
    node = "http://127.0.0.1:4001/token/sk_node_secret_abcdef"
    private_endpoints([node])
    with caplog.at_level(logging.INFO, logger="httpx"):
        logging.getLogger("httpx").info("HTTP Request: GET %s/v2/status", node)
    message = caplog.records[0].getMessage()
    assert "sk_node_secret" not in message and message.endswith("/v2/status")
