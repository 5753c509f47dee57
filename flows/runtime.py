"""What `python -m bytewax.run` was asked to do: workers, processes, recovery.

Bytewax parses its command line before it imports the flow module and keeps the result in
the `kwargs` global of its `__main__`; the environment variables are the fallback (and
what other launchers set). This is the one place that reads them.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class RunArgs:
    """The run's layout, as far as it can be known from inside the flow."""

    workers_per_process: int
    processes: int
    recovery: bool


def run_args() -> RunArgs:
    """The current run's layout (1 worker, 1 process, no recovery when unknown)."""
    parsed = getattr(sys.modules.get("__main__"), "kwargs", None)
    if isinstance(parsed, dict) and "workers_per_process" in parsed:
        return RunArgs(
            workers_per_process=parsed.get("workers_per_process") or 1,
            processes=len(parsed.get("addresses") or [None]),
            recovery=parsed.get("recovery_config") is not None,
        )
    env = os.environ
    return RunArgs(
        workers_per_process=int(env.get("BYTEWAX_WORKERS_PER_PROCESS") or 1),
        processes=len((env.get("BYTEWAX_ADDRESSES") or "x").split(";")),
        recovery=bool(env.get("BYTEWAX_RECOVERY_DIRECTORY")),
    )
