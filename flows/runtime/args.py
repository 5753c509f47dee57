"""What `python -m bytewax.run` was asked to do: workers, processes, recovery.

Bytewax parses its command line before it imports the flow module and keeps the result in
the `kwargs` global of its `__main__`; the environment variables are the fallback (and
what other launchers set). This is the one place that reads them.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class RunArgs:
    """The run's layout, as far as it can be known from inside the flow."""

    workers_per_process: int
    processes: int
    recovery: bool
    recovery_dir: Path | None = None
    """The recovery directory (`-r`), whose partitions Bytewax resumes from."""
    epoch_s: float = 10.0
    """The epoch length (`-s`; Bytewax's default 10 s)."""
    process_id: int = 0
    """This process's index in the cluster (`-i`; 0 for a single process)."""
    addresses: tuple[str, ...] = ()
    """The cluster's `host:port` addresses (`-a`), one per process; () for one process."""


def run_args() -> RunArgs:
    """The current run's layout (1 worker, 1 process, no recovery when unknown)."""
    parsed = _bytewax_run_kwargs()
    if parsed is not None:
        recovery = parsed.get("recovery_config")
        db_dir = getattr(recovery, "db_dir", None) if recovery is not None else None
        return RunArgs(
            workers_per_process=parsed.get("workers_per_process") or 1,
            processes=len(parsed.get("addresses") or [None]),
            recovery=recovery is not None,
            recovery_dir=Path(db_dir) if db_dir is not None else None,
            epoch_s=_seconds(parsed.get("epoch_interval"), 10.0),
            process_id=parsed.get("process_id") or 0,
            addresses=tuple(parsed.get("addresses") or ()),
        )
    env = os.environ
    directory = env.get("BYTEWAX_RECOVERY_DIRECTORY")
    return RunArgs(
        workers_per_process=int(env.get("BYTEWAX_WORKERS_PER_PROCESS") or 1),
        processes=len((env.get("BYTEWAX_ADDRESSES") or "x").split(";")),
        recovery=bool(directory),
        recovery_dir=Path(directory) if directory else None,
        epoch_s=float(env.get("BYTEWAX_SNAPSHOT_INTERVAL") or 10),
        process_id=int(env.get("BYTEWAX_PROCESS_ID") or 0),
        addresses=tuple(a for a in (env.get("BYTEWAX_ADDRESSES") or "").split(";") if a),
    )


def restart_argv() -> list[str] | None:
    """The command line that started this process, when it is `python -m bytewax.run ...`
    (so executing it again runs the same flow the same way); None when embedded."""
    if _bytewax_run_kwargs() is None or not getattr(sys, "orig_argv", None):
        return None
    return list(sys.orig_argv)


def _seconds(interval: Any, default: float) -> float:
    total = getattr(interval, "total_seconds", None)
    return float(total()) if callable(total) else default


def _bytewax_run_kwargs() -> dict[str, Any] | None:
    parsed = getattr(sys.modules.get("__main__"), "kwargs", None)
    if isinstance(parsed, dict) and "workers_per_process" in parsed:
        return parsed
    return None
