"""The flow as a cluster of one process per host (network namespace), for `scripts/hosts`.

Process `i` runs on host `i` with `ip netns exec esk-<h> .venv/bin/python -m bytewax.run
flows.es_sink -i i -a "10.77.0.11:2101;10.77.0.12:2101;10.77.0.13:2101" -r <its recovery
directory>`: `ip netns exec` execs the flow, so the pid the harness holds is the flow's and
a signal reaches it as a supervisor's would. Each host keeps its own recovery directory
holding a disjoint subset of the partitions (docs/deploy.md, "Several hosts").
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tools.chaos.flow import ROOT, STARTED_MARK
from tools.chaos.hosts_net import Host

CLUSTER_PORT = 2101
API_PORT = 8080
EPOCH_S = 2

# The line a process ends with, best first: what an operator should see.
_WHY = (
    re.compile(r"cluster stalled:.*"),
    re.compile(r"fenced:.*"),
    re.compile(r"PanicException: .*"),
    re.compile(r"shutdown:.*|.*SHUTDOWN_TIMEOUT_S.*"),
    re.compile(r".*(ERROR|CRITICAL).*"),
)


def make_recovery(base: Path, hosts: list[Host], parts: int) -> dict[str, Path]:
    """`python -m bytewax.recovery` once, then partition `i` moved to host `i % len`'s
    directory: each host holds a disjoint subset, together all of them."""
    tmp = base / "all"
    tmp.mkdir(parents=True)
    subprocess.run(
        [sys.executable, "-m", "bytewax.recovery", str(tmp), str(parts)], check=True, cwd=ROOT
    )
    dirs = {h.name: base / f"host-{h.name}" for h in hosts}
    for d in dirs.values():
        d.mkdir()
    for i in range(parts):
        for f in tmp.glob(f"part-{i}.sqlite3*"):
            shutil.move(str(f), dirs[hosts[i % len(hosts)].name] / f.name)
    tmp.rmdir()
    return dirs


def move_partitions(src: Path, dst: Path) -> list[str]:
    """A departing host's partitions to a survivor (every `part-<i>.sqlite3*` together)."""
    moved = []
    for f in sorted(src.glob("part-*.sqlite3*")):
        shutil.move(str(f), dst / f.name)
        moved.append(f.name)
    return moved


def why(log: Path) -> str:
    """The line that says why a process ended (the first rule that matches, last match)."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    for rule in _WHY:
        for line in reversed(lines):
            m = rule.search(line)
            if m:
                return m.group(0).strip()[:300]
    return lines[-1][:300] if lines else ""


@dataclass
class Proc:
    index: int
    host: Host
    popen: subprocess.Popen[bytes]
    log: Path
    exited_at: float | None = None
    code: int | None = None


@dataclass
class Cluster:
    """One start of the cluster: a process per host, all with the same `-a`."""

    hosts: list[Host]
    recovery: dict[str, Path]
    env: dict[str, str]
    logdir: Path
    name: str
    procs: list[Proc] = field(default_factory=list)
    started: float = 0.0

    def start(self) -> None:
        addresses = ";".join(f"{h.address}:{CLUSTER_PORT}" for h in self.hosts)
        self.started = time.monotonic()
        for i, h in enumerate(self.hosts):
            cmd = [
                *h.exec_prefix(), sys.executable, "-m", "bytewax.run", "flows.es_sink",
                "-i", str(i), "-a", addresses, "-r", str(self.recovery[h.name]),
                "-s", str(EPOCH_S), "-b", "0",
            ]  # fmt: skip
            env = {**self.env, "API_HOST": h.address}
            log = self.logdir / f"{self.name}-{h.name}.log"
            with open(log, "ab") as out:
                out.write(f"$ {' '.join(cmd)}\n".encode())
                out.flush()
                popen = subprocess.Popen(
                    cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, start_new_session=True,
                )  # fmt: skip
            self.procs.append(Proc(i, h, popen, log))

    def poll(self) -> None:
        now = time.monotonic()
        for p in self.procs:
            if p.code is None:
                code = p.popen.poll()
                if code is not None:
                    p.code, p.exited_at = code, now

    def all_exited(self) -> bool:
        self.poll()
        return all(p.code is not None for p in self.procs)

    def any_exited(self) -> bool:
        self.poll()
        return any(p.code is not None for p in self.procs)

    def reading(self) -> bool:
        """Every process logged a source partition start."""
        for p in self.procs:
            with contextlib.suppress(OSError):
                if STARTED_MARK not in p.log.read_bytes():
                    return False
        return True

    def signal(self, index: int, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.procs[index].popen.pid, signum)

    def wait_all(self, timeout_s: float, tick: float = 0.05) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.all_exited():
                return True
            time.sleep(tick)
        return self.all_exited()

    def kill_all(self) -> list[int]:
        """SIGKILL whatever still runs (a supervisor giving up); returns their indices."""
        self.poll()
        left = [p.index for p in self.procs if p.code is None]
        for i in left:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.procs[i].popen.pid, signal.SIGKILL)
        for i in left:
            self.procs[i].popen.wait()
        self.poll()
        return left

    def exits(self, since: float) -> list[str]:
        """Per process: host, exit status, seconds after `since`, and its last word."""
        out = []
        for p in self.procs:
            when = f"{p.exited_at - since:.1f}s" if p.exited_at is not None else "running"
            last = why(p.log)
            if p.code is not None and p.code < 0:
                last = f"killed by {signal.Signals(-p.code).name}"
            out.append(f"{p.host.name}(p{p.index}) rc={p.code} at {when}: {last}")
        return out
