"""What the command line says of a mistake or an answer, exactly: a mistyped option is
said to be one, with the option meant, before any argument is read (`--max-amout 0.05` is
not a URL `0.05`); a quote of an error answer says it is no payment gate."""

from __future__ import annotations

import pytest

from x402_client.cli import _parser
from x402_client.cli._common import _UsageError


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["fetch", "--max-amout", "0.05", "http://127.0.0.1:9/x"],
            "x402-eur fetch: unknown option --max-amout; did you mean --max-amount?",
        ),
        (
            ["fetch", "--budjet", "1.00/24h", "http://127.0.0.1:9/x"],
            "x402-eur fetch: unknown option --budjet; did you mean --budget?",
        ),
        (
            ["quote", "--max-amount-per-paymnt=0.05", "http://127.0.0.1:9/x"],
            "x402-eur quote: unknown option --max-amount-per-paymnt",
        ),
        (["payments", "--frobnicate"], "x402-eur payments: unknown option --frobnicate"),
    ],
)
def test_a_mistyped_option_is_named_with_the_one_meant(argv: list[str], said: str) -> None:
    with pytest.raises(_UsageError) as caught:
        _parser().parse_args(argv)
    first, second = str(caught.value).splitlines()
    assert (first, second) == (said, f"Try 'x402-eur {argv[0]} --help'.")


def test_known_options_abbreviations_and_values_after_a_double_dash_still_parse() -> None:
    args = _parser().parse_args(["fetch", "--max-amount", "0.05", "http://127.0.0.1:9/x"])
    assert args.url == "http://127.0.0.1:9/x"
    args = _parser().parse_args(["fetch", "--max-amount=0.05", "--", "http://127.0.0.1:9/--x"])
    assert args.url == "http://127.0.0.1:9/--x"


@pytest.mark.parametrize(
    ("status", "said"),
    [
        (404, "GET http://127.0.0.1:9/x: HTTP 404, not a payment gate (nothing to pay)\n"),
        (401, "GET http://127.0.0.1:9/x: HTTP 401, not a payment gate (nothing to pay)\n"),
        (200, "GET http://127.0.0.1:9/x: HTTP 200, free (nothing to pay)\n"),
    ],
)
def test_a_quote_of_an_answer_that_is_no_402_says_what_it_is(
    status: int, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from x402_client._flow.quote import Quote
    from x402_client.cli._render import _print_quote

    _print_quote("GET", Quote("http://127.0.0.1:9/x", status, []))
    assert capsys.readouterr().out == said


@pytest.mark.parametrize(
    ("flags", "environment", "signs_in"),
    [
        ([], {}, True),
        (["--no-sign-in"], {}, False),
        ([], {"X402_EUR_SIGN_IN_WITH_X": "0"}, False),
        (["--sign-in"], {"X402_EUR_SIGN_IN_WITH_X": "0"}, True),
    ],
)
def test_fetch_signs_in_unless_told_not_to(
    flags: list[str],
    environment: dict[str, str],
    signs_in: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from x402_client.cli._common import _payment_options

    monkeypatch.delenv("X402_EUR_SIGN_IN_WITH_X", raising=False)
    for name, value in {"X402_EUR_EVM_PRIVATE_KEY": "0x" + "42" * 32, **environment}.items():
        monkeypatch.setenv(name, value)
    args = _parser().parse_args(["fetch", *flags, "--no-state", "http://127.0.0.1:9/x"])
    assert _payment_options(args, state=False).sign_in_with_x is signs_in
