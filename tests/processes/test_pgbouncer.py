"""subagentd behind PgBouncer (PROTOCOL.md section 7, "Behind a pooler"): session pooling keeps
one server session per connection, and everything works through it (here: delivery between
two processes, through the signal row and its NOTIFY; the crash suite and the waits across
processes run through it too); transaction and statement pooling share server sessions between
transactions, and subagentd refuses to start on them, in one line naming the mode it needs."""

from __future__ import annotations

import pytest

from tests.processes.test_multiprocess import PATIENCE
from tests.spawned import ServerProcess

REFUSAL = (
    "cannot start: database {url} is reached through a pooler that does not keep one server"
    " session per connection (transaction or statement pooling): subagentd needs session"
    " pooling (PgBouncer pool_mode = session) or a direct connection"
)


def through(pg_stores, pgbouncers, mode):
    pg_stores.url("db")
    return pgbouncers[mode].url(pg_stores.databases["db"])


@pytest.mark.parametrize("mode", ["transaction", "statement"])
def test_a_pooler_sharing_server_sessions_is_refused_at_start_in_one_line(
    pg_stores, pgbouncers, mode
):
    url = through(pg_stores, pgbouncers, mode)
    proc = ServerProcess(db=url)
    try:
        assert proc.wait(PATIENCE) != 0
        lines = [line for line in proc.stderr_text().splitlines() if line.strip()]
    finally:
        proc.stop()
    assert len(lines) == 1 and lines[0].endswith(" subagentd: " + REFUSAL.format(url=url)), lines


def test_delivery_between_two_processes_through_session_pooling(pg_stores, pgbouncers):
    url = through(pg_stores, pgbouncers, "session")
    holder, sender = (ServerProcess("--lease-ttl", "300", db=url) for _ in range(2))
    try:
        for proc in (holder, sender):
            proc.host.initialize()
        holder.host.open("root")
        turn = holder.host.spawn("root", "child")["turn_id"]
        holder.host.end_turn("child", turn, "completed", "first")
        holder.host.notification("agent/settled", PATIENCE, agent_id="child")
        # the child is live in the holder (idle, resident with its parent): a send from
        # the other process reaches it through a signal row and its NOTIFY
        sender.host.open("root2")
        holder.host.call("agents/open", {"agent_id": "c2", "parent_id": "root"})
        result = sender.host.call(
            "agents/followup", {"agent_id": "c2", "message": "from the other process"}
        )
        assert result["message_id"]
        start = holder.host.notification("turn/start", PATIENCE, agent_id="c2")
        texts = [block["text"] for m in start["messages"] for block in m["content"]]
        assert texts == ["from the other process"], start
    finally:
        for proc in (holder, sender):
            proc.stop()
