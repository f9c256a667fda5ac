"""Helpers shared by the sandbox's Starlette apps: exact JSON in and out."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from . import _wire as _json
from ._bank import BankError

__all__ = ["json_body", "json_response"]


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(
        _json.dumps(body), status_code=status, media_type="application/json", headers=headers
    )


async def json_body(request: Request) -> dict[str, Any]:
    try:
        data = _json.loads(await request.body())
    except _json.JSONError:
        raise BankError(400, "InvalidJson", "body is not valid JSON") from None
    if not isinstance(data, dict):
        raise BankError(400, "InvalidJson", "body must be a JSON object")
    return data
