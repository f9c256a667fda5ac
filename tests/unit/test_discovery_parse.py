"""Reading a facilitator's discovery page (x402 Bazaar): lenient where the extension is
silent, strict where a value would mislead, and never failing the page on one bad row."""

import json
from datetime import datetime, timezone

import pytest

from x402_client._protocol.dialects import Dialect
from x402_client._protocol.discovery import (
    InvalidCatalogue,
    challenge_of_listing,
    parse_page,
)

PAY_TO = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"
USDC = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"


def entry(**changes):
    base = {
        "scheme": "exact",
        "network": "eip155:8453",
        "amount": "10000",
        "asset": USDC,
        "payTo": PAY_TO,
        "maxTimeoutSeconds": 60,
        "extra": {"name": "USD Coin", "version": "2"},
    }
    return {**base, **changes}


def row(**changes):
    base = {
        "resource": "https://api.example/weather",
        "type": "http",
        "x402Version": 2,
        "accepts": [entry()],
        "lastUpdated": 1703123456,
    }
    return {k: v for k, v in {**base, **changes}.items() if v is not ...}


def page(rows, key="items", **top):
    return json.dumps({"x402Version": 2, key: rows, **top}).encode()


def test_a_list_page_reads_rows_pagination_and_the_next_offset():
    body = page([row(), row(resource="https://api.example/b")], pagination={"total": 5})
    read = parse_page(body, limit=2, offset=0)
    assert [listing.resource for listing in read.listings] == [
        "https://api.example/weather",
        "https://api.example/b",
    ]
    assert [listing.index for listing in read.listings] == [1, 2]
    assert read.skipped == [] and read.total == 5 and read.next_offset == 2
    assert read.next_cursor is None and not read.partial


def test_the_last_page_of_a_list_has_no_next_offset():
    read = parse_page(
        page([row()], pagination={"limit": 2, "offset": 4, "total": 5}), limit=2, offset=4
    )
    assert read.next_offset is None


def test_a_search_page_reads_resources_and_its_cursor_or_none():
    body = page(
        [row()], key="resources", partialResults=True, pagination={"limit": 1, "cursor": "eyJ9"}
    )
    read = parse_page(body, limit=1)
    assert len(read.listings) == 1 and read.next_cursor == "eyJ9" and read.partial
    assert read.next_offset is None
    last = parse_page(page([row()], key="resources", pagination=None), limit=5)
    assert last.next_cursor is None and last.next_offset is None and not last.partial


@pytest.mark.parametrize(
    ("stamp", "expected"),
    [
        (1703123456, datetime(2023, 12, 21, 1, 50, 56, tzinfo=timezone.utc)),
        (
            "2026-03-17T11:28:45.667Z",
            datetime(2026, 3, 17, 11, 28, 45, 667000, tzinfo=timezone.utc),
        ),
        ("2026-03-17T12:28:45+01:00", datetime(2026, 3, 17, 11, 28, 45, tzinfo=timezone.utc)),
        # a naive stamp (the foundation's example facilitators write them) is read as UTC
        ("2026-03-17T11:28:45", datetime(2026, 3, 17, 11, 28, 45, tzinfo=timezone.utc)),
        ("yesterday", None),
        (True, None),
        (None, None),
    ],
)
def test_last_updated_is_a_unix_time_or_iso_8601(stamp, expected):
    [listing] = parse_page(page([row(lastUpdated=stamp)]), limit=5).listings
    assert listing.last_updated == expected


def test_description_and_mime_type_are_read_on_the_row_or_in_its_first_option():
    on_row = row(description="Weather", mimeType="application/json", metadata={"x": 1})
    v1 = row(
        x402Version=1,
        resource=...,
        accepts=[
            {
                "scheme": "exact",
                "network": "base",
                "maxAmountRequired": "1000",
                "resource": "https://old.example/data",
                "description": "Old data",
                "mimeType": "text/csv",
                "payTo": PAY_TO,
                "asset": USDC,
            }
        ],
    )
    first, second = parse_page(page([on_row, v1]), limit=5).listings
    assert (first.description, first.mime_type) == ("Weather", "application/json")
    assert (second.resource, second.description, second.mime_type) == (
        "https://old.example/data",
        "Old data",
        "text/csv",
    )
    assert second.x402_version == 1


def test_the_version_missing_is_told_by_the_options():
    listing = parse_page(page([row(x402Version=...)]), limit=5).listings[0]
    assert listing.x402_version == 2


def test_the_declared_method_and_tool_are_read_from_the_bazaar_extension():
    http = row(extensions={"bazaar": {"info": {"input": {"type": "http", "method": "post"}}}})
    tool = row(
        type="mcp",
        extensions={"bazaar": {"info": {"input": {"type": "mcp", "toolName": "weather"}}}},
    )
    odd = row(extensions={"bazaar": {"info": {"input": {"type": "http", "method": "BREW"}}}})
    a, b, c = parse_page(page([http, tool, odd]), limit=5).listings
    assert (a.method, a.tool_name) == ("POST", None)
    assert (b.type, b.method, b.tool_name) == ("mcp", None, "weather")
    assert c.method is None


HOSTILE = [
    ("not a row", "not an object"),
    (row(accepts=[]), "accepts is not a non-empty list of price options"),
    (row(accepts=...), "accepts is not a non-empty list of price options"),
    (row(accepts=["x"]), "accepts[0] is not an object"),
    (row(accepts=[entry()] * 33), "accepts has more than 32 price options"),
    (row(accepts=[entry(amount=10000)]), "accepts[0].amount is not a string of atomic units"),
    (row(accepts=[entry(amount="0.01")]), "accepts[0].amount is not a string of atomic units"),
    (row(accepts=[entry(amount="1e6")]), "accepts[0].amount is not a string of atomic units"),
    (row(accepts=[entry(amount="-5")]), "accepts[0].amount is not a string of atomic units"),
    (
        row(accepts=[entry(), entry(amount=None)]),
        "accepts[1].amount is not a string of atomic units",
    ),
    (row(resource="javascript:alert(1)"), "resource is not an http(s) URL"),
    (row(resource="file:///etc/passwd"), "resource is not an http(s) URL"),
    (
        row(resource="https://a.example/\x1b[2J"),
        "resource is not a URL (too long, or spaces or control characters)",
    ),
    (
        row(resource="https://a.example/" + "a" * 5000),
        "resource is not a URL (too long, or spaces or control characters)",
    ),
    (row(resource=None), "resource is not a URL"),
    (row(type=7), "type is not a string"),
    (row(x402Version=3), "x402Version is not 1 or 2"),
    (row(x402Version=True), "x402Version is not 1 or 2"),
]


@pytest.mark.parametrize(("bad", "reason"), HOSTILE)
def test_a_hostile_row_is_skipped_with_its_reason_and_the_rest_is_read(bad, reason):
    read = parse_page(page([row(), bad, row(resource="https://api.example/c")]), limit=5)
    assert [listing.resource for listing in read.listings] == [
        "https://api.example/weather",
        "https://api.example/c",
    ]
    [skipped] = read.skipped
    assert (skipped.index, skipped.reason) == (2, reason)


def test_euro_options_take_decimal_amounts_and_standard_ones_do_not():
    euro = {"scheme": "euro", "network": "provider:mainnet", "asset": "EURO", "amount": "0.10"}
    read = parse_page(page([row(accepts=[euro]), row(accepts=[{**euro, "amount": 0.1}])]), limit=5)
    assert len(read.listings) == 1
    assert read.skipped[0].reason == "accepts[0].amount is not a decimal string"


def test_text_loses_terminal_escapes_and_control_characters_and_is_bounded():
    evil = row(
        description="Weather\x1b[31m red\x1b]0;owned\x07\u202e now\n" + "x" * 2000,
        serviceName="Svc\x00\x07",
        tags=["a\x1b[1m", "A", "b", 3, "c", "d", "e", "f"],
    )
    [listing] = parse_page(page([evil]), limit=5).listings
    assert listing.description is not None
    assert listing.description.startswith("Weather red now xxx")
    assert len(listing.description) == 500 and listing.description.endswith("…")
    assert "\x1b" not in listing.description and "\u202e" not in listing.description
    assert listing.service_name == "Svc"
    assert listing.tags == ("a", "b", "c", "d", "e")  # "A" repeats "a"; at most five


def test_a_server_ignoring_limit_is_cut_to_it_and_says_partial():
    read = parse_page(page([row() for _ in range(7)], pagination={"total": 7}), limit=3)
    assert len(read.listings) == 3 and read.partial and read.next_offset == 3


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"<html>", "the answer is not JSON"),
        (b"[]", "the answer is not a JSON object"),
        (b'{"items": {}}', "the answer lists no rows"),
        (b'{"x402Version": 2}', "the answer lists no rows"),
        (b"[" * 5000 + b"]" * 5000, "the answer is not JSON"),
    ],
)
def test_an_answer_that_is_no_page_is_refused(body, message):
    with pytest.raises(InvalidCatalogue, match=message):
        parse_page(body, limit=5)


def test_a_listing_is_read_as_the_402_its_version_and_options_say():
    euro = {"scheme": "euro", "network": "provider:mainnet", "asset": "EURO", "amount": "0.10"}
    v1 = row(x402Version=1, accepts=[{**entry(), "maxAmountRequired": "5"}])
    listings = parse_page(page([row(), row(accepts=[euro]), v1]), limit=5).listings
    dialects = [challenge_of_listing(listing).dialect for listing in listings]
    assert dialects == [Dialect.STANDARD_V2, Dialect.EURO, Dialect.STANDARD_V1]
    assert challenge_of_listing(listings[0]).resource == {"url": "https://api.example/weather"}
