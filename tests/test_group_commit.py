"""Group commit: concurrent writes share transactions, and no reply leaves before its commit."""

import json
import sqlite3

import pytest

from subagentd.storage.database import SqliteStore
from tests.spawned import InProcessServer


@pytest.mark.parametrize(("durability", "synchronous"), [("normal", 1), ("full", 2)])
def test_durability_option_sets_the_sqlite_sync_level_in_wal_mode(
    tmp_path, durability, synchronous
):
    store = SqliteStore(str(tmp_path / "d.db"), durability=durability)
    assert store.conn.execute("PRAGMA synchronous").fetchone()[0] == synchronous
    assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    store.close()


def test_pipelined_writes_share_commits_and_every_reply_follows_its_commit(tmp_path):
    path = str(tmp_path / "group.db")
    store = SqliteStore(path)
    commits = []
    real_commit = store.commit

    def counting_commit():
        if store.conn.in_transaction:
            commits.append(1)
        real_commit()

    store.commit = counting_commit
    server = InProcessServer(store=store)
    reader = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
    checked = []
    writer = server.connection.writer
    real_write, real_write_now = writer.write, writer.write_now

    skip = [0]  # bytes at the start of the next write that were checked already

    def check(data: bytes) -> None:
        # what is about to reach the host must already be visible to another connection
        data, skip[0] = bytes(data)[skip[0] :], 0
        for line in data.splitlines():
            reply = json.loads(line)
            message_id = (
                (reply.get("result") or {}).get("message_id") if isinstance(reply, dict) else None
            )
            if message_id:
                row = reader.execute(
                    "SELECT 1 FROM inbox WHERE message_id = ?", (message_id,)
                ).fetchone()
                assert row is not None, f"reply for {message_id} written before its commit"
                checked.append(message_id)

    async def write_after_checking(data: bytes) -> None:
        check(data)
        await real_write(data)

    def write_now_after_checking(data: bytes) -> int:
        check(data)
        written = real_write_now(data)
        skip[0] = len(data) - written  # the rest comes first in the flusher's next write
        return written

    writer.write, writer.write_now = write_after_checking, write_now_after_checking
    host = server.host
    try:
        host.initialize()
        host.open("root")
        host.spawn("root", "c1")
        before = len(commits)
        checked.clear()  # the spawn's reply was checked too
        frames = [
            {
                "jsonrpc": "2.0",
                "id": 1000 + i,
                "method": "send_message",
                "params": {"caller": "root", "subagent_id": "c1", "message": f"m{i}"},
            }
            for i in range(300)
        ]
        host.send_bytes(b"".join(json.dumps(f).encode() + b"\n" for f in frames))
        for frame in frames:
            assert "result" in host.response(frame["id"])
        assert len(checked) == 300
        assert len(commits) - before < 300 / 4  # many writes per commit
    finally:
        server.stop()
        reader.close()
