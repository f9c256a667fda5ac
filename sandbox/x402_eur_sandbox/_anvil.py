"""A real local EVM chain for the sandbox, plus token deployment helpers.

This module starts anvil (from the npm package ``@foundry-rs/anvil``) as a
child process and deploys ``SandboxToken`` (an OpenZeppelin ERC-20 with
EIP-2612 permit and six decimals) onto it.

Transactions are signed locally with eth-account from a private key and sent
with ``eth_sendRawTransaction``; anvil's unlocked accounts are never relied on,
so the same helpers work against any JSON-RPC node. The keys in
``ANVIL_DEV_KEYS`` fund every transaction on a fresh anvil node.

web3 and eth-account are imported inside the functions that need them, so
importing this module stays cheap.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Sequence
from importlib import resources
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any

import anyio

if TYPE_CHECKING:
    from anyio.abc import Process
    from web3 import AsyncHTTPProvider, AsyncWeb3

__all__ = [
    "ANVIL_DEFAULT_MNEMONIC",
    "ANVIL_DEV_KEYS",
    "AnvilNode",
    "deploy_token",
    "find_anvil",
    "load_token_artifact",
    "mint",
    "native_balance",
    "permit_nonce",
    "send_eth",
    "token_balance",
    "token_call",
    "token_transact",
]

# The public anvil/hardhat test mnemonic and the private keys of its first
# five accounts (m/44'/60'/0'/0/i). These keys are published in the anvil and
# hardhat docs and hold no value anywhere: use them only on a local dev chain.
ANVIL_DEFAULT_MNEMONIC = "test test test test test test test test test test test junk"
ANVIL_DEV_KEYS: tuple[str, ...] = (
    # 0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266
    "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80",
    # 0x70997970C51812dc3A010C7d01b50e0d17dc79C8
    "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
    # 0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC
    "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a",
    # 0x90F79bf6EB2c4f870365E785982E1f101E93b906
    "0x7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6",
    # 0x15d34AAf54267DB7D7c367839AAf71A00a2C6A65
    "0x47e179ec197488593b187f80a00eb0da91f1b9d0b13f8733639f19c30a34926a",
)

_ANVIL_ENV_VAR = "X402_ANVIL_BIN"
_NOT_FOUND_MESSAGE = (
    "anvil not found: run `npm ci` in the project root "
    "(installs @foundry-rs/anvil) or set X402_ANVIL_BIN"
)
_ARTIFACT_FILE = "SandboxToken.json"
_RECEIPT_TIMEOUT_S = 30.0


def _platform_package() -> tuple[str, str] | None:
    """Return the npm package and binary name holding anvil for this platform."""
    machine = os.uname().machine.lower() if hasattr(os, "uname") else ""
    arch = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
    cpu = arch.get(machine)
    if sys.platform.startswith("linux"):
        system = "linux"
    elif sys.platform == "darwin":
        system = "darwin"
    elif sys.platform == "win32":
        return "anvil-win32-amd64", "anvil.exe"
    else:
        return None
    if cpu is None:
        return None
    return f"anvil-{system}-{cpu}", "anvil"


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _search_node_modules(start: Path) -> str | None:
    """Walk up from ``start`` looking for the platform anvil package."""
    plat = _platform_package()
    if plat is None:
        return None
    package, binary = plat
    for directory in (start, *start.parents):
        candidate = directory / "node_modules" / "@foundry-rs" / package / "bin" / binary
        if _is_executable(candidate):
            return str(candidate.resolve())
    return None


def find_anvil() -> str:
    """Return the path of the native anvil binary.

    The lookup order is the ``X402_ANVIL_BIN`` environment variable, then
    ``node_modules/@foundry-rs/anvil-<os>-<arch>/bin/anvil`` in the current
    directory, this file's directory or any of their parents, then ``anvil``
    on ``PATH``. The npm ``bin.mjs`` shim is never used. Raises
    ``RuntimeError`` when nothing is found.
    """
    override = os.environ.get(_ANVIL_ENV_VAR)
    if override:
        path = Path(override).expanduser()
        if not _is_executable(path):
            raise RuntimeError(f"{_ANVIL_ENV_VAR}={override} is not an executable file")
        return str(path)
    for start in (Path.cwd(), Path(__file__).resolve().parent):
        found = _search_node_modules(start)
        if found is not None:
            return found
    on_path = shutil.which("anvil")
    if on_path is not None:
        return on_path
    raise RuntimeError(_NOT_FOUND_MESSAGE)


def _free_port() -> int:
    """Ask the OS for a currently unused TCP port on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _rpc_call_blocking(url: str, method: str, params: list[Any], timeout: float) -> Any:
    """Send one JSON-RPC request with the standard library and return its result."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    request = urllib.request.Request(  # noqa: S310 - http URL built by AnvilNode
        url,
        data=body.encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    # An empty ProxyHandler keeps http_proxy settings away from 127.0.0.1.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=timeout) as response:
        payload = json.loads(response.read())
    if "error" in payload:
        raise RuntimeError(f"{method} failed: {payload['error']}")
    return payload["result"]


class AnvilNode:
    """A throwaway anvil node on 127.0.0.1, used as an async context manager.

    ``async with AnvilNode(chain_id=137) as node:`` starts anvil on a free
    port, waits until ``eth_chainId`` answers and exposes ``node.rpc_url`` and
    ``node.chain_id``. Leaving the block terminates the process (and kills it
    if it does not exit quickly). ``await node.start()`` and
    ``await node.stop()`` do the same by hand. The node automines (one block
    per transaction) and funds the accounts of ``ANVIL_DEFAULT_MNEMONIC``, so
    ``ANVIL_DEV_KEYS`` each hold ``balance_eth`` ether.
    """

    def __init__(
        self,
        chain_id: int = 31337,
        *,
        anvil_bin: str | None = None,
        accounts: int = 10,
        balance_eth: int = 10_000,
        startup_timeout: float = 20.0,
        extra_args: Sequence[str] = (),
    ) -> None:
        if accounts < len(ANVIL_DEV_KEYS):
            raise ValueError(f"accounts must be at least {len(ANVIL_DEV_KEYS)}")
        self.chain_id = chain_id
        self.anvil_bin = anvil_bin
        self.accounts = accounts
        self.balance_eth = balance_eth
        self.startup_timeout = startup_timeout
        self.extra_args = tuple(extra_args)
        self.port: int | None = None
        self._rpc_url: str | None = None
        self._process: Process | None = None
        self._log: IO[bytes] | None = None

    @property
    def rpc_url(self) -> str:
        """The HTTP JSON-RPC URL; only valid while the node runs."""
        if self._rpc_url is None:
            raise RuntimeError("AnvilNode is not running")
        return self._rpc_url

    @property
    def pid(self) -> int | None:
        """The process id of anvil, or None before start."""
        return None if self._process is None else self._process.pid

    @property
    def running(self) -> bool:
        """Whether the anvil process is alive."""
        return self._process is not None and self._process.returncode is None

    def _command(self, binary: str, port: int) -> list[str]:
        return [
            binary,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--chain-id",
            str(self.chain_id),
            "--accounts",
            str(self.accounts),
            "--balance",
            str(self.balance_eth),
            "--mnemonic",
            ANVIL_DEFAULT_MNEMONIC,
            "--silent",
            *self.extra_args,
        ]

    def _read_log(self) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read().decode(errors="replace").strip()

    async def start(self) -> AnvilNode:
        """Start anvil and wait until it answers JSON-RPC; returns ``self``."""
        if self._process is not None:
            raise RuntimeError("AnvilNode already started")
        binary = self.anvil_bin or find_anvil()
        last_error = ""
        for _attempt in range(3):
            port = _free_port()
            self._log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in stop()
            self._process = await anyio.open_process(
                self._command(binary, port),
                stdin=None,
                stdout=self._log,
                stderr=self._log,
            )
            url = f"http://127.0.0.1:{port}"
            try:
                ready = await self._wait_ready(url)
            except BaseException:
                await self.stop()
                raise
            if ready:
                self.port = port
                self._rpc_url = url
                return self
            last_error = self._read_log()
            await self.stop()
            if "in use" not in last_error.lower():
                break
        raise RuntimeError(f"anvil failed to start: {last_error or 'no output'}")

    async def _wait_ready(self, url: str) -> bool:
        """Poll ``eth_chainId`` until it answers; False if anvil exited early."""
        assert self._process is not None
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._process.returncode is not None:
                return False
            try:
                result = await anyio.to_thread.run_sync(
                    _rpc_call_blocking, url, "eth_chainId", [], 1.0
                )
            except (OSError, urllib.error.URLError, ValueError):
                await anyio.sleep(0.05)
                continue
            got = int(result, 16)
            if got != self.chain_id:
                raise RuntimeError(
                    f"port race: {url} answers chain id {got}, expected {self.chain_id}"
                )
            return True
        raise TimeoutError(
            f"anvil did not answer on {url} within {self.startup_timeout} s: "
            f"{self._read_log() or 'no output'}"
        )

    async def stop(self) -> None:
        """Terminate anvil (kill it after 5 s) and reap it; safe to call twice."""
        process, self._process = self._process, None
        self._rpc_url = None
        with anyio.CancelScope(shield=True):
            if process is not None:
                if process.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        process.terminate()
                    with anyio.move_on_after(5):
                        await process.wait()
                    if process.returncode is None:
                        with contextlib.suppress(ProcessLookupError):
                            process.kill()
                        await process.wait()
                await process.aclose()
            if self._log is not None:
                self._log.close()
                self._log = None

    async def __aenter__(self) -> AnvilNode:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()


# --- web3 helpers ---------------------------------------------------------


def load_token_artifact() -> dict[str, Any]:
    """Return the compiled SandboxToken artifact (abi, bytecode, compiler)."""
    package = resources.files("x402_eur_sandbox.contracts")
    data: dict[str, Any] = json.loads(package.joinpath(_ARTIFACT_FILE).read_text("utf-8"))
    return data


@contextlib.asynccontextmanager
async def _web3(rpc_url: str) -> AsyncIterator[AsyncWeb3[AsyncHTTPProvider]]:
    """Yield an ``AsyncWeb3`` over HTTP and close its aiohttp session after."""
    from web3 import AsyncHTTPProvider, AsyncWeb3

    provider = AsyncHTTPProvider(rpc_url)
    try:
        yield AsyncWeb3(provider)
    finally:
        await provider.disconnect()


def _checksum(address: str) -> Any:
    from web3 import Web3

    return Web3.to_checksum_address(address)


async def _sign_and_send(
    w3: AsyncWeb3[AsyncHTTPProvider], private_key: str, tx: dict[str, Any]
) -> dict[str, Any]:
    """Fill nonce and chain id, sign ``tx`` locally, send it and wait for success."""
    from eth_account import Account

    sender = Account.from_key(private_key)
    tx = dict(tx)
    tx.setdefault("from", sender.address)
    tx.setdefault("chainId", await w3.eth.chain_id)
    tx.setdefault("nonce", await w3.eth.get_transaction_count(sender.address, "pending"))
    if "gas" not in tx:
        tx["gas"] = await w3.eth.estimate_gas(tx)  # type: ignore[arg-type]
    if "maxFeePerGas" not in tx and "gasPrice" not in tx:
        block = await w3.eth.get_block("latest")
        base_fee = int(block.get("baseFeePerGas", 0))
        tip = 1_000_000_000
        tx["maxPriorityFeePerGas"] = tip
        tx["maxFeePerGas"] = 2 * base_fee + tip
    signed = sender.sign_transaction(tx)
    tx_hash = await w3.eth.send_raw_transaction(signed.raw_transaction)
    receipt = await w3.eth.wait_for_transaction_receipt(tx_hash, timeout=_RECEIPT_TIMEOUT_S)
    if receipt["status"] != 1:
        raise RuntimeError(f"transaction {tx_hash.to_0x_hex()} reverted")
    return dict(receipt)


async def deploy_token(rpc_url: str, deployer_key: str, name: str, symbol: str) -> str:
    """Deploy a SandboxToken and return its checksum address.

    The transaction is signed locally with ``deployer_key`` (for example
    ``ANVIL_DEV_KEYS[0]``), which becomes the token owner allowed to mint.
    """
    artifact = load_token_artifact()
    async with _web3(rpc_url) as w3:
        factory = w3.eth.contract(abi=artifact["abi"], bytecode=artifact["bytecode"])
        from eth_account import Account

        sender = Account.from_key(deployer_key).address
        tx = await factory.constructor(name, symbol).build_transaction(
            {"from": sender, "nonce": await w3.eth.get_transaction_count(sender, "pending")}
        )
        receipt = await _sign_and_send(w3, deployer_key, dict(tx))
    address = receipt.get("contractAddress")
    if not address:
        raise RuntimeError("deployment receipt has no contract address")
    return str(_checksum(str(address)))


async def token_transact(
    rpc_url: str, token: str, sender_key: str, function: str, *args: Any
) -> str:
    """Call a state-changing token function as ``sender_key``; return the tx hash.

    For example ``token_transact(url, token, key, "transferFrom", a, b, 5)``.
    Raises ``RuntimeError`` if the transaction reverts.
    """
    from eth_account import Account

    artifact = load_token_artifact()
    sender = Account.from_key(sender_key).address
    async with _web3(rpc_url) as w3:
        contract = w3.eth.contract(address=_checksum(token), abi=artifact["abi"])
        tx = await contract.functions[function](*args).build_transaction(
            {"from": sender, "nonce": await w3.eth.get_transaction_count(sender, "pending")}
        )
        receipt = await _sign_and_send(w3, sender_key, dict(tx))
    tx_hash: bytes = receipt["transactionHash"]
    return "0x" + bytes(tx_hash).hex()


async def token_call(rpc_url: str, token: str, function: str, *args: Any) -> Any:
    """Call a read-only token function (``eth_call``) and return its result."""
    artifact = load_token_artifact()
    async with _web3(rpc_url) as w3:
        contract = w3.eth.contract(address=_checksum(token), abi=artifact["abi"])
        return await contract.functions[function](*args).call()


async def mint(rpc_url: str, token: str, owner_key: str, to: str, amount_atomic: int) -> str:
    """Mint ``amount_atomic`` (6-decimal units) to ``to``; return the tx hash."""
    return await token_transact(rpc_url, token, owner_key, "mint", _checksum(to), amount_atomic)


async def token_balance(rpc_url: str, token: str, address: str) -> int:
    """Return the token balance of ``address`` in atomic units."""
    return int(await token_call(rpc_url, token, "balanceOf", _checksum(address)))


async def permit_nonce(rpc_url: str, token: str, owner: str) -> int:
    """Return the EIP-2612 ``nonces(owner)`` value of the token."""
    return int(await token_call(rpc_url, token, "nonces", _checksum(owner)))


async def native_balance(rpc_url: str, address: str) -> int:
    """Return the native (ETH) balance of ``address`` in wei."""
    async with _web3(rpc_url) as w3:
        return int(await w3.eth.get_balance(_checksum(address)))


async def send_eth(rpc_url: str, from_key: str, to: str, amount_wei: int) -> str:
    """Send ``amount_wei`` of native currency from ``from_key`` to ``to``; return tx hash."""
    async with _web3(rpc_url) as w3:
        receipt = await _sign_and_send(
            w3, from_key, {"to": _checksum(to), "value": amount_wei, "gas": 21_000}
        )
    tx_hash: bytes = receipt["transactionHash"]
    return "0x" + bytes(tx_hash).hex()
