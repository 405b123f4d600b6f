#!/usr/bin/env bash
# test/bench/drain-cpu.sh: what draining a backlog costs the workers, per
# event, for each setting (or build of the library) given, taking turns on
# this machine.  CPU time is steadier than a rate on a shared machine: it
# leaves out the time the workers wait for a core.  One throwaway cluster
# (tools/cluster.sh, two workers) per case and round; for each KIND a
# pipeline of SHARDS shards (default 1) is made, paused, loaded with the
# events of tools/producer (EVENTS, default 1,000,000 over TRADES =
# 200,000 keys), resumed and timed until all is applied.  It prints the
# seconds, the CPU the workers used per event (from /proc), what became of
# state (its updates, how many were HOT, its pages), and checks the
# aggregates against the producer's truth.  KINDS (default "plain
# measures minmax distinct"):
#   plain     the three dimensions only
#   measures  and measures qty = |value| and fee = value / 4 (none on every
#             third version)
#   minmax    and min and max of value and fee
#   distinct  and a distinct count of counterparty (one of 1,000 per key)
#
#   bash test/bench/drain-cpu.sh [ROUNDS] CASE...
#
# where a CASE is a line for postgresql.conf, a path to an exactonce.so to
# install for the run (the library installed last stays), "sql:STATEMENTS"
# to run once the pipeline t is made ("sql:ALTER TABLE t.state SET
# (fillfactor = 33)"), or "-" for none.  With PERF=PREFIX, each drain's
# workers are profiled (perf record -g) into PREFIX.<kind>.data.  Run as
# root or as the postgres OS user, after "make install".
set -euo pipefail
cd "$(dirname "$0")/../.."

ROUNDS=1
if [[ ${1:-} =~ ^[0-9]+$ ]]; then ROUNDS=$1; shift; fi
[ $# -gt 0 ] || { sed -n '2,28p' "$0"; exit 2; }
EVENTS=${EVENTS:-1000000}
TRADES=${TRADES:-200000}
SHARDS=${SHARDS:-1}
KINDS=${KINDS:-plain measures minmax distinct}
D=/tmp/exactonce-drain-cpu
P=55494
COLS="key, version, value, risk_type, region, trade_desk, deleted, event_time"
QTY="abs(value)"
FEE="CASE WHEN version % 3 = 0 THEN NULL ELSE value / 4 END"
CPTY="'cp' || abs(hashtext(key)) % 1000"
FAILED=0

. test/bench/cases.sh

make -s -C tools producer >/dev/null
mkdir -p $D.files
[ "$(id -u)" = 0 ] && chown postgres: $D.files
tools/producer --quiet --events "$EVENTS" --trades "$TRADES" --output $D.files/events.copy \
	--truth-state-file $D.files/truth_state.copy >/dev/null
chmod a+r $D.files/*.copy
trap 'bash tools/cluster.sh stop $D immediate >/dev/null 2>&1 || true' EXIT
printf "%-36s %-9s %8s %14s %22s  %s\n" case kind seconds "CPU us/event" "state: upd. HOT pages" exact
for _ in $(seq "$ROUNDS"); do
	for c in "$@"; do
		case_start "$c" "shared_buffers = 1GB" "max_wal_size = 8GB"
		q >/dev/null <<SQL
CREATE EXTENSION exactonce;
CREATE TABLE ev (key text, version bigint, value numeric, risk_type text, region text, trade_desk text,
	deleted boolean, event_time timestamptz);
COPY ev FROM '$D.files/events.copy';
CREATE TABLE truth_state (key text, version bigint, value numeric, risk_type text, region text,
	trade_desk text, deleted boolean);
COPY truth_state FROM '$D.files/truth_state.copy';
SQL
		pids=$(worker_pids)
		for kind in $KINDS; do
			args="" extra="" sel="" cols="" want=""
			case $kind in
			plain) ;;
			measures | minmax | distinct)
				args=", measures => ARRAY['qty', 'fee']"; extra=", qty, fee"; sel=", $QTY, $FEE"
				cols=", qty_sum, fee_sum"; want=", sum($QTY), coalesce(sum($FEE), 0)" ;;&
			minmax)
				args="$args, min_max => ARRAY['value', 'fee']"
				cols="$cols, value_min, value_max, fee_min, fee_max"; want="$want, min(value), max(value), min($FEE), max($FEE)" ;;
			distinct)
				args="$args, distinct_counts => ARRAY['counterparty']"; extra="$extra, counterparty"; sel="$sel, $CPTY"
				cols="$cols, counterparty_distinct"; want="$want, count(DISTINCT $CPTY)" ;;
			measures) ;;
			*) echo "drain-cpu.sh: no kind $kind" >&2; exit 2 ;;
			esac
			q >/dev/null <<SQL
SET client_min_messages = warning;
SELECT exactonce.drop_pipeline('t', force => true) FROM exactonce.pipeline WHERE name = 't';
SELECT exactonce.create_pipeline('t', ARRAY['risk_type', 'region', 'trade_desk'], shards => $SHARDS$args);
SELECT exactonce.pause('t');
$([[ $c == sql:* ]] && echo "${c#sql:};")
INSERT INTO t.ingest ($COLS$extra) SELECT $COLS$sel FROM ev;
CHECKPOINT;
SQL
			c0=$(cpu "$pids")
			[ -z "${PERF:-}" ] || { perf record -q -g -F 999 -p "$pids" -o "$PERF.$kind.data" >/dev/null 2>&1 & perfpid=$!; sleep 0.5; }
			t0=$(date +%s.%N)
			q -c "SELECT exactonce.resume('t')" >/dev/null
			until [ "$(q -c "SELECT queued = 0 AND staged = 0 FROM exactonce.pipelines WHERE name = 't'")" = t ]; do sleep 0.02; done
			t1=$(date +%s.%N)
			c1=$(cpu "$pids")
			[ -z "${PERF:-}" ] || { kill -INT $perfpid; wait $perfpid || true; }
			sleep 0.7    # the statistics of the last transactions
			st=$(q -c "SELECT concat_ws(' ', n_tup_upd, round(100.0 * n_tup_hot_upd / greatest(n_tup_upd, 1)) || '%',
				pg_relation_size(relid) / 8192) FROM pg_stat_user_tables WHERE relid = 't.state'::regclass")
			mis=$(q <<SQL
WITH want AS (SELECT 3 - (GROUPING(risk_type) + GROUPING(region) + GROUPING(trade_desk)) AS level,
					 risk_type, region, trade_desk, sum(value) AS total, count(*) AS keys$want
			  FROM truth_state WHERE NOT deleted GROUP BY ROLLUP (risk_type, region, trade_desk)),
	 got AS (SELECT level, risk_type, region, trade_desk, total, keys$cols FROM t.aggregates WHERE keys <> 0)
SELECT count(*) FROM ((SELECT * FROM want EXCEPT ALL SELECT * FROM got) UNION ALL
					  (SELECT * FROM got EXCEPT ALL SELECT * FROM want)) m;
SQL
)
			printf "%-36s %-9s %8.2f %14.3f %22s  %s\n" "$c" "$kind" "$(echo "$t1 - $t0" | bc)" \
				"$(echo "($c1 - $c0) * 10000 / $EVENTS" | bc -l)" "$st" "$([ "$mis" = 0 ] && echo yes || echo "NO: $mis cells differ")"
			[ "$mis" = 0 ] || FAILED=1
		done
		bash tools/cluster.sh stop $D immediate >/dev/null
	done
done
exit $FAILED
