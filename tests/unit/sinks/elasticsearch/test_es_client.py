"""sinks.elasticsearch.client: the serializers the bulk path relies on (no server needed)."""

from __future__ import annotations

from elasticsearch import Elasticsearch

from flows.config import Settings
from sinks.elasticsearch.client import make_client

COMPAT_JSON = "application/vnd.elasticsearch+json; compatible-with=9"
COMPAT_NDJSON = "application/vnd.elasticsearch+x-ndjson; compatible-with=9"


def client() -> Elasticsearch:
    s = Settings.load({"KAFKA_TOPICS": "t", "ES_HOSTS": "http://127.0.0.1:1"})
    return make_client(s.es_connection)


def loads(body: bytes, mimetype: str = COMPAT_JSON) -> object:
    return client().transport.serializers.loads(body, mimetype)


def test_a_bulk_answer_without_errors_is_not_parsed() -> None:
    body = b'{"errors":false,"items":[' + b'{"index":{"status":201}},' * 999 + b"{}]}"
    assert loads(body) == {"errors": False}


def test_a_bulk_answer_without_errors_that_holds_a_404_is_parsed() -> None:
    """A delete of a missing document answers 404 and leaves `errors` false."""
    body = b'{"errors":false,"items":[{"index":{"status":201}},{"delete":{"status":404}}]}'
    assert loads(body) == {
        "errors": False,
        "items": [{"index": {"status": 201}}, {"delete": {"status": 404}}],
    }


def test_a_bulk_answer_with_errors_is_parsed_in_full() -> None:
    body = b'{"errors":true,"items":[{"index":{"status":201}},{"index":{"status":400}}]}'
    assert loads(body) == {
        "errors": True,
        "items": [{"index": {"status": 201}}, {"index": {"status": 400}}],
    }
    assert loads(b'{"status":"green"}', "application/json") == {"status": "green"}


def test_bulk_bodies_are_sent_as_they_are() -> None:
    body = b'{"index":{"_id":"a"}}\n{"n":1}\n'
    assert client().transport.serializers.dumps(body, COMPAT_NDJSON) is body
    lines = client().transport.serializers.dumps([{"a": 1}, {"b": 2}], COMPAT_NDJSON)
    assert lines == b'{"a":1}\n{"b":2}\n'
