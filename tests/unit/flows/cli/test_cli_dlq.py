"""The pure parts of `es-sink dlq`: reason normalisation, grouping, the selection and the
dead-letter record parsing."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from flows.cli import common
from flows.cli.dlq import DeadLetterRecord, Selection, group, normalise, parse, selection


@pytest.mark.parametrize(
    ("one", "other"),
    [
        (
            "failed to parse field [price] of type [long] in document with id 'k1'. "
            "Preview of field's value: 'abc'",
            "failed to parse field [price] of type [long] in document with id 'other-7'. "
            "Preview of field's value: 'not a number at all'",
        ),
        (
            "[1:30] mapping set to strict, dynamic introduction of [color] within [_doc] "
            "is not allowed",
            "[1:112] mapping set to strict, dynamic introduction of [color] within [_doc] "
            "is not allowed",
        ),
        (
            "invalid JSON: unexpected character: line 1 column 2 (char 1); payload starts b'{x'",
            "invalid JSON: unexpected character: line 3 column 17 (char 40); payload starts b'[[['",
        ),
        ("boom in record 17", "boom in record 2041"),
        (
            'document id "9f8e2c1a-4b3d-4e5f-8a7b-1c2d3e4f5a6b" is bad',
            'document id "00000000-0000-4000-8000-000000000000" is bad',
        ),
    ],
)
def test_what_differs_per_record_is_normalised_away(one: str, other: str) -> None:
    assert normalise(one) == normalise(other)


@pytest.mark.parametrize(
    ("one", "other"),
    [
        (
            "failed to parse field [price] of type [long]",
            "failed to parse field [amount] of type [long]",
        ),
        (
            "failed to parse field [price] of type [long]",
            "failed to parse field [price] of type [date]",
        ),
        ("int64 overflow", "int32 overflow"),
    ],
)
def test_different_errors_stay_apart(one: str, other: str) -> None:
    assert normalise(one) != normalise(other)


def test_the_normalised_reason_reads_well() -> None:
    text = (
        "failed to parse field [price] of type [long] in document with id 'k1'. "
        "Preview of field's value: 'abc'"
    )
    assert normalise(text) == (
        "failed to parse field [price] of type [long] in document with id '…'. "
        "Preview of field's value: …"
    )


def _dl(stage: str, message: str, offset: int, ts: int, topic: str = "orders") -> DeadLetterRecord:
    return DeadLetterRecord(
        dlq_partition=0,
        dlq_offset=offset,
        timestamp=ts,
        key=f"k{offset}".encode(),
        value=b'{"v": 1}',
        original_headers=(),
        topic=topic,
        partition=0,
        offset=offset * 10,
        stage=stage,
        error_class="elasticsearch.document_parsing_exception" if stage == "index" else "E",
        message=message,
    )


def test_grouping_counts_first_last_and_topics() -> None:
    letters = [
        _dl("index", f"failed to parse field [price] in document with id 'k{i}'", i, 1000 + i)
        for i in range(5)
    ]
    letters += [_dl("transform", "boom in record 1", 9, 50, topic="payments")]
    letters += [_dl("index", "failed to parse field [other] in document with id 'x'", 7, 7)]
    groups = group(letters)
    assert [(g.stage, g.count) for g in groups] == [("index", 5), ("index", 1), ("transform", 1)]
    big = groups[0]
    assert big.first is not None and big.first.dlq_offset == 0
    assert big.last is not None and big.last.dlq_offset == 4
    assert big.topics == {"orders": 5}
    as_json = big.as_json()
    assert as_json["first"]["at"] == common.iso(1000)
    assert as_json["sample"]["key"] == "k0" and as_json["sample"]["source"] == "orders/0@0"


def test_the_selection_filters() -> None:
    dl = _dl("index", "failed to parse field [price]", 1, 2_000)
    assert Selection().matches(dl)
    assert not Selection(stage="transform").matches(dl)
    assert not Selection(topic="payments").matches(dl)
    assert Selection(since=2_000, until=2_000).matches(dl)
    assert not Selection(since=2_001).matches(dl)
    assert not Selection(until=1_999).matches(dl)
    assert Selection(grep=re.compile(r"field \[pr")).matches(dl)
    assert Selection(grep=re.compile(r'"v"')).matches(dl)  # the value is searched too
    assert not Selection(grep=re.compile("nothing")).matches(dl)


def test_bad_filters_name_the_option() -> None:
    with pytest.raises(common.Usage, match=r"^--stage: expected one of"):
        selection("indexing", None, None, None, None)
    with pytest.raises(common.Usage, match=r"^--since: expected an ISO-8601 time"):
        selection(None, None, "yesterday", None, None)
    with pytest.raises(common.Usage, match=r"^--grep: invalid regular expression"):
        selection(None, None, None, None, "(")
    assert selection(None, None, "2026-01-01T00:00:00Z", None, None).since == 1767225600000


class _Msg:
    def __init__(self, headers: list[tuple[str, bytes]]) -> None:
        self._headers = headers

    def headers(self) -> list[tuple[str, bytes]]:
        return self._headers

    def timestamp(self) -> tuple[int, int]:
        return (1, 5)

    def partition(self) -> int:
        return 2

    def offset(self) -> int:
        return 9

    def key(self) -> bytes:
        return b"k"

    def value(self) -> bytes:
        return b"v"


def test_parse_separates_the_original_headers_from_the_context() -> None:
    from sinks.dead_letter.headers import error_headers
    from sinks.model import DeadLetter, Record

    rec = Record("orders", 3, 41, 5, b"k", b"v", (("trace", b"abc"),))
    headers = [("trace", b"abc"), *error_headers(DeadLetter(rec, "index", "C", "why"))]
    dl = parse(_Msg([*headers, ("__es_sink.replay.count", b"2")]))  # type: ignore[arg-type]
    assert (dl.topic, dl.partition, dl.offset, dl.stage, dl.error_class, dl.message) == (
        "orders", 3, 41, "index", "C", "why"
    )  # fmt: skip
    assert dl.original_headers == (("trace", b"abc"),)
    assert dl.replay_count == 2 and (dl.dlq_partition, dl.dlq_offset) == (2, 9)
    assert dl.original_timestamp == 5  # the source record's own timestamp travels along


def test_a_record_without_a_timestamp_has_no_timestamp_header() -> None:
    from sinks.dead_letter.headers import TIMESTAMP_HEADER, error_headers
    from sinks.model import DeadLetter, Record

    rec = Record("orders", 3, 41, None, b"k", b"v", ())
    headers = error_headers(DeadLetter(rec, "index", "C", "why"))
    assert TIMESTAMP_HEADER not in dict(headers)
    assert parse(_Msg(headers)).original_timestamp is None  # type: ignore[arg-type]


def test_groups_count_distinct_source_records() -> None:
    letters = [_dl("index", "failed [price]", i, 1000 + i) for i in range(3)]
    letters += [replace(letters[0], dlq_offset=50), replace(letters[1], dlq_offset=51)]
    (g,) = group(letters)
    assert (g.count, g.records) == (5, 3)
    assert g.as_json()["records"] == 3


def test_inspect_lists_groups_in_80_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    from io import StringIO

    from rich.console import Console

    from flows.cli import dlq

    buffer = StringIO()
    monkeypatch.setattr(common, "out", Console(file=buffer, width=80, soft_wrap=True))
    letters = [_dl("deserialize", "invalid JSON: unexpected character", 1, 1000, "nc-orders")]
    dlq.print_groups("nc-dlq", group(letters), 80)
    text = buffer.getvalue()
    assert "1 dead letters, 1 source records: deserialize E" in text
    assert "  first:  nc-orders/0@10 1970-01-01T00:00:01.000+00:00" in text
    assert "…" not in text


def test_offsets_close_together_are_read_in_one_pass() -> None:
    from flows.cli.replay import GAP, _stretches

    assert _stretches([]) == []
    assert _stretches([3, 4, 10, 10 + GAP + 20]) == [(3, 11), (10 + GAP + 20, 10 + GAP + 21)]


def test_a_dry_run_calls_what_it_did_not_send_unverified() -> None:
    from flows.cli.replay import Summary

    dry = Summary("g", unverified=4, failed=6, duplicates=2, dry_run=True)
    assert dry.line() == "dry-run: unverified=4 failed=6 skipped=0 duplicates=2"
    assert "replayed" not in dry.line()
    real = Summary("g", replayed=4, failed=6, failures={"index": 6})
    assert real.line() == "replayed=4 failed=6 skipped=0 duplicates=0"
    assert sum(real.as_json()["failed_by_stage"].values()) == real.as_json()["failed"]
