"""`x402-eur mcp`: an MCP server that lets any agent pay for HTTP, within a budget.

Six tools over one paying `httpx.AsyncClient` that lives as long as the server:

- `fetch(url, method, headers, body, max_amount, proof, resume_transaction_code)`: the
  resource, paid when it answers 402, with its receipt; the body is bounded
  (`--max-body-bytes`, 100 kB) and `truncated` says when it was cut;
- `quote(url, method)`: what the resource costs and whether each offer would be paid; pays
  nothing;
- `discover(facilitator, query, type, network, limit, offset, cursor)`: the paid
  resources a facilitator's discovery catalogue (x402 Bazaar) lists, each with its price
  options and whether each would be paid; pays nothing (a listing is a claim: `fetch`
  pays what the resource's own 402 asks);
- `payments(limit, unfinished)`: the latest ledger entries, newest first; with
  `unfinished`, the state's unfinished payments (every process's), each with its owning
  worker and whether it is live;
- `resume(id | all, headers)`: finishes one unfinished payment, or all those no live
  worker is making, through the same guarded client; never pays again;
- `budget()`: what each budget has left, and for every currency the server can pay its
  per-payment cap and whether a budget covers it.

Every result is `structuredContent` plus a text block holding the same JSON. Every failure
is a tool error (`isError`) whose `{"error": {...}}` says whether money moved
(`moneyMoved`: false, true or null for "may have"), with what recovery needs.

Configuration comes from the environment (`PaymentOptions.from_env()`) plus a budget
(`--budget 5.00/24h` or `X402_EUR_BUDGET`): without one the server refuses to start,
unless `--no-budget` allows it. A budget names its currency: offers in a currency that no
budget covers are refused (`--budget 5.00/24h --budget 2.00USD/24h` pays both).
Transport: stdio by default; `--http HOST:PORT` serves streamable HTTP, on a loopback
address only unless `--allow-remote`. Every HTTP request must name the listener in `Host`
(421 otherwise) and, when it carries an `Origin`, come from the listener itself or an
`--allow-origin` (403 otherwise), so a web page cannot drive the tools (DNS rebinding).
With `X402_EUR_MCP_TOKEN` set, every HTTP request must carry `Authorization: Bearer <token>`
(401 otherwise); only a listener on 127.0.0.1 may go without one, and then whoever reaches
it spends the budget.

Built on the `mcp` SDK's low-level `Server`, not `MCPServer`: the latter calls
`logging.basicConfig` on the root logger, and on stdio the process's stdout *is* the
protocol channel. Here logs go to stderr through one handler that blanks the API key and
the EVM key, and the SDK's stdio transport points fd 1 at stderr while it serves, so stray
output cannot corrupt the protocol. The `mcp` package is imported when serving only.

Proofs (`X-PAYMENT` values) are not the user's secret (they cannot move more money) but a
bearer token for one paid resource: they appear only where recovery needs them, in
money-moved errors and in `payments` entries not yet delivered, and never in logs.

Destinations: `fetch`, `quote` and `discover` (and the EVM rail's facilitator check) reach
public addresses only, checked after DNS resolution and on every redirect hop
(`_netguard.DestinationGuard`); `--allow-host HOST[:PORT]` and `X402_EUR_MCP_ALLOW_HOSTS`
admit more. A refusal is `DestinationRefused`: nothing was sent, no money moved.

Layout: `_tools` (the tools over one paying client), `_schemas` (how MCP describes them),
`_results` (bodies, budgets and errors with their recovery), `_http_guard` (Host, Origin
and bearer checks), `_server` (the MCP server and its transports), `_launch` (the
options and the checks before serving). Budgets, amounts, hosts, origins and the state
file are read as the command line reads them (`x402_client._frontend.common`).
"""

from __future__ import annotations

from .._frontend.common import (
    ALLOW_HOSTS_ENV,
    ALLOW_ORIGIN_ENV,
    BUDGET_ENV,
    MIN_TOKEN_LENGTH,
    TOKEN_ENV,
)
from .._protocol.budget_spec import parse_budget, parse_budgets
from ._http_guard import require_bearer, require_own_host
from ._launch import configure_parser, run
from ._results import ToolError
from ._schemas import TOOLS, ToolSpec
from ._server import build_server
from ._tools import DEFAULT_MAX_BODY_BYTES, PaymentTools

__all__ = [
    "ALLOW_HOSTS_ENV",
    "ALLOW_ORIGIN_ENV",
    "BUDGET_ENV",
    "DEFAULT_MAX_BODY_BYTES",
    "MIN_TOKEN_LENGTH",
    "TOKEN_ENV",
    "TOOLS",
    "PaymentTools",
    "ToolError",
    "ToolSpec",
    "build_server",
    "configure_parser",
    "parse_budget",
    "parse_budgets",
    "require_bearer",
    "require_own_host",
    "run",
]
