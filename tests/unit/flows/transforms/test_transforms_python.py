"""flows.transforms.python: your own transforms."""

from __future__ import annotations

from flows.transforms import apply_transforms, build_transforms
from tests.support.transforms import (
    SAMPLE,
    make_doc,
    run,
)

# ------------------------------------------------------------------------- python


def test_python_transforms() -> None:
    out = run(
        [
            {"python": f"{SAMPLE}:modify"},
            {"type": "python", "python": f"{SAMPLE}:set_index_and_routing"},
        ],
        make_doc({"user": "u1"}, topic="t1"),
    )
    assert out[0].source == {"user": "u1", "modified": True}
    assert (out[0].index, out[0].routing) == ("custom-t1", "u1")
    assert run([{"python": f"{SAMPLE}:drop_everything"}], make_doc({})) == []


def test_python_factory_is_called_once_with_config() -> None:
    chain = build_transforms(
        [{"python": f"{SAMPLE}:make_tagger", "config": {"tag": "blue", "field": "color"}}]
    )
    assert len(chain) == 1
    for _ in range(2):
        [out] = apply_transforms(chain, make_doc({}))
        assert out.source == {"color": "blue"}


def test_python_entries_from_the_transforms_environment_variable() -> None:
    from flows.config import Settings

    settings = Settings.load(
        {"KAFKA_TOPICS": "t", "TRANSFORMS": f"{SAMPLE}:modify,{SAMPLE}:fan_out"}
    )
    out = apply_transforms(build_transforms(settings.transforms), make_doc({"id": "a"}))
    assert [(d.id, d.source and d.source["modified"]) for d in out] == [
        ("a-0", True),
        ("a-1", True),
    ]
