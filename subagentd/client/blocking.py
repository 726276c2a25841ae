"""The blocking client: spawn subagentd (or attach to its pipes) and call it with typed methods.

Every host-API method and tool is a method named after its wire name (`agents/spawn` is
`agents_spawn`), taking the fields of its schema Struct as arguments and returning the result
Struct; `call` sends anything else. The transport is `Pipes` (see there why it is blocking).

Longer than ~300 lines on purpose: one short typed method per wire method, the client's whole
surface in one class (splitting it would scatter that list, not simplify any method).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from types import TracebackType
from typing import Any, Literal

from subagentd import __version__
from subagentd.client.frames import DEFAULT_PROTOCOL_VERSION, tool_meta
from subagentd.client.pipes import TIMEOUT, Pipes
from subagentd.client.process import Stderr, StderrMode, server_command
from subagentd.schema import budgets as b
from subagentd.schema import host_methods as h
from subagentd.schema import lifecycle as lc
from subagentd.schema import resources as r
from subagentd.schema import tasks as tk
from subagentd.schema import tools as t
from subagentd.schema.budgets import Budget, Usage
from subagentd.schema.messages import Mode, ToolFilter
from subagentd.schema.stats import StatsResult


class Client(Pipes):
    """A connection to one subagentd; `Client.spawn(...)` starts one and owns it."""

    process: subprocess.Popen[bytes] | None = None
    stderr: Stderr | None = None

    @classmethod
    def spawn(
        cls,
        *args: str,
        db: str | None = None,
        caller: str | None = None,
        command: Sequence[str] | None = None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        stderr: StderrMode = "capture",
        keep_raw: bool = False,
    ) -> Client:
        """Start `python -m subagentd serve --db DB ARGS` (or `command`) and connect to it."""
        logs = Stderr(stderr)
        try:
            proc = subprocess.Popen(
                server_command(args, db=db, caller=caller, command=command),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=logs.target,
                env=env,
                cwd=cwd,
            )
        except BaseException:
            logs.close()
            raise
        assert proc.stdin is not None and proc.stdout is not None
        client = cls(proc.stdin.fileno(), proc.stdout.fileno(), keep_raw=keep_raw)
        client.process, client.stderr = proc, logs
        return client

    def stderr_text(self) -> str:
        """What the spawned subagentd logged so far (its stderr, when captured)."""
        return self.stderr.text() if self.stderr is not None else ""

    def close(self, timeout: float = TIMEOUT) -> int | None:
        """Close subagentd's stdin (EOF: it commits and exits) and wait for it; its exit code
        (killed after `timeout`). Without a spawned process, only our ends are closed."""
        proc = self.process
        if proc is None:
            for fd in (self.write_fd, self.read_fd):
                try:
                    os.close(fd)
                except OSError:
                    pass
            return None
        try:
            if proc.stdin is not None:
                proc.stdin.close()
        except OSError:
            pass  # it exited already (killed, signalled)
        self.read_to_eof(timeout)  # a subagentd blocked writing to us could not exit
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        if self.stderr is not None:
            self.stderr.close()
        return proc.returncode

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    # --- lifecycle ------------------------------------------------------------------------

    def initialize(
        self,
        *,
        client_name: str = "subagentd-python",
        client_version: str = __version__,
        protocol_version: str = DEFAULT_PROTOCOL_VERSION,
        capabilities: dict[str, Any] | None = None,
    ) -> lc.InitializeResult:
        """The MCP handshake: `initialize`, then the `notifications/initialized` notification."""
        params = lc.InitializeParams(
            protocolVersion=protocol_version,
            clientInfo={"name": client_name, "version": client_version},
            capabilities=capabilities,
        )
        result = self.call("initialize", params, result=lc.InitializeResult)
        self.notify("notifications/initialized")
        return result

    def server_discover(self) -> lc.DiscoverResult:
        return self.call("server/discover", {}, result=lc.DiscoverResult)

    def ping(self) -> h.Empty:
        return self.call("ping", None, result=h.Empty)

    def server_stats(self) -> StatsResult:
        """Counts, queues, commit latency and size (PROTOCOL.md, server/stats)."""
        return self.call("server/stats", {}, result=StatsResult)

    def clock_advance(self, seconds: float) -> h.ClockAdvanceResult:
        """Move a `--clock manual` subagentd's clock forward (tests): the timers due run."""
        return self.call("clock/advance", {"seconds": seconds}, result=h.ClockAdvanceResult)

    # --- host API -------------------------------------------------------------------------

    def agents_open(
        self,
        agent_id: str | None = None,
        *,
        label: str | None = None,
        parent_id: str | None = None,
        traceparent: str | None = None,
        budget: Budget | None = None,
    ) -> h.OpenResult:
        params = h.OpenParams(
            agent_id=agent_id,
            label=label,
            parent_id=parent_id,
            traceparent=traceparent,
            budget=budget,
        )
        return self.call("agents/open", params, result=h.OpenResult)

    def agents_close(self, agent_id: str) -> h.Empty:
        """Close a root; answered once its subtree has drained."""
        return self.call("agents/close", h.AgentParams(agent_id=agent_id), result=h.Empty)

    def agents_wait_idle(self, agent_id: str, timeout_ms: int = 30_000) -> h.WaitIdleResult:
        """Answered once no agent of the tree runs a turn or has input to run, or after
        `timeout_ms` (then `idle` is false and `running` / `runnable` name the busy ones)."""
        params = h.WaitIdleParams(agent_id=agent_id, timeout_ms=timeout_ms)
        return self.call(
            "agents/wait_idle", params, result=h.WaitIdleResult, timeout=timeout_ms / 1000 + TIMEOUT
        )

    def agents_get(self, agent_id: str) -> h.AgentInfo:
        return self.call("agents/get", h.AgentParams(agent_id=agent_id), result=h.AgentInfo)

    def agents_spawn(
        self,
        caller: str,
        label: str,
        prompt: str,
        *,
        child_id: str | None = None,
        mode: Mode = "continuable",
        activation: str | None = None,
        agent_provider: str | None = None,
        agent_model: str | None = None,
        persona: str | None = None,
        tool_filter: ToolFilter | None = None,
        budget: Budget | None = None,
        on_parent_close: h.ClosePolicy = "drain",
        idempotency_key: str | None = None,
        traceparent: str | None = None,
    ) -> h.SpawnResult:
        """Spawn a child of `caller`; its first `turn/start` follows."""
        params = h.SpawnParams(
            caller=caller,
            label=label,
            prompt=prompt,
            child_id=child_id,
            mode=mode,
            activation=activation,
            agent_provider=agent_provider,
            agent_model=agent_model,
            persona=persona,
            tool_filter=tool_filter,
            budget=budget,
            on_parent_close=on_parent_close,
            idempotency_key=idempotency_key,
            traceparent=traceparent,
        )
        return self.call("agents/spawn", params, result=h.SpawnResult)

    def agents_followup(
        self, agent_id: str, message: str, *, idempotency_key: str | None = None
    ) -> h.MessageIdResult:
        params = h.FollowupParams(
            agent_id=agent_id, message=message, idempotency_key=idempotency_key
        )
        return self.call("agents/followup", params, result=h.MessageIdResult)

    def agents_budget(
        self,
        agent_id: str,
        budget: Budget | None = None,
        *,
        remove: list[Literal["turns", "spawns", "tokens", "cost", "deadline"]] | None = None,
    ) -> b.BudgetResult:
        """Set (or drop) limits of the agent's own budget; agents it held run their input."""
        params = b.BudgetParams(agent_id=agent_id, budget=budget, remove=remove)
        return self.call("agents/budget", params, result=b.BudgetResult)

    def agents_stop(
        self, agent_id: str, *, queues: Literal["park", "clear"] = "park"
    ) -> b.StopResult:
        """Stop a whole subtree: open turns interrupted, queues parked (or cleared)."""
        params = b.StopParams(agent_id=agent_id, queues=queues)
        return self.call("agents/stop", params, result=b.StopResult)

    def agents_resume(self, agent_id: str) -> b.BudgetResult:
        """Resume a stopped subtree: what waits below it runs again."""
        params = h.AgentParams(agent_id=agent_id)
        return self.call("agents/resume", params, result=b.BudgetResult)

    def agents_interrupt(self, agent_id: str) -> h.InterruptResult:
        params = h.AgentParams(agent_id=agent_id)
        return self.call("agents/interrupt", params, result=h.InterruptResult)

    def agents_list(
        self,
        root_id: str,
        *,
        scope: h.Scope = "children",
        include_one_shot: bool = True,
        cursor: str | None = None,
        limit: int | None = None,
        usage: bool = False,
    ) -> h.ListResult:
        params = h.ListParams(
            root_id=root_id,
            scope=scope,
            include_one_shot=include_one_shot,
            cursor=cursor,
            limit=limit,
            usage=usage,
        )
        return self.call("agents/list", params, result=h.ListResult)

    def turns_begin(
        self, agent_id: str, messages: list[str] | None = None, *, traceparent: str | None = None
    ) -> h.TurnBeginResult:
        params = h.TurnBeginParams(agent_id=agent_id, messages=messages, traceparent=traceparent)
        return self.call("turns/begin", params, result=h.TurnBeginResult)

    def turns_end(
        self,
        agent_id: str,
        turn_id: str,
        reason: h.TurnReason = "completed",
        output: str | None = None,
        usage: Usage | None = None,
    ) -> h.Empty:
        params = h.TurnEndParams(
            agent_id=agent_id, turn_id=turn_id, reason=reason, output=output, usage=usage
        )
        return self.call("turns/end", params, result=h.Empty)

    def transcript_append(
        self, agent_id: str, events: list[h.Event], *, turn_id: str | None = None
    ) -> h.SeqResult:
        params = h.TranscriptAppendParams(agent_id=agent_id, turn_id=turn_id, events=events)
        return self.call("transcript/append", params, result=h.SeqResult)

    def transcript_read(
        self, agent_id: str, *, after: int | None = None, limit: int | None = None
    ) -> h.TranscriptReadResult:
        params = h.TranscriptReadParams(agent_id=agent_id, after=after, limit=limit)
        return self.call("transcript/read", params, result=h.TranscriptReadResult)

    def messages_get(self, message_id: str) -> h.MessageInfo:
        params = h.MessageGetParams(message_id=message_id)
        return self.call("messages/get", params, result=h.MessageInfo)

    def messages_cancel(self, message_id: str) -> h.MessageInfo:
        params = h.MessageGetParams(message_id=message_id)
        return self.call("messages/cancel", params, result=h.MessageInfo)

    # --- the four tools, as direct methods (caller: default the server's --caller) ----------

    def send_message(
        self,
        subagent_id: str,
        message: str,
        *,
        caller: str | None = None,
        activation: str | None = None,
        idempotency_key: str | None = None,
    ) -> t.SendMessageResult:
        params = t.SendMessageParams(
            subagent_id=subagent_id,
            message=message,
            caller=caller,
            activation=activation,
            idempotency_key=idempotency_key,
        )
        return self.call("send_message", params, result=t.SendMessageResult)

    def interrupt_agent(
        self, agent_id: str, *, caller: str | None = None, activation: str | None = None
    ) -> t.InterruptAgentResult:
        params = t.InterruptAgentParams(agent_id=agent_id, caller=caller, activation=activation)
        return self.call("interrupt_agent", params, result=t.InterruptAgentResult)

    def list_agents(
        self,
        scope: h.Scope = "children",
        *,
        caller: str | None = None,
        activation: str | None = None,
    ) -> t.ListAgentsResult:
        params = t.ListAgentsParams(scope=scope, caller=caller, activation=activation)
        return self.call("list_agents", params, result=t.ListAgentsResult)

    def report(
        self,
        output: str,
        *,
        caller: str | None = None,
        activation: str | None = None,
        idempotency_key: str | None = None,
    ) -> t.ReportResult:
        params = t.ReportParams(
            output=output, caller=caller, activation=activation, idempotency_key=idempotency_key
        )
        return self.call("report", params, result=t.ReportResult)

    def spawn_agent(
        self,
        label: str,
        prompt: str,
        *,
        mode: Mode = "continuable",
        child_id: str | None = None,
        caller: str | None = None,
        activation: str | None = None,
        idempotency_key: str | None = None,
    ) -> t.SpawnAgentResult:
        """The spawn_agent tool (agents/spawn's rules, as the calling agent)."""
        params = t.SpawnAgentParams(
            label=label,
            prompt=prompt,
            mode=mode,
            child_id=child_id,
            caller=caller,
            activation=activation,
            idempotency_key=idempotency_key,
        )
        return self.call("spawn_agent", params, result=t.SpawnAgentResult)

    def wait_agents(
        self,
        agent_ids: list[str] | None = None,
        *,
        timeout_ms: int = t.WAIT_DEFAULT_MS,
        mode: Literal["any", "all"] = "any",
        caller: str | None = None,
        activation: str | None = None,
    ) -> t.WaitAgentsResult:
        """The wait_agents tool: answered when the children have news (or after `timeout_ms`)."""
        params = t.WaitAgentsParams(
            agent_ids=agent_ids,
            timeout_ms=timeout_ms,
            mode=mode,
            caller=caller,
            activation=activation,
        )
        return self.call(
            "wait_agents", params, result=t.WaitAgentsResult, timeout=timeout_ms / 1000 + TIMEOUT
        )

    # --- the same tools through the MCP bridge --------------------------------------------

    def tools_list(
        self, *, caller: str | None = None, activation: str | None = None
    ) -> t.ToolsListResult:
        params = t.ToolsListParams(meta=tool_meta(caller, activation, None))
        return self.call("tools/list", params, result=t.ToolsListResult)

    def tools_call(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        caller: str | None = None,
        activation: str | None = None,
        idempotency_key: str | None = None,
    ) -> t.CallToolResult:
        """A tool as a model calls it: a refusal is a result with `isError`, not an exception."""
        params = t.ToolsCallParams(
            name=name, arguments=arguments, meta=tool_meta(caller, activation, idempotency_key)
        )
        return self.call("tools/call", params, result=t.CallToolResult)

    # --- MCP resources (PROTOCOL.md section 5) ---

    def resources_list(
        self, cursor: str | None = None, *, caller: str | None = None
    ) -> r.ResourcesListResult:
        params = r.ResourcesListParams(cursor=cursor, meta=tool_meta(caller, None, None))
        return self.call("resources/list", params, result=r.ResourcesListResult)

    def resources_templates_list(self) -> r.ResourceTemplatesListResult:
        params = r.ResourcesListParams()
        return self.call("resources/templates/list", params, result=r.ResourceTemplatesListResult)

    def resources_read(self, uri: str, *, caller: str | None = None) -> r.ResourcesReadResult:
        params = r.ResourceUriParams(uri=uri, meta=tool_meta(caller, None, None))
        return self.call("resources/read", params, result=r.ResourcesReadResult)

    def resources_subscribe(self, uri: str, *, caller: str | None = None) -> h.Empty:
        params = r.ResourceUriParams(uri=uri, meta=tool_meta(caller, None, None))
        return self.call("resources/subscribe", params, result=h.Empty)

    def resources_unsubscribe(self, uri: str, *, caller: str | None = None) -> h.Empty:
        params = r.ResourceUriParams(uri=uri, meta=tool_meta(caller, None, None))
        return self.call("resources/unsubscribe", params, result=h.Empty)

    # --- MCP tasks (2025-11-25: initialize with that protocol version) ---------------------

    def tasks_get(self, task_id: str, *, caller: str | None = None) -> tk.Task:
        params = tk.TaskIdParams(taskId=task_id, meta=tool_meta(caller, None, None))
        return self.call("tasks/get", params, result=tk.Task)

    def tasks_result(self, task_id: str, *, caller: str | None = None) -> t.CallToolResult:
        """The task's result; waits until the task is terminal."""
        params = tk.TaskIdParams(taskId=task_id, meta=tool_meta(caller, None, None))
        return self.call("tasks/result", params, result=t.CallToolResult)

    def tasks_list(
        self, cursor: str | None = None, *, caller: str | None = None
    ) -> tk.TasksListResult:
        params = tk.TasksListParams(cursor=cursor, meta=tool_meta(caller, None, None))
        return self.call("tasks/list", params, result=tk.TasksListResult)

    def tasks_cancel(self, task_id: str, *, caller: str | None = None) -> tk.Task:
        params = tk.TaskIdParams(taskId=task_id, meta=tool_meta(caller, None, None))
        return self.call("tasks/cancel", params, result=tk.Task)
