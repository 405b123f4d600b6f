-- Rights: pipelines belong to their creator; an ingest-only role can only
-- insert; nothing depends on the caller's search_path.
CREATE EXTENSION exactonce;
SET client_min_messages = warning;
\set VERBOSITY terse
CREATE ROLE regress_eo_owner;
CREATE ROLE regress_eo_writer;
CREATE ROLE regress_eo_other;
DO $$ BEGIN EXECUTE format('GRANT CREATE ON DATABASE %I TO regress_eo_owner', current_database()); END $$;

-- a plain role creates and owns a pipeline
SET ROLE regress_eo_owner;
SELECT exactonce.create_pipeline('sec', ARRAY['d']);
SELECT nspowner::regrole FROM pg_namespace WHERE nspname = 'sec';
SELECT DISTINCT relowner::regrole FROM pg_class WHERE relnamespace = 'sec'::regnamespace;
GRANT USAGE ON SCHEMA sec TO regress_eo_writer;
GRANT INSERT ON sec.ingest TO regress_eo_writer;
RESET ROLE;
SELECT name, owner FROM exactonce.pipelines;

-- the writer may insert, and nothing else
SET ROLE regress_eo_writer;
INSERT INTO sec.ingest (key, version, value, d) VALUES ('k1', 1, 10, 'x');
COPY sec.ingest (key, version, value, d) FROM stdin;
k2	1	20	x
\.
SELECT * FROM sec.ingest;
SELECT * FROM sec.state;
SELECT * FROM sec.aggregates;
SELECT * FROM sec.ledger;
SELECT * FROM sec.dead_letters;
SELECT * FROM sec.progress;
SELECT * FROM sec.shard;
UPDATE sec.shard SET drain_position = 0;
UPDATE sec.aggregates SET total = 0;
DELETE FROM sec.ingest;
TRUNCATE sec.ingest_0;
SELECT exactonce.flush('sec');
SELECT exactonce.pause('sec');
SELECT exactonce.set_shards('sec', 4);
SELECT exactonce.drop_pipeline('sec');
SELECT * FROM exactonce.state_upsert('sec', (SELECT array_agg(e) FROM (VALUES ('k9', 1::bigint, 1::numeric, 'x')) e(key, version, value, d)));
SELECT exactonce.reduce_apply('sec');
SELECT exactonce.map_stage('sec', ARRAY[]::exactonce.delta[]);
SELECT exactonce.release('sec', 'consumer', 1);
SELECT exactonce.resume('sec');
SELECT exactonce.create_view_as('sec', 'v', 'SELECT d, sum(value) FROM sec.ingest GROUP BY d');
SELECT exactonce.alter_pipeline_as('sec', 'SELECT d, sum(value) AS total FROM sec.ingest GROUP BY d');
SELECT exactonce.move_keys_in('sec', 2, 0, 'nowhere', 'g', '', NULL, NULL, NULL);
SELECT exactonce.move_keys_settle('sec', 2, 0);
-- whether the queue refuses a key is the writer's to know
SELECT exactonce.key_stays('k1', 'sec', 1, 0);
SELECT exactonce.wake();
SET exactonce.fault_map = 1;
SET exactonce.feed_max_lag = 10;
SET exactonce.feed_max_lag_age = 10;
SELECT exactonce.ingest_slot('sec') IN (0, 1) AS writer_may_take_the_slot;
-- monitoring is open to everyone
SELECT name, queued FROM exactonce.pipelines;
RESET ROLE;

-- neither can another role touch it
SELECT 'sec.ingest'::regclass::oid AS sec_ingest \gset
SET ROLE regress_eo_other;
SELECT exactonce.flush('sec');
SELECT * FROM sec.aggregates;
-- nor lock its queue through the slot function
SELECT exactonce.ingest_slot('sec');
SELECT exactonce.ingest_slot(:sec_ingest);
-- nor learn whether its keys moved away
SELECT exactonce.key_stays('k1', 'sec', 1, 0);
RESET ROLE;

-- objects planted in public cannot change what the stages compute
CREATE FUNCTION public.unnest(anyarray) RETURNS SETOF anyelement LANGUAGE sql AS 'SELECT NULL::anyelement';
CREATE FUNCTION public.evil_add(numeric, numeric) RETURNS numeric LANGUAGE sql AS 'SELECT 42::numeric';
CREATE OPERATOR public.+ (LEFTARG = numeric, RIGHTARG = numeric, FUNCTION = public.evil_add);
CREATE FUNCTION public.now() RETURNS timestamptz LANGUAGE sql AS $$SELECT '2000-01-01'::timestamptz$$;
GRANT ALL ON SCHEMA public TO regress_eo_owner;
SET ROLE regress_eo_owner;
SET search_path = public, pg_catalog;
CREATE TEMP TABLE progress (x int);
SELECT exactonce.flush('sec');
SELECT exactonce.flush('sec');
RESET search_path;
SELECT level, d, total, keys, updated_at > '2001-01-01' AS real_time FROM sec.aggregates ORDER BY level;
SELECT key, version, value FROM sec.state ORDER BY key;
DROP TABLE pg_temp.progress;

-- an owner who swaps a pipeline table for a view gets no one else's rights:
-- the view and the workers read pipelines as their owner, and refuse
-- relations that are not what create_pipeline made
CREATE FUNCTION public.grab() RETURNS bigint LANGUAGE plpgsql AS
	$$BEGIN EXECUTE 'ALTER ROLE regress_eo_owner SUPERUSER'; RETURN 0; END$$;
DROP TABLE sec.progress;
CREATE VIEW sec.progress AS
	SELECT false AS paused, public.grab() AS ingested, 0::bigint AS applied, 0::bigint AS duplicates,
		   0::bigint AS stale, 0::bigint AS dead_lettered, 0::bigint AS batches,
		   now() AS last_batch_at, 0::bigint AS rotation, 0::bigint AS drain_rotation,
		   0::bigint AS drain_position;
SELECT name, ingested IS NULL AS unreadable FROM exactonce.pipelines;
SELECT exactonce.flush('sec');
SELECT rolsuper FROM pg_roles WHERE rolname = 'regress_eo_owner';
SELECT exactonce.drop_pipeline('sec', force => true);
SELECT count(*) FROM exactonce.pipeline;
RESET ROLE;
DROP FUNCTION public.grab();
SET ROLE regress_eo_owner;
SELECT exactonce.create_pipeline('sec', ARRAY['d']);
SELECT exactonce.drop_pipeline('sec');
RESET ROLE;
DROP OPERATOR public.+ (numeric, numeric);
DROP FUNCTION public.evil_add(numeric, numeric), public.unnest(anyarray), public.now();
REVOKE ALL ON SCHEMA public FROM regress_eo_owner;
DO $$ BEGIN EXECUTE format('REVOKE CREATE ON DATABASE %I FROM regress_eo_owner', current_database()); END $$;
DROP ROLE regress_eo_owner, regress_eo_writer, regress_eo_other;
DROP EXTENSION exactonce;
