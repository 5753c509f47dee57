"""Parts of `scripts/bench`: the Kafka -> Elasticsearch throughput, CPU, memory and latency
benchmark (see docs/benchmarks.md). Not part of the installed package; run with the
repository root on PYTHONPATH (scripts/bench does that itself)."""
