"""The status and control API of a flow process (docs/operations.md).

Off unless API_PORT is set. A process serves on API_HOST, from its own thread (never a Bytewax
worker's), on API_PORT plus the number of processes listed before it (`-a`) on the same
host: process i of a cluster on one host serves on API_PORT + i, and a process alone on its
host (a Kubernetes pod) on API_PORT itself. `serve` binds the port at start, so a port in
use is one line naming API_PORT instead of a thread dying later.
"""

from __future__ import annotations

import logging
import socket
import threading
from dataclasses import dataclass

from flows.config import Settings
from flows.errors import ConfigError
from flows.runtime.args import RunArgs, run_args

logger = logging.getLogger(__name__)

SAMPLE_EVERY_S = 5.0
"""How often the rates and the readiness gauge are refreshed in the background."""

__all__ = ["Api", "api_port", "api_urls", "serve"]


def api_port(base: int, addresses: tuple[str, ...], process_id: int) -> int:
    """The API port of process `process_id` of the cluster at `addresses` (see above)."""
    if not addresses or process_id >= len(addresses):
        return base + process_id
    host = addresses[process_id].rsplit(":", 1)[0]
    return base + sum(a.rsplit(":", 1)[0] == host for a in addresses[:process_id])


def api_urls(settings: Settings, run: RunArgs) -> list[str]:
    """The status API URL of every process of the cluster, by process id (host from `-a`;
    a single process: API_HOST, or 127.0.0.1 when it listens on every interface)."""
    base = settings.api_port
    if base is None:
        return []
    if not run.addresses:
        every = settings.api_host in ("0.0.0.0", "::")  # noqa: S104 (a comparison)
        host = "127.0.0.1" if every else settings.api_host
        shown = f"[{host}]" if ":" in host else host
        return [f"http://{shown}:{api_port(base, (), run.process_id)}"]
    return [
        f"http://{a.rsplit(':', 1)[0]}:{api_port(base, run.addresses, i)}"
        for i, a in enumerate(run.addresses)
    ]


@dataclass
class Api:
    """A running API: where it listens, and how to stop it (tests)."""

    url: str
    stop: threading.Event


def serve(settings: Settings) -> Api | None:
    """Start this process's API if API_PORT is set; ConfigError if it cannot listen."""
    if settings.api_port is None:
        return None
    import uvicorn
    from prometheus_client import REGISTRY

    from flows.api.metrics import ProcessCollector
    from flows.api.server import make_app
    from flows.api.state import ProcessState

    run = run_args()
    host = settings.api_host
    port = api_port(settings.api_port, run.addresses, run.process_id)
    if port > 65535:
        msg = f"API_PORT: {settings.api_port} + {port - settings.api_port} is above 65535"
        raise ConfigError(msg)
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.create_server((host.strip("[]"), port), family=family)
    except OSError as e:
        msg = f"API_PORT: cannot listen on {host}:{port} (process {run.process_id}): {e}"
        raise ConfigError(msg) from None
    state = ProcessState(settings, run, run.process_id)
    REGISTRY.register(ProcessCollector(state))
    token = settings.api_token.reveal() if settings.api_token is not None else None
    config = uvicorn.Config(
        make_app(state, token), log_level="warning", access_log=False, lifespan="off"
    )
    server = uvicorn.Server(config)
    threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="es-sink-api", daemon=True
    ).start()
    stop = threading.Event()

    def refresh() -> None:
        while not stop.wait(SAMPLE_EVERY_S):
            try:
                state.sample()
                state.ready()
            except Exception:  # never let a bad look end the refreshing
                logger.exception("status API: refreshing the rates failed")

    threading.Thread(target=refresh, name="es-sink-api-sampler", daemon=True).start()
    state.sample()
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}"
    logger.info(
        "status API on %s (process %d; writes %s)",
        url, run.process_id, "need API_TOKEN" if token else "open on loopback",
    )  # fmt: skip
    return Api(url, stop)
