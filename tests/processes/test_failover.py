"""A failover under load (PROTOCOL.md section 7, "Across a failover"): two subagentd processes
send durably through a multi-host URL (`target_session_attrs=read-write`) to a primary with a
synchronous streaming standby (`pg_basebackup`, `synchronous_standby_names`); the primary is
killed mid-traffic and the standby promoted. Every acknowledged message is on the new primary
exactly once, every retry with its idempotency key is answered once, every "outcome unknown" is
the lost-COMMIT rule's answer, both processes serve again within a heartbeat of the new primary
accepting writes, and neither is fenced.

The servers are this module's own (Debian's PostgreSQL 15 through tests/pg.py): the primary
starts without `synchronous_standby_names`, the standby is made from it and started, and only
then does the primary wait for it (set and reloaded), or its first commit would wait forever.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field

import psycopg
import pytest

from subagentd.schema.codes import Code
from subagentd.storage.postgres.reconnect import IDENTIFIED, outcome_of
from tests.pg import PostgresServer
from tests.processes.test_lock_wait import send
from tests.processes.test_multiprocess import PATIENCE, ready
from tests.spawned import RpcError, ServerProcess

TTL = 3.0  # --lease-ttl: a heartbeat every second
HEARTBEAT = TTL / 3
UNKNOWN = (
    "storage failed (unknown): the connection to the database was lost during the commit and"
    " whether the request was applied is unknown; retry it with the same idempotency key, or"
    " read its effect before retrying"
)
AFTER = 10  # messages each process must have acknowledged after the failover


@pytest.fixture
def replicated():
    """A primary and its synchronous standby, each stopped at the end."""
    primary = PostgresServer()
    standby = None
    try:
        standby = PostgresServer(standby_of=primary)
        primary.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
        primary.execute("SELECT pg_reload_conf()")
        deadline = time.monotonic() + PATIENCE
        with psycopg.connect(primary.admin, autocommit=True) as pg:
            while pg.execute(
                "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'"
            ).fetchone() != (1,):
                assert time.monotonic() < deadline, "the standby never became synchronous"
                time.sleep(0.05)
        yield primary, standby
    finally:
        for server in (standby, primary):
            if server is not None:
                server.stop()


@dataclass
class Sender:
    """One process sending to its own tree from a thread, each message under its own idempotency
    key and retried with it until acknowledged."""

    proc: ServerProcess
    n: int
    acked: dict[str, str] = field(default_factory=dict)  # text -> message_id
    unknown: list[str] = field(default_factory=list)  # texts answered "outcome unknown"
    retried: dict[str, str] = field(default_factory=dict)  # text -> the retry's answer, kind
    failures: list[str] = field(default_factory=list)  # answers no rule allows
    acked_at: list[float] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        host, k = self.proc.host, 0
        while not self.stop.is_set():
            text = f"p{self.n}-{k}"
            params = {**send(f"root{self.n}", f"child{self.n}", text), "idempotency_key": text}
            deadline = time.monotonic() + PATIENCE
            while time.monotonic() < deadline:
                try:
                    result = host.call("send_message", params)
                except RpcError as error:
                    reason = (error.data or {}).get("reason")
                    if error.code == Code.STORAGE_FAILED and reason == "unknown":
                        if error.message != UNKNOWN:
                            self.failures.append(f"{text}: {error.message}")
                        self.unknown.append(text)
                    elif not (
                        error.code == Code.STORAGE_FAILED
                        and reason == "error"
                        or error.code == Code.OVERLOADED
                        and reason == "busy"
                    ):
                        self.failures.append(f"{text}: {error.code} {error.message}")
                        return
                    time.sleep(0.05)
                    continue
                self.acked[text] = result["message_id"]
                self.acked_at.append(time.monotonic())
                break
            else:
                self.failures.append(f"{text}: never acknowledged")
                return
            k += 1


def inbox(url: str, child: str) -> list[tuple[str, str]]:
    """(text, message_id) of every message in `child`'s inbox, in order."""
    with psycopg.connect(url, autocommit=True) as pg:
        rows = pg.execute(
            "SELECT content, message_id FROM inbox WHERE session_id = %s ORDER BY position",
            (child,),
        ).fetchall()
    return [(json.loads(content)[0]["text"], message_id) for content, message_id in rows]


def test_a_promoted_synchronous_standby_loses_nothing_acknowledged_and_fences_nobody(
    replicated,
):
    primary, standby = replicated
    name = primary.new_database()  # replicated to the standby with the rest
    url = (
        f"postgresql://{primary.user}@127.0.0.1:{primary.port},127.0.0.1:{standby.port}/{name}"
        "?target_session_attrs=read-write&sslmode=disable"
    )
    procs = [ServerProcess("--lease-ttl", str(TTL), db=url) for _ in range(2)]
    senders = [Sender(proc, n) for n, proc in enumerate(procs)]
    threads = [threading.Thread(target=s.run, daemon=True) for s in senders]
    try:
        for n, proc in enumerate(procs):
            ready(proc.host)
            proc.host.open(f"root{n}")
            proc.host.spawn(f"root{n}", f"child{n}")
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + PATIENCE
        while min(len(s.acked) for s in senders) < AFTER:  # both working
            assert time.monotonic() < deadline and not any(s.failures for s in senders)
            time.sleep(0.01)
        primary.kill()
        killed = time.monotonic()
        standby.promote()
        with psycopg.connect(standby.url(name), autocommit=True) as pg:  # accepting writes
            pg.execute("CREATE TEMP TABLE probe (x int); INSERT INTO probe VALUES (1)")
        writable = time.monotonic()
        before = [len(s.acked_at) for s in senders]
        while min(len(s.acked_at) - b for s, b in zip(senders, before, strict=True)) < AFTER:
            assert time.monotonic() < writable + PATIENCE, [s.failures for s in senders]
            assert not any(s.failures for s in senders), [s.failures for s in senders]
            time.sleep(0.01)
        for sender in senders:
            sender.stop.set()
        for thread in threads:
            thread.join(PATIENCE)
        for sender in senders:
            assert not sender.failures, sender.failures
            # serving again within a heartbeat of the new primary accepting writes (a reconnect
            # attempt every half second finds it; the heartbeat then reads the live state back)
            first = min(at for at in sender.acked_at if at > killed)
            assert first - writable <= HEARTBEAT + 0.5, (sender.n, first - writable)
            # every acknowledged message exactly once, and nothing else
            stored = inbox(standby.url(name), f"child{sender.n}")
            texts = [text for text, _ in stored if text != "go"]
            assert len(texts) == len(set(texts)), "duplicates"
            assert {t: m for t, m in stored if t != "go"} == sender.acked
        for proc in procs:  # nobody fenced: each still serves its own tree
            n = procs.index(proc)
            assert proc.host.call("agents/get", {"agent_id": f"child{n}"})["agent_id"]
        with psycopg.connect(standby.url(name), autocommit=True) as pg:
            assert pg.execute("SELECT count(*) FROM owners WHERE fenced <> 0").fetchone() == (0,)
    finally:
        for sender in senders:
            sender.stop.set()
        for proc in procs:
            proc.stop()


def test_a_lost_commit_is_not_read_as_committed_from_a_transaction_id_the_new_primary_reused(
    replicated,
):
    """A transaction id that never reached the standby is handed out again once it is promoted:
    its status there is another transaction's, so a COMMIT lost across a failover (or a restart)
    is committed only if the server it was sent to answers; else it is "unknown"."""
    primary, standby = replicated
    name = primary.new_database()
    with psycopg.connect(primary.url(name), autocommit=True) as pg:
        pg.execute("CREATE TABLE t (x int)")
    lost = psycopg.connect(primary.url(name))
    xid, backend, started = lost.execute(f"SELECT {IDENTIFIED}").fetchone()
    primary.kill()  # its COMMIT would have been lost with the connection
    standby.promote()
    with psycopg.connect(standby.url(name)) as other:  # another process writes first
        other.execute("INSERT INTO t VALUES (1)")
        reused = other.execute("SELECT pg_current_xact_id()::text").fetchone()[0]
    assert reused == xid  # the same id, now another transaction's
    status, fresh = outcome_of(lambda: psycopg.connect(standby.url(name)), xid, backend, started)
    if fresh is not None:
        fresh.close()
    lost.close()
    assert status is None
