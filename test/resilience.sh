#!/usr/bin/env bash
# test/resilience.sh: the resilience soak at the source material's scale,
# test/t/015_resilience.pl through the same TAP harness: 10 million events,
# faults injected into state, map, reduce and retirement at 1%, 2%, 2% and
# 2%, drain workers killed with SIGKILL and the server stopped with
# -m immediate during the load.  It ends with a line of figures: events/s, faults injected, kills
# survived and the verdict.  CI runs the same test sized down (its defaults).
# Run it as root (it installs what is missing, builds and installs the
# extension, and runs the test as the postgres OS user).
#
#   bash test/resilience.sh [EVENTS [KILLS [RESTARTS]]]
set -euo pipefail
cd "$(dirname "$0")/.."
bash test/deps.sh
make -s
make -s install >/dev/null
EXACTONCE_SOAK_EVENTS=${1:-10000000} \
	EXACTONCE_SOAK_KILLS=${2:-20} \
	EXACTONCE_SOAK_RESTARTS=${3:-5} \
	EXACTONCE_SOAK_FAULTS=0.01,0.02,0.02,0.02 \
	EXACTONCE_SOAK_BATCH=10000 \
	EXACTONCE_SOAK_CHUNK=10000 \
	PG_TEST_TIMEOUT_DEFAULT=600 \
	bash test/tap.sh "${EXACTONCE_TEST_DIR:-/tmp/exactonce-resilience}" test/t/015_resilience.pl
