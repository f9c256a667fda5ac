"""EVM configuration fails early, and only where it must.

A private key outside secp256k1's range (zero, the group order or above; as before, the
wrong length or not hex) is a `ConfigurationError` when the options are made, not a foreign error
at the first payment, and the message never holds the key. An install without the `evm`
extra still pays euro entries: only the entries that need the extra are skipped, with the
command that installs it.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import anyio
import pytest

from tests.merchants import Reply, ScriptedMerchant, Seen
from x402_client import ConfigurationError, EvmOptions, PaymentOptions

ORDER = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141

INVALID_KEYS = [
    "0x" + "00" * 32,  # zero
    "00" * 32,
    "0x" + format(ORDER, "064x"),  # the group order itself
    "0x" + format(ORDER + 1, "064x"),
    "0x" + "ff" * 32,
]


@pytest.mark.parametrize("key", INVALID_KEYS)
def test_a_key_off_the_curve_is_refused_when_the_options_are_made(key: str) -> None:
    attempts = [
        lambda: EvmOptions(private_key=key),
        lambda: PaymentOptions(evm={"private_key": key}),
        lambda: PaymentOptions.from_env({"X402_EUR_EVM_PRIVATE_KEY": key}),
    ]
    for attempt in attempts:
        with pytest.raises(ConfigurationError, match="not a valid secp256k1 key") as caught:
            attempt()
        assert key.removeprefix("0x") not in str(caught.value)
    # The keys on either side of the valid range's ends are accepted.
    for value in (1, ORDER - 1):
        good = "0x" + format(value, "064x")
        assert EvmOptions(private_key=good).private_key.get_secret_value() == good


# --- without the evm extra ------------------------------------------------------------------

PERMIT_ENTRY = {
    "scheme": "exact",
    "network": "eip155:137",
    "asset": "0x" + "11" * 20,
    "maxAmountRequired": "100000",
    "payTo": "0x" + "22" * 20,
    "facilitator": "http://127.0.0.1:9",
    "extra": {"symbol": "EURQ", "spender": "0x" + "33" * 20},
}
EIP3009_ENTRY = {
    "scheme": "exact",
    "network": "eip155:8453",
    "asset": "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",  # USDC on Base
    "maxAmountRequired": "100000",
    "payTo": "0x" + "22" * 20,
    "extra": {"name": "USD Coin", "version": "2"},
}

#: Run in a process where the evm extra's packages cannot be imported.
WITHOUT_EXTRA = """
import sys
for name in ("eth_account", "eth_keys", "web3"):
    sys.modules[name] = None
import asyncio, json
import httpx
from x402_client import ConfigurationError, EvmOptions, NoSatisfiableOption, PaymentOptions
from x402_client import with_eur_payment

async def main(base):
    out = {}
    try:
        EvmOptions(private_key="0x" + "00" * 32)
    except ConfigurationError as exc:
        out["zero key"] = str(exc)
    options = PaymentOptions.from_env()
    async with with_eur_payment(httpx.AsyncClient(timeout=30), options) as client:
        paid = await client.get(base + "/both")
        out["status"] = paid.status_code
        out["rail"] = paid.extensions["x402_payment"].rail
        try:
            await client.get(base + "/evm")
        except NoSatisfiableOption as exc:
            out["skipped"] = [s.message for s in exc.skipped]
            out["money_moved"] = exc.money_moved
    out["loaded"] = [m for m in ("eth_account", "eth_keys", "web3") if sys.modules.get(m)]
    print(json.dumps(out))

asyncio.run(main(sys.argv[1]))
"""


def evm_and_euro(m: ScriptedMerchant, seen: Seen) -> Reply:
    if seen.path == "/evm":
        return m.challenge(PERMIT_ENTRY, EIP3009_ENTRY)
    if seen.proof is None:
        return m.challenge(PERMIT_ENTRY, EIP3009_ENTRY, m.entry("0.10"))
    valid, reason = m.verify(seen.proof)
    return Reply(200, {"paid": True}) if valid else m.challenge(m.entry("0.10"), error=reason)


@pytest.mark.anyio
async def test_without_the_evm_extra_euro_entries_are_still_paid(sandbox, payer, serve) -> None:
    merchant = ScriptedMerchant(sandbox.bank, sandbox.merchant.code, evm_and_euro)
    base = await serve(merchant)
    env = {
        **os.environ,
        "X402_EUR_API_KEY": payer.api_key,
        "X402_EUR_ACCOUNT": payer.code,
        "X402_EUR_API_URL": sandbox.payment_api_url,
        "X402_EUR_EVM_PRIVATE_KEY": "0x" + "42" * 32,
        "X402_EUR_RPC_URL_137": "http://127.0.0.1:9",
    }
    result = await anyio.run_process(
        [sys.executable, "-c", WITHOUT_EXTRA, base], env=env, check=False
    )
    assert result.returncode == 0, result.stderr.decode()
    out: dict[str, Any] = json.loads(result.stdout)
    assert "private_key is not a valid secp256k1 key" in out["zero key"]
    assert (out["status"], out["rail"]) == (200, "euro")
    assert len(merchant.paid_requests) == 1
    permit, eip3009 = out["skipped"]
    assert "EVM permits need the evm extra: pip install 'x402-eur[evm]'" in permit
    assert "EIP-3009 entries need the evm extra: pip install 'x402-eur[evm]'" in eip3009
    assert out["money_moved"] is False
    assert out["loaded"] == []
