"""Several machines, simulated: three subagentd processes, each in a UTS
namespace of its own (its own host name, so its owner id names another host and only lease
expiry can tell that it died, as across machines), share one PostgreSQL database over TCP.

One tree moves across them: follow-ups, interrupts and reports cross processes (woken by
LISTEN/NOTIFY), and when its process is killed the tree fails over to the next one, twice.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time

import psycopg
import pytest

from subagentd.schema.codes import Code
from tests.spawned import RpcError, ServerProcess

PATIENCE = 60.0  # the longest any wait below may take on a loaded machine
TTL = "2"  # seconds: a killed process's leases lapse this long after its last renewal
CLONE_NEWUTS = 0x04000000


def on_host(name: str):
    """A preexec_fn: the child gets a UTS namespace and host name of its own (needs root)."""

    def enter() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(CLONE_NEWUTS) != 0 or libc.sethostname(name.encode(), len(name)) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"cannot simulate host {name}: {os.strerror(errno)}")

    return enter


def wait_for(condition, what):
    deadline = time.monotonic() + PATIENCE
    while not (result := condition()):
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.05)
    return result


def texts(start):
    return [block["text"] for message in start["messages"] for block in message["content"]]


@pytest.fixture
def hosts(pg_stores):
    """Three processes, on hosts a, b and c, sharing one database through 127.0.0.1:PORT."""
    url = pg_stores.url(tcp=True)
    assert url.startswith("postgresql://") and "@127.0.0.1:" in url
    procs = {
        name: ServerProcess("--lease-ttl", TTL, db=url, preexec_fn=on_host(f"host-{name}"))
        for name in "abc"
    }
    try:
        for proc in procs.values():
            proc.host.initialize()
            proc.host.call("ping", {})  # served: its database was opened and migrated
        yield url, procs
    finally:
        for proc in procs.values():
            proc.stop()


def owners(url):
    with psycopg.connect(url) as conn:
        return dict(conn.execute("SELECT owner, fenced FROM owners").fetchall())


def take_over(host, agent_id):
    """Open `agent_id` once the lease of the process that held it lapsed (it was killed)."""

    def opened():
        try:
            return host.open(agent_id)
        except RpcError as exc:
            assert exc.message == f'agent "{agent_id}" is live in another subagentd process'
            return None

    return wait_for(opened, f"{agent_id} could be opened here")


def test_three_hosts_share_a_tree_across_follow_ups_interrupts_reports_and_failover(hosts):
    url, procs = hosts
    a, b, c = (procs[name].host for name in "abc")
    wait_for(lambda: len(owners(url)) == 3, "the three processes registered")
    ids = owners(url)
    assert sorted(owner.partition(":")[0] for owner in ids) == ["host-a", "host-b", "host-c"]
    assert set(ids.values()) == {0}

    # the tree starts on a: root with two children
    a.open("root")
    c1 = a.spawn("root", "c1", label="left", mode="continuable")
    c2 = a.spawn("root", "c2", label="right")
    assert c.call("list_agents", {"caller": "root"})["text"] == (
        "c1 [running] — left\nc2 [running] — right"
    )

    # a follow-up from b starts root's turn on a; an interrupt from c stops it there
    reply = b.call("agents/followup", {"agent_id": "root", "message": "from b"})
    start = a.notification("turn/start", PATIENCE, agent_id="root")
    assert [m["message_id"] for m in start["messages"]] == [reply["message_id"]]
    assert texts(start) == ["from b"]
    assert c.call("agents/interrupt", {"agent_id": "root"}) == {
        "accepted": True,
        "previous_status": "running",
    }
    stop = a.notification("turn/interrupt", PATIENCE, agent_id="root")
    assert (stop["turn_id"], stop["cause"]) == (start["turn_id"], {"kind": "user"})
    a.end_turn("root", start["turn_id"], reason="aborted")

    # c1 reports from a (b cannot report for it); root's next turn runs on a, b sees it claimed
    error = pytest.raises(RpcError, b.call, "report", {"caller": "c1", "output": "x"}).value
    assert (error.code, error.message) == (
        Code.UNAUTHORIZED,
        'agent "c1" is not a live continuable subagent and cannot report',
    )
    report = a.call("report", {"caller": "c1", "output": "half done"})
    start = a.notification("turn/start", PATIENCE, agent_id="root")
    assert texts(start) == ["Background subagent c1 reported:", "half done"]
    assert b.call("messages/get", {"message_id": report["message_id"]})["state"] == "claimed"

    # host a dies: b takes root over once a's lease lapses (no pid to check on another host)
    a_owner = next(owner for owner in ids if owner.startswith("host-a:"))
    procs["a"].proc.send_signal(signal.SIGKILL)
    procs["a"].proc.wait(timeout=PATIENCE)
    take_over(b, "root")
    assert owners(url)[a_owner] == 1  # fenced in b's transaction
    # c1's and c2's turns were open on a: recorded as crashed, and root hears of each on b
    notices = {}
    while len(notices) < 2:
        notice = b.notification("turn/start", PATIENCE, agent_id="root")
        [message] = notice["messages"]
        notices[message["source"]["sender_session_id"]] = texts(notice)
        b.end_turn("root", notice["turn_id"])
    assert notices == {
        child: [
            f"Background subagent {child} failed before it finished.",
            "It left no closing message.",
        ]
        for child in ("c1", "c2")
    }
    for child, spawned in (("c1", c1), ("c2", c2)):
        events = c.call("transcript/read", {"agent_id": child})["events"]
        assert events[-1]["type"] == "turn_end"
        assert events[-1]["data"] == {
            "turn_id": spawned["turn_id"],
            "reason": "error",
            "cause": "crash",
        }

    # the tree runs on b now: c1 resumes there, and c's follow-up to root reaches b
    b.call("send_message", {"caller": "root", "subagent_id": "c1", "message": "again"})
    resumed = b.notification("turn/start", PATIENCE, agent_id="c1")
    assert texts(resumed) == ["again"] and resumed["resume"]["label"] == "left"
    reply = c.call("agents/followup", {"agent_id": "root", "message": "from c"})
    start = b.notification("turn/start", PATIENCE, agent_id="root")
    assert [m["message_id"] for m in start["messages"]] == [reply["message_id"]]

    # host b dies too: c takes the tree over, and c1's turn there is recorded as crashed
    procs["b"].proc.send_signal(signal.SIGKILL)
    procs["b"].proc.wait(timeout=PATIENCE)
    take_over(c, "root")
    notice = c.notification("turn/start", PATIENCE, agent_id="root")
    assert texts(notice) == [
        "Background subagent c1 failed before it finished.",
        "It left no closing message.",
    ]
    assert [fenced for owner, fenced in owners(url).items() if not owner.startswith("host-c:")] == [
        1,
        1,
    ]
    assert c.call("agents/get", {"agent_id": "root"})["status"] == "running"
