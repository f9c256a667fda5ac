"""The x402 `payment-identifier` extension's identifier: its name, its rule, and reading it
from a decoded proof. Pure; the dialects (`_dialects`) declare and frame it, receipts and
journal records read it back."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["PAYMENT_IDENTIFIER", "is_valid_payment_id", "payment_id_of"]

#: The extension's key in a 402's and a proof's `extensions`.
PAYMENT_IDENTIFIER = "payment-identifier"

_PAYMENT_ID = re.compile(r"[A-Za-z0-9_-]{16,128}")


def is_valid_payment_id(value: Any) -> bool:
    """16 to 128 characters of letters, digits, `_` and `-` (the extension's rule)."""
    return isinstance(value, str) and _PAYMENT_ID.fullmatch(value) is not None


def payment_id_of(decoded: Mapping[str, Any]) -> str | None:
    """The `payment-identifier` a decoded v2 proof carries, if any."""
    extensions = decoded.get("extensions")
    declared = extensions.get(PAYMENT_IDENTIFIER) if isinstance(extensions, Mapping) else None
    info = declared.get("info") if isinstance(declared, Mapping) else None
    found = info.get("id") if isinstance(info, Mapping) else None
    return found if is_valid_payment_id(found) else None
