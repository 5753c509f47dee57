"""The status API's HTTP surface (FastAPI on uvicorn): routes, the bearer token, /metrics.

FastAPI because the response models already are pydantic (the settings are too), and it
writes the OpenAPI document from them; uvicorn serves it on the API's own thread.
"""

from __future__ import annotations

import hmac
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from flows.api import models
from flows.api.state import ProcessState
from flows.kafka import discovery
from flows.runtime import control, shutdown

TITLE = "es-sink status API"
VERSION = "1"
_bearer = HTTPBearer(auto_error=False, description="API_TOKEN, required for writes when set")
_UNAUTHORIZED: dict[int | str, dict[str, Any]] = {
    401: {"model": models.Problem, "description": "missing or wrong API_TOKEN"}
}
_BY = Query(
    None,
    max_length=200,
    description="who asks (logged; recorded with a pause); default: the client's address",
)
RESTART_GRACE_S = 10.0
"""A restart of one process of a cluster waits this long beyond SHUTDOWN_TIMEOUT_S for the
other processes to be asked too (the dataflow ends once every process has drained)."""


def _asker(request: Request, by: str | None) -> str:
    return control.who(by or (request.client.host if request.client else None))


def make_app(state: ProcessState, token: str | None) -> FastAPI:
    """The API of one process; `token` (API_TOKEN) guards the write endpoints when set."""
    app = FastAPI(title=TITLE, version=VERSION, docs_url=None, redoc_url=None)

    def authorized(
        creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> None:
        if token is None:
            return  # only reachable on loopback (flows.config.api)
        given = creds.credentials if creds is not None else ""
        if not hmac.compare_digest(given.encode(), token.encode()):
            raise HTTPException(
                401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"}
            )

    write = [Depends(authorized)]

    @app.get("/status", response_model=models.Status, summary="What this process is doing")
    def status() -> models.Status:
        return state.status()

    @app.put(
        "/pause",
        response_model=models.StateAnswer,
        dependencies=write,
        responses=_UNAUTHORIZED,
        summary="Stop reading Kafka; keep writing what was read",
    )
    def pause(request: Request, by: str | None = _BY) -> models.StateAnswer:
        control.pause(_asker(request, by))
        return models.StateAnswer(state=state.state())

    @app.put(
        "/resume",
        response_model=models.StateAnswer,
        dependencies=write,
        responses=_UNAUTHORIZED,
        summary="Read Kafka again",
    )
    def resume(request: Request, by: str | None = _BY) -> models.StateAnswer:
        control.resume(_asker(request, by))
        return models.StateAnswer(state=state.state())

    @app.put(
        "/stop",
        response_model=models.StateAnswer,
        dependencies=write,
        responses=_UNAUTHORIZED,
        summary="Stop as on SIGTERM: flush, commit, exit 0 (every process of a cluster)",
    )
    def stop(request: Request, by: str | None = _BY) -> models.StateAnswer:
        shutdown.stop(f"PUT /stop by {_asker(request, by)}", cause="PUT /stop")
        return models.StateAnswer(state=state.state())

    @app.put(
        "/restart",
        response_model=models.StateAnswer,
        dependencies=write,
        responses={
            **_UNAUTHORIZED,
            409: {"model": models.Problem, "description": "stopping already, or not able to"},
        },
        summary="Stop as on SIGTERM, then execute the same command line again (same pid)",
    )
    def restart(request: Request, by: str | None = _BY) -> models.StateAnswer:
        grace = RESTART_GRACE_S if state.processes() > 1 else 0.0
        reason = f"PUT /restart by {_asker(request, by)}: restarting the flow"
        refused = discovery.request_restart(reason, "PUT /restart", grace)
        if refused is not None:
            raise HTTPException(409, f"not restarting: {refused}")
        return models.StateAnswer(state=state.state())

    @app.get(
        "/health/live",
        response_model=models.Live,
        responses={503: {"model": models.Live}},
        summary="No worker is wedged",
    )
    def live(response: Response) -> models.Live:
        answer = state.live()
        if not answer.live:
            response.status_code = 503
        return answer

    @app.get(
        "/health/ready",
        response_model=models.Ready,
        responses={503: {"model": models.Ready}},
        summary="Kafka and Elasticsearch answer; neither halted nor failed",
    )
    def ready(response: Response) -> models.Ready:
        answer = state.ready()
        if not answer.ready:
            response.status_code = 503
        return answer

    @app.get(
        "/metrics",
        response_class=Response,
        summary="Prometheus metrics",
        responses={200: {"content": {"text/plain": {}}}},
    )
    def metrics() -> Response:
        return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)

    return app


def openapi_document() -> dict[str, Any]:
    """The OpenAPI document, built without a process behind it (no I/O)."""
    return make_app(None, "-").openapi()  # type: ignore[arg-type]
