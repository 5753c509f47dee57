"""The `route` built-in: choose the index (a dated template, or from the topic) and routing.

An index from a template or from topic_regex is what Kafka Connect's TimestampRouter or
RegexRouter makes of the topic, so it is also recorded as the routed topic (`Doc.topic`)."""

from __future__ import annotations

import re
from collections.abc import Callable

from flows.record import Doc
from flows.transforms.compiled import inline
from flows.transforms.entry import CACHE_LIMIT, Entry
from flows.transforms.headers import required_header
from flows.transforms.ids import id_string, required_field
from flows.transforms.registry import Transform, builtin
from flows.transforms.timestamps import epoch_ms
from sinks.elasticsearch.index_names import IndexName
from sinks.model import MISSING, FieldPath

_DOLLAR_GROUP = re.compile(r"\$(?:(\d+)|\{(\w+)\}|(\$))")


@builtin(
    "route",
    keys=(
        "index",
        "timestamp_field",
        "topic_regex",
        "replacement",
        "index_header",
        "routing_field",
        "routing_header",
    ),
    doc="""index (template such as `logs-{yyyy.MM.dd}`, dated by the record timestamp or by
    timestamp_field: epoch ms or ISO string), or topic_regex + replacement (`idx-$1`,
    `idx-\\1`, `${name}`; index left unchanged unless the topic fully matches), or
    index_header (the header's text is the index); the index from a template or topic_regex
    is also the record's routed topic (doc.topic: ES_INDEX_NAMING=connect names coordinates
    ids after it, as Kafka Connect's routers); routing_field or routing_header sets
    doc.routing (missing, or not a non-empty string or an integer: ValueError). Header text
    is UTF-8, or base64 when it is not.""",
)
def route(e: Entry) -> Transform:
    given = [k for k in ("index", "topic_regex", "index_header") if e.has(k)]
    if len(given) > 1:
        e.reject(f".{given[1]}", f"give either {given[0]} or {given[1]}, not both")
    if e.has("routing_field") and e.has("routing_header"):
        e.reject(".routing_header", "give either routing_field or routing_header, not both")
    if not given and not e.has("routing_field") and not e.has("routing_header"):
        e.reject(".index", "required for type route (or topic_regex, index_header, routing_field)")
    if e.has("replacement") and not e.has("topic_regex"):
        e.reject(".replacement", "only valid with topic_regex")
    if e.has("timestamp_field") and not e.has("index"):
        e.reject(".timestamp_field", "only valid with index")

    set_index: Callable[[Doc], None] | None = None
    if e.has("index"):
        try:
            template = IndexName(e.req_text("index"))
        except ValueError as exc:
            e.reject(".index", str(exc))
        if e.has("timestamp_field"):
            if not template.has_date:
                e.reject(".timestamp_field", "the index template has no date part")
            set_index = _index_from_field(template, e.path("timestamp_field"))
        else:
            set_index = _index_from_record(template)
    elif e.has("topic_regex"):
        set_index = _index_from_topic(e, e.regex("topic_regex"))
    elif e.has("index_header"):
        set_index = _index_from_header(e.req_text("index_header"))

    get_routing: Callable[[Doc], str]
    if e.has("routing_header"):
        header = e.req_text("routing_header")

        def get_routing(doc: Doc) -> str:
            return required_header(doc, header, "route")

    elif e.has("routing_field"):
        routing = e.path("routing_field")

        def get_routing(doc: Doc) -> str:
            return id_string(required_field(doc, routing, "route"), routing, "route")

    else:
        assert set_index is not None
        only_index = set_index

        def route_index(doc: Doc) -> Doc:
            only_index(doc)
            return doc

        spec = getattr(only_index, "__inline__", None)
        if spec is None:
            return route_index
        return inline(route_index, spec.code, **spec.names)

    def route(doc: Doc) -> Doc:
        if set_index is not None:
            set_index(doc)
        doc.routing = get_routing(doc)
        return doc

    return route


def _index_from_header(name: str) -> Callable[[Doc], None]:
    def header_index(doc: Doc) -> None:
        doc.index = required_header(doc, name, "route")

    return header_index


def _index_from_record(template: IndexName) -> Callable[[Doc], None]:
    if template.is_static:
        name = template.template

        def static_index(doc: Doc) -> None:
            doc.index = doc.topic = name

        return inline(static_index, "doc.index = doc.topic = $name", name=name)
    render = template.render

    def record_index(doc: Doc) -> None:
        record = doc.record
        doc.index = doc.topic = render(record.topic, record.timestamp)

    return record_index


def _index_from_field(template: IndexName, path: FieldPath) -> Callable[[Doc], None]:
    render = template.render
    name = path.dotted

    def field_index(doc: Doc) -> None:
        value = required_field(doc, path, "route")
        try:
            ms = epoch_ms(value)
        except ValueError as exc:
            msg = f"route: timestamp_field {name}: {exc}"
            raise ValueError(msg) from None
        doc.index = doc.topic = render(doc.record.topic, ms)

    return field_index


def _index_from_topic(e: Entry, pattern: re.Pattern[str]) -> Callable[[Doc], None]:
    raw = e.req_text("replacement")
    replacement = _DOLLAR_GROUP.sub(
        lambda m: "$" if m.group(3) else f"\\g<{m.group(1) or m.group(2)}>", raw
    )
    try:
        pattern.sub(replacement, "")  # checks group references without a match
    except (re.error, IndexError) as exc:
        e.reject(".replacement", f"invalid replacement {raw!r}: {exc}")
    cache: dict[str, str | None] = {}

    def topic_index(doc: Doc) -> None:
        topic = doc.record.topic
        name = cache.get(topic, MISSING)
        if name is MISSING:
            if len(cache) > CACHE_LIMIT:
                cache.clear()
            m = pattern.fullmatch(topic)
            name = cache[topic] = None if m is None else m.expand(replacement)
        if name is not None:
            doc.index = doc.topic = name

    code = """$topic = record.topic
$name = $cache.get($topic, _MISSING)
if $name is _MISSING:
    if len($cache) > $limit:
        $cache.clear()
    $match = $pattern.fullmatch($topic)
    $name = $cache[$topic] = None if $match is None else $match.expand($replacement)
if $name is not None:
    doc.index = doc.topic = $name"""
    return inline(
        topic_index,
        code,
        cache=cache,
        limit=CACHE_LIMIT,
        pattern=pattern,
        replacement=replacement,
    )
