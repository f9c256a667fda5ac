"""Paid MCP tool calls, rule by rule, against a scripted MCP session.

The session answers each `call_tool` from a script (no server): what the x402 foundation's
MCP transport lets a server say — payment required in `structuredContent`, in
`content[0].text` only, or as a JSON-RPC error 402; a refusal, a settlement failure, "already
used" — and the client's answer to each is checked: what it puts in `_meta["x402/payment"]`,
what it hands back, what it raises and what that says of the money. The offers are standard
x402 `exact` entries in Circle's USDC on Base, which an EVM key alone can pay (an EIP-3009
signature: no chain, no RPC). The real server is `tests/integration/test_mcp_payments.py`'s.
"""

from __future__ import annotations

import json
import subprocess
import sys
import types
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, TextContent
from pydantic import BaseModel, ConfigDict, Field

from x402_client import (
    AmountLimitExceeded,
    ConfigurationError,
    EvmOptions,
    PaidToolResult,
    PaymentAdapter,
    PaymentOptions,
    PaymentOutcomeUnknown,
    PaymentReceipt,
    PaymentVerificationFailed,
    with_eur_payment,
)
from x402_client import payments as payments_of
from x402_client._adapters.mcp_session import payment_required_of

pytestmark = pytest.mark.anyio

EVM_KEY = "0x" + "42" * 32
BASE_USDC = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"
PAY_TO = "0x" + "ab" * 20
TX = "0x" + "cd" * 32


def entry(atomic: str = "10000") -> dict[str, Any]:
    return {
        "scheme": "exact",
        "network": "eip155:8453",
        "amount": atomic,
        "asset": BASE_USDC,
        "payTo": PAY_TO,
        "maxTimeoutSeconds": 60,
        "extra": {"name": "USD Coin", "version": "2"},
    }


def required(error: str = "Payment required", **extra: Any) -> dict[str, Any]:
    return {
        "x402Version": 2,
        "error": error,
        "resource": {"url": "mcp://tool/weather", "mimeType": "application/json"},
        "accepts": [entry()],
        **extra,
    }


def text(value: str) -> list[TextContent]:
    return [TextContent(type="text", text=value)]


def asks(challenge: dict[str, Any] | None = None, *, structured: bool = True) -> CallToolResult:
    """The tool-result binding's "payment required"."""
    challenge = challenge or required()
    return CallToolResult(
        content=text(json.dumps(challenge)),
        structured_content=challenge if structured else None,
        is_error=True,
    )


def served(result: str = "sunny") -> CallToolResult:
    settlement = {"success": True, "transaction": TX, "network": "eip155:8453"}
    return CallToolResult(content=text(result), meta={"x402/payment-response": settlement})


Answer = CallToolResult | BaseException | Callable[[Any], CallToolResult]


class ScriptedSession:
    """An MCP client session whose tool calls are answered from `script`, in order;
    `calls` keeps each call's (name, arguments, meta)."""

    def __init__(self, *script: Answer) -> None:
        self.script = list(script)
        self.calls: list[tuple[str, Any, Any]] = []

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        read_timeout_seconds: float | None = None,
        progress_callback: Any = None,
        *,
        meta: dict[str, Any] | None = None,
    ) -> CallToolResult:
        self.calls.append((name, arguments, meta))
        answer = self.script.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer(meta) if callable(answer) else answer

    def payments(self) -> list[dict[str, Any]]:
        return [
            meta["x402/payment"] for _, _, meta in self.calls if meta and "x402/payment" in meta
        ]


def options(**overrides: Any) -> PaymentOptions:
    return PaymentOptions(evm=EvmOptions(private_key=EVM_KEY), **overrides)


# --- what a tool result says -----------------------------------------------------------------


def test_payment_required_is_a_tool_error_with_an_x402_object():
    assert payment_required_of(asks()) == required()
    assert payment_required_of(asks(structured=False)) == required()  # content[0].text
    assert payment_required_of(served()) is None
    not_error = CallToolResult(content=text(json.dumps(required())), structured_content=required())
    assert payment_required_of(not_error) is None  # only a tool error asks for payment
    plain_error = CallToolResult(content=text("city not found"), is_error=True)
    assert payment_required_of(plain_error) is None
    junk = CallToolResult(content=text('{"x402Version": 2, "accepts": '), is_error=True)
    assert payment_required_of(junk) is None
    no_accepts = {"x402Version": 2, "error": "nope"}
    assert payment_required_of(asks(no_accepts)) is None
    too_long = asks(structured=False)
    assert payment_required_of(too_long, limit=10) is None


# --- paying ----------------------------------------------------------------------------------


async def test_pays_a_challenge_given_as_text_and_keeps_the_callers_meta():
    session = ScriptedSession(asks(structured=False), served())
    paying = options()
    with_eur_payment(session, paying)
    result = await session.call_tool("weather", {"city": "Paris"}, meta={"progressToken": "p1"})
    assert isinstance(result, PaidToolResult) and result.content[0].text == "sunny"
    assert result.x402_payment is not None and result.x402_payment.tx_hash == TX
    assert PaymentReceipt.of(result) is result.x402_payment
    assert result.x402_payment.amount == Decimal("0.01") and result.x402_payment.currency == "USD"
    [first, paid] = session.calls
    assert first == ("weather", {"city": "Paris"}, {"progressToken": "p1"})
    assert paid[0:2] == ("weather", {"city": "Paris"}) and paid[2]["progressToken"] == "p1"
    [payment] = session.payments()
    assert payment["x402Version"] == 2
    assert payment["accepted"] == entry()  # echoed exactly as offered
    assert payment["resource"] == required()["resource"]
    authorization = payment["payload"]["authorization"]
    assert authorization["to"] == PAY_TO and authorization["value"] == "10000"
    assert payments_of(paying).ledger.entries()[0].proof == result.x402_payment.proof


async def test_with_eur_payment_takes_an_mcp_session_too():
    session = ScriptedSession(asks(), served())
    paying = options()
    assert with_eur_payment(session, paying) is session
    result = await session.call_tool("weather", {"city": "Paris"})
    assert isinstance(result, PaidToolResult) and len(session.payments()) == 1
    assert payments_of(paying).ledger.entries()[0].proof == result.x402_payment.proof
    # Once more, with other options: they replace the first, nothing is wrapped twice.
    capped = options(max_amount_per_payment={"USD": "0.001"})
    assert with_eur_payment(session, capped) is session
    session.script.append(asks())
    with pytest.raises(AmountLimitExceeded):
        await session.call_tool("weather", {"city": "Paris"})
    assert len(session.payments()) == 1 and payments_of(capped).ledger.entries() == []


async def test_pays_a_json_rpc_error_402():
    session = ScriptedSession(MCPError(402, "Payment required", required()), served())
    with_eur_payment(session, options())
    result = await session.call_tool("weather", {"city": "Paris"})
    assert isinstance(result, PaidToolResult)
    assert len(session.payments()) == 1


async def test_another_json_rpc_error_is_the_sessions_own():
    session = ScriptedSession(MCPError(-32602, "unknown tool"))
    with_eur_payment(session, options())
    with pytest.raises(MCPError):
        await session.call_tool("nope", {})


async def test_pays_an_x402_v1_challenge_framed_for_v1():
    v1_entry = {
        "scheme": "exact",
        "network": "base",
        "maxAmountRequired": "10000",
        "resource": "mcp://tool/weather",
        "description": "paid",
        "mimeType": "application/json",
        "payTo": PAY_TO,
        "maxTimeoutSeconds": 60,
        "asset": BASE_USDC,
        "extra": {"name": "USD Coin", "version": "2"},
    }
    session = ScriptedSession(asks({"x402Version": 1, "accepts": [v1_entry]}), served())
    with_eur_payment(session, options())
    result = await session.call_tool("weather", {"city": "Paris"})
    assert isinstance(result, PaidToolResult)
    [payment] = session.payments()
    assert (payment["x402Version"], payment["scheme"], payment["network"]) == (1, "exact", "base")


async def test_a_used_authorization_is_never_paid_again():
    # "already used": the signed authorization was settled, by this server or whoever
    # used it. Paying fresh could pay twice for one call.
    session = ScriptedSession(
        asks(), asks(required("authorization already used")), asks(), served()
    )
    paying = options()
    with_eur_payment(session, paying)
    with pytest.raises(PaymentOutcomeUnknown, match="not paying again") as caught:
        await session.call_tool("weather", {"city": "Paris"})
    assert caught.value.money_moved is None and caught.value.proof
    assert len(session.payments()) == 1
    assert [e.outcome for e in payments_of(paying).ledger.entries()] == ["unknown"]


async def test_an_expired_authorization_pays_once_more_never_twice_more():
    session = ScriptedSession(asks(), asks(required("authorization expired")), asks(), served())
    paying = options()
    with_eur_payment(session, paying)
    result = await session.call_tool("weather", {"city": "Paris"})
    assert isinstance(result, PaidToolResult) and result.x402_payment is not None
    assert result.x402_payment.payments == 2
    first, second = session.payments()
    assert first["payload"]["authorization"]["nonce"] != second["payload"]["authorization"]["nonce"]
    assert [e.outcome for e in payments_of(paying).ledger.entries()] == ["unknown", "paid"]


async def test_a_settlement_failure_is_a_refusal_that_may_have_moved_money():
    failed = required(
        "Payment settlement failed: insufficient funds",
        **{"x402/payment-response": {"success": False, "errorReason": "insufficient funds"}},
    )
    session = ScriptedSession(asks(), asks(failed))
    paying = options()
    with_eur_payment(session, paying)
    with pytest.raises(PaymentVerificationFailed, match="insufficient funds") as caught:
        await session.call_tool("weather", {"city": "Paris"})
    # A signed authorization stays valid until it expires, whatever the server said.
    assert caught.value.money_moved is None and caught.value.proof
    assert len(session.payments()) == 1


async def test_a_call_lost_after_the_payment_left_says_so_and_the_proof_can_be_resent():
    session = ScriptedSession(asks(), OSError("connection reset"), asks(), served())
    paying = options()
    with_eur_payment(session, paying)
    with pytest.raises(PaymentOutcomeUnknown) as caught:
        await session.call_tool("weather", {"city": "Paris"})
    error = caught.value
    assert error.money_moved is None and error.proof
    result = await session.call_tool("weather", {"city": "Paris"}, x402={"proof": error.proof})
    assert isinstance(result, PaidToolResult) and result.x402_payment is not None
    assert result.x402_payment.reused and result.x402_payment.payments == 0
    first, again = session.payments()
    assert first == again  # the same payment, re-sent: nothing new signed
    [entry_] = payments_of(paying).ledger.entries()
    assert entry_.outcome == "paid" and entry_.delivered


async def test_a_tool_error_after_the_payment_is_not_the_result():
    session = ScriptedSession(
        asks(), CallToolResult(content=text("no weather station"), is_error=True)
    )
    with_eur_payment(session, options())
    with pytest.raises(PaymentOutcomeUnknown, match="no weather station") as caught:
        await session.call_tool("weather", {"city": "Atlantis"})
    error = caught.value
    assert "424" not in str(error) and error.money_moved is None and error.proof
    assert error.response is not None
    tool_result = error.response.extensions["x402_mcp_result"]
    assert tool_result.is_error and tool_result.content[0].text == "no weather station"
    assert error.request is not None and str(error.request.url) == "mcp://tool/weather"


# --- per-call settings and installing ---------------------------------------------------------


async def test_a_call_that_may_not_pay_gets_the_payment_required_result():
    session = ScriptedSession(asks())
    paying = options()
    with_eur_payment(session, paying)
    result = await session.call_tool("weather", {"city": "Paris"}, x402={"pay": False})
    assert result == asks() and not isinstance(result, PaidToolResult)
    assert payments_of(paying).ledger.entries() == []


async def test_a_settings_block_sets_the_calls_made_in_it_the_typed_way():
    session = ScriptedSession(asks(), asks(), OSError("connection reset"), asks(), served(), asks())
    paying = options()
    with_eur_payment(session, paying)
    with PaymentAdapter.settings({"pay": False}):
        unpaid = await session.call_tool("weather", {"city": "Paris"})
    assert unpaid == asks() and payments_of(paying).ledger.entries() == []
    with pytest.raises(PaymentOutcomeUnknown) as caught:
        await session.call_tool("weather", {"city": "Paris"})  # the block has ended: it pays
    with PaymentAdapter.settings({"proof": caught.value.proof}):
        result = await session.call_tool("weather", {"city": "Paris"})
    assert isinstance(result, PaidToolResult) and result.x402_payment is not None
    assert result.x402_payment.reused and result.x402_payment.payments == 0
    first, again = session.payments()
    assert first == again  # the proof re-sent: nothing new signed
    with PaymentAdapter.settings({"pay": True}):  # the keyword wins over the block
        assert await session.call_tool("weather", {}, x402={"pay": False}) == asks()


async def test_a_mistaken_setting_is_said_before_anything_is_sent():
    session = ScriptedSession()
    with_eur_payment(session, options())
    with pytest.raises(ConfigurationError, match="unknown per-request"):
        await session.call_tool("weather", {}, x402={"max_amount": "1"})
    assert session.calls == []


async def test_installing_again_replaces_the_options():
    session = ScriptedSession(asks(), served())
    first, second = options(), options()
    with_eur_payment(session, first)
    assert with_eur_payment(session, second) is session
    await session.call_tool("weather", {"city": "Paris"})
    assert (
        payments_of(first).ledger.entries() == [] and len(payments_of(second).ledger.entries()) == 1
    )


def test_only_a_session_can_pay():
    with pytest.raises(ConfigurationError, match="MCP client session"):
        with_eur_payment(object(), options())


def test_paying_needs_no_mcp_package_of_either_generation():
    """A session of any shape pays without `mcp` or `mcp_types` importable: nothing of the
    SDK is imported to pay (a 1.x user has no `mcp_types`)."""
    code = (
        "import sys; sys.modules['mcp'] = None; sys.modules['mcp_types'] = None\n"
        "from x402_client import PaidToolResult, with_eur_payment\n"
        "class Session:\n"
        "    async def call_tool(self, *args, **kwargs): ...\n"
        "session = Session()\n"
        "print(with_eur_payment(session, {}) is session, PaidToolResult.__name__)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.split() == ["True", "PaidToolResult"], done.stdout + done.stderr


# --- a session of mcp 1.x's shape -------------------------------------------------------------


class LegacyText(BaseModel):
    type: str = "text"
    text: str


class LegacyResult(BaseModel):
    """A `CallToolResult` as `mcp` 1.x spells it: camelCase fields, `_meta`, extras kept."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    meta: dict[str, Any] | None = Field(alias="_meta", default=None)
    content: list[LegacyText]
    structuredContent: dict[str, Any] | None = None
    isError: bool = False


class LegacyError(Exception):
    """A JSON-RPC error as `mcp` 1.x raises it (`McpError`): code and data under `error`."""

    def __init__(self, code: int, data: Any) -> None:
        super().__init__("Payment required")
        self.error = types.SimpleNamespace(code=code, message="Payment required", data=data)


def legacy_asks() -> LegacyResult:
    return LegacyResult(
        content=[LegacyText(text=json.dumps(required()))],
        structuredContent=required(),
        isError=True,
    )


def legacy_served() -> LegacyResult:
    settlement = {"success": True, "transaction": TX, "network": "eip155:8453"}
    return LegacyResult(
        content=[LegacyText(text="sunny")],
        _meta={"x402/payment-response": settlement},
        server="kept",  # an extra field, as 1.x results allow
    )


async def test_a_session_with_mcp_1_results_gets_its_own_result_class_paid():
    session = ScriptedSession(legacy_asks(), legacy_served(), LegacyError(402, required()))
    session.script.append(legacy_served())
    paying = options()
    with_eur_payment(session, paying)
    result = await session.call_tool("weather", {"city": "Paris"})
    assert isinstance(result, PaidToolResult) and isinstance(result, LegacyResult)
    assert result.x402_payment is not None and result.x402_payment.tx_hash == TX
    assert result.content[0].text == "sunny" and result.meta is not None
    dumped = result.model_dump(by_alias=True)
    assert dumped == legacy_served().model_dump(by_alias=True) and "x402_payment" not in dumped
    # The JSON-RPC binding as 1.x raises it; the paid class is made once per result class.
    again = await session.call_tool("weather", {"city": "Rome"})
    assert isinstance(again, PaidToolResult) and type(again) is type(result)
    assert len(session.payments()) == 2
    assert [e.outcome for e in payments_of(paying).ledger.entries()] == ["paid", "paid"]


async def test_a_free_mcp_1_result_is_untouched():
    session = ScriptedSession(legacy_served())
    with_eur_payment(session, options())
    result = await session.call_tool("echo", {"text": "hello"})
    assert type(result) is LegacyResult and not isinstance(result, PaidToolResult)


async def test_a_paid_result_of_both_generations_is_a_paid_tool_result():
    unpaid = await ScriptedSession(asks(), served()).call_tool("weather", {})
    session_2x = with_eur_payment(ScriptedSession(asks(), served()), options())
    session_1x = with_eur_payment(ScriptedSession(legacy_asks(), legacy_served()), options())
    result_2x = await session_2x.call_tool("weather", {})
    result_1x = await session_1x.call_tool("weather", {})
    assert not isinstance(unpaid, PaidToolResult)
    assert isinstance(result_2x, PaidToolResult) and isinstance(result_2x, CallToolResult)
    assert isinstance(result_1x, PaidToolResult) and not isinstance(result_1x, CallToolResult)
    assert result_2x.model_dump() == served().model_dump()


async def test_an_unfinished_payment_is_journaled_and_finished_by_resending_its_proof(tmp_path):
    """The journal keeps a paid tool call as `POST mcp://tool/{name}` with its arguments as
    the body: enough to call the tool again with the proof (docs/mcp-payments.md)."""
    from urllib.parse import unquote

    session = ScriptedSession(asks(), OSError("connection reset"), asks(), served())
    paying = options(state_path=str(tmp_path / "state.sqlite3"))
    with_eur_payment(session, paying)
    with pytest.raises(PaymentOutcomeUnknown):
        await session.call_tool("weather", {"city": "Paris"})
    [record] = await payments_of(paying).unfinished()
    assert (record.request_method, record.request_url) == ("POST", "mcp://tool/weather")
    assert record.proof and record.outcome == "unknown"
    name = unquote(record.request_url.removeprefix("mcp://tool/"))
    arguments = json.loads(record.request_body or b"{}")
    result = await session.call_tool(name, arguments, x402={"proof": record.proof})
    assert isinstance(result, PaidToolResult)
    assert session.calls[-1][1] == {"city": "Paris"}
    assert await payments_of(paying).unfinished() == []


async def test_a_tool_call_s_credential_arguments_are_journaled_redacted(tmp_path):
    """The arguments are JSON, said so: an argument named like a credential is journaled
    as "REDACTED" (at any depth), and the record says the journal's arguments are not the
    ones sent."""

    session = ScriptedSession(asks(), OSError("connection reset"), asks(), served())
    path = tmp_path / "state.sqlite3"
    paying = options(state_path=str(path))
    with_eur_payment(session, paying)
    arguments = {"city": "Paris", "account": {"api_key": "s3cret-key"}, "Token": "s3cret-tok"}
    with pytest.raises(PaymentOutcomeUnknown):
        await session.call_tool("weather", arguments)
    [record] = await payments_of(paying).unfinished()
    assert record.request_body_redacted
    assert json.loads(record.request_body or b"{}") == {
        "city": "Paris",
        "account": {"api_key": "REDACTED"},
        "Token": "REDACTED",
    }
    state = [path, path.with_name(path.name + "-wal")]
    assert all(b"s3cret" not in file.read_bytes() for file in state if file.exists())
    result = await session.call_tool("weather", arguments, x402={"proof": record.proof})
    assert isinstance(result, PaidToolResult)
    assert session.calls[-1][1] == arguments
    assert await payments_of(paying).unfinished() == []
