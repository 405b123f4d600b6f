#!/usr/bin/env bash
# An external consumer drives the three stages itself: state and map in one
# transaction, reduce in another.  Each transaction is retried as if its
# commit had succeeded but the acknowledgement was lost, and reduce is made
# to fail (fault_reduce = 1) between staging and applying.  Nothing is
# applied twice and nothing is lost.
set -u
. "$(dirname "$0")/lib.sh"
DB=exactonce_ext	# not served by the workers: this consumer reduces alone

psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB" >/dev/null 2>&1
psql -X -q -d $DB >/dev/null <<'SQL'
SET client_min_messages = warning;
CREATE EXTENSION exactonce;
SELECT exactonce.create_pipeline('ext', ARRAY['desk']);
CREATE TABLE batch1 AS
SELECT 'k' || i AS key, 1::bigint AS version, (i * 1.5)::numeric AS value, 'd' || (i % 3) AS desk
FROM generate_series(1, 1000) i;
CREATE TABLE batch2 AS
SELECT 'k' || i AS key, 2::bigint AS version, (i * 0.25)::numeric AS value, 'd' || (i % 4) AS desk
FROM generate_series(1, 1000, 2) i;
SQL

# stage a batch: state and map in one transaction; prints the token or nothing
stage() {
	q $DB "SELECT encode(exactonce.map_stage('ext', ARRAY(SELECT d FROM exactonce.state_upsert('ext', (SELECT array_agg(e) FROM $1 e)) d), source => 'consumer', source_position => $2), 'hex')"
}
# the rollup of what the consumer should have applied: newest version per key
oracle() {
	q $DB "SELECT count(*) FROM (
	  (SELECT desk, level, total, keys FROM ext.aggregates
	   EXCEPT SELECT desk, 1 - GROUPING(desk), sum(value), count(*)
	   FROM (SELECT DISTINCT ON (key) * FROM (SELECT * FROM batch1 UNION ALL SELECT * FROM batch2) u
	         ORDER BY key, version DESC) s GROUP BY ROLLUP (desk))
	  UNION ALL
	  (SELECT desk, 1 - GROUPING(desk), sum(value), count(*)
	   FROM (SELECT DISTINCT ON (key) * FROM (SELECT * FROM batch1 UNION ALL SELECT * FROM batch2) u
	         ORDER BY key, version DESC) s GROUP BY ROLLUP (desk)
	   EXCEPT SELECT desk, level, total, keys FROM ext.aggregates)) m"
}

t1=$(stage batch1 1)
ok $([ ${#t1} -eq 64 ] && echo 0 || echo 1) "batch 1 is staged under a SHA-256 token"
# the acknowledgement was lost: the consumer runs the same transaction again
t1again=$(stage batch1 1)
is "$t1again" "" "the retry stages nothing: state already has batch 1"
is "$(q $DB "SELECT count(*) FROM ext.ledger WHERE applied_at IS NULL")" 1 "one staged batch"

# reduce fails (a chosen failure point: after staging committed, before reduce)
out=$(psql -X -q -d $DB -c "SET exactonce.fault_reduce = 1" -c "SELECT exactonce.reduce_apply('ext')" 2>&1)
ok $(grep -q "injected failure in reduce stage" <<<"$out" && echo 0 || echo 1) "reduce fails on purpose"
is "$(q $DB "SELECT count(*) FROM ext.aggregates")" 0 "nothing was applied"
is "$(q $DB "SELECT exactonce.reduce_apply('ext')")" 1 "the retried reduce applies the staged batch"
# the acknowledgement of that commit was lost too
is "$(q $DB "SELECT exactonce.reduce_apply('ext')")" 0 "reducing again applies nothing"
is "$(q $DB "SELECT exactonce.reduce_apply('ext', ARRAY['\\x$t1'::bytea])")" 0 "nor does naming its token"
is "$(q $DB "SELECT encode(exactonce.map_stage('ext', ARRAY(SELECT d FROM exactonce.state_upsert('ext', (SELECT array_agg(e) FROM batch1 e)) d)), 'hex')")" "" "replaying the events once more stages nothing"

# batch 2 modifies half the keys and moves them; its stage is retried twice
t2=$(stage batch2 2)
stage batch2 2 >/dev/null
stage batch2 2 >/dev/null
is "$(q $DB "SELECT exactonce.reduce_apply('ext', ARRAY['\\x$t2'::bytea])")" 1 "batch 2 applies once"
is "$(q $DB "SELECT exactonce.reduce_apply('ext', ARRAY['\\x$t2'::bytea])")" 0 "and only once"
is "$(oracle)" 0 "aggregates equal the oracle"
is "$(q $DB "SELECT ingested || '=' || applied || '+' || duplicates || '+' || stale FROM exactonce.pipelines")" "4500=1500+3000+0" "each retry of the state stage counted its events as duplicates"

# tokens are kept until the consumer releases them, then forgotten
is "$(q $DB "SELECT exactonce.release('ext', 'consumer', 1)")" 1 "releasing position 1 forgets batch 1's token"
is "$(q $DB "SELECT count(*) FROM ext.ledger")" 1 "batch 2's token is still kept"

psql -X -q -d postgres -c "DROP DATABASE $DB" >/dev/null
