"""The one rule by which a lookup may void a payment (pure: `_lookup`, and the chain-A
verdict built on it). Only a definite answer counts; anything else is `unknown`."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from x402_client._protocol.lookup import Answer, http_answer, unanswered
from x402_client._rails.chain_a import _confirmed_in, _round_in, verdict

TXID = "T" * 52
WHO = "the indexer"


def _confirmed(status: int, body: bytes) -> Answer[int]:
    return http_answer(WHO, status, body, _confirmed_in(TXID), absent_status=404)


@pytest.mark.parametrize(
    ("status", "body", "expected", "said"),
    [
        (200, b'{"transaction": {"id": "%s", "confirmed-round": 12}}' % TXID.encode(), 12, ""),
        (200, b'{"transaction": {"confirmed-round": 12}}', 12, ""),
        (404, b'{"message": "no transaction found"}', "absent", "answered 404"),
        # no definite answer
        (404, b"<html>Not Found</html>", "unknown", "404 without a JSON body of its own"),
        (404, b"", "unknown", "404 without a JSON body of its own"),
        (404, b"[]", "unknown", "404 without a JSON body of its own"),
        (503, b'{"message": "down"}', "unknown", "answered 503"),
        (500, b"", "unknown", "answered 500"),
        (429, b'{"message": "slow down"}', "unknown", "answered 429 (too many requests)"),
        (302, b"", "unknown", "answered 302"),
        (204, b"", "unknown", "answered 204"),
        (206, b'{"transaction": {"confirmed-round": 12}}', "unknown", "answered 206"),
        (410, b"{}", "unknown", "answered 410"),
        (200, b"<html>bad gateway</html>", "unknown", "200 without a JSON body"),
        (200, b"", "unknown", "200 without a JSON body"),
        (200, b"null", "unknown", "200 without a JSON body"),
        (200, b"[]", "unknown", "without the fields asked for"),
        (200, b'{"current-round": 9}', "unknown", "without the fields asked for"),
        (200, b'{"transaction": {}}', "unknown", "without a readable confirmed-round"),
        (200, b'{"transaction": {"confirmed-round": 0}}', "unknown", "readable confirmed-round"),
        (200, b'{"transaction": {"confirmed-round": "12"}}', "unknown", "confirmed-round"),
        (200, b'{"transaction": {"confirmed-round": true}}', "unknown", "confirmed-round"),
        (200, b'{"transaction": {"confirmed-round": 1.5}}', "unknown", "confirmed-round"),
        (200, b'{"transaction": {"id": "OTHER", "confirmed-round": 3}}', "unknown", "a record"),
        (200, b'{"transaction": []}', "unknown", "without the fields asked for"),
    ],
)
def test_only_a_readable_200_is_found_and_only_the_partys_own_404_is_absent(
    status: int, body: bytes, expected: Any, said: str
) -> None:
    answer = _confirmed(status, body)
    if isinstance(expected, int):
        assert (answer.verdict, answer.value, answer.definite) == ("found", expected, True)
    else:
        assert answer.verdict == expected and answer.value is None
        assert answer.definite is (expected == "absent")
    assert said in answer.detail and answer.detail.startswith(WHO)


def test_without_an_absent_status_a_404_says_nothing() -> None:
    answer = http_answer("the node", 404, b'{"message": "no"}', _round_in("last-round"))
    assert (answer.verdict, answer.detail) == ("unknown", "the node answered 404")


@pytest.mark.parametrize(
    ("body", "value"),
    [
        (b'{"last-round": 40}', 40),
        (b'{"last-round": 0}', 0),
        (b'{"last-round": -1}', None),
        (b'{"last-round": true}', None),
        (b'{"last-round": "40"}', None),
        (b'{"last-round": 40.0}', None),
        (b'{"round": 40}', None),
    ],
)
def test_a_round_is_read_only_as_a_whole_number(body: bytes, value: int | None) -> None:
    answer = http_answer("the node", 200, body, _round_in("last-round"))
    assert answer.value == value and answer.definite is (value is not None)


@pytest.mark.parametrize(
    "exc", [httpx.ReadTimeout("t"), httpx.ConnectError("c"), httpx.RemoteProtocolError("r")]
)
def test_no_answer_is_unknown(exc: Exception) -> None:
    answer = unanswered(WHO, exc)
    assert answer.verdict == "unknown" and not answer.definite
    assert answer.detail == f"{WHO} did not answer ({type(exc).__name__})"


# --- the chain-A verdict -----------------------------------------------------------------------

LAST_VALID = 100
FOUND = Answer("found", "found", 90)
ABSENT: Answer[int] = Answer("absent", "the indexer answered 404")
DOWN: Answer[int] = Answer("unknown", "the indexer answered 503")
NODE_DOWN: Answer[int] = Answer("unknown", "the chain-A node answered 429 (too many requests)")


def _at(round_: int) -> Answer[int]:
    return Answer("found", "answered 200", round_)


@pytest.mark.parametrize(
    ("transaction", "indexed", "node", "status", "said"),
    [
        (FOUND, _at(50), NODE_DOWN, "confirmed", "is on chain (round 90)"),
        (FOUND, DOWN, _at(500), "confirmed", "is on chain"),
        (ABSENT, _at(100), _at(101), "void", "last valid round 100 has passed"),
        (ABSENT, _at(400), _at(500), "void", "(the node is at 500, the indexer at 400)"),
        # still within its window
        (ABSENT, _at(100), _at(100), "pending", "stays valid until round 100"),
        (ABSENT, DOWN, _at(50), "pending", "stays valid until round 100"),
        # no definite answer: nothing decided
        (DOWN, _at(400), _at(500), "unknown", "answered 503: whether"),
        (ABSENT, _at(400), NODE_DOWN, "unknown", "answered 429 (too many requests)"),
        (ABSENT, DOWN, _at(500), "unknown", "answered 503: whether it has indexed"),
        (ABSENT, _at(99), _at(500), "unknown", "has indexed only up to round 99"),
    ],
)
def test_a_transfer_is_void_only_on_three_definite_answers(
    transaction: Answer[int], indexed: Answer[int], node: Answer[int], status: str, said: str
) -> None:
    found = verdict(TXID, LAST_VALID, transaction, indexed, node)
    assert found.status == status and found.txid == TXID
    assert said in found.detail
    assert (found.round == 90) is (status == "confirmed")
