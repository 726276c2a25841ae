"""An agent host in Python: it spawns subagentd, opens a coordinator, and runs every agent's turns.

    python examples/python_host.py          # the blocking client and AgentHost
    python examples/python_host.py --async  # the same on AsyncClient and AsyncAgentHost (anyio)

`model()` stands in for a real model call: the coordinator delegates to a researcher child,
which reports its finding with the `report` tool and ends its turn; the coordinator then reads
the report and the settle notice as its next turns. Prints one line per turn.
"""

from __future__ import annotations

import sys

import anyio

from subagentd.client import (
    AgentHost,
    AsyncAgentHost,
    AsyncClient,
    AsyncTurnControl,
    Client,
    TurnControl,
    TurnOutcome,
)
from subagentd.schema.notifications import TurnStart

TASK = "Find the oldest open bug."


def text_of(start: TurnStart) -> str:
    return " / ".join(block.text for message in start.messages for block in message.content)


def model(start: TurnStart) -> str:
    """A stand-in model: what the agent answers to its turn's input."""
    if start.agent_id == "researcher":
        return "Oldest open bug: #12 (2019)."
    return "noted"


def run_blocking(db: str) -> list[str]:
    seen: list[str] = []
    with Client.spawn(db=db) as client:
        client.initialize(client_name="example-host")
        client.agents_open("root", label="coordinator")

        def turn(start: TurnStart, control: TurnControl) -> TurnOutcome:
            seen.append(f"{start.agent_id}: {text_of(start)}")
            answer = model(start)
            if start.agent_id == "researcher":
                client.report(answer, caller="researcher")  # the model's report tool call
            return TurnOutcome(output=answer)

        client.agents_spawn("root", "researcher", TASK, child_id="researcher")
        host = AgentHost(client, turn)
        host.run(until=lambda: len(seen) == 3)  # the child's turn, the report, the settle notice
    return seen


async def run_async(db: str) -> list[str]:
    seen: list[str] = []
    async with AsyncClient.spawn(db=db) as client:
        await client.initialize(client_name="example-host")
        await client.agents_open("root", label="coordinator")
        done = anyio.Event()

        async def turn(start: TurnStart, control: AsyncTurnControl) -> TurnOutcome:
            seen.append(f"{start.agent_id}: {text_of(start)}")
            answer = model(start)
            if start.agent_id == "researcher":
                await client.report(answer, caller="researcher")
            if len(seen) == 3:
                done.set()
            return TurnOutcome(output=answer)

        async with AsyncAgentHost(client, turn) as host:
            await client.agents_spawn("root", "researcher", TASK, child_id="researcher")
            with anyio.fail_after(30):
                await done.wait()
                await host.idle()
    return seen


def main(argv: list[str]) -> int:
    db = ":memory:"
    seen = anyio.run(run_async, db) if "--async" in argv else run_blocking(db)
    for line in seen:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
