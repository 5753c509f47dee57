"""The values that flow through the pipeline: a Kafka record, a document, an encoded bulk
action, a dead letter, and the dotted paths that address a document's fields.

A `Record` is the untouched Kafka record (original bytes and coordinates). It travels with
every document made from it, every action and every dead letter, so offsets and original
bytes survive any transform, index rename or fan-out; an action made without a document
keeps the consumed message instead, which is the same record (`Action.origin`). `Action`
and `DeadLetter` cross Bytewax's exchange between workers (pickled) as plain data: an
action that kept its message crosses with its `Record`.

This is the bottom of the stack: it imports nothing from this project.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol, cast

Headers = tuple[tuple[str, bytes | None], ...]
Stage = Literal["deserialize", "transform", "index"]


@dataclass(slots=True)
class Record:
    """One Kafka record as consumed: never modified after the source builds it."""

    topic: str
    partition: int
    offset: int
    timestamp: int | None
    """Record timestamp in epoch milliseconds, or None when the broker has none."""
    key: bytes | None
    value: bytes | None
    headers: Headers = ()

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its constructor's arguments (see `Action.__reduce__`)."""
        return (
            type(self),
            (self.topic, self.partition, self.offset, self.timestamp, self.key, self.value,
             self.headers),
        )  # fmt: skip

    @property
    def coordinates(self) -> str:
        """`topic-partition-offset`: unique per record, stable across replays."""
        return f"{self.topic}-{self.partition}-{self.offset}"

    @property
    def where(self) -> str:
        """`topic/partition@offset`: how logs and errors name the record."""
        return f"{self.topic}/{self.partition}@{self.offset}"

    def header(self, name: str) -> bytes | None:
        """The last value of header `name` (Kafka allows repeats), or None."""
        found = None
        for k, v in self.headers:
            if k == name:
                found = v
        return found


class KafkaMessage(Protocol):
    """What `record_of` reads of a consumed message (a `confluent_kafka.Message`)."""

    def topic(self) -> Any: ...
    def partition(self) -> Any: ...
    def offset(self) -> Any: ...
    def timestamp(self) -> tuple[int, int]: ...
    def key(self) -> Any: ...
    def value(self) -> Any: ...
    def headers(self) -> Any: ...


_TIMESTAMP_NOT_AVAILABLE = 0
"""`confluent_kafka.TIMESTAMP_NOT_AVAILABLE` (this module imports no library)."""


def record_of(origin: Record | KafkaMessage) -> Record:
    """`origin` as a Record: itself, or the Record of a consumed message."""
    if isinstance(origin, Record):
        return origin
    ts_type, ts = origin.timestamp()
    headers = origin.headers()
    return Record(
        origin.topic(),
        origin.partition(),
        origin.offset(),
        None if ts_type == _TIMESTAMP_NOT_AVAILABLE else ts,
        origin.key(),
        origin.value(),
        tuple(headers) if headers else (),
    )


@dataclass(slots=True)
class Doc:
    """A document on its way to Elasticsearch, as transforms see and change it.

    `source` is the document body (None only for a delete). `key` is the decoded record key
    (transforms may replace it). `index`, `id` and `routing` left as None are filled in by
    the configured defaults (ES_INDEX, DOC_ID) after the last transform.

    `action` left as None writes with WRITE_METHOD; a transform sets it to write this record
    alone another way: `index`, `create`, `update`, `upsert`, `script` or `delete`.
    `delete=True` means the same as `action="delete"` (the older spelling, kept for
    tombstones and existing transforms); a Doc with `delete=True` and another action is
    refused (a dead letter).
    """

    record: Record
    source: dict[str, Any] | None
    key: Any = None
    index: str | None = None
    id: str | None = None
    routing: str | None = None
    delete: bool = False
    meta: dict[str, Any] = field(default_factory=dict)
    """Free space for user transforms to pass values to later transforms."""
    action: str | None = None
    topic: str | None = None
    """The record's topic as a router renamed it (the `route` transform's index template or
    topic_regex sets it to the index it names), else None. ES_INDEX_NAMING=connect names a
    coordinates id after it, as Kafka Connect's sink names `topic+partition+offset` after
    the topic its routers (RegexRouter, TimestampRouter) made."""


@dataclass(slots=True)
class Action:
    """One encoded bulk action with the record it came from (for dead letters)."""

    id: str | None
    data: bytes
    origin: Record | KafkaMessage
    """The record it came from: a `Record`, or the consumed message itself where none was
    made (the common case in `flows.process`: a `Record` per record was a fifth of its
    time there, and the sink needs one only for a dead letter, or to pickle the action for
    another process). Group a record's actions by `id(origin)`, never by `id(record)`: a
    message's `record` is a new object each time."""

    @property
    def record(self) -> Record:
        """The record it came from, as a `Record`."""
        return record_of(self.origin)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its constructor's arguments: actions cross Bytewax's exchange between
        processes, and the default (`copyreg.__newobj__` and a dict of slot names per
        object, set back one by one) took almost twice as long for a small action. These
        classes are not meant to be subclassed: a subclass's own fields would not be
        pickled."""
        return (type(self), (self.id, self.data, self.record))


class Actions(list[Action]):
    """The actions one batch sends to one sink partition: the item that crosses Bytewax's
    exchange. Pickled as columns (ids, bodies, and each `Record` field as a list), not as
    one reduce per action and per record, which takes twice as long, and with 2 processes
    half the actions cross. Actions that kept their message give its fields straight into
    the columns: through a `Record` each would cost more (docs/benchmarks.md, "Figures
    behind the code")."""

    __slots__ = ()

    def __reduce__(self) -> tuple[Any, ...]:
        origins = [a.origin for a in self]
        kinds = {type(o) for o in origins}
        head = ([a.id for a in self], [a.data for a in self])
        if not any(issubclass(k, Record) for k in kinds):  # messages (`flows.process`)
            # `record_of`'s conversion, as columns: through a function per message
            # (`zip(*map(...))`) it measured slower, for small and large actions.
            msgs = cast(list[KafkaMessage], origins)
            stamps = [m.timestamp() for m in msgs]
            headers = [m.headers() for m in msgs]
            return (
                _actions,
                (*head, [m.topic() for m in msgs], [m.partition() for m in msgs],
                 [m.offset() for m in msgs],
                 [None if kind == _TIMESTAMP_NOT_AVAILABLE else ts for kind, ts in stamps],
                 [m.key() for m in msgs], [m.value() for m in msgs],
                 [tuple(h) if h else () for h in headers]),
            )  # fmt: skip
        recs = [record_of(o) for o in origins] if len(kinds) > 1 else cast(list[Record], origins)
        return (
            _actions,
            (*head, [r.topic for r in recs], [r.partition for r in recs],
             [r.offset for r in recs], [r.timestamp for r in recs], [r.key for r in recs],
             [r.value for r in recs], [r.headers for r in recs]),
        )  # fmt: skip


def _actions(
    ids: list[str | None],
    data: list[bytes],
    topics: list[str],
    partitions: list[int],
    offsets: list[int],
    *rest: list[Any],
) -> Actions:
    """`Actions.__reduce__`'s columns back to actions (module level: pickled by name).

    The actions of one record (a fan-out) share one `Record` again: the sink counts a
    record's failures by that object (one dead letter per record). They are consecutive in
    a chunk (`flows.process` appends a record's actions before the next record's), and a
    record is its (topic, partition, offset)."""
    out = Actions()
    add = out.append
    rec: Record | None = None
    for i, d, t, p, o, more in zip(
        ids, data, topics, partitions, offsets, zip(*rest, strict=True), strict=True
    ):
        if rec is None or o != rec.offset or p != rec.partition or t != rec.topic:
            rec = Record(t, p, o, *more)
        add(Action(i, d, rec))
    return out


@dataclass(slots=True)
class DeadLetter:
    """A record that failed at `stage`; its original bytes go to the dead-letter topic."""

    record: Record
    stage: Stage
    error_class: str
    message: str
    stacktrace: str | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its constructor's arguments (see `Action.__reduce__`)."""
        return (
            type(self),
            (self.record, self.stage, self.error_class, self.message, self.stacktrace),
        )

    @classmethod
    def from_exception(
        cls, record: Record, stage: Stage, exc: BaseException, with_trace: bool = False
    ) -> DeadLetter:
        """Describe `exc` without its chained causes (they may quote secrets or huge input)."""
        trace = None
        if with_trace:
            import traceback

            trace = "".join(traceback.format_exception(exc, chain=False))
        cls_name = f"{type(exc).__module__}.{type(exc).__qualname__}"
        return cls(record, stage, cls_name, str(exc), trace)


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"

    def __reduce__(self) -> str:
        return "MISSING"


MISSING: Final[Any] = _Missing()
"""What `FieldPath.get` returns for a path that does not exist (never a document value)."""


class FieldPath:
    """A dotted path into a document: `a.b.c` walks nested objects.

    One meaning of null, everywhere a path is read: a path exists only through objects.
    A key that holds null is there and its value is None (`get` returns None); a key that
    is absent, or a step through anything but an object (null, a list, a number), means
    the path is missing (`get` returns MISSING). `set` creates the objects on the way and
    replaces a null there by an object. Paths do not index into lists, and a field whose
    name contains a dot cannot be addressed. What a None or MISSING value means (skip,
    dead-letter, no routing) is the reader's rule, written where it reads the path.
    """

    __slots__ = ("dotted", "head", "keys", "last")

    def __init__(self, dotted: str) -> None:
        keys = tuple(dotted.split("."))
        if not dotted or not all(keys):
            msg = f"expected a dotted path such as a.b.c, got {dotted!r}"
            raise ValueError(msg)
        self.dotted = dotted
        self.keys = keys
        self.head = keys[:-1]
        self.last = keys[-1]

    def get(self, source: Any, default: Any = MISSING) -> Any:
        """The value at this path (None for a null), or `default` (MISSING) when the path
        does not exist. `get(src, None)` reads a missing path and a null alike."""
        value = source
        for key in self.keys:
            if not isinstance(value, dict):
                return default
            value = value.get(key, MISSING)
        return default if value is MISSING else value

    def parent(self, source: Any) -> dict[str, Any] | None:
        """The object holding the last key, or None when there is none on this path."""
        obj = source
        for key in self.head:
            if not isinstance(obj, dict):
                return None
            obj = obj.get(key)
        return obj if isinstance(obj, dict) else None

    def pop(self, source: Any) -> Any:
        """Remove the value at this path and return it, or MISSING (nothing changes)."""
        parent = self.parent(source)
        return MISSING if parent is None else parent.pop(self.last, MISSING)

    def set(self, source: dict[str, Any], value: Any) -> None:
        """Set the value at this path, creating objects on the way (a null there becomes
        an object); ValueError when a step holds something else."""
        obj = source
        for key in self.head:
            child = obj.get(key)
            if child is None:
                child = obj[key] = {}
            elif not isinstance(child, dict):
                kind = type(child).__name__
                msg = f"cannot set {self.dotted}: {key} holds {kind}, not an object"
                raise ValueError(msg)
            obj = child
        obj[self.last] = value

    def __str__(self) -> str:
        return self.dotted

    def __repr__(self) -> str:
        return f"FieldPath({self.dotted!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FieldPath) and other.keys == self.keys

    def __hash__(self) -> int:
        return hash(self.keys)

    def __reduce__(self) -> tuple[type, tuple[str]]:
        return (FieldPath, (self.dotted,))
