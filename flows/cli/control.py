"""The client side of the flow's status API (its shapes: docs/openapi.json, served by
flows/api), and `es-sink pause`, `resume`, `stop` and `restart` for every process of a
cluster at once.

Each process serves on API_HOST, port API_PORT + its process id. Given no `--api` URL, the
processes are discovered from API_PORT: process 0's `/status` says how many there are.
A few plain HTTP calls, so the standard library's urllib rather than another dependency.

`stop` and `restart` act on the whole cluster: when one process of a Bytewax cluster
exits, its peers end with an error (a graceful stop of one process cannot even finish, as
every epoch waits for all of them), so both refuse a list of processes that leaves one
out. `stop` waits until every API stops answering, then asks Kafka what the group
committed; `restart` waits until every API answers again as a new start.
"""

from __future__ import annotations

import getpass
import json
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import typer

from flows.cli import common

if TYPE_CHECKING:
    from flows.config import Settings

TIMEOUT_S = 3.0
RUNNING_STATES = ("running", "paused", "stopping")
"""States of a process that still reads (or may resume reading) and commits."""


@dataclass(frozen=True)
class Answer:
    """One process's answer, or why there is none."""

    url: str
    body: dict[str, Any] | None
    error: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {"url": self.url, "status": self.body, "error": self.error}


def call(url: str, method: str = "GET", path: str = "/status", token: str | None = None) -> Answer:
    """One request; a refused connection, a timeout or an HTTP error is the Answer's error."""
    request = urllib.request.Request(url.rstrip("/") + path, method=method)  # noqa: S310
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    if method == "PUT":
        request.data = b""
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:  # noqa: S310
            return Answer(url, json.loads(response.read() or b"{}"))
    except urllib.error.HTTPError as e:
        detail = e.read()[:200].decode("utf-8", "replace")
        return Answer(url, None, f"HTTP {e.code}: {detail}".strip())
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        return Answer(url, None, f"no answer: {reason}")


def base_url(settings: Settings) -> str | None:
    """Process 0's API from API_HOST and API_PORT (None when API_PORT is unset)."""
    port = getattr(settings, "api_port", None)
    if port is None:
        return None
    host = str(getattr(settings, "api_host", "127.0.0.1"))
    host = "127.0.0.1" if host in ("0.0.0.0", "") else host  # noqa: S104 (connect, not bind)
    host = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"http://{host}:{port}"


def discover(settings: Settings, given: list[str] | None = None) -> list[str]:
    """The API URL of every process: `given`, else the list process 0's /status gives
    (`process.apis`) ([] when API_PORT is unset)."""
    if given:
        return [u.rstrip("/") for u in given]
    base = base_url(settings)
    if base is None:
        return []
    first = call(base)
    process = (first.body or {}).get("process", {}) if first.body else {}
    if process.get("apis"):  # the cluster's own list (hosts from -a, the port rule)
        return [str(u).rstrip("/") for u in process["apis"]]
    head, _, port = base.rpartition(":")
    return [f"{head}:{int(port) + i}" for i in range(max(int(process.get("processes", 1)), 1))]


def statuses(settings: Settings, given: list[str] | None = None) -> list[Answer]:
    """Every discovered process's `/status`."""
    return [call(url) for url in discover(settings, given)]


def _token(settings: Settings) -> str | None:
    token = getattr(settings, "api_token", None)
    return token.reveal() if token is not None else None


ApiOpt = typer.Option(
    None, "--api", help="A process's status API URL (repeatable); default: from API_PORT."
)


def asker() -> str:
    """Who runs this command, as the flow records it with a pause (`user@host`)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname() or 'unknown'}"


def _by(path: str) -> str:
    return f"{path}?{urllib.parse.urlencode({'by': asker()})}"


def _urls(settings: Settings, api: list[str] | None) -> list[str]:
    urls = discover(settings, api)
    if not urls:
        raise common.Usage("API_PORT: not set and no --api given; no process to reach")
    return urls


def _switch(path: str, api: list[str] | None, json_out: bool) -> None:
    with common.errors_as_exits():
        settings = common.load_settings()
        urls = _urls(settings, api)
        answers = [call(u, "PUT", _by(path), _token(settings)) for u in urls]
        if json_out:
            common.emit_json({"processes": [a.as_json() for a in answers]})
        else:
            for a in answers:
                state = (a.body or {}).get("state")
                common.out.print(f"{a.url}: {state or a.error}", highlight=False, markup=False)
        if any(a.error for a in answers):
            raise typer.Exit(common.PROBLEM)


def pause(api: list[str] | None = ApiOpt, json_out: bool = common.JsonOpt) -> None:
    """Pause every process of the flow until resumed, also over restarts."""
    _switch("/pause", api, json_out)


def resume(api: list[str] | None = ApiOpt, json_out: bool = common.JsonOpt) -> None:
    """Resume every paused process of the flow."""
    _switch("/resume", api, json_out)


# ------------------------------------------------------------------ stop and restart

POLL_S = 0.25
SHOWN_PARTITIONS = 8
TimeoutOpt = typer.Option(
    60.0, "--timeout", min=1.0, help="Seconds to wait for every process (then exit 1)."
)


def missing_processes(bodies: list[dict[str, Any]]) -> list[int]:
    """The process ids of the cluster that none of `bodies` (their /status) is."""
    if not bodies:
        return []
    count = max(int(b.get("process", {}).get("processes", 1)) for b in bodies)
    seen = {int(b.get("process", {}).get("id", 0)) for b in bodies}
    return sorted(set(range(count)) - seen)


def _whole_cluster(settings: Settings, api: list[str] | None, verb: str) -> list[Answer]:
    """Every process's first /status; Problem if one does not answer, Usage if `--api`
    leaves out a process of the cluster (nothing is asked to stop then)."""
    first = [call(u) for u in _urls(settings, api)]
    silent = [a for a in first if a.body is None]
    if silent:
        said = "; ".join(f"{a.url}: {a.error}" for a in silent)
        msg = f"{said}; {verb} nothing (the processes of a cluster stop together)"
        raise common.Problem(msg)
    missing = missing_processes([a.body for a in first if a.body is not None])
    if missing:
        count = max(int(a.body["process"]["processes"]) for a in first if a.body is not None)
        msg = (
            f"--api: names no process {', '.join(map(str, missing))} of the cluster of {count}; "
            f"one process of a Bytewax cluster cannot stop alone (its peers end with an error): "
            f"name every process, or none (API_PORT finds them); {verb} nothing"
        )
        raise common.Usage(msg)
    return first


@dataclass
class Stopped:
    """What `stop` found out about one process."""

    url: str
    last: dict[str, Any]
    """The last /status it answered."""
    seconds: float | None
    """How long it took to stop answering (None: it still answers)."""
    error: str | None = None
    """Why the stop was not asked (the PUT failed)."""
    committed: dict[tuple[str, int], int | None] | None = None
    """The group's committed offsets after the stop, asked of Kafka (None: not asked)."""
    kafka_error: str | None = None
    seen: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    """Each partition as the last /status that listed it says (a partition leaves the
    list once it has stopped)."""

    def __post_init__(self) -> None:
        self.see(self.last)

    def see(self, body: dict[str, Any]) -> None:
        """Take one /status of the process."""
        self.last = body
        for p in body.get("partitions") or []:
            self.seen[(p["topic"], int(p["partition"]))] = p

    def gone(self, now: Answer, seconds: float) -> bool:
        """Take one answer; True once the process no longer answers as itself (it stopped,
        or something started a new one), `seconds` after the stop was asked."""
        if now.body is not None and _same_process(self.last, now.body):
            self.see(now.body)
            return False
        self.seconds = seconds
        return True

    def partitions(self) -> list[dict[str, Any]]:
        return [self.seen[k] for k in sorted(self.seen)]

    def offsets(self) -> dict[tuple[str, int], int | None]:
        """Kafka's answer, or else the last /status's `committed`."""
        if self.committed is not None:
            return self.committed
        return {(p["topic"], p["partition"]): p.get("committed") for p in self.partitions()}

    def uncommitted(self) -> list[str]:
        """`t/p committed c of p read` for every partition whose committed offset is below
        the position it had read to (a partition waiting to read commits nothing)."""
        done = self.offsets()
        out = []
        for p in self.partitions():
            if p.get("held"):
                continue
            c = done.get((p["topic"], p["partition"]))
            if c is None or c < p["position"]:
                out.append(f"{p['topic']}/{p['partition']} committed {c} of {p['position']} read")
        return out

    def line(self) -> str:
        if self.error is not None:
            return f"{self.url}: not stopped: {self.error}"
        process = self.last.get("process", {})
        who = f"pid {process.get('pid')}"
        if int(process.get("processes", 1)) > 1:
            who = f"process {process.get('id')} of {process.get('processes')}, {who}"
        if self.seconds is None:
            return (
                f"{self.url}: still answering ({who}, state {self.last.get('state')}); not stopped"
            )
        shown = [
            f"{t}/{p}@{'-' if o is None else o}" for (t, p), o in sorted(self.offsets().items())
        ]
        more = len(shown) - SHOWN_PARTITIONS
        offsets = " ".join(shown[:SHOWN_PARTITIONS]) + (f" and {more} more" if more > 0 else "")
        source = ""
        if self.committed is None:
            source = f" (its last /status; Kafka did not answer: {self.kafka_error})"
        text = (
            f"{self.url}: stopped in {self.seconds:.1f}s ({who}); committed "
            f"{offsets or 'nothing (it read no partition)'}{source}"
        )
        left = self.uncommitted()
        if left:
            text += (
                f"; NOT everything read was committed ({', '.join(left)}): the stop did not "
                f"finish (its log says why); the next start reads them again"
            )
        return text

    def ok(self) -> bool:
        return self.error is None and self.seconds is not None and not self.uncommitted()

    def as_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "stopped": self.seconds is not None,
            "seconds": self.seconds,
            "committed": [
                {"topic": t, "partition": p, "committed": o}
                for (t, p), o in sorted(self.offsets().items())
            ],
            "committed_from": "kafka" if self.committed is not None else "status",
            "uncommitted": self.uncommitted(),
            "status": self.last,
            "error": self.error,
        }


def _same_process(first: dict[str, Any], now: dict[str, Any]) -> bool:
    """Whether two /status answers come from one start of one process."""
    a, b = first.get("process", {}), now.get("process", {})
    return (a.get("pid"), a.get("started_at")) == (b.get("pid"), b.get("started_at"))


def _committed(settings: Settings, found: list[Stopped]) -> None:
    """Ask Kafka the group's committed offsets of the partitions the processes read."""
    topics: dict[str, set[int]] = {}
    for s in found:
        for p in s.partitions():
            topics.setdefault(p["topic"], set()).add(int(p["partition"]))
    group = next(
        (s.last["process"]["group"] for s in found if s.last.get("process")), settings.group_id
    )
    try:
        offsets = common.offsets(settings, group, topics) if topics else []
    except Exception as e:  # Kafka away: the last /status is what there is
        for s in found:
            s.kafka_error = str(e)
        return
    by_key = {(o.topic, o.partition): o.committed for o in offsets}
    for s in found:
        s.committed = {(p["topic"], p["partition"]): by_key.get((p["topic"], p["partition"]))
                       for p in s.partitions()}  # fmt: skip


def stop(
    api: list[str] | None = ApiOpt,
    timeout: float = TimeoutOpt,
    json_out: bool = common.JsonOpt,
) -> None:
    """Stop every process of the flow as SIGTERM does (flush, commit, exit 0); wait for it.

    Then one line per process: how long it took and what the group committed (asked of
    Kafka). Exit 1 if a process still answers after --timeout, or left records read but
    not committed."""
    with common.errors_as_exits():
        settings = common.load_settings()
        first = _whole_cluster(settings, api, "stopping")
        found = _ask_every(
            first, "/stop", _token(settings), lambda a, error: Stopped(a.url, a.body, None, error)
        )
        _wait_each(found, timeout, Stopped.gone)
        if any(s.seconds is not None for s in found):
            _committed(settings, [s for s in found if s.seconds is not None])
        _report(found, json_out)


@dataclass
class Restarted:
    """What `restart` found out about one process."""

    url: str
    before: dict[str, Any]
    """Its /status before the restart."""
    error: str | None = None
    """Why the restart was not asked (the PUT failed, or was refused)."""
    after: dict[str, Any] | None = None
    """The first /status of the new start (None: none yet)."""
    seconds: float | None = None
    last: Answer | None = None
    """The last answer while waiting."""

    def see(self, now: Answer, seconds: float) -> bool:
        """Take one answer; True once it is the new start, reading or paused."""
        self.last = now
        body = now.body
        if body is None or _same_process(self.before, body):
            return False
        if body.get("state") not in RUNNING_STATES or body["process"].get("starting"):
            return False
        self.after, self.seconds = body, seconds
        return True

    def line(self) -> str:
        if self.error is not None:
            return f"{self.url}: not restarted: {self.error}"
        if self.after is None:
            return f"{self.url}: {self.failure()}"
        return (
            f"{self.url}: restarted in {self.seconds:.1f}s "
            f"({restarted_how(self.before, self.after)}); {self.after.get('state')}"
        )

    def failure(self) -> str:
        now = self.last
        if now is None or now.body is None:
            what = f"its API does not answer again ({now.error if now else 'not asked'})"
        else:
            what = f"it still answers as the old start (state {now.body.get('state')})"
        return f"not restarted in time: {what}"

    def ok(self) -> bool:
        return self.error is None and self.after is not None

    def as_json(self) -> dict[str, Any]:
        error = self.error if self.error is not None or self.after else self.failure()
        return {
            "url": self.url,
            "restarted": self.ok(),
            "seconds": self.seconds,
            "status": self.after,
            "error": error,
        }


def restart(
    api: list[str] | None = ApiOpt,
    timeout: float = TimeoutOpt,
    json_out: bool = common.JsonOpt,
) -> None:
    """Restart every process of the flow: a clean stop, then the same command line again.

    Each process drains as on SIGTERM and executes its own command line again (same pid,
    environment and arguments); this waits until every API answers as a new start. Exit 1
    if one does not within --timeout."""
    with common.errors_as_exits():
        settings = common.load_settings()
        first = _whole_cluster(settings, api, "restarting")
        found = _ask_every(
            first, "/restart", _token(settings), lambda a, error: Restarted(a.url, a.body, error)
        )
        _wait_each(found, timeout, Restarted.see)
        _report(found, json_out)


class _Outcome(Protocol):
    """What `stop` or `restart` found out about one process."""

    url: str
    error: str | None

    def line(self) -> str: ...
    def ok(self) -> bool: ...
    def as_json(self) -> dict[str, Any]: ...


Outcome = TypeVar("Outcome", bound=_Outcome)


def _ask_every(
    first: list[Answer], path: str, token: str | None, make: Callable[[Any, str | None], Outcome]
) -> list[Outcome]:
    """PUT `path` on every process (`first`: their /status answers); one outcome each, with
    the PUT's error if it failed."""
    found = []
    for a in first:
        assert a.body is not None
        found.append(make(a, call(a.url, "PUT", _by(path), token).error))
    return found


def _wait_each(
    found: list[Outcome], timeout: float, done: Callable[[Outcome, Answer, float], bool]
) -> None:
    """Ask each process whose PUT succeeded for its /status until `done(outcome, answer,
    seconds since the PUTs)` or `timeout` seconds pass."""
    start = time.monotonic()
    deadline = start + timeout
    waiting = [o for o in found if o.error is None]
    while waiting and time.monotonic() < deadline:
        time.sleep(POLL_S)
        for o in list(waiting):
            if done(o, call(o.url), round(time.monotonic() - start, 1)):
                waiting.remove(o)


def _report(found: list[Outcome], json_out: bool) -> None:
    """One line (or a JSON document) per process; exit 1 unless every one succeeded."""
    if json_out:
        common.emit_json({"processes": [o.as_json() for o in found]})
    else:
        for o in found:
            common.out.print(o.line(), highlight=False, markup=False)
    if not all(o.ok() for o in found):
        raise typer.Exit(common.PROBLEM)


def restarted_how(before: dict[str, Any], after: dict[str, Any]) -> str:
    """`pid 7, started 2026-…` and, when the pid changed, that something else started it."""
    old, new = before.get("process", {}), after.get("process", {})
    text = f"pid {new.get('pid')}, started {new.get('started_at')}"
    if old.get("pid") != new.get("pid"):
        text += f"; a new process, not pid {old.get('pid')}: it exited and was started again"
    return text
