"""Index name patterns: `{topic}` and date patterns such as `logs-{yyyy.MM.dd}`; and
Elasticsearch's rules for index names (`problem`), which every name a record produces is
held to before it reaches a request; and the names Kafka Connect's Elasticsearch sink gives
(`connect_index_name`, `connect_data_stream_name`), which ES_INDEX_NAMING=connect applies.

(Not an Elasticsearch *index template*: that is ES_INDEX_TEMPLATE_FILE, `bootstrap`.)

A pattern is compiled once; rendering caches the date part per UTC hour, so the per-record
cost is a dict lookup, not a strftime.
"""

from __future__ import annotations

import re
import time

_FIELD = re.compile(r"\{([^{}]*)\}")
_DATE_TOKEN = re.compile(r"yyyy|yy|MM|dd|HH")
_STRFTIME = {"yyyy": "%Y", "yy": "%y", "MM": "%m", "dd": "%d", "HH": "%H"}

MAX_INDEX_BYTES = 255
_FORBIDDEN = re.compile(r'[\\/*?"<>|,# :]')
"""What Elasticsearch refuses in an index name (`:` too: it separates a remote cluster)."""


def problem(name: str) -> str | None:
    """Why Elasticsearch would refuse `name` as an index name, or None when it is valid:
    lower case, none of `\\ / * ? " < > | , # :` or space, not starting with `-`, `_` or
    `+`, not `.` or `..`, 1 to 255 bytes (UTF-8)."""
    if not name:
        return "an index name must not be empty"
    bad = _FORBIDDEN.search(name)
    if bad is not None:
        return f"index name {name[:80]!r} contains {bad.group(0)!r}"
    if name[0] in "-_+":
        return f"index name {name[:80]!r} must not start with {name[0]!r}"
    if name in (".", ".."):
        return f"index name {name!r} is not allowed"
    if name.lower() != name:
        return f"index name {name[:80]!r} must be lower case"
    long = len(name) > MAX_INDEX_BYTES // 4  # then count its bytes
    if long and len(name.encode("utf-8", "surrogatepass")) > MAX_INDEX_BYTES:
        return f"index name {name[:40]!r}... is longer than {MAX_INDEX_BYTES} bytes"
    return None


CONNECT_NAMING = "connect"
"""ES_INDEX_NAMING=connect: every index name is rewritten by `connect_index_name` first."""


def _java_prefix(text: str, units: int) -> str:
    """`text.substring(0, units)` as Java counts: in UTF-16 code units."""
    if len(text) <= units // 2 or text.isascii():
        return text[:units]
    data = text.encode("utf-16-le", "surrogatepass")
    return data[: 2 * units].decode("utf-16-le", "surrogatepass")


def connect_index_name(topic: str) -> str:
    """The index Kafka Connect's Elasticsearch sink writes a record of `topic` to (the topic
    after its transforms) when no mapping names one: the topic lower-cased, cut to 255
    characters (Java's, UTF-16 code units), one leading `-` or `_` dropped, and `.` or `..`
    spelled `dot` or `dotdot` (confluentinc/kafka-connect-elasticsearch,
    `ElasticsearchSinkTask.convertTopicToIndexName`). What is still invalid (a second
    leading `_`, a `*`) stays so: the connector fails on it, the flow dead-letters it."""
    name = _java_prefix(topic.lower(), MAX_INDEX_BYTES)
    if name.startswith(("-", "_")):
        name = name[1:]
    if name in (".", ".."):
        name = name.replace(".", "dot")
    return name


DATA_STREAM_NAMESPACE_CHARS = 100


def connect_data_stream_name(kind: str, dataset: str, namespace: str, topic: str) -> str:
    """The data stream Kafka Connect's Elasticsearch sink writes a record of `topic` to:
    `{type}-{dataset}-{namespace}`, the type lower-cased, `${topic}` in the namespace
    replaced by the lower-cased topic, the namespace cut to 100 characters."""
    ns = _java_prefix(namespace.replace("${topic}", topic.lower()), DATA_STREAM_NAMESPACE_CHARS)
    return f"{kind.lower()}-{dataset}-{ns}"


class IndexName:
    """A compiled index name pattern; `render(topic, timestamp_ms)` gives the index."""

    __slots__ = ("_cache", "_parts", "has_date", "template")

    def __init__(self, template: str) -> None:
        self.template = template
        # Each part is ("lit", text), ("topic", "") or ("date", strftime pattern).
        self._parts: list[tuple[str, str]] = []
        pos = 0
        for m in _FIELD.finditer(template):
            if m.start() > pos:
                self._parts.append(("lit", template[pos : m.start()]))
            name = m.group(1)
            if name == "topic":
                self._parts.append(("topic", ""))
            elif _DATE_TOKEN.search(name) and not re.sub(r"yyyy|yy|MM|dd|HH|[^A-Za-z]", "", name):
                self._parts.append(("date", _DATE_TOKEN.sub(lambda t: _STRFTIME[t.group(0)], name)))
            else:
                msg = (
                    f"unknown placeholder {{{name}}} in {template!r}; "
                    "use {topic} or a date pattern of yyyy, yy, MM, dd, HH"
                )
                raise ValueError(msg)
            pos = m.end()
        if pos < len(template):
            self._parts.append(("lit", template[pos:]))
        self.has_date = any(kind == "date" for kind, _ in self._parts)
        self._cache: dict[tuple[str, int], str] = {}

    @property
    def is_static(self) -> bool:
        """True when the pattern renders the same name for every record."""
        return all(kind == "lit" for kind, _ in self._parts)

    def render(self, topic: str, timestamp_ms: int | None) -> str:
        """The index name for a record of `topic` at `timestamp_ms` (UTC; now if None)."""
        if timestamp_ms is None or timestamp_ms < 0:
            timestamp_ms = int(time.time() * 1000)
        hour = timestamp_ms // 3_600_000 if self.has_date else 0
        key = (topic, hour)
        name = self._cache.get(key)
        if name is None:
            if len(self._cache) > 10_000:
                self._cache.clear()
            tm = time.gmtime(hour * 3600)
            name = "".join(
                text if kind == "lit" else topic if kind == "topic" else time.strftime(text, tm)
                for kind, text in self._parts
            )
            self._cache[key] = name
        return name
