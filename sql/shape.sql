-- An owner who alters the columns of its pipeline's tables: every path
-- refuses with SQLSTATE EO005, naming the table and column, before it
-- reads or writes them; the server never crashes, nothing runs with the
-- caller's rights, and the tables work again once changed back.  The feed
-- is read as the owner, and a consumer's position is its maker's.
CREATE EXTENSION exactonce;
SET client_min_messages = warning;
-- preloaded, the library refuses these ALTERs itself (test/t/026_guard.pl);
-- here the paths must refuse what an ALTER made without the preload
SET exactonce.guard_columns = off;

-- err(sql): run a statement, show its SQLSTATE and message
CREATE FUNCTION pg_temp.err(sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	state text; msg text;
BEGIN
	EXECUTE sql;
	RETURN 'no error';
EXCEPTION WHEN others THEN
	GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
	RETURN state || ': ' || msg;
END $$;

CREATE ROLE regress_shape_owner;
CREATE ROLE regress_shape_reader;
CREATE ROLE regress_shape_other;
GRANT CREATE ON DATABASE contrib_regression TO regress_shape_owner;
CREATE SCHEMA plants AUTHORIZATION regress_shape_owner;
GRANT USAGE ON SCHEMA plants TO PUBLIC;
SET ROLE regress_shape_owner;

-- what the owner's code records: who ran it
CREATE TABLE plants.regress_ran_as (who name, what text);
GRANT INSERT ON plants.regress_ran_as TO PUBLIC;
CREATE FUNCTION plants.regress_plant(what text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO plants.regress_ran_as VALUES (current_user, what);
	BEGIN
		EXECUTE 'ALTER ROLE regress_shape_owner SUPERUSER';
	EXCEPTION WHEN others THEN NULL;
	END;
	RETURN true;
END $$;

SELECT exactonce.create_pipeline('shp', ARRAY['d']);
SELECT exactonce.set_feed('shp', true);
SELECT exactonce.create_pipeline('shpacc', ARRAY['d'], mode => 'accumulate');
INSERT INTO shp.ingest (key, version, value, d) VALUES ('k1', 1, 10, 'a'), ('k2', 1, 5, 'b');
INSERT INTO shpacc.ingest (key, version, value, d) VALUES ('k1', 1, 10, 'a');
SELECT exactonce.flush('shp'), exactonce.flush('shpacc');
GRANT USAGE ON SCHEMA shp TO regress_shape_reader, regress_shape_other;
GRANT SELECT ON shp.feed TO regress_shape_reader, regress_shape_other;

-- the feed is read as its owner: a policy the owner forces on it sees the
-- owner, not the reader
ALTER TABLE shp.feed ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
CREATE POLICY planted ON shp.feed USING (plants.regress_plant('feed policy'));
RESET ROLE;
SET ROLE regress_shape_reader;
SELECT count(*) AS changes FROM exactonce.feed_read('shp', 'downstream', 100);
RESET ROLE;
SELECT DISTINCT who, what FROM plants.regress_ran_as;
TRUNCATE plants.regress_ran_as;
SET ROLE regress_shape_owner;
DROP POLICY planted ON shp.feed;
ALTER TABLE shp.feed DISABLE ROW LEVEL SECURITY, NO FORCE ROW LEVEL SECURITY;
RESET ROLE;

-- a consumer's position is its maker's: another reader can neither read
-- from it nor move it; the pipeline's owner can
SET ROLE regress_shape_other;
SELECT pg_temp.err($$SELECT * FROM exactonce.feed_read('shp', 'downstream', 100)$$);
SELECT count(*) AS own_consumer FROM exactonce.feed_read('shp', 'elsewhere', 100);
RESET ROLE;
SET ROLE regress_shape_owner;
SELECT count(*) AS owner_reads FROM exactonce.feed_read('shp', 'downstream', 100);
SELECT consumer, owner FROM exactonce.feed_consumers ORDER BY consumer;

-- a dimension of the feed altered to an enum of the owner's, with a cast
-- to text that plants code: refused before the cast could run as the caller
CREATE TYPE plants.regress_mood AS ENUM ('a', 'b');
CREATE FUNCTION plants.regress_mood_text(plants.regress_mood) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	PERFORM plants.regress_plant('cast');
	RETURN $1::name::text;
END $$;
CREATE CAST (plants.regress_mood AS text) WITH FUNCTION plants.regress_mood_text(plants.regress_mood) AS ASSIGNMENT;
ALTER TABLE shp.feed ALTER COLUMN d TYPE plants.regress_mood USING d::plants.regress_mood;
RESET ROLE;
SELECT pg_temp.err($$SELECT * FROM exactonce.feed_read('shp', 'superuser', 100)$$);
SELECT count(*) AS planted_ran FROM plants.regress_ran_as;
SELECT rolsuper FROM pg_roles WHERE rolname = 'regress_shape_owner';
SET ROLE regress_shape_owner;
ALTER TABLE shp.feed ALTER COLUMN d TYPE text;

-- a column the C code reads as numeric, altered to bigint: an error, not a
-- pointer made of an integer; changed back, the feed reads again
ALTER TABLE shp.feed ALTER COLUMN old_total TYPE bigint;
SELECT pg_temp.err($$SELECT * FROM exactonce.feed_read('shp', 'downstream', 100)$$);
ALTER TABLE shp.feed ALTER COLUMN old_total TYPE numeric;
SELECT count(*) AS reads_again FROM exactonce.feed_read('shp', 'downstream', 100);

-- the ledger's totals as bigint[], then reduce_apply; state's columns,
-- then a flush
ALTER TABLE shp.ledger ALTER COLUMN totals TYPE bigint[];
SELECT pg_temp.err($$SELECT exactonce.reduce_apply('shp')$$);
ALTER TABLE shp.ledger ALTER COLUMN totals TYPE numeric[];
ALTER TABLE shp.state ALTER COLUMN value TYPE integer;
INSERT INTO shp.ingest (key, version, value, d) VALUES ('k3', 1, 1, 'a');
SELECT pg_temp.err($$SELECT exactonce.flush('shp')$$);
ALTER TABLE shp.state ALTER COLUMN value TYPE numeric;
SELECT exactonce.flush('shp') AS flushed_after_repair;

-- state's key, then the feed's dimension, under a collation that is not
-- deterministic, where keys K5 and k5 would be one row: refused, and the
-- stages go on once the collation is deterministic again
CREATE COLLATION plants.regress_ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
ALTER TABLE shp.state ALTER COLUMN key TYPE text COLLATE plants.regress_ci;
INSERT INTO shp.ingest (key, version, value, d) VALUES ('K5', 1, 1, 'a'), ('k5', 1, 2, 'a');
SELECT pg_temp.err($$SELECT exactonce.flush('shp')$$);
ALTER TABLE shp.state ALTER COLUMN key TYPE text COLLATE "C";
ALTER TABLE shp.feed ALTER COLUMN d TYPE text COLLATE plants.regress_ci;
SELECT pg_temp.err($$SELECT exactonce.flush('shp')$$);
ALTER TABLE shp.feed ALTER COLUMN d TYPE text COLLATE "default";
SELECT exactonce.flush('shp') AS flushed_after_repair;
SELECT key, value FROM shp.state WHERE lower(key) = 'k5' ORDER BY key;

-- a total with a type modifier would be rounded by each SQL write, drifting
-- from the events' sum: refused, as another type
ALTER TABLE shp.aggregates ALTER COLUMN total TYPE numeric(12,1);
SELECT pg_temp.err($$SELECT exactonce.flush('shp')$$);
ALTER TABLE shp.aggregates ALTER COLUMN total TYPE numeric;

-- state, or a partition of the queue, made unlogged: a crash would empty
-- it and not the others, counting keys again or losing events whose
-- commit was acknowledged; an insert refuses it too, whichever leaf of the
-- partition taking inserts its key goes to (with 1.31 it went in)
ALTER TABLE shp.state SET UNLOGGED;
SELECT pg_temp.err($$SELECT exactonce.flush('shp')$$);
ALTER TABLE shp.state SET LOGGED;
ALTER TABLE shp.ingest_0_1 SET UNLOGGED;
ALTER TABLE shp.ingest_1_1 SET UNLOGGED;
SELECT pg_temp.err($$INSERT INTO shp.ingest (key, version, value, d) VALUES ('u1', 1, 1, 'a')$$);
COPY shp.ingest (key, version, value, d) FROM STDIN (FORMAT csv);
u1,1,1,a
\.
SELECT pg_temp.err($$SELECT exactonce.flush('shp')$$);
ALTER TABLE shp.ingest_0_1 SET LOGGED;
ALTER TABLE shp.ingest_1_1 SET LOGGED;
SELECT pg_temp.err($$INSERT INTO shp.ingest (key, version, value, d) VALUES ('u1', 1, 1, 'a')$$);

-- accumulate state's total as integer, then move_keys_in
ALTER TABLE shpacc.state ALTER COLUMN total TYPE integer;
SELECT pg_temp.err($$SELECT exactonce.move_keys_in('shpacc', 2, 0, 'peer', 'g1', '[]', '[]', '[]', NULL)$$);
ALTER TABLE shpacc.state ALTER COLUMN total TYPE numeric;

-- the queue's rotation as text: inserts refuse, they do not read garbage
ALTER TABLE shp.progress ALTER COLUMN rotation TYPE text;
SELECT pg_temp.err($$INSERT INTO shp.ingest (key, version, value, d) VALUES ('k4', 1, 1, 'a')$$);
ALTER TABLE shp.progress ALTER COLUMN rotation TYPE bigint USING rotation::bigint;

-- progress.applied as numeric: the monitoring view shows that pipeline's
-- counters as NULL, never a heap address, and the others' as they are
ALTER TABLE shp.progress ALTER COLUMN applied TYPE numeric;
RESET ROLE;
SELECT name, applied, ingested FROM exactonce.pipelines ORDER BY name;
SET ROLE regress_shape_owner;
ALTER TABLE shp.progress ALTER COLUMN applied TYPE bigint;
SELECT name, applied, ingested FROM exactonce.pipelines ORDER BY name;
SELECT d, level, total, keys FROM shp.aggregates ORDER BY level, d;

-- the tables of the shards' rows are known by their bounds, not only their
-- names: two swapped would hand each shard the other's keys; one detached
-- would leave a shard without its rows
ALTER TABLE shp.ingest_0_0 RENAME TO swap;
ALTER TABLE shp.ingest_0_1 RENAME TO ingest_0_0;
ALTER TABLE shp.swap RENAME TO ingest_0_1;
SELECT pg_temp.err($$SELECT exactonce.flush('shp')$$);
ALTER TABLE shp.ingest_0_1 RENAME TO swap;
ALTER TABLE shp.ingest_0_0 RENAME TO ingest_0_1;
ALTER TABLE shp.swap RENAME TO ingest_0_0;
ALTER TABLE shp.ingest_1 DETACH PARTITION shp.ingest_1_1;
SELECT pg_temp.err($$SELECT exactonce.flush('shp')$$);
ALTER TABLE shp.ingest_1 ATTACH PARTITION shp.ingest_1_1 FOR VALUES WITH (MODULUS 2, REMAINDER 1);
INSERT INTO shp.ingest (key, version, value, d) SELECT 'b' || i, 1, 1, 'b' FROM generate_series(1, 20) i;
SELECT exactonce.flush('shp') AS flushed;

-- the primary key the state stage probes for a key's row, made again
-- under its name as something else: partial, or on another column, it
-- would find no row for a key that has one, and give the key a second;
-- under a collation that is not deterministic, two keys would be one
BEGIN;
INSERT INTO shp.ingest (key, version, value, d) VALUES ('k1', 50, 1, 'a');
ALTER TABLE shp.state DROP CONSTRAINT state_pkey;
CREATE UNIQUE INDEX state_pkey ON shp.state (key) WHERE version > 100;
SELECT pg_temp.err($$SELECT exactonce.flush('shp')$$);
DROP INDEX shp.state_pkey;
CREATE UNIQUE INDEX state_pkey ON shp.state (d, key);
SELECT pg_temp.err($$SELECT exactonce.flush('shp')$$);
DROP INDEX shp.state_pkey;
DELETE FROM shp.state WHERE key = 'K5';
CREATE UNIQUE INDEX state_pkey ON shp.state (key COLLATE plants.regress_ci);
SELECT pg_temp.err($$SELECT exactonce.flush('shp')$$);
DROP INDEX shp.state_pkey;
CREATE INDEX state_pkey ON shp.state (key);
SELECT pg_temp.err($$SELECT exactonce.flush('shp')$$);
ROLLBACK;
BEGIN;
ALTER TABLE shpacc.seen DROP CONSTRAINT seen_pkey;
CREATE UNIQUE INDEX seen_pkey ON shpacc.seen (key, version) WHERE digest <> 0;
INSERT INTO shpacc.ingest (key, version, value, d) VALUES ('k1', 2, 10, 'a');
SELECT pg_temp.err($$SELECT exactonce.flush('shpacc')$$);
ROLLBACK;

-- the queue's own partitions too: one detached, or two swapped, would have
-- a shard read the partition still taking inserts as the sealed one
ALTER TABLE shp.ingest DETACH PARTITION shp.ingest_0;
SELECT pg_temp.err($$SELECT exactonce.flush('shp')$$);
ALTER TABLE shp.ingest ATTACH PARTITION shp.ingest_0 FOR VALUES IN (0);

-- the check that holds rows out of a sealed partition: gone, or naming
-- another pipeline, the queue is refused until it is back; its name is
-- not what counts
ALTER TABLE shp.ingest DROP CONSTRAINT ingest_slot_open;
SELECT pg_temp.err($$SELECT exactonce.flush('shp')$$);
ALTER TABLE shp.ingest ADD CONSTRAINT ingest_slot_open
	CHECK (exactonce.ingest_slot_check(ingest_slot, 'shpacc'::text)) NOT VALID;
SELECT pg_temp.err($$SELECT exactonce.flush('shp')$$);
ALTER TABLE shp.ingest DROP CONSTRAINT ingest_slot_open;
ALTER TABLE shp.ingest ADD CONSTRAINT slot_open
	CHECK (exactonce.ingest_slot_check(ingest_slot, 'shp'::text)) NOT VALID;
SELECT exactonce.flush('shp') AS flushed;
ALTER TABLE shp.ingest RENAME CONSTRAINT slot_open TO ingest_slot_open;

-- a column exactonce made NOT NULL, made to allow nulls: the C code reads
-- it as never null (a null there crashed a worker), so every path refuses
-- the table until it is NOT NULL again.  Each such column of every table,
-- in turn (but for primary keys and the queue's identity, which cannot
-- allow nulls).
SELECT exactonce.create_pipeline('shprich', ARRAY['d', 'e'], measures => ARRAY['qty', 'fee'],
	min_max => ARRAY['value', 'fee'], distinct_counts => ARRAY['cp']);
SELECT exactonce.set_feed('shprich', true);
INSERT INTO shprich.ingest (key, version, value, d, e, qty, fee, cp)
	SELECT 'k' || i, 1, i, 'd' || i % 3, 'e' || i % 2, i, i % 7, 'c' || i % 5 FROM generate_series(1, 40) i;
SELECT exactonce.flush('shprich') AS flushed;
CREATE FUNCTION pg_temp.nullable_refused(pipeline text)
RETURNS TABLE (tab name, col name, refused text) LANGUAGE plpgsql AS $f$
DECLARE
	r record;
BEGIN
	FOR r IN SELECT c.relname, a.attname FROM pg_class c
			 JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
			 WHERE c.relnamespace = pipeline::regnamespace AND c.relkind IN ('r', 'p')
			   AND NOT c.relispartition AND a.attnotnull AND a.attidentity = ''
			   AND NOT EXISTS (SELECT FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary
							   AND a.attnum = ANY (i.indkey))
			 ORDER BY c.relname, a.attnum LOOP
		EXECUTE format('ALTER TABLE %I.%I ALTER COLUMN %I DROP NOT NULL', pipeline, r.relname, r.attname);
		tab := r.relname;
		col := r.attname;
		refused := pg_temp.err(format('SELECT exactonce.flush(%L)', pipeline));
		RETURN NEXT;
		EXECUTE format('ALTER TABLE %I.%I ALTER COLUMN %I SET NOT NULL', pipeline, r.relname, r.attname);
	END LOOP;
END $f$;
SELECT * FROM pg_temp.nullable_refused('shprich');
SELECT * FROM pg_temp.nullable_refused('shpacc');
DROP FUNCTION pg_temp.nullable_refused(text);

-- and the columns made to allow nulls hold them: each null in every row
-- of every table but state (and for the cells' dimensions, which are
-- unique, and the generated averages), the pipeline drains a new version
-- of every key, and its aggregates are the live keys' again
DO $$
DECLARE
	r record;
BEGIN
	FOR r IN SELECT c.relname, a.attname FROM pg_class c
			 JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
			 WHERE c.relnamespace = 'shprich'::regnamespace AND c.relkind = 'r'
			   AND c.relname NOT LIKE 'ingest%' AND c.relname <> 'state'
			   AND NOT a.attnotnull AND a.attgenerated = ''
			   AND NOT EXISTS (SELECT FROM pg_index i WHERE i.indrelid = c.oid AND i.indisunique
							   AND a.attnum = ANY (i.indkey)) LOOP
		EXECUTE format('UPDATE shprich.%I SET %I = NULL', r.relname, r.attname);
	END LOOP;
END $$;
INSERT INTO shprich.ingest (key, version, value, d, e, qty, fee, cp)
	SELECT 'k' || i, 2, i * 2, 'd' || i % 4, 'e' || i % 3, NULL, i % 5, 'c' || i % 6 FROM generate_series(1, 40) i;
SELECT exactonce.flush('shprich') AS flushed;
SELECT item, ok FROM exactonce.verify('shprich') WHERE cell IS NULL ORDER BY 1;
SELECT d, e, total, keys, qty_sum, fee_sum, value_min, value_max, fee_min, fee_max, cp_distinct
FROM shprich.aggregates WHERE level = 0;
-- a measure of a key's state made null by hand is a contribution lost:
-- the next version takes nothing off for it, and verify() says where
UPDATE shprich.state SET fee = NULL WHERE key = 'k7';
INSERT INTO shprich.ingest (key, version, value, d, e, qty, fee, cp) VALUES ('k7', 3, 1, 'd0', 'e0', 1, 1, 'c0');
SELECT exactonce.flush('shprich') AS flushed;
SELECT item, cell, ok FROM exactonce.verify('shprich') WHERE NOT ok ORDER BY 1, 2;

RESET ROLE;

-- a role with nothing but CONNECT reads no moved totals (event data)
SET ROLE regress_shape_other;
SELECT pg_temp.err($$SELECT total FROM exactonce.key_move$$);
SELECT count(*) AS moves_seen FROM exactonce.key_moves;
RESET ROLE;

SELECT rolsuper FROM pg_roles WHERE rolname = 'regress_shape_owner';
-- the cast ran only in the owner's own ALTER TABLE, as the owner
SELECT DISTINCT who, what FROM plants.regress_ran_as;
SELECT exactonce.drop_pipeline('shp'), exactonce.drop_pipeline('shpacc'), exactonce.drop_pipeline('shprich');
DROP SCHEMA plants CASCADE;
REVOKE CREATE ON DATABASE contrib_regression FROM regress_shape_owner;
DROP ROLE regress_shape_owner, regress_shape_reader, regress_shape_other;
DROP EXTENSION exactonce;
