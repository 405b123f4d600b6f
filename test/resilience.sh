#!/usr/bin/env bash
# test/resilience.sh: the resilience test at the source material's scale:
# 10 million events, faults injected into state, map and reduce at 1%, 2% and
# 2%, drain workers killed with SIGKILL and the server stopped with -m
# immediate during the load.  It prints events/s, faults injected, kills
# survived and the verdict.  CI runs test/scripts/resilience.sh sized down.
#
#   bash test/resilience.sh [EVENTS [KILLS [RESTARTS]]]
set -euo pipefail
cd "$(dirname "$0")/.."
EVENTS=${1:-10000000}
KILLS=${2:-20}
RESTARTS=${3:-5}
DIR=/tmp/exactonce-resilience
PORT=54350

bash test/deps.sh
make -s && make -s install >/dev/null
test/cluster.sh start "$DIR" "$PORT" "exactonce.database = 'exactonce_test'" "exactonce.workers = 2"
trap 'test/cluster.sh stop "$DIR"' EXIT
export PGHOST=$DIR PGPORT=$PORT PGUSER=postgres EXACTONCE_TEST_DIR=$DIR
createdb exactonce_test
psql -X -q -d exactonce_test -c "CREATE EXTENSION exactonce"
EVENTS=$EVENTS KILLS=$KILLS RESTARTS=$RESTARTS FAULTS=0.01,0.02,0.02 BATCH=10000 CHUNK=10000 \
	bash test/scripts/resilience.sh | tee "$DIR.out"
! grep -q "^not ok" "$DIR.out"
