"""Tool argument validation with the exact texts of SEMANTICS.md section 3, driven by the Structs."""

from __future__ import annotations

import json
import typing
from functools import cache
from typing import Any, Literal

import msgspec

from subagentd.core import texts
from subagentd.errors import InvalidParamsError, closest_name

Rule = tuple[str, bool, Any]  # (name, required, allowed values | "str" | "int" | "list" | Struct)


@cache
def _rules(struct: type[msgspec.Struct]) -> list[Rule]:
    """(name, required, what it takes) per field, in schema order: a tuple of allowed strings,
    "str", "int" (with its bounds from the schema) or "list" (of strings)."""
    info: msgspec.inspect.StructType = msgspec.inspect.type_info(struct)  # type: ignore[assignment]  # a Struct type's info is a StructType
    rules: list[Rule] = []
    for field in info.fields:
        hint = typing.get_type_hints(struct)[field.name]
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        structs = [a for a in args if isinstance(a, type) and issubclass(a, msgspec.Struct)]
        if structs:
            rules.append((field.encode_name, field.required, structs[0]))
        elif typing.get_origin(hint) is Literal:
            rules.append((field.encode_name, field.required, typing.get_args(hint)))
        elif hint is int:
            meta = getattr(field.type, "type", field.type)  # inside the description's Metadata
            bounds = (getattr(meta, "ge", None) or 0, getattr(meta, "le", None) or 2**63 - 1)
            rules.append((field.encode_name, field.required, ("int", *bounds)))
        elif typing.get_origin(hint) is list or any(typing.get_origin(a) is list for a in args):
            rules.append((field.encode_name, field.required, "list"))
        else:
            rules.append((field.encode_name, field.required, "str"))
    return rules


def check_arguments(struct: type[msgspec.Struct], arguments: Any) -> msgspec.Struct:
    """Validate tool arguments (all violations, in schema order) and build the Struct."""
    if not isinstance(arguments, dict):
        raise InvalidParamsError(
            texts.INVALID_ARGUMENTS.format(violations=texts.ARGUMENTS_NOT_OBJECT)
        )
    violations = []
    values: dict[str, Any] = {}
    for name, required, choices in _rules(struct):
        value = arguments.get(name)
        if value is None:
            if required:
                violations.append(texts.MISSING_PROPERTY.format(name=name))
            continue
        if choices == "str":  # the most common rule first: a plain string
            if isinstance(value, str):
                values[name] = value
            else:
                violations.append(texts.MUST_BE_STRING.format(name=name))
            continue
        if isinstance(choices, type):  # an object of numbers (spawn_agent's budget)
            built = _check_object(name, choices, value, violations)
            if built is not None:
                values[name] = built
            continue
        if choices == "list":
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                values[name] = value
            else:
                violations.append(texts.MUST_BE_STRINGS.format(name=name))
            continue
        if type(choices) is tuple and choices[:1] == ("int",):
            low, high = choices[1], choices[2]
            if type(value) is int and low <= value <= high:
                values[name] = value
            else:
                violations.append(texts.MUST_BE_INTEGER.format(name=name, low=low, high=high))
            continue
        if isinstance(value, str) and value in choices:  # one of the Literal's choices
            values[name] = value
        else:
            violations.append(texts.MUST_BE_ONE_OF.format(name=name, choices=_choices(choices)))
    known = _known(struct)
    for name in arguments:
        if name not in known:  # a misspelled argument is never silently ignored
            violations.append(_unknown(name, known))
    if violations:
        raise InvalidParamsError(texts.INVALID_ARGUMENTS.format(violations="; ".join(violations)))
    return struct(**values)


def _check_object(
    name: str, struct: type[msgspec.Struct], value: Any, violations: list[str]
) -> msgspec.Struct | None:
    """An object of bounded numbers (spawn_agent's budget) or strings (its agent choice); its
    violations are named `<name>.<field>`."""
    if not isinstance(value, dict):
        violations.append(texts.MUST_BE_OBJECT.format(name=name))
        return None
    info: msgspec.inspect.StructType = msgspec.inspect.type_info(struct)  # type: ignore[assignment]  # a Struct type's info is a StructType
    before = len(violations)
    values: dict[str, Any] = {}
    for field in info.fields:
        item = value.get(field.encode_name)
        full = f"{name}.{field.encode_name}"
        if item is None:
            if field.required:
                violations.append(texts.MISSING_PROPERTY.format(name=full))
            continue
        kind = field.type
        if isinstance(kind, msgspec.inspect.UnionType):
            kind = next(t for t in kind.types if not isinstance(t, msgspec.inspect.NoneType))
        low, high = _bound(getattr(kind, "ge", None) or 0), _bound(getattr(kind, "le", None))
        if isinstance(kind, msgspec.inspect.StrType):
            if isinstance(item, str):
                values[field.name] = item
            else:
                violations.append(texts.MUST_BE_STRING.format(name=full))
        elif isinstance(kind, msgspec.inspect.IntType):
            if type(item) is int and low <= item <= high:
                values[field.name] = item
            else:
                violations.append(texts.MUST_BE_INTEGER.format(name=full, low=low, high=high))
        elif type(item) in (int, float) and low <= item <= high:  # NaN compares false
            values[field.name] = float(item)
        else:
            violations.append(texts.MUST_BE_NUMBER.format(name=full, low=low, high=high))
    return struct(**values) if len(violations) == before else None


@cache
def _known(struct: type[msgspec.Struct]) -> frozenset[str]:
    """The argument names a tool takes."""
    return frozenset(rule[0] for rule in _rules(struct))


def _unknown(name: str, known: frozenset[str]) -> str:
    """`unknown property "x"`, with `; did you mean "y"?` when a known name is close (the shape
    of the host API's unknown field)."""
    text = texts.UNKNOWN_PROPERTY.format(name=texts.shown(name))
    closest = closest_name(name, known)
    return text if closest is None else text + texts.DID_YOU_MEAN.format(name=closest)


def _bound(value: float | None) -> int | float:
    """A schema bound as the texts print it: whole numbers without a fraction."""
    if value is None:
        return 2**63 - 1
    return int(value) if float(value).is_integer() else value


def _choices(choices: tuple[str, ...]) -> str:
    return json.dumps(list(choices), separators=(",", ":"))
