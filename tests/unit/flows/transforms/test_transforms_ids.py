"""flows.transforms.ids: key_from_field, id_from_field."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.transforms import (
    make_doc,
    run_one,
)

# ------------------------------------------------------------------------- key / id


def test_key_from_field_sets_any_value() -> None:
    out = run_one({"type": "key_from_field", "field": "k.v"}, make_doc({"k": {"v": {"x": 1}}}))
    assert out.key == {"x": 1}
    assert out.record.key == b"k1"


@pytest.mark.parametrize(("value", "expected"), [("abc", "abc"), (42, "42")])
def test_id_from_field(value: Any, expected: str) -> None:
    assert (
        run_one({"type": "id_from_field", "field": "a.id"}, make_doc({"a": {"id": value}})).id
        == expected
    )


@pytest.mark.parametrize("value", [True, 1.5, None, "", {"x": 1}, [1]])
def test_id_from_field_rejects_non_scalar_ids(value: Any) -> None:
    with pytest.raises(ValueError, match="must be a non-empty string or an integer"):
        run_one({"type": "id_from_field", "field": "id"}, make_doc({"id": value}))


@pytest.mark.parametrize("kind", ["key_from_field", "id_from_field"])
def test_missing_key_or_id_field_raises(kind: str) -> None:
    with pytest.raises(ValueError, match=rf"{kind}: field a\.b is missing$"):
        run_one({"type": kind, "field": "a.b"}, make_doc({"a": {}}))
    with pytest.raises(ValueError, match="tombstone"):
        run_one({"type": kind, "field": "a.b"}, make_doc(None))
