"""The benchmark figures, in the order of the table, and their targets
(benchmarks/README.md, "Targets")."""

from __future__ import annotations

#: Every figure, in the order of the table.
FIGURES = (
    "latency",
    "latency_overhead",
    "passthrough",
    "latency_cpu",
    "throughput",
    "import_api",
    "import",
    "lazy_evm",
    "cli",
    "import_client_only",
    "evm_rpc",
    "eip3009",
    "eip3009_own",
    "gc",
    "gc_full",
    "memory",
    "latency_sandbox",
    "servers",
    "bridge_delay",
    "bridge_polls",
    "fleet_1",
    "fleet_2",
    "fleet_4",
    "fleet_8",
    "fleet_exact",
    "fleet_round_trips",
    "sessions_tx",
    "sessions_cpu",
)

#: 1a: a paid euro GET against the lean floor, ratio of medians.
LATENCY_RATIO = 1.03
#: 1b: the client's overhead on a paid euro GET, median minus the floor's median (µs).
OVERHEAD_US = 50.0
#: 1c: a non-402 GET against a bare httpx client, ratio of medians.
PASSTHROUGH_RATIO = 1.01
#: 2: paid requests per second at concurrency 50 against the floor's (at least).
THROUGHPUT_RATIO = 1.0
#: 3a, 3d: the usable import against `import httpx`.
IMPORT_RATIO = 1.3
#: 4a: JSON-RPC round trips per warm EVM permit payment.
EVM_ROUND_TRIPS = 1.0
#: 5: client CPU per EIP-3009 paid GET against the x402 foundation's client.
EIP3009_RATIO = 0.95
#: 5b: the client's own CPU per EIP-3009 paid GET over the pre-signed floor, against the
#: foundation's client's own CPU over the same floor.
EIP3009_OWN_RATIO = 0.25
#: 6: a garbage-collection pause longer than this (ms) is one too many.
GC_PAUSE_MS = 5.0
#: 7: peak RSS growth over a 200 MB paid streamed download (MB, less than).
MEMORY_MB = 2.0
#: 8a: the bridge's proof sent after `blockchainTxId` appears, median (s, less than).
BRIDGE_DELAY_S = 0.5
#: 8b: the bridge's polls per minute of waiting.
BRIDGE_POLLS_PER_MIN = 60.0
#: 9b: payments at the bank beyond a fleet's shared budget of exactly K (any run).
FLEET_OVERSPEND = 0.0
#: 9c: database round trips per warm payment on a PostgreSQL state.
FLEET_ROUND_TRIPS = 3.0
#: 10a: on-chain transactions per paid request, exact EIP-3009 over a session of N
#: requests: at least this share of N. A session costs three transactions whatever N (its
#: deposit, the merchant's claim and its settlement) where exact costs N: N/3 is the whole
#: saving a payer can make.
SESSIONS_TX_SHARE = 1 / 3
#: 10b: client CPU per paid request, a session over exact EIP-3009 (at most).
SESSIONS_CPU_RATIO = 1.5
