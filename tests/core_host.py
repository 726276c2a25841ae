"""A host driving core/ directly (no wire): for the rule matrix as fast unit tests."""

from __future__ import annotations

import builtins
import time
from typing import Any

import msgspec

from subagentd.core.service import Outlets, Service
from subagentd.core.settings import Settings
from subagentd.errors import SubagentdError
from subagentd.schema.host_methods import OpenParams, Scope, SpawnParams, TurnEndParams, TurnReason
from subagentd.schema.tools import InterruptAgentArgs, ListAgentsArgs, ReportArgs, SendMessageArgs
from subagentd.storage.database import SqliteStore


def sqlite_store(path: str | None, clock: Any = None) -> Any:
    """A SQLite store: in memory, or on `path` shared by the simulated processes."""
    if path is None:
        return SqliteStore(":memory:")
    return SqliteStore(path) if clock is None else SqliteStore(path, clock=clock)


# How CoreHost and process() make their stores: (path or None, clock or None) -> Store. The
# `backend` fixture (tests/conftest.py) swaps it for PostgreSQL, where a path names a database.
make_store: Any = sqlite_store


class ManualTimers:
    """Timers that fire only when the test says so."""

    def __init__(self) -> None:
        self.scheduled: list[list[Any]] = []

    def call_later(self, delay, callback):
        entry = [delay, callback, True]
        self.scheduled.append(entry)

        def cancel() -> None:
            entry[2] = False

        return cancel

    def fire_all(self) -> int:
        fired = 0
        for entry in list(self.scheduled):
            if entry[2]:
                entry[2] = False
                entry[1]()
                fired += 1
        return fired


class CoreHost:
    def __init__(self, store: Any = None, **settings: Any) -> None:
        self.store = store or make_store(None)
        self.notes: list[tuple[str, dict[str, Any]]] = []
        self.timers = ManualTimers()
        self.svc = Service(
            self.store,
            Settings(**settings),
            Outlets(
                lambda method, params: self.notes.append((method, msgspec.to_builtins(params))),
                self.timers,
            ),
        )
        self.svc.recovery.recover()

    @classmethod
    def with_tree(cls) -> CoreHost:
        """root -> c1 -> g1 and root -> c2, all running their first turn; another root `stranger`."""
        core = cls()
        core.open("root")
        core.open("stranger")
        core.spawn("root", "c1")
        core.spawn("root", "c2")
        core.spawn("c1", "g1")
        core.notes.clear()
        return core

    # --- host actions ------------------------------------------------------------------

    def open(self, agent_id: str, **params: Any) -> str:
        return self.svc.host.open(OpenParams(agent_id=agent_id, **params)).activation_id

    def spawn(
        self, caller: str, child_id: str, label: str = "task", prompt: str = "go", **params: Any
    ):
        return self.svc.host.spawn(
            SpawnParams(caller=caller, child_id=child_id, label=label, prompt=prompt, **params)
        )

    def turn(self, agent_id: str) -> str | None:
        agent = self.svc.agents.registry.get(agent_id)
        return agent.turn.turn_id if agent and agent.turn else None

    def end(
        self, agent_id: str, reason: TurnReason = "completed", output: str | None = None
    ) -> None:
        turn_id = self.turn(agent_id)
        assert turn_id is not None, f"{agent_id} has no open turn"
        self.svc.host.finish_turn(
            TurnEndParams(agent_id=agent_id, turn_id=turn_id, reason=reason, output=output)
        )

    def status(self, agent_id: str) -> str:
        return self.svc.agents.status_of(agent_id)

    # --- tools ---------------------------------------------------------------------------

    def send(self, caller: str, target: str, message: str = "more", activation: str | None = None):
        return self.svc.tools.send_message(
            caller, activation, SendMessageArgs(subagent_id=target, message=message)
        )

    def interrupt(self, caller: str, target: str, activation: str | None = None):
        return self.svc.tools.interrupt_agent(
            caller, activation, InterruptAgentArgs(agent_id=target)
        )

    def list(self, caller: str, scope: Scope = "children"):
        return self.svc.tools.list_agents(caller, None, ListAgentsArgs(scope=scope))

    def report(self, caller: str, output: str, activation: str | None = None):
        return self.svc.tools.report(caller, activation, ReportArgs(output=output))

    def refusal(self, action, *args: Any, **kwargs: Any) -> SubagentdError:
        try:
            action(*args, **kwargs)
        except SubagentdError as exc:
            return exc
        raise AssertionError("expected a refusal")

    # --- notifications -------------------------------------------------------------------

    # `builtins.list`: in this class `list` is the method above
    def take(self, method: str, agent_id: str | None = None) -> builtins.list[dict[str, Any]]:
        """Remove and return the notifications of one kind (optionally for one agent)."""
        taken = [
            p
            for m, p in self.notes
            if m == method and (agent_id is None or p.get("agent_id") == agent_id)
        ]
        self.notes = [
            (m, p)
            for m, p in self.notes
            if not (m == method and (agent_id is None or p.get("agent_id") == agent_id))
        ]
        return taken

    def texts_of_turns(self, agent_id: str) -> builtins.list[builtins.list[str]]:
        """The message texts of each turn/start of one agent, in order (consumed)."""
        return [
            [b["text"] for m in start["messages"] for b in m["content"]]
            for start in self.take("turn/start", agent_id)
        ]


# --- several processes on one file, and small readers shared by the rule tests ------------------

TTL = 600.0  # renewal threads tick every 200 s of real time: never during these tests


class FakeClock:
    """The wall clock every "process" on a shared file reads (leases expire by it)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def process(path: str, clock: FakeClock, owner: str, **settings: Any) -> CoreHost:
    """A service with its own store on the shared file, as one process; nothing left open."""
    core = CoreHost(store=make_store(str(path), clock), owner=owner, lease_ttl=TTL, **settings)
    core.svc.commit()
    return core


def step(core: CoreHost, action: Any, *args: Any, **kwargs: Any) -> Any:
    """One request: its own write transaction, committed (so the other process can write)."""
    with core.svc.transaction():
        result = action(*args, **kwargs)
    core.svc.commit()
    return result


def owners(core: CoreHost) -> dict[str, tuple[float, int]]:
    return {owner: (expires, fenced) for owner, expires, fenced in core.store.owners()}


def refused(core: CoreHost, error_type: type, action: Any, *args: Any) -> str:
    """The message of the refusal `action(*args)` raises, which must be exactly `error_type`."""
    error = core.refusal(action, *args)
    assert type(error) is error_type, error
    return error.message


def events_of(core: CoreHost, agent_id: str) -> list[Any]:
    return core.svc.records.read_transcript(agent_id, None, None).events
