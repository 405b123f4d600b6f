#!/usr/bin/env bash
# Key shards: the shards of one pipeline are drained in parallel by
# different workers, each taking only its own keys.  A shard that is held up
# holds up its own keys (and the next rotation), never the other shard; the
# view counts what each shard still has to take; results are exact with one,
# two and three shards (more shards than workers), and when set_shards()
# changes the shards while the workers drain.
set -u
. "$(dirname "$0")/lib.sh"
DB=exactonce_test
HOLD=$EXACTONCE_TEST_DIR/release-shard

psql -X -q -d $DB >/dev/null <<'SQL'
SET client_min_messages = warning;
SELECT exactonce.create_pipeline('sh2', ARRAY['a']);
SELECT exactonce.create_pipeline('sh1', ARRAY['a'], shards => 1);
SELECT exactonce.create_pipeline('sh3', ARRAY['a'], shards => 3);
-- the shard of a key: the hash of its bytes, as hashtext() computes it
CREATE FUNCTION shard_of(key text, shards int) RETURNS int LANGUAGE sql IMMUTABLE
AS $$ SELECT ((hashtext(key)::bigint & 4294967295) % shards)::int $$;
-- what the producer committed, per pipeline
CREATE TABLE produced_sh (pipe text, key text, version bigint, value numeric, a text);
CREATE FUNCTION sh_mismatches(pipe text) RETURNS bigint LANGUAGE plpgsql AS $f$
DECLARE n bigint;
BEGIN
	EXECUTE format($q$
	  WITH truth AS (
	    SELECT a, 1 - GROUPING(a) AS level, sum(value) AS total, count(*) AS keys
	    FROM (SELECT DISTINCT ON (key) * FROM produced_sh WHERE pipe = %L ORDER BY key, version DESC) s
	    GROUP BY ROLLUP (a))
	  SELECT count(*) FROM ((SELECT a, level, total, keys FROM %I.aggregates EXCEPT SELECT * FROM truth)
	                        UNION ALL
	                        (SELECT * FROM truth EXCEPT SELECT a, level, total, keys FROM %I.aggregates)) m$q$,
	  pipe, pipe, pipe) INTO n;
	RETURN n;
END $f$;
SQL

# produce PIPE BATCH: one transaction adds 2000 events over 3000 keys, with
# repeats and late versions; a (key, version) always has the same content
produce() {
	psql -X -q -d $DB -v ON_ERROR_STOP=1 >/dev/null 2>&1 <<SQL
BEGIN;
CREATE TEMP TABLE b ON COMMIT DROP AS
SELECT '$1'::text AS pipe, 'k' || k AS key, v::bigint AS version, ((k * 31 + v * 17) % 1000)::numeric / 10 AS value,
       'a' || ((k + v) % 4) AS a
FROM (SELECT i % 3000 AS k, ($2 * 7 + i) % 11 AS v FROM generate_series(1, 2000) i) g;
INSERT INTO produced_sh SELECT * FROM b;
INSERT INTO $1.ingest (key, version, value, a) SELECT key, version, value, a FROM b ORDER BY random();
COMMIT;
SQL
}
drained() {
	echo "SELECT queued = 0 AND staged = 0 AND ingested = applied + duplicates + stale + dead_lettered
	        FROM exactonce.pipelines WHERE name = '$1'"
}

# 1. shard 1 held up (as a long flush() or a caller of the stages would):
# shard 0's worker drains shard 0's keys meanwhile, and the worker of shard 1
# skips it and serves its other pipelines
poll_until $DB "SELECT worker_pid IS NOT NULL FROM exactonce.pipelines WHERE name = 'sh2'"
ok $? "drain workers serve the pipeline"
hold_open $DB "$HOLD" "SELECT * FROM sh2.shard WHERE shard = 1 FOR UPDATE;"
q $DB "INSERT INTO sh2.ingest (key, version, value, a) SELECT 'k' || i, 1, 1, 'a' || (i % 4) FROM generate_series(1, 4000) i;
       INSERT INTO produced_sh SELECT 'sh2', 'k' || i, 1, 1, 'a' || (i % 4) FROM generate_series(1, 4000) i;"
S0=$(q $DB "SELECT count(*) FROM produced_sh WHERE pipe = 'sh2' AND shard_of(key, 2) = 0")
poll_until $DB "SELECT count(*) = $S0 FROM sh2.state"
ok $? "shard 0's keys are applied while shard 1 is held"
is "$(q $DB "SELECT count(*) FROM sh2.state WHERE shard_of(key, 2) = 1")" 0 "no key of shard 1 is applied"
is "$(q $DB "SELECT total = $S0 AND keys = $S0 FROM sh2.aggregates WHERE level = 0")" t "aggregates hold exactly what shard 0 applied"
is "$(q $DB "SELECT queued = 4000 - $S0 AND ingested = $S0 AND applied = $S0 FROM exactonce.pipelines WHERE name = 'sh2'")" t \
	"the view counts shard 1's events as queued, shard 0's as applied"
is "$(q $DB "SELECT array_agg(taken ORDER BY shard) = ARRAY[$S0, 0]::bigint[] FROM sh2.shard")" t "each shard counts the events it took"
is "$(q $DB "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'exactonce drain' AND wait_event_type = 'Lock'")" 0 \
	"no worker waits for the held shard"
# sh1's only shard goes to the worker of sh2's shard 1 ((id + shard) % 2)
is "$(q $DB "SELECT (a.id + 0) % 2 = (b.id + 1) % 2 FROM exactonce.pipeline a, exactonce.pipeline b
             WHERE a.name = 'sh1' AND b.name = 'sh2'")" t "sh1's shard and sh2's shard 1 have the same worker"
produce sh1 0
poll_until $DB "$(drained sh1)"
ok $? "the worker of the held shard drains its other pipelines meanwhile"
release "$HOLD"
poll_until $DB "$(drained sh2)"
ok $? "shard 1 is drained once released"
is "$(q $DB "SELECT sh_mismatches('sh2')")" 0 "aggregates equal the oracle"
poll_until $DB "SELECT rotation = drain_rotation FROM sh2.progress"
ok $? "the drained partition is truncated once every shard has passed it"
is "$(q $DB "SELECT pg_relation_size('sh2.ingest_0') + pg_relation_size('sh2.ingest_1')")" 0 "the queue takes no space"

# 2. one, two and three shards (two workers) under a stream of batches
for b in 1 2 3 4 5 6; do
	for p in sh1 sh2 sh3; do produce $p $b; done
done
for p in sh1 sh2 sh3; do
	poll_until $DB "$(drained $p)"
	ok $? "$p: drained"
	is "$(q $DB "SELECT sh_mismatches('$p')")" 0 "$p: aggregates equal the oracle"
	is "$(q $DB "SELECT sum(taken) FROM $p.shard")" "$(q $DB "SELECT ingested FROM exactonce.pipelines WHERE name = '$p'")" \
		"$p: the shards took every event the counters count"
	is "$(q $DB "SELECT ingested FROM exactonce.pipelines WHERE name = '$p'")" \
		"$(q $DB "SELECT count(*) FROM produced_sh WHERE pipe = '$p'")" "$p: every event counted once"
done
is "$(q $DB "SELECT count(DISTINCT shard_of(key, 3)) FROM sh3.state")" 3 "sh3: all three shards applied keys"

# 3. set_shards() while the workers drain a stream: 2 -> 3 -> 1 -> 2 shards
for b in 7 8 9 10 11 12 13 14; do
	produce sh2 $b
	case $b in
	8) q $DB "SELECT exactonce.set_shards('sh2', 3)" >/dev/null ;;
	10) q $DB "SELECT exactonce.set_shards('sh2', 1)" >/dev/null ;;
	12) q $DB "SELECT exactonce.set_shards('sh2', 2)" >/dev/null ;;
	esac
done
poll_until $DB "$(drained sh2)"
ok $? "sh2: drained across three changes of its shards"
is "$(q $DB "SELECT sh_mismatches('sh2')")" 0 "sh2: aggregates equal the oracle"
is "$(q $DB "SELECT ingested FROM exactonce.pipelines WHERE name = 'sh2'")" \
	"$(q $DB "SELECT count(*) FROM produced_sh WHERE pipe = 'sh2'")" "sh2: every event counted once"
is "$(q $DB "SELECT count(*) || ' ' || sum(taken) FROM sh2.shard")" \
	"2 $(q $DB "SELECT ingested FROM exactonce.pipelines WHERE name = 'sh2'")" "sh2: two shards, which took every event"

psql -X -q -d $DB >/dev/null <<'SQL'
SET client_min_messages = warning;
SELECT exactonce.drop_pipeline(p) FROM unnest(ARRAY['sh1', 'sh2', 'sh3']) p;
DROP TABLE produced_sh;
DROP FUNCTION sh_mismatches(text);
DROP FUNCTION shard_of(text, int);
SQL
echo "1..$tap_n"
