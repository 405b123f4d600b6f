#!/usr/bin/env bash
# test/bench/distributed.sh [EVENTS]: the cost of the routing layer of a
# distributed pipeline (exactonce_forward), on this machine.  Four throwaway
# clusters (tools/cluster.sh): a coordinator, two nodes, and one more node
# alone.  The same events (tools/producer --output, default 500,000) go
#   1. into a pipeline on the single node (COPY into its queue);
#   2. through the coordinator into the two nodes (COPY into the
#      coordinator's ingest, which routes each event by the hash of its key
#      and sends each node its events in one COPY); 2c. what that COPY
#      costs the coordinator's backend, and the whole machine, routed by
#      key and parsed there (exactonce.route_copy on and off), into paused
#      nodes; 2b. the same
#      with one INSERT ... SELECT;
#   3. straight into the two nodes, each getting the keys of its hash
#      partition, two COPYs at once;
# each with the workers draining as the events arrive, timed from the start
# of the COPY to every event applied, on a fresh pipeline: 1, 2 and 3 after
# a warm-up run of each, in ROUNDS rounds (default 3), and their medians;
# then
#   4. a quarter of the keys, (4, 1), moved from node2 to node1 with
#      exactonce.move_keys(), timed;
#   5. a sixteenth of them, (16, 0), moved from node1 to node2 while two
#      pgbench clients insert through the coordinator (100 new keys per
#      statement): the move's duration, how long its switch held the
#      coordinator (from the server's log), and the producers' statement
#      latencies during it and outside it.
# Each run must end with aggregates equal to the producer's truth.  All
# clusters share the machine's cores.  CONF, a line for every cluster's
# postgresql.conf ("exactonce.queue_copy = off").
# Run as root or as the postgres OS user, after "make install".
set -euo pipefail
cd "$(dirname "$0")/../.."

EVENTS=${1:-500000}
ROUNDS=${ROUNDS:-3}
BASE=/tmp/exactonce-dist
PORT0=55480
DIMS="ARRAY['risk_type', 'region', 'trade_desk']"
FAILED=0

now() { date +%s.%N; }
psql_on() { local dir=$1 port=$2; shift 2; PGHOST=$dir PGPORT=$port psql -X -q -At -v ON_ERROR_STOP=1 -U postgres -d postgres "$@"; }

rm -rf "$BASE"
mkdir -p "$BASE"
[ "$(id -u)" = 0 ] && chown postgres: "$BASE"
make -s -C tools producer >/dev/null
tools/producer --events "$EVENTS" --output "$BASE/events.copy" --truth-file "$BASE/truth.copy" --quiet
chmod a+r "$BASE"/*.copy

names=(coordinator node1 node2 single)
for i in 0 1 2 3; do
	bash tools/cluster.sh start "$BASE/${names[$i]}" $((PORT0 + i)) "max_prepared_transactions = 10" "${CONF:-}"
done
trap 'for n in "${names[@]}"; do bash tools/cluster.sh stop "$BASE/$n" immediate; done' EXIT

for i in 1 2 3; do
	psql_on "$BASE/${names[$i]}" $((PORT0 + i)) -c "CREATE EXTENSION exactonce" >/dev/null
done
psql_on "$BASE/single" $((PORT0 + 3)) -c "SET client_min_messages = warning" \
	-c "SELECT exactonce.create_pipeline('trades', $DIMS)" >/dev/null
C=("$BASE/coordinator" $PORT0)
psql_on "${C[@]}" >/dev/null <<SQL
CREATE EXTENSION exactonce;
CREATE EXTENSION postgres_fdw;
CREATE SERVER node1 FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '$BASE/node1', port '$((PORT0 + 1))', dbname 'postgres');
CREATE SERVER node2 FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '$BASE/node2', port '$((PORT0 + 2))', dbname 'postgres');
CREATE USER MAPPING FOR postgres SERVER node1 OPTIONS (user 'postgres');
CREATE USER MAPPING FOR postgres SERVER node2 OPTIONS (user 'postgres');
SET client_min_messages = warning;
SELECT exactonce.create_distributed_pipeline('dtrades', $DIMS, ARRAY['node1', 'node2']::name[]);
CREATE TABLE truth (risk_type text, region text, trade_desk text, level integer, total numeric, keys bigint);
COPY truth FROM '$BASE/truth.copy';
CREATE TABLE events (key text COLLATE "C", version bigint, value numeric, risk_type text, region text,
	trade_desk text, deleted boolean, event_time timestamptz);
COPY events FROM '$BASE/events.copy';
COPY (SELECT * FROM events WHERE satisfies_hash_partition('dtrades.ingest'::regclass, 2, 0, key))
	TO '$BASE/events0.copy';
COPY (SELECT * FROM events WHERE satisfies_hash_partition('dtrades.ingest'::regclass, 2, 1, key))
	TO '$BASE/events1.copy';
SQL

# drained PIPELINE: wait until every node in NODES (directory, port, ...) has
# applied what it was sent: nothing queued or staged
drained() {
	local name=$1 i all
	while :; do
		all=t
		for ((i = 0; i < ${#NODES[@]}; i += 2)); do
			[ "$(psql_on "${NODES[i]}" "${NODES[i + 1]}" -c "SELECT queued = 0 AND staged = 0 FROM exactonce.pipelines WHERE name = '$name'")" = t ] || all=f
		done
		[ "$all" = t ] && return 0
		sleep 0.05
	done
}

# report LABEL T0 T1 DIFF KEY: a result line; RATE_KEY keeps the rate
report() {
	local label=$1 t0=$2 t1=$3 diff=$4
	local rate
	rate=$(awk -v n="$EVENTS" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", n / (b - a) }')
	printf '%-58s %10s events/s  %s\n' "$label" "$rate" "$([ "$diff" = 0 ] && echo PASS || echo "FAIL: $diff cells differ")"
	[ "$diff" = 0 ] || FAILED=1
	eval "RATE_$5=$rate"
}

truth_diff_sql() {	# the cells of AGG that differ from the truth, both ways
	echo "SELECT count(*) FROM ((SELECT risk_type, region, trade_desk, level, total, keys FROM $1 EXCEPT ALL SELECT * FROM truth)
	 UNION ALL (SELECT * FROM truth EXCEPT ALL SELECT risk_type, region, trade_desk, level, total, keys FROM $1)) d"
}

echo "== $EVENTS events, $(nproc) cores, 4 clusters on this machine"

psql_on "$BASE/single" $((PORT0 + 3)) -c "CREATE TABLE truth (risk_type text, region text, trade_desk text, level integer, total numeric, keys bigint)" \
	-c "COPY truth FROM '$BASE/truth.copy'"
S=("$BASE/single" $((PORT0 + 3)))
N1=("$BASE/node1" $((PORT0 + 1))); N2=("$BASE/node2" $((PORT0 + 2)))
COPY_COLS="(key, version, value, risk_type, region, trade_desk, deleted, event_time)"

# fresh pipelines for each run, so that none drains onto what another left
recreate() {
	psql_on "${C[@]}" -c "SET client_min_messages = warning" -c "SELECT exactonce.drop_pipeline('dtrades', force => true)" \
		-c "SELECT exactonce.create_distributed_pipeline('dtrades', $DIMS, ARRAY['node1', 'node2']::name[])" >/dev/null
}
recreate_single() {
	psql_on "${S[@]}" -c "SET client_min_messages = warning" -c "SELECT exactonce.drop_pipeline('trades', force => true)" \
		-c "SELECT exactonce.create_pipeline('trades', $DIMS)" >/dev/null
}

# steps 1-3, each on a fresh pipeline, timed from the start of the COPY to
# every event applied
run_single() {
	recreate_single
	t0=$(now)
	psql_on "${S[@]}" -c "COPY trades.ingest $COPY_COLS FROM '$BASE/events.copy'"
	NODES=("${S[@]}"); drained trades
	t1=$(now)
	report "1. one node: COPY into its queue, drained$1" "$t0" "$t1" "$(psql_on "${S[@]}" -c "$(truth_diff_sql trades.aggregates)")" single
}
run_coordinator() {
	recreate
	t0=$(now)
	psql_on "${C[@]}" -c "COPY dtrades.ingest $COPY_COLS FROM '$BASE/events.copy'"
	NODES=("${N1[@]}" "${N2[@]}"); drained dtrades
	t1=$(now)
	report "2. two nodes, through the coordinator, COPY$1" "$t0" "$t1" "$(psql_on "${C[@]}" -c "$(truth_diff_sql dtrades.aggregates)")" coordinator
}
run_direct() {
	recreate
	t0=$(now)
	psql_on "${N1[@]}" -c "COPY dtrades.ingest $COPY_COLS FROM '$BASE/events0.copy'" &
	psql_on "${N2[@]}" -c "COPY dtrades.ingest $COPY_COLS FROM '$BASE/events1.copy'"
	wait
	NODES=("${N1[@]}" "${N2[@]}"); drained dtrades
	t1=$(now)
	report "3. two nodes, each sent its keys directly$1" "$t0" "$t1" "$(psql_on "${C[@]}" -c "$(truth_diff_sql dtrades.aggregates)")" direct
}
median() { tr ' ' '\n' | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# A warm-up of each path, not counted: the first run on a fresh cluster
# faults in its shared buffers and caches, which took the first COPY
# through the coordinator to 0.41x of the direct feed where the same run,
# warm, gave 0.83x.  Then ROUNDS rounds in turn, and their medians.
run_single " (warm-up)"; run_coordinator " (warm-up)"; run_direct " (warm-up)"
all_single="" all_coordinator="" all_direct=""
for r in $(seq "$ROUNDS"); do
	run_single ", round $r"; all_single="$all_single $RATE_single"
	run_coordinator ", round $r"; all_coordinator="$all_coordinator $RATE_coordinator"
	run_direct ", round $r"; all_direct="$all_direct $RATE_direct"
done
RATE_single=$(echo $all_single | median)
RATE_coordinator=$(echo $all_coordinator | median)
RATE_direct=$(echo $all_direct | median)
printf '%-58s %10s events/s\n' "1. one node, median" "$RATE_single" "2. through the coordinator, median" "$RATE_coordinator" \
	"3. directly, median" "$RATE_direct"

# 2c. what the coordinator's backend spends on that COPY: routed by key
# (exactonce.route_copy, the default) and parsed there, into paused nodes
psql_on "${C[@]}" -c "SELECT exactonce.pause('dtrades')" >/dev/null
machine() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 }' /proc/stat; }
for mode in on off; do
	m0=$(machine)
	ticks=$(psql_on "${C[@]}" <<SQL
SELECT pg_backend_pid() AS pid \gset
\setenv BPID :pid
SET exactonce.route_copy = $mode;
COPY dtrades.ingest (key, version, value, risk_type, region, trade_desk, deleted, event_time) FROM '$BASE/events.copy';
\! awk '{ print \$14 + \$15 }' /proc/\$BPID/stat
SQL
	)
	m1=$(machine)
	printf '%-58s %10s us of CPU per event (the machine: %s)\n' "2c. its coordinator backend, exactonce.route_copy = $mode" \
		"$(awk -v t="$ticks" -v hz="$(getconf CLK_TCK)" -v n="$EVENTS" 'BEGIN { printf "%.2f", t / hz / n * 1e6 }')" \
		"$(awk -v a="$m0" -v b="$m1" -v hz="$(getconf CLK_TCK)" -v n="$EVENTS" 'BEGIN { printf "%.2f", (b - a) / hz / n * 1e6 }')"
done

# 2b. through the coordinator with INSERT ... SELECT
recreate
t0=$(now)
psql_on "${C[@]}" -c "INSERT INTO dtrades.ingest (key, version, value, risk_type, region, trade_desk, deleted, event_time) SELECT * FROM events"
drained dtrades
t1=$(now)
report "2b. two nodes, through the coordinator, INSERT ... SELECT" "$t0" "$t1" "$(psql_on "${C[@]}" -c "$(truth_diff_sql dtrades.aggregates)")" batched

# 4. a quarter (of what 2b left) of the keys moved from node2 to node1
t0=$(now)
moved=$(psql_on "${C[@]}" -c "SELECT exactonce.move_keys('dtrades', 4, 1, 'node1')")
t1=$(now)
diff=$(psql_on "${C[@]}" -c "$(truth_diff_sql dtrades.aggregates)")
printf '%-58s %10s keys in %.2f s   %s\n' "4. move_keys('dtrades', 4, 1, 'node1')" "$moved" \
	"$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" "$([ "$diff" = 0 ] && echo PASS || echo "FAIL: $diff cells differ")"
[ "$diff" = 0 ] || FAILED=1

# 5. a move while producers insert through the coordinator
psql_on "${C[@]}" >/dev/null <<SQL
CREATE TABLE load_log (key text, version bigint, value numeric, risk_type text, region text, trade_desk text);
CREATE SEQUENCE load_seq;
SQL
cp test/bench/coordinator-load.sql "$BASE/load.sql"
( cd "$BASE" && PGHOST="${C[0]}" PGPORT="${C[1]}" pgbench -n -U postgres -c 2 -T 10 -f load.sql -l --log-prefix=load postgres \
	>"$BASE/pgbench.out" 2>&1 ) &
LOAD=$!
sleep 4
t0=$(now)
moved=$(psql_on "${C[@]}" -c "SELECT exactonce.move_keys('dtrades', 16, 0, 'node2')")
t1=$(now)
wait $LOAD
NODES=("${N1[@]}" "${N2[@]}"); drained dtrades
# the truth now: the producer's events and the rows pgbench logged
psql_on "${C[@]}" >/dev/null <<SQL
CREATE TABLE truth_load AS SELECT risk_type, region, trade_desk, level, sum(total) AS total, sum(keys)::bigint AS keys FROM (
	SELECT * FROM truth
	UNION ALL
	SELECT risk_type, region, trade_desk, 3 - (GROUPING(risk_type) + GROUPING(region) + GROUPING(trade_desk)), sum(value), count(*)
	  FROM load_log GROUP BY ROLLUP (risk_type, region, trade_desk)) u
GROUP BY 1, 2, 3, 4;
DROP TABLE truth;
ALTER TABLE truth_load RENAME TO truth;
SQL
diff=$(psql_on "${C[@]}" -c "$(truth_diff_sql dtrades.aggregates)")
# pgbench's log: client, transaction, latency (us), script, end time (s, us)
# a statement in flight while the move ran waited for it, at worst
cat "$BASE"/load.* | awk -v a="$t0" -v b="$t1" '{ end = $5 + $6 / 1e6; start = end - $3 / 1e6
	print (end >= a && start <= b) ? "in" : "out", $3 }' >"$BASE/latencies"
n_all=$(wc -l <"$BASE/latencies")
n_in=$(grep -c '^in' "$BASE/latencies" || true)
held=$(awk '$1 == "in" { print $2 }' "$BASE/latencies" | sort -n | tail -1 | awk '{ printf "%.1f", $1 / 1000 }')
p99_out=$(awk '$1 == "out" { print $2 }' "$BASE/latencies" | sort -n |
	awk '{ v[NR] = $1 } END { i = int(NR * 0.99); if (i < 1) i = 1; printf "%.1f", v[i] / 1000 }')
printf '%-58s %10s keys in %.2f s   %s\n' "5. move_keys('dtrades', 16, 0, 'node2') under load" "$moved" \
	"$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" "$([ "$diff" = 0 ] && echo PASS || echo "FAIL: $diff cells differ")"
echo "   producers: $n_all statements of 100 events; the $n_in during the move took at most $held ms; p99 outside it $p99_out ms"
# 1.13 on: the server logs how long the switch held the coordinator
switch=$(grep -o 'The switch held .* for [0-9]* ms' "$BASE/coordinator/server.log" | tail -1 | grep -o '[0-9]* ms' || true)
[ -n "$switch" ] && echo "   the switch held the coordinator's producers and readers for $switch (its log)"
[ "$diff" = 0 ] || FAILED=1

echo "ratios: through the coordinator / one node $(awk -v a="$RATE_coordinator" -v b="$RATE_single" 'BEGIN { printf "%.2f", a / b }') (COPY)," \
	"$(awk -v a="$RATE_batched" -v b="$RATE_single" 'BEGIN { printf "%.2f", a / b }') (INSERT);" \
	"direct / one node $(awk -v a="$RATE_direct" -v b="$RATE_single" 'BEGIN { printf "%.2f", a / b }');" \
	"through the coordinator / direct $(awk -v a="$RATE_coordinator" -v b="$RATE_direct" 'BEGIN { printf "%.2f", a / b }')"
exit $FAILED
