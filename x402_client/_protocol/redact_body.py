"""What the journal keeps of a request body: the body less its credentials.

A paid request's body is journaled so that recovery can re-send it; a body may carry the
caller's credentials (a login form's `password`, a JSON `{"api_key": ...}`, an MCP tool's
`token` argument), which the journal never keeps. Field names are judged by the one policy
that judges query parameters (`_redact.sensitive`):

- a form (`application/x-www-form-urlencoded`): the value of every field whose name says
  credential becomes `REDACTED`;
- JSON (`application/json`, any `...+json`; an MCP tool's arguments): the value of every
  object key, at any depth, whose name says credential becomes `"REDACTED"`;
- any other body (multipart, text, bytes, no content type), and a form or JSON body that
  cannot be read as one (not valid JSON, nested deeper than `_json.MAX_DEPTH`): kept as it
  is only when no word in it (a run of letters, digits, `_`, `-` and `.`) names a
  credential; else not kept at all.

A body with no credential in it is kept byte for byte; one that was redacted or not kept
is not the body that was sent, and recovery asks for that body instead of re-sending it.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple
from urllib.parse import unquote_to_bytes

from . import exact_json as _json
from .redact import REDACTED, sensitive

__all__ = ["KeptBody", "safe_body"]

_FORM = "application/x-www-form-urlencoded"
#: A word of a body that is neither a form nor JSON: what a field's name is made of.
_WORD = re.compile(rb"[A-Za-z0-9_.\-]+")
_REDACTED_VALUE = REDACTED.encode()


class KeptBody(NamedTuple):
    """A body as the journal keeps it: `body` (None: not kept), and `redacted`: it is not
    the body that was sent (credentials were replaced, or it was not kept)."""

    body: bytes | None
    redacted: bool


def safe_body(body: bytes, content_type: str | None) -> KeptBody:
    """`body`, sent with `content_type`, as the journal keeps it (see the module docstring)."""
    if not body:
        return KeptBody(body, False)
    media = (content_type or "").partition(";")[0].strip().lower()
    if media == _FORM:
        return _safe_form(body)
    if media == "application/json" or media.endswith("+json"):
        kept = _safe_json(body)
        if kept is not None:
            return kept
    return _safe_words(body)


def _form_name(raw: bytes) -> str:
    """A form field's name, decoded as a server reads it."""
    return unquote_to_bytes(raw.replace(b"+", b" ")).decode("utf-8", "replace")


def _safe_form(body: bytes) -> KeptBody:
    # Field by field on the bytes, so that the fields kept stay exactly as they were sent
    # (whatever their encoding).
    fields = body.split(b"&")
    redacted = False
    for index, field in enumerate(fields):
        name, equals, _ = field.partition(b"=")
        if equals and sensitive(_form_name(name)):
            fields[index] = name + b"=" + _REDACTED_VALUE
            redacted = True
    return KeptBody(b"&".join(fields), True) if redacted else KeptBody(body, False)


def _safe_json(body: bytes) -> KeptBody | None:
    """None when `body` is not JSON this client reads."""
    try:
        document = _json.loads(body)
    except _json.JSONError:
        return None
    if not _redact_keys(document):
        return KeptBody(body, False)
    return KeptBody(_json.dumps(document), True)


def _redact_keys(document: Any) -> bool:
    """Replace, in place, the value of every object key that names a credential, at any
    depth (without recursion); whether there was one."""
    found = False
    stack = [document]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if sensitive(key):
                    node[key] = REDACTED
                    found = True
                elif isinstance(value, (dict, list)):
                    stack.append(value)
        elif isinstance(node, list):
            stack.extend(item for item in node if isinstance(item, (dict, list)))
    return found


def _safe_words(body: bytes) -> KeptBody:
    # Text in UTF-16 or -32 spells an ASCII word with zero bytes between its letters.
    words = set(_WORD.findall(body.replace(b"\x00", b"")))
    if any(sensitive(word.decode("ascii")) for word in words):
        return KeptBody(None, True)
    return KeptBody(body, False)
