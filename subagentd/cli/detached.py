"""`serve --detach on`: the front process that relays to (and starts) the background process.

For one database and `--caller` root there is one background subagentd, found through
`<key>.sock` in a private directory (0700): `$XDG_RUNTIME_DIR/subagentd`, else `subagentd-<uid>`
in the temp directory. Beside it: `<key>.lock` (held by the background process for its life:
there is never a second one), `<key>.start` (fronts starting one take turns), `<key>.pid` (its
pid and the options it was started with), `<key>.log` (its stderr) and `<key>.runs/` (its runner
processes). The front copies stdin to the socket and the socket to stdout, and exits when
either side ends; the background process keeps what it runs (server/detached.py).
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import selectors
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

log = logging.getLogger("subagentd")

ROLE = "_SUBAGENTD_DETACHED"  # set in the background process's environment
START_PATIENCE = 60.0
SUN_PATH_MAX = 107  # seconds a front waits for the background process to listen


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


def paths(options: dict[str, Any]) -> dict[str, str]:
    """The files of the background process for this database and root."""
    from subagentd.storage.postgres import is_postgres

    db = options["db"] if is_postgres(options["db"]) else os.path.abspath(options["db"])
    key = hashlib.sha256(f"{db}\0{options['caller']}".encode()).hexdigest()[:16]
    base = os.path.join(directory(), key)
    if len(os.fsencode(base + ".sock")) > SUN_PATH_MAX:
        raise OSError(
            f"the socket path {base}.sock is longer than a Unix socket's {SUN_PATH_MAX} bytes:"
            " set XDG_RUNTIME_DIR (or TMPDIR) to a shorter directory"
        )
    return {n: f"{base}.{n}" for n in ("sock", "lock", "start", "pid", "log", "runs")}


def _connect(path: str) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        return None
    return sock


def front(options: dict[str, Any], out_fd: int) -> int:
    """Attach to the background process (starting it if there is none) and relay to it."""
    try:
        files = paths(options)
        sock = _connect(files["sock"]) or _start(files)
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


def _start(files: dict[str, str]) -> socket.socket | None:
    """Start the background process, one front at a time; None if it never listened."""
    with open(files["start"], "a") as turn:
        fcntl.flock(turn, fcntl.LOCK_EX)
        sock = _connect(files["sock"])
        if sock is not None:
            return sock  # another front started it meanwhile
        log.info("--detach: starting the background process (log %s)", files["log"])
        with open(files["log"], "ab") as logfile:
            process = subprocess.Popen(
                [sys.executable, "-m", "subagentd", *sys.argv[1:]],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=logfile,
                env={**os.environ, ROLE: "1"},
                start_new_session=True,  # no terminal signal or client's group reaches it
                close_fds=True,
            )
        deadline = time.monotonic() + START_PATIENCE
        while time.monotonic() < deadline:
            sock = _connect(files["sock"])
            if sock is not None:
                return sock
            if process.poll() is not None and not _lock_held(files["lock"]):
                return None  # it stopped, and no other holds the lock to start listening
            time.sleep(0.02)
        return None


def _lock_held(path: str) -> bool:
    try:
        with open(path, "a") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return True
            fcntl.flock(f, fcntl.LOCK_UN)
    except OSError:
        return False
    return False


def _options_line() -> str:
    return " ".join(sys.argv[1:])


def _compare_options(pid_path: str) -> None:
    """A front started with other options than the running background process: said once, and
    the background process's own are kept."""
    try:
        with open(pid_path) as f:
            pid, _, line = f.read().partition("\n")
    except OSError:
        return
    if line.strip() != _options_line():
        log.warning(
            "--detach: the background process (pid %s) runs with the options it was started"
            " with (%s); this client's differ and are ignored: stop it to change them",
            pid,
            line.strip(),
        )


def _relay(sock: socket.socket, out_fd: int) -> int:
    """stdin to the socket, the socket to stdout, until either ends."""
    selector = selectors.DefaultSelector()
    os.set_blocking(0, True)
    selector.register(0, selectors.EVENT_READ, "in")
    selector.register(sock, selectors.EVENT_READ, "sock")
    while True:
        for key, _ in selector.select():
            if key.data == "in":
                data = os.read(0, 256 * 1024)
                if not data:
                    sock.close()  # the client went away: the background process keeps on
                    return 0
                sock.sendall(data)
            else:
                try:
                    data = sock.recv(256 * 1024)
                except OSError:
                    data = b""
                if not data:
                    log.error("--detach: the background process closed the connection")
                    return 1
                view = memoryview(data)
                while view:
                    view = view[os.write(out_fd, view) :]


def background(options: dict[str, Any]) -> int | None:
    """In the background process: take the lock, listen, and serve the root's connection on a
    socketpair (fds 0 and 1) the mux relays to; None to go on serving, else the exit code."""
    from subagentd.server.detached import Background, Mux
    from subagentd.server.runner_pids import PidFiles

    os.environ.pop(ROLE, None)  # not inherited by the runs
    files = paths(options)
    lock = open(files["lock"], "a")  # held until the process ends
    deadline = time.monotonic() + START_PATIENCE
    while True:  # a predecessor that is stopping still holds it for a moment
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except OSError:
            listening = _connect(files["sock"])
            if listening is not None or time.monotonic() > deadline:
                log.error("cannot start: another background process serves this database and root")
                return 1
            time.sleep(0.05)
    os.set_inheritable(lock.fileno(), False)
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
    mux = Mux(listener, inner, options["idle_timeout"])
    pids = PidFiles(files["runs"])
    with open(files["pid"], "w") as f:
        f.write(f"{os.getpid()}\n{_options_line()}\n")

    stopped = pids.sweep()  # before any run of ours starts
    if stopped:
        log.warning("detached: stopped %d runner process(es) left by a crash", stopped)
    options["detached"] = Background(mux, pids)
    options["detached_lock"] = lock
    log.info("detached: pid %d serving %s on %s", os.getpid(), options["caller"], files["sock"])
    mux.start()
    return None
