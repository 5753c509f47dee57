"""Taking over from a real Kafka Connect worker (`es-sink migrate`), beside the suite's Kafka
and Elasticsearch.

A standalone Connect 4.1.1 worker (the jars scripts/provision caches; its REST API on
ES_SINK_TEST_CONNECT_PORT) runs the FileStreamSink connector over a topic, so that the
group `connect-<name>` holds real commits. The documents the Elasticsearch sink connector
would have written for the records below those commits are written beforehand in its id and
index format (`topic+partition+offset` in the index named after the topic), then the
connector is stopped, its offsets moved with `es-sink migrate offsets`, and the flow, set up
by `es-sink migrate config`, indexes exactly the records after them: no duplicate id, every
record present, also after a replay of the last records; `es-sink verify` agrees. The way
back (the flow's offsets copied to the connector's group) resumes the connector after the
flow's last record.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from flows.kafka.fencing import Owner, metadata_fields
from sinks.elasticsearch.index_names import connect_index_name
from tests.support.flows import Services, create_topic, produce, run_cli, run_flow, wait_for
from tools.devkit.connect import Worker
from tools.devkit.kafka import add_partitions, committed

pytestmark = pytest.mark.system

PORT = int(os.environ.get("ES_SINK_TEST_CONNECT_PORT", "19290"))
START_LIMIT_S = 30.0


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    from tests.support.flows import KAFKA

    w = Worker(KAFKA, PORT, tmp_path_factory.mktemp("connect"))
    took = w.start()
    try:
        assert took < START_LIMIT_S, f"the Connect worker took {took:.1f}s to answer"
        yield w
    finally:
        w.close()


def value(topic: str, partition: int, offset: int) -> bytes:
    return json.dumps({"p": partition, "o": offset, "topic": topic}).encode()


def records(topic: str, partition: int, start: int, n: int) -> list[tuple[bytes, bytes]]:
    return [
        (f"k{partition}-{o}".encode(), value(topic, partition, o)) for o in range(start, start + n)
    ]


def produce_to(services: Services, topic: str, partition: int, start: int, n: int) -> None:
    produce(services.kafka, topic, records(topic, partition, start, n), partition=partition)


def commits(services: Services, group: str, topic: str) -> dict[int, tuple[int, str]]:
    return {
        tp.partition: (tp.offset, tp.metadata or "")
        for tp in committed(services.kafka, group, topic)
    }


def docs(es: Any, index: str) -> dict[str, tuple[int, dict[str, Any]]]:
    """id -> (_seq_no, _source) of every document of `index`."""
    es.indices.refresh(index=index)
    found = es.search(index=index, size=1000, seq_no_primary_term=True, sort=["_doc"])
    return {h["_id"]: (h["_seq_no"], h["_source"]) for h in found["hits"]["hits"]}


def delete_groups(services: Services, *groups: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": services.kafka})
    for future in admin.delete_consumer_groups(list(groups)).values():
        with contextlib.suppress(Exception):  # a group never made is fine
            future.result(20)


@pytest.fixture
def topic(services: Services, names: Callable[[str], str]) -> Iterator[str]:
    """`_T-MIG-...`: an upper-case topic with a leading `_`, so the connector's index name
    (`t-mig-...`, which `names` deletes afterwards) differs from it by two rules."""
    from confluent_kafka.admin import AdminClient

    name = "_" + names("mig").upper()
    yield name
    admin = AdminClient({"bootstrap.servers": services.kafka})
    if name in admin.list_topics(timeout=20).topics:
        admin.delete_topics([name])[name].result(30)


def test_the_flow_takes_over_from_a_connector_at_its_committed_offsets(
    services: Services, worker: Worker, topic: str, es: Any, tmp_path: Path
) -> None:
    name = topic.lower().strip("_") + "-conn"
    connect_group, flow_group = f"connect-{name}", f"es-sink-{name}"
    index = connect_index_name(topic)
    assert index == topic[1:].lower()
    create_topic(services.kafka, topic, partitions=3)
    produce_to(services, topic, 0, 0, 30)
    produce_to(services, topic, 1, 0, 20)  # partition 2 stays empty
    worker.create(name, {
        "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
        "tasks.max": "1", "topics": topic, "file": str(tmp_path / "sink.txt"),
    })  # fmt: skip
    worker.wait_state(name, "RUNNING")
    try:
        wait_for(
            lambda: (
                {p: o for p, (o, _) in commits(services, connect_group, topic).items()}
                == {0: 30, 1: 20, 2: 0}
            ),
            60,
            "the connector's commits",
        )
        # what the Elasticsearch sink connector would have indexed below its commits
        es.indices.create(index=index, settings={"number_of_shards": 1})
        for p, n in ((0, 30), (1, 20)):
            for o in range(n):
                es.index(
                    index=index, id=f"{topic}+{p}+{o}", document=json.loads(value(topic, p, o))
                )
        before = docs(es, index)
        last_connector_write = max(seq for seq, _ in before.values())
        assert len(before) == 50

        # the flow's settings, as migrate config makes them of the connector's sink twin
        sink = tmp_path / "connector.json"
        sink.write_text(json.dumps({"name": name, "config": {
            "connector.class": "io.confluent.connect.elasticsearch.ElasticsearchSinkConnector",
            "topics": topic, "connection.url": "http://es:9200", "key.ignore": "true",
            "schema.ignore": "true", "behavior.on.null.values": "ignore",
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter.schemas.enable": "false",
        }}))  # fmt: skip
        config_path = tmp_path / "es-sink.yaml"
        made = run_cli(services, {}, "migrate", "config", str(sink), "-o", str(config_path))
        assert made.exit_code == 0, made.stdout + made.stderr
        settings = yaml.safe_load(config_path.read_text())
        assert settings["kafka_group_id"] == flow_group
        assert (settings["doc_id"], settings["doc_id_separator"]) == ("coordinates", "+")
        env = {"ES_SINK_CONFIG": str(config_path)}  # ES_HOSTS, the Kafka: the suite's
        assert run_cli(services, env, "check").exit_code == 0

        # refused while the connector runs, and while it is paused (its task stays a member)
        move = ("migrate", "offsets", "--from-group", connect_group, "--probe-s", "2")
        for _ in ("running", "paused"):
            refused = run_cli(services, env, *move)
            assert refused.exit_code == 1, refused.stdout + refused.stderr
            assert f"the connector's group {connect_group} has 1 active members" in refused.stderr
            if _ == "running":
                worker.pause(name)
        worker.stop_connector(name)
        wait_for(lambda: _members(services, connect_group) == 0, 30, "the group to empty")

        # records after the connector's commits, and a partition it never read
        produce_to(services, topic, 0, 30, 10)
        produce_to(services, topic, 1, 20, 5)
        add_partitions(services.kafka, topic, 4)
        produce_to(services, topic, 3, 0, 4)

        dry = run_cli(services, env, *move, "--dry-run")
        assert dry.exit_code == 0, dry.stderr
        assert f"would copy {topic}/0: {connect_group} 30 -> {flow_group} (was -" in dry.stdout
        assert f"would copy {topic}/2: {connect_group} 0 -> {flow_group}" in dry.stdout
        assert f"{topic}/3: never committed by {connect_group}: the flow starts it at earliest" in (
            dry.stdout
        )
        assert commits(services, flow_group, topic)[0][0] < 0  # a dry run changes nothing
        moved = run_cli(services, env, *move, "--json")
        assert moved.exit_code == 0, moved.stderr
        starts = {c["partition"]: (c["to"], c["start"]) for c in moved.json()["changes"]}
        assert starts == {0: (30, "committed"), 1: (20, "committed"), 2: (0, "committed"),
                          3: (None, "earliest")}  # fmt: skip
        copied = commits(services, flow_group, topic)
        assert {p: o for p, (o, _) in copied.items() if o >= 0} == {0: 30, 1: 20, 2: 0}
        fields = metadata_fields(copied[0][1])
        assert (fields["partitions"], fields["reset-by"], fields["migrated-from"]) == (
            "4", "es-sink", connect_group,
        )  # fmt: skip
        assert Owner.parse(copied[0][1]) is None  # no owner: the flow waits for none

        # the flow indexes exactly the records after the connector's commits
        flow = run_flow(services, env, timeout=180)
        assert flow.returncode == 0, flow.output[-3000:]
        assert "waiting FENCE_WAIT_S" not in flow.output  # the copy names no owner to wait for
        after = docs(es, index)
        expected = {f"{topic}+{p}+{o}" for p, n in ((0, 40), (1, 25), (3, 4)) for o in range(n)}
        assert set(after) == expected  # every record, each once
        rewritten = {i for i in before if after[i][0] != before[i][0]}
        assert rewritten == set()  # none below the commits written again
        assert all(seq > last_connector_write for i, (seq, _) in after.items() if i not in before)
        for doc_id, (_, source) in after.items():
            _, p, o = doc_id.rsplit("+", 2)
            assert source == json.loads(value(topic, int(p), int(o)))
        assert {p: o for p, (o, _) in commits(services, flow_group, topic).items()} == {
            0: 40, 1: 25, 2: 0, 3: 4,
        }  # fmt: skip

        # a replay of the last records overwrites, never duplicates
        reset = run_cli(services, env, "offsets", "reset", "--to", "35", "--partition", "0",
                        "--probe-s", "0")  # fmt: skip
        assert reset.exit_code == 0, reset.stderr
        again = run_flow(services, env, timeout=180)
        assert again.returncode == 0, again.output[-3000:]
        replayed = docs(es, index)
        assert set(replayed) == expected
        assert {i for i in replayed if replayed[i][0] != after[i][0]} == {
            f"{topic}+0+{o}" for o in range(35, 40)
        }
        verified = run_cli(services, env, "verify")
        assert verified.exit_code == 0, verified.stdout + verified.stderr
        assert "missing=0 stale=0 undeleted=0 extra=0 lost=0" in verified.stdout

        # the way back: the flow's offsets to the connector's group, then resume it
        back = run_cli(services, env, "migrate", "offsets", "--from-group", flow_group,
                       "--to-group", connect_group, "--probe-s", "1")  # fmt: skip
        assert back.exit_code == 0, back.stderr
        assert {p: (o, m) for p, (o, m) in commits(services, connect_group, topic).items()} == {
            0: (40, ""), 1: (25, ""), 2: (0, ""), 3: (4, ""),
        }  # fmt: skip
        lines_before = (tmp_path / "sink.txt").read_text().count("\n")
        assert lines_before == 50
        worker.resume(name)
        produce_to(services, topic, 1, 25, 3)
        wait_for(
            lambda: (tmp_path / "sink.txt").read_text().count("\n") >= lines_before + 3,
            60,
            "the resumed connector's writes",
        )
        written = (tmp_path / "sink.txt").read_text().splitlines()[lines_before:]
        assert [json.loads(line)["o"] for line in written] == [25, 26, 27]
    finally:
        try:
            worker.delete(name)
        finally:
            delete_groups(services, connect_group, flow_group)


def test_migrate_config_reads_a_running_workers_connector(
    services: Services, worker: Worker, names: Callable[[str], str], tmp_path: Path
) -> None:
    topic = names("migconf")
    name = f"{topic}-conn"
    create_topic(services.kafka, topic)
    worker.create(name, {
        "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
        "topics": topic, "file": str(tmp_path / "out.txt"), "tasks.max": "2",
    })  # fmt: skip
    try:
        result = run_cli(services, {}, "migrate", "config", "--connect-url", worker.url,
                         "--connector", name, "--json")  # fmt: skip
        assert result.exit_code == 1  # the FileStreamSink is not the Elasticsearch sink
        body = result.json()
        assert body["connector"] == name
        assert body["origin"] == f"{worker.url}/connectors/{name}"
        rows = {r["option"]: r for r in body["options"]}
        assert rows["connector.class"]["status"] == "not supported"
        assert rows["topics"]["setting"] == f"KAFKA_TOPICS={topic}"
        assert rows["tasks.max"]["setting"] == "-w 2"
        assert rows["file"]["status"] == "not supported"  # not an option it knows
        # --bootstrap-servers: a keyed connector of a one-partition topic keeps offset versions
        keyed = tmp_path / "keyed.json"
        keyed.write_text(json.dumps({"name": name, "config": {
            "topics": topic, "connection.url": "http://es:9200", "schema.ignore": "true",
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter.schemas.enable": "false",
        }}))  # fmt: skip
        asked = run_cli(services, {}, "migrate", "config", str(keyed), "--json",
                        "--bootstrap-servers", services.kafka)  # fmt: skip
        assert asked.exit_code == 0, asked.stderr
        assert asked.json()["settings"]["version"] == "offset"
        missing = run_cli(services, {}, "migrate", "config", "--connect-url", worker.url,
                          "--connector", "nope")  # fmt: skip
        assert missing.exit_code == 2
        assert "has no connector 'nope'" in missing.stderr
    finally:
        worker.delete(name)
        delete_groups(services, f"connect-{name}")


def _members(services: Services, group: str) -> int:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": services.kafka})
    try:
        return len(admin.describe_consumer_groups([group])[group].result(20).members)
    except Exception:
        return 0
