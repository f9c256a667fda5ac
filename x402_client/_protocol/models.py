"""Pydantic models for every resource on the wire (docs/protocol.md).

Field names are the protocol's own in snake_case, with the wire's camelCase as alias.
Unknown extra fields are tolerated (`extra="allow"`); wrong types and missing required
fields are not: string fields are strict (a number where a string belongs is refused),
and amounts go through the strict parsers in `_amounts`.

What the protocol leaves open and the payment API varies in (envelopes, error
capitalisation, the transaction record) lives in `_provider`, not here.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    Strict,
    StrictBool,
    ValidationError,
    field_validator,
)

from .amounts import parse_amount, parse_atomic

__all__ = [
    "X402_VERSION",
    "AcceptEntry",
    "BatchAcceptEntry",
    "BridgePayload",
    "ChainADirectPayload",
    "CreatePaymentRequest",
    "CreatedPaymentRequest",
    "EuroAcceptEntry",
    "EuroPayload",
    "EvmPermitExtra",
    "EvmPermitPayload",
    "ExactAcceptEntry",
    "InvalidEntry",
    "PaymentProof",
    "PaymentRequired",
    "PaymentRequirements",
    "PermitValues",
    "SettlementRequest",
    "SettlementResult",
    "SupportedKind",
    "SupportedKinds",
    "UptoAcceptEntry",
    "VerificationResult",
    "VerifyRequest",
    "first_error",
    "parse_accept",
]

X402_VERSION = 2

WireStr = Annotated[str, Strict()]
WireInt = Annotated[int, Strict()]


def _wire_amount(value: object) -> Decimal:
    # The protocol types this field as a string; a JSON number is refused rather than guessed.
    if not isinstance(value, str):
        raise ValueError(f"amount must be a decimal string, not {type(value).__name__}")
    return parse_amount(value)


def _json_amount(value: object) -> Decimal:
    # JSON numbers reach us as int or Decimal (see `_json.loads`), never as float.
    if isinstance(value, (int, Decimal)) and not isinstance(value, bool):
        return parse_amount(value, allow_zero=True)
    if isinstance(value, str):
        return parse_amount(value, allow_zero=True)
    raise ValueError(f"amount must be a number, not {type(value).__name__}")


def _uint_text(value: object) -> int:
    """An unsigned integer written as a JSON number or a decimal string (uint256 values)."""
    if isinstance(value, bool):
        raise ValueError("expected an unsigned integer")
    if isinstance(value, int):
        result = value
    elif isinstance(value, str) and re.fullmatch(r"[0-9]{1,78}", value):
        result = int(value)
    else:
        raise ValueError("expected an unsigned integer or its decimal string")
    if result < 0 or result >= 2**256:
        raise ValueError("value out of uint256 range")
    return result


#: A decimal currency amount written as a string on the wire (`"0.10"`).
WireAmount = Annotated[Decimal, BeforeValidator(_wire_amount), PlainSerializer(str)]
#: An atomic amount written as an integer string on the wire (`"100000"`).
WireAtomic = Annotated[int, BeforeValidator(parse_atomic), PlainSerializer(str)]
#: A decimal amount written as a JSON number (`0.10`); kept as `Decimal`.
JsonAmount = Annotated[Decimal, BeforeValidator(_json_amount)]
#: A uint256 carried as a decimal string (accepted as a number too).
WireUint = Annotated[int, BeforeValidator(_uint_text), PlainSerializer(str)]

_ADDRESS_RE = re.compile(r"\A0x[0-9a-fA-F]{40}\Z")


class _Wire(BaseModel):
    # defer_build: validators are built on first use, not at import (start-up time).
    model_config = ConfigDict(extra="allow", populate_by_name=True, frozen=True, defer_build=True)

    def to_wire(self) -> dict[str, Any]:
        """The wire form: camelCase keys, amounts as their wire strings, no unset options."""
        return self.model_dump(by_alias=True, exclude_none=True)


# --- 402 body and accept entries -------------------------------------------------------


class PaymentRequired(_Wire):
    """The 402 body: `x402Version` 2, `error`, and one or more raw `accepts` entries.

    Entries stay raw here: each is parsed on its own (`parse_accept`), so that one entry
    of an unknown scheme does not spoil the others.
    """

    x402_version: WireInt = Field(alias="x402Version")
    error: WireStr | None = None
    accepts: list[dict[str, Any]] = Field(min_length=1)

    @field_validator("x402_version")
    @classmethod
    def _version(cls, value: int) -> int:
        if value != X402_VERSION:
            raise ValueError(f"x402Version {value} is not supported (this client speaks 2)")
        return value


class EuroAcceptEntry(_Wire):
    """Accept entry, scheme `euro`: pay a single-use payment request on `provider:mainnet`."""

    scheme: Literal["euro"]
    network: WireStr
    asset: WireStr
    amount: WireAmount
    pay_to: WireStr = Field(alias="payTo")
    #: A `pr_` code of at most 128 characters (letters, digits, `_` `-` `.` `:`).
    payment_request_code: WireStr = Field(
        alias="paymentRequestCode", pattern=r"^pr_[A-Za-z0-9_\-.:]{0,125}$"
    )
    expires_at: WireInt | None = Field(default=None, alias="expiresAt")
    facilitator: WireStr | None = None


class ExactAcceptEntry(_Wire):
    """Accept entry, scheme `exact` (chain A or EVM): atomic amount, receiving address."""

    scheme: Literal["exact"]
    network: WireStr
    asset: WireStr
    max_amount_required: WireAtomic = Field(alias="maxAmountRequired")
    pay_to: WireStr = Field(alias="payTo")
    max_timeout_seconds: WireInt = Field(default=300, alias="maxTimeoutSeconds", ge=1, le=86_400)
    resource: WireStr | None = None
    description: WireStr | None = None
    mime_type: WireStr | None = Field(default=None, alias="mimeType")
    facilitator: WireStr | None = None
    extra: dict[str, Any] | None = None


class UptoAcceptEntry(_Wire):
    """Accept entry, scheme `upto` (the x402 foundation's EVM `upto`, v2 only): the payer
    authorizes at most `max_amount_required` (the standard entry's `amount`, atomic units)
    through Permit2; the merchant settles what the request used, no more than that."""

    scheme: Literal["upto"]
    network: WireStr
    asset: WireStr
    max_amount_required: WireAtomic = Field(alias="maxAmountRequired")
    pay_to: WireStr = Field(alias="payTo")
    max_timeout_seconds: WireInt = Field(default=300, alias="maxTimeoutSeconds", ge=1, le=86_400)
    resource: WireStr | None = None
    description: WireStr | None = None
    mime_type: WireStr | None = Field(default=None, alias="mimeType")
    extra: dict[str, Any] | None = None


class BatchAcceptEntry(_Wire):
    """Accept entry, scheme `batch-settlement` (the x402 foundation's EVM payment channel,
    v2 only): `max_amount_required` (the standard entry's `amount`) is the most one request
    may be charged; the payer deposits into the channel's escrow once and signs a
    cumulative voucher per request. `extra` carries the channel's terms
    (`_protocol.batch_settlement.parse_terms` reads them)."""

    scheme: Literal["batch-settlement"]
    network: WireStr
    asset: WireStr
    max_amount_required: WireAtomic = Field(alias="maxAmountRequired")
    pay_to: WireStr = Field(alias="payTo")
    max_timeout_seconds: WireInt = Field(default=300, alias="maxTimeoutSeconds", ge=1, le=86_400)
    resource: WireStr | None = None
    description: WireStr | None = None
    mime_type: WireStr | None = Field(default=None, alias="mimeType")
    extra: dict[str, Any] | None = None


class EvmPermitExtra(_Wire):
    """`extra` of an EVM permit entry. The EIP-3009 scheme carries `name`/`version` instead."""

    symbol: WireStr
    spender: WireStr

    @field_validator("spender")
    @classmethod
    def _address(cls, value: str) -> str:
        if not _ADDRESS_RE.match(value):
            raise ValueError("spender must be a 0x-prefixed 20-byte address")
        return value


# --- X-PAYMENT proof ---------------------------------------------------------------------


class EuroPayload(_Wire):
    payment_request_code: WireStr = Field(alias="paymentRequestCode")


class ChainADirectPayload(_Wire):
    transaction: WireStr
    payment_index: WireInt = Field(default=0, alias="paymentIndex")


class BridgePayload(_Wire):
    transaction_code: WireStr = Field(alias="transactionCode")
    blockchain_tx_id: WireStr = Field(alias="blockchainTxId")
    pay_to: WireStr = Field(alias="payTo")
    asset: WireStr


class PermitValues(_Wire):
    """The signed EIP-2612 values. Integers travel as decimal strings (uint256-safe)."""

    owner: WireStr
    spender: WireStr
    value: WireUint
    nonce: WireUint
    deadline: WireUint


class EvmPermitPayload(_Wire):
    owner: WireStr
    permit: PermitValues
    signature: WireStr

    @field_validator("signature")
    @classmethod
    def _hex(cls, value: str) -> str:
        if not re.fullmatch(r"0x[0-9a-fA-F]+", value):
            raise ValueError("signature must be 0x-prefixed hex")
        return value


class PaymentProof(_Wire):
    """The JSON inside `X-PAYMENT`; `payload` is one of the four payload models' wire form."""

    x402_version: WireInt = Field(default=X402_VERSION, alias="x402Version")
    scheme: WireStr
    network: WireStr
    payload: dict[str, Any]


# --- managed-account facilitator -----------------------------------------------------------


class CreatePaymentRequest(_Wire):
    """Body of `POST /x402/pay`: the merchant asks for a payment request."""

    account_code: WireStr = Field(alias="accountCode")
    amount: JsonAmount
    message: WireStr = ""


class CreatedPaymentRequest(_Wire):
    payment_request_code: WireStr = Field(alias="paymentRequestCode")
    accepts: list[dict[str, Any]]


class VerifyRequest(_Wire):
    """Body of `POST /x402/verify`."""

    proof: WireStr


class VerificationResult(_Wire):
    """`valid`, and `paymentRequestCode`/`amount` when valid, `reason` when not."""

    valid: StrictBool
    payment_request_code: WireStr | None = Field(default=None, alias="paymentRequestCode")
    amount: JsonAmount | None = None
    reason: WireStr | None = None


# --- on-chain facilitator ------------------------------------------------------------------


class PaymentRequirements(_Wire):
    scheme: WireStr
    network: WireStr
    max_amount_required: WireStr = Field(alias="maxAmountRequired")
    pay_to: WireStr = Field(alias="payTo")
    asset: WireStr
    resource: WireStr | None = None
    description: WireStr | None = None
    mime_type: WireStr | None = Field(default=None, alias="mimeType")
    max_timeout_seconds: WireInt | None = Field(default=None, alias="maxTimeoutSeconds")
    extra: dict[str, Any] | None = None


class SettlementRequest(_Wire):
    """Body of `POST /settle` (and of `/verify` in the sandbox).

    `payment_payload` is the X-PAYMENT value; a decoded proof object is accepted too.
    """

    x402_version: WireInt = Field(default=X402_VERSION, alias="x402Version")
    payment_payload: WireStr | dict[str, Any] = Field(alias="paymentPayload")
    payment_requirements: PaymentRequirements = Field(alias="paymentRequirements")


class SettlementResult(_Wire):
    success: StrictBool
    tx_hash: WireStr | None = Field(default=None, alias="txHash")
    error_reason: WireStr | None = Field(default=None, alias="errorReason")
    payer: WireStr | None = None
    network: WireStr | None = None


class SupportedKind(_Wire):
    x402_version: WireInt = Field(default=X402_VERSION, alias="x402Version")
    scheme: WireStr
    network: WireStr
    asset: WireStr | None = None
    extra: dict[str, Any] | None = None


class SupportedKinds(_Wire):
    """Answer of `GET /supported`: a shape the protocol leaves open (the sandbox's and the
    client's)."""

    kinds: list[SupportedKind]


AcceptEntry = EuroAcceptEntry | ExactAcceptEntry | UptoAcceptEntry | BatchAcceptEntry


class InvalidEntry(ValueError):
    """One accept entry that could not be read; the others may still be payable."""


def first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "body"
    return f"{where}: {err['msg']}"


def parse_accept(raw: Any) -> AcceptEntry | None:
    """Parse one accept entry: `None` for a scheme this client does not know."""
    if not isinstance(raw, dict):
        raise InvalidEntry("entry is not an object")
    scheme = raw.get("scheme")
    model: type[EuroAcceptEntry] | type[ExactAcceptEntry]
    if scheme == "euro":
        model = EuroAcceptEntry
    elif scheme == "exact":
        model = ExactAcceptEntry
    else:
        return None
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise InvalidEntry(first_error(exc)) from None
