"""Tool argument validation with the exact texts of SEMANTICS.md section 3, driven by the Structs."""

from __future__ import annotations

import json
import typing
from functools import cache
from typing import Any, Literal

import msgspec

from subagentd.core import texts
from subagentd.errors import InvalidParamsError


@cache
def _rules(struct: type[msgspec.Struct]) -> list[tuple[str, bool, tuple[str, ...] | None]]:
    """(name, required, allowed values or None for "any string") per field, in schema order."""
    info: msgspec.inspect.StructType = msgspec.inspect.type_info(struct)  # type: ignore[assignment]  # a Struct type's info is a StructType
    rules = []
    for field in info.fields:
        hint = typing.get_type_hints(struct)[field.name]
        choices = typing.get_args(hint) if typing.get_origin(hint) is Literal else None
        rules.append((field.encode_name, field.required, choices))
    return rules


def check_arguments(struct: type[msgspec.Struct], arguments: Any) -> msgspec.Struct:
    """Validate tool arguments (all violations, in schema order) and build the Struct."""
    if not isinstance(arguments, dict):
        raise InvalidParamsError(
            texts.INVALID_ARGUMENTS.format(violations=texts.ARGUMENTS_NOT_OBJECT)
        )
    violations = []
    values = {}
    for name, required, choices in _rules(struct):
        value = arguments.get(name)
        if value is None:
            if required:
                violations.append(texts.MISSING_PROPERTY.format(name=name))
            continue
        if not isinstance(value, str):
            violations.append(
                texts.MUST_BE_STRING.format(name=name)
                if choices is None
                else texts.MUST_BE_ONE_OF.format(name=name, choices=_choices(choices))
            )
        elif choices is not None and value not in choices:
            violations.append(texts.MUST_BE_ONE_OF.format(name=name, choices=_choices(choices)))
        else:
            values[name] = value
    if violations:
        raise InvalidParamsError(texts.INVALID_ARGUMENTS.format(violations="; ".join(violations)))
    return struct(**values)


def _choices(choices: tuple[str, ...]) -> str:
    return json.dumps(list(choices), separators=(",", ":"))
