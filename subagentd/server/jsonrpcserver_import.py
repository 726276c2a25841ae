"""jsonrpcserver, imported without jsonschema: ~4 MiB of RSS and ~90 ms of start-up kept out.

jsonrpcserver builds a default request validator from jsonschema when it is imported. subagentd
never uses it: every dispatch passes its own `validator` (server/rpc.py), since msgspec decoded
the message and the dispatcher checked the envelope. So while jsonrpcserver imports, a stand-in
answers its `from jsonschema.validators import validator_for`; its validator refuses every
request (jsonrpcserver then answers "Invalid Request"), so a dispatch that forgot to pass
`validator` fails loudly. Once jsonrpcserver is in, the stand-in is gone from `sys.modules`: a
later `import jsonschema` loads the real one. When jsonrpcserver or jsonschema was imported
already, nothing is stood in for.
"""

from __future__ import annotations

import sys
import types
from typing import Any

STAND_IN = ("jsonschema", "jsonschema.validators")


class NoDefaultValidator:
    """What jsonrpcserver's default validator is built from here: it refuses every request."""

    def __init__(self, schema: Any) -> None:
        self.schema = schema

    @classmethod
    def check_schema(cls, schema: Any) -> None:
        """jsonrpcserver checks its bundled schema once at import: nothing to check here."""

    def validate(self, instance: Any) -> None:
        raise RuntimeError("subagentd loads no jsonschema: pass jsonrpcserver a validator")


def validator_for(schema: Any) -> type[NoDefaultValidator]:
    return NoDefaultValidator


def import_jsonrpcserver() -> types.ModuleType:
    """The jsonrpcserver package, imported with the stand-in when it is not loaded yet."""
    if "jsonrpcserver" in sys.modules or any(name in sys.modules for name in STAND_IN):
        import jsonrpcserver

        return jsonrpcserver
    package = types.ModuleType("jsonschema", "stand-in while jsonrpcserver imports")
    package.__path__ = []
    validators = types.ModuleType("jsonschema.validators")
    validators.validator_for = validator_for  # type: ignore[attr-defined]
    package.validators = validators  # type: ignore[attr-defined]
    sys.modules.update({"jsonschema": package, "jsonschema.validators": validators})
    try:
        import jsonrpcserver
    finally:
        for name, module in (("jsonschema", package), ("jsonschema.validators", validators)):
            if sys.modules.get(name) is module:
                del sys.modules[name]
    return jsonrpcserver
