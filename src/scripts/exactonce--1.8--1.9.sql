/*
 * exactonce 1.8 -> 1.9: a pipeline created without a number of shards gets
 * one per drain worker of its database.
 *
 * create_pipeline's shards defaults to NULL, which takes as many shards as
 * the workers of the database (exactonce.workers, which now defaults to one
 * per CPU core), between 2 and 16.  Existing pipelines keep their shards;
 * set_shards() changes them online.
 */

\echo Use "ALTER EXTENSION exactonce UPDATE TO '1.9'" to load this file. \quit

CREATE OR REPLACE FUNCTION exactonce.create_pipeline(name text, dimensions text[],
										  mode text DEFAULT 'latest',
										  shards integer DEFAULT NULL,
										  measures text[] DEFAULT '{}',
										  min_max text[] DEFAULT '{}',
										  distinct_counts text[] DEFAULT '{}',
										  window_width interval DEFAULT NULL,
										  allowed_lateness interval DEFAULT '0',
										  grouping_sets text DEFAULT 'rollup')
RETURNS void
AS 'MODULE_PATHNAME', 'exactonce_create_pipeline'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION exactonce.create_pipeline(text, text[], text, integer, text[], text[], text[], interval, interval, text) IS
	'create a pipeline: schema "name" with ingest, state, aggregates, dead_letters, ledger, progress and shard; shards key shards are drained in parallel (NULL: one per drain worker of the database, between 2 and 16); measures: numeric columns besides value, summed, counted and averaged per cell; min_max: measures (value among them) whose min and max each cell keeps; distinct_counts: text columns whose distinct values each cell counts; window_width: tumbling windows of event_time, the first dimension (accumulate mode); allowed_lateness: how long after its end a window takes readings; grouping_sets: rollup, cube or grouping sets such as (region, desk), (region), ()';

/*
 * A pipeline declared as a query: create_pipeline_as() takes the query
 * apart into what create_pipeline takes, makes the pipeline, and view
 * <name>.result shows the query's columns; the registry keeps the query.
 */
ALTER TABLE exactonce.pipeline ADD COLUMN query text;
COMMENT ON COLUMN exactonce.pipeline.query IS
	'the query the pipeline was declared as (create_pipeline_as), or NULL';

CREATE FUNCTION exactonce.create_pipeline_as(name text, query text,
											 mode text DEFAULT 'latest',
											 shards integer DEFAULT NULL,
											 allowed_lateness interval DEFAULT '0')
RETURNS void
AS 'MODULE_PATHNAME', 'exactonce_create_pipeline_as'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION exactonce.create_pipeline_as(text, text, text, integer, interval) IS
	'create a pipeline declared as a query over its events, SELECT <dimensions>, <sum, count, avg, min, max, count(DISTINCT)> FROM stream [WHERE <built-in expression>, latest mode] GROUP BY <dimensions, ROLLUP, CUBE or GROUPING SETS; a window: ROLLUP (date_bin(stride, event_time, origin), ...)>; view "name".result always equals the query over the de-duplicated stream (latest mode: the latest version of each live key; accumulate: each distinct reading)';

CREATE OR REPLACE VIEW exactonce.pipelines AS
	SELECT s.*, p.measures, p.min_max, p.distinct_counts, p.window_width, p.allowed_lateness,
		p.grouping_sets,
		ARRAY(SELECT c.relname::pg_catalog.text FROM pg_catalog.pg_class c
			  JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
			  WHERE n.nspname OPERATOR(pg_catalog.=) p.name AND c.relkind OPERATOR(pg_catalog.=) 'v'
				AND pg_catalog.obj_description(c.oid, 'pg_class') OPERATOR(pg_catalog.~~) 'exactonce view of %'
			  ORDER BY c.relname) AS views,
		p.feed, p.retention_horizon,
		(SELECT pg_catalog.count(*) FROM exactonce.feed_position f
		 WHERE f.pipeline_id OPERATOR(pg_catalog.=) p.id AND f.invalidated_at IS NOT NULL) AS feed_consumers_invalidated,
		p.query
	FROM exactonce.pipeline_stats() s
	JOIN exactonce.pipeline p ON p.name OPERATOR(pg_catalog.=) s.name;
COMMENT ON VIEW exactonce.pipelines IS
	'one row per pipeline: mode, paused, queue depth and lag, counters (ingested = applied + duplicates + stale + dead_lettered), batches, worker pid (of shard 0) and state, insert-to-aggregate latency p50 and p99 of the last 100 batches per worker, last error, number of shards, measures, those with min and max, the columns counted distinct, the windows, the grouping sets, the views create_view made, whether it has a change feed, its retention horizon, how many consumers of its feed were invalidated for lagging, and the query it was declared as';

CREATE FUNCTION exactonce.create_view_as(pipeline text, name text, query text)
RETURNS void
AS 'MODULE_PATHNAME', 'exactonce_create_view_as'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION exactonce.create_view_as(text, text, text) IS
	'create view "pipeline".name declared as a query over the pipeline''s events, SELECT <dimensions>, <sum, count, avg, min, max of what the pipeline keeps> FROM stream [WHERE <dimensions only>] GROUP BY <dimensions>: it always equals the query over the de-duplicated stream; it reads the pipeline''s cells through view name_cells (create_view)';
