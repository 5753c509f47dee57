"""Child processes whose CPU time and peak RSS come from the kernel when they end.

Each system under test runs as its own process (or two, for flow-2p). The harness reaps it
with `os.wait4`, whose rusage holds the child's user+sys CPU seconds and its peak resident
set size (`ru_maxrss`, the kernel's high-water mark, not a sample) over its whole life,
including any descendants it waited for. Kafka and Elasticsearch are separate process
trees and never counted.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import IO, Any

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


def kill_all() -> None:
    """Kill every child still running (the harness is failing or interrupted)."""
    for proc in list(_LIVE.values()):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
