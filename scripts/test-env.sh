# Sourced by scripts/test: the ports and directories of one run, and the lock that keeps a
# second run off them (docs/testing.md, "Two copies on one host").
#
# Every port is its default plus TEST_PORT_OFFSET (0) unless its own variable names it. The
# directory of the nodes' data (TEST_STACK_DIR) defaults to /var/tmp/es-sink-test on the
# default ports and to /var/tmp/es-sink-test-<Kafka port> on others, so a run on other ports
# never cleans, starts or stops the nodes of a run on the defaults. Nodes of the system tier
# and the compatibility nodes live in directories named after it (<dir>-fault, <dir>-es8, ...).
# shellcheck shell=bash

test_port() {  # default [variable]: the variable's value, else the default plus the offset
  local value="${2:+${!2:-}}"
  echo "${value:-$(($1 + ${TEST_PORT_OFFSET:-0}))}"
}

# The suite's stack.
export KAFKA_PORT="$(test_port 19092 TEST_KAFKA_PORT)"
export KAFKA_CONTROLLER_PORT="$(test_port 19093 TEST_KAFKA_CONTROLLER_PORT)"
export ES_PORT="$(test_port 19200 TEST_ES_PORT)"
export ES_TRANSPORT_PORT="$(test_port 19300 TEST_ES_TRANSPORT_PORT)"
export REGISTRY_PORT="$(test_port 19081 TEST_REGISTRY_PORT)"
if [ "$KAFKA_PORT" = 19092 ] && [ "$ES_PORT" = 19200 ]; then
  export STACK_DIR="${TEST_STACK_DIR:-/var/tmp/es-sink-test}"
else
  export STACK_DIR="${TEST_STACK_DIR:-/var/tmp/es-sink-test-$KAFKA_PORT}"
fi
export ES_SINK_TEST_KAFKA="127.0.0.1:$KAFKA_PORT"
export ES_SINK_TEST_ES="http://127.0.0.1:$ES_PORT"
export ES_SINK_TEST_REGISTRY="http://127.0.0.1:$REGISTRY_PORT"
export ES_SINK_TEST_STACK_DIR="$STACK_DIR"

# The compatibility nodes (scripts/test starts them beside the integration tier).
TEST_ES8_PORT="$(test_port 19210 TEST_ES8_PORT)"
TEST_ES8_TRANSPORT_PORT="$(test_port 19310 TEST_ES8_TRANSPORT_PORT)"
TEST_OPENSEARCH_PORT="$(test_port 19220 TEST_OPENSEARCH_PORT)"
TEST_OPENSEARCH_TRANSPORT_PORT="$(test_port 19320 TEST_OPENSEARCH_TRANSPORT_PORT)"
TEST_OPENSEARCH2_PORT="$(test_port 19240 TEST_OPENSEARCH2_PORT)"
TEST_OPENSEARCH2_TRANSPORT_PORT="$(test_port 19340 TEST_OPENSEARCH2_TRANSPORT_PORT)"

# The system tier's own nodes (their tests read these; transport ports are 100 above).
export ES_SINK_TEST_FAULT_ES_PORT="$(test_port 19201 ES_SINK_TEST_FAULT_ES_PORT)"
export ES_SINK_TEST_FAULT_KAFKA_PORT="$(test_port 19094 ES_SINK_TEST_FAULT_KAFKA_PORT)"
export ES_SINK_TEST_SECURE_KAFKA_PORT="$(test_port 19096 ES_SINK_TEST_SECURE_KAFKA_PORT)"
export ES_SINK_TEST_SECURE_ES_PORT="$(test_port 19250 ES_SINK_TEST_SECURE_ES_PORT)"
export ES_SINK_TEST_ROLLING_ES_PORT="$(test_port 19270 ES_SINK_TEST_ROLLING_ES_PORT)"
export ES_SINK_TEST_SOAK_ES_PORT="$(test_port 19280 ES_SINK_TEST_SOAK_ES_PORT)"
export ES_SINK_TEST_OUTAGE_REGISTRY_PORT="$(test_port 19082 ES_SINK_TEST_OUTAGE_REGISTRY_PORT)"
export ES_SINK_TEST_CONNECT_PORT="$(test_port 19290 ES_SINK_TEST_CONNECT_PORT)"

lock_stack_dir() {
  # One run per STACK_DIR at a time: a second one would clean, stop or run against the
  # first one's nodes. The lock goes with this shell (and the jobs it starts), not the
  # servers, which scripts/stack starts with no inherited descriptors.
  local lock="$STACK_DIR.lock"
  mkdir -p "$(dirname "$STACK_DIR")"
  exec {test_lock_fd}>>"$lock"
  if ! flock -n "$test_lock_fd"; then
    echo "scripts/test: another run (pid $(cat "$lock" 2>/dev/null || echo '?')) uses" \
      "$STACK_DIR and its ports; wait for it, or give this run other ports and" \
      "directories, e.g. TEST_PORT_OFFSET=1000 (docs/testing.md)" >&2
    exit 1
  fi
  echo "$$" >"$lock"
}
