"""VERSION=offset where offsets of different partitions meet one document is refused.

Against the real broker and node: two topics into one index, one key. The newer write comes
from the topic with the smaller offset, so under external versioning it used to get a 409,
counted as done, and the document kept the older value.
"""

from __future__ import annotations

import pytest

from tests.support.flows import Services, create_topic, produce, run_flow, search_all

pytestmark = pytest.mark.integration


def test_offset_versions_over_two_topics_into_one_index_are_refused(
    services: Services, es: object, names: object
) -> None:
    a, b, index = names("ver-a"), names("ver-b"), names("ver-x")  # type: ignore[operator]
    for topic in (a, b):
        create_topic(services.kafka, topic)
    produce(services.kafka, a, [(b"k", b'{"v": %d}' % v) for v in range(1, 6)])
    produce(services.kafka, b, [(b"k", b'{"v": 6}')])  # the newest write, at offset 0
    env = {"KAFKA_TOPICS": f"{a},{b}", "KAFKA_GROUP_ID": index, "ES_INDEX": index}
    run = run_flow(services, {**env, "VERSION": "offset"})
    assert run.returncode != 0, f"ran and left {search_all(es, index)}"
    assert "configuration error: VERSION: VERSION=offset orders writes by Kafka offset" in (
        run.output
    )
    # Without external versions the sink's per-document order keeps the newest write.
    run = run_flow(services, env)
    assert run.returncode == 0, run.output[-3000:]
    assert search_all(es, index) == {"k": {"v": 6}}


def test_offset_versions_on_a_topic_of_two_partitions_are_refused(
    services: Services, es: object, names: object
) -> None:
    """One key in two partitions of a topic the group never read: its newest write has
    the lower offset, so under external versioning it got a 409, counted as done. A
    document per record (DOC_ID=coordinates) compares offsets of one partition only."""
    topic = names("ver-parts")  # type: ignore[operator]
    create_topic(services.kafka, topic, partitions=2)
    produce(services.kafka, topic, [(b"k", b'{"v": %d}' % v) for v in range(1, 6)], partition=0)
    produce(services.kafka, topic, [(b"k", b'{"v": 6}')], partition=1)  # newest, offset 0
    env = {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic, "VERSION": "offset"}
    run = run_flow(services, env)
    assert run.returncode != 0, f"ran and left {search_all(es, topic)}"
    assert f"VERSION: topic {topic} has 2 partitions and VERSION=offset with DOC_ID=key" in (
        run.output
    )
    assert "Traceback" not in run.output
    run = run_flow(services, {**env, "DOC_ID": "coordinates"})
    assert run.returncode == 0, run.output[-3000:]
    assert len(search_all(es, topic)) == 6
