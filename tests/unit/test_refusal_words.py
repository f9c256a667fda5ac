"""A refused 402 reads in one line, its skipped offers counted by reason, each offer's own
reason one step away (`--debug`, `--json`, the MCP error's `skipped`); and neither front
end speaks Python to someone who never wrote any."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from tests.unit.test_skip_reasons import ACCOUNT, USDC_BASE, chain_a, eip3009, euro
from x402_client import PaymentOptions
from x402_client._flow.payment import Payer
from x402_client._frontend.common import plain_words, refusal_line, skipped_lines
from x402_client._protocol.budgets import Budget, BudgetStatus
from x402_client._protocol.policy import no_candidate_error, select
from x402_client._protocol.rail_interface import RequestSettings
from x402_client._rails import build_rails
from x402_client.mcp._results import _error_json

PYTHON = ("PaymentOptions", "Budget(", "max_amount_per_payment", "extensions=", "EvmOptions")


def refused(options: PaymentOptions, accepts: list[dict[str, Any]], headroom: Any = None) -> Any:
    selection = select(
        accepts,
        rails=build_rails(Payer(options)).describers,
        options=options,
        settings=RequestSettings(),
        headroom=headroom or {},
        now=1_700_000_000,
        resource="https://merchant.example/paid",
    )
    assert selection.candidates == []
    return no_candidate_error(selection.skipped, selection.readable)


def test_a_refusal_counts_its_skipped_offers_by_reason_in_one_line() -> None:
    options = PaymentOptions(**ACCOUNT, max_amount_per_payment="0.05")
    exc = refused(options, [euro(), eip3009(), euro(paymentRequestCode="pr_2")])
    assert refusal_line(exc) == (
        "no offer paid: 3 offers skipped (2 over --max-amount 0.05 EUR, 1 unknown asset)"
    )
    assert skipped_lines(exc) == [
        "offer 0: 0.10 EUR is above --max-amount 0.05 EUR",
        f"offer 1: EIP-3009 transfer for USD Coin on eip155:8453: unknown asset {USDC_BASE} "
        "on eip155:8453 (declare it in X402_EUR_ASSETS to pay it); set X402_EUR_EVM_PRIVATE_KEY",
        "offer 2: 0.10 EUR is above --max-amount 0.05 EUR",
    ]
    # the library's own message still speaks to the Python caller who set the option
    assert "max_amount_per_payment 0.05 EUR" in str(exc)


def test_one_offer_is_one_offer() -> None:
    exc = refused(PaymentOptions(**ACCOUNT, max_amount_per_payment="0.05"), [euro()])
    assert refusal_line(exc) == "no offer paid: 1 offer skipped (1 over --max-amount 0.05 EUR)"


def test_a_currency_no_budget_covers_is_said_as_the_flag_or_the_server_setting() -> None:
    options = PaymentOptions(**ACCOUNT, budgets=[Budget("1.00", currency="USD")])
    exc = refused(options, [euro(), chain_a("2768603795")])
    assert 'Budget("2.00", currency="EUR")' in str(exc)
    assert refusal_line(exc) == (
        "no offer paid: 0.10 EUR: no budget covers EUR (once a budget is set, only currencies "
        "with a budget are paid): add one, e.g. --budget 2.00EUR/24h; 2 offers skipped "
        "(1 no budget in EUR, 1 not payable with this configuration)"
    )
    assert skipped_lines(exc)[1] == (
        "offer 1: bridge payment for USDQ on ledgera:mainnet: the bridge delivers EURQ only "
        "(set X402_EUR_CHAIN_A_PRIVATE_KEY to pay it from your own chain-A wallet; without "
        "one, a direct chain-A payment is manual)"
    )
    error = _error_json(exc)
    assert error["message"] == (
        "no offer paid: 0.10 EUR: no budget covers EUR (once a budget is set, only currencies "
        "with a budget are paid): the server's operator can add one (x402-eur mcp --budget "
        "2.00EUR/24h, or X402_EUR_BUDGET); the budget tool lists what each currency may "
        "spend; 2 offers skipped (1 no budget in EUR, 1 not payable with this configuration)"
    )
    assert error["summary"] == f"No money moved. BudgetExceeded: {error['message']}"
    assert [s["reason"] for s in error["skipped"]] == ["no_budget", "unpayable"]
    assert not [word for word in PYTHON if word in str(error)]


def test_a_budget_refusal_says_what_the_window_spent() -> None:
    budget = Budget("2.00", currency="EUR", window="24h")
    status = BudgetStatus(budget, spent=Decimal("1.95"), remaining=Decimal("0.05"))
    exc = refused(PaymentOptions(**ACCOUNT, budgets=[budget]), [euro()], headroom={"EUR": status})
    assert refusal_line(exc) == (
        "no offer paid: budget 2.00 EUR/24h: 1.95 EUR spent, this payment 0.10 EUR; "
        "1 offer skipped (1 over the budget 2.00 EUR/24h)"
    )
    assert _error_json(exc)["message"] == refusal_line(exc, "mcp") == refusal_line(exc)


def test_the_mcp_server_names_its_cap_not_the_cli_flag() -> None:
    exc = refused(PaymentOptions(**ACCOUNT, max_amount_per_payment="0.05"), [euro()])
    assert _error_json(exc)["message"] == (
        "no offer paid: 1 offer skipped (1 over the per-payment cap 0.05 EUR)"
    )
    assert _error_json(exc)["skipped"] == [
        {
            "index": 0,
            "reason": "over_cap",
            "message": "0.10 EUR is above the per-payment cap 0.05 EUR",
        }
    ]


def test_plain_words_leave_out_what_only_python_callers_write() -> None:
    text = (
        "the payment's outcome is unknown. Re-send it with extensions={'x402': {'proof': "
        "error.proof}}. Do not pay again"
    )
    assert (
        plain_words(text)
        == plain_words(text, "mcp")
        == ("the payment's outcome is unknown. Do not pay again")
    )


def test_a_refused_private_destination_names_the_server_settings_that_admit_it() -> None:
    import pytest

    from x402_client import DestinationRefused
    from x402_client._state.netguard import DestinationGuard

    with pytest.raises(DestinationRefused) as caught:
        DestinationGuard([]).resolve_sync("127.0.0.1", 8402)
    assert _error_json(caught.value)["message"] == (
        "refused 127.0.0.1:8402: 127.0.0.1 is a loopback address, which this client does not "
        "reach unless the host is admitted; nothing was sent. The server reaches it once "
        "started with --allow-host 127.0.0.1:8402 (x402-eur mcp) or with "
        "X402_EUR_MCP_ALLOW_HOSTS=127.0.0.1:8402 in its environment"
    )
    with pytest.raises(DestinationRefused) as caught:
        DestinationGuard([], resolver=lambda host, port: ["::1"]).resolve_sync("localhost", 80)
    assert _error_json(caught.value)["message"].endswith(
        "once started with --allow-host localhost:80 (x402-eur mcp) or with "
        "X402_EUR_MCP_ALLOW_HOSTS=localhost:80 in its environment"
    )


def test_the_mcp_quote_and_budget_tools_speak_no_python() -> None:
    import anyio

    from x402_client._flow.quote import Quote, QuoteEntry
    from x402_client._frontend.common import quote_json
    from x402_client._state.budget_stores import Budgets
    from x402_client.mcp._results import _budget_json

    options = PaymentOptions(**ACCOUNT, budgets=[Budget("1.00", currency="USD")])
    exc = refused(options, [euro()])
    [skip] = exc.skipped
    entry = QuoteEntry(0, euro(), skip.intent, False, reason="no_budget", message=skip.message)
    quote = Quote("https://merchant.example/paid", 402, [entry])
    assert quote_json(quote, "mcp")["entries"][0]["message"] == (
        "0.10 EUR: no budget covers EUR (once a budget is set, only currencies with a budget "
        "are paid): the server's operator can add one (x402-eur mcp --budget 2.00EUR/24h, or "
        "X402_EUR_BUDGET); the budget tool lists what each currency may spend"
    )
    assert quote_json(quote)["entries"][0]["message"].endswith("add one, e.g. --budget 2.00EUR/24h")
    budgets = Budgets(options.budgets, None, {"EUR": Decimal("1.00"), "USD": Decimal("1.00")})
    report = anyio.run(budgets.status)
    notes = [each["note"] for each in _budget_json(report, options)["currencies"]]
    assert notes[0].endswith("the budget tool lists what each currency may spend")
    assert not [word for word in PYTHON if word in str(notes)]
