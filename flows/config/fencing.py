"""Fencing settings: read by flows/kafka/fencing.py (through the source partitions)."""

from __future__ import annotations

from flows.config.fields import Flag, Group, setting


class FencingSettings(Group):
    """How an instance of KAFKA_GROUP_ID takes its partitions over from an older one."""

    fencing: Flag = setting(
        "FENCING",
        True,
        "name this instance in its offset commits, check each epoch that no newer instance "
        "of KAFKA_GROUP_ID took a partition over, and stop (exit 3) if one did",
    )
    fence_wait_s: float | None = setting(
        "FENCE_WAIT_S",
        None,
        "seconds to wait before reading a partition whose previous owner did not release it; "
        "unset: the lease that owner advertised (twice its -s plus its ES_REQUEST_TIMEOUT_S)",
        ge=0.0,
    )
