"""Runs for the view tests: a large tree driven through core (fast), left in a database file; a
busy tree a real server's host leaves behind."""

from __future__ import annotations

from subagentd.storage.database import SqliteStore
from tests.core_host import CoreHost


def large_run(path: str, leads: int = 20, workers: int = 49) -> CoreHost:
    """root -> `leads` leads -> `workers` workers each (1 + 20 + 980 = 1001 agents by default):
    every worker's turn ends (completed, aborted after an interrupt, or error) and settles, each
    lead reads its notices in later turns, some leads are left with a turn open."""
    agents = 1 + leads + leads * workers
    core = CoreHost(
        store=SqliteStore(path),
        max_live_per_root=agents,
        max_live=agents,
        max_children=max(leads, workers),
        tree_max_spawns=0,  # a tree of thousands: past the default budgets (SECURITY.md)
        tree_max_turns=0,
        # no renewal of the owner row while a test looks: a commit of it would be a change
        # the views must read (watch's "nothing committed: nothing read")
        lease_ttl=3600.0,
    )
    with core.svc.transaction():
        core.open("root", label="conductor")
        core.spawn("root", "lead-0", label="lead 0", prompt="start")
        for i in range(leads):
            lead = f"lead-{i}"
            if i:
                core.spawn("root", lead, label=f"lead {i}", prompt=f"part {i}")
            for j in range(workers):
                worker = f"w{i}-{j}"
                core.spawn(lead, worker, label=f"worker {j}", prompt=f"item {i}.{j}")
                if j % 7 == 3:
                    core.interrupt(lead, worker)
                    core.end(worker, "aborted")
                elif j % 11 == 5:
                    core.end(worker, "error")
                else:
                    core.end(worker, output=f"item {i}.{j} done")
            core.end(lead, output=f"part {i} dispatched")
            if i % 5 != 4:  # the notices: one more turn, then done
                while core.turn(lead) is not None:
                    core.end(lead, output=f"part {i} collected")
    core.svc.commit()
    return core


def busy_run(host) -> None:
    """Through a real server's host: a turn left open (c1, a message queued behind it), a settled
    one-shot (c2), and c3 interrupted with two messages parked."""
    host.open("root", label="coordinator")
    host.spawn("root", "c1", label="researcher", prompt="Find the oldest bug")
    c2 = host.spawn("root", "c2", label="writer", prompt="one go", mode="one-shot")
    host.spawn("root", "c3", label="parker", prompt="wait")
    host.tool("send_message", "root", subagent_id="c1", message="also the closed ones")
    usage = {"input_tokens": 1200, "output_tokens": 300, "cost": 0.25}
    end = {"agent_id": "c2", "turn_id": c2["turn_id"], "reason": "completed", "output": "written"}
    host.call("turns/end", {**end, "usage": usage})
    host.notification("agent/settled", agent_id="c2")
    host.tool("send_message", "root", subagent_id="c3", message="first")
    host.tool("send_message", "root", subagent_id="c3", message="second")
    host.tool("interrupt_agent", "root", agent_id="c3")
    stop = host.notification("turn/interrupt", agent_id="c3")
    host.end_turn("c3", stop["turn_id"], "aborted")
