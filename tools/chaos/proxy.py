"""A TCP relay between the flow and Elasticsearch that the harness can cut and restore.

The flow's ES_HOSTS points at `Proxy.url` (127.0.0.1, an ephemeral port); the harness's own
client talks to Elasticsearch directly. `cut("refuse")` resets every open connection and
resets new ones as soon as they are accepted (a node that is down); `cut("blackhole")`
stops relaying in both directions and holds every connection, old and new, open without
answering (a partition or a hung node: the client only finds out by its own timeout).
`restore()` drops the held connections and relays again. It works on bytes, not HTTP, so
it cannot change what Elasticsearch answers, only whether the flow gets through.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from urllib.parse import urlsplit

CUT_MODES = ("refuse", "blackhole")
_CHUNK = 256 * 1024


def _reset(sock: socket.socket) -> None:
    """Close with a TCP RST (SO_LINGER 0), as a dead or restarting node does."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


class Proxy:
    """Relays 127.0.0.1:<port> to the Elasticsearch URL given; see the module docstring."""

    def __init__(self, upstream_url: str) -> None:
        parts = urlsplit(upstream_url)
        if parts.scheme != "http" or not parts.hostname:
            msg = f"the chaos proxy relays plain http only, got {upstream_url!r}"
            raise ValueError(msg)
        self._upstream = (parts.hostname, parts.port or 80)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port: int = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._lock = threading.Lock()
        self._mode: str | None = None  # None: relaying; else one of CUT_MODES
        self._pairs: set[tuple[socket.socket, socket.socket]] = set()
        self._held: list[socket.socket] = []
        self._closed = threading.Event()
        self.cuts = 0
        self._thread = threading.Thread(target=self._accept_loop, name="chaos-proxy", daemon=True)
        self._thread.start()

    @property
    def mode(self) -> str | None:
        return self._mode

    def cut(self, mode: str) -> None:
        """Start an outage: `refuse` or `blackhole` (see the module docstring)."""
        if mode not in CUT_MODES:
            msg = f"unknown cut mode {mode!r}"
            raise ValueError(msg)
        with self._lock:
            self._mode = mode
            self.cuts += 1
            pairs, self._pairs = self._pairs, set()
        for client, upstream in pairs:
            _reset(upstream)
            if mode == "refuse":
                _reset(client)
            else:
                with self._lock:
                    self._held.append(client)

    def restore(self) -> None:
        """End the outage: held connections are reset, new ones are relayed again."""
        with self._lock:
            self._mode = None
            held, self._held = self._held, []
        for sock in held:
            _reset(sock)

    def close(self) -> None:
        self._closed.set()
        self.restore()
        with self._lock:
            pairs, self._pairs = self._pairs, set()
        for client, upstream in pairs:
            _reset(client)
            _reset(upstream)
        self._thread.join(5)
        self._listener.close()

    # -- relaying

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            mode = self._mode
            if mode == "refuse":
                _reset(client)
                continue
            if mode == "blackhole":
                with self._lock:
                    self._held.append(client)
                continue
            try:
                upstream = socket.create_connection(self._upstream, timeout=10)
                upstream.settimeout(None)
            except OSError:
                _reset(client)
                continue
            pair = (client, upstream)
            with self._lock:  # a cut may have come while connecting: it wins
                mode = self._mode
                if mode is None:
                    self._pairs.add(pair)
                elif mode == "blackhole":
                    self._held.append(client)
            if mode is not None:
                _reset(upstream)
                if mode == "refuse":
                    _reset(client)
                continue
            for src, dst in (pair, (upstream, client)):
                threading.Thread(
                    target=self._pump, args=(src, dst, pair), name="chaos-proxy-pump", daemon=True
                ).start()

    def _pump(
        self, src: socket.socket, dst: socket.socket, pair: tuple[socket.socket, socket.socket]
    ) -> None:
        try:
            while True:
                data = src.recv(_CHUNK)
                if not data or self._mode is not None:
                    break
                dst.sendall(data)
        except OSError:
            pass
        with self._lock:
            live = pair in self._pairs
            self._pairs.discard(pair)
        if live:  # an ordinary close by either side: pass it on
            for sock in pair:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    sock.close()
