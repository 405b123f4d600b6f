/*
 * exactonce 1.0 -> 1.1: key shards.
 *
 * A pipeline's keys are split into shards, each drained by its own worker;
 * a new table <pipeline>.shard keeps each shard's drain position, which 1.0
 * kept in progress.drain_position.  Pipelines made by 1.0 become pipelines
 * of one shard that goes on from where the queue was: their shard row takes
 * over the drain position, so nothing queued is lost or read twice.
 *
 * The shard tables belong to their pipelines, like everything else in a
 * pipeline's schema, not to the extension: they are taken out of it again,
 * so that pg_dump dumps them and DROP EXTENSION leaves them alone.  The
 * work on each pipeline runs as its owner, so that nothing the owner put in
 * its schema runs as the superuser who updates; a pipeline whose schema is
 * gone is skipped.
 */

\echo Use "ALTER EXTENSION exactonce UPDATE TO '1.1'" to load this file. \quit

ALTER TABLE exactonce.pipeline
	ADD COLUMN shards integer NOT NULL DEFAULT 2
		CHECK (shards OPERATOR(pg_catalog.>=) 1 AND shards OPERATOR(pg_catalog.<=) 64);
UPDATE exactonce.pipeline SET shards = 1;

DO $upgrade$
DECLARE
	p record;
BEGIN
	FOR p IN SELECT name, owner FROM exactonce.pipeline ORDER BY id LOOP
		/* a pipeline whose schema was dropped or renamed is left alone, as
		 * the workers leave it; the rest is done as the pipeline's owner */
		CONTINUE WHEN pg_catalog.to_regclass(pg_catalog.quote_ident(p.name)
											 OPERATOR(pg_catalog.||) '.progress') IS NULL;
		EXECUTE pg_catalog.format('SET LOCAL ROLE %s', p.owner::text);

		/* wait for a 1.0 worker's batch, and keep the next one out */
		EXECUTE pg_catalog.format('LOCK TABLE %I.progress IN EXCLUSIVE MODE', p.name);
		EXECUTE pg_catalog.format(
			'CREATE TABLE %I.shard (shard integer PRIMARY KEY,'
			' drain_rotation bigint NOT NULL DEFAULT 0,'
			' drain_position bigint NOT NULL DEFAULT 0,'
			' taken bigint NOT NULL DEFAULT 0) WITH (fillfactor = 10)', p.name);
		EXECUTE pg_catalog.format(
			'INSERT INTO %I.shard (shard, drain_rotation, drain_position)'
			' SELECT 0, drain_rotation, drain_position FROM %I.progress', p.name, p.name);
		EXECUTE pg_catalog.format('ALTER TABLE %I.progress DROP COLUMN drain_position', p.name);
		RESET ROLE;
		EXECUTE pg_catalog.format('ALTER EXTENSION exactonce DROP TABLE %I.shard', p.name);
		EXECUTE pg_catalog.format('SET LOCAL ROLE %s', p.owner::text);
		EXECUTE pg_catalog.format(
			'COMMENT ON TABLE %I.shard IS %L', p.name,
			'exactonce: drain position of each key shard (the rotation it drains and the last queue TID it took there) and the events it took');
		EXECUTE pg_catalog.format(
			'COMMENT ON TABLE %I.progress IS %L', p.name,
			'exactonce: queue rotation and counters of this pipeline (one row)');
		EXECUTE pg_catalog.format(
			'COMMENT ON COLUMN %I.progress.drain_rotation IS %L', p.name,
			'exactonce: the oldest rotation whose queue partition is not truncated yet');
		RESET ROLE;
	END LOOP;
END
$upgrade$;

DROP FUNCTION exactonce.create_pipeline(text, text[], text);
CREATE FUNCTION exactonce.create_pipeline(name text, dimensions text[],
										  mode text DEFAULT 'latest',
										  shards integer DEFAULT 2)
RETURNS void
AS 'MODULE_PATHNAME', 'exactonce_create_pipeline'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION exactonce.create_pipeline(text, text[], text, integer) IS
	'create a pipeline: schema "name" with ingest, state, aggregates, dead_letters, ledger, progress and shard; shards key shards are drained in parallel';

CREATE FUNCTION exactonce.set_shards(name text, shards integer)
RETURNS bigint
AS 'MODULE_PATHNAME', 'exactonce_set_shards'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION exactonce.set_shards(text, integer) IS
	'change the number of key shards of a pipeline; drains its queue first, as flush() does, and returns the events it took';

DROP VIEW exactonce.pipelines;
DROP FUNCTION exactonce.pipeline_stats();
CREATE FUNCTION exactonce.pipeline_stats(
	OUT name name,
	OUT mode text,
	OUT dimensions text[],
	OUT owner regrole,
	OUT paused boolean,
	OUT queued bigint,
	OUT oldest_queued timestamptz,
	OUT lag interval,
	OUT ingested bigint,
	OUT applied bigint,
	OUT duplicates bigint,
	OUT stale bigint,
	OUT dead_lettered bigint,
	OUT batches bigint,
	OUT staged bigint,
	OUT last_batch_at timestamptz,
	OUT worker_pid integer,
	OUT worker_state text,
	OUT latency_p50 interval,
	OUT latency_p99 interval,
	OUT last_error text,
	OUT shards integer)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'exactonce_pipeline_stats'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION exactonce.pipeline_stats() IS
	'one row per pipeline: mode, queue depth and lag, counters, worker state, latency of recent batches';

CREATE VIEW exactonce.pipelines AS
	SELECT * FROM exactonce.pipeline_stats();
COMMENT ON VIEW exactonce.pipelines IS
	'one row per pipeline: mode, paused, queue depth and lag, counters (ingested = applied + duplicates + stale + dead_lettered), batches, worker pid (of shard 0) and state, insert-to-aggregate latency p50 and p99 of the last 100 batches per worker, last error, number of shards';

GRANT SELECT ON exactonce.pipelines TO PUBLIC;
