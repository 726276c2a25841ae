"""Both Python clients' typed methods are generated from one table and the Params Structs
(scripts/generate_client.py, not shipped in the wheel): the committed file is what the generator writes, and a field
added to a Params Struct reaches both clients' signatures and the params they send."""

from __future__ import annotations

import importlib.util
import inspect
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import msgspec

from subagentd.client import AsyncClient, Client
from subagentd.schema import host_methods as h

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "generate_client.py"
_spec = importlib.util.spec_from_file_location("generate_client", SCRIPT)
assert _spec is not None and _spec.loader is not None
generate = importlib.util.module_from_spec(_spec)
sys.modules["generate_client"] = generate  # its dataclasses look their module up
_spec.loader.exec_module(generate)


def test_methods_py_is_what_the_generator_writes():
    assert generate.TARGET.read_text() == generate.render(), (
        "subagentd/client/methods.py is stale: run `python scripts/generate_client.py`"
    )
    check = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True)
    assert check.returncode == 0, check.stderr


class FollowupWithPriority(h.FollowupParams, kw_only=True):
    """agents/followup's params with one field more, as a change to the Struct would add it."""

    priority: int | None = None


def test_a_field_added_to_a_params_struct_reaches_both_clients(monkeypatch):
    # The Struct stands in host_methods, as an edited FollowupParams would.
    monkeypatch.setattr(FollowupWithPriority, "__module__", h.__name__)
    monkeypatch.setattr(h, "FollowupWithPriority", FollowupWithPriority, raising=False)
    methods = [
        generate.Method(
            "agents/followup", FollowupWithPriority, h.MessageIdResult, ("agent_id", "message")
        )
    ]
    text = generate.render(methods)
    assert text.count(", *, idempotency_key: str | None = None, priority: int | None = None)") == 2
    namespace: dict[str, Any] = {}
    exec(compile(text, "methods.py", "exec"), namespace)
    sent: list[tuple[str, bytes]] = []

    def record(self: object, method: str, params: msgspec.Struct, *, result: type) -> Any:
        sent.append((method, msgspec.json.encode(params)))
        return result

    blocking = type("Blocking", (namespace["BlockingMethods"],), {"call": record})
    blocking.__new__(blocking).agents_followup("a1", "hi", priority=2)

    async def arecord(self: object, method: str, params: msgspec.Struct, *, result: type) -> Any:
        return record(self, method, params, result=result)

    asynchronous = type("Async", (namespace["AsyncMethods"],), {"call": arecord})
    anyio.run(asynchronous.__new__(asynchronous).agents_followup, "a2", "ho")
    assert sent == [
        ("agents/followup", b'{"agent_id":"a1","message":"hi","priority":2}'),
        ("agents/followup", b'{"agent_id":"a2","message":"ho"}'),
    ]


def test_each_wire_method_of_the_table_is_a_method_of_both_clients_with_one_signature():
    for method in generate.METHODS:
        blocking, asynchronous = getattr(Client, method.name), getattr(AsyncClient, method.name)
        assert inspect.iscoroutinefunction(asynchronous) and not inspect.iscoroutinefunction(
            blocking
        )
        assert inspect.signature(blocking) == inspect.signature(asynchronous), method.wire
