# es-sink: the Kafka -> Elasticsearch Bytewax flow.
#
#   docker build -t es-sink .
#   docker run --rm -e KAFKA_TOPICS=events -e KAFKA_BOOTSTRAP_SERVERS=... -e ES_HOSTS=... es-sink
#
# Settings come from the environment (see flows/config/); bytewax.run reads the BYTEWAX_*
# variables. deploy/entrypoint.sh initialises BYTEWAX_RECOVERY_DIRECTORY on first start.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore

RUN groupadd --system --gid 10001 app \
    && useradd --system --uid 10001 --gid app --home-dir /app --no-create-home \
        --shell /usr/sbin/nologin app \
    && mkdir -p /recovery \
    && chown app:app /recovery

WORKDIR /app

# Dependencies first, in their own layer: rebuilt only when pyproject.toml changes.
# (README.md* is optional: the glob lets the build work before the README exists.)
COPY pyproject.toml README.md* LICENSE ./
RUN mkdir -p flows sinks \
    && pip install . \
    && pip uninstall --yes es-sink \
    && rm -rf build ./*.egg-info

# The project itself (no dev extras); .dockerignore keeps tests, caches and venvs out.
# `python -m bytewax.run flows.es_sink` imports flows/ and sinks/ from /app (the working
# directory comes first on sys.path), which the app user cannot write and where
# PYTHONDONTWRITEBYTECODE forbids caching: compiled here, once, rather than at every start
# (~0.1 s of CPU per process, and the flow restarts itself when partitions are added).
COPY . .
RUN pip install --no-deps . \
    && python -m compileall -q flows sinks \
    && rm -rf build ./*.egg-info \
    && chmod 0755 deploy/entrypoint.sh

USER app

# BYTEWAX_DATAFLOW_API_PORT (metrics at /metrics when BYTEWAX_DATAFLOW_API_ENABLED=true).
EXPOSE 3030

ENTRYPOINT ["/app/deploy/entrypoint.sh"]
