"""One journal and one set of budgets for a fleet of payers: a PostgreSQL state (extra
`postgres`: `pip install 'x402-eur[postgres]'`).

```python
from x402_client.postgres import PostgresStore

store = PostgresStore("postgresql://payer@db.internal/x402")   # the schema is made here
```

A `postgresql://` URL works wherever a state file does: `PaymentOptions(state_path=DSN)`,
`X402_EUR_STATE=DSN`, `x402-eur --state DSN`, `x402-eur mcp --state DSN`. Every worker on
every machine then shares the payment journal, the budgets (by the database's clock), the
owners of payments in flight (recovery on any machine takes over a dead worker's payment
and leaves a live one's alone) and the EVM permit nonce locks. The DSN is kept as a
`PostgresDsn`, which never shows its password. docs/fleet.md tells the whole story.
"""

from __future__ import annotations

from ._protocol.dsn import PostgresDsn
from ._state.postgres_store import PostgresStore, StateUnavailable

__all__ = ["PostgresDsn", "PostgresStore", "StateUnavailable"]
