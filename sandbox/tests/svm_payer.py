"""A payer of `exact` Solana entries, written from the x402 foundation's
`scheme_exact_svm.md` with `solders` only (never the client's code), for the sandbox's tests.

`pay` builds a v0 transaction whose fee payer is `extra.feePayer` (its signature slot left
empty), with SetComputeUnitLimit, SetComputeUnitPrice, TransferChecked of the amount
between the associated token accounts under the mint's program (read with
`getAccountInfo`, like the decimals), and a Memo (`extra.memo`, or 16 random bytes
hex-encoded), signed by the payer alone. `Tweaks` departs from the spec, one way at a time.
"""

from __future__ import annotations

import base64
import dataclasses
import os
from collections.abc import Callable
from typing import Any

import httpx
from solders.hash import Hash
from solders.instruction import AccountMeta, Instruction
from solders.keypair import Keypair
from solders.message import MessageV0, to_bytes_versioned
from solders.pubkey import Pubkey
from solders.signature import Signature
from solders.transaction import VersionedTransaction

from x402_eur_sandbox._solana import (
    ASSOCIATED_TOKEN_PROGRAM,
    COMPUTE_BUDGET_PROGRAM,
    MEMO_PROGRAM,
    TOKEN_2022_PROGRAM,
    TOKEN_PROGRAM,
)

__all__ = ["FEE", "LIMIT", "PRICE", "Tweaks", "ata", "pay", "rpc"]

LIMIT = 20_000  # compute units
PRICE = 1  # microlamports a compute unit
#: What the fee payer pays for a payment: two signatures and the priority fee, rounded up.
FEE = 2 * 5000 + 1


async def rpc(url: str, method: str, *params: Any) -> Any:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": list(params)}
    async with httpx.AsyncClient(trust_env=False, timeout=30) as http:
        answer = (await http.post(url, json=body)).json()
    assert "error" not in answer, answer
    return answer["result"]


def ata(owner: Pubkey, mint: Pubkey, program: Pubkey) -> Pubkey:
    seeds = [bytes(owner), bytes(program), bytes(mint)]
    return Pubkey.find_program_address(seeds, Pubkey.from_string(ASSOCIATED_TOKEN_PROGRAM))[0]


@dataclasses.dataclass
class Tweaks:
    """Departures from the spec, one refusal each."""

    amount: int | None = None
    price: int = PRICE
    program: str | None = None
    destination: Pubkey | None = None
    authority: Pubkey | None = None
    memo: bytes | None = None
    fee_payer: Pubkey | None = None
    blockhash: str | None = None
    sign: bool = True
    instructions: Callable[[list[Instruction]], list[Instruction]] = lambda ixs: ixs


async def pay(
    requirements: dict[str, Any], payer: Keypair, rpc_url: str, tweaks: Tweaks | None = None
) -> dict[str, Any]:
    """An x402 v2 `PaymentPayload` for an `exact` Solana entry, by the spec."""
    t = tweaks or Tweaks()
    mint = Pubkey.from_string(requirements["asset"])
    account = await rpc(rpc_url, "getAccountInfo", str(mint), {"encoding": "base64"})
    owner = account["value"]["owner"]
    assert owner in (TOKEN_PROGRAM, TOKEN_2022_PROGRAM)
    decimals = base64.b64decode(account["value"]["data"][0])[44]
    program = Pubkey.from_string(t.program or owner)
    pay_to = Pubkey.from_string(requirements["payTo"])
    amount = int(requirements["amount"]) if t.amount is None else t.amount
    authority = t.authority or payer.pubkey()
    extra_memo = requirements["extra"].get("memo")
    memo = t.memo or (extra_memo.encode() if extra_memo else os.urandom(16).hex().encode())
    budget = Pubkey.from_string(COMPUTE_BUDGET_PROGRAM)
    instructions = [
        Instruction(budget, bytes([2]) + LIMIT.to_bytes(4, "little"), []),
        Instruction(budget, bytes([3]) + t.price.to_bytes(8, "little"), []),
        Instruction(
            program,
            bytes([12]) + amount.to_bytes(8, "little") + bytes([decimals]),
            [
                AccountMeta(ata(authority, mint, program), is_signer=False, is_writable=True),
                AccountMeta(mint, is_signer=False, is_writable=False),
                AccountMeta(t.destination or ata(pay_to, mint, program), False, True),
                AccountMeta(authority, is_signer=True, is_writable=False),
            ],
        ),
        Instruction(Pubkey.from_string(MEMO_PROGRAM), memo, []),
    ]
    # The entry's hint when it has one (as the foundation's client does), else the RPC's.
    blockhash = t.blockhash or requirements["extra"].get("recentBlockhash")
    if not blockhash:
        blockhash = (await rpc(rpc_url, "getLatestBlockhash"))["value"]["blockhash"]
    fee_payer = t.fee_payer or Pubkey.from_string(requirements["extra"]["feePayer"])
    message = MessageV0.try_compile(
        fee_payer, t.instructions(instructions), [], Hash.from_string(blockhash)
    )
    signature = payer.sign_message(to_bytes_versioned(message)) if t.sign else Signature.default()
    signers = message.account_keys[: message.header.num_required_signatures]
    signatures = [signature if key == payer.pubkey() else Signature.default() for key in signers]
    tx = VersionedTransaction.populate(message, signatures)
    return {
        "x402Version": 2,
        "resource": {"url": "http://127.0.0.1/solana", "description": "", "mimeType": ""},
        "accepted": requirements,
        "payload": {"transaction": base64.b64encode(bytes(tx)).decode()},
    }
