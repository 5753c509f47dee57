"""A stalled cluster ends instead of hanging: with two or more processes, a peer that stops
answering (its host's link cut, the process frozen) stalls every epoch of the cluster, and
Bytewax neither notices nor exits (issue 15: three processes sat for minutes, silent). A
supervisor can only restart what stops.

Every few seconds this thread looks at the time since this process's last snapshot. When
no epoch closed for CLUSTER_STALL_S, it does not yet blame anyone: an Elasticsearch outage
stalls epochs too, and then a sink somewhere retries. It exits (status 1, one line) only
when nothing in this process retries and a peer's status API does not answer either; a
peer that answers is alive (it may be the one retrying). Without API_PORT it cannot ask, so
it only logs the stall. Nothing was committed past what is durable, so the restart is safe.
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.error
import urllib.request

from flows import shutdown
from flows.api import api_port
from flows.config import Settings
from flows.runtime import RunArgs
from sinks import progress
from sinks.backoff import under_way

logger = logging.getLogger(__name__)

CHECK_EVERY_S = 5.0
ASK_TIMEOUT_S = 3.0
EXIT_STATUS = 1


def watch(settings: Settings, run: RunArgs) -> None:
    """Start the watchdog thread of a cluster process (nothing for a single process)."""
    if run.processes < 2 or settings.cluster_stall_s <= 0:
        return
    threading.Thread(
        target=_loop, args=(settings, run), name="es-sink-watchdog", daemon=True
    ).start()


def peers(settings: Settings, run: RunArgs) -> list[tuple[int, str]]:
    """(process id, status API URL) of every other process, when API_PORT is set."""
    if settings.api_port is None:
        return []
    out = []
    for i, address in enumerate(run.addresses):
        if i != run.process_id:
            host = address.rsplit(":", 1)[0]
            out.append((i, f"http://{host}:{api_port(settings.api_port, run.addresses, i)}"))
    return out


def answers(url: str) -> bool:
    """The peer's API answers at all (any HTTP status: a wedged peer still says 503)."""
    try:
        with urllib.request.urlopen(f"{url}/health/live", timeout=ASK_TIMEOUT_S):  # noqa: S310
            return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


def verdict(settings: Settings, run: RunArgs) -> str | None:
    """Why the process should exit now, or None."""
    stalled = progress.since_epoch_s()
    limit = settings.cluster_stall_s
    if stalled is None or stalled < limit or shutdown.requested():
        return None
    if under_way():
        return None  # this process retries: an outage, not a wedge
    silent = [(i, url) for i, url in peers(settings, run) if not answers(url)]
    if not silent:
        return None
    who = ", ".join(f"process {i} ({url})" for i, url in silent)
    return (
        f"cluster stalled: no epoch closed for {stalled:.0f}s (CLUSTER_STALL_S={limit:g}), "
        f"nothing here retries, and {who} does not answer; exiting so that the supervisor "
        "restarts the cluster (nothing uncommitted is lost)"
    )


def _loop(settings: Settings, run: RunArgs) -> None:
    warned_at = 0.0
    while True:
        time.sleep(CHECK_EVERY_S)
        why = verdict(settings, run)
        if why is not None:
            logger.error("%s", why)
            shutdown.exit_now(EXIT_STATUS)
            return
        stalled = progress.since_epoch_s()
        limit = settings.cluster_stall_s
        if stalled is not None and stalled >= limit and time.monotonic() - warned_at >= limit:
            warned_at = time.monotonic()
            logger.warning(
                    "no epoch closed for %.0fs (CLUSTER_STALL_S=%g); %s",
                stalled, limit,
                "a retry is under way" if under_way()
                else "every peer answers" if settings.api_port is not None
                else "set API_PORT so that the processes can tell a dead peer from a slow one",
            )  # fmt: skip
