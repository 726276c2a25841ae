"""The `tasks` table: MCP tasks, one row per task-augmented delegation (core/tasks.py has the rules).

A row is inserted in the transaction of the spawn (or send_message) it stands for, and updated
once, when it becomes terminal. Pages are ordered by (created_at, task_id) within the owners
asked for; `subagentd prune` deletes the rows whose lifetime ended (`delete_expired`).
"""

from __future__ import annotations

from collections.abc import Sequence

from subagentd.schema.records import TaskRecord
from subagentd.storage.roots import ROOT_FIRST, inserting, pick, pick_insert, rooted
from subagentd.storage.table_access import Connected

_COLUMNS = (
    "task_id, owner_id, agent_id, tool, status, status_message, created_at, updated_at,"
    " ttl_ms, poll_ms, expires_at, output, result, progress_token"
)
OWNERS_BATCH = 10_000  # owners bound in one statement (under every backend's parameter limit)
_INSERT_SQL = inserting(
    f"INSERT INTO tasks (root_id, {_COLUMNS}) VALUES ({{root}},{','.join('?' * 14)})"
)
_FINISH_SQL = rooted(
    "UPDATE tasks SET status = ?, status_message = ?, updated_at = ?, result = ?"
    " WHERE {root}task_id = ? AND status = 'working'"
)
_TASK_SQL = rooted(f"SELECT {_COLUMNS} FROM tasks WHERE {{root}}task_id = ?")


class Tasks:
    def __init__(self, db: Connected) -> None:
        self._db = db

    def insert_task(self, record: TaskRecord) -> None:
        db = self._db
        db.begin()
        # the tree of the agent that asked (its child may not exist: a refused spawn's task)
        db.roots.tie(f"k:{record.task_id}", record.owner_id)
        root = db.roots.root(record.owner_id)
        db.conn.execute(*pick_insert(_INSERT_SQL, root, record.owner_id, _row(record)))

    def get_task(self, task_id: str) -> TaskRecord | None:
        roots = self._db.roots
        sql = pick(_TASK_SQL, roots.root_of(f"k:{task_id}"), (task_id,))
        row = self._db.conn.execute(*sql).fetchone()
        if row is None:
            return None
        record = TaskRecord(*row)
        roots.tie(f"k:{task_id}", record.owner_id)
        return record

    def finish_task(
        self, task_id: str, status: str, message: str | None, at: str, result: str
    ) -> bool:
        """A working task becomes terminal (once: False when it no longer was working)."""
        db = self._db
        db.begin()
        root = db.roots.root_of(f"k:{task_id}")
        sql = pick(_FINISH_SQL, root, (status, message, at, result, task_id))
        return db.conn.execute(*sql).rowcount == 1

    def working_tasks(self) -> list[TaskRecord]:
        return [
            TaskRecord(*row)
            for row in self._db.conn.execute(
                f"SELECT {_COLUMNS} FROM tasks WHERE status = 'working'"
            ).fetchall()
        ]

    def tasks_page(
        self, owners: Sequence[str], after: tuple[str, str] | None, now: float, limit: int
    ) -> list[TaskRecord]:
        """The unexpired tasks these agents asked for, in creation order, after (created_at,
        task_id). The owners go OWNERS_BATCH at a time (a subtree may hold more sessions than a
        statement may bind parameters: PostgreSQL's 65,535), each batch's first `limit` merged."""
        found: list[TaskRecord] = []
        for start in range(0, len(owners), OWNERS_BATCH):
            batch = owners[start : start + OWNERS_BATCH]
            marks = ",".join("?" * len(batch))
            root = self._db.roots.common(batch)
            sql = (
                f"SELECT {_COLUMNS} FROM tasks WHERE {ROOT_FIRST if root is not None else ''}"
                f"owner_id IN ({marks}) AND (expires_at IS NULL OR expires_at > ?)"
            )
            args: list[object] = [*([root] if root is not None else []), *batch, now]
            if after is not None:
                sql += " AND (created_at > ? OR (created_at = ? AND task_id > ?))"
                args += [after[0], after[0], after[1]]
            sql += " ORDER BY created_at, task_id LIMIT ?"
            args.append(limit)
            found += [TaskRecord(*row) for row in self._db.conn.execute(sql, args).fetchall()]
        if len(owners) > OWNERS_BATCH:
            found.sort(key=lambda record: (record.created_at, record.task_id))
        return found[:limit]

    def count_working(self, owners: Sequence[str]) -> int:
        if not owners:
            return 0
        marks = ",".join("?" * len(owners))
        sql = rooted(
            f"SELECT count(*) FROM tasks WHERE {{root}}status = 'working' AND owner_id IN ({marks})"
        )
        row = self._db.conn.execute(
            *pick(sql, self._db.roots.common(owners), tuple(owners))
        ).fetchone()
        return int(row[0])

    def delete_expired(self, now: float) -> int:
        """Delete the tasks whose lifetime ended by `now` (epoch seconds); how many."""
        db = self._db
        db.begin()
        cursor = db.conn.execute(
            "DELETE FROM tasks WHERE expires_at IS NOT NULL AND expires_at <= ?", (now,)
        )
        return max(0, cursor.rowcount)


def _row(record: TaskRecord) -> tuple[object, ...]:
    return tuple(getattr(record, name) for name in record.__struct_fields__)
