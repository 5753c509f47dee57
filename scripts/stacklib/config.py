"""Where and how the stack runs: every environment variable scripts/stack reads, read once.

The defaults are listed in scripts/stack's docstring (its --help); keep the two together.
"""

from __future__ import annotations

import os
from pathlib import Path

KAFKA_VERSION = os.environ.get("KAFKA_VERSION", "4.1.1")
ES_VERSION = os.environ.get("ES_VERSION", "9.5.4")
# The `es` server is Elasticsearch, or (ES_DISTRIBUTION=opensearch) an OpenSearch node in
# its place: same ports, STACK_DIR layout and commands.
ES_DISTRIBUTION = os.environ.get("ES_DISTRIBUTION", "elasticsearch")
OPENSEARCH_VERSION = os.environ.get("OPENSEARCH_VERSION", "3.3.0")
# The one address both servers listen on (and Kafka advertises): loopback unless a harness
# needs them reachable from other network namespaces (tools/chaos/hosts.py: a bridge address).
STACK_HOST = os.environ.get("STACK_HOST", "127.0.0.1")
KAFKA_PORT = int(os.environ.get("KAFKA_PORT", "9092"))
KAFKA_CONTROLLER_PORT = int(os.environ.get("KAFKA_CONTROLLER_PORT", str(KAFKA_PORT + 1)))
ES_PORT = int(os.environ.get("ES_PORT", "9200"))
ES_TRANSPORT_PORT = int(os.environ.get("ES_TRANSPORT_PORT", str(ES_PORT + 100)))
STACK_DIR = Path(os.environ.get("STACK_DIR", "/var/tmp/es-sink-stack"))
CACHE_DIR = Path(os.environ.get("STACK_CACHE_DIR", Path.home() / ".cache" / "es-sink")).expanduser()
KAFKA_HEAP = os.environ.get("KAFKA_HEAP", "512m")
ES_HEAP = os.environ.get("ES_HEAP", "512m")
ES_USER = os.environ.get("STACK_ES_USER", "essink")
# A node of a multi-node cluster instead of a single node (see scripts/stack's docstring):
# unset ES_SEED_HOSTS keeps `discovery.type: single-node`.
ES_CLUSTER_NAME = os.environ.get("ES_CLUSTER_NAME", "es-sink-local")
ES_NODE_NAME = os.environ.get("ES_NODE_NAME", "local-1")
ES_SEED_HOSTS = [h.strip() for h in os.environ.get("ES_SEED_HOSTS", "").split(",") if h.strip()]
ES_INITIAL_MASTERS = [
    n.strip() for n in os.environ.get("ES_INITIAL_MASTERS", "").split(",") if n.strip()
]
ES_NODE_ROLES = [r.strip() for r in os.environ.get("ES_NODE_ROLES", "").split(",") if r.strip()]
START_TIMEOUT_S = float(os.environ.get("STACK_START_TIMEOUT", "180"))
# The Schema Registry (Apicurio's, with the Confluent-compatible API): started on demand.
REGISTRY_VERSION = os.environ.get("REGISTRY_VERSION", "3.3.3")
REGISTRY_PORT = int(os.environ.get("REGISTRY_PORT", "8081"))
REGISTRY_HEAP = os.environ.get("REGISTRY_HEAP", "256m")

KAFKA_DIR = STACK_DIR / "kafka"
ES_DIR = STACK_DIR / "es"
REGISTRY_DIR = STACK_DIR / "registry"

# Secure mode: see scripts/stack's docstring and docs/security.md.
KAFKA_SECURE_PORT = int(os.environ.get("KAFKA_SECURE_PORT", str(KAFKA_PORT + 2)))
SECURE_DIR = STACK_DIR / "secure"
SECURE_ENV = STACK_DIR / "secure.env"
SINK_USER = "es_sink"  # Elasticsearch writer and Kafka SCRAM user
ADMIN_USER = "es_admin"  # Elasticsearch superuser, for set-up, checks and API keys


class StackError(Exception):
    """A one-line, user-facing failure."""


def log(msg: str) -> None:
    print(f"stack: {msg}", flush=True)
