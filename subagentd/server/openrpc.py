"""The OpenRPC 1.3 description of the wire, generated from the Structs the server validates with."""

from __future__ import annotations

import ast
import inspect
from functools import cache
from typing import Any, cast

import msgspec

import subagentd
from subagentd.mcp.tools import TOOLS
from subagentd.schema import codes
from subagentd.schema import lifecycle as lc
from subagentd.schema.base import Params
from subagentd.schema.codes import Code
from subagentd.schema.notifications import NOTIFICATIONS
from subagentd.schema.tools import ToolErrorData
from subagentd.server.handlers import METHODS

OPENRPC_VERSION = "1.3.2"
JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_REF = "#/components/schemas/{name}"
ERROR_REF = "#/components/errors/{name}"

# Client notifications the connection consumes before dispatch (PROTOCOL.md section 1).
CANCELLATION: dict[str, type[msgspec.Struct]] = {
    "notifications/cancelled": lc.CancelledParams,
    "$/cancelRequest": lc.CancelRequestParams,
}

# Codes a call of a known, well-formed request can be answered with; -32700, -32600 and -32601
# concern the frame or the method name, not a method.
_FRAME_CODES = (Code.PARSE_ERROR, Code.INVALID_REQUEST, Code.METHOD_NOT_FOUND)

DESCRIPTION = (
    "JSON-RPC 2.0 over stdin/stdout (one JSON value per line, or LSP Content-Length frames)."
    " Methods are called by the host; entries marked `x-notification` are notifications, and"
    ' those with `x-direction: "server-to-host"` are sent by subagentd to the host, which must'
    " not answer them. In the MCP stateless era (a request whose"
    ' `_meta["io.modelcontextprotocol/protocolVersion"]` is set) every object result also'
    ' carries `resultType: "complete"`; there the MCP tasks extension answers `tasks/get` and'
    " `tasks/cancel` in its own shapes and adds `tasks/update` and `subscriptions/listen`"
    " (PROTOCOL.md section 5). Optional fields are omitted from results, never null."
    " Clients must ignore result fields and notifications they do not know."
)


def document() -> dict[str, Any]:
    """The whole OpenRPC document as plain JSON-ready data."""
    served = {name: h for name, h in METHODS.items() if not h.extension_only}
    requests = {name: h for name, h in served.items() if h.result is not None}
    host_notes: dict[str, type[msgspec.Struct]] = {
        name: h.params or Params for name, h in served.items() if h.result is None
    }
    host_notes.update(CANCELLATION)
    params_of = {name: _params_type(name) for name in requests}

    types: list[Any] = []
    for name in sorted(requests):
        types += [params_of[name], requests[name].result]
    types += [host_notes[name] for name in sorted(host_notes)]
    types += [NOTIFICATIONS[name] for name in sorted(NOTIFICATIONS)]
    types.append(ToolErrorData)
    unique = list(dict.fromkeys(types))
    refs, schemas = msgspec.json.schema_components(unique, ref_template=SCHEMA_REF)
    ref_of = dict(zip(unique, refs, strict=True))

    def properties(struct: type[msgspec.Struct]) -> dict[str, Any]:
        component = ref_of[struct]["$ref"].rsplit("/", 1)[-1]
        props: dict[str, Any] = schemas[component].get("properties", {})
        return props

    def entry(name: str, struct: type[msgspec.Struct], description: str | None) -> dict[str, Any]:
        method: dict[str, Any] = {
            "name": name,
            "paramStructure": "by-name",
            "params": _content_descriptors(struct, properties(struct)),
            "x-params": ref_of[struct],
        }
        if description:
            method["description"] = description
        return method

    methods = []
    for name in sorted(requests):
        handler = requests[name]
        spec = TOOLS.get(name) if handler.tool else None
        method = entry(name, params_of[name], spec.description if spec else _doc(handler.run))
        method["result"] = {"name": "result", "required": True, "schema": ref_of[handler.result]}
        method["errors"] = [
            {"$ref": ERROR_REF.format(name=code.name)} for code in Code if code not in _FRAME_CODES
        ]
        if handler.tool:
            method["x-error-data"] = ref_of[ToolErrorData]
        methods.append(method)
    for name in sorted(host_notes):
        struct = host_notes[name]
        method = entry(name, struct, None if struct is Params else _doc(struct))
        method |= {"x-notification": True, "x-direction": "host-to-server"}
        methods.append(method)
    for name in sorted(NOTIFICATIONS):
        method = entry(name, NOTIFICATIONS[name], _doc(NOTIFICATIONS[name]))
        method |= {"x-notification": True, "x-direction": "server-to-host"}
        methods.append(method)

    return {
        "openrpc": OPENRPC_VERSION,
        "info": {
            "title": "subagentd",
            "version": subagentd.__version__,
            "description": DESCRIPTION,
            "x-protocol-version": subagentd.PROTOCOL,
        },
        "x-json-schema-dialect": JSON_SCHEMA_DIALECT,
        "methods": methods,
        "components": {"schemas": schemas, "errors": _errors()},
    }


def render() -> bytes:
    """The document as deterministic, indented JSON with a final newline (the committed form)."""
    raw = msgspec.json.encode(document(), order="sorted")
    return msgspec.json.format(raw, indent=2) + b"\n"


def _params_type(name: str) -> type[msgspec.Struct]:
    handler = METHODS[name]
    if handler.params is not None:
        return handler.params
    if handler.tool:
        return TOOLS[name].params
    return Params


def _content_descriptors(
    struct: type[msgspec.Struct], props: dict[str, Any]
) -> list[dict[str, Any]]:
    """One content descriptor per field, required ones first (OpenRPC wants that order)."""
    fields = cast(msgspec.inspect.StructType, msgspec.inspect.type_info(struct)).fields
    ordered = [f for f in fields if f.required] + [f for f in fields if not f.required]
    return [
        {"name": f.encode_name, "required": f.required, "schema": props[f.encode_name]}
        for f in ordered
    ]


def _doc(obj: Any) -> str | None:
    doc = inspect.getdoc(obj)
    # Struct subclasses without their own docstring would inherit a base class's.
    if doc and isinstance(obj, type) and obj.__dict__.get("__doc__") is None:
        return None
    return doc


def _errors() -> dict[str, dict[str, Any]]:
    described = code_descriptions()
    errors = {}
    for code in Code:
        error: dict[str, Any] = {"code": int(code), "message": code.name}
        if code.name in described:
            error["data"] = described[code.name]
        errors[code.name] = error
    return errors


@cache
def code_descriptions() -> dict[str, str]:
    """The docstring written under each member of `Code` (enum members keep none at runtime)."""
    try:
        tree = ast.parse(inspect.getsource(codes))
    except (OSError, TypeError):
        return {}
    body = next(n.body for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Code")
    found = {}
    for stmt, following in zip(body, body[1:], strict=False):
        if (
            isinstance(stmt, ast.Assign)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            for target in stmt.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = inspect.cleandoc(following.value.value)
    return found
