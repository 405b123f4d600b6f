#!/usr/bin/env bash
# test/bench/stream.sh: what a live stream costs the drain workers, for
# each setting (or build of the library) given, taking turns on this
# machine.  Each run starts a throwaway cluster (tools/cluster.sh, two
# workers), makes a two-shard pipeline, and has tools/producer send EVENTS
# events (default 2,000,000 over TRADES = 400,000 keys) at full speed in
# COPY batches of BATCH (5,000) while the workers drain; timed until all
# is applied, then checked against the producer's truth.  It prints the
# events per second end to end, the CPU the two workers used (from
# /proc), the WAL bytes per event, and what became of state's rows (its
# updates, how many were HOT, the dead versions left, autovacuums, pages).
#
#   bash test/bench/stream.sh [ROUNDS] CASE...
#
# where a CASE is a line for postgresql.conf ("exactonce.batch_delay =
# 250"), a path to an exactonce.so to install for the run (the SQL scripts
# installed are the same for all; the library installed last stays), or
# "-" for neither.  Rounds take the cases in turn.  Run as root or as the
# postgres OS user, after "make install".
set -euo pipefail
cd "$(dirname "$0")/../.."

ROUNDS=1
if [[ ${1:-} =~ ^[0-9]+$ ]]; then ROUNDS=$1; shift; fi
[ $# -gt 0 ] || { sed -n '2,19p' "$0"; exit 2; }
EVENTS=${EVENTS:-2000000}
TRADES=${TRADES:-400000}
BATCH=${BATCH:-5000}
D=/tmp/exactonce-stream
P=55493
FAILED=0

. test/bench/cases.sh

make -s -C tools producer >/dev/null
trap 'bash tools/cluster.sh stop $D immediate >/dev/null 2>&1 || true' EXIT
printf "%-36s %8s %10s %12s %9s  %s\n" case seconds events/s "workers CPU" "WAL B/ev" "state: updates hot dead autovacuums pages"
for _ in $(seq "$ROUNDS"); do
	for c in "$@"; do
		case_start "$c"
		q -c "CREATE EXTENSION exactonce" -c "SET client_min_messages = warning" \
			-c "SELECT exactonce.create_pipeline('trades', ARRAY['risk_type', 'region', 'trade_desk'], shards => 2)" >/dev/null
		pids=$(worker_pids)
		c0=$(cpu "$pids")
		w0=$(q -c "SELECT pg_current_wal_lsn()")
		t0=$(date +%s.%N)
		PGHOST=$D PGPORT=$P PGUSER=postgres tools/producer --events "$EVENTS" --trades "$TRADES" --batch "$BATCH" \
			--quiet -d "dbname=postgres" -T truth >/dev/null
		until [ "$(q -c "SELECT queued = 0 AND staged = 0 FROM exactonce.pipelines WHERE name = 'trades'")" = t ]; do sleep 0.02; done
		t1=$(date +%s.%N)
		c1=$(cpu "$pids")
		sleep 0.7    # the statistics of the last transactions
		wal=$(q -c "SELECT round(pg_wal_lsn_diff(pg_current_wal_lsn(), '$w0') / $EVENTS, 1)")
		st=$(q -c "SELECT concat_ws(' ', n_tup_upd, n_tup_hot_upd, n_dead_tup, autovacuum_count, pg_relation_size(relid) / 8192)
			FROM pg_stat_user_tables WHERE relid = 'trades.state'::regclass")
		mis=$(q -c "SELECT count(*) FROM ((SELECT risk_type, region, trade_desk, level, total, keys FROM trades.aggregates
			EXCEPT ALL SELECT risk_type, region, trade_desk, level, total, keys FROM truth)
			UNION ALL (SELECT risk_type, region, trade_desk, level, total, keys FROM truth
			EXCEPT ALL SELECT risk_type, region, trade_desk, level, total, keys FROM trades.aggregates)) m")
		printf "%-36s %8.2f %10.0f %10.2f s %9s  %s\n" "$c" "$(echo "$t1 - $t0" | bc)" \
			"$(echo "$EVENTS / ($t1 - $t0)" | bc -l)" "$(echo "($c1 - $c0) / 100" | bc -l)" "$wal" "$st"
		if [ "$mis" != 0 ]; then
			echo "  NOT EXACT: $mis cells differ from the producer's truth"
			FAILED=1
		fi
		bash tools/cluster.sh stop $D immediate >/dev/null
	done
done
exit $FAILED
