"""The one-time Permit2 approval: `approve_permit2(options, chain_id, asset)` sends the
ERC-20 `approve(PERMIT2_ADDRESS, amount)` transaction that Permit2 payments (the `permit2`
rail, `_rails/permit2.py`) need, explicitly and only when called: paying never sends it.

web3 and eth-account (the `evm` extra) are imported when an approval is sent.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from .._protocol.assets import find_asset
from .._protocol.errors import ConfigurationError, X402Error
from .._protocol.redact import endpoint_url
from ._evm_signing import (
    ADDRESS_RE,
    SignerCache,
    check_chain_id,
    checksum_address,
    evm_extra_installed,
)
from .permit2 import (
    MAX_UINT256,
    PERMIT2_ADDRESS,
    PERMIT2_EVM_EXTRA_MISSING,
    ChainReader,
    RpcUnavailable,
)

if TYPE_CHECKING:
    from .._options import PaymentOptions

__all__ = ["Call", "Permit2Approval", "approve_permit2", "send_transaction"]

logger = logging.getLogger("x402_client")

_RPC_TIMEOUT = 10.0


@dataclasses.dataclass(frozen=True)
class Permit2Approval:
    """What `approve_permit2` did: the allowance `owner` gave Permit2 on `asset`
    (`amount`, atomic units), and the approval transaction's hash, or None when the
    allowance already covered `amount` and nothing was sent."""

    chain_id: int
    asset: str
    owner: str
    amount: int
    tx_hash: str | None
    spender: str = PERMIT2_ADDRESS


async def approve_permit2(
    options: PaymentOptions,
    chain_id: int,
    asset: str,
    amount: Decimal | str | None = None,
) -> Permit2Approval:
    """Approve Permit2 to move `asset` on `chain_id` for the key of `options.evm`: the
    one-time ERC-20 `approve(PERMIT2_ADDRESS, amount)` transaction that Permit2 payments
    need. The payer's key sends it and pays its gas (it needs the chain's native coin);
    nothing is paid to anyone.

    `amount` is in token units (a `Decimal` or a decimal string; the asset must then be
    known or declared in `options.assets`, for its decimals); None approves without limit
    (the usual one-time approval). When the allowance already covers `amount`, nothing is
    sent (`tx_hash` None). Waits for the transaction's receipt.

    Raises `ConfigurationError` without a key, an RPC URL for `chain_id`, the `evm` extra,
    or with a malformed asset or amount; `X402Error` when the chain refused or did not
    confirm the transaction (the message says which).
    """
    evm = options.evm
    if evm is None:
        raise ConfigurationError("approve_permit2 needs an EVM key (PaymentOptions.evm)")
    if not isinstance(asset, str) or not ADDRESS_RE.match(asset):
        raise ConfigurationError(f"asset {str(asset)[:50]!r} is not a 0x token address")
    # The RPC URLs stay out of these frames' locals (they may carry a key): they are read
    # from the options where they are used.
    if not evm.rpc_urls.get(chain_id):
        raise ConfigurationError(
            f"approve_permit2 needs an RPC URL for chain {chain_id} (EvmOptions.rpc_urls)"
        )
    if not evm_extra_installed():
        raise ConfigurationError(PERMIT2_EVM_EXTRA_MISSING)
    atomic = MAX_UINT256 if amount is None else _atomic_amount(options, chain_id, asset, amount)
    signer = SignerCache().signer(options)
    reader = ChainReader(evm.rpc_urls)
    try:
        try:
            current = await reader.allowance(chain_id, asset, signer.address, PERMIT2_ADDRESS)
        except RpcUnavailable as exc:
            raise X402Error(f"the allowance could not be read: {exc}") from None
    finally:
        await reader.aclose()
    if current >= atomic:
        return Permit2Approval(chain_id, checksum_address(asset), signer.address, current, None)
    tx_hash = await _send_approval(options, chain_id, asset, atomic)
    return Permit2Approval(chain_id, checksum_address(asset), signer.address, atomic, tx_hash)


def _atomic_amount(
    options: PaymentOptions, chain_id: int, asset: str, amount: Decimal | str
) -> int:
    known = find_asset(chain_id, asset, options.assets)
    if known is None:
        raise ConfigurationError(
            f"an amount needs the asset's decimals: declare {asset} on chain {chain_id} in "
            "PaymentOptions.assets, or approve without an amount"
        )
    try:
        value = Decimal(amount) if isinstance(amount, str) else amount
        if not isinstance(value, Decimal) or not value.is_finite() or value < 0:
            raise ValueError
        scaled = value.scaleb(known.decimals)
        if scaled != scaled.to_integral_value():
            raise ValueError
    except (ValueError, ArithmeticError):
        raise ConfigurationError(
            f"amount {str(amount)[:40]!r} is not a non-negative {known.symbol} amount with at "
            f"most {known.decimals} decimals"
        ) from None
    atomic = int(scaled)
    if atomic > MAX_UINT256:
        raise ConfigurationError("amount is out of uint256 range")
    return atomic


_APPROVE_ABI = [
    {
        "type": "function",
        "name": "approve",
        "stateMutability": "nonpayable",
        "inputs": [
            {"name": "spender", "type": "address"},
            {"name": "amount", "type": "uint256"},
        ],
        "outputs": [{"name": "", "type": "bool"}],
    }
]


async def _send_call(w3: Any, account: Any, shown: str, chain_id: int, call: Call) -> Any:
    """Check that the endpoint (`shown` as `endpoint_url` shows it) serves `chain_id`, then
    sign and send the contract call `call(w3)` builds; its hash as web3 returns it."""
    check_chain_id(shown, int(await w3.eth.chain_id), chain_id)
    tx = await call(w3).build_transaction(
        {
            "from": account.address,
            "chainId": chain_id,
            "nonce": await w3.eth.get_transaction_count(account.address, "pending"),
        }
    )
    signed = account.sign_transaction(dict(tx))
    return await w3.eth.send_raw_transaction(signed.raw_transaction)


async def _send_approval(options: PaymentOptions, chain_id: int, asset: str, atomic: int) -> str:
    def approve(w3: Any) -> Any:
        token = w3.eth.contract(address=w3.to_checksum_address(asset), abi=_APPROVE_ABI)
        return token.functions.approve(PERMIT2_ADDRESS, atomic)

    sent = await send_transaction(options, chain_id, "the Permit2 approval", approve)
    logger.info("x402: approved Permit2 for %s on eip155:%s", asset, chain_id)
    return sent


#: What builds a contract call, given a web3 instance: `lambda w3: contract.functions.f(...)`.
Call = Callable[[Any], Any]


async def send_transaction(options: PaymentOptions, chain_id: int, what: str, call: Call) -> str:
    """Send the contract call `call(w3)` builds from the options' key on the first endpoint
    of `chain_id` that takes it, and wait for its receipt; the transaction hash. `what`
    names it in errors (`"the Permit2 approval"`). The key pays the gas.

    A transaction that was sent is never sent again here: an error after sending says its
    hash, to look up before trying again."""
    import aiohttp
    from eth_account import Account
    from web3 import AsyncHTTPProvider, AsyncWeb3
    from web3.exceptions import TimeExhausted, Web3Exception

    from .._protocol.redact import guard_library_logs

    evm = options.evm
    assert evm is not None
    guard_library_logs()
    account = Account.from_key(evm.private_key.get_secret_value())
    failures: list[str] = []
    for index in range(len(evm.rpc_urls[chain_id])):
        shown = endpoint_url(evm.rpc_urls[chain_id][index])
        provider = AsyncHTTPProvider(
            evm.rpc_urls[chain_id][index],
            request_kwargs={"timeout": aiohttp.ClientTimeout(total=_RPC_TIMEOUT)},
            exception_retry_configuration=None,
        )
        w3 = AsyncWeb3(provider, middleware=[])
        sent: str | None = None
        try:
            raw_hash = await _send_call(w3, account, shown, chain_id, call)
            sent = "0x" + bytes(raw_hash).hex()
            receipt = await w3.eth.wait_for_transaction_receipt(raw_hash, timeout=120)
        except TimeExhausted:
            raise X402Error(
                f"{what} {sent} was sent but not confirmed within 120 s: look it up before "
                "trying again"
            ) from None
        except (OSError, TimeoutError, aiohttp.ClientError, Web3Exception, ValueError) as exc:
            if sent is not None:
                raise X402Error(
                    f"{what} {sent} was sent but its receipt could not be read "
                    f"({type(exc).__name__}): look it up before trying again"
                ) from None
            failures.append(f"{shown}: {_failure(exc)}")
            continue
        finally:
            await provider.disconnect()
        if int(receipt["status"]) != 1:
            raise X402Error(f"{what} {sent} reverted on eip155:{chain_id}")
        return sent
    raise X402Error(
        f"{what} was not sent: no RPC endpoint for chain {chain_id} took it ({'; '.join(failures)})"
    )


def _failure(exc: Exception) -> str:
    """An endpoint's refusal in a few words: a contract's revert says its reason (a custom
    error's data), anything else only its type (a message may carry the URL)."""
    from web3.exceptions import ContractCustomError, ContractLogicError

    if isinstance(exc, ContractCustomError | ContractLogicError):
        data = getattr(exc, "data", None)
        shown = data[:10] if isinstance(data, str) else str(exc.message)[:80]
        return f"reverted ({shown})"
    if "insufficient funds" in str(exc).lower():
        return "the key holds too little of the chain's coin to pay the gas"
    return type(exc).__name__
