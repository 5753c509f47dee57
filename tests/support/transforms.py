"""Helpers shared by the tests/unit/test_transforms_*.py files."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from flows.errors import ConfigError
from flows.record import Doc, Record
from flows.transforms import Transform, build_transforms, compile_transforms
from flows.transforms.compiled import check_fan_out, foreign_record, transform_name
from tests.support import sample_transforms

SAMPLE = sample_transforms.__name__

TS = 1_714_564_800_123  # 2024-05-01T12:00:00.123Z


def make_doc(
    source: dict[str, Any] | None = None,
    *,
    topic: str = "orders",
    timestamp: int | None = TS,
    key: Any = "k1",
    headers: tuple[tuple[str, bytes | None], ...] = (),
    index: str | None = None,
    id: str | None = None,
) -> Doc:
    value = None if source is None else b"{...}"
    record = Record(topic, 3, 42, timestamp, b"k1", value, headers)
    return Doc(record=record, source=source, key=key, index=index, id=id)


def interpret(transforms: list[Transform], doc: Doc) -> list[Doc]:
    """The reference for `compile_transforms`: the chain run one transform at a time, each
    return checked as the transform contract (flows.transforms) says."""
    record = doc.record
    it = iter(transforms)
    for transform in it:
        out = transform(doc)
        if out is doc:
            continue
        if out is None:
            return []
        if isinstance(out, Doc):
            if out.record is not record:
                raise foreign_record(transform)
            doc = out
            continue
        if isinstance(out, list):
            check_fan_out(transform, out, record)
            rest = list(it)
            return [d for each in out for d in interpret(rest, each)] if rest else list(out)
        msg = (
            f"transform {transform_name(transform)} returned {type(out).__name__}; "
            "expected a Doc, a list of Docs or None"
        )
        raise TypeError(msg)
    return [doc]


def run(specs: list[dict[str, Any]], doc: Doc) -> list[Doc]:
    return both(build_transforms(specs), doc)


def both(chain: list[Transform], doc: Doc) -> list[Doc]:
    """`interpret` (the reference) on `doc`, held to `compile_transforms` on a copy:
    the same Docs, or the same error (type and message)."""
    twin = copy.deepcopy(doc)
    twin.record = doc.record  # the record is compared by identity
    compiled = compile_transforms(chain)
    try:
        expected = interpret(chain, doc)
    except Exception as exc:
        with pytest.raises(type(exc)) as info:
            compiled(twin)
        assert str(info.value) == str(exc)
        raise
    assert compiled(twin) == expected
    return expected


def run_one(spec: dict[str, Any], doc: Doc) -> Doc:
    out = run([spec], doc)
    assert len(out) == 1
    return out[0]


def config_error(specs: list[Any]) -> str:
    with pytest.raises(ConfigError) as info:
        build_transforms(specs)
    return str(info.value)
