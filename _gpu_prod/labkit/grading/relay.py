"""The kernel's transport: every byte a sandboxed kernel sends, counted before anything decodes it.

nbval (trusted, outside the sandbox) talks to the notebook kernel (inside) over ZMQ on unix sockets.
A kernel is student code, so what it sends is hostile data: a frame header announcing 768 MiB, one
message of a thousand 1 MiB frames, raw bytes written past ZMQ into the socket. ZMQ hands a
message to its reader only once every frame of it is in memory, so nothing in nbval could count
it in time.
Hence :class:`Relay`, between nbval's sockets and the kernel's, with a budget in bytes, and
``MAX_FRAME_BYTES`` for ``ZMQ_MAXMSGSIZE`` on nbval's sockets (see ``runner._sandbox_kernels``).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from pathlib import Path

MAX_KERNEL_BYTES = 32 << 20     # bytes one kernel (one notebook) may send to the grader, all told
MAX_FRAME_BYTES = 8 << 20       # one ZMQ frame (ZMQ_MAXMSGSIZE on the grader's sockets)


class Relay:
    """A byte relay between the grader's ZMQ sockets and a sandboxed kernel's, with a budget.

    The kernel binds its ipc sockets in the folder bound into the sandbox (``kernel_prefix-N``);
    the grader's sockets connect to ``listen_prefix-N`` in a trusted folder instead, where this
    relay accepts and connects through to the kernel's. It copies bytes both ways without reading
    them, and counts every byte that comes from the kernel before ZMQ (or anything else) in the
    grader sees it. Past ``limit`` it stops: no more bytes are read, every connection and the
    listeners are closed, and ``on_over`` runs (it kills the kernel). A frame header announcing a
    huge frame, a flood of messages or of frames in one message: all are bytes, all are counted.
    Backpressure is the sockets' own (a thread per direction, blocking ``sendall``), so what the
    relay holds is one chunk per direction.
    """

    CHUNK = 1 << 18

    def __init__(self, listen_prefix: str, kernel_prefix: str, ports: list[int],
                 limit: int = MAX_KERNEL_BYTES, on_over: Callable[[], object] | None = None) -> None:
        self.limit, self.received, self.over = limit, 0, False
        self._on_over, self._lock, self._closed = on_over, threading.Lock(), False
        self._socks: set[socket.socket] = set()
        self.listeners: list[socket.socket] = []
        for port in ports:
            path = f"{listen_prefix}-{port}"
            Path(path).unlink(missing_ok=True)
            srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            srv.bind(path)
            srv.listen(16)
            srv.settimeout(0.2)
            self.listeners.append(srv)
            threading.Thread(target=self._accept, args=(srv, f"{kernel_prefix}-{port}"),
                             daemon=True, name=f"relay-{port}").start()

    def _accept(self, srv: socket.socket, target: str) -> None:
        while not self._closed:
            try:
                client, _ = srv.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            kernel = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                kernel.connect(target)       # not bound yet: close, and ZMQ connects again
            except OSError:
                client.close()
                kernel.close()
                continue
            client.settimeout(None)
            with self._lock:
                if self._closed:
                    client.close()
                    kernel.close()
                    return
                self._socks.update((client, kernel))
            threading.Thread(target=self._pump, args=(kernel, client, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(client, kernel, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, counted: bool) -> None:
        try:
            while not self._closed:
                data = src.recv(self.CHUNK)
                if not data:
                    break
                if counted:
                    with self._lock:
                        self.received += len(data)
                        over = self.received > self.limit
                    if over:
                        self._overflow()
                        return
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):             # either side gone: this connection ends
                self._close(s)

    def _close(self, sock: socket.socket) -> None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        sock.close()
        with self._lock:
            self._socks.discard(sock)

    def _overflow(self) -> None:
        with self._lock:
            first, self.over = not self.over, True
        self.close()
        if first and self._on_over is not None:
            try:
                self._on_over()
            except Exception:  # noqa: BLE001 - the kernel may be gone already
                pass

    def close(self) -> None:
        """Stop relaying: the listeners and every connection are closed."""
        with self._lock:
            self._closed = True
            socks = list(self._socks)
        for srv in self.listeners:
            srv.close()
        for sock in socks:
            self._close(sock)
