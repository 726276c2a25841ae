"""The async client (anyio): spawn subagentd or attach to byte streams; typed methods as awaitables.

The same methods as the blocking `Client`, named after their wire names (`agents/spawn` is
`agents_spawn`), each taking its schema Struct's fields and returning its result Struct; many
may be in flight at once from many tasks. The transport is `Streams`.

Longer than ~300 lines on purpose: one short typed method per wire method, the client's whole
surface in one class, as in the blocking client (splitting it would scatter that list).
"""

from __future__ import annotations

from typing import Any, Literal

from subagentd import __version__
from subagentd.client.frames import DEFAULT_PROTOCOL_VERSION, tool_meta
from subagentd.client.pipes import TIMEOUT
from subagentd.client.streams import Streams
from subagentd.schema import budgets as b
from subagentd.schema import host_methods as h
from subagentd.schema import lifecycle as lc
from subagentd.schema import resources as r
from subagentd.schema import tasks as tk
from subagentd.schema import tools as t
from subagentd.schema.budgets import Budget, Usage
from subagentd.schema.messages import Mode, ToolFilter
from subagentd.schema.stats import StatsResult


class AsyncClient(Streams):
    """`async with AsyncClient.spawn(db=...) as client:` starts subagentd and connects to it."""

    # --- lifecycle ------------------------------------------------------------------------

    async def initialize(
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
        result = await self.call("initialize", params, result=lc.InitializeResult)
        await self.notify("notifications/initialized")
        return result

    async def server_discover(self) -> lc.DiscoverResult:
        return await self.call("server/discover", {}, result=lc.DiscoverResult)

    async def ping(self) -> h.Empty:
        return await self.call("ping", None, result=h.Empty)

    async def server_stats(self) -> StatsResult:
        """Counts, queues, commit latency and size (PROTOCOL.md, server/stats)."""
        return await self.call("server/stats", {}, result=StatsResult)

    async def clock_advance(self, seconds: float) -> h.ClockAdvanceResult:
        """Move a `--clock manual` subagentd's clock forward (tests): the timers due run."""
        return await self.call("clock/advance", {"seconds": seconds}, result=h.ClockAdvanceResult)

    # --- host API -------------------------------------------------------------------------

    async def agents_open(
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
        return await self.call("agents/open", params, result=h.OpenResult)

    async def agents_close(self, agent_id: str) -> h.Empty:
        """Close a root; answered once its subtree has drained."""
        return await self.call("agents/close", h.AgentParams(agent_id=agent_id), result=h.Empty)

    async def agents_wait_idle(self, agent_id: str, timeout_ms: int = 30_000) -> h.WaitIdleResult:
        """Answered once no agent of the tree runs a turn or has input to run, or after
        `timeout_ms` (then `idle` is false and `running` / `runnable` name the busy ones)."""
        params = h.WaitIdleParams(agent_id=agent_id, timeout_ms=timeout_ms)
        return await self.call(
            "agents/wait_idle", params, result=h.WaitIdleResult, timeout=timeout_ms / 1000 + TIMEOUT
        )

    async def agents_get(self, agent_id: str) -> h.AgentInfo:
        return await self.call("agents/get", h.AgentParams(agent_id=agent_id), result=h.AgentInfo)

    async def agents_spawn(
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
        return await self.call("agents/spawn", params, result=h.SpawnResult)

    async def agents_followup(
        self, agent_id: str, message: str, *, idempotency_key: str | None = None
    ) -> h.MessageIdResult:
        params = h.FollowupParams(
            agent_id=agent_id, message=message, idempotency_key=idempotency_key
        )
        return await self.call("agents/followup", params, result=h.MessageIdResult)

    async def agents_budget(
        self,
        agent_id: str,
        budget: Budget | None = None,
        *,
        remove: list[Literal["turns", "spawns", "tokens", "cost", "deadline"]] | None = None,
    ) -> b.BudgetResult:
        """Set (or drop) limits of the agent's own budget; agents it held run their input."""
        params = b.BudgetParams(agent_id=agent_id, budget=budget, remove=remove)
        return await self.call("agents/budget", params, result=b.BudgetResult)

    async def agents_stop(
        self, agent_id: str, *, queues: Literal["park", "clear"] = "park"
    ) -> b.StopResult:
        """Stop a whole subtree: open turns interrupted, queues parked (or cleared)."""
        params = b.StopParams(agent_id=agent_id, queues=queues)
        return await self.call("agents/stop", params, result=b.StopResult)

    async def agents_resume(self, agent_id: str) -> b.BudgetResult:
        """Resume a stopped subtree: what waits below it runs again."""
        params = h.AgentParams(agent_id=agent_id)
        return await self.call("agents/resume", params, result=b.BudgetResult)

    async def agents_interrupt(self, agent_id: str) -> h.InterruptResult:
        params = h.AgentParams(agent_id=agent_id)
        return await self.call("agents/interrupt", params, result=h.InterruptResult)

    async def agents_list(
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
        return await self.call("agents/list", params, result=h.ListResult)

    async def turns_begin(
        self, agent_id: str, messages: list[str] | None = None, *, traceparent: str | None = None
    ) -> h.TurnBeginResult:
        params = h.TurnBeginParams(agent_id=agent_id, messages=messages, traceparent=traceparent)
        return await self.call("turns/begin", params, result=h.TurnBeginResult)

    async def turns_end(
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
        return await self.call("turns/end", params, result=h.Empty)

    async def transcript_append(
        self, agent_id: str, events: list[h.Event], *, turn_id: str | None = None
    ) -> h.SeqResult:
        params = h.TranscriptAppendParams(agent_id=agent_id, turn_id=turn_id, events=events)
        return await self.call("transcript/append", params, result=h.SeqResult)

    async def transcript_read(
        self, agent_id: str, *, after: int | None = None, limit: int | None = None
    ) -> h.TranscriptReadResult:
        params = h.TranscriptReadParams(agent_id=agent_id, after=after, limit=limit)
        return await self.call("transcript/read", params, result=h.TranscriptReadResult)

    async def messages_get(self, message_id: str) -> h.MessageInfo:
        params = h.MessageGetParams(message_id=message_id)
        return await self.call("messages/get", params, result=h.MessageInfo)

    async def messages_cancel(self, message_id: str) -> h.MessageInfo:
        params = h.MessageGetParams(message_id=message_id)
        return await self.call("messages/cancel", params, result=h.MessageInfo)

    # --- the four tools, as direct methods (caller: default the server's --caller) ----------

    async def send_message(
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
        return await self.call("send_message", params, result=t.SendMessageResult)

    async def interrupt_agent(
        self, agent_id: str, *, caller: str | None = None, activation: str | None = None
    ) -> t.InterruptAgentResult:
        params = t.InterruptAgentParams(agent_id=agent_id, caller=caller, activation=activation)
        return await self.call("interrupt_agent", params, result=t.InterruptAgentResult)

    async def list_agents(
        self,
        scope: h.Scope = "children",
        *,
        caller: str | None = None,
        activation: str | None = None,
    ) -> t.ListAgentsResult:
        params = t.ListAgentsParams(scope=scope, caller=caller, activation=activation)
        return await self.call("list_agents", params, result=t.ListAgentsResult)

    async def report(
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
        return await self.call("report", params, result=t.ReportResult)

    async def spawn_agent(
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
        return await self.call("spawn_agent", params, result=t.SpawnAgentResult)

    async def wait_agents(
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
        return await self.call(
            "wait_agents", params, result=t.WaitAgentsResult, timeout=timeout_ms / 1000 + TIMEOUT
        )

    # --- the same tools through the MCP bridge --------------------------------------------

    async def tools_list(
        self, *, caller: str | None = None, activation: str | None = None
    ) -> t.ToolsListResult:
        params = t.ToolsListParams(meta=tool_meta(caller, activation, None))
        return await self.call("tools/list", params, result=t.ToolsListResult)

    async def tools_call(
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
        return await self.call("tools/call", params, result=t.CallToolResult)

    # --- MCP resources (PROTOCOL.md section 5) ---

    async def resources_list(
        self, cursor: str | None = None, *, caller: str | None = None
    ) -> r.ResourcesListResult:
        params = r.ResourcesListParams(cursor=cursor, meta=tool_meta(caller, None, None))
        return await self.call("resources/list", params, result=r.ResourcesListResult)

    async def resources_templates_list(self) -> r.ResourceTemplatesListResult:
        params = r.ResourcesListParams()
        return await self.call(
            "resources/templates/list", params, result=r.ResourceTemplatesListResult
        )

    async def resources_read(self, uri: str, *, caller: str | None = None) -> r.ResourcesReadResult:
        params = r.ResourceUriParams(uri=uri, meta=tool_meta(caller, None, None))
        return await self.call("resources/read", params, result=r.ResourcesReadResult)

    async def resources_subscribe(self, uri: str, *, caller: str | None = None) -> h.Empty:
        params = r.ResourceUriParams(uri=uri, meta=tool_meta(caller, None, None))
        return await self.call("resources/subscribe", params, result=h.Empty)

    async def resources_unsubscribe(self, uri: str, *, caller: str | None = None) -> h.Empty:
        params = r.ResourceUriParams(uri=uri, meta=tool_meta(caller, None, None))
        return await self.call("resources/unsubscribe", params, result=h.Empty)

    # --- MCP tasks (2025-11-25: initialize with that protocol version) ---------------------

    async def tasks_get(self, task_id: str, *, caller: str | None = None) -> tk.Task:
        params = tk.TaskIdParams(taskId=task_id, meta=tool_meta(caller, None, None))
        return await self.call("tasks/get", params, result=tk.Task)

    async def tasks_result(self, task_id: str, *, caller: str | None = None) -> t.CallToolResult:
        """The task's result; waits until the task is terminal."""
        params = tk.TaskIdParams(taskId=task_id, meta=tool_meta(caller, None, None))
        return await self.call("tasks/result", params, result=t.CallToolResult)

    async def tasks_list(
        self, cursor: str | None = None, *, caller: str | None = None
    ) -> tk.TasksListResult:
        params = tk.TasksListParams(cursor=cursor, meta=tool_meta(caller, None, None))
        return await self.call("tasks/list", params, result=tk.TasksListResult)

    async def tasks_cancel(self, task_id: str, *, caller: str | None = None) -> tk.Task:
        params = tk.TaskIdParams(taskId=task_id, meta=tool_meta(caller, None, None))
        return await self.call("tasks/cancel", params, result=tk.Task)
