"""The root the face serves, reached through a `subagentd serve --caller ROOT` child process and
the project's async client: its tools (spawn_agent, send_message, interrupt_agent, list_agents,
wait_agents) and resources (an agent, its transcript). Every rule stays in that process; this
module only calls it, and wakes the face's waiters when it says something changed."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import anyio

from subagentd.client.asynchronous import AsyncClient
from subagentd.client.errors import RpcError

HOST_NOTIFICATIONS = {"experimental": {"subagentd": {"hostNotifications": True}}}
RESOURCE_NOT_FOUND = -32602
DRAIN_MS = 25_000  # one wait_agents at a time takes the root's news (the face has no model)


class Refused(Exception):
    """A tool call the serving subagentd refused: its text (the model-facing one) and code."""

    def __init__(self, text: str, code: int | None) -> None:
        super().__init__(text)
        self.text, self.code = text, code


class Tree:
    """One root's children, as the face needs them."""

    def __init__(self, client: AsyncClient, root: str) -> None:
        self.client, self.root = client, root
        self._changed = anyio.Event()
        self._subscribed: set[str] = set()

    @classmethod
    def spawn(cls, db: str, root: str, serve_args: Sequence[str]) -> tuple[AsyncClient, str]:
        """The client that starts `subagentd serve --db DB --caller ROOT ARGS` (stderr inherited:
        its log lines are the face's)."""
        return AsyncClient.spawn(*serve_args, db=db, caller=root, stderr="inherit"), root

    async def start(self) -> None:
        await self.client.initialize(client_name="subagentd-a2a", capabilities=HOST_NOTIFICATIONS)
        for method in ("agent/settled", "agent/status", "notifications/resources/updated"):
            self.client.on(method, self._wake)

    def _wake(self, params: dict[str, Any]) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def changed(self, at_most: float) -> None:
        """Returns when the serving subagentd said something changed, or after `at_most` s."""
        with anyio.move_on_after(at_most):
            await self._changed.wait()

    async def drain(self) -> None:
        """Take the root's news (settlement notices, reports) as they come, so its inbox never
        fills: the face reads each task's state from its agent, not from the root's inbox."""
        while True:
            await self.client.tools_call("wait_agents", {"timeout_ms": DRAIN_MS})
            self.client.notifications.clear()  # those no handler took: none is read
            self._wake({})

    async def tool(self, name: str, arguments: dict[str, Any], key: str | None = None) -> Any:
        result = await self.client.tools_call(name, arguments, idempotency_key=key)
        structured: Any = result.structuredContent or {}
        if result.isError:
            text = structured.get("text") or " ".join(
                c.get("text", "") for c in result.content if isinstance(c, dict)
            )
            raise Refused(text.removeprefix("Error: "), structured.get("code"))
        return structured

    async def agent(self, agent_id: str) -> dict[str, Any] | None:
        """The agent resource of a child of the root; None for any other id."""
        try:
            read = await self.client.resources_read(f"subagentd://agent/{_quote(agent_id)}")
        except RpcError as exc:
            if exc.code == RESOURCE_NOT_FOUND:
                return None
            raise
        agent: dict[str, Any] = json.loads(read.contents[0].text)
        return agent if agent.get("parent_id") == self.root else None

    async def events(self, agent_id: str, after: int | None = None) -> list[dict[str, Any]]:
        """The child's transcript events after `after` (all of them when None), in order."""
        found: list[dict[str, Any]] = []
        uri: str | None = f"subagentd://agent/{_quote(agent_id)}/transcript"
        if after is not None:
            uri = f"{uri}?after={after}"
        while uri is not None:
            read = await self.client.resources_read(uri)
            page = json.loads(read.contents[0].text)
            found.extend(page["events"])
            uri = page.get("next")
        return found

    async def watch(self, agent_id: str) -> None:
        """Ask to be woken when the child changes (resources/subscribe, once per child)."""
        if agent_id not in self._subscribed:
            await self.client.resources_subscribe(f"subagentd://agent/{_quote(agent_id)}")
            self._subscribed.add(agent_id)

    async def children(self) -> list[dict[str, Any]]:
        """The root's children as list_agents lists them (rows of kind `child`)."""
        listed = await self.tool("list_agents", {"scope": "children"})
        return [row for row in listed.get("agents", []) if row.get("kind") == "child"]


def _quote(agent_id: str) -> str:
    from urllib.parse import quote

    return quote(agent_id, safe="")
