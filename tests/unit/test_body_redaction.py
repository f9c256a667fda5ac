"""What the journal keeps of a request body: the body less its credentials, judged by the
names the query-parameter policy judges (`_redact.sensitive`)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from x402_client._protocol.exact_json import MAX_DEPTH
from x402_client._protocol.redact import safe_url
from x402_client._protocol.redact_body import KeptBody, safe_body

FORM = "application/x-www-form-urlencoded"
JSON = "application/json"


def kept_json(document: Any, content_type: str = JSON) -> tuple[Any, bool]:
    kept = safe_body(json.dumps(document).encode(), content_type)
    assert kept.body is not None
    return json.loads(kept.body), kept.redacted


def nested(depth: int, inner: dict[str, Any]) -> dict[str, Any]:
    """An object `depth` levels deep whose innermost object is `inner`."""
    document = inner
    for _ in range(depth - 1):
        document = {"a": document}
    return document


# --- forms ------------------------------------------------------------------------------------


def test_a_login_form_keeps_the_user_and_redacts_the_password() -> None:
    kept = safe_body(b"username=alice&password=s3cret", FORM)
    assert kept == KeptBody(b"username=alice&password=REDACTED", True)


def test_form_names_are_judged_in_any_case_and_as_a_server_decodes_them() -> None:
    body = b"PassWord=a&API_KEY=b&Session%5FToken=c&pass%77ord=d&access+token=e&sig=f&note=hi"
    kept = safe_body(body, "Application/X-WWW-Form-URLencoded; charset=UTF-8")
    assert kept.redacted
    assert kept.body == (
        b"PassWord=REDACTED&API_KEY=REDACTED&Session%5FToken=REDACTED&pass%77ord=REDACTED"
        b"&access+token=REDACTED&sig=REDACTED&note=hi"
    )


def test_a_form_without_credentials_is_kept_byte_for_byte() -> None:
    # Words that merely contain a whole-word name (`postcode`, `design`) are ordinary, as
    # in a query string.
    body = b"city=Par%C3%ADs&q=a+b&postcode=75001&design=flat&empty=&flag"
    assert safe_body(body, FORM) == KeptBody(body, False)
    assert safe_url("https://m.example/x?" + body.decode()).endswith(body.decode())


def test_a_form_with_bytes_that_are_not_utf8_keeps_them_and_redacts_the_credential() -> None:
    body = b"note=%FF\xfe\x80&password=\xff\xfe&token%FF=x"
    kept = safe_body(body, FORM)
    assert kept == KeptBody(b"note=%FF\xfe\x80&password=REDACTED&token%FF=REDACTED", True)


# --- JSON -------------------------------------------------------------------------------------


def test_json_credentials_are_redacted_at_any_depth_and_the_rest_is_kept() -> None:
    document, redacted = kept_json({"user": {"password": "s3cret", "name": "alice"}, "q": 1})
    assert redacted
    assert document == {"user": {"password": "REDACTED", "name": "alice"}, "q": 1}


def test_json_keys_in_arrays_and_in_any_case_are_redacted() -> None:
    sent = [
        {"Token": "t", "id": 1},
        {"items": [{"X-Api-Key": "k", "n": 2}, [{"clientSecret": "c", "PASSWORD": "p"}]]},
        "password",  # a value, not a key: kept
    ]
    document, redacted = kept_json(sent)
    assert redacted
    assert document == [
        {"Token": "REDACTED", "id": 1},
        {
            "items": [
                {"X-Api-Key": "REDACTED", "n": 2},
                [{"clientSecret": "REDACTED", "PASSWORD": "REDACTED"}],
            ]
        },
        "password",
    ]


def test_a_credential_key_s_whole_value_is_redacted_whatever_it_holds() -> None:
    document, _ = kept_json({"credentials": {"user": "alice", "pin": [1, 2]}, "auth": None})
    assert document == {"credentials": "REDACTED", "auth": "REDACTED"}


@pytest.mark.parametrize(
    "content_type",
    ["application/json", "application/json; charset=utf-8", "application/merge-patch+json"],
)
def test_every_json_media_type_is_read_as_json(content_type: str) -> None:
    document, redacted = kept_json({"session": "s", "keep": True}, content_type)
    assert redacted and document == {"session": "REDACTED", "keep": True}


def test_json_without_credentials_is_kept_byte_for_byte() -> None:
    body = b'{ "amount": 0.10,\n  "city": "Par\xc3\xads", "design": [1, 2.50] }'
    assert safe_body(body, JSON) == KeptBody(body, False)


def test_redacted_json_keeps_its_numbers_digit_for_digit() -> None:
    kept = safe_body(b'{"amount": 0.10, "big": 123456789012345678901234567890, "pwd": 1}', JSON)
    assert kept.body == b'{"amount":0.10,"big":123456789012345678901234567890,"pwd":"REDACTED"}'


def test_json_that_is_not_utf8_falls_back_to_the_word_rule() -> None:
    assert safe_body(b'{"password": "\xff\xfe"}', JSON) == KeptBody(None, True)
    plain = b'{"note": "\xff\xfe"}'
    assert safe_body(plain, JSON) == KeptBody(plain, False)


def test_json_at_the_nesting_bound_is_redacted_and_deeper_json_is_not_kept() -> None:
    deepest, redacted = kept_json(nested(MAX_DEPTH, {"password": "s3cret"}))
    assert redacted and "s3cret" not in json.dumps(deepest)
    too_deep = json.dumps(nested(MAX_DEPTH + 1, {"password": "s3cret"})).encode()
    assert safe_body(too_deep, JSON) == KeptBody(None, True)
    harmless = json.dumps(nested(MAX_DEPTH + 1, {"city": "Oslo"})).encode()
    assert safe_body(harmless, JSON) == KeptBody(harmless, False)


def test_invalid_json_falls_back_to_the_word_rule() -> None:
    assert safe_body(b'{"password": "s3cret"', JSON) == KeptBody(None, True)


# --- every other body ---------------------------------------------------------------------------


def test_a_multipart_body_naming_a_credential_is_not_kept() -> None:
    body = (
        b'--b\r\nContent-Disposition: form-data; name="username"\r\n\r\nalice\r\n'
        b'--b\r\nContent-Disposition: form-data; name="password"\r\n\r\ns3cret\r\n--b--\r\n'
    )
    assert safe_body(body, "multipart/form-data; boundary=b") == KeptBody(None, True)


def test_a_multipart_body_naming_no_credential_is_kept() -> None:
    body = b'--b\r\nContent-Disposition: form-data; name="city"\r\n\r\nOslo\r\n--b--\r\n'
    assert safe_body(body, "multipart/form-data; boundary=b") == KeptBody(body, False)


@pytest.mark.parametrize(
    "body",
    [
        b"username=alice&password=s3cret",  # a form sent without its content type
        b"<login><pwd>s3cret</pwd></login>",
        b"Authorization: Bearer abc",
        b"x-payment=abc",
        "password=s3cret".encode("utf-16"),
        "api_key: s3cret".encode("utf-32"),
    ],
)
def test_a_body_of_another_type_naming_a_credential_is_not_kept(body: bytes) -> None:
    assert safe_body(body, None) == KeptBody(None, True)
    assert safe_body(body, "text/plain") == KeptBody(None, True)


@pytest.mark.parametrize(
    "body",
    [
        b"a signal passes the design review",
        b"line one\nline two\n\x00\xff",
        bytes(range(256)),
        "Grüße aus Köln".encode("utf-16"),
    ],
)
def test_a_body_of_another_type_naming_no_credential_is_kept_as_it_is(body: bytes) -> None:
    assert safe_body(body, "application/octet-stream") == KeptBody(body, False)


def test_an_empty_body_is_kept() -> None:
    assert safe_body(b"", FORM) == KeptBody(b"", False)
    assert safe_body(b"", None) == KeptBody(b"", False)


def test_a_large_body_is_read_whole() -> None:
    # Up to the journal's bound (1 MiB): the credential at the very end is found.
    fields = b"&".join(b"f%d=v" % i for i in range(120_000)) + b"&password=s3cret"
    kept = safe_body(fields, FORM)
    assert kept.redacted and kept.body is not None and kept.body.endswith(b"&password=REDACTED")
    items = [{"n": i} for i in range(60_000)] + [{"token": "s3cret"}]
    document, redacted = kept_json({"items": items})
    assert redacted and document["items"][-1] == {"token": "REDACTED"}
    assert document["items"][:-1] == items[:-1]
    text = b"ordinary words " * 60_000 + b"secret"
    assert safe_body(text, "text/plain") == KeptBody(None, True)
