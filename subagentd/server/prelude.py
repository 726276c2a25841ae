"""Start-up fast path: the host's handshake is answered while the rest of subagentd loads.

The first response a host waits for (`initialize`, or `server/discover` / `ping`) needs no state,
so it is answered from here — which imports only msgspec and the lifecycle handlers — while
another thread imports the dispatcher and the storage layer and opens the database. Any other
frame, and anything unusual about a handshake frame, is left to the full server unchanged.
"""

from __future__ import annotations

import logging
import os
import select
import sys
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

import msgspec

from subagentd.core.settings import Settings
from subagentd.schema.lifecycle import SUPPORTED_VERSIONS, VERSION_META_KEY
from subagentd.server.envelope import Session, success_reply, valid_id
from subagentd.server.framing import Frame, FrameReader, encode_frame
from subagentd.server.requestlog import log_request

log = logging.getLogger("subagentd")
_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode
_HANDSHAKE = frozenset({"initialize", "ping", "server/discover"})
CHUNK = 256 * 1024


@dataclass
class Started:
    """What the prelude read and decided, handed to the Connection."""

    framer: FrameReader
    session: Session
    frames: list[Frame] = field(default_factory=list)  # read but not answered yet
    input_ended: bool = False


@dataclass
class HandshakeCall:
    """The part of a handler's call context the lifecycle handlers use."""

    session: Session
    settings: Settings
    stateless: bool = False


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
    while started.frames:
        reply = _answer(started.frames[0], started.session, settings)
        if reply is None:
            return
        started.frames.pop(0)
        try:
            _write(out_fd, encode_frame(_encode(reply), started.framer.lsp))
        except OSError as exc:  # the host closed our stdout; the server notices it again later
            log.warning("cannot write to the host (%s)", exc)
            return


def _answer(frame: Frame, session: Session, settings: Settings) -> dict[str, Any] | None:
    """The reply to a plain handshake request, or None to leave the frame to the full server."""
    from subagentd.server.handlers import METHODS  # no dispatcher, no storage behind it

    started = perf_counter()
    if not isinstance(frame, bytes):
        return None
    try:
        message = _decode(frame)
    except (msgspec.DecodeError, RecursionError):
        return None
    if not (
        isinstance(message, dict)
        and message.get("jsonrpc") == "2.0"
        and message.get("method") in _HANDSHAKE
        and "id" in message
        and valid_id(message["id"])
        and isinstance(message.get("params", {}), dict)
    ):
        return None
    params = message.get("params", {})
    meta = params.get("_meta")
    version = meta.get(VERSION_META_KEY) if isinstance(meta, dict) else None
    if version is not None and version not in SUPPORTED_VERSIONS:
        return None
    handler = METHODS[message["method"]]
    try:
        result = handler.run(
            HandshakeCall(session, settings, version is not None),
            msgspec.convert(params, handler.params),
        )
    except Exception:  # refusals and bad params: the full server answers them the usual way
        return None
    if log.isEnabledFor(logging.DEBUG):
        log_request(message["method"], message["id"], True, started)
    return success_reply(result, message["id"], version is not None)


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            select.select([], [fd], [])
