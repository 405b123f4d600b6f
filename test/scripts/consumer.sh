#!/usr/bin/env bash
# The log consumer (tools/consumer.c) delivers a partitioned log through
# exactonce.ingest() while it crashes after commits (before it records its
# progress), before commits, and while two consumers race over one log; the
# background workers drain the pipelines.  In every case the aggregates equal
# an oracle computed from the log file, the pipeline ingested each offset
# exactly once, and each source's committed offset is its partition's last.
set -u
. "$(dirname "$0")/lib.sh"
DB=exactonce_test
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CONSUMER=$ROOT/tools/consumer
WORK=$(mktemp -d)
chmod 755 "$WORK"
trap 'rm -rf "$WORK"' EXIT

make -s -C "$ROOT/tools" consumer >/dev/null 2>&1
ok $? "tools/consumer builds"

# the log: 4 partitions, 30000 events, offsets with gaps; 3000 keys with 10
# versions each, so repeats (duplicates), older versions after newer ones
# (stale) and tombstones; a (key, version) always has the same content
awk -v n=30000 -v parts=4 'BEGIN {
	srand(20240601)
	for (p = 0; p < parts; p++) off[p] = -1
	for (i = 0; i < n; i++) {
		p = int(rand() * parts)
		off[p] += rand() < 0.1 ? 1 + int(rand() * 5) : 1
		k = int(rand() * 3000); v = int(rand() * 10)
		printf "%d\t%d\tk%d\t%d\t%s\t%s\ta%d\tb%d\n", p, off[p], k, v,
			((k * 31 + v * 17) % 1000) / 10, ((k * 7 + v * 13) % 23 == 0) ? "t" : "f",
			(k + v) % 3, (k * v) % 5
	}
}' >"$WORK/log.tsv"
events=$(wc -l <"$WORK/log.tsv")

psql -X -q -d $DB -v ON_ERROR_STOP=1 >/dev/null <<SQL
SET client_min_messages = warning;
SELECT exactonce.create_pipeline('cons_l', ARRAY['a', 'b']);
SELECT exactonce.create_pipeline('cons_a', ARRAY['a', 'b'], 'accumulate');
SELECT exactonce.create_pipeline('cons_r', ARRAY['a', 'b']);
CREATE TABLE cons_log (part int, off bigint, key text, version bigint, value numeric,
					   deleted boolean, a text, b text);
\copy cons_log FROM '$WORK/log.tsv'
-- latest: each key's highest version counts unless it is a tombstone
CREATE VIEW cons_oracle_latest AS
SELECT a, b, 2 - (GROUPING(a) + GROUPING(b)) AS level, sum(value) AS total, count(*) AS keys
FROM (SELECT DISTINCT ON (key) * FROM cons_log ORDER BY key, version DESC) s
WHERE NOT deleted GROUP BY ROLLUP (a, b);
-- accumulate: each distinct (key, version) adds once; tombstones are dead letters
CREATE VIEW cons_oracle_accumulate AS
SELECT a, b, 2 - (GROUPING(a) + GROUPING(b)) AS level, sum(value) AS total, count(*) AS keys
FROM (SELECT DISTINCT key, version, value, a, b FROM cons_log WHERE NOT deleted) s
GROUP BY ROLLUP (a, b);
SQL
ok $? "pipelines, log table and oracles created"

# mismatches PIPELINE ORACLE: rows in one and not in the other
mismatches() {
	q $DB "SELECT count(*) FROM (
		(SELECT a, b, level, total, keys FROM $1.aggregates EXCEPT SELECT * FROM $2)
		UNION ALL
		(SELECT * FROM $2 EXCEPT SELECT a, b, level, total, keys FROM $1.aggregates)) m"
}
drained() {
	echo "SELECT queued = 0 AND staged = 0 AND ingested = applied + duplicates + stale + dead_lettered FROM exactonce.pipelines WHERE name = '$1'"
}
# offsets_right PIPELINE TOPIC: every partition's committed offset is its last
offsets_right() {
	q $DB "SELECT count(*) = 4 AND bool_and(s.committed_offset = l.last) FROM exactonce.sources s
		JOIN (SELECT '$2:' || part AS source, max(off) AS last FROM cons_log GROUP BY part) l USING (source)
		WHERE s.pipeline = '$1'"
}

# consume NAME ARGS...: run the consumer until it finishes without crashing
# (at most 2000 runs); sets runs, crashes and summary
consume() {
	local name=$1 rc
	shift
	runs=0 crashes=0 summary=
	while [ $runs -lt 2000 ]; do
		runs=$((runs + 1))
		summary=$("$CONSUMER" -d $DB -i "$WORK/log.tsv" -s "$runs$RANDOM" "$@" 2>>"$WORK/$name.err")
		rc=$?
		[ $rc -eq 3 ] && { crashes=$((crashes + 1)); continue; }
		[ $rc -eq 0 ] && return 0
		tail -3 "$WORK/$name.err" >&2
		return 1
	done
	return 1
}

# 1. crash after every third commit that queued events, before the progress
# file records it; the restarted consumer replays from its progress file
consume latest -p cons_l -f "$WORK/progress_l" -b 300 -R -c 3
ok $? "latest: the consumer finished after $runs runs"
ok $([ "$crashes" -ge 20 ]; echo $?) "latest: it crashed $crashes times after a commit, before recording its progress"
skipped=$(q $DB "SELECT sum(skipped) FROM exactonce.sources WHERE pipeline = 'cons_l'")
ok $([ "$skipped" -gt 0 ]; echo $?) "latest: the replays after the crashes were skipped ($skipped events)"

# 2. a consumer that lost its progress file delivers the whole log again:
# nothing is queued twice
out=$("$CONSUMER" -d $DB -p cons_l -i "$WORK/log.tsv" -f "$WORK/progress_lost" -b 1000 2>&1)
is "$(sed -E 's/^batches [0-9]+ //' <<<"$out")" "events $events ingested 0 skipped $events" "latest: a full replay queues nothing"

# 3. accumulate mode: random crashes before and after commits, resuming from
# the pipeline's committed offsets (no progress file)
consume accumulate -p cons_a -S -b 200 -R -r 0.2 -k either
ok $? "accumulate: the consumer finished after $runs runs"
ok $([ "$crashes" -ge 10 ]; echo $?) "accumulate: it crashed $crashes times before or after a commit"

# 4. two consumers race over the same log into one pipeline, each crashing
consume race1 -p cons_r -f "$WORK/progress_r1" -b 250 -R -r 0.1 -k either &
pid1=$!
consume race2 -p cons_r -f "$WORK/progress_r2" -b 250 -R -r 0.1 -k either &
pid2=$!
wait $pid1
rc1=$?
wait $pid2
rc2=$?
ok $((rc1 + rc2)) "race: both consumers finished"

# the workers drain all three pipelines
for p in cons_l cons_a cons_r; do
	poll_until $DB "$(drained $p)"
	ok $? "$p: the workers drained the pipeline"
done

is "$(mismatches cons_l cons_oracle_latest)" 0 "latest: aggregates equal the oracle"
is "$(mismatches cons_a cons_oracle_accumulate)" 0 "accumulate: aggregates equal the oracle"
is "$(mismatches cons_r cons_oracle_latest)" 0 "race: aggregates equal the oracle"
distinct=$(q $DB "SELECT count(DISTINCT (part, off)) FROM cons_log")
is "$distinct" "$events" "the log has $events distinct offsets"
for p in cons_l cons_a cons_r; do
	is "$(q $DB "SELECT ingested FROM exactonce.pipelines WHERE name = '$p'")" "$distinct" "$p: ingested equals the number of distinct offsets"
	is "$(q $DB "SELECT sum(ingested) FROM exactonce.sources WHERE pipeline = '$p'")" "$distinct" "$p: the sources' ingested counters add up to it"
	is "$(offsets_right $p log)" t "$p: each source's committed offset is its partition's last"
done
is "$(q $DB "SELECT dead_lettered = (SELECT count(*) FROM cons_log WHERE deleted) FROM exactonce.pipelines WHERE name = 'cons_a'")" t \
	"accumulate: exactly the tombstones were dead-lettered"
is "$(q $DB "SELECT count(*) FROM cons_l.dead_letters") $(q $DB "SELECT count(*) FROM cons_r.dead_letters")" "0 0" \
	"latest: no dead letters"

psql -X -q -d $DB >/dev/null 2>&1 <<'SQL'
SET client_min_messages = warning;
SELECT exactonce.drop_pipeline(p) FROM unnest(ARRAY['cons_l', 'cons_a', 'cons_r']) p;
DROP VIEW cons_oracle_latest, cons_oracle_accumulate;
DROP TABLE cons_log;
SQL
is "$(q $DB "SELECT count(*) FROM exactonce.sources WHERE pipeline LIKE 'cons\_%'")" 0 "dropping the pipelines dropped their offsets"
