"""Transforms for tests/integration/test_features.py, imported by the flow subprocess
(`TRANSFORMS=tests.integration.feature_transforms:<func>` or `python:` in YAML)."""

from __future__ import annotations

from decimal import Decimal

from flows.record import Doc
from flows.transforms import Transform


def fail_on_boom(doc: Doc) -> Doc:
    """Raise ValueError for a body with `"boom": true` (a 5,000-character message with
    `"long": true`); pass everything else."""
    if doc.source is not None and doc.source.get("long"):
        raise ValueError("x" * 5000)
    if doc.source is not None and doc.source.get("boom"):
        raise ValueError(f"boom in record {doc.source.get('id')}")
    return doc


def odd_ids(doc: Doc) -> Doc:
    """A transform bug: set a non-JSON id (`"odd": "id"`) or key (`"odd": "key"`)."""
    odd = doc.source.get("odd") if doc.source is not None else None
    if odd == "id":
        doc.id = Decimal("1.5")  # type: ignore[assignment]
    elif odd == "key":
        doc.key = {"a set"}
    return doc


def shout(doc: Doc) -> Doc:
    """Upper-case `name`."""
    assert doc.source is not None
    doc.source["name"] = doc.source["name"].upper()
    return doc


def stamp(doc: Doc) -> Doc:
    """Copy `name` into `stamped`: proves it ran after `shout` when configured second."""
    assert doc.source is not None
    doc.source["stamped"] = doc.source["name"]
    return doc


def tagger(tag: str) -> Transform:
    """Factory (`python:` with `config: {tag: ...}`): add `tag` to every body."""

    def add_tag(doc: Doc) -> Doc:
        if doc.source is not None:
            doc.source["tag"] = tag
        return doc

    return add_tag


def custom(doc: Doc) -> Doc | list[Doc] | None:
    """By the body's `action`: modify, drop, split (fan out) or move (index + routing)."""
    src = doc.source
    assert src is not None
    action = src.get("action")
    if action == "drop":
        return None
    if action == "split":
        return [
            Doc(
                record=doc.record,
                source={"from": doc.key, "part": part},
                key=doc.key,
                index=src["target"],
                id=f"{doc.key}-{part}",
                routing=src["shard"],
            )
            for part in src["parts"]
        ]
    if action == "move":
        doc.index = src.pop("target")
        doc.routing = src.pop("shard")
        return doc
    src["total"] = src["qty"] * src["price"]
    return doc
