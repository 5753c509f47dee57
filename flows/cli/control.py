"""The client side of the flow's status API (its shapes: docs/openapi.json, served by
flows/api), and `es-sink pause` / `es-sink resume` for every process of a cluster at once.

Each process serves on API_HOST, port API_PORT + its process id. Given no `--api` URL, the
processes are discovered from API_PORT: process 0's `/status` says how many there are.
Three plain HTTP calls, so the standard library's urllib rather than another dependency.
"""

from __future__ import annotations

import getpass
import json
import socket
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

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
