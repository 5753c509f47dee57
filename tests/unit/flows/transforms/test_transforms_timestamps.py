"""flows.transforms.timestamps: timestamp_convert."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.transforms import (
    TS,
    make_doc,
    run_one,
)

# ------------------------------------------------------------------------- timestamp_convert


@pytest.mark.parametrize(
    ("value", "options", "expected"),
    [
        (TS, {"to": "iso"}, "2024-05-01T12:00:00.123Z"),
        (TS, {"to": "epoch_s"}, 1_714_564_800),
        (TS, {"to": "epoch_ms"}, TS),
        (1_714_564_800, {"to": "iso", "unit": "s"}, "2024-05-01T12:00:00.000Z"),
        (1_714_564_800.5, {"to": "epoch_ms", "unit": "s"}, 1_714_564_800_500),
        (1_714_564_800_123.6, {"to": "epoch_ms"}, 1_714_564_800_124),
        (-1, {"to": "iso"}, "1969-12-31T23:59:59.999Z"),
        ("2024-05-01T12:00:00.123Z", {"to": "epoch_ms"}, TS),
        ("2024-05-01T14:00:00.123+02:00", {"to": "epoch_ms"}, TS),
        ("2024-05-01T12:00:00.123999", {"to": "epoch_ms"}, TS),  # naive = UTC, truncated
        ("2024-05-01T14:00:00+02:00", {"to": "iso"}, "2024-05-01T12:00:00.000Z"),
        ("2024-05-01", {"to": "epoch_s"}, 1_714_521_600),
        ("20240501T120000Z", {"to": "epoch_s"}, 1_714_564_800),
        ("01/05/2024 12:00", {"to": "epoch_ms", "from_format": "%d/%m/%Y %H:%M"}, TS - 123),
        (
            "01/05/2024 14:00 +0200",
            {"to": "iso", "from_format": "%d/%m/%Y %H:%M %z"},
            "2024-05-01T12:00:00.000Z",
        ),
    ],
)
def test_timestamp_convert(value: Any, options: dict[str, Any], expected: Any) -> None:
    out = run_one(
        {"type": "timestamp_convert", "field": "e.ts", **options}, make_doc({"e": {"ts": value}})
    )
    assert out.source == {"e": {"ts": expected}}
    assert type(out.source["e"]["ts"]) is type(expected)


@pytest.mark.parametrize(
    ("value", "options"),
    [
        ("yesterday", {}),
        ("2024-13-01", {}),
        ("1714564800123", {}),  # digits in a string are not an epoch
        ("2024-05-01", {"from_format": "%d/%m/%Y"}),
        (True, {}),
        ({"x": 1}, {}),
        (float("nan"), {}),
        (10**20, {}),  # out of datetime range
    ],
)
def test_timestamp_convert_rejects_unparsable(value: Any, options: dict[str, Any]) -> None:
    spec = {"type": "timestamp_convert", "field": "ts", "to": "iso", **options}
    with pytest.raises(ValueError, match=r"^timestamp_convert: field ts: "):
        run_one(spec, make_doc({"ts": value}))


@pytest.mark.parametrize("source", [{}, {"ts": None}, {"e": "str"}, None])
def test_timestamp_convert_skips_missing_or_null(source: dict[str, Any] | None) -> None:
    out = run_one({"type": "timestamp_convert", "field": "ts", "to": "iso"}, make_doc(source))
    assert out.source == source
