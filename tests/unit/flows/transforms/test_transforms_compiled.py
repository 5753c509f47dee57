"""flows.transforms.compiled: the generated chain against `interpret`, the reference.

Random chains of built-ins (and user functions that keep, replace, drop, fan out, fail or
return the wrong thing) run on random records, both ways: the same Docs or the same error.
"""

from __future__ import annotations

import copy
import random
from functools import partial
from typing import Any

import pytest

from flows.record import Doc, Record
from flows.transforms import build_transforms, compile_transforms
from tests.support.transforms import interpret

pytestmark = pytest.mark.unit

PATHS = ["a", "b", "cust", "created", "customer.email", "customer.phone", "a.b", "x.y.z"]
LEAVES: list[Any] = [
    None,
    0,
    7,
    -5,
    1.5,
    float("nan"),
    float("inf"),
    True,
    "",
    "u@example.test",
    "x@y.com",
    "2024-05-01T12:00:00.123Z",
    "2024-05-01 12:00",
    "not a date",
    1_714_564_800_123,
    10**20,
    [],
    [1, "a"],
    "c",
    "d",
]
KEYS = ["a", "b", "cust", "customer", "created", "email", "phone", "x", "y", "z"]


def _value(rng: random.Random, depth: int) -> Any:
    if depth < 2 and rng.random() < 0.35:
        return {rng.choice(KEYS): _value(rng, depth + 1) for _ in range(rng.randint(0, 4))}
    return rng.choice(LEAVES)


def _doc(rng: random.Random) -> Doc:
    source = None if rng.random() < 0.08 else _value(rng, 3) if rng.random() < 0.03 else {}
    if isinstance(source, dict):
        for _ in range(rng.randint(0, 6)):
            source[rng.choice(KEYS)] = _value(rng, 0)
    headers = tuple(
        (rng.choice(["traceparent", "h", "tenant"]), rng.choice([b"t-1", b"\xff\xfe", None, b""]))
        for _ in range(rng.randint(0, 3))
    )
    topic = rng.choice(["orders-eu", "orders-us", "logs"])
    ts = rng.choice([1_714_564_800_123, None, 0])
    value = None if source is None else b"{}"
    record = Record(topic, 1, rng.randint(0, 10**6), ts, b"k", value, headers)
    return Doc(record, source, key=rng.choice(["k1", None, 5, {"id": 1}]))


def _spec(rng: random.Random) -> dict[str, Any]:
    path, paths = rng.choice(PATHS), rng.sample(PATHS, rng.randint(1, 3))
    kind = rng.randrange(16)
    if kind == 0:
        return {"type": "drop", "fields": paths}
    if kind == 1:
        return {"type": "mask", "fields": paths, "replacement": rng.choice(["****", None, 0])}
    if kind == 2:
        return {"type": "rename", "fields": {p: rng.choice(PATHS) for p in paths}}
    if kind == 3:
        return {
            "type": "insert_field",
            "field": path,
            "value": rng.choice([1, "v", None, {"o": 1}]),
        }
    if kind == 4:
        origin = rng.choice(["topic", "partition", "offset", "timestamp", "key"])
        spec = {"type": "insert_field", "field": path, "from": origin}
        if origin == "timestamp" and rng.random() < 0.5:
            spec["format"] = "iso"
        return spec
    if kind == 5:
        spec = {"type": "insert_field", "field": path, "from": "header"}
        spec["header"] = rng.choice(["traceparent", "h"])
        if rng.random() < 0.5:
            spec["default"] = rng.choice(["none", {"d": 1}, None])
        return spec
    if kind == 6:
        spec = {"type": "timestamp_convert", "field": path}
        spec["to"] = rng.choice(["iso", "epoch_ms", "epoch_s"])
        spec["unit"] = rng.choice(["ms", "s"])
        if rng.random() < 0.2:
            spec["from_format"] = "%Y-%m-%d %H:%M"
        return spec
    if kind == 7:
        op = rng.choice(["eq", "ne", "gt", "ge", "lt", "le", "in", "regex", "exists"])
        spec = {"type": "filter", "field": path, "op": op, "negate": rng.random() < 0.3}
        if op == "in":
            spec["value"] = rng.choice([[7, "c", None], [[], {"a": 1}, 0]])
        elif op == "regex":
            spec["value"] = rng.choice([".*@example\\.test", "c|d", ""])
        elif op in ("gt", "ge", "lt", "le"):
            spec["value"] = rng.choice([0, 5, "c"])
        elif op != "exists":
            spec["value"] = rng.choice(LEAVES[:14])
        return spec
    if kind == 8:
        choice = rng.choice(
            [{"topic": "orders-.*"}, {"header": "h"}, {"tombstone": True}, {"topic": "logs"}]
        )
        return {"type": "filter", "negate": rng.random() < 0.3, **choice}
    if kind == 9:
        return rng.choice(
            [
                {"type": "route", "topic_regex": "orders-(eu)", "replacement": "orders-$1-current"},
                {"type": "route", "index": "static"},
                {"type": "route", "index": "logs-{yyyy.MM.dd}"},
                {"type": "route", "routing_field": path},
                {
                    "type": "route",
                    "topic_regex": "(.*)",
                    "replacement": "i-$1",
                    "routing_header": "h",
                },
            ]
        )
    if kind == 10:
        return {"type": "keep", "fields": paths}
    if kind == 11:
        return {"type": "extract", "field": path}
    if kind == 12:
        return {"type": "action", "field": path, "map": {"c": "index", "d": "delete"}}
    if kind == 13:
        return {"type": "id_from_field", "field": path}
    return {"python": f"{__name__}:{rng.choice(USER)}"}


def keep(doc: Doc) -> Doc:
    return doc


def replace(doc: Doc) -> Doc:
    return Doc(doc.record, {"replaced": doc.source}, doc.key)


def drop(doc: Doc) -> None:
    return None


def fan_out(doc: Doc) -> list[Doc]:
    return [doc, Doc(doc.record, copy.deepcopy(doc.source), doc.key)]


def empty(doc: Doc) -> list[Doc]:
    return []


def fail(doc: Doc) -> Doc:
    if doc.source and "a" in doc.source:
        raise KeyError("a")
    return doc


def foreign(doc: Doc) -> Doc:
    return Doc(copy.copy(doc.record), doc.source)


def wrong(doc: Doc) -> int:
    return 1


def as_list(doc: Doc) -> Doc:
    if isinstance(doc.source, dict) and "b" in doc.source:
        doc.source = [doc.source]  # type: ignore[assignment]  # a user's mistake
    return doc


USER = ["keep", "replace", "drop", "fan_out", "empty", "fail", "foreign", "wrong", "as_list"]
USER_WEIGHT = ["keep", "fan_out", "replace", "drop"]


def _outcome(run: Any, doc: Doc) -> Any:
    try:
        return run(doc)
    except Exception as exc:
        return (type(exc), str(exc))


@pytest.mark.parametrize("seed", range(20))
def test_compiled_chain_matches_the_reference(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(25):
        specs = [_spec(rng) for _ in range(rng.randint(1, 8))]
        try:
            chain = build_transforms(specs)
        except Exception:  # a random entry the builder refuses: not what is tested here
            continue
        compiled = compile_transforms(chain)
        for _ in range(40):
            doc = _doc(rng)
            twin = copy.deepcopy(doc)
            twin.record = doc.record
            expected = _outcome(partial(interpret, chain), doc)
            got = _outcome(compiled, twin)
            assert repr(got) == repr(expected), (specs, doc)
            assert repr(twin) == repr(doc), specs  # the input left as the reference left it


def test_most_random_chains_build_and_run_to_documents() -> None:
    """The property test exercises documents, not only refused entries and errors."""
    rng = random.Random(1)
    built = kept = 0
    for _ in range(300):
        try:
            chain = build_transforms([_spec(rng) for _ in range(rng.randint(1, 4))])
        except Exception:  # refused entries: counted below
            continue
        built += 1
        kept += isinstance(_outcome(compile_transforms(chain), _doc(rng)), list)
    assert built > 200
    assert kept > 100


def test_built_ins_are_inlined_and_user_functions_called() -> None:
    chain = build_transforms(
        [
            {"type": "drop", "fields": ["a", "x.y"]},
            {"type": "timestamp_convert", "field": "created", "to": "iso"},
            {"type": "filter", "field": "b", "op": "eq", "value": 1},
            {"python": f"{__name__}:keep"},
        ]
    )
    source = compile_transforms(chain).__source__  # type: ignore[attr-defined]
    assert source.count("(doc)") == 2  # `def chain(doc)` and the user's function
    assert "_t3(doc)" in source


def test_no_transforms_keep_the_doc() -> None:
    doc = Doc(Record("t", 0, 0, None, None, b"{}", ()), {})
    assert compile_transforms([])(doc) == [doc]


def test_a_long_chain_of_called_steps_compiles_each_rest_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each step that is called (a user's function) needs the rest of the chain for a
    fan-out; compiling that rest inside every earlier rest took 2^n compiles, so a
    configuration of twenty such steps kept the flow from starting."""
    import builtins

    from flows.transforms import compiled

    compiles = 0
    real_compile = builtins.compile

    def counting(*args: Any, **kw: Any) -> Any:
        nonlocal compiles
        compiles += 1
        return real_compile(*args, **kw)

    monkeypatch.setattr(compiled, "compile", counting, raising=False)

    def tag(i: int, doc: Doc) -> Doc:
        doc.source[f"t{i}"] = i
        return doc

    steps = [partial(tag, i) for i in range(30)]
    chain = compile_transforms(steps)
    assert compiles <= len(steps) + 1
    (doc,) = chain(Doc(Record("t", 0, 0, None, None, b"{}"), {}))
    assert doc.source == {f"t{i}": i for i in range(30)}


def test_a_user_object_answering_every_attribute_is_called_not_pasted_in() -> None:
    class Proxy:
        def __getattr__(self, name: str) -> Any:
            return lambda *a, **k: None

        def __call__(self, doc: Doc) -> Doc:
            doc.source["seen"] = True
            return doc

    (doc,) = compile_transforms([Proxy()])(Doc(Record("t", 0, 0, None, None, b"{}"), {}))
    assert doc.source == {"seen": True}


def test_apply_transforms_runs_the_transforms_it_is_given_not_equal_ones() -> None:
    """Its cache of compiled chains goes by identity: two transforms that compare equal
    may still do different things."""
    from dataclasses import dataclass, field

    from flows.transforms import apply_transforms

    @dataclass(frozen=True)
    class Tag:
        name: str
        value: str = field(compare=False)

        def __call__(self, doc: Doc) -> Doc:
            doc.source[self.name] = self.value
            return doc

    def fresh() -> Doc:
        return Doc(Record("t", 0, 0, None, None, b"{}"), {})

    assert apply_transforms([Tag("env", "prod")], fresh())[0].source == {"env": "prod"}
    assert apply_transforms([Tag("env", "staging")], fresh())[0].source == {"env": "staging"}
