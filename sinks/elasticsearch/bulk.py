"""One `_bulk` request and what its answer means: a pure classification of each item into
done, retry, rejected (a dead letter) or a configuration error that stops the flow.

Done: 2xx; 409 when a conflict means the document is already there (external versioning,
or a `create`, see `write_methods`); 404 for a delete (counted apart); 404
`document_missing_exception` for an update under ON_MISSING_DOCUMENT=ignore (counted
apart; under `dlq` it is a dead letter saying the document is missing). A script the node
cannot run at all (no such stored script, a language it lacks) stops the flow: every
record would fail the same way. Retried under
ES_RETRY_BUDGET_S: 429s, including the flood-stage block; and for the whole request,
connection errors, timeouts, 429 and 5xx. Retried at most
ES_ITEM_RETRY_MAX times: other 5xx and retryable types (rejected execution, circuit
breaking, unavailable shards). A configuration error: 401/403 `security_exception`,
`index_not_found_exception`. Rejected for good: a 403 block, other 4xx. A 413 (or a 429
whose operation alone exceeds the node's indexing-pressure limit) splits the request.

Writes to one document keep their order across retries. An update refused because its
document is missing, whose document a later `index` or `delete` of the same request wrote,
is moot: done, neither retried nor dead-lettered (the later write decides what the document
holds). An item that failed for a transient reason (overload) is retried even then: until
Elasticsearch has read it, nobody knows whether the record itself is bad (a mapping error),
and a bad record must reach the dead-letter topic whatever came after it. A retried item
takes the later items of its request that wrote the same document along, so an older write
never lands over a newer one; that re-applies them, which is sound for every write but a
script (a counter would count twice), so a request never holds a script after another
write of its document (`chunks` starts the next request there).
"""

from __future__ import annotations

import re
import time
from bisect import bisect_right
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from itertools import accumulate, compress, filterfalse
from operator import attrgetter
from typing import Any

import orjson
from elastic_transport import ConnectionError as TransportConnectionError
from elastic_transport import ConnectionTimeout
from elasticsearch import ApiError, Elasticsearch

from sinks import metrics
from sinks.backoff import Retries
from sinks.elasticsearch.client import credentials_hint, error_reason, refused
from sinks.elasticsearch.config import DocumentConfig
from sinks.elasticsearch.write_methods import CONFLICT_DONE_OPS, WRITE_METHODS
from sinks.errors import ConfigError
from sinks.model import Action, DeadLetter

FILTER = "errors,items.*.status,items.*.error.type,items.*.error.reason,items.*.error.caused_by"
"""What the sink reads of a `_bulk` answer (the rest is not sent)."""

RETRY_ERROR_TYPES = frozenset(
    {
        "es_rejected_execution_exception",
        "rejected_execution_exception",  # OpenSearch's name for it
        "circuit_breaking_exception",
        "unavailable_shards_exception",
        "no_shard_available_action_exception",
        "cluster_block_exception",
        "process_cluster_event_timeout_exception",
    }
)

SUPERSEDING_OPS = frozenset({"index", "delete"})
"""Operations that leave a document as they say, whatever earlier writes did to it."""

TRANSPORT_ERRORS = (TransportConnectionError, ConnectionTimeout, ApiError)
_ID = attrgetter("id")
"""What `send` raises that `classify_failure` classifies."""


def chunks(
    actions: list[Action],
    max_actions: int,
    max_bytes: int,
    total: int | None = None,
    *,
    scripts_apart: bool = False,
) -> Iterator[tuple[list[Action], int]]:
    """`actions` in request-sized runs (at most `max_actions`, and `max_bytes` unless a single
    action is larger), each with its size in bytes. The split points are found in C
    (`accumulate`, `bisect`), not by a Python loop per action; a buffer that fits in one
    request is yielded as it is (the same list), without reading its actions when the
    caller knows their `total` bytes (the sink partition counts them as they come).

    With `scripts_apart` (a script may be written), a run also ends before a script whose
    document the run already writes: a retry re-sends the later writes of a document, and
    a script must not run twice (see the module docstring)."""
    for run, size in _limited(actions, max_actions, max_bytes, total):
        if scripts_apart:
            yield from _scripts_apart(run)
        else:
            yield run, size


def _limited(
    actions: list[Action], max_actions: int, max_bytes: int, total: int | None
) -> Iterator[tuple[list[Action], int]]:
    """`chunks` by the request limits alone."""
    n = len(actions)
    if total is None:
        total = sum([len(a.data) for a in actions])
    if n <= max_actions and total <= max_bytes:
        if n:
            yield actions, total
        return
    ends = list(accumulate([len(a.data) for a in actions]))  # ends[i]: bytes of [0..i]
    start = base = 0
    while start < n:
        # The longest run from `start` within both limits, and never empty.
        end = bisect_right(ends, base + max_bytes, start, min(n, start + max_actions))
        end = max(end, start + 1)
        yield actions[start:end], ends[end - 1] - base
        base = ends[end - 1]
        start = end


def _scripts_apart(run: list[Action]) -> Iterator[tuple[list[Action], int]]:
    """`run` cut before each script whose document id an earlier action of its part has."""
    start = 0
    ids: set[str | None] = set()
    for i, action in enumerate(run):
        if action.id in ids and _is_script(action):
            yield run[start:i], sum([len(a.data) for a in run[start:i]])
            start = i
            ids = set()
        ids.add(action.id)
    yield run[start:], sum([len(a.data) for a in run[start:]])


def _is_script(action: Action) -> bool:
    """An update that runs a script: its body line starts with `{"script":`."""
    data = action.data
    return data.startswith(b'{"script":', data.index(b"\n") + 1)


def whole_requests(
    actions: list[Action], total: int, max_actions: int, max_bytes: int
) -> tuple[int, int]:
    """How many leading actions fill whole requests (as `chunks` splits them), and their
    bytes; `total` is the bytes of all of `actions`. The rest would make a request below
    both limits: a partition that reached a limit keeps it for its next bulk instead of
    sending a second, small request."""
    if total < max_bytes:  # only the action limit cuts: look at the tail alone
        n = len(actions) - len(actions) % max_actions
        return n, total - sum([len(a.data) for a in actions[n:]])
    n = size = 0
    for run, run_bytes in chunks(actions, max_actions, max_bytes, total):
        if n + len(run) == len(actions) and len(run) < max_actions and run_bytes < max_bytes:
            break  # the tail: it reached neither limit
        n += len(run)
        size += run_bytes
    return n, size


def send(client: Elasticsearch, actions: list[Action]) -> Mapping[str, Any]:
    """One `_bulk` request of `actions`; its (filtered) answer. Raises the transport's
    errors (see `TRANSPORT_ERRORS`)."""
    body = b"".join([a.data for a in actions])  # a list joins faster than a generator
    t0 = time.perf_counter()
    try:
        resp = client.bulk(operations=body, filter_path=FILTER)  # type: ignore[arg-type]
    finally:
        metrics.BULK_SECONDS.observe(time.perf_counter() - t0)
    return resp.body


@dataclass(frozen=True, slots=True)
class Rules:
    """What the documents' configuration says some answers mean."""

    conflict_done: frozenset[str] = CONFLICT_DONE_OPS
    """Operations whose 409 means the index already holds the document: done."""
    missing_ignored: bool = False
    """ON_MISSING_DOCUMENT=ignore: an update's 404 document_missing_exception is done."""
    superseding: frozenset[str] = SUPERSEDING_OPS
    """Operations whose success makes every earlier write of their document moot. None
    under external versioning, where the version, not the request order, decides."""
    scripts: bool = False
    """A script may be written (ES_SCRIPT_ID or ES_SCRIPT_SOURCE): `chunks(scripts_apart)`."""

    @classmethod
    def of(cls, docs: DocumentConfig) -> Rules:
        done = set(CONFLICT_DONE_OPS)
        method = WRITE_METHODS.get(docs.write_method)
        if method is not None and method.conflict_is_done:
            done.add(method.op)
        superseding = SUPERSEDING_OPS
        if docs.external_versioning:  # an older record replayed after a newer one
            done.update(("index", "create", "delete"))
            superseding = frozenset()
        return cls(
            frozenset(done),
            docs.updates.on_missing == "ignore",
            superseding,
            docs.updates.script is not None,
        )


@dataclass(frozen=True, slots=True)
class Verdict:
    """What one attempt means for the actions it sent (positions in the request)."""

    retry: tuple[int, ...] = ()
    """To send again, in request order."""
    why: str = ""
    """The last retry's cause, for logs and errors."""
    budgeted: bool = False
    """The retry is bounded by ES_RETRY_BUDGET_S (whole request, 429), not ES_ITEM_RETRY_MAX."""
    counted: tuple[int, ...] = ()
    """Retries that count against ES_ITEM_RETRY_MAX."""
    rejected: tuple[tuple[int, DeadLetter], ...] = ()
    """Failed for good."""
    all_written: bool = False
    written: tuple[int, ...] = ()
    """Answered 2xx (all of them when `all_written`)."""
    not_found: tuple[int, ...] = ()
    """Deletes answered 404: done, but nothing was deleted."""
    missing: tuple[int, ...] = ()
    """Updates of a missing document under ON_MISSING_DOCUMENT=ignore: done, nothing written."""
    too_large: str | None = None
    """The request must be split (HTTP 413, or over the node's indexing-pressure limit)."""
    stop: ConfigError | None = None
    """A configuration error: every record for that index would fail the same way."""
    retried: tuple[tuple[str, int], ...] = ()
    """Retries by `es_sink_bulk_retries` label."""


DONE = Verdict(all_written=True)


class Call:
    """What one write of a chunk learns across its attempts and 413 splits: one account,
    so every failed record is dead-lettered once."""

    __slots__ = ("last_warning", "missing", "not_found", "rejected", "retries", "tries")

    def __init__(self, retries: Retries) -> None:
        self.retries = retries
        self.last_warning = 0.0
        self.rejected: dict[int, DeadLetter] = {}
        """id(action) → its dead letter: failed for good."""
        self.tries: dict[int, int] = {}
        """id(action) → retries so far for errors bounded by ES_ITEM_RETRY_MAX."""
        self.not_found: set[int] = set()
        """id(action) of deletes Elasticsearch last answered 404."""
        self.missing: set[int] = set()
        """id(action) of updates ignored as their document is missing (counted once)."""

    def record(self, pending: list[Action], verdict: Verdict) -> None:
        """Apply `verdict` (of an attempt that sent `pending`) to the account and metrics."""
        for label, n in verdict.retried:
            metrics.BULK_RETRIES.labels(label).inc(n)
        if verdict.all_written:
            if self.not_found:  # deletes re-sent behind a retried write found it now
                self.not_found.difference_update(id(a) for a in pending)
            return
        if self.not_found:  # deletes an earlier attempt found missing (rare)
            for i in verdict.written:
                self.not_found.discard(id(pending[i]))
        for i in verdict.not_found:
            self.not_found.add(id(pending[i]))
        if verdict.missing:
            before = len(self.missing)
            self.missing.update(id(pending[i]) for i in verdict.missing)
            metrics.UPDATES_MISSING.inc(len(self.missing) - before)
        for i in verdict.counted:
            key = id(pending[i])
            self.tries[key] = self.tries.get(key, 0) + 1
        for i, dl in verdict.rejected:
            self.rejected[id(pending[i])] = dl

    def failed_records(self, actions: list[Action]) -> dict[int, DeadLetter]:
        """id(action.origin) → the dead letter of its first failed action, in request order: one
        dead letter per record, however many of its actions (fan-out) failed."""
        if not self.rejected:
            return {}
        out: dict[int, DeadLetter] = {}
        for action in actions:
            dl = self.rejected.get(id(action))
            if dl is not None:
                out.setdefault(id(action.origin), dl)
        return out


def classify_failure(e: Exception, n: int) -> Verdict:
    """A request of `n` actions that got no per-item answer (`e` from `send`)."""
    if isinstance(e, TransportConnectionError | ConnectionTimeout):
        why = f"{type(e).__name__}: {e.message}"
        return Verdict(tuple(range(n)), why, budgeted=True, retried=(("connection", n),))
    if not isinstance(e, ApiError):
        raise e
    status = e.meta.status
    if status == 429 and _over_pressure_limit(str(e.body)):
        return Verdict(too_large=f"HTTP 429: {error_reason(e.body)}")  # split, then reject
    if status == 429 or status >= 500:
        why = f"HTTP {status}: {e.message}"
        return Verdict(tuple(range(n)), why, budgeted=True, retried=((str(status), n),))
    if status == 413:
        return Verdict(too_large=f"HTTP 413: {e.message}")
    return Verdict(stop=refused(e, "the bulk request"))


def classify(
    pending: list[Action],
    answer: Mapping[str, Any],
    call: Call,
    *,
    rules: Rules,
    item_retry_max: int,
) -> Verdict:
    """What the `_bulk` `answer` to `pending` means, item by item (see the module docstring).

    Pure: reads the account of earlier attempts (`call.tries`, `call.rejected`) and changes
    nothing; `Call.record` applies the verdict.
    """
    if not answer.get("errors") and "items" not in answer:
        return DONE  # (deletes that found nothing do not set `errors`: see `client`)
    retry: list[int] = []
    why = ""
    budgeted = False
    counted: list[int] = []
    rejected: dict[int, DeadLetter] = {}
    not_found: list[int] = []
    missing: list[int] = []
    retried: Counter[str] = Counter()
    alone = len(pending) == 1  # then the request's bytes are this action's
    items = answer["items"]
    if len(items) != len(pending):
        msg = f"the bulk answer has {len(items)} items for {len(pending)} actions"
        raise ValueError(msg)
    # Typically a few items of thousands fail: find them in one comprehension, then look
    # at those alone. `(result,)` takes each item's one operation: an item of another
    # shape raises (ValueError), as it must, rather than pass as written.
    failed = [
        i
        for i, item in enumerate(items)
        for (result,) in (item.values(),)
        if result["status"] >= 300
    ]
    if not failed:
        return DONE
    written = filterfalse(set(failed).__contains__, range(len(items)))  # answered 2xx
    missed = [i for i in failed if _error_type(items[i]) == "document_missing_exception"]
    moot = _moot(pending, items, missed, rules.superseding)
    for i in failed:
        action = pending[i]
        ((op, result),) = items[i].items()
        status = result["status"]
        error = result.get("error") or {}
        etype = _error_type(items[i])
        if status == 409 and op in rules.conflict_done:
            continue
        if status == 404 and op == "delete":
            not_found.append(i)  # done, but counted: nothing was deleted
            continue
        if etype == "document_missing_exception" and rules.missing_ignored:
            missing.append(i)  # ON_MISSING_DOCUMENT=ignore: done, counted
            continue
        reason = error.get("reason", "") if isinstance(error, dict) else ""
        if etype == "illegal_argument_exception" and op == "update":
            stop = _script_refused(error)
            if stop is not None:
                return Verdict(stop=stop, retried=tuple(retried.items()))
        if etype == "index_not_found_exception" or (
            etype == "security_exception" and status in (401, 403)
        ):
            stop = _misconfigured(action, status, etype, reason)
            return Verdict(stop=stop, retried=tuple(retried.items()))
        if i in moot:  # a later index or delete of the request decided the document
            continue
        if (
            (status == 429 or etype in RETRY_ERROR_TYPES)
            and alone
            and _over_pressure_limit(reason, len(action.data))
        ):
            # This one operation alone is larger than the node's indexing-pressure limit:
            # no retry can succeed.
            rejected[i] = dead(action, etype, reason)
            continue
        if status == 429:  # overload, including the flood-stage block: clears by itself
            retried["429"] += 1
            retry.append(i)
            why = f"{status} {etype}"
            budgeted = True
            continue
        caused = error.get("caused_by") if isinstance(error, dict) else None
        if isinstance(caused, dict) and caused.get("reason"):
            reason = f"{reason}: {caused.get('type')}: {caused['reason']}"
        if status >= 500 or (etype in RETRY_ERROR_TYPES and etype != "cluster_block_exception"):
            tries = call.tries.get(id(action), 0)
            if tries < item_retry_max:
                counted.append(i)
                retried[str(status)] += 1
                retry.append(i)
                why = f"{status} {etype}"
                continue
            reason = f"{reason} (retried {tries} times, ES_ITEM_RETRY_MAX={item_retry_max})"
        elif etype == "cluster_block_exception":
            reason = f"{reason} (status {status}: stays until an administrator lifts it)"
        rejected[i] = dead(action, etype or f"http_{status}", reason)
    if retry:
        more = _with_later_writes(pending, retry, call.rejected, rejected)
        if len(more) > len(retry):
            retried["reorder"] += len(more) - len(retry)
        retry = more
    return Verdict(
        retry=tuple(retry),
        why=why,
        budgeted=budgeted,
        counted=tuple(counted),
        rejected=tuple(rejected.items()),
        written=tuple(written),
        not_found=tuple(not_found),
        missing=tuple(missing),
        retried=tuple(retried.items()),
    )


def dead(action: Action, error_type: str, reason: str) -> DeadLetter:
    """The dead letter of an action Elasticsearch refused for good."""
    return DeadLetter(action.record, "index", f"elasticsearch.{error_type}", reason)


def _error_type(item: Mapping[str, Any]) -> str:
    """The `error.type` of a failed bulk item ("" without one)."""
    ((result,),) = (item.values(),)
    error = result.get("error") or {}
    return str(error.get("type", "")) if isinstance(error, dict) else str(error)


def _moot(
    pending: list[Action], items: list[Any], failed: list[int], superseding: frozenset[str]
) -> set[int]:
    """The `failed` positions (updates of a missing document) whose document (index, id,
    routing) a later `superseding` operation of the request wrote (2xx, or a delete's 404):
    that write decides what the document holds, so the failed one is done, neither retried
    nor dead-lettered."""
    ids = {pending[i].id for i in failed} - {None}
    if not ids or not superseding:
        return set()
    last: dict[tuple[Any, Any, Any], int] = {}  # target → its last superseding write
    start = failed[0] + 1  # the later writes of those documents, found in C: a failed item
    same = map(ids.__contains__, map(_ID, pending[start:]))  # may be early in a long request
    for j in compress(range(start, len(pending)), same):
        ((op, result),) = items[j].items()
        status = result["status"]
        if op in superseding and (status < 300 or (status == 404 and op == "delete")):
            last[_target(pending[j])] = j
    if not last:
        return set()
    return {i for i in failed if pending[i].id in ids and last.get(_target(pending[i]), -1) > i}


def _with_later_writes(
    pending: list[Action],
    retry: list[int],
    rejected_before: Mapping[int, Any],
    rejected_now: Mapping[int, Any],
) -> list[int]:
    """`retry` (positions in `pending`) plus every later action of the request that writes
    the same document (index, id, routing) and was not rejected, in request order: the
    retry must not apply an older write over a newer one that succeeded. None of them is a
    script (`chunks(scripts_apart)`), and a later index or delete made the retry moot."""
    ids = {pending[i].id for i in retry} - {None}
    if not ids:
        return retry
    retrying = set(retry)
    targets: set[tuple[Any, Any, Any]] = set()
    out: list[int] = []
    for j in range(retry[0], len(pending)):
        action = pending[j]
        if j in retrying:
            out.append(j)
            if action.id is not None:
                targets.add(_target(action))
        elif (
            action.id in ids
            and j not in rejected_now
            and id(action) not in rejected_before
            and _target(action) in targets
        ):
            out.append(j)
    return out


def _target(action: Action) -> tuple[Any, Any, Any]:
    """(index, id, routing) from the action line (parsed only on the error path)."""
    line = action.data[: action.data.index(b"\n")]
    ((_op, meta),) = orjson.loads(line).items()
    return meta.get("_index"), meta.get("_id"), meta.get("routing")


def _misconfigured(action: Action, status: int, etype: str, reason: str) -> ConfigError:
    """An item error that is the configuration's, not the record's: every record for that
    index would fail the same way, so stop instead of dead-lettering them all."""
    index = _target(action)[0]
    reason = reason[:300]
    if etype == "index_not_found_exception":
        return ConfigError(
            f"ES_INDEX: index {index} does not exist and Elasticsearch does not create it "
            f"({reason}); create it or an index template for it, or correct ES_INDEX / "
            "ES_INDEX_MAP"
        )
    return ConfigError(
        f"ES_HOSTS: Elasticsearch refused writes to index {index} with HTTP {status}: "
        f"{etype}: {reason} ({credentials_hint(401 if status == 401 else 403)})"
    )


def _script_refused(error: Mapping[str, Any]) -> ConfigError | None:
    """The configured script cannot run on this node for any record (None: it ran, or
    failed for this record only)."""
    caused = error.get("caused_by")
    if not isinstance(caused, dict):
        return None
    reason = str(caused.get("reason", ""))[:300]
    if caused.get("type") == "resource_not_found_exception" and "script" in reason:
        return ConfigError(
            f"ES_SCRIPT_ID: Elasticsearch cannot run the stored script ({reason}); store it "
            "(PUT _scripts/<id>) or correct ES_SCRIPT_ID"
        )
    if reason.startswith("script_lang not supported"):
        return ConfigError(
            f"ES_SCRIPT_LANG: Elasticsearch cannot run the script ({reason}): the node lacks "
            "that language's module (Painless: lang-painless)"
        )
    return None


_PRESSURE = re.compile(r"(coordinating|primary)_operation_bytes=(\d+).*?max_\w*?bytes=(\d+)")


def _over_pressure_limit(reason: str, own_bytes: int = 0) -> bool:
    """True when an indexing-pressure 429 can never clear: the operation (for a primary
    operation, together with its own request's `own_bytes`) exceeds the node's limit."""
    m = _PRESSURE.search(reason)
    if m is None:
        return False
    need = int(m.group(2)) + (own_bytes if m.group(1) == "primary" else 0)
    return need > int(m.group(3))
