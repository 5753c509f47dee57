"""The partitioned Elasticsearch bulk sink.

Each document is routed to one of ES_SINK_PARTITIONS partitions by a stable hash of its id
(done upstream, in `flows.process`), so all writes to one document go through one
partition, in order. A partition buffers encoded actions and, when BULK_MAX_ACTIONS,
BULK_MAX_BYTES or BULK_LINGER_MS is reached, hands the buffer to a background thread that
sends it, so the worker goes on reading and encoding while Elasticsearch indexes. A
partition has at most one buffer in flight (which keeps writes to a document in order) and
a process at most ES_MAX_IN_FLIGHT; `write_batch` waits for the partition's previous one,
which bounds memory and back-pressures the source. `snapshot()` sends the rest and waits
for all of it: Bytewax finishes an epoch, and the source then commits its offsets, only
after every `snapshot()` returned.

Bulk item results are classified by status and error type: done (2xx; 409 under external
versioning or create; 404 for a delete), retried with jittered backoff (429, 5xx,
rejected execution, circuit breaking, unavailable shards; connection errors and timeouts
for the whole request), or rejected for good (other 4xx: dead-lettered with stage `index`).
The state a partition snapshots is None: with deterministic ids the index itself is the
state, and replays overwrite.
"""

from __future__ import annotations

import functools
import logging
import queue
import random
import re
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from bytewax.outputs import FixedPartitionedSink, StatefulSinkPartition
from elastic_transport import ConnectionError as TransportConnectionError
from elastic_transport import ConnectionTimeout, TlsError
from elasticsearch import ApiError, Elasticsearch

from flows import metrics
from flows.config import Settings
from flows.errors import ConfigError, ElasticsearchUnavailableError
from flows.policy import ErrorPolicy
from flows.record import DeadLetter
from sinks.actions import Action
from sinks.dead_letter import DeadLetterProducer, shared_producer
from sinks.es_client import shared_client

logger = logging.getLogger(__name__)

RETRY_ERROR_TYPES = frozenset(
    {
        "es_rejected_execution_exception",
        "circuit_breaking_exception",
        "unavailable_shards_exception",
        "no_shard_available_action_exception",
        "cluster_block_exception",
        "process_cluster_event_timeout_exception",
    }
)
_FILTER = "errors,items.*.status,items.*.error.type,items.*.error.reason,items.*.error.caused_by"
_WARN_EVERY_S = 30.0
SUMMARY_EVERY_S = 60.0

Chunk = list[Action]


class ElasticsearchSink(FixedPartitionedSink[Chunk, None]):
    """Bulk-writes chunks of encoded actions; items are `(partition number, actions)`."""

    def __init__(self, settings: Settings, partitions: int) -> None:
        self._settings = settings  # no I/O here: this object is part of the flow description
        self._partitions = partitions

    def list_parts(self) -> list[str]:
        """`es-0000` ... in an order that matches the partition numbers, then any further
        `es-` partition a recovery store holds (an earlier run had more): Bytewax cannot
        resume a stored key nobody lists; items never go there."""
        from flows.recovery_store import sink_parts

        return sink_parts("es", self._partitions)

    def part_fn(self, item_key: str) -> int:
        """Items are keyed by their partition number (hash of the document id)."""
        return int(item_key)

    def build_part(self, step_id: str, for_part: str, resume_state: None) -> EsSinkPartition:
        """Connect, bootstrap the index template once per process, and start buffering."""
        client = shared_client(self._settings)
        _bootstrap_template(client, self._settings)
        dlq = shared_producer(self._settings) if self._settings.dlq_topic else None
        part = EsSinkPartition(self._settings, for_part, client, dlq)
        linger_s = self._settings.bulk_linger_ms / 1000
        _linger_ticker(min(max(linger_s / 4, 0.01), 0.25)).add(part)
        return part


class EsSinkPartition(StatefulSinkPartition[Chunk, None]):
    """One buffer filling and one in flight; see the module docstring."""

    def __init__(
        self,
        settings: Settings,
        name: str,
        client: Elasticsearch,
        dlq: DeadLetterProducer | None,
        clock: Any = time,
    ) -> None:
        self._s = settings
        self._name = name
        self._client = client
        self._dlq = dlq
        self._clock = clock
        self._policy = ErrorPolicy(settings, f"sink partition {name}")
        self._external = settings.external_versioning or settings.write_method == "create"
        self._buf: list[Action] = []
        self._inflight: Future[None] | None = None
        self._held = _held_bytes(settings.es_sink_buffer_bytes)
        self._lock = threading.Lock()  # the worker's calls vs the linger ticker
        self._broken = False
        self._bytes = 0
        self._oldest = 0.0
        self._max_actions = settings.bulk_max_actions
        self._max_bytes = settings.bulk_max_bytes
        self._linger_s = settings.bulk_linger_ms / 1000
        self._gauge = metrics.BUFFERED.labels(name)
        self._stats = {"indexed": 0, "dead_lettered": 0, "bulks": 0}
        self._summary_at = clock.monotonic()

    # -- Bytewax calls

    def write_batch(self, items: list[Chunk]) -> None:
        """Buffer the actions; send them in the background once a limit is reached."""
        with self._lock:
            if not self._buf:
                self._oldest = self._clock.monotonic()
            added = 0
            for chunk in items:
                self._buf.extend(chunk)
                added += sum(len(a.data) for a in chunk)
            self._bytes += added
            over_budget = self._held.add(added)
            if (
                len(self._buf) >= self._max_actions
                or self._bytes >= self._max_bytes
                or over_budget
                or (self._idle() and self._clock.monotonic() - self._oldest >= self._linger_s)
            ):
                self._dispatch()
            self._gauge.set(len(self._buf))

    def snapshot(self) -> None:
        """Make everything buffered durable before Bytewax closes the epoch."""
        self.flush()
        now = self._clock.monotonic()
        if now - self._summary_at >= SUMMARY_EVERY_S and self._stats["bulks"]:
            logger.info(
                "sink partition %s: %s in %.0fs",
                self._name,
                " ".join(f"{k}={v}" for k, v in self._stats.items()),
                now - self._summary_at,
            )
            self._stats = dict.fromkeys(self._stats, 0)
            self._summary_at = now
        return None

    def close(self) -> None:
        """Flush the rest (clean end of input only); the shared client stays open."""
        if self._broken:
            return
        self.flush()
        if self._dlq:
            self._dlq.close()

    # -- bulk

    def flush(self) -> None:
        """Send the whole buffer and wait until everything sent so far is written."""
        with self._lock:
            self._dispatch()
            self._join()

    def linger(self) -> None:
        """Send a buffer that waited BULK_LINGER_MS (from the ticker thread, see
        `_LingerTicker`) unless the partition is busy, broken or has a bulk in flight."""
        if not self._buf or not self._lock.acquire(blocking=False):
            return
        try:
            inflight = self._inflight
            if (
                self._buf
                and not self._broken
                and self._idle()
                and self._clock.monotonic() - self._oldest >= self._linger_s
                and (inflight is None or inflight.exception() is None)
            ):
                self._dispatch()
        finally:
            self._lock.release()

    def _idle(self) -> bool:
        """No bulk of this partition in flight. BULK_LINGER_MS applies only then: while one
        is in flight the buffer grows towards a full bulk (throughput under a backlog), and
        when none is, records wait at most the linger (latency when traffic is light)."""
        return self._inflight is None or self._inflight.done()

    def _dispatch(self) -> None:
        """Wait for this partition's bulk in flight, then send the buffer in the background."""
        self._join()
        if not self._buf:
            return
        buf = self._buf
        self._buf = []
        self._bytes = 0
        self._gauge.set(0)
        self._inflight = _bulk_pool(self._s.es_max_in_flight).submit(self._send_all, buf)

    def _join(self) -> None:
        """Wait for the bulk in flight; its error (the flow stops on it) is raised here."""
        inflight, self._inflight = self._inflight, None
        if inflight is None:
            return
        try:
            inflight.result()
        except BaseException:
            # Bytewax may still call close(), which must not send (and fail on) more.
            self._broken = True
            raise

    def _send_all(self, buf: list[Action]) -> None:
        """Send `buf` in bulks no larger than the configured limits (on a pool thread)."""
        start = 0
        try:
            while start < len(buf):
                end, size = start, 0
                while end < len(buf) and end - start < self._max_actions:
                    n = len(buf[end].data)
                    if size + n > self._max_bytes and end > start:
                        break
                    size += n
                    end += 1
                self._send(buf[start:end])
                self._held.release(size)
                start = end
        finally:
            if start < len(buf):  # the flow stops on this error; keep the count right
                self._held.release(sum(len(a.data) for a in buf[start:]))

    def _send(self, actions: list[Action]) -> None:
        """Write `actions` until each is done or dead-lettered; retry what is transient."""
        pending = actions
        rejected: list[DeadLetter] = []
        attempt = 0
        started = self._clock.monotonic()
        last_warning = 0.0
        while pending:
            try:
                retry, why = self._attempt(pending, rejected)
            except _TooLarge as too_large:
                # HTTP 413: halve the request; a single action that is still too large
                # is rejected for good.
                if len(pending) == 1:
                    rejected.append(_dead(pending[0], "request_entity_too_large", str(too_large)))
                    break
                half = len(pending) // 2
                self._send(pending[:half])
                self._send(pending[half:])
                return
            if not retry:
                break
            attempt += 1
            now = self._clock.monotonic()
            if self._s.es_retry_budget_s and now - started > self._s.es_retry_budget_s:
                msg = (
                    f"sink partition {self._name}: {len(retry)} actions still not written "
                    f"after {now - started:.0f}s "
                    f"(ES_RETRY_BUDGET_S={self._s.es_retry_budget_s}): {why}"
                )
                raise ElasticsearchUnavailableError(msg)
            cap = min(self._s.es_retry_max_ms, self._s.es_retry_initial_ms * 2 ** min(attempt, 30))
            delay = random.uniform(cap / 2, cap) / 1000
            if now - last_warning >= _WARN_EVERY_S or attempt == 1:
                logger.warning(
                    "sink partition %s: retrying %d of %d actions in %.2fs (attempt %d): %s",
                    self._name, len(retry), len(actions), delay, attempt, why,
                )  # fmt: skip
                last_warning = now
            self._clock.sleep(delay)
            pending = retry
        metrics.DOCS_INDEXED.inc(len(actions) - len(rejected))
        self._stats["indexed"] += len(actions) - len(rejected)
        self._stats["dead_lettered"] += len(rejected)
        self._account(actions, rejected)
        if rejected:
            if self._dlq is None:  # only reachable with ERRORS_TOLERANCE=none, which raised
                msg = "rejected documents but no DLQ_TOPIC"
                raise ConfigError(msg)
            self._dlq.send(rejected)

    def _account(self, actions: list[Action], rejected: list[DeadLetter]) -> None:
        """Apply the error policy to the rejected actions, in request order."""
        policy = self._policy
        run = policy.consecutive
        if not rejected:
            policy.end_batch(len(actions), 0, 0)
            return
        bad = {id(dl.record): dl for dl in rejected}
        for action in actions:
            dl = bad.get(id(action.record))
            if dl is None:
                run = 0
            else:
                run += 1
                policy.failed(dl, run)
        policy.end_batch(len(actions) - len(rejected), len(rejected), run, rejected[-1])

    def _attempt(
        self, pending: list[Action], rejected: list[DeadLetter]
    ) -> tuple[list[Action], str]:
        """One bulk request; returns the actions to retry and why."""
        body = b"".join(a.data for a in pending)
        self._stats["bulks"] += 1
        t0 = time.perf_counter()
        try:
            resp = self._client.bulk(operations=body, filter_path=_FILTER)  # type: ignore[arg-type]
        except (TransportConnectionError, ConnectionTimeout) as e:
            metrics.BULK_RETRIES.labels("connection").inc(len(pending))
            return pending, f"{type(e).__name__}: {e.message}"
        except ApiError as e:
            status = e.meta.status
            if status == 429 and _over_pressure_limit(str(e.body)):
                raise _TooLarge(f"HTTP 429: {_reason(e.body)}") from None  # split, then reject
            if status == 429 or status >= 500:
                metrics.BULK_RETRIES.labels(str(status)).inc(len(pending))
                return pending, f"HTTP {status}: {e.message}"
            if status == 413:
                raise _TooLarge(f"HTTP 413: {e.message}") from None
            raise _refused(e, "the bulk request") from None
        finally:
            metrics.BULK_SECONDS.observe(time.perf_counter() - t0)
        body_json = resp.body
        if not body_json.get("errors"):
            return [], ""
        retry: list[Action] = []
        why = ""
        for action, item in zip(pending, body_json["items"], strict=True):
            ((op, result),) = item.items()
            status = result["status"]
            if status < 300:
                continue
            error = result.get("error") or {}
            etype = error.get("type", "") if isinstance(error, dict) else str(error)
            if (status == 409 and self._external) or (status == 404 and op == "delete"):
                continue
            reason = error.get("reason", "") if isinstance(error, dict) else ""
            alone = len(pending) == 1  # then the request's bytes are this action's
            if (
                (status == 429 or etype in RETRY_ERROR_TYPES)
                and alone
                and _over_pressure_limit(reason, len(action.data))
            ):
                # This one operation alone is larger than the node's indexing-pressure limit:
                # no retry can succeed.
                rejected.append(_dead(action, etype, reason))
                continue
            if status == 429 or status >= 500 or etype in RETRY_ERROR_TYPES:
                metrics.BULK_RETRIES.labels(str(status)).inc()
                retry.append(action)
                why = f"{status} {etype}"
                continue
            caused = error.get("caused_by") if isinstance(error, dict) else None
            if isinstance(caused, dict) and caused.get("reason"):
                reason = f"{reason}: {caused.get('type')}: {caused['reason']}"
            rejected.append(_dead(action, etype or f"http_{status}", reason))
        return retry, why


class _BulkPool:
    """Daemon threads that send bulks: a thread still retrying an unreachable Elasticsearch
    must not keep a stopping process alive (what it was sending is not committed)."""

    def __init__(self, size: int) -> None:
        self._jobs: queue.SimpleQueue[tuple[Future[None], Callable[[], None]]] = queue.SimpleQueue()
        for i in range(size):
            threading.Thread(target=self._work, name=f"es-bulk-{i}", daemon=True).start()

    def submit(self, fn: Callable[[list[Action]], None], buf: list[Action]) -> Future[None]:
        future: Future[None] = Future()
        self._jobs.put((future, functools.partial(fn, buf)))
        return future

    def _work(self) -> None:
        while True:
            future, job = self._jobs.get()
            try:
                job()
            except BaseException as e:
                future.set_exception(e)
            else:
                future.set_result(None)


class _HeldBytes:
    """Encoded bytes the sink partitions of this process hold, buffered or in flight.

    Per-partition limits alone let memory grow with the partition count (every partition
    may fill BULK_MAX_BYTES while another BULK_MAX_BYTES is in flight); over
    ES_SINK_BUFFER_BYTES a partition sends its buffer at its next write instead.
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._held = 0
        self._lock = threading.Lock()

    def add(self, n: int) -> bool:
        """Count `n` more bytes; True when the process is now over its limit."""
        with self._lock:
            self._held += n
            return self._held >= self._limit

    def release(self, n: int) -> None:
        with self._lock:
            self._held -= n


@functools.cache
def _held_bytes(limit: int) -> _HeldBytes:
    """One count per process (and limit): every partition of every worker shares it."""
    return _HeldBytes(limit)


class _LingerTicker:
    """Bytewax calls a sink only when items arrive, so a partition no record reaches any
    more (the tail of a burst, a quiet topic) would hold its buffer until the epoch's
    snapshot (10 s by default); this thread applies BULK_LINGER_MS to it."""

    def __init__(self, period_s: float) -> None:
        self._parts: weakref.WeakSet[EsSinkPartition] = weakref.WeakSet()
        self._period_s = period_s
        threading.Thread(target=self._run, name="es-linger", daemon=True).start()

    def add(self, part: EsSinkPartition) -> None:
        self._parts.add(part)

    def _run(self) -> None:
        while True:
            time.sleep(self._period_s)
            for part in list(self._parts):
                try:
                    part.linger()
                except Exception:  # never expected; the worker's own calls still flush
                    logger.exception("linger check of a sink partition failed")


@functools.cache
def _linger_ticker(period_s: float) -> _LingerTicker:
    """One ticker per process, started when the first partition is built."""
    return _LingerTicker(period_s)


@functools.cache
def _bulk_pool(size: int) -> _BulkPool:
    """One pool per process, started on the first bulk (never when the flow is described)."""
    return _BulkPool(size)


def _refused(e: ApiError, what: str) -> ConfigError:
    """A request Elasticsearch will never accept as sent: name the settings to check."""
    status = e.meta.status
    reason = _reason(e.body) if isinstance(e.body, dict) else e.message
    hint = ""
    if status == 401:
        hint = " (check ES_USERNAME/ES_PASSWORD, ES_API_KEY or ES_BEARER_TOKEN)"
    elif status == 403:
        hint = " (the credentials lack a privilege: index, create_index or auto_configure)"
    return ConfigError(f"ES_HOSTS: Elasticsearch refused {what} with HTTP {status}: {reason}{hint}")


_PRESSURE = re.compile(r"(coordinating|primary)_operation_bytes=(\d+).*?max_\w*?bytes=(\d+)")


def _over_pressure_limit(reason: str, own_bytes: int = 0) -> bool:
    """True when an indexing-pressure 429 can never clear: the operation (for a primary
    operation, together with its own request's `own_bytes`) exceeds the node's limit."""
    m = _PRESSURE.search(reason)
    if m is None:
        return False
    need = int(m.group(2)) + (own_bytes if m.group(1) == "primary" else 0)
    return need > int(m.group(3))


def _reason(body: object) -> str:
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return f"{body['error'].get('type')}: {body['error'].get('reason')}"
    return str(body)[:500]


class _TooLarge(Exception):
    """The bulk request exceeded http.max_content_length (HTTP 413)."""


def _dead(action: Action, error_type: str, reason: str) -> DeadLetter:
    return DeadLetter(action.record, "index", f"elasticsearch.{error_type}", reason)


def check_credentials(settings: Settings) -> None:
    """Fail at start on what retrying cannot fix (bad credentials, an untrusted certificate);
    an unreachable node is fine: the sink waits for it."""
    client = shared_client(settings)
    try:
        client.cluster.health()
    except TlsError as e:
        msg = f"ES_CA_CERTS: TLS with {', '.join(settings.es_hosts)} failed: {e.message}"
        raise ConfigError(msg) from None
    except (TransportConnectionError, ConnectionTimeout) as e:
        logger.warning("Elasticsearch is not reachable yet (%s); the sink will wait", e.message)
    except ApiError as e:
        # 403 only means these credentials may not read cluster health (monitor); they may
        # still write, which is all the sink needs.
        if e.meta.status == 401:
            raise _refused(e, "the credentials") from None
        logger.warning(
            "Elasticsearch answered HTTP %d at start; the sink will retry", e.meta.status
        )


_template_lock = threading.Lock()
_templates_done: set[str] = set()


def _bootstrap_template(client: Elasticsearch, settings: Settings) -> None:
    """PUT the index template read from ES_INDEX_TEMPLATE_FILE at start, once per process."""
    path, body, name = (
        settings.es_index_template_file,
        settings.es_index_template,
        settings.es_index_template_name,
    )
    if not path or body is None or name is None:
        return
    with _template_lock:
        if path in _templates_done:
            return
        delay = 0.5
        while True:  # Elasticsearch may not be up yet: wait for it like the sink does
            try:
                client.indices.put_index_template(name=name, **body)
                break
            except (TransportConnectionError, ConnectionTimeout) as e:
                logger.warning("index template %s: %s; retrying in %.0fs", name, e.message, delay)
            except ApiError as e:
                if e.meta.status != 429 and e.meta.status < 500:
                    what = f"the index template in ES_INDEX_TEMPLATE_FILE {path}"
                    raise _refused(e, what) from None
                logger.warning("index template %s: HTTP %d; retrying", name, e.meta.status)
            time.sleep(delay)
            delay = min(delay * 2, 30)
        logger.info("index template %s installed from %s", name, path)
        _templates_done.add(path)
