"""`EvmSandbox`: the EVM part of the sandbox, `Sandbox(evm=True)`.

Two real anvil chains (ids 1 and 137) on free 127.0.0.1 ports, EURQ and USDQ deployed on
both as OpenZeppelin `ERC20Permit` tokens with 6 decimals, a fresh payer key that holds
tokens and no gas coin, a fresh merchant address, and the on-chain facilitator
(`_onchain`) whose hot wallet pays the gas. Its merchant offers are named after the
network (`"eip155:137"`, `"eip155:1"` for EURQ; `"eip155:137:USDQ"`, `"eip155:1:USDQ"`),
so a route picks them with `Price(..., rails=("eip155:137",))`.
"""

from __future__ import annotations

import contextlib
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import anyio
import httpx

from . import _wire as _json
from ._anvil import (
    ANVIL_DEV_KEYS,
    AnvilNode,
    deploy_token,
    find_anvil,
    mint,
    native_balance,
    permit_nonce,
    token_balance,
)
from ._eip712 import permit_typed_data, recover_typed_data
from ._merchant import Price, Verdict
from ._onchain import OnchainFacilitator
from ._server import ServedApp
from ._wire import EVM_NETWORKS, PermitPayload, Proof, to_atomic

if TYPE_CHECKING:
    from ._sandbox import Sandbox

__all__ = ["EVM_CHAIN_IDS", "TOKEN_NAMES", "EvmOffer", "EvmSandbox"]

EVM_CHAIN_IDS = (137, 1)
#: Symbol -> token `name()` (the EIP-712 domain name) of the sandbox tokens.
TOKEN_NAMES = {"EURQ": "Sandbox EURQ", "USDQ": "Sandbox USDQ"}
_DEPLOYER_KEY = ANVIL_DEV_KEYS[0]
_HOT_WALLET_KEY = ANVIL_DEV_KEYS[1]


class EvmOffer:
    """The merchant's `exact` offer for one token on one EVM chain, settled through the
    on-chain facilitator's `/settle`.

    The spender comes from the facilitator's `/supported`; tests can set
    `spender_override` to make the 402 lie about it.
    """

    def __init__(
        self,
        *,
        chain_id: int,
        symbol: str,
        token: str,
        token_name: str,
        pay_to: str,
        facilitator_url: str,
    ) -> None:
        self.chain_id = chain_id
        self.network = f"eip155:{chain_id}"
        self.symbol = symbol
        self.name = self.network if symbol == "EURQ" else f"{self.network}:{symbol}"
        self.token = token
        self.token_name = token_name
        self.pay_to = pay_to
        self.facilitator_url = facilitator_url
        self.spender_override: str | None = None

    def __repr__(self) -> str:
        return f"EvmOffer(name={self.name!r}, token={self.token!r})"

    def handles(self, proof: Proof) -> bool:
        # The permit payload does not name its token: the signature does. A proof is ours
        # when it recovers to its owner under this token's EIP-712 domain.
        if proof.scheme != "exact" or proof.network != self.network:
            return False
        try:
            permit = PermitPayload.from_wire(proof.payload)
            signer = recover_typed_data(
                permit_typed_data(
                    token_name=self.token_name,
                    chain_id=self.chain_id,
                    token=self.token,
                    owner=permit.permit_owner,
                    spender=permit.spender,
                    value=permit.value,
                    nonce=permit.nonce,
                    deadline=permit.deadline,
                ),
                permit.signature,
            )
        except Exception:
            return False
        return signer.lower() == permit.owner.lower()

    def requirements(self, price: Price, resource: str) -> dict[str, Any]:
        return {
            "scheme": "exact",
            "network": self.network,
            "maxAmountRequired": str(to_atomic(price.amount)),
            "payTo": self.pay_to,
            "asset": self.token,
            "resource": resource,
            "description": price.description or resource,
            "mimeType": price.mime_type,
            "maxTimeoutSeconds": 300,
        }

    async def spender(self, http: httpx.AsyncClient) -> str:
        if self.spender_override is not None:
            return self.spender_override
        response = await http.get(f"{self.facilitator_url}/supported")
        response.raise_for_status()
        kinds = _json.loads(response.content).get("kinds") or []
        for kind in kinds:
            asset = kind.get("asset") if isinstance(kind, dict) else None
            if kind.get("network") == self.network and str(asset).lower() == self.token.lower():
                spender = (kind.get("extra") or {}).get("spender")
                if isinstance(spender, str):
                    return spender
        raise RuntimeError(f"the facilitator does not support {self.symbol} on {self.network}")

    async def accept_entry(
        self, price: Price, resource: str, http: httpx.AsyncClient
    ) -> dict[str, Any] | None:
        entry = self.requirements(price, resource)
        entry["facilitator"] = self.facilitator_url
        entry["extra"] = {"symbol": self.symbol, "spender": await self.spender(http)}
        return entry

    async def verify(
        self,
        proof: Proof,
        header: str,
        price: Price,
        resource: str,
        http: httpx.AsyncClient,
    ) -> Verdict:
        response = await http.post(
            f"{self.facilitator_url}/settle",
            content=_json.dumps(
                {
                    "x402Version": 2,
                    "paymentPayload": header,
                    "paymentRequirements": self.requirements(price, resource),
                }
            ),
            headers={"Content-Type": "application/json"},
        )
        response.raise_for_status()
        result = _json.loads(response.content)
        if not isinstance(result, dict) or result.get("success") is not True:
            reason = result.get("errorReason") if isinstance(result, dict) else None
            return Verdict(False, reason if isinstance(reason, str) else "Settlement failed")
        return Verdict(
            True,
            settlement={
                "success": True,
                "transaction": result.get("txHash"),
                "network": self.network,
                "payer": result.get("payer"),
            },
        )


class EvmSandbox:
    """Anvil chains 1 and 137, EURQ/USDQ, the payer and merchant keys, the facilitator.

    `payer_funding` is minted to the payer in each token on each chain (no ETH).
    """

    def __init__(self, *, payer_funding: Decimal | str = "100") -> None:
        from eth_account import Account

        self.payer_funding = Decimal(payer_funding)
        self._payer_key: str = "0x" + bytes(Account.create().key).hex()
        self.payer_address: str = str(Account.from_key(self._payer_key).address)
        self.merchant_address: str = str(Account.create().address)
        self.hot_wallet_address: str = str(Account.from_key(_HOT_WALLET_KEY).address)
        self.nodes: dict[int, AnvilNode] = {}
        self.tokens: dict[tuple[int, str], str] = {}
        self.offers: list[EvmOffer] = []
        self.facilitator: OnchainFacilitator | None = None
        self._served: ServedApp | None = None
        self._sandbox_offers: list[Any] | None = None

    def __repr__(self) -> str:
        return (
            f"EvmSandbox(chains={sorted(self.nodes)}, payer={self.payer_address!r}, "
            f"merchant={self.merchant_address!r})"
        )

    @property
    def payer_key(self) -> str:
        """The payer's private key (sandbox only; never printed by `repr`)."""
        return self._payer_key

    @property
    def facilitator_url(self) -> str:
        if self._served is None:
            raise RuntimeError("the EVM sandbox is not running")
        return self._served.url

    def rpc_url(self, chain_id: int) -> str:
        return self.nodes[chain_id].rpc_url

    def token(self, chain_id: int, symbol: str = "EURQ") -> str:
        return self.tokens[(chain_id, symbol)]

    def offer(self, name: str) -> EvmOffer:
        """The offer named `name` (`"eip155:137"`, `"eip155:1:USDQ"`, ...)."""
        return next(offer for offer in self.offers if offer.name == name)

    def evm_config(self, **overrides: Any) -> dict[str, Any]:
        """The payer's EVM settings as plain data: the `evm` mapping of `payment_config()`
        (`private_key`, `rpc_urls` by chain id); keyword arguments override."""
        values: dict[str, Any] = {
            "private_key": self._payer_key,
            "rpc_urls": {chain: self.rpc_url(chain) for chain in sorted(self.nodes)},
        }
        values.update(overrides)
        return values

    def env(self) -> dict[str, str]:
        env = {"X402_EUR_EVM_PRIVATE_KEY": self._payer_key}
        for chain in sorted(self.nodes):
            env[f"X402_EUR_RPC_URL_{chain}"] = self.rpc_url(chain)
        return env

    # --- chain helpers -------------------------------------------------------------------------

    async def token_balance(self, chain_id: int, symbol: str, address: str) -> int:
        """Atomic token balance of `address`."""
        return await token_balance(self.rpc_url(chain_id), self.token(chain_id, symbol), address)

    async def native_balance(self, chain_id: int, address: str) -> int:
        """Native (gas coin) balance of `address`, in wei."""
        return await native_balance(self.rpc_url(chain_id), address)

    async def permit_nonce(self, chain_id: int, symbol: str, owner: str) -> int:
        return await permit_nonce(self.rpc_url(chain_id), self.token(chain_id, symbol), owner)

    async def fund(self, chain_id: int, symbol: str, address: str, amount: Decimal | str) -> None:
        """Mint `amount` (in currency units) of `symbol` to `address`."""
        await mint(
            self.rpc_url(chain_id),
            self.token(chain_id, symbol),
            _DEPLOYER_KEY,
            address,
            to_atomic(Decimal(amount)),
        )

    # --- lifecycle -------------------------------------------------------------------------------

    async def start(self, sandbox: Sandbox) -> None:
        try:
            await self._start(sandbox)
        except BaseException:
            await self.stop()
            raise

    async def _start(self, sandbox: Sandbox) -> None:
        find_anvil()  # one plain RuntimeError when anvil is missing, before any chain starts
        for chain_id in EVM_CHAIN_IDS:
            self.nodes[chain_id] = AnvilNode(chain_id)

        async def chain_up(chain_id: int) -> None:
            node = self.nodes[chain_id]
            await node.start()
            for symbol, name in TOKEN_NAMES.items():
                self.tokens[(chain_id, symbol)] = await deploy_token(
                    node.rpc_url, _DEPLOYER_KEY, name, symbol
                )
            if self.payer_funding > 0:
                for symbol in TOKEN_NAMES:
                    await self.fund(chain_id, symbol, self.payer_address, self.payer_funding)

        async with anyio.create_task_group() as group:
            for chain_id in EVM_CHAIN_IDS:
                group.start_soon(chain_up, chain_id)

        self.facilitator = OnchainFacilitator(
            rpc_urls={chain: node.rpc_url for chain, node in self.nodes.items()},
            tokens=self.tokens,
            hot_wallet_key=_HOT_WALLET_KEY,
            faults=sandbox.faults,
        )
        self._served = ServedApp(self.facilitator, "onchain-facilitator")
        await self._served.start()
        for symbol in TOKEN_NAMES:  # EURQ offers first
            for chain_id in EVM_CHAIN_IDS:
                assert f"eip155:{chain_id}" in EVM_NETWORKS
                offer = EvmOffer(
                    chain_id=chain_id,
                    symbol=symbol,
                    token=self.tokens[(chain_id, symbol)],
                    token_name=TOKEN_NAMES[symbol],
                    pay_to=self.merchant_address,
                    facilitator_url=self._served.url,
                )
                self.offers.append(offer)
                sandbox.offers.append(offer)
        self._sandbox_offers = sandbox.offers

    async def stop(self) -> None:
        with anyio.CancelScope(shield=True):
            offers, self._sandbox_offers = self._sandbox_offers, None
            if offers is not None:
                for offer in self.offers:
                    with contextlib.suppress(ValueError):
                        offers.remove(offer)
            self.offers = []
            if self._served is not None:
                await self._served.stop()
                self._served = None
            if self.facilitator is not None:
                await self.facilitator.aclose()
                self.facilitator = None
            for node in self.nodes.values():
                await node.stop()
