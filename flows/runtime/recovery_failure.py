"""A recovery store that cannot be written (a full disk) ends the flow with one clear line.

Bytewax writes its snapshots to the SQLite files of the recovery directory (`-r`) from
Rust. A write that fails (SQLITE_FULL on a full disk; a read-only file system, an I/O
error) panics the worker, and the process ends, status 1, with Rust's backtrace and
`RuntimeError: ... SqliteFailure(Error { code: DiskFull, ... }, Some("database or disk is
full"))`. Nothing is lost: the epoch whose snapshot failed never completed, so its offsets
were not committed (a source commits only behind the recovery store, `flows.kafka.source`), and
the next run resumes from the last snapshot the store holds. SQLite keeps the files
consistent (the failed transaction is rolled back). This hook adds, after the dump, the
line an operator needs: which directory, what failed, the space left, what to do.
"""

from __future__ import annotations

import logging
import re
import shutil
import sys
from types import TracebackType

from flows.runtime.args import run_args

logger = logging.getLogger(__name__)

__all__ = ["describe", "install"]

_SQLITE = re.compile(
    r'SqliteFailure\(Error \{ code: (\w+), extended_code: \d+ \}, Some\("([^"]*)"\)'
)
_MIB = 1024 * 1024


def describe(error: BaseException) -> str | None:
    """The line for a failed recovery-store write (None for any other error)."""
    found = _SQLITE.search(str(error))
    if found is None:
        return None
    code, text = found.groups()
    directory = run_args().recovery_dir
    space = ""
    if directory is not None:
        try:
            usage = shutil.disk_usage(directory)
            space = f", {usage.free / _MIB:.1f} MiB free of {usage.total / _MIB:.1f} MiB"
        except OSError:
            pass
    todo = "free space there" if code == "DiskFull" else "make it writable"
    return (
        f"recovery directory {directory or '(-r)'}: {text} (SQLite {code}{space}); the flow "
        f"stopped at the snapshot it could not write and committed nothing past the last one "
        f"the store holds: {todo} and start it again, it resumes from there"
    )


def install() -> None:
    """Say `describe()`'s line after the traceback of an error that ends the process."""
    previous = sys.excepthook

    def hook(kind: type[BaseException], error: BaseException, tb: TracebackType | None) -> None:
        previous(kind, error, tb)
        line = describe(error)
        if line is not None:
            logger.error("%s", line)
            for handler in logging.getLogger().handlers:
                handler.flush()

    sys.excepthook = hook
