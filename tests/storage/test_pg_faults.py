"""PostgreSQL faults against the real server over pipes and a real PostgreSQL 15: a terminated
connection, a restarted server, a statement killed by statement_timeout, a lost COMMIT answer
(a proxy, tests/pgproxy.py), a stopped (SIGSTOP) server. The server must keep serving, answer
the truth about a commit, never block its loop on the database, and fence no healthy process.

Longer than ~300 lines on purpose: every scenario needs its own server set-up (a dedicated PostgreSQL for
the restart and SIGSTOP cases, the proxy for the COMMIT ones) and the helpers they share.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.pg import PostgresServer, _bin
from tests.pgproxy import CommitDropper
from tests.spawned import RpcError, ServerProcess

FAST = ("--lease-ttl", "1.5")  # a heartbeat every half second


def serving(url: str, *args: str, heartbeats: bool = True) -> ServerProcess:
    """The server on `url`; without `heartbeats`, none in the test's time (each commits)."""
    proc = ServerProcess(*(FAST if heartbeats else ("--lease-ttl", "300")), *args, db=url)
    proc.host.initialize()
    return proc


def finish(proc: ServerProcess) -> tuple[int, str]:
    """Stop the server (EOF on stdin); its exit status and what it logged."""
    try:
        proc.close_stdin()
        proc.wait()
    finally:
        text = proc.stderr_text()
    return proc.stop(), text


def until_answered(call, seconds: float = 15.0):
    """Retry `call` while it is answered 1012 (the database not back yet), up to `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return call()
        except RpcError as exc:
            if exc.code != 1012 or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def terminate_all(admin_url: str, database: str) -> int:
    with psycopg.connect(admin_url, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = %s AND pid <> pg_backend_pid()",
            (database,),
        ).fetchall()
    return len(rows)


def test_a_terminated_connection_fails_one_group_and_the_server_serves_on(pg_stores):
    url = pg_stores.url()
    name = next(iter(pg_stores.databases.values()))
    proc = serving(url)
    try:
        host = proc.host
        host.open("root")
        child = host.spawn("root", "c1")
        assert terminate_all(pg_stores.server.admin, name) >= 2
        time.sleep(0.2)  # a heartbeat or this request finds the connection lost: one group fails
        until_answered(lambda: host.open("a"))
        sent = host.tool("send_message", "root", subagent_id="c1", message="next")
        assert sent["text"] == "message queued as the next turn for subagent c1"
        host.end_turn("c1", child["turn_id"], output="done")
        start = host.notification("turn/start", agent_id="c1")
        assert [m["message_id"] for m in start["messages"]] == [sent["message_id"]]
        assert host.call("ping", {}) == {}
    finally:
        code, text = finish(proc)
    assert code == 0 and "cannot rebuild the live state" not in text


@pytest.fixture
def own_server() -> Iterator[PostgresServer]:
    """A PostgreSQL server of this test's own (it is restarted or stopped)."""
    server = PostgresServer()
    try:
        yield server
    finally:
        postmaster = _postmaster(server)
        if postmaster:
            _signalled(_server_pids(postmaster), signal.SIGCONT)
        server.stop()


def _signalled(pids: list[int], signum: signal.Signals) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:  # a server process that ended meanwhile
            pass


def _postmaster(server: PostgresServer) -> int:
    path = Path(server.data) / "postmaster.pid"
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def _server_pids(postmaster: int) -> list[int]:
    """The postmaster and its children (the backends, the background processes)."""
    pids = [postmaster]
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rpartition(")")[2].split()[1]) == postmaster:
                pids.append(int(entry))
    return pids


def _pg_ctl(server: PostgresServer, *argv: str) -> None:
    server._run(_bin("pg_ctl"), "-D", str(server.data), *argv)


def test_a_restarted_postgresql_server_is_reconnected_and_the_live_state_kept(own_server):
    database = own_server.new_database()
    proc = serving(own_server.url(database))
    try:
        host = proc.host
        host.open("root")
        child = host.spawn("root", "c1")
        log = str(own_server.root / "log")  # the server's output goes there, not to our pipe
        _pg_ctl(own_server, "-l", log, "-m", "fast", "-w", "-t", "60", "restart")
        until_answered(lambda: host.open("a"))
        # the live state survived: c1 is still running its turn, and runs the next message
        assert host.call("agents/get", {"agent_id": "c1"})["status"] == "running"
        sent = host.tool("send_message", "root", subagent_id="c1", message="next")
        host.end_turn("c1", child["turn_id"], output="done")
        start = host.notification("turn/start", agent_id="c1")
        assert [m["message_id"] for m in start["messages"]] == [sent["message_id"]]
    finally:
        code, text = finish(proc)
    assert code == 0 and "cannot rebuild the live state" not in text


def test_a_statement_killed_by_statement_timeout_refuses_writes_until_the_state_is_read_back(
    pg_stores,
):
    url = pg_stores.url() + "&options=-c%20statement_timeout%3D300"
    proc = serving(url)
    try:
        host = proc.host
        host.open("root")
        with psycopg.connect(pg_stores.url(next(iter(pg_stores.databases)))) as locker:
            # every statement touching the tables waits for this lock: each is cancelled
            locker.execute("LOCK TABLE sessions, leases, events IN ACCESS EXCLUSIVE MODE")
            with pytest.raises(RpcError) as failed:
                host.open("a")
            assert failed.value.code == 1012
            with pytest.raises(RpcError) as read:  # a read the database failed: 1012, not -32603
                host.call("transcript/read", {"agent_id": "root"})
            assert (read.value.code, read.value.data) == (1012, {"reason": "error"})
            time.sleep(1.2)  # heartbeats try to read the live state back meanwhile
            assert host.call("ping", {}) == {}
        until_answered(lambda: host.open("a"))
        assert host.call("agents/get", {"agent_id": "root"})["status"] == "idle"  # still live
    finally:
        code, text = finish(proc)
    assert code == 0 and "cannot rebuild the live state" not in text
    assert "the live state was read back from the database" in text


def _proxied(pg_stores) -> tuple[CommitDropper, str]:
    pg_stores.url()
    name = next(iter(pg_stores.databases.values()))
    server = pg_stores.server
    proxy = CommitDropper("127.0.0.1", server.port)
    return proxy, proxy.url(server.user, name)


def _inbox_rows(pg_stores, content: str) -> int:
    url = pg_stores.url(next(iter(pg_stores.databases)))
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM inbox WHERE content LIKE %s", (f"%{content}%",)
        ).fetchone()
    assert row is not None  # count(*) always answers one row
    (count,) = row
    return int(count)


def test_a_lost_commit_answer_of_a_committed_send_message_is_answered_as_applied(pg_stores):
    proxy, url = _proxied(pg_stores)
    proc = serving(url, heartbeats=False)  # the next COMMIT is the request's
    try:
        host = proc.host
        host.open("root")
        child = host.spawn("root", "c1")
        proxy.arm("answer")
        sent = host.tool("send_message", "root", subagent_id="c1", message="only once")
        assert proxy.dropped.is_set()
        assert sent["text"] == "message queued as the next turn for subagent c1"
        assert _inbox_rows(pg_stores, "only once") == 1
        host.end_turn("c1", child["turn_id"], output="done")
        start = host.notification("turn/start", agent_id="c1")
        assert [m["message_id"] for m in start["messages"]] == [sent["message_id"]]
        # a committed spawn whose COMMIT's answer was lost: answered, and its turn starts
        proxy.arm("answer")
        spawned = host.spawn("root", "c2", prompt="second child")
        assert proxy.dropped.is_set() and spawned["turn"]["agent_id"] == "c2"
    finally:
        assert proc.stop() == 0
        proxy.close()


def test_a_commit_whose_outcome_cannot_be_read_is_answered_unknown_never_not_applied(pg_stores):
    proxy, url = _proxied(pg_stores)
    proc = serving(url, heartbeats=False)
    try:
        host = proc.host
        host.open("root")
        host.spawn("root", "c1")
        proxy.arm("answer", then_refuse=True)  # committed, and nobody can ask the server
        with pytest.raises(RpcError) as failed:
            host.tool("send_message", "root", subagent_id="c1", message="maybe")
        assert proxy.dropped.is_set()
        assert failed.value.code == 1012 and failed.value.data == {"reason": "unknown"}
        assert str(failed.value).endswith(
            "storage failed (unknown): the connection to the database was lost during the commit"
            " and whether the request was applied is unknown; retry it with the same idempotency"
            " key, or read its effect before retrying (code 1012)"
        )
        assert _inbox_rows(pg_stores, "maybe") == 1  # it was applied: "not applied" would lie
        assert host.call("ping", {}) == {}
    finally:
        assert proc.stop() == 0
        proxy.close()


def test_a_spawn_whose_commit_outcome_was_unknown_gets_its_turn_once_the_state_is_read(pg_stores):
    proxy, url = _proxied(pg_stores)
    proc = serving(url, heartbeats=False)
    try:
        host = proc.host
        host.open("root")
        proxy.arm("answer", then_refuse=True)
        with pytest.raises(RpcError) as failed:
            host.call(
                "agents/spawn", {"caller": "root", "child_id": "c9", "label": "t", "prompt": "p"}
            )
        assert failed.value.data == {"reason": "unknown"}
        proxy.refuse_after = False  # the database can be reached again
        until_answered(lambda: host.open("other"))  # a write: the live state is read back
        start = host.notification("turn/start", agent_id="c9")  # it did commit: its turn runs
        assert [b["text"] for m in start["messages"] for b in m["content"]] == ["p"]
        host.end_turn("c9", start["turn_id"], output="done")
    finally:
        assert proc.stop() == 0
        proxy.close()


def test_a_lost_commit_request_is_answered_not_applied_and_its_retry_applies_once(pg_stores):
    proxy, url = _proxied(pg_stores)
    proc = serving(url, heartbeats=False)  # the next COMMIT is the request's
    try:
        host = proc.host
        host.open("root")
        host.spawn("root", "c1")
        proxy.arm("request")
        with pytest.raises(RpcError) as failed:
            host.tool("send_message", "root", subagent_id="c1", message="lost once")
        assert proxy.dropped.is_set()
        assert failed.value.code == 1012 and failed.value.data == {"reason": "error"}
        assert _inbox_rows(pg_stores, "lost once") == 0
        until_answered(
            lambda: host.tool("send_message", "root", subagent_id="c1", message="lost once")
        )
        assert _inbox_rows(pg_stores, "lost once") == 1
    finally:
        assert proc.stop() == 0
        proxy.close()


def _stopped(server: PostgresServer) -> list[int]:
    pids = _server_pids(_postmaster(server))
    _signalled(pids, signal.SIGSTOP)
    return pids


def _continued(pids: list[int]) -> None:
    _signalled(pids, signal.SIGCONT)


def test_a_stopped_postgresql_blocks_no_ping_and_sigterm_ends_within_the_grace(own_server):
    database = own_server.new_database()
    proc = serving(
        own_server.url(database, tcp=True), "--db-statement-timeout", "1", "--shutdown-grace", "2"
    )
    pids: list[int] = []
    try:
        host = proc.host
        host.open("root")
        pids = _stopped(own_server)
        opened = host.start("agents/open", {"agent_id": "a"})  # waits for the database
        pinged = host.start("ping", {})
        began = time.monotonic()
        assert host.response(opened, timeout=10.0)["error"]["code"] == 1012
        assert host.response(pinged, timeout=10.0) == {"jsonrpc": "2.0", "id": pinged, "result": {}}
        assert time.monotonic() - began < 6.0
        assert host.call("ping", {}, timeout=5.0) == {}
        host.start("agents/open", {"agent_id": "b"})  # the loop waits on the database again
        time.sleep(0.3)
        began = time.monotonic()
        proc.proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10.0)
        assert time.monotonic() - began < 2 + 3.0
    finally:
        _continued(pids)
        proc.stop()


def test_a_stall_of_postgresql_longer_than_the_lease_fences_no_healthy_process(own_server):
    database = own_server.new_database()
    url = own_server.url(database, tcp=True)
    first, second = serving(url), serving(url)
    pids: list[int] = []
    try:
        first.host.open("root")
        child = first.host.spawn("root", "c1")
        second.host.open("other")
        time.sleep(0.6)
        pids = _stopped(own_server)
        time.sleep(3.5)  # more than twice the 1.5 s lease
        _continued(pids)
        pids = []
        time.sleep(3.0)  # several heartbeats of both after the stall
        for proc in (first, second):
            assert proc.host.call("ping", {}) == {}
        until_answered(lambda: first.host.call("agents/get", {"agent_id": "c1"}))
        assert first.host.call("agents/get", {"agent_id": "c1"})["status"] == "running"
        first.host.end_turn("c1", child["turn_id"], output="done")
        events = first.host.call("transcript/read", {"agent_id": "c1"})["events"]
        ends = [e["data"] for e in events if e["type"] == "turn_end"]
        assert ends == [{"turn_id": child["turn_id"], "reason": "completed", "output": "done"}]
    finally:
        _continued(pids)
        codes = [first.stop(), second.stop()]
    for proc in (first, second):
        assert "lease-lost" not in b"".join(proc.host.raw).decode(errors="replace")
    assert codes == [0, 0]
