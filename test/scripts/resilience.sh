#!/usr/bin/env bash
# The resilience test of the source material, and then some: a trade-risk
# stream with duplicates, modifications that move trades, late stale versions
# and tombstones is loaded at least once (a chunk whose COPY failed is sent
# again), while faults are injected into every stage, drain workers are
# killed with SIGKILL and the server is stopped with -m immediate.  The
# aggregates must then equal an oracle computed from the generated events,
# the accounting identity must hold, and the queue and ledger must be empty.
#
# Sized for CI by default; test/resilience.sh runs it at full scale.
#   EVENTS (200000) KILLS (6) RESTARTS (2) FAULTS (0.05,0.05,0.05)
#   CHUNK (10000 events per COPY) BATCH (2000, exactonce.batch_size)
set -u
. "$(dirname "$0")/lib.sh"
DB=${RESILIENCE_DB:-exactonce_test}
EVENTS=${EVENTS:-200000}
KILLS=${KILLS:-6}
RESTARTS=${RESTARTS:-2}
FAULTS=${FAULTS:-0.05,0.05,0.05}
CHUNK=${CHUNK:-10000}
BATCH=${BATCH:-2000}
IFS=, read -r F_STATE F_MAP F_REDUCE <<<"$FAULTS"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# the stream: trades get versions 0..4, content a function of (trade,
# version); 5% of later versions are tombstones; 10% of events are sent twice;
# everything in random order, so late versions arrive after newer ones
trades=$((EVENTS / 5))
psql -X -q -d $DB -v ON_ERROR_STOP=1 >/dev/null <<SQL || { ok 1 "generate the stream"; exit 1; }
SET client_min_messages = warning;
SELECT exactonce.drop_pipeline('res', true) FROM exactonce.pipeline WHERE name = 'res';
SELECT exactonce.create_pipeline('res', ARRAY['risk_type', 'region', 'trade_desk']);
DROP TABLE IF EXISTS res_produced;
CREATE TABLE res_produced AS
SELECT 't' || t AS key, v::bigint AS version,
       round((hashint8(t * 8 + v) % 2000000)::numeric / 100, 2) AS value,
       (ARRAY['Delta','Gamma','Vega','Theta','Rho'])[1 + (t + v * (t % 2)) % 5] AS risk_type,
       (ARRAY['AMER','EMEA','APAC'])[1 + (t + v / 3) % 3] AS region,
       (ARRAY['FXSpot','FXOption','Rates','Credit','Equity','Commodities'])[1 + (t / 7 + v) % 6] AS trade_desk,
       v > 0 AND abs(hashint8(t * 31 + v)) % 20 = 0 AS deleted
FROM generate_series(1, $trades) t, generate_series(0, 4) v;
SQL
psql -X -q -A -t -d $DB -c "SELECT setseed(0.3)" -c "COPY (SELECT key, version, value, risk_type, region, trade_desk, deleted
      FROM (SELECT * FROM res_produced UNION ALL SELECT * FROM res_produced WHERE random() < 0.1) s
      ORDER BY random()) TO STDOUT" | grep -v '^$' >"$WORK/stream.tsv"
sent=$(wc -l <"$WORK/stream.tsv")
split -l "$CHUNK" -d -a 5 "$WORK/stream.tsv" "$WORK/chunk."
chunks=$(ls "$WORK"/chunk.* | wc -l)

set_faults() {
	psql -X -q -d postgres -c "ALTER SYSTEM SET exactonce.batch_size = $4" \
		-c "ALTER SYSTEM SET exactonce.fault_state = $1" \
		-c "ALTER SYSTEM SET exactonce.fault_map = $2" \
		-c "ALTER SYSTEM SET exactonce.fault_reduce = $3" -c "SELECT pg_reload_conf()" >/dev/null
}
faults_now() {
	q $DB "SELECT coalesce(sum(injected), 0) FROM exactonce.faults_injected()"
}
set_faults "$F_STATE" "$F_MAP" "$F_REDUCE" "$BATCH"

# the load: each chunk is sent until one COPY of it commits; only a server
# that went away is a reason to send it again
send_chunk() {
	local out
	for _ in $(seq 1 50); do
		out=$(psql -X -q -d $DB -c "\\copy res.ingest (key, version, value, risk_type, region, trade_desk, deleted) FROM '$1'" 2>&1) && return 0
		case "$out" in
		*"server closed"* | *"terminat"* | *"connect"* | *"shutting down"* | *"starting up"* | *"recovery mode"*) ;;
		*) echo "# chunk $1: $out" >&2; return 1 ;;
		esac
		resends=$((resends + 1))
		wait_ready
	done
	return 1
}
faults=0
ledger_max=0
kills=0
restarts=0
resends=0
start=$(date +%s.%N)
i=0
for f in "$WORK"/chunk.*; do
	i=$((i + 1))
	send_chunk "$f" || { ok 1 "chunk $i was loaded"; exit 1; }
	rows=$(q $DB "SELECT count(*) FROM res.ledger" 2>/dev/null || echo 0)
	[ "${rows:-0}" -gt "$ledger_max" ] && ledger_max=$rows
	if [ "$KILLS" -gt 0 ] && [ $((i % (chunks / KILLS + 1))) -eq 0 ] && [ "$kills" -lt "$KILLS" ]; then
		pid=$(q $DB "SELECT pid FROM pg_stat_activity WHERE backend_type = 'exactonce drain' AND datname = current_database() ORDER BY random() LIMIT 1")
		now_faults=$(faults_now 2>/dev/null || echo 0)
		if [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; then
			kills=$((kills + 1))
			faults=$((faults + now_faults))	# shared counters restart with the server
			wait_ready
		fi
	fi
	if [ "$RESTARTS" -gt 0 ] && [ $((i % (chunks / RESTARTS + 1))) -eq $((chunks / RESTARTS / 2)) ] && [ "$restarts" -lt "$RESTARTS" ]; then
		faults=$((faults + $(faults_now 2>/dev/null || echo 0)))
		pg_ctl_as_postgres -m immediate -w stop >/dev/null
		pg_ctl_as_postgres -w -l "$EXACTONCE_TEST_DIR/server.log" start >/dev/null
		wait_ready
		restarts=$((restarts + 1))
	fi
done
loaded=$(date +%s.%N)

# drain: wait (bounded by the size) until queue and staging are empty
bound=$((120 + EVENTS / 5000))
drained="SELECT queued = 0 AND staged = 0 AND pg_relation_size('res.ingest_0') + pg_relation_size('res.ingest_1') = 0 FROM exactonce.pipelines WHERE name = 'res'"
for _ in $(seq 1 $((bound * 10))); do
	[ "$(q $DB "$drained" 2>/dev/null)" = t ] && break
	sleep 0.1
done
done_at=$(date +%s.%N)
faults=$((faults + $(faults_now)))
set_faults 0 0 0 10000
psql -X -q -d postgres -c "ALTER SYSTEM RESET exactonce.batch_size" -c "SELECT pg_reload_conf()" >/dev/null

is "$(q $DB "$drained")" t "the queue and the staged batches are empty ($sent events in $chunks chunks, $resends chunks sent again)"
is "$(q $DB "SELECT count(*) FROM (
  (SELECT risk_type, region, trade_desk, level, total, keys FROM res.aggregates
   EXCEPT
   SELECT risk_type, region, trade_desk, 3 - (GROUPING(risk_type) + GROUPING(region) + GROUPING(trade_desk)), sum(value), count(*)
   FROM (SELECT DISTINCT ON (key) * FROM res_produced ORDER BY key, version DESC) s WHERE NOT deleted
   GROUP BY ROLLUP (risk_type, region, trade_desk))
  UNION ALL
  (SELECT risk_type, region, trade_desk, 3 - (GROUPING(risk_type) + GROUPING(region) + GROUPING(trade_desk)), sum(value), count(*)
   FROM (SELECT DISTINCT ON (key) * FROM res_produced ORDER BY key, version DESC) s WHERE NOT deleted
   GROUP BY ROLLUP (risk_type, region, trade_desk)
   EXCEPT
   SELECT risk_type, region, trade_desk, level, total, keys FROM res.aggregates)) m")" 0 \
	"aggregates equal the oracle after $faults injected faults, $kills worker kills and $restarts immediate shutdowns"
is "$(q $DB "SELECT ingested = applied + duplicates + stale + dead_lettered AND dead_lettered = 0 AND ingested >= $sent FROM exactonce.pipelines WHERE name = 'res'")" t "accounting identity holds, nothing dead-lettered, every event ingested"
# the ledger keeps the tokens of the two queue partitions at most: its
# bound is set by how far the workers lag, not by the volume
is "$(q $DB "SELECT count(*) FROM res.ledger")" 0 "the ledger is empty once everything is drained"
ok $([ "$ledger_max" -le $((2 * EVENTS / BATCH / 4 + 50)) ] && echo 0 || echo 1) "the ledger stayed bounded during the load (at most $ledger_max rows)"
ok $([ "$faults" -gt 0 ] && echo 0 || echo 1) "faults were injected ($faults)"

secs=$(echo "$done_at - $start" | bc)
echo "# resilience: $sent events (${EVENTS} distinct-ish) loaded in $(echo "$loaded - $start" | bc) s, exact aggregates after $secs s ($(echo "$sent / $secs" | bc) events/s end to end); ledger at most $ledger_max rows; faults injected $faults, kills survived $kills, immediate shutdowns $restarts, chunks resent $resends"
psql -X -q -d $DB -c "SET client_min_messages = warning" -c "SELECT exactonce.drop_pipeline('res', true)" -c "DROP TABLE res_produced" >/dev/null
