"""Entry point: `python -m bytewax.run flows.es_sink` (settings from the environment).

A configuration error ends the process here with one line naming the setting.
"""

from __future__ import annotations

import logging
import sys

from flows import api
from flows.api import watchdog
from flows.config import Settings
from flows.errors import ConfigError
from flows.kafka import discovery
from flows.kafka.topics import find_topics
from flows.pipeline import build_flow
from flows.runtime import collector, config_failure, lifecycle, recovery_failure, shutdown
from flows.runtime.args import run_args
from flows.runtime.version import VERSION
from sinks.elasticsearch import check_credentials

if not logging.getLogger().handlers:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # One line per HTTP request is noise at this rate; the sink logs what matters.
    logging.getLogger("elastic_transport").setLevel(logging.WARNING)
recovery_failure.install()  # a full recovery directory: one line after Bytewax's panic
config_failure.install()  # a ConfigError found mid-flow: its line, not a traceback
_run = run_args()
logging.getLogger(__name__).info(
    "es-sink %s starting: process %d of %d, %d worker(s), epoch %g s",
    VERSION,
    _run.process_id,
    _run.processes,
    _run.workers_per_process,
    _run.epoch_s,
)

try:
    _settings = Settings.load()
    # Before any client starts a thread, so that every thread inherits the blocked signals.
    shutdown.install(_settings.shutdown_timeout_s)
    _epoch_s = _run.epoch_s
    if 0 < _settings.shutdown_timeout_s < 2 * _epoch_s + 5:
        # A stop ends with the epoch it began in, or the next (flows.kafka.source): a shorter
        # timeout cuts short a healthy stop and exits 1.
        logging.getLogger(__name__).warning(
            "SHUTDOWN_TIMEOUT_S=%gs is less than two epochs (-s %g) plus 5 s: a stop may "
            "exit 1 although Elasticsearch and Kafka answer",
            _settings.shutdown_timeout_s,
            _epoch_s,
        )
    flow = build_flow(_settings)
    api.serve(_settings)  # first, so /health/ready can say what the checks below wait for
    # This module is the app's entry point, so it may ask Kafka before Bytewax starts: a
    # missing topic or an unreachable broker is then one clear line, not a worker panic.
    # VERSION=offset on a topic that got partitions or was recreated: refused here too.
    # Partitions added to a topic are found here too, before any partition reads.
    discovery.check_start(_settings, find_topics(_settings))
    check_credentials(_settings.es_connection)  # the sink's client, shared
except ConfigError as _e:
    sys.exit(config_failure.line(_e))
lifecycle.install(_settings)  # the stop's last line; a halt's reason after the traceback

collector.collect_on_a_clock(_settings.gc_interval_s, _settings.gc_interval_max_s)
watchdog.watch(_settings, run_args())
