"""A TCP forwarding proxy a test or the soak bench controls: cut the network (a partition), heal it,
corrupt a byte.

Peers connect to ``proxy.endpoint`` instead of the real endpoint. During a partition
every forwarded connection is closed and new ones are accepted and closed at once, as a
broken link looks to ZeroMQ (which keeps reconnecting). ``corrupt_after(n)`` flips one
byte of the stream from the server to its clients once ``n`` bytes have passed, as a bad
NIC or a hostile middlebox would.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class TcpProxy:
    def __init__(self, target_endpoint: str) -> None:
        host, port = target_endpoint.removeprefix("tcp://").rsplit(":", 1)
        self._target = (host, int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self.endpoint = f"tcp://127.0.0.1:{self._listener.getsockname()[1]}"
        self._up = threading.Event()
        self._up.set()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self._downstream = 0
        self._corrupt_at: int | None = None
        self._corrupt_chunk: int | None = None
        self.corrupted = threading.Event()
        self.corruptions = 0
        """Bytes flipped so far."""
        self.refused = 0
        """Connections accepted and closed during a partition."""
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def partition(self) -> None:
        self._up.clear()
        with self._lock:
            socks, self._socks = self._socks, []
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def heal(self) -> None:
        self._up.set()

    def corrupt_after(self, n_bytes: int) -> None:
        """Flip one byte once ``n_bytes`` more have gone from the server to a client."""
        with self._lock:
            self._corrupt_at = self._downstream + n_bytes

    def corrupt_next_chunk(self, min_bytes: int) -> None:
        """Flip the middle byte of the next read from the server of at least ``min_bytes``
        (inside a large message's payload, past the small heartbeats)."""
        with self._lock:
            self._corrupt_chunk = min_bytes

    def close(self) -> None:
        self._closed.set()
        self.partition()
        self._listener.close()
        for t in self._threads:
            t.join(timeout=2)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if not self._up.is_set():
                self.refused += 1
                client.close()
                continue
            try:
                server = socket.create_connection(self._target, timeout=2)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._socks += [client, server]
            for src, dst, down in ((client, server, False), (server, client, True)):
                t = threading.Thread(target=self._pump, args=(src, dst, down), daemon=True)
                t.start()

    def _pump(self, src: socket.socket, dst: socket.socket, downstream: bool) -> None:
        try:
            src.settimeout(None)
            while self._up.is_set():
                data = src.recv(1 << 16)
                if not data:
                    break
                if downstream:
                    data = self._maybe_corrupt(data)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()

    def _maybe_corrupt(self, data: bytes) -> bytes:
        with self._lock:
            start = self._downstream
            self._downstream += len(data)
            at = self._corrupt_at
            if self._corrupt_chunk is not None and len(data) >= self._corrupt_chunk:
                at, self._corrupt_chunk = start + len(data) // 2, None
            elif at is None or not start <= at < self._downstream:
                return data
            else:
                self._corrupt_at = None
        out = bytearray(data)
        out[at - start] ^= 0xFF
        self.corruptions += 1
        self.corrupted.set()
        return bytes(out)
