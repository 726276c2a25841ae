"""No healthy process is fenced by time the database did not answer: a renewal that waited for a
stalled database or another writer's lock, a failed one, a long external write transaction on
SQLite; nor by a process of another PID namespace sharing the hostname.

Two services share a file, each with its own store, as two processes would; a fake clock stands
in for the time passing (tests/core_host.py). Where the stall itself is the point, real servers
over pipes and a real external writer are used.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import time

import pytest

from subagentd.storage.owner_ids import new_owner, owner_alive
from tests.core_host import TTL, FakeClock, owners, process, step
from tests.spawned import ServerProcess


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "shared.db")


def test_an_owner_that_expired_while_this_process_waited_for_the_database_is_not_fenced(
    path, clock
):
    first = process(path, clock, "p1")
    second = process(path, clock, "p2")
    step(first, first.open, "root")
    holding = second.store.group._holding
    holding.renewing = time.monotonic() - TTL  # p2's renewal has waited since the stall began
    clock.advance(TTL + 1)  # nobody's renewal went through meanwhile
    assert step(second, second.svc.recovery.recover) == 0
    assert owners(second)["p1"][1] == 0 and second.store.get_lease("root")[0] == "p1"
    # the renewal comes back, late: judging starts afresh from then; p1 renews in time
    holding.renewal_ended(True, clock())
    assert step(second, second.svc.recovery.recover) == 0
    assert owners(second)["p1"][1] == 0
    clock.advance(TTL / 3)
    step(first, first.open, "later")  # p1 is healthy: its commit renews its row
    clock.advance(TTL / 2)
    assert step(second, second.svc.recovery.recover) == 0
    assert owners(second)["p1"][1] == 0


def test_an_owner_that_stalled_alone_is_fenced_once_the_database_answered_long_enough(path, clock):
    first = process(path, clock, "p1")
    second = process(path, clock, "p2")
    step(first, first.open, "root")
    clock.advance(TTL / 2)
    second.store.group._holding.renewal_ended(False, clock())  # p2's renewal failed here
    clock.advance(TTL / 2 + 1)  # p1 expired; p2 has had answers for only half a TTL since
    assert step(second, second.svc.recovery.recover) == 0
    assert owners(second)["p1"][1] == 0
    clock.advance(TTL / 2)  # a whole TTL of answers, and p1 renewed nothing: it stalled
    step(second, second.svc.recovery.recover)
    assert owners(second)["p1"][1] == 1 and second.store.get_lease("root") is None


def test_a_long_external_write_transaction_on_sqlite_fences_no_serving_process(tmp_path):
    db = str(tmp_path / "shared.db")
    first = ServerProcess("--lease-ttl", "1", db=db)
    first.host.initialize()
    second = ServerProcess("--lease-ttl", "1", db=db)
    second.host.initialize()
    try:
        first.host.open("root")
        child = first.host.spawn("root", "c1")
        second.host.open("other")
        writer = sqlite3.connect(db, isolation_level=None)
        writer.execute("BEGIN IMMEDIATE")  # an operator's long delete, say
        writer.execute("UPDATE sessions SET label = label WHERE id = 'root'")
        time.sleep(2.5)  # more than twice the lease: nobody can renew meanwhile
        writer.execute("COMMIT")
        writer.close()
        time.sleep(2.0)  # several heartbeats of both after it
        for proc in (first, second):
            assert proc.host.call("ping", {}) == {}
        assert first.host.call("agents/get", {"agent_id": "c1"})["status"] == "running"
        assert second.host.call("agents/get", {"agent_id": "other"})["status"] == "idle"
        first.host.end_turn("c1", child["turn_id"], output="done")
        events = first.host.call("transcript/read", {"agent_id": "c1"})["events"]
        assert [e["data"]["reason"] for e in events if e["type"] == "turn_end"] == ["completed"]
    finally:
        codes = [first.stop(), second.stop()]
    for proc in (first, second):
        assert b"lease-lost" not in b"".join(proc.host.raw)
    assert codes == [0, 0]


def test_an_owner_id_names_its_pid_namespace_and_another_namespace_never_reads_it_as_gone():
    """Containers on the host's network share the hostname: an owner's pid is checked only by
    a process of the same boot and PID namespace."""
    mine = new_owner()
    host, pid, nonce, scope = mine.split(":")
    assert pid == str(os.getpid()) and len(nonce) == 12 and len(scope) == 12
    assert owner_alive(mine) and owner_alive(mine + "#2")
    gone = f"{host}:{2**22 + 7}:{nonce}:{scope}"  # no such pid here (beyond pid_max)
    assert not owner_alive(gone) and not owner_alive(gone + "#3")
    assert owner_alive(f"{host}:{2**22 + 7}:{nonce}:{'0' * 12}")  # another namespace's pid
    assert owner_alive(f"{host}:{2**22 + 7}:{nonce}")  # no scope: only expiry tells


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root")
def test_a_process_in_another_pid_namespace_with_the_same_hostname_sees_this_one_alive():
    code = (
        "import os, sys; from subagentd.storage.owner_ids import owner_alive, new_owner;"
        " print(os.getpid(), owner_alive(sys.argv[1]), new_owner())"
    )
    mine = new_owner()
    done = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", code, mine],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    inner_pid, alive, theirs = done.stdout.split()
    assert inner_pid == "1"  # its own namespace: our pid means nothing there
    assert alive == "True"
    assert theirs.split(":")[3] != mine.split(":")[3]  # the scopes differ
    assert owner_alive(theirs)  # and its pid 1 is not read here as our pid 1
