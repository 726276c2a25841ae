"""The files of `--detach`'s background process, in a private directory (0700), each 0600:
where they are, their locks, the pid file's record (never a database password), and their
removal when the process stops (cli/detached.py)."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass

SUN_PATH_MAX = 107
NAMES = ("sock", "lock", "start", "pid", "log", "runs")


def directory() -> str:
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        path = os.path.join(runtime, "subagentd")
    else:
        path = os.path.join(tempfile.gettempdir(), f"subagentd-{os.getuid()}")
    os.makedirs(path, mode=0o700, exist_ok=True)
    if os.stat(path).st_uid != os.getuid():
        raise OSError(f"{path} belongs to another user")
    os.chmod(path, 0o700)
    return path


def paths(database: str, caller: str | None) -> dict[str, str]:
    """The files of the background process for this database and root."""
    from subagentd.storage.postgres import is_postgres

    db = database if is_postgres(database) else os.path.abspath(database)
    key = hashlib.sha256(f"{db}\0{caller}".encode()).hexdigest()[:16]
    return files_of(os.path.join(directory(), key))


def files_of(base: str) -> dict[str, str]:
    if len(os.fsencode(base + ".sock")) > SUN_PATH_MAX:
        raise OSError(
            f"the socket path {base}.sock is longer than a Unix socket's {SUN_PATH_MAX} bytes:"
            " set XDG_RUNTIME_DIR (or TMPDIR) to a shorter directory"
        )
    return {n: f"{base}.{n}" for n in NAMES}


def redacted(text: str) -> str:
    """A database URL (or a command line holding one) without its password."""
    return " ".join(redacted_argv(text.split(" ")))


def shown_database(db: str) -> str:
    """A database as the pid file and `detached list` show it: a URL without its password, a
    SQLite file by its absolute path."""
    from subagentd.storage.postgres import is_postgres

    return redacted(db) if is_postgres(db) else os.path.abspath(db)


def redacted_argv(argv: list[str]) -> list[str]:
    """A command line's arguments, each database URL (`URL` or `--option=URL`) without its
    password."""
    from subagentd.storage.postgres import is_postgres

    def one(arg: str) -> str:
        name, equals, value = arg.partition("=") if arg.startswith("--") else ("", "", arg)
        if not is_postgres(value):
            return arg
        try:
            from subagentd.storage.postgres.store import shown
        except ImportError:  # without psycopg: nothing of the URL but its kind
            return f"{name}{equals}postgresql://…"
        return f"{name}{equals}{shown(value)}"

    return [one(arg) for arg in argv]


def open_private(path: str, flags: int = os.O_RDWR | os.O_CREAT | os.O_APPEND) -> int:
    """A file of the directory, created 0600 whatever the umask."""
    fd = os.open(path, flags | os.O_CLOEXEC, 0o600)
    os.fchmod(fd, 0o600)
    return fd


def lock_file(path: str, block: bool) -> IO[bytes] | None:
    """The file at `path`, locked (flock); None when another holds it (block=False). A lock
    on a file that was removed meanwhile is no lock: it is taken again on the new one."""
    while True:
        f = os.fdopen(open_private(path), "ab")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | (0 if block else fcntl.LOCK_NB))
        except OSError:
            f.close()
            return None
        try:
            same = os.stat(path).st_ino == os.fstat(f.fileno()).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return f
        f.close()


def lock_held(path: str) -> bool:
    """Whether a background process holds the lock at `path` (a missing file: no)."""
    try:
        with open(path, "rb") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return True
            fcntl.flock(f, fcntl.LOCK_UN)
    except OSError:
        return False
    return False


def read_status(path: str) -> dict[str, Any] | None:
    """A pid file's record, or None when it is missing or not one."""
    try:
        with open(path) as f:
            status = json.load(f)
    except (OSError, ValueError):
        return None
    return status if isinstance(status, dict) and type(status.get("pid")) is int else None


def remove_files(files: dict[str, str], keep_log: bool = False) -> None:
    """Remove a background process's files; the caller holds its lock."""
    for name in ("sock", "pid", "start", *(() if keep_log else ("log",)), "lock"):
        try:
            os.unlink(files[name])
        except FileNotFoundError:
            pass
    shutil.rmtree(files["runs"], ignore_errors=True)


def write_status(path: str, status: dict[str, Any]) -> None:
    """The pid file, replaced whole (a reader never sees half of it)."""
    temporary = f"{path}.{os.getpid()}.tmp"
    fd = open_private(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    with os.fdopen(fd, "w") as f:
        json.dump(status, f)
    os.replace(temporary, path)


def process_start(pid: int) -> str | None:
    from subagentd.runners.runner_pids import start_time

    return start_time(pid)
