#!/bin/sh
# Container entrypoint for the es-sink flow.
#
# If BYTEWAX_RECOVERY_DIRECTORY is set, initialise it once with RECOVERY_PARTITIONS
# (default 1) recovery partitions; an initialised directory (part-0.sqlite3 present) is
# left alone, so the stored snapshots and Kafka offsets survive restarts. Then replace this
# shell with `python -m bytewax.run flows.es_sink`; bytewax.run reads BYTEWAX_* settings
# (workers, recovery directory, snapshot and backup intervals) from the environment, and
# any arguments given to the container are passed on to it.
set -eu

log() {
    echo "entrypoint: $*" >&2
}

if [ -n "${BYTEWAX_RECOVERY_DIRECTORY:-}" ]; then
    recovery_dir="$BYTEWAX_RECOVERY_DIRECTORY"
    partitions="${RECOVERY_PARTITIONS:-1}"
    case "$partitions" in
        '' | *[!0-9]* | 0*)
            log "RECOVERY_PARTITIONS must be a positive whole number, got '$partitions'"
            exit 64
            ;;
    esac
    if [ -f "$recovery_dir/part-0.sqlite3" ]; then
        log "recovery directory $recovery_dir already initialised; resuming from it"
    else
        mkdir -p "$recovery_dir"
        log "initialising recovery directory $recovery_dir with $partitions partition(s)"
        python -m bytewax.recovery "$recovery_dir" "$partitions"
    fi
fi

exec python -m bytewax.run flows.es_sink "$@"
