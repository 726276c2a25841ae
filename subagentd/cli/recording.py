"""`serve --record FILE`: the served session written as a replayable transcript (docs/scripts.md).

Two relay threads stand between the host's pipes and the server: one copies stdin to the
server's input, one copies the server's output to stdout. Each writes what it sees to the
transcript as it passes (a frame in as a `send`, or `send_raw` when it is not JSON; a frame out as
an `expect`, through subagentd.scripts.record's placeholders), so the file holds every frame in
the order it crossed: a reply always after its request. The server itself is unchanged; it reads
and writes pipes instead of the host's.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from typing import IO, Any

from subagentd.private_files import open_private
from subagentd.scripts.record import Transcript
from subagentd.wire.framing import FrameReader, Oversize

log = logging.getLogger("subagentd")
CHUNK = 256 * 1024
DISCARDED = (
    "a frame from the host longer than {limit} bytes (--max-frame-bytes) was discarded here,"
    " unrecorded"
)


class Recording:
    """The transcript file and the two relays; `attach` rewires the fds before serving."""

    def __init__(
        self, path: str, max_frame_bytes: int = 16 * 1024 * 1024, framing: str = "auto"
    ) -> None:
        self.file: IO[str] = open_private(path, encoding="utf-8", errors="backslashreplace")
        self.max_frame_bytes, self.framing = max_frame_bytes, framing
        self.transcript = Transcript()
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []
        self.server_out = -1
        self._line(self.transcript.header())

    def _line(self, text: str) -> None:
        with self.lock:
            self.file.write(text + "\n")
            self.file.flush()

    def attach(self, out_fd: int) -> int:
        """Put a pipe under fd 0 (fed from the host's stdin) and return the fd the server is
        to write its frames to (copied to `out_fd`)."""
        host_in = os.dup(0)
        read_end, write_end = os.pipe()
        os.dup2(read_end, 0)
        os.close(read_end)
        out_read, self.server_out = os.pipe()
        self._start(self._relay, host_in, write_end, True)
        self._start(self._relay, out_read, out_fd, False)
        return self.server_out

    def _start(self, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        thread.start()
        self.threads.append(thread)

    def _relay(self, source: int, target: int, inbound: bool) -> None:
        """Copy `source` to `target` until end of input, recording each whole frame."""
        # the host's frames are bounded as the server bounds them (--max-frame-bytes): one it
        # discards is neither buffered nor recorded; the server's own frames are its to bound
        framer = FrameReader(self.framing, self.max_frame_bytes if inbound else 1 << 62)
        os.set_blocking(source, True)
        try:
            while True:
                try:
                    data = os.read(source, CHUNK)
                except OSError:
                    data = b""
                frames = framer.feed(data) if data else framer.finish()
                for frame in frames:
                    if isinstance(frame, bytes):
                        self._record(frame, inbound)
                    elif isinstance(frame, Oversize):
                        self._line(self.transcript.comment(DISCARDED.format(limit=frame.limit)))
                if not data:
                    if inbound:
                        self._line(self.transcript.close())
                    break
                self._write(target, data)
        finally:
            os.close(source)
            if inbound:
                os.close(target)  # the server sees end of input

    def _write(self, fd: int, data: bytes) -> None:
        view = memoryview(data)
        os.set_blocking(fd, True)
        while view:
            try:
                view = view[os.write(fd, view) :]
            except OSError as exc:
                log.warning("--record: cannot pass a frame on (%s)", exc)
                return

    def _record(self, frame: bytes, inbound: bool) -> None:
        text = frame.decode("utf-8", errors="surrogateescape").strip()
        if not text:
            return
        try:
            value = json.loads(text)
        except ValueError:
            if inbound:
                self._line(self.transcript.raw_in(text))
            return
        with self.lock:  # the placeholders are shared by both directions
            line = self.transcript.frame_in(value) if inbound else self.transcript.frame_out(value)
            self.file.write(line + "\n")
            self.file.flush()

    def finish(self) -> None:
        """After serving: the server's output ends, the relays drain, the file is closed."""
        if self.server_out >= 0:
            try:
                os.close(self.server_out)
            except OSError:
                pass
            self.server_out = -1
        for thread in self.threads[1:]:  # stdin's relay may wait on a host that never closes
            thread.join(10)
        with self.lock:
            self.file.close()
