"""What every subcommand shares: settings as the flow reads them, one-line errors with the
exit statuses (0 ok, 1 problem found, 2 bad usage), `--json` output, and Kafka and
Elasticsearch clients built from the same settings (librdkafka pass-through, the sink's
client). Nothing here connects at import."""

from __future__ import annotations

import json
import logging
import re
import sys
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NoReturn

import typer
from rich.console import Console
from rich.text import Text

from flows.errors import ConfigError

if TYPE_CHECKING:
    from confluent_kafka import Consumer, Message
    from confluent_kafka.admin import AdminClient
    from elasticsearch import Elasticsearch

    from flows.config import Settings

OK, PROBLEM, USAGE = 0, 1, 2


class _LastLine(logging.Handler):
    """Keeps librdkafka's last line: the reason a broker could not be reached."""

    last: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        self.last = record.getMessage().rsplit("]: ", 1)[-1]


LIBRDKAFKA_LOG = _LastLine()
_librdkafka = logging.getLogger("es_sink.cli.librdkafka")
_librdkafka.propagate = False
_librdkafka.addHandler(LIBRDKAFKA_LOG)

QUIET = {"log_level": 4, "logger": _librdkafka}
"""librdkafka's lines (one per failed connection attempt, every second) go to a logger
that prints nothing: a command names the failure once, with the last of them."""

KAFKA_TIMEOUT_S = 10.0
"""Each Kafka look-up waits this long for an answer."""

out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)


JsonOpt = typer.Option(False, "--json", help="Print JSON (the shape in docs/operations.md).")


class Problem(Exception):
    """A problem found (exit 1); the message is one line naming the setting or argument."""


class Usage(Exception):
    """Bad usage (exit 2); the message is one line naming the setting or argument."""


def die(message: str, code: int) -> NoReturn:
    """Print `es-sink: <message>` on stderr as one line and exit with `code`."""
    text = re.sub(r"\s*\n\s*", " ", message).strip()
    print(f"es-sink: {text}", file=sys.stderr)
    raise typer.Exit(code)


@contextmanager
def errors_as_exits() -> Iterator[None]:
    """Turn the command's known errors into one line and its exit status."""
    try:
        yield
    except Usage as e:
        die(str(e), USAGE)
    except ConfigError as e:
        die(f"configuration error: {e}", USAGE)
    except Problem as e:
        die(str(e), PROBLEM)


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """The flow's settings: the environment and ES_SINK_CONFIG (ConfigError if invalid)."""
    from flows.config import Settings

    return Settings.load(environ)


def emit_json(value: Any) -> None:
    """One JSON document on stdout (the stable `--json` shapes in docs/operations.md)."""
    sys.stdout.write(json.dumps(value, indent=2, sort_keys=False, default=str) + "\n")
    sys.stdout.flush()


def emit_json_line(value: Any) -> None:
    """One JSON document on one line of stdout (JSON Lines: a document per `--watch` report)."""
    sys.stdout.write(json.dumps(value, sort_keys=False, default=str) + "\n")
    sys.stdout.flush()


def iso(ms: int | None) -> str | None:
    """Epoch milliseconds as ISO-8601 UTC (None stays None)."""
    if ms is None or ms < 0:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def parse_time(text: str, option: str) -> int:
    """An ISO-8601 time (UTC unless it says otherwise) as epoch milliseconds (Usage if not)."""
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        msg = f"{option}: expected an ISO-8601 time such as 2026-05-01T12:00:00Z, got {text!r}"
        raise Usage(msg) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


def cell(value: object) -> Text:
    """Table cell text, never read as rich markup (reasons hold `[field]` names)."""
    return Text("" if value is None else str(value))


def truncate(text: str, limit: int) -> str:
    """`text` cut to `limit` characters with an ellipsis."""
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


def show_bytes(data: bytes | None, limit: int) -> str | None:
    """Bytes as text for a person: UTF-8 where it decodes, escapes where not, truncated."""
    if data is None:
        return None
    return truncate(data.decode("utf-8", "backslashreplace"), limit)


# ------------------------------------------------------------------ Kafka


def admin(settings: Settings) -> AdminClient:
    """An AdminClient on the flow's cluster with its pass-through settings."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    from flows.kafka.topics import kafka_config_error

    try:
        return AdminClient(settings.librdkafka("admin", QUIET))
    except KafkaException as e:
        raise kafka_config_error(e) from None


def consumer(settings: Settings, group: str | None = None, **extra: Any) -> Consumer:
    """A consumer that never commits on its own: of `group` (offsets read or committed on
    purpose), or of a throw-away group (only reads)."""
    from confluent_kafka import Consumer, KafkaException

    from flows.kafka.topics import kafka_config_error

    conf = settings.librdkafka(
        "consumer",
        QUIET,
        **{
            "group.id": group or f"es-sink-cli-{uuid.uuid4().hex}",
            "enable.auto.commit": "false",
            "enable.auto.offset.store": "false",
            "enable.partition.eof": "false",
            **extra,
        },
    )
    try:
        return Consumer(conf)
    except KafkaException as e:
        raise kafka_config_error(e) from None


def reachable_topics(settings: Settings, timeout: float = KAFKA_TIMEOUT_S) -> dict[str, Any]:
    """The cluster's topic metadata; Problem naming KAFKA_BOOTSTRAP_SERVERS (or the SASL
    credentials) when Kafka does not answer within `timeout` s."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    from flows.kafka.topics import kafka_config_error

    auth: list[KafkaError] = []

    def on_error(e: KafkaError) -> None:
        if e.code() in (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED):
            auth.append(e)

    try:
        client = AdminClient(settings.librdkafka("admin", QUIET, error_cb=on_error))
    except KafkaException as e:
        raise kafka_config_error(e) from None
    try:
        return dict(client.list_topics(timeout=timeout).topics)
    except KafkaException as e:
        LIBRDKAFKA_LOG.last = None
        client.poll(0)  # serves the log lines and error callbacks queued meanwhile
        if auth:
            msg = (
                "KAFKA_CONFIG_SASL_USERNAME/KAFKA_CONFIG_SASL_PASSWORD: Kafka refused the "
                f"credentials: {auth[0].str()}"
            )
            raise Problem(msg) from None
        why = LIBRDKAFKA_LOG.last or str(e)
        msg = f"KAFKA_BOOTSTRAP_SERVERS: cannot reach Kafka at {settings.bootstrap_servers}: {why}"
        raise Problem(msg) from None


def flow_topics(settings: Settings) -> dict[str, list[int]]:
    """The topics and partitions the flow reads (the flow's own look-up, `find_topics`),
    after a quick reachability check so an unreachable broker fails in seconds; a missing
    topic is a Problem naming its setting."""
    from flows.kafka.topics import find_topics

    reachable_topics(settings)
    try:
        return find_topics(settings)
    except ConfigError as e:
        raise Problem(str(e)) from None


def flow_partitions(
    settings: Settings, topic: str | None, partition: int | None
) -> list[PartitionOffsets]:
    """The offsets of the flow's partitions, or of those `--topic`/`--partition` choose."""
    topics = flow_topics(settings)
    if topic is not None:
        if topic not in topics:
            raise Usage(f"--topic: {topic} is not one of the flow's topics ({', '.join(topics)})")
        topics = {topic: topics[topic]}
    if partition is not None:
        topics = {t: [p for p in ps if p == partition] for t, ps in topics.items()}
        if not any(topics.values()):
            raise Usage(f"--partition: no partition {partition} in {', '.join(topics)}")
    return offsets(settings, settings.group_id, topics)


@dataclass(frozen=True)
class PartitionOffsets:
    """One partition's offsets: log start, end (high watermark) and the group's commit."""

    topic: str
    partition: int
    low: int
    end: int
    committed: int | None
    metadata: str = ""

    @property
    def committed_lag(self) -> int | None:
        """Records past the committed offset (None without a commit)."""
        return None if self.committed is None else max(self.end - self.committed, 0)

    def as_json(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "low": self.low,
            "end": self.end,
            "committed": self.committed,
            "committed_lag": self.committed_lag,
        }


def _committed(c: Any, tps: list[Any], tries: int = 3) -> list[Any]:
    """The group's commits of `tps`, asked again after a retriable error (a timeout while
    the broker is busy, the coordinator loading) at most `tries` times in all."""
    from confluent_kafka import KafkaError, KafkaException

    from flows.kafka.topics import COORDINATOR_LOADING

    for attempt in range(1, tries + 1):
        try:
            return list(c.committed(tps, timeout=KAFKA_TIMEOUT_S))
        except KafkaException as e:
            err = e.args[0]
            again = err.retriable() or err.code() in (KafkaError._TIMED_OUT, *COORDINATOR_LOADING)
            if attempt == tries or not again:
                raise
    raise AssertionError("unreachable")


def offsets(
    settings: Settings, group: str, topics: Mapping[str, Iterable[int]]
) -> list[PartitionOffsets]:
    """Watermarks and `group`'s committed offsets of every partition of `topics`."""
    from confluent_kafka import TopicPartition

    c = consumer(settings, group)
    try:
        tps = [TopicPartition(t, p) for t, ps in topics.items() for p in sorted(ps)]
        committed = _committed(c, tps) if tps else []
        out: list[PartitionOffsets] = []
        for tp in committed:
            low, high = c.get_watermark_offsets(
                TopicPartition(tp.topic, tp.partition), timeout=KAFKA_TIMEOUT_S
            )
            done = tp.offset if tp.offset >= 0 else None
            out.append(PartitionOffsets(tp.topic, tp.partition, low, high, done, tp.metadata or ""))
        return out
    finally:
        c.close()


def read_range(
    c: Consumer, topic: str, partition: int, begin: int, end: int, timeout: float, setting: str
) -> Iterator[Message]:
    """The records of one partition from `begin` to `end` (exclusive), in order; Problem
    naming `setting` when no record arrives for `timeout` s."""
    import time

    from confluent_kafka import TopicPartition

    c.assign([TopicPartition(topic, partition, begin)])
    position = begin
    deadline = time.monotonic() + timeout
    while position < end:
        batch = c.consume(500, 1.0)
        if not batch:
            if time.monotonic() > deadline:
                msg = f"{setting}: reading {topic}/{partition} stalled at offset {position}"
                raise Problem(msg)
            # Transaction markers and aborted records occupy offsets never returned.
            done = c.position([TopicPartition(topic, partition)])[0].offset
            position = max(position, done if done is not None else position)
            continue
        deadline = time.monotonic() + timeout
        for m in batch:
            if m.error() is not None:
                continue
            position = int(m.offset() or 0) + 1
            if position <= end:
                yield m
    c.unassign()


def partitions_of(metadata: Mapping[str, Any], topic: str) -> list[int]:
    """The partition numbers of `topic` in a metadata answer ([] when missing)."""
    info = metadata.get(topic)
    if info is None or info.error is not None:
        return []
    return sorted(info.partitions)


# ------------------------------------------------------------------ Elasticsearch


def es_client(settings: Settings) -> Elasticsearch:
    """The sink's client (same connection settings, serializers and auth)."""
    from sinks.elasticsearch.client import make_client

    return make_client(settings.es_connection)


def es_problem(e: Exception, settings: Settings, what: str) -> Problem:
    """An Elasticsearch failure as one line naming the setting to check."""
    from elastic_transport import ConnectionError as TransportConnectionError
    from elastic_transport import ConnectionTimeout, TlsError
    from elasticsearch import ApiError

    from sinks.elasticsearch.client import credentials_hint, error_reason

    hosts = settings.es_cloud_id or ", ".join(settings.es_hosts)
    if isinstance(e, TlsError):
        return Problem(f"ES_CA_CERTS: TLS with {hosts} failed: {e.message}")
    if isinstance(e, TransportConnectionError | ConnectionTimeout):
        return Problem(f"ES_HOSTS: cannot reach Elasticsearch at {hosts}: {e.message}")
    if isinstance(e, ApiError):
        hint = credentials_hint(e.meta.status)
        name = _auth_setting(settings) if e.meta.status == 401 else "ES_HOSTS"
        reason = error_reason(e.body)
        return Problem(
            f"{name}: Elasticsearch refused {what} with HTTP {e.meta.status}: {reason}"
            + (f" ({hint})" if hint else "")
        )
    return Problem(f"ES_HOSTS: {what} failed: {e}")


def _auth_setting(settings: Settings) -> str:
    """The setting that holds the credentials Elasticsearch refused."""
    if settings.es_api_key is not None:
        return "ES_API_KEY"
    if settings.es_bearer_token is not None:
        return "ES_BEARER_TOKEN"
    return "ES_USERNAME/ES_PASSWORD"


def index_patterns(settings: Settings, topics: Iterable[str]) -> dict[str, str]:
    """Topic -> the index (or, for a dated ES_INDEX/ES_INDEX_MAP, the wildcard pattern of
    its indices) the flow writes its documents to, per the configured templates."""
    from sinks.elasticsearch.index_names import CONNECT_NAMING, IndexName, connect_index_name

    connect = settings.es_index_naming == CONNECT_NAMING
    out = {}
    for topic in topics:
        pattern = IndexName(settings.es_index_map.get(topic, settings.es_index))
        if pattern.has_date:  # every date part a wildcard
            named = pattern.template.replace("{topic}", topic)
            name = re.sub(r"\{[^{}]*\}", "*", named)
        else:
            name = pattern.render(topic, None)
        out[topic] = connect_index_name(name) if connect else name
    return out
