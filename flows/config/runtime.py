"""Process settings: read by flows/es_sink.py (graceful stop, garbage collector clock) and
flows/kafka/discovery.py (the metadata watcher that restarts the process for new partitions)."""

from __future__ import annotations

from flows.config.fields import Group, setting

_GC_WAIT_LIMIT_S = 3600.0
"""Garbage cycles wait at most this long for the collector: a longer wait is a typo (ms for
s), and meanwhile their memory grows without bound."""


class RuntimeSettings(Group):
    """How the process stops, collects garbage and notices new partitions."""

    shutdown_timeout_s: float = setting(
        "SHUTDOWN_TIMEOUT_S",
        30.0,
        "Seconds a graceful stop (SIGTERM/SIGINT) may take before the process exits non-zero",
        ge=0.0,
    )
    gc_interval_s: float = setting(
        "GC_INTERVAL_S",
        10.0,
        "Seconds between the cyclic garbage collector's runs (flows.runtime.collector); 0: "
        "Python's",
        ge=0.0,
        le=_GC_WAIT_LIMIT_S,
    )
    gc_interval_max_s: float = setting(
        "GC_INTERVAL_MAX_S",
        40.0,
        "Longest wait between collections, reached by doubling while they find no garbage"
        " (the most a new garbage cycle waits); at most GC_INTERVAL_S: no doubling",
        ge=0.0,
        le=_GC_WAIT_LIMIT_S,
    )
    kafka_metadata_refresh_s: float = setting(
        "KAFKA_METADATA_REFRESH_S",
        30.0,
        "Seconds between checks for new partitions/topics (restart to read them); 0: off",
        ge=0.0,
    )
    cluster_stall_s: float = setting(
        "CLUSTER_STALL_S",
        60.0,
        "with 2+ processes: exit 1 when no epoch closed for this long and a peer's status "
        "API stopped answering (unless this process retries while a peer on another host "
        "answers); "
        "0: off",
        ge=0.0,
    )
