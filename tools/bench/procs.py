"""Child processes whose CPU time and peak RSS come from the kernel when they end.

Each system under test runs as its own process (or two, for flow-2p). The harness reaps it
with `os.wait4`, whose rusage holds the child's user+sys CPU seconds and its peak resident
set size (`ru_maxrss`, the kernel's high-water mark, not a sample) over its whole life,
including any descendants it waited for. Kafka and Elasticsearch are separate process
trees and never counted in it; `ServerCpu` reads their CPU time separately (psutil), at the
moments a system's processes are spawned and reaped.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

__all__ = ["PeakThreads", "Proc", "ServerCpu", "cpu_now", "find_listener", "kill_all"]

_LIVE: dict[int, Proc] = {}


class Proc:
    """One started child; `wait()` reaps it and records its rusage."""

    def __init__(
        self,
        name: str,
        cmd: list[str],
        env: dict[str, str],
        cwd: Path,
        log: Path,
        stdout_pipe: bool = False,
    ) -> None:
        self.name = name
        self.log = log
        self.cmd = cmd
        with open(log, "ab") as out:
            self.started = time.monotonic()
            self.popen = subprocess.Popen(
                cmd,
                env=env,
                cwd=cwd,
                stdout=subprocess.PIPE if stdout_pipe else out,
                stderr=out,
                start_new_session=True,
            )
        self.pid = self.popen.pid
        self.returncode: int | None = None
        self.ended: float | None = None
        self.cpu_s = 0.0
        self.maxrss_mb = 0.0
        _LIVE[self.pid] = self

    @property
    def stdout(self) -> IO[bytes]:
        assert self.popen.stdout is not None
        return self.popen.stdout

    def poll(self) -> bool:
        """True once the child has ended (and was reaped)."""
        if self.returncode is not None:
            return True
        pid, status, usage = os.wait4(self.pid, os.WNOHANG)
        if pid == 0:
            return False
        self._reaped(status, usage)
        return True

    def _reaped(self, status: int, usage: Any) -> None:
        self.ended = time.monotonic()
        self.returncode = os.waitstatus_to_exitcode(status)
        self.popen.returncode = self.returncode  # Popen must not wait for it again
        self.cpu_s = usage.ru_utime + usage.ru_stime
        self.maxrss_mb = usage.ru_maxrss / 1024  # KiB on Linux
        _LIVE.pop(self.pid, None)

    def wait(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds; True if it ended."""
        deadline = time.monotonic() + timeout
        while not self.poll():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def stop(self, grace: float = 60.0) -> None:
        """SIGTERM, then SIGKILL (its own process group) after `grace` seconds."""
        if self.poll():
            return
        self.signal(signal.SIGTERM)
        if not self.wait(grace):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
            self.wait(30)

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


class PeakThreads(threading.Thread):
    """The most threads each process had, sampled (psutil) every `every` seconds until
    `stop()`; the kernel keeps no high-water mark of threads as it does of RSS."""

    def __init__(self, procs: list[Proc], every: float = 0.2) -> None:
        super().__init__(daemon=True, name="peak-threads")
        self.procs, self.every = procs, every
        self.peak: dict[str, int] = {p.name: 0 for p in procs}
        self._done = threading.Event()

    def run(self) -> None:
        import psutil

        handles = {}
        for p in self.procs:
            with contextlib.suppress(psutil.Error):
                handles[p.name] = psutil.Process(p.pid)
        while handles and not self._done.is_set():
            for name, h in list(handles.items()):
                try:
                    self.peak[name] = max(self.peak[name], h.num_threads())
                except psutil.Error:
                    del handles[name]
            self._done.wait(self.every)

    def stop(self) -> int:
        """Stop sampling; the highest count of any one process."""
        self._done.set()
        self.join(5)
        return max(self.peak.values(), default=0)


def cpu_now(procs: list[Proc]) -> float | None:
    """The processes' user+sys CPU seconds so far (psutil, every thread; the rusage of one
    already reaped); None if one ended but is not reaped yet."""
    import psutil

    try:
        return sum(
            p.cpu_s if p.returncode is not None else sum(psutil.Process(p.pid).cpu_times()[:2])
            for p in procs
        )
    except psutil.Error:
        return None


def kill_all() -> None:
    """Kill every child still running (the harness is failing or interrupted)."""
    for proc in list(_LIVE.values()):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


# ----------------------------------------------------------------- Kafka's and ES's CPU


def _host_port(address: str, default_port: int) -> tuple[str, int]:
    """Host and port of `http://host:port/...` or `host:port` (the first of a list)."""
    first = address.split(",")[0].strip()
    parts = urlsplit(first if "//" in first else f"//{first}")
    return parts.hostname or "127.0.0.1", parts.port or default_port


def _is_local(host: str) -> bool:
    """Whether `host` resolves to an address of this machine."""
    import psutil

    try:
        resolved = {ai[4][0] for ai in socket.getaddrinfo(host, None)}
    except OSError:
        return False
    local = {a.address.split("%")[0] for addrs in psutil.net_if_addrs().values() for a in addrs}
    for ip in resolved:
        addr = ipaddress.ip_address(ip.split("%")[0])
        if addr.is_loopback or addr.is_unspecified or ip in local:
            return True
    return False


def find_listener(host: str, port: int) -> Any:
    """The local java process (psutil.Process) listening on TCP `port`, or None (also when
    `host` is not this machine: a remote service's CPU cannot be read)."""
    import psutil

    if not _is_local(host):
        return None
    for proc in psutil.process_iter(["name"]):
        try:
            if "java" not in (proc.info["name"] or ""):
                continue
            conns = getattr(proc, "net_connections", None) or proc.connections
            for c in conns(kind="tcp"):
                if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port:
                    return proc
        except psutil.Error:
            continue
    return None


class ServerCpu:
    """CPU seconds (user + sys of the process itself, children not included) of the
    Elasticsearch server and Kafka broker processes, found once per bench run as the java
    processes listening on the ports of `--es` and `--bootstrap`. A service that is not
    found (remote, another user's without permission, not java) or that has exited reads
    as None: its figures stay empty and the run goes on."""

    NAMES = ("es", "kafka")

    def __init__(self, es_url: str, bootstrap: str) -> None:
        self.where = {"es": _host_port(es_url, 9200), "kafka": _host_port(bootstrap, 9092)}
        self.procs: dict[str, Any] = {name: find_listener(*self.where[name]) for name in self.NAMES}
        self._lost: set[str] = set()

    def describe(self) -> str:
        """One line for the log: which processes were found, which not."""
        out = []
        for name in self.NAMES:
            host, port = self.where[name]
            proc = self.procs[name]
            out.append(
                f"{name} pid {proc.pid} (port {port})"
                if proc is not None
                else f"{name}: no local java process listens on {host}:{port}, its CPU "
                "is not measured"
            )
        return "; ".join(out)

    def sample(self) -> dict[str, float | None]:
        """CPU seconds so far of each server process; None if not found or gone."""
        import psutil

        out: dict[str, float | None] = {}
        for name in self.NAMES:
            proc = self.procs[name]
            out[name] = None
            if proc is None:
                continue
            try:
                t = proc.cpu_times()
                out[name] = t.user + t.system
            except psutil.Error:
                self.procs[name] = None
                self._lost.add(name)
        return out

    def lost(self) -> set[str]:
        """Names of the processes that exited since the last call (reported once)."""
        lost, self._lost = self._lost, set()
        return lost
