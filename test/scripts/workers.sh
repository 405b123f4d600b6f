#!/usr/bin/env bash
# The background workers: they drain without flush, survive SIGKILL with an
# exact result, reload settings on SIGHUP, honour pause, serve two pipelines
# and two databases, isolate a poison event, and act as the pipeline's owner.
set -u
. "$(dirname "$0")/lib.sh"
DB=exactonce_test
DB2=exactonce_test2

psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $DB2" -c "CREATE DATABASE $DB2" >/dev/null 2>&1
psql -X -q -d $DB2 -c "CREATE EXTENSION exactonce" >/dev/null
psql -X -q -d $DB >/dev/null <<'SQL'
SET client_min_messages = warning;
SELECT exactonce.create_pipeline('wk', ARRAY['a', 'b']);
SELECT exactonce.create_pipeline('wk2', ARRAY['a']);
-- what the producer committed: written in the same transaction as the queue rows
CREATE TABLE produced (batch int, key text, version bigint, value numeric, a text, b text);
CREATE VIEW mismatches AS
SELECT count(*) FROM (
  (SELECT a, b, level, total, keys FROM wk.aggregates
   EXCEPT
   SELECT a, b, 2 - (GROUPING(a) + GROUPING(b)), sum(value), count(*)
   FROM (SELECT DISTINCT ON (key) * FROM produced ORDER BY key, version DESC) s
   GROUP BY ROLLUP (a, b))
  UNION ALL
  (SELECT a, b, 2 - (GROUPING(a) + GROUPING(b)), sum(value), count(*)
   FROM (SELECT DISTINCT ON (key) * FROM produced ORDER BY key, version DESC) s
   GROUP BY ROLLUP (a, b)
   EXCEPT
   SELECT a, b, level, total, keys FROM wk.aggregates)) m;
SQL

# produce BATCH: one transaction adds 2000 events (duplicates, moves, late
# versions); a (key, version) always has the same content
produce() {
	psql -X -q -d $DB -v ON_ERROR_STOP=1 >/dev/null 2>&1 <<SQL
BEGIN;
INSERT INTO produced
SELECT $1, 'k' || k, v, ((k * 31 + v * 17) % 1000)::numeric / 10, 'a' || ((k + v) % 3), 'b' || ((k * v) % 5)
FROM (SELECT i % 3000 AS k, ($1 * 7 + i) % 11 AS v FROM generate_series(1, 2000) i) g;
INSERT INTO wk.ingest (key, version, value, a, b)
SELECT key, version, value, a, b FROM produced WHERE batch = $1 ORDER BY random();
COMMIT;
SQL
}
drained() {
	echo "SELECT bool_and(queued = 0 AND staged = 0 AND ingested = applied + duplicates + stale + dead_lettered) FROM exactonce.pipelines WHERE name = '$1'"
}
worker_pid() {
	q $DB "SELECT worker_pid FROM exactonce.pipelines WHERE name = 'wk'"
}

# 1. events are aggregated without flush
poll_until $DB "SELECT worker_pid IS NOT NULL FROM exactonce.pipelines WHERE name = 'wk'"
ok $? "a drain worker serves the pipeline"
is "$(q $DB "SELECT backend_type || '/' || wait_event_type FROM pg_stat_activity WHERE pid = $(worker_pid)")" "exactonce drain/Extension" "pg_stat_activity shows the worker and its wait event"
produce 1
poll_until $DB "$(drained wk)"
ok $? "the worker drained the queue without flush"
is "$(q $DB "SELECT * FROM mismatches")" 0 "aggregates equal the oracle"

# 2. SIGKILL the worker several times during a stream
kills=0
for b in $(seq 2 13); do
	until produce "$b"; do wait_ready; done
	if [ $((b % 3)) -eq 0 ]; then
		pid=$(worker_pid)
		if [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; then
			kills=$((kills + 1))
			wait_ready
			poll_until $DB "SELECT worker_pid IS NOT NULL AND worker_pid <> $pid FROM exactonce.pipelines WHERE name = 'wk'"
		fi
	fi
done
is "$kills" 4 "killed the worker 4 times during the stream"
poll_until $DB "$(drained wk)"
ok $? "the restarted workers drained everything"
is "$(q $DB "SELECT * FROM mismatches")" 0 "aggregates equal the oracle after the kills"
is "$(q $DB "SELECT ingested = (SELECT count(*) FROM produced) FROM exactonce.pipelines WHERE name = 'wk'")" t "every produced event was ingested exactly once"

# 3. SIGHUP changes the batch size
psql -X -q -d $DB -c "ALTER SYSTEM SET exactonce.batch_size = 100" -c "SELECT pg_reload_conf()" >/dev/null
poll_until $DB "SELECT setting = '100' FROM pg_settings WHERE name = 'exactonce.batch_size'"
before=$(q $DB "SELECT batches FROM exactonce.pipelines WHERE name = 'wk'")
produce 14
poll_until $DB "$(drained wk)"
after=$(q $DB "SELECT batches FROM exactonce.pipelines WHERE name = 'wk'")
ok $([ $((after - before)) -ge 20 ] && echo 0 || echo 1) "after SIGHUP 2000 events take at least 20 batches (took $((after - before)))"
psql -X -q -d $DB -c "ALTER SYSTEM RESET exactonce.batch_size" -c "SELECT pg_reload_conf()" >/dev/null

# 4. pause and resume; the other pipeline goes on meanwhile
psql -X -q -d $DB -c "SELECT exactonce.pause('wk')" >/dev/null
produce 15
psql -X -q -d $DB -c "INSERT INTO wk2.ingest (key, version, value, a) VALUES ('x', 1, 5, 'a1')" >/dev/null
poll_until $DB "$(drained wk2)"
ok $? "a second pipeline is drained"
is "$(q $DB "SELECT queued > 0 AND worker_state = 'paused' FROM exactonce.pipelines WHERE name = 'wk'")" t "the paused pipeline kept its queue"
psql -X -q -d $DB -c "SELECT exactonce.resume('wk')" >/dev/null
poll_until $DB "$(drained wk)"
ok $? "resumed, it is drained"
is "$(q $DB "SELECT * FROM mismatches")" 0 "aggregates equal the oracle after pause and resume"

# 5. a second database has its own worker
psql -X -q -d $DB2 >/dev/null <<'SQL'
SET client_min_messages = warning;
SELECT exactonce.create_pipeline('other', ARRAY['d']);
INSERT INTO other.ingest (key, version, value, d) SELECT 'k' || i, 1, 2, 'x' FROM generate_series(1, 100) i;
SQL
poll_until $DB2 "$(drained other)"
ok $? "the worker of the second database drained its pipeline"
is "$(q $DB2 "SELECT total || '/' || keys FROM other.aggregates WHERE level = 0")" "200/100" "with the exact result"

# 6. a poison event ends in dead_letters, the rest of its batch is applied
psql -X -q -d postgres -c "ALTER SYSTEM SET exactonce.fault_poison_key = 'poison'" -c "SELECT pg_reload_conf()" >/dev/null
poll_until $DB "SELECT current_setting('exactonce.fault_poison_key') = 'poison'"
psql -X -q -d $DB -c "INSERT INTO wk2.ingest (key, version, value, a) SELECT 'p' || i, 1, 1, 'a9' FROM generate_series(1, 99) i UNION ALL SELECT 'poison', 1, 1000, 'a9'" >/dev/null
poll_until $DB "$(drained wk2)"
ok $? "the batch with the poison event was drained"
is "$(q $DB "SELECT key || ': ' || reason FROM wk2.dead_letters")" 'poison: error: injected poison event with key "poison"' "the poison event is a dead letter with the error"
is "$(q $DB "SELECT total || '/' || keys FROM wk2.aggregates WHERE level = 1 AND a = 'a9'")" "99/99" "the rest of its batch was applied"
is "$(q $DB "SELECT max(updated_at) > min(updated_at) FROM wk2.aggregates WHERE level = 1")" t "each step of a worker has its own now()"
psql -X -q -d postgres -c "ALTER SYSTEM RESET exactonce.fault_poison_key" -c "SELECT pg_reload_conf()" >/dev/null

# 7. the worker acts as the owner: an owner without rights on its own table fails
psql -X -q -d $DB >/dev/null 2>&1 <<'SQL'
SET client_min_messages = warning;
CREATE ROLE regress_eo_worker_owner;
DO $$ BEGIN EXECUTE format('GRANT CREATE ON DATABASE %I TO regress_eo_worker_owner', current_database()); END $$;
SET ROLE regress_eo_worker_owner;
SELECT exactonce.create_pipeline('owned', ARRAY['d']);
REVOKE UPDATE ON owned.aggregates FROM regress_eo_worker_owner;
INSERT INTO owned.ingest (key, version, value, d) VALUES ('k', 1, 1, 'x'), ('k2', 1, 1, 'x');
SQL
poll_until $DB "SELECT last_error LIKE 'permission denied for table aggregates%' FROM exactonce.pipelines WHERE name = 'owned'"
ok $? "the worker runs with the owner's rights (permission denied, reported in last_error)"
is "$(q $DB "SELECT worker_state FROM exactonce.pipelines WHERE name = 'owned'")" backoff "the failing pipeline backs off"
psql -X -q -d $DB -c "INSERT INTO wk2.ingest (key, version, value, a) VALUES ('y', 1, 5, 'a1')" >/dev/null
poll_until $DB "$(drained wk2)"
ok $? "a failing pipeline does not stop the others"
psql -X -q -d $DB -c "GRANT UPDATE ON owned.aggregates TO regress_eo_worker_owner" >/dev/null
poll_until $DB "$(drained owned)"
ok $? "once the right is back, the pipeline recovers"

# 8. SIGTERM stops a worker, the launcher starts another
pid=$(worker_pid)
kill -TERM "$pid"
poll_until $DB "SELECT worker_pid IS NOT NULL AND worker_pid <> $pid FROM exactonce.pipelines WHERE name = 'wk'"
ok $? "after SIGTERM the launcher restarted the worker"

# 10. a transaction that inserted and stays open holds up only its own
# pipeline: the worker seals without waiting, and serves its others meanwhile
psql -X -q -d $DB >/dev/null <<'SQL'
SET client_min_messages = warning;
SELECT exactonce.create_pipeline('hold', ARRAY['d']);
SELECT exactonce.create_pipeline('skip', ARRAY['d']);
SELECT exactonce.create_pipeline('free', ARRAY['d']);
SQL
is "$(q $DB "SELECT count(DISTINCT worker_pid) FROM exactonce.pipelines WHERE name IN ('hold', 'free')")" 1 "pipelines hold and free share a worker"
psql -X -q -d $DB -c "INSERT INTO hold.ingest (key, version, value, d) VALUES ('a', 1, 1, 'x')" >/dev/null
hold_open $DB "$EXACTONCE_TEST_DIR/release-hold" "INSERT INTO hold.ingest (key, version, value, d) VALUES ('b', 1, 2, 'x');"
psql -X -q -d $DB -c "INSERT INTO hold.ingest (key, version, value, d) VALUES ('c', 1, 4, 'x')" -c "INSERT INTO free.ingest (key, version, value, d) VALUES ('f', 1, 8, 'y')" >/dev/null
poll_until $DB "$(drained free)"
ok $? "with a transaction open on pipeline hold, the same worker drains pipeline free"
release "$EXACTONCE_TEST_DIR/release-hold"
poll_until $DB "$(drained hold)"
ok $? "once that transaction commits, hold is drained"
is "$(q $DB "SELECT total || '/' || keys FROM hold.aggregates WHERE level = 0")" "7/3" "with every event of it, exactly once"

# 11. a long reader of a drained queue partition holds up only that pipeline
psql -X -q -d $DB -c "INSERT INTO hold.ingest (key, version, value, d) VALUES ('r1', 1, 16, 'x')" >/dev/null
poll_until $DB "$(drained hold)"
hold_open $DB "$EXACTONCE_TEST_DIR/release-reader" "SELECT count(*) FROM hold.ingest;"
psql -X -q -d $DB -c "INSERT INTO hold.ingest (key, version, value, d) VALUES ('r2', 1, 32, 'x')" -c "INSERT INTO free.ingest (key, version, value, d) VALUES ('g', 1, 8, 'y')" >/dev/null
poll_until $DB "SELECT total = 16 FROM free.aggregates WHERE level = 0"
ok $? "with a reader holding pipeline hold's queue, the same worker drains pipeline free"
release "$EXACTONCE_TEST_DIR/release-reader"
poll_until $DB "$(drained hold) AND (SELECT total = 55 FROM hold.aggregates WHERE level = 0)"
ok $? "once the reader is gone, hold is drained, exactly"

# 9. dropping and recreating the extension while the workers run
psql -X -q -d $DB2 >/dev/null 2>&1 <<'SQL'
SET client_min_messages = warning;
SELECT exactonce.drop_pipeline('other', true);
DROP EXTENSION exactonce;
CREATE EXTENSION exactonce;
SELECT exactonce.create_pipeline('again', ARRAY['d']);
INSERT INTO again.ingest (key, version, value, d) SELECT 'k' || i, 1, 3, 'x' FROM generate_series(1, 10) i;
SQL
poll_until $DB2 "$(drained again)"
ok $? "after the extension was dropped and created again, a new pipeline is drained"
is "$(q $DB2 "SELECT total || '/' || keys FROM again.aggregates WHERE level = 0")" "30/10" "with the exact result"

psql -X -q -d $DB >/dev/null 2>&1 <<'SQL'
SET client_min_messages = warning;
SELECT exactonce.drop_pipeline(name, true) FROM exactonce.pipeline;
DROP TABLE produced CASCADE;
DO $$ BEGIN EXECUTE format('REVOKE CREATE ON DATABASE %I FROM regress_eo_worker_owner', current_database()); END $$;
DROP ROLE regress_eo_worker_owner;
SQL
psql -X -q -d postgres -c "DROP DATABASE $DB2 WITH (FORCE)" >/dev/null 2>&1
