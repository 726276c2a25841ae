"""Writes subagentd/client/methods.py: the typed method of both Python clients, from one table.

`python scripts/generate_client.py` rewrites it, `--check` exits 1 when it is stale
(tests/clients/test_client_generated.py fails then too). It is a development script: the wheel
ships only what it writes. Each method's arguments are its Params Struct's
fields (their types and defaults as the Struct has them; `meta` stays out), so a field added to a
Params Struct reaches both clients by regenerating, with no hand-written file changed. The table
below says only what a Struct cannot: the wire name, the result, which arguments are positional,
a docstring, and the few methods whose params are built otherwise.

The blocking and the async method of one wire method are written from the same template, the
signature on one line each; the file is left out of `ruff format` (`# fmt: off`), which would
spread the two signatures over identical lines.

Longer than ~300 lines on purpose: the method table is a third of it, one entry per wire method
(a table read in one place, not a module to split).
"""

from __future__ import annotations

import json
import sys
import types
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import msgspec

from subagentd.schema import budgets as b
from subagentd.schema import host_methods as h
from subagentd.schema import lifecycle as lc
from subagentd.schema import resources as r
from subagentd.schema import stats as s
from subagentd.schema import tasks as tk
from subagentd.schema import tools as t

TARGET = Path(__file__).resolve().parents[1] / "subagentd" / "client" / "methods.py"

ALIASES = {
    b.__name__: "b",
    h.__name__: "h",
    lc.__name__: "lc",
    r.__name__: "r",
    s.__name__: "s",
    tk.__name__: "tk",
    t.__name__: "t",
    "subagentd.schema.messages": "m",
}


@dataclass(frozen=True)
class Method:
    """One typed client method: `wire` called with `params` built from the arguments."""

    wire: str
    params: type[msgspec.Struct] | None
    result: type[msgspec.Struct]
    positional: tuple[str, ...] = ()
    doc: str = ""
    raw: str = "None"
    """The params sent as they are when `params` is None (a Python expression)."""
    meta: tuple[str, ...] = ()
    """Arguments of `tool_meta(caller, activation, idempotency_key)`, sent as `_meta`."""
    defaults: dict[str, str] = field(default_factory=dict)
    """Defaults the client gives where the Struct has none (Python expressions)."""
    waits: bool = False
    """The request may take its `timeout_ms`: the call's own timeout grows by it."""
    wait_s: float | None = None
    """A waiting request with no `timeout_ms`: the call's own timeout grows by this."""

    @property
    def name(self) -> str:
        return self.wire.replace("/", "_")


METHODS: tuple[Method, ...] = (
    # lifecycle (initialize is written by INITIALIZE below)
    Method("server/discover", None, lc.DiscoverResult, raw="{}"),
    Method("ping", None, h.Empty),
    Method(
        "server/stats",
        None,
        s.StatsResult,
        raw="{}",
        doc="Counts, queues, commit latency and size (PROTOCOL.md, server/stats).",
    ),
    Method(
        "clock/advance",
        h.ClockAdvanceParams,
        h.ClockAdvanceResult,
        ("seconds",),
        "Move a `--clock manual` subagentd's clock forward (tests): the timers due run.",
    ),
    # host API
    Method("agents/open", h.OpenParams, h.OpenResult, ("agent_id",)),
    Method(
        "agents/close",
        h.AgentParams,
        h.Empty,
        ("agent_id",),
        "Close a root; answered once its subtree has drained.",
    ),
    Method(
        "agents/wait_idle",
        h.WaitIdleParams,
        h.WaitIdleResult,
        ("agent_id", "timeout_ms"),
        "Answered once no agent of the tree runs a turn or has input to run, or after"
        " `timeout_ms` (then `idle` is false and `running` / `runnable` name the busy ones).",
        waits=True,
    ),
    Method("agents/get", h.AgentParams, h.AgentInfo, ("agent_id",)),
    Method(
        "agents/spawn",
        h.SpawnParams,
        h.SpawnResult,
        ("caller", "label", "prompt"),
        "Spawn a child of `caller`; its first `turn/start` follows.",
    ),
    Method("agents/followup", h.FollowupParams, h.MessageIdResult, ("agent_id", "message")),
    Method(
        "agents/budget",
        b.BudgetParams,
        b.BudgetResult,
        ("agent_id", "budget"),
        "Set (or drop) limits of the agent's own budget; agents it held run their input.",
    ),
    Method(
        "agents/stop",
        b.StopParams,
        b.StopResult,
        ("agent_id",),
        "Stop a whole subtree: open turns interrupted, queues parked (or cleared).",
    ),
    Method(
        "agents/resume",
        h.AgentParams,
        b.BudgetResult,
        ("agent_id",),
        "Resume a stopped subtree: what waits below it runs again.",
    ),
    Method("agents/interrupt", h.AgentParams, h.InterruptResult, ("agent_id",)),
    Method(
        "question/answer",
        h.QuestionAnswerParams,
        h.Empty,
        ("question_id", "action", "answer"),
        "Answer a `question/ask` (a subagent's ask_user question): accept with the answer, or"
        " decline / cancel.",
    ),
    Method("agents/list", h.ListParams, h.ListResult, ("root_id",)),
    Method("turns/begin", h.TurnBeginParams, h.TurnBeginResult, ("agent_id", "messages")),
    Method(
        "turns/end",
        h.TurnEndParams,
        h.Empty,
        ("agent_id", "turn_id", "reason", "output", "usage"),
        defaults={"reason": '"completed"'},
    ),
    Method("transcript/append", h.TranscriptAppendParams, h.SeqResult, ("agent_id", "events")),
    Method("transcript/read", h.TranscriptReadParams, h.TranscriptReadResult, ("agent_id",)),
    Method("messages/get", h.MessageGetParams, h.MessageInfo, ("message_id",)),
    Method("messages/cancel", h.MessageGetParams, h.MessageInfo, ("message_id",)),
    # the four tools, as direct methods (caller: default the server's --caller)
    Method("send_message", t.SendMessageParams, t.SendMessageResult, ("subagent_id", "message")),
    Method("interrupt_agent", t.InterruptAgentParams, t.InterruptAgentResult, ("agent_id",)),
    Method("list_agents", t.ListAgentsParams, t.ListAgentsResult, ("scope",)),
    Method("report", t.ReportParams, t.ReportResult, ("output",)),
    Method(
        "spawn_agent",
        t.SpawnAgentParams,
        t.SpawnAgentResult,
        ("label", "prompt"),
        "The spawn_agent tool (agents/spawn's rules, as the calling agent).",
    ),
    Method(
        "wait_agents",
        t.WaitAgentsParams,
        t.WaitAgentsResult,
        ("agent_ids",),
        "The wait_agents tool: answered when the children have news (or after `timeout_ms`).",
        waits=True,
    ),
    Method(
        "ask_parent",
        t.AskParentParams,
        t.AskParentResult,
        ("question", "options"),
        "The ask_parent tool: answered when the parent answers (or the question ends unanswered;"
        " the call waits up to an hour, a deployment's --question-timeout is 600 s by default).",
        wait_s=3600.0,
    ),
    Method(
        "ask_user",
        t.AskUserParams,
        t.AskUserResult,
        ("question", "options"),
        "The ask_user tool (--ask-user on): answered when the person answers, declines or"
        " dismisses the question (or it ends unanswered; the call waits up to an hour).",
        wait_s=3600.0,
    ),
    # the same tools through the MCP bridge
    Method("tools/list", t.ToolsListParams, t.ToolsListResult, meta=("caller", "activation")),
    Method(
        "tools/call",
        t.ToolsCallParams,
        t.CallToolResult,
        ("name", "arguments"),
        "A tool as a model calls it: a refusal is a result with `isError`, not an exception.",
        meta=("caller", "activation", "idempotency_key"),
    ),
    # MCP resources (PROTOCOL.md section 5)
    Method(
        "resources/list",
        r.ResourcesListParams,
        r.ResourcesListResult,
        ("cursor",),
        meta=("caller",),
    ),
    Method("resources/templates/list", r.ResourcesListParams, r.ResourceTemplatesListResult),
    Method(
        "resources/read", r.ResourceUriParams, r.ResourcesReadResult, ("uri",), meta=("caller",)
    ),
    Method("resources/subscribe", r.ResourceUriParams, h.Empty, ("uri",), meta=("caller",)),
    Method("resources/unsubscribe", r.ResourceUriParams, h.Empty, ("uri",), meta=("caller",)),
    # MCP tasks (2025-11-25: initialize with that protocol version)
    Method("tasks/get", tk.TaskIdParams, tk.Task, ("taskId",), meta=("caller",)),
    Method(
        "tasks/result",
        tk.TaskIdParams,
        t.CallToolResult,
        ("taskId",),
        doc="The task's result; waits until the task is terminal (within the client's timeout).",
        meta=("caller",),
    ),
    Method("tasks/list", tk.TasksListParams, tk.TasksListResult, ("cursor",), meta=("caller",)),
    Method("tasks/cancel", tk.TaskIdParams, tk.Task, ("taskId",), meta=("caller",)),
)

HEADER = '''\
"""GENERATED by scripts/generate_client.py from its method table and the Params Structs:
do not edit. Regenerate with `python scripts/generate_client.py`; a test fails when stale.

`AsyncMethods` (on `Streams`) and `BlockingMethods` (on `Pipes`) hold one typed method per wire
method, named after it (`agents/spawn` is `agents_spawn`), taking its Params Struct's fields and
returning its result Struct. `AsyncClient` and `Client` are built on them.

Longer than ~300 lines on purpose: generated, one method per wire method for each client.
"""

# fmt: off
from __future__ import annotations

from typing import Any, Literal

from subagentd import __version__
from subagentd.client.frames import DEFAULT_PROTOCOL_VERSION, tool_meta
from subagentd.client.pipes import TIMEOUT, Pipes
from subagentd.client.streams import Streams
from subagentd.schema import budgets as b
from subagentd.schema import host_methods as h
from subagentd.schema import lifecycle as lc
from subagentd.schema import messages as m
from subagentd.schema import resources as r
from subagentd.schema import stats as s
from subagentd.schema import tasks as tk
from subagentd.schema import tools as t
'''

INITIALIZE = '''\
    {a}def initialize(self, *, client_name: str = "subagentd-python", client_version: str = __version__, protocol_version: str = DEFAULT_PROTOCOL_VERSION, capabilities: dict[str, Any] | None = None) -> lc.InitializeResult:
        """The MCP handshake: `initialize`, then the `notifications/initialized` notification."""
        params = lc.InitializeParams(protocolVersion=protocol_version, clientInfo={{"name": client_name, "version": client_version}}, capabilities=capabilities)
        result = {w}self.call("initialize", params, result=lc.InitializeResult)
        {w}self.notify("notifications/initialized")
        return result
'''

META_TYPES = {"caller": "str | None", "activation": "str | None", "idempotency_key": "str | None"}


def annotation(tp: Any) -> str:
    """A resolved field type as source text (constraints dropped: the server checks them)."""
    origin, args = get_origin(tp), get_args(tp)
    if tp is type(None):
        return "None"
    if tp is Any:
        return "Any"
    if origin is Annotated:
        return annotation(args[0])
    if origin in (Union, types.UnionType):
        return " | ".join(annotation(arg) for arg in args)
    if origin is Literal:
        return "Literal[" + ", ".join(json.dumps(arg) for arg in args) + "]"
    if origin is not None:
        return f"{origin.__name__}[{', '.join(annotation(arg) for arg in args)}]"
    if isinstance(tp, type) and tp.__module__ == "builtins":
        return tp.__name__
    if isinstance(tp, type) and tp.__module__ in ALIASES:
        return f"{ALIASES[tp.__module__]}.{tp.__name__}"
    raise ValueError(f"no source text for the type {tp!r}")


def struct_name(struct: type[msgspec.Struct]) -> str:
    return annotation(struct)


def default(value: Any) -> str:
    if value is None or isinstance(value, bool | int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    raise ValueError(f"no source text for the default {value!r}")


def arguments(method: Method) -> tuple[list[str], list[str]]:
    """The signature's parameters (after self) and the Struct's keyword arguments."""
    fields = {
        f.name: f
        for f in (msgspec.structs.fields(method.params) if method.params else ())
        if f.name != "meta"
    }
    unknown = set(method.positional) - set(fields)
    if unknown:
        raise ValueError(f"{method.wire}: no field {sorted(unknown)} in its params")

    def parameter(name: str) -> str:
        info = fields[name]
        text = f"{name}: {annotation(info.type)}"
        if name in method.defaults:
            return f"{text} = {method.defaults[name]}"
        if info.default is not msgspec.NODEFAULT:
            return f"{text} = {default(info.default)}"
        if info.default_factory is not msgspec.NODEFAULT:
            raise ValueError(f"{method.wire}.{name}: a default factory has no source text")
        return text

    signature = [parameter(name) for name in method.positional]
    rest = [name for name in fields if name not in method.positional]
    keywords = [parameter(name) for name in rest] + [
        f"{name}: {META_TYPES[name]} = None" for name in method.meta
    ]
    if keywords:
        signature += ["*", *keywords]
    passed = [f"{name}={name}" for name in fields]
    if method.meta:
        meta_args = ", ".join(name if name in method.meta else "None" for name in META_TYPES)
        passed.append(f"meta=tool_meta({meta_args})")
    return signature, passed


def method_text(method: Method, *, asynchronous: bool) -> str:
    a, w = ("async ", "await ") if asynchronous else ("", "")
    signature, passed = arguments(method)
    result = struct_name(method.result)
    params = f"{struct_name(method.params)}({', '.join(passed)})" if method.params else method.raw
    timeout = ", timeout=timeout_ms / 1000 + TIMEOUT" if method.waits else ""
    if method.wait_s is not None:
        timeout = f", timeout={method.wait_s} + TIMEOUT"
    lines = [f"    {a}def {method.name}({', '.join(['self', *signature])}) -> {result}:"]
    if method.doc:
        lines.append(f'        """{method.doc}"""')
    lines.append(
        f'        return {w}self.call("{method.wire}", {params}, result={result}{timeout})'
    )
    return "\n".join(lines) + "\n"


def render(methods: Sequence[Method] = METHODS) -> str:
    parts = [HEADER]
    for cls, base, asynchronous in (
        ("AsyncMethods", "Streams", True),
        ("BlockingMethods", "Pipes", False),
    ):
        kind = "awaitables, many in flight at once" if asynchronous else "blocking calls"
        parts.append(f'\n\nclass {cls}({base}):\n    """The typed methods as {kind}."""\n')
        a, w = ("async ", "await ") if asynchronous else ("", "")
        parts.append("\n" + INITIALIZE.format(a=a, w=w))
        parts += ["\n" + method_text(method, asynchronous=asynchronous) for method in methods]
    return "".join(parts)


def main(argv: Sequence[str] = ()) -> int:
    text = render()
    if "--check" in argv:
        if not TARGET.is_file() or TARGET.read_text() != text:
            print(f"{TARGET} is stale: run `python scripts/generate_client.py`", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
