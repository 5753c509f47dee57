"""Kafka headers into documents, ids, indices and routing, end to end (real broker and
node): present, missing (left out, or the default), repeated, null and non-UTF-8 (base64)."""

from __future__ import annotations

import base64

import pytest

from tests.support.flows import committed_offsets, create_topic, produce, run_flow
from tools.devkit.es import hits_by_id

pytestmark = pytest.mark.integration

BINARY = b"\x00\xff\xfebinary"


def test_headers_become_fields_ids_indices_and_routing(services, es, names, tmp_path):
    topic = names("hdr")
    other = names("hdr-tenant")  # an index named by a header
    create_topic(services.kafka, topic)
    to_topic = [("index", topic.encode()), ("shard", b"s-a")]
    produce(
        services.kafka,
        topic,
        [
            (b"k1", b'{"n": 1}', [("trace", "caf\u00e9".encode()), ("doc-id", b"id-1"), *to_topic]),
            (b"k2", b'{"n": 2}', [("doc-id", b"id-2"), *to_topic]),  # no trace: left out
            (
                b"k3",
                b'{"n": 3}',
                [("trace", BINARY), ("doc-id", b"id-3"), ("trace", b"last"), *to_topic],
            ),
            (b"k4", b'{"n": 4}', [("trace", BINARY), ("doc-id", b"id-4"), *to_topic]),
            (
                b"k5",
                b'{"n": 5}',
                [
                    ("trace", None),
                    ("doc-id", b"id-5"),
                    ("index", other.encode()),
                    ("shard", b"s-1"),
                    ("tenant", b"acme"),
                ],
            ),
            (b"k6", b'{"n": 6}', to_topic),  # no doc-id: the id cannot be made (skipped)
        ],
    )
    config = tmp_path / "headers.yaml"
    config.write_text(
        "transforms:\n"
        "  - {type: insert_field, field: meta.trace, from: header, header: trace}\n"
        "  - {type: insert_field, field: tenant, from: header, header: tenant, default: none}\n"
        "  - {type: id_from_field, header: doc-id}\n"
        "  - {type: route, index_header: index, routing_header: shard}\n"
    )
    env = {
        "KAFKA_TOPICS": topic,
        "KAFKA_GROUP_ID": topic,
        "ERRORS_TOLERANCE": "log",
        "ES_SINK_CONFIG": str(config),
    }
    run = run_flow(services, env)
    assert run.returncode == 0, run.output

    docs = {i: (h["_source"], h.get("_routing")) for i, h in hits_by_id(es, topic).items()}
    assert docs == {
        "id-1": ({"n": 1, "meta": {"trace": "caf\u00e9"}, "tenant": "none"}, "s-a"),
        "id-2": ({"n": 2, "tenant": "none"}, "s-a"),  # a missing header: the field left out
        "id-3": ({"n": 3, "meta": {"trace": "last"}, "tenant": "none"}, "s-a"),  # the last wins
        "id-4": (
            {"n": 4, "meta": {"trace": base64.b64encode(BINARY).decode()}, "tenant": "none"},
            "s-a",
        ),  # not UTF-8: base64
    }
    routed = hits_by_id(es, other)
    assert {i: (h["_source"], h.get("_routing")) for i, h in routed.items()} == {
        "id-5": ({"n": 5, "meta": {"trace": None}, "tenant": "acme"}, "s-1"),  # null: null
    }
    (line,) = [x for x in run.output.splitlines() if "skipped a failed record" in x]
    assert f"topic={topic} partition=0 offset=5 stage=transform" in line
    assert "id_from_field: header doc-id is missing" in line
    assert committed_offsets(services.kafka, topic, topic) == {0: 6}
