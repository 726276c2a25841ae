"""A throwaway PgBouncer in front of the tests' PostgreSQL server (tests/pg.py): Debian's
`pgbouncer`, one per pooling mode asked for, on a free port, trust authentication, stopped at
the end. As root it runs as the `postgres` user (PgBouncer refuses root)."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

from tests.pg import PostgresServer, _free_port
from tests.tools import require


class PgBouncer:
    """One `pgbouncer` process pooling every database of `server` in `mode`."""

    def __init__(self, server: PostgresServer, mode: str) -> None:
        self.server, self.mode = server, mode
        self.root = Path(tempfile.mkdtemp(prefix="subagentd-pgbouncer-"))
        self.port = _free_port()
        (self.root / "users.txt").write_text(f'"{server.user}" ""\n')
        (self.root / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = host=127.0.0.1 port={server.port}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {self.root / 'users.txt'}\n"
            f"pool_mode = {mode}\nmax_client_conn = 400\ndefault_pool_size = 100\n"
            f"logfile = {self.root / 'pgbouncer.log'}\n"
            "ignore_startup_parameters = extra_float_digits,options\n"
        )
        argv = [require("pgbouncer"), str(self.root / "pgbouncer.ini")]
        if os.geteuid() == 0:
            entry = pwd.getpwnam("postgres")
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
            for name in ("users.txt", "pgbouncer.ini"):
                os.chown(self.root / name, entry.pw_uid, entry.pw_gid)
            argv = ["runuser", "-u", "postgres", "--", *argv]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    log = self.root / "pgbouncer.log"
                    raise RuntimeError(
                        f"PgBouncer could not start: {log.read_text() if log.exists() else ''}"
                    ) from None
                time.sleep(0.1)

    def url(self, database: str) -> str:
        return f"postgresql://{self.server.user}@127.0.0.1:{self.port}/{database}"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.root, ignore_errors=True)
