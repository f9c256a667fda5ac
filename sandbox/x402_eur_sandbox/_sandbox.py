"""`Sandbox`: every service of the protocol on 127.0.0.1, with money that is not money.

```python
async with Sandbox() as sandbox:                      # tests, notebooks (top-level await)
    client = with_eur_payment(httpx.AsyncClient(), sandbox.payment_config())
    response = await client.get(sandbox.merchant_url + "/weather")

with Sandbox.run_in_thread() as sandbox:              # scripts, sync code, shared fixtures
    ...
```

Services, each a real uvicorn server on its own free port: the payment API, the
managed-account facilitator (`mcp_url`, endpoints under `/x402`; the hosted MCP tool
server at `/mcp` when the `mcp` package is installed), and the merchant. `Sandbox(port=N)`
puts them on fixed ports instead (see `PORT_LAYOUT`).
`Sandbox(evm=True)` adds anvil chains 1 and 137 with EURQ/USDQ and the on-chain
facilitator; `Sandbox(chain_a=True)` adds the chain-A ledger, its indexer and the bridge;
`Sandbox(svm=True)` a Solana chain (`solana`) and the standard merchant's Solana routes;
`Sandbox(batch_settlement=True)` a `batch-settlement` merchant and its facilitator on the
standard merchant's chain and token (`batch`).
Those parts plug in as `SandboxPart`s.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator, Mapping
from decimal import Decimal
from types import TracebackType
from typing import Any, Protocol

from ._bank import Account, Bank
from ._discovery import Catalogue
from ._facilitator import facilitator_app
from ._faults import Faults
from ._hosted_mcp import HostedToolServer, mcp_available
from ._merchant import DEFAULT_PRICES, EuroOffer, MerchantGate, Offer, Price, merchant_app
from ._payment_api import payment_api_app
from ._server import ServedApp, stop_all

__all__ = [
    "ALLOW_HOSTS_ENV",
    "MERCHANT_ACCOUNT",
    "PAYER_ACCOUNT",
    "PORT_LAYOUT",
    "Sandbox",
    "SandboxPart",
]

PAYER_ACCOUNT = "ACC_SANDBOX_PAYER"
MERCHANT_ACCOUNT = "ACC_SANDBOX_MERCHANT"
#: `Sandbox(port=N)`: each service's offset from N. The optional parts (anvil chains, the
#: on-chain facilitator, the chain-A indexer) keep taking free ports.
PORT_LAYOUT = {"payment-api": 0, "facilitator": 1, "merchant": 2}
#: The variable `x402-eur mcp` reads the private hosts it may reach from.
ALLOW_HOSTS_ENV = "X402_EUR_MCP_ALLOW_HOSTS"


class SandboxPart(Protocol):
    """An optional part of the sandbox (EVM chains, chain A): started after the core
    services, stopped before them; contributes merchant offers in `start`."""

    async def start(self, sandbox: Sandbox) -> None: ...

    async def stop(self) -> None: ...


class Sandbox:
    """The whole sandbox. Balances are `Decimal` euros; `bank` is the provider's state.

    `port=N` serves the payment API on N, the facilitator on N+1 and the merchant on N+2
    (`PORT_LAYOUT`); a taken port raises `PortInUse` (an `OSError`) from `start`.
    """

    def __init__(
        self,
        *,
        payer_balance: Decimal | str = "100.00",
        merchant_balance: Decimal | str = "0",
        confirmation_delay: float = 0.0,
        request_lifetime: float = 300.0,
        prices: Mapping[str, Price] | None = None,
        evm: bool = False,
        chain_a: bool = False,
        bridge_delay: float = 0.5,
        parts: list[SandboxPart] | None = None,
        port: int | None = None,
        standard: bool = False,
        svm: bool = False,
        batch_settlement: bool = False,
    ) -> None:
        if port is not None and not 1 <= port <= 65535 - max(PORT_LAYOUT.values()):
            raise ValueError(f"port must be between 1 and {65535 - max(PORT_LAYOUT.values())}")

        def port_of(name: str) -> int | None:
            return None if port is None else port + PORT_LAYOUT[name]

        self.bank = Bank(confirmation_delay=confirmation_delay, request_lifetime=request_lifetime)
        self.faults = Faults()
        self.payer: Account = self.bank.open_account(payer_balance, code=PAYER_ACCOUNT)
        self.merchant: Account = self.bank.open_account(merchant_balance, code=MERCHANT_ACCOUNT)
        self.prices: dict[str, Price] = dict(DEFAULT_PRICES if prices is None else prices)
        self.offers: list[Offer] = []
        self._payment_api = ServedApp(
            payment_api_app(self.bank, self.faults), "payment-api", port=port_of("payment-api")
        )
        #: `{mcp_url}/mcp`; imports `mcp` on its first request only.
        self.tool_server = HostedToolServer(self.bank)
        #: The facilitator's discovery catalogue: the merchant's declared routes, asked
        #: for their 402 when it is read (`discovery_url`).
        self.catalogue = Catalogue(lambda: self.gate.challenges(self.merchant_url))
        self._mcp = ServedApp(
            facilitator_app(
                self.bank,
                lambda: self._mcp.url,
                self.faults,
                tool_server=self.tool_server,
                catalogue=self.catalogue,
            ),
            "facilitator",
            port=port_of("facilitator"),
        )
        self.gate: MerchantGate = merchant_app(
            prices=self.prices, offers=self.offers, faults=self.faults
        )
        self._merchant = ServedApp(self.gate, "merchant", port=port_of("merchant"))
        self.offers.append(
            EuroOffer(lambda: self._mcp.url, self.merchant.api_key, self.merchant.code)
        )
        self.parts: list[SandboxPart] = list(parts or [])
        self._optional_parts(
            evm=evm,
            chain_a=chain_a,
            bridge_delay=bridge_delay,
            standard=standard or batch_settlement,
            svm=svm,
        )
        #: The `batch-settlement` merchant and facilitator (`batch_settlement=True`, which
        #: implies `standard=True`): a `BatchSettlement` on the standard merchant's chain.
        self.batch: Any = None
        if batch_settlement:
            from ._batch_merchant import BatchSettlement

            self.batch = BatchSettlement()
            self.parts.append(self.batch)
        self._started: list[Any] = []

    def _optional_parts(
        self, *, evm: bool, chain_a: bool, bridge_delay: float, standard: bool, svm: bool
    ) -> None:
        self.evm: Any = None
        self.chain_a: Any = None
        if evm:
            from ._evm import EvmSandbox

            self.evm = EvmSandbox()
            self.parts.append(self.evm)
        if chain_a:
            from ._chain_a import ChainASandbox

            self.chain_a = ChainASandbox(bridge_delay=bridge_delay)
            self.parts.append(self.chain_a)
        #: A standard x402 v2 merchant (EIP-3009 euro token on chain 137), `standard=True`.
        self.standard: Any = None
        #: The Solana chain (`svm=True`, the `svm` extra): a `SolanaNode` whose mints and
        #: `exact` routes the standard merchant serves (`svm=True` implies `standard=True`).
        self.solana: Any = None
        if svm:
            from ._solana import SolanaNode

            self.solana = SolanaNode(faults=self.faults)
            self.parts.append(self.solana)
        if standard or svm:
            from ._standard import StandardMerchant

            # After `evm` (it deploys on evm's chain 137) and `solana` (its mints go there).
            self.standard = StandardMerchant(svm=svm)
            self.parts.append(self.standard)

    def __repr__(self) -> str:
        running = self._merchant.port is not None
        return f"Sandbox(merchant_url={self.merchant_url if running else None!r})"

    # --- URLs and credentials ------------------------------------------------------------------

    @property
    def payment_api_url(self) -> str:
        """`{api_url}`: the managed-account payment API."""
        return self._payment_api.url

    @property
    def mcp_url(self) -> str:
        """`{mcp_url}`: the managed-account facilitator lives under `{mcp_url}/x402`."""
        return self._mcp.url

    @property
    def discovery_url(self) -> str:
        """`{mcp_url}/x402`: the facilitator whose catalogue lists the merchant's declared
        routes (`/discovery/resources`, `/discovery/search`)."""
        return self.mcp_url + "/x402"

    @property
    def tool_server_url(self) -> str:
        """`{mcp_url}/mcp`: the hosted tool server (MCP over streamable HTTP)."""
        if not mcp_available():
            raise RuntimeError(
                "the hosted tool server needs the `mcp` package: pip install mcp "
                "(without it the sandbox does not serve /mcp)"
            )
        return self.mcp_url + "/mcp"

    @property
    def paid_tool_server_url(self) -> str:
        """`{standard.url}/mcp`: the standard merchant's paid MCP tool server (streamable
        HTTP; `standard=True` and the `mcp` package)."""
        if self.standard is None:
            raise RuntimeError(
                "the paid tool server runs with the standard merchant: standard=True"
            )
        if not mcp_available():
            raise RuntimeError("the paid tool server needs the `mcp` package: pip install mcp")
        return str(self.standard.mcp_url)

    @property
    def merchant_url(self) -> str:
        return self._merchant.url

    def url(self, path: str) -> str:
        """A merchant URL: `sandbox.url("/weather")`."""
        return self.merchant_url + path

    def payment_config(self, **overrides: Any) -> dict[str, Any]:
        """The client settings that pay as the sandbox payer, as plain data (keyword
        arguments override): `api_key`, `from_account`, `api_url`, and `evm` / `svm` /
        `assets` when those parts run. `with_eur_payment(client, sandbox.payment_config())` and
        `PaymentOptions.model_validate(...)` take it as it is."""
        values: dict[str, Any] = {
            "api_key": self.payer.api_key,
            "from_account": self.payer.code,
            "api_url": self.payment_api_url,
        }
        if self.evm is not None:
            values["evm"] = self.evm.evm_config()
        if self.standard is not None:
            values["assets"] = [self.standard.asset_config()]
            values.setdefault("evm", self.standard.evm_config())
        if self.solana is not None and self.standard is not None:
            values["svm"] = self.standard.svm_config()
            values["assets"] += self.standard.svm_asset_configs()
        values.update(overrides)
        return values

    @property
    def hosts(self) -> list[str]:
        """`127.0.0.1:PORT` of each service a paying client requests itself: the merchants
        and the facilitators. `x402-eur mcp` reaches only public addresses unless it
        admits these (`--allow-host`, or `X402_EUR_MCP_ALLOW_HOSTS` as `env()` sets it)."""
        from urllib.parse import urlsplit

        urls = [self.merchant_url, self.mcp_url]
        if self.evm is not None:
            urls.append(self.evm.facilitator_url)
        if self.standard is not None:
            urls.append(self.standard.url)
        if self.batch is not None:
            urls += [self.batch.url, self.batch.facilitator_url]
        if self.solana is not None:
            urls.append(self.solana.rpc_url)
            urls.append(self.standard.solana.facilitator_url)
        return [urlsplit(url).netloc for url in urls]

    def env(self) -> dict[str, str]:
        """The environment variables `PaymentOptions.from_env()` reads, for the sandbox payer,
        and the hosts `x402-eur mcp` admits (`X402_EUR_MCP_ALLOW_HOSTS`)."""
        env = {
            "X402_EUR_API_KEY": self.payer.api_key,
            "X402_EUR_ACCOUNT": self.payer.code,
            "X402_EUR_API_URL": self.payment_api_url,
            ALLOW_HOSTS_ENV: ",".join(self.hosts),
        }
        if self.evm is not None:
            env.update(self.evm.env())
        if self.standard is not None:
            asset = self.standard.asset_config()
            env["X402_EUR_ASSETS"] = ":".join(
                str(asset[key]) for key in ("chain_id", "address", "symbol", "currency", "decimals")
            )
            env.setdefault("X402_EUR_EVM_PRIVATE_KEY", self.standard.payer_key)
            # A session's deposit and refund are read from the chain: its RPC too.
            if self.standard.rpc_url:
                rpc = f"X402_EUR_RPC_URL_{self.standard.chain_id}"
                env.setdefault(rpc, self.standard.rpc_url)
        if self.solana is not None and self.standard is not None:
            svm = self.standard.svm_config()
            env["X402_EUR_SVM_SECRET_KEY"] = svm["secret_key"]
            env["X402_EUR_SVM_RPC_URL"] = svm["rpc_url"]
            env["X402_EUR_ASSETS"] = ",".join(
                [env["X402_EUR_ASSETS"]]
                + [
                    ":".join(
                        str(a[k]) for k in ("chain_id", "address", "symbol", "currency", "decimals")
                    )
                    for a in self.standard.svm_asset_configs()
                ]
            )
        return env

    def balance(self, account: Account | str) -> Decimal:
        return self.bank.balance(account if isinstance(account, str) else account.code)

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> Sandbox:
        try:
            for served in (self._payment_api, self._mcp, self._merchant):
                await served.start()
                self._started.append(served)
            # Its MCP session manager runs from the first /mcp request until this stops it.
            await self.tool_server.start(self)
            self._started.append(self.tool_server)
            for part in self.parts:
                await part.start(self)
                self._started.append(part)
        except BaseException:
            await self.stop()
            raise
        return self

    async def stop(self) -> None:
        started, self._started = self._started, []
        try:
            await stop_all(started)
        finally:
            await self.gate.aclose()

    async def __aenter__(self) -> Sandbox:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    @classmethod
    @contextlib.contextmanager
    def run_in_thread(cls, **kwargs: Any) -> Iterator[Sandbox]:
        """Run a sandbox in a background thread with its own event loop.

        For synchronous code, scripts and test sessions whose loop changes from test to
        test. The bank and faults are thread-safe and may be used from the caller's thread.
        """
        sandbox = cls(**kwargs)
        ready = threading.Event()
        failure: list[BaseException] = []
        control: dict[str, Any] = {}

        async def main() -> None:
            stop = asyncio.Event()
            control["loop"], control["stop"] = asyncio.get_running_loop(), stop
            try:
                async with sandbox:
                    ready.set()
                    await stop.wait()
            except BaseException as exc:
                failure.append(exc)
                ready.set()

        thread = threading.Thread(
            target=asyncio.run, args=(main(),), name="x402-sandbox", daemon=True
        )
        thread.start()
        ready.wait(timeout=120)
        if failure:
            thread.join(10)
            raise failure[0]
        if not ready.is_set():
            raise RuntimeError("the sandbox did not start within 120 s")
        try:
            yield sandbox
        finally:
            control["loop"].call_soon_threadsafe(control["stop"].set)
            thread.join(60)
