"""`tools.bench.micro`'s inline reference for the example's transforms is only a reference if it
does the flow's work: it must give the processor's documents (ids and `_source`s), as many,
in any order (the processor groups them by sink partition)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from flows.config import Settings
from flows.process import Processor
from flows.transforms import build_transforms
from tools.bench import micro
from tools.bench.variants import example_transforms


@pytest.fixture
def chained(monkeypatch: pytest.MonkeyPatch) -> Processor:
    monkeypatch.setenv("KAFKA_TOPICS", "t")
    return Processor(Settings.load(), build_transforms(example_transforms()), 8)


def test_inline_transforms_give_the_flows_documents(chained: Processor) -> None:
    micro.check_inline_transforms(micro.transform_messages(2000), chained)


def _changed(edit: Callable[[list[bytes]], list[bytes]]) -> Callable[[list[Any]], list[bytes]]:
    inline = micro._inline_transforms
    return lambda batch: edit(inline(batch))


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(None, id="an edit done otherwise"),
        pytest.param(lambda out: out + out[:1], id="a document twice"),
        pytest.param(lambda out: out[1:], id="a document missing"),
        pytest.param(lambda out: [], id="nothing"),
    ],
)
def test_a_difference_is_caught(
    chained: Processor, monkeypatch: pytest.MonkeyPatch, edit: Any
) -> None:
    if edit is None:
        monkeypatch.setattr(micro, "iso", lambda ms: str(ms))
    else:
        monkeypatch.setattr(micro, "_inline_transforms", _changed(edit))
    with pytest.raises(RuntimeError, match="inline transforms"):
        micro.check_inline_transforms(micro.transform_messages(2000), chained)


def test_no_records_is_not_a_pass(chained: Processor) -> None:
    with pytest.raises(RuntimeError, match="inline transforms"):
        micro.check_inline_transforms([], chained)
