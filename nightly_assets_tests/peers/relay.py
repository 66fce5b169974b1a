"""A TCP relay from an address containers can reach to a peer listening on loopback.

The test engine's containers reach the host only at their bridge network's gateway address, while
the host's peers (PostgreSQL, MariaDB, the fake Slack) listen on 127.0.0.1: a relay listens on the
gateway and copies bytes both ways, one thread pair per connection.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

CONNECT_TIMEOUT_S = 10.0
CHUNK = 65536


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while chunk := source.recv(CHUNK):
            sink.sendall(chunk)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


def _serve(listener: socket.socket, target: tuple[str, int], stopped: threading.Event) -> None:
    while not stopped.is_set():
        try:
            client, _ = listener.accept()
        except OSError:
            return  # the listener was closed
        try:
            upstream = socket.create_connection(target, timeout=CONNECT_TIMEOUT_S)
        except OSError:
            client.close()
            continue
        upstream.settimeout(None)
        for source, sink in ((client, upstream), (upstream, client)):
            threading.Thread(target=_pump, args=(source, sink), daemon=True).start()


@contextlib.contextmanager
def tcp_relay(listen: tuple[str, int], target: tuple[str, int]) -> Iterator[tuple[str, int]]:
    """Relays connections to `listen` (port 0: any free one) on to `target`; yields the address."""
    listener = socket.create_server(listen, reuse_port=False)
    stopped = threading.Event()
    thread = threading.Thread(target=_serve, args=(listener, target, stopped), daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[:2]
    finally:
        stopped.set()
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        listener.close()
        thread.join(timeout=5)
