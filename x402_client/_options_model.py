"""The pydantic models that validate `PaymentOptions` and `EvmOptions`, built on first use.

`_options` declares each option once (its type, default, bounds, camelCase alias and the
checks of `_options_checks`); the first construction of an options class builds its model
here with `pydantic.create_model`, so that importing the package loads no pydantic. The
options objects stay what `_options` defines: the model only validates, and its errors
become one `ConfigurationError` that lists every problem (in pydantic's words), names each
place and never shows a value.
"""

from __future__ import annotations

import sys
import typing
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Protocol

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    ValidationError,
    WrapValidator,
    create_model,
)
from pydantic_core import PydanticCustomError

from . import _options_checks as checks
from ._protocol.errors import ConfigurationError

__all__ = ["model_of", "validate"]

_CONFIG = ConfigDict(
    extra="forbid",
    validate_by_name=True,
    validate_by_alias=True,
    arbitrary_types_allowed=True,
    frozen=True,
)


class OptionSpec(Protocol):
    """What `_options.Option` declares about one option (read here, never imported)."""

    @property
    def name(self) -> str: ...
    @property
    def alias(self) -> str: ...
    @property
    def default(self) -> Any: ...
    @property
    def default_factory(self) -> Callable[[], Any] | None: ...
    @property
    def bounds(self) -> Mapping[str, float]: ...
    @property
    def validate_as(self) -> str | None: ...
    @property
    def before(self) -> Callable[[Any], Any] | None: ...
    @property
    def after(self) -> Callable[[Any], Any] | None: ...
    @property
    def plain(self) -> Callable[[Any], Any] | None: ...
    @property
    def item(self) -> Callable[[Any, Callable[[Any], Any]], Any] | None: ...
    @property
    def hint(self) -> str: ...

    def is_required(self) -> bool: ...


#: An options class of `_options` (`model_fields`: name -> `OptionSpec`).
OptionsClass = type[Any]


_MODELS: dict[Any, type[BaseModel]] = {}


def model_of(cls: OptionsClass) -> type[BaseModel]:
    """The pydantic model that validates `cls`'s options (built once, on first use)."""
    model = _MODELS.get(cls)
    if model is None:
        fields = {name: _field(cls, spec) for name, spec in cls.model_fields.items()}
        model = create_model(  # type: ignore[call-overload]
            f"{cls.__name__}Values", __config__=_CONFIG, **fields
        )
        _MODELS[cls] = model
    return model


def validate(cls: OptionsClass, values: Mapping[str, Any]) -> dict[str, Any]:
    """The options kept from `values` (snake_case or camelCase keys), by name.

    Raises `ConfigurationError`: "invalid <class>: <where>: <problem>; ..." (the option's
    errors first, in declaration order, then the unknown keys in the order given).
    """
    try:
        validated = model_of(cls).model_validate(values)
    except ValidationError as exc:
        raise ConfigurationError(f"invalid {cls.__name__}: {_problems(cls, exc)}") from None
    return {name: getattr(validated, name) for name in cls.model_fields}


def _problems(cls: OptionsClass, error: ValidationError) -> str:
    names = [n for spec in cls.model_fields.values() for n in (spec.name, spec.alias)]
    problems = []
    for detail in error.errors(include_url=False, include_input=False):
        where = ".".join(map(str, detail["loc"]))
        message = detail["msg"]
        if detail["type"] == "extra_forbidden":
            message = checks.unknown_option(where, names)
        elif detail["type"] == "dataclass_type" and len(detail["loc"]) == 2:
            message += cls.model_fields[_name(cls, detail["loc"][0])].hint
        problems.append(f"{where}: {message}")
    return "; ".join(problems)


def _name(cls: OptionsClass, key: Any) -> str:
    specs: Mapping[str, OptionSpec] = cls.model_fields
    return next(n for n, s in specs.items() if key in (n, s.alias))


# --- one field -----------------------------------------------------------------------------------


def _field(cls: OptionsClass, spec: OptionSpec) -> tuple[Any, Any]:
    annotation = _resolve(cls, spec.validate_as or _declared(cls, spec.name))
    if spec.item is not None:  # a tuple whose items pass through the item check
        (item, _) = typing.get_args(annotation)
        annotation = tuple[Annotated[item, WrapValidator(_item_kind(spec.item))], ...]  # type: ignore[valid-type]
    metadata: list[Any] = []
    if spec.plain is not None:
        metadata.append(PlainValidator(_kind(spec.plain)))
    if spec.before is not None:
        metadata.append(BeforeValidator(_kind(spec.before)))
    if spec.after is not None:
        after = spec.after
        if spec.default is None and not spec.is_required():  # None stays None
            metadata.append(AfterValidator(lambda v: None if v is None else after(v)))
        else:
            metadata.append(AfterValidator(after))
    if metadata:
        annotation = Annotated[(annotation, *metadata)]
    return annotation, _info(spec)


def _info(spec: OptionSpec) -> Any:
    """The field's default and bounds, and its camelCase alias."""
    info: dict[str, Any] = {"alias": spec.alias, **spec.bounds}
    if spec.default_factory is not None:
        info["default_factory"] = spec.default_factory
    elif not spec.is_required():
        info["default"] = spec.default
    return Field(**info)


def _declared(cls: OptionsClass, name: str) -> str:
    """The annotation `name` has in the class body that declares it (a string)."""
    for klass in cls.__mro__:
        annotations = vars(klass).get("__annotations__", {})
        if name in annotations:
            return typing.cast(str, annotations[name])
    raise TypeError(f"{cls.__name__}.{name} has no annotation")


def _resolve(cls: OptionsClass, annotation: str) -> Any:
    """`annotation`, evaluated in the namespace of `cls`'s module."""
    namespace = vars(sys.modules[cls.__module__])

    def holder() -> None: ...

    holder.__annotations__ = {"value": annotation}
    return typing.get_type_hints(holder, globalns=namespace)["value"]


def _kind(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """`check`, its `WrongKind` raised as pydantic's error with that very message."""

    def run(value: Any) -> Any:
        try:
            return check(value)
        except checks.WrongKind as exc:
            raise _error(exc) from None

    return run


def _item_kind(
    check: Callable[[Any, Callable[[Any], Any]], Any],
) -> Callable[[Any, Callable[[Any], Any]], Any]:
    """`_kind` for an item check, which is also given pydantic's validation of the item."""

    def run(value: Any, validate: Callable[[Any], Any]) -> Any:
        try:
            return check(value, validate)
        except checks.WrongKind as exc:
            raise _error(exc) from None

    return run


def _error(exc: Exception) -> PydanticCustomError:
    return PydanticCustomError("option", "{message}", {"message": str(exc)})
