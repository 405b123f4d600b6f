#!/bin/bash
# test/bench/device.sh: the 16-core figures, in one run on one machine.
#
#   bash ../shared/device/bundle.sh                  (here: PostgreSQL 15, the
#                                                     extension, the producer)
#   run  carry: [".device-bundle"]
#        command: BUNDLE=.device-bundle bash test/bench/device.sh
#
# or, where PostgreSQL 15 and tools/producer are installed, plainly
# `bash test/bench/device.sh` (the figures then say what that machine does).
# One event file (tools/producer: 10% duplicates, 10% stale resends, 10%
# moves, 2% tombstones; EVENTS over TRADES keys) feeds every section, and
# every run is checked against the producer's truth; the sections, in
# the order they run:
#
#   scale     COPY into a plain table, 1 and 8 sessions (the floors); the
#             workers' drain of the pre-loaded queue for each of SHARDS;
#             end to end, 8 sessions COPY chunks of 10,000 while 16 shards
#             drain, beside the same chunked COPY into a plain table.
#             exactonce.workers = 16, shared_buffers 8GB.      (31: 2, 3, 5)
#   dist      a coordinator and four nodes, each node pinned to a quarter of
#             the cores: 8 sessions COPY the chunks through the coordinator
#             into a pipeline on 1, 2 and 4 nodes, to every event applied;
#             the 4-node run again with the coordinator parsing every field
#             (exactonce.route_copy off), and with keys (64, 1) moved a second into it
#             (how long the move's switch held the coordinator); then the
#             four nodes fed their own keys directly.          (33: 1, 2, 3)
#   defaults  the same drain with nothing of exactonce or the workers set,
#             as a ratio of the best hand-set drain above.          (31: 1)
#   latency   a paced stream of 50,000 events/s in batches of 1,000 into a
#             4-shard pipeline, at shared_buffers 1GB and 32GB, each
#             after what a lone commit costs there (pgbench, 3 s); then
#             four such producers at 250,000 events/s each (1M offered)
#             into four pipelines at 32GB.                           (31: 4)
#
# STATE_FILLFACTOR=N sets the fillfactor of each single-cluster pipeline's
# state once it is made (50 by default; see "A row version another shard's
# batch still may see" in docs/performance.md).
# SECTIONS picks some ("scale dist"); EXTRA_CONF adds lines to the single
# cluster's postgresql.conf ('commit_delay = 4000\ncommit_siblings = 0'
# makes every commit wait 4 ms, as a slow disk's would); ROUNDS=N repeats the defaults and
# the latency runs and reports medians; M_EVENTS=0 leaves out 1M/s; TIMELINE=1
# adds when each drain counted its first events, 10%, 90% and all of them,
# and applied the last (its start, body and end); PERF=1
# adds a flame graph of the 1- and the 16-shard drain and of 1.5 s of the
# end-to-end run (every process: the producers' backends and the workers),
# and the stacks of every process for 1.5 s of the
# 4-node runs of dist, through the coordinator and direct (perf-dist-*.txt.xz,
# with ps-dist-*.txt to tell the processes apart), where perf is on PATH (or packed beside the
# bundle as perf.tar.xz: perf/perf, and the libraries it needs in
# pglibs/).  Everything goes to stdout and to $OUT/device.txt; the last
# lines are the ratios beside their targets.
set -u
EVENTS=${EVENTS:-4000000}
TRADES=${TRADES:-800000}
SHARDS=${SHARDS:-"1 4 16"}
SECTIONS=${SECTIONS:-"scale defaults latency dist"}
LAT_EVENTS=${LAT_EVENTS:-1000000}
M_EVENTS=${M_EVENTS:-1000000}
SB=${SB:-8GB}
ROUNDS=${ROUNDS:-1}
LAT_SB=${LAT_SB:-"1GB 32GB"}
O=${OUT:-/tmp/out}
mkdir -p "$O"
exec > >(tee "$O/device.txt") 2>&1
if [ -n "${BUNDLE:-}" ]; then
	tar -xJf "$BUNDLE/pg.tar.xz" -C / && mkdir -p /opt && tar -xJf "$BUNDLE/pglibs.tar.xz" -C /opt || exit 1
	[ -f "$BUNDLE/perf.tar.xz" ] && tar -xJf "$BUNDLE/perf.tar.xz" -C /opt
	export LD_LIBRARY_PATH=/opt/pglibs PATH=$PATH:/opt/perf
fi
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
export PATH=$PGBIN:$(pwd)/tools:$PATH
id postgres >/dev/null 2>&1 || useradd -m postgres 2>/dev/null ||
	{ echo "postgres:x:990:990::/tmp:/bin/sh" >>/etc/passwd; echo "postgres:x:990:" >>/etc/group; }
as_pg() { runuser -u postgres -- env LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-} PATH=$PATH "$@"; }
t() { date +%s.%N; }
c() { awk "BEGIN{printf \"%.3f\", $1}"; }
ci() { awk "BEGIN{printf \"%d\", $1}"; }
CORES=$(nproc)
echo "machine: $CORES cores, $(free -g | awk '/Mem/{print $2}') GB; $EVENTS events over $TRADES keys"
W=${W:-/tmp/eo-device}
rm -rf "$W"
mkdir -p "$W"
chown postgres "$W"
COLS="key, version, value, risk_type, region, trade_desk, deleted, event_time"
DIMS="ARRAY['risk_type','region','trade_desk']"
RESULTS=()
result() { RESULTS+=("$*"); echo "$*"; }
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

t0=$(t)
producer -q --events "$EVENTS" --trades "$TRADES" --duplicates 0.10 --stale 0.10 --tombstones 0.02 --moves 0.10 \
	--seed 42 --output "$W/events.copy" --truth-file "$W/truth.copy" >/dev/null || exit 1
split -l 10000 -d -a 5 "$W/events.copy" "$W/chunk."
split -n l/8 -d "$W/events.copy" "$W/part."
chmod 644 "$W"/*
echo "events generated in $(c "$(t)-$t0") s"

# sessions TABLE DIR PORT FILES...: 8 sessions COPY the files, one
# transaction each, round robin
sessions() {
	local table=$1 host=$2 port=$3 i n=0 pids=()
	shift 3
	rm -f "$W"/sess.*
	for f in "$@"; do
		echo "COPY $table ($COLS) FROM '$f';" >>"$W/sess.$((n % 8))"
		n=$((n + 1))
	done
	for i in $(seq 0 7); do
		[ -f "$W/sess.$i" ] || continue
		PGHOST=$host PGPORT=$port psql -X -q -v ON_ERROR_STOP=1 -f "$W/sess.$i" >/dev/null &
		pids+=($!)
	done
	wait "${pids[@]}"
}

# truth_diff AGGREGATES [TRUTH]: the cells that differ from the truth, both ways
truth_diff() {
	echo "SELECT count(*) FROM ((SELECT risk_type, region, trade_desk, level, total, keys FROM $1
		EXCEPT ALL SELECT * FROM ${2:-truth}) UNION ALL (SELECT * FROM ${2:-truth}
		EXCEPT ALL SELECT risk_type, region, trade_desk, level, total, keys FROM $1)) d"
}

# --- the single cluster: scale, defaults, latency ---------------------------
A=$W/a
as_pg initdb -D "$A" -U postgres -A trust -E UTF8 --locale=C.UTF-8 >"$W/initdb.log" || exit 1
cp "$A/postgresql.conf" "$W/base.conf"
export PGHOST=$W PGPORT=5432 PGUSER=postgres PGDATABASE=postgres PGOPTIONS="-c client_min_messages=warning"
q() { psql -X -q -At -v ON_ERROR_STOP=1 "$@"; }

# server SHARED_BUFFERS "LINES": restart the cluster with these settings
server() {
	as_pg pg_ctl -D "$A" -m fast -w stop >/dev/null 2>&1
	cp "$W/base.conf" "$A/postgresql.conf"
	printf "port = 5432\nlisten_addresses = ''\nunix_socket_directories = '%s'\nshared_preload_libraries = 'exactonce'\nexactonce.database = 'postgres'\nshared_buffers = %s\nmax_wal_size = 64GB\nmin_wal_size = 4GB\ncheckpoint_timeout = 1h\nfsync = on\nsynchronous_commit = on\n%b" \
		"$W" "$1" "$2${EXTRA_CONF:-}" >>"$A/postgresql.conf"
	as_pg pg_ctl -D "$A" -l "$W/server.log" -w -t 300 start >/dev/null || { tail "$W/server.log"; exit 1; }
	q -c "CREATE EXTENSION IF NOT EXISTS exactonce"
	q -c "CREATE TABLE IF NOT EXISTS truth (risk_type text, region text, trade_desk text, level integer, total numeric, keys bigint)"
	[ "$(q -c "SELECT count(*) > 0 FROM truth")" = t ] || q -c "COPY truth FROM '$W/truth.copy'"
}
TUNED='exactonce.workers = 16\nmax_worker_processes = 64\n'

# drained NAME N [HOST PORT...]: wait until the pipeline's servers have
# taken N events in all and reduced every batch.  It reads the counters,
# ingested_sql PIPELINE: its events ingested, from the progress row and the
# shard rows (before 1.21 the progress row counted them all, and the shard
# rows have no counters: the libraries compared in one run may differ)
ingested_sql() {
	echo "(SELECT ingested FROM $1.progress)
		+ (SELECT coalesce(sum((to_jsonb(s) ->> 'ingested')::bigint), 0) FROM $1.shard s)"
}

# not the view: the view's queued counts the queue's rows, a scan of the
# whole backlog, which polled this often would take a core from the drain.
drained() {
	local p=$1 n=$2 sum pending row i
	shift 2
	[ $# -gt 0 ] || set -- "$W" 5432
	while :; do
		sum=0 pending=0
		for ((i = 1; i <= $#; i += 2)); do
			row=$(PGHOST=${!i} PGPORT=$(eval echo \${$((i + 1))}) q -F ' ' -c "SELECT $(ingested_sql $p),
				(SELECT count(*) FROM $p.ledger WHERE applied_at IS NULL)")
			sum=$((sum + ${row% *})) pending=$((pending + ${row#* }))
		done
		[ -n "${TIMELINE:-}" ] && echo "$(t) $sum $pending" >>"$W/timeline"
		[ "$sum" -ge "$n" ] && [ "$pending" = 0 ] && return 0
		sleep 0.02
	done
}

# waits FILE: sample what the drain workers wait on, every 10 ms or so,
# until FILE.stop exists; summary FILE prints the shares of the samples
# of workers not idle (an idle worker sleeps on its latch, Extension)
waits() {
	while [ ! -f "$1.stop" ]; do
		echo "SELECT coalesce(wait_event_type || ':' || wait_event, 'on CPU') FROM pg_stat_activity WHERE backend_type = 'exactonce drain';"
		sleep 0.01
	done | q >"$1" 2>/dev/null
}
summary() {
	grep -v -e '^$' -e '^Extension:Extension$' "$1" | sort | uniq -c | sort -rn | head -8 |
		awk -v n="$(grep -v -c -e '^$' -e '^Extension:Extension$' "$1")" '{ c = $1; $1 = ""; printf "    %5.1f%%%s\n", 100 * c / n, $0 }'
	awk '$0 != "" { n++ } $0 == "Extension:Extension" { i++ }
		END { if (n) printf "    (and %.1f%% of all samples a worker idle on its latch)\n", 100 * i / n }' "$1"
}

# timeline T0 N: how a drain begun at T0 went, from what drained saw each
# time it looked: when the first events were counted, when 10% and 90% of N,
# when all N, and when the last batch was applied; and the rate between 10%
# and 90%, the drain without its start and its end
timeline() {
	awk -v t0="$1" -v n="$2" '
		{ ms = ($1 - t0) * 1000 }
		first == "" && $2 > 0 { first = ms }
		p10 == "" && $2 >= n / 10 { p10 = ms; e10 = $2 }
		p90 == "" && $2 >= n * 9 / 10 { p90 = ms; e90 = $2 }
		all == "" && $2 >= n { all = ms }
		END { printf "  its timeline: first events counted at %d ms, 10%% at %d, 90%% at %d, all at %d, all applied at %d ms; %s\n",
			first, p10, p90, all, ms,
			(p90 > p10 ? sprintf("%d events/s from 10%% to 90%%", (e90 - e10) / ((p90 - p10) / 1000)) : "10% to 90% in one look") }' "$W/timeline"
}

# made NAME: what follows the making of pipeline NAME (STATE_FILLFACTOR)
made() {
	[ -z "${STATE_FILLFACTOR:-}" ] || q -c "ALTER TABLE $1.state SET (fillfactor = $STATE_FILLFACTOR)" >/dev/null
}

# drain NAME SHARDS-ARGUMENT: the workers' drain of the pre-loaded queue;
# sets RATE
drain() {
	local p=$1 t0 s l0 wal diff
	q -c "SELECT exactonce.create_pipeline('$p', $DIMS$2)" >/dev/null
	made "$p"
	q -c "SELECT exactonce.pause('$p')" >/dev/null
	q -c "COPY $p.ingest ($COLS) FROM '$W/events.copy'"
	q -c CHECKPOINT
	l0=$(q -c "SELECT pg_current_wal_lsn()")
	rm -f "$W/timeline"
	t0=$(t)
	q -c "SELECT exactonce.resume('$p')" >/dev/null
	local perf=""
	if [ -n "${PROFILE:-}" ] && command -v perf >/dev/null; then
		(sleep 0.3; perf record -a -g -F 499 -o "$W/perf-$p.data" -- sleep 2 >/dev/null 2>&1) &
		perf=$!
	fi
	[ -n "${SAMPLE:-}" ] && { waits "$W/waits-$p" & sampler=$!; }
	drained "$p" "$EVENTS"
	s=$(c "$(t)-$t0")
	[ -n "${SAMPLE:-}" ] && { touch "$W/waits-$p.stop"; wait $sampler; echo "  what the busy workers did (sampled; idle ones not counted):"; summary "$W/waits-$p"; }
	[ -n "$perf" ] && wait $perf
	RATE=$(ci "$EVENTS/$s")
	wal=$(q -c "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '$l0')")
	diff=$(q -c "$(truth_diff $p.aggregates)")
	SHARDS_OF=$(q -c "SELECT shards FROM exactonce.pipelines WHERE name = '$p'")
	echo "  drain $p: $SHARDS_OF shards, $s s, $RATE events/s, WAL $(ci "$wal/$EVENTS") B/event; cells differing: $diff"
	[ -n "${TIMELINE:-}" ] && timeline "$t0" "$EVENTS"
	[ "$diff" = 0 ] || result "FAIL: $p differs from the truth"
	q -c "SELECT exactonce.drop_pipeline('$p', force => true)" >/dev/null
}

BEST=0
if [[ " $SECTIONS " == *" scale "* ]]; then
	echo "== scale: shared_buffers $SB, exactonce.workers 16"
	server $SB "$TUNED"
	q -c "CREATE TABLE plain (key text, version bigint, value numeric, risk_type text, region text, trade_desk text, deleted boolean, event_time timestamptz)"
	q -c CHECKPOINT; t0=$(t); q -c "COPY plain ($COLS) FROM '$W/events.copy'"; COPY1=$(ci "$EVENTS/($(t)-$t0)")
	q -c "TRUNCATE plain"; q -c CHECKPOINT; t0=$(t); sessions plain "$W" 5432 "$W"/part.*; COPY8=$(ci "$EVENTS/($(t)-$t0)")
	q -c "TRUNCATE plain"; q -c CHECKPOINT; t0=$(t); sessions plain "$W" 5432 "$W"/chunk.*; CHUNKED=$(ci "$EVENTS/($(t)-$t0)")
	q -c "DROP TABLE plain"
	result "COPY into a plain table: 1 session $COPY1, 8 sessions $COPY8, 8 sessions in chunks of 10,000 $CHUNKED events/s"
	for sh in $SHARDS; do
		SAMPLE=$([ "$sh" = 16 ] || [ "$sh" = 1 ] && echo 1)
		PROFILE=${SAMPLE:+${PERF:-}}
		drain "s$sh" ", shards => $sh"
		[ "$sh" = 1 ] && result "drain, 1 shard: $RATE events/s = $(c "$RATE/$COPY1")x the 1-session COPY (target 0.45x)"
		[ "$sh" = 16 ] && { BEST=$RATE; result "drain, 16 shards: $RATE events/s = $(c "$RATE/$COPY8")x the 8-session COPY (target 0.8x)"; }
		[ "$sh" != 1 ] && [ "$sh" != 16 ] && result "drain, $sh shards: $RATE events/s"
		if [ -f "$W/perf-s$sh.data" ]; then
			perf script -i "$W/perf-s$sh.data" 2>/dev/null >"$W/perf-s$sh.txt"
			python3 test/bench/flamegraph.py "drain of $EVENTS events, $sh shards, $CORES cores" <"$W/perf-s$sh.txt" \
				>"$O/flame-drain-$sh-shards.svg" 2>/dev/null || rm -f "$O/flame-drain-$sh-shards.svg"
			[ -s "$O/flame-drain-$sh-shards.svg" ] || xz -1 <"$W/perf-s$sh.txt" >"$O/perf-drain-$sh-shards.txt.xz"
			echo "  a profile of 2 s of it: $(ls "$O"/*-$sh-shards.*)"
		fi
	done
	q -c "SELECT exactonce.create_pipeline('e2e', $DIMS, shards => 16)" >/dev/null
	made e2e
	q -c CHECKPOINT
	l0=$(q -c "SELECT pg_current_wal_lsn()")
	t0=$(t)
	waits "$W/waits-e2e" &
	sampler=$!
	perf=""
	if [ -n "${PERF:-}" ] && command -v perf >/dev/null; then
		(sleep 0.5; perf record -a -g -F 499 -o "$W/perf-e2e.data" -- sleep 1.5 >/dev/null 2>&1) &
		perf=$!
	fi
	sessions e2e.ingest "$W" 5432 "$W"/chunk.*
	tl=$(c "$(t)-$t0")
	drained e2e "$EVENTS"
	touch "$W/waits-e2e.stop"; wait $sampler
	echo "  what the busy workers did (sampled; idle ones not counted):"; summary "$W/waits-e2e"
	s=$(c "$(t)-$t0")
	wal=$(q -c "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '$l0')")
	diff=$(q -c "$(truth_diff e2e.aggregates)")
	[ "$diff" = 0 ] || result "FAIL: e2e differs from the truth"
	E2E=$(ci "$EVENTS/$s")
	if [ -n "$perf" ]; then
		wait $perf
		perf script -i "$W/perf-e2e.data" 2>/dev/null >"$W/perf-e2e.txt"
		python3 test/bench/flamegraph.py "end to end: 8 sessions COPY while 16 shards drain, $CORES cores" <"$W/perf-e2e.txt" \
			>"$O/flame-e2e-16-shards.svg" 2>/dev/null || rm -f "$O/flame-e2e-16-shards.svg"
		[ -s "$O/flame-e2e-16-shards.svg" ] || xz -1 <"$W/perf-e2e.txt" >"$O/perf-e2e-16-shards.txt.xz"
		echo "  a profile of 1.5 s of it, every process: $(ls "$O"/*e2e-16-shards.*)"
	fi
	result "end to end, 8 sessions chunked, 16 shards: inserted in $tl s, applied in $s s: $E2E events/s = $(c "$E2E/$CHUNKED")x the chunked COPY (target 0.65x); WAL $(ci "$wal/$EVENTS") B/event (target 150, at 1M events over 200k keys)"
	q -c "SELECT exactonce.drop_pipeline('e2e', force => true)" >/dev/null
fi

# --- a coordinator and four nodes --------------------------------------------
if [[ " $SECTIONS " == *" dist "* ]]; then
	as_pg pg_ctl -D "$A" -m fast -w stop >/dev/null 2>&1
	per=$((CORES / 4))
	echo "== dist: a coordinator and four nodes, each node on $per of the $CORES cores"
	N=("$W/coord" 5440 "$W/n1" 5441 "$W/n2" 5442 "$W/n3" 5443 "$W/n4" 5444)
	for i in 0 1 2 3 4; do
		dir=${N[$((2 * i))]} port=${N[$((2 * i + 1))]}
		pin=()
		[ "$i" -gt 0 ] && [ "$per" -ge 1 ] && command -v taskset >/dev/null && pin=(taskset -c $(((i - 1) * per))-$((i * per - 1)))
		mkdir -p "$dir"; chown postgres "$dir"
		as_pg initdb -D "$dir/data" -U postgres -A trust -E UTF8 --locale=C.UTF-8 >/dev/null || exit 1
		printf "port = %s\nlisten_addresses = ''\nunix_socket_directories = '%s'\nshared_preload_libraries = 'exactonce'\nexactonce.database = 'postgres'\nexactonce.workers = %s\nmax_worker_processes = 32\nmax_prepared_transactions = 64\nshared_buffers = 4GB\nmax_wal_size = 32GB\ncheckpoint_timeout = 1h\nfsync = on\nsynchronous_commit = on\n" \
			"$port" "$dir" "$([ $i = 0 ] && echo 1 || echo $((per > 0 ? per : 1)))" >>"$dir/data/postgresql.conf"
		as_pg "${pin[@]}" pg_ctl -D "$dir/data" -l "$dir/server.log" -w -t 120 start >/dev/null || { tail "$dir/server.log"; exit 1; }
		PGHOST=$dir PGPORT=$port q -c "CREATE EXTENSION exactonce"
	done
	qc() { PGHOST=$W/coord PGPORT=5440 q "$@"; }
	qc -c "CREATE EXTENSION postgres_fdw"
	for i in 1 2 3 4; do
		qc -c "CREATE SERVER node$i FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '$W/n$i', port '544$i', dbname 'postgres')" \
			-c "CREATE USER MAPPING FOR postgres SERVER node$i OPTIONS (user 'postgres')"
	done
	qc -c "CREATE TABLE truth (risk_type text, region text, trade_desk text, level integer, total numeric, keys bigint)" \
		-c "COPY truth FROM '$W/truth.copy'"
	# dist_drained N: the pipeline's N nodes have taken every event
	dist_drained() {
		local i nodes=()
		for i in $(seq 1 "$1"); do nodes+=("$W/n$i" 544$i); done
		drained d "$EVENTS" "${nodes[@]}"
	}
	nodes() { local i s=""; for i in $(seq 1 "$1"); do s="$s${s:+, }'node$i'"; done; echo "ARRAY[$s]::name[]"; }
	# dist_profile NAME: with PERF=1, 1.5 s of every process's stacks a
	# second into a run, and which cluster and role each process had
	dist_profile() {
		[ -n "${PERF:-}" ] && command -v perf >/dev/null || return 0
		( sleep 1; ps -eo pid,ppid,args >"$O/ps-$1.txt"
		  perf record -a -g -F 999 -o "$W/perf-$1.data" -- sleep 1.5 >/dev/null 2>&1
		  perf script -i "$W/perf-$1.data" 2>/dev/null | xz -1 >"$O/perf-$1.txt.xz" ) &
		PROFILERS+=($!)
	}
	PROFILERS=()
	declare -A DIST
	for n in 1 2 4; do
		qc -c "SELECT exactonce.create_distributed_pipeline('d', $DIMS, $(nodes $n))" >/dev/null
		t0=$(t)
		[ "$n" = 4 ] && dist_profile dist-coordinator
		sessions d.ingest "$W/coord" 5440 "$W"/chunk.*
		tl=$(c "$(t)-$t0")
		dist_drained $n
		s=$(c "$(t)-$t0")
		diff=$(qc -c "$(truth_diff d.aggregates)")
		[ "$diff" = 0 ] || result "FAIL: d on $n nodes differs from the truth"
		DIST[$n]=$(ci "$EVENTS/$s")
		echo "  $n nodes through the coordinator: inserted in $tl s, applied in $s s: ${DIST[$n]} events/s; cells differing: $diff"
		[ "$n" = 4 ] || qc -c "SELECT exactonce.drop_pipeline('d')" >/dev/null
	done
	# the same into four nodes with the coordinator parsing every field
	# (exactonce.route_copy off), as the releases before 1.25 did
	PARSED=
	if [ "$(qc -c "SELECT count(*) FROM pg_settings WHERE name = 'exactonce.route_copy'")" = 1 ]; then
		qc -c "SELECT exactonce.drop_pipeline('d')" \
			-c "SELECT exactonce.create_distributed_pipeline('d', $DIMS, $(nodes 4))" >/dev/null
		t0=$(t)
		export PGOPTIONS="-c exactonce.route_copy=off"
		sessions d.ingest "$W/coord" 5440 "$W"/chunk.*
		unset PGOPTIONS
		tl=$(c "$(t)-$t0")
		dist_drained 4
		s=$(c "$(t)-$t0")
		diff=$(qc -c "$(truth_diff d.aggregates)")
		[ "$diff" = 0 ] || result "FAIL: d parsed at the coordinator differs from the truth"
		PARSED=$(ci "$EVENTS/$s")
		echo "  4 nodes through the coordinator, exactonce.route_copy off: inserted in $tl s, applied in $s s: $PARSED events/s; cells differing: $diff"
	fi
	# a move under load: the same COPY through the coordinator into four
	# nodes, and keys (64, 1) moved from node2 to node3 a second into it;
	# the coordinator's log says how long the move's switch held it
	qc -c "SELECT exactonce.drop_pipeline('d')" \
		-c "SELECT exactonce.create_distributed_pipeline('d', $DIMS, $(nodes 4))" >/dev/null
	t0=$(t)
	( sleep 1; qc -c "SELECT exactonce.move_keys('d', ${MOVE_MODULUS:-64}, 1, 'node3')" >"$W/moved" 2>&1 ) &
	mpid=$!
	sessions d.ingest "$W/coord" 5440 "$W"/chunk.*
	wait $mpid
	tl=$(c "$(t)-$t0")
	dist_drained 4
	s=$(c "$(t)-$t0")
	diff=$(qc -c "$(truth_diff d.aggregates)")
	[ "$diff" = 0 ] || result "FAIL: d with a move under load differs from the truth"
	move=$(grep -o 'moved [0-9]* keys .* in [0-9]* ms' "$W/coord/server.log" | tail -1)
	switch=$(grep -o 'held the coordinator.s producers and readers for [0-9]* ms' "$W/coord/server.log" | tail -1 | grep -o '[0-9]* ms')
	echo "  4 nodes through the coordinator, keys (${MOVE_MODULUS:-64}, 1) moved meanwhile: inserted in $tl s, applied in $s s: $(ci "$EVENTS/$s") events/s; cells differing: $diff; $(cat "$W/moved")"
	result "distributed, a move under load: ${move:-no move logged} while 8 sessions COPY through the coordinator ($(ci "$EVENTS/$s") events/s, 4 nodes); the switch held the coordinator's producers and readers ${switch:-?} (target: at most 100 ms at 10,000 keys)"
	# the four nodes fed their own keys directly: the events split by the
	# coordinator's own routing (its hash partitions)
	qc -c "CREATE TABLE events (key text COLLATE \"C\", version bigint, value numeric, risk_type text, region text, trade_desk text, deleted boolean, event_time timestamptz)" \
		-c "COPY events FROM '$W/events.copy'"
	for i in 0 1 2 3; do
		qc -c "COPY (SELECT * FROM events WHERE satisfies_hash_partition('d.ingest'::regclass, 4, $i, key)) TO '$W/node$i.copy'"
		split -l 10000 -d -a 5 "$W/node$i.copy" "$W/nchunk$i."
	done
	chmod 644 "$W"/nchunk*
	qc -c "SELECT exactonce.drop_pipeline('d')" \
		-c "SELECT exactonce.create_distributed_pipeline('d', $DIMS, $(nodes 4))" >/dev/null
	# hash partition i lives on node i + 1, as the coordinator made them
	t0=$(t)
	dist_profile dist-direct
	pids=()
	for i in 0 1 2 3; do
		j=$((i + 1))
		( PGHOST=$W/n$j PGPORT=544$j; export PGHOST PGPORT
		  sessions_one() { for f in "$@"; do echo "COPY d.ingest ($COLS) FROM '$f';"; done; }
		  files=("$W"/nchunk$i.*)
		  half=$(( ${#files[@]} / 2 ))
		  sessions_one "${files[@]:0:$half}" | psql -X -q -v ON_ERROR_STOP=1 >/dev/null &
		  sessions_one "${files[@]:$half}" | psql -X -q -v ON_ERROR_STOP=1 >/dev/null
		  wait ) &
		pids+=($!)
	done
	wait "${pids[@]}"
	tl=$(c "$(t)-$t0")
	dist_drained 4
	s=$(c "$(t)-$t0")
	diff=$(qc -c "$(truth_diff d.aggregates)")
	[ "$diff" = 0 ] || result "FAIL: d fed directly differs from the truth"
	DIRECT=$(ci "$EVENTS/$s")
	[ ${#PROFILERS[@]} -gt 0 ] && wait "${PROFILERS[@]}"
	echo "  4 nodes fed directly, 2 sessions each: inserted in $tl s, applied in $s s: $DIRECT events/s; cells differing: $diff"
	result "distributed, 8 sessions COPY chunks of 10,000 through the coordinator: 1 node ${DIST[1]}, 2 nodes ${DIST[2]}, 4 nodes ${DIST[4]} events/s; 4 nodes = $(c "${DIST[4]}/${DIST[1]}")x one node (target 3.2x)"
	result "distributed, through the coordinator / the four nodes fed directly ($DIRECT events/s): $(c "${DIST[4]}/$DIRECT")x (target 0.9x)"
	[ -n "$PARSED" ] && result "distributed, through the coordinator with exactonce.route_copy off / the four nodes fed directly: $(c "$PARSED/$DIRECT")x (the coordinator parsing every field; routed by key: $(c "${DIST[4]}/$DIRECT")x)"
	for i in 0 1 2 3 4; do as_pg pg_ctl -D "${N[$((2 * i))]}/data" -m immediate -w stop >/dev/null 2>&1; done
fi

if [[ " $SECTIONS " == *" defaults "* ]]; then
	echo "== defaults: shared_buffers $SB, nothing else set, against the best hand-set, $ROUNDS round(s)"
	bests=() dflts=()
	for r in $(seq 1 "$ROUNDS"); do
		if [ "$r" -gt 1 ] || [ "$BEST" = 0 ]; then
			server $SB "$TUNED"
			SAMPLE='' PROFILE='' drain best ", shards => 16"
			BEST=$RATE
		fi
		bests+=("$BEST")
		server $SB ''
		sleep 1
		mwp=$(q -c "SHOW max_worker_processes")
		workers=$(q -c "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'exactonce drain'")
		SAMPLE=$([ "$r" = 1 ] && echo 1) PROFILE='' drain dflt ''
		dflts+=("$RATE")
	done
	result "defaults (max_worker_processes $mwp, $workers workers, $SHARDS_OF shards): $(median "${dflts[@]}") events/s = $(c "$(median "${dflts[@]}")/$(median "${bests[@]}")")x the best hand-set, 16 workers and 16 shards, $(median "${bests[@]}") (target 0.8x; medians of ${dflts[*]} and ${bests[*]})"
fi

if [[ " $SECTIONS " == *" latency "* ]]; then
	# commit_probe: what a lone commit costs on this machine, fsync and all
	# (one session inserting a row per transaction for 3 s), as p50 and p99:
	# a batch's latency holds the producer's commit and the drain's
	commit_probe() {
		q -c "CREATE TABLE IF NOT EXISTS probe (x int)"
		echo "INSERT INTO probe VALUES (1);" >"$W/probe.sql"
		rm -f "$W"/probe.log*
		(cd "$W" && pgbench -n -c 1 -T 3 -f "$W/probe.sql" -l --log-prefix="$W/probe.log" >/dev/null 2>&1)
		cat "$W"/probe.log* 2>/dev/null | awk '{ print $3 / 1000 }' | sort -n |
			awk '{ v[NR] = $1 } END { if (NR) printf "  a lone commit (pgbench, 1 session, %d commits): p50 %.2f ms, p99 %.2f ms\n", NR, v[int((NR + 1) / 2)], v[int((NR * 99 + 99) / 100)] }'
		q -c "DROP TABLE probe"
	}
	declare -A P99
	for r in $(seq 1 "$ROUNDS"); do
		for sb in $LAT_SB; do
			echo "== latency: shared_buffers $sb, round $r"
			server $sb "$TUNED"
			commit_probe
			q -c "SELECT exactonce.create_pipeline('lat', $DIMS, shards => 4)" >/dev/null
			made lat
			[ "$r" = 1 ] && { waits "$W/waits-lat" & sampler=$!; }
			producer -q -p lat --events "$LAT_EVENTS" --trades $((LAT_EVENTS / 5)) --rate 50000 --batch 1000 --seed 7 -T lat_truth \
				>/dev/null 2>"$W/producer.err" || tail -2 "$W/producer.err"
			drained lat "$LAT_EVENTS"
			[ "$r" = 1 ] && { touch "$W/waits-lat.stop"; wait $sampler; rm -f "$W/waits-lat.stop"
				echo "  what the busy workers did (sampled; idle ones not counted):"; summary "$W/waits-lat"; }
			lat=$(q -F ' ' -c "SELECT extract(milliseconds FROM latency_p50)::numeric(8,1), extract(milliseconds FROM latency_p99)::numeric(8,1) FROM exactonce.pipelines WHERE name = 'lat'")
			diff=$(q -c "$(truth_diff lat.aggregates lat_truth)")
			[ "$diff" = 0 ] || result "FAIL: lat differs from the truth"
			echo "  p50 ${lat% *} ms, p99 ${lat#* } ms; cells differing: $diff"
			P99[$sb]="${P99[$sb]:-} ${lat#* }"
			q -c "SELECT exactonce.drop_pipeline('lat', force => true)" >/dev/null
		done
	done
	for sb in $LAT_SB; do
		# shellcheck disable=SC2086
		result "latency at 50,000 events/s in batches of 1,000, shared_buffers $sb: p99 $(median ${P99[$sb]}) ms (target $([ $sb = 32GB ] && echo 40 || echo 25) ms; median of${P99[$sb]})"
	done
	if [ "$M_EVENTS" -gt 0 ]; then
		echo "== latency: 1M events/s offered, four producers of 250,000/s, shared_buffers $sb"
		pids=()
		for i in 1 2 3 4; do
			q -c "SELECT exactonce.create_pipeline('m$i', $DIMS, shards => 4)" >/dev/null
			made "m$i"
		done
		for i in 1 2 3 4; do
			producer -q -p m$i --events $M_EVENTS --trades $((M_EVENTS / 5)) --rate 250000 --batch 1000 --seed $i -T m${i}_truth \
				>"$W/m$i.out" 2>&1 &
			pids+=($!)
		done
		wait "${pids[@]}"
		worst=0
		for i in 1 2 3 4; do
			drained m$i "$M_EVENTS"
			diff=$(q -c "$(truth_diff m$i.aggregates m${i}_truth)")
			[ "$diff" = 0 ] || result "FAIL: m$i differs from the truth"
			p=$(q -c "SELECT extract(milliseconds FROM latency_p99)::numeric(8,1) FROM exactonce.pipelines WHERE name = 'm$i'")
			sent=$(awk '$1 == "events_per_second" {print $2}' "$W/m$i.out")
			echo "  m$i: sent at $sent events/s, p99 $p ms"
			worst=$(awk -v a="$worst" -v b="$p" 'BEGIN { print (b > a) ? b : a }')
		done
		result "latency at 1M events/s offered (4 x 250,000/s, batches of 1,000, 4 x 4 shards): worst p99 $worst ms (target 100 ms)"
	fi
fi
as_pg pg_ctl -D "$A" -m fast -w stop >/dev/null 2>&1

grep -h -E "PANIC|FATAL|TRAP" "$W"/server.log "$W"/*/server.log 2>/dev/null | grep -v "administrator command" | head -5
echo "== results"
printf '%s\n' "${RESULTS[@]}"
