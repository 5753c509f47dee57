"""Example user transforms, imported by `python:` entries in tests/unit/test_transforms_*.py."""

from __future__ import annotations

from flows.record import Doc, Record


def modify(doc: Doc) -> Doc:
    """Change the body in place."""
    assert doc.source is not None
    doc.source["modified"] = True
    return doc


def drop_everything(doc: Doc) -> None:
    """Drop every record."""
    return None


def fan_out(doc: Doc) -> list[Doc]:
    """Two documents `<id>-0` and `<id>-1`, each with its own copy of the body."""
    base = doc.id if doc.id is not None else str((doc.source or {})["id"])
    return [
        Doc(
            record=doc.record,
            source={**(doc.source or {}), "part": n},
            key=doc.key,
            index=doc.index,
            id=f"{base}-{n}",
            routing=doc.routing,
            meta=dict(doc.meta),
        )
        for n in range(2)
    ]


def set_index_and_routing(doc: Doc) -> Doc:
    """Route to `custom-<topic>` with the routing taken from the body's `user`."""
    doc.index = f"custom-{doc.record.topic}"
    doc.routing = str((doc.source or {}).get("user", "none"))
    return doc


def boom(doc: Doc) -> Doc:
    """Fail on every record."""
    raise RuntimeError("boom")


def bad_return(doc: Doc) -> object:
    """Break the contract: return neither a Doc, a list of Docs nor None."""
    return "not a doc"


def bad_list(doc: Doc) -> list[object]:
    """Break the contract: a list holding something else than Docs."""
    return [doc, {"not": "a doc"}]


def new_record(doc: Doc) -> Doc:
    """Break the contract: a Doc with a copied record."""
    r = doc.record
    copied = Record(r.topic, r.partition, r.offset, r.timestamp, r.key, r.value, r.headers)
    return Doc(record=copied, source=doc.source)


def make_tagger(tag: str, field: str = "tag") -> object:
    """A factory: `{python: ..., config: {tag: x}}` calls it once at start."""

    def tagger(doc: Doc) -> Doc:
        assert doc.source is not None
        doc.source[field] = tag
        return doc

    return tagger


def failing_factory(**config: object) -> object:
    """A factory that rejects its configuration."""
    raise ValueError(f"bad config {sorted(config)}")


def not_a_factory(**config: object) -> object:
    """A factory that returns something that is not callable."""
    return 42


NOT_CALLABLE = 42
