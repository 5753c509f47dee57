"""Runs the real flow (`python -m bytewax.run flows.es_sink`) and SIGKILLs it until it finishes.

Each attempt starts the flow in one layout (`2w`: one process, `-w 2`; `2p`: two processes,
`-i 0/1 -a "127.0.0.1:p1;127.0.0.1:p2"` on fresh ports), each process in its own session so
a kill takes the whole process (`killpg`, SIGKILL). While kills remain, the attempt gets a
kill plan, chosen at random:

* `startup`: 0.2-3 s after spawn, before or while partitions are built (nothing committed).
* `random`: a uniform moment within the attempt's window once partitions are built.
* `bulk`: arm at a random moment in the window, then poll Elasticsearch's task list every
  ~10 ms and kill the moment a `_bulk` request for our index is in flight.
* `epoch`: arm at a random moment, poll the group's committed offsets every ~25 ms; a
  change marks an epoch boundary (the source commits epoch e when epoch e+1 starts, right
  after the sinks flushed and Bytewax wrote the recovery snapshot). Then either kill
  0-100 ms later (`after-commit`: during the commit and the next epoch's first reads), or
  at boundary + epoch length - 0-300 ms (`before-boundary`: while the sinks flush in
  `snapshot()` and the recovery snapshot is written).

The moment is 0.1-1.5 windows after reading began; the window adapts so the kills spread
over the whole backfill: 0.8 x the remaining records over the measured throughput (index
operations per second), divided by the kills still to do (+1). In the
`2p` layout a kill hits one process (the cluster then fails: the survivor is waited for and
SIGKILLed if it hangs), both at once, or both staggered by up to a second. After the last
kill the flow runs undisturbed until it exits 0 (KAFKA_STOP_AT_END=true).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.invariants import Durable, Invariants

ROOT = Path(__file__).resolve().parent.parent
SURVIVOR_WAIT_S = 15.0
STARTED_MARK = b"starts at offset"
PLANS = ("startup", "random", "bulk", "epoch")
PLAN_WEIGHTS = (1, 3, 3, 3)
MAX_CRASHES = 5
RATE_ENV = "CHAOS_RATE_PER_PROCESS"

# Host settings that would change the flow under test; the harness sets its own.
_DROP_PREFIXES = (
    "KAFKA_", "ES_", "DLQ_", "BULK_", "BYTEWAX_", "SCHEMA_REGISTRY_", "VALUE_", "KEY_",
    "ON_NULL_",
)  # fmt: skip
_DROP_NAMES = {"TRANSFORMS", "ERRORS_TOLERANCE", "WRITE_METHOD", "DOC_ID", "VERSION"}


class HarnessTimeout(Exception):
    """The total time budget ran out."""


class TooManyCrashes(Exception):
    """The flow kept failing on its own (not killed by us)."""


def flow_env(settings: dict[str, str]) -> dict[str, str]:
    """The host environment without flow settings, plus ours and PYTHONPATH=repo root."""
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(_DROP_PREFIXES) and k not in _DROP_NAMES
    }
    return {**base, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", **settings}


def free_ports(n: int) -> list[int]:
    """`n` distinct ports free right now (the OS picks them)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class Flow:
    """One attempt: the flow's processes in one layout."""

    def __init__(
        self, layout: str, run_args: list[str], env: dict[str, str], logs: Path, rate: float
    ) -> None:
        self.layout = layout
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []
        self._log_pos: list[int] = []
        self._active = False
        self.killed: set[int] = set()
        base = [sys.executable, "-m", "bytewax.run", "flows.es_sink", *run_args]
        if layout == "2w":
            cmds = [[*base, "-w", "2"]]
        elif layout == "2p":
            addresses = ";".join(f"127.0.0.1:{p}" for p in free_ports(2))
            cmds = [[*base, "-i", str(i), "-a", addresses] for i in range(2)]
        else:
            msg = f"unknown layout {layout!r}"
            raise ValueError(msg)
        if rate > 0:  # the throttle in chaos.transforms is per process
            env = {**env, RATE_ENV: f"{rate / len(cmds):.3f}"}
        self.started = time.monotonic()
        for i, cmd in enumerate(cmds):
            log = logs.with_name(f"{logs.name}-p{i}.log")
            with open(log, "ab") as out:
                out.write(f"$ {' '.join(cmd)}\n".encode())
                out.flush()
                self.procs.append(
                    subprocess.Popen(
                        cmd,
                        cwd=ROOT,
                        env=env,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                        start_new_session=True,
                    )
                )
            self.logs.append(log)
            self._log_pos.append(0)

    def codes(self) -> list[int | None]:
        return [p.poll() for p in self.procs]

    def exited(self) -> bool:
        return all(c is not None for c in self.codes())

    def any_exited(self) -> bool:
        return any(c is not None for c in self.codes())

    def active(self) -> bool:
        """True once every process logged a source partition start (reading has begun)."""
        if self._active:
            return True
        seen = 0
        for i, log in enumerate(self.logs):
            try:
                with open(log, "rb") as f:
                    data = f.read()
            except OSError:
                continue
            if STARTED_MARK in data:
                seen += 1
            self._log_pos[i] = len(data)
        self._active = seen == len(self.logs)
        return self._active

    def kill(self, which: list[int]) -> None:
        """SIGKILL the whole process (its session) of each index in `which`."""
        for i in which:
            proc = self.procs[i]
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                self.killed.add(i)

    def kill_all(self) -> None:
        self.kill(list(range(len(self.procs))))
        for p in self.procs:
            p.wait()

    def wait(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.exited():
                return True
            time.sleep(0.05)
        return self.exited()

    def tail(self, lines: int = 15) -> str:
        out = []
        for log in self.logs:
            text = log.read_text(errors="replace").splitlines()
            out.append(f"--- {log}\n" + "\n".join(text[-lines:]))
        return "\n".join(out)


class Monitor:
    """What the harness watches to time kills: committed offsets and in-flight bulks."""

    def __init__(self, es: Any, bootstrap: str, group: str, topic: str, index: str) -> None:
        from confluent_kafka import Consumer, TopicPartition

        from chaos.audit import partitions_of

        self._es = es
        self._index = index
        # Same group id, never subscribed: committed() is a plain OffsetFetch.
        self._consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
        )
        self._tps = [TopicPartition(topic, p) for p in partitions_of(bootstrap, topic)]

    def committed(self) -> int:
        """Sum of the committed offsets (records durably done, per the flow's commits)."""
        try:
            tps = self._consumer.committed(self._tps, timeout=5)
        except Exception:
            return -1
        return sum(max(tp.offset, 0) for tp in tps)

    def index_ops(self) -> int:
        """Index operations Elasticsearch executed (done or lost to a newer version).

        Mapping errors are not counted, replays are: this measures how fast the flow
        works, not how far it got (that is `committed`).
        """
        try:
            stats = self._es.indices.stats(index=self._index, metric="indexing")
            ix = stats["_all"]["primaries"]["indexing"]
        except Exception:
            return -1
        return int(ix["index_total"]) + int(ix.get("index_failed_due_to_version_conflict", 0))

    def bulk_in_flight(self) -> bool:
        """True when Elasticsearch is executing a `_bulk` request for our index."""
        try:
            with warnings.catch_warnings():  # the task API is "technical preview"
                warnings.simplefilter("ignore")
                resp = self._es.tasks.list(actions="indices:data/write/bulk*", detailed=True)
        except Exception:
            return False
        for node in resp.get("nodes", {}).values():
            for task in node.get("tasks", {}).values():
                if self._index in task.get("description", ""):
                    return True
        return False

    def close(self) -> None:
        self._consumer.close()


@dataclass
class ModeStats:
    """What happened in one mode, for the summary line."""

    kills: int = 0
    runs: int = 0
    commit_ahead: int = 0
    """Records below a committed offset that were not durable at a kill (must be 0)."""
    resume_ahead: int = 0
    """Records below a restart's start offset that were not durable (must be 0)."""
    offset_checks: int = 0
    crashes: int = 0
    kills_in_bulk: int = 0
    survivors_hung: int = 0
    plans: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PLANS, 0))
    layouts: dict[str, int] = field(default_factory=dict)
    completed: bool = False


@dataclass
class Outcome:
    kind: str  # "finished", "crashed" or "killed"
    detail: str = ""


class Chaos:
    """Runs one mode's attempts until the backfill completes; see the module docstring."""

    def __init__(
        self,
        *,
        mode: str,
        layouts: list[str],
        kills: int,
        records: int,
        run_args: list[str],
        env: dict[str, str],
        logdir: Path,
        monitor: Monitor,
        invariants: Invariants,
        epoch_s: float,
        rng: random.Random,
        deadline: float,
        say: Any,
        rate: float = 0.0,
    ) -> None:
        self.mode = mode
        self.layouts = layouts
        self.target = kills
        self.records = records
        self.run_args = run_args
        self.env = env
        self.logdir = logdir
        self.monitor = monitor
        self.invariants = invariants
        self.epoch_s = epoch_s
        self.rng = rng
        self.deadline = deadline
        self.say = say
        self.stats = ModeStats()
        self.max_rate = rate
        self.rate = rate or 5000.0  # records/s, refined from what each attempt achieves
        self._kill_log = logdir / "kills.jsonl"
        self.flow: Flow | None = None

    # -- the loop

    def run(self) -> ModeStats:
        durable: Durable | None = None
        try:
            while True:
                self._check_time()
                layout = self.layouts[self.stats.runs % len(self.layouts)]
                self.stats.runs += 1
                self.stats.layouts[layout] = self.stats.layouts.get(layout, 0) + 1
                name = f"run-{self.stats.runs:03d}-{layout}"
                before = self.monitor.committed()
                self.flow = Flow(layout, self.run_args, self.env, self.logdir / name, self.max_rate)
                if self.stats.kills < self.target:
                    outcome = self._attempt_with_kill(self.flow, before)
                else:
                    outcome = self._attempt_to_end(self.flow)
                if durable is not None:
                    self.invariants.on_restart(durable, self.flow.logs)
                if outcome.kind != "finished":
                    durable = self.invariants.after_kill()
                found = self.invariants.found
                self.stats.commit_ahead = found.commit_ahead
                self.stats.resume_ahead = found.resume_ahead
                self.stats.offset_checks = found.checked
                done = self.monitor.committed()
                self.say(
                    f"[{self.mode}] {name}: {outcome.kind} {outcome.detail} "
                    f"(committed {done}/{self.records})"
                )
                if outcome.kind == "finished":
                    self.stats.completed = True
                    return self.stats
                if outcome.kind == "crashed":
                    self.stats.crashes += 1
                    self.say(f"[{self.mode}] {name} exited by itself:\n{self.flow.tail()}")
                    if self.stats.crashes > MAX_CRASHES:
                        msg = f"the flow failed by itself {self.stats.crashes} times"
                        raise TooManyCrashes(msg)
        finally:
            if self.flow is not None and not self.flow.exited():
                self.flow.kill_all()

    def _check_time(self) -> None:
        if time.monotonic() > self.deadline:
            msg = "total time budget exhausted (--timeout)"
            raise HarnessTimeout(msg)

    def _attempt_to_end(self, flow: Flow) -> Outcome:
        while not flow.exited():
            self._check_time()
            time.sleep(0.1)
        return self._exit_outcome(flow)

    def _exit_outcome(self, flow: Flow) -> Outcome:
        codes = flow.codes()
        if all(c == 0 for c in codes):
            return Outcome("finished", f"exit codes {codes}")
        return Outcome("crashed", f"exit codes {codes}")

    # -- kills

    def _window(self) -> float:
        """Mean seconds from 'reading' to the kill, spreading the kills over the backfill."""
        done = max(self.monitor.committed(), 0)
        remaining = max(self.records - done, 0)
        left = max(self.target - self.stats.kills, 0)
        # 0.8: a kill also costs the replay of its last epoch; keep the last kill early.
        return min(max(0.8 * remaining / self.rate / (left + 1), 0.3), 30.0)

    def _sleep_until(self, flow: Flow, when: float) -> bool:
        """Sleep until `when`; False if a flow process exited first."""
        while time.monotonic() < when:
            if flow.any_exited():
                return False
            self._check_time()
            time.sleep(min(0.02, max(when - time.monotonic(), 0)))
        return not flow.any_exited()

    def _wait_active(self, flow: Flow, limit_s: float = 60.0) -> bool:
        """Wait until reading began; False only if a process exited meanwhile."""
        deadline = time.monotonic() + limit_s
        while not flow.active() and time.monotonic() < deadline:
            if flow.any_exited():
                return False
            self._check_time()
            time.sleep(0.05)
        return not flow.any_exited()

    def _attempt_with_kill(self, flow: Flow, committed_before: int) -> Outcome:
        rng = self.rng
        plan = rng.choices(PLANS, PLAN_WEIGHTS)[0]
        window = self._window()
        variant = ""
        active_at, ops_at = time.monotonic(), -1
        if plan == "startup":
            ok = self._sleep_until(flow, flow.started + rng.uniform(0.2, 3.0))
        else:
            ok = self._wait_active(flow)
            active_at = time.monotonic()
            ops_at = self.monitor.index_ops()
            ok = ok and self._sleep_until(flow, active_at + rng.uniform(0.1, 1.5) * window)
            if ok and plan == "bulk":
                variant = "miss"
                give_up = time.monotonic() + 20
                while ok and time.monotonic() < give_up:
                    if self.monitor.bulk_in_flight():
                        variant = "hit"
                        break
                    ok = self._sleep_until(flow, time.monotonic() + 0.01)
            elif ok and plan == "epoch":
                variant = "no-commit-seen"
                base = self.monitor.committed()
                give_up = time.monotonic() + 20
                while ok and time.monotonic() < give_up:
                    if self.monitor.committed() != base:
                        boundary = time.monotonic()
                        if rng.random() < 0.5:
                            variant = "after-commit"
                            when = boundary + rng.uniform(0, 0.1)
                        else:
                            variant = "before-boundary"
                            when = boundary + max(self.epoch_s - rng.uniform(0, 0.3), 0)
                        ok = self._sleep_until(flow, when)
                        break
                    ok = self._sleep_until(flow, time.monotonic() + 0.025)
        if not ok:
            # A process exited before the kill: the backfill finished, or the flow failed.
            if not flow.wait(SURVIVOR_WAIT_S):
                flow.kill_all()
            return self._exit_outcome(flow)
        return self._kill(flow, plan, variant, committed_before, active_at, ops_at)

    def _kill(
        self,
        flow: Flow,
        plan: str,
        variant: str,
        committed_before: int,
        active_at: float,
        ops_at: int,
    ) -> Outcome:
        rng = self.rng
        at = time.monotonic()
        how = "process"
        if len(flow.procs) == 1:
            flow.kill([0])
        else:
            roll = rng.random()
            if roll < 0.5:
                victim = rng.randrange(len(flow.procs))
                how = f"process {victim} of 2"
                flow.kill([victim])
            elif roll < 0.8:
                how = "both processes"
                flow.kill(list(range(len(flow.procs))))
            else:
                delay = rng.uniform(0.05, 1.0)
                first = rng.randrange(len(flow.procs))
                how = f"process {first}, then the other {delay:.2f}s later"
                flow.kill([first])
                time.sleep(delay)
                flow.kill(list(range(len(flow.procs))))
        in_bulk = variant == "hit" or self.monitor.bulk_in_flight()
        if not flow.wait(SURVIVOR_WAIT_S):
            self.stats.survivors_hung += 1
            how += " (the survivor hung; SIGKILLed)"
            flow.kill_all()
        self.stats.kills += 1
        self.stats.plans[plan] += 1
        self.stats.kills_in_bulk += in_bulk
        committed_after = self.monitor.committed()
        elapsed = at - flow.started
        ops = self.monitor.index_ops()
        if ops_at >= 0 and ops > ops_at and at - active_at > 0.5:
            rate = (ops - ops_at) / (at - active_at)
            self.rate = 0.5 * self.rate + 0.5 * max(rate, 50.0)
        entry = {
            "mode": self.mode,
            "layout": flow.layout,
            "plan": plan,
            "variant": variant,
            "how": how,
            "after_s": round(elapsed, 3),
            "bulk_in_flight": in_bulk,
            "exit_codes": flow.codes(),
            "committed": committed_after,
            "committed_before": committed_before,
            "rate": round(self.rate),
        }
        with open(self._kill_log, "a") as f:
            f.write(json.dumps(entry) + "\n")
        label = f"{plan}/{variant}" if variant else plan
        return Outcome(
            "killed",
            f"#{self.stats.kills} {label} {how} at {elapsed:.2f}s"
            f"{' during a bulk' if in_bulk else ''}",
        )
