"""One host connection, the I/O loop around the dispatcher: frames in, group commit, frames out, shutdown.

Longer than ~300 lines on purpose: the read loop, the flusher task, work from timers and shutdown
all act on one outbox and one ledger, and decide between them through `wake` (reading, event) / `_writing`
who commits the group and who writes it, in which order; split apart, each part would
reach into the others' state to keep replies after their commit and frames in order.
"""

from __future__ import annotations

import functools
import logging
import signal
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import anyio
import anyio.lowlevel
import msgspec

from subagentd.core.service import Outlets, Service
from subagentd.errors import (
    DatabaseLostError,
    LeaseLostError,
    StorageBusyError,
    StorageFailedError,
)
from subagentd.schema.codes import Code
from subagentd.schema.notifications import TurnStart
from subagentd.server.dispatcher import Dispatcher
from subagentd.server.handshake import Started
from subagentd.wire.boundary import refusal
from subagentd.wire.call import Handler
from subagentd.wire.framing import Frame, FrameReader
from subagentd.wire.ledger import Ledger, Wake
from subagentd.wire.lockwait import Locks, run_when_locked, wait_for_lock
from subagentd.wire.memory import Trimmer
from subagentd.wire.rpc import JsonRpc
from subagentd.wire.session import Session
from subagentd.wire.timers import Timers
from subagentd.wire.transport import FdReader, FdWriter

log = logging.getLogger("subagentd")

_encode = msgspec.json.Encoder().encode
OUTBOX_LIMIT = 8 * 1024 * 1024  # bytes of unwritten frames before reading pauses


class Connection:
    """Reads frames, dispatches them in arrival order, writes replies after their commit."""

    def __init__(
        self,
        service: Service,
        reader: FdReader,
        writer: FdWriter,
        *,
        locks: Locks,
        methods: Mapping[str, Handler],
        framing: str = "auto",
        max_frame_bytes: int = 16 * 1024 * 1024,
        default_caller: str | None = None,
        grace: float = 5.0,
        handle_signals: bool = True,
        started: Started | None = None,
    ) -> None:
        self.service = service
        self.locks = locks  # the store, as far as the connection reaches it
        self.methods = methods  # the method table (server/handlers.py build_methods)
        self.reader = reader
        self.writer = writer
        self.started = started or Started(FrameReader(framing, max_frame_bytes), Session())
        self.framer = self.started.framer
        self.session = self.started.session
        if default_caller is not None:
            self.session.default_caller = default_caller
        self.grace = grace
        self.handle_signals = handle_signals
        self.exit_code = 0  # 1 once the server stops because its database cannot be read
        self.outbox: list[bytes | memoryview] = []  # committed output, ready to write
        self.outbox_bytes = 0
        self._frame = self.framer.encode
        self.wake = Wake()  # the flusher's: set when there is output to commit and write
        self.ledger = Ledger(self._frame, self.wake.held)  # output held back until its commit
        self.dispatcher = Dispatcher(
            self.session,
            service.settings,
            JsonRpc(methods),
            service=service,
            methods=methods,
            frame=self._frame,
            ledger=self.ledger,
            on_lost=self._fail_group,
        )
        self.notes = self.dispatcher.notes  # notifications of the work done since the last flush
        self._drained: anyio.Event  # set after each flusher round that someone waits for
        self._drain_waiters = 0  # tasks waiting for _drained (no new Event per round otherwise)
        self._read_scope: anyio.CancelScope
        self._writing = False
        self.muted = False  # a --caller connection's input ended: nothing more is written
        self.trimmer = Trimmer()
        self.timers = Timers(self.run_work, self.lock_every_tree, service.settings.clock)
        self.timers.resynced = self.announce_unknown_starts
        self._taken_by: Callable[[str, msgspec.Struct], bool] | None = None  # see intercept
        # --runner (cli/running.py): its runs stopped after the agents (waits up to the grace),
        # and all of them killed at once when a signal arrives during the shutdown
        self.stop_runs: Callable[[], Awaitable[None]] | None = None
        self.kill_runs: Callable[[], None] | None = None
        self._shutting_down = False
        self._hurry: anyio.CancelScope  # the shutdown's waits, cut short by a signal during it
        service.attach(Outlets(self._emit, self.timers))
        service.reach_person_with(self.session.reaches_person)  # ask_user (core/asking_user.py)
        self._starts: list[TurnStart] = []  # turn/start sent in the open group
        self._maybe_started: list[TurnStart] = []  # those of groups whose outcome is unknown

    # --- outbound ------------------------------------------------------------------------

    def intercept(self, taker: Callable[[str, msgspec.Struct], bool]) -> None:
        """Offer every notification to `taker` first; one it takes (True) is not sent to the
        host (the runner takes the turns it runs itself: runners/runner.py); a taker added
        later is offered them before the earlier one (remote children: runners/a2a_child.py)."""
        earlier = self._taken_by
        if earlier is not None:
            later = taker
            taker = lambda method, params: later(method, params) or earlier(method, params)  # noqa: E731
        self._taken_by = taker

    def _emit(self, method: str, params: msgspec.Struct) -> None:
        if self._taken_by is not None and self._taken_by(method, params):
            return
        if isinstance(params, TurnStart):
            self._starts.append(params)
        self.dispatcher.emit(method, params)

    def announce_unknown_starts(self) -> None:
        """After a group whose COMMIT's outcome was unknown, once the live state was read back:
        the turns it started that storage shows open did commit, and their turn/start (dropped
        with the group's output) is sent now, so no committed turn is silently dropped."""
        starts, self._maybe_started = self._maybe_started, []
        if self.service.recovery.stale:
            self._maybe_started = starts  # not read back yet: the next time
            return
        open_turn = self.service.open_turn
        for start in starts:
            if open_turn(start.agent_id) == start.turn_id:
                self.dispatcher.emit("turn/start", start)
        self.dispatcher.flush_notes()

    def _push(self, frame: bytes | memoryview) -> None:
        """Output to write now: committed, or claiming nothing (the answers of a lost group)."""
        if self.muted:
            return
        self.outbox.append(frame)
        self.outbox_bytes += len(frame)
        self.trimmer.note(len(frame))
        if not self.wake.reading:
            self.wake.event.set()

    def _commit(self) -> None:
        """Group commit: what the group produced becomes writable, or, when the commit fails,
        the group is answered as lost (see _fail_group)."""
        if self.ledger.lost is None:
            try:
                self.service.commit()
            except StorageFailedError as exc:
                self.ledger.lost = exc
        if self.ledger.lost is not None:
            self._fail_group()
            return
        self._starts.clear()
        frames, size = self.ledger.committed()
        if frames and not self.muted:
            self.outbox += frames
            self.outbox_bytes += size
            self.trimmer.note(size)  # once per group, not per frame

    def _fail_group(self) -> None:
        """A lost group: storage is rolled back and memory rebuilt from it, then the group's
        requests are answered STORAGE_FAILED (Ledger.answer_lost); notifications are dropped."""
        lost = self.ledger.lost
        self.notes.clear()
        if lost.cause == "unknown":  # it may have committed: known once read back
            self._maybe_started += self._starts
        self._starts.clear()
        was_stale = self.service.recovery.stale
        try:
            self.service.recovery.rebuild()
        except Exception as exc:
            if not self.locks.transient(exc):
                log.critical("cannot rebuild the live state from the database; shutting down")
                self.exit_code = 1
                self._read_scope.cancel()
            elif not was_stale:  # the heartbeat reads it back (resync)
                log.warning(
                    "the live state cannot be read back now (%s); writes are refused until"
                    " the database answers",
                    str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__,
                )

        answers = self.ledger.answer_lost(lambda request_id: refusal(lost, request_id))
        for answer in answers:
            self._push(self._frame(answer))
        if self._maybe_started:
            self.announce_unknown_starts()
        log.error(
            "storage failed (%s): the commit group was rolled back; %d answer(s) %s",
            lost.cause,
            len(answers),
            Code.STORAGE_FAILED.name,
        )

    def _flush_inline(self) -> None:
        """Group commit right after a chunk of input: commit, then write what the pipe takes now.

        Saves the hop to the flusher task on every round trip. What the pipe does not take (as a
        view, not a copy), and anything while the flusher is mid-write (frame order), is left to
        the flusher. The commit itself never waits for the host to read: a write transaction
        left open while stdout is full would hold SQLite's write lock from every other process.
        """
        self._commit()
        if not self.outbox:
            return
        if self._writing or self.writer.broken:
            self.wake.event.set()
            return
        data = b"".join(self.outbox)
        self.outbox.clear()
        self.outbox_bytes = 0
        try:
            written = self.writer.write_now(data)
        except OSError as exc:
            log.warning("cannot write to the host (%s); replies are dropped", exc)
            self.writer.broken = True
            return
        if written < len(data):
            self._push(memoryview(data)[written:])  # the rest, without a copy

    async def _flusher(self) -> None:
        """Group commit: everything dispatched so far is committed, then its frames are written."""
        while True:
            await self.wake.event.wait()
            self.wake.event = anyio.Event()
            self._commit()
            if self.outbox:
                data = b"".join(self.outbox)
                self.outbox.clear()
                self.outbox_bytes = 0
                self._writing = True
                try:
                    await self.writer.write(data)
                except OSError as exc:  # the host closed our stdout: nobody is listening any more
                    log.warning("cannot write to the host (%s); replies are dropped", exc)
                    self.writer.broken = True
                finally:
                    self._writing = False
                del data  # not kept alive (megabytes after a burst) while waiting for the next
            if self._drain_waiters:  # an Event costs ~5 µs: a new one only once this one is used
                self._drained.set()
                self._drained = anyio.Event()

    async def _until_drained(self) -> None:
        """Wait for the end of the flusher's current (or next) round."""
        self._drain_waiters += 1
        try:
            await self._drained.wait()
        finally:
            self._drain_waiters -= 1

    async def committed(self) -> None:
        """Return once the work done so far is committed (the runner starts a turn's process,
        and answers `subagentd tool`, only after that)."""
        while True:
            if not self._writing:  # the flusher waits for a wake: its next round commits ours
                self.wake.event.set()
                await self._until_drained()
                return
            await self._until_drained()  # that round committed before our work: the next one

    def _quiet(self) -> bool:
        return not self.outbox and not self._writing

    # --- work outside a request -----------------------------------------------------------

    async def lock(self) -> None:
        """Wait (the loop serving on) for another process's write lock, up to --lock-wait-ms."""
        await wait_for_lock(self.locks, self.service.settings.lock_wait)

    def tree_of(self, agent_id: str) -> str | None:
        """The root id of a live agent's tree (None: unknown here, or a single writer): the one
        tree the work of its own turn writes (docs/architecture.md "Per-tree writers")."""
        return self.service.tree_of(agent_id) if self.service.per_tree else None

    async def lock_tree(self, tree: str | None) -> None:
        """lock, for work on the tree rooted at `tree` only (None: every tree)."""
        self.locks.aim(tree)
        await self.lock()

    async def lock_every_tree(self) -> None:
        """lock, for a timer's work (the heartbeat's, a wait's timeout): it names no tree."""
        await self.lock_tree(None)

    async def run_locked(
        self, work: Callable[[], None], tree: str | None = None, writes: bool = True
    ) -> None:
        """`work` (run_work, on the tree rooted at `tree`), once another process's write lock
        let it: waited for in the lock queue first and after each refusal (run_when_locked).
        Work that may write nothing (`writes` False: a read-only tool's call) is tried first and
        waits only if refused, so it never waits for a lock it does not need."""
        if not writes and self.run_work(work, tree):
            return
        await run_when_locked(lambda: self.lock_tree(tree), lambda: self.run_work(work, tree))

    def run_work(self, callback: Callable[[], None], tree: str | None = None) -> bool:
        """A timer's (or the heartbeat's, or shutdown's) work in its own transaction of the
        current group, writing the tree rooted at `tree` only (None: any tree). False when
        another process's write lock refused it."""
        mark = len(self.notes)
        ran = True
        if tree is not None:
            self.locks.set_scope(tree)
        try:
            with self.service.transaction():
                callback()
        except StorageBusyError:
            ran = False
        except StorageFailedError as exc:
            if self.ledger.lost is None:  # the group is lost: the rest of the frame is refused
                self.ledger.lost = exc
        except LeaseLostError:  # its notices (agent/settled, lease-lost) are sent
            log.warning("another process took over this one's sessions: its agents were let go")
        except DatabaseLostError as exc:  # expected once the file is gone: one line, no traceback
            del self.notes[mark:]
            log.warning("a scheduled task was not done: %s", exc.message)
        except Exception:
            del self.notes[mark:]
            log.exception("unexpected failure in a scheduled task")
        finally:
            if tree is not None:
                self.locks.set_scope(None)
        if self.ledger.lost is not None:
            self._fail_group()
        self.dispatcher.flush_notes()
        if self._writing:  # the flusher waits for the host to read: commit now, not after that
            self._commit()
        self.wake.event.set()
        return ran

    # --- inbound -------------------------------------------------------------------------

    async def serve(self) -> None:
        self.wake.event = anyio.Event()
        self._drained = anyio.Event()
        self._read_scope = anyio.CancelScope()
        self._hurry = anyio.CancelScope()
        async with anyio.create_task_group() as tg:
            self.timers.start(tg)
            tg.start_soon(self._flusher)
            tg.start_soon(self.timers.heartbeat, self.service)
            tg.start_soon(self._doorbell)
            tg.start_soon(self.trimmer.run, self._quiet)
            if self.handle_signals:
                tg.start_soon(self._signals)
            with self._read_scope:
                await self._read_loop()
            self._shutting_down = True
            with self._hurry:
                await self._shutdown()
                if self.stop_runs is not None:
                    await self.stop_runs()
            self._commit()
            tg.cancel_scope.cancel()

    async def _doorbell(self) -> None:
        """Another process sharing the database sent input to an agent live here: it rang this
        process's doorbell after committing (storage/signals.py); take the signals now. A ring
        that names a session live here (PostgreSQL's) takes that session's signals under its
        tree's lock alone, so it waits for no other tree's group; one that names none, or a
        session not live here, takes them all under every tree's."""
        store = self.locks
        while (fd := store.doorbell()) is not None:  # until the store closes its doorbell
            await anyio.wait_readable(fd)
            trees: dict[str | None, set[str]] = {}
            for session in store.drain_doorbell():
                trees.setdefault(self.tree_of(session) if session else None, set()).add(session)
            if None in trees:
                await self.run_locked(self.service.take_signals)
                continue
            for tree, sessions in trees.items():
                await self.run_locked(functools.partial(self.service.take_signals, sessions), tree)

    async def _signals(self) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            self._bound_database_waits()
            async for signum in signals:
                name = signal.Signals(signum).name
                if not self._shutting_down and not self._read_scope.cancel_called:
                    log.info("received %s: shutting down", name)
                    self._read_scope.cancel()
                    continue
                # during the shutdown (a client that closed stdin, then signals, does not wait
                # for the grace): the runs are killed now and the waits cut short
                log.warning("received %s during the shutdown: stopping the runs now", name)
                if self.kill_runs is not None:
                    self.kill_runs()
                self._hurry.cancel()

    def _bound_database_waits(self) -> None:
        """A signal that arrives while the loop waits for the database (which never answers,
        say) runs this handler on the loop's thread inside that wait (the driver checks for
        signals): from then on no database wait outlasts --shutdown-grace, so the loop gets
        to its shutdown in time. The event loop's own handler, which does the shutdown, is
        called too."""
        give_up_after, grace = self.locks.give_up_after, self.grace
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous = signal.getsignal(signum)

            def handler(number: int, frame: Any, previous: Any = previous) -> None:
                give_up_after(grace)
                if callable(previous):
                    previous(number, frame)

            signal.signal(signum, handler)

    async def _read_loop(self) -> None:
        # read before the server was up (see prelude)
        await self._handle(self.started.frames)
        self._flush_inline()
        if self.started.input_ended:
            self._input_ended()
        while not self.started.input_ended:
            if self.outbox_bytes + self.ledger.size > OUTBOX_LIMIT:
                await self._until_drained()  # a host that does not read stdout slows us down
                continue
            if self.outbox:  # stdout did not take it all: the flusher writes it while we read
                await anyio.lowlevel.checkpoint()
            data = await self.reader.read()
            if not data:
                await self._handle(self.framer.finish())
                self._flush_inline()
                self._input_ended()
                self.wake.event.set()
                log.info("end of input: shutting down")
                return
            await self._handle(self.framer.feed(data))
            self._flush_inline()

    def _input_ended(self) -> None:
        """End of input. An MCP client (--caller) has closed its side: what it would still be
        owed it can no longer read, and a frame written now reaches a client that is tearing
        down its streams. Its waits end as if cancelled, so they consume nothing (the reports
        and notices stay queued for its next session), and nothing more is written."""
        if self.session.default_caller is None:
            return
        for request_id in list(self.ledger.pending):
            self.ledger.cancel(request_id)
        self.muted = True

    async def _handle(self, frames: Sequence[Frame]) -> None:
        """Frames read together, in order. A write that finds another process holding the write
        lock waits for it here, the event loop serving on; the frames after it wait behind it
        (reading pauses meanwhile), so effects and answers keep the order of the requests."""
        take_lock = self.locks.take_lock_for_frame
        while True:
            self.wake.reading = True
            try:
                frames = self.dispatcher.handle_frames(frames, take_lock)
            finally:
                self.wake.reading = False
            if not frames:
                return
            self._flush_inline()  # what came before it is answered now (no group is open)
            await self.lock()

    # --- shutdown ------------------------------------------------------------------------

    async def _shutdown(self) -> None:
        """Stop every live agent (no more turns/end can arrive), commit, and write what is owed."""
        for step in (
            lambda: self.service.settlement.shutdown(lambda: None),
            lambda: self.service.settlement.force_end_all("shutdown"),
        ):
            with anyio.move_on_after(self.grace):
                await self.run_locked(step)
        with anyio.move_on_after(self.grace):
            while self.outbox or self.ledger.frames or self._writing:
                self.wake.event.set()
                await self._until_drained()
