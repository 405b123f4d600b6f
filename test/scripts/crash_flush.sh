#!/usr/bin/env bash
# A flush killed with SIGKILL half way leaves nothing half-done; counters and
# aggregates survive an immediate shutdown; the result equals the oracle.
set -u
. "$(dirname "$0")/lib.sh"
DB=exactonce_crash

psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB" >/dev/null 2>&1
psql -X -q -d $DB >/dev/null <<'SQL'
SET client_min_messages = warning;
CREATE EXTENSION exactonce;
SELECT exactonce.create_pipeline('c', ARRAY['a', 'b']);
SELECT setseed(0.7);
CREATE TABLE produced AS
SELECT 'k' || (i % 50000) AS key, (i / 50000)::bigint AS version,
       round((random() * 1000)::numeric, 2) AS value,
       'a' || (random() * 4)::int AS a, 'b' || (random() * 9)::int AS b
FROM generate_series(0, 299999) i;
INSERT INTO produced SELECT * FROM produced WHERE random() < 0.1;
INSERT INTO c.ingest (key, version, value, a, b) SELECT * FROM produced ORDER BY random();
CREATE VIEW oracle AS
SELECT a, b, 2 - (GROUPING(a) + GROUPING(b)) AS level, sum(value) AS total, count(*) AS keys
FROM (SELECT DISTINCT ON (key) * FROM produced ORDER BY key, version DESC) s
GROUP BY ROLLUP (a, b);
CREATE VIEW mismatches AS
SELECT count(*) FROM (
  (SELECT a, b, level, total, keys FROM c.aggregates EXCEPT SELECT * FROM oracle)
  UNION ALL
  (SELECT * FROM oracle EXCEPT SELECT a, b, level, total, keys FROM c.aggregates)) m;
SQL
events=$(q $DB "SELECT count(*) FROM produced")

# kill the backend running flush while it works
psql -X -q -d $DB -c "SET exactonce.batch_size = 5000; SELECT exactonce.flush('c')" >/dev/null 2>&1 &
poll_until $DB "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE query LIKE '%exactonce.flush(''c'')%' AND state = 'active' AND pid <> pg_backend_pid())"
ok $? "flush is running"
pid=$(q $DB "SELECT pid FROM pg_stat_activity WHERE query LIKE '%exactonce.flush(''c'')%' AND state = 'active' AND pid <> pg_backend_pid()")
sleep 0.5	# let it get half way; the checks below do not depend on where it was
kill -9 "$pid"
wait
wait_ready
ok $? "server recovered from SIGKILL of the flushing backend"

is "$(q $DB "SELECT queued FROM exactonce.pipelines")" "$events" "every event is still queued"
is "$(q $DB "SELECT ingested + applied + duplicates + stale + dead_lettered + batches FROM exactonce.pipelines")" "0" "no counter moved"
is "$(q $DB "SELECT count(*) FROM c.aggregates") $(q $DB "SELECT count(*) FROM c.state") $(q $DB "SELECT count(*) FROM c.ledger")" "0 0 0" "no state, aggregate or ledger row was left behind"

is "$(q $DB "SELECT exactonce.flush('c')")" "$events" "flush after the crash takes every event"
is "$(q $DB "SELECT * FROM mismatches")" "0" "aggregates equal the oracle"
is "$(q $DB "SELECT ingested = $events AND ingested = applied + duplicates + stale + dead_lettered FROM exactonce.pipelines")" "t" "accounting identity holds"
before=$(q $DB "SELECT ingested || '/' || applied || '/' || duplicates || '/' || stale || '/' || batches FROM exactonce.pipelines")

# an immediate shutdown (no checkpoint) loses nothing committed
pg_ctl_as_postgres -m immediate -w stop >/dev/null
pg_ctl_as_postgres -w -l "$EXACTONCE_TEST_DIR/server.log" start >/dev/null
wait_ready
ok $? "server restarted after an immediate shutdown"
is "$(q $DB "SELECT ingested || '/' || applied || '/' || duplicates || '/' || stale || '/' || batches FROM exactonce.pipelines")" "$before" "counters survive the restart"
is "$(q $DB "SELECT * FROM mismatches")" "0" "aggregates survive the restart"
is "$(q $DB "SELECT exactonce.flush('c')")" "0" "nothing is drained twice"

psql -X -q -d postgres -c "DROP DATABASE $DB" >/dev/null
