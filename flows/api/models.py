"""The shapes the status API answers with: one declaration for the responses, the OpenAPI
document (docs/openapi.json) and the `es-sink` command that reads them."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

State = Literal["running", "paused", "stopping", "halted", "failed"]


class LastError(BaseModel):
    at: str = Field(description="ISO-8601 UTC time of the error")
    reason: str


class PartitionStatus(BaseModel):
    topic: str
    partition: int
    position: int = Field(description="next offset this process reads")
    committed: int | None = Field(description="the group's committed offset (Kafka's answer)")
    end: int | None = Field(description="log end offset (last stable offset, read_committed)")
    lag: int | None = Field(description="read lag: end - position, records not read yet")
    committed_lag: int | None = Field(
        description="end - committed: records not yet written and committed (null before the "
        "group's first commit)"
    )
    paused: bool
    held: str | None = Field(
        description="why it reads nothing although it could (a partition added to its topic "
        "waits for the older partitions to reach their end offsets at start); null: it reads"
    )
    last_error: LastError | None


class Retry(BaseModel):
    where: str = Field(description="bulk, dead-letter, commit, index-template, kafka-metadata")
    reason: str
    since: str = Field(description="ISO-8601 UTC time of the first retry")
    attempts: int


class SinkStatus(BaseModel):
    buffered_docs: int
    buffered_bytes: int
    bulks_in_flight: int
    oldest_unflushed_s: float | None = Field(
        description="age of the oldest buffered action no bulk has taken yet"
    )
    retries: list[Retry]


class ProcessInfo(BaseModel):
    id: int = Field(description="Bytewax process id (-i), 0 for a single process")
    processes: int
    workers: int = Field(description="worker threads of this process (-w)")
    pid: int
    group: str
    apis: list[str] = Field(
        description="the status API of every process of the cluster, by process id"
    )
    started_at: str
    uptime_s: float
    starting: bool = Field(
        description="the start has not read the group's commits yet: the state may still "
        "turn to paused (a pause recorded before the start)"
    )


class Rates(BaseModel):
    records_in_per_s: float = Field(description="over the last minute")
    docs_indexed_per_s: float = Field(description="over the last minute")


class Halted(BaseModel):
    topic: str
    partition: int
    offset: int
    reason: str


class Status(BaseModel):
    state: State
    version: str = Field(description="the es-sink version this process runs")
    paused: bool = Field(
        description="reading is paused (PUT /pause, or a pause the group's commits recorded "
        "at start); it holds over restarts until PUT /resume"
    )
    paused_since: str | None = Field(description="ISO-8601 UTC time the pause began")
    paused_by: str | None = Field(
        description="who paused: the `by` of PUT /pause (es-sink sends user@host), else the "
        "client's address"
    )
    process: ProcessInfo
    partitions: list[PartitionStatus]
    sink: SinkStatus
    dead_letters: dict[str, int] = Field(description="dead letters this run, by stage")
    rates: Rates
    halted: Halted | None = Field(description="the record the flow stops on")


class StateAnswer(BaseModel):
    state: State


class Live(BaseModel):
    live: bool
    reason: str | None = None


class Ready(BaseModel):
    ready: bool
    reasons: list[str] = Field(default_factory=list)


class Problem(BaseModel):
    detail: str
