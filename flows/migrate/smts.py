"""A connector's SMT chain (`transforms`, `predicates`) -> the flow's built-in transforms.

Each SMT maps to the closest built-in (`flows.transforms`), or is reported as not
supported with the nearest equivalent; none is invented. Kafka Connect's SMTs run before the
connector sees a record, the flow's transforms after decoding, in the same order; where the
two differ in what they see (a router renames the topic that a later SMT or predicate
reads; an SMT applies only where its predicate matches) the mapping says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from flows.migrate.connector import is_secret
from flows.migrate.report import MAPPED, NO_EFFECT, UNSUPPORTED

if TYPE_CHECKING:
    from flows.migrate.translate import _Translation

APACHE = "org.apache.kafka.connect.transforms."
DEBEZIUM_UNWRAP = "io.debezium.transforms.ExtractNewRecordState"
PREDICATES = APACHE + "predicates."
# Debezium's envelope fields (the rest of `add.fields` names a field of `source`).
ENVELOPE = ("op", "ts_ms", "ts_us", "ts_ns", "source", "transaction")
# SimpleDateFormat letters the flow's index names render (UTC): the others are refused.
DATE_TOKENS = re.compile(r"yyyy|yy|MM|dd|HH")


@dataclass
class Step:
    """One SMT of the chain."""

    name: str
    cls: str
    opts: dict[str, str]
    predicate: str | None = None
    negate: bool = False

    @property
    def base(self) -> str:
        """`ReplaceField` of `org.apache.kafka.connect.transforms.ReplaceField$Value`."""
        short = self.cls.rsplit(".", 1)[-1]
        return short.split("$", 1)[0]

    @property
    def side(self) -> str | None:
        """`Value`, `Key`, or None for an SMT without variants."""
        short = self.cls.rsplit(".", 1)[-1]
        return short.split("$", 1)[1] if "$" in short else None

    @property
    def apache(self) -> bool:
        return self.cls.startswith(APACHE) and "." not in self.cls[len(APACHE) :]

    def described(self) -> str:
        short = self.cls.rsplit(".", 1)[-1]
        opts = " ".join(f"{k}={'***' if is_secret(k) else v}" for k, v in self.opts.items())
        pred = f" predicate={'!' if self.negate else ''}{self.predicate}" if self.predicate else ""
        return f"{short}{(' ' + opts) if opts else ''}{pred}"


@dataclass
class Predicate:
    name: str
    cls: str
    opts: dict[str, str] = field(default_factory=dict)

    @property
    def base(self) -> str:
        return self.cls.rsplit(".", 1)[-1]


@dataclass
class Outcome:
    """What one SMT (or two read together) became."""

    status: str
    entries: list[dict[str, Any]] = field(default_factory=list)
    note: str = ""
    setting: str = ""


def _items(value: str | None) -> list[str]:
    return [s.strip() for s in (value or "").split(",") if s.strip()]


def _opts(cfg: dict[str, str], prefix: str) -> dict[str, str]:
    return {
        k[len(prefix) :]: v.strip()
        for k, v in cfg.items()
        if k.startswith(prefix) and k[len(prefix) :] not in ("type", "predicate", "negate")
    }


def translate(t: _Translation) -> None:
    """Map `transforms` (and the `predicates` they use) into `transforms:` entries."""
    cfg = t.cfg
    preds: dict[str, Predicate] = {}
    for name in _items(t.get("predicates")):
        prefix = f"predicates.{name}."
        for k in cfg:
            if k.startswith(prefix):
                t.seen.add(k)
        preds[name] = Predicate(name, (cfg.get(prefix + "type") or "").strip(), _opts(cfg, prefix))
    steps = []
    for name in _items(t.get("transforms")):
        prefix = f"transforms.{name}."
        for k in cfg:
            if k.startswith(prefix):
                t.seen.add(k)
        steps.append(
            Step(
                name,
                (cfg.get(prefix + "type") or "").strip(),
                _opts(cfg, prefix),
                (cfg.get(prefix + "predicate") or "").strip() or None,
                (cfg.get(prefix + "negate") or "").strip().lower() == "true",
            )
        )
    if not steps and not preds:
        return
    chain = _Chain(t, preds)
    i = 0
    while i < len(steps):
        step, nxt = steps[i], steps[i + 1] if i + 1 < len(steps) else None
        outcome, used_next = chain.map(step, nxt)
        chain.add(step, outcome)
        if used_next and nxt is not None:
            chain.add(nxt, Outcome(outcome.status, note=f"read with transforms.{step.name}"))
            i += 1
        i += 1
    for name, pred in preds.items():
        users = [s.name for s in steps if s.predicate == name]
        t.row(
            f"predicates.{name}",
            MAPPED if users else NO_EFFECT,
            ", ".join(f"transforms.{u}" for u in users),
            "" if users else "no transform uses it",
            value=f"{pred.base} " + " ".join(f"{k}={v}" for k, v in pred.opts.items()),
        )
    if chain.entries:
        t.set("transforms", chain.entries)


class _Chain:
    def __init__(self, t: _Translation, preds: dict[str, Predicate]) -> None:
        self.t = t
        self.preds = preds
        self.entries: list[dict[str, Any]] = []
        self.routed = False
        """A router ran: the topic later SMTs and predicates see is not the record's."""
        self.value_touched = False

    def add(self, step: Step, outcome: Outcome) -> None:
        first = len(self.entries)
        self.entries.extend(outcome.entries)
        setting = outcome.setting
        if outcome.entries and not setting:
            setting = ", ".join(
                f"transforms[{first + n}] ({e['type']})" for n, e in enumerate(outcome.entries)
            )
        self.t.row(
            f"transforms.{step.name}", outcome.status, setting, outcome.note, step.described()
        )
        if outcome.entries:
            self.value_touched = True

    def map(self, step: Step, nxt: Step | None) -> tuple[Outcome, bool]:
        """The outcome of `step` (and whether it consumed `nxt`, read together with it)."""
        if not step.cls:
            return Outcome(UNSUPPORTED, note="no type"), False
        if step.cls == DEBEZIUM_UNWRAP:
            return self.unwrap(step, nxt)
        if step.predicate is not None and step.base != "Filter":
            return (
                Outcome(
                    UNSUPPORTED,
                    note="it applies only to records its predicate matches; the flow's "
                    "transforms apply to every record (nearest: a python transform)",
                ),
                False,
            )
        if not step.apache:
            return Outcome(
                UNSUPPORTED,
                note=f"no built-in transform does what {step.cls} does "
                "(nearest: a python transform)",
            ), False
        if step.base == "ValueToKey":
            return self.value_to_key(step, nxt)
        if step.side == "Key":
            return self.key_side(step, nxt)
        handler = getattr(self, f"smt_{step.base}", None)
        if handler is None:
            return Outcome(
                UNSUPPORTED,
                note=f"no built-in transform does what {step.base} "
                "does (nearest: a python transform)",
            ), False
        outcome: Outcome = handler(step)
        return outcome, False

    # ------------------------------------------------------------------ helpers

    def fields_ok(self, step: Step, names: list[str]) -> str | None:
        """Why the flow cannot address `names` as this SMT does (None: it can). Under
        field.syntax.version V1 a dot is part of a top-level name; the flow's paths nest."""
        v2 = step.opts.get("field.syntax.version", "V1").upper() == "V2"
        for name in names:
            if "`" in name or (not v2 and "." in name):
                return (
                    f"field {name!r}: a name with a dot (or a backquoted path) is not one the "
                    "flow's dotted paths address"
                )
        return None

    # ------------------------------------------------------------------ key side

    def key_side(self, step: Step, nxt: Step | None) -> tuple[Outcome, bool]:
        if not self.t.key_used:
            return Outcome(NO_EFFECT, note="keys are not read (the ids are not keys)"), False
        return (
            Outcome(
                UNSUPPORTED,
                note="no built-in transform changes the key's fields; nearest: key_from_field "
                "or id_from_field on a field of the value, or a python transform on doc.key",
            ),
            False,
        )

    def value_to_key(self, step: Step, nxt: Step | None) -> tuple[Outcome, bool]:
        """ValueToKey then ExtractField$Key: the key is one field of the value."""
        if not self.t.key_used:
            return Outcome(NO_EFFECT, note="keys are not read (the ids are not keys)"), False
        fields = _items(step.opts.get("fields"))
        wanted = nxt.opts.get("field") if nxt is not None else None
        if nxt is not None and nxt.cls == APACHE + "ExtractField$Key" and wanted in fields:
            assert wanted is not None
            why = self.fields_ok(step, [wanted])
            if why:
                return Outcome(UNSUPPORTED, note=why), False
            entry = {"type": "key_from_field", "field": wanted}
            note = f"the key, and so the id, is the value's {wanted}"
            return Outcome(MAPPED, [entry], note), True
        return (
            Outcome(
                UNSUPPORTED,
                note="the connector refuses the struct key ValueToKey makes as a document id "
                "unless ExtractField$Key follows (nearest: key_from_field)",
            ),
            False,
        )

    # ------------------------------------------------------------------ value side

    def smt_ReplaceField(self, step: Step) -> Outcome:
        o = step.opts
        exclude = _items(o.get("exclude") or o.get("blacklist"))
        include = _items(o.get("include") or o.get("whitelist"))
        renames: dict[str, str] = {}
        for pair in _items(o.get("renames")):
            old, sep, new = pair.partition(":")
            if sep:
                renames[old.strip()] = new.strip()
        why = self.fields_ok(step, [*exclude, *include, *renames, *renames.values()])
        if why:
            return Outcome(UNSUPPORTED, note=why)
        if set(renames.values()) & set(renames):
            return Outcome(
                UNSUPPORTED,
                note="renames swap names, which the connector does at "
                "once and the flow one after another",
            )
        entries: list[dict[str, Any]] = []
        if include:
            entries.append({"type": "keep", "fields": include})
        if exclude:
            entries.append({"type": "drop", "fields": exclude})
        if renames:
            entries.append({"type": "rename", "fields": renames})
        if not entries:
            return Outcome(NO_EFFECT, note="it names no field")
        return Outcome(MAPPED, entries)

    def smt_InsertField(self, step: Step) -> Outcome:
        o = step.opts
        entries: list[dict[str, Any]] = []
        for option, source in (
            ("topic.field", "topic"),
            ("partition.field", "partition"),
            ("offset.field", "offset"),
            ("timestamp.field", "timestamp"),
        ):
            name = o.get(option, "").rstrip("!?")
            if name:
                entry: dict[str, Any] = {"type": "insert_field", "field": name, "from": source}
                if source == "timestamp":
                    entry["format"] = "epoch_ms"
                entries.append(entry)
        static = o.get("static.field", "").rstrip("!?")
        if static:
            entries.append(
                {"type": "insert_field", "field": static, "value": o.get("static.value", "")}
            )
        why = self.fields_ok(step, [str(e["field"]) for e in entries])
        if why:
            return Outcome(UNSUPPORTED, note=why)
        if self.routed and o.get("topic.field"):
            return Outcome(
                UNSUPPORTED,
                note="after a router it inserts the renamed topic; the "
                "flow's insert_field the record's",
            )
        if not entries:
            return Outcome(NO_EFFECT, note="it names no field")
        note = "the timestamp as epoch milliseconds, as the connector writes a Timestamp"
        return Outcome(MAPPED, entries, note if o.get("timestamp.field") else "")

    def smt_ExtractField(self, step: Step) -> Outcome:
        name = step.opts.get("field", "")
        why = self.fields_ok(step, [name])
        if not name or why:
            return Outcome(UNSUPPORTED, note=why or "it names no field")
        return Outcome(
            MAPPED,
            [{"type": "extract", "field": name}],
            "a field that is not an object is a failed record (Elasticsearch refuses it from "
            "the connector too)",
        )

    def smt_HoistField(self, step: Step) -> Outcome:
        name = step.opts.get("field", "")
        fmt = self.t.formats.get("value")
        if name and fmt in ("string", "bytes") and not self.value_touched:
            setting = self.t.set("value_field", name)
            return Outcome(
                MAPPED,
                setting=setting,
                note=f"{fmt} values are wrapped as {{{name}: ...}} by the converter itself",
            )
        return Outcome(
            UNSUPPORTED,
            note="no built-in transform wraps a decoded value (only string and bytes values "
            "are wrapped, by VALUE_FIELD); nearest: a python transform",
        )

    def smt_Cast(self, step: Step) -> Outcome:
        return Outcome(
            UNSUPPORTED,
            note="no built-in transform casts fields; Elasticsearch coerces numbers given as "
            "text into numeric fields, but _source keeps them as sent; nearest: a python "
            "transform",
        )

    def smt_Flatten(self, step: Step) -> Outcome:
        delimiter = step.opts.get("delimiter", ".")
        note = "no built-in transform flattens nested objects; nearest: a python transform"
        if delimiter == ".":
            note += (
                " (without it Elasticsearch indexes the same dotted fields from the nested "
                "objects, but _source keeps the nesting)"
            )
        return Outcome(UNSUPPORTED, note=note)

    def smt_MaskField(self, step: Step) -> Outcome:
        names = _items(step.opts.get("fields"))
        why = self.fields_ok(step, names)
        if why or not names:
            return Outcome(UNSUPPORTED, note=why or "it names no field")
        if "replacement" not in step.opts:
            return Outcome(
                UNSUPPORTED,
                [{"type": "mask", "fields": names, "replacement": ""}],
                "without a replacement the SMT writes each type's empty value (0, "
                '"", false); the flow writes one replacement for every type',
            )
        entry = {"type": "mask", "fields": names, "replacement": step.opts["replacement"]}
        return Outcome(MAPPED, [entry])

    def smt_TimestampRouter(self, step: Step) -> Outcome:
        if self.routed:
            return Outcome(
                UNSUPPORTED,
                note="a second router reads the topic the first one "
                "made; the flow's route reads the record's",
            )
        fmt = step.opts.get("topic.format", "${topic}-${timestamp}")
        date = step.opts.get("timestamp.format", "yyyyMMdd")
        if re.sub(r"yyyy|yy|MM|dd|HH|[^A-Za-z']", "", date) or "'" in date:
            return Outcome(
                UNSUPPORTED,
                note=f"timestamp.format {date!r}: index names render "
                "yyyy, yy, MM, dd and HH (UTC) between other characters only",
            )
        if "{" in fmt.replace("${topic}", "").replace("${timestamp}", "") or "}" in fmt.replace(
            "${topic}", ""
        ).replace("${timestamp}", ""):
            return Outcome(UNSUPPORTED, note="topic.format holds braces")
        template = fmt.replace("${topic}", "{topic}").replace("${timestamp}", "{" + date + "}")
        self.routed = True
        return Outcome(
            MAPPED,
            [{"type": "route", "index": template}],
            "a dated index per record timestamp (UTC), named by ES_INDEX_NAMING=connect as the "
            "connector names the routed topic; a topic+partition+offset id names the routed "
            "topic too, as the connector's",
        )

    def smt_RegexRouter(self, step: Step) -> Outcome:
        from flows.migrate.translate import java_regex

        if self.routed:
            return Outcome(
                UNSUPPORTED,
                note="a second router reads the topic the first one "
                "made; the flow's route reads the record's",
            )
        regex = java_regex(step.opts.get("regex", ""))
        if not step.opts.get("regex") or regex is None:
            return Outcome(UNSUPPORTED, note="Python's re cannot read this Java regex")
        replacement = step.opts.get("replacement", "").replace("\\$", "$$")
        self.routed = True
        return Outcome(
            MAPPED,
            [{"type": "route", "topic_regex": regex, "replacement": replacement}],
            "a topic the regex matches whole is renamed, and its index (and a "
            "topic+partition+offset id) named after the new name (ES_INDEX_NAMING=connect)",
        )

    def smt_Filter(self, step: Step) -> Outcome:
        from flows.migrate.translate import java_regex

        if step.predicate is None:
            return Outcome(
                MAPPED,
                [{"type": "filter", "topic": ".*"}],
                "without a predicate Filter drops every record",
            )
        pred = self.preds.get(step.predicate)
        if pred is None or not pred.cls.startswith(PREDICATES):
            return Outcome(
                UNSUPPORTED,
                note=f"predicate {step.predicate}: not one of Apache "
                "Kafka's (TopicNameMatches, HasHeaderKey, RecordIsTombstone)",
            )
        entry: dict[str, Any] = {"type": "filter"}
        if pred.base == "TopicNameMatches":
            if self.routed:
                return Outcome(
                    UNSUPPORTED,
                    note="after a router the predicate reads the "
                    "renamed topic; the flow's filter the record's",
                )
            regex = java_regex(pred.opts.get("pattern", ""))
            if regex is None:
                return Outcome(UNSUPPORTED, note="Python's re cannot read the predicate's regex")
            entry["topic"] = regex
        elif pred.base == "HasHeaderKey":
            entry["header"] = pred.opts.get("name", "")
        elif pred.base == "RecordIsTombstone":
            entry["tombstone"] = True
        else:
            return Outcome(UNSUPPORTED, note=f"predicate {pred.base} is not known")
        if step.negate:
            entry["negate"] = True
        return Outcome(
            MAPPED, [entry], "drops the records its predicate matches (negate: keeps only them)"
        )

    def smt_TimestampConverter(self, step: Step) -> Outcome:
        name = step.opts.get("field", "")
        target = step.opts.get("target.type", "").lower()
        precision = step.opts.get("unix.precision", "milliseconds").lower()
        if not name:
            return Outcome(UNSUPPORTED, note="converting the whole value has no built-in")
        if step.opts.get("format"):
            return Outcome(
                UNSUPPORTED,
                note="a SimpleDateFormat format has no built-in "
                "equivalent (timestamp_convert reads ISO-8601 or strptime)",
            )
        to = {
            "timestamp": "epoch_ms",
            "unix": {"milliseconds": "epoch_ms", "seconds": "epoch_s"}.get(precision),
        }.get(target)
        if not isinstance(to, str):
            return Outcome(
                UNSUPPORTED, note=f"target.type {target} ({precision}) has no built-in equivalent"
            )
        return Outcome(
            MAPPED,
            [{"type": "timestamp_convert", "field": name, "to": to}],
            "a Timestamp is written as epoch milliseconds by the connector",
        )

    def smt_HeaderFrom(self, step: Step) -> Outcome:
        names = _items(step.opts.get("fields"))
        if step.opts.get("operation", "").lower() == "move" and names:
            return Outcome(
                MAPPED,
                [{"type": "drop", "fields": names}],
                "headers are not indexed: moving fields out of the value drops them",
            )
        return Outcome(NO_EFFECT, note="headers are not indexed")

    def _headers(self, step: Step) -> Outcome:
        version = self.t.cfg.get("external.version.header", "").strip()
        named = {step.opts.get("header", ""), *_items(step.opts.get("headers"))}
        if version and version in named:
            return Outcome(UNSUPPORTED, note=f"it changes {version}, the version header")
        return Outcome(NO_EFFECT, note="headers are not indexed")

    smt_InsertHeader = _headers
    smt_DropHeaders = _headers

    def smt_SetSchemaMetadata(self, step: Step) -> Outcome:
        return Outcome(NO_EFFECT, note="schema names are not indexed")

    # ------------------------------------------------------------------ Debezium

    def unwrap(self, step: Step, nxt: Step | None) -> tuple[Outcome, bool]:
        """io.debezium.transforms.ExtractNewRecordState -> the `unwrap` built-in, which reads
        the change events the topic holds (the SMT never rewrote them in Kafka)."""
        t, o = self.t, step.opts
        entry: dict[str, Any] = {"type": "unwrap"}
        notes = []
        if step.predicate is not None:
            pred = self.preds.get(step.predicate)
            if pred is None or pred.base != "TopicNameMatches" or step.negate:
                return Outcome(
                    UNSUPPORTED,
                    note="only a TopicNameMatches predicate carries over (unwrap's topics)",
                ), False
            from flows.migrate.translate import java_regex

            regex = java_regex(pred.opts.get("pattern", ""))
            if regex is None:
                return Outcome(UNSUPPORTED, note="Python's re cannot read the predicate"), False
            entry["topics"] = regex
        if not t.key_used:
            return (
                Outcome(
                    UNSUPPORTED,
                    note="with ignored keys every change event is its own document "
                    "(topic+partition+offset); unwrap writes one document per row: a new "
                    "index, not the connector's documents",
                ),
                False,
            )
        used_next = False
        if nxt is not None and nxt.cls == APACHE + "ExtractField$Key" and nxt.opts.get("field"):
            entry["id_fields"] = [nxt.opts["field"]]
            used_next = True
            notes.append(f"the id is the row's {nxt.opts['field']} (ExtractField$Key)")
        else:
            note = (
                "a string key holding JSON text is the connector's id, where unwrap reads "
                "the key's fields"
                if t.formats.get("key") == "string"
                else "the connector refuses the change events' struct keys as ids (STRUCT is "
                "not supported as the document id) unless ExtractField$Key follows"
            )
            return Outcome(UNSUPPORTED, note=note), False
        # deletes: what reaches the connector after the SMT, and what it does with it
        modern = o.get("delete.tombstone.handling.mode", "").lower()
        if modern:
            rewrite = modern.startswith("rewrite")
            tombstones = modern in ("tombstone", "rewrite-with-tombstone", "delete-to-tombstone")
        else:
            legacy = o.get("delete.handling.mode", "drop").lower()
            rewrite = legacy == "rewrite"
            tombstones = legacy == "none" or o.get("drop.tombstones", "true").lower() == "false"
        null = t.lower("behavior.on.null.values")
        deletes = tombstones and null == "delete"
        pre: list[dict[str, Any]] = []
        if deletes:
            notes.append("a delete event deletes the document, as the connector's tombstone did")
        elif rewrite:
            entry["soft_delete"] = "__deleted"
            notes.append(
                "a delete indexes the row's before image with __deleted: true (the SMT "
                'writes "true"; other rows get false, the SMT "false")'
            )
        else:
            if "topics" in entry:
                return Outcome(
                    UNSUPPORTED,
                    note="deletes are dropped on some topics only; the "
                    "flow's filter cannot say which",
                ), False
            pre.append({"type": "filter", "field": "op", "value": "d"})
            notes.append(
                "delete events are dropped, as the SMT (or the connector's "
                f"behavior.on.null.values={null}) drops them"
            )
        # added fields
        fields, renames = [], {}
        prefix = o.get("add.fields.prefix", "__")
        for name in _items(o.get("add.fields")):
            if ":" in name:
                return Outcome(
                    UNSUPPORTED,
                    note=f"add.fields {name}: renamed fields have no built-in equivalent",
                ), False
            path = name if name.split(".", 1)[0] in ENVELOPE else f"source.{name}"
            fields.append(path)
            flat = prefix + path.replace(".", "_")
            wanted = prefix + name.replace(".", "_")
            if flat != wanted:
                renames[flat] = wanted
        if fields:
            entry["fields"] = fields
            if prefix != "__":
                entry["prefix"] = prefix
        for option in ("route.by.field", "drop.fields.header.name"):
            if o.get(option):
                return Outcome(UNSUPPORTED, note=f"{option} has no built-in equivalent"), False
        entries = [*pre, entry]
        if renames:
            entries.append({"type": "rename", "fields": renames})
        return Outcome(MAPPED, entries, "; ".join(notes)), used_next
