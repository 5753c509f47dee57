"""A configuration error found while the flow runs ends the process with its one line.

At start, `flows.es_sink` turns a ConfigError into `es_sink: configuration error: ...`.
Some are found only once records flow: the server at ES_HOSTS detected on the first bulk
(it was unreachable at start) and not supported, an index Elasticsearch will not create, a
missing privilege. The sink raises the ConfigError in a worker; Bytewax unwinds and raises
its own error, caused by ours, from `cli_main`, and Python would print both tracebacks. This
hook prints the same one line as at start instead (the exit status stays 1); any other
error keeps its traceback.
"""

from __future__ import annotations

import sys
from types import TracebackType

from flows.errors import ConfigError

__all__ = ["cause", "install", "line"]


def line(error: ConfigError) -> str:
    """The one line a configuration error ends the process with, at start or later."""
    return f"es_sink: configuration error: {error}"


def cause(error: BaseException | None) -> ConfigError | None:
    """The ConfigError `error` is, or was caused by (None: none)."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, ConfigError):
            return error
        seen.add(id(error))
        # `raise X from None` is X's own story: only an explicit cause, or a context the
        # raiser did not suppress, leads to ours.
        error = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
    return None


def install() -> None:
    """Print a configuration error's line instead of the traceback that ends the process."""
    previous = sys.excepthook

    def hook(kind: type[BaseException], error: BaseException, tb: TracebackType | None) -> None:
        config = cause(error)
        if config is None:
            previous(kind, error, tb)
            return
        sys.stdout.flush()
        print(line(config), file=sys.stderr, flush=True)

    sys.excepthook = hook
