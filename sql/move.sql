-- Moving a range of keys: the halves that run on the nodes, in one
-- database.  key_bucket() is the hash by which a coordinator's ingest
-- routes keys; move_keys_out() closes the queue to a range, applies what is
-- queued and takes the range's state and dead letters out of the cells;
-- move_keys_in() puts them back (here into the same pipeline, as a range
-- coming back to a node).  The cells always equal those computed from the
-- events; the accounting identity holds after each half.
CREATE EXTENSION exactonce;
SET client_min_messages = warning;

-- err(sql): run a statement, show its SQLSTATE, message and hint
CREATE FUNCTION pg_temp.err(sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	state text; msg text; hint text;
BEGIN
	EXECUTE sql;
	RETURN 'no error';
EXCEPTION WHEN others THEN
	GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, hint = PG_EXCEPTION_HINT;
	RETURN state || ': ' || msg || coalesce(' | HINT: ' || nullif(hint, ''), '');
END $$;

-- key_bucket() is hash partitioning's choice, for every modulus
CREATE TABLE h (key text COLLATE "C") PARTITION BY HASH (key);
CREATE TABLE h0 PARTITION OF h FOR VALUES WITH (MODULUS 8, REMAINDER 0);
SELECT count(*) AS disagreements
FROM generate_series(1, 2000) i, (VALUES (1), (2), (3), (4), (8), (16)) m(m),
	LATERAL generate_series(0, m - 1) r
WHERE satisfies_hash_partition('h'::regclass, m, r, ('k' || i)::text COLLATE "C")
	<> (exactonce.key_bucket('k' || i, m) = r);
SELECT exactonce.key_bucket('k1', 0);

-- events: keys k1..k300 in three desks, every tenth a tombstone, and a
-- conflicting duplicate for each of k1..k20, dead-lettered
CREATE TABLE truth AS
SELECT 'k' || i AS key, i::bigint AS version, (i * 7 % 100)::numeric AS value,
	'd' || (i % 3) AS desk, i % 10 = 0 AS deleted
FROM generate_series(1, 300) i;
SELECT exactonce.create_pipeline('mv', ARRAY['desk']);
INSERT INTO mv.ingest (key, version, value, desk, deleted) SELECT * FROM truth;
SELECT exactonce.flush('mv');
INSERT INTO mv.ingest (key, version, value, desk) SELECT key, version, value + 1, desk FROM truth WHERE version <= 20;
SELECT exactonce.flush('mv');
-- the keys mv holds (a function: the test rebuilds mv.state below)
CREATE FUNCTION held_keys() RETURNS SETOF text LANGUAGE sql AS 'SELECT key FROM mv.state';
CREATE VIEW oracle AS
SELECT desk, 2 - (GROUPING(desk) + 1) AS level, sum(value) AS total, count(*) AS keys
FROM truth WHERE NOT deleted AND key IN (SELECT held_keys()) GROUP BY ROLLUP (desk);
CREATE VIEW mismatches AS
SELECT (SELECT count(*) FROM (SELECT desk, level, total, keys FROM mv.aggregates EXCEPT ALL SELECT * FROM oracle) a)
	 + (SELECT count(*) FROM (SELECT * FROM oracle EXCEPT ALL SELECT desk, level, total, keys FROM mv.aggregates) o)
	AS mismatches;
CREATE VIEW counters AS
SELECT ingested, dead_lettered, ingested = applied + duplicates + stale + dead_lettered AS identity
FROM exactonce.pipelines WHERE name = 'mv';
SELECT * FROM mismatches, counters;

-- out: the keys of bucket (4, 1), with their dead letters; one more event
-- of theirs is queued and applied first
SELECT count(*) AS range_keys FROM truth WHERE exactonce.key_bucket(key, 4) = 1;
SELECT count(*) AS range_dead FROM mv.dead_letters WHERE exactonce.key_bucket(key, 4) = 1;
INSERT INTO truth SELECT key, 1000, 5, 'd9', false FROM truth WHERE exactonce.key_bucket(key, 4) = 1 ORDER BY key LIMIT 1;
INSERT INTO mv.ingest (key, version, value, desk) SELECT key, version, value, desk FROM truth WHERE version = 1000;
-- with a change feed (which starts with every cell), the cells the move
-- changes are in it: the feed's changes add up to the aggregates
SELECT exactonce.set_feed('mv', true);
CREATE VIEW feed_misses AS
WITH f AS (SELECT level, desk, sum(new_total - old_total) AS total, sum(new_keys - old_keys) AS keys
		   FROM mv.feed GROUP BY level, desk HAVING sum(new_keys - old_keys) > 0)
SELECT (SELECT count(*) FROM (SELECT level, desk, total, keys FROM mv.aggregates EXCEPT ALL SELECT * FROM f) a)
	 + (SELECT count(*) FROM (SELECT * FROM f EXCEPT ALL SELECT level, desk, total, keys FROM mv.aggregates) b)
	AS feed_misses;
BEGIN;
CREATE TEMP TABLE moved ON COMMIT DROP AS
SELECT * FROM exactonce.move_keys_out('mv', 4, 1, 'node2', 'move-1');
SELECT keys, horizon, state LIKE '%d9%' AS event_applied_first FROM moved;
SELECT * FROM feed_misses;
SELECT count(*) AS left_behind FROM mv.state WHERE exactonce.key_bucket(key, 4) = 1;
SELECT * FROM mismatches, counters;
SELECT item, ok FROM exactonce.verify('mv');
-- the queue refuses the range's keys now, and takes the others
SELECT pg_temp.err($$INSERT INTO mv.ingest (key, version, value, desk)
	SELECT key, 2000, 1, 'd0' FROM truth WHERE exactonce.key_bucket(key, 4) = 1 LIMIT 1$$);
SELECT pg_temp.err($$INSERT INTO mv.ingest (key, version, value, desk)
	SELECT key, 2000, 1, 'd0' FROM truth WHERE exactonce.key_bucket(key, 4) = 0 LIMIT 0$$);
SELECT pg_temp.err($$SELECT exactonce.move_keys_out('mv', 4, 1, 'node3', 'move-2')$$);
-- a range overlapping the one given away, not it, cannot come in
SELECT pg_temp.err($$SELECT exactonce.move_keys_in('mv', 8, 1, 'node2', 'move-2', NULL, NULL, NULL, NULL)$$);
-- in: the same range comes back, to a state table whose columns stand in
-- the order of a pipeline made before 1.6: rows move by column name
SELECT left(state, 2) AS json_array FROM moved;
CREATE TEMP TABLE state_1_6 AS SELECT * FROM mv.state;
DROP TABLE mv.state;
CREATE TABLE mv.state (key text COLLATE "C" PRIMARY KEY, version bigint NOT NULL, value numeric NOT NULL,
	desk text NOT NULL, deleted boolean NOT NULL, updated_at timestamptz NOT NULL) WITH (fillfactor = 50);
INSERT INTO mv.state SELECT key, version, value, desk, deleted, updated_at FROM state_1_6;
SELECT exactonce.move_keys_in('mv', 4, 1, 'node2', 'move-3', state, seen, dead_letters, 42) FROM moved;
SELECT * FROM feed_misses;
SELECT count(*) AS rows_in, count(*) FILTER (WHERE j IS DISTINCT FROM s) AS changed_on_the_way
FROM json_populate_recordset(NULL::mv.state, (SELECT state FROM moved)::json) j JOIN mv.state s USING (key);
SELECT * FROM mismatches, counters;
SELECT item, ok FROM exactonce.verify('mv');
-- the move's row of key_move lifts the range's refusal, no DDL: the
-- trigger stays (a switch tidies it away) but takes the keys again
SELECT count(*) AS triggers FROM pg_trigger WHERE tgrelid = 'mv.ingest'::regclass AND tgname LIKE 'exactonce_moved%';
SELECT bool_and(exactonce.key_stays(key, 'mv', 4, 1)) AS taken FROM truth WHERE exactonce.key_bucket(key, 4) = 1;
SELECT retention_horizon FROM exactonce.pipeline WHERE name = 'mv';
COMMIT;
SELECT gid, modulus, remainder, direction, peer, keys FROM exactonce.key_move ORDER BY moved_at;
SELECT * FROM mismatches, counters;
DROP VIEW feed_misses;
SELECT exactonce.set_feed('mv', false);

-- accumulate mode: the keys' share stays in the cells where it was counted;
-- their state and seen rows move, so that a resend is still a duplicate,
-- and verify() squares the cells with state by the moves recorded
SELECT exactonce.create_pipeline('acc', ARRAY['desk'], 'accumulate');
CREATE TABLE readings AS
SELECT 'r' || (i % 40) AS key, i::bigint AS version, (i % 13)::numeric AS value, 'd' || (i % 2) AS desk
FROM generate_series(1, 400) i;
INSERT INTO acc.ingest (key, version, value, desk) SELECT * FROM readings;
SELECT exactonce.flush('acc');
CREATE VIEW acc_oracle AS
SELECT desk, 2 - (GROUPING(desk) + 1) AS level, sum(value) AS total, count(*) AS keys
FROM readings GROUP BY ROLLUP (desk);
CREATE VIEW acc_mismatches AS
SELECT (SELECT count(*) FROM (SELECT desk, level, total, keys FROM acc.aggregates EXCEPT ALL SELECT * FROM acc_oracle) a)
	 + (SELECT count(*) FROM (SELECT * FROM acc_oracle EXCEPT ALL SELECT desk, level, total, keys FROM acc.aggregates) o)
	AS mismatches;
BEGIN;
CREATE TEMP TABLE acc_moved ON COMMIT DROP AS
SELECT * FROM exactonce.move_keys_out('acc', 2, 1, 'node2', 'acc-1');
SELECT keys, state IS NOT NULL AS has_state, seen IS NOT NULL AS has_seen FROM acc_moved;
SELECT count(*) AS seen_left_behind FROM acc.seen WHERE exactonce.key_bucket(key, 2) = 1;
SELECT mismatches FROM acc_mismatches;
SELECT item, detail, ok FROM exactonce.verify('acc');
SELECT modulus, remainder, direction, keys, total, events FROM exactonce.key_move WHERE pipeline = 'acc';
-- as a node before 1.6 sends them: the text of arrays of the row types
SELECT exactonce.move_keys_in('acc', 2, 1, 'node2', 'acc-2',
	(SELECT array_agg(s)::text FROM json_populate_recordset(NULL::acc.state, state::json) s),
	(SELECT array_agg(s)::text FROM json_populate_recordset(NULL::acc.seen, seen::json) s),
	(SELECT array_agg(s)::text FROM json_populate_recordset(NULL::acc.dead_letters, dead_letters::json) s),
	horizon) FROM acc_moved;
SELECT item, ok FROM exactonce.verify('acc');
COMMIT;
-- a resend of every reading: all duplicates, the moved keys' too
INSERT INTO acc.ingest (key, version, value, desk) SELECT * FROM readings;
SELECT exactonce.flush('acc');
SELECT mismatches FROM acc_mismatches;
SELECT duplicates, ingested = applied + duplicates + stale + dead_lettered AS identity FROM exactonce.pipelines WHERE name = 'acc';
SELECT pg_temp.err($$SELECT exactonce.move_keys_in('mv', 4, 3, 'node2', 'g', NULL, '{}', NULL, NULL)$$);

-- what cannot move, and misuse
SELECT exactonce.create_pipeline('win', ARRAY['runner'], 'accumulate', window_width => '10 minutes');
SELECT pg_temp.err($$SELECT exactonce.move_keys_out('win', 2, 0, 'node2', 'g')$$);
SELECT pg_temp.err($$SELECT exactonce.move_keys_out('mv', 2, 2, 'node2', 'g')$$);
SELECT exactonce.move_keys('mv', 2, 0, 'node2');
BEGIN;
SELECT pg_temp.err($$SELECT exactonce.move_keys('mv', 2, 0, 'node2')$$);
ROLLBACK;
SELECT pg_temp.err($$SELECT exactonce.refuse_moved_key()$$);
CREATE TABLE not_a_queue (key integer);
CREATE TRIGGER t BEFORE INSERT ON not_a_queue FOR EACH ROW EXECUTE FUNCTION exactonce.refuse_moved_key('2', '0', 'x');
SELECT pg_temp.err($$INSERT INTO not_a_queue VALUES (1)$$);

-- a role that is not a superuser reaches a node only with a password of
-- its user mapping, never with the server's own credentials (a .pgpass,
-- peer or trust): refused before any connection is tried
CREATE EXTENSION postgres_fdw;
CREATE SERVER mv_node FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '/nonexistent', dbname 'x');
CREATE ROLE mv_fdw;
GRANT USAGE ON FOREIGN SERVER mv_node TO mv_fdw;
CREATE USER MAPPING FOR mv_fdw SERVER mv_node OPTIONS (user 'postgres');
SET ROLE mv_fdw;
SELECT pg_temp.err($$SELECT exactonce.create_distributed_pipeline('mvd', ARRAY['d'], ARRAY['mv_node']::name[])$$);
RESET ROLE;
ALTER USER MAPPING FOR mv_fdw SERVER mv_node OPTIONS (ADD password 'secret');
SET ROLE mv_fdw;
SELECT pg_temp.err($$SELECT exactonce.create_distributed_pipeline('mvd', ARRAY['d'], ARRAY['mv_node']::name[])$$) LIKE '08001: could not connect to server "mv_node"%' AS tries_to_connect;
RESET ROLE;

-- the coordinator's ingest forwards events only from a partition of a
-- pipeline's owner to one of its nodes; its queue is not read there
SELECT pg_temp.err($$CREATE FOREIGN TABLE fw_bad (key text) SERVER exactonce_forward OPTIONS (host 'x')$$);
SELECT pg_temp.err($$CREATE FOREIGN TABLE fw_bad (key text) SERVER exactonce_forward OPTIONS (server 'nowhere')$$);
CREATE SCHEMA mv_fdw AUTHORIZATION mv_fdw;
SET ROLE mv_fdw;
CREATE FOREIGN TABLE mv_fdw.ingest (key text, version bigint) SERVER exactonce_forward OPTIONS (server 'mv_node');
SELECT pg_temp.err($$INSERT INTO mv_fdw.ingest VALUES ('k', 1)$$);
SELECT pg_temp.err($$SELECT * FROM mv_fdw.ingest$$);
SELECT pg_temp.err($$DELETE FROM mv_fdw.ingest$$);
SELECT pg_temp.err($$INSERT INTO mv_fdw.ingest VALUES ('k', 1) ON CONFLICT DO NOTHING$$);
CREATE FOREIGN TABLE mv_fdw.aggregates_0 (total numeric) SERVER exactonce_forward
	OPTIONS (server 'mv_node', schema_name 'pg_catalog', table_name 'pg_authid');
SELECT pg_temp.err($$SELECT * FROM mv_fdw.aggregates_0$$);
RESET ROLE;
DROP SCHEMA mv_fdw CASCADE;
DROP USER MAPPING FOR mv_fdw SERVER mv_node;
DROP SERVER mv_node;
DROP ROLE mv_fdw;
DROP EXTENSION postgres_fdw;

-- parking: while keys (2, 0) of pk move away, the queue keeps their
-- events in table moving_2_0 and takes the others; move_keys_out() refuses
-- while events of the range queued before are not applied; unpark puts
-- the parked events back into the queue, and the cells equal the events'
SELECT exactonce.create_pipeline('pk', ARRAY['desk']);
CREATE TABLE pk_sent AS SELECT key, version, value, desk, deleted FROM truth WHERE version <= 300;
INSERT INTO pk.ingest (key, version, value, desk, deleted) SELECT * FROM pk_sent;
SELECT exactonce.move_keys_park('pk', 2, 0, 'node2');
SELECT exactonce.move_keys_park('pk', 2, 0, 'node2');	-- again: nothing changes
INSERT INTO pk_sent SELECT key, version + 1000, value + 1, desk, false FROM pk_sent WHERE version <= 300;
INSERT INTO pk.ingest (key, version, value, desk, deleted) SELECT * FROM pk_sent WHERE version > 1000;
SELECT (SELECT count(*) FROM pk.moving_2_0) AS parked,
	(SELECT count(*) FROM pk_sent WHERE version > 1000 AND exactonce.key_bucket(key, 2) = 0) AS of_the_range,
	(SELECT count(*) FROM pk.ingest WHERE version > 1000 AND exactonce.key_bucket(key, 2) = 0) AS queued_of_the_range;
SELECT pg_temp.err($$SELECT keys FROM exactonce.move_keys_out('pk', 2, 0, 'node2', 'pk-1')$$);
SELECT exactonce.move_keys_unpark('pk', 2, 0) AS returned;
SELECT to_regclass('pk.moving_2_0') IS NULL AS parking_gone,
	(SELECT count(*) FROM pg_trigger WHERE tgrelid = 'pk.ingest'::regclass AND tgname LIKE 'exactonce_moved%') AS triggers;
SELECT exactonce.flush('pk') > 0 AS flushed;
WITH latest AS (SELECT DISTINCT ON (key) * FROM pk_sent ORDER BY key, version DESC),
oracle AS (SELECT desk, 2 - (GROUPING(desk) + 1) AS level, sum(value) AS total, count(*) AS keys
		   FROM latest WHERE NOT deleted GROUP BY ROLLUP (desk))
SELECT (SELECT count(*) FROM (SELECT desk, level, total, keys FROM pk.aggregates EXCEPT ALL SELECT * FROM oracle) a)
	 + (SELECT count(*) FROM (SELECT * FROM oracle EXCEPT ALL SELECT desk, level, total, keys FROM pk.aggregates) o)
	AS mismatches;
-- parked, then applied before: the keys go out; once out, their parked
-- events are the new node's and unpark refuses
SELECT exactonce.move_keys_park('pk', 2, 0, 'node2');
INSERT INTO pk.ingest (key, version, value, desk) SELECT key, version + 2000, 1, desk FROM pk_sent WHERE version <= 10;
BEGIN;
SELECT keys > 0 AS out FROM exactonce.move_keys_out('pk', 2, 0, 'node2', 'pk-2');
SELECT pg_temp.err($$SELECT exactonce.move_keys_unpark('pk', 2, 0)$$);
ROLLBACK;
-- parked events are never dropped unasked
SELECT exactonce.flush('pk') > 0 AS flushed;
SELECT pg_temp.err($$SELECT exactonce.drop_pipeline('pk')$$);
SELECT exactonce.move_keys_unpark('pk', 2, 0) AS returned;
-- the move given up, the trigger that parked the keys is gone too
SELECT count(*) AS triggers FROM pg_trigger WHERE tgrelid = 'pk.ingest'::regclass AND tgname LIKE 'exactonce_moved%';
SELECT exactonce.flush('pk') > 0 AS flushed;
-- settled: once keys (2, 1) have moved away (parked, taken out, the
-- parking table gone, as move_keys() leaves them), the queue refuses them
-- with a check instead of the row trigger, so that COPY into it keeps its
-- batches; a range that did not move needs nothing; keys that come back
-- are taken in by the move's row, and settling then drops the check
SELECT exactonce.move_keys_settle('pk', 2, 1) AS settled_unmoved;
SELECT exactonce.move_keys_park('pk', 2, 1, 'node2');
BEGIN;
CREATE TEMP TABLE out_2_1 AS SELECT * FROM exactonce.move_keys_out('pk', 2, 1, 'node2', 'pk-3');
COMMIT;
SELECT exactonce.move_keys_settle('pk', 2, 1) AS settled_while_parking;
DROP TABLE pk.moving_2_1;
SELECT exactonce.move_keys_settle('pk', 2, 1) AS settled, exactonce.move_keys_settle('pk', 2, 1) AS again;
SELECT (SELECT count(*) FROM pg_trigger WHERE tgrelid = 'pk.ingest'::regclass AND tgname LIKE 'exactonce_moved%') AS triggers,
	(SELECT pg_get_constraintdef(oid) FROM pg_constraint
	 WHERE conrelid = 'pk.ingest'::regclass AND conname = 'exactonce_moved_2_1') AS refused_by;
SELECT pg_temp.err($$INSERT INTO pk.ingest (key, version, value, desk)
	SELECT key, 9000, 1, desk FROM pk_sent WHERE exactonce.key_bucket(key, 2) = 1 ORDER BY key LIMIT 1$$);
INSERT INTO pk.ingest (key, version, value, desk)
	SELECT key, 9000, 1, desk FROM pk_sent WHERE exactonce.key_bucket(key, 2) = 0;
SELECT pg_temp.err($$SELECT exactonce.move_keys_park('pk', 2, 1, 'node2')$$);
SELECT pg_temp.err($$SELECT exactonce.key_stays('k', 0, 0, 'x')$$);
SELECT exactonce.move_keys_in('pk', 2, 1, 'node2', 'pk-4', state, seen, dead_letters, horizon) > 0 AS came_back FROM out_2_1;
-- the check stays until settled, lifted by the move's row
SELECT count(*) AS checks FROM pg_constraint WHERE conrelid = 'pk.ingest'::regclass AND conname LIKE 'exactonce_moved%';
INSERT INTO pk.ingest (key, version, value, desk)
	SELECT key, 9000, 1, desk FROM pk_sent WHERE exactonce.key_bucket(key, 2) = 1 ORDER BY key LIMIT 1;
SELECT exactonce.flush('pk') > 0 AS flushed;
SELECT exactonce.move_keys_settle('pk', 2, 1) AS settled_back;
SELECT count(*) AS checks FROM pg_constraint WHERE conrelid = 'pk.ingest'::regclass AND conname LIKE 'exactonce_moved%';
-- the INSERT that parks events is kept from one event to the next, and
-- follows its table: altered, the columns are checked anew; given to
-- another role, it is refused
SELECT exactonce.move_keys_park('pk', 2, 0, 'node2');
INSERT INTO pk.ingest (key, version, value, desk)
	SELECT key, 9100, 1, desk FROM pk_sent WHERE exactonce.key_bucket(key, 2) = 0 ORDER BY key LIMIT 2;
ALTER TABLE pk.moving_2_0 ALTER COLUMN desk TYPE varchar;
SELECT regexp_replace(pg_temp.err($$INSERT INTO pk.ingest (key, version, value, desk)
	SELECT key, 9101, 1, desk FROM pk_sent WHERE exactonce.key_bucket(key, 2) = 0 ORDER BY key LIMIT 1$$),
	'ingest_[01](_[0-9]+)?', 'ingest_N') AS err;
ALTER TABLE pk.moving_2_0 ALTER COLUMN desk TYPE text;
CREATE ROLE pk_other;
ALTER TABLE pk.moving_2_0 OWNER TO pk_other;
SELECT regexp_replace(pg_temp.err($$INSERT INTO pk.ingest (key, version, value, desk)
	SELECT key, 9102, 1, desk FROM pk_sent WHERE exactonce.key_bucket(key, 2) = 0 ORDER BY key LIMIT 1$$),
	'ingest_[01](_[0-9]+)?', 'ingest_N') AS err;
ALTER TABLE pk.moving_2_0 OWNER TO CURRENT_USER;
DROP ROLE pk_other;
INSERT INTO pk.ingest (key, version, value, desk)
	SELECT key, 9103, 1, desk FROM pk_sent WHERE exactonce.key_bucket(key, 2) = 0 ORDER BY key LIMIT 1;
SELECT version, count(*) FROM pk.moving_2_0 GROUP BY version ORDER BY version;
SELECT exactonce.move_keys_unpark('pk', 2, 0) AS returned;
SELECT exactonce.flush('pk') > 0 AS flushed;
SELECT exactonce.drop_pipeline('pk');
DROP TABLE pk_sent;

-- a role that does not own the pipeline cannot take its keys, nor see its
-- moves, which the owner and pg_read_all_stats see
CREATE ROLE mv_stranger;
CREATE ROLE mv_stats IN ROLE pg_read_all_stats;
SELECT count(*) > 0 AS owner_sees_moves FROM exactonce.key_moves WHERE pipeline = 'mv';
SET ROLE mv_stats;
SELECT count(*) > 0 AS stats_role_sees_moves FROM exactonce.key_moves WHERE pipeline = 'mv';
SET ROLE mv_stranger;
SELECT count(*) AS stranger_sees_moves FROM exactonce.key_moves;
SELECT pg_temp.err($$SELECT count(*) FROM exactonce.key_move$$);
SELECT pg_temp.err($$SELECT exactonce.move_keys_out('mv', 2, 0, 'node2', 'g')$$);
SELECT pg_temp.err($$SELECT exactonce.move_keys_park('mv', 2, 0, 'node2')$$);
SELECT pg_temp.err($$SELECT exactonce.move_keys_unpark('mv', 2, 0)$$);
SELECT pg_temp.err($$SELECT exactonce.move_keys_in('mv', 2, 0, 'node2', 'g', '', NULL, NULL, NULL)$$);
SELECT pg_temp.err($$SELECT exactonce.move_keys_settle('mv', 2, 0)$$);
RESET ROLE;
DROP ROLE mv_stranger, mv_stats;
SELECT exactonce.drop_pipeline('mv');
SELECT exactonce.drop_pipeline('acc');
SELECT exactonce.drop_pipeline('win');
SELECT count(*) AS moves_left FROM exactonce.key_move;
DROP VIEW counters;
DROP TABLE not_a_queue, h, truth, readings CASCADE;
DROP EXTENSION exactonce;
