"""Quix Streams' Elasticsearch sink on the same topic (run as its own process, in the
bench tools virtualenv: quixstreams needs confluent-kafka < 2.13, this project >= 2.13).

    python tools/bench/quix_app.py --bootstrap HOST:PORT --es URL --topic T --group G --index I \
        --state-dir D

Quix defaults throughout (JSON values, bytes keys as document ids, sink chunks of 500,
a checkpoint, and so a flush, every 5 s); runs until SIGTERM/SIGINT, which Quix handles by
flushing its sink and committing.
"""

from __future__ import annotations

import argparse
import logging
import sys

from quixstreams import Application
from quixstreams.sinks.community.elasticsearch import ElasticsearchSink


class Sink(ElasticsearchSink):
    """Quix's sink, minus the `GET /` it sends in `setup()` as a connection check: the
    Elasticsearch 9.5.4 that scripts/stack runs answers that with 405. Nothing else
    changes: the same client, index creation and `write()`."""

    def setup(self) -> None:
        from elasticsearch import Elasticsearch

        self._client = Elasticsearch(**self._client_kwargs)
        self._create_index()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="tools.bench.quix_app")
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--es", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--index", required=True)
    p.add_argument("--state-dir", required=True)
    args = p.parse_args(argv)
    logging.getLogger("quixstreams.sinks.community.elasticsearch").setLevel(logging.WARNING)
    app = Application(
        broker_address=args.bootstrap,
        consumer_group=args.group,
        auto_offset_reset="earliest",
        state_dir=args.state_dir,
        loglevel="WARNING",
    )
    topic = app.topic(args.topic)
    sdf = app.dataframe(topic)
    sdf.sink(Sink(url=args.es, index=args.index))
    app.run()


if __name__ == "__main__":
    sys.exit(main())
