-- A pipeline a table of which Citus has distributed is refused by every
-- function that would drain, flush, truncate or read it on this node: the
-- table would be a shell over shards elsewhere, and a TRUNCATE of a drained
-- queue partition would empty every shard.  Citus is not installed here;
-- a table of the name and first column of its catalog, pg_dist_partition,
-- stands in for it (what the check reads).
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

SELECT exactonce.create_pipeline('ct', ARRAY['d']);
INSERT INTO ct.ingest (key, version, value, d) VALUES ('a', 1, 10, 'x'), ('b', 1, 5, 'y');
SET allow_system_table_mods = on;
CREATE TABLE pg_catalog.pg_dist_partition (logicalrelid regclass NOT NULL, partmethod "char" NOT NULL);
RESET allow_system_table_mods;

-- Citus catalog present, nothing of the pipeline distributed: all goes on
SELECT exactonce.flush('ct');

-- the queue distributed
INSERT INTO ct.ingest (key, version, value, d) VALUES ('c', 1, 1, 'x');
INSERT INTO pg_catalog.pg_dist_partition VALUES ('ct.ingest', 'h');
SELECT pg_temp.err($$SELECT exactonce.flush('ct')$$);
SELECT pg_temp.err($$SELECT exactonce.wait_applied('ct', '1s')$$);
SELECT pg_temp.err($$SELECT exactonce.verify('ct')$$);
SELECT pg_temp.err($$SELECT exactonce.pause('ct')$$);
SELECT pg_temp.err($$SELECT exactonce.drop_pipeline('ct')$$);
-- the monitoring view still lists it
SELECT name, queued FROM exactonce.pipelines;
-- the event waits in the queue, untouched
SELECT count(*) AS queued FROM ct.ingest;

-- undistributed, the pipeline goes on from where it was
DELETE FROM pg_catalog.pg_dist_partition;
SELECT exactonce.flush('ct');
SELECT d, level, total, keys FROM ct.aggregates ORDER BY level, d;
SET allow_system_table_mods = on;
DROP TABLE pg_catalog.pg_dist_partition;
RESET allow_system_table_mods;
SELECT exactonce.drop_pipeline('ct');
DROP EXTENSION exactonce;
