"""flows.transforms.route: route."""

from __future__ import annotations

from typing import Any

import pytest

from flows.transforms import apply_transforms, build_transforms
from tests.support.transforms import (
    make_doc,
    run_one,
)

# ------------------------------------------------------------------------- route


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("logs-{yyyy.MM.dd}", "logs-2024.05.01"),
        ("{topic}-{yyyy.MM}", "orders-2024.05"),
        ("static-index", "static-index"),
    ],
)
def test_route_index_from_record_timestamp(template: str, expected: str) -> None:
    assert run_one({"type": "route", "index": template}, make_doc({})).index == expected


@pytest.mark.parametrize(
    ("ts", "expected"),
    [
        (1_700_000_000_000, "logs-2023.11.14"),
        ("2023-01-02T03:04:05Z", "logs-2023.01.02"),
        ("2023-01-02T01:00:00+02:00", "logs-2023.01.01"),  # dates are UTC
        ("2023-01-02", "logs-2023.01.02"),
    ],
)
def test_route_index_from_timestamp_field(ts: Any, expected: str) -> None:
    spec = {"type": "route", "index": "logs-{yyyy.MM.dd}", "timestamp_field": "event.ts"}
    assert run_one(spec, make_doc({"event": {"ts": ts}})).index == expected


@pytest.mark.parametrize(("source", "message"), [({}, "missing"), ({"ts": "soon"}, "cannot parse")])
def test_route_timestamp_field_missing_or_bad_raises(source: dict[str, Any], message: str) -> None:
    spec = {"type": "route", "index": "logs-{yyyy}", "timestamp_field": "ts"}
    with pytest.raises(ValueError, match=message):
        run_one(spec, make_doc(source))


@pytest.mark.parametrize(
    ("replacement", "expected"),
    [
        ("idx-$2-$1", "idx-orders-app"),
        (r"idx-\2-\1", "idx-orders-app"),
        ("idx-${svc}", "idx-orders"),
        (r"idx-\g<svc>", "idx-orders"),
        ("$$-$1", "$-app"),
    ],
)
def test_route_topic_regex(replacement: str, expected: str) -> None:
    spec = {"type": "route", "topic_regex": r"(\w+)\.(?P<svc>\w+)", "replacement": replacement}
    assert run_one(spec, make_doc({}, topic="app.orders")).index == expected


def test_route_topic_regex_needs_a_full_match() -> None:
    spec = {"type": "route", "topic_regex": r"app\.(\w+)", "replacement": "idx-$1"}
    chain = build_transforms([spec])
    for topic in ("other.orders", "app.orders.eu"):
        [out] = apply_transforms(chain, make_doc({}, topic=topic, index="keep-me"))
        assert out.index == "keep-me"
    [out] = apply_transforms(chain, make_doc({}, topic="app.orders"))
    assert out.index == "idx-orders"


def test_route_routing_field() -> None:
    out = run_one(
        {"type": "route", "index": "i-{yyyy}", "routing_field": "tenant.id"},
        make_doc({"tenant": {"id": 7}}),
    )
    assert (out.index, out.routing) == ("i-2024", "7")
    out = run_one({"type": "route", "routing_field": "t"}, make_doc({"t": "abc"}, index="pre"))
    assert (out.index, out.routing) == ("pre", "abc")
    with pytest.raises(ValueError, match=r"route: field t is missing"):
        run_one({"type": "route", "routing_field": "t"}, make_doc({}))
