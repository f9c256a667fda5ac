"""The on-chain facilitator (`{facilitator_url}`) for the EVM chains of the sandbox.

`GET /health`, `GET /supported`, `POST /verify`, `POST /settle`, no credential. For an
EVM permit proof, `/verify` checks everything without touching the chain's state
(signature, spender, value, deadline, nonce, balance); `/settle` checks the same, then
sends `permit(...)` and `transferFrom(owner, payTo, maxAmountRequired)` from its own hot
wallet, which pays the gas. Settlements are serialized per chain: one hot wallet, one
transaction nonce sequence, and a permit nonce checked under the same lock cannot be
settled twice.

`/supported` lists one kind per network and asset: the EVM tokens with the hot wallet as
`extra.spender`, and the chain-A assets (chain A itself is settled elsewhere).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import anyio
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ._anvil import load_token_artifact
from ._bank import BankError
from ._eip712 import permit_typed_data, recover_typed_data, split_signature
from ._faults import FaultMiddleware, Faults
from ._http_util import json_body, json_response
from ._wire import (
    CHAIN_A_ASSETS,
    CHAIN_A_NETWORK,
    EVM_NETWORKS,
    PermitPayload,
    ProofError,
    WireError,
    decode_proof,
    proof_from_object,
)

if TYPE_CHECKING:
    from web3 import AsyncHTTPProvider, AsyncWeb3

__all__ = [
    "OnchainFacilitator",
    "PermitCheck",
    "Requirements",
    "SettlementRequest",
    "onchain_facilitator_app",
]

_PERMIT_GAS = 200_000
_TRANSFER_GAS = 150_000
_RECEIPT_TIMEOUT = 30.0


@dataclasses.dataclass(frozen=True)
class Requirements:
    """`paymentRequirements` of a settlement request: what the merchant asked for."""

    scheme: str
    network: str
    max_amount_required: str
    pay_to: str
    asset: str


@dataclasses.dataclass(frozen=True)
class SettlementRequest:
    """Body of `POST /settle` and `POST /verify`: the `X-PAYMENT` value (or the decoded
    proof object) and the requirements it answers."""

    payment_payload: str | dict[str, Any]
    payment_requirements: Requirements

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> SettlementRequest:
        version = body.get("x402Version", 2)
        if isinstance(version, bool) or version != 2:
            raise WireError("x402Version: must be 2")
        payload = body.get("paymentPayload")
        if not isinstance(payload, (str, dict)):
            raise WireError("paymentPayload: the X-PAYMENT value or the proof object")
        raw = body.get("paymentRequirements")
        if not isinstance(raw, dict):
            raise WireError("paymentRequirements: an object is required")
        fields = {}
        for name, key in (
            ("scheme", "scheme"),
            ("network", "network"),
            ("max_amount_required", "maxAmountRequired"),
            ("pay_to", "payTo"),
            ("asset", "asset"),
        ):
            if not isinstance(raw.get(key), str):
                raise WireError(f"paymentRequirements.{key}: a string is required")
            fields[name] = raw[key]
        return cls(payment_payload=payload, payment_requirements=Requirements(**fields))


class PermitCheck:
    """The outcome of checking one settlement request: `reason` is None when valid."""

    def __init__(
        self,
        *,
        reason: str | None,
        network: str | None = None,
        payer: str | None = None,
        chain_id: int | None = None,
        token: str | None = None,
        payload: PermitPayload | None = None,
        amount: int = 0,
        pay_to: str | None = None,
    ) -> None:
        self.reason = reason
        self.network = network
        self.payer = payer
        self.chain_id = chain_id
        self.token = token
        self.payload = payload
        self.amount = amount
        self.pay_to = pay_to


class _Chain:
    def __init__(self, chain_id: int, rpc_url: str) -> None:
        from web3 import AsyncHTTPProvider, AsyncWeb3

        self.chain_id = chain_id
        self.provider = AsyncHTTPProvider(rpc_url, exception_retry_configuration=None)
        self.w3: AsyncWeb3[AsyncHTTPProvider] = AsyncWeb3(self.provider, middleware=[])
        self.lock = anyio.Lock()
        self.next_nonce: int | None = None
        self.names: dict[str, str] = {}


class OnchainFacilitator:
    """The facilitator as an ASGI app with state: web3 per chain and the hot wallet.

    `rpc_urls` maps chain ids to RPC URLs; `tokens` maps `(chain_id, symbol)` to token
    addresses; `hot_wallet_key` is a funded key (it pays the gas). Close with `aclose()`.
    """

    def __init__(
        self,
        *,
        rpc_urls: Mapping[int, str],
        tokens: Mapping[tuple[int, str], str],
        hot_wallet_key: str,
        faults: Faults | None = None,
    ) -> None:
        from eth_account import Account

        self._key = hot_wallet_key
        self.address: str = str(Account.from_key(hot_wallet_key).address)
        self.tokens = dict(tokens)
        self.faults = faults or Faults()
        self._chains = {chain_id: _Chain(chain_id, url) for chain_id, url in rpc_urls.items()}
        self._abi = load_token_artifact()["abi"]
        self.app = self._build_app()

    def __repr__(self) -> str:
        return f"OnchainFacilitator(address={self.address!r}, chains={sorted(self._chains)})"

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)

    async def aclose(self) -> None:
        for chain in self._chains.values():
            await chain.provider.disconnect()

    # --- the answers -------------------------------------------------------------------------

    def supported(self) -> dict[str, Any]:
        kinds: list[dict[str, Any]] = []
        for (chain_id, _symbol), token in self.tokens.items():
            kinds.append(
                {
                    "x402Version": 2,
                    "scheme": "exact",
                    "network": f"eip155:{chain_id}",
                    "asset": token,
                    "extra": {"spender": self.address},
                }
            )
        for asset in CHAIN_A_ASSETS:
            kinds.append(
                {"x402Version": 2, "scheme": "exact", "network": CHAIN_A_NETWORK, "asset": asset}
            )
        return {"kinds": kinds}

    async def check(self, request: SettlementRequest) -> PermitCheck:
        """Every check of a permit settlement, with no state change on the chain."""
        requirements = request.payment_requirements
        try:
            raw = request.payment_payload
            proof = decode_proof(raw) if isinstance(raw, str) else proof_from_object(raw)
        except ProofError:
            return PermitCheck(reason="Invalid payment proof")
        network = requirements.network
        chain_id = EVM_NETWORKS.get(network)
        if proof.scheme != "exact" or requirements.scheme != "exact":
            return PermitCheck(reason="Unsupported scheme", network=network)
        if chain_id is None or chain_id not in self._chains:
            return PermitCheck(reason=f"Unsupported network {network}", network=network)
        if proof.network != network:
            return PermitCheck(reason="Proof network does not match the requirements")
        chain = self._chains[chain_id]
        token = next(
            (
                address
                for (cid, _s), address in self.tokens.items()
                if cid == chain_id and address.lower() == requirements.asset.lower()
            ),
            None,
        )
        if token is None:
            return PermitCheck(reason=f"Unsupported asset {requirements.asset}", network=network)
        try:
            payload = PermitPayload.from_wire(proof.payload)
            required = int(requirements.max_amount_required)
        except ValueError:
            return PermitCheck(reason="Invalid permit payload", network=network)
        permit = payload
        result = PermitCheck(
            reason=None,
            network=network,
            payer=payload.owner,
            chain_id=chain_id,
            token=token,
            payload=payload,
            amount=required,
            pay_to=requirements.pay_to,
        )
        if permit.permit_owner.lower() != payload.owner.lower():
            result.reason = "Permit owner does not match the payload owner"
        elif permit.spender.lower() != self.address.lower():
            result.reason = f"Permit spender {permit.spender} is not this facilitator"
        elif permit.value < required:
            result.reason = "Permit value is below maxAmountRequired"
        elif permit.deadline <= int(time.time()):
            result.reason = "Payment expired: the permit deadline has passed"
        elif not requirements.pay_to.startswith("0x") or len(requirements.pay_to) != 42:
            result.reason = "payTo is not an address"
        if result.reason is not None:
            return result
        name = await self._token_name(chain, token)
        try:
            signer = recover_typed_data(
                permit_typed_data(
                    token_name=name,
                    chain_id=chain_id,
                    token=token,
                    owner=permit.permit_owner,
                    spender=permit.spender,
                    value=permit.value,
                    nonce=permit.nonce,
                    deadline=permit.deadline,
                ),
                payload.signature,
            )
        except Exception:  # any malformed signature is just an invalid one
            signer = None
        if signer is None or signer.lower() != payload.owner.lower():
            result.reason = "Invalid permit signature"
            return result
        contract = self._contract(chain, token)
        owner = chain.w3.to_checksum_address(payload.owner)
        nonce = int(await contract.functions.nonces(owner).call())
        if permit.nonce < nonce:
            result.reason = "Payment already used: the permit nonce is spent"
        elif permit.nonce > nonce:
            result.reason = f"Permit nonce {permit.nonce} is ahead of the token's nonce {nonce}"
        elif int(await contract.functions.balanceOf(owner).call()) < required:
            result.reason = "Insufficient token balance"
        return result

    async def settle(self, request: SettlementRequest) -> dict[str, Any]:
        network = request.payment_requirements.network
        chain = self._chains.get(EVM_NETWORKS.get(network, -1))
        if chain is None:
            return {"success": False, "errorReason": f"Unsupported network {network}"}
        # One hot wallet per chain: its transactions, and the nonce check, go one at a time.
        async with chain.lock:
            checked = await self.check(request)
            failure: dict[str, Any] = {
                "success": False,
                "network": network,
                "payer": checked.payer,
                "errorReason": checked.reason,
            }
            if checked.reason is not None:
                return failure
            assert checked.payload is not None
            assert checked.token is not None
            assert checked.pay_to is not None
            permit = checked.payload
            v, r, s = split_signature(checked.payload.signature)
            w3 = chain.w3
            owner = w3.to_checksum_address(permit.permit_owner)
            try:
                await self._transact(
                    chain,
                    checked.token,
                    "permit",
                    [
                        owner,
                        w3.to_checksum_address(permit.spender),
                        permit.value,
                        permit.deadline,
                        v,
                        r,
                        s,
                    ],
                    _PERMIT_GAS,
                )
            except _Reverted:
                failure["errorReason"] = "The permit was rejected on chain"
                return failure
            try:
                tx_hash = await self._transact(
                    chain,
                    checked.token,
                    "transferFrom",
                    [owner, w3.to_checksum_address(checked.pay_to), checked.amount],
                    _TRANSFER_GAS,
                )
            except _Reverted:
                failure["errorReason"] = "transferFrom was rejected on chain"
                return failure
        return {"success": True, "txHash": tx_hash, "network": network, "payer": owner}

    # --- chain access ------------------------------------------------------------------------

    def _contract(self, chain: _Chain, token: str) -> Any:
        return chain.w3.eth.contract(address=chain.w3.to_checksum_address(token), abi=self._abi)

    async def _token_name(self, chain: _Chain, token: str) -> str:
        name = chain.names.get(token.lower())
        if name is None:
            name = str(await self._contract(chain, token).functions.name().call())
            chain.names[token.lower()] = name
        return name

    async def _transact(
        self, chain: _Chain, token: str, function: str, args: list[Any], gas: int
    ) -> str:
        """Sign and send one hot-wallet transaction; wait for it. Caller holds `chain.lock`."""
        from eth_account import Account

        w3 = chain.w3
        if chain.next_nonce is None:
            chain.next_nonce = int(
                await w3.eth.get_transaction_count(w3.to_checksum_address(self.address), "pending")
            )
        data = self._contract(chain, token).encode_abi(function, args=args)
        tx = {
            "to": w3.to_checksum_address(token),
            "data": data,
            "value": 0,
            "gas": gas,
            "gasPrice": int(await w3.eth.gas_price),
            "nonce": chain.next_nonce,
            "chainId": chain.chain_id,
        }
        signed = Account.sign_transaction(tx, self._key)
        try:
            sent = await w3.eth.send_raw_transaction(signed.raw_transaction)
        except BaseException:
            chain.next_nonce = None  # unknown whether it was taken: ask the node next time
            raise
        chain.next_nonce += 1
        receipt = await w3.eth.wait_for_transaction_receipt(
            sent, timeout=_RECEIPT_TIMEOUT, poll_latency=0.02
        )
        tx_hash = "0x" + bytes(sent).hex()
        if receipt["status"] != 1:
            raise _Reverted(tx_hash)
        return tx_hash

    # --- HTTP ----------------------------------------------------------------------------------

    def _build_app(self) -> Starlette:
        faults = self.faults

        async def health(request: Request) -> Response:
            return json_response({"status": "ok", "spender": self.address})

        async def supported(request: Request) -> Response:
            await faults.before("supported", request)
            return json_response(self.supported())

        async def verify(request: Request) -> Response:
            body = await _settlement_request(request)
            checked = await self.check(body)
            answer: dict[str, Any] = {"isValid": checked.reason is None, "payer": checked.payer}
            if checked.reason is not None:
                answer["invalidReason"] = checked.reason
            return json_response(answer)

        async def settle(request: Request) -> Response:
            await faults.before("settle", request)
            body = await _settlement_request(request)
            result = await self.settle(body)
            await faults.after("settle", request)
            return json_response(result)

        async def bank_error(request: Request, exc: Exception) -> Response:
            assert isinstance(exc, BankError)
            return json_response(exc.body(), exc.status)

        return Starlette(
            routes=[
                Route("/health", health, methods=["GET"]),
                Route("/supported", supported, methods=["GET"]),
                Route("/verify", verify, methods=["POST"]),
                Route("/settle", settle, methods=["POST"]),
            ],
            exception_handlers={BankError: bank_error},
            middleware=[Middleware(FaultMiddleware)],
        )


class _Reverted(Exception):
    """A hot-wallet transaction was mined and reverted."""


async def _settlement_request(request: Request) -> SettlementRequest:
    body = await json_body(request)
    try:
        return SettlementRequest.from_wire(body)
    except WireError as exc:
        raise BankError(400, "InvalidRequest", str(exc)) from None


def onchain_facilitator_app(
    *,
    rpc_urls: Mapping[int, str],
    tokens: Mapping[tuple[int, str], str],
    hot_wallet_key: str,
    faults: Faults | None = None,
) -> OnchainFacilitator:
    """The on-chain facilitator, ready for `ServedApp`; `aclose()` it when done."""
    return OnchainFacilitator(
        rpc_urls=rpc_urls, tokens=tokens, hot_wallet_key=hot_wallet_key, faults=faults
    )
