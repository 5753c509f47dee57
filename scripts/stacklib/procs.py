"""The servers as processes: start one in its own session, find it again by its pid file,
wait until it answers, stop it with its whole process group; free ports; helper commands."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .config import CACHE_DIR, STACK_DIR, STACK_HOST, START_TIMEOUT_S, StackError, log


def run_quiet(cmd: list[str], what: str) -> None:
    """Run a helper command; on failure, raise with the last lines of its output."""
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise StackError(f"{what} failed (exit {proc.returncode}):\n{tail}")


def pid_alive(pid_file: Path) -> int | None:
    """The pid in `pid_file` if that process is alive and still one of our servers.

    A stale pid file (after a reboot or a crash) may name a pid that now belongs to some
    other process; checking that it runs from our STACK_DIR or cache keeps us from
    signalling it.
    """
    try:
        pid = int(pid_file.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    if str(STACK_DIR).encode() not in cmdline and str(CACHE_DIR).encode() not in cmdline:
        return None
    return pid


def port_busy(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((STACK_HOST, port)) == 0


def check_ports(name: str, ports: dict[str, int]) -> None:
    """Fail before starting `name` if one of its ports (by environment name) is taken."""
    for var, port in ports.items():
        if port_busy(port):
            raise StackError(
                f"port {port} ({var}) on {STACK_HOST} is busy, so {name} cannot start: "
                f"stop what listens there or set {var} to a free port"
            )


def spawn(
    cmd: list[str], log_file: Path, pid_file: Path, env: dict[str, str], user: str | None = None
) -> subprocess.Popen[bytes]:
    """Start a server in its own session (so `stop` can signal its group), output to a log."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as out:
        kwargs: dict[str, Any] = {}
        if user:
            kwargs.update(user=user, group=user, extra_groups=[])
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
            **kwargs,
        )
    pid_file.write_text(f"{proc.pid}\n")
    return proc


def stop(name: str, pid_file: Path, timeout_s: float = 40.0) -> None:
    pid = pid_alive(pid_file)
    if pid is None:
        pid_file.unlink(missing_ok=True)
        return
    # Each server runs in its own session: signal the group so ES's server JVM goes too.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and group_alive(pid):
        time.sleep(0.2)
    if group_alive(pid):
        log(f"{name} did not stop within {timeout_s:.0f}s; killing it")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        while group_alive(pid):
            time.sleep(0.1)
    pid_file.unlink(missing_ok=True)
    log(f"{name} stopped")


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    # A zombie leader still counts until reaped; the servers are not our children here.
    return True


def tail(path: Path, n: int = 25) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(lines[-n:])


def wait_until(
    name: str,
    proc: subprocess.Popen[bytes],
    pid_file: Path,
    log_file: Path,
    ready: Callable[[], bool],
) -> None:
    """Poll `ready` until true; fail with the log's tail if the server exits or times out."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if ready():
            return
        # Our own child: poll() is exact (the pid file check is for later invocations).
        if proc.poll() is not None:
            raise StackError(
                f"{name} exited during start-up; last lines of {log_file}:\n{tail(log_file)}"
            )
        time.sleep(0.5)
    stop(name, pid_file)
    raise StackError(
        f"{name} did not become ready within {START_TIMEOUT_S:.0f}s; "
        f"last lines of {log_file}:\n{tail(log_file)}"
    )
