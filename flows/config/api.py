"""The status and control API: read by flows/api (the HTTP server in each flow process)."""

from __future__ import annotations

import ipaddress
from typing import Self

from pydantic import model_validator

from flows.config.fields import Group, SecretValue, setting
from flows.errors import ConfigError


def is_loopback(host: str) -> bool:
    """Whether only this machine can reach `host` (a literal address or `localhost`)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything


class ApiSettings(Group):
    """Where each process serves /status, /pause, /resume, health probes and /metrics."""

    api_port: int | None = setting(
        "API_PORT",
        None,
        "port of process 0's status API (process i: API_PORT + i); unset: no API",
        ge=1,
        le=65535,
    )
    api_host: str = setting("API_HOST", "127.0.0.1", "address the status API listens on")
    api_token: SecretValue | None = setting(
        "API_TOKEN", None, "bearer token of the PUT endpoints (required off loopback)"
    )
    api_liveness_s: float = setting(
        "API_LIVENESS_S",
        120.0,
        "/health/live fails when a worker made no progress for this long (not paused)",
        ge=1.0,
    )

    @model_validator(mode="after")
    def _writes_off_loopback_need_a_token(self) -> Self:
        if self.api_port is not None and self.api_token is None and not is_loopback(self.api_host):
            msg = (
                f"API_TOKEN: required when API_HOST={self.api_host} is not a loopback address "
                "(anyone who reaches the port could pause the flow)"
            )
            raise ConfigError(msg)
        return self
