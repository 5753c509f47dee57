"""What a flow process is doing, gathered for the status API from the parts that know:
the source partitions (positions, errors), Kafka (committed and end offsets), the sink
(buffers, bulks in flight), the retry loops, the error policy's hold and the metrics.

Nothing here runs on a Bytewax worker thread: the API's own thread reads plain attributes
the workers write, and asks Kafka and Elasticsearch with short timeouts, at most once a
`CACHE_S` however often it is polled.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime

from confluent_kafka import Consumer, KafkaException, TopicPartition
from elasticsearch import ApiError, Elasticsearch
from prometheus_client import REGISTRY

from flows import halt
from flows.api import api_urls, models
from flows.config import Settings
from flows.kafka import discovery
from flows.kafka.discovery import group_consumer
from flows.kafka.source import PartitionView, partitions
from flows.runtime import control, shutdown
from flows.runtime.args import RunArgs
from flows.runtime.version import VERSION
from sinks import failing, progress
from sinks.backoff import under_way
from sinks.elasticsearch.partition import buffered

logger = logging.getLogger(__name__)

CACHE_S = 2.0
"""Kafka's offsets and the readiness checks are reused for this long."""
TIMEOUT_S = 2.0
RATE_WINDOW_S = 60.0


def iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).isoformat(timespec="milliseconds")


def counter_total(name: str) -> dict[tuple[str, ...], float]:
    """The samples of counter `name` (without `_total`) by label values, from the registry
    (the one place the counts are kept)."""
    out: dict[tuple[str, ...], float] = {}
    for family in REGISTRY.collect():
        if family.name == name:
            for s in family.samples:
                if s.name == f"{name}_total":
                    out[tuple(s.labels.values())] = s.value
    return out


def behind(end: int | None, offset: int | None) -> int | None:
    """Records from `offset` to the log end (None when either is unknown)."""
    return None if end is None or offset is None else max(end - offset, 0)


@dataclass
class _Offsets:
    at: float = 0.0
    committed: dict[tuple[str, int], int | None] = field(default_factory=dict)
    end: dict[tuple[str, int], int | None] = field(default_factory=dict)
    error: str | None = None


class ProcessState:
    """The process as the API sees it; one per process, made by `flows.api.serve`."""

    def __init__(self, settings: Settings, run: RunArgs, process_id: int) -> None:
        self._settings = settings
        self._run = run
        self._process_id = process_id
        self._started = time.time()
        self._lock = threading.Lock()  # the rate samples and the readiness verdict
        self._offsets_lock = threading.Lock()  # the offsets consumer and its cache
        self._ready_lock = threading.Lock()  # the readiness consumer: /status never delays it
        self._consumer: Consumer | None = None
        self._ready_consumer: Consumer | None = None
        self._client: Elasticsearch | None = None
        self._offsets = _Offsets()
        self._ready: tuple[float, models.Ready] | None = None
        self._samples: deque[tuple[float, float, float]] = deque()

    # -- state

    def processes(self) -> int:
        """How many processes the cluster has (`-a`)."""
        return self._run.processes

    def state(self) -> models.State:
        """`failed` and `halted` win over `stopping`: they say why the process stops."""
        if failing.failing():
            return "failed"
        if halt.HELD:
            return "halted"
        if shutdown.requested():
            return "stopping"
        return "paused" if control.paused else "running"

    def halted(self) -> models.Halted | None:
        held = sorted(halt.HELD.items())
        if not held:
            return None
        (topic, partition), (offset, error) = held[0]
        return models.Halted(topic=topic, partition=partition, offset=offset, reason=str(error))

    # -- Kafka

    def _new_consumer(self) -> Consumer:
        """Made lazily, on the API's threads."""
        return group_consumer(self._settings)

    def offsets(self, views: list[PartitionView]) -> _Offsets:
        with self._offsets_lock:
            now = time.monotonic()
            keys = {(v.topic, v.partition) for v in views}
            cached = self._offsets
            if now - cached.at < CACHE_S and (keys <= cached.end.keys() or cached.error):
                return cached  # an error is reused too: a broker away is asked every 2 s
            fresh = _Offsets(at=now)
            try:
                if self._consumer is None:
                    self._consumer = self._new_consumer()
                consumer = self._consumer
                tps = [TopicPartition(t, p) for t, p in sorted(keys)]
                if tps:
                    for tp in consumer.committed(tps, timeout=TIMEOUT_S):
                        ok = tp.error is None and tp.offset >= 0
                        fresh.committed[(tp.topic, tp.partition)] = tp.offset if ok else None
                for t, p in sorted(keys):
                    _, high = consumer.get_watermark_offsets(
                        TopicPartition(t, p), timeout=TIMEOUT_S, cached=False
                    )
                    fresh.end[(t, p)] = high if high >= 0 else None
            except (KafkaException, RuntimeError) as e:
                fresh.error = f"Kafka: {e}"
            self._offsets = fresh
            return fresh

    def committed_lags(self) -> dict[tuple[str, int], int]:
        """end - committed of every partition this process reads and the group committed."""
        views = partitions()
        offsets = self.offsets(views)
        lags = {}
        for v in views:
            key = (v.topic, v.partition)
            lag = behind(offsets.end.get(key), offsets.committed.get(key))
            if lag is not None:
                lags[key] = lag
        return lags

    # -- readiness and liveness

    def ready(self) -> models.Ready:
        with self._ready_lock:
            cached = self._ready
            if cached is not None and time.monotonic() - cached[0] < CACHE_S:
                return cached[1]
            reasons: list[str] = []
            try:
                if self._ready_consumer is None:
                    self._ready_consumer = self._new_consumer()
                topics = self._settings.topics
                # One topic's metadata is enough to know the cluster answers.
                self._ready_consumer.list_topics(topics[0] if topics else None, TIMEOUT_S)
            except (KafkaException, RuntimeError) as e:
                reasons.append(f"Kafka does not answer: {e}")
            state = self.state()
            if state in ("halted", "failed"):
                reasons.insert(0, f"the flow is {state}")
            if not self._es_answers():
                reasons.append("Elasticsearch does not answer")
            answer = models.Ready(ready=not reasons, reasons=reasons)
            self._ready = (time.monotonic(), answer)
            return answer

    def last_ready(self) -> bool:
        """The latest readiness verdict, without asking anyone (for the metrics)."""
        cached = self._ready
        return cached is not None and cached[1].ready

    def _es_answers(self) -> bool:
        if self._client is None:
            from sinks.elasticsearch.client import make_client

            # Its own client: a ping must not queue behind the sink's bulks.
            self._client = make_client(self._settings.es_connection)
        try:
            # Not `ping()` (GET /): some distributions (the integ-test zips) do not serve it.
            self._client.options(request_timeout=TIMEOUT_S).cluster.health(timeout="1s")
        except ApiError:
            return True  # it answered (a 401/403 without the `monitor` privilege is an answer)
        except Exception:  # no answer at all is "not ready", never a 500
            return False
        return True

    def live(self) -> models.Live:
        stalest = progress.stalest_s()
        limit = self._settings.api_liveness_s
        if self.state() == "running" and stalest is not None and stalest > limit:
            reason = f"a worker made no progress for {stalest:.0f}s (API_LIVENESS_S={limit:g})"
            return models.Live(live=False, reason=reason)
        return models.Live(live=True)

    # -- rates

    def sample(self) -> None:
        """Remember the counters now (the API thread calls this every few seconds)."""
        now = time.monotonic()
        records = sum(counter_total("es_sink_records_in").values())
        docs = sum(counter_total("es_sink_docs_indexed").values())
        with self._lock:
            self._samples.append((now, records, docs))
            while self._samples and now - self._samples[0][0] > RATE_WINDOW_S:
                self._samples.popleft()

    def rates(self) -> models.Rates:
        self.sample()
        with self._lock:
            (t0, r0, d0), (t1, r1, d1) = self._samples[0], self._samples[-1]
        span = t1 - t0
        if span <= 0:
            return models.Rates(records_in_per_s=0.0, docs_indexed_per_s=0.0)
        return models.Rates(
            records_in_per_s=round((r1 - r0) / span, 1),
            docs_indexed_per_s=round((d1 - d0) / span, 1),
        )

    # -- the whole answer

    def status(self) -> models.Status:
        views = partitions()
        offsets = self.offsets(views)
        parts = []
        for v in views:
            key = (v.topic, v.partition)
            committed = offsets.committed.get(key)
            end = offsets.end.get(key)
            err = v.last_error
            if offsets.error and err is None:
                err = (time.time(), offsets.error)
            last = None if err is None else models.LastError(at=iso(err[0]), reason=err[1])
            parts.append(
                models.PartitionStatus(
                    topic=v.topic,
                    partition=v.partition,
                    position=v.position,
                    committed=committed,
                    end=end,
                    lag=behind(end, v.position),
                    committed_lag=behind(end, committed),
                    paused=v.paused,
                    held=v.held,
                    last_error=last,
                )
            )
        b = buffered()
        retries = [
            models.Retry(where=u.where, reason=u.reason, since=iso(u.since), attempts=u.attempts)
            for u in under_way()
        ]
        dead = {labels[0]: int(v) for labels, v in counter_total("es_sink_dead_letters").items()}
        pause = control.current()
        return models.Status(
            state=self.state(),
            version=VERSION,
            paused=pause is not None,
            paused_since=None if pause is None else iso(pause.since_ms / 1000),
            paused_by=None if pause is None else pause.by,
            process=models.ProcessInfo(
                id=self._process_id,
                processes=self._run.processes,
                workers=self._run.workers_per_process,
                pid=os.getpid(),
                group=self._settings.group_id,
                apis=api_urls(self._settings, self._run),
                started_at=iso(self._started),
                uptime_s=round(time.time() - self._started, 1),
                starting=not discovery.started(self._settings),
            ),
            partitions=parts,
            sink=models.SinkStatus(
                buffered_docs=b.docs,
                buffered_bytes=b.bytes,
                bulks_in_flight=b.bulks_in_flight,
                oldest_unflushed_s=None if b.oldest_s is None else round(b.oldest_s, 3),
                retries=retries,
            ),
            dead_letters=dead,
            rates=self.rates(),
            halted=self.halted(),
        )

    def close(self) -> None:
        for consumer in (self._consumer, self._ready_consumer):
            if consumer is not None:
                consumer.close()
