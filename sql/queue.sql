-- The ingest queue: two partitions taking turns, truncated once drained.
CREATE EXTENSION exactonce;
SET client_min_messages = warning;
\set VERBOSITY terse
SELECT exactonce.create_pipeline('q', ARRAY['d']);
-- the bytes of a queue partition's tables (one per shard)
CREATE FUNCTION pg_temp.bytes(part regclass) RETURNS bigint
	LANGUAGE sql AS $$SELECT sum(pg_relation_size(relid))::bigint FROM pg_partition_tree(part)$$;

-- inserts land in the partition that progress.rotation names; each key
-- shard keeps its own drain position
SELECT rotation, drain_rotation FROM q.progress;
SELECT shard, drain_rotation, drain_position FROM q.shard ORDER BY shard;
INSERT INTO q.ingest (key, version, value, d) SELECT 'k' || i, 1, i, 'x' FROM generate_series(1, 5000) i;
SELECT tableoid::regclass, count(*) FROM q.ingest GROUP BY 1 ORDER BY tableoid::regclass::text;

-- COPY works the same way
COPY q.ingest (key, version, value, d) FROM stdin;
c1	1	1.5	y
c2	1	2.5	y
\.
SELECT count(*) FROM q.ingest;
SELECT pg_temp.bytes('q.ingest_0') > 0 AS has_pages;

-- draining empties the partition at once: no dead rows left behind
SELECT exactonce.flush('q');
SELECT count(*) FROM q.ingest;
SELECT pg_temp.bytes('q.ingest_0') AS ingest_0_bytes, pg_temp.bytes('q.ingest_1') AS ingest_1_bytes;
SELECT total, keys FROM q.aggregates WHERE level = 0;

-- the same holds after many rounds: size does not grow with volume
DO $$
BEGIN
	FOR r IN 1..5 LOOP
		INSERT INTO q.ingest (key, version, value, d)
		SELECT 'k' || i, r + 1, i, 'x' FROM generate_series(1, 5000) i;
		PERFORM exactonce.flush('q');
	END LOOP;
END $$;
SELECT pg_temp.bytes('q.ingest_0') + pg_temp.bytes('q.ingest_1') AS queue_bytes;
SELECT count(*) AS ledger_rows FROM q.ledger;
SELECT ingested, applied, batches FROM exactonce.pipelines WHERE name = 'q';

-- a flush rolled back leaves the queue as it was: it empties partitions
-- with its transaction, its drain and all
INSERT INTO q.ingest (key, version, value, d) SELECT 'k' || i, 8, 2, 'x' FROM generate_series(1, 300) i;
BEGIN;
SELECT exactonce.flush('q');
ROLLBACK;
SELECT count(*) AS queued FROM q.ingest;
SELECT exactonce.flush('q');
SELECT count(*) AS queued FROM q.ingest;
SELECT total, keys FROM q.aggregates WHERE level = 0;

-- a small batch size drains in many batches, with the same result
SET exactonce.batch_size = 7;
INSERT INTO q.ingest (key, version, value, d) SELECT 'k' || i, 10, 1, 'z' FROM generate_series(1, 100) i;
SELECT exactonce.flush('q');
RESET exactonce.batch_size;
SELECT d, total, keys FROM q.aggregates WHERE level = 1 ORDER BY d;
SELECT batches FROM exactonce.pipelines WHERE name = 'q';

-- rows go through the queue, never straight into a partition: there they
-- get no ingest_id, which drain positions need, and are refused
INSERT INTO q.ingest_0 (key, version, value, d) VALUES ('direct', 1, 1, 'w');
COPY q.ingest_0 (key, version, value, d) FROM stdin;
direct	1	1	w
\.
-- a row may name the partition taking inserts, never the other one, which
-- may be sealed and drained: it would be missed (check ingest_slot_open)
SELECT exactonce.ingest_slot('q') AS open_slot \gset
INSERT INTO q.ingest (key, version, value, d, ingest_slot) VALUES ('wrong', 1, 1, 'w', 1 - :open_slot);
INSERT INTO q.ingest_1 (key, version, value, d, ingest_slot, ingest_id) VALUES ('wrong', 1, 1, 'w', 1, 1);
INSERT INTO q.ingest (key, version, value, d, ingest_slot) VALUES ('direct', 1, 1, 'w', :open_slot);
SELECT exactonce.flush('q');
SELECT count(*) FROM q.state WHERE key IN ('direct', 'wrong');

-- the partition read by a subtransaction is not reused after a rollback to
-- a savepoint (the lock that made it valid went with the subtransaction):
-- a rotation committed meanwhile sends the next row to the new partition
BEGIN;
SAVEPOINT s;
INSERT INTO q.ingest (key, version, value, d) VALUES ('sp1', 1, 1, 'w');
SELECT tableoid::regclass FROM q.ingest WHERE key = 'sp1';
ROLLBACK TO s;
UPDATE q.progress SET rotation = rotation + 1;
INSERT INTO q.ingest (key, version, value, d) VALUES ('sp2', 1, 1, 'w');
SELECT tableoid::regclass FROM q.ingest WHERE key = 'sp2';
ROLLBACK;

-- ingest_slot serves queues only, and only roles that may insert into them;
-- queues made before 1.6 name themselves by regclass, which still works
SELECT exactonce.ingest_slot('nope');
CREATE SCHEMA not_a_pipeline;
CREATE TABLE not_a_pipeline.ingest (key text);
SELECT exactonce.ingest_slot('not_a_pipeline');
DROP SCHEMA not_a_pipeline CASCADE;
SELECT exactonce.ingest_slot('q.state'::regclass);
SELECT exactonce.ingest_slot('q.ingest_0'::regclass);
SELECT exactonce.ingest_slot('q.ingest'::regclass) = :open_slot AS same_slot;

-- the queue names its pipeline, not its own relation: a schema renamed by
-- hand stops inserts rather than queue events that no worker drains
SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef
WHERE adrelid = 'q.ingest'::regclass AND adnum = (SELECT attnum FROM pg_attribute WHERE attrelid = 'q.ingest'::regclass AND attname = 'ingest_slot');
SELECT conrelid::regclass, pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'ingest_slot_open' AND connamespace = 'q'::regnamespace ORDER BY 1;
ALTER SCHEMA q RENAME TO q_renamed;
INSERT INTO q_renamed.ingest (key, version, value, d) VALUES ('renamed', 1, 1, 'w');
ALTER SCHEMA q_renamed RENAME TO q;
-- a name that changes from row to row finds each row's pipeline
SELECT exactonce.create_pipeline('q2', ARRAY['d']);
UPDATE q2.progress SET rotation = (SELECT rotation + 1 FROM q.progress);
SELECT p, exactonce.ingest_slot(p) AS slot,
	   exactonce.ingest_slot(p) = CASE p WHEN 'q' THEN (SELECT rotation % 2 FROM q.progress)
										 ELSE (SELECT rotation % 2 FROM q2.progress) END AS its_own
FROM (VALUES ('q'), ('q2'), ('q'), ('q2')) v(p);
SELECT exactonce.drop_pipeline('q2');

-- the monitoring view shows depth and lag of what is queued
INSERT INTO q.ingest (key, version, value, d, event_time) VALUES ('late', 1, 1, 'w', now() - interval '1 hour');
SELECT queued, lag >= interval '1 hour' AS lagging FROM exactonce.pipelines WHERE name = 'q';
SELECT exactonce.flush('q');
SELECT queued, lag FROM exactonce.pipelines WHERE name = 'q';

-- a partition sealed by a rotation is drained shard by shard, then the
-- partition taking inserts; both end truncated and every shard at the start
INSERT INTO q.ingest (key, version, value, d) SELECT 'k' || i, 20, 2, 'z' FROM generate_series(1, 300) i;
UPDATE q.progress SET rotation = rotation + 1;
INSERT INTO q.ingest (key, version, value, d) SELECT 'k' || i, 21, 3, 'z' FROM generate_series(1, 200) i;
SELECT queued FROM exactonce.pipelines WHERE name = 'q';
SELECT exactonce.flush('q');
SELECT count(*) FROM q.ingest;
SELECT p.rotation = p.drain_rotation AS truncated, bool_and(s.drain_rotation = p.rotation AND s.drain_position = 0) AS shards_at_start
FROM q.progress p, q.shard s GROUP BY p.rotation, p.drain_rotation;
SELECT sum(value) = 200 * 3 + 100 * 2 AS exact FROM q.state WHERE key IN (SELECT 'k' || i FROM generate_series(1, 300) i);

-- set_shards() drains the queue first, then cuts the keys anew: shards that
-- go pass their count to shard 0, new ones start at the rotation taking inserts
INSERT INTO q.ingest (key, version, value, d) SELECT 'k' || i, 30, 4, 'z' FROM generate_series(1, 300) i;
-- an index and a row trigger made on the queue come back on the tables
-- set_shards() makes anew
CREATE INDEX q_ingest_key ON q.ingest (key);
CREATE TABLE q_seen (n int);
CREATE FUNCTION q_count() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO q_seen VALUES (1); RETURN NEW; END $$;
CREATE TRIGGER q_count BEFORE INSERT ON q.ingest FOR EACH ROW EXECUTE FUNCTION q_count();
-- what is made on the queue's own tables: their triggers and the
-- privileges their owner granted come back on the new tables of the same
-- names, anything else is refused rather than dropped
CREATE FUNCTION q_truncated() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
CREATE TRIGGER q_truncated AFTER TRUNCATE ON q.ingest_0 FOR EACH STATEMENT EXECUTE FUNCTION q_truncated();
CREATE ROLE regress_q_monitor;
GRANT SELECT ON q.ingest_1 TO regress_q_monitor WITH GRANT OPTION;
CREATE INDEX q_own ON q.ingest_1 (version);
SELECT exactonce.set_shards('q', 3);
DROP INDEX q.q_own;
ALTER TABLE q.ingest_0 ADD CONSTRAINT q_own CHECK (version >= 0);
SELECT exactonce.set_shards('q', 3);
ALTER TABLE q.ingest_0 DROP CONSTRAINT q_own;
CREATE POLICY q_own ON q.ingest_0_1 USING (true);
SELECT exactonce.set_shards('q', 3);
DROP POLICY q_own ON q.ingest_0_1;
SET client_min_messages = error;
CREATE PUBLICATION q_own FOR TABLE q.ingest_1;
SET client_min_messages = warning;
SELECT exactonce.set_shards('q', 3);
DROP PUBLICATION q_own;
CREATE ROLE regress_q_other;
GRANT USAGE ON SCHEMA q TO regress_q_monitor;
SET ROLE regress_q_monitor;
GRANT SELECT ON q.ingest_1 TO regress_q_other;
RESET ROLE;
SELECT exactonce.set_shards('q', 3);
SET ROLE regress_q_monitor;
REVOKE SELECT ON q.ingest_1 FROM regress_q_other;
RESET ROLE;
REVOKE USAGE ON SCHEMA q FROM regress_q_monitor;
DROP ROLE regress_q_other;
-- and so do storage parameters; a comment is exactonce's own, made anew
ALTER TABLE q.ingest_1_0 SET (autovacuum_enabled = true, toast_tuple_target = 256);
SELECT obj_description('q.ingest_1_0'::regclass, 'pg_class') AS exactonce_comment \gset
COMMENT ON TABLE q.ingest_1_0 IS 'a DBA''s note';
SELECT exactonce.set_shards('q', 3);
SELECT reloptions FROM pg_class WHERE oid = 'q.ingest_1_0'::regclass;
SELECT obj_description('q.ingest_1_0'::regclass, 'pg_class') IS NOT DISTINCT FROM :'exactonce_comment'
	   AS comment_made_anew;
ALTER TABLE q.ingest_1_0 SET (autovacuum_enabled = false);
ALTER TABLE q.ingest_1_0 RESET (toast_tuple_target);
SELECT tgrelid::regclass, tgname FROM pg_trigger WHERE tgname = 'q_truncated';
SELECT has_table_privilege('regress_q_monitor', 'q.ingest_1', 'SELECT WITH GRANT OPTION') AS kept,
	   has_table_privilege('regress_q_monitor', 'q.ingest_0', 'SELECT') AS not_given;
SELECT count(*) FILTER (WHERE i.indexrelid IS NOT NULL) AS indexed, count(*) FILTER (WHERE t.oid IS NOT NULL) AS triggered
FROM pg_partition_tree('q.ingest') p
	LEFT JOIN pg_index i ON i.indrelid = p.relid
	LEFT JOIN pg_trigger t ON t.tgrelid = p.relid AND t.tgname = 'q_count'
WHERE p.isleaf;
INSERT INTO q.ingest (key, version, value, d) VALUES ('trig', 1, 1, 'z');
SELECT count(*) AS trigger_fired FROM q_seen;
DROP TRIGGER q_count ON q.ingest;
DROP INDEX q.q_ingest_key;
DROP FUNCTION q_count();
DROP TABLE q_seen;
SELECT shards FROM exactonce.pipelines WHERE name = 'q';
SELECT count(*) AS shards, sum(taken) = (SELECT ingested FROM exactonce.pipelines WHERE name = 'q') AS every_event_counted,
       bool_and(drain_rotation = (SELECT rotation FROM q.progress) AND drain_position = 0) AS at_start
FROM q.shard;
INSERT INTO q.ingest (key, version, value, d) SELECT 'k' || i, 31, 5, 'z' FROM generate_series(1, 300) i;
-- each queue partition is cut into a table per shard, which holds the rows
-- of that shard's keys only (the shard of a key: its hash modulo shards), so
-- that a shard reads its own rows and no others
SELECT relid::regclass, parentrelid::regclass, isleaf, pg_get_expr(c.relpartbound, c.oid) AS bound
FROM pg_partition_tree('q.ingest') t JOIN pg_class c ON c.oid = t.relid ORDER BY relid::text;
SELECT tableoid::regclass AS leaf, count(*) AS rows,
	   bool_and((exactonce.key_shard_hash(key)::bigint & 4294967295) % 3 = right(tableoid::regclass::text, 1)::int) AS its_shard_only
FROM q.ingest GROUP BY 1 ORDER BY tableoid::regclass::text;
-- a trigger on a table set_shards() does not make anew is refused
CREATE TRIGGER q_truncated AFTER TRUNCATE ON q.ingest_1_2 FOR EACH STATEMENT EXECUTE FUNCTION q_truncated();
SELECT exactonce.set_shards('q', 1);
DROP TRIGGER q_truncated ON q.ingest_1_2;
SELECT exactonce.set_shards('q', 1);
SELECT tgrelid::regclass, tgname FROM pg_trigger WHERE tgname = 'q_truncated';
SELECT has_table_privilege('regress_q_monitor', 'q.ingest_1', 'SELECT') AS kept;
DROP TRIGGER q_truncated ON q.ingest_0;
DROP FUNCTION q_truncated();
REVOKE SELECT ON q.ingest_1 FROM regress_q_monitor CASCADE;
DROP ROLE regress_q_monitor;
SELECT count(*) AS shards, sum(taken) = (SELECT ingested FROM exactonce.pipelines WHERE name = 'q') AS every_event_counted FROM q.shard;
SELECT sum(value) = 300 * 5 AS exact FROM q.state WHERE key IN (SELECT 'k' || i FROM generate_series(1, 300) i);
-- one shard has plain partitions
SELECT relid::regclass, isleaf FROM pg_partition_tree('q.ingest') ORDER BY relid::text;
SELECT exactonce.set_shards('q', 0);
SELECT exactonce.set_shards('q', NULL);
SELECT exactonce.set_shards('nope', 2);
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT exactonce.set_shards('q', 2);
ROLLBACK;
-- a plain partition cut by shard has no storage of its own to take its
-- parameters: its tables get the queue's
ALTER TABLE q.ingest_0 SET (toast_tuple_target = 512);
SELECT exactonce.set_shards('q', 2);
SELECT relid::regclass, c.reloptions FROM pg_partition_tree('q.ingest_0') t JOIN pg_class c ON c.oid = t.relid
ORDER BY relid::text;

SELECT exactonce.drop_pipeline('q');
DROP EXTENSION exactonce;
