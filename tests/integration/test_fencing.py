"""Fencing (issue 15, item 2): two instances of one KAFKA_GROUP_ID never both write and
commit. A rolling update's overlap against the real broker and node; clean and crashed
restarts do not wait for a lease they do not need.

Elasticsearch's `_seq_no` orders every write of a one-shard index, which tells whether
the older instance wrote anything after the newer one began: documents carry the name of
the instance that wrote them (`insert_field`), and every record its increasing `seq`
(VERSION=none, so a late older write would simply land last).
"""

from __future__ import annotations

import json
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from flows.kafka.fencing import FENCED_EXIT_STATUS, Owner
from tests.support.es_proxy import BulkCall, EsProxy
from tests.support.flows import (
    Services,
    consume_all,
    count_docs,
    create_topic,
    produce,
    run_flow,
    start_flow,
    wait_for,
)
from tools.devkit.kafka import committed as kafka_commits
from tools.devkit.kafka import end_offsets

pytestmark = pytest.mark.integration

LEASE_S = 7.0  # what the older instance advertises: twice -s 1, plus ES_REQUEST_TIMEOUT_S=5
_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def committed(kafka: str, group: str, topic: str, parts: int) -> list[TopicPartition]:
    """The group's committed offsets and metadata, per partition."""
    return kafka_commits(kafka, group, topic, parts)


def logged(log: Path, needle: str) -> list[str]:
    """The log lines that contain `needle`."""
    return [line for line in log.read_text(errors="replace").splitlines() if needle in line]


def logged_at(log: Path, needle: str) -> list[float]:
    """The times (epoch seconds) of the log lines that contain `needle`."""
    out = []
    for line in logged(log, needle):
        if m := _STAMP.match(line):
            out.append(datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S,%f").timestamp())
    return out


GONE = "and no longer runs on this host; waiting only for its bulks"


def b_read(log: Path) -> list[float]:
    """When B began reading each partition: after its wait, or at once as A had exited."""
    return logged_at(log, "taken over from") + logged_at(log, GONE)


def writer_config(tmp_path: Path, name: str) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"transforms:\n  - {{type: insert_field, field: writer, value: {name}}}\n")
    return str(path)


class Producer:
    """Writes `{"seq": n}` to a few hot keys, about 400 records a second, until stopped."""

    def __init__(self, kafka: str, topic: str) -> None:
        self._kafka, self._topic = kafka, topic
        self._stop = threading.Event()
        self.seq = 100_000
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            batch = []
            for _ in range(20):
                self.seq += 1
                key = f"hot-{self.seq % 40}".encode()
                batch.append((key, json.dumps({"seq": self.seq}).encode()))
            produce(self._kafka, self._topic, batch)
            time.sleep(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


@pytest.fixture
def procs() -> Iterator[list[Any]]:
    started: list[Any] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


def test_a_rolling_update_overlap_fences_the_older_instance(
    services: Services, names: Callable[[str], str], tmp_path: Path, es: Any, procs: list[Any]
) -> None:
    topic, group = names("fence"), names("fence-group")
    create_topic(services.kafka, topic, partitions=2)
    es.indices.create(index=topic, settings={"number_of_shards": 1, "number_of_replicas": 0})
    # Written by A only: B starts from A's committed offsets, past these.
    produce(services.kafka, topic, [(f"old-{i}".encode(), b'{"seq": %d}' % i) for i in range(300)])
    base = {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": group, "KAFKA_STOP_AT_END": "false"}
    producer = Producer(services.kafka, topic)
    log_a, log_b = tmp_path / "a.log", tmp_path / "b.log"
    env_a = {**base, "ES_SINK_CONFIG": writer_config(tmp_path, "A"), "ES_REQUEST_TIMEOUT_S": "5"}
    a = start_flow(services, env_a, log=log_a)
    procs.append(a)
    try:
        wait_for(
            lambda: all(tp.offset > 300 for tp in committed(services.kafka, group, topic, 2)),
            60,
            "A to index and commit",
        )
        env_b = {**base, "ES_SINK_CONFIG": writer_config(tmp_path, "B")}
        b = start_flow(services, env_b, log=log_b)
        procs.append(b)
        assert a.wait(60) == FENCED_EXIT_STATUS, log_a.read_text()
        history = OffsetHistory(services.kafka, group, topic)
        wait_for(lambda: len(b_read(log_b)) == 2, 60, "B to take over")
        time.sleep(3)
    finally:
        producer.stop()
    ends = end_offsets(services.kafka, topic)
    wait_for(
        lambda: (
            {tp.partition: tp.offset for tp in committed(services.kafka, group, topic, 2)} == ends
        ),
        60,
        "B to commit everything",
    )
    history.stop()
    b.send_signal(signal.SIGTERM)
    assert b.wait(60) == 0, log_b.read_text()

    # A held its partitions while B waited and stopped with one line at its first check after
    # B began to read. B waited on each partition it built while A ran; one it built after
    # A's exit it reads at once.
    announced = logged_at(log_b, "waiting FENCE_WAIT_S=7s before reading it")
    gone = logged_at(log_b, GONE)
    fenced = logged_at(log_a, "fenced: partition ")
    assert len(announced) >= 1 and len(fenced) == 1, log_a.read_text()
    assert len(announced) + len(gone) == 2, log_b.read_text()
    # Read at once only as A's process had gone: after A's last line, and A's pid is named.
    assert all(t >= fenced[0] for t in gone), (fenced, gone)
    gone_lines = logged(log_b, GONE)
    assert all(f"pid {a.pid}," in ln for ln in gone_lines), gone_lines
    took_over = logged_at(log_b, "taken over from")
    assert len(took_over) == len(announced), log_b.read_text()
    assert 0 <= fenced[0] - min(took_over) <= LEASE_S, (took_over, fenced)
    tokens = {Owner.parse(tp.metadata) for tp in committed(services.kafka, group, topic, 2)}
    (b_owner,) = tokens  # one owner for both partitions: B, released by its clean stop
    assert b_owner is not None and b_owner.released
    line = logged(log_a, "fenced: ")[0]
    assert re.search(
        rf"fenced: partition {topic}/[01] is owned by a newer instance {b_owner.token} "
        rf"\(host .+, pid {b.pid}, generation 2\) since .+; this instance stops without "
        rf"committing$",
        line,
    ), line
    assert "Traceback" not in log_a.read_text()

    # Nothing A wrote landed after B began; every key holds its latest record.
    docs = all_docs(es, topic)
    latest: dict[str, int] = {}
    for m in consume_all(services.kafka, topic, strict=True):
        latest[m.key().decode()] = json.loads(m.value())["seq"]
    assert {k: d["seq"] for k, d in docs.items()} == latest
    # One shard: its sequence numbers order the writes. A wrote nothing once B began.
    first_b = min(d["_seq_no"] for d in docs.values() if d["writer"] == "B")
    late = [k for k, d in docs.items() if d["writer"] == "A" and d["_seq_no"] > first_b]
    assert late == []
    assert {d["writer"] for k, d in docs.items() if k.startswith("old-")} == {"A"}
    assert {d["writer"] for k, d in docs.items() if k.startswith("hot-")} == {"B"}
    # The group's offsets never went back once A had stopped.
    assert history.samples and history.never_back(), history.samples


def all_docs(es: Any, index: str) -> dict[str, dict[str, Any]]:
    es.indices.refresh(index=index)
    hits = es.search(index=index, size=10_000, seq_no_primary_term=True)["hits"]["hits"]
    return {h["_id"]: {**h["_source"], "_seq_no": h["_seq_no"]} for h in hits}


class OffsetHistory:
    """The group's committed offsets, sampled every 0.2 s."""

    def __init__(self, kafka: str, group: str, topic: str) -> None:
        self.samples: list[dict[int, int]] = []
        self._stop = threading.Event()
        self._args = (kafka, group, topic)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        kafka, group, topic = self._args
        while not self._stop.wait(0.2):
            self.samples.append(
                {tp.partition: tp.offset for tp in committed(kafka, group, topic, 2)}
            )

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def never_back(self) -> bool:
        return all(
            later[p] >= earlier[p]
            for earlier, later in zip(self.samples, self.samples[1:], strict=False)
            for p in earlier
        )


def test_a_clean_restart_and_a_crash_on_this_host_do_not_wait(
    services: Services, names: Callable[[str], str], tmp_path: Path
) -> None:
    topic, group = names("fence-restart"), names("fence-restart-group")
    create_topic(services.kafka, topic, partitions=2)
    produce(services.kafka, topic, [(f"k{i}".encode(), b"{}") for i in range(50)])
    env = {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": group}
    first = run_flow(services, env)
    assert first.returncode == 0, first.output
    owners = [Owner.parse(tp.metadata) for tp in committed(services.kafka, group, topic, 2)]
    assert all(o is not None and o.released and o.gen == 1 for o in owners), owners

    # A clean stop released both partitions: the next start does not wait.
    produce(services.kafka, topic, [(b"k-again", b"{}")])
    again = run_flow(services, env)
    assert again.returncode == 0, again.output
    assert "FENCE_WAIT_S" not in again.output
    owners = [Owner.parse(tp.metadata) for tp in committed(services.kafka, group, topic, 2)]
    assert all(o is not None and o.released and o.gen == 2 for o in owners), owners

    # SIGKILL: nothing released, but the owner no longer runs on this host: no wait either.
    log = tmp_path / "killed.log"
    killed = start_flow(services, {**env, "KAFKA_STOP_AT_END": "false"}, log=log)
    wait_for(
        lambda: all(
            (o := Owner.parse(tp.metadata)) is not None and o.gen == 3
            for tp in committed(services.kafka, group, topic, 2)
        ),
        60,
        "the third run to announce itself",
    )
    killed.kill()
    killed.wait(30)
    after = run_flow(services, {**env, "FENCE_WAIT_S": "600"}, timeout=120)
    assert after.returncode == 0, after.output
    assert after.output.count(GONE) == 2, after.output
    assert "waiting FENCE_WAIT_S" not in after.output


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["stopped", "killed"])
def test_a_newer_instance_gone_while_it_waits_leaves_the_older_one_running(
    services: Services,
    names: Callable[[str], str],
    tmp_path: Path,
    es: Any,
    procs: list[Any],
    how: signal.Signals,
) -> None:
    topic, group = names("fence-gone"), names("fence-gone-group")
    create_topic(services.kafka, topic, partitions=2)
    produce(services.kafka, topic, [(f"a-{i}".encode(), b"{}") for i in range(100)])
    base = {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": group, "KAFKA_STOP_AT_END": "false"}
    log_o, log_n = tmp_path / "older.log", tmp_path / "newer.log"
    older = start_flow(services, base, log=log_o)
    procs.append(older)
    wait_for(
        lambda: sum(tp.offset for tp in committed(services.kafka, group, topic, 2)) == 100,
        60,
        "the older instance to index and commit",
    )
    # Long epochs: a killed newer instance never re-announces itself; lease 2 * 5 + 1 s.
    env_n = {**base, "FENCE_WAIT_S": "600", "ES_REQUEST_TIMEOUT_S": "1"}
    newer = start_flow(services, env_n, "-s", "5", log=log_n)
    procs.append(newer)
    wait_for(lambda: len(logged(log_n, "waiting FENCE_WAIT_S=600s")) == 2, 60, "the announcements")
    newer.send_signal(how)
    assert newer.wait(60) == (0 if how == signal.SIGTERM else -signal.SIGKILL), log_n.read_text()

    # The older instance keeps its partitions and goes on indexing and committing.
    produce(services.kafka, topic, [(f"b-{i}".encode(), b"{}") for i in range(100)])
    wait_for(lambda: count_docs(es, topic) == 200, 60, "the older instance to index the rest")
    wait_for(
        lambda: (
            all(
                (o := Owner.parse(tp.metadata)) is not None and o.gen == 1
                for tp in committed(services.kafka, group, topic, 2)
            )
            and sum(tp.offset for tp in committed(services.kafka, group, topic, 2)) == 200
        ),
        60,
        "the older instance to commit under its name",
    )
    assert older.poll() is None, log_o.read_text()
    assert logged(log_o, "fenced: ") == []
    back = logged(log_o, "; taking the partition back")
    assert len(back) == 2, log_o.read_text()
    # A stop while it waits releases nothing (whoever comes next must wait as it did):
    # either way the newer one falls silent and its lease passes.
    assert all("did not re-announce itself" in line for line in back), back
    older.send_signal(signal.SIGTERM)
    assert older.wait(60) == 0, log_o.read_text()


def holds_first_v1_of_x(seconds: float) -> Callable[[BulkCall], None]:
    """A proxy rule: the first bulk writing `x` → {"v": 1} is held `seconds`, then forwarded."""
    held: list[int] = []

    def rule(call: BulkCall) -> None:
        if not held and any(a.id == "x" and a.source == {"v": 1} for a in call.actions):
            held.append(call.n)
            call.hold(seconds)

    return rule


@pytest.mark.parametrize("first_commit", [True, False], ids=["after-a-commit", "before-any"])
def test_a_killed_owners_bulk_lands_before_its_restarted_successor_writes(
    services: Services,
    names: Callable[[str], str],
    tmp_path: Path,
    es: Any,
    procs: list[Any],
    first_commit: bool,
) -> None:
    """A bulk Elasticsearch received from a process that was then killed still runs; the
    process restarted at once on this host (no lease to wait) must not read before it is
    done, or the bulk's older write lands over the newer one. Also when the killed process
    was the partition's first owner and had committed nothing yet: it announced itself at
    its start offset, so its successor knows whose bulks to wait for."""
    topic, group = names("orphan"), names("orphan-group")
    create_topic(services.kafka, topic, partitions=1)
    es.indices.create(index=topic, settings={"number_of_shards": 1, "number_of_replicas": 0})
    with EsProxy(services.es_url) as proxy:
        proxy.rule = holds_first_v1_of_x(15)
        env = {
            "KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": group, "KAFKA_STOP_AT_END": "false",
            "ES_HOSTS": proxy.url, "DOC_ID": "key",
        }  # fmt: skip
        first = start_flow(services, env, "-s", "5", log=tmp_path / "first.log")
        procs.append(first)
        if first_commit:
            produce(services.kafka, topic, [(b"seed", b"{}")])
            wait_for(
                lambda: committed(services.kafka, group, topic, 1)[0].offset == 1,
                60,
                "the first run to commit under its name",
            )
        produce(services.kafka, topic, [(b"x", b'{"v": 1}')])
        wait_for(lambda: any(c.held_s for c in proxy.bulks), 60, "the bulk of x to be held")
        time.sleep(1)
        first.kill()
        first.wait(30)
        log = tmp_path / "second.log"
        second = start_flow(services, env, log=log)
        procs.append(second)
        produce(services.kafka, topic, [(b"x", b'{"v": 2}')])
        held = next(c for c in proxy.bulks if c.held_s)
        assert held.forwarded.wait(60), "the held bulk was never forwarded"
        end = 3 if first_commit else 2
        wait_for(
            lambda: committed(services.kafka, group, topic, 1)[0].offset == end,
            60,
            "the restarted run to commit both writes of x",
        )
        time.sleep(1)  # anything still on its way lands meanwhile
        es.indices.refresh(index=topic)
        assert es.get(index=topic, id="x")["_source"] == {"v": 2}  # was {"v": 1}
        second.send_signal(signal.SIGTERM)
        assert second.wait(60) == 0, log.read_text()
    assert len(logged(log, GONE)) == 1, log.read_text()
    waited = logged(log, "Elasticsearch still runs 1 bulk tasks of the previous owner")
    assert len(waited) == 1, log.read_text()
