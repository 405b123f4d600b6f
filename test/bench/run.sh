#!/usr/bin/env bash
# test/bench/run.sh: the exactonce benchmark, in one command (also "make bench").
#
# On a throwaway cluster (tools/cluster.sh: fsync and synchronous_commit on,
# shared_buffers 1GB, exactonce preloaded with two drain workers, the
# pipeline's two key shards drained in parallel) and on the
# same generated events -- 1M trade-risk events over 200k trades, ~10% exact
# duplicates, ~10% late stale versions, ~10% modifications moving a trade to
# another cell, 2% tombstones, written once by tools/producer --output in COPY
# text format together with the producer's truth -- it measures:
#
#   1. COPY into a plain logged table: the floor of any ingest path;
#   2. the naive SQL pipeline of test/bench/naive.sql, as written (on a prefix
#      of the events by default: the planner trap makes it too slow for all)
#      and tuned (enable_nestloop = off for the drain);
#   2c. a trigger pipeline (test/bench/trigger.sql): no queue, a statement-level
#      AFTER INSERT trigger with a transition table applies what is inserted
#      into trig.ingest to per-trade state and the rollup, in the inserting
#      transaction; timed as the COPY of the event file into trig.ingest;
#   2d. PgQ (the pgq extension, Debian postgresql-15-pgq3; skipped with a note
#      when it is not installed) with a SQL consumer (test/bench/pgq.sql):
#      enqueue, timed alone (the events as PgQ events with JSON data, COPYed
#      into the queue's event table, a transaction and a pgq.ticker() per
#      10,000 events), then pgqc.consume() taking batch after batch through
#      pgq.next_batch / get_batch_events / finish_batch, reported end to end
#      (enqueue + consume);
#      both apply the events with naive.sql's rules and, but for one join, its
#      statement (--no-peers skips both);
#   3. exactonce's background worker draining a pre-loaded queue (the pipeline
#      paused, the file COPYed into trades.ingest, resumed, timed until the
#      pipeline has taken every event and staged none, polled every 50 ms);
#   3b. the cost of richer aggregates: the plain drain again (the ratios'
#      base, run beside them), then the same worker drain into a pipeline
#      with two measures (qty on every event, fee on two in three; their sums,
#      counts and averages), then with min and max of value and fee as well,
#      then with the two measures and a distinct count of 1,000 counterparties;
#      the plain drain into a CUBE over the three dimensions (8 groupings
#      against the rollup's 4); and the cost of event-time windows: the events as readings (accumulate
#      mode, tombstones left out, each taken at a time within a day drawn from
#      its trade and version) drained plain, then in ten-minute windows
#      (--no-aggregates skips all of them);
#   4. exactonce.flush() on the same pre-loaded queue in a fresh pipeline;
#   5. sustained runs: the producer streams the same events at a fixed offered
#      rate (default 50,000 events/s, the latency target's), at the throughput
#      target's 200,000 events/s, and at its maximum rate, while the workers
#      drains; sampled every 200 ms, with insert->aggregate latency per
#      producer batch;
#
# and for each run WAL bytes per event, peak anonymous memory of the process
# doing the work, table sizes and an exactness verdict: aggregates (and state)
# must equal the producer's truth exactly, and exactonce's counters must obey
# ingested = applied + duplicates + stale + dead_lettered.  A wrong answer, fast
# or not, makes the exit status 1.  Targets (issue 5) are printed beside the
# measurements.  Results go to test/bench/out/<timestamp>/: summary.txt,
# sustained.csv, sustained_latency.csv, sustained.png and logs.
#
#   bash test/bench/run.sh [--events N] [--rate N] [--no-build] [...]   (--help)
#
# Run it as root on Debian bookworm with the PostgreSQL 15 server installed
# (test/deps.sh installs the rest).  Exit status: 0 all runs exact, 1 a run
# was not exact, 2 usage or setup error.
set -euo pipefail

usage() {
	cat <<'EOF'
usage: bash test/bench/run.sh [options]

Events:
  --events N        events in the set (default 1000000)
  --trades N        distinct trades (default events / 5)
  --seed N          random seed of the producer (default 42)
Runs:
  --rate N          offered rate of the fixed-rate sustained run (default 50000)
  --target-rate N   offered rate of a second fixed-rate run, the sustained
                    throughput target (default 200000; 0 = no such run)
  --small-batch N   producer batch of a third fixed-rate run at --rate, for
                    latency (default 1000; 0 = no such run)
  --naive-prefix N  run the naive pipeline "as written" on the first N events
                    only (default 100000; 0 = all events): as written it needs
                    ~17 s for the first 100k events on 2 cores and slows down
  --no-naive        skip both naive runs
  --no-peers        skip the trigger pipeline and PgQ runs
  --no-sustained    skip the sustained runs
  --no-aggregates   skip the drains with measures and with min/max
  --aggregates-rounds N
                    run section 3b's plain, measures, min/max and distinct
                    drains N times in turned order; each time is their
                    median (default 1)
  --perf            after the runs, profile one more worker drain with perf and
                    print the top of the profile
Cluster and output:
  --dir DIR         cluster directory (default /tmp/exactonce-bench)
  --port N          cluster port (default 55460)
  --out DIR         output directory (default test/bench/out/<timestamp>)
  --no-build        skip test/deps.sh and the build and install of the extension
  --keep            leave the cluster running at the end
  -h, --help        this help
EOF
}

INVOCATION="bash test/bench/run.sh${*:+ $*}"
cd "$(dirname "$0")/../.."
EVENTS=1000000
TRADES=
SEED=42
RATE=50000
TARGET_RATE=200000
SMALL_BATCH=1000
NAIVE_PREFIX=100000
NAIVE=1
PEERS=1
SUSTAINED=1
AGGREGATES=1
AGG_ROUNDS=1
declare -A AGG_SECS
PERF=0
DIR=/tmp/exactonce-bench
PORT=55460
OUT=
BUILD=1
KEEP=0
BATCH=5000			# producer batch (events per COPY transaction); the events do not depend on it
# events per PgQ enqueue transaction, each followed by a tick, so each is one
# consumer batch: the batch of naive.drain (pgqd would tick about once a second)
PGQ_BATCH=10000

need_arg() { [ $# -ge 2 ] || { echo "bench: $1 needs a value" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
	case "$1" in
	--events) need_arg "$@"; EVENTS=$2; shift 2 ;;
	--trades) need_arg "$@"; TRADES=$2; shift 2 ;;
	--seed) need_arg "$@"; SEED=$2; shift 2 ;;
	--rate) need_arg "$@"; RATE=$2; shift 2 ;;
	--target-rate) need_arg "$@"; TARGET_RATE=$2; shift 2 ;;
	--small-batch) need_arg "$@"; SMALL_BATCH=$2; shift 2 ;;
	--naive-prefix) need_arg "$@"; NAIVE_PREFIX=$2; shift 2 ;;
	--no-naive) NAIVE=0; shift ;;
	--no-peers) PEERS=0; shift ;;
	--no-sustained) SUSTAINED=0; shift ;;
	--no-aggregates) AGGREGATES=0; shift ;;
	--aggregates-rounds) need_arg "$@"; AGG_ROUNDS=$2; shift 2 ;;
	--perf) PERF=1; shift ;;
	--dir) need_arg "$@"; DIR=$2; shift 2 ;;
	--port) need_arg "$@"; PORT=$2; shift 2 ;;
	--out) need_arg "$@"; OUT=$2; shift 2 ;;
	--no-build) BUILD=0; shift ;;
	--keep) KEEP=1; shift ;;
	-h | --help) usage; exit 0 ;;
	*) echo "bench: unknown option $1" >&2; usage >&2; exit 2 ;;
	esac
done
for v in EVENTS SEED RATE TARGET_RATE SMALL_BATCH NAIVE_PREFIX PORT; do
	n=${v,,}
	[[ ${!v} =~ ^[0-9]+$ ]] || { echo "bench: --${n//_/-} must be a whole number" >&2; exit 2; }
done
[ -z "$TRADES" ] || [[ $TRADES =~ ^[0-9]+$ ]] || { echo "bench: --trades must be a whole number" >&2; exit 2; }
[ "$EVENTS" -ge 1000 ] || { echo "bench: --events must be at least 1000" >&2; exit 2; }
[ "$RATE" -ge 1 ] || { echo "bench: --rate must be at least 1" >&2; exit 2; }
[[ $DIR == /* ]] || { echo "bench: --dir must be an absolute path" >&2; exit 2; }
[ -n "$TRADES" ] || TRADES=$((EVENTS / 5))
if [ "$NAIVE_PREFIX" = 0 ] || [ "$NAIVE_PREFIX" -gt "$EVENTS" ]; then NAIVE_PREFIX=$EVENTS; fi

STAMP=$(date +%Y%m%d-%H%M%S)
[ -n "$OUT" ] || OUT=test/bench/out/$STAMP
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"

export PGHOST=$DIR PGPORT=$PORT PGUSER=postgres PGDATABASE=postgres
unset PGSERVICE PGPASSWORD
export PGOPTIONS="-c client_min_messages=warning"
PSQL=(psql -X -q -At -v ON_ERROR_STOP=1)
# the event mix: the issue's 10% duplicates, 10% late stale versions, 10% moves
PRODUCER_MIX=(--events "$EVENTS" --trades "$TRADES" --duplicates 0.10 --stale 0.10 --tombstones 0.02
	--moves 0.10 --batch "$BATCH" --seed "$SEED")
PIPE=trades
SHARDS=2			# key shards of the pipeline, one per drain worker
DIMS="ARRAY['risk_type', 'region', 'trade_desk']"
COLS="key, version, value, risk_type, region, trade_desk, deleted, event_time"

now() { date +%s.%N; }
say() { printf '%s\n' "$*" | tee -a "$SUMMARY"; }
log() { printf '%s\n' "$*" >&2; }
sql() { "${PSQL[@]}" "$@"; }
# th N: N with thousands separators (rounded to an integer)
th() { awk -v x="$1" 'BEGIN { s = sprintf("%.0f", x); n = s ~ /^-/; if (n) s = substr(s, 2)
	r = ""; while (length(s) > 3) { r = "," substr(s, length(s) - 2) r; s = substr(s, 1, length(s) - 3) }
	print (n ? "-" : "") s r }'; }
calc() { awk "BEGIN { printf \"$1\", $2 }"; }
bytes() { awk -v b="$1" 'BEGIN { split("B kB MB GB", u, " "); i = 1; while (b >= 1024 && i < 4) { b /= 1024; i++ }
	printf (i == 1 ? "%d %s" : "%.1f %s"), b, u[i] }'; }

# ---------------------------------------------------------------- build

if [ "$BUILD" = 1 ]; then
	log "== dependencies (test/deps.sh), build and install"
	bash test/deps.sh
	make -s
	make -s install
fi
command -v gnuplot >/dev/null || log "bench: gnuplot is missing (test/deps.sh installs gnuplot-nox); no plot"
make -s -C tools producer
cc -O2 -Wall -Wextra -o "$OUT/benchmon" test/bench/benchmon.c -I"$(pg_config --includedir)" \
	-L"$(pg_config --libdir)" -lpq
tools/producer --dry-run "${PRODUCER_MIX[@]}" >/dev/null || exit 2

# ---------------------------------------------------------------- cluster

# tools/cluster.sh wipes its directory: only ever touch one this script made
if [ -e "$DIR" ] && [ ! -e "$DIR/.exactonce-bench" ]; then
	echo "bench: $DIR exists and was not made by this benchmark; choose another --dir" >&2
	exit 2
fi
if [ -f "$DIR/data/postmaster.pid" ]; then
	log "== stopping the benchmark cluster left running in $DIR"
	bash tools/cluster.sh stop "$DIR"
fi

CLUSTER_UP=0
BG_PIDS=()
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	for p in "${BG_PIDS[@]}"; do
		kill "$p" 2>/dev/null || true
	done
	for p in "${BG_PIDS[@]}"; do
		wait "$p" 2>/dev/null || true
	done
	rm -f "$OUT"/stop-*
	if [ "$CLUSTER_UP" = 1 ]; then
		if [ "$KEEP" = 1 ]; then
			log "cluster left running: PGHOST=$DIR PGPORT=$PORT psql -U postgres"
			log "stop it with: bash tools/cluster.sh stop $DIR"
		else
			cp "$DIR/server.log" "$OUT/server.log" 2>/dev/null || true
			bash tools/cluster.sh stop "$DIR" || true
		fi
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log "== starting a throwaway cluster in $DIR on port $PORT"
bash tools/cluster.sh start "$DIR" "$PORT" "exactonce.database = 'postgres'" "exactonce.workers = 2"
CLUSTER_UP=1
touch "$DIR/.exactonce-bench"

# ---------------------------------------------------------------- the events

EV=$DIR/events.copy
log "== generating $(th "$EVENTS") events over $(th "$TRADES") trades with tools/producer --output"
tools/producer -q "${PRODUCER_MIX[@]}" --output "$EV" --truth-file "$DIR/truth.copy" \
	--truth-state-file "$DIR/truth_state.copy" >"$OUT/producer-file.out"
head -n "$NAIVE_PREFIX" "$EV" >"$DIR/events_prefix.copy"
chmod a+r "$DIR"/*.copy
declare -A P
while read -r k v; do P[$k]=$v; done <"$OUT/producer-file.out"

sql <<SQL
SET client_min_messages = warning;
CREATE EXTENSION exactonce;
CREATE SCHEMA bench;
CREATE TABLE bench.truth (risk_type text, region text, trade_desk text, level integer, total numeric, keys bigint);
CREATE TABLE bench.truth_state (key text PRIMARY KEY, version bigint, value numeric, risk_type text,
                                region text, trade_desk text, deleted boolean);
COPY bench.truth FROM '$DIR/truth.copy';
COPY bench.truth_state FROM '$DIR/truth_state.copy';
-- the floor: a plain logged table with the ingest columns
CREATE TABLE bench.copy_floor (key text NOT NULL, version bigint NOT NULL, value numeric NOT NULL,
                               risk_type text NOT NULL, region text NOT NULL, trade_desk text NOT NULL,
                               deleted boolean NOT NULL DEFAULT false,
                               event_time timestamptz NOT NULL DEFAULT clock_timestamp());
-- the oracle: the rollup of each trade's highest version, computed in SQL from events
CREATE FUNCTION bench.oracle(events regclass, OUT risk_type text, OUT region text, OUT trade_desk text,
                             OUT level integer, OUT total numeric, OUT keys bigint)
RETURNS SETOF record LANGUAGE plpgsql AS \$\$
BEGIN
	RETURN QUERY EXECUTE format(
		'SELECT risk_type, region, trade_desk,
		        3 - grouping(risk_type) - grouping(region) - grouping(trade_desk), sum(value), count(*)
		   FROM (SELECT DISTINCT ON (key) * FROM %s ORDER BY key, version DESC) s
		  WHERE NOT deleted
		  GROUP BY ROLLUP (risk_type, region, trade_desk)
		 HAVING count(*) > 0', events);
END \$\$;
-- rows of two relations that the other lacks, both ways
CREATE FUNCTION bench.diff(a text, b text) RETURNS bigint LANGUAGE plpgsql AS \$\$
DECLARE n bigint;
BEGIN
	EXECUTE format('SELECT (SELECT count(*) FROM (SELECT * FROM %s EXCEPT ALL SELECT * FROM %s) x)
	                     + (SELECT count(*) FROM (SELECT * FROM %s EXCEPT ALL SELECT * FROM %s) y)',
	               a, b, b, a) INTO n;
	RETURN n;
END \$\$;
CREATE TABLE bench.samples (run text, t float8, ingested bigint, queued bigint, staged bigint,
                            latency_p50_ms float8, latency_p99_ms float8, pid int,
                            rss_anon_kb bigint, vm_hwm_kb bigint, query_ms float8, cpu_s float8, vacuums int,
                            state_live bigint, state_dead bigint, state_autovacuums bigint);
CREATE TABLE bench.probe (run text, t float8, ingested bigint, taken bigint[]);
CREATE TABLE bench.batches (run text, batch int, cum bigint, sent_at float8, commit_at float8);
SQL

# ---------------------------------------------------------------- helpers

# label RUN: a run's name in the report
label() {
	case $1 in
	copy) echo "COPY into a plain table" ;;
	naive_written) echo "naive SQL, as written" ;;
	naive_tuned) echo "naive SQL, tuned" ;;
	trigger) echo "trigger pipeline (SQL)" ;;
	pgq_enqueue) echo "PgQ enqueue" ;;
	pgq) echo "PgQ enqueue + consume" ;;
	eo_workers) echo "exactonce worker drain" ;;
	eo_flush) echo "exactonce flush()" ;;
	eo_plain) echo "worker drain, plain again" ;;
	eo_measures) echo "worker drain, 2 measures" ;;
	eo_minmax) echo "worker drain, + min/max" ;;
	eo_distinct) echo "worker drain, + distinct" ;;
	eo_cube) echo "worker drain, cube" ;;
	eo_feed) echo "worker drain, with the feed" ;;
	eo_prune) echo "worker drain, retention horizon" ;;
	eo_readings) echo "worker drain, accumulate" ;;
	eo_windows) echo "accumulate, in windows" ;;
	sus_rate) echo "sustained, $(th "$RATE")/s offered" ;;
	sus_small) echo "sustained, $(th "$RATE")/s, batches of $(th "$SMALL_BATCH")" ;;
	sus_target) echo "sustained, $(th "$TARGET_RATE")/s offered" ;;
	sus_max) echo "sustained, max rate" ;;
	esac
}

declare -A R_N R_SECS R_WAL R_MEM R_CPU R_EXACT R_NOTE R_SIZES
FAILED=0
RUNS=()

# mon_start NAME ARGS...: a benchmon in the background, summary to $OUT/mon-NAME.out
mon_start() {
	local name=$1
	shift
	"$OUT/benchmon" "$@" >"$OUT/mon-$name.out" 2>"$OUT/mon-$name.err" &
	BG_PIDS+=($!)
	MON_PID=$!
}
# mon_value NAME KEY: a value of a finished benchmon's summary
mon_value() { awk -v k="$2" '$1 == k { print $2 }' "$OUT/mon-$1.out"; }

# timed NAME SQL...: run SQL in one session named NAME (application_name),
# with a sampler on its backend; sets SECS, WAL, MEM_KB (peak RssAnon) and
# CPU_S.  The statements are timed inside the session, WAL over the same span.
timed() {
	local name=$1 out
	shift
	rm -f "$OUT/stop-$name"
	mon_start "$name" --app "$name" --reset-hwm -i 100 --stop-file "$OUT/stop-$name"
	local mon=$MON_PID
	out=$(sql <<SQL
SET application_name = '$name';
SELECT pg_sleep(0.3);
SELECT pg_current_wal_lsn() AS l0, extract(epoch FROM clock_timestamp()) AS t0 \gset
$*
SELECT 'RESULT', extract(epoch FROM clock_timestamp()) - :t0, pg_wal_lsn_diff(pg_current_wal_lsn(), :'l0');
SQL
)
	touch "$OUT/stop-$name"
	wait "$mon" || true
	IFS='|' read -r _ SECS WAL < <(grep '^RESULT|' <<<"$out")
	MEM_KB=$(mon_value "$name" peak_rss_anon_kb)
	CPU_S=$(mon_value "$name" cpu_s)
}

# record RUN EVENTS SECS WAL MEM_KB CPU_S VERDICT [NOTE]
record() {
	[[ " ${RUNS[*]} " == *" $1 "* ]] || RUNS+=("$1")
	R_N[$1]=$2; R_SECS[$1]=$3; R_WAL[$1]=$4; R_MEM[$1]=$5; R_EXACT[$1]=$7; R_NOTE[$1]=${8:-}
	R_CPU[$1]=$(awk -v c="$6" -v s="$3" 'BEGIN { print (c >= 0 && s > 0) ? sprintf("%.0f%%", 100 * c / s) : "-" }')
	[[ $7 == PASS* ]] || [ "$7" = "-" ] || FAILED=1
}

# autovac RELATION: how often autovacuum processed it, and its dead rows now
autovac() {
	sql -c "SELECT format('autovacuumed %sx, %s dead rows', autovacuum_count, n_dead_tup)
	          FROM pg_stat_user_tables WHERE relid = '$1'::regclass"
}

# sizes RELATION...: "name size, ..." of pg_total_relation_size
sizes() {
	local r s list=()
	for r in "$@"; do
		s=$(sql -c "SELECT coalesce(pg_total_relation_size(to_regclass('$r')), 0)")
		list+=("${r#*.} $(bytes "$s")")
	done
	local IFS=','
	echo "${list[*]}" | sed 's/,/, /g'
}

# fresh_pipeline PAUSED: drop and create the pipeline (paused: the workers leave it alone)
fresh_pipeline() {
	sql >/dev/null <<SQL
SET client_min_messages = warning;
SELECT exactonce.drop_pipeline('$PIPE', force => true) FROM exactonce.pipeline WHERE name = '$PIPE';
SELECT exactonce.create_pipeline('$PIPE', $DIMS, shards => $SHARDS);
$([ "$1" = paused ] && echo "SELECT exactonce.pause('$PIPE');")
SQL
}

# check_exactonce: aggregates and state against the producer's truth, and the
# counters; sets VERDICT
check_exactonce() {
	local r only_agg state_diff ingested applied dup stale dead queued staged tries=0 fails=()
	r=$(sql -F '|' <<SQL
SELECT bench.diff('(SELECT risk_type, region, trade_desk, level, total, keys FROM $PIPE.aggregates) a', 'bench.truth'),
       (SELECT count(*) FROM bench.truth_state t FULL JOIN $PIPE.state s USING (key)
         WHERE (t.version, t.value, t.risk_type, t.region, t.trade_desk, t.deleted)
               IS DISTINCT FROM (s.version, s.value, s.risk_type, s.region, s.trade_desk, s.deleted)),
       ingested, applied, duplicates, stale, dead_lettered, queued, staged
  FROM exactonce.pipelines WHERE name = '$PIPE';
SQL
)
	IFS='|' read -r only_agg state_diff ingested applied dup stale dead queued staged <<<"$r"
	# the view's queued is NULL while a worker truncates a drained partition
	# (it never waits for that lock): read it again until it is known
	while [ -z "$queued" ] && [ $((tries += 1)) -le 50 ]; do
		sleep 0.2
		queued=$(sql <<<"SELECT queued FROM exactonce.pipelines WHERE name = '$PIPE'")
	done
	[ "$only_agg" = 0 ] || fails+=("$only_agg aggregate rows differ from the truth")
	[ "$state_diff" = 0 ] || fails+=("$state_diff state rows differ from the truth")
	[ "$ingested" = "$EVENTS" ] || fails+=("ingested $ingested != $EVENTS events")
	[ "$ingested" = $((applied + dup + stale + dead)) ] ||
		fails+=("ingested $ingested != applied + duplicates + stale + dead_lettered = $((applied + dup + stale + dead))")
	[ "$dead" = 0 ] || fails+=("$dead dead-lettered (the stream has no bad event)")
	[ "$queued" = 0 ] && [ "$staged" = 0 ] || fails+=("queued $queued, staged $staged at the end")
	if [ ${#fails[@]} = 0 ]; then
		VERDICT="PASS"
	else
		VERDICT="FAIL: $(IFS=';'; echo "${fails[*]}")"
	fi
	COUNTERS="ingested $(th "$ingested") = applied $(th "$applied") + duplicates $(th "$dup") + stale $(th "$stale") + dead-lettered $(th "$dead")"
	log "   $VERDICT; $COUNTERS"
}

# check_peer SCHEMA TRUTH TRUTH_STATE EVENTS: SCHEMA.aggregates and
# SCHEMA.state of a SQL peer (naive, trig, pgqc) against a truth, and the
# events SCHEMA.progress says it applied
check_peer() {
	local agg st taken fails=()
	IFS='|' read -r agg st taken < <(sql -F '|' <<SQL
SELECT bench.diff('(SELECT risk_type, region, trade_desk, level, total, keys FROM $1.aggregates) a', '$2'),
       bench.diff('(SELECT key COLLATE "C", version, value, risk_type, region, trade_desk, deleted FROM $1.state) s',
                  '(SELECT key COLLATE "C", version, value, risk_type, region, trade_desk, deleted FROM $3) t'),
       (SELECT events FROM $1.progress);
SQL
)
	[ "$agg" = 0 ] || fails+=("$agg aggregate rows differ from the truth")
	[ "$st" = 0 ] || fails+=("$st state rows differ from the truth")
	[ "$taken" = "$4" ] || fails+=("applied $taken of $4 events")
	if [ ${#fails[@]} = 0 ]; then VERDICT="PASS"; else VERDICT="FAIL: $(IFS=';'; echo "${fails[*]}")"; fi
	log "   $VERDICT"
}

# load_queue: COPY the events into the pipeline's queue; sets LOAD_SECS
load_queue() {
	local t0
	t0=$(now)
	sql -c "COPY $PIPE.ingest ($COLS) FROM '$EV'" >/dev/null
	LOAD_SECS=$(calc "%.3f" "$(now) - $t0")
}

# worker_pids: the drain workers' pids, comma separated
worker_pids() { sql -c "SELECT string_agg(pid::text, ',' ORDER BY pid) FROM pg_stat_activity WHERE backend_type = 'exactonce drain' AND datname = current_database()"; }

MACHINE="$(nproc) cores, $(awk '/MemTotal/ { printf "%.0f GB", $2 / 1048576 }' /proc/meminfo), load average $(cut -d' ' -f1-3 /proc/loadavg) at start"
# CPU time (clock ticks) used on the whole machine, and by this benchmark:
# the cluster (the postmaster with its reaped children, and the live ones)
# and this script's reaped children (producer, psql, benchmon).  The rest is
# other people's work on a shared machine, which makes the figures noisy.
busy_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 }' /proc/stat; }
own_ticks() {
	local pm
	pm=$(head -n 1 "$DIR/data/postmaster.pid")
	{
		awk '{ print $14 + $15 + $16 + $17 }' "/proc/$pm/stat"
		for p in $(pgrep -P "$pm"); do awk '{ print $14 + $15 }' "/proc/$p/stat" 2>/dev/null || true; done
		awk '{ print $16 + $17 }' "/proc/$$/stat"
	} | awk '{ s += $1 } END { print s + 0 }'
}
BUSY0=$(busy_ticks)
OWN0=$(own_ticks)
T_RUNS0=$(now)
log "== machine: $MACHINE"

# ---------------------------------------------------------------- 1. COPY floor

log "== 1. COPY into a plain logged table"
sql -c "CHECKPOINT"
timed bench-copy "COPY bench.copy_floor ($COLS) FROM '$EV';"
n=$(sql -c "SELECT count(*) FROM bench.copy_floor")
# the oracle computed in SQL from all events must equal the producer's truth:
# that validates it for the prefix the naive pipeline runs as written
oracle_ok=$(sql -c "SELECT bench.diff('(SELECT * FROM bench.oracle(''bench.copy_floor'')) o', 'bench.truth')")
if [ "$n" = "$EVENTS" ]; then VERDICT="PASS (rows)"; else VERDICT="FAIL: $n rows"; fi
record copy "$EVENTS" "$SECS" "$WAL" "$MEM_KB" "$CPU_S" "$VERDICT"
R_SIZES[copy]="table $(bytes "$(sql -c "SELECT pg_total_relation_size('bench.copy_floor')")")"
log "   $(th "$(calc "%f" "$EVENTS / $SECS")") events/s; SQL oracle over all events vs producer truth: $oracle_ok rows differ"
[ "$oracle_ok" = 0 ] || { FAILED=1; log "   the SQL oracle disagrees with the producer's truth"; }

# ---------------------------------------------------------------- 2. naive SQL

naive_run() {	# naive_run RUN FILE EVENTS TUNED
	local run=$1 file=$2 n=$3 tuned=$4 truth truth_state note=""
	sql -c "DROP SCHEMA IF EXISTS naive CASCADE" 2>/dev/null
	sql -f test/bench/naive.sql
	sql -c "COPY naive.queue ($COLS) FROM '$file'" >/dev/null
	if [ "$n" = "$EVENTS" ]; then
		truth=bench.truth; truth_state=bench.truth_state
	else
		# the truth of a prefix: the oracle over the queued prefix
		sql <<SQL
DROP TABLE IF EXISTS bench.truth_prefix, bench.truth_state_prefix;
CREATE TABLE bench.truth_prefix AS SELECT * FROM bench.oracle('naive.queue');
CREATE TABLE bench.truth_state_prefix AS
	SELECT DISTINCT ON (key) key, version, value, risk_type, region, trade_desk, deleted
	  FROM naive.queue ORDER BY key, version DESC;
SQL
		truth=bench.truth_prefix; truth_state=bench.truth_state_prefix
	fi
	sql -c "CHECKPOINT"
	if [ "$tuned" = 1 ]; then
		timed "bench-$run" "SET enable_nestloop = off;" "CALL naive.drain();"
	else
		timed "bench-$run" "CALL naive.drain();"
	fi
	check_peer naive "$truth" "$truth_state" "$n"
	[ "$n" = "$EVENTS" ] || note="first $(th "$n") events only"
	record "$run" "$n" "$SECS" "$WAL" "$MEM_KB" "$CPU_S" "$VERDICT" "$note"
	R_SIZES[$run]="$(sizes naive.queue naive.state naive.aggregates); state $(autovac naive.state)"
	log "   $(th "$(calc "%f" "$n / $SECS")") events/s"
}

if [ "$NAIVE" = 1 ]; then
	log "== 2a. naive SQL pipeline as written, on $( [ "$NAIVE_PREFIX" = "$EVENTS" ] && echo "all events" || echo "the first $(th "$NAIVE_PREFIX") events")"
	naive_run naive_written "$DIR/events_prefix.copy" "$NAIVE_PREFIX" 0
	log "== 2b. naive SQL pipeline tuned (enable_nestloop = off), all events"
	naive_run naive_tuned "$EV" "$EVENTS" 1
	sql -c "DROP SCHEMA naive CASCADE" 2>/dev/null
fi

# ---------------------------------------------------------------- 2c, 2d. peers

# trigger_run: the trigger pipeline of test/bench/trigger.sql.  Its trigger
# applies the events inside the COPY that inserts them: the COPY of the event
# file into trig.ingest is the whole pipeline, timed in its session.
trigger_run() {
	sql -c "DROP SCHEMA IF EXISTS trig CASCADE" 2>/dev/null
	sql -f test/bench/trigger.sql
	sql -c "CHECKPOINT"
	timed bench-trigger "COPY trig.ingest ($COLS) FROM '$EV';"
	check_peer trig bench.truth bench.truth_state "$EVENTS"
	record trigger "$EVENTS" "$SECS" "$WAL" "$MEM_KB" "$CPU_S" "$VERDICT" \
		"one COPY; its statement-level trigger ran $(sql -c "SELECT statements FROM trig.progress")x"
	R_SIZES[trigger]="$(sizes trig.ingest trig.state trig.aggregates); state $(autovac trig.state)"
	log "   $(th "$(calc "%f" "$EVENTS / $SECS")") events/s"
}

# pgq_run: PgQ, queue and consumer of test/bench/pgq.sql.  The enqueue and the
# consume are timed apart, each in its session; the second row adds them up
# (end to end: every event in the queue, then in the aggregates).
pgq_run() {
	local f stmts="" e_secs e_wal e_mem e_cpu evtable n batches note
	sql -c "DROP SCHEMA IF EXISTS pgqc CASCADE" -c "DROP EXTENSION IF EXISTS pgq CASCADE" 2>/dev/null
	sql -c "CREATE EXTENSION pgq"
	sql -f test/bench/pgq.sql >/dev/null
	# The events as PgQ events (ev_time, ev_type, ev_data as JSON), in the
	# event file's order, in files of PGQ_BATCH events.  Untimed: the
	# encoding is the producer's work, as the COPY format of the event file
	# is for the other runs.
	sql <<SQL
CREATE TEMP TABLE ev (n bigint GENERATED ALWAYS AS IDENTITY, key text, version bigint, value numeric,
                      risk_type text, region text, trade_desk text, deleted boolean, event_time timestamptz);
COPY ev ($COLS) FROM '$EV';
COPY (SELECT event_time, 'trade',
             pgqc.encode(ROW(key, version, value, risk_type, region, trade_desk, deleted)::pgqc.event)
        FROM ev ORDER BY n) TO '$DIR/pgq_events.copy';
SQL
	rm -rf "$DIR/pgq"
	mkdir "$DIR/pgq"
	split -l "$PGQ_BATCH" -d -a 6 "$DIR/pgq_events.copy" "$DIR/pgq/events."
	rm -f "$DIR/pgq_events.copy"
	chmod -R a+rX "$DIR/pgq"
	# per file, a transaction COPYing it into the queue's current event table
	# (valid for the transaction only: PgQ rotates its tables), then a tick
	for f in "$DIR"/pgq/events.*; do
		stmts+="BEGIN;
SELECT pgq.current_event_table('bench') AS evtable \\gset
COPY :evtable (ev_time, ev_type, ev_data) FROM '$f';
COMMIT;
SELECT pgq.ticker('bench') \\g /dev/null
"
	done
	sql -c "CHECKPOINT"
	timed bench-pgq-enqueue "$stmts"
	evtable=$(sql -c "SELECT queue_data_pfx FROM pgq.queue WHERE queue_name = 'bench'")
	n=$(sql -c "SELECT count(*) FROM $evtable")
	if [ "$n" = "$EVENTS" ]; then VERDICT="PASS (rows)"; else VERDICT="FAIL: $n events in the queue"; fi
	record pgq_enqueue "$EVENTS" "$SECS" "$WAL" "$MEM_KB" "$CPU_S" "$VERDICT" \
		"COPY into the event table, a transaction and a tick per $(th "$PGQ_BATCH") events"
	R_SIZES[pgq_enqueue]="$(sizes "$evtable"_0 "$evtable"_1 "$evtable"_2)"
	log "   enqueue: $(th "$(calc "%f" "$EVENTS / $SECS")") events/s"
	e_secs=$SECS; e_wal=$WAL; e_mem=$MEM_KB; e_cpu=$CPU_S

	sql -c "CHECKPOINT"
	timed bench-pgq-consume "CALL pgqc.consume();"
	check_peer pgqc bench.truth bench.truth_state "$EVENTS"
	batches=$(sql -c "SELECT batches FROM pgqc.progress")
	log "   consume: $(th "$(calc "%f" "$EVENTS / $SECS")") events/s in $batches batches"
	note="consume alone $(th "$(calc "%f" "$EVENTS / $SECS")") events/s, $batches batches"
	record pgq "$EVENTS" "$(calc "%.3f" "$e_secs + $SECS")" "$(calc "%.0f" "$e_wal + $WAL")" \
		"$(awk -v a="$e_mem" -v b="$MEM_KB" 'BEGIN { print (a + 0 > b + 0) ? a : b }')" \
		"$(awk -v a="$e_cpu" -v b="$CPU_S" 'BEGIN { print (a < 0 || b < 0) ? -1 : a + b }')" "$VERDICT" "$note"
	R_SIZES[pgq]="$(sizes "$evtable"_0 "$evtable"_1 "$evtable"_2 pgqc.state pgqc.aggregates); state $(autovac pgqc.state)"
	rm -rf "$DIR/pgq"
	log "   end to end: $(th "$(calc "%f" "$EVENTS / ${R_SECS[pgq]}")") events/s"
}

PGQ_MISSING=
if [ "$PEERS" = 1 ]; then
	log "== 2c. trigger pipeline: COPY into trig.ingest, a statement-level trigger applies it"
	trigger_run
	sql -c "DROP SCHEMA trig CASCADE" 2>/dev/null
	if [ -e "$(pg_config --sharedir)/extension/pgq.control" ]; then
		log "== 2d. PgQ: enqueue, then a SQL consumer takes the batches"
		pgq_run
		sql -c "DROP SCHEMA pgqc CASCADE" -c "DROP EXTENSION pgq CASCADE" 2>/dev/null
	else
		PGQ_MISSING="PgQ not measured: the pgq extension is not installed (Debian: postgresql-15-pgq3)"
		log "== 2d. $PGQ_MISSING"
	fi
fi

# ---------------------------------------------------------------- 3. exactonce workers

log "== 3. exactonce: the drain worker empties a pre-loaded queue"
fresh_pipeline paused
load_queue
QUEUE_COPY_SECS=$LOAD_SECS
log "   COPY into $PIPE.ingest (paused): $(th "$(calc "%f" "$EVENTS / $LOAD_SECS")") events/s"
sql -c "CHECKPOINT"
WPID=$(worker_pids)
L0=$(sql -c "SELECT pg_current_wal_lsn()")
T0=$(now)
sql -c "SELECT exactonce.resume('$PIPE')" >/dev/null
"$OUT/benchmon" -p "$PIPE" -i 50 --pid "$WPID" --reset-hwm --until-drained "$EVENTS" --view-every 0 --timeout 900 \
	-o "$OUT/drain-workers.csv" >"$OUT/mon-workers.out" 2>"$OUT/mon-workers.err" || {
	echo "bench: the workers did not drain the queue in 900 s" >&2; exit 1; }
DONE=$(mon_value workers done_at)
SECS=$(calc "%.3f" "$DONE - $T0")
WAL=$(sql -c "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '$L0')")
check_exactonce
record eo_workers "$EVENTS" "$SECS" "$WAL" "$(mon_value workers peak_rss_anon_kb)" "$(mon_value workers cpu_s)" "$VERDICT"
R_SIZES[eo_workers]="$(sizes $PIPE.ingest_0 $PIPE.ingest_1 $PIPE.state $PIPE.ledger $PIPE.aggregates); state $(autovac $PIPE.state)"
EO_COUNTERS=$COUNTERS
VIEW_POLL_MS=$(mon_value workers query_ms_avg)
log "   $(th "$(calc "%f" "$EVENTS / $SECS")") events/s (progress polled every 50 ms, the view once, at the start; a poll took $VIEW_POLL_MS ms on average)"

# ---------------------------------------------------------------- 3b. richer aggregates

# drain_timed RUN N: resume the paused pipeline and time its workers until
# they have taken N events and staged none; sets SECS and WAL
drain_timed() {
	local run=$1 n=$2 l0 t0 wpid
	wpid=$(worker_pids)
	l0=$(sql -c "SELECT pg_current_wal_lsn()")
	t0=$(now)
	sql -c "SELECT exactonce.resume('$PIPE')" >/dev/null
	"$OUT/benchmon" -p "$PIPE" -i 50 --pid "$wpid" --reset-hwm --until-drained "$n" --view-every 0 --timeout 900 \
		-o "$OUT/drain-$run.csv" >"$OUT/mon-$run.out" 2>"$OUT/mon-$run.err" || {
		echo "bench: the workers did not drain the queue in 900 s" >&2; exit 1; }
	SECS=$(calc "%.3f" "$(mon_value "$run" done_at) - $t0")
	WAL=$(sql -c "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '$l0')")
}

# aggregates_run RUN MIN_MAX [DISTINCT]: section 3's worker drain into a
# pipeline with measures qty = |value| and fee = value / 4 but none for
# every third version, min and max of those MIN_MAX names (a SQL text[]),
# and with DISTINCT a distinct count of counterparty, one of 1,000 per
# trade (a trade keeps its counterparty); the queue is loaded from the event file
# through bench.events.  Exact when the aggregates, measures, mins, maxes and
# distinct counts equal those of the producer's truth.
CPTY="'cp' || abs(hashtext(key)) % 1000"
aggregates_run() {
	local run=$1 min_max=$2 distinct=${3:-} measured dc="'{}'" dcols="" dtruth=""
	if [ -n "$distinct" ]; then
		dc="ARRAY['counterparty']"; dcols=", counterparty_distinct"; dtruth=", count(DISTINCT ${CPTY//\'/\'\'})"
	fi
	sql >/dev/null <<SQL
SET client_min_messages = warning;
SELECT exactonce.drop_pipeline('$PIPE', force => true) FROM exactonce.pipeline WHERE name = '$PIPE';
SELECT exactonce.create_pipeline('$PIPE', $DIMS, shards => $SHARDS,
	measures => ARRAY['qty', 'fee'], min_max => $min_max, distinct_counts => $dc);
SELECT exactonce.pause('$PIPE');
INSERT INTO $PIPE.ingest ($COLS, qty, fee$([ -z "$distinct" ] || echo ", counterparty"))
SELECT $COLS, abs(value), CASE WHEN version % 3 = 0 THEN NULL ELSE value / 4 END$(
	[ -z "$distinct" ] || echo ", $CPTY") FROM bench.events;
CHECKPOINT;
SQL
	drain_timed "$run" "$EVENTS"
	check_exactonce
	measured=$(sql <<SQL
SELECT bench.diff(
	'(SELECT level, risk_type, region, trade_desk, qty_sum, qty_count, qty_avg, fee_sum, fee_count, fee_avg$(
		[ "$min_max" = "'{}'" ] || echo ", value_min, value_max, fee_min, fee_max")$dcols FROM $PIPE.aggregates) a',
	'(SELECT 3 - (GROUPING(risk_type) + GROUPING(region) + GROUPING(trade_desk)), risk_type, region, trade_desk,
	         sum(abs(value)), count(*), trim_scale(sum(abs(value))) / nullif(count(abs(value)), 0),
	         coalesce(sum(CASE WHEN version % 3 = 0 THEN NULL ELSE value / 4 END), 0),
	         count(CASE WHEN version % 3 = 0 THEN NULL ELSE value / 4 END),
	         trim_scale(sum(CASE WHEN version % 3 = 0 THEN NULL ELSE value / 4 END)) / nullif(count(CASE WHEN version % 3 = 0 THEN NULL ELSE value / 4 END), 0)$(
		[ "$min_max" = "'{}'" ] || echo ", min(value), max(value),
	         min(CASE WHEN version % 3 = 0 THEN NULL ELSE value / 4 END),
	         max(CASE WHEN version % 3 = 0 THEN NULL ELSE value / 4 END)")$dtruth
	  FROM bench.truth_state WHERE NOT deleted GROUP BY ROLLUP (risk_type, region, trade_desk)) t')
SQL
)
	[ "$measured" = 0 ] || VERDICT="FAIL: $measured rows of measures$([ "$min_max" = "'{}'" ] || echo ", mins and maxes") differ from the truth${VERDICT#PASS}"
	record "$run" "$EVENTS" "$SECS" "$WAL" "$(mon_value "$run" peak_rss_anon_kb)" "$(mon_value "$run" cpu_s)" "$VERDICT"
	R_SIZES[$run]="$(sizes $PIPE.state $PIPE.ledger $PIPE.aggregates)"
	log "   $(th "$(calc "%f" "$EVENTS / $SECS")") events/s; $VERDICT"
}

# plain_run: section 3's plain worker drain again, beside the richer ones
plain_run() {
	drain_with eo_plain "" ""
	check_exactonce
	record eo_plain "$EVENTS" "$SECS" "$WAL" "$(mon_value eo_plain peak_rss_anon_kb)" "$(mon_value eo_plain cpu_s)" "$VERDICT"
	R_SIZES[eo_plain]="$(sizes $PIPE.state $PIPE.ledger $PIPE.aggregates)"
	log "   plain again: $(th "$(calc "%f" "$EVENTS / $SECS")") events/s; $VERDICT"
}

# drain_with RUN OPTIONS SETUP: section 3's worker drain of the events into
# a fresh pipeline made with create_pipeline OPTIONS (", name => value"),
# SETUP run after it, paused while the queue is loaded.
drain_with() {
	sql >/dev/null <<SQL
SET client_min_messages = warning;
SELECT exactonce.drop_pipeline('$PIPE', force => true) FROM exactonce.pipeline WHERE name = '$PIPE';
SELECT exactonce.create_pipeline('$PIPE', $DIMS, shards => $SHARDS$2);
$3
SELECT exactonce.pause('$PIPE');
SQL
	load_queue
	sql -c "CHECKPOINT" >/dev/null
	drain_timed "$1" "$EVENTS"
}

# cube_run RUN: section 3's worker drain into a pipeline whose cells are the
# CUBE of its dimensions; exact when they equal GROUP BY CUBE over the
# producer's final state, and the counters add up.
cube_run() {
	local run=$1 diff counters
	drain_with "$run" ", grouping_sets => 'cube'" ""
	IFS='|' read -r diff counters < <(sql -F '|' <<SQL
SELECT bench.diff('(SELECT risk_type, region, trade_desk, level, total, keys FROM $PIPE.aggregates) a',
	'(SELECT risk_type, region, trade_desk,
	         3 - (GROUPING(risk_type) + GROUPING(region) + GROUPING(trade_desk)), sum(value), count(*)
	  FROM bench.truth_state WHERE NOT deleted GROUP BY CUBE (risk_type, region, trade_desk)) t'),
       ingested = applied + duplicates + stale + dead_lettered AND dead_lettered = 0 AND ingested = $EVENTS
FROM exactonce.pipelines WHERE name = '$PIPE';
SQL
)
	# a named view costs nothing at drain time: time a read of one, median of 5
	IFS='|' read -r vdiff view_ms < <(sql -F '|' <<SQL | tail -n 1
SET client_min_messages = warning;
SELECT exactonce.create_view('$PIPE', 'delta_desks', ARRAY['trade_desk'], \$\$risk_type = 'Delta'\$\$);
CREATE FUNCTION pg_temp.read_ms(q text) RETURNS float8 LANGUAGE plpgsql AS \$\$
DECLARE t0 timestamptz := clock_timestamp();
BEGIN EXECUTE q; RETURN extract(epoch FROM clock_timestamp() - t0) * 1000; END \$\$;
SELECT bench.diff('(SELECT trade_desk, total, keys FROM $PIPE.delta_desks) a',
	'(SELECT trade_desk, sum(value), count(*) FROM bench.truth_state
	  WHERE NOT deleted AND risk_type = ''Delta'' GROUP BY trade_desk) t'),
       round(percentile_cont(0.5) WITHIN GROUP (ORDER BY pg_temp.read_ms('SELECT * FROM $PIPE.delta_desks'))::numeric, 2)
FROM generate_series(1, 5);
SQL
)
	VERDICT=PASS
	[ "$diff" = 0 ] || VERDICT="FAIL: $diff aggregate rows differ from GROUP BY CUBE of the truth"
	[ "$vdiff" = 0 ] || VERDICT="FAIL: $vdiff rows of view delta_desks differ from the truth${VERDICT#PASS}"
	[ "$counters" = t ] || VERDICT="FAIL: counters do not add up${VERDICT#PASS}"
	record "$run" "$EVENTS" "$SECS" "$WAL" "$(mon_value "$run" peak_rss_anon_kb)" "$(mon_value "$run" cpu_s)" "$VERDICT" \
		"view delta_desks: a read takes $view_ms ms (median of 5)"
	R_SIZES[$run]="$(sizes $PIPE.state $PIPE.ledger $PIPE.aggregates)"
	log "   $(th "$(calc "%f" "$EVENTS / $SECS")") events/s; view delta_desks read in $view_ms ms; $VERDICT"
}

# feed_run RUN: section 3's worker drain into a pipeline with its change
# feed on; exact when the aggregates equal the truth and the feed replayed
# from its start rebuilds them.
feed_run() {
	local run=$1 replay
	drain_with "$run" "" "SELECT exactonce.set_feed('$PIPE', true);"
	check_exactonce
	replay=$(sql <<SQL
SELECT bench.diff('(SELECT level, risk_type, region, trade_desk, total, keys FROM $PIPE.aggregates) a',
	'(SELECT level, risk_type, region, trade_desk, sum(new_total - old_total), sum(new_keys - old_keys)
	  FROM $PIPE.feed GROUP BY 1, 2, 3, 4 HAVING sum(new_keys - old_keys) > 0) t')
SQL
)
	[ "$replay" = 0 ] || VERDICT="FAIL: the feed replayed differs from the aggregates in $replay rows${VERDICT#PASS}"
	record "$run" "$EVENTS" "$SECS" "$WAL" "$(mon_value "$run" peak_rss_anon_kb)" "$(mon_value "$run" cpu_s)" "$VERDICT" \
		"$(sql -c "SELECT count(*) FROM $PIPE.feed") feed rows"
	R_SIZES[$run]="$(sizes $PIPE.state $PIPE.ledger $PIPE.aggregates $PIPE.feed)"
	log "   $(th "$(calc "%f" "$EVENTS / $SECS")") events/s; $VERDICT"
}

# prune_run RUN: section 3's worker drain into a pipeline with a retention
# horizon (0: every event is above it, and the state stage checks each);
# exact as the plain drain; then a prune of the tombstones below the median
# version, timed, after which the aggregates must not have moved.
prune_run() {
	local run=$1 pruned
	drain_with "$run" "" "SELECT exactonce.prune('$PIPE', 0);"
	check_exactonce
	pruned=$(sql <<SQL | tail -n 1
CREATE TEMP TABLE before AS SELECT * FROM $PIPE.aggregates;
CREATE FUNCTION pg_temp.prune_ms(h bigint) RETURNS text LANGUAGE plpgsql AS \$\$
DECLARE t0 timestamptz := clock_timestamp(); n bigint;
BEGIN
	SELECT forgotten INTO n FROM exactonce.prune('$PIPE', h);
	RETURN n || ' tombstones below the median version forgotten in '
		|| round(extract(epoch FROM clock_timestamp() - t0)::numeric * 1000) || ' ms';
END \$\$;
SELECT pg_temp.prune_ms((SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY version) FROM $PIPE.state))
	|| CASE WHEN (SELECT count(*) FROM (SELECT * FROM before EXCEPT ALL SELECT * FROM $PIPE.aggregates) d) = 0
	        THEN '' ELSE '; FAIL: the aggregates moved' END;
SQL
)
	[[ $pruned != *FAIL* ]] || VERDICT="FAIL: prune moved the aggregates${VERDICT#PASS}"
	record "$run" "$EVENTS" "$SECS" "$WAL" "$(mon_value "$run" peak_rss_anon_kb)" "$(mon_value "$run" cpu_s)" "$VERDICT" "$pruned"
	R_SIZES[$run]="$(sizes $PIPE.state $PIPE.ledger $PIPE.aggregates)"
	log "   $(th "$(calc "%f" "$EVENTS / $SECS")") events/s; $pruned; $VERDICT"
}

# windows_run RUN WIDTH: section 3's worker drain of the events as readings
# into an accumulate pipeline, in windows of WIDTH (a SQL interval, or NULL
# for none) with a lateness that takes every reading; exact when its
# aggregates equal those of the distinct readings.
TAKEN="timestamptz '2024-05-01 00:00:00+00' + (abs(hashtext(key || ':' || version)) % 86400) * interval '1 second'"
windows_run() {
	local run=$1 width=$2 wdim="" wcol="" diff counters taken_q="${TAKEN//\'/\'\'}"
	if [ "$width" != NULL ]; then
		# inside the literals bench.diff takes
		wdim="date_bin(${width//\'/\'\'}, taken, timestamptz ''1970-01-01 00:00:00+00''), "
		wcol="window_start::timestamptz, "
	fi
	sql >/dev/null <<SQL
SET client_min_messages = warning;
SELECT exactonce.drop_pipeline('$PIPE', force => true) FROM exactonce.pipeline WHERE name = '$PIPE';
SELECT exactonce.create_pipeline('$PIPE', $DIMS, 'accumulate', shards => $SHARDS,
	window_width => $width, allowed_lateness => '36500 days');
SELECT exactonce.pause('$PIPE');
INSERT INTO $PIPE.ingest (key, version, value, risk_type, region, trade_desk, event_time)
SELECT key, version, value, risk_type, region, trade_desk, $TAKEN FROM bench.events WHERE NOT deleted;
CHECKPOINT;
SQL
	N=$(sql -c "SELECT count(*) FROM bench.events WHERE NOT deleted")
	drain_timed "$run" "$N"
	IFS='|' read -r diff counters < <(sql -F '|' <<SQL
SELECT bench.diff('(SELECT ${wcol}risk_type, region, trade_desk, level, total, keys FROM $PIPE.aggregates$(
		[ -z "$wcol" ] || echo " WHERE level >= 1")) a',
	'(SELECT ${wdim}risk_type, region, trade_desk,
	         $([ -z "$wdim" ] && echo 3 || echo 4) - (GROUPING(risk_type) + GROUPING(region) + GROUPING(trade_desk)$(
		[ -z "$wdim" ] || echo " + GROUPING(${wdim%, })")), sum(value), count(*)
	  FROM (SELECT DISTINCT key, version, value, risk_type, region, trade_desk, $taken_q AS taken
	        FROM bench.events WHERE NOT deleted) r
	  GROUP BY ROLLUP (${wdim}risk_type, region, trade_desk)$(
		[ -z "$wdim" ] || echo " HAVING GROUPING(${wdim%, }) = 0")) t'),
       ingested = applied + duplicates + stale + dead_lettered AND dead_lettered = 0 AND ingested = $N
FROM exactonce.pipelines WHERE name = '$PIPE';
SQL
)
	VERDICT=PASS
	[ "$diff" = 0 ] || VERDICT="FAIL: $diff aggregate rows differ from the readings"
	[ "$counters" = t ] || VERDICT="FAIL: counters do not add up${VERDICT#PASS}"
	record "$run" "$N" "$SECS" "$WAL" "$(mon_value "$run" peak_rss_anon_kb)" "$(mon_value "$run" cpu_s)" "$VERDICT"
	R_SIZES[$run]="$(sizes $PIPE.state $PIPE.seen $PIPE.ledger $PIPE.aggregates)"
	log "   $(th "$(calc "%f" "$N / $SECS")") events/s; $VERDICT"
}

if [ "$AGGREGATES" = 1 ]; then
	log "== 3b. exactonce: the worker drain with measures, then with min/max too"
	sql >/dev/null <<SQL
CREATE UNLOGGED TABLE bench.events (key text, version bigint, value numeric, risk_type text, region text,
                                    trade_desk text, deleted boolean, event_time timestamptz);
COPY bench.events ($COLS) FROM '$EV';
SQL
	# the four drains the ratios compare, round after round in turned order
	order=(eo_plain eo_measures eo_minmax eo_distinct)
	for ((round = 1; round <= AGG_ROUNDS; round++)); do
		[ "$AGG_ROUNDS" = 1 ] || log "   round $round of $AGG_ROUNDS"
		for run in "${order[@]}"; do
			case $run in
			eo_plain) plain_run ;;
			eo_measures) aggregates_run eo_measures "'{}'" ;;
			eo_minmax) aggregates_run eo_minmax "ARRAY['value', 'fee']" ;;
			eo_distinct) aggregates_run eo_distinct "'{}'" distinct ;;
			esac
			AGG_SECS[$run]+="$SECS "
		done
		order=("${order[@]:1}" "${order[0]}")
	done
	# each run's time is the median of its rounds
	for run in eo_plain eo_measures eo_minmax eo_distinct; do
		R_SECS[$run]=$(printf '%s\n' ${AGG_SECS[$run]} | sort -g | awk '{ v[NR] = $1 }
			END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
	done
	cube_run eo_cube
	feed_run eo_feed
	prune_run eo_prune
	windows_run eo_readings NULL
	windows_run eo_windows "'10 minutes'"
	sql -c "DROP TABLE bench.events" >/dev/null
fi

# ---------------------------------------------------------------- 4. exactonce flush

log "== 4. exactonce: flush() empties a pre-loaded queue in a fresh pipeline"
fresh_pipeline paused
load_queue
sql -c "CHECKPOINT"
timed bench-flush "SELECT 'FLUSHED', exactonce.flush('$PIPE');"
check_exactonce
record eo_flush "$EVENTS" "$SECS" "$WAL" "$MEM_KB" "$CPU_S" "$VERDICT"
R_SIZES[eo_flush]="$(sizes $PIPE.ingest_0 $PIPE.ingest_1 $PIPE.state $PIPE.ledger $PIPE.aggregates); state $(autovac $PIPE.state)"
log "   $(th "$(calc "%f" "$EVENTS / $SECS")") events/s"

# ---------------------------------------------------------------- 5. sustained

declare -A S_T0 S_DONE S_LAST S_PROD
sustained_run() {	# sustained_run RUN RATE [BATCH] (rate 0 = as fast as the producer goes)
	local run=$1 rate=$2 batch=${3:-$BATCH} l0 stop mon_s mon_p
	stop=$OUT/stop-$run
	fresh_pipeline running
	sql -c "CHECKPOINT"
	WPID=$(worker_pids)
	rm -f "$stop"
	mon_start "$run-samples" -p "$PIPE" -i 200 --pid "$WPID" --reset-hwm --stop-file "$stop" -o "$OUT/samples-$run.csv"
	mon_s=$MON_PID
	mon_start "$run-probe" -p "$PIPE" -i 10 --probe --stop-file "$stop" -o "$OUT/probe-$run.csv"
	mon_p=$MON_PID
	sleep 0.3
	l0=$(sql -c "SELECT pg_current_wal_lsn()")
	tools/producer "${PRODUCER_MIX[@]}" --batch "$batch" --rate "$rate" --pipeline "$PIPE" --batch-log "$OUT/batches-$run.tsv" \
		--truth-file "$DIR/truth-$run.copy" >"$OUT/producer-$run.out" 2>"$OUT/producer-$run.err" || {
		echo "bench: the producer failed:" >&2; tail -n 5 "$OUT/producer-$run.err" >&2; exit 1; }
	# the drain is complete when the view shows everything ingested and nothing queued or staged
	"$OUT/benchmon" -p "$PIPE" -i 50 --until-drained "$EVENTS" --view-every 0 --timeout 900 >"$OUT/mon-$run-done.out" 2>&1 || {
		echo "bench: the workers did not drain the queue in 900 s" >&2; exit 1; }
	touch "$stop"
	wait "$mon_s" "$mon_p" || true
	WAL=$(sql -c "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '$l0')")
	check_exactonce
	if ! cmp -s <(sort "$DIR/truth.copy") <(sort "$DIR/truth-$run.copy"); then
		VERDICT="FAIL: the producer's stream differs from the event file's"
		log "   $VERDICT"
	fi
	# the files are the client's: COPY FROM STDIN
	sql -c "COPY bench.samples (t, ingested, queued, staged, latency_p50_ms, latency_p99_ms, pid, rss_anon_kb,
	        vm_hwm_kb, query_ms, cpu_s, vacuums, state_live, state_dead, state_autovacuums)
	        FROM STDIN (FORMAT csv, HEADER)" <"$OUT/samples-$run.csv"
	sql -c "COPY bench.probe (t, ingested, taken) FROM STDIN (FORMAT csv, HEADER)" <"$OUT/probe-$run.csv"
	sql -c "COPY bench.batches (batch, cum, sent_at, commit_at) FROM STDIN" <"$OUT/batches-$run.tsv"
	sql -c "UPDATE bench.samples SET run = '$run' WHERE run IS NULL;
	        UPDATE bench.probe SET run = '$run' WHERE run IS NULL;
	        UPDATE bench.batches SET run = '$run' WHERE run IS NULL"
	# end to end: from the first event sent to the aggregates holding the last
	IFS='|' read -r S_T0[$run] S_LAST[$run] S_DONE[$run] < <(sql -F '|' -c "
		SELECT min(sent_at), max(commit_at),
		       (SELECT min(t) FROM bench.probe WHERE run = '$run' AND ingested >= $EVENTS)
		  FROM bench.batches WHERE run = '$run'")
	SECS=$(calc "%.3f" "${S_DONE[$run]} - ${S_T0[$run]}")
	S_PROD[$run]=$(calc "%.0f" "$EVENTS / (${S_LAST[$run]} - ${S_T0[$run]})")
	record "$run" "$EVENTS" "$SECS" "$WAL" "$(mon_value "$run-samples" peak_rss_anon_kb)" "$(mon_value "$run-samples" cpu_s)" "$VERDICT"
	R_SIZES[$run]="$(sizes $PIPE.ingest_0 $PIPE.ingest_1 $PIPE.state $PIPE.ledger $PIPE.aggregates); state $(autovac $PIPE.state)"
	log "   producer $(th "${S_PROD[$run]}") events/s; end to end $(th "$(calc "%f" "$EVENTS / $SECS")") events/s"
}

SUS_RUNS=()
if [ "$SUSTAINED" = 1 ]; then
	SUS_RUNS+=(sus_rate)
	[ "$SMALL_BATCH" = 0 ] || [ "$SMALL_BATCH" = "$BATCH" ] || SUS_RUNS+=(sus_small)
	[ "$TARGET_RATE" = 0 ] || [ "$TARGET_RATE" = "$RATE" ] || SUS_RUNS+=(sus_target)
	SUS_RUNS+=(sus_max)
	for run in "${SUS_RUNS[@]}"; do
		case $run in
		sus_rate) r=$RATE; log "== 5. sustained: the producer offers $(th "$r") events/s while the workers drain" ;;
		sus_small) log "== 5. sustained: the producer offers $(th "$RATE") events/s in batches of $(th "$SMALL_BATCH") while the workers drain"
			sustained_run "$run" "$RATE" "$SMALL_BATCH"; continue ;;
		sus_target) r=$TARGET_RATE; log "== 5. sustained: the producer offers $(th "$r") events/s while the workers drain" ;;
		sus_max) r=0; log "== 5. sustained: the producer at its maximum rate while the workers drain" ;;
		esac
		sustained_run "$run" "$r"
	done
fi

# ---------------------------------------------------------------- 6. perf (optional)

if [ "$PERF" = 1 ]; then
	log "== 6. profile: perf record of the worker draining a pre-loaded queue"
	fresh_pipeline paused
	load_queue
	sql -c "CHECKPOINT"
	WPID=$(worker_pids)
	# a copy of the exactonce.so the worker runs, even if "make install"
	# replaced the file since (perf then cannot resolve its symbols)
	range=$(awk '/exactonce\.so/ && $2 ~ /x/ { print $1; exit }' "/proc/${WPID%%,*}/maps")
	[ -z "$range" ] || cp "/proc/${WPID%%,*}/map_files/$range" "$OUT/exactonce-worker.so" 2>/dev/null || true
	perf record -g -F 999 -p "$WPID" -o "$OUT/perf.data" 2>"$OUT/perf-record.err" &
	PERF_PID=$!
	BG_PIDS+=("$PERF_PID")
	sleep 0.5
	sql -c "SELECT exactonce.resume('$PIPE')" >/dev/null
	"$OUT/benchmon" -p "$PIPE" -i 100 --until-drained "$EVENTS" --view-every 0 --timeout 900 >/dev/null 2>&1 || true
	kill -INT "$PERF_PID" 2>/dev/null || true
	wait "$PERF_PID" 2>/dev/null || true
	check_exactonce
	[ "$VERDICT" = PASS ] || { FAILED=1; say "the profiled worker drain was not exact: $VERDICT"; }
	# the flame graph of the same profile (test/bench/flamegraph.py)
	perf script -i "$OUT/perf.data" 2>/dev/null |
		python3 test/bench/flamegraph.py "exactonce drain workers, $(th "$EVENTS") events over $(th "$TRADES") keys, $(date -u +%Y-%m-%d) $(git rev-parse --short HEAD 2>/dev/null)" \
		>"$OUT/flame-drain.svg" 2>"$OUT/flame-drain.err" || rm -f "$OUT/flame-drain.svg"
	# self time per (object, symbol); addresses in an exactonce.so that was
	# replaced on disk are resolved with addr2line on the copy taken above
	perf report -i "$OUT/perf.data" --stdio --no-children -g none --sort dso,symbol --percent-limit 0 \
		-t $'\t' 2>/dev/null | grep -v '^#' | grep -v '^$' |
		awk -F'\t' '{ p = $1; sub(/%.*/, "", p); gsub(/^ +| +$/, "", p); d = $2; gsub(/^ +| +$/, "", d)
		              sub(/ \(deleted\)$/, "", d); s = $3; sub(/^\[.\] /, "", s); gsub(/ +$/, "", s)
		              printf "%s\t%s\t%s\n", p, d, s }' >"$OUT/perf-raw.tsv" || true
	: >"$OUT/perf-addrmap.tsv"
	if [ -s "$OUT/exactonce-worker.so" ]; then
		awk -F'\t' '$2 == "exactonce.so" && $3 ~ /^0x/ { print $3 }' "$OUT/perf-raw.tsv" | sort -u >"$OUT/perf-addrs.txt"
		if [ -s "$OUT/perf-addrs.txt" ]; then
			addr2line -f -e "$OUT/exactonce-worker.so" $(cat "$OUT/perf-addrs.txt") | paste - - |
				paste "$OUT/perf-addrs.txt" - | awk -F'\t' '{ print $1 "\t" $2 }' >"$OUT/perf-addrmap.tsv" || true
		fi
	fi
	awk -F'\t' -v map="$OUT/perf-addrmap.tsv" \
		'BEGIN { while ((getline l < map) > 0) { split(l, a, "\t"); name[a[1]] = a[2] } }
	            { s = ($2 == "exactonce.so" && ($3 in name)) ? name[$3] : $3; t[$2 "\t" s] += $1; dso[$2] += $1 }
	            END { for (k in t) printf "%6.2f%%  %s\n", t[k], k > "/dev/stdout"
	                  for (d in dso) printf "%6.2f%%  %s\n", dso[d], d > "/dev/stderr" }' \
		"$OUT/perf-raw.tsv" 2>"$OUT/perf-worker-dso.txt" | sort -rn |
		awk -F'\t' '{ printf "%-40s %s\n", $1, $2 }' >"$OUT/perf-worker.txt" || true
	sort -rn -o "$OUT/perf-worker-dso.txt" "$OUT/perf-worker-dso.txt"
	# inclusive time of exactonce's functions (PostgreSQL on Debian keeps frame
	# pointers, so the call chains are whole); where the exactonce.so on disk
	# was replaced, its return addresses are made file-relative with the
	# mapping perf recorded and resolved, with their inlining chain, on the copy
	: >"$OUT/perf-worker-inclusive.txt"
	mm=$(perf script -i "$OUT/perf.data" --show-mmap-events 2>/dev/null |
		grep -m 1 -o '\[0x[0-9a-f]*(0x[0-9a-f]*) @ 0x[0-9a-f]* [^]]*\]: r-xp [^ ]*exactonce\.so' || true)
	mstart=0; mlen=0; moff=0
	if [ -n "$mm" ]; then
		mstart=$(sed 's/^\[\(0x[0-9a-f]*\)(.*/\1/' <<<"$mm")
		mlen=$(sed 's/^\[0x[0-9a-f]*(\(0x[0-9a-f]*\)).*/\1/' <<<"$mm")
		moff=$(sed 's/.* @ \(0x[0-9a-f]*\) .*/\1/' <<<"$mm")
	fi
	perf report -i "$OUT/perf.data" --stdio --children --sort dso,symbol -g none --percent-limit 0.3 -t $'\t' 2>/dev/null |
		grep -v '^#' | awk -F'\t' '{ c = $1; gsub(/[ %]/, "", c); d = $3; gsub(/^ +| +$/, "", d); sub(/ \(deleted\)$/, "", d)
		                            s = $4; sub(/^\[.\] /, "", s); gsub(/ +$/, "", s)
		                            if (d == "exactonce.so" || s ~ /^0x/) print c "\t" d "\t" s }' |
		while IFS=$'\t' read -r pct dso sym; do
			if [[ $sym != 0x* ]]; then
				printf '%s\t%s\n' "$pct" "$sym"
			elif [ -s "$OUT/exactonce-worker.so" ] && [ "$((sym))" -ge "$((mstart))" ] &&
				[ "$((sym))" -lt "$((mstart + mlen))" ]; then
				rel=$(printf '0x%x' $((sym - mstart + moff - 1)))
				printf '%s\t%s\n' "$pct" "$(addr2line -f -i -e "$OUT/exactonce-worker.so" "$rel" | sed -n '1~2p' | paste -sd '<' | sed 's/</ < /g')"
			fi
		done | awk -F'\t' '{ t[$2] += $1 } END { for (k in t) printf "%6.2f%%  %s\n", t[k], k }' |
		sort -rn >"$OUT/perf-worker-inclusive.txt" || true
fi

# ---------------------------------------------------------------- series and plot

if [ "$SUSTAINED" = 1 ]; then
	# The shards drain in parallel, each in insertion order: the events sent
	# up to a batch's end are all aggregated once every shard has taken its
	# own share of them.  That share, per shard, from the event file (the
	# stream's order) and the shard of each key (hashtext, as exactonce's).
	shares=$(for ((s = 0; s < SHARDS; s++)); do echo "count(*) FILTER (WHERE s = $s) OVER w"; done | paste -sd,)
	sql <<SQL
CREATE TABLE bench.stream (n bigserial, key text, version bigint, value numeric, risk_type text, region text,
                           trade_desk text, deleted boolean, event_time timestamptz);
COPY bench.stream (key, version, value, risk_type, region, trade_desk, deleted, event_time) FROM '$EV';
CREATE TABLE bench.shard_share AS
	SELECT cum, shares
	  FROM (SELECT n AS cum, ARRAY[$shares] AS shares
	          FROM (SELECT n, (hashtext(key)::bigint & 4294967295) % $SHARDS AS s FROM bench.stream) e
	        WINDOW w AS (ORDER BY n)) x
	 WHERE cum IN (SELECT cum FROM bench.batches);
CREATE TABLE bench.batch_latency AS
	SELECT b.run, b.batch, b.cum, b.sent_at, b.commit_at,
	       (SELECT min(p.t) FROM bench.probe p
	         WHERE p.run = b.run AND p.ingested >= b.cum
	           AND NOT EXISTS (SELECT 1 FROM unnest(p.taken, sh.shares) u(taken, share) WHERE taken < share)) AS agg_at
	  FROM bench.batches b JOIN bench.shard_share sh USING (cum);
SQL
	# each sample with the events the producer had committed by then: what is
	# committed and not taken yet (sent - ingested) is the queue's depth, known
	# at every sample (the view's queued scans the queue, so it is read on
	# every 20th sample only)
	sql -c "CREATE TABLE bench.series AS
		SELECT s.*, s.t - r.t0 AS t_s, r.t0,
		       (SELECT coalesce(max(cum), 0) FROM bench.batches b WHERE b.run = s.run AND b.commit_at <= s.t) AS sent
		  FROM bench.samples s JOIN (SELECT run, min(sent_at) AS t0 FROM bench.batches GROUP BY run) r USING (run)"
	# the output directory is the client's: COPY TO STDOUT
	sql >"$OUT/sustained.csv" <<SQL
COPY (
	SELECT run, round(t_s::numeric, 3) AS t_s, sent, ingested, greatest(sent - ingested, 0) AS queued, staged,
	       round(((ingested - lag(ingested) OVER w) / nullif(t - lag(t) OVER w, 0))::numeric) AS ingested_per_s,
	       round(((sent - lag(sent) OVER w) / nullif(t - lag(t) OVER w, 0))::numeric) AS sent_per_s,
	       latency_p50_ms, latency_p99_ms, rss_anon_kb,
	       round((100 * (cpu_s - lag(cpu_s) OVER w) / nullif(t - lag(t) OVER w, 0))::numeric) AS worker_cpu_pct,
	       vacuums, state_live, state_dead, state_autovacuums, nullif(queued, -1) AS queued_view
	  FROM bench.series s WINDOW w AS (PARTITION BY run ORDER BY t)
	 ORDER BY run DESC, t) TO STDOUT (FORMAT csv, HEADER);
SQL
	sql >"$OUT/sustained_latency.csv" <<SQL
COPY (
	SELECT l.run, l.batch, l.cum AS events_sent, round((l.sent_at - r.t0)::numeric, 3) AS t_s,
	       round(((l.agg_at - l.sent_at) * 1000)::numeric, 1) AS insert_to_aggregate_ms,
	       round(((l.agg_at - l.commit_at) * 1000)::numeric, 1) AS commit_to_aggregate_ms
	  FROM bench.batch_latency l JOIN (SELECT run, min(sent_at) AS t0 FROM bench.batches GROUP BY run) r USING (run)
	 ORDER BY l.run DESC, l.batch) TO STDOUT (FORMAT csv, HEADER);
SQL
	declare -A LAT
	while IFS='|' read -r run p50 p99 c50 c99 mx vp50 vp99 vmax; do
		LAT[$run]="$p50|$p99|$c50|$c99|$mx|$vp50|$vp99|$vmax"
	done < <(sql -F '|' -c "
		SELECT l.run,
		       round(percentile_cont(0.5) WITHIN GROUP (ORDER BY (agg_at - sent_at) * 1000)::numeric),
		       round(percentile_cont(0.99) WITHIN GROUP (ORDER BY (agg_at - sent_at) * 1000)::numeric),
		       round(percentile_cont(0.5) WITHIN GROUP (ORDER BY (agg_at - commit_at) * 1000)::numeric),
		       round(percentile_cont(0.99) WITHIN GROUP (ORDER BY (agg_at - commit_at) * 1000)::numeric),
		       round(max((agg_at - sent_at) * 1000)::numeric),
		       (SELECT round(latency_p50_ms) FROM bench.samples s WHERE s.run = l.run AND latency_p50_ms IS NOT NULL ORDER BY t DESC LIMIT 1),
		       (SELECT round(latency_p99_ms) FROM bench.samples s WHERE s.run = l.run AND latency_p99_ms IS NOT NULL ORDER BY t DESC LIMIT 1),
		       (SELECT round(max(latency_p99_ms)) FROM bench.samples s WHERE s.run = l.run)
		  FROM bench.batch_latency l GROUP BY l.run")
	declare -A QD
	# queue depth while the producer sends: its peak, and its trend over the
	# sending (bounded: growing by less than 5% of the send rate); and state's
	# dead rows, the work autovacuum has left: their peak, which must stay
	# below twice the count at which autovacuum starts on state (threshold +
	# scale factor x live rows) for autovacuum to have kept up, judged on runs
	# long enough for autovacuum to have come by twice
	while IFS='|' read -r run qmax slope bounded vac dmax dslope dbounded avs; do
		QD[$run]="$qmax|$slope|$bounded|$vac|$dmax|$dslope|$dbounded|$avs"
	done < <(sql -F '|' -c "
		WITH w AS (SELECT run, min(sent_at) AS t0, max(commit_at) AS t1, $EVENTS / (max(commit_at) - min(sent_at)) AS rate
		             FROM bench.batches GROUP BY run)
		SELECT w.run, max(s.sent - s.ingested),
		       round(coalesce(regr_slope(s.sent - s.ingested, s.t), 0)::numeric),
		       coalesce(regr_slope(s.sent - s.ingested, s.t), 0) < 0.05 * max(w.rate),
		       round(100 * avg((s.vacuums > 0)::int)),
		       max(s.state_dead),
		       round(2 * (current_setting('autovacuum_vacuum_threshold')::float8
		                  + current_setting('autovacuum_vacuum_scale_factor')::float8 * max(s.state_live))),
		       CASE WHEN max(w.t1 - w.t0) < 2 * extract(epoch FROM current_setting('autovacuum_naptime')::interval) THEN 'short'
		            WHEN max(s.state_dead) <= 2 * (current_setting('autovacuum_vacuum_threshold')::float8
		                                           + current_setting('autovacuum_vacuum_scale_factor')::float8 * max(s.state_live))
		            THEN 't' ELSE 'f' END,
		       max(s.state_autovacuums)
		  FROM bench.series s JOIN w USING (run)
		 WHERE s.t BETWEEN w.t0 AND w.t1 AND s.ingested >= 0
		 GROUP BY w.run")

	# plot_cmd FILE XCOL YCOL STYLE TITLE-FORMAT SHADE: the plot clauses of
	# one file for every sustained run ("plot" first, "," continuing)
	PLOT_FIRST=1
	plot_cmd() {
		local run color
		for run in "${SUS_RUNS[@]}"; do
			case $run:$6 in
			sus_rate:dark) color='#0000c0' ;; sus_rate:light) color='#a0a0ff' ;;
			sus_small:dark) color='#800080' ;; sus_small:light) color='#d0a0d0' ;;
			sus_target:dark) color='#008000' ;; sus_target:light) color='#90d090' ;;
			sus_max:dark) color='#c00000' ;; sus_max:light) color='#ffa0a0' ;;
			esac
			if [ "$PLOT_FIRST" = 1 ]; then printf 'plot '; PLOT_FIRST=0; else printf ', \\\n     '; fi
			printf '%s using (strcol(1) eq "%s" ? $%d : 1/0):%d with %s lc rgb "%s" title "%s"' \
				"$1" "$run" "$2" "$3" "$4" "$color" "$(printf "$5" "$(label "$run" | sed 's/^sustained, //')")"
		done
		[ "$5" != "${5#sent}" ] || [ "$5" != "${5#insert}" ] || { printf '\n'; PLOT_FIRST=1; }
	}
	if command -v gnuplot >/dev/null; then
		gnuplot <<GP 2>"$OUT/gnuplot.err" || log "bench: gnuplot failed (see $OUT/gnuplot.err)"
set terminal pngcairo size 1200,1000 font ",10"
set output '$OUT/sustained.png'
set datafile separator ','
set key top right
set grid
set xrange [-0.5:*]
set multiplot layout 3,1 title "exactonce sustained runs: $(th "$EVENTS") events each, the workers draining while the producer sends"
set ylabel 'events/s'
set format y '%.0s%c'
$(plot_cmd "'$OUT/sustained.csv'" 2 8 "lines lw 1" "sent, %s" light; plot_cmd "''" 2 7 "lines lw 2" "aggregated, %s" dark)
set ylabel 'queue depth (committed, not taken)'
$(plot_cmd "'$OUT/sustained.csv'" 2 5 "lines lw 2" "queued, %s" dark)
set ylabel 'latency (ms)'
set xlabel 'seconds since the first event was sent'
set format y '%g'
set logscale y
$(plot_cmd "'$OUT/sustained_latency.csv'" 4 5 "points pt 7 ps 0.4" "insert->aggregate per batch, %s" dark; plot_cmd "'$OUT/sustained.csv'" 2 10 "lines lw 1 dt 2" "pipeline latency p99, %s" dark)
unset multiplot
GP
	fi
fi

# ---------------------------------------------------------------- report

rate_of() { calc "%.0f" "${R_N[$1]} / ${R_SECS[$1]}"; }

EO_REV=$(git rev-parse --short HEAD 2>/dev/null || echo '?')
[ -z "$(git status --porcelain -- src 2>/dev/null)" ] || EO_REV="$EO_REV + uncommitted changes in src/"
[ "$BUILD" = 1 ] || EO_REV="$EO_REV (--no-build: the installed build, which may differ)"
say ""
say "$INVOCATION"
say "exactonce benchmark, $(date -u '+%Y-%m-%d %H:%M UTC'); $(sql -c "SELECT current_setting('server_version')"), exactonce $EO_REV"
BUSY1=$(busy_ticks)
OWN1=$(own_ticks)
HZ=$(getconf CLK_TCK)
CPU_NOTE=$(awk -v b=$((BUSY1 - BUSY0)) -v o=$((OWN1 - OWN0)) -v hz="$HZ" -v t="$(calc "%f" "$(now) - $T_RUNS0")" \
	'BEGIN { others = (b - o) / hz; if (others < 0) others = 0
	         printf "during the %.0f s of runs this benchmark used %.0f CPU-s, other processes %.0f CPU-s (%.2f cores on average)%s",
	                t, o / hz, others, others / t, (others / t > 0.2 ? ": a shared machine, figures are noisy" : "") }')
say "machine: $MACHINE; fsync on, synchronous_commit on, shared_buffers 1GB, 2 drain workers (2 key shards), batch_size $(sql -c "SHOW exactonce.batch_size")"
say "cpu: $CPU_NOTE"
say "events: $(th "$EVENTS") over $(th "$TRADES") trades: $(th "${P[new_trades]}") new, $(th "${P[modifications]}") modifications ($(th "${P[moved_trades]}") moving the trade to another cell), $(th "${P[tombstones]}") tombstones,"
say "        $(th "${P[duplicates]}") exact duplicates, $(th "${P[stale_resends]}") late stale versions; $(th "${P[live_trades]}") trades live at the end; seed $SEED"
say ""
say "$(printf '%-30s %10s %8s %10s %7s %9s %9s %5s  %s' run events seconds events/s "x COPY" "WAL B/ev" "peak mem" CPU exactness)"
for run in "${RUNS[@]}"; do
	ev_s=$(rate_of "$run")
	x=$(calc "%.3f" "$ev_s / $(rate_of copy)")
	mem=${R_MEM[$run]}
	[ -n "$mem" ] && [ "$mem" -ge 0 ] 2>/dev/null && mem=$(bytes "$((mem * 1024))") || mem="-"
	line=$(printf '%-30s %10s %8.2f %10s %7s %9.0f %9s %5s  %s' "$(label "$run")" "$(th "${R_N[$run]}")" "${R_SECS[$run]}" \
		"$(th "$ev_s")" "$x" "$(calc "%f" "${R_WAL[$run]} / ${R_N[$run]}")" "$mem" "${R_CPU[$run]}" "${R_EXACT[$run]}")
	[ -z "${R_NOTE[$run]}" ] || line="$line  (${R_NOTE[$run]})"
	say "$line"
done
say ""
say "notes on the table:"
say "  events/s: COPY, naive, flush and the peers are timed inside their session; the worker drain from resume() to the first"
say "  50 ms poll of the progress row seeing every event ingested and none staged (the view, whose queued scans the"
say "  queue -- seconds of CPU at millions of rows -- once, at the start; a poll took ${VIEW_POLL_MS} ms on average);"
say "  sustained from the first event sent to the probe seeing all events"
say "  aggregated. WAL: pg_current_wal_lsn() difference over the timed span (drains only: the queue load is not in it;"
say "  sustained runs include the producer's inserts). peak mem: peak RssAnon of the backend or drain worker doing"
say "  the work; CPU: its CPU time over the run's wall time (100% = one core busy); both sampled every 50-200 ms."
say "  COPY into $PIPE.ingest (the exactonce queue, paused) ran at $(th "$(calc "%f" "$EVENTS / $QUEUE_COPY_SECS")") events/s."
[ "$NAIVE" = 0 ] || [ "$NAIVE_PREFIX" = "$EVENTS" ] ||
	say "  naive as written ran on the first $(th "$NAIVE_PREFIX") events only (--naive-prefix): all $(th "$EVENTS") would take at least
  $(calc "%.0f" "$EVENTS / $(rate_of naive_written)") s at its rate on the prefix, and it slows down as it goes. Its truth is the SQL oracle over
  that prefix (the same oracle over all events equals the producer's truth: $([ "$oracle_ok" = 0 ] && echo yes || echo NO))."
if [ "$PEERS" = 1 ]; then
	say "  trigger pipeline: one COPY of all events into trig.ingest, whose statement-level trigger applies them in the same"
	say "  statement (test/bench/trigger.sql): the COPY's time is the pipeline's."
	if [ -z "$PGQ_MISSING" ]; then
		say "  PgQ: the enqueue COPYs the events, encoded beforehand as PgQ events with JSON data, into the queue's event table,"
		say "  a transaction and a pgq.ticker() (pgqd's work) per $(th "$PGQ_BATCH") events; the consumer (test/bench/pgq.sql) then takes a"
		say "  batch per tick.  Enqueue + consume: the sum of the two timed spans and of their WAL, the higher peak mem, the two"
		say "  sessions' CPU over both spans."
	else
		say "  $PGQ_MISSING"
	fi
fi
say "  exactonce counters (worker drain): $EO_COUNTERS"
say ""
say "table sizes at the end of each run (pg_total_relation_size):"
for run in "${RUNS[@]}"; do
	say "  $(printf '%-30s' "$(label "$run")") ${R_SIZES[$run]}"
done

ratio() { [ -n "${R_SECS[$1]:-}" ] && [ -n "${R_SECS[$2]:-}" ] && calc "%.2f" "$(rate_of "$1") / $(rate_of "$2")" || echo "n/a"; }
met() { awk -v a="$1" -v b="$2" 'BEGIN { print (a == "n/a") ? "not measured in this run" : ((a + 0 >= b + 0) ? "met" : "NOT met") }'; }
say ""
say "ratios and targets (issue 5):"
r_copy=$(ratio eo_workers copy)
r_naive=$(ratio eo_workers naive_tuned)
say "  exactonce worker drain / COPY        $r_copy   target >= 0.25 (stretch 0.5): $(met "$r_copy" 0.25)"
say "  exactonce worker drain / naive tuned $r_naive   target >= 2: $(met "$r_naive" 2)"
say "  exactonce flush / COPY               $(ratio eo_flush copy);  flush / naive tuned $(ratio eo_flush naive_tuned)"
if [ "$AGGREGATES" = 1 ]; then
	r_minmax=$(ratio eo_minmax eo_plain)
	r_distinct=$(ratio eo_distinct eo_plain)
	say "  worker drain, 2 measures / plain     $(ratio eo_measures eo_plain)   (plain: the plain drain run again beside them in section 3b; medians of $AGG_ROUNDS round(s))"
	say "  + min/max / plain                    $r_minmax   target >= 0.8 (issue 31): $(met "$r_minmax" 0.8);  / 2 measures $(ratio eo_minmax eo_measures)"
	say "  + distinct / plain                   $r_distinct   target >= 0.7 (issue 31): $(met "$r_distinct" 0.7);  / 2 measures $(ratio eo_distinct eo_measures)"
	say "  worker drain, with the feed / plain  $(ratio eo_feed eo_workers);  with a retention horizon / plain $(ratio eo_prune eo_workers)"
	say "  worker drain, cube / plain           $(ratio eo_cube eo_workers);  accumulate, in windows / plain accumulate $(ratio eo_windows eo_readings)"
fi
[ -z "${R_SECS[naive_written]:-}" ] || say "  naive tuned / naive as written       $(ratio naive_tuned naive_written)"
if [ "$PEERS" = 1 ]; then
	say "  exactonce worker drain / trigger     $(ratio eo_workers trigger);  worker drain / PgQ enqueue + consume $(ratio eo_workers pgq)"
	say "    (the trigger's and PgQ's figures include their ingest, the worker drain's does not: its queue was loaded before)"
fi

if [ "$SUSTAINED" = 1 ]; then
	say ""
	say "sustained runs (the same events, sent by tools/producer in COPY batches of $(th "$BATCH") unless the run says otherwise, while the workers drain):"
	for run in "${SUS_RUNS[@]}"; do
		IFS='|' read -r p50 p99 c50 c99 mx vp50 vp99 vmax <<<"${LAT[$run]}"
		IFS='|' read -r qmax slope bounded vac dmax dslope dbounded avs <<<"${QD[$run]}"
		say "  $(label "$run"): producer sent $(th "${S_PROD[$run]}") events/s; end to end $(th "$(rate_of "$run")") events/s; all aggregated $(calc "%.2f" "${S_DONE[$run]} - ${S_LAST[$run]}") s after the last commit"
		say "     queue depth (events committed and not yet taken, every 200 ms): peak $(th "$qmax") events, trend while sending $(th "$slope") events/s: $([ "$bounded" = t ] && echo bounded || echo GROWING)"
		say "     workers' CPU ${R_CPU[$run]} of a core; a (auto)vacuum was running in $vac% of the samples while the producer sent"
		say "     state's dead rows: peak $(th "$dmax") (limit: twice autovacuum's trigger, $(th "$dslope")): autovacuum $(case $dbounded in t) echo "kept up" ;; f) echo "FELL BEHIND" ;; *) echo "not judged: the run was shorter than two autovacuum naptimes" ;; esac) ($avs autovacuums of state)"
		say "     insert->aggregate latency per producer batch: p50 $p50 ms, p99 $p99 ms, max $mx ms (commit->aggregate: p50 $c50 ms, p99 $c99 ms)"
		say "     pipeline's own latency (exactonce.pipelines, last 100 batches, at the end): p50 ${vp50:-?} ms, p99 ${vp99:-?} ms; highest p99 seen ${vmax:-?} ms"
	done
	IFS='|' read -r _ p99 _ _ _ _ vp99 _ <<<"${LAT[sus_rate]}"
	# sustained throughput: a run whose producer delivered >= 150,000 events/s
	# with the queue bounded kept up with that rate
	verdict="NOT met"
	for run in "${SUS_RUNS[@]}"; do
		IFS='|' read -r _ _ bounded _ <<<"${QD[$run]}"
		[ "$bounded" = t ] && [ "$(met "${S_PROD[$run]}" 150000)" = met ] && verdict="met ($(label "$run"))"
	done
	if [ -n "${S_PROD[sus_target]:-}" ]; then
		IFS='|' read -r qmax _ bounded _ <<<"${QD[sus_target]}"
		say "  target: sustained >= 150,000 events/s with bounded queue depth: at $(th "$TARGET_RATE")/s offered the producer delivered $(th "${S_PROD[sus_target]}")/s,"
		say "          the queue $([ "$bounded" = t ] && echo "stayed bounded" || echo grew) (peak $(th "$qmax")), end to end $(th "$(rate_of sus_target)")/s; max rate end to end $(th "$(rate_of sus_max)")/s: $verdict"
	else
		say "  target: sustained >= 150,000 events/s with bounded queue depth: max rate end to end $(th "$(rate_of sus_max)")/s: $verdict"
	fi
	say "  target: p99 < 250 ms at 50,000 events/s offered: measured p99 $p99 ms at $(th "$RATE")/s offered$( [ "$RATE" = 50000 ] || echo " (not 50,000!)"): $(awk -v p="$p99" 'BEGIN { print (p + 0 < 250) ? "met" : "NOT met" }') (pipeline's own p99: ${vp99:-?} ms)"
	if [ -n "${LAT[sus_small]:-}" ]; then
		IFS='|' read -r _ sp99 _ _ _ _ svp99 _ <<<"${LAT[sus_small]}"
		say "  target: p99 <= 40 ms insert->aggregate at 50,000 events/s offered: p99 $p99 ms in producer batches of $(th "$BATCH"),"
		say "          $sp99 ms in batches of $(th "$SMALL_BATCH") (pipeline's own p99: ${svp99:-?} ms): $(awk -v p="$sp99" 'BEGIN { print (p + 0 <= 40) ? "met" : "NOT met" }')$( [ "$RATE" = 50000 ] || echo " (offered $(th "$RATE")/s, not 50,000!)")"
	fi
	say "  latency method: the producer logs each batch's event_time (taken when it starts the batch, the time in every"
	say "  row's event_time) and its commit time; a probe reads the events each shard took ($PIPE.shard.taken) every"
	say "  10 ms (small reads that never wait); a batch is aggregated at the first probe where every shard has taken its"
	say "  share of the events sent up to and including it (a shard drains in insertion order and commits state, ledger,"
	say "  aggregates and counters in one transaction; the shares come from the event file and hashtext(key), the shard"
	say "  function). Latency = that probe's time - the batch's event_time: an upper bound, 10 ms resolution."
	say "  time series: $OUT/sustained.csv, $OUT/sustained_latency.csv"
	[ -f "$OUT/sustained.png" ] && say "  plot: $OUT/sustained.png"
fi

if [ "$PERF" = 1 ] && [ -s "$OUT/perf-worker.txt" ]; then
	say ""
	say "profile of the drain worker (perf record -F 999 -p <worker>; self time by shared object):"
	head -n 12 "$OUT/perf-worker-dso.txt" | sed 's/^/  /' | tee -a "$SUMMARY"
	say "top symbols (self time):"
	head -n 25 "$OUT/perf-worker.txt" | sed 's/^/  /' | tee -a "$SUMMARY"
	if [ -s "$OUT/perf-worker-inclusive.txt" ]; then
		say "exactonce functions, time including callees (a < b: a inlined in b; call sites of one function summed):"
		head -n 20 "$OUT/perf-worker-inclusive.txt" | sed 's/^/  /' | tee -a "$SUMMARY"
	fi
	say "  (full: $OUT/perf-worker.txt, data: $OUT/perf.data)"
	[ ! -s "$OUT/flame-drain.svg" ] || say "  flame graph: $OUT/flame-drain.svg"
fi

say ""
if [ "$FAILED" = 0 ]; then
	say "verdict: every run exact (aggregates and state equal the producer's truth; counters add up)"
else
	say "verdict: FAIL: a run was not exact (see the exactness column)"
fi
say "summary: $SUMMARY"
exit "$FAILED"
