"""Kafka and Elasticsearch helpers shared by tests, bench, chaos and demo.

Not part of the installed package (pyproject lists flows, sinks and demo only): everything
that uses it runs with the repository root on sys.path (pytest's rootdir conftest,
scripts/bench, scripts/chaos, `python -m demo.run` from the root, as scripts/demo does).
Modules import confluent_kafka and elasticsearch lazily, so importing devkit costs nothing.
"""
