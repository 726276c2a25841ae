"""The event loops the server runs on (--event-loop): anyio backends; light to import (no anyio)."""

from __future__ import annotations

import importlib.util
from typing import Any

from subagentd import extras

# name: (anyio backend, its options, the module it needs); uvloop is asyncio on uvloop's loop
EVENT_LOOPS: dict[str, tuple[str, dict[str, Any], str]] = {
    "asyncio": ("asyncio", {}, "asyncio"),
    "uvloop": ("asyncio", {"use_uvloop": True}, "uvloop"),
    "trio": ("trio", {}, "trio"),
}


def event_loop(name: str) -> tuple[str, dict[str, Any]]:
    """anyio.run's `backend` and `backend_options` for an --event-loop; ValueError when the
    module it needs is not installed (uvloop comes with the `fast` extra)."""
    backend, options, module = EVENT_LOOPS[name]
    if name == "uvloop":
        line = extras.missing("fast", "--event-loop uvloop")
        if line is not None:
            raise ValueError(line)
    elif importlib.util.find_spec(module) is None:
        raise ValueError(
            f"--event-loop {name} needs the {module} package: pip install {module}"
            f" (with pipx: pipx inject subagentd {module})"
        )
    return backend, dict(options)
