"""Bad (and awkward but valid) Kafka records for the fuzz tests, deterministic for a seed.

`generate(seed, n_bad)` returns `Case`s: the key, value and headers to produce, and what the
flow must do with each one, for a topic whose index was created with `MAPPING` and a flow run
with `VALUE_FORMAT=json`, `KEY_FORMAT=string`, `DOC_ID=key`, `ON_NULL_KEY=dlq` and
`ON_NULL_VALUE=dlq`. `stage` is None for a record that must be indexed (its `_source` equal to
`orjson.loads(value)` under the id `key`), else the dead-letter stage it must carry
(`__connect.errors.stage`), with `error_class` and `reason` substrings that
`__connect.errors.exception.class.name` and `.exception.message` must contain (the reason
compared case-insensitively). `avro_cases()` does the same for `VALUE_FORMAT=avro`.

What is correct per kind, and why (probed against Elasticsearch 9.5.4 and orjson):

deserialize (the bytes are not a JSON object; `flows.decode.DecodeError`):
  invalid_utf8        invalid UTF-8 inside a value: overlong forms, CESU-8 surrogates, code
                      points past U+10FFFF, truncated sequences, stray bytes, a byte order mark.
  invalid_json        truncated documents, single quotes, bare words, comments, leading zeros,
                      control characters in strings, empty and blank values, random bytes.
  trailing_garbage    a valid object followed by anything but whitespace (a second document
                      included). Trailing whitespace alone is valid JSON (see `whitespace`).
  scalar / array      valid JSON that is not an object (the JSON text `null` included: that is
                      a value, not a tombstone).
  deep_nesting        nesting deeper than 1,024 levels (orjson's limit).
  nan_infinity        NaN, Infinity, -Infinity, and literals that overflow a double (1e400):
                      JSON has no such values and orjson would otherwise write `null`.
  lone_surrogate      `\\ud800`-style escapes without their pair, in values and in keys.
  int_beyond_64_bits  integer literals outside [-2**63, 2**64 - 1] (orjson would turn them
                      into floats and lose digits); those too large even for a double are
                      refused by orjson itself ("invalid JSON").
  key_invalid_utf8    a key that is not UTF-8 (KEY_FORMAT=string).
  tombstone           a null value with ON_NULL_VALUE=dlq (class `NullValue`).
  large_invalid       ~2 MB of invalid JSON: over the 1 MB default Kafka message size, so the
                      source must read it (librdkafka grows its fetch size) and the dead letter
                      must carry all of it (the DLQ producer allows 16 MB).

index, refused by the sink before Elasticsearch (`sinks.actions.ActionError`):
  null_key            a null key with DOC_ID=key and ON_NULL_KEY=dlq.
  empty_key           an empty key: Elasticsearch refuses an empty id.
  key_too_long        a key over 512 UTF-8 bytes (Elasticsearch's id limit).

index, refused by Elasticsearch (400, `elasticsearch.document_parsing_exception`):
  deep_nesting_es     1,001 to 1,024 levels: orjson decodes them, Elasticsearch's parser stops
                      at 1,000; and objects 22 to 254 deep (over index.mapping.depth.limit,
                      20: Elasticsearch's reason). For 1,001+ levels only the stage is fixed:
                      the product's encoder (orjson.dumps, at most 254 levels) refuses them
                      before Elasticsearch can (class ActionError), which is still a dead
                      letter at stage index with a reason.
  empty_field_name    "" , " ", ".", ".a", "a..b" as field names (at the top or nested).
  reserved_field      metadata field names at the top level: _id, _source, _index, _routing,
                      _version, _seq_no, _ignored, _field_names, _tier, _data_stream_timestamp.
  type_conflict       values that do not fit MAPPING: text or objects or booleans in the
                      integer `n`, out-of-range integers, bad dates, booleans and IPs, scalars
                      where `o` / `dotted.a` are objects, objects where `o.x` is a keyword.
  int_u64             integers in [2**63, 2**64 - 1]: valid JSON the decoder keeps, but beyond
                      Elasticsearch's long.
  too_many_fields     more than index.mapping.total_fields.limit (1,000) new fields.

valid, so indexed as they are (stage None):
  good                ordinary documents (most of the non-bad records).
  dotted_field        "dotted.a.b": Elasticsearch expands dots into objects; _source keeps the
                      original.
  trailing_dot        "tail.": Elasticsearch maps it as `tail`; accepted.
  underscore_field    "_foo", a nested "_id", and "_doc_count" (a metadata field Elasticsearch
                      does take from documents, as a positive integer).
  unicode             surrogate pairs written as escapes, non-ASCII field names, NUL escaped.
  tiny_float          1e-400 underflows to 0.0: a valid JSON number, no value lost that a
                      double could hold.
  deep_ok             arrays 100 to 250 levels deep (under every limit; 255 to 1,000 levels is
                      valid for Elasticsearch too but the product refuses it: an xfail test).
  int_64_edges        -2**63 and 2**63 - 1 in a long field.
  whitespace          leading and trailing whitespace around the object.
  key_512             a key of exactly 512 UTF-8 bytes.
  large_valid         1.5 MB, 3 MB and 9 MB documents: over Kafka's 1 MB default message size
                      (produce with message.max.bytes 16 MB; librdkafka's consumer grows
                      max.partition.fetch.bytes, 1 MB, to fetch them, and fetch.max.bytes,
                      50 MB, never holds back a first batch) and, at 9 MB, over BULK_MAX_BYTES
                      (8 MiB: sent alone). Not larger: on the 512 MB-heap test node a document
                      over ~10.7 MB exceeds Elasticsearch's indexing pressure limit (10% of
                      heap, counting the source 5 times) and is refused with a 429 every time:
                      an xfail test.

Not generated here, tested on their own in tests/integration/test_fuzz.py: a document larger
than Elasticsearch's http.max_content_length (`oversized_document`), and inputs the product
is known to get wrong (that module's xfail tests), so that one bug cannot hide the rest.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import orjson

DECODE_ERROR = "flows.decode.DecodeError"
ACTION_ERROR = "sinks.actions.ActionError"
ES_PARSE_ERROR = "elasticsearch.document_parsing_exception"

MAPPING = {
    "dynamic": True,
    "properties": {
        "i": {"type": "long"},
        "s": {"type": "keyword"},
        "n": {"type": "integer"},
        "u": {"type": "long"},
        "f": {"type": "double"},
        "d": {"type": "date"},
        "b": {"type": "boolean"},
        "ip": {"type": "ip"},
        "o": {"properties": {"x": {"type": "keyword"}}},
        "dotted": {"properties": {"a": {"properties": {"b": {"type": "keyword"}}}}},
        "tail": {"type": "long"},
        "arr": {"type": "long"},
        "_foo": {"type": "long"},
        "nested": {"properties": {"_id": {"type": "keyword"}}},
        "text": {"type": "keyword"},
        "blob": {"type": "keyword", "index": False, "doc_values": False},
    },
}
"""The index mapping the cases assume (create the index with it before the flow runs)."""

INDEX_SETTINGS = {"number_of_shards": 1, "number_of_replicas": 0}


@dataclass(frozen=True)
class Case:
    """One record to produce and its expected fate."""

    kind: str
    key: bytes | None
    value: bytes | None
    stage: str | None
    """None: must be indexed; else the dead-letter stage."""
    error_class: str = ""
    reason: str = ""
    headers: tuple[tuple[str, bytes], ...] = ()
    source: dict | None = None
    """The expected `_source` when the value is not JSON (avro); else orjson.loads(value)."""

    @property
    def bad(self) -> bool:
        return self.stage is not None

    def expected_source(self) -> dict:
        """The `_source` Elasticsearch must hold for a good case."""
        assert self.value is not None and self.stage is None
        return self.source if self.source is not None else orjson.loads(self.value)


@dataclass(frozen=True)
class _Kind:
    name: str
    stage: str | None
    error_class: str
    make: Callable[..., tuple[bytes, str]]
    """`make(rng)` (or `make(rng, nth)` for fixed kinds): (value, reason substring); the key
    is assigned by `make_case`."""
    weight: int = 10
    """Relative frequency among the bad (or valid-but-odd) cases; 0: exactly `fixed`."""
    fixed: int = 0
    key: Callable[[random.Random, int], bytes | None] | None = None
    """Overrides the generated unique key (kinds about keys)."""
    null_value: bool = False


def _good_doc(rng: random.Random, i: int) -> dict:
    doc: dict = {"i": i, "s": f"good-{i}"}
    if rng.random() < 0.7:
        doc["n"] = rng.randint(-(2**31), 2**31 - 1)
    if rng.random() < 0.5:
        doc["d"] = f"2024-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}T0{rng.randint(0, 9)}:00:00Z"
    if rng.random() < 0.5:
        doc["o"] = {"x": rng.choice(["a", "b", "\u00e9t\u00e9", "\u2603"])}
    if rng.random() < 0.3:
        doc["b"] = rng.random() < 0.5
    if rng.random() < 0.3:
        doc["ip"] = f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(0, 255)}"
    if rng.random() < 0.3:
        doc["f"] = rng.uniform(-1e6, 1e6)
    if rng.random() < 0.3:
        doc["text"] = "".join(rng.choice("abc \u00e9\u4e2d\U0001f600") for _ in range(20))
    return doc


def _obj(rng: random.Random) -> bytes:
    """A small valid JSON object (as bytes)."""
    return orjson.dumps(_good_doc(rng, rng.randint(0, 10**6)))


# -- deserialize


_BAD_UTF8 = [
    b"\xff",
    b"\xfe",
    b"\x80",
    b"\xc0\xaf",  # overlong '/'
    b"\xe0\x80\xaf",  # overlong
    b"\xed\xa0\x80",  # CESU-8 high surrogate
    b"\xed\xbf\xbf",  # CESU-8 low surrogate
    b"\xf4\x90\x80\x80",  # past U+10FFFF
    b"\xf8\x88\x80\x80\x80",  # 5-byte form
    b"\xe2\x82",  # truncated
    b"\xc3",  # truncated
]


def _invalid_utf8(rng: random.Random) -> tuple[bytes, str]:
    if rng.random() < 0.1:
        return b"\xef\xbb\xbf" + _obj(rng), "invalid JSON"  # byte order mark
    bad = rng.choice(_BAD_UTF8)
    where = rng.randrange(3)
    if where == 0:
        return b'{"text": "ab' + bad + b'cd"}', "invalid JSON"
    if where == 1:
        return b'{"k' + bad + b'": 1}', "invalid JSON"
    return b'{"o": {"x": "' + bad + b'"}, "i": 1}', "invalid JSON"


_INVALID_JSON = [
    b"",
    b" ",
    b"\n\t",
    b"{",
    b"}",
    b"{]",
    b'{"a"}',
    b'{"a":}',
    b'{"a":1,}',
    b'{"a":1 "b":2}',
    b"{'a': 1}",
    b"{a: 1}",
    b'{"a": undefined}',
    b'{"a": True}',
    b'{"a": nul}',
    b'{"a": 01}',
    b'{"a": 1.}',
    b'{"a": .5}',
    b'{"a": +1}',
    b'{"a": 0x10}',
    b'{"a": "\x00"}',
    b'{"a": "tab\there"}',
    b'{"a": "line\nbreak"}',
    b'{"a": "\\x41"}',
    b'{"a": "\\u12"}',
    b'{"a": "unterminated}',
    b'/* c */ {"a": 1}',
    b'{"a": 1 /* c */}',
    b'{"a": [1, 2}',
    b"\x00",
]


def _invalid_json(rng: random.Random) -> tuple[bytes, str]:
    r = rng.random()
    if r < 0.6:
        return rng.choice(_INVALID_JSON), "invalid JSON"
    if r < 0.8:
        whole = _obj(rng)  # a valid object cut short
        return whole[: rng.randrange(1, len(whole) - 1)], "invalid JSON"
    # random bytes that start like an object; drawn again in the rare case they parse
    while True:
        body = bytes(
            rng.choice(b'{}[]":,0123456789abcdeftrunl \\') for _ in range(rng.randint(1, 40))
        )
        value = b"{" + body
        try:
            orjson.loads(value)
        except orjson.JSONDecodeError:
            return value, "invalid JSON"


_GARBAGE = [b" x", b"}", b"{}", b'{"a":1}', b"\x00", b",", b"]", b" // c", b"1", b" null", b"\xff"]


def _trailing_garbage(rng: random.Random) -> tuple[bytes, str]:
    return _obj(rng) + rng.choice(_GARBAGE), "invalid JSON"


_SCALARS = [b"0", b"1", b"-2.5", b"1e10", b'"a string"', b'""', b"true", b"false", b"null",
            b' "spaced" ', b"12345678901234567"]  # fmt: skip


def _scalar(rng: random.Random) -> tuple[bytes, str]:
    return rng.choice(_SCALARS), "must be an object"


def _array(rng: random.Random) -> tuple[bytes, str]:
    return rng.choice([b"[]", b"[1, 2, 3]", b"[" + _obj(rng) + b"]", b"[null]"]), (
        "must be an object, got array"
    )


def _nest(depth: int, kind: str, inner: bytes = b"1") -> bytes:
    """A value `depth` levels deep, counting the outer object (ES counts the same way)."""
    levels = depth - 1
    if kind == "array":
        return b'{"arr":' + b"[" * levels + inner + b"]" * levels + b"}"
    if kind == "object":
        return b'{"deep":' * levels + b'{"x":' + inner + b"}" + b"}" * levels
    # mixed: alternate arrays and objects
    opening = b"".join(b"[" if j % 2 == 0 else b'{"m":' for j in range(levels))
    closing = b"".join(b"]" if j % 2 == 0 else b"}" for j in reversed(range(levels)))
    return b'{"mixed":' + opening + inner + closing + b"}"


def _deep_nesting(rng: random.Random) -> tuple[bytes, str]:
    depth = rng.choice([1025, 1026, rng.randint(1027, 5000), 20000])
    return _nest(depth, rng.choice(["array", "object", "mixed"])), "invalid JSON"


def _nan_infinity(rng: random.Random) -> tuple[bytes, str]:
    lit = rng.choice([b"NaN", b"-NaN", b"Infinity", b"-Infinity", b"inf", b"1e400", b"-1e400",
                      b"1.7976931348623159e308"])  # fmt: skip
    where = rng.randrange(3)
    if where == 0:
        return b'{"f": ' + lit + b"}", "invalid JSON"
    if where == 1:
        return b'{"i": 1, "l": [1, ' + lit + b"]}", "invalid JSON"
    return b'{"o": {"v": ' + lit + b"}}", "invalid JSON"


def _lone_surrogate(rng: random.Random) -> tuple[bytes, str]:
    esc = rng.choice([b"\\ud800", b"\\udbff", b"\\udc00", b"\\udfff", b"\\ud800\\u0041",
                      b"\\ud800\\ud800", b"\\udc00\\ud800"])  # fmt: skip
    if rng.random() < 0.3:
        return b'{"' + esc + b'": 1}', "invalid JSON"
    return b'{"text": "x' + esc + b'y"}', "invalid JSON"


def _int_beyond_64_bits(rng: random.Random) -> tuple[bytes, str]:
    value = rng.choice([2**64, 2**64 + rng.randint(1, 10**6), -(2**63) - 1, 10**30,
                        -(10**25), rng.randint(2**64, 2**200), -rng.randint(2**63 + 1, 2**100),
                        int("9" * 400)])  # fmt: skip
    text = str(value).encode()
    try:
        float(value)
        reason = "does not fit in 64 bits"
    except OverflowError:  # not even a double: orjson itself refuses it
        reason = "invalid JSON"
    where = rng.randrange(3)
    if where == 0:
        return b'{"u": ' + text + b"}", reason
    if where == 1:
        return b'{"i": 1, "l": [0, ' + text + b"]}", reason
    return b'{"o": {"deeper": {"v": ' + text + b"}}}", reason


def _valid_value(rng: random.Random) -> tuple[bytes, str]:
    return _obj(rng), ""


def _key_invalid_utf8(rng: random.Random, i: int) -> bytes:
    return b"bad-key-" + str(i).encode() + rng.choice(_BAD_UTF8)


def _large_invalid(rng: random.Random, nth: int = 0) -> tuple[bytes, str]:
    size = rng.randint(1_900_000, 2_200_000)
    body = b'{"blob": "' + b"x" * size + b'", "cut": '  # truncated: invalid
    return body, "invalid JSON"


# -- index: sink-side


def _null_key(_rng: random.Random, _i: int) -> bytes | None:
    return None


def _empty_key(_rng: random.Random, _i: int) -> bytes:
    return b""


def _long_key(rng: random.Random, i: int) -> bytes:
    prefix = f"long-{i}-".encode()
    if rng.random() < 0.5:
        return prefix + b"k" * rng.randint(513 - len(prefix), 2000)
    # multibyte: 512 characters would fit a 512-character limit but not 512 bytes
    return prefix + "\u00e9".encode() * rng.randint(256, 600)


# -- index: Elasticsearch


def _deep_nesting_es(rng: random.Random) -> tuple[bytes, str]:
    """Depth 1,001-1,024 (arrays or objects), or objects 22-254 deep (Elasticsearch's
    mapping depth limit; under orjson's encoding limit, so Elasticsearch gives the reason).
    The reason for the deeper ones is left open: see the module docstring."""
    if rng.random() < 0.6:
        depth = rng.choice([1001, 1002, rng.randint(1003, 1023), 1024])
        return _nest(depth, rng.choice(["array", "object"])), ""
    return _nest(rng.choice([22, rng.randint(23, 254)]), "object"), "mapping depth"


def _empty_field_name(rng: random.Random) -> tuple[bytes, str]:
    name = rng.choice(["", " ", "  ", ".", "..", ".a", "a..b", "o..x"])
    if rng.random() < 0.3:
        return orjson.dumps({"i": 1, "newobj": {name: 1}}), "field name"
    return orjson.dumps({"i": 1, name: 1}), "field name"


_RESERVED = ["_id", "_source", "_index", "_routing", "_version", "_seq_no", "_ignored",
             "_field_names", "_tier", "_data_stream_timestamp"]  # fmt: skip


def _reserved_field(rng: random.Random) -> tuple[bytes, str]:
    name = rng.choice(_RESERVED)
    value = rng.choice([1, "x", {"a": 1}])
    return orjson.dumps({"i": 2, name: value}), "metadata field"


_CONFLICTS = [
    ({"n": "abc"}, "[n]"),
    ({"n": {"x": 1}}, "[n]"),
    ({"n": True}, "[n]"),
    ({"n": 3000000000}, "[n]"),
    ({"n": -3000000000}, "[n]"),
    ({"d": "not a date"}, "[d]"),
    ({"d": "2024-13-45"}, "[d]"),
    ({"b": "maybe"}, "[b]"),
    ({"ip": "999.1.1.1"}, "[ip]"),
    ({"ip": "not-an-ip"}, "[ip]"),
    ({"o": 5}, "[o]"),
    ({"o": "text"}, "[o]"),
    ({"o": {"x": {"y": 1}}}, "[o.x]"),
    ({"o.x.y": 1}, "[o.x]"),
    ({"dotted": 5}, "[dotted]"),
    ({"dotted.a": 5}, "[dotted.a]"),
    ({"i": "twelve"}, "[i]"),
    ({"f": "not a number"}, "[f]"),
]


def _type_conflict(rng: random.Random) -> tuple[bytes, str]:
    doc, reason = rng.choice(_CONFLICTS)
    return orjson.dumps({"s": "conflict", **doc}), reason


def _int_u64(rng: random.Random) -> tuple[bytes, str]:
    value = rng.choice([2**63, 2**64 - 1, rng.randint(2**63, 2**64 - 1)])
    return b'{"u": ' + str(value).encode() + b"}", "out of range of long"


def _too_many_fields(rng: random.Random) -> tuple[bytes, str]:
    n = rng.randint(1001, 1200)
    return orjson.dumps({f"tmf_{j}": j for j in range(n)}), "total fields"


# -- valid but odd


def _dotted_field(rng: random.Random) -> tuple[bytes, str]:
    return orjson.dumps({"i": rng.randint(0, 9), "dotted.a.b": rng.choice(["v", "w"])}), ""


def _trailing_dot(rng: random.Random) -> tuple[bytes, str]:
    return orjson.dumps({"tail.": rng.randint(0, 100)}), ""


def _underscore_field(rng: random.Random) -> tuple[bytes, str]:
    doc = rng.choice([{"_foo": 1}, {"nested": {"_id": "inner"}}, {"_doc_count": rng.randint(1, 9)}])
    return orjson.dumps({"i": 3, **doc}), ""


def _unicode(rng: random.Random) -> tuple[bytes, str]:
    return rng.choice([
        b'{"text": "\\ud83d\\ude00 \\u00e9"}',
        b'{"text": "nul\\u0000inside"}',
        '{"text": "\u4e2d\u6587 \U0001f600", "\u00e9t\u00e9": 1}'.encode(),
        b'{"text": "\\u2028\\u2029 \\"quoted\\" \\\\ back"}',
    ]), ""  # fmt: skip


def _tiny_float(_rng: random.Random) -> tuple[bytes, str]:
    return b'{"f": 1e-400}', ""


def _deep_ok(rng: random.Random) -> tuple[bytes, str]:
    return _nest(rng.randint(100, 250), "array"), ""


def _int_64_edges(rng: random.Random) -> tuple[bytes, str]:
    return orjson.dumps({"u": rng.choice([2**63 - 1, -(2**63), 0])}), ""


def _whitespace(rng: random.Random) -> tuple[bytes, str]:
    return rng.choice([b" ", b"\t", b"\r\n", b"\n\n"]) + _obj(rng) + rng.choice(
        [b" ", b"\n", b"\r\n\t "]
    ), ""


def _key_512(rng: random.Random, i: int) -> bytes:
    prefix = f"k512-{i}-".encode()
    return prefix + b"k" * (512 - len(prefix))


_LARGE_SIZES = [1_500_000, 3_000_000, 9_000_000]


def _large_valid(rng: random.Random, nth: int = 0) -> tuple[bytes, str]:
    size = _LARGE_SIZES[nth % len(_LARGE_SIZES)]
    letters = "abcdefghij"
    blob = "".join(rng.choice(letters) for _ in range(64)) * (size // 64)
    return orjson.dumps({"i": size, "blob": blob}), ""


KINDS: list[_Kind] = [
    # deserialize
    _Kind("invalid_utf8", "deserialize", DECODE_ERROR, _invalid_utf8),
    _Kind("invalid_json", "deserialize", DECODE_ERROR, _invalid_json),
    _Kind("trailing_garbage", "deserialize", DECODE_ERROR, _trailing_garbage),
    _Kind("scalar", "deserialize", DECODE_ERROR, _scalar),
    _Kind("array", "deserialize", DECODE_ERROR, _array),
    _Kind("deep_nesting", "deserialize", DECODE_ERROR, _deep_nesting, weight=3),
    _Kind("nan_infinity", "deserialize", DECODE_ERROR, _nan_infinity),
    _Kind("lone_surrogate", "deserialize", DECODE_ERROR, _lone_surrogate),
    _Kind("int_beyond_64_bits", "deserialize", DECODE_ERROR, _int_beyond_64_bits),
    _Kind("key_invalid_utf8", "deserialize", DECODE_ERROR, _valid_value, key=_key_invalid_utf8),
    _Kind("tombstone", "deserialize", "NullValue", _valid_value, null_value=True),
    _Kind("large_invalid", "deserialize", DECODE_ERROR, _large_invalid, weight=0, fixed=2),
    # index, refused by the sink
    _Kind("null_key", "index", ACTION_ERROR, _valid_value, key=_null_key),
    _Kind("empty_key", "index", ACTION_ERROR, _valid_value, weight=3, key=_empty_key),
    _Kind("key_too_long", "index", ACTION_ERROR, _valid_value, weight=3, key=_long_key),
    # index, refused by Elasticsearch
    _Kind("deep_nesting_es", "index", ES_PARSE_ERROR, _deep_nesting_es, weight=3),
    _Kind("empty_field_name", "index", ES_PARSE_ERROR, _empty_field_name),
    _Kind("reserved_field", "index", ES_PARSE_ERROR, _reserved_field),
    _Kind("type_conflict", "index", ES_PARSE_ERROR, _type_conflict),
    _Kind("int_u64", "index", ES_PARSE_ERROR, _int_u64),
    _Kind("too_many_fields", "index", ES_PARSE_ERROR, _too_many_fields, weight=1),
    # valid, however odd
    _Kind("dotted_field", None, "", _dotted_field, weight=2),
    _Kind("trailing_dot", None, "", _trailing_dot, weight=2),
    _Kind("underscore_field", None, "", _underscore_field, weight=2),
    _Kind("unicode", None, "", _unicode, weight=2),
    _Kind("tiny_float", None, "", _tiny_float, weight=1),
    _Kind("deep_ok", None, "", _deep_ok, weight=1),
    _Kind("int_64_edges", None, "", _int_64_edges, weight=1),
    _Kind("whitespace", None, "", _whitespace, weight=2),
    _Kind("key_512", None, "", _valid_value, weight=1, key=_key_512),
    _Kind("large_valid", None, "", _large_valid, weight=0, fixed=3),
]
KIND_BY_NAME = {k.name: k for k in KINDS}
BAD_KINDS = [k.name for k in KINDS if k.stage is not None]


def make_case(kind: str, rng: random.Random, i: int, nth: int = 0) -> Case:
    """One case of `kind` (its `nth`), with the unique key `fuzz-<i>` unless the kind is
    about keys."""
    k = KIND_BY_NAME[kind]
    value, reason = k.make(rng, nth) if k.fixed else k.make(rng)
    key = k.key(rng, i) if k.key else f"fuzz-{i}".encode()
    if k.null_value:
        value, reason = None, "null value"
    if kind == "null_key":
        reason = "no key"
    elif kind == "empty_key" or kind == "key_too_long":
        reason = "512 bytes"
    elif kind == "key_invalid_utf8":
        reason = "invalid UTF-8"
    error_class = k.error_class
    if kind == "deep_nesting_es" and not reason:
        error_class = ""  # refused by the encoder or by Elasticsearch: see the docstring
    headers: tuple[tuple[str, bytes], ...] = ()
    if i % 7 == 0:
        headers = (("trace", f"t-{i}".encode()), ("bin", bytes([i % 256, 0, 255])))
    return Case(kind, key, value, k.stage, error_class, reason, headers)


def generate(
    seed: int = 0, n_bad: int = 10_000, good_ratio: float = 0.25, kinds: list[str] | None = None
) -> list[Case]:
    """At least `n_bad` bad cases of `kinds` (default: every kind), mixed with good records.

    Deterministic for a seed. Weighted kinds are drawn at random; fixed kinds (the large ones)
    appear exactly `fixed` times. Valid-but-odd kinds count as good records. Ordinary good
    documents make up about `good_ratio` of the result.
    """
    rng = random.Random(seed)
    chosen = [KIND_BY_NAME[k] for k in kinds] if kinds is not None else KINDS
    weighted = [k for k in chosen if k.weight]
    weights = [k.weight for k in weighted]
    picks: list[str] = [k.name for k in chosen if not k.weight for _ in range(k.fixed)]
    n_bad_picked = sum(1 for p in picks if KIND_BY_NAME[p].stage is not None)
    while n_bad_picked < n_bad:
        k = rng.choices(weighted, weights)[0]
        picks.append(k.name)
        n_bad_picked += k.stage is not None
    n_good = int(len(picks) * good_ratio / (1 - good_ratio))
    picks.extend(["good"] * n_good)
    rng.shuffle(picks)
    out: list[Case] = []
    seen: dict[str, int] = {}
    for i, kind in enumerate(picks):
        if kind == "good":
            doc = _good_doc(rng, i)
            value = orjson.dumps(doc)
            headers = (("h", str(i).encode()),) if i % 11 == 0 else ()
            out.append(Case("good", f"fuzz-{i}".encode(), value, None, headers=headers))
        else:
            seen[kind] = seen.get(kind, 0) + 1
            out.append(make_case(kind, rng, i, seen[kind] - 1))
    return out


def check(case: Case) -> None:
    """Assert what the generator can verify locally (orjson's verdict on JSON kinds)."""
    k = KIND_BY_NAME.get(case.kind)
    if case.value is None:
        return
    try:
        doc = orjson.loads(case.value)
    except orjson.JSONDecodeError:
        ok = False
    else:
        ok = isinstance(doc, dict)
    if case.kind in ("int_beyond_64_bits",):
        return  # orjson reads these (as floats); the decoder's own check refuses them
    if k is not None and k.stage == "deserialize" and k.key is None:
        assert not ok, f"{case.kind}: orjson accepts {case.value[:80]!r}"
    else:
        assert ok, f"{case.kind}: orjson refuses {case.value[:80]!r}"


def oversized_document(size: int = 101 * 1024 * 1024) -> bytes:
    """A valid JSON object of `size` bytes (default 101 MiB: over Elasticsearch's default
    http.max_content_length of 100mb), highly compressible so Kafka takes it compressed."""
    head, tail = b'{"blob": "', b'"}'
    return head + b"z" * (size - len(head) - len(tail)) + tail


def avro_cases(
    serialize: Callable[[dict], bytes],
    serialize_string: Callable[[str], bytes],
    known_id: int,
    seed: int = 0,
    n_bad: int = 300,
) -> list[Case]:
    """Avro records: good ones from `serialize` (a registered record schema), bad ones with
    Schema Registry framing that cannot decode, in a deterministic mix.

    Bad (stage deserialize, DecodeError): an unknown schema id (magic byte 0 + an id the
    registry does not have), an unknown schema GUID (magic byte 1), a wrong magic byte,
    framing shorter than 5 bytes, an empty value, a known id with a body that is not valid
    Avro for it (truncated), and a valid Avro string (not a record: not an object).
    """
    rng = random.Random(seed)
    out: list[Case] = []
    for i in range(n_bad):
        r = rng.randrange(7)
        if r == 0:
            sid = rng.choice([9999, 123456, 2**31 - 1, 2**32 - 1, known_id + 1000])
            value = b"\x00" + sid.to_bytes(4, "big") + bytes(rng.randrange(256) for _ in range(8))
            reason = f"schema id {sid}"
        elif r == 1:
            guid = rng.randbytes(16)
            value = b"\x01" + guid + b"\x02\x04"
            # "not in the registry", or that it has no GUID lookup (Apicurio Registry)
            reason = f"schema guid {uuid.UUID(bytes=guid)}"
        elif r == 2:
            magic = rng.choice([2, 3, 0x7B, 0xFF])  # 0x7B: '{', plain JSON sent by mistake
            value = bytes([magic]) + rng.randbytes(rng.randint(4, 30))
            reason = "cannot decode"
        elif r == 3:
            value = b"\x00" + rng.randbytes(rng.randint(0, 3))
            reason = "cannot decode"
        elif r == 4:
            value = b""
            reason = "empty payload"
        elif r == 5:
            full = serialize({"id": i, "name": f"n{i}", "tags": ["x"] * rng.randint(1, 5)})
            value = full[: rng.randint(5, len(full) - 1)]  # known id, body cut short
            reason = f"schema id {known_id}"
        else:
            value = serialize_string(f"not a record {i}")
            reason = "must be an object"
        out.append(
            Case("avro_bad", f"avro-{i}".encode(), value, "deserialize", DECODE_ERROR, reason)
        )
    goods = []
    for i in range(n_bad // 2):
        doc = {"id": i, "name": f"good-{i}", "tags": [str(j) for j in range(i % 4)]}
        goods.append(Case("avro_good", f"avro-good-{i}".encode(), serialize(doc), None, source=doc))
    mixed = out + goods
    rng.shuffle(mixed)
    return mixed
