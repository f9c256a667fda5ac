"""The Solana JSON-RPC API of a `SolanaNode`, in the shapes the real RPC answers.

`POST /` takes a JSON-RPC 2.0 request (or a batch) and answers as an agave RPC node does:
results under `{"context": {"slot"}, "value"}` where the real API wraps them, errors with
the real codes (-32002 a failed preflight with its simulation in `data`, -32003 a bad
signature, -32015 a v0 transaction asked for without `maxSupportedTransactionVersion`,
-32601 an unknown method, -32602 bad parameters). `GET /health` answers `ok`.

Methods: getAccountInfo, getBalance, getBlockHeight, getEpochInfo, getFeeForMessage,
getGenesisHash, getHealth, getLatestBlockhash, getMinimumBalanceForRentExemption,
getMultipleAccounts, getRecentPrioritizationFees, getSignatureStatuses,
getSignaturesForAddress, getSlot, getTokenAccountBalance, getTokenAccountsByOwner,
getTransaction, isBlockhashValid, requestAirdrop, sendTransaction, simulateTransaction.
Account data comes as `base64`, `base58`, or `jsonParsed` for mints and token accounts
of SPL Token and Token-2022 (other accounts fall back to base64, as the RPC does).

Every method is a fault endpoint `solana:<method>` of the node's `Faults`: a fault armed
`when="after"` strikes once the method ran, so a `sendTransaction` whose answer is lost
has landed all the same.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

from solders.message import MessageV0, from_bytes_versioned
from solders.pubkey import Pubkey
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from ._bank import BankError
from ._faults import FaultMiddleware
from ._solana import (
    COMPUTE_BUDGET_PROGRAM,
    GENESIS_HASHES,
    LAMPORTS_PER_SIGNATURE,
    TOKEN_2022_PROGRAM,
    TOKEN_PROGRAM,
    LandedTransaction,
    RpcError,
    SolanaNode,
    b58encode,
    decode_wire,
    parse_mint,
    parse_token_account,
    ui_token_amount,
)

__all__ = ["METHODS", "SolanaRpc", "solana_rpc_app"]

METHODS = (
    "getAccountInfo",
    "getBalance",
    "getBlockHeight",
    "getEpochInfo",
    "getFeeForMessage",
    "getGenesisHash",
    "getHealth",
    "getLatestBlockhash",
    "getMinimumBalanceForRentExemption",
    "getMultipleAccounts",
    "getRecentPrioritizationFees",
    "getSignatureStatuses",
    "getSignaturesForAddress",
    "getSlot",
    "getTokenAccountBalance",
    "getTokenAccountsByOwner",
    "getTransaction",
    "isBlockhashValid",
    "requestAirdrop",
    "sendTransaction",
    "simulateTransaction",
)

_MAX_U64 = 2**64 - 1
_PROGRAM_NAMES = {TOKEN_PROGRAM: "spl-token", TOKEN_2022_PROGRAM: "spl-token-2022"}
_EXTENSIONS = {7: "immutableOwner"}
_MAX_SIGNATURES = 256
_V0_UNSUPPORTED = (
    "Transaction version (0) is not supported by the requesting client. Please try the "
    'request again with the following configuration parameter: "maxSupportedTransactionVersion": 0'
)


def _config(params: list[Any], index: int) -> dict[str, Any]:
    value = params[index] if len(params) > index else None
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RpcError(-32602, "Invalid params: the configuration must be an object")
    return value


def _text(params: list[Any], index: int, what: str) -> str:
    if len(params) <= index or not isinstance(params[index], str):
        raise RpcError(-32602, f"Invalid params: {what} is required")
    return str(params[index])


def _pubkey(params: list[Any], index: int) -> str:
    text = _text(params, index, "an address")
    try:
        return str(Pubkey.from_string(text))
    except ValueError:
        raise RpcError(-32602, "Invalid param: Invalid") from None


class SolanaRpc:
    """The methods: each takes the request's `params` and returns its `result`."""

    def __init__(self, node: SolanaNode) -> None:
        self.node = node
        self.methods: dict[str, Callable[[list[Any]], Any]] = {
            name: getattr(self, name) for name in METHODS
        }

    def _context(self, value: Any) -> dict[str, Any]:
        return {"context": {"slot": self.node.slot}, "value": value}

    # --- chain -----------------------------------------------------------------------------

    def getSlot(self, params: list[Any]) -> int:
        return self.node.slot

    def getBlockHeight(self, params: list[Any]) -> int:
        return self.node.block_height

    def getHealth(self, params: list[Any]) -> str:
        return "ok"

    def getGenesisHash(self, params: list[Any]) -> str:
        network = self.node.network
        known = GENESIS_HASHES.get(network)
        if known is not None:
            return known
        reference = network.split(":", 1)[-1]
        return reference + b58encode(reference.encode())[:12]

    def getEpochInfo(self, params: list[Any]) -> dict[str, Any]:
        slot = self.node.slot
        return {
            "absoluteSlot": slot,
            "blockHeight": self.node.block_height,
            "epoch": slot // 432_000,
            "slotIndex": slot % 432_000,
            "slotsInEpoch": 432_000,
            "transactionCount": len(self.node.transactions),
        }

    def getLatestBlockhash(self, params: list[Any]) -> dict[str, Any]:
        slot, blockhash, last_valid = self.node.latest()
        value = {"blockhash": blockhash, "lastValidBlockHeight": last_valid}
        return {"context": {"slot": slot}, "value": value}

    def isBlockhashValid(self, params: list[Any]) -> dict[str, Any]:
        blockhash = _text(params, 0, "a blockhash")
        try:
            valid = self.node.blockhash_slot(blockhash) is not None
        except ValueError:
            raise RpcError(-32602, "Invalid param: Invalid") from None
        return self._context(valid)

    def getRecentPrioritizationFees(self, params: list[Any]) -> list[dict[str, Any]]:
        return [{"slot": self.node.slot, "prioritizationFee": 0}]

    def getMinimumBalanceForRentExemption(self, params: list[Any]) -> int:
        if not params or not isinstance(params[0], int) or isinstance(params[0], bool):
            raise RpcError(-32602, "Invalid params: a data length is required")
        return self.node.rent_exempt_minimum(params[0])

    def getFeeForMessage(self, params: list[Any]) -> dict[str, Any]:
        try:
            message = from_bytes_versioned(base64.b64decode(_text(params, 0, "a message")))
        except ValueError:
            raise RpcError(-32602, "Invalid params: invalid message") from None
        if self.node.blockhash_slot(message.recent_blockhash) is None:
            return self._context(None)
        return self._context(_fee(message))

    # --- accounts --------------------------------------------------------------------------

    def getBalance(self, params: list[Any]) -> dict[str, Any]:
        return self._context(self.node.balance(_pubkey(params, 0)))

    def getAccountInfo(self, params: list[Any]) -> dict[str, Any]:
        address = _pubkey(params, 0)
        encoding = _config(params, 1).get("encoding", "binary")
        return self._context(self._account(address, encoding))

    def getMultipleAccounts(self, params: list[Any]) -> dict[str, Any]:
        if not params or not isinstance(params[0], list) or len(params[0]) > 100:
            raise RpcError(-32602, "Invalid params: a list of at most 100 addresses")
        encoding = _config(params, 1).get("encoding", "base64")
        addresses = [_pubkey(params[0], i) for i in range(len(params[0]))]
        return self._context([self._account(a, encoding) for a in addresses])

    def _account(self, address: str, encoding: str) -> dict[str, Any] | None:
        account = self.node.account(address)
        if account is None:
            return None
        return encode_account(self.node, account, encoding)

    def getTokenAccountBalance(self, params: list[Any]) -> dict[str, Any]:
        address = _pubkey(params, 0)
        if self.node.account(address) is None:
            raise RpcError(-32602, "Invalid param: could not find account")
        state = self.node.token_account(address)
        if state is None:
            raise RpcError(-32602, "Invalid param: not a Token account")
        decimals = self.node.decimals_of(state["mint"]) or 0
        return self._context(ui_token_amount(state["amount"], decimals))

    def getTokenAccountsByOwner(self, params: list[Any]) -> dict[str, Any]:
        owner = _pubkey(params, 0)
        wanted = _config(params, 1)
        encoding = _config(params, 2).get("encoding", "binary")
        mint = wanted.get("mint")
        programs = [str(wanted["programId"])] if "programId" in wanted else []
        if mint is not None:
            program = self.node.token_program_of(str(mint))
            if program is None:
                raise RpcError(-32602, "Invalid param: could not find mint")
            programs = [program]
        if not programs or programs[0] not in _PROGRAM_NAMES:
            raise RpcError(-32602, "Invalid param: unrecognized Token program id")
        found = []
        for address, account in self.node.accounts_of(programs[0]):
            state = parse_token_account(bytes(account.data))
            if state is None or state["owner"] != owner:
                continue
            if mint is None or state["mint"] == mint:
                found.append(
                    {"pubkey": address, "account": encode_account(self.node, account, encoding)}
                )
        return self._context(found)

    # --- transactions ----------------------------------------------------------------------

    def sendTransaction(self, params: list[Any]) -> str:
        config = _config(params, 1)
        raw = decode_wire(_text(params, 0, "a transaction"), config.get("encoding", "base58"))
        return self.node.send_transaction(raw, skip_preflight=bool(config.get("skipPreflight")))

    def simulateTransaction(self, params: list[Any]) -> dict[str, Any]:
        config = _config(params, 1)
        raw = decode_wire(_text(params, 0, "a transaction"), config.get("encoding", "base58"))
        value = self.node.simulate_transaction(
            raw,
            sig_verify=bool(config.get("sigVerify")),
            replace_recent_blockhash=bool(config.get("replaceRecentBlockhash")),
        )
        return self._context(value)

    def requestAirdrop(self, params: list[Any]) -> str:
        address = _pubkey(params, 0)
        lamports = params[1] if len(params) > 1 else None
        if not isinstance(lamports, int) or isinstance(lamports, bool) or lamports <= 0:
            raise RpcError(-32602, "Invalid params: lamports must be a positive integer")
        return self.node.airdrop(address, lamports)

    def getSignatureStatuses(self, params: list[Any]) -> dict[str, Any]:
        if not params or not isinstance(params[0], list):
            raise RpcError(-32602, "Invalid params: a list of signatures is required")
        if len(params[0]) > _MAX_SIGNATURES:
            raise RpcError(-32602, f"Too many inputs provided; max {_MAX_SIGNATURES}")
        statuses = []
        for signature in params[0]:
            landed = self.node.landed(str(signature))
            statuses.append(None if landed is None else _status(landed))
        return self._context(statuses)

    def getSignaturesForAddress(self, params: list[Any]) -> list[dict[str, Any]]:
        address = _pubkey(params, 0)
        config = _config(params, 1)
        limit = config.get("limit") or 1000
        if not isinstance(limit, int) or not 1 <= limit <= 1000:
            raise RpcError(-32602, "Invalid param: limit must be between 1 and 1000")
        found = self.node.signatures_for(address)
        signatures = [landed.signature for landed in found]
        before, until = config.get("before"), config.get("until")
        start = signatures.index(before) + 1 if before in signatures else 0
        end = signatures.index(until) if until in signatures else len(found)
        return [
            {
                "signature": landed.signature,
                "slot": landed.slot,
                "err": landed.err,
                "memo": landed.memo,
                "blockTime": landed.block_time,
                "confirmationStatus": "finalized",
            }
            for landed in found[start:end][:limit]
        ]

    def getTransaction(self, params: list[Any]) -> dict[str, Any] | None:
        signature = _text(params, 0, "a signature")
        config = _config(params, 1)
        encoding = config.get("encoding", "json")
        if encoding not in ("json", "base64", "base58"):
            raise RpcError(-32602, f"Invalid params: unsupported encoding: {encoding}")
        landed = self.node.landed(signature)
        if landed is None:
            return None
        max_version = config.get("maxSupportedTransactionVersion")
        if landed.version != "legacy" and max_version is None:
            raise RpcError(-32015, _V0_UNSUPPORTED)
        answer: dict[str, Any] = {
            "slot": landed.slot,
            "blockTime": landed.block_time,
            "transaction": _encode_transaction(landed, encoding),
            "meta": _meta(landed),
        }
        if max_version is not None:
            answer["version"] = landed.version
        return answer


# --- shapes (pure) -----------------------------------------------------------------------


def encode_account(node: SolanaNode, account: Any, encoding: str) -> dict[str, Any]:
    """An account as the RPC encodes it (`data` per `encoding`)."""
    raw = bytes(account.data)
    owner = str(account.owner)
    data: Any
    if encoding == "jsonParsed" and owner in _PROGRAM_NAMES:
        data = _parsed(node, owner, raw)
    else:
        data = None
    if data is None:
        if encoding == "binary":
            data = b58encode(raw)
        elif encoding == "base58":
            data = [b58encode(raw), "base58"]
        elif encoding in ("base64", "jsonParsed"):
            data = [base64.b64encode(raw).decode("ascii"), "base64"]
        else:
            raise RpcError(-32602, f"Invalid params: unsupported encoding: {encoding}")
    return {
        "data": data,
        "executable": bool(account.executable),
        "lamports": int(account.lamports),
        "owner": owner,
        "rentEpoch": min(int(account.rent_epoch), _MAX_U64),
        "space": len(raw),
    }


def _parsed(node: SolanaNode, program: str, raw: bytes) -> dict[str, Any] | None:
    """`jsonParsed` data of a mint or token account, as the RPC's account decoder gives."""
    mint = parse_mint(raw)
    if mint is not None:
        info: dict[str, Any] = {**mint, "supply": str(mint["supply"])}
        kind = "mint"
    else:
        account = parse_token_account(raw)
        if account is None:
            return None
        decimals = node.decimals_of(account["mint"]) or 0
        info = {
            "isNative": account["isNative"],
            "mint": account["mint"],
            "owner": account["owner"],
            "state": account["state"],
            "tokenAmount": ui_token_amount(account["amount"], decimals),
        }
        if account["delegate"] is not None:
            info["delegate"] = account["delegate"]
            info["delegatedAmount"] = ui_token_amount(account["delegatedAmount"], decimals)
        if account["closeAuthority"] is not None:
            info["closeAuthority"] = account["closeAuthority"]
        kind = "account"
    if program == TOKEN_2022_PROGRAM and len(raw) > 165:
        info["extensions"] = _extensions(raw[166:])
    return {
        "program": _PROGRAM_NAMES[program],
        "parsed": {"info": info, "type": kind},
        "space": len(raw),
    }


def _extensions(tlv: bytes) -> list[dict[str, Any]]:
    found = []
    while len(tlv) >= 4:
        kind = int.from_bytes(tlv[0:2], "little")
        length = int.from_bytes(tlv[2:4], "little")
        if kind == 0:
            break
        found.append({"extension": _EXTENSIONS.get(kind, "unparseableExtension")})
        tlv = tlv[4 + length :]
    return found


def _fee(message: Any) -> int:
    """The fee of a message: 5000 lamports a signature, plus its compute budget's price
    (microlamports a unit) times its limit, rounded up."""
    keys = [str(key) for key in message.account_keys]
    limit, price, others = None, 0, 0
    for ix in message.instructions:
        data = bytes(ix.data)
        if keys[ix.program_id_index] != COMPUTE_BUDGET_PROGRAM:
            others += 1
        elif data[:1] == b"\x02" and len(data) == 5:
            limit = int.from_bytes(data[1:5], "little")
        elif data[:1] == b"\x03" and len(data) == 9:
            price = int.from_bytes(data[1:9], "little")
    units = limit if limit is not None else min(1_400_000, 200_000 * others)
    priority = -(-price * units // 1_000_000)
    signatures = int(message.header.num_required_signatures)
    return LAMPORTS_PER_SIGNATURE * signatures + priority


def _status(landed: LandedTransaction) -> dict[str, Any]:
    return {
        "slot": landed.slot,
        "confirmations": None,
        "err": landed.err,
        "status": {"Ok": None} if landed.err is None else {"Err": landed.err},
        "confirmationStatus": "finalized",
    }


def _meta(landed: LandedTransaction) -> dict[str, Any]:
    return {
        "err": landed.err,
        "status": {"Ok": None} if landed.err is None else {"Err": landed.err},
        "fee": landed.fee,
        "preBalances": list(landed.pre_balances),
        "postBalances": list(landed.post_balances),
        "innerInstructions": list(landed.inner_instructions),
        "logMessages": list(landed.logs),
        "preTokenBalances": list(landed.pre_token_balances),
        "postTokenBalances": list(landed.post_token_balances),
        "rewards": [],
        "loadedAddresses": {"writable": [], "readonly": []},
        "computeUnitsConsumed": landed.units,
    }


def _encode_transaction(landed: LandedTransaction, encoding: str) -> Any:
    if encoding == "base64":
        return [base64.b64encode(landed.raw).decode("ascii"), "base64"]
    if encoding == "base58":
        return [b58encode(landed.raw), "base58"]
    from solders.transaction import VersionedTransaction

    tx = VersionedTransaction.from_bytes(landed.raw)
    message = tx.message
    header = message.header
    encoded: dict[str, Any] = {
        "accountKeys": list(landed.account_keys),
        "header": {
            "numRequiredSignatures": header.num_required_signatures,
            "numReadonlySignedAccounts": header.num_readonly_signed_accounts,
            "numReadonlyUnsignedAccounts": header.num_readonly_unsigned_accounts,
        },
        "recentBlockhash": str(message.recent_blockhash),
        "instructions": [
            {
                "programIdIndex": ix.program_id_index,
                "accounts": list(ix.accounts),
                "data": b58encode(bytes(ix.data)),
                "stackHeight": None,
            }
            for ix in message.instructions
        ],
    }
    if isinstance(message, MessageV0):
        encoded["addressTableLookups"] = [
            {
                "accountKey": str(lookup.account_key),
                "writableIndexes": list(lookup.writable_indexes),
                "readonlyIndexes": list(lookup.readonly_indexes),
            }
            for lookup in message.address_table_lookups
        ]
    return {"signatures": [str(s) for s in tx.signatures], "message": encoded}


# --- the app -----------------------------------------------------------------------------


def _error(request_id: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    error = RpcError(code, message, data).to_json()
    return {"jsonrpc": "2.0", "error": error, "id": request_id}


async def _answer(rpc: SolanaRpc, call: Any) -> dict[str, Any]:
    if not isinstance(call, dict) or call.get("jsonrpc") != "2.0":
        return _error(None, -32600, "Invalid request")
    request_id, method = call.get("id"), call.get("method")
    params = call.get("params", [])
    handler = rpc.methods.get(method) if isinstance(method, str) else None
    if handler is None:
        return _error(request_id, -32601, "Method not found")
    if not isinstance(params, list):
        return _error(request_id, -32602, "Invalid params: params must be an array")
    faults = rpc.node.faults
    await faults.before(f"solana:{method}")
    try:
        result = handler(params)
    except RpcError as exc:
        answer = {"jsonrpc": "2.0", "error": exc.to_json(), "id": request_id}
    else:
        answer = {"jsonrpc": "2.0", "result": result, "id": request_id}
    await faults.after(f"solana:{method}")
    return answer


def solana_rpc_app(node: SolanaNode) -> Starlette:
    """The node's JSON-RPC API as an ASGI app (`POST /`, `GET /health`)."""
    rpc = SolanaRpc(node)

    async def handle(request: Request) -> Response:
        try:
            body = json.loads(await request.body())
        except ValueError:
            return _json(_error(None, -32700, "Parse error"))
        if isinstance(body, list):
            if not body:
                return _json(_error(None, -32600, "Invalid request"))
            return _json([await _answer(rpc, call) for call in body])
        return _json(await _answer(rpc, body))

    async def health(request: Request) -> Response:
        return PlainTextResponse("ok")

    async def fault(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, BankError)
        return _json(_error(None, -32000, str(exc)), status=exc.status)

    return Starlette(
        routes=[Route("/", handle, methods=["POST"]), Route("/health", health)],
        middleware=[Middleware(FaultMiddleware)],
        exception_handlers={BankError: fault},
    )


def _json(body: Any, status: int = 200) -> Response:
    return Response(json.dumps(body), status_code=status, media_type="application/json")
