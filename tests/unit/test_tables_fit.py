"""The command line's tables fit the terminal: hashes and addresses shortened explicitly
(`0x1234…abcd`), long cells wrapped whole onto more lines, never a code cut in the middle;
piped without COLUMNS, rows stay one line each for grep."""

from __future__ import annotations

import pytest

from x402_client.cli._render import _grid, _terminal_width

PAYMENTS = ["ID", "WHEN", "AMOUNT", "RAIL", "OUTCOME", "DELIVERED", "RESOURCE", "CODES"]
TX = "0x" + "ab" * 31 + "cd"
ROW = [
    "3f9c2a1b4d5e6f708192a3b4c5d6e7f8",
    "2026-11-28 13:00:00",
    "0.10 EUR",
    "permit2",
    "paid",
    "yes",
    "http://127.0.0.1:8402/weather?city=amsterdam",
    f"pr_157cd4bc29c5ee51a7ab, QPEAAAF6FA1AD537E4, {TX}",
]


def test_a_payments_table_fits_120_columns_without_cutting_a_code() -> None:
    table = _grid(PAYMENTS, [ROW], right=(2,), wrap=(6, 7), prefix=(0,), width=120)
    assert table.split("\n") == [
        "ID             WHEN                   AMOUNT  RAIL     OUTCOME  DELIVERED  RESOURCE"
        "             CODES",
        "3f9c2a1b4d5e…  2026-11-28 13:00:00  0.10 EUR  permit2  paid     yes        http://"
        "              pr_157cd4bc29c5ee51a7ab,",
        " " * 75 + "127.0.0.1:8402/      QPEAAAF6FA1AD537E4,",
        " " * 75 + "weather?             0xabab…abcd",
        " " * 75 + "city=amsterdam",
    ]
    assert max(len(line) for line in table.split("\n")) <= 120


def test_a_quote_table_shortens_addresses_and_wraps_the_reason() -> None:
    headers = ["#", "PRICE", "RAIL", "NETWORK", "ASSET", "PAYABLE"]
    rows = [
        [
            "1",
            "?",
            "exact",
            "eip155:137",
            "0x5FbDB2315678afecb367f032d93F642f64180aa3",
            "no: EVM permit for EURQ on eip155:137: set X402_EUR_EVM_PRIVATE_KEY and "
            "X402_EUR_RPC_URL_137",
        ],
        ["0", "0.10 EUR", "euro", "provider:mainnet", "EURO", "yes, tried first"],
    ]
    assert _grid(headers, rows, right=(0, 1), wrap=(5,), width=80).split("\n") == [
        "#     PRICE  RAIL   NETWORK           ASSET        PAYABLE",
        "1         ?  exact  eip155:137        0x5FbD…0aa3  no: EVM permit for EURQ on",
        "                                                   eip155:137: set",
        "                                                   X402_EUR_EVM_PRIVATE_KEY and",
        "                                                   X402_EUR_RPC_URL_137",
        "0  0.10 EUR  euro   provider:mainnet  EURO         yes, tried first",
    ]


def test_a_table_that_fits_or_has_no_width_is_left_whole() -> None:
    whole = _grid(PAYMENTS, [ROW], right=(2,), wrap=(6, 7), width=0)
    assert len(whole.split("\n")) == 2 and TX in whole


def test_the_width_is_columns_else_none_when_piped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "97")
    assert _terminal_width() == 97
    monkeypatch.delenv("COLUMNS")
    monkeypatch.setattr("sys.stdout.isatty", lambda: False)
    assert _terminal_width() == 0
