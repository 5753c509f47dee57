"""The modes: one road through production conditions each, run end to end and audited.

Every mode gets a fresh topic, dead-letter topic, index and group, a workload written
partly by a transactional producer (committed and aborted transactions, `tools.chaos.produce`),
the flow's Elasticsearch traffic through `tools.chaos.proxy` (SIGTERM during outages), and
SIGKILLs at random moments (`tools.chaos.runner`). What differs:

| mode | resume from | layouts | what else |
| --- | --- | --- | --- |
| `recovery` | a recovery store | 1w,3w,2p,1w,9w (rescaled) | VERSION=header:chaos-seq |
| `offsets` | group offsets | 2w,2p | 3% tombstones deleting, ES_ROUTING=key, 3 shards |
| `grow` | group offsets | 2w,2p, 3w grows | 4 partitions + 4 mid-run: keys move; VERSION=none |
| `late` | group offsets | 2w,1w,2p | VERSION=none, bulks held past timeouts and kills |
| `update` | group offsets | 2w,1w | WRITE_METHOD=update, 3% tombstones deleting, item 429s |
| `script` | a recovery store | 2w,1w | WRITE_METHOD=script, as `update`; OpenSearch only |
| `reset` | group offsets | 2w,1w | KAFKA_AUTO_OFFSET_RESET=latest, a paused position deleted |
| `strict` | a recovery store | 2w,1w | ERRORS_TOLERANCE=none, bad records on one partition |

`grow` (`tools.chaos.grow`) runs like a service, not a backfill: without KAFKA_STOP_AT_END (a
backfill ends at the end offsets it had at start, so it leaves new partitions to the next
run), stopped by SIGTERM once everything is committed, and with
KAFKA_AUTO_OFFSET_RESET=latest: the group's offsets are set to 0 before the first run (as
an operator creating a group for a backlog does), so only the partitions added later have
no offset, and they must still be read from their beginning. The partitions are added
while the old ones still have a backlog, and the records after that go where a key-hash
partitioner puts them over 8 partitions: a key on partition p stays or moves to p + 4,
its older writes possibly still unread on p. Under VERSION=none every document, moved
or not, must end at its newest write, and the mode passes only if some moved key had an
older write not yet committed when the partitions were added. The attempt that adds them
runs 3 workers (`GROW_LAYOUT`), so that a moved key's old and new partitions are read by
different workers.

`late`, `update` and `script` put an HTTP proxy in ES_HOSTS (`tools.chaos.faults`): `late`
holds bulks until after the flow was killed and restarted, then delivers them (VERSION=none:
external versions would refuse the stale writes and hide a late bulk); `update` and
`script` answer 429 for some items. Both delete by tombstone, and the updates of a
document a later tombstone deletes are replayed after kills: `ON_MISSING_DOCUMENT=upsert`
creates the document again and the replayed tombstone deletes it. `script` counts each
document's writes since it was (re)created with the replay guard of docs/elasticsearch.md
(`COUNTING_SCRIPT`); Painless exists only on OpenSearch nodes (`--opensearch`).

`reset` (`tools.chaos.reset`) primes the group's offsets to 0 like `grow`, then once pauses the
flow, has the broker delete a partition's records from the flow's position on, and resumes:
under `latest` nothing from the deletion point on may be skipped to the log end.

`offsets` creates its index with `_routing.required`: with DOC_ID=key and ES_ROUTING=key
the routing value equals the id, so a write or delete that lost its routing would still
land on the right shard and go unnoticed; required routing makes Elasticsearch refuse it
(a good record dead-lettered, `dlq_good`, and its document `undeleted`). Its workload
has no null keys for that reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tools.chaos.faults import REQUEST_TIMEOUT_S
from tools.chaos.workload import NULL_KEY_SHARE, SEQ_HEADER, TOMBSTONE_SHARE

EPOCH_S = 1
COUNTING_SCRIPT = """
String p = params.record.topic + '/' + params.record.partition;
if (ctx._source.applied == null) { ctx._source.applied = [:]; }
def last = ctx._source.applied[p];
if (last != null && last >= params.record.offset) { ctx.op = 'noop'; return; }
ctx._source.applied[p] = params.record.offset;
long writes = ctx._source.writes == null ? 0 : ctx._source.writes;
ctx._source.putAll(params.doc);
ctx._source.writes = writes + 1;
"""
"""The replay guard of docs/elasticsearch.md (ES_SCRIPT_RECORD), then the record's document
and a count of the writes since the document was (re)created: replays and re-sent bulks
skip an applied record, so `writes` is exact."""
RECOVERY_PARTITIONS = 2
GROW_FIRST = 4
GROW_ADD = 4
GROW_SHARE = 0.3
"""Share of the `grow` mode's records produced after the partitions were added."""
GROW_LAYOUT = "3w"
"""The layout of the `grow` attempt that adds the partitions (unless `--layouts` is given).
Bytewax gives a worker the partitions whose place in the list is its index modulo the
worker count: with 2 workers (2w, 2p) partitions p and p + 4 share a worker, whose one
consumer hands out the old partition's prefetched backlog before the new partition's
records, which would hide a flow that reads a new partition too early. With 3 every
moved key's old and new partitions are read by different workers, side by side."""


@dataclass(frozen=True)
class Mode:
    name: str
    recovery: bool
    layouts: tuple[str, ...]
    settings: dict[str, str] = field(default_factory=dict)
    partitions: int = 8
    shards: int = 1
    tombstones: float = TOMBSTONE_SHARE
    """Share of tombstones in the workload."""
    null_keys: float = NULL_KEY_SHARE
    """Share of records without a key (their document id is their coordinates)."""
    deletes: bool = False
    versioned: bool = True
    routed: bool = False
    strict: bool = False
    grow: bool = False
    outages: bool = True
    """Forced SIGTERM-in-an-outage interruptions apply (not once the flow stops by itself)."""
    late: bool = False
    """Bulks held past ES_REQUEST_TIMEOUT_S and past kills, then delivered
    (`tools.chaos.faults`)."""
    rejects: bool = False
    """Some bulk items answered 429 by the proxy (`tools.chaos.faults`)."""
    counted: bool = False
    """WRITE_METHOD=script with `COUNTING_SCRIPT`: documents carry `writes` and `applied`."""
    opensearch: bool = False
    """Needs Painless, which only the OpenSearch nodes of `scripts/stack` have."""
    reset: bool = False
    """A paused partition's unread records deleted by the broker (`tools.chaos.reset`)."""


MODES: dict[str, Mode] = {
    m.name: m
    for m in (
        # 9w: more workers than the default 8 sink partitions, so the next 1w resumes a
        # store with more sink partitions than it lists, which it must still list.
        Mode("recovery", recovery=True, layouts=("1w", "3w", "2p", "1w", "9w")),
        Mode(
            "offsets",
            recovery=False,
            layouts=("2w", "2p"),
            settings={"ES_ROUTING": "key", "ON_NULL_VALUE": "delete"},
            shards=3,
            tombstones=0.03,
            null_keys=0.0,  # routing is required: a record without a key has none
            deletes=True,
            routed=True,
        ),
        Mode(
            "grow",
            recovery=False,
            layouts=("2w", "2p"),
            settings={
                "VERSION": "none",
                "KAFKA_METADATA_REFRESH_S": "2",
                "KAFKA_STOP_AT_END": "false",
                "KAFKA_AUTO_OFFSET_RESET": "latest",
            },
            partitions=GROW_FIRST,
            versioned=False,
            grow=True,
        ),
        Mode(
            "late",
            recovery=False,
            layouts=("2w", "1w", "2p"),
            # External versions would refuse a late bulk's older writes (409) and hide it.
            settings={"VERSION": "none", "ES_REQUEST_TIMEOUT_S": str(REQUEST_TIMEOUT_S)},
            versioned=False,
            late=True,
        ),
        Mode(
            "update",
            recovery=False,
            layouts=("2w", "1w"),
            settings={
                "WRITE_METHOD": "update",
                "VERSION": "none",
                "ON_NULL_VALUE": "delete",
                "ON_MISSING_DOCUMENT": "upsert",
            },
            tombstones=0.03,
            deletes=True,
            versioned=False,
            rejects=True,
        ),
        Mode(
            "script",
            recovery=True,
            layouts=("2w", "1w"),
            settings={
                "WRITE_METHOD": "script",
                "ES_SCRIPT_SOURCE": COUNTING_SCRIPT,
                "ES_SCRIPT_RECORD": "true",
                "VERSION": "none",
                "ON_NULL_VALUE": "delete",
                "ON_MISSING_DOCUMENT": "upsert",
                "ES_SCRIPTED_UPSERT": "true",
            },
            tombstones=0.03,
            deletes=True,
            versioned=False,
            rejects=True,
            counted=True,
            opensearch=True,
        ),
        Mode(
            "reset",
            recovery=False,
            layouts=("2w", "1w"),
            # Small batches: little read ahead of the position the deletion passes.
            settings={"KAFKA_AUTO_OFFSET_RESET": "latest", "KAFKA_CONSUME_BATCH_SIZE": "50"},
            reset=True,
        ),
        Mode(
            "strict",
            recovery=True,
            layouts=("2w", "1w"),
            settings={"ERRORS_TOLERANCE": "none"},
            strict=True,
            outages=False,
        ),
    )
}


def base_settings(
    *, bootstrap: str, es_url: str, topic: str, group: str, index: str, dlq: str
) -> dict[str, str]:
    """The flow settings every mode starts from (a mode's own override them)."""
    return {
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "KAFKA_TOPICS": topic,
        "KAFKA_GROUP_ID": group,
        "KAFKA_STOP_AT_END": "true",
        "ES_HOSTS": es_url,
        "ES_INDEX": index,
        "DOC_ID": "key",
        # External versions from the record's place in the workload: offsets would do on
        # one partition only (VERSION=offset refuses a topic of several with DOC_ID=key).
        "VERSION": f"header:{SEQ_HEADER}",
        "ERRORS_TOLERANCE": "all",
        "DLQ_TOPIC": dlq,
        "TRANSFORMS": "tools.chaos.transforms:explode",
        # Smaller than the defaults (1000, 5000): more epochs and more bulk requests per
        # second, so more distinct moments for a kill to land on.
        "KAFKA_CONSUME_BATCH_SIZE": "200",
        "BULK_MAX_ACTIONS": "500",
    }
