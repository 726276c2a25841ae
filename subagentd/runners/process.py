"""One run of a command: started with posix_spawn, its output collected, its exit reaped.

`spawn` starts a command in a process group of its own with the given pipes as its stdin,
stdout and stderr: os.posix_spawnp, on the event loop's thread (a vfork and an exec: no worker
thread, and the environment is handed over in C, where subprocess.Popen spends ~700 Python calls
encoding it). `run_process` is a `--runner` turn's whole run: the turn on stdin, stdout up to a
limit, stderr's tail, the exit status. Its pipes and its pidfd are followed through the runs'
own epoll instance (`Follower`), which the event loop follows as one descriptor (asyncio's
reader, or one task on trio): a run costs a C call per descriptor to register, no loop handle
and no task. Where there is no epoll or no pidfd (not Linux), a task per pipe reads it and the
exit is polled every EXIT_POLL.

Longer than ~300 lines on purpose: a run's start, its descriptors followed, its stdin fed, its
output bounded and its exit reaped are one lifecycle, with its fallback where there is no epoll.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import signal
from collections.abc import AsyncIterator, Callable
from typing import NamedTuple

import anyio
import anyio.abc

from subagentd.runners.watchdog import Watchdog
from subagentd.wire.transport import CHUNK, FdReader, FdWriter

STDERR_TAIL = 4096  # bytes of a runner's stderr kept for its transcript
OUTPUT_DRAIN = 1.0  # seconds to read what a run's pipes hold after it exited
EXIT_POLL = 0.005  # seconds between exit checks where a pidfd cannot be had (not Linux)
# what subprocess.Popen resets in its child (restore_signals): Python ignores them
_DEFAULT_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ)


class Child:
    """A started process: its pid, its pidfd (None where there is none) and, once reaped, its
    exit status (negative: the signal that killed it)."""

    __slots__ = ("pid", "pidfd", "returncode")

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self.pidfd: int | None = None
        try:
            self.pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            pass

    def poll(self) -> int | None:
        """Its exit status if it exited (reaped now), else None."""
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: its status is lost
                self.returncode = 0
            else:
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    async def wait(self) -> int:
        """Its exit status, once it exited (reaped)."""
        while (code := self.poll()) is None:
            if self.pidfd is None:
                await anyio.sleep(EXIT_POLL)
            else:
                await anyio.wait_readable(self.pidfd)
        return code

    def close(self) -> None:
        """Its pidfd closed (once it has been waited for)."""
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None


def keep_descriptors_private() -> None:
    """Mark every descriptor this process inherited (above stderr) close-on-exec, as those it
    opens are (PEP 446): posix_spawn passes on whatever is inheritable, where Popen closed all
    (close_fds). Called once, before the first spawn."""
    for where in ("/proc/self/fd", "/dev/fd"):
        try:
            names = os.listdir(where)
        except OSError:
            continue
        for name in names:
            fd = int(name)
            if fd > 2:
                try:
                    os.set_inheritable(fd, False)
                except OSError:  # the listing's own descriptor, closed by now
                    pass
        return


def spawn(
    command: list[str],
    stdin: int,
    stdout: int,
    stderr: int,
    env: dict[str, str],
    watchdog: Watchdog | None = None,
) -> Child:
    """Start `command` (searched on PATH) in a session and process group of its own (signals
    reach its children) with these descriptors as its stdin, stdout and stderr; OSError when it
    cannot start. With a watchdog, its group is stopped should subagentd die first
    (runners/watchdog.py)."""
    pid = os.posix_spawnp(
        command[0],
        command,
        env,
        file_actions=[
            (os.POSIX_SPAWN_DUP2, stdin, 0),
            (os.POSIX_SPAWN_DUP2, stdout, 1),
            (os.POSIX_SPAWN_DUP2, stderr, 2),
        ],
        setsid=True,
        setsigdef=_DEFAULT_SIGNALS,
    )
    if watchdog is not None:
        watchdog.add(pid)
    return Child(pid)


def signal_group(process: anyio.abc.Process | Child | None, signum: signal.Signals) -> None:
    """Signal a started process's group (it leads one); nothing once it has exited."""
    if process is None or process.returncode is not None:
        return
    try:
        os.killpg(process.pid, signum)
    except ProcessLookupError:
        pass
    except PermissionError:
        process.send_signal(signum)


class ProcessOutput(NamedTuple):
    """What a turn's process left: its exit status, its trimmed stdout (cut at the limit), and
    its stderr's tail (None: empty)."""

    code: int | None
    stdout: str
    cut: bool
    stderr: str | None


class Follower:
    """The runs' descriptors in one epoll instance of their own, itself followed by the event
    loop (`following`): a run's pipes and pidfd are registered with it in a C call each, and
    one readiness of the loop serves every run whose descriptor is ready — no loop registration,
    no handle and no task per descriptor."""

    def __init__(self) -> None:
        self.epoll = select.epoll()
        self._handlers: dict[int, Callable[[], None]] = {}

    def follow(self, fd: int, handler: Callable[[], None], events: int = select.EPOLLIN) -> None:
        """Call `handler` whenever `fd` is ready (level-triggered), until `unfollow(fd)`."""
        self.epoll.register(fd, events)
        self._handlers[fd] = handler

    def unfollow(self, fd: int) -> None:
        """No longer followed (nothing when it is not)."""
        if self._handlers.pop(fd, None) is not None:
            self.epoll.unregister(fd)

    def ready(self) -> None:
        """The handlers of every descriptor ready now."""
        handlers = self._handlers
        for fd, _events in self.epoll.poll(0):
            handler = handlers.get(fd)  # None: unfollowed by an earlier handler of this round
            if handler is not None:
                handler()

    async def serve(self) -> None:
        """On an event loop other than asyncio's: `ready` whenever the epoll is."""
        while True:
            await anyio.wait_readable(self.epoll.fileno())
            self.ready()


@contextlib.asynccontextmanager
async def following() -> AsyncIterator[Follower | None]:
    """The runs' Follower while the block runs: on asyncio (and uvloop) its epoll is one reader
    of the loop's, elsewhere a task waits for it; None where there is no epoll (not Linux)."""
    if not hasattr(select, "epoll"):
        yield None
        return
    follower = Follower()
    fd = follower.epoll.fileno()
    try:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # trio
            async with anyio.create_task_group() as tg:
                tg.start_soon(follower.serve)
                yield follower
                tg.cancel_scope.cancel()
        else:
            loop.add_reader(fd, follower.ready)
            try:
                yield follower
            finally:
                loop.remove_reader(fd)
    finally:
        follower.epoll.close()


async def run_process(
    command: list[str],
    data: bytes,
    env: dict[str, str],
    watchdog: Watchdog,
    limit: int,
    started: Callable[[Child], None],
    follower: Follower | None,
) -> ProcessOutput:
    """Start `command` with `data` on its stdin and collect its output until it exits: stdout up
    to `limit` bytes (0: no bound; the rest is read and dropped), stderr's tail; what its pipes
    still hold is read for OUTPUT_DRAIN more. `started` gets the process as soon as it runs: the
    caller owns it (signals, reaping). OSError when it could not start. `follower`: the runs'
    epoll (`following`; None where there is none: a task per pipe). stdin, stdout and stderr
    are pipes of our own, closed here: a process the command left behind may hold them open
    past the turn."""
    (out, out_end), (err, err_end) = os.pipe(), os.pipe()
    stdin_end, stdin_fd = os.pipe()
    stdin = FdWriter(stdin_fd)  # closed here once fed, or at the end
    try:
        written = stdin.write_now(data)  # the pipe keeps it for the command: usually all
        if written == len(data):
            stdin.broken = True  # fed: EOF follows it
            stdin.close()
        try:
            process = spawn(command, stdin_end, out_end, err_end, env, watchdog)
        finally:
            os.close(out_end)
            os.close(err_end)
            os.close(stdin_end)
        started(process)
        rest = memoryview(data)[written:]
        if follower is not None and process.pidfd is not None:
            run = _Run(follower, process, out, err, limit, stdin, rest)
            try:
                await run.wake.wait()  # it exited
                if run.open:  # what its pipes still hold; a process it left behind may keep them
                    run.wake = anyio.Event()
                    with anyio.move_on_after(OUTPUT_DRAIN):
                        await run.wake.wait()
            finally:
                run.close()
            stdout, cut, stderr = run.stdout, run.cut, run.stderr
        else:
            stdout, cut, stderr = await _collect(process, out, err, limit, stdin, rest)
        text = stdout.decode("utf-8", errors="replace" if not cut else "ignore").strip()
        tail = bytes(stderr).decode("utf-8", errors="replace") or None
        return ProcessOutput(process.returncode, text, cut, tail)
    finally:
        os.close(out)  # no longer followed (above)
        os.close(err)
        if not stdin.broken:
            stdin.broken = True
            stdin.close()


def _take(into: bytearray, chunk: bytes, limit: int) -> bool:
    """stdout's chunk kept up to `limit` bytes (0: no bound); True when some was dropped."""
    if limit and len(into) + len(chunk) > limit:
        into += chunk[: max(limit - len(into), 0)]
        return True
    into += chunk
    return False


def _keep_tail(into: bytearray, chunk: bytes) -> None:
    into += chunk
    if len(into) > STDERR_TAIL:
        del into[: len(into) - STDERR_TAIL]


class _Run:
    """A run's stdout, stderr, exit (and the rest of its stdin) followed through the Follower:
    `wake` is set once it exited, and again (a new one) once both pipes ended after that."""

    __slots__ = (
        "follower",
        "process",
        "out",
        "err",
        "limit",
        "stdin",
        "rest",
        "stdout",
        "stderr",
        "cut",
        "open",
        "wake",
        "_exit_followed",
    )

    def __init__(
        self,
        follower: Follower,
        process: Child,
        out: int,
        err: int,
        limit: int,
        stdin: FdWriter,
        rest: memoryview,
    ) -> None:
        self.follower = follower
        self.process = process
        self.out = out
        self.err = err
        self.limit = limit
        self.stdin = stdin
        self.rest = rest
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.cut = False
        self.open = 2  # pipes not ended yet
        self.wake = anyio.Event()
        os.set_blocking(out, False)
        os.set_blocking(err, False)
        follow = follower.follow
        follow(out, self._read_out)
        follow(err, self._read_err)
        follow(process.pidfd, self._exited)  # type: ignore[arg-type]  # run_process checked it
        self._exit_followed = True
        if not stdin.broken:
            follow(stdin.fd, self._feed, select.EPOLLOUT)

    def _read(self, fd: int) -> bytes | None:
        """The pipe's next chunk; b"" once it ended (then no longer followed); None: none yet."""
        try:
            chunk = os.read(fd, CHUNK)
        except BlockingIOError:
            return None
        except OSError:
            chunk = b""
        if not chunk:
            self.follower.unfollow(fd)
            self.open -= 1
            if not self.open and not self._exit_followed:
                self.wake.set()
        return chunk

    def _read_out(self) -> None:
        chunk = self._read(self.out)
        if chunk and _take(self.stdout, chunk, self.limit):
            self.cut = True

    def _read_err(self) -> None:
        chunk = self._read(self.err)
        if chunk:
            _keep_tail(self.stderr, chunk)

    def _exited(self) -> None:
        if self.process.poll() is None:
            return
        self._exit_followed = False
        self.follower.unfollow(self.process.pidfd)  # type: ignore[arg-type]  # followed: set
        self.wake.set()

    def _feed(self) -> None:
        """What stdin did not take at once, as it takes it; then EOF. A command that does not
        read it is not an error."""
        try:
            written = os.write(self.stdin.fd, self.rest)
        except BlockingIOError:
            return
        except OSError:
            written = len(self.rest)
        self.rest = self.rest[written:]
        if not self.rest:
            self._stop_feeding()

    def _stop_feeding(self) -> None:
        self.follower.unfollow(self.stdin.fd)
        self.stdin.broken = True
        self.stdin.close()

    def close(self) -> None:
        """Nothing followed any more (it ended, or the turn was cancelled)."""
        unfollow = self.follower.unfollow
        if self.open:  # a pipe that has not ended is still followed
            unfollow(self.out)
            unfollow(self.err)
        if self._exit_followed:
            self._exit_followed = False
            unfollow(self.process.pidfd)  # type: ignore[arg-type]  # followed: set
        if not self.stdin.broken:
            self._stop_feeding()


async def _collect(
    process: Child, out: int, err: int, limit: int, stdin: FdWriter, rest: memoryview
) -> tuple[bytearray, bool, bytearray]:
    """On trio: a task per pipe (and one feeding stdin), the exit waited for meanwhile."""
    stdout = bytearray()
    stderr = bytearray()
    cut = [False]
    left = [2]  # pipes not ended yet
    ended = anyio.Event()

    async def read_out() -> None:
        reader = FdReader(out)
        while chunk := await reader.read():
            if _take(stdout, chunk, limit):
                cut[0] = True
        left[0] -= 1
        if not left[0]:
            ended.set()

    async def read_err() -> None:
        reader = FdReader(err)
        while chunk := await reader.read():
            _keep_tail(stderr, chunk)
        left[0] -= 1
        if not left[0]:
            ended.set()

    async def feed() -> None:
        try:
            await stdin.write(bytes(rest))
        except OSError:
            pass
        finally:
            stdin.broken = True  # closed once
            stdin.close()

    async with anyio.create_task_group() as io:
        if not stdin.broken:
            io.start_soon(feed)
        io.start_soon(read_out)
        io.start_soon(read_err)
        await process.wait()
        if left[0]:
            with anyio.move_on_after(OUTPUT_DRAIN):
                await ended.wait()
        if left[0] or not stdin.broken:
            io.cancel_scope.cancel()
    return stdout, cut[0], stderr
