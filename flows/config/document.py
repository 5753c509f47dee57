"""Document settings: which index, id, version and routing each write gets, and how it is
written. Read by sinks/actions.py (ActionBuilder). The rules here govern where a write or a
delete lands, so the ones that also read other groups' settings (ON_NULL_VALUE, the topics,
the transforms) are written here too."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Self

from pydantic import AfterValidator, BeforeValidator, field_validator, model_validator

from flows.config.fields import Flag, Group, OneOf, PairsInput, Regex, pairs, setting
from flows.errors import ConfigError
from flows.transforms.cdc import deleting_entries
from sinks.elasticsearch.config import DocumentConfig
from sinks.elasticsearch.index_names import (
    CONNECT_NAMING,
    IndexName,
    connect_index_name,
    problem,
)
from sinks.elasticsearch.write_methods import (
    ACTIONS,
    DATA_STREAM_METHOD,
    DELETE,
    ON_MISSING,
    WRITE_METHODS,
    Updates,
)
from sinks.model import FieldPath

DOC_IDS = "key, coordinates, none or field:<dotted.path>"
INDEX_NAMINGS = ("as-is", CONNECT_NAMING)
# Built-in transforms that derive a document's id, key, index or routing from its fields.
_FIELD_ROUTED = {"route", "id_from_field", "key_from_field"}


def _index_template(template: str) -> str:
    IndexName(template)  # ValueError names the unknown placeholder
    return template


def _has_date(template: str) -> bool:
    return IndexName(template).has_date


IndexTemplateText = Annotated[str, AfterValidator(_index_template)]


class DocumentSettings(Group):
    """Index, id, version, routing and write method of every document."""

    es_index: IndexTemplateText = setting(
        "ES_INDEX", "{topic}", "index template: {topic} and date parts of the record timestamp"
    )
    es_index_map: Annotated[
        dict[str, IndexTemplateText], BeforeValidator(pairs, json_schema_input_type=PairsInput)
    ] = setting("ES_INDEX_MAP", {}, "per-topic index: `orders:orders-v2,payments:pay-{yyyy.MM}`")
    write_method: Annotated[str, OneOf(tuple(WRITE_METHODS))] = setting(
        "WRITE_METHOD",
        "index",
        "index, create (409 = done), upsert (doc_as_upsert), update (partial doc) or script",
    )
    on_missing_document: Annotated[str, OneOf(ON_MISSING)] = setting(
        "ON_MISSING_DOCUMENT",
        "dlq",
        "update, script: a missing document is a dead letter (dlq), skipped (ignore) or "
        "created (upsert)",
    )
    es_script_id: str | None = setting(
        "ES_SCRIPT_ID", None, "WRITE_METHOD=script: the stored script to run"
    )
    es_script_source: str | None = setting(
        "ES_SCRIPT_SOURCE", None, "WRITE_METHOD=script: the inline script to run"
    )
    es_script_lang: str = setting("ES_SCRIPT_LANG", "painless", "language of ES_SCRIPT_SOURCE")
    es_scripted_upsert: Flag = setting(
        "ES_SCRIPTED_UPSERT",
        False,
        "script, ON_MISSING_DOCUMENT=upsert: create a missing document by running the script "
        "on {} (else the document is inserted as it is)",
    )
    es_script_record: Flag = setting(
        "ES_SCRIPT_RECORD",
        False,
        "script: also pass the record's coordinates as params.record (topic, partition, "
        "offset), so that the script can skip a record it already applied (a replay)",
    )
    es_index_naming: Annotated[str, OneOf(INDEX_NAMINGS)] = setting(
        "ES_INDEX_NAMING",
        "as-is",
        "as-is: an index name must follow Elasticsearch's rules (else a dead letter); "
        "connect: rewritten first as Kafka Connect's Elasticsearch sink names an index after "
        "its topic (lower case, 255 characters, a leading - or _ dropped, . and .. as dot), "
        "a coordinates id names the topic a route transform made, as the sink names it "
        "after a router's, and a key id is a string or an integer key only (any other key, "
        "KEY_FORMAT=bytes too, is a failed record, as the sink refuses it)",
    )
    es_index_allow: Regex | None = setting(
        "ES_INDEX_ALLOW",
        None,
        "regex every index name must match whole; a record's name outside it is a dead letter",
    )
    doc_id: str = setting("DOC_ID", "key", f"document id: {DOC_IDS}")
    doc_id_separator: str = setting(
        "DOC_ID_SEPARATOR",
        "-",
        "between topic, partition and offset in a coordinates id (DOC_ID=coordinates, "
        "ON_NULL_KEY=coordinates); `+` gives Kafka Connect's topic+partition+offset",
        min_length=1,
        max_length=8,
    )
    version: str = setting("VERSION", "none", "external version: none, offset or header:<name>")
    es_routing: str | None = setting("ES_ROUTING", None, "key or field:<dotted.path>")
    es_pipeline: str | None = setting("ES_PIPELINE", None, "ingest pipeline")
    es_data_stream: Flag = setting("ES_DATA_STREAM", False, "write to data streams (create)")
    es_timestamp_field: str | None = setting(
        "ES_TIMESTAMP_FIELD", None, "source field copied to @timestamp"
    )
    es_retry_on_conflict: int = setting(
        "ES_RETRY_ON_CONFLICT",
        3,
        "upsert, update, script: re-runs of an update that met a concurrent write (then 409)",
        ge=0,
    )

    if TYPE_CHECKING:  # read from the other groups of Settings
        topics: tuple[str, ...]
        topics_regex: str | None
        on_null_value: str
        on_null_key: str
        key_format: str
        transforms: tuple[dict[str, Any], ...]

    @field_validator("doc_id")
    @classmethod
    def _doc_id(cls, value: str) -> str:
        if value not in ("key", "coordinates", "none") and not _dotted("field:", value):
            raise ValueError(f"expected {DOC_IDS}, got {value!r}")
        return value

    @field_validator("version")
    @classmethod
    def _version(cls, value: str) -> str:
        if value not in ("none", "offset") and not _dotted("header:", value):
            raise ValueError(f"expected none, offset or header:<name>, got {value!r}")
        return value

    @field_validator("es_routing")
    @classmethod
    def _routing(cls, value: str | None) -> str | None:
        if value and value != "key" and not _dotted("field:", value):
            raise ValueError(f"expected key or field:<dotted.path>, got {value!r}")
        return value

    @property
    def doc_id_field(self) -> str | None:
        """The dotted path of DOC_ID=field:<path>, else None."""
        return self.doc_id.split(":", 1)[1] if self.doc_id.startswith("field:") else None

    @property
    def version_header(self) -> str | None:
        """The header name of VERSION=header:<name>, else None."""
        return self.version.split(":", 1)[1] if self.version.startswith("header:") else None

    @property
    def external_versioning(self) -> bool:
        """True when writes carry `version_type=external`."""
        return self.version != "none"

    @model_validator(mode="after")
    def _writes(self) -> Self:
        """Write method, ids, versions and data streams that Elasticsearch accepts together."""
        method = WRITE_METHODS[self.write_method]
        if self.es_data_stream and not method.allows_data_stream:
            if "write_method" in self.model_fields_set:
                msg = f"data streams accept only {DATA_STREAM_METHOD} (ES_DATA_STREAM=true)"
                raise ConfigError(f"WRITE_METHOD: {msg}")
            object.__setattr__(self, "write_method", DATA_STREAM_METHOD)  # derived, at load
            method = WRITE_METHODS[DATA_STREAM_METHOD]
        if self.external_versioning and not method.allows_external_version:
            allowed = ", ".join(m.name for m in WRITE_METHODS.values() if m.allows_external_version)
            msg = f"Elasticsearch allows external versioning only with {allowed}, not {method.name}"
            raise ConfigError(f"VERSION: {msg}")
        if self.external_versioning and self.doc_id == "none":
            raise ConfigError("VERSION: external versioning needs document ids (DOC_ID is none)")
        if method.needs_id and self.doc_id == "none":
            msg = f"{method.name} needs document ids (DOC_ID is none)"
            raise ConfigError(f"WRITE_METHOD: {msg}")
        _check_updates(self)
        _check_index_names(self)
        if self.on_null_value == "delete":
            why = "ON_NULL_VALUE=delete: a tombstone has no fields and its own timestamp, so"
            _check_deletes_can_find(self, why, "ON_NULL_VALUE=ignore/dlq")
        for i in deleting_entries(self.transforms):  # Debezium deletes, the same way
            kind = self.transforms[i]["type"]
            why = (
                f"transforms[{i}] ({kind}): a delete event has no fields and its own timestamp, so"
            )
            _check_deletes_can_find(self, why, "soft_delete: <field>")
        if self.version == "offset":
            _check_offsets_comparable(self)
        return self

    @functools.cached_property
    def es_documents(self) -> DocumentConfig:
        """How documents become bulk actions (the processor's ActionBuilder reads it)."""
        doc_id_field = self.doc_id_field
        routing = self.es_routing
        routing_field = routing.split(":", 1)[1] if routing and ":" in routing else None
        return DocumentConfig(
            write_method=self.write_method,
            retry_on_conflict=self.es_retry_on_conflict,
            index=self.es_index,
            index_map=dict(self.es_index_map),
            doc_id="field" if doc_id_field else self.doc_id,
            id_field=_path("DOC_ID", doc_id_field),
            on_null_key=self.on_null_key,
            version="header" if self.version_header is not None else self.version,
            version_header=self.version_header,
            routing=None if not routing else "field" if routing_field else "key",
            routing_field=_path("ES_ROUTING", routing_field),
            pipeline=self.es_pipeline,
            data_stream=self.es_data_stream,
            timestamp_field=_path("ES_TIMESTAMP_FIELD", self.es_timestamp_field),
            updates=Updates(
                on_missing=self.on_missing_document,
                script=_script(self),
                scripted_upsert=self.es_scripted_upsert,
                record=self.es_script_record,
            ),
            index_allow=re.compile(self.es_index_allow) if self.es_index_allow else None,
            index_naming=self.es_index_naming,
            id_separator=self.doc_id_separator,
            key_format=self.key_format,
        )


def _script(s: DocumentSettings) -> dict[str, str] | None:
    """The `script` of WRITE_METHOD=script's updates (its `params.doc` is added per record)."""
    if s.es_script_id:
        return {"id": s.es_script_id}
    if s.es_script_source:
        return {"source": s.es_script_source, "lang": s.es_script_lang}
    return None


def _path(name: str, dotted: str | None) -> FieldPath | None:
    if not dotted:
        return None
    try:
        return FieldPath(dotted)
    except ValueError as e:
        msg = f"{name}: {e}"
        raise ConfigError(msg) from None


def _check_updates(s: DocumentSettings) -> None:
    """The update-based methods' settings, and the per-record actions an `action` transform
    may choose, against the write method and each other."""
    method = WRITE_METHODS[s.write_method]
    given = s.model_fields_set
    targets = _action_targets(s)  # None: a python transform may choose anything
    chosen = {method.name} | (set(ACTIONS) if targets is None else targets)
    if s.es_script_id and s.es_script_source:
        raise ConfigError("ES_SCRIPT_ID: give ES_SCRIPT_ID or ES_SCRIPT_SOURCE, not both")
    if s.es_script_id and "es_script_lang" in given:
        raise ConfigError("ES_SCRIPT_LANG: a stored script (ES_SCRIPT_ID) has its own language")
    scripted = s.es_script_id or s.es_script_source
    if method.needs_script and not scripted:
        raise ConfigError("WRITE_METHOD: script needs ES_SCRIPT_ID or ES_SCRIPT_SOURCE")
    if scripted and not any(WRITE_METHODS[m].needs_script for m in chosen if m != DELETE):
        name = "ES_SCRIPT_ID" if s.es_script_id else "ES_SCRIPT_SOURCE"
        raise ConfigError(f"{name}: only WRITE_METHOD=script runs a script, not {method.name}")
    if s.es_scripted_upsert and s.on_missing_document != "upsert":
        msg = f"needs ON_MISSING_DOCUMENT=upsert, got {s.on_missing_document}"
        raise ConfigError(f"ES_SCRIPTED_UPSERT: {msg}")
    if s.es_scripted_upsert and not scripted:
        raise ConfigError("ES_SCRIPTED_UPSERT: needs a script (WRITE_METHOD=script)")
    if s.es_script_record and not scripted:
        raise ConfigError("ES_SCRIPT_RECORD: needs a script (WRITE_METHOD=script)")
    reads_missing = any(WRITE_METHODS[m].on_missing for m in chosen if m != DELETE)
    if "on_missing_document" in given and not reads_missing:
        msg = f"only update and script read it, not WRITE_METHOD={method.name}"
        raise ConfigError(f"ON_MISSING_DOCUMENT: {msg}")
    if reads_missing and s.on_missing_document == "dlq":
        _check_missing_is_the_records(s, chosen)
    for i, entry in enumerate(s.transforms):
        if entry.get("type") != "action":
            continue
        targets = _entry_targets(entry, unmapped=set())  # any value: checked per record
        if DELETE in targets and (s.doc_id == "none" or s.es_data_stream):
            refused = (
                "needs document ids (DOC_ID is none)"
                if s.doc_id == "none"
                else "is refused by data streams (ES_DATA_STREAM=true)"
            )
            raise ConfigError(f"transforms[{i}] (action): action delete {refused}")
        for name in sorted(targets & set(WRITE_METHODS)):
            m = WRITE_METHODS[name]
            why = (
                "needs document ids (DOC_ID is none)" if m.needs_id and s.doc_id == "none"
                else "needs ES_SCRIPT_ID or ES_SCRIPT_SOURCE" if m.needs_script and not scripted
                else "is refused by data streams (ES_DATA_STREAM=true)"
                if s.es_data_stream and not m.allows_data_stream
                else "carries no external version (VERSION is set)"
                if s.external_versioning and not m.allows_external_version
                else None
            )  # fmt: skip
            if why:
                raise ConfigError(f"transforms[{i}] (action): action {name} {why}")


def _check_missing_is_the_records(s: DocumentSettings, chosen: set[str]) -> None:
    """ON_MISSING_DOCUMENT=dlq where the flow also deletes: a replay (after a crash, or a
    bulk retried after Elasticsearch applied it) sends an update again after a later record
    of the same id deleted its document, and the update finds it missing through no fault
    of its record. The sink cannot tell that from a document that was never there, so
    `dlq` there would dead-letter a good record (or, under ERRORS_TOLERANCE=none, stop the
    flow on it at every restart): the default becomes `ignore` (skipped and counted), and
    `dlq` given explicitly is refused."""
    cdc = deleting_entries(s.transforms)
    if s.on_null_value == "delete":
        deletes = "ON_NULL_VALUE=delete"
    elif cdc:
        deletes = f"transforms[{cdc[0]}] sends deletes"
    elif DELETE in chosen:
        deletes = "a transform may choose delete"
    else:
        return
    if "on_missing_document" not in s.model_fields_set:
        object.__setattr__(s, "on_missing_document", "ignore")  # derived, at load
        return
    msg = (
        f"dlq cannot be told from a replayed update whose document a later record deleted "
        f"({deletes}): use ignore (skipped and counted) or upsert"
    )
    raise ConfigError(f"ON_MISSING_DOCUMENT: {msg}")


def _action_targets(s: DocumentSettings) -> set[str] | None:
    """The actions the configured transforms may choose per record (None: any, a python
    transform may set `Doc.action`)."""
    out: set[str] = set()
    for entry in s.transforms:
        kind = entry.get("type", "python" if "python" in entry else None)
        if kind == "python":
            return None
        if kind == "action":
            out |= _entry_targets(entry)
    return out


def _entry_targets(entry: dict[str, Any], unmapped: set[str] | None = None) -> set[str]:
    """What one `action` entry may choose: its map's values and default, or (no map) any
    action, or `unmapped`."""
    mapping = entry.get("map")
    if not isinstance(mapping, dict):
        return set(ACTIONS) if unmapped is None else unmapped
    out = {str(v) for v in mapping.values()}
    if entry.get("default") is not None:
        out.add(str(entry["default"]))
    return out


def _check_index_names(s: DocumentSettings) -> None:
    """An index name without placeholders is the same for every record: held to
    Elasticsearch's rules and ES_INDEX_ALLOW here, at start (the others, per record)."""
    allow = re.compile(s.es_index_allow) if s.es_index_allow else None
    for name, template in (("ES_INDEX", s.es_index), *_named_map(s.es_index_map)):
        if not IndexName(template).is_static:
            continue
        if s.es_index_naming == CONNECT_NAMING:
            template = connect_index_name(template)
        why = problem(template)
        if why is None and allow is not None and allow.fullmatch(template) is None:
            why = f"index name {template!r} does not match ES_INDEX_ALLOW ({allow.pattern})"
        if why:
            raise ConfigError(f"{name}: {why}")


def _dotted(prefix: str, value: str) -> bool:
    rest = value[len(prefix) :]
    return value.startswith(prefix) and bool(rest) and not any(c.isspace() for c in rest)


def _check_deletes_can_find(s: DocumentSettings, why: str, instead: str) -> None:
    """ON_NULL_VALUE=delete: a tombstone must name the index, id and routing of the document
    it deletes. It has no fields and its own timestamp, so anything derived from those would
    send the delete elsewhere, where Elasticsearch answers 404 and the document stays.
    Refused at start rather than silently doing nothing. The deletes of
    the debezium transform are checked the same way (`why` says which; `instead` is the
    setting that avoids the deletes)."""
    if s.doc_id != "key":
        msg = f"{why} its delete can only find a document whose id is the record key (DOC_ID=key)"
        raise ConfigError(f"DOC_ID: {msg}, got {s.doc_id!r}")
    if s.es_routing and s.es_routing != "key":
        msg = f"{why} a delete cannot be routed by a field; use ES_ROUTING=key or no routing"
        raise ConfigError(f"ES_ROUTING: {msg}")
    if s.es_data_stream:
        raise ConfigError("ES_DATA_STREAM: data streams accept only create, not deletes")
    for name, template in (("ES_INDEX", s.es_index), *_named_map(s.es_index_map)):
        if _has_date(template):
            msg = (
                f"{why} a delete would go to the index of its own record's date, not the "
                f"document's; use an index without a date part or {instead}"
            )
            raise ConfigError(f"{name}: {msg} ({template!r})")
    for i, entry in enumerate(s.transforms):
        kind = entry.get("type")
        dated = kind == "route" and _has_date(str(entry.get("index") or ""))
        by_field = kind == "route" and ("routing_field" in entry or "timestamp_field" in entry)
        if kind in ("id_from_field", "key_from_field") or dated or by_field:
            msg = f"{why} a {kind} transform cannot give its delete the document's {_what(kind)}"
            raise ConfigError(f"transforms[{i}]: {msg}")


def _check_offsets_comparable(s: DocumentSettings) -> None:
    """VERSION=offset uses the Kafka offset as the document version, and offsets are ordered
    only within one partition: wherever one document can receive writes from two partitions,
    a newer write loses to an older one and the 409 counts as done. What
    the settings show is refused here; what only Kafka shows (partitions added, a recreated
    topic) is refused by the source."""
    why = (
        "VERSION=offset orders writes by Kafka offset, which is ordered only within one "
        "partition, so"
    )
    fix = "use VERSION=none (writes to one document stay in order) or VERSION=header:<name>"
    if s.doc_id not in ("key", "coordinates"):  # a coordinates id has one record
        msg = f"{why} the document id must be the record key (DOC_ID=key), got {s.doc_id!r}; {fix}"
        raise ConfigError(f"VERSION: {msg}")
    # With a regex the topics are not known yet: every mapped index may receive its topic.
    indices = [s.es_index_map.get(t, s.es_index) for t in s.topics] or list(s.es_index_map.values())
    indices = [i for i in indices if "{topic}" not in i]  # the others differ per topic
    clash = next((i for i in indices if indices.count(i) > 1), None)
    if clash is not None or (s.topics_regex and "{topic}" not in s.es_index):
        where = f"index {clash!r}" if clash else f"ES_INDEX={s.es_index!r} with KAFKA_TOPICS_REGEX"
        msg = f"{why} several topics must not write one index ({where}); {fix}"
        raise ConfigError(f"VERSION: {msg}")
    for i, entry in enumerate(s.transforms):
        if entry.get("type") in _FIELD_ROUTED:
            msg = f"{why} a {entry['type']} transform must not choose ids or indices; {fix}"
            raise ConfigError(f"transforms[{i}]: {msg}")


def _named_map(index_map: Mapping[str, str]) -> Sequence[tuple[str, str]]:
    return [(f"ES_INDEX_MAP[{t}]", i) for t, i in index_map.items()]


def _what(kind: object) -> str:
    return {"route": "index and routing", "id_from_field": "id"}.get(str(kind), "key")
