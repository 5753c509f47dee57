"""A partition of the Elasticsearch sink: buffering, dispatch, linger, snapshot and close.

Each document is routed to one of ES_SINK_PARTITIONS partitions by a stable hash of its id
(done upstream, in `flows.process`), so all writes to one document go through one
partition, in order. A partition buffers encoded actions and, when BULK_MAX_ACTIONS,
BULK_MAX_BYTES or BULK_LINGER_MS is reached, hands the buffer to a background thread that
sends it (`workers`), so the worker goes on reading and encoding while Elasticsearch
indexes. At a size limit only the full requests go; the few actions past it wait for the
next bulk. A partition has at most one buffer in flight (which keeps writes to a document in
order) and a process at most ES_MAX_IN_FLIGHT; `write_batch` waits for the partition's
previous one, which bounds memory and back-pressures the source. `snapshot()` sends the
rest and waits for all of it: Bytewax finishes an epoch, and the source then commits its
offsets, only after every `snapshot()` returned.

What each item of an answer means is `bulk.classify`'s; this module retries with backoff
(`sinks.backoff`, full jitter) what it says to retry, splits what is too large, and
accounts every failed record once, whichever attempt or 413 split found it: dead-lettered
with stage `index`, or the flow stops under ERRORS_TOLERANCE=none. A request that timed
out may still be queued on a node: nothing is sent again before Elasticsearch no longer
lists it (`tasks`), so it cannot land after the retry's or a later bulk's newer writes.

The state a partition snapshots is None: with deterministic ids the index itself is the
state, and replays overwrite.
"""

from __future__ import annotations

import functools
import logging
import random
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Future, wait
from dataclasses import dataclass

from bytewax.outputs import StatefulSinkPartition
from elastic_transport import ConnectionTimeout
from elasticsearch import Elasticsearch

from sinks import failing, metrics, progress
from sinks.backoff import SYSTEM_CLOCK, Backoff, Clock
from sinks.dead_letter.policy import ErrorPolicy
from sinks.dead_letter.producer import DeadLetterProducer
from sinks.elasticsearch import bulk, refusals, tasks
from sinks.elasticsearch.config import EsSinkConfig
from sinks.elasticsearch.refusals import clear_refusals
from sinks.elasticsearch.workers import POLL_S, bulk_pool, held_bytes
from sinks.errors import ConfigError, ElasticsearchUnavailableError
from sinks.model import Action, DeadLetter
from sinks.resources import members

logger = logging.getLogger(__name__)

_WARN_EVERY_S = 30.0
SUMMARY_EVERY_S = 60.0

Chunk = list[Action]

__all__ = ["Buffered", "Chunk", "EsSinkPartition", "buffered", "clear_refusals"]

_LIVE: weakref.WeakSet[EsSinkPartition] = weakref.WeakSet()


@dataclass(frozen=True, slots=True)
class Buffered:
    """What this process's sink partitions hold and send right now."""

    docs: int
    bytes: int
    bulks_in_flight: int
    oldest_s: float | None
    """Age of the oldest buffered action that no bulk has taken yet (None: nothing)."""


def buffered() -> Buffered:
    """A look at every live partition from another thread (the status API): plain reads,
    no lock, so a figure may be one write behind."""
    now = SYSTEM_CLOCK.monotonic()
    docs = size = flying = 0
    oldest: float | None = None
    for part in members(_LIVE):
        n = len(part._buf)
        docs += n
        size += part._bytes
        inflight = part._inflight
        flying += inflight is not None and not inflight.done()
        if n and (oldest is None or part._oldest < oldest):
            oldest = part._oldest
    return Buffered(docs, size, flying, None if oldest is None else max(now - oldest, 0.0))


class EsSinkPartition(StatefulSinkPartition[Chunk, None]):
    """One buffer filling and one in flight; see the module docstring."""

    def __init__(
        self,
        config: EsSinkConfig,
        name: str,
        client: Elasticsearch,
        dlq: DeadLetterProducer | None,
        clock: Clock = SYSTEM_CLOCK,
        rand: Callable[[], float] = random.random,
        owner: str | None = None,
    ) -> None:
        """`owner`: the process's token, which its bulks carry (None: untagged)."""
        self._name = name
        self._owner = owner
        self._client = (
            client if owner is None else client.options(opaque_id=tasks.opaque_id(owner, name))
        )
        self._timeout_s = config.connection.request_timeout_s
        self._dlq = dlq
        self._clock = clock
        self._rand = rand
        self._policy = ErrorPolicy(config.tolerance, f"sink partition {name}")
        self._rules = bulk.Rules.of(config.documents)
        retry = config.retry
        self._item_retry_max = retry.item_retry_max
        self._budget_s = retry.budget_s
        self._backoff = Backoff(retry.initial_ms / 1000, retry.max_ms / 1000, retry.budget_s)
        self._max_in_flight = config.bulk.max_in_flight
        self._buf: list[Action] = []
        self._inflight: Future[None] | None = None
        self._held = held_bytes(config.bulk.buffer_bytes)
        self._held.enter()
        weakref.finalize(self, self._held.leave)
        self._lock = threading.Lock()  # the worker's calls vs the linger ticker
        self._worker = threading.get_ident()  # Bytewax builds a partition on its worker
        self._broken = False
        self._stopping = False  # this partition stops the flow on a refused record
        self._bytes = 0
        self._oldest = 0.0
        self._max_actions = config.bulk.max_actions
        self._max_bytes = config.bulk.max_bytes
        self._linger_s = config.bulk.linger_ms / 1000
        self._gauge = metrics.BUFFERED.labels(name)
        self._stats = {"indexed": 0, "dead_lettered": 0, "deletes_not_found": 0, "bulks": 0}
        self._summary_at = clock.monotonic()
        _LIVE.add(self)

    # -- Bytewax calls

    @progress.tracked
    def write_batch(self, items: list[Chunk]) -> None:
        """Buffer the actions; send them in the background once a limit is reached."""
        with self._lock:
            now = self._clock.monotonic()
            if not self._buf:
                self._oldest = now
            added = 0
            for chunk in items:
                self._buf.extend(chunk)
                added += sum([len(a.data) for a in chunk])
            self._bytes += added
            over_budget = self._held.add(added)
            if len(self._buf) >= self._max_actions or self._bytes >= self._max_bytes:
                self._dispatch(tail_since=now)
            elif self._idle() and now - self._oldest >= self._linger_s:
                self._dispatch()
            elif over_budget:
                self._over_budget()
            self._gauge.set(len(self._buf))

    @progress.tracked
    def snapshot(self) -> None:
        """Make everything buffered durable before Bytewax closes the epoch.

        Bytewax snapshots a worker's partitions one after another, and the worker reads
        nothing until the last returns. Each snapshot first sends the buffer of every idle
        partition of this worker, so their bulks are in flight together (ES_MAX_IN_FLIGHT
        permitting) instead of one partition's after another's: the epoch's end then
        costs the worker about one bulk's time, not one per partition (p99 latency)."""
        for part in members(_LIVE):
            if part._worker == self._worker:
                part.send_if_idle(0.0)
        self.flush()
        progress.epoch_closed()
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
        """Send nothing and wait for nothing.

        Bytewax (0.21.1, checked) calls close() after the last snapshot() at a clean end of
        input, when nothing is buffered, and also while unwinding after any error in the
        flow, when sending would only delay the stop or block it. Whatever is still
        buffered then was never committed: the next run reads it again. The shared client
        stays open.
        """
        self._broken = True  # the linger ticker must not send it either
        _LIVE.discard(self)
        if self._buf:
            logger.info(
                "sink partition %s: stopping with %d actions unsent (not committed)",
                self._name, len(self._buf),
            )  # fmt: skip

    # -- buffering

    def flush(self) -> None:
        """Send the whole buffer and wait until everything sent so far is written."""
        with self._lock:
            self._dispatch()
            self._join()

    def linger(self) -> None:
        """Send a buffer that waited BULK_LINGER_MS (from the ticker thread, see
        `workers._LingerTicker`) unless the partition is busy, broken or has a bulk in
        flight."""
        self.send_if_idle(self._linger_s)

    def send_if_idle(self, min_age_s: float) -> None:
        """Send the buffer if its oldest action waited `min_age_s`, unless the partition is
        busy (its lock taken), broken or has a bulk in flight. Never blocks."""
        if not self._buf or not self._lock.acquire(blocking=False):
            return
        try:
            if not failing.failing() and self._clock.monotonic() - self._oldest >= min_age_s:
                self._send_from_outside()
        finally:
            self._lock.release()

    def send_before_stop(self, deadline: float) -> bool:
        """Another partition stops the flow on a refused record (`refusals.stop_on`): send
        this buffer, which may hold earlier records of the same Kafka partition; Bytewax
        calls no snapshot() once that partition raised. Waits for this partition's lock
        and bulk in flight until `deadline` (time.monotonic(); a past one: not at all).
        False: it was busy, try again with a later deadline."""
        if self._stopping or self._broken or failing.failing():
            return True
        if not self._lock.acquire(timeout=refusals.left(deadline)):
            return False
        try:
            if self._inflight is not None:
                wait([self._inflight], timeout=refusals.left(deadline))
            return self._send_from_outside()
        finally:
            self._lock.release()

    def _send_from_outside(self) -> bool:
        """Under the lock, from a thread that is not this partition's worker: send the
        buffer unless the partition is broken, has a bulk in flight, or its last bulk failed
        (its worker's own `_join` raises that error, so it is not joined here). False: a
        bulk is still in flight."""
        if not self._idle():
            return False
        inflight = self._inflight
        if self._buf and not self._broken and (inflight is None or inflight.exception() is None):
            self._dispatch()
        return True

    def _idle(self) -> bool:
        """No bulk of this partition in flight. BULK_LINGER_MS applies only then: while one
        is in flight the buffer grows towards a full bulk (throughput under a backlog), and
        when none is, records wait at most the linger (latency when traffic is light)."""
        return self._inflight is None or self._inflight.done()

    def _over_budget(self) -> None:
        """The process holds ES_SINK_BUFFER_BYTES, buffered or in flight. Send this buffer
        if it is at least this partition's share of the budget; otherwise wait until bulks
        in flight are written (back-pressure). Sending whatever was buffered made every
        write a tiny bulk once in-flight bulks alone filled the budget (4 x 8 MiB > 24 MiB
        with the defaults)."""
        if self._bytes >= self._held.share(self._max_bytes):
            self._dispatch()
        else:
            self._held.wait_below_limit()

    def _dispatch(self, tail_since: float | None = None) -> None:
        """Wait for this partition's bulk in flight, then send the buffer in the background.

        With `tail_since` (the time the latest write came in), send only the requests the
        buffer fills up to a limit and keep the rest, which came with that write, for the
        next bulk: a buffer a write took a few actions past BULK_MAX_ACTIONS would
        otherwise make a second request of those few, each with Elasticsearch's
        per-request cost."""
        self._join()
        if not self._buf:
            return
        buf, size = self._buf, self._bytes
        self._buf = []
        if tail_since is not None:
            n, whole = bulk.whole_requests(buf, size, self._max_actions, self._max_bytes)
            if 0 < n < len(buf):  # (0 only with a byte count gone wrong: send it all)
                buf, self._buf, size = buf[:n], buf[n:], whole
                self._oldest = tail_since
        self._held.sending(size)
        self._bytes -= size
        self._gauge.set(len(self._buf))
        send = functools.partial(self._send_all, total=size)
        self._inflight = bulk_pool(self._max_in_flight).submit(send, buf)

    def _join(self) -> None:
        """Wait for the bulk in flight; its error (the flow stops on it) is raised here."""
        inflight, self._inflight = self._inflight, None
        if inflight is None:
            return
        try:
            while not inflight.done():
                wait([inflight], timeout=POLL_S)
                progress.beat()
                if not inflight.done() and failing.failing():
                    msg = (
                        f"sink partition {self._name}: stopped waiting for its bulk in flight: "
                        "the flow is stopping on an earlier error"
                    )
                    raise ElasticsearchUnavailableError(msg)
            inflight.result()
        except refusals.Refused as refused:
            self._stopping = True
            try:
                peers = [p for p in members(_LIVE) if p is not self]
                error = refusals.stop_on(refused.key, peers, bulk_pool(self._max_in_flight))
            finally:
                self._fail()
            raise error from None
        except BaseException:
            self._fail()
            raise

    def _fail(self) -> None:
        # Bytewax now unwinds and calls close() on every partition: nothing more is sent.
        self._broken = True
        failing.mark()

    # -- sending (on a pool thread)

    def _send_all(self, buf: list[Action], total: int) -> None:
        """Send `buf` (`total` bytes) in bulks no larger than the configured limits."""
        sent = 0
        try:
            requests = bulk.chunks(
                buf, self._max_actions, self._max_bytes, total, scripts_apart=self._rules.scripts
            )
            for chunk, size in requests:
                self._send(chunk)
                self._held.release(size)
                sent += len(chunk)
        finally:
            if sent < len(buf):  # the flow stops on this error; keep the count right
                self._held.release(sum(len(a.data) for a in buf[sent:]))

    def _send(self, actions: list[Action]) -> None:
        """Write `actions` until each is done or failed for good, then account every failed
        record once, whichever attempt or 413 split found it."""
        call = bulk.Call(self._backoff.start(self._clock, self._rand))
        self._write(actions, call)
        bad = call.failed_records(actions)
        indexed = len(actions) - len(call.rejected)
        metrics.DOCS_INDEXED.inc(indexed)
        self._stats["indexed"] += indexed
        if call.not_found:
            metrics.DELETES_NOT_FOUND.inc(len(call.not_found))
            self._stats["deletes_not_found"] += len(call.not_found)
        self._account(actions, bad)
        if bad:
            self._stats["dead_lettered"] += len(bad)
            if self._dlq is not None:
                self._dlq.send(list(bad.values()))
            elif not self._policy.skips:  # ERRORS_TOLERANCE=log: `_account` logged them
                msg = "rejected documents but no DLQ_TOPIC"  # none raised in `_account`
                raise ConfigError(msg)

    def _write(self, pending: list[Action], call: bulk.Call) -> None:
        """Send `pending` and retry what is transient, with backoff; a 413 halves it."""
        while pending:
            verdict = self._attempt(pending, call)
            if verdict.too_large is not None:
                # HTTP 413: halve the request; a single action that is still too large
                # is rejected for good.
                if len(pending) == 1:
                    dead = bulk.dead(pending[0], "request_entity_too_large", verdict.too_large)
                    call.rejected[id(pending[0])] = dead
                    return
                half = len(pending) // 2
                self._write(pending[:half], call)
                self._write(pending[half:], call)
                return
            if not verdict.retry:
                return
            retry = [pending[i] for i in verdict.retry]
            retries, why = call.retries, verdict.why
            delay = retries.next_delay()
            if verdict.budgeted and retries.over_budget():
                msg = (
                    f"sink partition {self._name}: {len(retry)} actions still not written "
                    f"after {retries.elapsed():.0f}s (ES_RETRY_BUDGET_S={self._budget_s}): {why}"
                )
                raise ElasticsearchUnavailableError(msg)
            if failing.failing():
                msg = (
                    f"sink partition {self._name}: stopped retrying {len(retry)} actions "
                    f"({why}): the flow is stopping on an earlier error"
                )
                raise ElasticsearchUnavailableError(msg)
            now = self._clock.monotonic()
            if now - call.last_warning >= _WARN_EVERY_S or retries.count == 1:
                logger.warning(
                    "sink partition %s: retrying %d of %d actions in %.2fs (attempt %d): %s",
                    self._name, len(retry), len(pending), delay, retries.count, why,
                )  # fmt: skip
                call.last_warning = now
            retries.sleep(delay, "bulk", why)
            pending = retry

    def _attempt(self, pending: list[Action], call: bulk.Call) -> bulk.Verdict:
        """One bulk request and what its answer means (already applied to `call`)."""
        self._stats["bulks"] += 1
        try:
            answer = bulk.send(self._client, pending)
        except bulk.TRANSPORT_ERRORS as e:
            if isinstance(e, ConnectionTimeout):
                self._outlive(call)
            verdict = bulk.classify_failure(e, len(pending))
        else:
            verdict = bulk.classify(
                pending,
                answer,
                call,
                rules=self._rules,
                item_retry_max=self._item_retry_max,
            )
        call.record(pending, verdict)
        if verdict.stop is not None:
            raise verdict.stop
        return verdict

    def _outlive(self, call: bulk.Call) -> None:
        """Send nothing more while Elasticsearch may still execute the request that timed
        out (it lists it), within ES_RETRY_BUDGET_S."""
        if self._owner is None:
            return
        what: str | None = f"sink partition {self._name}'s timed-out request"
        listed = False  # seen still queued: unlistable later, it may still be
        while True:
            gone = tasks.wait_gone(
                self._client, self._owner, self._name, self._timeout_s, what, failing.failing
            )
            what = None  # said once
            listed = listed or gone is tasks.Gone.BOUND
            if gone is tasks.Gone.NONE or gone is tasks.Gone.DONE:
                return
            if gone is tasks.Gone.UNLISTED and not listed:  # never seen: waited the bound
                return
            if call.retries.over_budget() or failing.failing():
                msg = (
                    f"sink partition {self._name}: a request that timed out is still queued "
                    f"in Elasticsearch after {call.retries.elapsed():.0f}s "
                    f"(ES_RETRY_BUDGET_S={self._budget_s})"
                )
                raise ElasticsearchUnavailableError(msg)

    def _account(self, actions: list[Action], bad: dict[int, DeadLetter]) -> None:
        """Apply the error policy to the failed records, in request order. A record counts
        once however many of its actions (fan-out) were sent or failed."""
        policy = self._policy
        if not bad:
            policy.end_batch(len(actions), 0, 0)
            return
        if not policy.tolerate:
            raise refusals.register(bad.values(), policy)
        run = policy.consecutive
        ok = 0
        counted: set[int] = set()
        for action in actions:
            key = id(action.origin)
            dl = bad.get(key)
            if dl is None:
                run = 0
                ok += 1
            elif key not in counted:
                counted.add(key)
                run += 1
                policy.failed(dl, run)
        policy.end_batch(ok, len(bad), run, next(reversed(bad.values())))
