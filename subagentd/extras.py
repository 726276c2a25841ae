"""The optional dependencies, by extra (pyproject.toml [project.optional-dependencies]), and the
one line that says how to add one: from a clone (`pip install '.[EXTRA]'`) or to a pipx install
(`pipx inject subagentd PACKAGE`). subagentd is installed from a clone of its repository; no
package index has it. Light to import: the standard library only."""

from __future__ import annotations

import importlib

# extra: (the modules it provides, the requirements pipx injects)
EXTRAS: dict[str, tuple[str, str]] = {
    "postgres": ("psycopg", "psycopg[binary]"),
    "watch": ("rich", "rich"),
    "fast": ("uvloop", "uvloop"),
    "otel": (
        "opentelemetry.exporter.otlp.proto.http",
        "opentelemetry-sdk opentelemetry-exporter-otlp-proto-http",
    ),
    # a2a-sdk's HTTP server (starlette, sse-starlette) and the ASGI server that runs it
    "a2a": ("a2a sse_starlette uvicorn", "a2a-sdk[http-server] uvicorn"),
}


def install_hint(extra: str) -> str:
    """How to add an extra, from a clone or to a pipx install."""
    requirement = EXTRAS[extra][1]
    quoted = " ".join(f"'{r}'" if "[" in r else r for r in requirement.split())
    return (
        f"pip install '.[{extra}]' in your clone of subagentd"
        f" (with pipx: pipx inject subagentd {quoted})"
    )


def missing(extra: str, what: str) -> str | None:
    """None when the extra's module imports; else the one line naming `what` needs it, the
    extra, and how to install it."""
    for module in EXTRAS[extra][0].split():  # each module the extra provides, in order
        try:
            importlib.import_module(module)
        except ImportError:  # not installed, or unusable (psycopg without a libpq)
            return f"{what} needs {module}, from the {extra} extra: {install_hint(extra)}"
    return None
