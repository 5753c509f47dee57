"""Fencing: two instances with the same KAFKA_GROUP_ID never both write and commit for long.

The source `assign()`s its partitions and commits as a "simple consumer" (generation -1),
so Kafka itself fences nothing: a rolling update's overlap, a process that only looked
dead, or a second cluster with the same group would all write and commit. The group's
commits are the one place every instance already reads and writes, so they carry the
ownership too. Every commit's metadata names its committer:

    es-sink partitions=4 owner=5f0c9a1e2b7d gen=3 since=1767225600000 lease=80 host=h pid=7
      at=1767225660000

- `owner` is one random token per process (the processes of a cluster own disjoint
  partitions, so each is fenced by the partitions it reads); `gen` orders owners without
  clocks: a partition's new owner takes the committed `gen` + 1 (equal generations, two
  instances started at the same moment, fall back to `since`, then the token);
  `lease` is how long a successor must wait for this owner to notice it (2 epochs plus
  ES_REQUEST_TIMEOUT_S: one epoch to reach its next check, and its last bulk);
  `at` is when it made this commit (`holds`: a tool that would move the offset judges
  by it whether an owner on another host may still run);
  `released` (a final word) says the owner stopped cleanly after its last commit;
  `waiting beat=<n>` says it announced itself and reads nothing yet, `n` counting its
  re-announcements (one per epoch), so that an older owner can tell it still runs;
  `after=<token>` names the owner whose bulks it still waits for before it reads.
- At start a partition re-commits the group's offset (unchanged) under its own name: that
  is the announcement. If the previous owner had not released the partition, the
  partition reads nothing for FENCE_WAIT_S (unset: the lease the owner advertised), so
  that an owner still running sees the announcement at its next check and stops first;
  it announces itself again each epoch of the wait, and once more, without `waiting`,
  when it begins to read.
  A clean stop releases, so a restart does not wait; but not while the partition still
  waits (it read nothing, and whoever comes next must wait as it did: for the owner
  before it, and, via `after`, for that owner's bulks). Nor does a restart after a crash on
  the same host (`node` and `start` name the kernel boot, pid namespace and process start:
  no live process matches them). A crash elsewhere (another host, a container restarted
  in a new pid namespace) waits: nothing tells a dead owner from a silent one. After any
  owner that did not release the partition, the partition also reads nothing until
  Elasticsearch lists none of that owner's bulks any more, at most its lease
  (`sinks.elasticsearch.tasks`): a bulk of a dead process still queued on a node would
  otherwise land after this process's newer write of the same document.
- Once per epoch, before its commit (in the epoch's first `next_batch`, which Bytewax calls
  only after the previous epoch's sink flushes), a partition reads its committed metadata
  (one `committed()` call): a newer owner that reads ends the process at once with one
  line and FENCED_EXIT_STATUS, committing and flushing nothing more. A newer owner that
  still waits may be stopped or die before it reads (a failed rollout): the partition
  holds (reads and commits nothing) while the newer owner's re-announcements show it
  runs; when none comes within that owner's lease, or when the newer owner released the
  partition (it stopped cleanly after reading), the partition warns once and takes it back:
  an aborted rollout does not leave nothing consuming. An older owner's commit
  (one that raced the announcement) is overwritten by committing again, and a partition
  still waiting starts its wait again. A commit of `es-sink offsets reset` (`Reset`: no
  owner, `reset-by=es-sink`) is the operator's: the partition reads from its offset
  (`Verdict.RESET`). Any other commit without an owner is another tool's, overwritten with
  a warning. When the check fails (group coordinator away) the partition reads and
  commits nothing until a check succeeds.

What this guarantees, and the timing it assumes: an older instance that runs its epochs
(each ends within its lease: `-s` plus the time its sinks take to flush) stops before the
newer one reads, so it neither commits over the newer one nor overwrites its documents. An
older instance frozen longer than the lease (SIGSTOP, a VM paused) may, when it thaws,
finish the epoch it was in (at most one epoch of writes and one commit, which the newer
owner's next check undoes) before its next check stops it; only external versioning
(VERSION=offset or header) keeps such late writes from replacing newer documents. If the
newer owner has stopped cleanly meanwhile, the thawed one takes the partition back and
reads from where the newer one released it when that lies below its own position (the
newer one's replay may have put documents back to older writes), else on from its own.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import threading
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import NoReturn

from confluent_kafka import Consumer, KafkaException, TopicPartition
from elasticsearch import Elasticsearch

from flows.config import Settings
from flows.runtime import control, shutdown
from flows.runtime.args import run_args
from sinks import failing
from sinks.elasticsearch import tasks
from sinks.elasticsearch.client import shared_client

logger = logging.getLogger(__name__)

__all__ = [
    "FENCED_EXIT_STATUS", "Owner", "PartitionFence", "Verdict", "metadata_fields", "token",
]  # fmt: skip

FENCED_EXIT_STATUS = 3
"""A newer instance took over: restarting this one would only take the partitions back."""
CHECK_TIMEOUT_S = 5.0
_PREFIX = "es-sink"


def metadata_fields(metadata: str | None) -> dict[str, str]:
    """The fields of an es-sink commit's metadata (`key=value`; a bare word maps to "");
    {} for metadata es-sink did not write."""
    words = (metadata or "").split()
    if not words or words[0] != _PREFIX:
        return {}
    return dict(word.partition("=")[::2] for word in words[1:])


UNREAD = "unread"
"""Marks an owner's announcement on a partition the group never committed: the offset is
where the owner starts, not what it read (`unread`)."""


def unread(metadata: str | None) -> bool:
    """The commit is an announcement before any read: under KAFKA_AUTO_OFFSET_RESET=latest
    it says nothing about when the group began (`discovery.earliest_reason`)."""
    return UNREAD in metadata_fields(metadata)


MAX_LEASE_S = 86_400.0
"""A lease longer than a day is not one this flow advertised (2 epochs + a request
timeout): metadata carrying it names no owner."""


@dataclass(frozen=True)
class Owner:
    """Who committed a partition's offset, as its metadata says."""

    token: str
    gen: int
    since_ms: int
    lease_s: float
    host: str = "?"
    pid: int = 0
    node: str = ""
    """This kernel boot and pid namespace (a hash): where `pid` names the process."""
    start: int = 0
    """The process's start time in clock ticks after boot (tells a reused pid apart)."""
    released: bool = False
    waiting: bool = False
    """Announced, not reading yet: it re-announces itself (`beat`) each epoch while alive."""
    beat: int = 0
    after: str = ""
    """The owner whose bulks it still waits for before it reads (it has written nothing
    yet): a successor takes that wait over."""
    at_ms: int = field(default=0, compare=False)
    """When it made the commit that names it (wall clock; 0: a commit of an earlier
    version). Not part of the owner's identity: its commits compare equal."""

    @classmethod
    def parse(cls, metadata: str | None) -> Owner | None:
        """The owner named in `metadata` (None: no owner, e.g. a commit before fencing)."""
        f = metadata_fields(metadata)
        try:
            if not 0 < float(f["lease"]) <= MAX_LEASE_S:
                return None  # garbled or foreign (inf, nan, 1e12): never wait on it
            return cls(
                f["owner"], int(f["gen"]), int(f["since"]), float(f["lease"]),
                f.get("host", "?"), int(f.get("pid", 0)), f.get("node", ""),
                int(f.get("start", 0)), "released" in f, "waiting" in f, int(f.get("beat", 0)),
                f.get("after", ""),
                int(f.get("at", 0)),
            )  # fmt: skip
        except (KeyError, ValueError):
            return None

    def words(self) -> str:
        """The metadata fields naming this owner."""
        out = (
            f"owner={self.token} gen={self.gen} since={self.since_ms} lease={self.lease_s:g} "
            f"host={self.host} pid={self.pid}"
        )
        if self.node:
            out += f" node={self.node} start={self.start}"
        if self.after:
            out += f" after={self.after}"
        if self.at_ms:
            out += f" at={self.at_ms}"
        if self.released:
            return f"{out} released"
        return f"{out} beat={self.beat} waiting" if self.waiting else out

    def describe(self) -> str:
        """`<token> (host h, pid 7, generation 3) since <UTC time>` for log lines."""
        since = datetime.fromtimestamp(self.since_ms / 1000, UTC).isoformat(timespec="seconds")
        return (
            f"{self.token} (host {self.host}, pid {self.pid}, generation {self.gen}) since {since}"
        )

    def outranks(self, other: Owner) -> bool:
        """Whether this owner is newer than `other` (generation, then start, then token)."""
        return (self.gen, self.since_ms, self.token) > (other.gen, other.since_ms, other.token)

    def known_stopped(self) -> bool:
        """Whether this owner's process is certainly gone: it ran in this kernel boot and pid
        namespace, and no live process has its pid and start time (a crash on this host)."""
        me = _me()
        return bool(self.node) and self.node == me.node and _started(self.pid) != self.start

    def runs_here(self) -> bool:
        """Whether this owner's process certainly runs: in this kernel boot and pid
        namespace, a live process has its pid and start time."""
        me = _me()
        return bool(self.node) and self.node == me.node and _started(self.pid) == self.start


RECOMMIT_S = 3600.0
"""A running owner commits each partition at least this often, idle or not (the source
commits an unchanged offset again after it: a group used through `assign()` loses a
partition's offset `offsets.retention.minutes` after its last commit)."""


def holds(owner: Owner | None, now_ms: int) -> str | None:
    """Why `owner` (of a partition's committed metadata) may still read the partition, for
    a tool that would move its offset; None when it certainly does not: it released the
    partition, or its process is gone from this host, or its last commit is older than a
    running owner lets pass (RECOMMIT_S plus its lease: its clock against ours)."""
    if owner is None or owner.released or owner.known_stopped():
        return None
    if owner.runs_here():
        return "its process runs on this host"
    if not owner.at_ms:
        return "it has not released it"
    until_ms = owner.at_ms + int((RECOMMIT_S + owner.lease_s) * 1000)
    if now_ms >= until_ms:
        return None
    last = datetime.fromtimestamp(owner.at_ms / 1000, UTC).isoformat(timespec="seconds")
    return (
        f"it has not released it and committed last at {last}; a running instance commits "
        f"at least every {RECOMMIT_S:g} s"
    )


RESET_BY = "es-sink"
"""`reset-by=` of the commits `es-sink offsets reset` makes."""


@dataclass(frozen=True)
class Reset:
    """An `es-sink offsets reset`, as its commit's metadata says: the committed offset is
    where the operator wants the group to read, not where an instance of it stopped.

        es-sink partitions=4 gen=3 reset-by=es-sink reset-at=1767225600000 reset-host=ops1

    An instance that finds such a commit reads from its offset: at start even over its
    recovery snapshot, and while it runs at its next check (`Verdict.RESET`). Until a
    recovery snapshot of it is certainly durable, the instance's own commits keep these
    fields (`words`), so that a restart meanwhile still starts from the group's offset."""

    at_ms: int
    host: str = "?"

    @classmethod
    def parse(cls, metadata: str | None) -> Reset | None:
        """The reset `metadata` records (None: not a reset's, nor one followed)."""
        f = metadata_fields(metadata)
        if f.get("reset-by") != RESET_BY:
            return None
        try:
            return cls(int(f["reset-at"]), f.get("reset-host", "?"))
        except (KeyError, ValueError):
            return None

    def words(self) -> str:
        return f"reset-by={RESET_BY} reset-at={self.at_ms} reset-host={self.host}"

    def describe(self) -> str:
        """`es-sink offsets reset at <UTC time> on host h` for log lines."""
        at = datetime.fromtimestamp(self.at_ms / 1000, UTC).isoformat(timespec="seconds")
        return f"es-sink offsets reset at {at} on host {self.host}"


def reset_metadata(previous: str | None, reset: Reset) -> str:
    """The metadata of a reset's commit over a commit with `previous` metadata: the
    partition count (flows.kafka.discovery), generation (the next owner's is one more) and a
    recorded pause (flows.runtime.control) kept, no owner named (an owner would take the commit for
    its own), and the reset. An owner that had not released the partition may have left
    bulks queued in Elasticsearch (a crash): `reset-after` and `reset-lease` name whose, so
    that the next owner waits for them as it would have without the reset."""
    f = metadata_fields(previous)
    words = [_PREFIX]
    if f.get("partitions", "").isdigit():
        words.append(f"partitions={f['partitions']}")
    if f.get("gen", "").isdigit():
        words.append(f"gen={f['gen']}")
    owner = Owner.parse(previous)
    if owner is not None and not owner.released:
        words += [f"reset-after={owner.after or owner.token}", f"reset-lease={owner.lease_s:g}"]
    elif f.get("reset-after") and f.get("reset-lease"):  # a reset over a reset
        words += [f"reset-after={f['reset-after']}", f"reset-lease={f['reset-lease']}"]
    pause = control.recorded(previous)
    if pause is not None:
        words.append(pause.words())
    return " ".join([*words, reset.words()])


def _reset_after(metadata: str | None) -> tuple[str, float]:
    """The owner whose bulks a reset's commit says to wait for, and its lease ("", 0)."""
    f = metadata_fields(metadata)
    try:
        lease = float(f.get("reset-lease", "0"))
    except ValueError:
        return "", 0.0
    if not f.get("reset-after") or not 0 < lease <= MAX_LEASE_S:
        return "", 0.0
    return f["reset-after"], lease


def _gen(metadata: str | None) -> int:
    """The generation a commit's metadata names (0: none)."""
    gen = metadata_fields(metadata).get("gen", "")
    return int(gen) if gen.isdigit() else 0


_lock = threading.Lock()
_process: Owner | None = None


def token() -> str:
    """This process's owner token, which its bulks carry too (`sinks.elasticsearch.tasks`)."""
    return _me().token


def _me() -> Owner:
    """This process as an owner (generation and lease to fill in), made on first use."""
    global _process
    with _lock:
        if _process is None:
            pid = os.getpid()
            _process = Owner(
                uuid.uuid4().hex[:12], 0, int(time.time() * 1000), 0.0,
                socket.gethostname() or "?", pid, _node(), _started(pid) or 0,
            )  # fmt: skip
        return _process


def _node() -> str:
    """A hash of the kernel boot and this pid namespace ("" where /proc has neither)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""
    return hashlib.sha256(f"{boot} {namespace}".encode()).hexdigest()[:12]


def _started(pid: int) -> int | None:
    """The start time (clock ticks after boot) of live process `pid`; None if none (or a
    zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()  # the command name may hold spaces
    return None if fields[0] in ("Z", "X") else int(fields[19])


def lease_s(settings: Settings) -> float:
    """How long a successor must wait for this process to notice it (see the module doc)."""
    return 2 * run_args().epoch_s + settings.es_request_timeout_s


class Verdict(Enum):
    """What a partition's committed metadata says about its ownership."""

    OWNED = "owned"
    """Ours, or nobody's (no committed offset yet)."""
    TAKEN_BACK = "taken back"
    """Commit again under our name: an older owner (or a commit without one) is there, a
    newer one released the partition or is gone, or our wait goes on (a re-announcement)
    or just ended."""
    HELD = "held"
    """A newer owner that may have died since it announced itself: read and commit nothing
    (`PartitionFence.holding`) until it shows that it runs, or its lease passes."""
    UNKNOWN = "unknown"
    """The check failed: read and commit nothing until it succeeds."""
    RESET = "reset"
    """`es-sink offsets reset` moved the offset (`PartitionFence.reset`): read from there
    and commit it under our name."""


class PartitionFence:
    """One source partition's ownership: announced at start, checked once per epoch."""

    def __init__(self, settings: Settings, topic: str, partition: int, committed: TopicPartition):
        self._topic, self._partition = topic, partition
        has_offset = committed.offset >= 0
        self.previous = Owner.parse(committed.metadata) if has_offset else None
        # After a reset's commit, which names no owner, the generation it kept.
        gen = (self.previous.gen if self.previous is not None else _gen(committed.metadata)) + 1
        self._wait_s = 0.0
        prev = self.previous
        # Crashed on this host: its successor waits for its bulks only. Not if it was itself
        # still waiting for an older owner, which may still run and write.
        self._crashed_here = (
            prev is not None and not prev.released and not prev.waiting and prev.known_stopped()
        )
        if prev is not None and not prev.released and not self._crashed_here:
            self._wait_s = prev.lease_s if settings.fence_wait_s is None else settings.fence_wait_s
        # Whose bulks to wait for: the previous owner's, or, if it stopped before it read,
        # those it was itself waiting for (it wrote nothing); after an `es-sink offsets
        # reset`, those of the owner the reset replaced.
        self._awaited = "" if prev is None or prev.released else prev.after or prev.token
        self._awaited_lease = prev.lease_s if prev is not None else 0.0
        if prev is None and has_offset:
            self._awaited, self._awaited_lease = _reset_after(committed.metadata)
        self.owner = replace(_me(), gen=gen, lease_s=lease_s(settings), waiting=self._wait_s > 0)
        self._deadline: float | None = None  # waiting until then (monotonic), then a check
        self._due = False
        self._failing_since: float | None = None
        self._newer: tuple[Owner, float] | None = None  # held for it, since (monotonic)
        self._settings = settings
        self._bulks: Future[tasks.Gone] | None = None  # the previous owner's, in Elasticsearch
        self.released = False
        self.released_at: int | None = None
        """The offset a newer owner released the partition at, when it was taken back from
        it: below this instance's own position, the newer one's replay may have put
        documents back to older writes (`KafkaSourcePartition` reads again from there)."""
        self.reset: tuple[int, Reset] | None = None
        """The offset and reset the last check found (`Verdict.RESET`)."""
        self._followed: int | None = None  # `reset-at` of the reset the partition follows

    @classmethod
    def of(
        cls, settings: Settings, topic: str, partition: int, committed: TopicPartition
    ) -> PartitionFence | None:
        """The partition's fence, None with FENCING=false."""
        return cls(settings, topic, partition, committed) if settings.fencing else None

    def metadata(self, base: str, *, released: bool = False, unread: bool = False) -> str:
        """`base` (discovery's partition count) plus this owner's fields, the commit's time
        among them (and `UNREAD`)."""
        self.owner = replace(self.owner, at_ms=int(time.time() * 1000))
        owner = replace(self.current(), released=released)
        return f"{base or _PREFIX} {owner.words()}" + (f" {UNREAD}" if unread else "")

    def current(self) -> Owner:
        """This owner as its next commit names it."""
        return replace(self.owner, after=self._awaited if self._awaiting() else "")

    def _awaiting(self) -> bool:
        """Not reading yet, for another owner's bulks (or before the wait began)."""
        bulks = self._bulks
        return bool(self._awaited) and (
            bulks is None or not bulks.done() or self._deadline is not None
        )

    def follow(self, reset: Reset) -> None:
        """The partition reads from `reset`'s offset (at start): a check that finds that
        commit still there before this owner's own lands is not a new reset."""
        self._followed = reset.at_ms

    def announced(self) -> None:
        """The announcement was committed: start the wait, if the previous owner needs one."""
        prev = self.previous
        if self._awaited:
            es = _es(self._settings)
            self._bulks = tasks.owner_gone(es, self._awaited, self._awaited_lease)
        if prev is None or prev.released:
            return
        if self._crashed_here:
            whose = "its" if self._awaited == prev.token else f"{self._awaited}'s"
            logger.info(
                "source partition %s/%d: its previous owner %s stopped without releasing it "
                "and no longer runs on this host; waiting only for %s bulks",
                self._topic, self._partition, prev.describe(), whose,
            )  # fmt: skip
        if self._wait_s > 0:
            self._deadline = time.monotonic() + self._wait_s
            logger.warning(
                "source partition %s/%d: its previous owner %s did not release it (it "
                "crashed, or it still runs); waiting FENCE_WAIT_S=%gs before reading it, so "
                "that a running owner sees this instance and stops",
                self._topic, self._partition, prev.describe(), self._wait_s,
            )  # fmt: skip

    def mark_due(self) -> None:
        """An epoch ended (`snapshot()`): check at the next `next_batch`."""
        self._due = True

    def due(self) -> bool:
        """A check is owed: once per epoch, and when the wait is over."""
        return self._due or (self._deadline is not None and time.monotonic() >= self._deadline)

    def waiting(self) -> bool:
        """Still waiting for the previous owner to notice, or for its bulks (read nothing)."""
        return self._deadline is not None or (self._bulks is not None and not self._bulks.done())

    def holding(self) -> bool:
        """A newer owner announced itself and has not shown yet that it runs: read and
        commit nothing (a stop ends the partition without committing)."""
        return self._newer is not None

    def check(self, consumer: Consumer) -> Verdict:
        """Read the committed metadata once; a newer owner ends the process (`stop`)."""
        tp = TopicPartition(self._topic, self._partition)
        try:
            committed = consumer.committed([tp], timeout=CHECK_TIMEOUT_S)[0]
        except KafkaException as e:
            if self._failing_since is None:
                self._failing_since = time.monotonic()
                logger.warning(
                    "source partition %s/%d: cannot check who owns it (%s); reading and "
                    "committing nothing until Kafka answers",
                    self._topic, self._partition, e,
                )  # fmt: skip
            return Verdict.UNKNOWN
        self._due = False
        self._failing_since = None
        if committed.offset < 0:
            return Verdict.OWNED  # nobody committed it: nobody to fence
        found = Owner.parse(committed.metadata)
        if found is not None and found.token != self.owner.token and found.outranks(self.owner):
            return self._newer_owner(found, committed.offset)
        self._newer = None
        reset = Reset.parse(committed.metadata) if found is None else None
        if reset is not None and reset.at_ms == self._followed:
            return Verdict.TAKEN_BACK  # followed already, and this owner's commit is not there
        if found is None or found.token != self.owner.token:
            if self._deadline is not None:  # it committed over the announcement: again
                self._deadline = time.monotonic() + self._wait_s
            if reset is not None:  # the operator's: read from there (flows.kafka.source)
                self._followed = reset.at_ms
                self.reset = (committed.offset, reset)
                return Verdict.RESET
            if found is None:  # not an older owner's late commit: someone else's
                logger.warning(
                    "source partition %s/%d: offset %d was committed for the group by "
                    "another tool while this instance reads it; committing this instance's "
                    "position over it (stop every process before moving offsets: es-sink "
                    "offsets reset refuses while a flow runs)",
                    self._topic, self._partition, committed.offset,
                )  # fmt: skip
            return Verdict.TAKEN_BACK
        if self._deadline is None:
            return Verdict.OWNED
        if time.monotonic() >= self._deadline:
            self._deadline = None
            self.owner = replace(self.owner, waiting=False)
            logger.warning(
                "source partition %s/%d: taken over from %s; reading",
                self._topic, self._partition, self.previous.describe() if self.previous else "?",
            )  # fmt: skip
        else:
            self.owner = replace(self.owner, beat=self.owner.beat + 1)
        return Verdict.TAKEN_BACK

    def _newer_owner(self, found: Owner, offset: int) -> Verdict:
        """A newer owner committed `offset`: stop once it reads, hold while it waits (its
        re-announcements say it still runs), take the partition back from one that released
        it or went silent before reading."""
        now = time.monotonic()
        if found.released:
            gone = "released it (it stopped cleanly)"
            self.released_at = offset
        elif not found.waiting:
            stop(self._topic, self._partition, found)
        elif self._newer is None or self._newer[0].token != found.token:
            self._newer = (found, now)
            logger.warning(
                "source partition %s/%d: a newer instance %s announced itself; reading and "
                "committing nothing until it re-announces itself (then this instance stops) "
                "or its lease of %gs passes without one",
                self._topic, self._partition, found.describe(), found.lease_s,
            )  # fmt: skip
            return Verdict.HELD
        elif found.beat != self._newer[0].beat:
            # It runs: hold until it reads (then stop) or falls silent for a lease (it was
            # stopped or crashed while it waited: take back). Stopping now would leave
            # nothing consuming if it never reads.
            self._newer = (found, now)
            return Verdict.HELD
        elif now - self._newer[1] <= found.lease_s:
            return Verdict.HELD
        else:
            gone = f"did not re-announce itself within its lease of {found.lease_s:g}s (gone)"
        self._newer = None
        logger.warning(
            "source partition %s/%d: the newer instance %s %s; taking the partition back",
            self._topic, self._partition, found.describe(), gone,
        )  # fmt: skip
        return Verdict.TAKEN_BACK

    def release(self, consumer: Consumer, offset: int, base: str) -> None:
        """After a clean stop's last commit: the offset again, marked released, so that the
        next owner does not wait (one try: a failure only makes it wait)."""
        if self.released:
            return
        tp = TopicPartition(
            self._topic, self._partition, offset, self.metadata(base, released=True)
        )
        try:
            consumer.commit(offsets=[tp], asynchronous=False)
            self.released = True
        except KafkaException as e:
            logger.warning(
                "source partition %s/%d: not released (the next start waits FENCE_WAIT_S): %s",
                self._topic, self._partition, e,
            )  # fmt: skip


def _es(settings: Settings) -> Elasticsearch:
    """The sink's client (shared): where the previous owner's bulks are listed."""
    return shared_client(settings.es_connection)


def stop(topic: str, partition: int, newer: Owner) -> NoReturn:
    """End the process now: no flush, no commit (the newer owner reads the rest again)."""
    failing.mark()
    logger.error(
        "fenced: partition %s/%d is owned by a newer instance %s; this instance stops "
        "without committing",
        topic, partition, newer.describe(),
    )  # fmt: skip
    shutdown.flush_logs()
    os._exit(FENCED_EXIT_STATUS)
