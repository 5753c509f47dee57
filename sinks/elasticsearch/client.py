"""The Elasticsearch client, built from the connection config at run time (never at
import), and how a refused request becomes a configuration error."""

from __future__ import annotations

import socket
import struct
from typing import Any

from elastic_transport import NodeConfig, Urllib3HttpNode
from elasticsearch import ApiError, Elasticsearch
from elasticsearch.serializer import NdjsonSerializer, OrjsonSerializer

from sinks.elasticsearch import node_log
from sinks.elasticsearch.config import EsConnection
from sinks.elasticsearch.server import Server, ServerTransport
from sinks.errors import ConfigError
from sinks.resources import locked_cache


@locked_cache
def shared_client(connection: EsConnection) -> Elasticsearch:
    """One client per process and connection: its connection pool is thread-safe, so every
    sink partition of every worker thread shares it."""
    return make_client(connection)


class _JsonSerializer(OrjsonSerializer):
    """orjson; a `_bulk` answer with no failed item is not parsed. Filtered to the item
    statuses, it is still ~25 bytes a document, and parsing it was a tenth of a small
    record's cost. One that holds a 404 is: a delete of a missing document answers 404
    without failing, so `errors` stays false, and the sink counts those deletes
    (`bulk.classify`). Filtered so, an answer without errors holds a `4` only in a 404
    (other statuses are 2xx, the names have no digit): a byte search (memchr) finds it
    thirty times faster than a search for `"status":404` (`tools.bench.micro`)."""

    def loads(self, data: bytes) -> Any:
        if data.startswith(b'{"errors":false') and b"4" not in data:
            return {"errors": False}
        return super().loads(data)


class _NdjsonSerializer(NdjsonSerializer):
    """The sink's `_bulk` bodies are already joined bytes: send them without a copy."""

    def dumps(self, data: Any) -> bytes:
        if isinstance(data, bytes):
            return data
        return super().dumps(data)


class _Node(Urllib3HttpNode):
    """urllib3 connections that take an unsent request down with them. Closed with a reset
    (SO_LINGER 0), a connection drops what its send buffer holds when the process dies or
    gives up on a request, instead of the kernel delivering it later to a node that would
    execute it after a successor's newer writes; TCP_USER_TIMEOUT (Linux) aborts one whose
    data stays unacknowledged for the node's request timeout, so the kernel of a frozen
    process does not deliver a request once the network is back, minutes later. Set
    through urllib3's `socket_options`, which elastic-transport does not expose."""

    def __init__(self, config: NodeConfig):
        super().__init__(config)
        options = [
            *self.pool.ConnectionCls.default_socket_options,
            (socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)),
        ]
        user_timeout = getattr(socket, "TCP_USER_TIMEOUT", None)
        if user_timeout is not None and isinstance(config.request_timeout, int | float):
            options.append((socket.IPPROTO_TCP, user_timeout, int(config.request_timeout * 1000)))
        self.pool.conn_kw["socket_options"] = options


def make_client(connection: EsConnection) -> Elasticsearch:
    """A client with orjson, our own retry policy (transport retries off), the auth set, and
    the transport that speaks the server's major (`server.ServerTransport`)."""
    node_log.install()
    c = connection
    kwargs: dict[str, Any] = {
        "transport_class": ServerTransport,
        "node_class": _Node,
        "serializers": {
            "application/json": _JsonSerializer(),
            "application/x-ndjson": _NdjsonSerializer(),
        },
        "request_timeout": c.request_timeout_s,
        # The sink retries with backoff and classification; the transport's immediate
        # retries would only hammer an overloaded node.
        "max_retries": 0,
        "retry_on_timeout": False,
        "http_compress": c.compress,
    }
    if c.cloud_id:
        kwargs["cloud_id"] = c.cloud_id
    else:
        kwargs["hosts"] = list(c.hosts)
    if c.username and c.password:
        kwargs["basic_auth"] = (c.username, c.password.reveal())
    elif c.api_key:
        kwargs["api_key"] = c.api_key.reveal()
    elif c.bearer_token:
        kwargs["bearer_auth"] = c.bearer_token.reveal()
    if c.ca_certs:
        kwargs["ca_certs"] = c.ca_certs
    if c.ssl_fingerprint:
        kwargs["ssl_assert_fingerprint"] = c.ssl_fingerprint
    if not c.verify_certs:
        kwargs["verify_certs"] = False
    return Elasticsearch(**kwargs)


def connect(hosts: str | list[str], **kwargs: Any) -> Elasticsearch:
    """A plain client (tests, tools) that speaks the server's major like the sink's does."""
    node_log.install()
    return Elasticsearch(hosts, transport_class=ServerTransport, **kwargs)


def server_of(client: Elasticsearch) -> Server | None:
    """What the client found at its hosts (None before its first answer)."""
    transport = client.transport
    return transport.server if isinstance(transport, ServerTransport) else None


def refused(e: ApiError, what: str) -> ConfigError:
    """A request Elasticsearch will never accept as sent: name the settings to check."""
    status = e.meta.status
    reason = error_reason(e.body) if isinstance(e.body, dict) else e.message
    hint = credentials_hint(status)
    hint = f" ({hint})" if hint else ""
    return ConfigError(f"ES_HOSTS: Elasticsearch refused {what} with HTTP {status}: {reason}{hint}")


def credentials_hint(status: int) -> str:
    """What to check when Elasticsearch answers 401 or 403 ("" for other statuses)."""
    if status == 401:
        return "check ES_USERNAME/ES_PASSWORD, ES_API_KEY or ES_BEARER_TOKEN"
    if status == 403:
        return "the credentials lack a privilege: index, create_index or auto_configure"
    return ""


def error_reason(body: object) -> str:
    """`type: reason` of an error answer, or the start of the body."""
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return f"{body['error'].get('type')}: {body['error'].get('reason')}"
    return str(body)[:500]
