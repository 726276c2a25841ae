"""`serve --detach on`: the front process that relays to (and starts) the background process.

For one database and `--caller` root there is one background subagentd, found through
`<key>.sock` in a private directory (0700): `$XDG_RUNTIME_DIR/subagentd`, else `subagentd-<uid>`
in the temp directory. Beside it, each file 0600: `<key>.lock` (held by the background process
for its life: there is never a second one), `<key>.start` (fronts starting one take turns),
`<key>.pid` (JSON: its pid, start time, database without its password, root, options, clients),
`<key>.log` (its stderr) and `<key>.runs/` (its runner processes). A background process that
stops removes them all (the log only when it stopped cleanly). The front copies stdin to the
socket and the socket to stdout, one thread each way, and exits when the socket ends; the
background process keeps what it runs (runners/detached.py). `subagentd detached list|stop`:
cli/detached_servers.py.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING

from subagentd.cli.detached_files import (
    lock_file,
    lock_held,
    open_private,
    paths,
    process_start,
    read_status,
    redacted,
    redacted_argv,
    remove_files,
    shown_database,
    write_status,
)

if TYPE_CHECKING:
    from subagentd.cli.serve_options import ServeOptions

log = logging.getLogger("subagentd")

ROLE = "_SUBAGENTD_DETACHED"  # set in the background process's environment
DATABASE = "_SUBAGENTD_DETACHED_DB"  # its --db, which its command line shows without a password
START_PATIENCE = 60.0  # seconds a front waits for the background process to listen
CHUNK = 256 * 1024


def _connect(path: str) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        return None
    return sock


def front(options: ServeOptions, out_fd: int) -> int:
    """Attach to the background process (starting it if there is none) and relay to it."""
    try:
        files = paths(options["db"], options["caller"])
        sock = _connect(files["sock"]) or _start(files, options["db"])
    except OSError as exc:
        log.error("cannot start: --detach: %s", exc)
        return 1
    if sock is None:
        log.error(
            "cannot start: --detach: the background process did not start; see %s", files["log"]
        )
        return 1
    _compare_options(files["pid"])
    return _relay(sock, out_fd)


def _start(files: dict[str, str], database: str) -> socket.socket | None:
    """Start the background process, one front at a time; None if it never listened. Its
    command line is this one with no database password (`ps` shows it to every user); the
    database itself reaches it in its environment, which only the user can read."""
    turn = lock_file(files["start"], block=True)
    assert turn is not None
    with turn:
        sock = _connect(files["sock"])
        if sock is not None:
            return sock  # another front started it meanwhile
        log.info("--detach: starting the background process (log %s)", files["log"])
        with os.fdopen(open_private(files["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND)) as f:
            process = subprocess.Popen(
                [sys.executable, "-m", "subagentd", *redacted_argv(sys.argv[1:])],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=f,
                env={**os.environ, ROLE: "1", DATABASE: database},
                start_new_session=True,  # no terminal signal or client's group reaches it
                close_fds=True,
            )
        deadline = time.monotonic() + START_PATIENCE
        while time.monotonic() < deadline:
            sock = _connect(files["sock"])
            if sock is not None:
                return sock
            if process.poll() is not None and lock_held(files["lock"]) is False:
                return None  # it stopped, and no other holds the lock to start listening
            time.sleep(0.02)
        return None


def _options_line() -> str:
    return redacted(" ".join(sys.argv[1:]))


def _compare_options(pid_path: str) -> None:
    """A front started with other options than the running background process: said once, and
    the background process's own are kept."""
    status = read_status(pid_path)
    if status is None:
        return
    if status.get("options") != _options_line():
        log.warning(
            "--detach: the background process (pid %s) runs with the options it was started"
            " with (%s); this client's differ and are ignored: stop it to change them",
            status["pid"],
            status.get("options"),
        )


def _relay(sock: socket.socket, out_fd: int) -> int:
    """stdin to the socket on a thread, the socket to stdout here; each way waits only on its
    own reader, so neither direction holds up the other."""
    input_ended = threading.Event()

    def upstream() -> None:
        while True:
            try:
                data = os.read(0, CHUNK)
            except OSError:
                data = b""
            if not data:
                break
            try:
                sock.sendall(data)
            except OSError:
                return  # the socket ended: seen below
        input_ended.set()  # the client went away: the background process keeps on
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    for fd in (0, out_fd):
        os.set_blocking(fd, True)
    threading.Thread(target=upstream, name="detached-upstream", daemon=True).start()
    while True:
        try:
            data = sock.recv(CHUNK)
        except OSError:
            data = b""
        if not data:
            break
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(out_fd, view) :]
        except OSError:  # the client closed its end of our stdout
            return 0
    if input_ended.is_set():
        return 0
    log.error("--detach: the background process closed the connection")
    return 1


def background(options: ServeOptions) -> int | None:
    """In the background process: take the lock, listen, and serve the root's connection on a
    socketpair (fds 0 and 1) the mux relays to; None to go on serving, else the exit code."""
    from subagentd.runners.detached import Background, Mux
    from subagentd.runners.runner_pids import PidFiles

    os.environ.pop(ROLE, None)  # not inherited by the runs
    options["db"] = os.environ.pop(DATABASE, options["db"])
    files = paths(options["db"], options["caller"])
    deadline = time.monotonic() + START_PATIENCE
    while True:  # a predecessor that is stopping still holds it for a moment
        lock = lock_file(files["lock"], block=False)
        if lock is not None:
            break
        listening = _connect(files["sock"])
        if listening is not None or time.monotonic() > deadline:
            log.error("cannot start: another background process serves this database and root")
            return 1
        time.sleep(0.05)
    try:
        os.unlink(files["sock"])  # a killed predecessor's: the lock says it is gone
    except FileNotFoundError:
        pass
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(files["sock"])
    os.chmod(files["sock"], 0o600)
    listener.listen(64)
    inner, outer = socket.socketpair()
    os.dup2(outer.fileno(), 0)
    os.dup2(outer.fileno(), 1)
    outer.close()
    status = {
        "pid": os.getpid(),
        "started": time.time(),
        "process_start": process_start(os.getpid()),
        "db": shown_database(options["db"]),
        "root": options["caller"],
        "options": _options_line(),
        "clients": 0,
    }

    def clients(number: int) -> None:
        status["clients"] = number
        write_status(files["pid"], status)

    write_status(files["pid"], status)
    mux = Mux(
        listener,
        inner,
        options["idle_timeout"],
        max_frame_bytes=options["max_frame_bytes"],
        framing=options["framing"],
        on_clients=clients,
    )
    pids = PidFiles(files["runs"])
    stopped = pids.sweep()  # before any run of ours starts
    if stopped:
        log.warning("detached: stopped %d runner process(es) left by a crash", stopped)
    options["detached"] = Background(mux, pids)
    options["detached_lock"] = lock
    options["detached_files"] = files
    log.info("detached: pid %d serving %s on %s", os.getpid(), options["caller"], files["sock"])
    mux.start()
    return None


def finished(options: ServeOptions, code: int) -> None:
    """The background process stopped: its files go, the lock last (still held meanwhile);
    the log stays when it stopped on an error."""
    files = options.get("detached_files")
    if files is None:
        return
    remove_files(files, keep_log=code != 0)
    lock = options.pop("detached_lock", None)
    if lock is not None:
        lock.close()
