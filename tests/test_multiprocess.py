"""Several subagentd processes on one database: leases keep a live session in exactly one of them."""

import os
import signal

import pytest

from subagentd.schema.codes import Code
from tests.host import RpcError


def start(spawn_process, db, *args):
    proc = spawn_process(*args, db=db)
    proc.host.initialize()
    return proc


def refused(host, method, params):
    with pytest.raises(RpcError) as caught:
        host.call(method, params)
    return caught.value


def test_a_session_live_in_one_process_is_never_activated_by_another(tmp_path, spawn_process):
    db = str(tmp_path / "shared.db")
    a = start(spawn_process, db)
    b = start(spawn_process, db)
    a.host.open("root")
    a.host.spawn("root", "c1", label="worker")
    error = refused(b.host, "agents/open", {"agent_id": "root"})
    assert error.code == Code.INVALID_STATE
    assert error.message == 'agent "root" is live in another subagentd process'
    # b sees a's live children with their true status
    assert b.host.call("list_agents", {"caller": "root"})["text"] == "c1 [running] — worker"
    assert b.host.call("agents/get", {"agent_id": "c1"})["status"] == "running"


def test_a_killed_process_leaves_its_sessions_resumable_elsewhere(tmp_path, spawn_process):
    db = str(tmp_path / "shared.db")
    a = start(spawn_process, db, "--lease-ttl", "0.6")
    b = start(spawn_process, db, "--lease-ttl", "0.6")
    a.host.open("root")
    child = a.host.spawn("root", "c1", label="worker")
    a.host.call("send_message", {"caller": "root", "subagent_id": "c1", "message": "queued in a"})
    a.proc.send_signal(signal.SIGKILL)
    a.proc.wait(timeout=10)
    assert b.host.call("agents/get", {"agent_id": "c1"})["status"] == "ready"
    b.host.open("root")
    # c1's turn was open when a died: b's next heartbeat records it as ended by crash, root is told
    notice = b.host.notification("turn/start", agent_id="root")
    assert (
        notice["messages"][0]["content"][0]["text"]
        == "Background subagent c1 failed before it finished."
    )
    events = b.host.call("transcript/read", {"agent_id": "c1"})["events"]
    crash = [e for e in events if e["type"] == "turn_end"]
    assert crash[-1]["data"] == {"turn_id": child["turn_id"], "reason": "error", "cause": "crash"}
    b.host.call("send_message", {"caller": "root", "subagent_id": "c1", "message": "from b"})
    resumed = b.host.notification("turn/start", agent_id="c1")
    assert resumed["resume"]["label"] == "worker"
    assert resumed["messages"][0]["content"][0]["text"] == "queued in a"


def test_a_stalled_process_loses_its_leases_after_the_ttl(tmp_path, spawn_process):
    db = str(tmp_path / "shared.db")
    a = start(spawn_process, db, "--lease-ttl", "0.6")
    b = start(spawn_process, db, "--lease-ttl", "0.6")
    a.host.open("root")
    assert refused(b.host, "agents/open", {"agent_id": "root"}).code == Code.INVALID_STATE
    os.kill(a.proc.pid, signal.SIGSTOP)  # alive but silent: no more heartbeats
    try:
        deadline_hits = 0
        while True:
            try:
                b.host.open("root")
                break
            except RpcError as exc:
                assert exc.code == Code.INVALID_STATE
                deadline_hits += 1
                assert deadline_hits < 100, "lease never expired"
                b.host.settle_quietly(0.05)
    finally:
        os.kill(a.proc.pid, signal.SIGCONT)


def test_heartbeats_keep_a_quiet_process_leases(tmp_path, spawn_process):
    db = str(tmp_path / "shared.db")
    # a TTL well above scheduling hiccups on a loaded 2-core CI machine (heartbeats every TTL/3)
    a = start(spawn_process, db, "--lease-ttl", "1.5")
    b = start(spawn_process, db, "--lease-ttl", "1.5")
    a.host.open("root")
    b.host.settle_quietly(4.0)  # more than two TTLs without any request to a
    assert refused(b.host, "agents/open", {"agent_id": "root"}).code == Code.INVALID_STATE
