"""The dataflow: Kafka → decode → transforms → route → Elasticsearch (and dead letters).

`build_flow` is the Python API for users who make their own flow module:

    # mycompany/flow.py, run with: python -m bytewax.run mycompany.flow
    from flows.pipeline import build_flow
    from flows.record import Doc

    def tag(doc: Doc) -> Doc:
        doc.source["team"] = "payments"
        return doc

    flow = build_flow(transforms=[tag])
"""

from __future__ import annotations

from collections.abc import Sequence

import bytewax.operators as op
from bytewax.dataflow import Dataflow

from flows.config import Settings
from flows.kafka import fencing
from flows.kafka.source import KafkaSource
from flows.process import Processor, is_documents
from flows.runtime.args import run_args
from flows.transforms import Transform
from sinks.dead_letter import DeadLetterSink
from sinks.elasticsearch import ElasticsearchSink

MIN_PARTITIONS = 8


def build_flow(
    settings: Settings | None = None,
    transforms: Sequence[Transform] = (),
    flow_id: str = "es_sink",
) -> Dataflow:
    """Describe the dataflow; nothing connects until Bytewax runs it.

    Args:
        settings: parsed settings; read from the environment (and ES_SINK_CONFIG) if None.
        transforms: Python transforms run after the configured ones, in order.
        flow_id: the Bytewax dataflow id (recovery stores are keyed by step ids under it).
    """
    settings = settings or Settings.load()
    parts = settings.es_sink_partitions or default_partitions()
    flow = Dataflow(flow_id)
    messages = op.input("kafka", flow, KafkaSource(settings))
    processed = op.flat_map_batch("process", messages, Processor(settings, transforms, parts))
    routed = op.branch("route", processed, is_documents)
    # The sinks see only their own frozen configs (built by the settings groups), never Settings.
    stored = run_args().recovery_dir  # their partitions a recovery store holds beyond `parts`
    es = ElasticsearchSink(settings.es_sink_config, parts, stored, owner=fencing.token)
    op.output("elasticsearch", routed.trues, es)
    dead_letters = settings.dead_letter_config
    if dead_letters is not None:
        op.output("dead-letters", routed.falses, DeadLetterSink(dead_letters, parts, stored))
    else:
        # Without a topic the error policy stops the flow before any dead letter exists, or
        # (ERRORS_TOLERANCE=log) logs and drops each one in the processor; should one
        # appear anyway, fail rather than drop it.
        op.raises("no-dead-letter-topic", routed.falses)
    return flow


def default_partitions() -> int:
    """At least the total worker count of this run, and at least MIN_PARTITIONS.

    The count may change between runs: a recovery store written with more partitions still
    resumes, as the sinks also list the extra ones it holds (`sinks.partitioned`)."""
    args = run_args()
    return max(MIN_PARTITIONS, args.workers_per_process * args.processes)
