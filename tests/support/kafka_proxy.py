"""A relay in front of one real Kafka broker that can answer metadata with no broker.

A broker in controlled shutdown can answer a metadata request with a list of no brokers;
librdkafka 2.16 then forgets every broker it knew and, in the ordering of its issue #5301,
never looks at `bootstrap.servers` again. A real broker gives that answer only by chance
(3 runs in about 18 of one test under load), so the tests that need it put this relay
between the client and the broker: it relays every request and answer unchanged, except
that metadata and coordinator answers advertise the relay itself as the broker (so that
every connection the client opens comes through here) and, while `empty` is set, list no
broker at all; the relay then closes the connection, as that broker does once its request
processors stop (librdkafka's test 0193 describes the sequence).

The client is stranded only when its broker thread sees the connection close before its
main thread has handled the answer (the order of #5301). Left to chance that was one try
in three here, and none in 20 once in CI. So an empty answer also repeats its topics
`SLOW_TOPICS` times, which no broker does: it keeps the main thread parsing for a few
milliseconds. Then 10 of 10 tries of a bare consumer were stranded (6 of 10 with the
answer's topics once), and 26 of 27 runs of the test at their first try.

One broker only: the relay has one address to advertise.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading

METADATA = 3
FIND_COORDINATOR = 10
_FLEXIBLE_FROM = 9  # Metadata versions from 9 on use compact arrays and tagged fields
SLOW_TOPICS = 5000
"""How many times an answer with no broker repeats its topics (see the module docstring)."""


def _uvarint(buf: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


def _put_uvarint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _skip_tags(buf: bytes, at: int) -> int:
    count, at = _uvarint(buf, at)
    for _ in range(count):
        _, at = _uvarint(buf, at)
        size, at = _uvarint(buf, at)
        at += size
    return at


def _skip_string(buf: bytes, at: int, flexible: bool) -> int:
    """Past a (nullable) string: compact (length + 1, 0 for null) in flexible versions,
    else an int16 length (-1 for null)."""
    if flexible:
        size, at = _uvarint(buf, at)
        return at + max(size - 1, 0)
    (size,) = struct.unpack_from(">h", buf, at)
    return at + 2 + max(size, 0)


def rewrite_metadata(body: bytes, version: int, port: int, empty: bool) -> bytes:
    """A Metadata answer (after the correlation id) whose brokers are this relay's address;
    when `empty`, none, and its topics repeated `SLOW_TOPICS` times (Metadata v9 and up
    only: `NotImplementedError` below)."""
    flexible = version >= _FLEXIBLE_FROM
    at = _skip_tags(body, 0) if flexible else 0  # response header v1's tagged fields
    head_end = at + (4 if version >= 3 else 0)  # throttle_time_ms
    at = head_end
    if flexible:
        n, at = _uvarint(body, at)
        n -= 1
    else:
        (n,) = struct.unpack_from(">i", body, at)
        at += 4
    nodes = []
    for _ in range(n):
        (node_id,) = struct.unpack_from(">i", body, at)
        at = _skip_string(body, at + 4, flexible) + 4  # host, port
        if version >= 1:  # rack, nullable
            at = _skip_string(body, at, flexible)
        if flexible:
            at = _skip_tags(body, at)
        nodes.append(node_id)
    host = b"127.0.0.1"
    entries = []
    for node_id in [] if empty else nodes:
        if flexible:
            rack = b"\x00"  # null
            entry = (
                struct.pack(">i", node_id) + _put_uvarint(len(host) + 1) + host
                + struct.pack(">i", port) + rack + b"\x00"
            )  # fmt: skip
        else:
            rack = struct.pack(">h", -1) if version >= 1 else b""
            entry = (
                struct.pack(">i", node_id) + struct.pack(">h", len(host)) + host
                + struct.pack(">i", port) + rack
            )  # fmt: skip
        entries.append(entry)
    count = _put_uvarint(len(entries) + 1) if flexible else struct.pack(">i", len(entries))
    rest = body[at:]
    if empty:
        rest = _repeat_topics(rest, version, SLOW_TOPICS)
    return body[:head_end] + count + b"".join(entries) + rest


def _repeat_topics(rest: bytes, version: int, times: int) -> bytes:
    """The part of a Metadata answer after its brokers, with its topics repeated."""
    if version < _FLEXIBLE_FROM:
        msg = f"Metadata v{version} is not slowed down (only the flexible versions)"
        raise NotImplementedError(msg)
    at = _skip_string(rest, 0, True) + 4  # cluster_id, controller_id
    n, topics_at = _uvarint(rest, at)
    if n == 0:  # a null array
        return rest
    # After the topics: cluster_authorized_operations (v9-10), error_code (v13+), and the
    # tagged fields, which brokers send empty.
    tail = 1 + (4 if version <= 10 else 0) + (2 if version >= 13 else 0)
    if rest[-1] != 0:
        raise NotImplementedError("Metadata answer with tagged fields")
    topics = rest[topics_at:-tail]
    return rest[:at] + _put_uvarint((n - 1) * times + 1) + topics * times + rest[-tail:]


def rewrite_coordinator(body: bytes, version: int, port: int) -> bytes:
    """A FindCoordinator answer (after the correlation id, versions 0 to 3, which carry one
    coordinator) that names this relay's address: the client would otherwise connect to the
    coordinator's real address, past the relay."""
    if version > 3:
        msg = f"FindCoordinator v{version} is not relayed (batched coordinators)"
        raise NotImplementedError(msg)
    flexible = version >= 3
    at = _skip_tags(body, 0) if flexible else 0
    at += (4 if version >= 1 else 0) + 2  # throttle_time_ms, error_code
    if version >= 1:  # error_message, nullable
        at = _skip_string(body, at, flexible)
    start = at + 4  # after node_id
    at = _skip_string(body, start, flexible) + 4  # host, port
    host = b"127.0.0.1"
    name = _put_uvarint(len(host) + 1) if flexible else struct.pack(">h", len(host))
    return body[:start] + name + host + struct.pack(">i", port) + body[at:]


def _read_frame(sock: socket.socket) -> bytes | None:
    head = _read_exact(sock, 4)
    if head is None:
        return None
    (size,) = struct.unpack(">i", head)
    return _read_exact(sock, size)


def _read_exact(sock: socket.socket, n: int) -> bytes | None:
    chunks = bytearray()
    while len(chunks) < n:
        chunk = sock.recv(n - len(chunks))
        if not chunk:
            return None
        chunks += chunk
    return bytes(chunks)


class KafkaProxy:
    """Relays 127.0.0.1:<port> to the broker at `upstream` ("host:port")."""

    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.rpartition(":")
        self._upstream = (host, int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port: int = self._listener.getsockname()[1]
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.empty = False
        """While set, metadata answers list no broker, repeat their topics, and their
        connection is closed right after (see the module docstring)."""
        self.emptied = 0
        """How many metadata answers listed no broker."""
        self._closed = threading.Event()
        self._socks: set[socket.socket] = set()
        self._dropping = threading.Lock()
        threading.Thread(target=self._accept_loop, name="kafka-proxy", daemon=True).start()

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        for sock in list(self._socks):
            with contextlib.suppress(OSError):
                sock.close()

    def __enter__(self) -> KafkaProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(self._upstream, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            self._socks |= {client, upstream}
            asked: dict[int, tuple[int, int]] = {}
            threading.Thread(
                target=self._requests, args=(client, upstream, asked), daemon=True
            ).start()
            threading.Thread(
                target=self._answers, args=(upstream, client, asked), daemon=True
            ).start()

    def _requests(
        self, client: socket.socket, upstream: socket.socket, asked: dict[int, tuple[int, int]]
    ) -> None:
        try:
            with contextlib.suppress(OSError):
                while (frame := _read_frame(client)) is not None:
                    key, version, corr = struct.unpack_from(">hhi", frame)
                    asked[corr] = (key, version)
                    upstream.sendall(struct.pack(">i", len(frame)) + frame)
        finally:
            self._drop(client, upstream)

    def _answers(
        self, upstream: socket.socket, client: socket.socket, asked: dict[int, tuple[int, int]]
    ) -> None:
        half_closed = False
        try:
            with contextlib.suppress(OSError):
                while (frame := _read_frame(upstream)) is not None:
                    (corr,) = struct.unpack_from(">i", frame)
                    key, version = asked.pop(corr, (-1, -1))
                    empty = False
                    if key == METADATA:
                        empty = self.empty
                        self.emptied += empty
                        frame = frame[:4] + rewrite_metadata(frame[4:], version, self.port, empty)
                    elif key == FIND_COORDINATOR:
                        frame = frame[:4] + rewrite_coordinator(frame[4:], version, self.port)
                    client.sendall(struct.pack(">i", len(frame)) + frame)
                    if empty:
                        # The answer, then the end of the stream: the client closes its end
                        # on reading it, and `_requests` then drops both. (A close() here
                        # would reset the connection over requests not read yet, which
                        # could lose the answer.)
                        client.shutdown(socket.SHUT_WR)
                        half_closed = True
                        return
        finally:
            if not half_closed:  # also on an error that is not an OSError (it is raised)
                self._drop(client, upstream)

    def _drop(self, *socks: socket.socket) -> None:
        with self._dropping:  # both relay threads of a connection end here
            for sock in socks:
                self._socks.discard(sock)
                with contextlib.suppress(OSError):
                    # close() alone sends nothing while the other relay thread waits in recv().
                    sock.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    sock.close()
