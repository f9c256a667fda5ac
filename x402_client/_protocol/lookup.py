"""What a lookup said, by the one rule under which recovery may decide that no money moved.

Recovery finishes a payment as `failed` ("no money moved") and gives its budget
reservation back on what another party answers: the chain-A indexer and node for a signed
transfer, the payment API's list of the account's transactions for a bridge payment the
journal has no code for. A party that is down, throttled, behind or hidden behind a proxy
answers in ways that look like "not there": a 503, a 429, a timeout, a cut connection, a
proxy's page, a 200 without the field asked for, a list cut short, an indexer that has not
reached the round yet. So every such read is one of three answers:

- `found`: a 200 whose body says what was asked (`read` reads it);
- `absent`: the party's own, definite "no such thing": the status it gives for an id it
  does not know (the indexer's 404), with a JSON body of its own (a proxy's error page is
  no answer); for a list, a readable list that says it is whole
  (`_payment_api.transaction_list`);
- `unknown`: anything else: no answer, a timeout, a dropped connection, a 429, a 5xx, a
  redirect, any other status, a body that is not JSON or lacks what was asked.

Only `absent` may void a payment, and only when every other read the verdict rests on was
definite too (a chain-A transfer is void only when the indexer has no such transaction,
had indexed every round it could have been confirmed in, and the node is past its last
valid round: `_rails.chain_a.verdict`). `unknown` decides nothing: the payment stays
`pending`, its reservation kept, and the reason says who did not answer and how.

Pure: the callers do the reads (`_rails.chain_a.lookup`, `_recovery`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Generic, Literal, TypeVar

from . import exact_json as _json

__all__ = ["Answer", "http_answer", "unanswered"]

T = TypeVar("T")

Verdict = Literal["found", "absent", "unknown"]

#: A body that is not JSON (None is an empty one).
_NOT_JSON: Any = object()


@dataclasses.dataclass(frozen=True)
class Answer(Generic[T]):
    """One read's answer: `verdict`, what was found (`value`, for `found` only), and
    `detail`, who said what (for the reason a person reads)."""

    verdict: Verdict
    detail: str
    value: T | None = None

    @property
    def definite(self) -> bool:
        """Whether the answer can be acted on (`found` or `absent`)."""
        return self.verdict != "unknown"


def unanswered(who: str, exc: BaseException) -> Answer[Any]:
    """A read that got no answer (refused, timed out, cut off): `unknown`."""
    return Answer("unknown", f"{who} did not answer ({type(exc).__name__})")


def http_answer(
    who: str,
    status: int,
    body: bytes,
    read: Callable[[Any], T],
    *,
    absent_status: int | None = None,
) -> Answer[T]:
    """What an HTTP answer says, by the module's rule. `read` takes the parsed JSON body
    of a 200 and returns what was asked, or raises `ValueError` (`KeyError`, `TypeError`)
    saying what is missing; `absent_status` is the status by which `who` says it has no
    such thing (None: it has no such status)."""
    try:
        data = _json.loads(body) if body else None
    except _json.JSONError:
        data = _NOT_JSON
    if status == absent_status:
        if isinstance(data, dict):
            return Answer("absent", f"{who} answered {status}")
        return Answer("unknown", f"{who} answered {status} without a JSON body of its own")
    if status != 200:
        why = " (too many requests)" if status == 429 else ""
        return Answer("unknown", f"{who} answered {status}{why}")
    if data is _NOT_JSON or data is None:
        return Answer("unknown", f"{who} answered 200 without a JSON body")
    try:
        value = read(data)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        what = str(exc) if isinstance(exc, ValueError) else "the fields asked for"
        return Answer("unknown", f"{who} answered 200 without {what}")
    return Answer("found", f"{who} answered 200", value)
