"""Start-up fast path: the host's handshake is answered while the rest of subagentd loads.

The first response a host waits for (`initialize`, or `server/discover` / `ping`) needs no state,
so it is answered from here — by the server's own Dispatcher, serving only those three methods and
running them directly — while another thread imports jsonrpcserver, core and the storage layer and
opens the database. What this module imports is all the handshake needs (no core, no
jsonrpcserver, no anyio), and it is imported before that thread starts, so the two do not compete
for the interpreter lock over the handshake's own imports. Any other frame, a batch, a notification and any refusal are left to the full
server unchanged (it answers them the usual way).
"""

from __future__ import annotations

import logging
import os
import select
import sys
from typing import TYPE_CHECKING, Any

import msgspec

from subagentd.errors import SubagentdError
from subagentd.server.dispatcher import LIFECYCLE, Dispatcher, decode, invoke_directly
from subagentd.server.lifecycle import handshake_methods
from subagentd.wire.framing import Frame, FrameReader, encode_frame
from subagentd.wire.session import Session

if TYPE_CHECKING:
    from subagentd.core.settings import Settings

log = logging.getLogger("subagentd")
_encode = msgspec.json.Encoder().encode
CHUNK = 256 * 1024


class Started(msgspec.Struct):
    """What the prelude read and decided, handed to the Connection."""

    framer: FrameReader
    session: Session
    frames: list[Frame] = msgspec.field(default_factory=list)  # read but not answered yet
    input_ended: bool = False


def divert_stdout() -> int:
    """Keep a private duplicate of fd 1 for protocol frames and point fd 1 (and print) at stderr."""
    sys.stdout.flush()
    out_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out_fd


def answer_handshake(in_fd: int, out_fd: int, started: Started, settings: Settings) -> None:
    """Block until the first frames arrive; answer the leading handshake requests among them."""
    while not started.frames and not started.input_ended:
        try:
            data = os.read(in_fd, CHUNK)
        except BlockingIOError:
            select.select([in_fd], [], [])
            continue
        if not data:
            started.input_ended = True
            started.frames = started.framer.finish()
        else:
            started.frames = started.framer.feed(data)
    dispatcher = Dispatcher(
        started.session,
        settings,
        invoke_directly,
        methods={name: h for name, h in handshake_methods().items() if name in LIFECYCLE},
    )
    while started.frames:
        reply = _answer(dispatcher, started.frames[0])
        if reply is None:
            return
        started.frames.pop(0)
        try:
            _write(out_fd, encode_frame(_encode(reply), started.framer.lsp))
        except OSError as exc:  # the host closed our stdout; the server notices it again later
            log.warning("cannot write to the host (%s)", exc)
            return


def _answer(dispatcher: Dispatcher, frame: Frame) -> Any:
    """The reply to a handshake request, or None to leave the frame to the full server."""
    try:
        message = decode(frame)
    except SubagentdError:
        return None
    if not (isinstance(message, dict) and "id" in message and message.get("method") in LIFECYCLE):
        return None  # only a request may be run here: the full server would run it again
    reply = dispatcher.dispatch_one(message)
    return reply if isinstance(reply, dict) and "result" in reply else None


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            select.select([], [fd], [])
