"""A TCP proxy in front of the test PostgreSQL server that can lose a COMMIT: its answer (the
server committed, the client never hears it) or the COMMIT itself (the server rolls back when
the connection closes). Everything else is passed through byte for byte.

The client's side of the stream is read message by message (after the start-up packet, each
is a type byte and a length); a simple-query message `COMMIT` on a connection, once armed, is
the one lost. Connections must not use TLS (`sslmode=disable`).
"""

from __future__ import annotations

import socket
import struct
import threading
import time


class CommitDropper:
    """`arm("answer")` or `arm("request")`: the next COMMIT loses its answer or itself; the
    connection it came on is closed either way. `dropped` is set once it happened."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.mode: str | None = None
        self.dropped = threading.Event()
        self.lock = threading.Lock()
        self.closed = False
        self.refuse_after = False
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, user: str, database: str) -> str:
        return f"postgresql://{user}@127.0.0.1:{self.port}/{database}?sslmode=disable"

    def arm(self, mode: str, *, then_refuse: bool = False) -> None:
        """The next COMMIT loses its answer or itself; with `then_refuse`, every connection
        made after that is refused too (the server cannot be asked how it ended)."""
        assert mode in ("answer", "request")
        self.dropped.clear()
        self.refuse_after = then_refuse
        self.mode = mode

    def close(self) -> None:
        self.closed = True
        self.listener.close()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.refuse_after and self.dropped.is_set():
                client.close()
                continue
            server = socket.create_connection(self.target)
            pair = _Pair(self, client, server)
            threading.Thread(target=pair.upstream, daemon=True).start()
            threading.Thread(target=pair.downstream, daemon=True).start()

    def take(self) -> str | None:
        """The armed mode, disarmed (one COMMIT only)."""
        with self.lock:
            mode, self.mode = self.mode, None
            return mode


class _Pair:
    def __init__(self, proxy: CommitDropper, client: socket.socket, server: socket.socket):
        self.proxy, self.client, self.server = proxy, client, server
        self.muted = False  # the server's answers are no longer passed on

    def _read(self, count: int) -> bytes:
        data = b""
        while len(data) < count:
            chunk = self.client.recv(count - len(data))
            if not chunk:
                raise EOFError
            data += chunk
        return data

    def upstream(self) -> None:
        try:
            (length,) = struct.unpack("!I", self._read(4))
            self.server.sendall(struct.pack("!I", length) + self._read(length - 4))
            while True:
                kind = self._read(1)
                (length,) = struct.unpack("!I", self._read(4))
                body = self._read(length - 4)
                message = kind + struct.pack("!I", length) + body
                if kind == b"Q" and body.rstrip(b"\0").strip().upper() == b"COMMIT":
                    mode = self.proxy.take()
                    # `dropped` is set before the close: a reconnection the close provokes
                    # must find it set (and be refused when the proxy refuses after a drop)
                    if mode == "answer":
                        self.muted = True
                        self.server.sendall(message)
                        time.sleep(0.3)  # the server commits and answers; nobody hears it
                        self.proxy.dropped.set()
                        self._close()
                        return
                    if mode == "request":
                        self.proxy.dropped.set()
                        self._close()
                        return
                self.server.sendall(message)
        except (EOFError, OSError):
            self._close()

    def downstream(self) -> None:
        try:
            while True:
                data = self.server.recv(65536)
                if not data:
                    break
                if not self.muted:
                    self.client.sendall(data)
        except OSError:
            pass
        self._close()

    def _close(self) -> None:
        for sock in (self.client, self.server):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
