/*
 * exactonce 1.3 -> 1.4: named aggregate views, waiting for what was
 * committed to be applied, verify and rebuild, dead letters replayed, a
 * change feed, retention, distributed pipelines on postgres_fdw.
 *
 * exactonce.create_view() adds a view of a pipeline's cells with keys of
 * its own (dimensions, or expressions over them) and a filter, fed by the
 * pipeline's one drain.  Nothing else changes: pipelines are carried
 * forward as they are.
 */

\echo Use "ALTER EXTENSION exactonce UPDATE TO '1.4'" to load this file. \quit

CREATE FUNCTION exactonce.create_view(pipeline text, name text, group_by text[],
									  filter text DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'exactonce_create_view'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION exactonce.create_view(text, text, text[], text) IS
	'create view "name" in the pipeline''s schema: its cells summed per group_by key (a dimension, or an expression over dimensions written as expression AS name), of the cells that pass filter (an expression over dimensions); read from the cells of the smallest grouping that has every dimension named; sums, counts, averages, min and max merge exactly, distinct counts are kept only where each row is one cell';

CREATE FUNCTION exactonce.wait_applied(pipeline text, timeout interval DEFAULT '1 minute')
RETURNS void
AS 'MODULE_PATHNAME', 'exactonce_wait_applied'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION exactonce.wait_applied(text, interval) IS
	'wait until every event committed to the pipeline''s queue before the call is in its aggregates; SQLSTATE EO003 once timeout is over; needs the library preloaded and the caller INSERT on the queue or SELECT on the aggregates';

CREATE FUNCTION exactonce.verify(pipeline text)
RETURNS TABLE (item text, cell text, detail text, ok boolean)
AS 'MODULE_PATHNAME', 'exactonce_verify'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION exactonce.verify(text) IS
	'check a pipeline''s aggregates against its state (owner only): the accounting identity, batches staged and not applied, and in latest mode every cell that differs from the cells computed from the live keys (in accumulate mode: that each grouping''s cells add up to the events state and seen count); one row per check, ok false where it fails';

CREATE FUNCTION exactonce.rebuild(pipeline text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'exactonce_rebuild'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION exactonce.rebuild(text) IS
	'recompute a latest-mode pipeline''s aggregates and distinct values from its live keys, in place, in the caller''s transaction (owner only; READ COMMITTED); the workers wait until it commits, inserts into the queue go on; returns the number of cells';

CREATE FUNCTION exactonce.replay_dead_letters(pipeline text, filter text DEFAULT NULL)
RETURNS TABLE (replayed bigint, applied bigint, duplicates bigint, stale bigint,
			   dead_lettered bigint, skipped bigint)
AS 'MODULE_PATHNAME', 'exactonce_replay_dead_letters'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION exactonce.replay_dead_letters(text, text) IS
	'send the dead letters that pass filter (an SQL expression over the columns of dead_letters; NULL: all) back through the three stages, once, in the caller''s transaction (owner only; READ COMMITTED): their rows go, their events are applied, or dead-lettered again with the new reason; returns how many were replayed, what became of them, and how many were skipped because they do not hold a whole event';

ALTER TABLE exactonce.pipeline
	ADD COLUMN feed boolean NOT NULL DEFAULT false,
	ADD COLUMN feed_notify boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN exactonce.pipeline.feed IS
	'each reduce appends the cells it changed, with their old and new total and key count, to table feed of the pipeline';
COMMENT ON COLUMN exactonce.pipeline.feed_notify IS
	'each reduce that changed cells sends NOTIFY exactonce_feed with the pipeline''s name';

CREATE TABLE exactonce.feed_position (
	pipeline_id	integer NOT NULL
		CONSTRAINT feed_position_pipeline REFERENCES exactonce.pipeline (id) ON DELETE CASCADE,
	consumer	text COLLATE "C" NOT NULL,
	position	bigint NOT NULL DEFAULT 0,
	changes		bigint NOT NULL DEFAULT 0,
	updated_at	timestamptz NOT NULL DEFAULT pg_catalog.now(),
	CONSTRAINT feed_position_pkey PRIMARY KEY (pipeline_id, consumer)
) WITH (fillfactor = 50);
COMMENT ON TABLE exactonce.feed_position IS
	'per pipeline and feed consumer: the seq of the last change exactonce.feed_read() returned in a committed transaction';
COMMENT ON CONSTRAINT feed_position_pipeline ON exactonce.feed_position IS
	'exactonce: the feed positions of a pipeline go with it';
COMMENT ON INDEX exactonce.feed_position_pkey IS
	'exactonce: one position per pipeline and consumer';
SELECT pg_catalog.pg_extension_config_dump('exactonce.feed_position', '');
REVOKE ALL ON exactonce.feed_position FROM PUBLIC;

CREATE FUNCTION exactonce.set_feed(pipeline text, enabled boolean, notify boolean DEFAULT false)
RETURNS void
AS 'MODULE_PATHNAME', 'exactonce_set_feed'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION exactonce.set_feed(text, boolean, boolean) IS
	'turn the change feed of a pipeline on (table feed, starting with the cells there are as changes from nothing) or off (the feed and its consumers'' positions are dropped); notify: each reduce that changed cells sends NOTIFY exactonce_feed with the pipeline''s name; owner only';

CREATE FUNCTION exactonce.feed_read(pipeline text, consumer text, max integer DEFAULT 1000)
RETURNS TABLE (seq bigint, level integer, cell text[], old_total numeric, new_total numeric,
			   old_keys bigint, new_keys bigint, changed_at timestamptz)
AS 'MODULE_PATHNAME', 'exactonce_feed_read'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION exactonce.feed_read(text, text, integer) IS
	'up to max changes of the pipeline''s feed after the consumer''s committed position, in order, moving the position past them in the caller''s transaction: a consumer that applies them in that transaction sees each change once; needs SELECT on the feed';

CREATE VIEW exactonce.feed_consumers WITH (security_barrier) AS
	SELECT p.name AS pipeline, f.consumer, f.position, f.changes, f.updated_at
	FROM exactonce.feed_position f
	JOIN exactonce.pipeline p ON p.id OPERATOR(pg_catalog.=) f.pipeline_id
	WHERE pg_catalog.pg_has_role(p.owner, 'USAGE')
	   OR (pg_catalog.has_schema_privilege(pg_catalog.to_regnamespace(p.name)::pg_catalog.oid, 'USAGE')
		   AND pg_catalog.has_table_privilege(
				pg_catalog.to_regclass(pg_catalog.quote_ident(p.name) OPERATOR(pg_catalog.||) '.feed')::pg_catalog.oid,
				'SELECT'));
COMMENT ON VIEW exactonce.feed_consumers IS
	'the position of each consumer of the feeds the current role may read';
GRANT SELECT ON exactonce.feed_consumers TO PUBLIC;

ALTER TABLE exactonce.pipeline ADD COLUMN retention_horizon bigint;
COMMENT ON COLUMN exactonce.pipeline.retention_horizon IS
	'exactonce.prune() deleted the tombstones (latest mode) or seen rows (accumulate mode) of versions below this; an event below it that the pipeline cannot tell from a resend is dead-lettered';

CREATE FUNCTION exactonce.prune(pipeline text, below_version bigint,
							   dead_letters_older_than interval DEFAULT NULL)
RETURNS TABLE (horizon bigint, forgotten bigint, dead_letters bigint)
AS 'MODULE_PATHNAME', 'exactonce_prune'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION exactonce.prune(text, bigint, interval) IS
	'delete the tombstones (latest mode) or seen rows (accumulate mode) of versions below below_version and raise the retention horizon to it (it never goes down): from then on an event below it that the pipeline cannot tell from a resend is dead-lettered with that reason; also delete dead letters older than dead_letters_older_than; owner only, READ COMMITTED, in the caller''s transaction';

CREATE TABLE exactonce.distributed_pipeline (
	name		name PRIMARY KEY,
	owner		regrole NOT NULL,
	servers		name[] NOT NULL,
	dimensions	text[] NOT NULL,
	created_at	timestamptz NOT NULL DEFAULT pg_catalog.now()
);
COMMENT ON TABLE exactonce.distributed_pipeline IS
	'distributed pipelines of this coordinator: a pipeline of the same name on the node of each foreign server, ingest''s hash partition i on servers[i]';
SELECT pg_catalog.pg_extension_config_dump('exactonce.distributed_pipeline', '');
GRANT SELECT ON exactonce.distributed_pipeline TO PUBLIC;

CREATE FUNCTION exactonce.create_distributed_pipeline(name text, dimensions text[], servers name[],
													  mode text DEFAULT 'latest', shards integer DEFAULT 2)
RETURNS void
AS 'MODULE_PATHNAME', 'exactonce_create_distributed_pipeline'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION exactonce.create_distributed_pipeline(text, text[], name[], text, integer) IS
	'create pipeline "name" on the node of each postgres_fdw foreign server (with the caller''s user mappings) and, here, schema "name": ingest partitioned by hash of key over foreign tables on the nodes'' queues, aggregates summing the nodes'' cells, and nodes, each node''s row of exactonce.pipelines; drop_pipeline, flush, pause and resume act on every node';

CREATE OR REPLACE VIEW exactonce.pipelines AS
	SELECT s.*, p.measures, p.min_max, p.distinct_counts, p.window_width, p.allowed_lateness,
		p.grouping_sets,
		ARRAY(SELECT c.relname::pg_catalog.text FROM pg_catalog.pg_class c
			  JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
			  WHERE n.nspname OPERATOR(pg_catalog.=) p.name AND c.relkind OPERATOR(pg_catalog.=) 'v'
				AND pg_catalog.obj_description(c.oid, 'pg_class') OPERATOR(pg_catalog.~~) 'exactonce view of %'
			  ORDER BY c.relname) AS views,
		p.feed, p.retention_horizon
	FROM exactonce.pipeline_stats() s
	JOIN exactonce.pipeline p ON p.name OPERATOR(pg_catalog.=) s.name;
COMMENT ON VIEW exactonce.pipelines IS
	'one row per pipeline: mode, paused, queue depth and lag, counters (ingested = applied + duplicates + stale + dead_lettered), batches, worker pid (of shard 0) and state, insert-to-aggregate latency p50 and p99 of the last 100 batches per worker, last error, number of shards, measures, those with min and max, the columns counted distinct, the windows, the grouping sets, the views create_view made, whether it has a change feed, and its retention horizon';
