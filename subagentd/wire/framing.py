"""Framing, bytes only: NDJSON lines or LSP `Content-Length` frames, never buffering past a limit."""

from __future__ import annotations

from typing import Any

import msgspec

LSP_PREFIX = b"Content-Length:"
_encode = msgspec.json.Encoder().encode
_MAX_HEADER = 8192


class Oversize(msgspec.Struct, frozen=True):
    """A frame longer than the limit was discarded; it is answered with -32600."""

    limit: int


class BadHeader(msgspec.Struct, frozen=True):
    """An LSP header block that could not be understood; it is answered with -32700."""

    detail: str


Frame = bytes | Oversize | BadHeader


class FrameReader:
    """Incremental decoder: feed it bytes, get whole frames; mode "auto" picks from the first bytes."""

    def __init__(self, mode: str = "auto", max_frame_bytes: int = 16 * 1024 * 1024) -> None:
        self.mode = mode
        self.limit = max_frame_bytes
        self._buf = bytearray()
        self._skip = 0  # LSP: body bytes still to discard
        self._discarding = False  # NDJSON: inside an over-long line
        self._need = -1  # LSP: body length of the frame being read, -1 while reading headers
        self._header_overflow = False  # LSP: inside a header block longer than _MAX_HEADER

    @property
    def lsp(self) -> bool:
        return self.mode == "lsp"

    def encode(self, message: Any) -> bytes:
        """A message as the frame written back, in the framing the input chose."""
        payload = _encode(message)
        if self.mode == "lsp":
            return b"Content-Length: %d\r\n\r\n" % len(payload) + payload
        return payload + b"\n"

    def feed(self, data: bytes) -> list[Frame]:
        if self.mode == "auto":
            self._buf += data
            stripped = self._buf.lstrip()
            if not stripped:
                self._buf.clear()
                return []
            if len(stripped) < len(LSP_PREFIX) and LSP_PREFIX.startswith(bytes(stripped)):
                return []  # could still become an LSP header
            self.mode = "lsp" if stripped.startswith(LSP_PREFIX) else "ndjson"
            data = bytes(stripped)  # blank lines before the first frame are not part of a header
            self._buf.clear()
        return self._feed_lsp(data) if self.mode == "lsp" else self._feed_ndjson(data)

    def finish(self) -> list[Frame]:
        """At end of input: an NDJSON line left without its final newline is still a frame."""
        if self.mode == "lsp":
            return []
        if self._discarding:
            self._discarding = False
            return [Oversize(self.limit)]
        line = bytes(self._buf).strip()
        self._buf.clear()
        return [line] if line else []

    def _feed_ndjson(self, data: bytes) -> list[Frame]:
        frames: list[Frame] = []
        start = 0
        while True:
            end = data.find(b"\n", start)
            if end < 0:
                break
            piece = data[start:end]
            start = end + 1
            if self._discarding:
                self._discarding = False
                self._buf.clear()
                frames.append(Oversize(self.limit))
                continue
            if self._buf:
                self._buf += piece
                line = bytes(self._buf)
                self._buf.clear()
            else:
                line = piece
            if len(line) > self.limit:
                frames.append(Oversize(self.limit))
                continue
            line = line.strip()
            if line:
                frames.append(line)
        rest = data[start:]
        if rest and not self._discarding:
            if len(self._buf) + len(rest) > self.limit:
                self._discarding = True
                self._buf.clear()
            else:
                self._buf += rest
        return frames

    def _feed_lsp(self, data: bytes) -> list[Frame]:
        frames: list[Frame] = []
        view = memoryview(data)
        while view:
            if self._skip:
                taken = min(self._skip, len(view))
                self._skip -= taken
                view = view[taken:]
                if not self._skip:
                    frames.append(Oversize(self.limit))
                continue
            if self._need < 0:
                self._buf += view
                view = memoryview(b"")
                end = self._buf.find(b"\r\n\r\n")
                if self._header_overflow:  # skipping an over-long header block to its end
                    if end < 0:
                        del self._buf[:-3]  # a terminator may straddle two reads
                        break
                    self._header_overflow = False
                    view = memoryview(bytes(self._buf[end + 4 :]))
                    self._buf.clear()
                    continue
                if (end < 0 and len(self._buf) > _MAX_HEADER) or end > _MAX_HEADER:
                    # too long however it arrives: refused once, skipped through its terminator
                    frames.append(BadHeader("header block too long"))
                    if end < 0:
                        self._header_overflow = True
                        del self._buf[:-3]
                        break
                    view = memoryview(bytes(self._buf[end + 4 :]))
                    self._buf.clear()
                    continue
                if end < 0:
                    break
                header = bytes(self._buf[:end])
                rest = bytes(self._buf[end + 4 :])
                self._buf.clear()
                length = _content_length(header)
                if isinstance(length, BadHeader):
                    frames.append(length)
                elif length > self.limit:
                    self._skip = length
                elif length == 0:
                    frames.append(b"")  # no body byte will come to complete it
                else:
                    self._need = length
                view = memoryview(rest)
                continue
            wanted = self._need - len(self._buf)
            self._buf += view[:wanted]
            view = view[wanted:]
            if len(self._buf) == self._need:
                frames.append(bytes(self._buf))
                self._buf.clear()
                self._need = -1
        return frames


def _content_length(header: bytes) -> int | BadHeader:
    length = None
    for line in header.split(b"\r\n"):
        name, sep, value = line.partition(b":")
        if not sep:
            return BadHeader(f"malformed header line {line[:80]!r}")
        if name.strip().lower() == b"content-length":
            try:
                length = int(value.strip())
            except ValueError:
                return BadHeader("Content-Length is not a number")
            if length < 0:
                return BadHeader("Content-Length is negative")
    if length is None:
        return BadHeader("missing Content-Length header")
    return length


def encode_frame(payload: bytes, lsp: bool) -> bytes:
    if lsp:
        return b"Content-Length: %d\r\n\r\n" % len(payload) + payload
    return payload + b"\n"
