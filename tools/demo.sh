#!/usr/bin/env bash
# tools/demo.sh: the trade-risk demo of exactonce, in one command.
#
# It installs what is missing (test/deps.sh), builds and installs the
# extension, builds tools/producer, starts a throwaway cluster, creates the
# pipeline "trades" over risk_type > region > trade_desk and streams an
# at-least-once trade-risk feed into it -- duplicates, amendments that move
# trades, late stale resends and tombstones -- while the background workers
# drain it under injected faults (or, with --flush-loop, a loop calling
# exactonce.flush() drains it as well).  A live view shows the
# rates, the counters, freshness (lag, batch latency, the age of the last
# change), the last changes of the pipeline's change feed and the rollup.
# At the end the aggregates must equal, cell for cell and to the cent, what
# the producer computed on its own, and the change feed replayed from its
# start must equal them too.
#
#   tools/demo.sh [--events N] [--trades N] [--rate N] [options]   (--help)
#
# Run it as root on Debian bookworm with the PostgreSQL 15 server installed.
# Exit status: 0 PASS, 1 FAIL, 2 usage or setup error.
set -euo pipefail

usage() {
	cat <<'EOF'
usage: tools/demo.sh [options]

Stream:
  --events N          events to send (default 1000000)
  --trades N          distinct trades (default events / 5, 200000)
  --duplicates F      fraction of exact resends (default 0.10)
  --modifications F   fraction of amendments (default: the rest)
  --stale F           fraction of late stale resends (default 0.03)
  --tombstones F      fraction of deletions (default 0.02)
  --rate N            events per second, 0 = as fast as possible (default 0)
  --batch N           events per producer transaction (default 5000)
  --seed N            random seed (default 42)
Drain:
  --faults S,M,R      failure probabilities injected into the state, map and
                      reduce stages of the draining session (default 0.01,0.02,0.02)
  --no-faults         the same as --faults 0,0,0
  --flush-loop        also drain with exactonce.flush() in a loop, besides the
                      background workers
  --flush-pause S     seconds between flushes of --flush-loop (default 0.1)
Cluster and output:
  --dir DIR           cluster directory (default /tmp/exactonce-demo)
  --port N            cluster port (default 55433)
  --conf LINE         extra postgresql.conf line (repeatable)
  --keep              leave the cluster running at the end
  --no-build          skip deps, extension build and install
  --plain             progress lines even on a terminal
  -h, --help          this help
EOF
}

cd "$(dirname "$0")/.."
PIPELINE=trades
DIR=/tmp/exactonce-demo
PORT=55433
CONF=("exactonce.database = 'postgres'")
PRODUCER_ARGS=()
EVENTS=1000000
FAULTS=0.01,0.02,0.02
FLUSH_PAUSE=0.1
FLUSH_LOOP=0
KEEP=0
BUILD=1
PLAIN=0
[ -t 1 ] || PLAIN=1

need_arg() { [ $# -ge 2 ] || { echo "demo: $1 needs a value" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
	case "$1" in
	--events) need_arg "$@"; EVENTS=$2; PRODUCER_ARGS+=(--events "$2"); shift 2 ;;
	--trades | --duplicates | --modifications | --stale | --tombstones | --rate | --batch | --seed)
		need_arg "$@"; PRODUCER_ARGS+=("$1" "$2"); shift 2 ;;
	--events=* | --trades=* | --duplicates=* | --modifications=* | --stale=* | --tombstones=* | --rate=* | --batch=* | --seed=*)
		[[ $1 == --events=* ]] && EVENTS=${1#--events=}
		PRODUCER_ARGS+=("$1"); shift ;;
	--no-faults) FAULTS=0,0,0; shift ;;
	--faults) need_arg "$@"; FAULTS=$2; shift 2 ;;
	--flush-pause) need_arg "$@"; FLUSH_PAUSE=$2; shift 2 ;;
	--flush-loop) FLUSH_LOOP=1; shift ;;
	--no-flush-loop) FLUSH_LOOP=0; shift ;;
	--dir) need_arg "$@"; DIR=$2; shift 2 ;;
	--port) need_arg "$@"; PORT=$2; shift 2 ;;
	--conf) need_arg "$@"; CONF+=("$2"); shift 2 ;;
	--keep) KEEP=1; shift ;;
	--no-build) BUILD=0; shift ;;
	--plain) PLAIN=1; shift ;;
	-h | --help) usage; exit 0 ;;
	*) echo "demo: unknown option $1" >&2; usage >&2; exit 2 ;;
	esac
done
[[ $EVENTS =~ ^[0-9]+$ ]] || { echo "demo: --events must be a number" >&2; exit 2; }
[[ $PORT =~ ^[0-9]+$ ]] || { echo "demo: --port must be a number" >&2; exit 2; }
[[ $FLUSH_PAUSE =~ ^[0-9]*\.?[0-9]+$ ]] || { echo "demo: --flush-pause takes seconds, e.g. 0.1" >&2; exit 2; }

export PGHOST=$DIR PGPORT=$PORT PGUSER=postgres PGDATABASE=postgres
unset PGSERVICE PGOPTIONS PGPASSWORD
PSQL=(psql -X -q -v ON_ERROR_STOP=1)
IFS=, read -r F_STATE F_MAP F_REDUCE <<<"$FAULTS"
for f in "$F_STATE" "$F_MAP" "$F_REDUCE"; do
	[[ $f =~ ^(0(\.[0-9]*)?|1(\.0*)?|\.[0-9]+)$ ]] || { echo "demo: --faults takes three probabilities, e.g. 0.01,0.02,0.02" >&2; exit 2; }
done
FAULT_OPTS="-c exactonce.fault_state=$F_STATE -c exactonce.fault_map=$F_MAP -c exactonce.fault_reduce=$F_REDUCE"
FAULT_TEXT="injected: state $F_STATE, map $F_MAP, reduce $F_REDUCE"
# The flush sessions get the fault settings through PGOPTIONS.  Background
# drain workers, in versions of the extension that have them, are sessions
# that drain too; they read the settings from postgresql.conf.
CONF+=("exactonce.fault_state = $F_STATE" "exactonce.fault_map = $F_MAP" "exactonce.fault_reduce = $F_REDUCE")
now() { date +%s.%N; }
say() { printf '%s\n' "$*"; }
T_BEGIN=$(now)

# ---------------------------------------------------------------- setup

if [ "$BUILD" = 1 ]; then
	say "== dependencies (test/deps.sh)"
	bash test/deps.sh
	say "== building and installing the extension"
	make -s
	make -s install
fi
say "== building tools/producer"
make -s -C tools producer
tools/producer --dry-run "${PRODUCER_ARGS[@]}" >/dev/null || exit 2

# The cluster directory is wiped by tools/cluster.sh: only ever touch one that
# this script made (it leaves a marker), or a new one.
if [ -e "$DIR" ] && [ ! -e "$DIR/.exactonce-demo" ]; then
	echo "demo: $DIR exists and was not made by this demo; choose another --dir" >&2
	exit 2
fi
if [ -f "$DIR/data/postmaster.pid" ]; then
	say "== stopping the demo cluster left running in $DIR"
	bash tools/cluster.sh stop "$DIR"
fi

PRODUCER_PID=
FLUSHER_PID=
CLUSTER_UP=0
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	[ "$PLAIN" = 1 ] || printf '\033[?25h'
	if [ -n "$PRODUCER_PID" ] && kill -0 "$PRODUCER_PID" 2>/dev/null; then
		kill "$PRODUCER_PID" 2>/dev/null || true
		wait "$PRODUCER_PID" 2>/dev/null || true
	fi
	if [ -n "$FLUSHER_PID" ] && kill -0 "$FLUSHER_PID" 2>/dev/null; then
		touch "$DIR/stop-flushing"
		kill "$FLUSHER_PID" 2>/dev/null || true
		wait "$FLUSHER_PID" 2>/dev/null || true
	fi
	if [ "$CLUSTER_UP" = 1 ]; then
		if [ "$KEEP" = 1 ]; then
			say "cluster left running: PGHOST=$DIR PGPORT=$PORT psql -U postgres"
			say "stop it with: bash tools/cluster.sh stop $DIR"
		else
			bash tools/cluster.sh stop "$DIR" || true
		fi
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "== starting a throwaway cluster in $DIR on port $PORT"
bash tools/cluster.sh start "$DIR" "$PORT" "${CONF[@]}"
CLUSTER_UP=1
touch "$DIR/.exactonce-demo"

"${PSQL[@]}" -At >/dev/null <<SQL
CREATE EXTENSION exactonce;
SELECT exactonce.create_pipeline_as('$PIPELINE', \$q\$
  SELECT risk_type, region, trade_desk, sum(value) AS total, count(*) AS trades
    FROM stream GROUP BY ROLLUP (risk_type, region, trade_desk) \$q\$);
SELECT exactonce.set_feed('$PIPELINE', true);
SQL
say "== pipeline $PIPELINE, declared as: SELECT risk_type, region, trade_desk, sum(value) AS total, count(*) AS trades FROM stream GROUP BY ROLLUP (risk_type, region, trade_desk); with its change feed"
WORKERS=$("${PSQL[@]}" -At -c "SELECT coalesce(current_setting('exactonce.workers', true), '0')")
if [ "$WORKERS" != 0 ]; then
	if [ "$WORKERS" = -1 ]; then
		say "== background drain workers, one per core (exactonce.workers = -1), drain the pipeline as well"
	else
		say "== $WORKERS background drain worker(s) per database drain the pipeline as well"
	fi
elif [ "$FLUSH_LOOP" = 0 ]; then
	say "== this version of the extension has no background workers: keeping the flush loop"
	FLUSH_LOOP=1
fi
if [ "$FLUSH_LOOP" = 1 ]; then
	say "== draining with exactonce.flush() in a loop; faults $FAULT_TEXT"
else
	say "== draining with the background workers only; faults $FAULT_TEXT"
fi

# ---------------------------------------------------------------- run

# The drain: flush in a loop, in sessions with fault injection.  flush()
# retries injected failures itself; should it give up, the transaction rolls
# back and the next flush takes the same events again.
flush_loop() {
	local out
	while [ ! -e "$DIR/stop-flushing" ]; do
		if out=$(PGOPTIONS="$FAULT_OPTS" psql -X -At -c "SELECT exactonce.flush('$PIPELINE')" 2>&1); then
			echo "ok $(now) $out"
		else
			echo "error $(now) ${out//$'\n'/ }"
		fi
		sleep "$FLUSH_PAUSE"
	done
}

rm -f "$DIR/stop-flushing"
T_START=$(now)
tools/producer "${PRODUCER_ARGS[@]}" --pipeline "$PIPELINE" \
	--truth demo.truth --truth-state demo.truth_state \
	>"$DIR/producer.out" 2>"$DIR/producer.log" &
PRODUCER_PID=$!
: >"$DIR/flush.log"
if [ "$FLUSH_LOOP" = 1 ]; then
	flush_loop >"$DIR/flush.log" 2>&1 &
	FLUSHER_PID=$!
fi

# What one frame reads, in one snapshot, each line tagged: P the counters
# (from the progress row), T the rollup tree, L the top leaf cells, S the rest
# of exactonce.pipelines.  The view counts the queue, which waits while a
# drain that truncated a queue partition is still running (a flush holds that
# lock to its end), so it comes last, under a lock_timeout, and the frame
# shows the rest without it.
# $1: rows the tree may take, $2: rows for the top leaf cells, $3: deepest
# level of the tree (1 or 2).
frame_sql() {
	cat <<SQL
SET lock_timeout = '150ms';
BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY;
SELECT 'P', extract(epoch FROM clock_timestamp()), sum(ingested), sum(applied),
       sum(duplicates), sum(stale), sum(dead_lettered), sum(batches)
  FROM (SELECT ingested, applied, duplicates, stale, dead_lettered, batches
          FROM $PIPELINE.progress
        UNION ALL
        SELECT ingested, applied, duplicates, stale, dead_lettered, batches
          FROM $PIPELINE.shard) c;
SELECT 'T', repeat('  ', level) || rpad(label, 30 - 2 * level)
       || lpad(to_char(total, 'FM999,999,999,999,990.00'), 22)
       || lpad(to_char(keys, 'FM999,999,990'), 10)
  FROM (SELECT *, CASE level WHEN 0 THEN 'all trades' WHEN 1 THEN risk_type
                             ELSE region END AS label
          FROM $PIPELINE.aggregates WHERE level <= $3) t
 ORDER BY risk_type NULLS FIRST, region NULLS FIRST, level
 LIMIT $1;
SELECT 'L', '  ' || rpad(concat_ws(' / ', risk_type, region, trade_desk), 28)
       || lpad(to_char(total, 'FM999,999,999,999,990.00'), 22)
       || lpad(to_char(keys, 'FM999,999,990'), 10)
  FROM $PIPELINE.aggregates WHERE level = 3
 ORDER BY abs(total) DESC, risk_type, region, trade_desk
 LIMIT $2;
SELECT 'F', f.seq, concat_ws(' / ', coalesce(f.risk_type, 'all'), f.region, f.trade_desk),
       to_char(f.old_total, 'FM999,999,999,990') || ' -> ' || to_char(f.new_total, 'FM999,999,999,990'),
       round(extract(epoch FROM clock_timestamp() - f.changed_at)::numeric, 1)
  FROM (SELECT * FROM $PIPELINE.feed ORDER BY seq DESC LIMIT 3) f ORDER BY f.seq;
SELECT 'A', round(extract(epoch FROM clock_timestamp() - max(updated_at))::numeric, 2) FROM $PIPELINE.aggregates;
SELECT 'S', queued, round(coalesce(extract(epoch FROM lag), 0), 1), staged,
       -- columns of versions with background workers
       coalesce(j->>'worker_pid', '-'), coalesce(j->>'worker_state', '-'),
       coalesce(round(extract(epoch FROM (j->>'latency_p50')::interval) * 1000)::text, '-'),
       coalesce(round(extract(epoch FROM (j->>'latency_p99')::interval) * 1000)::text, '-'),
       coalesce(left(regexp_replace(j->>'last_error', '\s+', ' ', 'g'), 60), '-')
  FROM (SELECT p.*, to_jsonb(p) AS j FROM exactonce.pipelines p) p
 WHERE name = '$PIPELINE';
COMMIT;
SQL
}

# The producer's own count and current rate, from its last progress line.
producer_progress() {
	local line
	line=$(grep '^producer: [0-9]* of ' "$DIR/producer.log" 2>/dev/null | tail -n 1 || true)
	if [[ $line =~ ^producer:\ ([0-9]+)\ of\ [0-9]+\ events\ sent,\ ([0-9]+)\ events/s ]]; then
		echo "${BASH_REMATCH[1]} ${BASH_REMATCH[2]}"
	else
		echo "0 0"
	fi
}

# Samples for rates over a 2 s window: "t ingested applied".
SAMPLES=()
T_LAST_PLAIN=0
LAST_VIEW=
render() {
	local lines cols treerows leafrows depth=2 out counters view tree=() leaves=() feed=() fresh sent prate flushes ferrors
	lines=$(tput lines 2>/dev/null || echo 40)
	cols=$(tput cols 2>/dev/null || echo 100)
	# 17 lines of header (freshness and the last 3 changes of the feed
	# among them), the tree (21 rows to level 2), up to 6 of leaf cells, and
	# the last line of the screen left empty
	treerows=$((lines - 18)); [ "$treerows" -lt 1 ] && treerows=1
	[ "$treerows" -lt 21 ] && depth=1
	leafrows=$((lines - 18 - 21 - 1)); [ "$leafrows" -gt 5 ] && leafrows=5
	[ "$leafrows" -lt 0 ] && leafrows=0
	[ "$PLAIN" = 1 ] && { treerows=1; leafrows=0; }
	out=$(frame_sql "$treerows" "$leafrows" "$depth" | psql -X -q -At -F $'\t' 2>/dev/null) || true
	counters=$(grep $'^P\t' <<<"$out" | cut -f 2-) || true
	[ -n "$counters" ] || return 0
	view=$(grep $'^S\t' <<<"$out" | cut -f 2-) || true
	mapfile -t tree < <(grep $'^T\t' <<<"$out" | cut -f 2-)
	mapfile -t leaves < <(grep $'^L\t' <<<"$out" | cut -f 2-)
	mapfile -t feed < <(grep $'^F\t' <<<"$out" | cut -f 2- |
		awk -F '\t' '{ printf "  #%-8s %-26s %-28s %5ss ago\n", $1, $2, $3, $4 }')
	fresh=$(grep $'^A\t' <<<"$out" | cut -f 2) || true
	read -r sent prate < <(producer_progress)
	flushes=$(grep -c '^ok ' "$DIR/flush.log" 2>/dev/null || true)
	ferrors=$(grep -c '^error ' "$DIR/flush.log" 2>/dev/null || true)

	local t ingested applied dup stale dead batches queued lag staged wpid wstate p50 pmax lasterr waiting=0
	IFS=$'\t' read -r t ingested applied dup stale dead batches <<<"$counters"
	if [ -n "$view" ]; then
		LAST_VIEW=$view
	else
		waiting=1
	fi
	IFS=$'\t' read -r queued lag staged wpid wstate p50 pmax lasterr <<<"${LAST_VIEW:-0	0	0	-	-	-	-	-}"
	SAMPLES+=("$t $ingested $applied")
	[ "${#SAMPLES[@]}" -gt 5 ] && SAMPLES=("${SAMPLES[@]:1}")
	local old=${SAMPLES[0]}

	if [ "$PLAIN" = 1 ] && [ "${1:-}" != final ]; then
		awk -v t="$t" -v ts="$T_LAST_PLAIN" 'BEGIN { exit !(t - ts >= 2) }' || return 0
		T_LAST_PLAIN=$t
	fi
	awk -v plain="$PLAIN" -v cols="$cols" -v t="$t" -v t0="$T_START" -v old="$old" \
		-v sent="$sent" -v total="$EVENTS" -v prate="$prate" -v queued="$queued" \
		-v lag="$lag" -v ingested="$ingested" -v applied="$applied" -v dup="$dup" \
		-v stale="$stale" -v dead="$dead" -v batches="$batches" -v staged="$staged" \
		-v flushes="$flushes" -v ferrors="$ferrors" -v faults="$FAULT_TEXT" \
		-v wpid="$wpid" -v wstate="$wstate" -v p50="$p50" -v pmax="$pmax" -v lasterr="$lasterr" \
		-v flushloop="$FLUSH_LOOP" -v waiting="$waiting" -v pipeline="$PIPELINE" -v fresh="${fresh:--}" \
		-v level0="${tree[0]:-}" '
	function th(x,   s, r, neg) {
		s = sprintf("%.0f", x); neg = s ~ /^-/; if (neg) s = substr(s, 2)
		r = ""; while (length(s) > 3) { r = "," substr(s, length(s) - 2) r; s = substr(s, 1, length(s) - 3) }
		return (neg ? "-" : "") s r
	}
	BEGIN {
		split(old, o, " "); dt = t - o[1]; if (dt < 0.2) dt = 0.2
		el = t - t0
		ri = (ingested - o[2]) / dt; ra = (applied - o[3]) / dt
		if (plain) {
			gsub(/^ +| +$/, "", level0); gsub(/  +/, " ", level0)
			if (level0 == "") level0 = "no aggregates yet"; else level0 = level0 " trades"
			printf "%7.1fs sent %s/%s | produced %s/s | ingested %s (%s/s) applied %s dup %s stale %s dead %s | queue %s lag %ss%s | %s\n",
				el, th(sent), th(total), th(prate), th(ingested), th(ri), th(applied), th(dup), th(stale), th(dead),
				th(queued), lag, (waiting ? " (view waiting for a drain)" : "") (wpid != "-" ? " | worker " wstate : ""), level0
			exit
		}
		printf "exactonce demo: pipeline %s (risk_type > region > trade_desk)  %6.1f s\n", pipeline, el
		printf "producer  %s of %s events sent (%d%%)\n", th(sent), th(total), (total ? 100 * sent / total : 0)
		printf "events/s  produced %s  through the pipeline %s  applied %s\n", th(prate), th(ri), th(ra)
		printf "  average produced %s  through the pipeline %s\n", th(sent / (el > 0 ? el : 1)), th(ingested / (el > 0 ? el : 1))
		if (waiting)
			printf "queue     (exactonce.pipelines is waiting for a drain to commit)\n"
		else
			printf "queue     %s rows, lag %s s, %s batches staged\n", th(queued), lag, th(staged)
		printf "counters  ingested %s = applied %s + duplicates %s\n", th(ingested), th(applied), th(dup)
		printf "          + stale %s + dead-lettered %s\n", th(stale), th(dead)
		printf "drain     %s %s flushes%s, %s batches\n", (flushloop ? "flush() in a loop:" : "workers, then a final flush;"),
			th(flushes), (ferrors > 0 ? " (" ferrors " rolled back)" : ""), th(batches)
		printf "faults    %s\n", faults
		if (wpid != "-")
			printf "worker    pid %s %s; batch latency p50 %s ms, p99 %s ms%s\n", wpid, wstate, p50, pmax,
				(lasterr != "-" ? "; last error: " lasterr : "")
		else
			printf "worker    none\n"
		printf "fresh     the aggregates last changed %s s ago\n", (fresh == "" ? "-" : fresh)
		printf "feed      the last changes of " pipeline ".feed (seq, cell, old -> new total):\n"
	}' >"$DIR/frame"
	if [ "$PLAIN" != 1 ]; then
		if [ "${#feed[@]}" -gt 0 ]; then printf '%s\n' "${feed[@]}"; else echo "  (none yet)"; fi
		printf '\n%-30s%22s%10s\n' "aggregates ($PIPELINE.aggregates)" total trades
	fi >>"$DIR/frame"
	if [ "$PLAIN" = 1 ]; then
		cat "$DIR/frame"
		return 0
	fi
	{
		cat "$DIR/frame"
		printf '%s\n' "${tree[@]}"
		if [ "${#leaves[@]}" -gt 0 ]; then
			echo "top leaf cells by |total|"
			printf '%s\n' "${leaves[@]}"
		fi
	} | head -n $((lines - 1)) | cut -c "1-$cols" | {
		printf '\033[H'
		while IFS= read -r l; do printf '%s\033[K\n' "$l"; done
		printf '\033[J'
	}
}

say "== streaming $EVENTS events (logs in $DIR)"
[ "$PLAIN" = 1 ] || printf '\033[?25l\033[2J'
while kill -0 "$PRODUCER_PID" 2>/dev/null; do
	tick=$(now)
	render || true
	# next frame half a second after this one began
	sleep "$(awk -v a="$tick" -v b="$(now)" 'BEGIN { d = 0.5 - (b - a); print (d > 0.05 ? d : 0.05) }')" || true
done
PRODUCER_RC=0
wait "$PRODUCER_PID" || PRODUCER_RC=$?
PRODUCER_PID=
render final || true
[ "$PLAIN" = 1 ] || printf '\033[?25h'
if [ "$PRODUCER_RC" != 0 ]; then
	echo "demo: the producer failed (exit $PRODUCER_RC):" >&2
	tail -n 5 "$DIR/producer.log" >&2
	exit 2
fi

touch "$DIR/stop-flushing"
[ -z "$FLUSHER_PID" ] || wait "$FLUSHER_PID" || true
FLUSHER_PID=
say ""
say "== producer done; final flush"
for attempt in 1 2 3 4 5; do
	if taken=$(PGOPTIONS="$FAULT_OPTS" psql -X -At -c "SELECT exactonce.flush('$PIPELINE')" 2>"$DIR/final-flush.err"); then
		break
	fi
	say "final flush attempt $attempt rolled back: $(head -n 1 "$DIR/final-flush.err")"
	taken=
	sleep 1
done
[ -n "$taken" ] || { echo "demo: the final flush failed five times" >&2; exit 1; }
T_END=$(now)

# ---------------------------------------------------------------- verdict

declare -A P
while read -r k v; do P[$k]=$v; done <"$DIR/producer.out"

IFS=$'\t' read -r only_agg only_truth agg_cells truth_cells state_diff ingested applied dup stale dead queued staged batches feed_diff feed_rows feed_changes result_diff < <(
	"${PSQL[@]}" -At -F $'\t' <<SQL
WITH agg AS (SELECT risk_type, region, trade_desk, level, total, keys FROM $PIPELINE.aggregates),
     tru AS (SELECT risk_type, region, trade_desk, level, total, keys FROM demo.truth)
SELECT (SELECT count(*) FROM (SELECT * FROM agg EXCEPT ALL SELECT * FROM tru) x),
       (SELECT count(*) FROM (SELECT * FROM tru EXCEPT ALL SELECT * FROM agg) x),
       (SELECT count(*) FROM agg), (SELECT count(*) FROM tru),
       (SELECT count(*) FROM demo.truth_state t FULL JOIN $PIPELINE.state s USING (key)
         WHERE (t.version, t.value, t.risk_type, t.region, t.trade_desk, t.deleted)
               IS DISTINCT FROM (s.version, s.value, s.risk_type, s.region, s.trade_desk, s.deleted)),
       p.ingested, p.applied, p.duplicates, p.stale, p.dead_lettered, p.queued, p.staged, p.batches,
       (SELECT count(*) FROM (
          (SELECT level, risk_type, region, trade_desk, total, keys FROM $PIPELINE.aggregates
           EXCEPT ALL SELECT level, risk_type, region, trade_desk, sum(new_total - old_total), sum(new_keys - old_keys)
             FROM $PIPELINE.feed GROUP BY 1, 2, 3, 4 HAVING sum(new_keys - old_keys) <> 0)
          UNION ALL
          (SELECT level, risk_type, region, trade_desk, sum(new_total - old_total), sum(new_keys - old_keys)
             FROM $PIPELINE.feed GROUP BY 1, 2, 3, 4 HAVING sum(new_keys - old_keys) <> 0
           EXCEPT ALL SELECT level, risk_type, region, trade_desk, total, keys FROM $PIPELINE.aggregates)) f),
       (SELECT count(*) FROM $PIPELINE.feed), (SELECT coalesce(max(seq), 0) FROM $PIPELINE.feed),
       (SELECT count(*) FROM (
          (SELECT * FROM $PIPELINE.result EXCEPT ALL SELECT risk_type, region, trade_desk, total, keys FROM demo.truth)
          UNION ALL
          (SELECT risk_type, region, trade_desk, total, keys FROM demo.truth EXCEPT ALL SELECT * FROM $PIPELINE.result)) r)
  FROM exactonce.pipelines p WHERE p.name = '$PIPELINE';
SQL
)

[ -n "$ingested" ] || { echo "demo: could not read the verdict from the cluster" >&2; exit 1; }
sent=${P[events_sent]}
originals=$((P[new_trades] + P[modifications] + P[tombstones]))
resends=$((P[duplicates] + P[stale_resends]))
fails=()
[ "$only_agg" = 0 ] && [ "$only_truth" = 0 ] ||
	fails+=("aggregates differ from the producer's truth: $only_agg rows only in $PIPELINE.aggregates, $only_truth only in demo.truth")
[ "$state_diff" = 0 ] || fails+=("$state_diff keys of $PIPELINE.state differ from the producer's latest versions")
[ "$result_diff" = 0 ] || fails+=("$result_diff rows of $PIPELINE.result, the declared query, differ from the producer's truth")
[ "$ingested" = $((applied + dup + stale + dead)) ] ||
	fails+=("ingested $ingested != applied + duplicates + stale + dead_lettered = $((applied + dup + stale + dead))")
[ "$ingested" = "$sent" ] || fails+=("ingested $ingested != $sent events sent")
# Each version is first sent once, before any resend of it and before any
# higher version of its trade.  A shard reads its queue partition in TID
# order, which is nearly but not quite the order of the producer's
# transactions: PostgreSQL may put a row into free space an earlier page
# was left with (the free space map).  A first sending met after a higher
# version of its trade counts as stale, and a resend met before its first
# sending is applied in its place (the first sending then counts as a
# duplicate); state and aggregates are the same either way.  So at most the
# first sendings are applied, and every event is one or the other.
[ "$applied" -le "$originals" ] ||
	fails+=("applied $applied > $originals first sendings of a version (new trades + amendments + tombstones)")
[ $((applied + dup + stale)) = $((originals + resends)) ] ||
	fails+=("applied + duplicates + stale = $((applied + dup + stale)) != $((originals + resends)) first sendings and resends")
[ "$dead" = 0 ] || fails+=("$dead events dead-lettered, though the stream holds no conflicting or invalid event")
[ "$queued" = 0 ] && [ "$staged" = 0 ] || fails+=("after the final flush $queued events are queued and $staged batches staged")
[ "$feed_diff" = 0 ] || fails+=("$PIPELINE.feed replayed from its start differs from the aggregates in $feed_diff cells")

th() { echo "$1" | sed -e ':a' -e 's/\([0-9]\)\([0-9]\{3\}\)\($\|[,.]\)/\1,\2\3/; ta'; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
rate() { awk -v n="$1" -v a="$2" -v b="$3" 'BEGIN { printf "%.0f", n / (b - a) }'; }
flushes=$(grep -c '^ok ' "$DIR/flush.log" || true)
ferrors=$(grep -c '^error ' "$DIR/flush.log" || true)

say ""
say "== the producer sent $(th "$sent") events in ${P[seconds]} s ($(th "${P[events_per_second]}") events/s):"
say "   $(th "${P[new_trades]}") new trades, $(th "${P[modifications]}") amendments ($(th "${P[moved_trades]}") moving the trade), $(th "${P[tombstones]}") tombstones,"
say "   $(th "${P[duplicates]}") exact duplicates, $(th "${P[stale_resends]}") late stale resends; $(th "${P[live_trades]}") trades live at the end"
say "== the pipeline took them through state, map and reduce in $(th "$batches") batches, $((flushes + 1)) flushes ($ferrors rolled back)"
say "   stream to exact aggregates: $(secs "$T_START" "$T_END") s, $(th "$(rate "$sent" "$T_START" "$T_END")") events/s end to end; total wall time $(secs "$T_BEGIN" "$T_END") s"
say "   ingested $(th "$ingested") = applied $(th "$applied") + duplicates $(th "$dup") + stale $(th "$stale") + dead-lettered $(th "$dead")"
say "   aggregates: $(th "$agg_cells") cells, the producer's truth: $(th "$truth_cells") cells; differing: $((only_agg + only_truth)); $PIPELINE.result, the declared query, differing: $result_diff"
say "   change feed: $(th "$feed_changes") changes, folded where every consumer read them into $(th "$feed_rows") rows; replayed from the start, they differ from the aggregates in $feed_diff cells"
say ""
"${PSQL[@]}" -At <<SQL
SELECT rpad('aggregates (top)', 30) || lpad('total', 22) || lpad('trades', 10);
SELECT repeat('  ', level) || rpad(CASE level WHEN 0 THEN 'all trades' WHEN 1 THEN risk_type ELSE region END, 30 - 2 * level)
       || lpad(to_char(total, 'FM999,999,999,999,990.00'), 22) || lpad(to_char(keys, 'FM999,999,990'), 10)
  FROM $PIPELINE.aggregates WHERE level <= 2
 ORDER BY risk_type NULLS FIRST, region NULLS FIRST, level;
SQL
say ""

if [ ${#fails[@]} -gt 0 ]; then
	say "FAIL"
	for f in "${fails[@]}"; do say "  - $f"; done
	if [ "$only_agg" != 0 ] || [ "$only_truth" != 0 ]; then
		say "first differing cells (agg = $PIPELINE.aggregates, truth = demo.truth):"
		"${PSQL[@]}" <<SQL
SELECT coalesce(a.level, t.level) AS level, coalesce(a.risk_type, t.risk_type) AS risk_type,
       coalesce(a.region, t.region) AS region, coalesce(a.trade_desk, t.trade_desk) AS trade_desk,
       a.total AS agg_total, t.total AS truth_total, a.keys AS agg_keys, t.keys AS truth_keys
  FROM $PIPELINE.aggregates a
  FULL JOIN demo.truth t ON a.level = t.level AND a.risk_type IS NOT DISTINCT FROM t.risk_type
   AND a.region IS NOT DISTINCT FROM t.region AND a.trade_desk IS NOT DISTINCT FROM t.trade_desk
 WHERE (a.total, a.keys) IS DISTINCT FROM (t.total, t.keys)
 ORDER BY 1, 2, 3, 4 LIMIT 20;
SQL
	fi
	rollup_diff=$("${PSQL[@]}" -At <<SQL
WITH r AS (SELECT risk_type, region, trade_desk,
                  3 - grouping(risk_type) - grouping(region) - grouping(trade_desk) AS level,
                  sum(value) AS total, count(*) AS keys
             FROM $PIPELINE.state WHERE NOT deleted
            GROUP BY ROLLUP (risk_type, region, trade_desk) HAVING count(*) > 0),
     a AS (SELECT risk_type, region, trade_desk, level, total, keys FROM $PIPELINE.aggregates)
SELECT (SELECT count(*) FROM (SELECT * FROM a EXCEPT ALL SELECT * FROM r) x)
     + (SELECT count(*) FROM (SELECT * FROM r EXCEPT ALL SELECT * FROM a) x);
SQL
)
	say "where it went wrong: $state_diff keys of $PIPELINE.state differ from the producer (stage 1, state);"
	say "  $rollup_diff cells of $PIPELINE.aggregates differ from a rollup of $PIPELINE.state (stages 2-3, map and reduce)"
	say "logs in $DIR; the stopped cluster's data stays in $DIR/data until the next run. To look at it:"
	say "  runuser -u postgres -- $(pg_config --bindir)/pg_ctl -D $DIR/data -l $DIR/server.log start"
	say "  PGHOST=$DIR PGPORT=$PORT psql -U postgres   (tables demo.truth, demo.truth_state, $PIPELINE.*)"
	exit 1
fi
say "PASS: $(th "$sent") events sent = $(th "$ingested") ingested (applied $(th "$applied") + duplicates $(th "$dup") + stale $(th "$stale") + dead-lettered $(th "$dead")); $(th "$agg_cells") aggregate cells equal the producer's truth to the cent"
