"""Chaos harness for the Kafka -> Elasticsearch flow (driven by `scripts/chaos`).

Not part of the installed product: `scripts/chaos` puts the repository root on sys.path,
and the flow subprocesses import `tools.chaos.transforms` through PYTHONPATH.
"""
