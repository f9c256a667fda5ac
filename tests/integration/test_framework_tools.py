"""The agent frameworks' own tools pay (examples/agents/): each example runs as a user runs
it, in the frameworks' environment (tests/framework_tools.py: LangChain, its MCP adapters on
`mcp` 1.x, the OpenAI Agents SDK, PydanticAI; none of them in the project's), and calls its
tool the way its framework does, with no model, against the sandbox on 127.0.0.1.

What the model reads is checked word for word: a price the approval hook refuses, a paid
call, a payment whose outcome is unknown, a call the budget refuses, each saying whether
money moved; the bank and the chain say how much really moved.
"""

from __future__ import annotations

import json
import os
import re
from decimal import Decimal
from pathlib import Path

import anyio
import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from tests.conftest import bank_payments, register_secrets
from tests.framework_tools import framework_tools_python, run_example
from x402_eur_sandbox import Account, Sandbox
from x402_eur_sandbox._faults import Fault
from x402_eur_sandbox._standard import StandardMerchant

pytestmark = pytest.mark.anyio

WEATHER_ATOMIC = 50_000  # the paid MCP tool's price, 0.05 sEURC

#: What each HTTP example prints: one line per tool call, what the model read back. The
#: payment API drops its answer after moving the money of the second call.
HTTP_LINES = [
    r"max 0\.05: Not paid \(PaymentRejectedByHook\): on_before_payment returned False; only "
    r"True approves a payment; nothing was paid\. No money moved\.",
    r"max 0\.20: Payment outcome unknown \(PaymentOutcomeUnknown\): .+\. Money may have "
    r"moved: do not pay for this again; ask the user to check the payments\.",
    r'max 0\.20: HTTP 200, paid 0\.10 EUR: \{"city":"Amsterdam",.*\}',
    r"max 0\.20: Not paid \(BudgetExceeded\): refusing to pay: budget 0\.25 EUR/1h: 0\.20 EUR "
    r"spent, this payment 0\.10 EUR; nothing was paid.*\. No money moved\.",
]

MCP_LINES = [
    r"not approved yet: \[error\] Not paid \(PaymentRejectedByHook\): on_before_payment "
    r"returned False; only True approves a payment; nothing was paid\. No money moved\.",
    r'approved: \[success\] \{"city": "Paris", "forecast": "sunny", "temperatureC": 21\}',
    r"the tool fails after the payment: \[error\] Payment outcome unknown "
    r"\(PaymentOutcomeUnknown\): the tool answered the paid call with an error .+\. Money may "
    r"have moved: do not pay for this again; ask the user to check the payments\.",
    r"over the budget: \[error\] Not paid \(BudgetExceeded\): refusing to pay: budget "
    r"0\.10 EUR/1h: 0\.10 EUR spent, this payment 0\.05 EUR; nothing was paid.*\. No money "
    r"moved\.",
]


@pytest.fixture(scope="module")
def python() -> Path:
    return framework_tools_python()


def assert_said(out: str, err: str, expected: list[str]) -> None:
    """`out` is exactly one line per pattern, in order; nothing went to stderr as a
    traceback."""
    lines = out.splitlines()
    assert len(lines) == len(expected), (out, err[-3000:])
    for line, pattern in zip(lines, expected, strict=True):
        assert re.fullmatch(pattern, line), (pattern, line)
    assert "Traceback" not in err, err[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["langchain_tool", "openai_agents_tool", "pydantic_ai_tool"])
async def test_a_framework_tool_pays_within_its_budget_and_says_whether_money_moved(
    name: str, python: Path, sandbox: Sandbox, payer: Account
) -> None:
    settings = {
        "X402_EUR_API_KEY": payer.api_key,
        "X402_EUR_ACCOUNT": payer.code,
        "X402_EUR_API_URL": sandbox.payment_api_url,
        "X402_EUR_MCP_ALLOW_HOSTS": ",".join(sandbox.hosts),
        "X402_EUR_SANDBOX_MERCHANT": sandbox.merchant_url,
    }
    register_secrets(payer.api_key)
    sandbox.faults.arm("payment", Fault("drop", when="after"))
    try:
        out, err = await run_example(python, name, settings)
    finally:
        sandbox.faults.clear()
    assert_said(out, err, HTTP_LINES)
    # The unknown payment moved and the budget kept it: two payments, the third refused.
    assert [p.amount for p in bank_payments(sandbox, payer)] == [Decimal("0.10")] * 2
    assert sandbox.balance(payer) == Decimal("9.80")
    assert payer.api_key not in out + err


@pytest.mark.slow
async def test_langchains_mcp_adapters_pay_a_paid_tool_through_the_session(
    python: Path,
) -> None:
    async with StandardMerchant(chain_id=84532) as merchant:
        asset = merchant.asset_config()
        settings = {
            "X402_EUR_EVM_PRIVATE_KEY": merchant.payer_key,
            "X402_EUR_ASSETS": ":".join(
                str(asset[key]) for key in ("chain_id", "address", "symbol", "currency", "decimals")
            ),
        }
        register_secrets(merchant.payer_key)
        payer_before = await merchant.token_balance(merchant.payer_address)
        merchant_before = await merchant.token_balance(merchant.pay_to)
        out, err = await run_example(python, "langchain_mcp_tools", settings, merchant.mcp_url)
        assert_said(out, err, MCP_LINES)
        # One settlement: the failed tool call's signed payment was never settled.
        assert len(merchant.tools.settlements) == 1
        with anyio.fail_after(30):
            payer_after = await merchant.token_balance(merchant.payer_address)
            merchant_after = await merchant.token_balance(merchant.pay_to)
        assert payer_before - payer_after == WEATHER_ATOMIC
        assert merchant_after - merchant_before == WEATHER_ATOMIC
        assert merchant.payer_key not in out + err


_VERSIONS = """
import importlib.metadata as m, json
print(json.dumps({
    "mcp": m.version("mcp"),
    "ours": [r for r in m.requires("x402-eur") if r.startswith("mcp")],
    "theirs": [r for r in m.requires("langchain-mcp-adapters") if r.startswith("mcp")],
}))
"""


def _of_extra(requirement: Requirement, extra: str) -> bool:
    return requirement.marker is not None and requirement.marker.evaluate({"extra": extra})


async def test_the_mcp_extra_installs_beside_langchains_mcp_adapters(python: Path) -> None:
    """`pip install 'x402-eur[mcp]' langchain-mcp-adapters` resolves: pip resolved the
    frameworks' environment from both, and the `mcp` it holds meets the project's `mcp`
    extra and the adapters' requirement at once, every other requirement met too."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    checked = await anyio.run_process(
        [str(python), "-m", "pip", "check", "--disable-pip-version-check", "--no-input"],
        env=environment,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout.decode() + checked.stderr.decode()
    done = await anyio.run_process([str(python), "-c", _VERSIONS], env=environment)
    found = json.loads(done.stdout)
    installed = Version(found["mcp"])
    # The project's `mcp` extra as this checkout declares it (installed editable).
    [ours] = [r for r in map(Requirement, found["ours"]) if _of_extra(r, "mcp")]
    [theirs] = map(Requirement, found["theirs"])
    assert installed.major == 1
    assert installed in ours.specifier and installed in theirs.specifier
