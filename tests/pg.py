"""A throwaway PostgreSQL server for the tests: Debian's PostgreSQL 15 binaries, `initdb` into a
temp directory, `pg_ctl start` on a free port (TCP on 127.0.0.1 and a unix socket in that
directory), one server per test session, a fresh database per store a test asks for, and stopped
at the end. The binaries refuse to run as root: as root they run as the `postgres` user.

It never skips: when PostgreSQL cannot start, the tests that need it fail with the reason.
"""

from __future__ import annotations

import atexit
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

from tests.tools import require

TEMPLATE = "subagentd_template"  # migrated once: every test database is a copy of it


def _bin(name: str) -> str:
    """One of PostgreSQL's programs, beside initdb (a test fails naming PostgreSQL without it)."""
    return os.path.join(os.path.dirname(require("postgresql")), name)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class PostgresServer:
    """One `postgres` process on a temp directory; `url(name)` for its databases."""

    def __init__(self, *, durable: bool = False, standby_of: PostgresServer | None = None) -> None:
        """`durable`: fsync and full-page writes on, as a real server has them (the benchmarks);
        the tests run without (nothing of a test must outlive a power cut). `standby_of`: a
        streaming standby of that server (`pg_basebackup -R`: hot standby, read-only until
        `promote()`), with its databases, instead of a new cluster."""
        self.root = Path(tempfile.mkdtemp(prefix="subagentd-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self._names = itertools.count(1)
        self._as: list[str] = []
        if os.geteuid() == 0:  # initdb and postgres refuse root
            user = "postgres"
            entry = pwd.getpwnam(user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
            self._as = ["runuser", "-u", user, "--"]
        self.user = pwd.getpwuid(os.geteuid()).pw_name if not self._as else "postgres"
        if standby_of is None:
            self._run(
                _bin("initdb"), "-D", str(self.data), "-U", self.user, "-A", "trust", "-E",
                "UTF8", "--no-locale", "--no-sync",
            )  # fmt: skip
        else:  # initdb's pg_hba trusts replication connections from 127.0.0.1
            self._run(
                _bin("pg_basebackup"), "-D", str(self.data), "-h", "127.0.0.1", "-p",
                str(standby_of.port), "-U", self.user, "-R", "-X", "stream", "--no-sync", "-c",
                "fast",
            )  # fmt: skip
        options = (
            f"-c port={self.port} -c listen_addresses=127.0.0.1"
            f" -c unix_socket_directories={self.root} -c max_connections=400"
            + ("" if durable else " -c fsync=off -c full_page_writes=off")
            + " -c synchronous_commit=on -c shared_buffers=32MB"
        )
        self._run(
            _bin("pg_ctl"), "-D", str(self.data), "-l", str(self.root / "log"), "-o", options,
            "-w", "-t", "60", "start",
        )  # fmt: skip
        self.admin = self.url("postgres")
        if standby_of is not None:
            return
        from subagentd.storage.postgres.store import PostgresStore

        self.execute(f"CREATE DATABASE {TEMPLATE}")
        PostgresStore(self.url(TEMPLATE)).close()  # migrated once, copied per test

    def _run(self, *argv: str) -> None:
        done = subprocess.run(
            [*self._as, *argv], capture_output=True, text=True, timeout=120, cwd=self.root
        )
        if done.returncode != 0:
            log = self.root / "log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(
                f"PostgreSQL could not start: {' '.join(argv[:1])} exited {done.returncode}:"
                f" {done.stderr.strip() or done.stdout.strip()} {tail}"
            )

    def url(self, database: str, *, tcp: bool = False) -> str:
        """A libpq URL of one database: over TCP (as from another host) or the unix socket."""
        if tcp:
            return f"postgresql://{self.user}@127.0.0.1:{self.port}/{database}"
        return f"postgresql://{self.user}@/{database}?host={self.root}&port={self.port}"

    def promote(self) -> None:
        """A standby becomes a primary (`pg_ctl promote`, waiting until it accepts writes)."""
        self._run(_bin("pg_ctl"), "-D", str(self.data), "-w", "-t", "60", "promote")

    def kill(self) -> None:
        """The server stops at once, as at a crash (`pg_ctl stop -m immediate`), its files kept."""
        self._run(_bin("pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def execute(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(self.admin, autocommit=True) as conn:
            conn.execute(sql)

    def new_database(self) -> str:
        """A fresh, migrated database (a copy of the template); its name."""
        name = f"t{os.getpid()}_{next(self._names)}"
        self.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE} STRATEGY FILE_COPY")
        return name

    def drop_database(self, name: str) -> None:
        self.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def stop(self) -> None:
        try:
            if (self.data / "postmaster.pid").exists():
                self.kill()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


_shared: PostgresServer | None = None


def shared_server() -> PostgresServer:
    """The session's one server, started on first use (the pg_server fixture, or a test class
    outside fixtures such as the state machine's); stopped by stop_shared_server()."""
    global _shared
    if _shared is None:
        _shared = PostgresServer()
        atexit.register(stop_shared_server)  # also when no fixture stopped it
    return _shared


def stop_shared_server() -> None:
    global _shared
    if _shared is not None:
        server, _shared = _shared, None
        server.stop()


def release(store: object) -> None:
    """A PostgresStore's side connections (renewal thread, doorbell) let go without close(): a
    simulated crash leaves its owner row behind but must not leak connections."""
    group = getattr(store, "group", None)
    if group is not None and getattr(group, "_renewer", None) is not None:
        group._renewer.stop()
    if group is not None and getattr(group, "doorbell", None) is not None:
        group.doorbell.close()


class PostgresStores:
    """One test's stores on the server: a fresh database for each store made without a path (an
    in-memory SQLite store's stand-in), one database per path (the file simulated processes
    share); all closed and dropped at the end."""

    def __init__(self, server: PostgresServer) -> None:
        self.server = server
        self.databases: dict[str, str] = {}
        self.stores: list[object] = []

    def url(self, path: str | None = None, *, tcp: bool = False) -> str:
        """The URL standing for `path` (a new database for None)."""
        key = path if path is not None else f"#{len(self.databases)}"
        if key not in self.databases:
            self.databases[key] = self.server.new_database()
        return self.server.url(self.databases[key], tcp=tcp)

    def older(self, path: str, keep: int) -> str:
        """The URL of a new database standing for `path`, made by the first `keep` of this
        build's PostgreSQL migrations only (as an older version left it; not a copy of the
        migrated template), dropped at the end like the others."""
        import psycopg

        from subagentd.storage.postgres import migrations

        name = f"older_{len(self.databases)}_{os.getpid()}"
        self.server.execute(f"CREATE DATABASE {name}")
        self.databases[path] = name
        url = self.url(path)
        every = migrations.MIGRATIONS
        migrations.MIGRATIONS = every[:keep]
        try:
            with psycopg.connect(url) as conn:
                migrations.migrate(conn)
        finally:
            migrations.MIGRATIONS = every
        return url

    def __call__(self, path: str | None, clock: object = None) -> object:
        from subagentd.storage.postgres.store import PostgresStore

        url = self.url(path)
        store = PostgresStore(url) if clock is None else PostgresStore(url, clock=clock)  # type: ignore[arg-type]
        self.stores.append(store)
        return store

    def close(self) -> None:
        for store in self.stores:
            try:
                store.close()  # type: ignore[attr-defined]
            except Exception:  # a test may have closed it, or left it failed on purpose
                pass
        for name in self.databases.values():
            self.server.drop_database(name)
