"""jsonrpcserver, imported without the parts subagentd never runs: ~6 MiB of RSS kept out.

Importing jsonrpcserver imports two things the server never uses. Its `main` module builds a
default request validator from jsonschema (~4 MiB, ~90 ms): every dispatch here passes its own
`validator` (server/rpc.py), since msgspec decoded the message and the dispatcher checked the
envelope. Its `server` module defines a development HTTP server on `http.server`, which pulls in
`http.client`, `email`, `socketserver` and `mimetypes` (~2.4 MiB, ~17 ms).

So while jsonrpcserver imports, stand-ins answer those two imports. They fail loudly if used: the
default validator refuses every request (jsonrpcserver then answers "Invalid request"), and the
HTTP server classes cannot be instantiated. Once jsonrpcserver is in, the stand-ins are gone from
`sys.modules`, so a later `import jsonschema` or `import http.server` loads the real module. A
module imported already is not stood in for, and neither is anything once jsonrpcserver is.
"""

from __future__ import annotations

import sys
import types
from typing import Any

UNUSED = "{} is not loaded in subagentd (server/jsonrpcserver_import.py): {}"


class NoDefaultValidator:
    """What jsonrpcserver's default validator is built from here: it refuses every request."""

    def __init__(self, schema: Any) -> None:
        self.schema = schema

    @classmethod
    def check_schema(cls, schema: Any) -> None:
        """jsonrpcserver checks its bundled schema once at import: nothing to check here."""

    def validate(self, instance: Any) -> None:
        raise RuntimeError(UNUSED.format("jsonschema", "pass jsonrpcserver a validator"))


def validator_for(schema: Any) -> type[NoDefaultValidator]:
    return NoDefaultValidator


class NoHttpServer:
    """Stands in for http.server's BaseHTTPRequestHandler and HTTPServer (jsonrpcserver.serve)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError(UNUSED.format("http.server", "jsonrpcserver.serve is not available"))


def _stand_ins() -> dict[str, types.ModuleType]:
    jsonschema = types.ModuleType("jsonschema", "stand-in while jsonrpcserver imports")
    jsonschema.__path__ = []
    validators = types.ModuleType("jsonschema.validators")
    validators.validator_for = validator_for  # type: ignore[attr-defined]
    jsonschema.validators = validators  # type: ignore[attr-defined]
    http_server = types.ModuleType("http.server", "stand-in while jsonrpcserver imports")
    http_server.BaseHTTPRequestHandler = NoHttpServer  # type: ignore[attr-defined]
    http_server.HTTPServer = NoHttpServer  # type: ignore[attr-defined]
    return {
        "jsonschema": jsonschema,
        "jsonschema.validators": validators,
        "http.server": http_server,
    }


def import_jsonrpcserver() -> types.ModuleType:
    """The jsonrpcserver package, imported with the stand-ins when it is not loaded yet."""
    if "jsonrpcserver" not in sys.modules:
        stand_ins = _stand_ins()
        if "jsonschema" in sys.modules or "jsonschema.validators" in sys.modules:
            del stand_ins["jsonschema"], stand_ins["jsonschema.validators"]
        if "http.server" in sys.modules:
            del stand_ins["http.server"]
        sys.modules.update(stand_ins)
        try:
            import jsonrpcserver
        finally:
            for name, module in stand_ins.items():
                if sys.modules.get(name) is module:
                    del sys.modules[name]
    import jsonrpcserver

    return jsonrpcserver
