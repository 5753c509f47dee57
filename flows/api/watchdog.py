"""A stalled cluster ends instead of hanging: with two or more processes, a peer that stops
answering (its host's link cut, the process frozen) stalls every epoch of the cluster, and
Bytewax neither notices nor exits: the processes sit silent for as long as the peer is
away. A supervisor can only restart what stops.

Every few seconds this thread looks at the time since this process's last snapshot. When
no epoch closed for CLUSTER_STALL_S, it does not yet blame anyone: an Elasticsearch outage
stalls epochs too, and then a sink somewhere retries. It exits (status 1, one line) only
when a peer's status API that answered before misses three checks in a row, and either
nothing in this process retries or no peer on another host answers (this host is the one
cut off: its own retries would hold it up as long as the link is down). A peer that
answers is alive (it may be the one retrying). Without API_PORT it cannot ask, so it only
logs the stall; a peer it never reached (a network policy, API_HOST on loopback
across hosts) is not held against the cluster. Nothing was committed past what is durable,
so the restart is safe.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
import urllib.error
import urllib.request

from flows.api import api_urls
from flows.config import Settings
from flows.config.api import is_loopback
from flows.runtime import shutdown
from flows.runtime.args import RunArgs
from sinks import progress
from sinks.backoff import UnderWay, under_way

logger = logging.getLogger(__name__)

CHECK_EVERY_S = 5.0
ASK_TIMEOUT_S = 3.0
EXIT_STATUS = 1
SILENT_ROUNDS = 3
"""Checks in a row a peer that answered before must miss before it counts as gone."""


def watch(settings: Settings, run: RunArgs) -> None:
    """Start the watchdog thread of a cluster process (nothing for a single process)."""
    if run.processes < 2 or settings.cluster_stall_s <= 0:
        return
    w = Watch(settings, run)
    hosts = len(set(w.hosts))
    if settings.api_port is not None and hosts > 1 and is_loopback(settings.api_host):
        logger.warning(
            "CLUSTER_STALL_S: the processes run on %d hosts but API_HOST=%s is loopback: "
            "they cannot ask each other, so a stall is only logged",
            hosts, settings.api_host,
        )  # fmt: skip
    threading.Thread(target=_loop, args=(w,), name="es-sink-watchdog", daemon=True).start()


def host_key(host: str) -> str:
    """One spelling per machine for the `-a` host names: `loopback` for `localhost`,
    127.x and ::1, else the addresses the name resolves to (the name, lowercased, when it
    does not resolve; Bytewax reports a bad one), so that `localhost` and `127.0.0.1` are
    one host, not two."""
    name = host.strip().strip("[]").lower()
    if is_loopback(name):
        return "loopback"
    try:
        found = {info[4][0] for info in socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)}
    except (OSError, UnicodeError):  # unknown, or not a host name at all (`a..b`)
        return name
    if all(is_loopback(str(a).split("%")[0]) for a in found):
        return "loopback"
    return ",".join(sorted(str(a) for a in found))


def peers(settings: Settings, run: RunArgs) -> list[tuple[int, str]]:
    """(process id, status API URL) of every other process, when API_PORT is set."""
    return [(i, url) for i, url in enumerate(api_urls(settings, run)) if i != run.process_id]


def answers(url: str) -> bool:
    """The peer's API answers at all (any HTTP status: a wedged peer still says 503)."""
    try:
        with urllib.request.urlopen(f"{url}/health/live", timeout=ASK_TIMEOUT_S):  # noqa: S310
            return True
    except urllib.error.HTTPError:
        return True
    except Exception:  # refused, timed out, not HTTP: no answer
        return False


class Watch:
    """The watchdog's memory: since when epochs stall, and which peers ever answered (a
    peer this process never reached, e.g. behind a network policy, proves nothing)."""

    def __init__(self, settings: Settings, run: RunArgs) -> None:
        self.settings = settings
        self.run = run
        self.peers = peers(settings, run)
        self.reached: set[int] = set()
        self.started = time.monotonic()
        # Epochs are -s long: a stall shorter than three of them is no stall.
        self.limit = max(settings.cluster_stall_s, 3 * run.epoch_s)
        self.hosts = [host_key(a.rsplit(":", 1)[0]) for a in run.addresses]
        self.silent_rounds: dict[int, int] = {}
        """Consecutive checks in which a peer that answered before did not answer, since
        the last epoch closed (a closed epoch proves every peer took part)."""
        self.checked: float | None = None
        """time.monotonic() of the previous check."""
        self.warned: str | None = None
        """The reason last logged for not exiting during this stall."""

    def reached_all(self) -> bool:
        return len(self.reached) == len(self.peers)

    def stalled_s(self) -> float:
        """Since the last epoch this process saw close, or since the watch began."""
        since = progress.since_epoch_s()
        return since if since is not None else time.monotonic() - self.started

    def verdict(self) -> str | None:
        """Why the process should exit now, or None; asks the peers every call."""
        now, since = time.monotonic(), progress.since_epoch_s()
        if self.checked is not None and since is not None and since < now - self.checked:
            self.silent_rounds.clear()  # an epoch closed since the last check
        self.checked = now
        silent, answering, unknown = [], [], []
        for i, url in self.peers:
            if answers(url):
                self.reached.add(i)
                answering.append(i)
                self.silent_rounds.pop(i, None)
            elif i in self.reached:
                self.silent_rounds[i] = self.silent_rounds.get(i, 0) + 1
                silent.append((i, url))
            else:
                unknown.append((i, url))
        stalled = self.stalled_s()
        if stalled < self.limit or shutdown.requested():
            self.warned = None
            return None
        retrying = under_way()
        # One slow answer proves nothing: a peer is gone once silent round after round. A
        # retry here explains the stall while a peer on another host answers (an
        # Elasticsearch outage); with all of those silent, this host is the one cut off.
        gone = [(i, url) for i, url in silent if self.silent_rounds[i] >= SILENT_ROUNDS]
        elsewhere = any(self.hosts[i] != self.hosts[self.run.process_id] for i in answering)
        if not gone or (retrying and elsewhere):
            self._warn(stalled, retrying, unknown)
            return None
        who = ", ".join(f"process {i} ({url})" for i, url in gone)
        verb = "does" if len(gone) == 1 else "do"
        here = (
            f"this process retries ({retrying[0].where}: {retrying[0].reason}) but no peer "
            "on another host answers (this host is cut off, or the others are gone)"
            if retrying
            else "nothing here retries"
        )
        return (
            f"cluster stalled: no epoch closed for {stalled:.0f}s (CLUSTER_STALL_S="
            f"{self.settings.cluster_stall_s:g}), {here}, and {who} {verb} not answer; "
            "exiting so that the supervisor restarts the cluster (nothing uncommitted is lost)"
        )

    def _warn(
        self, stalled: float, retrying: list[UnderWay], unknown: list[tuple[int, str]]
    ) -> None:
        """One line per stall and reason for waiting (a process with no partitions sees no
        epochs at all): a stall that outlives its first reason says why it still waits."""
        if retrying:
            why = f"a retry is under way ({retrying[0].where}: {retrying[0].reason})"
        elif unknown:
            who = ", ".join(f"process {i} ({url})" for i, url in unknown)
            why = f"{who} never answered, so its silence is not held against the cluster"
        elif self.peers:
            why = "every peer answers"
        else:
            why = "set API_PORT so that the processes can tell a dead peer from a slow one"
        if why == self.warned:
            return
        self.warned = why
        logger.warning(
            "no epoch closed for %.0fs (CLUSTER_STALL_S=%g); %s",
            stalled, self.settings.cluster_stall_s, why,
        )  # fmt: skip


def _loop(watch: Watch) -> None:
    while True:
        # Every second until each peer answered once (they start at about the same time),
        # so that a peer lost early is known to have been there.
        time.sleep(CHECK_EVERY_S if watch.reached_all() else 1.0)
        try:
            why = watch.verdict()
        except Exception:  # the watchdog must outlive its own bugs
            logger.exception("cluster watchdog: a check failed")
            continue
        if why is not None:
            logger.error("%s", why)
            shutdown.exit_now(EXIT_STATUS)
            return
