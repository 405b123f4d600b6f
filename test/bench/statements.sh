#!/usr/bin/env bash
# test/bench/statements.sh: what a producer's statement costs the backend
# that takes it, apart from its rows.  One throwaway cluster
# (tools/cluster.sh); a pipeline of SHARDS shards (default 4), paused, takes
# the same events (tools/producer, EVENTS, default 500,000) by COPY in
# statements of each size in SIZES (default "10000 2500 1000"), each its own
# transaction and then all in one, each run into the pipeline made anew,
# and into a plain table (PostgreSQL's own COPY); it prints the backend's
# CPU per event (from /proc).  What grows as the statements shrink is what
# each statement and each commit cost apart from their rows: a
# coordinator that splits a producer's statement among its nodes
# multiplies both on every node.  SETTINGS (default none), settings
# name=value separated by spaces, each run in turn on the same chunks:
#   SETTINGS="exactonce.queue_copy=on exactonce.queue_copy=off" bash test/bench/statements.sh
# Run as root or as the postgres OS user, after "make install".
set -euo pipefail
cd "$(dirname "$0")/../.."

EVENTS=${EVENTS:-500000}
SHARDS=${SHARDS:-4}
SIZES=${SIZES:-10000 2500 1000}
SETTINGS=${SETTINGS:--}
B=/tmp/exactonce-statements
P=55590
q() { PGHOST=$B/c PGPORT=$P psql -X -q -At -v ON_ERROR_STOP=1 -U postgres -d postgres "$@"; }

rm -rf "$B"
mkdir -p "$B"
[ "$(id -u)" = 0 ] && chown postgres: "$B"
make -s -C tools producer >/dev/null
tools/producer --events "$EVENTS" --output "$B/events.copy" --quiet >/dev/null
bash tools/cluster.sh start "$B/c" $P >/dev/null
trap 'bash tools/cluster.sh stop "$B/c" immediate >/dev/null' EXIT
q -c "CREATE EXTENSION exactonce" >/dev/null
# fresh() makes the pipeline anew, empty and paused
fresh() {
	q -c "SET client_min_messages = warning" \
		-c "SELECT exactonce.drop_pipeline('t', force => true) FROM exactonce.pipeline WHERE name = 't'" \
		-c "SELECT exactonce.create_pipeline('t', ARRAY['risk_type', 'region', 'trade_desk'], shards => $SHARDS)" \
		-c "SELECT exactonce.pause('t')" >/dev/null
}
# a first load, so that every run finds the buffers it fills touched before
fresh
q -c "COPY t.ingest (key, version, value, risk_type, region, trade_desk, deleted, event_time) FROM '$B/events.copy'"

# run TABLE TX: the chunks by COPY into TABLE, each its own transaction
# (TX each) or all in one; prints the backend's CPU per event
run() {
	{
		echo 'SELECT pg_backend_pid() AS pid \gset'
		echo '\setenv BPID :pid'
		[ "$2" = one ] && echo 'BEGIN;'
		for f in "$B"/chunk.*; do
			echo "COPY $1 (key, version, value, risk_type, region, trade_desk, deleted, event_time) FROM '$f';"
		done
		[ "$2" = one ] && echo 'COMMIT;'
		echo "\\! awk -v n=$EVENTS '{ printf \"%.2f\", (\$14 + \$15) / $(getconf CLK_TCK) / n * 1e6 }' /proc/\$BPID/stat"
	} >"$B/run.sql"
	PGOPTIONS=$([ "$3" = - ] || echo "-c $3") q -f "$B/run.sql"
}

echo "== $EVENTS events by COPY into a paused pipeline of $SHARDS shards, and into a plain table; the backend's CPU per event"
for size in $SIZES; do
	rm -f "$B"/chunk.*
	split -l "$size" -d -a 5 "$B/events.copy" "$B/chunk."
	chmod a+r "$B"/chunk.*
	for tx in each one; do
		for set in $SETTINGS; do
			fresh
			printf 'statements of %6d rows, %-32s %s us%s\n' "$size" \
				"$([ $tx = each ] && echo "each its own transaction:" || echo "all in one transaction:")" \
				"$(run t.ingest $tx "$set")" "$([ "$set" = - ] || echo "  ($set)")"
		done
	done
	q -c "DROP TABLE IF EXISTS plain" -c "CREATE TABLE plain (key text, version bigint, value numeric, risk_type text,
		region text, trade_desk text, deleted boolean, event_time timestamptz)" 2>/dev/null
	printf 'statements of %6d rows, %-32s %s us\n' "$size" "a plain table, all in one:" "$(run plain one -)"
done
