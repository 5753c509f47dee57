"""Kafka and Elasticsearch helpers shared by tests, bench and chaos.

Not part of the installed package (pyproject lists flows, sinks and demo): its users run
with the repository root on sys.path (tests/ is a package under the root, scripts/bench and
scripts/chaos insert the root). tools/demo/ keeps its own create-if-missing and produce because
it is installed and must import without the repository.
Modules import confluent_kafka and elasticsearch lazily, so importing devkit costs nothing.
"""
