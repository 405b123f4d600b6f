#!/usr/bin/env bash
# test/bench/scaling.sh: scaling curves of exactonce's worker drain.
#
# Every point is one run of test/bench/run.sh's section 3 ("exactonce
# workers"): a fresh pipeline, paused, its queue loaded with a set of events,
# a CHECKPOINT, then resume() and the time until the pipeline has taken every
# event and staged none (test/bench/benchmon --until-drained, polled every
# 50 ms).  For each point it records the drain's events/s, the WAL it wrote
# per event (pg_current_wal_lsn() before resume and after the drain) and the
# peak RssAnon of the drain workers (benchmon --pid, sampled every 50 ms; the
# largest of the two workers), and checks that the drain was exact: the
# pipeline's aggregates and state equal a truth computed independently, and
# its counters obey ingested = applied + duplicates + stale + dead_lettered
# with ingested = the events loaded, nothing dead-lettered, queued or staged.
#
# Sweeps (all on the cluster of tools/cluster.sh: fsync and synchronous_commit
# on, shared_buffers 1GB, exactonce.workers = 2; the same event mix as run.sh:
# ~10% exact duplicates, ~10% late stale versions, ~10% moves, 2% tombstones,
# written by tools/producer --output):
#
#   keys    distinct keys (trades): 10k, 100k, 1M, 2M by default, events =
#           5 x keys (capped by --max-events); 3 dimensions, 2 shards.  Truth:
#           the producer's --truth-file and --truth-state-file.
#   dims    1 to 6 dimensions over one event set (--base-keys keys, 5 x as
#           many events).  A pipeline with N dimensions takes the first N of
#           risk_type, region, trade_desk (the producer's) and book, currency,
#           counterparty, derived from md5(key): book = 16 values, currency 8,
#           counterparty 32, by the first three bytes of the digest.  So the
#           derived dimensions are fixed per key (a key's moves stay in the
#           producer's dimensions) and every N drains the same events; only
#           the rollup's width and the number of cells change (up to 368,640
#           leaf cells at 6).  The events file is COPYed once into a staging
#           table with the derived columns computed, and each point loads its
#           queue with INSERT ... SELECT from it in file order.  Truth: an
#           oracle in SQL over the staged events: each key's highest version
#           (DISTINCT ON (key) ORDER BY key, version DESC), WHERE NOT deleted,
#           GROUP BY ROLLUP of the N dimensions, level = the number of
#           dimensions not rolled up, compared with EXCEPT ALL both ways.  The
#           oracle is checked once against the producer's truth at 3 dims.
#   batch   exactonce.batch_size 1000, 10000, 100000 (ALTER SYSTEM and
#           pg_reload_conf(); the workers reload it on SIGHUP) on the
#           --base-keys event set, 3 dimensions, 2 shards; batches start at
#           10,000 events (or batch_size, if smaller) and double toward it.
#           The CSV's batches column shows how many the drain took.
#   shards  create_pipeline(..., shards => 1, 2, 4) with exactonce.workers =
#           2, on the --base-keys event set, 3 dimensions.
#   latency distinct keys 10k, 200k, 1M while tools/producer streams up to
#           20 s of events (at most 40 per key) at --latency-rate (50,000/s) into the running
#           pipeline: the pipeline's own p50 and p99 latency at the end
#           (exactonce.pipelines, its last 100 batches: from a batch's oldest
#           event_time, set when the producer starts the batch, to the end of
#           the step that applied it), events/s end to end, WAL per event
#           with the producer's inserts.  Truth: the producer's.
#
# Output in --out (default test/bench/out/scaling-<timestamp>): scaling.csv,
# one row per point (sweep, x, events, events_per_s, wal_b_per_ev,
# peak_rss_kb, exact, then keys, dims, shards, batch_size, seconds, batches,
# worker_cpu_pct and a note saying why a point is not exact), scaling.txt (the
# same as a table, with the run's settings), and with gnuplot (gnuplot-nox,
# from test/deps.sh) scaling-keys.png, scaling-dims.png, scaling-batch.png,
# scaling-shards.png: events/s, WAL bytes/event and peak RssAnon against the
# swept value (test/bench/scaling.gp).
#
# Only the latency sweep has latency: the others drain a queue loaded before
# the drain starts, where an event's latency is its wait in that backlog.
#
#   bash test/bench/scaling.sh [--quick] [--sweeps "keys dims batch shards latency"] [...]   (--help)
#
# It builds nothing: install the extension first (make && make install, or one
# run of test/bench/run.sh, which does).  It builds tools/producer and
# benchmon.  Run it as root or as a user that can run the PostgreSQL 15 server
# binaries.  Exit status: 0 every point exact, 1 a point was not exact or did
# not drain, 2 usage or setup error.
set -euo pipefail

usage() {
	cat <<'EOF'
usage: bash test/bench/scaling.sh [options]

Sweeps:
  --sweeps "LIST"      which sweeps, in this order (default "keys dims batch shards latency")
  --keys "LIST"        keys of the keys sweep (default "10000 100000 1000000 2000000";
                       at most 20000000 each)
  --max-events N       most events of a keys point (default 30000000); events are
                       5 x keys below it.  The event mix needs at least 1.5 x keys
  --base-keys N        keys of the event set of the dims, batch and shards sweeps
                       (default 200000, with 5 x as many events)
  --dims "LIST"        dimension counts, 1 to 6 (default "1 2 3 4 5 6")
  --batch-sizes "LIST" exactonce.batch_size values (default "1000 10000 100000")
  --shards "LIST"      shard counts, with 2 workers (default "1 2 4")
  --latency-keys "LIST"  keys of the latency sweep (default "10000 200000 1000000")
  --latency-rate N     events/s the producer streams in the latency sweep (default 50000)
  --seed N             random seed of the producer (default 42)
  --quick              a smoke test: keys "2000 10000", --max-events 20000,
                       --base-keys 2000, latency keys "2000 10000" streamed for
                       at most 2 s at 10,000/s (explicit options win)
Cluster and output:
  --dir DIR            cluster directory (default /tmp/exactonce-scaling); wiped at
                       the start, so it must not exist or have been made by this script
  --port N             cluster port (default 55465)
  --out DIR            output directory (default test/bench/out/scaling-<timestamp>)
  --no-build           accepted for symmetry with run.sh: this script never builds
                       or installs the extension (install it first)
  --keep               leave the cluster running at the end
  -h, --help           this help
EOF
}

INVOCATION="bash test/bench/scaling.sh${*:+ $*}"
cd "$(dirname "$0")/../.."
SWEEPS="keys dims batch shards latency"
KEYS=
MAX_EVENTS=
BASE_KEYS=
DIMS_LIST="1 2 3 4 5 6"
BATCH_LIST="1000 10000 100000"
SHARDS_LIST="1 2 4"
LAT_KEYS=
LAT_RATE=50000
LAT_SECONDS=20			# how long a latency point streams, at most
SEED=42
QUICK=0
DIR=/tmp/exactonce-scaling
PORT=55465
OUT=
KEEP=0

need_arg() { [ $# -ge 2 ] || { echo "scaling: $1 needs a value" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
	case "$1" in
	--sweeps) need_arg "$@"; SWEEPS=$2; shift 2 ;;
	--keys) need_arg "$@"; KEYS=$2; shift 2 ;;
	--max-events) need_arg "$@"; MAX_EVENTS=$2; shift 2 ;;
	--base-keys) need_arg "$@"; BASE_KEYS=$2; shift 2 ;;
	--dims) need_arg "$@"; DIMS_LIST=$2; shift 2 ;;
	--batch-sizes) need_arg "$@"; BATCH_LIST=$2; shift 2 ;;
	--shards) need_arg "$@"; SHARDS_LIST=$2; shift 2 ;;
	--latency-keys) need_arg "$@"; LAT_KEYS=$2; shift 2 ;;
	--latency-rate) need_arg "$@"; LAT_RATE=$2; shift 2 ;;
	--seed) need_arg "$@"; SEED=$2; shift 2 ;;
	--quick) QUICK=1; shift ;;
	--dir) need_arg "$@"; DIR=$2; shift 2 ;;
	--port) need_arg "$@"; PORT=$2; shift 2 ;;
	--out) need_arg "$@"; OUT=$2; shift 2 ;;
	--no-build) shift ;;
	--keep) KEEP=1; shift ;;
	-h | --help) usage; exit 0 ;;
	*) echo "scaling: unknown option $1" >&2; usage >&2; exit 2 ;;
	esac
done
if [ "$QUICK" = 1 ]; then
	: "${KEYS:=2000 10000}" "${MAX_EVENTS:=20000}" "${BASE_KEYS:=2000}" "${LAT_KEYS:=2000 10000}"
	LAT_RATE=10000 LAT_SECONDS=2
fi
: "${KEYS:=10000 100000 1000000 2000000}" "${MAX_EVENTS:=30000000}" "${BASE_KEYS:=200000}"
: "${LAT_KEYS:=10000 200000 1000000}"

# whole LIST NAME MIN MAX: every word of LIST a whole number in [MIN, MAX]
whole() {
	local w
	[ -n "${1// /}" ] || { echo "scaling: $2 is empty" >&2; exit 2; }
	for w in $1; do
		[[ $w =~ ^[0-9]+$ ]] && [ "$w" -ge "$3" ] && [ "$w" -le "$4" ] ||
			{ echo "scaling: $2: $w is not a whole number from $3 to $4" >&2; exit 2; }
	done
}
whole "$KEYS" --keys 100 20000000
whole "$MAX_EVENTS" --max-events 1000 1000000000
whole "$BASE_KEYS" --base-keys 100 20000000
whole "$DIMS_LIST" --dims 1 6
whole "$BATCH_LIST" --batch-sizes 1 1000000
whole "$SHARDS_LIST" --shards 1 64
whole "$LAT_KEYS" --latency-keys 100 20000000
whole "$LAT_RATE" --latency-rate 1000 10000000
whole "$SEED" --seed 0 4294967295
whole "$PORT" --port 1 65535
for s in $SWEEPS; do
	case $s in keys | dims | batch | shards | latency) ;; *) echo "scaling: unknown sweep $s (keys, dims, batch, shards, latency)" >&2; exit 2 ;; esac
done
[[ $DIR == /* ]] || { echo "scaling: --dir must be an absolute path" >&2; exit 2; }
# events of a keys point: 5 x keys, capped; the producer's mix needs each
# key's first version plus the duplicate, stale, tombstone and move fractions
events_for() {
	local e=$(($1 * 5))
	[ "$e" -le "$MAX_EVENTS" ] || e=$MAX_EVENTS
	echo "$e"
}
for k in $KEYS; do
	e=$(events_for "$k")
	[ $((e * 2)) -ge $((k * 3)) ] ||
		{ echo "scaling: $k keys need at least $((k * 3 / 2)) events; --max-events is $MAX_EVENTS" >&2; exit 2; }
done
BASE_EVENTS=$((BASE_KEYS * 5))
# tools/cluster.sh wipes its directory: only ever touch one this script made
if [ -e "$DIR" ] && [ ! -e "$DIR/.exactonce-scaling" ]; then
	echo "scaling: $DIR exists and was not made by this script; choose another --dir" >&2
	exit 2
fi

STAMP=$(date +%Y%m%d-%H%M%S)
[ -n "$OUT" ] || OUT=test/bench/out/scaling-$STAMP
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
CSV=$OUT/scaling.csv
SUMMARY=$OUT/scaling.txt

export PGHOST=$DIR PGPORT=$PORT PGUSER=postgres PGDATABASE=postgres
unset PGSERVICE PGPASSWORD
export PGOPTIONS="-c client_min_messages=warning"
PSQL=(psql -X -q -At -v ON_ERROR_STOP=1)
# run.sh's event mix, so that the points here and its figures are comparable
MIX=(--duplicates 0.10 --stale 0.10 --tombstones 0.02 --moves 0.10 --batch 5000 --seed "$SEED")
PIPE=trades
ALL_DIMS=(risk_type region trade_desk book currency counterparty)
COLS3="key, version, value, risk_type, region, trade_desk, deleted, event_time"
DEFAULT_SHARDS=2		# run.sh's: one shard per drain worker

now() { date +%s.%N; }
log() { printf '%s\n' "$*" >&2; }
sql() { "${PSQL[@]}" "$@"; }
calc() { awk "BEGIN { printf \"$1\", $2 }"; }
th() { awk -v x="$1" 'BEGIN { s = sprintf("%.0f", x); r = ""
	while (length(s) > 3) { r = "," substr(s, length(s) - 2) r; s = substr(s, 1, length(s) - 3) }
	print s r }'; }

# ---------------------------------------------------------------- tools

make -s -C tools producer
cc -O2 -Wall -Wextra -o "$OUT/benchmon" test/bench/benchmon.c -I"$(pg_config --includedir)" \
	-L"$(pg_config --libdir)" -lpq
# fail on a bad mix before a cluster is started, not at the last point
for k in $KEYS; do
	tools/producer --dry-run --events "$(events_for "$k")" --trades "$k" "${MIX[@]}" >/dev/null || exit 2
done
tools/producer --dry-run --events "$BASE_EVENTS" --trades "$BASE_KEYS" "${MIX[@]}" >/dev/null || exit 2
[ -f "$(pg_config --sharedir)/extension/exactonce.control" ] ||
	{ echo "scaling: exactonce is not installed (make && make install first)" >&2; exit 2; }
GNUPLOT=1
command -v gnuplot >/dev/null || { GNUPLOT=0; log "scaling: gnuplot is missing (test/deps.sh installs gnuplot-nox); no plots"; }

# ---------------------------------------------------------------- cluster

if [ -f "$DIR/data/postmaster.pid" ]; then
	log "== stopping the scaling cluster left running in $DIR"
	bash tools/cluster.sh stop "$DIR"
fi

CLUSTER_UP=0
MON_PID=
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	if [ -n "$MON_PID" ]; then
		kill "$MON_PID" 2>/dev/null || true
		wait "$MON_PID" 2>/dev/null || true
	fi
	if [ "$CLUSTER_UP" = 1 ]; then
		cp "$DIR/server.log" "$OUT/server.log" 2>/dev/null || true
		if [ "$KEEP" = 1 ]; then
			log "cluster left running: PGHOST=$DIR PGPORT=$PORT psql -U postgres"
			log "stop it with: bash tools/cluster.sh stop $DIR"
		else
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
touch "$DIR/.exactonce-scaling"

sql <<'SQL'
CREATE EXTENSION exactonce;
CREATE SCHEMA bench;
-- rows of two relations that the other lacks, both ways (EXCEPT ALL: a row
-- present twice on one side and once on the other counts)
CREATE FUNCTION bench.diff(a text, b text) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE n bigint;
BEGIN
	EXECUTE format('SELECT (SELECT count(*) FROM (SELECT * FROM %s EXCEPT ALL SELECT * FROM %s) x)
	                     + (SELECT count(*) FROM (SELECT * FROM %s EXCEPT ALL SELECT * FROM %s) y)',
	               a, b, b, a) INTO n;
	RETURN n;
END $$;
-- the producer's truth of the event set being drained
CREATE TABLE bench.truth (risk_type text, region text, trade_desk text, level integer, total numeric, keys bigint);
CREATE TABLE bench.truth_state (key text, version bigint, value numeric, risk_type text,
                                region text, trade_desk text, deleted boolean);
SQL

# the workers must be up before a point samples them
for _ in $(seq 100); do
	[ "$(sql -c "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'exactonce drain'")" -ge 2 ] && break
	sleep 0.1
done

# ---------------------------------------------------------------- helpers

# gen_events FILE KEYS EVENTS: the events and the producer's truth (FILE.truth,
# FILE.truth_state), readable by the server
gen_events() {
	tools/producer -q --events "$3" --trades "$2" "${MIX[@]}" --output "$1" --truth-file "$1.truth" \
		--truth-state-file "$1.truth_state" >"$OUT/producer-$(basename "$1" .copy).out"
	chmod a+r "$1" "$1.truth" "$1.truth_state"
}

# load_truth FILE: the producer's truth of FILE into bench.truth and bench.truth_state
load_truth() {
	sql >/dev/null <<SQL
TRUNCATE bench.truth, bench.truth_state;
COPY bench.truth FROM '$1.truth';
COPY bench.truth_state FROM '$1.truth_state';
ANALYZE bench.truth, bench.truth_state;
SQL
}

# dims_of N: the first N dimension columns, comma separated
dims_of() { local IFS=,; echo "${ALL_DIMS[*]:0:$1}" | sed 's/,/, /g'; }

# fresh_pipeline N SHARDS: drop the pipeline and create it paused with the
# first N dimensions, so the workers leave its queue alone while it loads
fresh_pipeline() {
	local arr
	arr=$(printf "'%s'," "${ALL_DIMS[@]:0:$1}")
	sql >/dev/null <<SQL
SELECT exactonce.drop_pipeline('$PIPE', force => true) FROM exactonce.pipeline WHERE name = '$PIPE';
SELECT exactonce.create_pipeline('$PIPE', ARRAY[${arr%,}], shards => $2);
SELECT exactonce.pause('$PIPE');
SQL
}

# worker_pids: the drain workers' pids, comma separated
worker_pids() {
	sql -c "SELECT string_agg(pid::text, ',' ORDER BY pid) FROM pg_stat_activity
	         WHERE backend_type = 'exactonce drain' AND datname = current_database()"
}

# check N TRUTH TRUTH_STATE EVENTS: the drained pipeline (N dimensions)
# against the truth relations and its counters; sets VERDICT (PASS or FAIL),
# NOTE (why not) and BATCHES
check() {
	local d r agg st ingested applied dup stale dead queued staged fails=()
	d=$(dims_of "$1")
	# work_mem: EXCEPT ALL of millions of state rows hashed, not sorted on disk
	r=$(sql -F '|' <<SQL
SET work_mem = '256MB';
SELECT bench.diff('(SELECT $d, level, total, keys FROM $PIPE.aggregates) a', '$2'),
       bench.diff('(SELECT key, version, value, $d, deleted FROM $PIPE.state) s', '$3'),
       ingested, applied, duplicates, stale, dead_lettered, queued, staged, batches
  FROM exactonce.pipelines WHERE name = '$PIPE';
SQL
)
	IFS='|' read -r agg st ingested applied dup stale dead queued staged BATCHES <<<"$r"
	[ "$agg" = 0 ] || fails+=("$agg aggregate rows differ from the truth")
	[ "$st" = 0 ] || fails+=("$st state rows differ from the truth")
	[ "$ingested" = "$4" ] || fails+=("ingested $ingested != $4 events")
	[ "$ingested" = $((applied + dup + stale + dead)) ] ||
		fails+=("ingested $ingested != applied + duplicates + stale + dead_lettered = $((applied + dup + stale + dead))")
	[ "$dead" = 0 ] || fails+=("$dead dead-lettered (the stream has no bad event)")
	[ "$queued" = 0 ] && [ "$staged" = 0 ] || fails+=("queued $queued, staged $staged at the end")
	if [ ${#fails[@]} = 0 ]; then
		VERDICT=PASS NOTE=
	else
		VERDICT=FAIL NOTE=$(IFS=';'; echo "${fails[*]}")
	fi
	COUNTERS="ingested $(th "$ingested") = applied $(th "$applied") + duplicates $(th "$dup") + stale $(th "$stale") + dead-lettered $(th "$dead")"
}

FAILED=0
echo "sweep,x,events,events_per_s,wal_b_per_ev,peak_rss_kb,exact,keys,dims,shards,batch_size,seconds,batches,worker_cpu_pct,p50_ms,p99_ms,note" >"$CSV"

# point SWEEP X KEYS EVENTS N SHARDS TRUTH TRUTH_STATE LOAD-COMMAND...: one
# drain of a fresh pipeline with N dimensions and SHARDS shards, its queue
# filled by LOAD-COMMAND, checked against the truth relations; a CSV row
point() {
	local sweep=$1 x=$2 keys=$3 events=$4 n=$5 shards=$6 truth=$7 truth_state=$8 wpid l0 t0 done_at secs wal
	local rate="" walev="" rss="" cpu="" timeout mon=$OUT/mon-$1-$2 ok=1
	shift 8
	P50= P99=
	log "== $sweep = $x: $(th "$events") events over $(th "$keys") keys, $n dimensions, $shards shards, batch_size $(sql -c "SHOW exactonce.batch_size")"
	fresh_pipeline "$n" "$shards"
	[ "$sweep" = latency ] || "$@"
	sql -c "CHECKPOINT"
	wpid=$(worker_pids)
	[ -n "$wpid" ] || { echo "scaling: no exactonce drain worker is running (see $DIR/server.log)" >&2; exit 1; }
	# generous: a drain slower than 1,000 events/s is broken, not slow
	timeout=$((events / 1000 > 300 ? events / 1000 : 300))
	l0=$(sql -c "SELECT pg_current_wal_lsn()")
	t0=$(now)
	sql -c "SELECT exactonce.resume('$PIPE')" >/dev/null
	"$OUT/benchmon" -p "$PIPE" -i 50 --pid "$wpid" --reset-hwm --until-drained "$events" --view-every 0 --timeout "$timeout" \
		-o "$mon.csv" >"$mon.out" 2>"$mon.err" &
	MON_PID=$!
	# latency: the events arrive while the workers drain (LOAD-COMMAND streams them)
	[ "$sweep" != latency ] || "$@" || ok=0
	[ "$ok" = 1 ] || kill "$MON_PID" 2>/dev/null || true
	if [ "$ok" = 1 ] && wait "$MON_PID"; then
		MON_PID=
		done_at=$(awk '$1 == "done_at" { print $2 }' "$mon.out")
		secs=$(calc "%.3f" "$done_at - $t0")
		wal=$(sql -c "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '$l0')")
		rate=$(calc "%.0f" "$events / $secs")
		walev=$(calc "%.1f" "$wal / $events")
		rss=$(awk '$1 == "peak_rss_anon_kb" { print $2 }' "$mon.out")
		cpu=$(awk -v s="$secs" '$1 == "cpu_s" { printf "%.0f", ($2 >= 0 && s > 0) ? 100 * $2 / s : -1 }' "$mon.out")
		check "$n" "$truth" "$truth_state" "$events"
		if [ "$sweep" = latency ]; then
			IFS='|' read -r P50 P99 < <(sql -F '|' -c "SELECT round(extract(epoch FROM latency_p50) * 1000, 1),
			                                                  round(extract(epoch FROM latency_p99) * 1000, 1)
			                                             FROM exactonce.pipelines WHERE name = '$PIPE'")
		fi
	else
		MON_PID=
		secs=""
		if [ "$ok" = 1 ]; then
			NOTE="not drained within $timeout s (see $mon.err)"
		else
			NOTE="the producer failed (see $OUT/producer-latency-$keys.out)"
		fi
		VERDICT=FAIL BATCHES="" COUNTERS=""
		sql -c "SELECT exactonce.pause('$PIPE')" >/dev/null
	fi
	[ "$VERDICT" = PASS ] || FAILED=1
	echo "$sweep,$x,$events,$rate,$walev,$rss,$VERDICT,$keys,$n,$shards,$(sql -c "SHOW exactonce.batch_size"),$secs,$BATCHES,$cpu,${P50:-},${P99:-},\"$NOTE\"" >>"$CSV"
	log "   ${rate:+$(th "$rate") events/s, }${walev:+$walev WAL B/event, }${rss:+peak RssAnon $((rss / 1024)) MB, }${P99:+p50 $P50 ms, p99 $P99 ms, }$VERDICT${NOTE:+: $NOTE}"
	[ -z "$COUNTERS" ] || log "   $COUNTERS in $(th "$BATCHES") batches"
}

load_copy() { sql -c "COPY $PIPE.ingest ($COLS3) FROM '$1'" >/dev/null; }

# stream FILE KEYS EVENTS: tools/producer sends the events into the running
# pipeline at LAT_RATE, its truth to FILE.truth and FILE.truth_state
stream() {
	tools/producer -q --events "$3" --trades "$2" "${MIX[@]}" --rate "$LAT_RATE" --pipeline "$PIPE" \
		--truth-file "$1.truth" --truth-state-file "$1.truth_state" >"$OUT/producer-latency-$2.out" 2>&1 &&
		chmod a+r "$1.truth" "$1.truth_state" && load_truth "$1"
}

# load_dims N: the staged events, with the first N dimensions, in file order
load_dims() {
	local d
	d=$(dims_of "$1")
	sql -c "INSERT INTO $PIPE.ingest (key, version, value, $d, deleted, event_time)
	        SELECT key, version, value, $d, deleted, event_time FROM bench.events ORDER BY n" >/dev/null
}

# the event set of the dims, batch and shards sweeps, made when first needed
BASE=$DIR/events-base.copy
base_events() {
	[ -f "$BASE" ] && return
	log "== generating the base event set: $(th "$BASE_EVENTS") events over $(th "$BASE_KEYS") keys"
	gen_events "$BASE" "$BASE_KEYS" "$BASE_EVENTS"
	sql >/dev/null <<SQL
CREATE TABLE bench.base_truth (LIKE bench.truth);
CREATE TABLE bench.base_truth_state (LIKE bench.truth_state);
COPY bench.base_truth FROM '$BASE.truth';
COPY bench.base_truth_state FROM '$BASE.truth_state';
ANALYZE bench.base_truth, bench.base_truth_state;
SQL
}

MACHINE="$(nproc) cores, $(awk '/MemTotal/ { printf "%.0f GB", $2 / 1048576 }' /proc/meminfo)"
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
T_START=$(now)

# ---------------------------------------------------------------- sweeps

for sweep in $SWEEPS; do
	case $sweep in
	keys)
		for k in $KEYS; do
			e=$(events_for "$k")
			f=$DIR/events-$k.copy
			log "== generating $(th "$e") events over $(th "$k") keys"
			gen_events "$f" "$k" "$e"
			load_truth "$f"
			point keys "$k" "$k" "$e" 3 "$DEFAULT_SHARDS" bench.truth bench.truth_state load_copy "$f"
			# the largest sets take gigabytes: keep only the base set
			rm -f "$f" "$f.truth" "$f.truth_state"
		done
		;;
	dims)
		base_events
		if [ -z "$(sql -c "SELECT to_regclass('bench.events')")" ]; then
			# the derived dimensions: functions of the key, so every version
			# of a key has the same ones and the oracle below stays that of
			# the producer's stream
			sql >/dev/null <<SQL
CREATE TABLE bench.events_raw (n bigserial, key text, version bigint, value numeric, risk_type text,
                               region text, trade_desk text, deleted boolean, event_time timestamptz);
COPY bench.events_raw ($COLS3) FROM '$BASE';
CREATE TABLE bench.events AS
	SELECT n, key, version, value, risk_type, region, trade_desk,
	       'book' || lpad((get_byte(h, 0) % 16)::text, 2, '0') AS book,
	       (ARRAY['USD', 'EUR', 'JPY', 'GBP', 'CHF', 'CAD', 'AUD', 'CNY'])[get_byte(h, 1) % 8 + 1] AS currency,
	       'cpty' || lpad((get_byte(h, 2) % 32)::text, 2, '0') AS counterparty,
	       deleted, event_time
	  FROM (SELECT *, decode(md5(key), 'hex') AS h FROM bench.events_raw) e;
DROP TABLE bench.events_raw;
ANALYZE bench.events;
-- the oracle: each key's highest version, rolled up over the first N dimensions
CREATE FUNCTION bench.oracle(n integer) RETURNS void LANGUAGE plpgsql AS \$\$
DECLARE
	dims text[] := (ARRAY['risk_type', 'region', 'trade_desk', 'book', 'currency', 'counterparty'])[1:n];
	d text := array_to_string(dims, ', ');
	lvl text := n || (SELECT string_agg(' - grouping(' || x || ')', '') FROM unnest(dims) x);
BEGIN
	SET LOCAL work_mem = '256MB';
	DROP TABLE IF EXISTS bench.oracle_agg, bench.oracle_state;
	EXECUTE format('CREATE TABLE bench.oracle_state AS
	                SELECT DISTINCT ON (key) key, version, value, %s, deleted
	                  FROM bench.events ORDER BY key, version DESC', d);
	EXECUTE format('CREATE TABLE bench.oracle_agg AS
	                SELECT %s, %s AS level, sum(value) AS total, count(*) AS keys
	                  FROM bench.oracle_state WHERE NOT deleted
	                 GROUP BY ROLLUP (%s) HAVING count(*) > 0', d, lvl, d);
	ANALYZE bench.oracle_agg, bench.oracle_state;
END \$\$;
SQL
			# the oracle must agree with the producer where both exist
			sql -c "SELECT bench.oracle(3)" >/dev/null
			odiff=$(sql -c "SELECT bench.diff('bench.oracle_agg', 'bench.base_truth')
			                     + bench.diff('bench.oracle_state', 'bench.base_truth_state')")
			log "== the SQL oracle over the staged events at 3 dimensions vs the producer's truth: $odiff rows differ"
			if [ "$odiff" != 0 ]; then
				log "scaling: the SQL oracle differs from the producer's truth in $odiff rows; dims points cannot be judged"
				FAILED=1
			fi
		fi
		for n in $DIMS_LIST; do
			sql -c "SELECT bench.oracle($n)" >/dev/null
			point dims "$n" "$BASE_KEYS" "$BASE_EVENTS" "$n" "$DEFAULT_SHARDS" bench.oracle_agg bench.oracle_state load_dims "$n"
		done
		;;
	batch)
		base_events
		for b in $BATCH_LIST; do
			sql -c "ALTER SYSTEM SET exactonce.batch_size = $b" -c "SELECT pg_reload_conf()" >/dev/null
			# the workers reread the file on SIGHUP, at their next wake-up;
			# the pipeline is paused until then, so give them a moment
			sleep 1
			point batch "$b" "$BASE_KEYS" "$BASE_EVENTS" 3 "$DEFAULT_SHARDS" bench.base_truth bench.base_truth_state load_copy "$BASE"
		done
		sql -c "ALTER SYSTEM RESET exactonce.batch_size" -c "SELECT pg_reload_conf()" >/dev/null
		sleep 1
		;;
	latency)
		# each point streams about 20 s of events at LAT_RATE (at least what
		# the producer's mix needs for the keys); latency is the pipeline's
		# own (exactonce.pipelines, its last 100 batches: from the oldest
		# event_time of a batch to the end of its step)
		for k in $LAT_KEYS; do
			# the producer's mix: at least 1.5 events per key, and no more
			# tombstones (2%) than keys
			e=$((LAT_RATE * LAT_SECONDS))
			[ "$e" -le $((k * 40)) ] || e=$((k * 40))
			[ $((e * 2)) -ge $((k * 3)) ] || e=$(((k * 3 + 1) / 2))
			point latency "$k" "$k" "$e" 3 "$DEFAULT_SHARDS" bench.truth bench.truth_state stream "$DIR/latency-$k" "$k" "$e"
		done
		;;
	shards)
		base_events
		for s in $SHARDS_LIST; do
			point shards "$s" "$BASE_KEYS" "$BASE_EVENTS" 3 "$s" bench.base_truth bench.base_truth_state load_copy "$BASE"
		done
		;;
	esac
done
T_END=$(now)

# ---------------------------------------------------------------- report

EO_REV=$(git rev-parse --short HEAD 2>/dev/null || echo '?')
{
	echo "$INVOCATION"
	echo "exactonce scaling, $(date -u '+%Y-%m-%d %H:%M UTC'); $(sql -c "SELECT current_setting('server_version')"); the installed exactonce (checkout at $EO_REV)"
	echo "machine: $MACHINE, load average $LOAD0 at start, $(cut -d' ' -f1-3 /proc/loadavg) at the end; $(calc "%.0f" "$T_END - $T_START") s of sweeps"
	echo "cluster: fsync on, synchronous_commit on, shared_buffers 1GB, exactonce.workers 2; $DEFAULT_SHARDS shards and the default batch_size unless swept"
	echo "events: tools/producer, ~10% exact duplicates, ~10% late stale versions, ~10% moves, 2% tombstones, seed $SEED"
	echo ""
	printf '%-7s %10s %11s %11s %9s %9s %7s %8s %5s  %s\n' sweep x events events/s "WAL B/ev" "peak MB" batches seconds CPU exact
	tail -n +2 "$CSV" | while IFS=, read -r sw x ev rate walev rss ex _ _ _ _ secs bat cpu p50 p99 note; do
		printf '%-7s %10s %11s %11s %9s %9s %7s %8s %5s  %s\n' "$sw" "$(th "$x")" "$(th "$ev")" \
			"$([ -n "$rate" ] && th "$rate" || echo -)" "${walev:--}" \
			"$([ -n "$rss" ] && [ "$rss" -ge 0 ] && calc "%.1f" "$rss / 1024" || echo -)" "${bat:--}" "${secs:--}" \
			"${cpu:+$cpu%}" "$ex${p99:+ (p50 $p50 ms, p99 $p99 ms)}$([ "$note" = '""' ] || echo " $note")"
	done
	echo ""
	echo "events/s: from resume() to the first 50 ms poll seeing every event ingested and none staged; WAL over the"
	echo "same span; peak MB: the largest RssAnon of the two drain workers, sampled every 50 ms; CPU: the workers'"
	echo "CPU time over the drain's wall time (200% = both cores).  dims: book, currency, counterparty derived from"
	echo "md5(key); truth there is an SQL oracle over the loaded events, elsewhere the producer's truth."
} >"$SUMMARY"
cat "$SUMMARY" >&2

if [ "$GNUPLOT" = 1 ]; then
	tmp=$(mktemp -d)
	for sweep in $SWEEPS; do
		case $sweep in
		keys) xlab='distinct keys (events = 5 x keys, capped)'; lb=10 ;;
		dims) xlab='dimensions'; lb=0 ;;
		batch) xlab='exactonce.batch_size'; lb=10 ;;
		shards) xlab='shards (2 drain workers)'; lb=2 ;;
		latency) xlab="distinct keys, events streamed at $(th "$LAT_RATE")/s"; lb=10 ;;
		esac
		grep "^$sweep," "$CSV" >"$tmp/$sweep.csv" || continue
		case $sweep in
		keys) ttl="exactonce worker drain against distinct keys: 3 dimensions, $DEFAULT_SHARDS shards" ;;
		latency) ttl="exactonce, events streamed at $(th "$LAT_RATE")/s while the workers drain: p99 against distinct keys" ;;
		*) ttl="exactonce worker drain against $xlab: $(th "$BASE_EVENTS") events over $(th "$BASE_KEYS") keys" ;;
		esac
		nbad=$(awk -F, '$7 != "PASS"' "$tmp/$sweep.csv" | wc -l)
		gnuplot -e "data='$tmp/$sweep.csv'; out='$OUT/scaling-$sweep.png'; xlab='$xlab'; ttl='$ttl'; logbase=$lb; nbad=$nbad; haslat=$([ "$sweep" = latency ] && echo 1 || echo 0)" \
			test/bench/scaling.gp 2>>"$OUT/gnuplot.err" || log "scaling: gnuplot failed for $sweep (see $OUT/gnuplot.err)"
	done
	rm -rf "$tmp"
	[ -s "$OUT/gnuplot.err" ] || rm -f "$OUT/gnuplot.err"
fi
find "$OUT" -maxdepth 1 -name 'mon-*.err' -empty -delete

log ""
if [ "$FAILED" = 0 ]; then
	log "verdict: every point exact (aggregates and state equal the truth; counters add up)"
else
	log "verdict: FAIL: a point was not exact or did not drain (see the exact and note columns)"
fi
log "results: $CSV, $SUMMARY$([ "$GNUPLOT" = 1 ] && echo ", $OUT/scaling-*.png")"
exit "$FAILED"
