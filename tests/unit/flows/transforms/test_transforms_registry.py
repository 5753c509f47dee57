"""flows.transforms.registry: `@builtin` is the only list of built-ins, and the docs'."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from flows.errors import ConfigError
from flows.record import Doc
from flows.transforms import BUILTINS, Transform, build_transforms, builtin
from flows.transforms.entry import Entry
from tests.support.paths import ROOT
from tests.support.transforms import make_doc, run_one

PAGE = ROOT / "docs" / "transforms.md"


def _docs_transform_table() -> dict[str, frozenset[str]]:
    """`type -> keys` from the table of section "Built-in transforms" (one row may name two
    types)."""
    text = PAGE.read_text()
    start = text.index("\n## Built-in transforms\n")
    section = text[start : text.index("\n#", start + 1)]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    table: dict[str, frozenset[str]] = {}
    for row in rows:
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", row.strip().strip("|"))]
        names = re.findall(r"`([^`]+)`", cells[0])
        # Keys are the backquoted words, alone or before `:` (`from: topic|...`); other
        # backquoted text (`****`, operator lists, `func(**config)`) is not a key.
        keys = frozenset(
            m.group(1)
            for token in re.findall(r"`([^`]+)`", cells[1])
            if (m := re.fullmatch(r"([a-z_]+)(?::.*)?", token))
        )
        for name in names:
            table[name] = keys
    return table


def test_docs_transform_table_is_the_registry() -> None:
    table = _docs_transform_table()
    assert set(table) == set(BUILTINS)
    for name, spec in BUILTINS.items():
        assert table[name] == spec.keys, name


def test_every_builtin_has_a_doc_and_is_labelled_except_python() -> None:
    for name, spec in BUILTINS.items():
        assert spec.name == name
        assert len(spec.doc) > 20 and "\n" not in spec.doc
        assert spec.label is (name != "python")


@pytest.fixture
def shout() -> Iterator[None]:
    """A built-in registered by a test, removed after it."""

    @builtin("shout", keys=("field",), doc="upper-cases field (a test's built-in)")
    def build_shout(e: Entry) -> Transform:
        path = e.path("field")

        def shout(doc: Doc) -> Doc:
            value = path.get(doc.source)
            if isinstance(value, str):
                path.set(doc.source, value.upper())  # type: ignore[arg-type]
            return doc

        return shout

    try:
        yield
    finally:
        del BUILTINS["shout"]


@pytest.mark.usefixtures("shout")
def test_a_registered_builtin_is_built_checked_and_named_like_the_others() -> None:
    out = run_one({"type": "shout", "field": "a.b"}, make_doc({"a": {"b": "hi"}}))
    assert out.source == {"a": {"b": "HI"}}
    [transform] = build_transforms(
        [{"type": "drop", "fields": ["x"]}, {"type": "shout", "field": "a"}]
    )[1:]
    assert transform.__qualname__ == "transforms[1] (shout)"
    with pytest.raises(ConfigError, match=r"^transforms\[0\]\.fieldz: unknown key for type shout"):
        build_transforms([{"type": "shout", "fieldz": "a"}])
    with pytest.raises(ConfigError, match=r"expected one of .*rename, route, shout, timestamp"):
        build_transforms([{"type": "nope"}])


@pytest.mark.usefixtures("shout")
def test_a_name_is_registered_once() -> None:
    with pytest.raises(ValueError, match="'shout' registered twice"):
        builtin("shout", keys=(), doc="again")(lambda e: lambda d: d)
