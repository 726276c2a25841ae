"""The MCP tools' JSON Schemas, generated from their Structs and made portable across providers."""

from __future__ import annotations

from typing import Any

import msgspec


def object_schema(struct: type[msgspec.Struct], arguments: bool = False) -> dict[str, Any]:
    """A top-level object schema (MCP wants no top-level $ref): inline the referenced definition.
    Every `enum` gets its `type`; tool arguments are also made portable (`_portable`)."""
    schema = msgspec.json.schema(struct)
    defs = schema.get("$defs", {})
    name = schema["$ref"].rsplit("/", 1)[-1]
    top = dict(defs.pop(name))
    top.pop("title", None)
    if defs:
        top["$defs"] = defs
    _type_enums(top)
    top = dict(_inlined(top, top.pop("$defs", {}), arguments))
    if arguments:
        _portable(top)
    return top


def _inlined(node: Any, defs: dict[str, Any], portable: bool) -> Any:
    """Every `$ref` replaced by its definition (Gemini's function declarations take no
    references, and want a type on every property); with `portable` (tool arguments), each
    nested object made portable too."""
    if isinstance(node, list):
        return [_inlined(value, defs, portable) for value in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        definition = {k: v for k, v in defs[ref.rsplit("/", 1)[-1]].items() if k != "title"}
        nested = _inlined(definition, defs, portable)
        if portable:
            _portable(nested)
        return {**{k: v for k, v in node.items() if k != "$ref"}, **nested}
    return {key: _inlined(value, defs, portable) for key, value in node.items()}


def _type_enums(node: Any) -> None:
    """Give every `enum` of strings `type: "string"` (Gemini's function declarations need a
    type on every schema; msgspec writes a Literal as a bare enum)."""
    if isinstance(node, dict):
        enum = node.get("enum")
        if isinstance(enum, list) and "type" not in node and all(isinstance(v, str) for v in enum):
            node["type"] = "string"
        for value in node.values():
            _type_enums(value)
    elif isinstance(node, list):
        for value in node:
            _type_enums(value)


def _portable(schema: dict[str, Any]) -> None:
    """Optional arguments as providers' strict modes accept them: no `default` (strict
    conversions keep it, and Azure OpenAI rejects it; the description says the default) and
    nullable, `anyOf [T, {type: null}]` — a strict conversion makes every property required,
    and null counts as absent (SEMANTICS.md section 3). Generic over the Struct's fields."""
    required = set(schema.get("required", ()))
    for name, prop in schema.get("properties", {}).items():
        if name in required:
            continue
        prop.pop("default", None)
        branches = prop.get("anyOf")
        if isinstance(branches, list) and {"type": "null"} in branches:
            continue
        keep = {k: prop.pop(k) for k in ("description", "title") if k in prop}
        branch = dict(prop)
        prop.clear()
        prop.update(keep)
        prop["anyOf"] = [branch, {"type": "null"}]
