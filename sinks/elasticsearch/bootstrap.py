"""What the sink checks and installs at start: credentials, and the index template of
ES_INDEX_TEMPLATE_FILE (once per process, waiting for Elasticsearch like the sink does)."""

from __future__ import annotations

import logging
import threading

from elastic_transport import ConnectionError as TransportConnectionError
from elastic_transport import ConnectionTimeout, TlsError
from elasticsearch import ApiError, Elasticsearch

from sinks.backoff import SYSTEM_CLOCK, Backoff, Clock
from sinks.elasticsearch.client import refused, server_of, shared_client
from sinks.elasticsearch.config import EsConnection, TemplateConfig
from sinks.errors import ConfigError

logger = logging.getLogger(__name__)

TEMPLATE_BACKOFF = Backoff(initial_s=0.25, max_s=30.0)
"""Waits of at most 0.5, 1, 2 ... 30 s between tries; forever, like the sink."""


def check_credentials(connection: EsConnection) -> None:
    """Fail at start on what retrying cannot fix (bad credentials, an untrusted certificate,
    a server the sink does not support: the client's first request detects it, see
    `server`); an unreachable node is fine: the sink waits for it."""
    client = shared_client(connection)
    try:
        client.cluster.health()
        logger.info("ES_HOSTS answers: %s", server_of(client))
    except TlsError as e:
        msg = f"ES_CA_CERTS: TLS with {', '.join(connection.hosts)} failed: {e.message}"
        raise ConfigError(msg) from None
    except (TransportConnectionError, ConnectionTimeout) as e:
        logger.warning("Elasticsearch is not reachable yet (%s); the sink will wait", e.message)
    except ApiError as e:
        # 403 only means these credentials may not read cluster health (monitor); they may
        # still write, which is all the sink needs.
        if e.meta.status == 401:
            raise refused(e, "the credentials") from None
        logger.warning(
            "Elasticsearch answered HTTP %d at start; the sink will retry", e.meta.status
        )


_template_lock = threading.Lock()
_templates_done: set[str] = set()


def bootstrap_template(
    client: Elasticsearch, template: TemplateConfig, clock: Clock = SYSTEM_CLOCK
) -> None:
    """PUT the index template read from ES_INDEX_TEMPLATE_FILE at start, once per process."""
    path, body, name = template.file, template.body, template.name
    if not path or body is None or name is None:
        return
    with _template_lock:
        if path in _templates_done:
            return
        retries = TEMPLATE_BACKOFF.start(clock)
        while True:  # Elasticsearch may not be up yet: wait for it like the sink does
            try:
                client.indices.put_index_template(name=name, **body)
                break
            except (TransportConnectionError, ConnectionTimeout) as e:
                delay, why = retries.next_delay(), str(e.message)
                logger.warning("index template %s: %s; retrying in %.1fs", name, why, delay)
            except ApiError as e:
                if e.meta.status != 429 and e.meta.status < 500:
                    what = f"the index template in ES_INDEX_TEMPLATE_FILE {path}"
                    raise refused(e, what) from None
                delay, why = retries.next_delay(), f"HTTP {e.meta.status}"
                logger.warning("index template %s: %s; retrying in %.1fs", name, why, delay)
            retries.sleep(delay, "index-template", why)
        logger.info("index template %s installed from %s", name, path)
        _templates_done.add(path)
