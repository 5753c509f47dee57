"""The partitioned Elasticsearch bulk sink.

`ElasticsearchSink` is the flow's description of it: frozen config only, no I/O. At run
time each worker builds its partitions (`partition`), which buffer encoded actions
(`actions`) and send them on the process's bulk threads (`workers`) as `_bulk` requests
whose answers `bulk` classifies; `client` builds the one client per process, and
`bootstrap` checks credentials and installs the index template at start. The write
methods are listed once, in `write_methods`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from sinks.dead_letter.producer import shared_producer
from sinks.elasticsearch.actions import ActionBuilder, ActionError
from sinks.elasticsearch.bootstrap import bootstrap_template, check_credentials
from sinks.elasticsearch.client import make_client, shared_client
from sinks.elasticsearch.config import (
    BulkConfig,
    DocumentConfig,
    EsConnection,
    EsSinkConfig,
    RetryConfig,
    TemplateConfig,
)
from sinks.elasticsearch.index_names import IndexName
from sinks.elasticsearch.partition import Chunk, EsSinkPartition, clear_refusals
from sinks.elasticsearch.workers import linger_ticker
from sinks.elasticsearch.write_methods import WRITE_METHODS, WriteMethod
from sinks.partitioned import NumberedSink

__all__ = [
    "WRITE_METHODS",
    "ActionBuilder",
    "ActionError",
    "BulkConfig",
    "Chunk",
    "DocumentConfig",
    "ElasticsearchSink",
    "EsConnection",
    "EsSinkConfig",
    "EsSinkPartition",
    "IndexName",
    "RetryConfig",
    "TemplateConfig",
    "WriteMethod",
    "check_credentials",
    "clear_refusals",
    "make_client",
    "shared_client",
]


class ElasticsearchSink(NumberedSink):
    """Bulk-writes chunks of encoded actions; items are `(partition number, actions)`.

    Its partitions are `es-0000` ..., then any further `es-` partition a recovery store
    holds (see `sinks.partitioned`)."""

    def __init__(
        self,
        config: EsSinkConfig,
        partitions: int,
        recovery_dir: Path | None = None,
        owner: Callable[[], str] | None = None,
    ) -> None:
        super().__init__("es", partitions, recovery_dir)
        self._config = config  # no I/O here: this object is part of the flow description
        self._owner = owner
        """The running process's owner token, asked for in that process (`tasks`)."""

    def build_part(self, step_id: str, for_part: str, resume_state: None) -> EsSinkPartition:
        """Connect, bootstrap the index template once per process, and start buffering."""
        config = self._config
        client = shared_client(config.connection)
        bootstrap_template(client, config.template)
        dlq = shared_producer(config.dead_letters) if config.dead_letters else None
        owner = self._owner() if self._owner is not None else None
        part = EsSinkPartition(config, for_part, client, dlq, owner=owner)
        linger_s = config.bulk.linger_ms / 1000
        linger_ticker(min(max(linger_s / 4, 0.01), 0.25)).add(part)
        return part
