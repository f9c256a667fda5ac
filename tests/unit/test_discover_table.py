"""`x402-eur discover`'s table fits the width it is given: descriptions are cut first,
then the verdict, URLs last and never below 24 characters."""

from x402_client.cli._bazaar import fit

URL = "https://api.example/weather/forecast"
ROWS = [["1", "0.10 EUR", "no: over budget", URL, "Today's weather, hour by hour, in Amsterdam"]]


def widths(table):
    return [max(len(row[i]) for row in table) for i in range(len(table[0]))]


def test_a_wide_terminal_cuts_nothing():
    table = fit(ROWS, 200)
    assert table[1] == ROWS[0]


def test_the_description_is_cut_first_and_the_url_kept_whole():
    table = fit(ROWS, 90)
    assert table[1][3] == URL and table[1][2] == "no: over budget"
    assert table[1][4].endswith("…") and sum(widths(table)) + 8 == 90


def test_then_the_verdict_then_the_url_each_down_to_its_least():
    narrow = fit(ROWS, 60)
    assert [len(cell) for cell in narrow[1][2:]] == [12, 24, 12]
    assert narrow[1][3] == URL[:23] + "…" and narrow[1][2] == "no: over bu…"
    assert narrow[0] == ["#", "PRICE", "PAYABLE", "RESOURCE", "DESCRIPTION"]
