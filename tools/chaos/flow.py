"""The flow under test: `python -m bytewax.run flows.es_sink` processes in one layout.

A layout is `<N>w` (one process, `-w N`) or `<N>p` (N processes of one worker each, `-i
<i> -a "127.0.0.1:p1;..."` on fresh ports). Each process runs in its own session, so a kill
takes the whole process (`killpg`); signals for a graceful stop go to the process itself,
as Kubernetes sends them to PID 1.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STARTED_MARK = b"starts at offset"
RATE_ENV = "CHAOS_RATE_PER_PROCESS"
LAYOUT = re.compile(r"^([1-9])([wp])$")

# Host settings that would change the flow under test; the harness sets its own.
_DROP_PREFIXES = (
    "KAFKA_", "ES_", "DLQ_", "BULK_", "BYTEWAX_", "SCHEMA_REGISTRY_", "VALUE_", "KEY_",
    "ON_NULL_", "SHUTDOWN_",
)  # fmt: skip
_DROP_NAMES = {"TRANSFORMS", "ERRORS_TOLERANCE", "WRITE_METHOD", "DOC_ID", "VERSION"}


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


def consecutive_ports(n: int) -> int:
    """The first of `n` consecutive ports free right now, below the ephemeral range (so an
    outgoing connection does not take one before the flow binds it): API_PORT, which
    process `i` of a cluster serves on as API_PORT + i."""
    rand = random.Random()
    for _ in range(200):
        base = rand.randrange(20000, 32000 - n)
        socks = []
        try:
            for port in range(base, base + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    msg = f"no {n} consecutive free ports between 20000 and 32000"
    raise RuntimeError(msg)


def layout_commands(layout: str, base: list[str]) -> list[list[str]]:
    """One command line per process of `layout`."""
    m = LAYOUT.match(layout)
    if m is None:
        msg = f"unknown layout {layout!r}: expected <N>w or <N>p with N in 1..9"
        raise ValueError(msg)
    n = int(m.group(1))
    if m.group(2) == "w" or n == 1:
        return [[*base, "-w", str(n)]]
    addresses = ";".join(f"127.0.0.1:{p}" for p in free_ports(n))
    return [[*base, "-i", str(i), "-a", addresses] for i in range(n)]


class Flow:
    """One attempt: the flow's processes in one layout."""

    def __init__(
        self, layout: str, run_args: list[str], env: dict[str, str], logs: Path, rate: float
    ) -> None:
        self.layout = layout
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []
        self._active = False
        self.killed: set[int] = set()
        base = [sys.executable, "-m", "bytewax.run", "flows.es_sink", *run_args]
        cmds = layout_commands(layout, base)
        if rate > 0:  # the throttle in tools.chaos.transforms is per process
            env = {**env, RATE_ENV: f"{rate / len(cmds):.3f}"}
        self.started = time.monotonic()
        for i, cmd in enumerate(cmds):
            log = logs.with_name(f"{logs.name}-p{i}.log")
            self.procs.append(spawn(cmd, env, log))
            self.logs.append(log)

    def codes(self) -> list[int | None]:
        return [p.poll() for p in self.procs]

    def exited(self) -> bool:
        return all(c is not None for c in self.codes())

    def any_exited(self) -> bool:
        return any(c is not None for c in self.codes())

    def text(self) -> bytes:
        """Everything the processes logged so far."""
        out = []
        for log in self.logs:
            with contextlib.suppress(OSError):
                out.append(log.read_bytes())
        return b"\n".join(out)

    def active(self) -> bool:
        """True once every process logged a source partition start (reading has begun)."""
        if not self._active:
            seen = 0
            for log in self.logs:
                with contextlib.suppress(OSError):
                    seen += STARTED_MARK in log.read_bytes()
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

    def terminate(self) -> None:
        """SIGTERM every live process (a graceful stop request)."""
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)

    def wait(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.exited():
                return True
            time.sleep(0.02)
        return self.exited()

    def tail(self, lines: int = 15) -> str:
        out = []
        for log in self.logs:
            text = log.read_text(errors="replace").splitlines()
            out.append(f"--- {log}\n" + "\n".join(text[-lines:]))
        return "\n".join(out)


def spawn(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """Start `cmd` from the repository in a session of its own (a kill takes it whole), its
    command line then its output appended to `log`."""
    with open(log, "ab") as out:
        out.write(f"$ {' '.join(cmd)}\n".encode())
        out.flush()
        return subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
