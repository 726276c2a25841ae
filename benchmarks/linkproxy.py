"""A TCP proxy that adds a fixed delay each way: PostgreSQL as reached from another host.

Each chunk read from one side is written to the other `delay` seconds after it was read, in
order, without holding up the chunks read meanwhile (a pipelined stream keeps flowing; each byte
arrives `delay` late). One thread per direction per connection; loopback only.
"""

from __future__ import annotations

import collections
import socket
import threading
import time


class LinkProxy:
    """Listens on 127.0.0.1 (`port`) and forwards to `target`, adding `delay` seconds each way."""

    def __init__(self, host: str, port: int, delay: float = 0.001) -> None:
        self.target = (host, port)
        self.delay = delay
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            for sock in (client, server):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._pipe(client, server)
            self._pipe(server, client)

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        queue: collections.deque[tuple[float, bytes]] = collections.deque()
        ready = threading.Condition()

        def read() -> None:
            while True:
                try:
                    data = source.recv(65536)
                except OSError:
                    data = b""
                with ready:
                    queue.append((time.monotonic() + self.delay, data))
                    ready.notify()
                if not data:
                    return

        def write() -> None:
            while True:
                with ready:
                    while not queue:
                        ready.wait()
                    due, data = queue.popleft()
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                try:
                    if not data:
                        sink.shutdown(socket.SHUT_WR)
                        return
                    sink.sendall(data)
                except OSError:
                    return

        threading.Thread(target=read, daemon=True).start()
        threading.Thread(target=write, daemon=True).start()

    def close(self) -> None:
        self.closed = True
        self.listener.close()
