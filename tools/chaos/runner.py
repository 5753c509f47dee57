"""Runs the real flow (`tools.chaos.flow`) and interrupts it until it finishes.

Attempts cycle through the mode's layouts (`1w,3w,2p,1w,9w` in recovery mode: rescaling over
one recovery store). While interruptions remain, each attempt gets a plan; the ones with
a `forced` number are fixed in advance, the rest drawn at random:

* `startup`: 0.2-3 s after spawn, before or while partitions are built (nothing committed).
* `random`: a uniform moment within the attempt's window once partitions are built.
* `bulk`: arm at a random moment in the window, then poll Elasticsearch's task list every
  ~10 ms and kill the moment a `_bulk` request for our index is in flight.
* `epoch`: arm at a random moment, poll the group's committed offsets every ~25 ms; a
  change marks an epoch boundary. Then kill 0-100 ms later (`after-commit`) or at
  boundary + epoch length - 0-300 ms (`before-boundary`: while the sinks flush).
* `late` (where bulks are held, `tools.chaos.faults`: every plan until one kill landed while a
  bulk was held, then half of them): arm a hold on the next
  bulk, and kill 0-1 s after it is held; the bulk lands after the restart.
* `outage` / `outage2` (forced): at a random moment cut Elasticsearch off and SIGTERM
  once or twice (`tools.chaos.outage`).
* `after-bad` (ERRORS_TOLERANCE=none, once the flow has stopped on its bad record): kill
  0-1.5 epochs after the processor logs that it holds a failed record: the window in
  which a snapshot could pass a record the processor has not examined.

The window adapts so the kills spread over the whole backfill: 0.8 x the remaining records
over the measured throughput, divided by the kills still to do (+1). In a multi-process
layout a kill hits one process (the survivor is waited for and SIGKILLed if it hangs), all
at once, or all staggered by up to a second. After every interruption the harness waits
until no `_bulk` of the dead flow still runs, then checks what is durable
(`tools.chaos.invariants`, and `tools.chaos.strict` for a stop). `grow` adds partitions while
an attempt runs (`tools.chaos.grow`), in the layout the growth asks for
(`tools.chaos.modes.GROW_LAYOUT`).
After the last interruption the flow runs undisturbed until it exits 0 with nothing left
(strict: until two runs in a row stopped on the same record).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tools.chaos.faults import Faults
from tools.chaos.flow import Flow
from tools.chaos.grow import Growth
from tools.chaos.invariants import Durable, Invariants
from tools.chaos.monitor import Monitor
from tools.chaos.outage import OUTAGE_SLACK_S, OutageStats, sigterm_during_outage
from tools.chaos.proxy import Proxy
from tools.chaos.reset import Reset
from tools.chaos.strict import StrictWatch, held_logged, named_record

SURVIVOR_WAIT_S = 15.0
HANDLER_WAIT_S = 15.0
"""How long a flow that runs on is given to start reading before it is stopped anyway."""
PLANS = ("startup", "random", "bulk", "epoch", "late", "outage", "outage2", "after-bad")
RANDOM_PLANS = ("startup", "random", "bulk", "epoch")
PLAN_WEIGHTS = (1, 3, 3, 3)
MAX_CRASHES = 5
MAX_EARLY_EXITS = 10


class HarnessTimeout(Exception):
    """The total time budget ran out."""


class TooManyCrashes(Exception):
    """The flow kept failing on its own (not killed by us)."""


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
    late_held: int = 0
    """Kills while a bulk was held, to land after the restart (`late` plan)."""
    survivors_hung: int = 0
    outage: OutageStats = field(default_factory=OutageStats)
    early_exits: int = 0
    """Runs that exited 0 while records were left (produced after they started)."""
    plans: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PLANS, 0))
    layouts: dict[str, int] = field(default_factory=dict)
    completed: bool = False


@dataclass
class Outcome:
    kind: str  # "finished", "crashed", "stopped" (strict), "killed" or "terminated"
    detail: str = ""


@dataclass
class Chaos:
    """Runs one mode's attempts until the backfill completes; see the module docstring."""

    mode: str
    layouts: list[str]
    kills: int
    offsets: Callable[[], int]
    """The offsets to commit in all (the end offsets' sum: records and control records)."""
    run_args: list[str]
    env: dict[str, str]
    logdir: Path
    monitor: Monitor
    invariants: Invariants
    proxy: Proxy
    epoch_s: float
    rng: random.Random
    deadline: float
    say: Callable[[str], None]
    complete: Callable[[], bool]
    """True when nothing is left to read (the committed offsets are the end offsets)."""
    rate: float = 0.0
    stop_at_end: bool = True
    """False: the flow runs until the harness SIGTERMs it once everything is committed."""
    shutdown_timeout_s: float = 5.0
    forced: dict[int, str] = field(default_factory=dict)
    """kill number (1-based) -> plan"""
    strict: StrictWatch | None = None
    growth: Growth | None = None
    faults: Faults | None = None
    reset: Reset | None = None
    stats: ModeStats = field(default_factory=ModeStats)
    flow: Flow | None = None

    def __post_init__(self) -> None:
        self.max_rate = self.rate
        self.rate = self.rate or 5000.0  # records/s, refined from what attempts achieve
        self._kill_log = self.logdir / "kills.jsonl"

    # -- the loop

    def run(self) -> ModeStats:
        durable: Durable | None = None
        try:
            while True:
                self._check_time()
                layout = self.layouts[self.stats.runs % len(self.layouts)]
                if (
                    self.growth is not None
                    and self.growth.layout
                    and self.growth.due(self.stats.kills)
                ):
                    layout = self.growth.layout  # the attempt that adds the partitions
                self.stats.runs += 1
                self.stats.layouts[layout] = self.stats.layouts.get(layout, 0) + 1
                name = f"run-{self.stats.runs:03d}-{layout}"
                before = self.monitor.committed()
                flow = self.flow = Flow(
                    layout, self.run_args, self.env, self.logdir / name, self.max_rate
                )
                undisturbed = self.stats.kills >= self.kills
                if undisturbed:
                    outcome = self._attempt_to_end(flow)
                else:
                    outcome = self._attempt_with_kill(flow, before)
                if durable is not None:
                    self.invariants.on_restart(durable, flow.logs)
                finished = outcome.kind == "finished"
                done = finished and self._all_read()
                if not done:  # the next attempt's start is checked against this
                    self.monitor.settle()
                    durable = self.invariants.after_kill()
                found = self.invariants.found
                self.stats.commit_ahead = found.commit_ahead
                self.stats.resume_ahead = found.resume_ahead
                self.stats.offset_checks = found.checked
                self.say(
                    f"[{self.mode}] {name}: {outcome.kind} {outcome.detail} "
                    f"(committed {self.monitor.committed()} of {self.offsets()} offsets)"
                )
                if self.strict is not None and durable is not None and outcome.kind == "stopped":
                    self.strict.on_stop(name, flow.text(), durable, undisturbed)
                    if self.strict.done():
                        self.stats.completed = True
                        return self.stats
                elif self.strict is not None:
                    self.strict.on_interrupted()
                if finished:
                    if self.strict is not None:
                        self.strict.on_exit_zero(name)
                    if done or self.strict is not None:
                        self.stats.completed = True
                        return self.stats
                    self.stats.early_exits += 1
                    if self.stats.early_exits > MAX_EARLY_EXITS:
                        msg = f"the flow exited 0 {self.stats.early_exits} times, records left"
                        raise TooManyCrashes(msg)
                if outcome.kind == "crashed":
                    self.stats.crashes += 1
                    self.say(f"[{self.mode}] {name} exited by itself:\n{flow.tail()}")
                    if self.stats.crashes > MAX_CRASHES:
                        msg = f"the flow failed by itself {self.stats.crashes} times"
                        raise TooManyCrashes(msg)
        finally:
            self.proxy.restore()
            if self.flow is not None and not self.flow.exited():
                self.flow.kill_all()

    def _all_read(self) -> bool:
        return self.complete() and (self.growth is None or self.growth.done)

    def _check_time(self) -> None:
        if time.monotonic() > self.deadline:
            msg = "total time budget exhausted (--timeout)"
            raise HarnessTimeout(msg)

    def _attempt_to_end(self, flow: Flow) -> Outcome:
        if self.reset is not None and self.reset.left_paused:
            self.reset.resume_left(flow, self._check_time)
        if self.growth is not None and not self.growth.done:
            self._grow(flow)
        elif self.reset is not None and not self.reset.done:
            self._reset(flow)
        elif not self.stop_at_end:
            # A kill that came after the last commit leaves all read at this start: a
            # SIGTERM before the flow's handler is in place would end it with -15, a
            # "crash" with an empty log, run after run. Wait until it reads (a process
            # given no partition never logs that: at most HANDLER_WAIT_S).
            self._wait_active(flow, HANDLER_WAIT_S)
        while not flow.any_exited():
            self._check_time()
            if not self.stop_at_end and self._all_read():
                # A flow without KAFKA_STOP_AT_END runs on: stop it once all is committed.
                flow.terminate()
                break
            time.sleep(0.25)
        if not flow.wait(self.shutdown_timeout_s + OUTAGE_SLACK_S + SURVIVOR_WAIT_S):
            flow.kill_all()
        return self._exit_outcome(flow)

    def _exit_outcome(self, flow: Flow) -> Outcome:
        codes = flow.codes()
        if all(c == 0 for c in codes):
            return Outcome("finished", f"exit codes {codes}")
        if self.strict is not None:
            named = named_record(flow.text(), self.invariants.truth.topic)
            if named is not None:
                return Outcome("stopped", f"on {named[0]}@{named[1]}, exit codes {codes}")
        return Outcome("crashed", f"exit codes {codes}")

    # -- choosing the moment

    def _window(self) -> float:
        """Mean seconds from 'reading' to the kill, spreading the kills over the backfill."""
        done = max(self.monitor.committed(), 0)
        remaining = max(self.offsets() - done, 0)
        left = max(self.kills - self.stats.kills, 0)
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

    def _grow(self, flow: Flow) -> bool:
        """Add partitions while `flow` reads, then see whether it picks them up."""
        assert self.growth is not None
        ok = self._wait_active(flow) and self._sleep_until(
            flow, time.monotonic() + self.rng.uniform(0.5, 2.0)
        )
        if not ok:
            return False
        self.growth.grow(self.say)
        self.monitor.refresh()
        self.growth.watch(flow, self.monitor, self._check_time)
        self.say(f"[{self.mode}] {self.growth.describe()}")
        return not flow.any_exited()

    def _reset(self, flow: Flow) -> bool:
        """Delete a paused partition's unread records while `flow` reads (`tools.chaos.reset`)."""
        assert self.reset is not None
        ok = self._wait_active(flow) and self._sleep_until(
            flow, time.monotonic() + self.rng.uniform(0.5, 2.0)
        )
        if not ok or not self.reset.run(flow, self.monitor, self._check_time):
            return False
        self.say(f"[{self.mode}] {self.reset.describe()}")
        return True

    def _plan(self) -> str:
        forced = self.forced.get(self.stats.kills + 1)
        if forced is not None:
            return forced
        if self.strict is not None and (
            self.strict.first_stop_seen or self.stats.kills >= self.kills // 2
        ):
            # ERRORS_TOLERANCE=none: the second half of the kills comes just after the flow
            # meets its bad record; the first such moments (before a clean stop stored the
            # record's offset) are where a snapshot could pass a record not yet examined.
            return self.rng.choices(("startup", "after-bad"), (1, 6))[0]
        # Late until one kill landed while a bulk was held: with two forced outages among
        # four kills, a coin per kill skipped the road one run in four.
        late = self.faults is not None and self.faults.late
        if late and (self.stats.late_held == 0 or self.rng.random() < 0.5):
            return "late"
        return self.rng.choices(RANDOM_PLANS, PLAN_WEIGHTS)[0]

    def _attempt_with_kill(self, flow: Flow, committed_before: int) -> Outcome:
        rng = self.rng
        if self.reset is not None and self.reset.left_paused:
            self.reset.resume_left(flow, self._check_time)
        if self.growth is not None and self.growth.due(self.stats.kills) and not self._grow(flow):
            return self._gone(flow)
        if self.reset is not None and self.reset.due(self.stats.kills) and not self._reset(flow):
            return self._gone(flow)
        plan = self._plan()
        window = self._window()
        variant = ""
        active_at, ops_at = time.monotonic(), -1
        if plan == "startup":
            ok = self._sleep_until(flow, flow.started + rng.uniform(0.2, 3.0))
        elif plan == "after-bad":
            ok, variant = self._wait_hold(flow)
        else:
            ok = self._wait_active(flow)
            active_at = time.monotonic()
            ops_at = self.monitor.index_ops()
            ok = ok and self._sleep_until(flow, active_at + rng.uniform(0.1, 1.5) * window)
            if ok and plan in ("outage", "outage2"):
                return self._outage(flow, plan)
            if ok and plan == "bulk":
                variant = "miss"
                give_up = time.monotonic() + 20
                while ok and time.monotonic() < give_up:
                    if self.monitor.bulk_in_flight():
                        variant = "hit"
                        break
                    ok = self._sleep_until(flow, time.monotonic() + 0.01)
            elif ok and plan == "epoch":
                ok, variant = self._wait_epoch(flow)
            elif ok and plan == "late":
                ok, variant = self._wait_late(flow)
        if not ok:
            return self._gone(flow)
        return self._kill(flow, plan, variant, committed_before, active_at, ops_at)

    def _gone(self, flow: Flow) -> Outcome:
        """A process exited before the kill: the backfill finished, or the flow stopped."""
        if not flow.wait(SURVIVOR_WAIT_S):
            flow.kill_all()
        return self._exit_outcome(flow)

    def _wait_epoch(self, flow: Flow, after_s: float = 0.1) -> tuple[bool, str]:
        ok, base = True, self.monitor.committed()
        give_up = time.monotonic() + 20
        while ok and time.monotonic() < give_up:
            if self.monitor.committed() != base:
                boundary = time.monotonic()
                if self.rng.random() < 0.5 or after_s > 0.1:
                    when = boundary + self.rng.uniform(0, after_s)
                    return self._sleep_until(flow, when), "after-commit"
                when = boundary + max(self.epoch_s - self.rng.uniform(0, 0.3), 0)
                return self._sleep_until(flow, when), "before-boundary"
            ok = self._sleep_until(flow, time.monotonic() + 0.025)
        return ok, "no-commit-seen"

    def _wait_late(self, flow: Flow) -> tuple[bool, str]:
        """Until a bulk is held (`tools.chaos.faults`), then 0-1 s more."""
        assert self.faults is not None
        self.faults.arm()
        give_up = time.monotonic() + 20
        while time.monotonic() < give_up:
            if self.faults.holding():
                return self._sleep_until(flow, time.monotonic() + self.rng.uniform(0, 1)), "held"
            if not self._sleep_until(flow, time.monotonic() + 0.02):
                return False, ""
        return True, "none-held"

    def _wait_hold(self, flow: Flow) -> tuple[bool, str]:
        """Until the flow logs a failed record: held by the processor (raised an epoch
        later), or refused by Elasticsearch (raised at once, so the kill may come late)."""
        give_up = time.monotonic() + 180
        while time.monotonic() < give_up:
            text = flow.text()
            if named_record(text, self.invariants.truth.topic) is not None:
                if held_logged(text) and self.rng.random() < 0.6:
                    # Into the next epoch: its start commits the held record's epoch, whose
                    # snapshot Bytewax may have taken before the processor saw the batch.
                    ok, variant = self._wait_epoch(flow, 0.3)
                    return ok, f"held-{variant}"
                when = time.monotonic() + self.rng.uniform(0, 1.5) * self.epoch_s
                variant = "held" if held_logged(text) else "refused"
                return self._sleep_until(flow, when), variant
            if not self._sleep_until(flow, time.monotonic() + 0.02):
                return False, ""
        return True, "none-logged"

    # -- interrupting

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
        n = len(flow.procs)
        how = "process"
        if n > 1:
            roll = rng.random()
            if roll < 0.5:
                victim = rng.randrange(n)
                how = f"process {victim} of {n}"
                flow.kill([victim])
            elif roll < 0.8:
                how = f"all {n} processes"
                flow.kill(list(range(n)))
            else:
                delay = rng.uniform(0.05, 1.0)
                first = rng.randrange(n)
                how = f"process {first}, then the others {delay:.2f}s later"
                flow.kill([first])
                time.sleep(delay)
                flow.kill(list(range(n)))
        else:
            flow.kill([0])
        in_bulk = variant == "hit" or self.monitor.bulk_in_flight()
        if not flow.wait(SURVIVOR_WAIT_S):
            self.stats.survivors_hung += 1
            how += " (a survivor hung; SIGKILLed)"
            flow.kill_all()
        self.stats.kills_in_bulk += in_bulk
        self.stats.late_held += plan == "late" and variant == "held"
        ops = self.monitor.index_ops()
        if ops_at >= 0 and ops > ops_at and at - active_at > 0.5:
            rate = (ops - ops_at) / (at - active_at)
            self.rate = 0.5 * self.rate + 0.5 * max(rate, 50.0)
        label = f"{plan}/{variant}" if variant else plan
        detail = f"{label} {how} at {at - flow.started:.2f}s{' during a bulk' if in_bulk else ''}"
        return self._interrupted(flow, plan, "killed", detail, committed_before)

    def _outage(self, flow: Flow, plan: str) -> Outcome:
        before = self.monitor.committed()
        detail = sigterm_during_outage(
            flow, self.proxy, self.rng, twice=plan == "outage2",
            shutdown_timeout_s=self.shutdown_timeout_s, stats=self.stats.outage,
            idle=self._all_read,
        )  # fmt: skip
        return self._interrupted(flow, plan, "terminated", f"{plan}/{detail}", before)

    def _interrupted(
        self, flow: Flow, plan: str, kind: str, detail: str, committed_before: int
    ) -> Outcome:
        self.stats.kills += 1
        self.stats.plans[plan] += 1
        entry = {
            "mode": self.mode,
            "layout": flow.layout,
            "plan": plan,
            "detail": detail,
            "exit_codes": flow.codes(),
            "committed": self.monitor.committed(),
            "committed_before": committed_before,
            "rate": round(self.rate),
        }
        with open(self._kill_log, "a") as f:
            f.write(json.dumps(entry) + "\n")
        return Outcome(kind, f"#{self.stats.kills} {detail}")
