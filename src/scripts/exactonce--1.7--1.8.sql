/*
 * exactonce 1.7 -> 1.8: the change feed is bounded by its slowest consumer.
 *
 * The workers (and flush) fold what every consumer of a feed has read; a
 * consumer that lags past exactonce.feed_max_lag or feed_max_lag_age is
 * invalidated (its reads fail, it holds nothing back) until it is dropped
 * with exactonce.drop_feed_consumer().
 */

\echo Use "ALTER EXTENSION exactonce UPDATE TO '1.8'" to load this file. \quit

ALTER TABLE exactonce.feed_position
	ADD COLUMN invalidated_at timestamptz,
	ADD COLUMN invalidation_reason text;
COMMENT ON COLUMN exactonce.feed_position.invalidated_at IS
	'when the consumer was invalidated for lagging past exactonce.feed_max_lag or feed_max_lag_age; its reads fail until it is dropped';
COMMENT ON COLUMN exactonce.feed_position.invalidation_reason IS
	'why the consumer was invalidated';

CREATE OR REPLACE VIEW exactonce.feed_consumers WITH (security_barrier) AS
	SELECT p.name AS pipeline, f.consumer, f.position, f.changes, f.updated_at,
		f.owner, f.invalidated_at, f.invalidation_reason
	FROM exactonce.feed_position f
	JOIN exactonce.pipeline p ON p.id OPERATOR(pg_catalog.=) f.pipeline_id
	WHERE pg_catalog.pg_has_role(p.owner, 'USAGE')
	   OR (pg_catalog.has_schema_privilege(pg_catalog.to_regnamespace(p.name)::pg_catalog.oid, 'USAGE')
		   AND pg_catalog.has_table_privilege(
				pg_catalog.to_regclass(pg_catalog.quote_ident(p.name) OPERATOR(pg_catalog.||) '.feed')::pg_catalog.oid,
				'SELECT'));

CREATE FUNCTION exactonce.drop_feed_consumer(pipeline text, consumer text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'exactonce_drop_feed_consumer'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION exactonce.drop_feed_consumer(text, text) IS
	'forget a consumer of the pipeline''s feed (its role, a member or the pipeline''s owner): the feed no longer keeps what it had not read; a consumer of that name reads from the feed''s start again; true if there was one';

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
		 WHERE f.pipeline_id OPERATOR(pg_catalog.=) p.id AND f.invalidated_at IS NOT NULL) AS feed_consumers_invalidated
	FROM exactonce.pipeline_stats() s
	JOIN exactonce.pipeline p ON p.name OPERATOR(pg_catalog.=) s.name;
COMMENT ON VIEW exactonce.pipelines IS
	'one row per pipeline: mode, paused, queue depth and lag, counters (ingested = applied + duplicates + stale + dead_lettered), batches, worker pid (of shard 0) and state, insert-to-aggregate latency p50 and p99 of the last 100 batches per worker, last error, number of shards, measures, those with min and max, the columns counted distinct, the windows, the grouping sets, the views create_view made, whether it has a change feed, its retention horizon, and how many consumers of its feed were invalidated for lagging';
