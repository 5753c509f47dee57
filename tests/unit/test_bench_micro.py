"""`bench.micro`'s floor for the example's transforms is only a floor if it does the flow's
work: it must give the processor's documents, record for record."""

from __future__ import annotations

import pytest

from bench import micro
from bench.variants import example_transforms
from flows.config import Settings
from flows.process import Processor
from flows.transforms import build_transforms


@pytest.fixture
def chained(monkeypatch: pytest.MonkeyPatch) -> Processor:
    monkeypatch.setenv("KAFKA_TOPICS", "t")
    return Processor(Settings.load(), build_transforms(example_transforms()), 8)


def test_inline_transforms_give_the_flows_documents(chained: Processor) -> None:
    micro.check_inline_transforms(micro.transform_messages(2000), chained)


def test_a_difference_is_caught(chained: Processor, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(micro, "iso", lambda ms: str(ms))
    with pytest.raises(RuntimeError, match="inline transforms"):
        micro.check_inline_transforms(micro.transform_messages(2000), chained)
